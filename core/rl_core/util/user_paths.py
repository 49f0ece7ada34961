"""``~`` in the config's paths, expanded once when the config is loaded, so `rlcore check` looks where the run writes."""

from __future__ import annotations

import os
from typing import Any

import attrs

#: keys holding paths; ``~`` in them is expanded when the config is loaded
PATH_KEYS = ("trainer.output_dir", "model.path", "model.tokenizer_path", "reward.custom.path", "critic.model.path", "ref.model.path")
PATH_LIST_KEYS = ("data.train_files", "data.val_files")


def get_key(config: Any, dotted: str) -> Any:
    """The value at ``dotted`` (``model.path``) of an attrs config tree, None where a part is missing."""
    node = config
    for part in dotted.split("."):
        node = getattr(node, part, None)
        if node is None:
            return None
    return node


def evolve_key(config: Any, dotted: str, value: Any) -> Any:
    """``config`` with ``dotted`` set to ``value``: through core's fields and packages' sections (``sections``) alike."""
    head, _, rest = dotted.partition(".")
    new = value if not rest else evolve_key(getattr(config, head), rest, value)
    if head in attrs.fields_dict(type(config)):
        return attrs.evolve(config, **{head: new})
    return attrs.evolve(config, sections={**config.sections, head: new})


def section_enabled(config: Any, key: str) -> bool:
    """``<key>.enable`` of a section a package adds (``reward_model``); False while no installed package adds it."""
    return bool(getattr(getattr(config, key, None), "enable", False))


def _expand(path: Any) -> Any:
    return os.path.expanduser(path) if isinstance(path, str) and path.startswith("~") else path


def expand_user_paths(config: Any) -> Any:
    """``config`` with ``~`` / ``~user`` expanded in every path key, as the run reads and writes them."""
    for key in PATH_KEYS:
        value = get_key(config, key)
        if isinstance(value, str) and value.startswith("~"):
            config = evolve_key(config, key, _expand(value))
    for key in PATH_LIST_KEYS:
        value = get_key(config, key)
        if isinstance(value, (list, tuple)) and any(isinstance(v, str) and v.startswith("~") for v in value):
            config = evolve_key(config, key, type(value)(_expand(v) for v in value))
    return config
