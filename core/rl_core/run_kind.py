"""Run kinds (``trainer.kind``): other ways to train with the same loop, Plan, workers, checkpoints and exports.

``rl`` (the default) is the RL loop itself; any other value names a :class:`~rl_core.cards.RunKindCard`, whose
factory the loop calls with a :class:`RunHandle`; the returned :class:`RunKind` gives the data loaders, each step's
metrics and the validation. Step count, logging, checkpoints, resume and the HF export stay the loop's.
:meth:`RunHandle.update_actor` takes a batch in the RL layout through core's update with the card's policy loss."""

from __future__ import annotations

from typing import Any, Iterator, Protocol

# a light module (the resolver and the checks import it): batches are rl_core.batch.Batch, not imported here (torch)
Batch = Any

#: the built-in run kind: the RL loop
RL = "rl"


class Loader(Protocol):
    """What the loop reads of a run kind's data loader (as :class:`rl_core.data.dataset.PromptLoader`)."""

    def __len__(self) -> int: ...  # batches per epoch

    def next_batch(self) -> Batch: ...

    def iterate_once(self) -> Iterator[Batch]: ...  # validation: one pass, the resumable position left alone

    def state_dict(self) -> dict[str, Any]: ...  # saved in every checkpoint; must hold "epoch"

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class RunHandle(Protocol):
    """What the loop hands a run kind."""

    config: Any  # the resolved RunConfig
    tokenizer: Any
    generated_rows: Any  # rows made at start-up (rl-data's data.*_generator): (data, split) -> (rows, origins, source); None without rl-data

    def update_actor(self, batch: Batch) -> dict[str, float]:
        """One actor update on ``batch`` (``old_log_probs`` read, not recomputed): metrics averaged over ranks; a non-finite
        loss stops the step."""
        ...

    def actor_log_probs(self, batch: Batch, temperature: float = 1.0) -> Any:
        """The actor's per-token log-probs of ``batch["responses"]`` (``[rows, R]`` float32), no gradient."""
        ...


class RunKind(Protocol):
    def loaders(self) -> tuple[Loader, Loader | None, dict[str, int]]:
        """``(train loader, validation loader or None, counts)``; built once, when the trainer starts."""
        ...

    def train_step(self, batch: Batch, step: int) -> dict[str, float]:
        """Step ``step`` on the train loader's next ``batch``: its metrics."""
        ...

    def validate(self) -> dict[str, float]:
        """The validation metrics (``val/...``)."""
        ...


def run_kind_name(config: Any) -> str:
    """``trainer.kind`` of a config (``rl`` when the field is absent)."""
    return getattr(getattr(config, "trainer", None), "kind", RL) or RL
