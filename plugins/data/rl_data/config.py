"""rl-data's config section ``data.custom_cls`` (a ConfigSectionCard: rl_core.config.sections), read and checked with
core's own sections; core's data sets read its ``path`` (getattr: absent when rl-data is not installed)."""

from __future__ import annotations

import attrs


@attrs.frozen(kw_only=True)
class CustomDatasetConfig:
    """The user's own dataset class (verl's data.custom_cls): ``name`` in the .py file ``path``, built as verl builds
    it (data_files, tokenizer, config, processor, max_samples); its items' chat messages and reward fields become the
    rows (rl_data.custom)."""

    path: str | None = None
    name: str | None = None
