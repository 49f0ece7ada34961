"""`rlcore eval RUN_DIR_OR_MODEL [CONFIG] [key=value ...] [--data FILE] [--out FILE]`: validation only (verl's val_only).

The target is a finished run's folder (its ``config.yaml`` and ``hf_final``) or a model with CONFIG naming the data
and reward. The loop's own validation (:meth:`rl_core.trainer.loop.Trainer.validate`) runs over the validation data
or ``--data``; the scores, overall and per data source, are printed and written as JSON (``RUN_DIR/eval/<data>.json``
or ``--out``). Nothing else is kept: the trainer works in a temporary folder.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from rl_core.cli.check_cmd import print_problems
from rl_core.config.load import load_report
from rl_core.plan.builtin_model import BUILTIN, with_builtin_model
from rl_core.plan.checks import build_plan
from rl_core.plan.model_path import run_here
from rl_core.plugins import get_registry
from rl_core.problems import UserError
from rl_core.trainer.outputs import CONFIG_FILE

# what eval sets whatever the config says: one short-lived trainer in a temporary folder, validation only, and no
# reference / critic model built for nothing (the estimator does not matter when nothing is trained)
EVAL_OVERRIDES = (
    "trainer.total_training_steps=1", "trainer.save_freq=-1", "trainer.test_freq=1", "trainer.resume=false",
    "trainer.loggers=[]", "trainer.log_val_generations=0", "actor.use_kl_loss=false", "algorithm.use_kl_in_reward=false",
    "algorithm.adv_estimator=grpo", "critic.enable=false",
)


class EvalError(UserError):
    """``rlcore eval``'s target is neither a run folder with a final model nor a model."""


def add_parser(sub) -> None:
    p = sub.add_parser("eval", help="validation only: score a run's final model (or any model) on the validation data")
    p.add_argument("target", metavar="RUN_DIR_OR_MODEL", help="a run's trainer.output_dir (uses its config.yaml and hf_final), "
                   "a Hugging Face model folder or builtin:NAME")
    p.add_argument("config", nargs="?", help="YAML config (data, reward, rollout); default: the run's config.yaml")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. data.val_max_samples=32")
    p.add_argument("--data", help="score this .jsonl / .parquet file instead of the config's validation data")
    p.add_argument("--out", help="where to write the scores (JSON); default RUN_DIR/eval/<data>.json, or ./eval_<model>.json")
    p.set_defaults(func=run)


def eval_target(target: str, config: str | None) -> tuple[str | None, list[str], str]:
    """``(config file, overrides that point the model at the target, default output file)``."""
    path = Path(target).expanduser()
    if target.startswith(BUILTIN) or (path / "config.json").is_file():
        if config is None:
            raise EvalError(f"{target!r} is a model: name the config that holds its data and reward, e.g. "
                            f"`rlcore eval {target} examples/quickstart.yaml`")
        return config, [f"model.path={target}"], f"eval_{path.name or target[len(BUILTIN):]}.json"
    if not (path / CONFIG_FILE).is_file():
        raise EvalError(f"{target!r} is neither a run folder (no {CONFIG_FILE}) nor a model folder (no config.json) nor builtin:NAME")
    final = path / "hf_final"
    if not final.is_dir():
        raise EvalError(f"the run in {target!r} has no final model ({final} does not exist: the run did not finish); "
                        "finish it (`rlcore train` with the same config resumes it) or name a model folder")
    if (final / "adapter_config.json").is_file() and not (final / "config.json").is_file():
        model = [f"model.lora_adapter_path={final}"]  # a LoRA run: its adapters on the run's base model
    else:
        model = [f"model.path={final}", f"model.tokenizer_path={final}", "model.lora_rank=0", "model.lora_adapter_path=null"]
    return config or str(path / CONFIG_FILE), model, str(path / "eval" / "scores.json")


def scores_per_source(scores: Any, sources) -> dict[str, float]:
    """``val/source/<data_source>/{reward_mean,accuracy,samples}`` of validation ``scores`` (one per row, ``sources`` alike)."""
    import torch

    out: dict[str, float] = {}
    names = [str(s) for s in sources]
    for name in sorted(set(names)):
        rows = torch.tensor([n == name for n in names], dtype=torch.bool)
        picked = scores[rows].float()
        out[f"val/source/{name}/reward_mean"] = picked.mean().item()
        out[f"val/source/{name}/accuracy"] = (picked >= 1.0 - 1e-6).float().mean().item()
        out[f"val/source/{name}/samples"] = float(picked.numel())
    return out


def run(args) -> int:
    from rl_core.trainer.loop import Trainer

    config, overrides = args.config, list(args.overrides)
    if config is not None and "=" in config and not config.endswith((".yaml", ".yml")):
        overrides.insert(0, config)
        config = None
    config, model, out = eval_target(args.target, config)
    if args.data:
        if not Path(args.data).is_file():
            raise EvalError(f"--data {args.data!r} does not exist; name a .jsonl or .parquet file of prompts in verl's row format")
        overrides += [f"data.val_files=[{args.data}]", *(["data.val_generator.name=''"] if "data.val_generator" in get_registry().cards["config_section"] else [])]  # rl-data's section
        out = str(Path(out).with_name(f"{Path(args.data).stem}.json")) if args.out is None and "/eval/" in out else out
    work = tempfile.mkdtemp(prefix="rlcore-eval-")
    try:
        loaded = load_report(config, [*overrides, *model, *EVAL_OVERRIDES, f"trainer.output_dir={work}"])
        report = build_plan(loaded, get_registry(), rewrite=run_here)
        print_problems(report.problems)
        if report.errors:
            print(f"\n{len(report.errors)} problem(s): nothing was evaluated", file=sys.stderr)
            return 1
        stack = with_builtin_model(report.plan)
        trainer = Trainer(stack, progress=False)
        try:
            if trainer.val_loader is None:
                raise EvalError("no validation data: set data.val_files (or data.val_generator), or pass --data FILE")
            scores = trainer.validate(per_source=scores_per_source)
        finally:
            trainer.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = args.out or out
    result = {"model": stack.config.model.path, "lora_adapter_path": stack.config.model.lora_adapter_path,
              "data": list(stack.config.data.val_files) or stack.config.data.val_generator.name, **scores}
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    Path(out).write_text(json.dumps(result, indent=1) + "\n")
    print(format_scores(scores))
    print(f"wrote {out}")
    return 0


def format_scores(scores: dict[str, float]) -> str:
    """The overall line, then one line per data source (``val/<source>/<name>`` keys)."""
    lines = [f"all: accuracy={scores['val/accuracy']:.4f} reward_mean={scores['val/reward_mean']:.4f} samples={int(scores['val/samples'])}"]
    sources = sorted({k[len("val/"):].rsplit("/", 1)[0] for k in scores if k.count("/") >= 2 and k.startswith("val/source/")})
    for s in sources:
        k = f"val/{s}"
        lines.append(f"{s[len('source/'):]}: accuracy={scores[k + '/accuracy']:.4f} reward_mean={scores[k + '/reward_mean']:.4f} "
                     f"samples={int(scores[k + '/samples'])}")
    return "\n".join(lines)
