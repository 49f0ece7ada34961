"""The train-engine contract: core owns the update, a train backend provides primitives.

==================  ==============================================================
module              what
==================  ==============================================================
``backend``         :class:`~rl_core.train_engine.backend.TrainBackend`: what a
                    train plugin implements (model for a role, forward to
                    :class:`~rl_core.train_engine.backend.Heads`, weighted
                    backward, reduce + clip, step, weights, checkpoints, export)
``engine``          :class:`~rl_core.train_engine.engine.RoleEngine`: core's
                    driver over a backend (inference loops, update, LR
                    schedule, checkpoints); what the worker calls
``update``          the mini-batch step: micro-batches (fixed or by token
                    budget), loss weighting, zero-advantage skipping, the
                    numerical guard, metrics
``batch_sizes``     mini-batch / micro-batch / epoch sizes of a role, with
                    :class:`~rl_core.train_engine.batch_sizes.TrainSizeError`
``lr_schedule``     :class:`~rl_core.train_engine.lr_schedule.LRSchedule`: warmup,
                    then constant / cosine / linear decay
``hf_export``       :func:`~rl_core.train_engine.hf_export.write_hf_folder`: the
                    folder ``save_hf`` writes (config, generation config,
                    safetensors shards, tokenizer)
==================  ==============================================================

Importing the package imports nothing; ``backend``, ``engine`` and ``update`` import torch.
The worked example of a backend: :mod:`rl_core_testing.minimal_backend` (the test kit, plugins/testing).
"""
