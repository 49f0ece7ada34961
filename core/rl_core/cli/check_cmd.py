"""`rlcore check CONFIG [key=value ...]`: resolve and normalise without touching a device."""

from __future__ import annotations

import sys

import yaml

from rl_core.cli.plugins_cmd import print_load_problems
from rl_core.config.load import config_to_dict, load_report, option_dests
from rl_core.plugins import get_registry
from rl_core.problems import Problem, ConfigError
from rl_core.cli.check_target import as_elsewhere, parse_target, target_overrides, target_problems
from rl_core.plan.checks import build_plan


def add_config_args(p, config_help: str = "YAML config file (omit to check the built-in defaults plus key=value overrides)") -> None:
    from rl_core.config.load import dialects

    p.add_argument("config", nargs="?", help=config_help)
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. rollout.n=8 (a dialect plugin reads its own grammar)")
    for card in dialects():  # the options a dialect reads (rl_core.cards.DialectCard.cli_options)
        for flag, kwargs in card.cli_options:
            p.add_argument(flag, **{"help": f"({card.name}) " + kwargs.get("help", ""), **{k: v for k, v in kwargs.items() if k != "help"}})


def config_kwargs(args) -> dict:
    """load_report's keyword arguments from the command line: the dialects' options (rl_core.config.load.option_dests)."""
    return {dest: getattr(args, dest, None) for dest in option_dests()}


def split_config_args(args) -> tuple[str | None, list[str]]:
    """Allow `rlcore check a.b=1` (no file): a first argument with '=' is an override."""
    config, overrides = args.config, list(args.overrides)
    if config is not None and "=" in config and not config.endswith((".yaml", ".yml")):
        overrides.insert(0, config)
        config = None
    return config, overrides


def add_parser(sub) -> None:
    p = sub.add_parser("check", help="resolve a config: print the stack, per-rank sizes and every problem")
    add_config_args(p)
    p.add_argument("--quiet", action="store_true", help="print problems only")
    p.add_argument(
        "--skip-device-check", action="store_true",
        help="check a config meant for another machine: leave out this machine's GPUs and CPU cores; engines and loggers "
             "not installed here are warnings (everything else is checked)",
    )
    p.add_argument("--target", metavar="MACHINE",
                   help="check for another machine, e.g. gpu:8x80GB (8 GPUs of 80 GB per node), gpu:1x80GB,ram=128GB (and the "
                        "node's RAM, checked against the host-memory estimate): its device and GPUs per node "
                        "instead of this machine's (implies --skip-device-check)")
    p.set_defaults(func=run)


def print_plan(stack, out=None) -> None:
    out = out or sys.stdout  # looked up per call: a default bound at import outlives a replaced sys.stdout
    print("stack:", file=out)
    for label, card in (("rollout", stack.rollout), ("train", stack.train), ("estimator", stack.estimator),
                        ("policy loss", stack.policy_loss), ("reward", stack.reward), ("weight converter", stack.converter)):
        if card is not None:
            print(f"  {label:<17} {card.name:<20} ({card.provider})", file=out)
    if stack.reward is None:
        custom = stack.config.reward.custom
        how = f"custom function {custom.name} in {custom.path}" if custom.path else "by each sample's data_source"
        print(f"  {'reward':<17} {how}", file=out)
    print("sizes:", file=out)
    for label, value in stack.sizes.table():
        print(f"  {label:<33} {value}", file=out)
    print_memory(stack, out)
    if stack.features is not None and (disk := stack.features.installed_hook("print_disk")) is not None:
        disk(stack, out)  # rl-memory-estimate's disk estimate


def print_memory(stack, out=None) -> None:
    """The memory estimate: rl-memory-estimate's (its feature's hook ``print_memory``); without it, one line saying so."""
    out = out or sys.stdout
    hook = stack.features.installed_hook("print_memory") if stack.features is not None else None
    if hook is None:
        print("memory estimate: not estimated, nor the disk a run writes (rl-memory-estimate is not installed: pip install rl-memory-estimate)", file=out)
        return
    hook(stack, out)


def print_problems(problems, out=None) -> None:
    """Every problem, errors and warnings, in the order given (rl_core.plan.checks orders them as a user fixes them)."""
    out = out or sys.stderr
    for p in problems:
        print(("error: " if p.severity == "error" else "warning: ") + p.render(), file=out)


def run(args) -> int:
    path, overrides = split_config_args(args)
    registry = get_registry()
    target = parse_target(args.target, registry) if args.target else None
    if isinstance(target, Problem):
        raise ConfigError([target])
    elsewhere = args.skip_device_check or target is not None
    loaded = load_report(path, [*overrides, *(target_overrides(target) if target else [])], **config_kwargs(args))
    report = build_plan(loaded, registry, devices=not elsewhere, extra=lambda config: target_problems(config, target, registry),
                        rewrite=as_elsewhere if elsewhere else None)
    stack = report.plan
    if stack is not None and not args.quiet:
        print("# resolved config")
        print(yaml.safe_dump(config_to_dict(stack.config), sort_keys=False).rstrip())
        print()
        print_plan(stack)
    print_profile(loaded)
    print_load_problems(registry)
    print_problems(report.problems)
    if report.errors:
        n = len(report.errors)
        print(f"\n{n} problem{'s' if n > 1 else ''}, every one this check can find: fix {'them' if n > 1 else 'it'} and run rlcore check again", file=sys.stderr)
        return 1
    print("ok: the config resolves" + (f" for {target.describe()}" if target else ""), file=sys.stderr)
    return 0


def print_profile(loaded, out=None) -> None:
    """Under a dialect's profile: every default taken from the dialect that differs from rl-core's own."""
    out = out or sys.stdout
    if loaded.profile == "rl-core" or not loaded.profile_defaults:
        return
    print(loaded.defaults_heading or f"{loaded.profile} profile: unset keys take {loaded.profile}'s defaults; where they differ from rl-core's:", file=out)
    for key, theirs, own in loaded.profile_defaults:
        print(f"  {key:<36} {theirs!r:<34} (rl-core: {own!r})", file=out)
