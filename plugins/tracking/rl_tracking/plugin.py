"""rl-tracking's cards: the ``tensorboard`` and ``wandb`` loggers ``trainer.loggers`` may name, their check, and
``rlcore plot`` (rl_tracking.plot)."""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import CheckCard, CommandCard, TrackerCard


@hookimpl
def rl_core_register_trackers(register):
    register(TrackerCard(name="tensorboard", factory="rl_tracking.loggers:TensorboardLogger",
                         description="TensorBoard event files in <output_dir>/tensorboard (needs tensorboard); purged after a resumed step"))
    register(TrackerCard(name="wandb", factory="rl_tracking.loggers:WandbLogger",
                         description="Weights & Biases (needs wandb; WANDB_MODE=offline logs without a network)"))


@hookimpl
def rl_core_register_checks(register):
    register(CheckCard(name="tracking", stage="files", order=40, factory="rl_tracking.checks:logger_problems",
                       description="the packages behind the tensorboard / wandb loggers trainer.loggers names are installed"))


@hookimpl
def rl_core_register_commands(register):
    register(CommandCard(name="plot", factory="rl_tracking.plot:add_parser",
                         help="rlcore plot RUN_DIR: PNG curves of a run's metrics.jsonl (needs matplotlib)"))
