"""Checks that read the world, without heavy work: what `rlcore check` / `train` look at before building.

:func:`file_problems`: the data files exist, parse and their first rows validate; a feature's ``sample_rows`` hook
(rl-data's generators: their checks and a two-row sample) adds its problems and rows; the reward function accepts the
scorer's arguments and ``reward.kwargs`` names its parameters (:func:`rl_core.rewards.scoring.kwargs_problems`).
:func:`device_check`: the GPUs and cores the run asks for, and ``output_dir``. Nothing here loads a model or a tokenizer, or starts a process.
"""

from __future__ import annotations

import inspect
import json
import os
import tempfile
from typing import Any, Callable

from rl_core.cards import CheckCard, load_object
from rl_core.hookspecs import hookimpl
from rl_core.util.precision import slow_low_precision
from rl_core.problems import Problem
from rl_core.plugins import get_registry
from rl_core.rewards.scoring import RewardConfigError, kwargs_problems, load_custom_function
from rl_core.run_kind import RL, run_kind_name

FIRST_ROWS = 8  # rows of each data file checked
SCORER_ARGS = ("data_source", "solution_str", "ground_truth", "extra_info")


# ------------------------------------------------------------------------ data
def first_rows(path: str, n: int = FIRST_ROWS) -> list[Any]:
    """The first ``n`` raw rows of a .jsonl / .parquet file (reads no more than it needs)."""
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        with pq.ParquetFile(path) as f:
            for batch in f.iter_batches(batch_size=n):
                return batch.to_pylist()
        return []
    rows = []
    with open(path) as f:
        for i, line in enumerate(f):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except ValueError as e:
                raise ValueError(f"line {i + 1} is not valid JSON ({e})") from None
            if len(rows) >= n:
                break
    return rows


def _file_problems(key: str, path: str, prompt_key: str, own_reader: bool = False, image_key: str = "images", video_key: str = "videos") -> tuple[list[Problem], list[dict]]:
    """``own_reader``: the user's dataset class (data.custom_cls) reads the file, so only its existence is checked here."""
    from rl_core.data.dataset import DataError, validate_row

    if not os.path.exists(path):
        return [Problem(key=key, what=f"data file {path!r} does not exist (working directory {os.getcwd()})", fix=f"point {key} at a .jsonl or .parquet file; `rlcore data gsm8k` fetches GSM8K into data/gsm8k/, `rlcore data --help` lists the rest")], []
    if own_reader:
        return [], []
    if os.path.isdir(path):
        return [Problem(key=key, what=f"{path!r} is a folder, not a data file", fix=f"list the .jsonl / .parquet files in {key}")], []
    if not path.endswith((".parquet", ".jsonl", ".json")):
        return [Problem(key=key, what=f"{path!r}: unknown format", fix="use .jsonl (one JSON object per line) or .parquet")], []
    try:
        raw = first_rows(path)
    except Exception as exc:  # noqa: BLE001 - any reader error is the file's problem
        return [Problem(key=key, what=f"{path!r} cannot be read: {type(exc).__name__}: {exc}", fix="check the file (is it complete, and in the format its extension says?)")], []
    if not raw:
        return [Problem(key=key, what=f"{path!r} has no rows", fix="give a file with at least one row")], []
    rows = []
    for i, row in enumerate(raw):
        try:
            rows.append(validate_row(row, f"{path}, row {i}", prompt_key, image_key, video_key))
        except DataError as exc:
            return [Problem(key=key, what=str(exc), fix="fix the rows (see `rlcore data --help` for converters to verl's row format)")], rows
    return [], rows


def data_problems(config: Any, registry: Any) -> tuple[list[Problem], list[dict]]:
    """Problems with the train / val data, and the first rows read (for the reward checks)."""
    d = config.data
    problems: list[Problem] = []  # data.custom_cls's class: rl-data's check (rl_data.custom)
    rows: list[dict] = []
    for split in ("train", "val"):
        files = getattr(d, f"{split}_files")
        for i, path in enumerate(files if run_kind_name(config) == RL else ()):  # another run kind's check reads its files
            key = f"data.{split}_files" if len(files) == 1 else f"data.{split}_files[{i}]"
            found, got = _file_problems(key, str(path), d.prompt_key, own_reader=bool(getattr(getattr(d, "custom_cls", None), "path", None)), image_key=d.image_key, video_key=d.video_key)
            problems += found
            rows += got
    for card in registry.cards["feature"].values():  # rows made at start-up (rl-data's data.*_generator): their problems and a sample
        if "sample_rows" in card.hooks:
            found, got = load_object(card.hooks["sample_rows"])(config)
            problems, rows = problems + found, rows + got
    if not d.train_files and not getattr(getattr(d, "train_generator", None), "name", ""):  # rl-data's section
        problems.append(Problem(key="data.train_files", what="no training data: neither data.train_files nor data.train_generator is set", fix="set data.train_files=[train.parquet] (`rlcore data ...` makes one), or a data.train_generator"))
    return problems, rows


# ---------------------------------------------------------------------- reward
def signature_problem(fn: Callable, kwargs: dict[str, Any], key: str, label: str, names=SCORER_ARGS) -> Problem | None:
    """A problem when ``fn`` cannot be called with the scorer's keyword arguments plus ``kwargs``."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None  # builtins and C functions: nothing to check
    try:
        sig.bind(**{n: None for n in names}, **kwargs)
    except TypeError as exc:
        extra = f" plus reward.kwargs {sorted(kwargs)}" if kwargs else ""
        return Problem(key=key, what=f"{label} cannot be called as the scorer calls it ({', '.join(names)}{extra}): {exc}",
                       fix=f"give it the signature ({', '.join(names)}, **kwargs), or fix reward.kwargs")
    return None


def reward_problems(config: Any, registry: Any, rows: list[dict]) -> list[Problem]:
    r = config.reward
    if r.custom.path:
        if r.name:
            return [Problem(key="reward.name", what=f"{r.name!r} and reward.custom.path={r.custom.path!r} are both set", fix="set one: a registered reward, or your own function (reward.name=null)")]
        try:
            fn = load_custom_function(r.custom.path, r.custom.name)
        except RewardConfigError as exc:
            key, _, what = str(exc).partition(": ")
            key = key if key in ("reward.custom.name", "reward.custom.path") else "reward.custom.path"
            return [Problem(key=key, what=what or str(exc), fix=f"point reward.custom.path at a .py file that imports cleanly and defines {r.custom.name!r}")]
        p = signature_problem(fn, dict(r.kwargs), "reward.custom.name", f"{r.custom.name}() in {r.custom.path}")
        return [p] if p else kwargs_problems(fn, dict(r.kwargs), f"{r.custom.name}() in {r.custom.path}", SCORER_ARGS)
    cards = registry.cards["reward"]
    if r.name:
        card = cards.get(r.name)
        if card is None:
            return []  # the resolver reports unknown names
        return _card_problems(card, dict(r.kwargs), rows[0] if rows else None, check_keys=True)
    problems: list[Problem] = []
    from rl_core.rewards.manager import match_data_source

    for source in dict.fromkeys(row["data_source"] for row in rows):
        try:
            card = match_data_source(list(cards.values()), source)
        except RewardConfigError as exc:
            problems.append(Problem(key="reward.name", what=str(exc), fix="set reward.name to choose one"))
            break
        if card is None:
            installed = ", ".join(sorted(cards)) or "(none installed)"
            problems.append(Problem(key="reward.name", what=f"no installed reward scores data_source {source!r} (from the data's first rows)", fix=f"set reward.name to one of: {installed}; or reward.custom.path to your own function"))
            break
        problems += _card_problems(card, dict(r.kwargs), next(row for row in rows if row["data_source"] == source))
    return problems[:1]


def _card_problems(card: Any, kwargs: dict, row: dict | None = None, check_keys: bool = False) -> list[Problem]:
    """The card's scorer loads and accepts the arguments; one trial call on ``row`` with an empty response (registered
    rewards whose card allows it, ``RewardCard.trial``: a user's own function may call a service, so it is only checked
    by signature). ``check_keys``: the scorer of every sample (reward.name), whose parameters ``reward.kwargs`` must
    name."""
    try:
        fn = load_object(card.factory)
    except Exception as exc:  # noqa: BLE001 - a broken plugin is reported, not raised
        return [Problem(key="reward.name", what=f"reward {card.name!r} from {card.provider} cannot be loaded: {type(exc).__name__}: {exc}", fix="reinstall the plugin that provides it, or report this to its authors")]
    names = ("data_sources", "solution_strs", "ground_truths", "extra_infos") if card.batched else SCORER_ARGS
    p = signature_problem(fn, kwargs, "reward.kwargs", f"reward {card.name!r}", names)
    found = [p] if p else kwargs_problems(fn, kwargs, f"reward {card.name!r}", names) if check_keys else []
    if found or row is None or card.batched or not card.trial:
        return found
    try:
        fn(data_source=row["data_source"], solution_str="", ground_truth=row["ground_truth"], extra_info=row.get("extra_info") or {}, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the scorer's complaint about its options is the finding
        shown = f" with reward.kwargs={kwargs}" if kwargs else ""
        return [Problem(key="reward.kwargs" if kwargs else "reward.name", what=f"reward {card.name!r} failed on a trial call{shown} (the data's first row, an empty response): {type(exc).__name__}: {exc}", fix="fix reward.kwargs (see the reward's documentation: `rlcore plugins`)")]
    return []


# ---------------------------------------------------------------- environment
def runs_elsewhere(config: Any) -> bool:
    """True when the workers run on a Ray cluster's nodes, not on this machine (more than one node, or
    ``trainer.placement=ray`` with ``ray.address`` / ``$RAY_ADDRESS``): this machine's GPUs say nothing about theirs."""
    t = config.trainer
    if t.nnodes > 1:
        return True
    ray = getattr(config, "ray", None)  # rl-placement-ray's section (rl_core.config.sections): absent without it
    return t.placement == "ray" and bool((ray is not None and ray.address) or os.environ.get("RAY_ADDRESS"))


def device_problems(config: Any, cpu_count: int | None = None) -> list[Problem]:
    t = config.trainer
    out: list[Problem] = []
    # roles on devices of their own (critic / ref n_gpus_per_node) take more GPUs (processes on CPU) of this machine
    pools = {role: getattr(config, role).n_gpus_per_node for role in ("critic", "ref", "reward_model") if getattr(getattr(config, role, None), "n_gpus_per_node", None)}
    world = t.nnodes * t.n_gpus_per_node + sum(pools.values())
    if t.device == "cuda" and not runs_elsewhere(config):
        import torch

        if not torch.cuda.is_available():
            out.append(Problem(key="trainer.device", what="is 'cuda' but no CUDA GPU is visible to torch" + ("" if torch.version.cuda else f" (torch {torch.__version__} is a CPU build)"), fix="set trainer.device=cpu (or auto), or run on a machine with a GPU and a CUDA build of torch; to check a config meant for another machine here, `rlcore check --skip-device-check`"))
        elif t.nnodes == 1 and torch.cuda.device_count() < t.n_gpus_per_node + sum(pools.values()):
            n = torch.cuda.device_count()
            if pools:
                shares = " + ".join([f"trainer.n_gpus_per_node={t.n_gpus_per_node}"] + [f"{r}.n_gpus_per_node={g}" for r, g in pools.items()])
                out.append(Problem(key=f"{next(iter(pools))}.n_gpus_per_node", what=f"the run needs {shares} = {t.n_gpus_per_node + sum(pools.values())} GPUs but this machine has {n}",
                                   fix="lower the pools' sizes, or leave the roles in the actor's workers (remove <role>.n_gpus_per_node)"))
            else:
                out.append(Problem(key="trainer.n_gpus_per_node", what=f"is {t.n_gpus_per_node} but this machine has {n} GPU(s)", fix=f"set trainer.n_gpus_per_node to at most {n}; nearest valid value: {n}"))
    slow = None if runs_elsewhere(config) else slow_low_precision(config.model.dtype, t.device)
    if slow:
        out.append(Problem(key="model.dtype", severity="warning", what=slow, fix="set model.dtype=float32, or auto (bfloat16 where the hardware computes it, float32 elsewhere)"))
    cores = cpu_count or os.cpu_count() or 1
    if t.device == "cpu" and world > cores:
        out.append(Problem(key="trainer.n_gpus_per_node", severity="warning", what=f"{world} worker processes on {cores} CPU cores: they compete for the cores and each step is slower", fix=f"set trainer.n_gpus_per_node to at most {cores}"))
    busy = (world if t.device == "cpu" else 0) + config.reward.num_workers
    if config.reward.num_workers and busy > cores:
        out.append(Problem(key="reward.num_workers", severity="warning", what=f"{config.reward.num_workers} reward workers{f' + {world} training processes' if t.device == 'cpu' else ''} on {cores} CPU cores", fix=f"set reward.num_workers to at most {max(1, cores - (world if t.device == 'cpu' else 0))}"))
    return out


def output_problems(config: Any) -> list[Problem]:
    out_dir = os.path.abspath(os.path.expanduser(config.trainer.output_dir))
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        return [Problem(key="trainer.output_dir", what=f"{config.trainer.output_dir!r} is a file, not a folder", fix="point trainer.output_dir at a folder (it is created if missing)")]
    parent = out_dir
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.access(parent, os.W_OK):
        return [Problem(key="trainer.output_dir", what=f"{config.trainer.output_dir!r} cannot be written ({parent} is not writable)", fix="point trainer.output_dir at a writable folder")]
    try:  # os.access says yes to root everywhere: make (and remove) a folder where train would make its own
        os.rmdir(tempfile.mkdtemp(prefix=".rlcore-check-", dir=parent))
    except OSError as exc:
        return [Problem(key="trainer.output_dir", what=f"{config.trainer.output_dir!r} cannot be created: a folder in {parent} cannot be made "
                        f"({exc.strerror or exc})", fix="point trainer.output_dir at a folder on a writable disk")]
    if not config.trainer.resume and os.path.isdir(os.path.join(out_dir, "checkpoints")):
        import warnings

        from rl_core.checkpoints.store import CheckpointManager

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # half-written debris is reported by the run itself
            latest = CheckpointManager(os.path.join(out_dir, "checkpoints")).latest()
        if latest is not None:
            return [Problem(
                key="trainer.resume",
                what=f"is false but {config.trainer.output_dir!r} holds the checkpoints of an earlier run (latest: step {latest[0]})",
                why="a fresh start there would delete them as new ones are saved and replace the run's metrics",
                fix="start the new run in another folder (trainer.output_dir=...), continue that run (trainer.resume=true), or move the folder away",
            )]
    return []


_READ: list = []  # [(config, (problems, rows))]: the data rows of the plan being built, read once for every check


def _data_read(config: Any, registry: Any) -> tuple[list[Problem], list[dict]]:
    if not (_READ and _READ[0][0] is config):
        _READ[:] = [(config, data_problems(config, registry))]
    return _READ[0][1]


def data_rows(config: Any, registry: Any = None) -> list[dict]:
    """The first rows of the run's train / val data, read once per plan for every check that reads rows (a plugin's too);
    ``registry`` (default: the installed plugins') gives a generator card's rows."""
    return _data_read(config, registry if registry is not None else get_registry())[1]


def file_problems(config: Any, registry: Any) -> list[Problem]:
    """The ``files`` stage: data rows (read once, :func:`data_rows`), reward function, images without their package,
    the output folder."""
    data, rows = _data_read(config, registry)
    rewards = reward_problems(config, registry, rows) if run_kind_name(config) == RL else []  # another run kind scores nothing
    return [*data, *rewards, *feature_problems(config, registry, rows), *output_problems(config)]


def feature_problems(config: Any, registry: Any, rows: list[dict]) -> list[Problem]:
    """Rows with images need rl-multimodal (its own check, ``images``, reads them: a vision model, backends that carry them)."""
    if "multimodal" in registry.cards["feature"] or not any(r.get("images") for r in rows):
        return []
    return [Problem(key="data.image_key", what=f"the data's rows hold images ({config.data.image_key!r}): {registry.missing_message('feature', 'multimodal')}",
                    fix="pip install rl-multimodal, or use text-only rows")]


def device_check(config: Any, registry: Any) -> list[Problem]:
    """The ``device`` stage: this machine's GPUs and cores (`rlcore check --skip-device-check` leaves it out)."""
    return device_problems(config)


@hookimpl
def rl_core_register_checks(register) -> None:
    register(CheckCard(name="files", stage="files", order=10, factory="rl_core.plan.preflight:file_problems",
                       description="data rows, reward function, images without rl-multimodal, output folder"))
    register(CheckCard(name="devices", stage="device", order=10, factory="rl_core.plan.preflight:device_check",
                       description="GPUs, CPU cores, precision on this machine"))
