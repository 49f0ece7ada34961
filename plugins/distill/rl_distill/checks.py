"""`rlcore check` for ``algorithm.adv_estimator=distill``: a teacher is set, is a model folder, and shares the
student's tokenizer (both tokenizers are read; no model is loaded)."""

from __future__ import annotations

import os
from typing import Any

from rl_core.modeling import load_tokenizer
from rl_core.problems import Problem

from rl_distill.teacher import KEY
from rl_distill.tokenizers import TOKENIZER_FIX, tokenizer_mismatch

BUILTIN = "builtin:"


def _student_folder(config: Any) -> str | None:
    """The student's tokenizer folder, or None when it is a built-in model not converted yet (compared at train time)."""
    path = config.model.tokenizer_path or config.model.path
    if not path or not path.startswith(BUILTIN):
        return path
    from rl_core.plan.builtin_model import cache_dir, is_complete_model_dir

    folder = cache_dir() / "models" / path[len(BUILTIN):]
    return str(folder) if is_complete_model_dir(folder) else None


def distill_problems(config: Any, registry: Any = None) -> list[Problem]:
    if config.algorithm.adv_estimator != "distill":
        return []
    path = dict(config.algorithm.options).get("teacher_path")
    if not path:
        return [Problem(key=KEY, what="algorithm.adv_estimator=distill has no teacher",
                        fix=f"set {KEY} to the teacher's HF folder (e.g. a trained run's <output_dir>/hf_final)")]
    folder = os.path.expanduser(path)
    if not os.path.isfile(os.path.join(folder, "config.json")):
        what = "is a folder without a config.json" if os.path.isdir(folder) else "does not exist"
        return [Problem(key=KEY, what=f"the teacher {path!r} {what}", fix=f"point {KEY} at an HF model folder (config.json, weights, tokenizer)")]
    student = _student_folder(config)
    if student is None:
        return []
    try:
        teacher_tok = load_tokenizer(folder, key=KEY)
    except Exception as exc:  # noqa: BLE001 - any failure to read the teacher's tokenizer is reported by name
        return [Problem(key=KEY, what=f"the teacher {path!r} has no tokenizer that loads: {type(exc).__name__}: {exc}",
                        fix="save the tokenizer into the teacher's folder (rl-core's hf_final has one)")]
    why = tokenizer_mismatch(load_tokenizer(student), teacher_tok, student_name=config.model.tokenizer_path or config.model.path, teacher_name=path)
    return [Problem(key=KEY, what=why, fix=TOKENIZER_FIX)] if why else []
