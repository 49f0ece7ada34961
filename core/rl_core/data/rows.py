"""One prompt row: its error type and its validation (what every data source's rows go through)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from rl_core.problems import UserError


class DataError(UserError, ValueError):
    """Prompt data that cannot be read or used as configured."""


# chat roles a prompt may use (what HF chat templates know; "tool" for tool results)
ROLES = ("system", "user", "assistant", "tool")


def validate_row(row: Any, where: str, prompt_key: str, image_key: str = "images", video_key: str = "videos") -> dict[str, Any]:
    """Check one row and return it in canonical form (errors say ``where``); images (``image_key``) are kept undecoded
    as ``images`` for rl-multimodal, videos and audio refused."""
    if not isinstance(row, dict):
        raise DataError(f"{where}: a row must be an object, got {type(row).__name__}")
    if prompt_key not in row:
        raise DataError(f"{where}: no {prompt_key!r} key (it has {sorted(row)}); each row needs a chat message list "
                        f"under {prompt_key!r}, or set data.prompt_key to the key that holds it")
    prompt = row[prompt_key]
    if isinstance(prompt, np.ndarray):
        prompt = prompt.tolist()
    if not (isinstance(prompt, list) and prompt
            and all(isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in prompt)):
        raise DataError(f"{where}: {prompt_key!r} must be a non-empty list of {{'role': str, 'content': str}} messages, "
                        f"got {json.dumps(prompt, default=str)[:120]}")
    bad_roles = sorted({m["role"] for m in prompt} - set(ROLES))
    if bad_roles:
        raise DataError(f"{where}: unknown chat role(s) {bad_roles} in {prompt_key!r}; a message's role must be one of {list(ROLES)}")
    if not any(m["content"].strip() for m in prompt):
        raise DataError(f"{where}: every message in {prompt_key!r} is empty; a prompt needs some text")
    rm = row.get("reward_model")
    if not isinstance(rm, dict) or rm.get("ground_truth") is None:
        raise DataError(f"{where}: no ground truth; a row needs reward_model.ground_truth "
                        f"(e.g. \"reward_model\": {{\"style\": \"rule\", \"ground_truth\": \"42\"}})")
    source = row.get("data_source")
    if not isinstance(source, str) or not source:
        raise DataError(f"{where}: no 'data_source' string; the reward function is chosen by it (e.g. \"openai/gsm8k\")")
    extra = row.get("extra_info") or {}
    if not isinstance(extra, dict):
        raise DataError(f"{where}: 'extra_info' must be an object, got {type(extra).__name__}")
    agent_name = row.get("agent_name")  # multi-turn rollouts: the agent loop of this row (verl's agent_name)
    if agent_name is not None and (not isinstance(agent_name, str) or not agent_name):
        raise DataError(f"{where}: 'agent_name' must name a registered agent loop (a non-empty string), got {agent_name!r}")
    out = {"data_source": source, "prompt": [{"role": m["role"], "content": m["content"]} for m in prompt],
           "ground_truth": rm["ground_truth"], "extra_info": extra}
    if agent_name is not None:
        out["agent_name"] = agent_name
    for key, what in ((video_key, "videos"), ("audios", "audio")):
        if _present(row.get(key)):
            raise DataError(f"{where}: the row holds {what} under {key!r}; rl-core reads image inputs only (data.image_key), "
                            f"not video or audio: drop {key!r} from the rows or use image / text data")
    images = row.get(image_key)
    if _present(images):
        if isinstance(images, np.ndarray):
            images = images.tolist()
        if not isinstance(images, list):
            images = [images]
        out["images"] = images
    return out


def generator_name(data: Any, split: str) -> str:
    """The name of rl-data's ``data.<split>_generator`` (rows made at start-up); '' when none is set or rl-data is absent."""
    return getattr(getattr(data, f"{split}_generator", None), "name", "") or ""


def _present(value: Any) -> bool:
    """A media field that holds something (parquet gives None or an empty array for a row without)."""
    if value is None:
        return False
    if isinstance(value, (list, tuple, np.ndarray)):
        return len(value) > 0
    return True
