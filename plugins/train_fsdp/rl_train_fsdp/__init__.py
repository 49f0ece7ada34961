"""FSDP2 train backend for rl-core (actor, critic and reference roles).

The entry point (:mod:`rl_train_fsdp.plugin`) is light; torch and
transformers are imported when the backend is built
(:class:`rl_train_fsdp.engine.FSDPBackend`, the card's factory).
"""

__version__ = "0.1.0"
