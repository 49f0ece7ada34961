"""`rlcore train CONFIG [key=value ...] [--dry-run]`."""

from __future__ import annotations

import sys

from rl_core.cli.check_cmd import add_config_args, config_kwargs, print_plan, print_problems, split_config_args
from rl_core.cli.plugins_cmd import print_load_problems
from rl_core.cli.check_target import node_problems
from rl_core.config.load import load_report
from rl_core.plan.checks import build_plan
from rl_core.plan.model_path import run_here
from rl_core.plugins import get_registry
from rl_core.problems import UserError
from rl_core.util.console import busy_cpu_warning
from rl_core.util.stopping import Interrupted, StopSignals, signal_name
from rl_core.plan.builtin_model import with_builtin_model


def add_parser(sub) -> None:
    p = sub.add_parser("train", help="train a model (resumes automatically from the latest checkpoint)")
    add_config_args(p, config_help="YAML config file, e.g. examples/quickstart.yaml (key=value overrides after it)")
    p.add_argument("--dry-run", action="store_true", help="resolve and normalise, build nothing heavy, print the plan")
    p.add_argument("--no-progress", action="store_true", help="no live progress bar")
    p.add_argument(
        "--resume-anyway", action="count", default=0,
        help="resume the checkpoint in trainer.output_dir even though it was written under a different config "
        "(twice: even when that drops trained LoRA adapters)",
    )
    p.set_defaults(func=run_stoppable)


def run(args) -> int:
    path, overrides = split_config_args(args)
    if path is None and not overrides:
        raise UserError("name a config, e.g. `rlcore train examples/quickstart.yaml` (add key=value overrides after it)")
    loaded = load_report(path, overrides, **config_kwargs(args))
    registry = get_registry()
    # the plan, once; several nodes need Ray (refused as in `rlcore check`), and the run happens here: a model folder
    # that is not here is an error, not a warning as in `rlcore check`
    report = build_plan(loaded, registry, extra=node_problems, rewrite=run_here)
    print_load_problems(registry)
    print_problems(report.problems)
    if report.errors:
        print(f"\n{len(report.errors)} problem(s): nothing was started", file=sys.stderr)
        return 1
    stack = report.plan if args.dry_run else with_builtin_model(report.plan)
    print_plan(stack)
    from rl_core.trainer.loop import describe_plan, train

    print(describe_plan(stack))
    if stack.config.trainer.device == "cpu":
        if busy := busy_cpu_warning():
            print(f"warning: {busy}", file=sys.stderr)
    if args.dry_run:
        print("dry run: nothing was built", file=sys.stderr)
        return 0
    try:
        final = train(stack, progress=False if args.no_progress else None, resume_anyway=args.resume_anyway)
    except Interrupted as exc:  # SIGINT / SIGTERM: one line, exit 128 + the signal's number (130, 143)
        print(f"\n{exc.message or exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    keys = ("reward/mean", "val/accuracy", "val/reward_mean")
    summary = ", ".join(f"{k}={final[k]:.4g}" for k in keys if k in final)
    print(f"done: {stack.config.trainer.output_dir}" + (f" ({summary})" if summary else ""))
    return 0


def run_stoppable(args) -> int:
    """:func:`run` with SIGINT / SIGTERM handled from the first moment (loading the config, resolving the stack)."""
    try:
        with StopSignals():
            return run(args)
    except Interrupted as exc:  # before train() took over: nothing was built
        print(f"\nstopped by {signal_name(exc.signum)} while starting: nothing was trained or saved", file=sys.stderr, flush=True)
        return exc.exit_code
