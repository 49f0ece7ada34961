"""`rlcore check` probes of model-based rewards (the cards' checks and the plugin's probe), and the memory
estimate with a reward model (the cards' memory terms). The weights' checks are core's (tests/rewards/test_reward_mixing.py)."""

from __future__ import annotations

import torch
from rl_core.cards import Provider, RolloutCard
from rl_core.config.load import load_config
from rl_core.config.schema import RunConfig
from rl_core.plugins import Registry
from rl_reward_model.checks import reward_model_problems
from rl_reward_model.plugin import CLASSIFIER, JUDGE

from rm_fixtures import make_reward_model_dir, with_reward_model


def keys(problems, severity="error"):
    return {p.key: p for p in problems if p.severity == severity}


def rm_problems(**rm):
    """What `rlcore check` reports of the reward model: the plugin's probe, then the card's checks (the resolver's)."""
    from rl_core.plugins import get_registry

    registry = get_registry()
    config = with_reward_model(RunConfig(), enable=True, **rm)
    card = registry.get("reward_model", config.reward_model.name)
    return reward_model_problems(config, registry) + [p for check in card.checks for p in check(config)]


def test_missing_reward_model_is_named_with_the_fix(tmp_path):
    got = keys(rm_problems(model={"path": str(tmp_path / "nowhere")}))
    assert "neither a folder nor a model in the Hugging Face cache" in got["reward_model.model.path"].what
    assert "huggingface-cli download" in got["reward_model.model.path"].fix
    assert "is required" in keys(rm_problems())["reward_model.model.path"].what


def test_a_causal_lm_has_no_classification_head(tmp_path):
    from rl_core_testing.tiny_model import make_tiny_model_dir

    lm = make_tiny_model_dir(tmp_path / "lm")
    p = keys(rm_problems(model={"path": str(lm)}))["reward_model.model.path"]
    assert "LlamaForCausalLM" in p.what and "sequence-classification head" in p.what and "reward_model.name=judge" in p.fix
    assert "reward_model.model.path" not in keys(rm_problems(name="judge", model={"path": str(lm)}))  # fine as a judge


def test_a_tokenizer_without_chat_template(tmp_path):
    rm = make_reward_model_dir(tmp_path / "rm", chat_template=None)
    p = keys(rm_problems(model={"path": str(rm)}))["reward_model.model.chat_template"]
    assert "no chat template" in p.what and "reward_model.apply_chat_template=false" in p.fix
    assert rm_problems(model={"path": str(rm)}, apply_chat_template=False) == []
    assert rm_problems(model={"path": str(rm), "chat_template": "{{ messages[0]['content'] }}"}) == []


def test_judge_engine_not_installed_is_named_with_its_install_line(tmp_path, monkeypatch):
    from rl_core_testing.tiny_model import make_tiny_model_dir

    registry = Registry()
    card = RolloutCard(name="fastgen", factory="nowhere:factory", engine="fastgen-engine-not-installed", engine_install="pip install fastgen-engine==1.0")
    registry.add(card, Provider(distribution="rl-rollout-fastgen"))
    registry.add(JUDGE, Provider(distribution="rl-reward-model"))
    monkeypatch.setattr("rl_core.plugins.get_registry", lambda **_: registry)
    lm = make_tiny_model_dir(tmp_path / "lm")
    got = keys(rm_problems(name="judge", model={"path": str(lm)}, judge={"engine": "fastgen", "template": "{response} {answer}"}))
    assert "not installed" in got["reward_model.judge.engine"].what and got["reward_model.judge.engine"].fix == "pip install fastgen-engine==1.0"
    assert "{answer}" in got["reward_model.judge.template"].what
    got = keys(rm_problems(name="judge", model={"path": str(lm)}, judge={"engine": "vllmx"}))
    assert "vllmx" in got["reward_model.judge.engine"].what and "fastgen" in got["reward_model.judge.engine"].fix


def test_memory_estimate_counts_the_reward_model(tmp_path):
    from rl_core.config.normalize import normalize
    from rl_core.plan.features import load_features
    from rl_memory_estimate.estimate import estimate
    from rl_core.plugins import get_registry
    from rl_core_testing.tiny_model import make_tiny_model_dir

    policy = make_tiny_model_dir(tmp_path / "policy")
    rm = make_reward_model_dir(tmp_path / "rm", hidden=64, layers=4)
    base = load_config(overrides=[f"model.path={policy}", "trainer.device=cuda", "data.train_batch_size=4", "actor.ppo_mini_batch_size=2", "actor.ppo_micro_batch_size_per_gpu=2"])
    on = with_reward_model(base, enable=True, model={"path": str(rm)})
    pooled = with_reward_model(base, enable=True, model={"path": str(rm)}, n_gpus_per_node=1)
    features = load_features(get_registry(), [])  # the reward_model feature gives the estimate its terms
    est = {name: estimate(*normalize(c)[:2], available=80 * 2**30, reward_model=CLASSIFIER, features=features) for name, c in (("off", base), ("on", on), ("pool", pooled))}
    assert "reward model" not in est["off"].phases
    # colocated on a GPU: on the device only while scoring (offloaded), so it has a phase of its own over the states
    assert est["on"].phases["reward model"] > est["on"].phases["log-probs"] - est["on"].terms.get("logits (log-probs, chunked)", 0)
    assert est["on"].terms["reward model weights (on device while scoring)"] > 0
    assert "reward model (own devices)" in est["pool"].phases and "reward model" not in est["pool"].phases
    kept = with_reward_model(base, enable=True, model={"path": str(rm)}, offload=False)
    assert estimate(*normalize(kept)[:2], available=80 * 2**30, reward_model=CLASSIFIER, features=features).phases["update"] > est["on"].phases["update"]
    assert torch.tensor(list(est["on"].phases.values())).isfinite().all()


def test_rlcore_check_runs_the_probe_the_plugin_registers(tmp_path):
    """In a fresh process the entry point imports rl_reward_model.plugin, whose probe (the reward model's folder,
    then the judge's engine among the registry's rollout cards) `rlcore check` runs."""
    from tests.conftest import REPO, run_rlcore

    base = ["model.path=Qwen/Qwen2.5-0.5B", f"data.train_files={REPO / 'tests' / 'fixtures' / 'data' / 'tiny_gsm8k.jsonl'}", "rollout.n=1",
            "reward_model.enable=true"]
    res = run_rlcore("check", *base, "reward_model.name=judge", f"reward_model.model.path={tmp_path}", "reward_model.judge.engine=vllmx")
    assert res.returncode == 1 and "reward_model.judge.engine" in res.stdout + res.stderr and "vllmx" in res.stdout + res.stderr


def test_memory_terms_of_the_cards():
    """The cards' memory terms: a classifier's head is one row (not the LM head); a judge adds its engine's KV cache."""
    from types import SimpleNamespace

    from rl_reward_model.memory import classifier_memory, judge_memory

    shape = SimpleNamespace(params=1000, tied=False, vocab=10, hidden=4, layers=2, kv_heads=1, head_dim=4)
    cfg = with_reward_model(RunConfig(), enable=True, name="judge", micro_batch_size_per_gpu=2, max_length=8, judge={"max_new_tokens": 4})
    assert classifier_memory(cfg, shape, 2) == (1000 - 10 * 4, 0.0)
    assert classifier_memory(cfg, SimpleNamespace(**{**vars(shape), "tied": True}), 2) == (1000, 0.0)
    assert judge_memory(cfg, shape, 2) == (1000, 2 * (8 + 4) * 2 * 2 * 1 * 4 * 2)


def _truncate_weights(rm):
    w = rm / "model.safetensors"
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])


def _bad_config(rm):
    (rm / "config.json").write_text((rm / "config.json").read_text()[:-15])


def _small_vocab(rm):
    import json

    data = json.loads((rm / "config.json").read_text())
    data["vocab_size"] = 16  # fewer embedding rows than the tokenizer has tokens
    (rm / "config.json").write_text(json.dumps(data))


BROKEN = {  # issue 47: each passed `rlcore check` and then failed the run with a traceback
    "truncated weights": (_truncate_weights, {}, "reward_model.model.path", "truncated"),
    "config.json that does not parse": (_bad_config, {}, "reward_model.model.path", "does not parse"),
    "tokenizer ids beyond the vocabulary": (_small_vocab, {}, "reward_model.model.path", "16 embedding rows"),
    "an empty tokenizer_path": (lambda rm: None, {"tokenizer_path": ""}, "reward_model.model.tokenizer_path", "is not a folder"),
}


import pytest  # noqa: E402


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_reward_model_folders_are_refused_by_check(tmp_path, case):
    damage, extra, key, expected = BROKEN[case]
    rm = make_reward_model_dir(tmp_path / "rm")
    assert keys(rm_problems(model={"path": str(rm)})) == {}  # sound before the damage
    damage(rm)
    got = keys(rm_problems(model={"path": str(rm), **extra}))
    assert key in got and expected in got[key].what, {k: p.what for k, p in got.items()}
