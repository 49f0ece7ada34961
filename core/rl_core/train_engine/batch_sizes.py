"""How a train engine cuts its rank's shard of a step into mini-batches, micro-batches and epochs (config only, no
torch); docs/plugins.md ("A train backend") says how. :func:`split_sizes` raises :class:`TrainSizeError` with the
arithmetic when the numbers do not fit (``rlcore check`` reports the same before a run)."""

from __future__ import annotations

from typing import Any

import attrs

from rl_core.problems import UserError

#: tokens per chunk of the LM head in the log-prob pass (rl_core.logprobs): 2048 x 152k float32 logits = 1.2 GiB;
#: here, torch-free, for the memory estimate
LOGPROB_CHUNK = 2048


class TrainSizeError(UserError, ValueError):
    """Batch sizes that do not fit together, or an unknown role: a config problem."""


def role_config(config: Any, role: str) -> Any:
    """The role's section of the run config: ``critic`` for the critic, ``actor`` for actor and ref."""
    return config.critic if role == "critic" else config.actor


def mini_micro_epochs(config: Any, role: str) -> tuple[int, int, int]:
    """(prompts per mini-batch, sequences per micro-batch, epochs) of ``role``'s update."""
    a, c = config.actor, config.critic
    if role == "critic":
        return (
            c.ppo_mini_batch_size or a.ppo_mini_batch_size,
            c.ppo_micro_batch_size_per_gpu or a.ppo_micro_batch_size_per_gpu,
            c.ppo_epochs or a.ppo_epochs,
        )
    return a.ppo_mini_batch_size, a.ppo_micro_batch_size_per_gpu, a.ppo_epochs


def inference_micro(config: Any, role: str) -> int:
    """Sequences per micro-batch of ``compute_log_prob`` (actor, ref) or ``compute_values`` (critic)."""
    a = config.actor
    if role == "critic":
        return mini_micro_epochs(config, role)[1]
    if role == "ref":
        return config.ref.log_prob_micro_batch_size_per_gpu or a.log_prob_micro_batch_size_per_gpu or config.rollout.log_prob_micro_batch_size_per_gpu or a.ppo_micro_batch_size_per_gpu
    return a.log_prob_micro_batch_size_per_gpu or config.rollout.log_prob_micro_batch_size_per_gpu or a.ppo_micro_batch_size_per_gpu


@attrs.frozen
class RoleSizes:
    """How a role's update cuts a shard: ``mini_batches`` optimizer steps per epoch (global: data.train_batch_size //
    <role>.ppo_mini_batch_size), ``micro`` sequences per micro-batch on a rank, ``epochs``."""

    role: str
    mini_batches: int
    micro: int
    epochs: int
    mini_prompts: int
    train_batch_size: int

    @property
    def section(self) -> str:
        return "critic" if self.role == "critic" else "actor"

    def mini_rows(self, rows: int) -> int:
        """Sequences per mini-batch of a shard of ``rows``; :class:`TrainSizeError` with the arithmetic when they do not fit."""
        n_mini, micro, section, tbs = self.mini_batches, self.micro, self.section, self.train_batch_size
        if rows % n_mini:
            raise TrainSizeError(
                f"{self.role} update: this rank's {rows} sequences cannot be split into {n_mini} mini-batches "
                f"(data.train_batch_size={tbs} / {section}.ppo_mini_batch_size={self.mini_prompts} = {n_mini}; {rows} % {n_mini} = {rows % n_mini})"
            )
        mini_rows = rows // n_mini
        if micro <= 0 or mini_rows % micro:
            divisors = [d for d in range(1, mini_rows + 1) if mini_rows % d == 0]
            raise TrainSizeError(
                f"{section}.ppo_micro_batch_size_per_gpu={micro} does not divide the per-rank mini-batch: "
                f"{rows} sequences on this rank / {n_mini} mini-batches = {mini_rows} sequences, {mini_rows} % {micro} = {mini_rows % micro if micro > 0 else 'n/a'}; "
                f"valid values: {', '.join(map(str, divisors))}"
            )
        return mini_rows


def role_sizes(config: Any, role: str, sizes: Any = None) -> RoleSizes:
    """The role's :class:`RoleSizes`: from the resolved :class:`rl_core.config.normalize.Sizes` when given (the run's
    path), else from the config (engines built directly, in tests and benches)."""
    section = "critic" if role == "critic" else "actor"
    mini_prompts, micro, epochs = mini_micro_epochs(config, role)
    tbs = config.data.train_batch_size
    if sizes is not None:
        n_mini = sizes.critic_mini_batches if role == "critic" else sizes.actor_mini_batches
        micro = sizes.critic_micro_batch_per_rank if role == "critic" else sizes.actor_micro_batch_per_rank
        return RoleSizes(role, n_mini, micro, epochs, mini_prompts, tbs)
    if not mini_prompts or tbs % mini_prompts or mini_prompts > tbs:
        raise TrainSizeError(
            f"data.train_batch_size={tbs} prompts must be a multiple of {section}.ppo_mini_batch_size={mini_prompts} "
            f"({tbs} % {mini_prompts} = {tbs % mini_prompts if mini_prompts else 'n/a'})"
        )
    return RoleSizes(role, tbs // mini_prompts, micro, epochs, mini_prompts, tbs)


def split_sizes(config: Any, role: str, rows: int) -> tuple[int, int, int, int]:
    """(mini-batches, rows per mini-batch, rows per micro-batch, epochs) of a shard of ``rows`` sequences, with clear errors."""
    rs = role_sizes(config, role)
    return rs.mini_batches, rs.mini_rows(rows), rs.micro, rs.epochs
