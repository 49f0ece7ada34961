"""The numerical guard: the first non-finite loss, gradient, weight, reward or log-prob stops the step (a NaN let through
trains every later step on garbage). Each check raises :class:`NonFiniteError` naming the stage, role, rank and
tensor, before anything is applied or saved."""

from __future__ import annotations

import torch

from rl_core.problems import UserError

ADVICE = (
    "usual causes: a learning rate too high (check actor.optim.lr / critic.optim.lr), float16 activations out of range (model.dtype=float16 overflowing even at loss scale 1), "
    "or a reward function returning NaN/inf"
)


class NonFiniteError(UserError, FloatingPointError):
    """A NaN or inf where training needs finite numbers; the message names stage, role, rank and tensor."""

    def __init__(self, message: str, *, stage: str = "", role: str = "", rank: int | None = None, tensor: str = "") -> None:
        super().__init__(message)
        self.stage, self.role, self.rank, self.tensor = stage, role, rank, tensor


def describe_bad(t: torch.Tensor) -> str:
    """``'3 NaN, 1 inf of 64 values'`` for a tensor with non-finite entries."""
    t = t.detach()
    nan = int(torch.isnan(t).sum())
    inf = int(torch.isinf(t).sum())
    return f"{nan} NaN, {inf} inf of {t.numel()} values"


def non_finite_error(*, stage: str, role: str, rank: int | None, tensor: str, detail: str) -> NonFiniteError:
    where = f"stage {stage!r}, role {role!r}" + (f", rank {rank}" if rank is not None else "")
    return NonFiniteError(
        f"non-finite {tensor} ({detail}) at {where}; the run was stopped. {ADVICE}",
        stage=stage, role=role, rank=rank, tensor=tensor,
    )


def check_finite(
    t: torch.Tensor,
    *,
    stage: str,
    role: str,
    tensor: str,
    rank: int | None = None,
    mask: torch.Tensor | None = None,
    row_ranks: list[int] | None = None,
) -> None:
    """Raise :class:`NonFiniteError` if ``t`` (where ``mask`` is set) holds a NaN or inf; ``row_ranks[i]``: row ``i``'s rank."""
    if not t.is_floating_point():
        return
    values = t.detach()
    ok = torch.isfinite(values)
    if mask is not None:
        ok = ok | ~mask.to(device=ok.device).bool()
    if bool(ok.all()):
        return
    shown = values[mask.to(device=values.device).bool()] if mask is not None else values
    if row_ranks is not None and ok.dim() >= 1:
        bad_rows = (~ok).reshape(ok.shape[0], -1).any(dim=1).nonzero()
        if len(bad_rows):
            rank = row_ranks[int(bad_rows[0])]
    raise non_finite_error(stage=stage, role=role, rank=rank, tensor=tensor, detail=describe_bad(shown))


def first_non_finite_parameter(module: torch.nn.Module) -> str | None:
    """The name of the first parameter (this rank's shard) holding a NaN or inf, or None; one device sync."""
    named = [(n, p.to_local() if hasattr(p, "to_local") else p) for n, p in module.named_parameters()]
    named = [(n, p) for n, p in named if p.numel()]
    if not named:
        return None
    flags = torch.stack([torch.isfinite(p.detach()).all() for _, p in named])
    if bool(flags.all()):
        return None
    return named[int((~flags).nonzero()[0])][0]
