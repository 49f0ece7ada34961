"""rl-core's test kit: what every backend's tests (the project's and a third party's) build on.

- :mod:`rl_core_testing.tiny_model`: ``make_tiny_model_dir`` (a tiny random
  llama / qwen2 HF folder with a byte-level ChatML tokenizer, offline, < 1 s)
  and ``bigram_weights`` (a model whose next token is known by construction);
- :mod:`rl_core_testing.distributed`: ``run_distributed(fn, world_size, *args)``
  on spawned processes with a gloo (or NCCL) process group;
- :mod:`rl_core_testing.rollout_conformance` / :mod:`rl_core_testing.train_conformance`:
  the pytest base classes every rollout / train backend subclasses;
- :mod:`rl_core_testing.minimal_backend`: the whole ``TrainBackend`` contract in one file.

The package's README says what each kit proves. Importing this package imports
nothing heavy; the modules import torch and transformers (and pytest, for the
conformance suites).
"""

__version__ = "0.1.0"
