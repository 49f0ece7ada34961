"""rl-tracking's check (``rlcore check``, the ``files`` stage): the package behind each of its loggers that
``trainer.loggers`` names is installed, so a run does not stop at its first step for a missing ``wandb``."""

from __future__ import annotations

import importlib.util
from typing import Any

from rl_core.problems import Problem

#: logger -> (the module it imports, its pip name)
PACKAGES = {"tensorboard": ("tensorboard", "tensorboard"), "wandb": ("wandb", "wandb")}


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def logger_problems(config: Any, registry: Any = None) -> list[Problem]:
    out = []
    for name in config.trainer.loggers:
        module, pip_name = PACKAGES.get(name, (None, None))
        if module and not installed(module):
            out.append(Problem(key="trainer.loggers", what=f"logger {name!r} needs the package {pip_name}, which is not installed",
                               fix=f"pip install {pip_name} (or pip install 'rl-tracking[{name}]'), or remove {name!r} from trainer.loggers"))
    return out[:1]
