"""verl's command line through rl-core: Hydra's override grammar, --config-path / --config-name, engine
selection, CISPO / SAPO as verl writes them, refusals and hints naming the key as written."""

from __future__ import annotations

import pytest

from rl_core.cli.main import main
from rl_core.config.load import load_config, load_report

V = "actor_rollout_ref"


def _errors(*overrides, **kw):
    return [p for p in load_report(None, list(overrides), **kw).problems if p.severity == "error"]


def test_hydra_add_force_add_and_delete():
    assert load_config(None, [f"+{V}.actor.ppo_epochs=3"]).actor.ppo_epochs == 3
    assert load_config(None, [f"++{V}.rollout.temperature=0.7"]).rollout.temperature == 0.7
    # ~key: back to the default (here verl's profile default, as verl's Hydra would)
    assert load_config(None, ["trainer.total_epochs=5", "~trainer.total_epochs"], profile="rl-core").trainer.total_epochs == 1
    cfg = load_config(None, ["data.train_files=['a.parquet', 'b.parquet']", "trainer.logger=[\"console\",\"wandb\"]", f"{V}.actor.optim.lr=1e-6"])
    assert cfg.data.train_files == ["a.parquet", "b.parquet"] and cfg.trainer.loggers == ["console", "wandb"] and cfg.actor.optim.lr == 1e-6


def test_rl_cores_own_override_forms_still_read():
    # what Hydra's grammar refuses but rl-core always read: `~` in a value, '=' in a value, a `*` key
    cfg = load_config(None, ["trainer.output_dir=/tmp/x/~y", "reward.kwargs.url=http://h:1/p?q=1", "reward.kwargs.*=1"])
    assert cfg.trainer.output_dir == "/tmp/x/~y" and cfg.reward.kwargs == {"url": "http://h:1/p?q=1", "*": 1}


def test_hydra_syntax_errors_name_the_override():
    # a verl launch (--profile verl) reads its overrides by Hydra's grammar
    (p,) = _errors("data.train_batch_size=[1,", profile="verl")
    assert p.key == "data.train_batch_size" and "'data.train_batch_size=[1,' is not a valid override (Hydra" in p.what
    (p,) = _errors("trainer.logger=console,wandb", profile="verl")
    assert "sweep" in p.what and "[a,b]" in p.fix


@pytest.mark.parametrize("overrides, name, tp, pp", [
    (["model_engine=megatron", f"{V}.actor.megatron.tensor_model_parallel_size=2", f"{V}.actor.megatron.pipeline_model_parallel_size=2",
      f"{V}.ref.megatron.tensor_model_parallel_size=2", f"{V}.ref.megatron.pipeline_model_parallel_size=2"], "megatron", 2, 2),
    ([f"actor@{V}.actor=megatron_actor"], "megatron", 1, 1),
    ([f"{V}.actor.strategy=fsdp2", f"{V}.ref.strategy=fsdp2"], "fsdp", 1, 1),
    (["model_engine=dp"], "fsdp", 1, 1),
])
def test_engine_selection(overrides, name, tp, pp):
    cfg = load_config(None, overrides)
    assert (cfg.train.name, cfg.train.tensor_model_parallel_size, cfg.train.pipeline_model_parallel_size) == (name, tp, pp)


def test_megatron_job_is_never_turned_into_fsdp():
    # a verl engine rl-core lacks, a reference model on another layout: refused by name (expert parallelism on the fsdp
    # backend: plugins/verl/tests/test_verl_moe.py)
    for overrides, key in [(["model_engine=torchtitan"], "model_engine"),
                           (["model_engine=megatron", f"{V}.actor.megatron.tensor_model_parallel_size=2", f"{V}.ref.megatron.tensor_model_parallel_size=4"],
                            f"{V}.ref.megatron.tensor_model_parallel_size")]:
        errs = _errors(*overrides)
        assert [p.key for p in errs] == [key], [p.render() for p in errs]


def test_config_name_of_verls_own_and_of_a_users_file(tmp_path):
    assert load_config(None, [], config_path="config", config_name="ppo_megatron_trainer.yaml").train.name == "megatron"
    (tmp_path / "base.yaml").write_text("actor_rollout_ref:\n  rollout:\n    n: 6\n")
    (tmp_path / "mine.yaml").write_text(
        "defaults:\n  - ppo_trainer\n  - base\n  - actor@actor_rollout_ref.actor: megatron_actor\n  - _self_\n"
        "data:\n  train_batch_size: 64\nactor_rollout_ref:\n  actor:\n    ppo_mini_batch_size: ${data.train_batch_size}\n")
    loaded = load_report(None, ["data.max_prompt_length=256"], config_path=str(tmp_path), config_name="mine")
    cfg = loaded.config
    assert (cfg.rollout.n, cfg.data.train_batch_size, cfg.actor.ppo_mini_batch_size, cfg.train.name, cfg.data.max_prompt_length) == (6, 64, 64, "megatron", 256)
    assert loaded.profile == "verl" and cfg.trainer.max_ckpt_to_keep is None  # verl's default
    (p,) = _errors(config_path=str(tmp_path), config_name="nope")
    assert p.key == "--config-name" and "nope.yaml" in p.what


def test_cispo_and_sapo_as_verl_writes_them():
    cfg = load_config(None, [f"{V}.actor.policy_loss.loss_mode=cispo", f"{V}.actor.clip_ratio_low=10", f"{V}.actor.clip_ratio_high=0.2"])
    assert (cfg.actor.policy_loss, cfg.actor.clip_ratio_low) == ("cispo", 10.0)
    (p,) = _errors(f"{V}.actor.clip_ratio_low=10")  # any other loss: the lower bound 1 - 10 is meaningless
    assert p.key == f"{V}.actor.clip_ratio_low" and "rl-core's actor.clip_ratio_low" in p.what
    cfg = load_config(None, [f"{V}.actor.policy_loss.loss_mode=sapo", f"+{V}.actor.policy_loss.tau_pos=1.0", f"+{V}.actor.policy_loss.tau_neg=1.05"])
    assert cfg.actor.policy_loss == "sapo" and cfg.actor.policy_loss_options == {"tau_pos": 1.0, "tau_neg": 1.05}


@pytest.mark.parametrize("override, target, value", [
    ("trainer.resume_mode=auto", "trainer.resume", True),
    ("trainer.resume_mode=disable", "trainer.resume", False),
    (f"{V}.rollout.val_kwargs.do_sample=True", "rollout.val_do_sample", True),
    (f"{V}.rollout.val_kwargs.top_p=0.7", "rollout.val_top_p", 0.7),
    (f"{V}.rollout.free_cache_engine=False", "rollout.enable_sleep", False),
    (f"{V}.rollout.enable_chunked_prefill=True", "rollout.engine_kwargs", {"enable_chunked_prefill": True}),
    (f"+{V}.rollout.engine_kwargs.vllm.kv_cache_dtype=fp8", "rollout.engine_kwargs", {}),  # hf rollout: vllm's part unused
    (f"{V}.nccl_timeout=1200", "ray.collective_timeout_s", 1200.0),
    ("trainer.log_val_generations=10", "trainer.log_val_generations", 10),
    ("critic.model.path=/m", "critic.model_path", "/m"),
    (f"{V}.actor.ulysses_sequence_parallel_size=2", "actor.ulysses_sequence_parallel_size", 2),
    (f"{V}.actor.fsdp_config.ulysses_sequence_parallel_size=2", "actor.ulysses_sequence_parallel_size", 2),
    (f"{V}.model.use_remove_padding=False", "actor.use_remove_padding", False),
    (f"{V}.rollout.multi_turn.max_assistant_turns=5", "rollout.multi_turn", "max_assistant_turns=5"),
    (f"{V}.model.lora_rank=32", "model.lora_rank", 32),
    (f"{V}.model.lora_alpha=64", "model.lora_alpha", 64.0),
    (f"{V}.model.target_modules=[q_proj,v_proj]", "model.target_modules", ["q_proj", "v_proj"]),
    (f"{V}.model.exclude_modules=null", "model.exclude_modules", []),
])
def test_engineering_keys_map(override, target, value):
    cfg = load_config(None, [override])
    section, key = target.split(".")
    got = getattr(getattr(cfg, section), key)
    assert (f"{value}" in repr(got)) if key == "multi_turn" else got == value


@pytest.mark.parametrize("override, words", [
    (f"{V}.rollout.multi_turn.interaction_config_path=users.yaml", "#29"),
    ("trainer.critic_warmup=5", "verl feature"),
    ("trainer.resume_mode=resume_path", "trainer.resume"),
    ("trainer.device=npu", "Ascend"),
])
def test_refusals_say_verl_feature_nearest_setting_and_issue(override, words):
    (p,) = _errors(override, profile="verl")  # a verl launch: trainer.device / resume_mode are read as verl's
    assert p.key == override.split("=")[0] and words in p.render(), p.render()


def test_offload_maps_to_the_actors_and_the_references_is_ignored_with_a_note():
    loaded = load_report(None, [f"{V}.actor.fsdp_config.param_offload=True", f"{V}.actor.fsdp_config.optimizer_offload=True",
                                f"{V}.ref.fsdp_config.param_offload=True"])
    f = loaded.config.actor.fsdp_config
    assert f.param_offload and f.optimizer_offload
    assert [(p.severity, p.key) for p in loaded.problems] == [("warning", f"{V}.ref.fsdp_config.param_offload")]
    assert "adapters off" in loaded.problems[0].render()


def test_accepted_values_and_warnings():
    # what rl-core does anyway: accepted silently; a speed knob of verl's implementation: a warning naming it
    loaded = load_report(None, [f"{V}.actor.fsdp_config.param_offload=False", "data.truncation=error", "trainer.critic_warmup=0",
                                f"{V}.model.use_remove_padding=True", f"{V}.model.use_fused_kernels=True"])
    assert [(p.severity, p.key) for p in loaded.problems] == [("warning", f"{V}.model.use_fused_kernels")]


def test_unknown_keys_typo_or_verl_feature_and_no_misleading_hints():
    (p,) = _errors(f"{V}.actor.ppo_mini_batch_sise=4")
    assert "looks like a typo (did you mean 'ppo_mini_batch_size'?)" in p.what and p.key == f"{V}.actor.ppo_mini_batch_sise"
    (p,) = _errors(f"{V}.actor.some_new_verl_knob=1")
    assert "did you mean" not in p.what and "verl feature rl-core does not have" in p.what
    # the issue's misleading hints: now mapped keys, never a near-spelled key of another meaning
    for override in (f"{V}.rollout.log_prob_max_token_len_per_gpu=16384", f"{V}.rollout.val_kwargs.n=2"):
        assert _errors(override) == []


def test_laptop_check_of_a_gpu_config(capsys):
    gpu = ["model_engine=megatron", f"{V}.actor.megatron.tensor_model_parallel_size=2", f"{V}.rollout.name=vllm",
           f"{V}.model.path=Qwen/Qwen2.5-0.5B", "data.train_files=tests/fixtures/data/tiny_gsm8k.jsonl", "trainer.logger=[console,wandb]",
           "data.train_batch_size=8", f"{V}.actor.ppo_mini_batch_size=8", f"{V}.actor.ppo_micro_batch_size_per_gpu=2", f"{V}.rollout.n=4"]
    assert main(["check", "--quiet", "--target", "gpu:8x80GB", *gpu]) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    assert "for 8 x cuda 80 GiB" in err
    assert main(["check", "--quiet", "--target", "gpu:4x80GB", *gpu, "trainer.n_gpus_per_node=8"]) == 1
    assert "the target 4 x cuda 80 GiB has 4 per node" in capsys.readouterr().err
    # verl runs on Ray: the verl profile places a job over several nodes with trainer.placement=ray; local is refused
    assert main(["check", "--quiet", "--skip-device-check", *gpu, "trainer.nnodes=2"]) == 0, capsys.readouterr().err
    assert main(["check", "--quiet", "--skip-device-check", *gpu, "trainer.nnodes=2", "trainer.placement=local"]) == 1
    assert "trainer.placement=ray" in capsys.readouterr().err
    assert main(["check", "--target", "tpu:8", *gpu]) != 0
    assert "--target: 'tpu:8' is not a machine description" in capsys.readouterr().err


def test_image_rows_without_a_vision_model_are_refused_when_read():
    from rl_core.data.dataset import DataError, PromptDataset

    rows = [{"prompt": [{"role": "user", "content": "what is shown?"}], "images": ["a.png"]}]
    with pytest.raises(DataError, match="row 0: the row holds images .* but the model has no vision tower"):
        PromptDataset(rows, None, max_prompt_length=64)


def test_fsdp_size_is_hybrid_sharding():
    assert _errors(f"{V}.actor.fsdp_config.fsdp_size=8", "trainer.n_gpus_per_node=8") == []
    # HSDP: 2 copies of the model, each sharded over 4 ranks
    assert load_config(None, [f"{V}.actor.fsdp_config.fsdp_size=4", "trainer.n_gpus_per_node=8"]).actor.fsdp_config.fsdp_size == 4
    plugin = pytest.importorskip("rl_train_fsdp.plugin", reason="the fsdp backend checks its fsdp_size")
    (p,) = plugin.check_hybrid_sharding(load_config(None, [f"{V}.actor.fsdp_config.fsdp_size=3", "trainer.n_gpus_per_node=8"]))
    assert "does not divide the 8 ranks" in p.what
    assert plugin.check_hybrid_sharding(load_config(None, [f"{V}.actor.fsdp_config.fsdp_size=4", "trainer.n_gpus_per_node=8"])) == []


def test_truncation_and_chat_template_kwargs():
    from rl_core.data.dataset import DataError, PromptDataset

    class Chars:  # one token per character
        chat_template = "x"

        def __call__(self, texts, add_special_tokens=True):
            return {"input_ids": [[ord(c) for c in t] for t in texts]}

        def apply_chat_template(self, messages, add_generation_prompt, tokenize, **kw):
            return ("T" if kw.get("enable_thinking") else "") + messages[0]["content"]

    rows = [{"prompt": [{"role": "user", "content": "abcdefgh"}]}]
    cfg = load_config(None, ["data.truncation=left", "data.filter_overlong_prompts=False", "+data.apply_chat_template_kwargs.enable_thinking=True"])
    assert (cfg.data.truncation, cfg.data.chat_template_kwargs) == ("left", {"enable_thinking": True})
    keep = {side: PromptDataset(rows, Chars(), max_prompt_length=4, filter_overlong=False, truncation=side,
                                template_kwargs={"enable_thinking": True}).items[0]["input_ids"] for side in ("left", "right", "middle")}
    assert {k: "".join(map(chr, v)) for k, v in keep.items()} == {"left": "efgh", "right": "Tabc", "middle": "Tagh"}
    with pytest.raises(DataError, match="data.max_prompt_length=4"):
        PromptDataset(rows, Chars(), max_prompt_length=4, filter_overlong=False)
