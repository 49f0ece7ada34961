"""The calculator task's prompts: multiply two 3-digit numbers, with one worked example of a tool call in the chat.

    python bench/agent_calculator/make_data.py outputs/agent_calculator_data [train_size val_size]   # default 2000 and 64

Each prompt is [system, user: example question, assistant: the call, tool: its result, assistant: the answer,
user: the question]: the model sees the call format once, in its own chat format, then gets a new question.
Deterministic (seeded) and offline; the answer is in reward_model.ground_truth (the gsm8k reward reads the last
number the model writes).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

SYSTEM = "You can use a calculator tool. Call it, read its result, then answer with the final number only."


def call(expr: str) -> str:
    return '<tool_call>{"name": "calculator", "arguments": {"expression": "%s"}}</tool_call>' % expr


def row(rng: random.Random, split: str, i: int) -> dict:
    a, b = rng.randint(100, 999), rng.randint(100, 999)
    ea, eb = rng.randint(100, 999), rng.randint(100, 999)
    prompt = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Calculate {ea} * {eb}."},
        {"role": "assistant", "content": call(f"{ea} * {eb}")},
        {"role": "tool", "content": str(ea * eb)},
        {"role": "assistant", "content": str(ea * eb)},
        {"role": "user", "content": f"Calculate {a} * {b}."},
    ]
    return {"data_source": "calculator/multiply", "prompt": prompt, "reward_model": {"style": "rule", "ground_truth": str(a * b)},
            "extra_info": {"split": split, "index": i}}


def main(out: str, train_size: int = 2000, val_size: int = 64) -> None:
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    for split, size, seed in (("train", train_size, 0), ("val", val_size, 12345)):
        rng = random.Random(seed)
        with open(folder / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for i in range(size):
                f.write(json.dumps(row(rng, split, i)) + "\n")
    print(f"wrote {folder}/train.jsonl and {folder}/val.jsonl")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "outputs/agent_calculator_data", *(int(a) for a in sys.argv[2:4]))
