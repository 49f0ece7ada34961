"""model.dtype=auto (rl_core.util.precision): bfloat16 where the hardware computes it, float32 elsewhere; a warning for an
explicit bfloat16 on a CPU that only emulates it (7.5x slower matrix products on a 2-core AVX2 machine)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from rl_core.util import precision
from rl_core.cli.main import main
from rl_core.config.load import load_config
from rl_core.config.normalize import normalize
from rl_core.modeling import torch_dtype
from rl_core.plan.preflight import device_problems

TINY_DATA = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "tiny_gsm8k.jsonl"
GOOD = ["model.path=Qwen/Qwen2.5-0.5B", f"data.train_files={TINY_DATA}", "trainer.device=cpu", "data.train_batch_size=8", "rollout.n=4",
        "actor.ppo_mini_batch_size=4", "actor.ppo_micro_batch_size_per_gpu=4"]


@pytest.fixture
def cpu_without_bf16(monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)


@pytest.fixture
def cpu_with_amx(monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)


def test_explicit_dtypes_are_kept(cpu_without_bf16):
    for dtype in ("float32", "bfloat16", "float16"):
        for device in ("cpu", "cuda"):
            assert precision.resolve_dtype(dtype, device) == (dtype, "set in the config")


def test_auto_on_a_cpu_follows_its_bf16_support(cpu_without_bf16, monkeypatch):
    dtype, why = precision.resolve_dtype("auto", "cpu")
    assert dtype == "float32" and "no native bfloat16" in why
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    dtype, why = precision.resolve_dtype("auto", "cpu")
    assert dtype == "bfloat16" and "AVX512-BF16" in why


def test_auto_on_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert precision.resolve_dtype("auto", "cuda")[0] == "bfloat16"  # a GPU config checked on a laptop
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla V100")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    dtype, why = precision.resolve_dtype("auto", "cuda")
    assert dtype == "float32" and "V100 has no bfloat16" in why
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert precision.resolve_dtype("auto", "cuda")[0] == "bfloat16"


def test_normalize_resolves_auto_so_workers_see_a_real_dtype(cpu_without_bf16, cpu_with_amx):
    config, sizes, problems = normalize(load_config(None, [*GOOD, "model.dtype=auto"]))
    assert not problems
    assert config.model.dtype == "bfloat16"  # AMX (the fixture order: amx on, avx512-bf16 off)
    assert torch_dtype(config.model.dtype) is torch.bfloat16


def test_normalize_on_an_avx2_cpu_gives_float32(cpu_without_bf16):
    config, _sizes, problems = normalize(load_config(None, [*GOOD, "model.dtype=auto"]))
    assert not problems and config.model.dtype == "float32"


def test_an_unnormalised_auto_is_refused_by_name():
    with pytest.raises(ValueError, match="model.dtype=auto is chosen for the machine when the config is normalised"):
        torch_dtype("auto")


def test_explicit_bf16_on_a_cpu_without_it_is_a_warning(cpu_without_bf16):
    problems = device_problems(load_config(None, [*GOOD, "model.dtype=bfloat16"]))
    assert [(p.key, p.severity) for p in problems] == [("model.dtype", "warning")]
    text = problems[0].render()
    assert "emulates it" in text and "set model.dtype=float32, or auto" in text
    assert device_problems(load_config(None, [*GOOD, "model.dtype=float32"])) == []
    # on a GPU, or a CPU that has it, nothing to say
    assert precision.slow_low_precision("bfloat16", "cuda") is None


def test_explicit_bf16_on_a_cpu_with_amx_is_fine(cpu_with_amx):
    assert device_problems(load_config(None, [*GOOD, "model.dtype=bfloat16"])) == []


def test_check_prints_the_warning_and_still_passes(cpu_without_bf16, capsys):
    assert main(["check", *GOOD, "model.dtype=bfloat16"]) == 0
    err = capsys.readouterr().err
    assert "model.dtype" in err and "several times slower than in float32" in err


def test_the_quickstart_asks_for_auto():
    """The first thing a new user runs must not be 15x slower on a laptop CPU (AVX2: bfloat16 is emulated)."""
    from rl_core.config.load import load_config as load

    quickstart = Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml"
    assert load(str(quickstart), []).model.dtype == "auto"
