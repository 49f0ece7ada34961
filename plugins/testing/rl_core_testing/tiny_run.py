"""A tiny end-to-end GRPO run on CPU: random tiny model, 16 prompts, a rule reward with variance.

``write_tiny_run(tmp, ...)`` writes a model, a data file, a reward file and a
config into ``tmp`` and returns the config's path, for tests that run
``rlcore train`` (core's and every plugin's). Any config key can be set with
``section__key=value`` keywords (``rollout__name="vllm"``,
``train__tensor_model_parallel_size=2``); ``model`` picks the tiny model's
shape (:func:`rl_core_testing.tiny_model.make_tiny_model_dir` arguments).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Fraction of characters that are digits: random tiny models get a spread of rewards."""
    if not solution_str:
        return 0.0
    return sum(c.isdigit() for c in solution_str) / len(solution_str)
'''


def tiny_rows(count: int = 16) -> list[dict[str, Any]]:
    """``a+b=`` prompts in verl's row format."""
    rows = []
    for i in range(count):
        a, b = i % 7, (3 * i) % 5
        rows.append(
            {
                "data_source": "tiny/digits",
                "prompt": [{"role": "user", "content": f"{a}+{b}="}],
                "reward_model": {"style": "rule", "ground_truth": str(a + b)},
                "extra_info": {"index": i},
            }
        )
    return rows


def set_dotted(cfg: dict[str, Any], dotted: str, value: Any) -> None:
    """``cfg["a"]["b"] = value`` for ``dotted="a__b"`` (sections created as needed)."""
    node = cfg
    *parents, last = dotted.split("__")
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value


def write_tiny_run(
    tmp: Path,
    *,
    nprocs: int = 1,
    estimator: str = "grpo",
    steps: int = 2,
    model: dict[str, Any] | None = None,
    **extra: Any,
) -> Path:
    """Writes model, data, reward and config into ``tmp``; returns the config path."""
    from rl_core_testing.tiny_model import make_tiny_model_dir

    tmp = Path(tmp)
    model_dir = make_tiny_model_dir(tmp / "model", **(model or {}))
    data = tmp / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in tiny_rows()))
    reward = tmp / "reward.py"
    reward.write_text(REWARD)
    cfg: dict[str, Any] = {
        "model": {"path": str(model_dir)},
        "data": {
            "train_files": [str(data)],
            "val_files": [str(data)],
            "train_batch_size": 4,
            "max_prompt_length": 32,
            "max_response_length": 8,
            "val_max_samples": 4,
        },
        "rollout": {"name": "hf", "n": 2, "temperature": 1.0},
        "train": {"name": "fsdp"},
        "actor": {"ppo_mini_batch_size": 2, "ppo_micro_batch_size_per_gpu": 2, "optim": {"lr": 1e-3}},
        "algorithm": {"adv_estimator": estimator},
        "reward": {"custom": {"path": str(reward), "name": "compute_score"}},
        "trainer": {
            "device": "cpu",
            "n_gpus_per_node": nprocs,
            "total_training_steps": steps,
            "output_dir": str(tmp / "out"),
            "loggers": ["jsonl"],
            "test_freq": -1,
            "save_freq": -1,
            "seed": 7,
        },
    }
    for dotted, value in extra.items():
        set_dotted(cfg, dotted, value)
    path = tmp / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def read_metrics(out_dir: Path) -> list[dict[str, Any]]:
    """The rows of ``out_dir/metrics.jsonl``."""
    return [json.loads(line) for line in (Path(out_dir) / "metrics.jsonl").read_text().splitlines() if line.strip()]
