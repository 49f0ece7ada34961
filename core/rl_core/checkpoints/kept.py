"""What a stopped run says about the checkpoint it keeps: its path, its size, and how to free it (``rlcore clean``)."""

from __future__ import annotations

from rl_core.checkpoints.store import tree_size


def size_text(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def kept_checkpoint(path: str, output_dir: str) -> str:
    """``"<path> (1.73 GB; `rlcore clean <output_dir>` frees it if you will not resume)"``."""
    return f"{path} ({size_text(tree_size(path))} on disk; `rlcore clean {output_dir}` removes it if you will not resume)"
