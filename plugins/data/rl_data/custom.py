"""Rows from the user's own dataset class (verl's ``data.custom_cls``), built as verl builds it; each item (a row dict
as verl's RLHFDataset returns it) is validated like a row read from a file. The class is the user's code named in
their own config (the trust model of :mod:`rl_core.util.user_code`). rl-data's ``custom_dataset`` feature: core's data
sets call :func:`custom_rows` (the card's object, ``Plan.features``), ``rlcore check`` runs :func:`custom_class_problems`.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from rl_core.config.sections import flatten_sections
from rl_core.problems import Problem
from rl_core.util.user_code import load_user_object

#: the keyword arguments verl passes to a dataset class (verl/trainer/ppo/utils.py create_rl_dataset)
CONSTRUCTOR_ARGS = ("data_files", "tokenizer", "config", "processor", "max_samples")


def load_dataset_class(custom: Any) -> type:
    """The class ``custom.name`` from ``custom.path``; a :class:`DataError` naming the key when it is not a map-style dataset class."""
    from rl_core.data.rows import DataError  # rows reads numpy: the plugin registry's import of this module stays light

    cls = load_user_object(custom.path, custom.name, path_key="data.custom_cls.path", name_key="data.custom_cls.name", error=DataError,
                           prefix="_rl_core_custom_dataset_", kind="class", check=lambda o: isinstance(o, type))
    missing = [m for m in ("__getitem__", "__len__") if not callable(getattr(cls, m, None))]
    if missing:
        raise DataError(f"data.custom_cls.name: {custom.name!r} in {custom.path!r} has no {' / '.join(missing)}: rl-core reads a map-style "
                        "dataset (len(ds) items, ds[i] a row dict), as verl's RLHFDataset; subclass torch.utils.data.Dataset and define both")
    return cls


def constructor_problem(cls: type, custom: Any) -> str | None:
    """Why ``cls`` cannot be built with verl's keyword arguments, or None."""
    try:
        sig = inspect.signature(cls)
    except (TypeError, ValueError):
        return None
    try:
        sig.bind(**{a: None for a in CONSTRUCTOR_ARGS})
    except TypeError as exc:
        return (f"{custom.name}({', '.join(CONSTRUCTOR_ARGS)}) cannot be called as verl (and rl-core) build a dataset class: {exc}; "
                "give __init__ these keyword arguments (verl's RLHFDataset's signature)")
    return None


class Section(dict):
    """A config section as a dict whose keys also read as attributes (``config.get("prompt_key")``, ``config.max_prompt_length``)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def data_section(data: Any) -> Any:
    """The data section as verl hands it to a dataset class: an OmegaConf DictConfig where omegaconf is installed
    (the rl-verl plugin brings it; it is no dependency of rl-core), else a :class:`Section` (what verl's RLHFDataset reads)."""
    import attrs

    plain = flatten_sections(attrs.asdict(data))  # data.custom_cls (this package's section) in place, as the user writes it
    try:
        from omegaconf import OmegaConf  # optional (rl-verl's dependency)
    except ImportError:
        return Section({k: Section(v) if isinstance(v, dict) else v for k, v in plain.items()})
    return OmegaConf.create(plain)


def custom_rows(data: Any, tokenizer: Any, split: str, files: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows (validated, canonical) and their origins from the dataset class built over ``files``."""
    from rl_core.data.rows import DataError, validate_row

    custom = data.custom_cls
    cls = load_dataset_class(custom)
    why = constructor_problem(cls, custom)
    if why:
        raise DataError(f"data.custom_cls.name: {why}")
    limit = data.val_max_samples if split == "val" and data.val_max_samples is not None else -1
    config = data_section(data)
    try:
        ds = cls(data_files=list(files), tokenizer=tokenizer, config=config, processor=None, max_samples=limit)
        n = len(ds)
    except DataError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's class failing on its files is the finding
        raise DataError(f"data.custom_cls.name: building {custom.name} from {custom.path} over data.{split}_files {files} raised "
                        f"{type(exc).__name__}: {exc}") from exc
    label = f"data.custom_cls.name={custom.name} ({custom.path})"
    rows, origins = [], []
    for i in range(n):
        where = f"{label}, {split} item {i}"
        try:
            item = ds[i]
        except Exception as exc:  # noqa: BLE001
            raise DataError(f"{where}: reading it raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(item, Mapping):
            raise DataError(f"{where}: an item must be a row dict (raw_prompt or {data.prompt_key!r} chat messages, data_source, "
                            f"reward_model.ground_truth), got {type(item).__name__}")
        row = dict(item)
        if "raw_prompt" in row:  # verl's RLHFDataset: the messages built from prompt_key (what verl's rollout reads)
            row[data.prompt_key] = row["raw_prompt"]
        rows.append(validate_row(row, where, data.prompt_key))
        origins.append(where)
    if not rows:
        raise DataError(f"{label}: the class gave no {split} items from {files}")
    return rows, origins


def enabled(config: Any) -> bool:
    """On when the config names a dataset class (``data.custom_cls.path``)."""
    return bool(config.data.custom_cls.path)


def pair_problems(config: Any, registry: Any = None) -> list[Problem]:
    """data.custom_cls.path and .name come together (a rule of core's config until session 21)."""
    c = config.data.custom_cls
    if c.path and not c.name:
        return [Problem(key="data.custom_cls.name", what=f"is not set while data.custom_cls.path={c.path!r} is",
                        fix="name the dataset class defined in that file, e.g. data.custom_cls.name=MyDataset")]
    if c.name and not c.path:
        return [Problem(key="data.custom_cls.path", what=f"is not set while data.custom_cls.name={c.name!r} is",
                        fix="give the .py file that defines the class, e.g. data.custom_cls.path=my_dataset.py")]
    return []


def custom_class_problems(config: Any, registry: Any = None) -> list[Problem]:
    """The dataset class of data.custom_cls imports, is a map-style class and takes verl's constructor arguments
    (it is built, with the tokenizer, only when the run starts)."""
    from rl_core.data.rows import DataError

    c = config.data.custom_cls
    if not c.path or not c.name:
        return []
    try:
        cls = load_dataset_class(c)
    except DataError as exc:
        key, _, what = str(exc).partition(": ")
        return [Problem(key=key, what=what, fix=f"point data.custom_cls.path at a .py file that imports cleanly and defines the class {c.name!r}")]
    why = constructor_problem(cls, c)
    return [Problem(key="data.custom_cls.name", what=why, fix="accept data_files, tokenizer, config, processor, max_samples")] if why else []
