"""rl-data's config sections (ConfigSectionCards: rl_core.config.sections), read and checked with core's own sections:
``data.custom_cls`` (core's data sets read its ``path``) and ``data.train_generator`` / ``data.val_generator`` (core reads
their ``name``); getattr in core: absent when rl-data is not installed."""

from __future__ import annotations

from typing import Any

import attrs
from rl_core.config.schema import pos


@attrs.frozen(kw_only=True)
class CustomDatasetConfig:
    """The user's own dataset class (verl's data.custom_cls): ``name`` in the .py file ``path``, built as verl builds
    it (data_files, tokenizer, config, processor, max_samples); its items' chat messages and reward fields become the
    rows (rl_data.custom)."""

    path: str | None = None
    name: str | None = None


@attrs.frozen(kw_only=True)
class GeneratorConfig:
    """A dataset generated offline at start-up (e.g. reasoning-gym), instead of files (rl_data.generators); null or
    ``name: ''``: none."""

    name: str = ""  # '' for none, else a generator of rl_data.generators.GENERATORS, e.g. "reasoning_gym"
    dataset: str = ""  # e.g. "basic_arithmetic"
    size: int = pos(1000)
    seed: int = 0
    kwargs: dict[str, Any] = attrs.field(factory=dict)
    system_prompt: str | None = None
