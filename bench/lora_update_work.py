"""The work one LoRA training step does on the update path, counted with tiny shapes on the CPU (issue #32).

    python bench/lora_update_work.py --out bench/results/lora_update_work     # ~1 min on 2 CPU cores

No timing (a CPU cannot say how fast a GPU is): FLOPs (``torch.utils.flop_counter.FlopCounterMode``) and the
bytes of every ``aten._to_copy`` (dtype casts, host copies) of one step's trainer work, for a bf16 LoRA actor
(rank 8, all linear layers; fsdp backend, unsharded, autocast) on a small qwen2 (hidden 256, 4 layers, 16 sequences
of 32 + 64 tokens), each switch of session 10 on and off:

- ``old log-prob pass``: ``rollout.calculate_log_probs=true`` used to force a separate forward over the whole batch
  (``compute_log_prob``); on-policy it now comes from the update's own forward (rl_core.trainer.loop);
- ``gradient checkpointing``: with a frozen base the recomputation is one more forward per micro-batch;
- ``peft input cast``: peft cast every adapted layer's bf16 input to the fp32 adapters' dtype under autocast
  (rl_lora.adapters.keep_input_dtype turns it off; bit-identical results);
- ``adapter bytes``: what one adapter-only sync sends, fp32 vs the engine's bf16 (rl_lora.adapters.engine_adapter).

The 7B anchor's numbers follow by scale (FLOPs ~ 2 x params x tokens per forward; the cast bytes ~ tokens x the
adapted layers' input widths), printed beside the counts.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


class CopyCounter(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts ``aten._to_copy`` calls and the bytes they write."""

    def __init__(self):
        super().__init__()
        self.calls, self.bytes = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket is torch.ops.aten._to_copy:
            self.calls += 1
            self.bytes += out.numel() * out.element_size()
        return out


def build(model_dir: str, *, gc: bool, cast: bool):
    import attrs
    from rl_core.backends import WorkerContext
    from rl_core_testing.train_conformance import default_config
    from rl_lora.adapters import _lora_layers
    from rl_train_fsdp.engine import build_engine

    cfg = default_config(model_dir)
    a = cfg.actor
    cfg = attrs.evolve(
        cfg, model=attrs.evolve(cfg.model, dtype="bfloat16", lora_rank=8, lora_alpha=16.0, enable_gradient_checkpointing=gc),
        actor=attrs.evolve(a, ppo_mini_batch_size=cfg.data.train_batch_size, ppo_epochs=1, ppo_micro_batch_size_per_gpu=8,
                           log_prob_micro_batch_size_per_gpu=8, entropy_coeff=0.0, use_kl_loss=False),
        critic=attrs.evolve(cfg.critic, enable=False))
    actor = build_engine("actor", cfg, WorkerContext(rank=0, world_size=1, device="cpu"))
    for _, layer in _lora_layers(actor.model):
        layer.cast_input_dtype_enabled = cast
    return actor


def step_batch(model_dir: str, rows: int, prompt: int, response: int):
    from rl_core.batch import Batch

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 250, (rows, prompt + response), generator=g)
    mask = torch.ones_like(ids)
    return Batch({"input_ids": ids, "attention_mask": mask, "responses": ids[:, prompt:], "response_mask": mask[:, prompt:].float(),
                  "advantages": torch.randn(rows, response, generator=g), "old_log_probs": torch.zeros(rows, response)},
                 meta={"temperature": 1.0})


def count(fn):
    from torch.utils.flop_counter import FlopCounterMode

    flops = FlopCounterMode(display=False)
    copies = CopyCounter()
    with flops, copies:
        fn()
    return {"gflop": flops.get_total_flops() / 1e9, "to_copy_calls": copies.calls, "to_copy_mib": copies.bytes / 2**20}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    from rl_core_testing.tiny_model import make_tiny_model_dir

    rows, prompt, response = 16, 32, 64
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = str(make_tiny_model_dir(Path(tmp) / "m", "qwen2", hidden=256, layers=4, heads=4, kv_heads=2))
        batch = step_batch(model_dir, rows, prompt, response)
        res = {}
        for name, gc, cast, old_pass in (("before (session 9)", True, True, True), ("no old log-prob pass", True, True, False),
                                         ("+ peft input cast off", True, False, False), ("+ no gradient checkpointing", False, False, False)):
            actor = build(model_dir, gc=gc, cast=cast)

            def one_step():
                if old_pass:
                    actor.compute_log_prob(batch)
                actor.update(batch, on_policy=True)

            res[name] = count(one_step)
        actor = build(model_dir, gc=False, cast=False)
        fp32, _ = actor.lora_adapter()
        bf16, _ = actor.lora_adapter(torch.bfloat16)
        res["adapter sync bytes (MiB)"] = {"fp32": sum(t.numel() * 4 for t in fp32.values()) / 2**20,
                                           "bf16": sum(t.numel() * 2 for t in bf16.values()) / 2**20}
    lines = ["# One LoRA step's trainer work, tiny shapes on the CPU (bench/lora_update_work.py)", "",
             f"qwen2 hidden 256, 4 layers, LoRA r=8 all-linear, bf16 base + fp32 adapters (autocast); {rows} sequences x "
             f"({prompt} + {response}) tokens, one micro-batch of 8 for the update and the log-prob pass.", "",
             "| step | GFLOP | aten._to_copy calls | _to_copy MiB |", "|---|---:|---:|---:|"]
    for name, r in res.items():
        if "gflop" in r:
            lines.append(f"| {name} | {r['gflop']:.2f} | {r['to_copy_calls']} | {r['to_copy_mib']:.1f} |")
    a = res["adapter sync bytes (MiB)"]
    lines += ["", f"Adapter-only sync: {a['fp32']:.2f} MiB in fp32, {a['bf16']:.2f} MiB in bf16 (the 7B anchor, r=32: 80.7M "
              "adapter parameters, 308 MiB fp32 -> 154 MiB bf16 per sync)."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "README.md").write_text(text + f"\nCommand: `python bench/lora_update_work.py --out {args.out}`\n")
        (args.out / "results.json").write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
