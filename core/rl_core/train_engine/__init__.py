"""What train backends share, so that a plugin's engine holds only what is specific to its engine.

==================  ==============================================================
module              what
==================  ==============================================================
``base``            :class:`~rl_core.train_engine.base.TrainEngineBase`: the update
                    driver (mini- / micro-batches, epochs, loss weighting helpers,
                    numerical guard), inference loops, LR scheduler; subclassed by
                    the fsdp and megatron plugins' engines
``batch_sizes``     mini-batch / micro-batch / epoch sizes of a role, with
                    :class:`~rl_core.train_engine.batch_sizes.TrainSizeError`
``lr_schedule``     :class:`~rl_core.train_engine.lr_schedule.LRSchedule`: warmup,
                    then constant / cosine / linear decay
``hf_export``       :func:`~rl_core.train_engine.hf_export.write_hf_folder`: the
                    folder ``save_hf`` writes (config, generation config,
                    safetensors shards, tokenizer)
==================  ==============================================================

Importing the package imports nothing; ``base`` imports torch.
"""
