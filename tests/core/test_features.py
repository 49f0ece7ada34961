"""The kernel's feature contract (rl_core.plan.features, FeatureCard) on its own, with a feature card made here (no
rl-lora needed): the plan loads every installed card once; the device estimate takes an enabled feature's actor terms
in place of a full fine-tune's; a named hook is found only while its feature is on; a card that does not load is a
problem naming it; a KNOWN_FEATURES key switched on with no card listing it names the package to install."""

from __future__ import annotations

from types import SimpleNamespace

import attrs
from rl_core.cards import FeatureCard, Provider
from rl_core.config.load import load_config
from rl_core.config.normalize import normalize
from rl_core.plan.features import Features, MemoryTerms, load_features, missing_feature_problems, resolve_features
from rl_core.plan.memory import ModelShape
from rl_memory_estimate.estimate import estimate

SHAPE = ModelShape(hidden=4, intermediate=8, layers=1, heads=2, kv_heads=1, head_dim=2, vocab=10, tied=False, qkv_bias=False, source="hand")


def frozen_enabled(config) -> bool:
    return config.model.lora_rank > 0


def frozen_terms(config, shape, S, c):
    return MemoryTerms(states={"frozen base": c * shape.params / S, "tiny adapters": 12 * 7}, update={"tiny adapter grads": 4 * 7}, trainable=7)


class Marker:
    pass


def _registry(*cards):
    return SimpleNamespace(cards={"feature": {c.name: c for c in cards}})


CARD = FeatureCard(name="frozen", factory=f"{__name__}:frozen_enabled", keys=("model.lora_rank",), memory=f"{__name__}:frozen_terms",
                   hooks={"rollout_adapters": f"{__name__}:Marker"}, provider=Provider(distribution="test-frozen"))


def test_an_enabled_feature_s_terms_replace_the_full_fine_tune_s_in_the_estimate():
    features = load_features(_registry(CARD), problems := [])
    assert problems == [] and [f.card.name for f in features.loaded] == ["frozen"]
    full_config, sizes, _ = normalize(load_config(None, ["model.path=unused", "trainer.device=cpu", "model.dtype=float32"]))
    on_config = attrs.evolve(full_config, model=attrs.evolve(full_config.model, lora_rank=2))
    full = estimate(full_config, sizes, shape=SHAPE, features=features)
    on = estimate(on_config, sizes, shape=SHAPE, features=features)
    P = SHAPE.params
    assert full.terms["actor parameters (fp32)"] == 4 * P and "frozen base" not in full.terms  # off: the kernel's own
    assert on.terms["frozen base"] == 4 * P and on.terms["tiny adapters"] == 84 and on.terms["tiny adapter grads"] == 28
    assert "actor parameters (fp32)" not in on.terms and "actor AdamW state" not in on.terms
    # the estimate without the plan's features counts a full fine-tune (core alone cannot know the feature)
    assert "actor parameters (fp32)" in estimate(on_config, sizes, shape=SHAPE).terms
    assert features.hook(on_config, "rollout_adapters") is Marker and features.hook(full_config, "rollout_adapters") is None
    assert Features().hook(on_config, "rollout_adapters") is None


def test_broken_and_missing_features_are_problems_naming_what_to_do():
    broken = attrs.evolve(CARD, name="broken", memory="no_such_module_xyz:terms")
    features, problems = resolve_features(load_config(None, ["model.path=unused"]), _registry(broken))
    (p,) = problems
    assert p.key == "feature.broken" and "test-frozen" in p.what and "no_such_module_xyz" in p.what and features.loaded == ()
    on = load_config(None, ["model.path=unused", "model.lora_rank=8"])
    (p,) = missing_feature_problems(on, Features())
    assert p.key == "model.lora_rank" and "is 8" in p.what and "pip install rl-lora" in p.fix and "model.lora_rank=0" in p.fix
    assert missing_feature_problems(on, load_features(_registry(CARD), [])) == []  # a card lists the key
    assert missing_feature_problems(load_config(None, ["model.path=unused"]), Features()) == []  # off: nothing needed
