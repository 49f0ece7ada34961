"""The CPU quickstart with LoRA (issue #32): time to 0.50 held-out accuracy next to the full fine-tune's.

The machinery is bench/vs_trl_cpu.py's (same data files, same 100 held-out items, greedy accuracy every
``--eval-every`` steps, training time = the sum of the step times, runs stopped at their first eval >= 0.50 with
``--stop-at-target``); this adds the LoRA variants of ``examples/quickstart.yaml``:

- ``rlcore-quickstart``: the full fine-tune as shipped (lr 2e-5, linear decay), measured again on the same machine
  under the same load, so the two times compare;
- ``rlcore-lora-r32``: LoRA rank 32, alpha 64, all linear layers, lr 2e-4 (10x the full fine-tune's, the usual
  LoRA ratio), everything else as shipped; ``rlcore-lora-r32-lr1e-4``: the same at lr 1e-4.

    python bench/lora_cpu/run.py all --names rlcore-lora-r32 rlcore-quickstart --seeds 0 --eval-every 10 \\
        --stop-at-target --out bench/lora_cpu --work /tmp/lora_cpu
    python bench/lora_cpu/run.py report --out bench/lora_cpu

(``run NAME --seed S`` runs one; a run whose ``OUT/runs/NAME-sS.json`` exists is skipped.)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import vs_trl_cpu as v  # noqa: E402

LORA = ["model.lora_rank=32", "model.lora_alpha=64", "model.target_modules=all-linear"]
v.QUICKSTART_VARIANTS.update({
    "rlcore-lora-r32": LORA + ["actor.optim.lr=2e-4"],
    "rlcore-lora-r32-lr1e-4": LORA + ["actor.optim.lr=1e-4"],
})
v.RUNS.update({"rlcore-lora-r32": "rl-core quickstart, LoRA r32 alpha 64, lr 2e-4",
               "rlcore-lora-r32-lr1e-4": "rl-core quickstart, LoRA r32 alpha 64, lr 1e-4"})

if __name__ == "__main__":
    raise SystemExit(v.main())
