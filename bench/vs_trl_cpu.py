"""rl-core vs TRL's GRPOTrainer on the CPU quickstart task, side by side (issue #18).

Both frameworks run one after the other on this machine, on the same data: SmolLM2-135M-Instruct (the
offline ``builtin:smollm2`` folder rl-core converts), reasoning-gym ``basic_arithmetic`` (2 terms, 1-2
digits, + and -), training items from reasoning-gym seed 1 in an order drawn from the run's seed, the same
100 held-out items (reasoning-gym seed 2) for every run, the system prompt "Answer with the final number
only." through the chat template, reward 1 when the last number in the completion equals the answer
(rl-reward-rule's ``gsm8k`` scorer, ``method=flexible``, used by both). Greedy accuracy on the held-out
items every ``--eval-every`` steps; training time is the sum of the step times (generation, reward, loss,
backward, optimizer), evaluations excluded.

Runs (``NAME``):

- ``trl``: TRL's ``GRPOTrainer`` with the settings of ENVIRONMENT.md's reference run: 2 prompts x 8
  samples, 24 new tokens, temperature 1, lr 1e-5 constant, AdamW (0.9, 0.999, eps 1e-8, no weight
  decay), grad-norm clip 1, one optimizer step per generation, no KL (``beta=0``), its default loss
  (``dapo``: token sum over the batch / number of tokens), group std scaling, fp32. Gradient
  checkpointing is off (a 135M model does not need it; it would only slow TRL down).
- ``rlcore-same``: rl-core with the same settings (``SAME`` below).
- ``rlcore-quickstart``: ``examples/quickstart.yaml`` as shipped, on the same data files;
  ``rlcore-quickstart-mb4`` the same with two optimizer steps per rollout (the default before issue 18).
  With ``--stop-at-target`` (as the committed results ran) these end at their first evaluation >= 0.50.

Each run writes ``OUT/runs/NAME-sSEED.json`` and is skipped when that file exists (``--force`` reruns
it), so a crash loses one run at most; ``report`` merges whatever is there.

    python bench/vs_trl_cpu.py all --seeds 0 1 2            # every run not done yet, then the report
    python bench/vs_trl_cpu.py run trl --seed 1               # one run (--force: again)
    python bench/vs_trl_cpu.py report                         # README.md, summary.json, PNGs from runs/*.json

Run JSONs, metrics and the report go to ``--out`` (default bench/results/vs_trl_cpu); the data files and
run folders to ``--work`` (default /tmp/vs_trl_cpu).

The TRL run executes this file under ``--trl-python`` (default /work/trl-venv/bin/python); the top level
imports the standard library only, so it loads in either venv.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "examples" / "quickstart.yaml"
SYSTEM_PROMPT = "Answer with the final number only."
TASK = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2, "operators": ["+", "-"],
        "allow_parentheses": False, "allow_negation": False}
TRAIN_SEED, VAL_SEED, TRAIN_SIZE, VAL_SIZE = 1, 2, 2000, 100
TARGET = 0.50

# The reference settings, shared by the `trl` and `rlcore-same` runs.
PROMPTS, GROUP, NEW_TOKENS, LR = 2, 8, 24, 1e-5
SAME = [
    "model.dtype=float32",
    f"data.train_batch_size={PROMPTS}", f"rollout.n={GROUP}", f"data.max_response_length={NEW_TOKENS}",
    "rollout.temperature=1.0", "rollout.top_p=1.0", "rollout.top_k=-1",
    f"actor.ppo_mini_batch_size={PROMPTS}", f"actor.ppo_micro_batch_size_per_gpu={PROMPTS * GROUP}",
    "actor.ppo_epochs=1",
    f"actor.optim.lr={LR}", "actor.optim.lr_scheduler=constant", "actor.optim.weight_decay=0.0",
    "actor.optim.grad_clip=1.0", "actor.optim.eps=1e-8",
    "actor.policy_loss=ppo_clip", "actor.loss_agg_mode=token-mean", "actor.use_kl_loss=false",
    "algorithm.adv_estimator=grpo", "algorithm.norm_adv_by_std_in_grpo=true",
]
RUNS = {"trl": "TRL GRPOTrainer", "rlcore-same": "rl-core, TRL's settings", "rlcore-quickstart": "rl-core quickstart defaults",
        "rlcore-quickstart-mb4": "rl-core quickstart, two optimizer steps per rollout (the previous default)"}
# quickstart variants: examples/quickstart.yaml plus these overrides
QUICKSTART_VARIANTS = {"rlcore-quickstart": [], "rlcore-quickstart-mb4": ["actor.ppo_mini_batch_size=4"]}


# ----------------------------------------------------------------------------- data
def write_data(work: Path, seeds: list[int]) -> None:
    """``WORK/data/val.jsonl`` and ``WORK/data/train-sSEED.jsonl`` (seed-1 items in an order drawn from SEED)."""
    d = work / "data"
    if (d / "val.jsonl").exists() and all((d / f"train-s{seed}.jsonl").exists() for seed in seeds):
        return  # prepared (bench/vs_trl_sweep.py carries them to a machine without reasoning-gym)
    from rl_data.convert import generate_reasoning_gym_rows

    d.mkdir(parents=True, exist_ok=True)
    if not (d / "val.jsonl").exists():
        val = generate_reasoning_gym_rows("basic_arithmetic", VAL_SIZE, VAL_SEED, TASK, SYSTEM_PROMPT, split="val")
        _write_jsonl(d / "val.jsonl", val)
    train = None
    for seed in seeds:
        path = d / f"train-s{seed}.jsonl"
        if path.exists():
            continue
        if train is None:
            train = generate_reasoning_gym_rows("basic_arithmetic", TRAIN_SIZE, TRAIN_SEED, TASK, SYSTEM_PROMPT)
        rows = list(train)
        random.Random(seed).shuffle(rows)
        _write_jsonl(path, rows)


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(path)


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ----------------------------------------------------------------------------- rl-core
def rlcore_overrides(name: str, seed: int, work: Path, steps: int, eval_every: int, run_dir: Path, device: str = "cpu") -> list[str]:
    data = work / "data"
    common = [
        "data.train_generator=null", "data.val_generator=null",
        f"data.train_files=[{data / f'train-s{seed}.jsonl'}]", f"data.val_files=[{data / 'val.jsonl'}]",
        "data.shuffle=false",  # the file is already in the seed's order, the one TRL reads too
        f"trainer.seed={seed}", f"trainer.test_freq={eval_every}", "trainer.save_freq=-1",
        "trainer.loggers=[jsonl]", f"trainer.output_dir={run_dir}", "trainer.val_before_train=true",
    ]
    if device != "cpu":  # bench/vs_trl_sweep.py: many seeds at once on a GPU; the rollout keeps the CPU's plain decode loop
        common += [f"trainer.device={device}", "rollout.engine_kwargs.static_decode=false"]
    if name == "rlcore-same":
        return SAME + common + [f"trainer.total_training_steps={steps}"]
    return QUICKSTART_VARIANTS[name] + common + ([f"trainer.total_training_steps={steps}"] if steps else [])


def run_rlcore(name: str, seed: int, work: Path, out: Path, steps: int, eval_every: int, stop_at_target: bool, device: str = "cpu") -> dict:
    run_dir = work / "logs" / f"{name}-s{seed}"
    if run_dir.exists():
        import shutil

        shutil.rmtree(run_dir)  # a fresh run, never a resume of a crashed one
    cmd = [sys.executable, "-m", "rl_core", "train", str(CONFIG), *rlcore_overrides(name, seed, work, steps, eval_every, run_dir, device), "--no-progress"]
    log = work / "logs" / f"{name}-s{seed}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.time()
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
        stopped = False
        while proc.poll() is None:
            time.sleep(2)
            if stop_at_target and any(a >= TARGET and s > 0 for s, _, a in _rlcore_evals(run_dir)):
                proc.terminate()  # what is needed (the time to 0.50) is logged; the rest of the run is not
                proc.wait()
                stopped = True
    if proc.returncode and not stopped:
        raise SystemExit(f"{name} seed {seed} failed (exit {proc.returncode}); see {log}")
    rows = _rlcore_rows(run_dir)
    (out / "metrics").mkdir(parents=True, exist_ok=True)
    (out / "metrics" / f"{name}-s{seed}.jsonl").write_text((run_dir / "metrics.jsonl").read_text())
    import shutil

    shutil.rmtree(run_dir / "hf_final", ignore_errors=True)  # the trained model: 0.5 GB, not needed here
    step_s = [r["timing_s/step"] for r in rows if "timing_s/step" in r]
    rewards = [r["reward/mean"] for r in rows if "reward/mean" in r]
    return {"framework": "rl-core", "command": " ".join(cmd), "step_s": step_s, "train_reward": rewards,
            "evals": [{"step": s, "train_s": t, "accuracy": a} for s, t, a in _rlcore_evals(run_dir)],
            "stopped_at_target": stopped, "wall_s": time.time() - start}


def _rlcore_rows(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written
            pass
    return rows


def _rlcore_evals(run_dir: Path) -> list[tuple[int, float, float]]:
    """(step, training seconds up to and including that step, greedy accuracy) per validation."""
    elapsed, by_step, out = 0.0, {}, []
    for r in _rlcore_rows(run_dir):
        if "timing_s/step" in r:
            by_step[int(r["step"])] = float(r["timing_s/step"])
    for r in _rlcore_rows(run_dir):
        if "val/accuracy" in r:
            step = int(r["step"])
            elapsed = sum(t for s, t in by_step.items() if s <= step)
            out.append((step, elapsed, float(r["val/accuracy"])))
    return out


# ----------------------------------------------------------------------------- TRL
def run_trl_subprocess(seed: int, work: Path, steps: int, eval_every: int, trl_python: str, stop_at_target: bool, device: str = "cpu") -> dict:
    result = work / "logs" / f"trl-s{seed}.partial.json"
    log = work / "logs" / f"trl-s{seed}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [trl_python, str(Path(__file__).resolve()), "_trl", "--seed", str(seed), "--work", str(work), "--steps", str(steps),
           "--eval-every", str(eval_every), "--result", str(result), "--device", device] + (["--stop-at-target"] if stop_at_target else [])
    start = time.time()
    with open(log, "w") as f:
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    if rc:
        raise SystemExit(f"trl seed {seed} failed (exit {rc}); see {log}")
    data = json.loads(result.read_text())
    data.update(command=" ".join(cmd), wall_s=time.time() - start)
    result.unlink()
    return data


def trl_reward(completions, ground_truth, **_):
    """TRL reward function: rl-reward-rule's ``gsm8k`` scorer (last number), as rl-core's run scores."""
    sys.path.insert(0, str(ROOT / "plugins" / "reward_rule"))
    from rl_reward_rule.gsm8k import score  # pure Python: the scorer rl-core's run uses

    return [score(solution_str=c[0]["content"], ground_truth=g, method="flexible")["score"] for c, g in zip(completions, ground_truth)]


def build_trl_trainer(seed: int, work: Path, steps: int, callbacks=(), reward=trl_reward, device: str = "cpu"):
    """(trainer, tokenizer): TRL's ``GRPOTrainer`` with the reference settings on ``WORK/data/train-sSEED.jsonl``.

    Runs inside the TRL venv; ``bench/vs_trl_update.py`` builds the same trainer.
    """
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    model_dir = os.path.expanduser(os.environ.get("RLCORE_SMOLLM2_DIR", "~/.cache/rl-core/models/smollm2"))
    tok = AutoTokenizer.from_pretrained(model_dir)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    data = Path(work) / "data"
    train = [{"prompt": r["prompt"], "ground_truth": r["reward_model"]["ground_truth"]} for r in _read_jsonl(data / f"train-s{seed}.jsonl")]
    config = GRPOConfig(
        output_dir=f"/tmp/vs_trl_cpu_trl_s{seed}",
        per_device_train_batch_size=PROMPTS * GROUP,
        num_generations=GROUP,
        gradient_accumulation_steps=1,
        max_completion_length=NEW_TOKENS,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        num_iterations=1,
        epsilon=0.2,
        loss_type="dapo",
        scale_rewards="group",
        learning_rate=LR,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=1e-8,
        max_grad_norm=1.0,
        gradient_checkpointing=False,
        bf16=False,
        fp16=False,
        use_cpu=device == "cpu",
        max_steps=steps,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        shuffle_dataset=False,  # the file is already in the seed's order, the one rl-core reads too
        seed=seed,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=Dataset.from_list(train),
                          processing_class=tok, callbacks=list(callbacks))
    return trainer, tok


def trl_worker(args: argparse.Namespace) -> None:
    """Runs inside the TRL venv: GRPOTrainer with the reference settings, greedy evaluation in a callback."""
    import torch
    import trl
    from transformers import GenerationConfig, TrainerCallback

    sys.path.insert(0, str(ROOT / "plugins" / "reward_rule"))
    from rl_reward_rule.gsm8k import score  # pure Python: the scorer rl-core's run uses

    trainer, tok = build_trl_trainer(args.seed, Path(args.work), args.steps, device=args.device)
    val = _read_jsonl(Path(args.work) / "data" / "val.jsonl")

    texts = [tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) for r in val]
    golds = [r["reward_model"]["ground_truth"] for r in val]
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    # use_cache: TRL turns the model config's off for training
    greedy = GenerationConfig(max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=eos, pad_token_id=tok.pad_token_id, use_cache=True)

    last_outputs = [""] * len(texts)

    @torch.no_grad()
    def accuracy(m) -> float:
        # generate() fills unset fields from the model's generation config, and a field left at its default
        # (do_sample=False) counts as unset: swap the model's config so nothing of the sampling one leaks in
        was_training, saved = m.training, m.generation_config
        m.eval()
        m.generation_config = greedy
        tok.padding_side = "left"
        correct = 0
        for i in range(0, len(texts), 50):
            enc = tok(texts[i : i + 50], return_tensors="pt", padding=True, add_special_tokens=False).to(m.device)
            gen = m.generate(**enc)
            outs = tok.batch_decode(gen[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
            correct += sum(score(solution_str=o, ground_truth=g, method="flexible")["score"] for o, g in zip(outs, golds[i : i + 50]))
            last_outputs[i : i + 50] = outs
        m.generation_config = saved
        m.train(was_training)
        return correct / len(texts)

    class Clock(TrainerCallback):
        def __init__(self):
            self.step_s, self.evals, self.rewards, self._t = [], [], [], 0.0

        def _eval(self, model, step):
            t = time.perf_counter()
            acc = accuracy(model)
            self.evals.append({"step": step, "train_s": sum(self.step_s), "accuracy": acc, "eval_s": time.perf_counter() - t})
            print(f"eval step {step}: accuracy {acc:.2f} after {sum(self.step_s):.1f} s of training", flush=True)
            return acc

        def on_train_begin(self, a, state, control, model=None, **k):
            self._eval(model, 0)

        def on_step_begin(self, *a, **k):
            self._t = time.perf_counter()

        def on_step_end(self, a, state, control, model=None, **k):
            self.step_s.append(time.perf_counter() - self._t)
            if state.global_step % args.eval_every == 0 or state.global_step == args.steps:
                acc = self._eval(model, state.global_step)
                if args.stop_at_target and acc >= TARGET:
                    control.should_training_stop = True
            return control

        def on_log(self, a, state, control, logs=None, **k):
            if logs and "reward" in logs:
                self.rewards.append(logs["reward"])

    clock = Clock()
    trainer.add_callback(clock)
    trainer.train()
    Path(args.result).write_text(json.dumps({
        "framework": f"trl {trl.__version__}", "torch": torch.__version__, "step_s": clock.step_s,
        "train_reward": clock.rewards, "evals": clock.evals, "last_eval_outputs": last_outputs,
        "stopped_at_target": bool(args.stop_at_target and clock.evals and clock.evals[-1]["accuracy"] >= TARGET),
    }))


# ----------------------------------------------------------------------------- driver
def run_one(name: str, seed: int, args: argparse.Namespace) -> Path:
    out, work = Path(args.out), Path(args.work)
    path = out / "runs" / f"{name}-s{seed}.json"
    if path.exists() and not args.force:
        print(f"{name} seed {seed}: {path} exists, skipped", flush=True)
        return path
    write_data(work, [seed])
    quickstart = name in QUICKSTART_VARIANTS
    steps = args.quickstart_steps if quickstart else args.steps
    print(f"[{time.strftime('%H:%M:%S')}] {name} seed {seed}: {steps or 'default'} steps", flush=True)
    if name == "trl":
        result = run_trl_subprocess(seed, work, steps, args.eval_every, args.trl_python, False, args.device)  # TRL's whole curve is compared
    else:
        result = run_rlcore(name, seed, work, out, steps, args.eval_every, args.stop_at_target and quickstart, args.device)
    result["command"] = result["command"].replace(str(ROOT) + "/", "")
    result.update(name=name, seed=seed, eval_every=args.eval_every, finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                  host_cpus=os.cpu_count(), device=args.device)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    reach = time_to(result["evals"], TARGET)
    print(f"[{time.strftime('%H:%M:%S')}] {name} seed {seed}: " + " ".join(f"{e['step']}:{e['accuracy']:.2f}" for e in result["evals"])
          + f"; median step {_median(result['step_s']):.2f} s; 0.50 at {reach}", flush=True)
    return path


def time_to(evals: list[dict], target: float) -> tuple[int, float] | None:
    for e in evals:
        if e["step"] > 0 and e["accuracy"] >= target:
            return e["step"], e["train_s"]
    return None


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return float("nan") if not xs else (xs[len(xs) // 2] if len(xs) % 2 else 0.5 * (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p):
        p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "vs_trl_cpu", help="run JSONs and the report")
        p.add_argument("--work", type=Path, default=Path("/tmp/vs_trl_cpu"), help="data files and run folders (not committed)")
        p.add_argument("--steps", type=int, default=40, help="step cap of the trl and rlcore-same runs")
        p.add_argument("--quickstart-steps", type=int, default=0, help="rlcore-quickstart steps; 0: the config's own")
        p.add_argument("--eval-every", type=int, default=5)
        p.add_argument("--trl-python", default="/work/trl-venv/bin/python")
        p.add_argument("--stop-at-target", action="store_true", help="end a quickstart run at its first eval >= 0.50")
        p.add_argument("--force", action="store_true", help="rerun runs whose JSON exists")
        p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where both frameworks run (cuda: bench/vs_trl_sweep.py)")

    p = sub.add_parser("run", help="one framework, one seed")
    p.add_argument("name", choices=sorted(RUNS))
    p.add_argument("--seed", type=int, required=True)
    common(p)
    p = sub.add_parser("all", help="every run of the plan, seed by seed, skipping finished ones; then the report")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--names", nargs="+", default=list(RUNS), choices=sorted(RUNS))
    common(p)
    p = sub.add_parser("report", help="merge OUT/runs/*.json into OUT/README.md, summary.json and PNG curves")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "vs_trl_cpu")
    p = sub.add_parser("_trl", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--eval-every", type=int, required=True)
    p.add_argument("--result", required=True)
    p.add_argument("--stop-at-target", action="store_true")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = ap.parse_args(argv)

    if args.cmd == "_trl":
        trl_worker(args)
        return 0
    if args.cmd == "report":
        from vs_trl_report import report  # bench/vs_trl_report.py: tables and curves

        report(args.out)
        return 0
    if args.cmd == "run":
        run_one(args.name, args.seed, args)
        return 0
    for seed in args.seeds:  # seed by seed: a cut-short session still has whole seeds
        for name in args.names:
            run_one(name, seed, args)
    from vs_trl_report import report

    report(args.out)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    raise SystemExit(main())
