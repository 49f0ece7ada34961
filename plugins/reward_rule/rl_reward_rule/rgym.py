"""reasoning-gym: score with the generating dataset's own ``score_answer``.

The row format this scorer reads (``rlcore data reasoning-gym`` and
:func:`rl_data.convert.generate_reasoning_gym_rows` of rl-data write it)::

    data_source   "reasoning_gym/<dataset name>"
    reward_model  {"style": "rule", "ground_truth": <entry["answer"]>}
    extra_info    {
        "dataset":  "<dataset name>",          # e.g. "basic_arithmetic"
        "index":    <int>,                     # position in the generated set
        "split":    "train" | "test" | ...,
        "question": "<the question text>",
        "entry":    "<the entry (question, answer, metadata) as JSON>" | None,
        "config":   "<JSON of the dataset config, seed and size included>",
    }

``entry`` is decoded with :func:`rl_data.entries.decode_entry` (rl-data) (tuples,
sets and datetimes in the metadata come back as themselves: ARC's
``score_answer`` compares tuple grids). ``score_answer(answer, entry)`` is
called with the stored entry, whose
``answer`` is replaced by the row's ground truth. Where an entry could not be
stored as JSON (``entry`` is None: a few datasets keep e.g. ``datetime``
objects in their metadata) it is regenerated from ``config`` and ``index``
(reasoning-gym generation is deterministic given the config's seed).
``entry`` and ``config`` may also be plain dicts (rows built in memory).

The answer given to ``score_answer`` is the text inside the last
``<answer>...</answer>`` of the response (reasoning-gym's own prompt asks
for those tags) or, when there is none, the whole response stripped; set
``answer_tag=None`` to always pass the whole response.
"""

from __future__ import annotations

import functools
import json
import re
import warnings
from typing import Any, Callable

from rl_data.entries import decode_entry

DATA_SOURCE_PREFIX = "reasoning_gym"


def dataset_name(data_source: str | None, extra_info: dict | None) -> str:
    """The reasoning-gym dataset a row came from (``extra_info["dataset"]`` first)."""
    name = (extra_info or {}).get("dataset")
    if not name and data_source and data_source.startswith(DATA_SOURCE_PREFIX + "/"):
        name = data_source[len(DATA_SOURCE_PREFIX) + 1 :]
    if not name:
        raise ValueError(
            f"reasoning_gym: cannot tell the dataset of data_source={data_source!r}; "
            "use data_source 'reasoning_gym/<name>' or put 'dataset' in extra_info"
        )
    return str(name)


def _as_dict(value: Any, what: str) -> dict | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = decode_entry(value)
    if not isinstance(value, dict):
        raise ValueError(f"reasoning_gym: extra_info[{what!r}] must be a dict or its JSON, got {type(value).__name__}")
    return value


def _import_reasoning_gym():
    try:
        import reasoning_gym
    except ImportError as exc:
        raise ImportError(
            f"the reasoning_gym reward needs the reasoning-gym package ({exc}); "
            "pip install 'rl-reward-rule[reasoning-gym]'"
        ) from exc
    return reasoning_gym


@functools.lru_cache(maxsize=32)
def _dataset(name: str, config_json: str | None):
    reasoning_gym = _import_reasoning_gym()

    if config_json is None:
        return reasoning_gym.create_dataset(name)
    return reasoning_gym.create_dataset(name, **json.loads(config_json))


@functools.lru_cache(maxsize=32)
def _score_fn(name: str, config_json: str | None) -> Callable[[str, dict], float]:
    try:
        return _dataset(name, config_json).score_answer
    except Exception as exc:  # noqa: BLE001 - a config the installed version rejects
        if config_json is None:
            raise
        reasoning_gym = _import_reasoning_gym()

        warnings.warn(
            f"reasoning_gym: could not rebuild dataset {name!r} from the stored config ({exc}); "
            "scoring with its default config",
            stacklevel=2,
        )
        return reasoning_gym.get_score_answer_fn(name)


def _config_key(config: dict | None) -> str | None:
    return None if config is None else json.dumps(config, sort_keys=True)


def extract_tagged(solution_str: str, tag: str | None) -> str:
    """The content of the last ``<tag>...</tag>``, else the stripped text."""
    text = solution_str or ""
    if tag:
        t = re.escape(tag)
        found = re.findall(rf"<{t}>(.*?)</{t}>", text, flags=re.DOTALL)
        if found:
            return found[-1].strip()
    return text.strip()


def score(
    *,
    data_source: str | None = None,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict | None = None,
    answer_tag: str | None = "answer",
    **_: Any,
) -> dict:
    """``{"score", "acc"}``: the dataset's own score (partial credit possible), ``acc`` = score == 1."""
    info = extra_info or {}
    name = dataset_name(data_source, info)
    config = _as_dict(info.get("config"), "config")
    entry = _as_dict(info.get("entry"), "entry")
    if entry is None:
        if config is None or info.get("index") is None:
            raise ValueError(
                "reasoning_gym: extra_info needs 'entry' (the generated item) or 'config' and 'index' "
                "to regenerate it; write rows with `rlcore data reasoning-gym`"
            )
        entry = _dataset(name, _config_key(config))[int(info["index"])]
    entry = dict(entry)
    # The row's ground truth is the answer; keep the stored (typed) answer when
    # it is the same value written as text.
    if ground_truth is not None and str(entry.get("answer")) != str(ground_truth):
        entry["answer"] = ground_truth
    fn = _score_fn(name, _config_key(config))
    value = float(fn(extract_tagged(solution_str, answer_tag), entry))
    return {"score": value, "acc": 1.0 if value >= 1.0 else 0.0}
