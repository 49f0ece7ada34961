"""FSDP2 train backend for rl-core (actor, critic and reference roles).

The entry point (:mod:`rl_train_fsdp.plugin`) is light; torch and
transformers are imported when the engine is built
(:func:`rl_train_fsdp.engine.build_engine`).
"""

__version__ = "0.1.0"
