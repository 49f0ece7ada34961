"""Position ids from an attention mask (left padding): what rollout outputs and train-side forwards share."""

from __future__ import annotations

import torch


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """``cumsum(mask) - 1`` clamped at 0: real tokens get 0, 1, 2, ... whatever the left padding."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
