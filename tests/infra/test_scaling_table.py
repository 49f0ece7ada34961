"""bench/scaling/run.py --table (issue 54): the calls' rows merged, efficiencies against the one-GPU row of the same
rollout (vLLM TP 2 against the vLLM row): weak = tokens/s per GPU over the one-GPU run's, strong = step over its step."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("scaling_run", ROOT / "bench" / "scaling" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(name, gpus, weak, rollout, step, tok):
    medians = {"step": step, "tok_s_gpu": tok, "peak_gb": 20.0, "gen": step / 2, "update_actor": step / 4, "sync_weights": 0.1, "old_log_prob": 0.0}
    return {"name": name, "gpus": gpus, "weak": weak, "rollout": rollout, "batch": "32 x 8", "rc": "done", "steps": 5,
            "estimate_gb": 26.9, "medians": medians}


def test_table_efficiencies_against_the_one_gpu_row(tmp_path):
    run = _script()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "scaling_1.results.json").write_text(json.dumps({"runs": [
        _run("hf", 1, True, "hf", 20.0, 1000.0), _run("vllm", 1, True, "vllm", 16.0, 1250.0)]}))
    (tmp_path / "b" / "scaling_2.results.json").write_text(json.dumps({"runs": [
        _run("hf_weak", 2, True, "hf", 22.0, 900.0), _run("hf_strong", 2, False, "hf", 11.0, 910.0),
        _run("vllm_tp2", 2, True, "vllm_tp2", 18.0, 1000.0), {"name": "vllm_weak", "rc": "timeout", "gpus": 2}]}))
    lines = {x.split(" | ")[0].strip("| "): x for x in run.table([tmp_path / "a", tmp_path / "b"]).splitlines()[2:]}
    assert set(lines) == {"hf", "vllm", "hf_weak", "hf_strong", "vllm_tp2"}  # a run without medians is left out
    assert lines["hf_weak"].endswith("| 90% | - |")  # 900 / 1000 tokens/s per GPU
    assert lines["hf_strong"].endswith("| - | 0.55 |")  # 11 s / 20 s
    assert lines["vllm_tp2"].endswith("| 80% | - |")  # against the one-GPU vLLM row: 1000 / 1250
    assert lines["hf"].endswith("| - | - |") and "| 50% | 25% |" in lines["hf"]  # shares of the step


def test_rows_size_the_batch_per_gpu_or_in_all():
    run = _script()
    weak, strong = run.row_overrides("hf_weak", 4, False), run.row_overrides("hf_strong", 4, False)
    assert "data.train_batch_size=128" in weak and "actor.ppo_mini_batch_size=128" in weak and "trainer.n_gpus_per_node=4" in weak
    assert "data.train_batch_size=32" in strong and "model.path=.gpu/qwen15b-gpt2" in strong
    assert "rollout.tensor_model_parallel_size=2" in run.row_overrides("vllm_tp2", 2, False)
