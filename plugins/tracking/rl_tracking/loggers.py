"""rl-tracking's metric loggers: ``tensorboard`` (``<output_dir>/tensorboard``) and ``wandb`` (Weights & Biases).

Each class is a tracker card's factory (:class:`rl_core.cards.TrackerCard`): the plan loads it once, the trainer
builds it once as ``cls(output_dir=, project=, experiment=, config_dict=, print_fn=)`` and calls ``log(metrics, step)``
each step, ``truncate_after(step)`` on a resume and ``close()`` at the end. ``config_dict`` is the run's config with
its secrets masked (rl_core.config.load.config_to_dict): what TensorBoard's config text and ``wandb.init(config=)``
get. A logger that cannot start raises :class:`rl_core.trainer.tracking.LoggerError` naming the install or the fix.
"""

from __future__ import annotations

import json
import os
from typing import Any

from rl_core.trainer.tracking import LoggerError


class TensorboardLogger:
    """``torch.utils.tensorboard.SummaryWriter`` in ``<output_dir>/tensorboard``."""

    def __init__(self, output_dir: str, config_dict: dict | None = None, **_: Any) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise LoggerError(
                f"trainer.loggers includes 'tensorboard' but it cannot be imported ({e}): `pip install tensorboard`, "
                "or remove 'tensorboard' from trainer.loggers"
            ) from None
        self._cls = SummaryWriter
        self.log_dir = os.path.join(output_dir, "tensorboard")
        self.writer = SummaryWriter(log_dir=self.log_dir)
        if config_dict:
            self.writer.add_text("config", "```\n" + json.dumps(config_dict, indent=1, default=str) + "\n```", 0)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for k, v in metrics.items():
            self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def truncate_after(self, step: int) -> int:
        """Reopen with ``purge_step=step + 1``: tensorboard hides events after ``step``."""
        self.writer.close()
        self.writer = self._cls(log_dir=self.log_dir, purge_step=step + 1)
        return 0

    def close(self) -> None:
        self.writer.close()


class WandbLogger:
    """Weights & Biases; ``WANDB_MODE=offline`` logs without a network."""

    def __init__(self, output_dir: str, project: str, experiment: str, config_dict: dict | None = None, **_: Any) -> None:
        try:
            import wandb
        except ImportError:
            raise LoggerError(
                "trainer.loggers includes 'wandb' but wandb is not installed: `pip install wandb` "
                "(set WANDB_MODE=offline to log without a network), or remove 'wandb' from trainer.loggers"
            ) from None
        try:
            self.run = wandb.init(project=project, name=experiment, config=config_dict or {}, dir=output_dir)
        except Exception as e:  # noqa: BLE001 - no network, no login, a bad project name...
            raise LoggerError(
                f"trainer.loggers: wandb.init failed ({type(e).__name__}: {e}); run `wandb login`, set WANDB_MODE=offline, "
                "or remove 'wandb' from trainer.loggers"
            ) from None

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        self.run.finish()
