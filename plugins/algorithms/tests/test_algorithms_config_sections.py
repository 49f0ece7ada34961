"""rl-algorithms' config sections ``algorithm.filter_groups`` and ``reward.overlong_penalty`` (rl_algorithms.config,
ConfigSectionCards): read and checked as core's own sections when the package is installed, refused with
"pip install rl-algorithms" when it is not; core's data.gen_batch_size rule keeps its behaviour either way."""

from __future__ import annotations

import pytest
from rl_algorithms.config import FilterGroupsConfig, OverlongPenaltyConfig
from rl_core import plugins
from rl_core.config.load import config_to_dict, load_report
from rl_core.config.schema import RunConfig

DAPO = ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc", "algorithm.filter_groups.max_num_gen_batches=4",
        "reward.overlong_penalty.enable=true", "reward.overlong_penalty.buffer_length=16", "reward.overlong_penalty.penalty_factor=0.5"]


def _errors(loaded):
    return {p.key: p.render() for p in loaded.problems if p.severity == "error"}


def test_the_sections_are_read_checked_and_written_back():
    loaded = load_report("examples/quickstart.yaml", DAPO)
    assert not _errors(loaded)
    config = loaded.config
    assert config.algorithm.filter_groups == FilterGroupsConfig(enable=True, metric="acc", max_num_gen_batches=4)
    assert config.reward.overlong_penalty == OverlongPenaltyConfig(enable=True, buffer_length=16, penalty_factor=0.5)
    default = RunConfig()
    assert default.algorithm.filter_groups == FilterGroupsConfig() and default.reward.overlong_penalty == OverlongPenaltyConfig()
    data = config_to_dict(config)
    assert data["algorithm"]["filter_groups"]["metric"] == "acc" and data["reward"]["overlong_penalty"]["buffer_length"] == 16
    again = load_report(None, base=data).config
    assert again.algorithm.filter_groups == config.algorithm.filter_groups and again.reward.overlong_penalty == config.reward.overlong_penalty
    bad = _errors(load_report("examples/quickstart.yaml", ["algorithm.filter_groups.metrik=acc", "reward.overlong_penalty.buffer_length=0",
                                                           "algorithm.filter_groups.max_num_gen_batches=-1"]))
    assert "metric" in bad["algorithm.filter_groups.metrik"]  # the typo named with the key meant
    assert {"reward.overlong_penalty.buffer_length", "algorithm.filter_groups.max_num_gen_batches"} <= set(bad)


def test_gen_batch_size_without_dynamic_sampling_is_still_refused():
    assert "data.gen_batch_size" in _errors(load_report("examples/quickstart.yaml", ["data.train_batch_size=4", "data.gen_batch_size=8"]))
    assert "data.gen_batch_size" not in _errors(load_report("examples/quickstart.yaml", ["data.train_batch_size=4", "data.gen_batch_size=8", *DAPO[:2]]))


def test_without_the_package_the_keys_name_it(monkeypatch):
    monkeypatch.setenv(plugins.BLOCK_ENV, "rl-algorithms")
    try:
        plugins.get_registry(reload=True)
        for key in ("algorithm.filter_groups", "reward.overlong_penalty"):
            errors = _errors(load_report("examples/quickstart.yaml", [f"{key}.enable=true"]))
            assert "pip install rl-algorithms" in errors[key], errors
        with pytest.raises(AttributeError, match="filter_groups"):
            RunConfig().algorithm.filter_groups
        with pytest.raises(AttributeError, match="overlong_penalty"):
            RunConfig().reward.overlong_penalty
        loaded = load_report("examples/quickstart.yaml", ["data.train_batch_size=4", "data.gen_batch_size=8"])
        assert "data.gen_batch_size" in _errors(loaded)  # core's rule reads the absent section as "off"
    finally:
        monkeypatch.delenv(plugins.BLOCK_ENV)
        plugins.get_registry(reload=True)
    assert RunConfig().algorithm.filter_groups == FilterGroupsConfig()
