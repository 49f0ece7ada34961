"""Test helpers shipped with the core, for the project's tests and every backend's.

- :mod:`rl_core.testing.tiny_model`: ``make_tiny_model_dir`` (a tiny random
  llama / qwen2 HF folder with a byte-level ChatML tokenizer, offline, < 1 s)
  and ``bigram_weights`` (a model whose next token is known by construction);
- :mod:`rl_core.testing.distributed`: ``run_distributed(fn, world_size, *args)``
  on spawned processes with a gloo (or NCCL) process group;
- :mod:`rl_core.testing.rollout_conformance` / :mod:`rl_core.testing.train_conformance`:
  the pytest base classes every rollout / train backend subclasses.

Importing this package imports nothing heavy; the modules import torch and
transformers (and pytest, for the conformance suites).
"""
