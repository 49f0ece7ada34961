"""Moved to :mod:`rl_core.train_engine.lr_schedule` (every train engine's LR schedule); re-exported here for old imports."""

from rl_core.train_engine.lr_schedule import LRSchedule, ScheduleError

__all__ = ["LRSchedule", "ScheduleError"]
