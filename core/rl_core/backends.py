"""The engine protocols a backend's factory returns and the loop drives.

Factories run in a worker: ``factory(config, context)`` (rollout) or ``factory(role, config, context)`` (train), with
the normalised :class:`rl_core.config.RunConfig` and that process's :class:`WorkerContext`. ``torch.distributed`` is
initialised when ``world_size > 1`` and every RNG seeded; batches arriving at a worker are that rank's shard."""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Protocol, runtime_checkable

import attrs
import torch

from rl_core.batch import Batch

NamedTensors = Iterable[tuple[str, torch.Tensor]]


@attrs.frozen(kw_only=True)
class WorkerContext:
    """Where a worker runs: its rank, the world, its device and base seed."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: str = "cpu"
    seed: int = 0
    # rollout.multi_turn: the resolved stack's agent runtime (rl_core.rollout.multi_turn.AgentRuntime), for rollout engines
    agent: Any = attrs.field(default=None, eq=False, repr=False)
    # the plan's cross-cutting features (rl_core.plan.features.Features: LoRA's rollout_adapters hook, rl-multimodal's /
    # rl-routing-replay's objects), for the engines
    features: Any = attrs.field(default=None, eq=False, repr=False)
    # rollout.exact: the Plan's log-prob forward (rl_core.cards.LogProbForwardCard), for engines whose card declares exact
    log_prob_forward: Any = attrs.field(default=None, eq=False, repr=False)

    def feature(self, name: str, key: str) -> Any:
        """The Plan's feature ``name``'s object; ``key`` (what needs it) names the error when it is missing."""
        obj = self.features.get(name) if self.features is not None else None
        if obj is None:
            raise LookupError(f"{key} needs the {name!r} feature, and this worker's Plan has none: `rlcore check` names the package to install")
        return obj

    @property
    def torch_device(self) -> torch.device:
        return torch.device(self.device)

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


@attrs.frozen(kw_only=True)
class SamplingParams:
    """Generation settings each engine maps onto its own; ``top_k <= 0`` / ``top_p == 1`` are off, ``greedy`` ignores temperature."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_new_tokens: int = 128
    greedy: bool = False
    seed: int | None = None
    logprobs: bool = False
    stop: tuple[str, ...] = ()


@runtime_checkable
class RolloutEngine(Protocol):
    """A generation engine living in a worker.

    ``generate`` takes a batch with ``input_ids`` and ``attention_mask`` of
    shape ``[B, P]`` (prompts left-padded; non-tensor fields ride along) and
    returns ``B * params.n`` rows, the n samples of a prompt adjacent, with:

    - ``prompts`` [B*n, P], ``responses`` [B*n, R] where R is exactly
      ``params.max_new_tokens`` (right-padded with the pad token);
    - ``input_ids``, ``attention_mask``, ``position_ids`` [B*n, P+R];
    - ``response_mask`` [B*n, R]: 1 up to and including the EOS token;
    - ``rollout_log_probs`` [B*n, R] when ``params.logprobs`` (0 on padding);
    - every non-tensor field repeated n times."""

    def generate(self, batch: Batch, params: SamplingParams) -> Batch: ...

    def load_weights(self, weights: NamedTensors) -> None:
        """Replace the engine's weights in place from HF-named tensors."""

    def sleep(self) -> None:
        """Release accelerator memory for training (a no-op where unsupported)."""

    def wake_up(self) -> None:
        """Take the memory back before the next generation."""

    def shutdown(self) -> None: ...


@runtime_checkable
class TrainEngine(Protocol):
    """One role (actor, critic or ref) of a train backend in a worker: forward / backward, sharding and optimisation.
    Batches carry ``input_ids``, ``attention_mask``, ``position_ids``, ``responses``, ``response_mask`` and, for updates,
    the loss's fields (``old_log_probs``, ``advantages``, ``ref_log_prob``, ``values``, ``returns``)."""

    role: str

    def compute_log_prob(self, batch: Batch, *, temperature: float = 1.0, with_entropy: bool = False) -> dict[str, torch.Tensor]:
        """``{"log_probs": [b, R], "entropy": [b, R] (if asked)}`` for the response tokens."""

    def compute_values(self, batch: Batch) -> torch.Tensor:
        """Critic values ``[b, R]`` for the response tokens (critic role only)."""

    def update(self, batch: Batch, *, on_policy: bool = False, keep_log_probs: bool = False) -> dict[str, Any]:
        """One PPO update (all epochs and mini-batches) of this role; returns metrics. ``on_policy`` (actor only):
        the loop skipped the old log-prob pass; the old policy is the current one. ``keep_log_probs`` (with
        ``on_policy``): also ``log_probs`` / ``log_probs_computed``, the update forward's (old policy's) log-probs."""

    def named_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Full (unsharded) HF-named weights, on every rank, one tensor at a time."""

    def save_checkpoint(self, path: str) -> None:
        """Save model, optimizer, scheduler and RNG state (sharded is fine) under ``path``."""

    def load_checkpoint(self, path: str) -> None: ...

    def save_hf(self, path: str) -> None:
        """Write the model as a normal HF folder (rank 0 writes; all ranks must call)."""

    def shutdown(self) -> None: ...


def engine_metrics_prefix(role: str, metrics: dict[str, Any]) -> dict[str, Any]:
    """Prefix a role's metric names: ``{"loss": 1}`` -> ``{"actor/loss": 1}``."""
    return {k if "/" in k else f"{role}/{k}": v for k, v in metrics.items()}
