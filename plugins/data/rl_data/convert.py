"""Build prompt rows in verl's format: GSM8K from its jsonl or parquet, reasoning-gym sets generated offline.

A row (the same shape verl's ``examples/data_preprocess`` scripts write)::

    {"data_source":  "openai/gsm8k",
     "prompt":       [{"role": "user", "content": "<question> Let's think step by step ..."}],
     "ability":      "math",
     "reward_model": {"style": "rule", "ground_truth": "72"},
     "extra_info":   {"split": "train", "index": 0, "answer": "<reference solution>", "question": "<question>"}}

reasoning-gym rows use ``data_source = "reasoning_gym/<name>"`` and the
``extra_info`` that the ``reasoning_gym`` reward of rl-reward-rule reads
(``dataset``, ``index``, ``split``, ``question``, ``entry`` = the generated
item as JSON (:func:`rl_data.entries.encode_entry`: tuples, sets and datetimes are tagged so
they come back as themselves) or None, ``config`` = JSON of the creation
kwargs with seed and size) so it can call the dataset's ``score_answer`` with no network and
no shared state.
"""

from __future__ import annotations

import difflib
import json
import os
from typing import Any, Iterable

from rl_data.entries import encode_entry
from rl_core.problems import UserError

GSM8K_SOURCE = "openai/gsm8k"
GSM8K_INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
REASONING_GYM_PREFIX = "reasoning_gym"


class DataConvertError(UserError, ValueError):
    """Input that cannot be converted; the message names the file / row / name and the fix."""


# --------------------------------------------------------------------- GSM8K
def gsm8k_final_answer(solution: str) -> str:
    """The number after the last ``####`` of a GSM8K reference solution, separators removed."""
    if "####" not in solution:
        raise ValueError("the answer has no '####' line with the final number")
    final = solution.rsplit("####", 1)[1].strip()
    final = final.replace(",", "").replace("$", "").strip().rstrip(".")
    if not final:
        raise ValueError("the '####' line is empty")
    return final


def gsm8k_row(question: str, answer: str, index: int, split: str) -> dict[str, Any]:
    """One verl-format row from a GSM8K ``{"question", "answer"}`` record."""
    return {
        "data_source": GSM8K_SOURCE,
        "prompt": [{"role": "user", "content": question + " " + GSM8K_INSTRUCTION}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": gsm8k_final_answer(answer)},
        "extra_info": {"split": split, "index": index, "answer": answer, "question": question},
    }


def infer_split(path: str) -> str:
    stem = os.path.basename(path).split(".")[0].lower()
    for split in ("train", "test", "validation", "val"):
        if split in stem:
            return split
    return "train"


def gsm8k_rows(records: Iterable[tuple[str, Any]], split: str) -> list[dict[str, Any]]:
    """Rows for GSM8K ``{"question", "answer"}`` records, each given as ``(where it came from, record)``."""
    rows = []
    for at, record in records:
        if not isinstance(record, dict):
            raise DataConvertError(f"{at}: expected a JSON object with 'question' and 'answer', got {type(record).__name__}")
        missing = [k for k in ("question", "answer") if not isinstance(record.get(k), str)]
        if missing:
            raise DataConvertError(
                f"{at}: no {' / '.join(repr(k) for k in missing)} string (keys: {sorted(record)}); "
                "GSM8K rows need 'question' and 'answer' (the solution ending in '#### <number>')"
            )
        try:
            rows.append(gsm8k_row(record["question"], record["answer"], len(rows), split))
        except ValueError as exc:
            raise DataConvertError(f"{at}: {exc}; GSM8K answers end with '#### <number>'") from None
    return rows


def _jsonl_records(path: str) -> Iterable[Any]:
    with open(path, "rb") as f:
        head = f.read(4096)
    if b"\0" in head or head.startswith(b"PAR1"):
        raise DataConvertError(f"{path}: a binary file, not JSON lines; give a .jsonl file (one JSON object per line) or a .parquet file")
    with open(path, encoding="utf-8") as f:
        try:
            for line_no, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    yield f"{path}, line {line_no}", json.loads(line)
                except ValueError as exc:
                    raise DataConvertError(f"{path}, line {line_no}: not valid JSON ({exc}); each line must be one JSON object") from None
        except UnicodeDecodeError as exc:
            raise DataConvertError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); give a .jsonl file (one JSON object per line) or a .parquet file") from None


def _parquet_records(path: str) -> list[tuple[str, Any]]:
    try:
        return [(f"{path}, row {i}", r) for i, r in enumerate(read_parquet(path))]
    except Exception as exc:  # noqa: BLE001 - pyarrow's many error types: the file is the problem
        raise DataConvertError(f"{path}: cannot be read as parquet ({type(exc).__name__}: {exc}); give a .parquet or .jsonl file") from None


def gsm8k_rows_from_file(path: str | os.PathLike, split: str | None = None) -> list[dict[str, Any]]:
    """Rows for every record of a GSM8K .jsonl or .parquet file (``split`` defaults to the one in the file name)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise DataConvertError(f"{path}: no such file; pass a GSM8K .jsonl or .parquet file with --src, or leave --src out to fetch it from the hub")
    split = split or infer_split(path)
    rows = gsm8k_rows(_parquet_records(path) if path.endswith(".parquet") else _jsonl_records(path), split)
    if not rows:
        raise DataConvertError(f"{path}: the file has no rows")
    return rows


gsm8k_rows_from_jsonl = gsm8k_rows_from_file  # the old name


def refuse_overwriting_source(src: str | os.PathLike, out: str | os.PathLike) -> None:
    """A clear error when ``out`` is ``src`` itself (the conversion would replace its own input)."""
    src, out = os.fspath(src), os.fspath(out)
    same = os.path.exists(out) and os.path.exists(src) and os.path.samefile(src, out)
    if same or os.path.realpath(src) == os.path.realpath(out):
        raise DataConvertError(f"--out {out} is the source file itself (--src {src}): writing would replace the data it reads; give another --out")


# ------------------------------------------------------------ reasoning-gym
def _json_or_none(value: Any) -> str | None:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return None


def _import_reasoning_gym():
    try:
        import reasoning_gym
    except ImportError:
        raise DataConvertError("reasoning-gym is not installed; pip install reasoning-gym") from None
    return reasoning_gym


def reasoning_gym_datasets() -> list[str]:
    """Names of the datasets the installed reasoning-gym can generate."""
    _import_reasoning_gym()
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


def generate_reasoning_gym_rows(
    name: str,
    size: int,
    seed: int,
    kwargs: dict[str, Any] | None = None,
    system_prompt: str | None = None,
    split: str = "train",
) -> list[dict[str, Any]]:
    """Generate ``size`` reasoning-gym items of dataset ``name`` as verl-format rows.

    ``kwargs`` are the dataset's config options (e.g. ``{"max_terms": 2}``);
    ``system_prompt``, if given, becomes a system message before the
    question. The ground truth is the item's ``answer``.
    """
    rg = _import_reasoning_gym()
    from reasoning_gym.factory import DATASETS

    if name not in DATASETS:
        close = difflib.get_close_matches(name, list(DATASETS), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise DataConvertError(
            f"reasoning-gym has no dataset {name!r}{hint}; pick one of the {len(DATASETS)} installed, "
            "e.g. basic_arithmetic, chain_sum, gsm_symbolic"
        )
    if size < 1:
        raise DataConvertError(f"--size must be >= 1, got {size}")
    kwargs = dict(kwargs or {})
    for reserved in ("seed", "size"):
        if reserved in kwargs:
            raise DataConvertError(f"give {reserved} with --{reserved}, not inside --kwargs")
    config = _json_or_none({**kwargs, "seed": seed, "size": size})
    if config is None:
        raise DataConvertError(f"reasoning-gym kwargs for {name!r} must be JSON (numbers, strings, lists, objects): {kwargs!r}")
    try:
        ds = rg.create_dataset(name, size=size, seed=seed, **kwargs)
    except Exception as exc:  # noqa: BLE001 - bad kwargs: the library's own message
        raise DataConvertError(f"reasoning-gym could not create {name!r} with {kwargs}: {type(exc).__name__}: {exc}") from None
    source = f"{REASONING_GYM_PREFIX}/{name}"
    rows = []
    for i in range(len(ds)):
        entry = ds[i]
        messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
        messages.append({"role": "user", "content": entry["question"]})
        rows.append(
            {
                "data_source": source,
                "prompt": messages,
                "ability": "reasoning",
                "reward_model": {"style": "rule", "ground_truth": str(entry["answer"])},
                "extra_info": {
                    "split": split,
                    "index": i,
                    "dataset": name,
                    "question": entry["question"],
                    "entry": encode_entry(entry),
                    "config": config,
                },
            }
        )
    return rows


# ------------------------------------------------------------------ parquet
def write_parquet(rows: Iterable[dict[str, Any]], out: str | os.PathLike) -> int:
    """Write rows to a parquet file (parent folders are created); returns the row count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = list(rows)
    out = os.fspath(out)
    if not out.endswith(".parquet"):
        raise DataConvertError(f"--out {out}: give a file name ending in .parquet")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tmp = out + ".tmp"
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    os.replace(tmp, out)
    return len(rows)


def read_parquet(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a parquet file as plain Python dicts / lists."""
    import pyarrow.parquet as pq

    return pq.read_table(os.fspath(path)).to_pylist()


def convert_gsm8k(src: str | os.PathLike, out: str | os.PathLike, split: str | None = None) -> int:
    """GSM8K .jsonl / .parquet -> verl-format parquet; returns the number of rows written. Never overwrites ``src``."""
    refuse_overwriting_source(src, out)
    return write_parquet(gsm8k_rows_from_file(src, split), out)
