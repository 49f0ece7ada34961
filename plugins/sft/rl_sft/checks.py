"""`rlcore check` of ``trainer.kind=sft``: the SFT rows, and the settings SFT cannot honour."""

from __future__ import annotations

from typing import Any

from rl_core.problems import Problem

from rl_sft.data import SFTDataError, row_problems, split_rows
from rl_sft.options import SFTOptions

#: rows read per split by the check (the run reads every row and refuses a bad one then too)
CHECK_ROWS = 200


def sft_problems(config: Any, registry: Any = None) -> list[Problem]:
    if config.trainer.kind != "sft":
        return []
    out: list[Problem] = []
    # no data at all: core's files check (rl_core.plan.preflight); the generators' settings: rl-data's (its sample_rows hook there)
    if config.rollout.n != 1:
        out.append(Problem(key="rollout.n", what=f"is {config.rollout.n}, but an SFT row is one sequence (nothing is sampled)", fix="set rollout.n=1 (or leave it out of an SFT config)"))
    if config.actor.use_kl_loss:
        out.append(Problem(key="actor.use_kl_loss", what="is on, but an SFT run has no reference model", fix="set actor.use_kl_loss=false"))
    if config.critic.enable:
        out.append(Problem(key="critic.enable", what="is on, but an SFT run trains no critic", fix="set critic.enable=false"))
    if config.rollout.n_gpus_per_node is not None:
        out.append(Problem(key="rollout.n_gpus_per_node", what="gives the rollout workers of their own, but an SFT run generates nothing", fix="leave rollout.n_gpus_per_node unset"))
    if config.reward_model.enable:
        out.append(Problem(key="reward_model.enable", what="is on, but an SFT run scores nothing", fix="set reward_model.enable=false"))
    try:
        options = SFTOptions(**dict(config.trainer.kind_options))
    except (TypeError, ValueError):
        return out  # the resolver reported trainer.kind_options against the card's options class
    for split in ("train", "val"):
        try:
            rows = split_rows(config, split, CHECK_ROWS)  # generated rows: core's files check (rl_core.plan.preflight)
        except SFTDataError as exc:
            out.append(Problem(key=f"data.{split}_files", what=str(exc), fix="point it at SFT data (.jsonl or .parquet; docs/sft.md)"))
            continue
        out += row_problems(config, options, rows, f"data.{split}_files")
    return out
