"""Deeper `rlcore check` probes: what a run would otherwise find out only after building everything.

Each probe is ``probe(config, registry) -> list[Problem]`` and never raises (:mod:`rl_core.plan.checks` runs them all):
the model folders a run loads, the estimator on a probe batch, a training set of at least one batch, greedy groups,
NaN / inf in free-form option dicts, ``${...}`` left unresolved. A missing folder is :mod:`rl_core.plan.model_path`'s.
"""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path
from typing import Any, Iterable, Mapping

import attrs

from rl_core.cards import CheckCard
from rl_core.hookspecs import hookimpl
from rl_core.problems import Problem
from rl_core.util.user_paths import get_key

# ------------------------------------------------------------------ model folders
def _model_folders(config: Any) -> list[tuple[str, str]]:
    out = []
    for key in ("model.path", "critic.model.path", "ref.model.path"):
        value = get_key(config, key)
        if isinstance(value, str) and value:
            out.append((key, value))
    return out


def safetensors_problem(path: Path) -> str | None:
    """Why ``path`` is not a readable safetensors file (None if it is): header length, JSON, declared sizes."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                return "shorter than a safetensors header (8 bytes)"
            (n,) = struct.unpack("<Q", head)
            if n > min(size - 8, 100 * 2**20):
                return f"its header claims {n} bytes but the file has {size}: truncated or not safetensors"
            header = json.loads(f.read(n))
    except (OSError, ValueError) as exc:
        return f"unreadable ({type(exc).__name__}: {exc})"
    if not isinstance(header, dict):
        return "its header is not a JSON object"
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            end = max(end, int(info["data_offsets"][1]))
        except (KeyError, TypeError, ValueError, IndexError):
            return f"tensor {name!r} has no valid data_offsets"
    if 8 + n + end > size:
        return f"it declares {8 + n + end} bytes but holds {size}: truncated (an interrupted download or copy?)"
    return None


def pickled_weights_problem(path: Path) -> str | None:
    """Why a pickled weight file (``pytorch_model.bin``, ``adapter_model.bin``) would be refused at load (None if it loads):
    read as transformers / peft read it, ``torch.load(weights_only=True)``, memory-mapped; nothing in the file runs."""
    import torch

    try:
        try:
            torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc):
                raise
            torch.load(str(path), map_location="cpu", weights_only=True)  # the legacy (non-zip) format cannot be mapped
    except Exception as exc:  # noqa: BLE001 - whatever the pickle holds, it is refused, never run
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return f"is not a file of plain tensors (refused by weights-only loading: {first})"
    return None


def _weights_problems(key: str, folder: Path) -> list[Problem]:
    fix = "download or copy the model folder again"
    index = folder / "model.safetensors.index.json"
    files: list[Path] = []
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            return [Problem(key=key, what=f"{index} does not parse as a weight index ({type(exc).__name__}: {exc})", fix=fix)]
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            return [Problem(key=key, what=f"{index.name} names weight files that are not in {folder}: {', '.join(missing[:5])}", fix=fix)]
        files = [folder / n for n in names]
    else:
        files = sorted(folder.glob("*.safetensors"))
    if not files:
        pickled = sorted([*folder.glob("*.bin"), *folder.glob("*.pt")])
        if pickled:  # read as train reads them (weights_only): a file that holds anything but tensors is refused here
            return [Problem(key=key, what=f"weight file {f} {why}", fix="use a model folder with *.safetensors weights (convert it where you "
                            "trust the file), or delete the file if you did not put it there")
                    for f in pickled if (why := pickled_weights_problem(f))]
        return [Problem(key=key, what=f"{folder} holds no weights (no *.safetensors or pytorch_model.bin)", fix=f"{fix}, or set model.random_init=true for random weights")]
    out = []
    for f in files:
        why = safetensors_problem(f)
        if why:
            out.append(Problem(key=key, what=f"weight file {f} is broken: {why}", fix=fix))
    return out


def _config_problems(key: str, folder: Path, trust_remote_code: bool) -> list[Problem]:
    cfg_file = folder / "config.json"
    try:
        data = json.loads(cfg_file.read_text())
    except (OSError, ValueError) as exc:
        return [Problem(key=key, what=f"{cfg_file} does not parse: {type(exc).__name__}: {exc}", fix="restore the model folder's config.json (download it again)")]
    if not isinstance(data, dict):
        return [Problem(key=key, what=f"{cfg_file} is not a JSON object", fix="restore the model folder's config.json")]
    if data.get("auto_map") and not trust_remote_code:
        return [Problem(
            key=key, what=f"{folder} asks to run Python code from the folder (config.json auto_map: {', '.join(map(str, data['auto_map']))})",
            why="rl-core runs no code read from disk unless you say so",
            fix="use a model whose architecture transformers ships, or set model.trust_remote_code=true if you trust this folder's code",
        )]
    try:
        from transformers import AutoConfig

        AutoConfig.from_pretrained(str(folder), trust_remote_code=False, local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - whatever transformers says is the problem
        if data.get("auto_map") and trust_remote_code:
            return []
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return [Problem(key=key, what=f"transformers cannot read {cfg_file}: {first}", fix="check model_type in config.json, or upgrade transformers for a newer architecture")]
    return []


def _tokenizer_problems(key: str, folder: Path, trust_remote_code: bool) -> list[Problem]:
    try:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(str(folder), trust_remote_code=trust_remote_code, local_files_only=True)
    except Exception as exc:  # noqa: BLE001
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return [Problem(key=key, what=f"the tokenizer in {folder} does not load: {type(exc).__name__}: {first[:300]}",
                        fix="restore tokenizer.json / tokenizer_config.json, or point model.tokenizer_path at a folder with a working tokenizer")]
    return []


def _vocab_problems(key: str, folder: Path, tok_key: str, tok_folder: Path, trust_remote_code: bool) -> list[Problem]:
    """Token ids the tokenizer can produce that the model's embedding has no row for (an index error at the first such token)."""
    try:
        rows = json.loads((folder / "config.json").read_text())
        rows = (rows.get("text_config") or rows).get("vocab_size") if isinstance(rows, dict) else None
        from transformers import AutoTokenizer

        n = len(AutoTokenizer.from_pretrained(str(tok_folder), trust_remote_code=trust_remote_code, local_files_only=True))
    except Exception:  # noqa: BLE001 - unreadable config / tokenizer: reported by their own probes
        return []
    if not isinstance(rows, int) or n <= rows:
        return []
    return [Problem(key=tok_key, what=f"the tokenizer in {tok_folder} has {n} tokens but the model in {folder} ({key}) has {rows} embedding rows "
                    f"(vocab_size): ids {rows}..{n - 1} would index past the embedding", fix=f"use the tokenizer the model was trained with ({key}'s own)")]


def folder_problems(key: str, path: str, *, tokenizer_key: str | None = None, tokenizer_path: str | None = None,
                    trust_remote_code: bool = False, weights: bool = True) -> list[Problem]:
    """One local model folder as a run loads it: ``config.json`` (and remote code), the weights (safetensors headers,
    the index, pickled files read weights-only), the tokenizer (``tokenizer_path`` or the folder's own) and that its ids
    fit the embedding. ``[]`` for a path that is not a local folder with a config.json (hub names, missing folders: the
    caller's own message). For a plugin's model role (a reward model, a teacher) as for the policy."""
    folder = Path(os.path.expanduser(path))
    if not (folder / "config.json").is_file():
        return []
    out = _config_problems(key, folder, trust_remote_code)
    if out:
        return out  # the tokenizer would fail on the same config.json: one message for one cause
    if weights:
        out = _weights_problems(key, folder)
    tok_key = tokenizer_key if tokenizer_path else key
    tok_folder = Path(os.path.expanduser(tokenizer_path)) if tokenizer_path else folder
    if tok_folder.is_dir() and not any(p.key == tok_key and "auto_map" in p.what for p in out):
        tok = _tokenizer_problems(tok_key, tok_folder, trust_remote_code)
        out += tok or _vocab_problems(key, folder, tok_key, tok_folder, trust_remote_code)
    return out


def model_folder_problems(config: Any, registry: Any = None) -> list[Problem]:
    """Config, remote code, weights and tokenizer of every local model folder the run loads."""
    out: list[Problem] = []
    trust = bool(get_key(config, "model.trust_remote_code"))
    random_init = bool(get_key(config, "model.random_init"))
    for key, path in _model_folders(config):
        folder = Path(os.path.expanduser(path))
        if not (folder / "config.json").is_file():
            continue  # missing folders are rl_core.plan.model_path's problem
        problems = _config_problems(key, folder, trust)
        if not problems and not (random_init and key == "model.path"):
            problems = _weights_problems(key, folder)
        out += problems
    tok_key = "model.tokenizer_path" if get_key(config, "model.tokenizer_path") else "model.path"
    tok_folder = Path(os.path.expanduser(get_key(config, tok_key) or ""))
    if str(tok_folder) not in ("", ".") and tok_folder.is_dir() and not any(p.key == tok_key and "auto_map" in p.what for p in out):
        out += _tokenizer_problems(tok_key, tok_folder, trust)
    return out


# ------------------------------------------------------------------ estimator on a probe batch
def estimator_problems(config: Any, registry: Any) -> list[Problem]:
    """The estimator returns ``(advantages, returns)`` of shape ``[B, T]`` on a probe batch of 2 groups."""
    import torch

    from rl_core.algorithms.advantages import EstimatorOutputError, check_estimator_output

    name = config.algorithm.adv_estimator
    try:
        card = registry.get("estimator", name)
        fn = card.load()
    except Exception:  # noqa: BLE001 - a name or import problem is reported by the name / factory checks
        return []
    n = max(2, int(config.rollout.n))
    b, t = 2 * n, 5
    gen = torch.Generator().manual_seed(0)
    mask = torch.ones(b, t)
    mask[::2, -2:] = 0  # some responses shorter than others
    rewards = torch.zeros(b, t)
    rewards[torch.arange(b), (mask.sum(-1) - 1).long()] = torch.rand(b, generator=gen)
    kwargs = dict(
        token_level_rewards=rewards, response_mask=mask, index=torch.arange(b) // n,
        values=torch.rand(b, t, generator=gen) if getattr(card, "needs_critic", False) else None,
        gamma=config.algorithm.gamma, lam=config.algorithm.lam,
        baseline_rewards=torch.rand(b, generator=gen) if getattr(card, "needs_greedy_baseline", False) else None,
        options={"norm_adv_by_std": config.algorithm.norm_adv_by_std_in_grpo, **config.algorithm.options},
    )
    if getattr(card, "log_probs", ()):  # per-token log-probs of the roles it reads (EstimatorCard.log_probs)
        kwargs["log_probs"] = {role: -torch.rand(b, t, generator=gen) for role in card.log_probs}
    try:
        with torch.no_grad():
            adv, ret = check_estimator_output(name, card, fn(**kwargs), rewards.shape)
    except EstimatorOutputError as exc:
        return [Problem(key="algorithm.adv_estimator", what=str(exc))]
    except Exception as exc:  # noqa: BLE001
        return [Problem(key="algorithm.adv_estimator", what=f"advantage estimator {name!r} ({card.factory}) fails on a probe batch of {b} responses x {t} tokens: {type(exc).__name__}: {exc}",
                        fix="fix the estimator, or its options in algorithm.options")]
    if not (torch.isfinite(adv).all() and torch.isfinite(ret).all()):
        return [Problem(key="algorithm.adv_estimator", what=f"advantage estimator {name!r} ({card.factory}) returns NaN / inf on a probe batch with finite rewards")]
    return []


# ------------------------------------------------------------------ data size
def _count_rows(path: str) -> int | None:
    p = Path(os.path.expanduser(path))
    try:
        if p.suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.ParquetFile(str(p)).metadata.num_rows
        if p.suffix == ".jsonl":
            with p.open("rb") as f:
                return sum(1 for line in f if line.strip())
        if p.suffix == ".json":
            data = json.loads(p.read_text())
            return len(data) if isinstance(data, list) else None
    except Exception:  # noqa: BLE001 - unreadable files are the data checks' to report
        return None
    return None


def data_size_problems(config: Any, registry: Any = None) -> list[Problem]:
    """The training set holds at least one batch of ``data.train_batch_size`` prompts."""
    files = list(config.data.train_files or [])
    if not files or getattr(getattr(config.data, "train_generator", None), "name", "") or getattr(getattr(config.data, "custom_cls", None), "path", None):  # a dataset class (rl-data's data.custom_cls): its own item count
        return []
    counts = [_count_rows(f) for f in files]
    if any(c is None for c in counts):
        return []
    rows, batch = sum(counts), config.data.train_batch_size
    gen = getattr(config.data, "gen_batch_size", None)  # dynamic sampling draws rounds of gen_batch_size prompts
    key = "data.gen_batch_size" if gen is not None and gen > batch else "data.train_batch_size"
    batch = max(batch, gen or 0)
    if rows >= batch:
        return []
    return [Problem(
        key=key, what=f"{batch} prompts per batch, but the training set ({', '.join(files)}) has {rows} row(s): not one batch",
        fix=f"set {key} to at most {rows} (and the mini-batch sizes to match), or add training data",
    )]


# ------------------------------------------------------------------ greedy groups
def greedy_group_problems(config: Any, registry: Any) -> list[Problem]:
    """Greedy sampling with n > 1 and a group estimator: identical samples, zero advantages, nothing learns."""
    r = config.rollout
    if r.do_sample or r.n <= 1:
        return []
    try:
        card = registry.get("estimator", config.algorithm.adv_estimator)
    except Exception:  # noqa: BLE001
        return []
    if not getattr(card, "needs_groups", False):
        return []
    return [Problem(
        key="rollout.do_sample",
        what=f"false (greedy decoding) with rollout.n={r.n} and the group estimator {config.algorithm.adv_estimator!r}: "
        "the n responses to a prompt are identical, so every advantage is 0 and nothing is learnt",
        fix="set rollout.do_sample=true (with rollout.temperature > 0, e.g. 1.0)",
    )]


# ------------------------------------------------------------------ NaN / inf in option dicts
def _leaves(value: Any, where: str, into_attrs: bool = False) -> Iterable[tuple[str, Any]]:
    """``(key, value)`` of every leaf under ``value`` (dicts and lists walked; attrs objects too with ``into_attrs``)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, f"{where}.{k}", into_attrs)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _leaves(v, f"{where}[{i}]", into_attrs)
    elif into_attrs and attrs.has(type(value)):
        for name, item in _members(value):
            yield from _leaves(item, f"{where}.{name}" if where else name, into_attrs)
    else:
        yield where, value


def _members(node: Any) -> Iterable[tuple[str, Any]]:
    """``(key, value)`` of an attrs config's fields, with packages' sections (``sections``) under their own keys."""
    for f in attrs.fields(type(node)):
        value = getattr(node, f.name)
        if f.name == "sections" and isinstance(value, Mapping):
            yield from value.items()
        else:
            yield f.name, value


def _non_finite(value: Any, where: str) -> Iterable[str]:
    return (w for w, v in _leaves(value, where) if isinstance(v, float) and not math.isfinite(v))


def non_finite_problems(config: Any, registry: Any = None) -> list[Problem]:
    """NaN / inf anywhere in the free-form dicts of the config (options, kwargs, engine arguments)."""
    out = []

    def walk(node: Any, prefix: str) -> None:
        for name, value in _members(node):
            key = f"{prefix}{name}"
            if attrs.has(type(value)):
                walk(value, key + ".")
            elif isinstance(value, dict):
                for where in _non_finite(value, key):
                    out.append(Problem(key=where, what="is NaN or infinite", fix="give a finite number (a NaN here would poison every step)"))

    walk(config, "")
    return out


def interpolation_problems(config: Any, registry: Any = None) -> list[Problem]:
    """A Hydra / OmegaConf interpolation (``${...}``) left in a value: it would be taken literally (a folder named so)."""
    return [Problem(key=where, what=f"is {text!r}: an interpolation (${{...}}) that nothing resolved; rl-core would take it literally",
                    fix="write the value itself (a verl launch with rl-verl installed resolves ${...} as verl does)")
            for where, text in _leaves(config, "", into_attrs=True) if isinstance(text, str) and "${" in text]


PROBES = (
    ("values", non_finite_problems),
    ("values", interpolation_problems),
    ("rules", greedy_group_problems),
    ("names", estimator_problems),
    ("files", model_folder_problems),
    ("files", data_size_problems),
)


@hookimpl
def rl_core_register_checks(register) -> None:
    for i, (stage, probe) in enumerate(PROBES):
        register(CheckCard(name=probe.__name__.removesuffix("_problems"), stage=stage, order=30 + i, factory=f"{__name__}:{probe.__name__}",
                           description=(probe.__doc__ or "").strip().splitlines()[0]))
