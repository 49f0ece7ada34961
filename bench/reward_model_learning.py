"""A learned reward model drives GRPO and PPO on the CPU (issue 30's end-to-end acceptance).

1. Train a tiny reward model (LlamaForSequenceClassification, its own byte vocabulary in another order)
   to predict a property of text: the fraction of ASCII letters (rl_reward_model.testing).
2. Train the tiny random policy against it with GRPO and with PPO (reward = the model's score alone;
   responses decoded with the policy's tokenizer and re-encoded with the reward model's).
3. Measure the TRUE property (not the model's score) on held-out prompts the policy never trained on,
   sampling before and after.

    python bench/reward_model_learning.py --steps 12 --out bench/results/reward_model_learning_cpu.md
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

HELD_OUT = [[{"role": "user", "content": f"Tell me about {w}."}] for w in ("rivers", "owls", "glass", "tea", "maps", "snow", "bells", "ink")]


def run(algo: str, tmp: Path, rm_dir: Path, steps: int, seed: int) -> dict:
    from rl_core.config.load import load_config
    from rl_core.plan.resolver import resolve
    from rl_reward_model.testing import sample_property
    from rl_core_testing.tiny_run import read_metrics, write_tiny_run
    from rl_core.trainer.loop import Trainer

    cfg = write_tiny_run(
        tmp, estimator=algo, steps=steps,
        reward_model__enable=True, reward_model__model__path=str(rm_dir),
        rollout__n=4, data__train_batch_size=4, actor__ppo_mini_batch_size=4, actor__ppo_micro_batch_size_per_gpu=16,
        actor__optim__lr=2e-3, trainer__seed=seed,
    )
    stack, problems = resolve(load_config(cfg))
    assert stack is not None, [p.render() for p in problems]
    before = sample_property(tmp / "model", HELD_OUT, seed=seed)
    start = time.perf_counter()
    trainer = Trainer(stack, progress=False)
    try:
        trainer.fit()
    finally:
        trainer.close()
    seconds = time.perf_counter() - start
    after = sample_property(tmp / "out" / "hf_final", HELD_OUT, seed=seed)
    rows = read_metrics(tmp / "out")
    return {
        "algo": algo, "steps": steps, "seconds": seconds, "held_out_before": before, "held_out_after": after,
        "train_rm_score_first": rows[0]["reward/model/score_mean"], "train_rm_score_last": rows[-1]["reward/model/score_mean"],
        "timing_s_reward_model_mean": sum(r["timing_s/reward_model"] for r in rows) / len(rows),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rm-steps", type=int, default=150)
    ap.add_argument("--algos", default="grpo,gae")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from rl_reward_model.testing import train_property_reward_model

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        t = time.perf_counter()
        fit = train_property_reward_model(tmp / "rm", steps=args.rm_steps, batch=32)
        rm_seconds = time.perf_counter() - t
        results = [run(a, tmp / a, tmp / "rm", args.steps, args.seed) for a in args.algos.split(",")]
    lines = [
        "# A learned reward model drives GRPO and PPO (CPU)",
        "",
        f"`python bench/reward_model_learning.py --steps {args.steps} --rm-steps {args.rm_steps}` on this session's 2-core CPU machine (shared with other sessions).",
        "",
        f"Reward model: tiny LlamaForSequenceClassification trained in {rm_seconds:.0f} s ({args.rm_steps} steps x 32 random responses) "
        f"to predict the fraction of ASCII letters; held-out fit: MAE {fit['mae']:.3f}, correlation {fit['corr']:.3f}. Its vocabulary differs "
        "from the policy's (rl_reward_model.reward_tokenizer).",
        "",
        "| algorithm | steps | train s | RM score, step 1 | RM score, last step | TRUE letter fraction on 8 held-out prompts, before | after |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(f"| {'PPO (gae)' if r['algo'] == 'gae' else r['algo'].upper()} | {r['steps']} | {r['seconds']:.0f} | {r['train_rm_score_first']:.3f} | "
                     f"{r['train_rm_score_last']:.3f} | {r['held_out_before']:.3f} | {r['held_out_after']:.3f} |")
    text = "\n".join(lines) + "\n\n```json\n" + json.dumps({"rm_fit": fit, "runs": results}, indent=1) + "\n```\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
