"""Hook specifications for rl-core plugins (pluggy project ``rl_core``).

Every hook gets ``register`` and calls it once per card (:mod:`rl_core.cards`) it provides; built-in backends
register through the same hooks. docs/plugins.md has an example plugin and each hook's card contract."""

from __future__ import annotations

from typing import Callable

import pluggy

PROJECT = "rl_core"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

Register = Callable[[object], None]


@hookspec
def rl_core_register_rollout_backends(register: Register) -> None:
    """Register :class:`~rl_core.cards.RolloutCard` s (generation engines)."""


@hookspec
def rl_core_register_train_backends(register: Register) -> None:
    """Register :class:`~rl_core.cards.TrainCard` s (actor / critic / ref trainers)."""


@hookspec
def rl_core_register_rewards(register: Register) -> None:
    """Register :class:`~rl_core.cards.RewardCard` s (reward functions)."""


@hookspec
def rl_core_register_reward_models(register: Register) -> None:
    """Register :class:`~rl_core.cards.RewardModelCard` s (model-based rewards: reward models, judges)."""


@hookspec
def rl_core_register_advantage_estimators(register: Register) -> None:
    """Register :class:`~rl_core.cards.EstimatorCard` s (advantage estimators)."""


@hookspec
def rl_core_register_policy_losses(register: Register) -> None:
    """Register :class:`~rl_core.cards.PolicyLossCard` s (policy-gradient losses)."""


@hookspec
def rl_core_register_weight_converters(register: Register) -> None:
    """Register :class:`~rl_core.cards.ConverterCard` s (weight-format bridges)."""


@hookspec
def rl_core_register_tools(register: Register) -> None:
    """Register :class:`~rl_core.cards.ToolCard` s (tools agent loops may call)."""


@hookspec
def rl_core_register_agent_loops(register: Register) -> None:
    """Register :class:`~rl_core.cards.AgentLoopCard` s (multi-turn rollout loops)."""


@hookspec
def rl_core_register_tool_parsers(register: Register) -> None:
    """Register :class:`~rl_core.cards.ToolParserCard` s (tool-call formats, e.g. hermes)."""


@hookspec
def rl_core_register_checks(register: Register) -> None:
    """Register :class:`~rl_core.cards.CheckCard` s (checks of the run plan, beside the feature they check)."""


@hookspec
def rl_core_register_dialects(register: Register) -> None:
    """Register :class:`~rl_core.cards.DialectCard` s (another framework's launch syntax read into rl-core's config)."""


@hookspec
def rl_core_register_commands(register: Register) -> None:
    """Register :class:`~rl_core.cards.CommandCard` s (``rlcore`` sub-commands)."""


@hookspec
def rl_core_register_observers(register: Register) -> None:
    """Register :class:`~rl_core.cards.ObserverCard` s (step observers: each step's rollouts, :mod:`rl_core.observers`)."""


@hookspec
def rl_core_register_run_kinds(register: Register) -> None:
    """Register :class:`~rl_core.cards.RunKindCard` s (run kinds other than RL: ``trainer.kind``, e.g. sft)."""


@hookspec
def rl_core_register_log_prob_roles(register: Register) -> None:
    """Register :class:`~rl_core.cards.LogProbRoleCard` s (a second model's per-token log-probs of the sampled tokens)."""


@hookspec
def rl_core_register_config_sections(register: Register) -> None:
    """Register :class:`~rl_core.cards.ConfigSectionCard` s (a feature's config section, read with core's own)."""


@hookspec
def rl_core_register_placements(register: Register) -> None:
    """Register :class:`~rl_core.cards.PlacementCard` s (where the workers run: ``trainer.placement``, e.g. ray)."""


@hookspec
def rl_core_register_features(register: Register) -> None:
    """Register :class:`~rl_core.cards.FeatureCard` s (cross-cutting features a config switches on: LoRA, ...)."""


@hookspec
def rl_core_register_rollout_pools(register: Register) -> None:
    """Register :class:`~rl_core.cards.RolloutPoolCard` s (a rollout pool of its own: its step schedule and weight transfer)."""


@hookspec
def rl_core_register_reward_shapers(register: Register) -> None:
    """Register :class:`~rl_core.cards.RewardShapingCard` s (a change of the training rewards, e.g. DAPO's overlong penalty)."""


@hookspec
def rl_core_register_batch_samplers(register: Register) -> None:
    """Register :class:`~rl_core.cards.BatchSamplerCard` s (how a step gathers its batch over rounds, e.g. DAPO's dynamic sampling)."""


@hookspec
def rl_core_register_log_prob_forwards(register: Register) -> None:
    """Register :class:`~rl_core.cards.LogProbForwardCard` s (a log-prob forward the rollout and the trainer share: ``rollout.exact``)."""


@hookspec
def rl_core_register_trackers(register: Register) -> None:
    """Register :class:`~rl_core.cards.TrackerCard` s (metric loggers ``trainer.loggers`` names: tensorboard, wandb, ...)."""


@hookspec
def rl_core_register_builtin_models(register: Register) -> None:
    """Register :class:`~rl_core.cards.BuiltinModelCard` s (models made offline: ``model.path: builtin:<name>``)."""
