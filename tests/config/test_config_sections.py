"""A package's config section (ConfigSectionCard, rl_core.config.sections) is read, checked, written and set like
core's own sections, at the top level and under one of core's sections."""

from __future__ import annotations

import pickle

import attrs
import pytest

from rl_core import plugins
from rl_core.cards import ConfigSectionCard, Provider
from rl_core.config.dialect import is_ours
from rl_core.config.load import config_to_dict, load_report
from rl_core.config.schema import RunConfig, choice, num
from rl_core.hookspecs import hookimpl
from rl_core.util.user_paths import evolve_key


@attrs.frozen(kw_only=True)
class Widget:
    size: int = num(3, ge=1, hint="widgets, e.g. 3")
    mode: str = choice("fast", ("fast", "slow"))
    path: str | None = None


@attrs.frozen(kw_only=True)
class Knob:
    turns: float = 0.5


class _Plugin:
    @staticmethod
    @hookimpl
    def rl_core_register_config_sections(register):
        register(ConfigSectionCard(name="widget", factory=Widget))
        register(ConfigSectionCard(name="rollout.knob", factory=Knob))


@pytest.fixture
def installed():
    yield plugins.get_registry(extra=[(_Plugin, Provider(distribution="rl-widget"))])
    plugins.get_registry(reload=True)


def _errors(loaded):
    return [p for p in loaded.problems if p.severity == "error"]


def test_sections_are_read_with_defaults_and_as_attributes(installed):
    loaded = load_report("examples/quickstart.yaml", ["widget.size=7", "rollout.knob.turns=2"])
    assert not _errors(loaded)
    config = loaded.config
    assert config.widget == Widget(size=7) and config.rollout.knob == Knob(turns=2.0)
    default = load_report("examples/quickstart.yaml").config
    assert default.widget == Widget() and default.rollout.knob == Knob()
    assert RunConfig().widget == Widget()  # a config built in code has them too
    assert is_ours("widget.size") and is_ours("rollout.knob.turns") and not is_ours("widget.sizes")


def test_section_keys_are_checked_as_core_keys_are(installed):
    loaded = load_report("examples/quickstart.yaml", ["widget.sise=7", "widget.mode=medium", "widget.size=0", "rollout.knob=3"])
    by_key = {p.key: p.render() for p in _errors(loaded)}
    assert "widget.sise" in by_key and "size" in by_key["widget.sise"]  # the typo named
    assert "widget.mode" in by_key and "fast" in by_key["widget.mode"]
    assert "widget.size" in by_key
    assert "rollout.knob" in by_key and "section" in by_key["rollout.knob"]


def test_written_config_reads_back_the_same(installed):
    config = load_report("examples/quickstart.yaml", ["widget.size=5", "widget.path=/tmp/w", "rollout.knob.turns=1.5"]).config
    data = config_to_dict(config)
    assert data["widget"] == {"size": 5, "mode": "fast", "path": "/tmp/w"} and data["rollout"]["knob"] == {"turns": 1.5}
    assert "sections" not in data and "sections" not in data["rollout"]
    again = load_report(None, base=data)
    assert not _errors(again) and again.config.widget == config.widget and again.config.rollout.knob == config.rollout.knob
    assert pickle.loads(pickle.dumps(config)) == config


def test_evolve_key_sets_a_section_value(installed):
    config = load_report("examples/quickstart.yaml").config
    changed = evolve_key(evolve_key(config, "widget.size", 9), "rollout.knob.turns", 4.0)
    assert changed.widget.size == 9 and changed.rollout.knob.turns == 4.0 and config.widget.size == 3
    assert changed.rollout.n == config.rollout.n and evolve_key(config, "model.path", "x").model.path == "x"


def test_a_section_no_package_provides(monkeypatch):
    monkeypatch.setitem(plugins.KNOWN_DISTRIBUTIONS["section"], "widget", "rl-widget")
    text = "\n".join(p.render() for p in _errors(load_report("examples/quickstart.yaml", ["widget.size=7"])))
    assert "pip install rl-widget" in text
    with pytest.raises(AttributeError, match="widget"):
        RunConfig().widget
