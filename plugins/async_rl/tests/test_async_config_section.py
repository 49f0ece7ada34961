"""rl-async's config section ``async`` (rl_async.config, a ConfigSectionCard): read and checked as core's own sections
when the package is installed (``config.async_``), refused with "pip install rl-async" when it is not; its checks
(the profiler with bounded staleness) run in the plan's checks."""

from __future__ import annotations

import pytest
from rl_async.config import AsyncConfig
from rl_core import plugins
from rl_core.config.load import config_to_dict, load_report
from rl_core.config.schema import RunConfig
from rl_core.plan.checks import plan_for
from rl_core_testing.tiny_run import write_tiny_run


def _errors(loaded):
    return {p.key: p.render() for p in loaded.problems if p.severity == "error"}


def test_the_section_is_read_checked_and_written_back():
    loaded = load_report("examples/quickstart.yaml", ["async.max_staleness=2", "async.on_stale=wait", "async.overlap_sync=false"])
    assert not _errors(loaded)
    assert loaded.config.async_ == AsyncConfig(max_staleness=2, on_stale="wait", overlap_sync=False)
    assert load_report("examples/quickstart.yaml").config.async_ == AsyncConfig() and RunConfig().async_ == AsyncConfig()
    data = config_to_dict(loaded.config)
    assert data["async"]["max_staleness"] == 2 and "async_" not in data
    assert load_report(None, base=data).config.async_ == loaded.config.async_
    bad = _errors(load_report("examples/quickstart.yaml", ["async.max_stalenes=1", "async.on_stale=later", "async.bucket_mb=0"]))
    assert "max_staleness" in bad["async.max_stalenes"]  # the typo named with the key meant
    assert "drop" in bad["async.on_stale"] and "async.bucket_mb" in bad


def test_without_the_package_the_keys_name_it(monkeypatch):
    monkeypatch.setenv(plugins.BLOCK_ENV, "rl-async")
    try:
        plugins.get_registry(reload=True)
        errors = _errors(load_report("examples/quickstart.yaml", ["async.max_staleness=1"]))
        assert "pip install rl-async" in errors["async"], errors  # the section named, and its package
        with pytest.raises(AttributeError, match="async_"):
            RunConfig().async_
        assert load_report("examples/quickstart.yaml").config  # a config without the section reads as before
    finally:
        monkeypatch.delenv(plugins.BLOCK_ENV)
        plugins.get_registry(reload=True)
    assert RunConfig().async_ == AsyncConfig()


def test_the_profiler_with_bounded_staleness_is_refused_by_the_plan_checks(tmp_path):
    def errors(**overrides):
        config = load_report(write_tiny_run(tmp_path, **overrides)).config
        return [p.key for p in plan_for(config, devices=False)[1] if p.severity == "error"]

    profiled = dict(profiler__tool="torch", profiler__steps=[1], rollout__n_gpus_per_node=1)
    assert "profiler.tool" in errors(**profiled, async__max_staleness=1)
    assert "profiler.tool" not in errors(**profiled)
