"""`rlcore train CONFIG [key=value ...] [--dry-run]`."""

from __future__ import annotations

import sys

import attrs

from rl_core.cli.check_cmd import add_config_args, config_kwargs, print_plan, print_problems, split_config_args
from rl_core.cli.plugins_cmd import print_load_problems
from rl_core.plugins import get_registry
from rl_core.problems import UserError, errors
from rl_core.resolver import resolve
from rl_core.trainer.stopping import Interrupted

BUILTIN_PREFIX = "builtin:"


def add_parser(sub) -> None:
    p = sub.add_parser("train", help="train a model (resumes automatically from the latest checkpoint)")
    add_config_args(p, config_help="YAML config file, e.g. examples/quickstart.yaml (key=value overrides after it)")
    p.add_argument("--dry-run", action="store_true", help="resolve and normalise, build nothing heavy, print the plan")
    p.add_argument("--no-progress", action="store_true", help="no live progress bar")
    p.add_argument(
        "--resume-anyway",
        action="store_true",
        help="resume the checkpoint in trainer.output_dir even though it was written under a different config",
    )
    p.set_defaults(func=run_stoppable)


def materialise_builtin_model(config):
    """``model.path: builtin:smollm2`` -> the offline model, converted once into a cache folder."""
    path = config.model.path
    if not path.startswith(BUILTIN_PREFIX):
        return config
    from rl_core.models import ensure_builtin_model

    from rl_core.console import phase

    with phase(f"preparing {path} (converted on first use, then cached)"):
        local = ensure_builtin_model(path[len(BUILTIN_PREFIX):])
    return attrs.evolve(config, model=attrs.evolve(config.model, path=str(local)))


def run(args) -> int:
    path, overrides = split_config_args(args)
    if path is None and not overrides:
        raise UserError("name a config, e.g. `rlcore train examples/quickstart.yaml` (add key=value overrides after it)")
    from rl_core.check_all import collect
    from rl_core.config.load import load_report
    from rl_core.model_path import model_path_problems

    loaded = load_report(path, overrides, **config_kwargs(args))
    registry = get_registry()
    from rl_core.cli.check_target import node_problems

    report = collect(loaded, registry, extra=node_problems)  # several nodes need Ray: refused as in `rlcore check`
    # the run happens here: a model folder that is not here is an error, not a warning as in `rlcore check`
    strict = model_path_problems(report.config, strict=True) if report.config is not None else []
    problems = [p for p in report.problems if p.key not in {s.key for s in strict}] + strict
    print_load_problems(registry)
    print_problems(problems)
    if errors(problems):
        print(f"\n{len(errors(problems))} problem(s): nothing was started", file=sys.stderr)
        return 1
    config = loaded.config if args.dry_run else materialise_builtin_model(loaded.config)
    stack, late = resolve(config, registry)  # the world was read by collect(); this resolves the built-in model's folder
    if stack is None:
        print_problems([p for p in loaded.as_written(late) if p not in problems])
        print(f"\n{len(errors(late))} problem(s): nothing was started", file=sys.stderr)
        return 1
    print_plan(stack)
    from rl_core.trainer.loop import describe_plan, train

    print(describe_plan(stack))
    if stack.config.trainer.device == "cpu":
        from rl_core.console import busy_cpu_warning

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
    from rl_core.trainer.stopping import StopSignals, signal_name

    try:
        with StopSignals():
            return run(args)
    except Interrupted as exc:  # before train() took over: nothing was built
        print(f"\nstopped by {signal_name(exc.signum)} while starting: nothing was trained or saved", file=sys.stderr, flush=True)
        return exc.exit_code
