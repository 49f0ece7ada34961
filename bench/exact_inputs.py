"""Inputs of the CPU runs of bench/exact_gpu.sh (SMOKE=1) and bench/exact_cpu_cost.sh: a tiny random Qwen2 and
GSM8K-like rows, written under DIR (``DIR/model``, ``DIR/train.jsonl``).

    python bench/exact_inputs.py DIR [ROWS]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rl_core_testing.tiny_model import make_tiny_model_dir


def main(folder: str, count: int = 16) -> None:
    d = Path(folder)
    make_tiny_model_dir(d / "model", "qwen2")
    rows = [{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": f"What is {i} + {2 * i}?"}],
             "reward_model": {"style": "rule", "ground_truth": str(3 * i)}} for i in range(count)]
    (d / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
