"""Under the verl profile, keys a verl config leaves unset resolve to verl's defaults: compared with verl's own
generated default config (plugins/verl/tests/verl_scripts/verl_generated_ppo_trainer.yaml, vendored from verl)."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rl_core.config.load import config_to_dict, load_report
from rl_verl.keys import MAP, norm, rule_for, star_target
from rl_verl.profile import get_dotted

VERL = OmegaConf.load(Path(__file__).parent / "verl_scripts" / "verl_generated_ppo_trainer.yaml")
A = "actor_rollout_ref"
#: verl keys read with the same name under a section of ours (the prefix translation), compared one by one
SAME_NAME = [
    f"{A}.actor.{k}" for k in ("ppo_mini_batch_size", "ppo_epochs", "use_dynamic_bsz", "ppo_max_token_len_per_gpu", "shuffle", "clip_ratio",
                               "clip_ratio_c", "loss_agg_mode", "entropy_coeff", "use_kl_loss", "kl_loss_coef", "kl_loss_type",
                               "optim.lr", "optim.weight_decay", "optim.betas", "optim.lr_warmup_steps", "optim.lr_warmup_steps_ratio",
                               "optim.min_lr_ratio")
] + [f"{A}.rollout.{k}" for k in ("n", "temperature", "top_p", "top_k", "do_sample", "tensor_model_parallel_size", "gpu_memory_utilization",
                                   "calculate_log_probs")] + [
    f"{A}.model.{k}" for k in ("enable_gradient_checkpointing", "trust_remote_code")
] + [f"data.{k}" for k in ("max_prompt_length", "max_response_length", "train_batch_size", "filter_overlong_prompts", "shuffle", "prompt_key")
     ] + [f"algorithm.{k}" for k in ("gamma", "lam", "adv_estimator", "norm_adv_by_std_in_grpo", "use_kl_in_reward", "kl_penalty",
                                     "kl_ctrl.type", "kl_ctrl.kl_coef", "kl_ctrl.horizon", "kl_ctrl.target_kl")
          ] + [f"critic.{k}" for k in ("cliprange_value", "optim.lr")] + [
    f"trainer.{k}" for k in ("total_epochs", "save_freq", "test_freq", "val_before_train", "project_name", "experiment_name", "nnodes",
                             "n_gpus_per_node", "device")
] + ["reward.num_workers"]
#: verl keys with a rule of their own (renamed or converted)
RENAMED = [f"{A}.actor.grad_clip", f"{A}.actor.policy_loss.loss_mode", f"{A}.rollout.val_kwargs.temperature", f"{A}.rollout.val_kwargs.n",
           f"{A}.rollout.val_kwargs.top_p", f"{A}.rollout.val_kwargs.top_k", f"{A}.rollout.val_kwargs.do_sample", f"{A}.rollout.free_cache_engine",
           "trainer.max_actor_ckpt_to_keep", "trainer.resume_mode", "trainer.logger", "trainer.log_val_generations", f"{A}.nccl_timeout",
           "trainer.default_local_dir"]
PREFIX = {f"{A}.actor.": "actor.", f"{A}.rollout.": "rollout.", f"{A}.model.": "model."}


@pytest.fixture(scope="module")
def resolved():
    loaded = load_report(None, [f"{A}.model.path=m"], config_name="ppo_trainer")  # a verl launch that sets nothing else
    assert loaded.profile == "verl" and not [p for p in loaded.problems if p.severity == "error"]
    return config_to_dict(loaded.config, mask=False)


def _ours(key: str) -> tuple[str, object]:
    value = OmegaConf.select(VERL, key)
    value = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    rule = rule_for(key)
    if rule is not None and rule.kind == MAP:
        return star_target(rule, key), rule.convert(value) if rule.convert else value
    for old, new in PREFIX.items():
        if key.startswith(old):
            return new + key[len(old):], value
    return key, value


@pytest.mark.parametrize("key", SAME_NAME + RENAMED)
def test_unset_keys_take_verls_default(resolved, key):
    ours, want = _ours(key)
    if key == "trainer.logger":
        want = list(want)
    have = get_dotted(resolved, ours)
    assert norm(have) == norm(want) or have == want, f"{key} -> {ours}: rl-core {have!r}, verl {want!r}"


def test_rl_core_profile_keeps_rl_cores_defaults():
    loaded = load_report(None, [f"{A}.model.path=m"], profile="rl-core")
    assert loaded.config.trainer.max_ckpt_to_keep == 2 and not loaded.profile_defaults
    assert load_report(None, ["model.path=m"]).profile == "rl-core"  # rl-core's own spelling: rl-core's defaults
