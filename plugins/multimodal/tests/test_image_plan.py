"""rl-multimodal through core's feature contract: the Plan holds its FeatureCard's object, the workers' engines get it
(the hf rollout's prefill with images), and rows with images without the package are an `rlcore check` problem naming
`pip install rl-multimodal`."""

from __future__ import annotations

import pytest
import yaml
from rl_core.cli.main import main
from rl_core.plugins import get_registry
from rl_core_testing.tiny_vlm import make_tiny_vlm_dir
from test_image_grpo import _config


def _without_the_package(monkeypatch):
    registry = get_registry()
    monkeypatch.setitem(registry.cards, "feature", {k: c for k, c in registry.cards["feature"].items() if k != "multimodal"})
    monkeypatch.setitem(registry.cards, "check", {k: c for k, c in registry.cards["check"].items() if c.provider.distribution != "rl-multimodal"})


def test_rows_with_images_without_the_package_name_it(tmp_path, monkeypatch, capsys):
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(_config(tmp_path, make_tiny_vlm_dir(tmp_path / "model"))))
    run = ["check", "--quiet", "--skip-device-check", str(tmp_path / "run.yaml")]
    assert main(run) == 0, capsys.readouterr().err
    _without_the_package(monkeypatch)
    assert main(run) == 1
    err = capsys.readouterr().err
    assert "data.image_key: the data's rows hold images ('images'): no feature named 'multimodal'" in err
    assert "pip install rl-multimodal" in err


def test_the_plan_hands_the_feature_to_the_engines(tmp_path):
    from rl_core.backends import WorkerContext
    from rl_core.config.load import load_config
    from rl_core.placement.worker import HybridWorker
    from rl_core.plan.checks import plan_for
    from rl_multimodal.feature import FEATURE

    (tmp_path / "run.yaml").write_text(yaml.safe_dump(_config(tmp_path, make_tiny_vlm_dir(tmp_path / "model"))))
    plan, problems = plan_for(load_config(str(tmp_path / "run.yaml")), devices=False)
    assert plan is not None, [p.render() for p in problems]
    assert plan.features["multimodal"] is FEATURE
    worker = HybridWorker(plan, WorkerContext())
    assert worker.rollout.context.features["multimodal"] is FEATURE and worker.actor.backend.context.features["multimodal"] is FEATURE
    with pytest.raises(LookupError, match="prompts with images needs the 'multimodal' feature"):
        WorkerContext().feature("multimodal", "prompts with images")


def test_the_hf_rollout_refuses_images_in_multi_turn_rollouts():
    """The hf rollout asks the feature for its side of a batch with images (``for_rollout``): multi-turn rollouts do not
    carry images yet, refused at run time too (rlcore check refuses them first)."""
    pytest.importorskip("rl_agent")
    from rl_core.config.load import load_config
    from rl_multimodal.feature import FEATURE

    assert FEATURE.for_rollout(load_config(None, [])) is FEATURE
    with pytest.raises(ValueError, match="multi-turn rollouts do not carry yet"):
        FEATURE.for_rollout(load_config(None, ["rollout.multi_turn.enable=true"]))
