"""rl-core: RL post-training for LLMs as a small core plus pluggable backends."""

from rl_core.hookspecs import hookimpl

__version__ = "0.1.0"

__all__ = ["hookimpl", "__version__"]
