"""Names are resolved once: the Stack carries the loaded estimator / policy-loss / reward functions; a factory path
that does not import is a check-time error naming the card and its distribution; train.name comes from the cards."""

from __future__ import annotations

import pickle

import attrs
from rl_core.cards import EstimatorCard, PolicyLossCard, Provider, TrainCard
from rl_core.config.load import load_config
from rl_core.plugins import Registry, get_registry
from rl_core.plan.resolver import resolve
from rl_core_testing.tiny_run import write_tiny_run


def _registry(**extra) -> Registry:
    """The installed registry with cards added or replaced (``kind=[card, ...]``)."""
    base = get_registry()
    cards = {kind: dict(table) for kind, table in base.cards.items()}
    for kind, added in extra.items():
        for card in added:
            cards[kind][card.name] = card
    return attrs.evolve(base, cards=cards)


def _minimal_train() -> TrainCard:
    return TrainCard(name="minimal", factory="rl_core_testing.minimal_backend:MinimalBackend", provider=Provider(distribution="rl-core"))


def _config(tmp_path, **kw):
    return load_config(write_tiny_run(tmp_path, train__name="minimal", **kw))


def test_the_stack_carries_the_loaded_functions_and_pickles(tmp_path):
    from rl_core.algorithms.advantages import grpo

    stack, problems = resolve(_config(tmp_path), _registry(train=[_minimal_train()]))
    assert stack is not None, [p.render() for p in problems]
    assert stack.estimator_fn is grpo and stack.estimator_fn is stack.estimator.load()
    assert stack.policy_loss_fn is stack.policy_loss.load()
    # the reward manager matches data sources against the cards the resolver saw (no registry lookup later)
    assert {c.name for c in stack.reward_cards} == set(get_registry().cards["reward"])
    again = pickle.loads(pickle.dumps(stack))  # sent to worker processes as is
    assert again.estimator_fn is grpo and again.policy_loss_fn is stack.policy_loss_fn


def test_a_bad_estimator_or_loss_factory_is_a_check_error_naming_card_and_distribution(tmp_path):
    bad_est = EstimatorCard(name="grpo", factory="my_pkg.adv:grpo_typo", needs_groups=True, provider=Provider(distribution="my-dist", version="1.2"))
    bad_loss = PolicyLossCard(name="vanilla", factory="rl_core.algorithms.policy_loss:no_such_loss", provider=Provider(distribution="other-dist"))
    stack, problems = resolve(_config(tmp_path), _registry(train=[_minimal_train()], estimator=[bad_est], policy_loss=[bad_loss]))
    assert stack is None
    by_key = {p.key: p.render() for p in problems if p.severity == "error"}
    assert "'grpo'" in by_key["algorithm.adv_estimator"] and "my-dist 1.2" in by_key["algorithm.adv_estimator"]
    assert "my_pkg.adv:grpo_typo" in by_key["algorithm.adv_estimator"]
    assert "other-dist" in by_key["actor.policy_loss"] and "no_such_loss" in by_key["actor.policy_loss"]


def test_a_train_factory_module_that_is_not_installed_is_a_check_error(tmp_path):
    ghost = TrainCard(name="minimal", factory="not_installed_pkg.engine:Backend", provider=Provider(distribution="ghost-dist"))
    stack, problems = resolve(_config(tmp_path), _registry(train=[ghost]))
    assert stack is None
    msg = next(p.render() for p in problems if p.key == "train.name")
    assert "not_installed_pkg.engine" in msg and "ghost-dist" in msg


def test_a_train_factory_attribute_typo_is_a_check_error_without_importing_the_engine(tmp_path, monkeypatch):
    heavy = tmp_path / "heavy_engine_pkg"
    heavy.mkdir()
    (heavy / "__init__.py").write_text("")
    (heavy / "engine.py").write_text("raise RuntimeError('the check imported the engine')\nclass Backend:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def card(factory):
        return TrainCard(name="minimal", factory=factory, provider=Provider(distribution="typo-dist"))

    stack, problems = resolve(_config(tmp_path), _registry(train=[card("heavy_engine_pkg.engine:Backendd")]))
    assert stack is None
    msg = next(p.render() for p in problems if p.key == "train.name")
    assert "'minimal'" in msg and "typo-dist" in msg and "defines no 'Backendd'" in msg
    stack, problems = resolve(_config(tmp_path), _registry(train=[card("heavy_engine_pkg.engine:Backend")]))
    assert stack is not None, [p.render() for p in problems]  # the right name passes, and nothing was imported


def test_factory_source_reading(tmp_path, monkeypatch):
    from rl_core.plan.factory_paths import module_binds

    pkg = tmp_path / "fake_engine_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .impl import Built as Exported\n")
    (pkg / "impl.py").write_text(
        "import os\ntry:\n    import fast as accel\nexcept ImportError:\n    accel = None\n"
        "if os.name:\n    def build(config, context):\n        pass\nclass Built:\n    pass\nALIAS: type = Built\n"
    )
    (pkg / "star.py").write_text("from os.path import *\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert [module_binds("fake_engine_pkg.impl", n) for n in ("build", "Built", "ALIAS", "accel", "os", "Bulit")] == [True] * 5 + [False]
    assert module_binds("fake_engine_pkg", "Exported") and module_binds("fake_engine_pkg", "impl")  # a submodule counts
    assert module_binds("fake_engine_pkg.star", "anything") is None  # a star import: not judged


def test_train_name_defaults_to_the_card_that_says_so(tmp_path):
    cfg = _config(tmp_path)
    cfg = attrs.evolve(cfg, train=attrs.evolve(cfg.train, name=None))
    only = _registry()
    only = attrs.evolve(only, cards={**only.cards, "train": {"minimal": _minimal_train()}})
    stack, _ = resolve(cfg, only)
    assert stack is not None and stack.config.train.name == "minimal"  # the only one installed
    two = attrs.evolve(only, cards={**only.cards, "train": {"minimal": _minimal_train(), "other": TrainCard(name="other", factory="x:y")}})
    stack, problems = resolve(cfg, two)
    assert stack is None and any(p.key == "train.name" and "minimal, other" in p.render() for p in problems)
    chosen = attrs.evolve(two, cards={**two.cards, "train": {"minimal": attrs.evolve(_minimal_train(), default=True), "other": TrainCard(name="other", factory="x:y")}})
    stack, _ = resolve(cfg, chosen)
    assert stack is not None and stack.config.train.name == "minimal"


def test_rlcore_train_builds_the_plan_once_and_runs_each_check_once(tmp_path, monkeypatch):
    """`rlcore train` resolves the names once, runs the schema's rules once and every registered check once (the
    rollout correction's too, rl-rollout-correction's), and hands that one plan to the loop (which checks nothing again)."""
    from rl_core.cli.main import main
    from rl_core.config import load as load_mod, normalize as normalize_mod, rules
    from rl_core.plan import checks
    from rl_core.trainer import loop

    calls: dict[str, int] = {}

    def counted(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] = calls.get(name, 0) + 1
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(checks, "resolve", counted("resolve", checks.resolve))
    monkeypatch.setattr(load_mod, "check_config", counted("check_config", rules.check_config))
    monkeypatch.setattr(normalize_mod, "check_config", counted("check_config", rules.check_config))
    real_checks = checks.registered_checks

    def registered(registry):
        return [(stage, name, counted(f"check {name}", fn)) for stage, name, fn in real_checks(registry)]

    monkeypatch.setattr(checks, "registered_checks", registered)
    seen = []
    monkeypatch.setattr(loop, "train", lambda plan, **kw: seen.append(plan) or {})
    config = write_tiny_run(tmp_path, trainer__output_dir=str(tmp_path / "out"))
    assert main(["train", str(config), "--no-progress"]) == 0
    assert len(seen) == 1 and seen[0].config.trainer.output_dir == str(tmp_path / "out")
    names = [n for n in calls if n.startswith("check ")]
    assert len(names) >= 8, calls  # the kernel's own checks: files, devices, model_path, probes, lora, long context
    assert calls == {**{n: 1 for n in names}, "resolve": 1, "check_config": 1}, calls
    assert any(n.startswith("check rollout_correction (") for n in names), names  # the package's check, once
