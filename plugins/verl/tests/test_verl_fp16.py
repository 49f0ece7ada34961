"""verl's float16 keys (its fp16 recipes: rollout.dtype + the actor's megatron / fsdp dtype) -> model.dtype=float16
(float32 master weights, dynamic loss scaling: tests/core/test_loss_scale.py); bfloat16 values as before; every
disagreement refused by the key as written (rl-core trains and samples in one dtype)."""

from __future__ import annotations

import pytest

from rl_core.config.load import load_config, load_report

V = "actor_rollout_ref"
RECIPE = [f"{V}.rollout.dtype=float16", f"{V}.actor.megatron.dtype=float16"]  # verl-recipe dapo/test_dapo_8b_megatron_fp16.sh


def _errors(*overrides):
    return [p for p in load_report(None, list(overrides)).problems if p.severity == "error"]


@pytest.mark.parametrize("actor", [f"{V}.actor.megatron.dtype=float16", f"{V}.actor.fsdp_config.mixed_precision.param_dtype=fp16",
                                   f"{V}.actor.fsdp_config.dtype=float16", f"{V}.actor.megatron.dtype=half"])
def test_float16_on_both_sides_sets_model_dtype(actor):
    assert load_config(None, [f"{V}.rollout.dtype=fp16", actor]).model.dtype == "float16"


def test_the_recipes_keys_with_the_reference_and_critic_in_float16():
    cfg = load_config(None, [*RECIPE, f"{V}.ref.megatron.dtype=float16", "critic.megatron.dtype=fp16"])
    assert cfg.model.dtype == "float16"


def test_bfloat16_values_stay_as_before():
    plain = load_config(None, [f"{V}.rollout.n=2"]).model.dtype
    for keys in ([f"{V}.rollout.dtype=bfloat16", f"{V}.actor.megatron.dtype=bf16"], [f"{V}.actor.fsdp_config.mixed_precision.param_dtype=bf16"],
                 [f"{V}.rollout.dtype=auto", f"{V}.actor.fsdp_config.dtype=bfloat16"]):
        assert load_config(None, [f"{V}.rollout.n=2", *keys]).model.dtype == plain, keys


def test_one_side_in_float16_is_refused_by_the_key_written():
    (e,) = _errors(f"{V}.rollout.dtype=float16")
    assert e.key == f"{V}.rollout.dtype" and "actor computes in verl's default bfloat16" in e.what and f"{V}.actor.megatron.dtype" in e.fix
    (e,) = _errors(f"{V}.actor.megatron.dtype=float16")
    assert e.key == f"{V}.actor.megatron.dtype" and "sample in bfloat16" in e.what and e.fix == f"set {V}.rollout.dtype=float16 too"
    errors = _errors("critic.megatron.dtype=float16")  # neither the actor nor the rollout: both named
    assert [p.key for p in errors] == ["critic.megatron.dtype"] * 2


def test_a_bfloat16_key_beside_float16_is_refused():
    (e,) = _errors(*RECIPE, f"{V}.ref.megatron.dtype=bfloat16")
    assert e.key == f"{V}.ref.megatron.dtype" and "model.dtype is float16" in e.what and "one dtype" in e.what
    assert f"{V}.ref.megatron.dtype=float16" in e.fix


def test_a_later_model_dtype_overriding_float16_is_refused():
    errors = _errors(*RECIPE, "model.dtype=bfloat16")
    assert sorted(p.key for p in errors) == sorted([f"{V}.actor.megatron.dtype", f"{V}.rollout.dtype"])
    assert all("model.dtype is 'bfloat16'" in p.what for p in errors)


def test_other_dtypes_are_still_refused():
    (e,) = _errors(f"{V}.rollout.dtype=float32")
    assert e.key == f"{V}.rollout.dtype" and "a rollout engine dtype other than bfloat16 / float16" in e.what
    (e,) = _errors(f"{V}.actor.fsdp_config.model_dtype=fp16")  # parameters stored in float16: no float32 master copy
    assert "FSDP parameters kept in half precision" in e.what
