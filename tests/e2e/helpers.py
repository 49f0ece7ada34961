"""A tiny end-to-end run: random tiny model, a few prompts, a rule reward with variance."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Fraction of characters that are digits: random tiny models get a spread of rewards."""
    if not solution_str:
        return 0.0
    return sum(c.isdigit() for c in solution_str) / len(solution_str)
'''


def write_tiny_run(tmp: Path, *, nprocs: int = 1, estimator: str = "grpo", steps: int = 2, **extra) -> Path:
    """Writes model, data, reward and config into ``tmp``; returns the config path."""
    from rl_core.testing.tiny_model import make_tiny_model_dir

    model = make_tiny_model_dir(tmp / "model")
    rows = []
    for i in range(16):
        a, b = i % 7, (3 * i) % 5
        rows.append(
            {
                "data_source": "tiny/digits",
                "prompt": [{"role": "user", "content": f"{a}+{b}="}],
                "reward_model": {"style": "rule", "ground_truth": str(a + b)},
                "extra_info": {"index": i},
            }
        )
    data = tmp / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    reward = tmp / "reward.py"
    reward.write_text(REWARD)
    cfg = {
        "model": {"path": str(model)},
        "data": {"train_files": [str(data)], "val_files": [str(data)], "train_batch_size": 4, "max_prompt_length": 32, "max_response_length": 8, "val_max_samples": 4},
        "rollout": {"name": "hf", "n": 2, "temperature": 1.0},
        "train": {"name": "fsdp"},
        "actor": {"ppo_mini_batch_size": 2, "ppo_micro_batch_size_per_gpu": 2, "optim": {"lr": 1e-3}},
        "algorithm": {"adv_estimator": estimator},
        "reward": {"custom": {"path": str(reward), "name": "compute_score"}},
        "trainer": {
            "device": "cpu", "n_gpus_per_node": nprocs, "total_training_steps": steps, "output_dir": str(tmp / "out"),
            "loggers": ["jsonl"], "test_freq": -1, "save_freq": -1, "seed": 7,
        },
    }
    for dotted, value in extra.items():
        node = cfg
        *parents, last = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    path = tmp / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def read_metrics(out_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
