"""rl-sft's hooks: the ``sft`` run kind, the ``sft`` policy loss (token-weighted cross-entropy) and the SFT check."""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import CheckCard, PolicyLossCard, RunKindCard


@hookimpl
def rl_core_register_run_kinds(register) -> None:
    register(RunKindCard(name="sft", factory="rl_sft.kind:make", rollout=False, policy_loss="sft", options="rl_sft.options:SFTOptions",
                         description="supervised fine-tuning (and off-policy distillation from teacher samples): docs/sft.md"))


@hookimpl
def rl_core_register_policy_losses(register) -> None:
    register(PolicyLossCard(name="sft", factory="rl_sft.loss:sft_loss", description="token-weighted cross-entropy of the loss-masked tokens"))


@hookimpl
def rl_core_register_checks(register) -> None:
    register(CheckCard(name="sft", stage="files", order=20, factory="rl_sft.checks:sft_problems",
                       description="trainer.kind=sft: the SFT rows (responses, loss masks) and the settings SFT cannot honour"))
