"""GRPO on a vision-language model, end to end on the CPU: a tiny Qwen2-VL built offline, geo3k-shaped rows with images."""

from __future__ import annotations

import pytest
import yaml
from rl_core_testing.tiny_run import REWARD, read_metrics
from rl_core_testing.tiny_vlm import make_tiny_vlm_dir, png_bytes

from tests.conftest import run_rlcore

pytestmark = pytest.mark.usefixtures("one_thread")


def geo3k_rows(count: int = 8) -> list[dict]:
    """Rows as verl's geo3k preprocessing writes them: an image dict per row, ``<image>`` in the user turn."""
    return [
        {
            "data_source": "hiyouga/geometry3k",
            "prompt": [{"role": "user", "content": f"<image>Find x ({i})."}],
            "images": [{"bytes": png_bytes(28 + 14 * (i % 3), 56 - 14 * (i % 2), seed=i), "path": None}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(i)},
            "extra_info": {"split": "train", "index": i},
        }
        for i in range(count)
    ]


def write_parquet(path, rows) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)


def _config(tmp_path, model) -> dict:
    write_parquet(tmp_path / "train.parquet", geo3k_rows())
    (tmp_path / "reward.py").write_text(REWARD)
    return {
        "model": {"path": str(model)},
        "data": {"train_files": [str(tmp_path / "train.parquet")], "train_batch_size": 4, "max_prompt_length": 96, "max_response_length": 6,
                 "image_key": "images", "image_patch_size": 14},
        "rollout": {"name": "hf", "n": 2, "temperature": 1.0, "calculate_log_probs": True},
        "train": {"name": "fsdp"},
        "actor": {"ppo_mini_batch_size": 4, "ppo_micro_batch_size_per_gpu": 4, "optim": {"lr": 1e-2}, "skip_zero_advantage_rows": False},
        "algorithm": {"adv_estimator": "grpo"},
        "reward": {"custom": {"path": str(tmp_path / "reward.py"), "name": "compute_score"}},
        "trainer": {"device": "cpu", "n_gpus_per_node": 1, "total_training_steps": 2, "output_dir": str(tmp_path / "out"),
                    "loggers": ["jsonl"], "test_freq": -1, "save_freq": -1, "seed": 7},
    }


def test_rlcore_check_names_what_cannot_carry_images(tmp_path, tiny_model_dir, capsys):
    from rl_core.cli.main import main

    (tmp_path / "run.yaml").write_text(yaml.safe_dump(_config(tmp_path, make_tiny_vlm_dir(tmp_path / "model"))))
    run = ["check", "--quiet", "--skip-device-check", str(tmp_path / "run.yaml")]
    assert main(run) == 0, capsys.readouterr().err
    assert main([*run, "rollout.name=vllm", "algorithm.adv_estimator=gae", "critic.enable=true"]) == 1
    err = capsys.readouterr().err
    assert "rollout.name: is 'vllm', which does not generate from prompts with images" in err and "(installed: hf)" in err
    assert "algorithm.adv_estimator: is 'gae', which needs a critic" in err
    assert main([*run, f"model.path={tiny_model_dir('qwen2')}"]) == 1
    assert "has no vision tower, and the data's rows hold images ('images')" in capsys.readouterr().err


@pytest.mark.parametrize("nprocs", [1, 2])
def test_rlcore_train_grpo_on_images_two_steps(tmp_path, nprocs):
    """nprocs=2: FSDP2 shards the language model and the vision tower over two gloo ranks."""
    model = make_tiny_vlm_dir(tmp_path / "model")
    cfg = _config(tmp_path, model)
    cfg["actor"]["ppo_micro_batch_size_per_gpu"] = 4 // nprocs
    cfg["trainer"]["n_gpus_per_node"] = nprocs
    if nprocs == 1:  # validation (greedy generation with the images) at the last step
        cfg["data"].update(val_files=[str(tmp_path / "train.parquet")], val_max_samples=2)
        cfg["trainer"]["test_freq"] = 2
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    done = run_rlcore("train", str(tmp_path / "run.yaml"), env={"HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    rows = read_metrics(tmp_path / "out")
    if nprocs == 1:  # step 0: validation before training
        assert rows[0]["step"] == 0 and any(k.startswith("val") for k in rows.pop(0))
    assert [r["step"] for r in rows] == [1, 2]
    # step 1: the actor's log-probs of (prompt + image, response) equal the hf rollout's (same fp32 weights)
    assert rows[0]["rollout_corr/log_prob_abs_diff_max"] < 1e-4
    # the update changed the weights: at step 2 the rollout (synced) and the actor agree again, and the loss moved
    assert rows[1]["rollout_corr/log_prob_abs_diff_max"] < 1e-4
    assert rows[0]["actor/grad_norm"] > 0
    if nprocs == 1:
        assert any(k.startswith("val") for k in rows[1]), sorted(rows[1])  # and after the last step
    # the exported model is a vision-language model folder again: weights, tokenizer and the processor's settings
    final = tmp_path / "out" / "hf_final"
    assert (final / "preprocessor_config.json").read_text() == (model / "preprocessor_config.json").read_text()
    assert (final / "processor_config.json").is_file()
