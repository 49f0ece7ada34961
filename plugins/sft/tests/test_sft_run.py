"""SFT runs end to end on a tiny model: resume is bit-identical, and GRPO starts from the SFT output with one key."""

from __future__ import annotations

import signal

import pytest
import torch
from rl_core.trainer.loop import train
from rl_core.util.stopping import Interrupted
from rl_sft import kind as sft_kind
from safetensors.torch import load_file
from sft_helpers import metrics, plan, write_sft_run

pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")

NON_TIMING = lambda row: {k: v for k, v in row.items() if not k.startswith(("timing_s/", "perf/")) and k != "time"}  # noqa: E731


def weights(folder) -> dict[str, torch.Tensor]:
    out = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


@pytest.mark.slow
def test_sft_run_learns_validates_and_resumes_bit_identical(tmp_path, monkeypatch):
    ref_cfg = write_sft_run(tmp_path / "ref")
    train(plan(ref_cfg))
    ref_rows = metrics(tmp_path / "ref" / "out")
    assert [r["step"] for r in ref_rows] == [0, 1, 2, 3, 4]
    assert ref_rows[-1]["val/loss"] < ref_rows[0]["val/loss"]  # it learns the rows
    assert all(r["sft/tokens"] > 0 for r in ref_rows[1:])

    cfg = write_sft_run(tmp_path / "cut")
    real_step = sft_kind.SFTRun.train_step

    def stop_after_two(self, batch, step):
        out = real_step(self, batch, step)
        if step == 2:
            self.handle.stop.requested = signal.SIGTERM  # as a Ctrl-C during step 2: the step finishes and is saved
        return out

    monkeypatch.setattr(sft_kind.SFTRun, "train_step", stop_after_two)
    with pytest.raises(Interrupted):
        train(plan(cfg))
    monkeypatch.setattr(sft_kind.SFTRun, "train_step", real_step)
    assert (tmp_path / "cut" / "out" / "checkpoints" / "global_step_2").is_dir()
    assert not (tmp_path / "cut" / "out" / "hf_final").exists()
    train(plan(cfg))  # the same command again: resumes from step 2
    rows = metrics(tmp_path / "cut" / "out")
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    for a, b in zip(ref_rows, rows):
        a, b = NON_TIMING(a), NON_TIMING(b)
        if a["step"] == 2:  # the loop skips the validation of a step a signal ends (it saves and stops instead)
            a = {k: v for k, v in a.items() if not k.startswith("val/")}
        assert a == b  # exactly equal, not approximately
    a, b = weights(tmp_path / "ref" / "out" / "hf_final"), weights(tmp_path / "cut" / "out" / "hf_final")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_grpo_starts_from_the_sft_output_with_one_key(tmp_path):
    from rl_core_testing.tiny_run import write_tiny_run

    sft_cfg = write_sft_run(tmp_path / "sft", steps=2, save_freq=-1, test_freq=-1)
    train(plan(sft_cfg))
    sft_out = tmp_path / "sft" / "out" / "hf_final"
    base, tuned = weights(tmp_path / "sft" / "model"), weights(sft_out)
    assert any(not torch.equal(base[k], tuned[k]) for k in base)  # SFT moved the weights

    grpo_cfg = write_tiny_run(tmp_path / "grpo", steps=1)
    grpo = plan(grpo_cfg, f"model.path={sft_out}", "actor.optim.lr=1e-12")  # the one key; a step too small to move the weights
    assert grpo.config.trainer.kind == "rl" and grpo.needs_rollout
    train(grpo)
    after = weights(tmp_path / "grpo" / "out" / "hf_final")
    assert [r["step"] for r in metrics(tmp_path / "grpo" / "out")] == [1]
    for k in tuned:
        torch.testing.assert_close(after[k], tuned[k], rtol=0, atol=1e-6)  # it trained from the SFT weights, not the base


@pytest.mark.slow
def test_lora_and_megatron_run_the_same_sft_loss(tmp_path):
    """The SFT kind over the other train paths: megatron's first loss equals fsdp's (same model, same batch);
    LoRA trains and writes a PEFT folder with the merged model the RL run loads (hf_final/merged)."""
    runs = {}
    for name, over in {"fsdp": [], "lora": ["model.lora_rank=4", "trainer.save_merged_lora=true"], "megatron": ["train.name=megatron"]}.items():
        if name == "megatron":
            pytest.importorskip("rl_train_megatron", reason="needs the rl-train-megatron plugin")
        cfg = write_sft_run(tmp_path / name, steps=2, save_freq=-1, test_freq=2)
        train(plan(cfg, *over))
        runs[name] = metrics(tmp_path / name / "out")
    for name in ("lora", "megatron"):
        assert runs[name][0]["val/loss"] == pytest.approx(runs["fsdp"][0]["val/loss"], rel=1e-5)  # the same model before training
        assert runs[name][-1]["val/loss"] < runs[name][0]["val/loss"]
    assert runs["megatron"][1]["sft/loss"] == pytest.approx(runs["fsdp"][1]["sft/loss"], rel=1e-5)  # the same batch, the same loss
    merged = tmp_path / "lora" / "out" / "hf_final" / "merged"
    assert (merged / "config.json").is_file() and (tmp_path / "lora" / "out" / "hf_final" / "adapter_config.json").is_file()
