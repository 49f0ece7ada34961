"""``trainer.deterministic``: the same seed gives the same metrics and weights on a GPU too (docs/exact.md)."""

from __future__ import annotations

import os
from typing import Any

import torch

CUBLAS_WORKSPACE = ":4096:8"


def apply_determinism(config: Any) -> bool:
    """``trainer.deterministic``: deterministic kernels in this process (call before its first CUDA op); whether on."""
    if not config.trainer.deterministic:
        return False
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    return True
