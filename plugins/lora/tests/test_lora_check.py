"""`rlcore check` on model.lora_* (rl-lora's check) / actor.fsdp_config.*_offload (rl-offload's): accepted where the train backend applies them (#32), names checked."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from rl_core.config.sections import evolve_key
from rl_core.cards import TrainCard
from rl_core.cli.main import main
from rl_core.config.schema import ModelConfig, RunConfig
from rl_offload.checks import offload_problems
from rl_lora.checks import lora_problems

pytest.importorskip("peft")
TINY_DATA = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "data" / "tiny_gsm8k.jsonl"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    from rl_core_testing.tiny_model import make_tiny_model_dir

    model = make_tiny_model_dir(tmp_path_factory.mktemp("m") / "model", hidden=32, layers=1)
    return [f"model.path={model}", f"data.train_files={TINY_DATA}", "trainer.device=cpu", "data.train_batch_size=8", "rollout.n=4",
            "actor.ppo_mini_batch_size=4", "actor.ppo_micro_batch_size_per_gpu=4"]


def _check(args, capsys):
    code = main(["check", *args])
    cap = capsys.readouterr()
    return code, cap.out + cap.err


def test_lora_is_accepted_and_bad_names_are_named(base, capsys):
    assert _check(base, capsys)[0] == 0
    code, text = _check([*base, "model.lora_rank=8", "model.lora_alpha=16", "model.target_modules=[q_proj,v_proj]"], capsys)
    assert code == 0, text
    code, text = _check([*base, "model.lora_rank=8", "model.target_modules=[q_prj,v_proj]", "model.exclude_modules=[nope]"], capsys)
    assert code == 1 and "Traceback" not in text
    assert "model.target_modules" in text and "did you mean 'q_proj'" in text
    assert "model.exclude_modules" in text and "'nope'" in text


def test_bad_lora_values_and_ignored_settings_are_refused(base, capsys):
    assert _check([*base, "actor.fsdp_config.param_offload=true", "actor.fsdp_config.optimizer_offload=true"], capsys)[0] == 0
    # several ranks: FSDP2's CPUOffloadPolicy (was refused before it was wired)
    assert _check([*base, "actor.fsdp_config.optimizer_offload=true", "trainer.n_gpus_per_node=2"], capsys)[0] == 0
    for args, key, words in [
        (["model.lora_rank=-1"], "model.lora_rank", "0 turns LoRA off"),
        (["model.lora_rank=8", "model.lora_alpha=0"], "model.lora_alpha", "lora_alpha / lora_rank"),
        (["model.lora_adapter_path=/nowhere"], "model.lora_adapter_path", "model.lora_rank is 0"),
        (["trainer.save_merged_lora=true"], "trainer.save_merged_lora", "no adapters to merge"),
        (["model.lora_rank=8", "model.lora_adapter_path=/nowhere"], "model.lora_adapter_path", "adapter_config.json"),
    ]:
        code, text = _check([*base, *args], capsys)
        assert code == 1 and key in text and words in text, (args, text)


def test_a_train_backend_without_lora_or_offload_refuses_them():
    card = TrainCard(name="other", factory="x:y", default=True)
    registry = SimpleNamespace(cards={"train": {"other": card}})
    cfg = RunConfig(model=ModelConfig(path="/nowhere", lora_rank=8))
    [p] = lora_problems(cfg, registry)
    assert p.key == "model.lora_rank" and "the other train backend does not train LoRA adapters" in p.what
    import attrs

    cfg = evolve_key(cfg, "actor.fsdp_config", attrs.evolve(cfg.actor.fsdp_config, param_offload=True))
    [p] = offload_problems(cfg, registry)
    assert p.key == "actor.fsdp_config.param_offload" and "does not offload" in p.what
    lora_card = SimpleNamespace(cards={"train": {"other": attrs.evolve(card, lora=True, offload=True)}})
    assert lora_problems(cfg, lora_card) == [] and offload_problems(cfg, lora_card) == []


def test_adapter_sync_needs_an_engine_with_a_lora_api():
    import attrs
    from rl_core.cards import RolloutCard
    from rl_lora.checks import lora_sync_problems

    plain, able = RolloutCard(name="plain", factory="x:y"), RolloutCard(name="able", factory="x:y", lora_adapters=True)
    registry = SimpleNamespace(cards={"rollout": {"plain": plain, "able": able}})
    cfg = RunConfig(model=ModelConfig(path="/nowhere", lora_rank=8))
    cfg = attrs.evolve(cfg, rollout=attrs.evolve(cfg.rollout, name="plain", lora_sync="adapter"))
    [p] = lora_sync_problems(cfg, registry)
    assert p.key == "rollout.lora_sync" and "the plain rollout engine has no LoRA adapter API" in p.what and "rollout.name=able" in p.fix
    for ok in (attrs.evolve(cfg, rollout=attrs.evolve(cfg.rollout, lora_sync="auto")), attrs.evolve(cfg, rollout=attrs.evolve(cfg.rollout, name="able"))):
        assert lora_sync_problems(ok, registry) == []
