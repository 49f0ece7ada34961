"""The `rlcore check` probe of ``model.path`` / ``model.tokenizer_path``: a local folder that a run can load (nothing
is downloaded at run time). A hub-style name (``org/name``) that is not here is a warning for `rlcore check` (the config
may be meant for another machine) and an error for `rlcore train` (:func:`run_here`); any other missing path an error.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from rl_core.cards import CheckCard
from rl_core.hookspecs import hookimpl
from rl_core.problems import Problem

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
BUILTIN = "builtin:"
_RUN_HERE_WOULD_FAIL = ", so a run here would fail"


def _how_to_get(name: str) -> str:
    return (f"download it to a folder (`huggingface-cli download {name} --local-dir models/{name.split('/')[-1]}`, "
            f"then model.path=models/{name.split('/')[-1]}), or `rlcore model smollm2 --out models/smollm2` for the offline model")


def path_problem(key: str, path: str) -> Problem | None:
    if not path or path.startswith(BUILTIN):
        return None
    p = Path(os.path.expanduser(path))
    if p.is_dir():
        if not (p / "config.json").is_file() and key == "model.path":
            return Problem(key=key, what=f"{path!r} is a folder without a config.json: not a Hugging Face model folder", fix=_how_to_get("ORG/NAME").replace("ORG/NAME", "the model"))
        return None
    if p.exists():
        return Problem(key=key, what=f"{path!r} is a file, not a model folder", fix=f"point {key} at the folder that holds config.json")
    first = path.split("/")[0]
    hub_like = bool(HUB_ID.match(path)) and not os.path.isdir(first)
    where = f"no folder {path!r} here (working directory {os.getcwd()})"
    if hub_like:
        return Problem(key=key, severity="warning", what=f"{where}; rl-core loads local folders only and downloads nothing{_RUN_HERE_WOULD_FAIL}",
                       fix=f"if the config is meant for a machine that has this folder, ignore this; else {_how_to_get(path)}")
    return Problem(key=key, what=where, fix=f"point {key} at an existing model folder (with config.json)")


def model_path_problems(config: Any, registry: Any = None) -> list[Problem]:
    """``model.path`` and ``model.tokenizer_path``, each a folder a run can load."""
    m = config.model
    found = (path_problem(key, value or "") for key, value in (("model.path", m.path), ("model.tokenizer_path", m.tokenizer_path)))
    return [p for p in found if p is not None]


def run_here(problems: list[Problem]) -> list[Problem]:
    """`rlcore train`: the run happens on this machine, so a hub-style name that is not a folder here (a warning for
    `rlcore check`, whose config may be meant for another machine) is an error."""
    out = []
    for p in problems:
        if p.key in ("model.path", "model.tokenizer_path") and p.severity == "warning" and p.what.endswith(_RUN_HERE_WOULD_FAIL):
            p = Problem(key=p.key, what=p.what.removesuffix(_RUN_HERE_WOULD_FAIL), fix=p.fix.split("; else ", 1)[-1])
        out.append(p)
    return out


@hookimpl
def rl_core_register_checks(register) -> None:
    register(CheckCard(name="model_path", stage="files", order=20, factory="rl_core.plan.model_path:model_path_problems",
                       description="model.path / model.tokenizer_path: a folder a run can load"))
