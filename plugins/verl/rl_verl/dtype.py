"""verl's compute-dtype keys against rl-core's one ``model.dtype`` (checked after loading).

verl sets the dtype per worker: the actor's engine (``actor.megatron.dtype``, ``actor.fsdp_config.dtype`` /
``mixed_precision.param_dtype``), the reference's and critic's, and the rollout's (``rollout.dtype``), each
defaulting to bfloat16. rl-core trains, scores and samples in one ``model.dtype``. A float16 value sets it
(:mod:`rl_verl.keys`: ``_dtype`` rules); then every dtype key the config writes must say float16, and
the actor and the rollout must both say it: verl's fp16 recipes set ``rollout.dtype`` and the actor's dtype
together, and one of them alone would be verl training in one dtype and sampling in another, which rl-core
does not do.
"""

from __future__ import annotations

from typing import Any

from rl_verl import keys as vk
from rl_core.problems import Problem

ROLLOUT = "actor_rollout_ref.rollout.dtype"
_ONE = "rl-core computes training and rollout in one dtype (model.dtype)"


def _is_fp16(value: Any) -> bool:
    return str(value).strip().lower() in vk.FP16


def agreement(model_dtype: str, dtypes: list[tuple[str, str, Any]]) -> list[Problem]:
    """Problems of the written verl dtype keys ``(as written, key, value)`` against the loaded ``model.dtype``."""
    if model_dtype != "float16":  # a later model.dtype overrode what a float16 key set
        return [Problem(key=w, what=f"is {v!r} but model.dtype is {model_dtype!r}: {_ONE}", fix=f"remove model.dtype, or set {w}={model_dtype}")
                for w, _k, v in dtypes if _is_fp16(v)]
    out = []
    for written, _key, value in dtypes:
        if not _is_fp16(value):
            out.append(Problem(key=written, what=f"is {value!r} but model.dtype is float16 (set by the other dtype keys): {_ONE}",
                               fix=f"set {written}=float16 too (or remove it), or train in bfloat16 everywhere"))
    fp16 = [(w, k) for w, k, v in dtypes if _is_fp16(v)]
    if not fp16:
        return out
    if not any(k == ROLLOUT for _w, k in fp16):
        out.append(Problem(key=fp16[0][0], what=f"is float16 while {ROLLOUT} is verl's default bfloat16: verl would sample in bfloat16; {_ONE}",
                           fix=f"set {ROLLOUT}=float16 too"))
    if not any(k.startswith("actor_rollout_ref.actor.") for _w, k in fp16):
        out.append(Problem(key=fp16[0][0], what=f"is float16 while the actor computes in verl's default bfloat16: verl would train the actor in "
                           f"bfloat16; {_ONE}", fix=f"set the actor's dtype to float16 too ({vk.ACTOR_DTYPE_KEYS}=float16)"))
    return out
