"""`rlcore`: the command-line entry point.

Each subcommand module exposes ``add_parser(subparsers)`` (which sets ``func``) and ``run(args) -> int``. User errors
print a message and exit 1, never a traceback (``RL_CORE_DEBUG=1`` shows it).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from rl_core import __version__
from rl_core.util import stack_dump
from rl_core.placement.contract import WorkerError
from rl_core.problems import ConfigError, UserError
from rl_core.util.secrets import mask_text
from rl_core.plugins import KNOWN_DISTRIBUTIONS, dialect_hint

SUBCOMMANDS = ("plugins", "check", "train")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlcore", description="RL post-training for LLMs: PPO, GRPO and friends.")
    parser.add_argument("--version", action="version", version=f"rl-core {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"rl_core.cli.{name}_cmd")
        module.add_parser(sub)
    add_plugin_commands(sub)
    return parser


def add_plugin_commands(sub) -> None:
    """The plugins' sub-commands (rl_core.cards.CommandCard): each card's ``add_parser(subparsers)``; one that fails to
    load, or names a command that exists, is left out with a warning (``rlcore plugins`` lists it)."""
    from rl_core.plugins import get_registry

    commands = get_registry().cards.get("command", {})
    for name in sorted(commands):
        card = commands[name]
        if name in sub.choices:
            print(f"warning: the command {name!r} of {card.provider} is left out: rlcore has a command of that name", file=sys.stderr)
            continue
        try:
            card.load()(sub)
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not take the other commands down
            print(f"warning: the command {name!r} of {card.provider} is left out: {type(exc).__name__}: {exc}", file=sys.stderr)
    for name, dist in sorted(KNOWN_DISTRIBUTIONS["command"].items()):
        if name not in sub.choices:  # a first-party package's command, not installed: say which install brings it
            # no prefix characters: every argument, options too, is the stub's, so its install line is what it prints
            stub = sub.add_parser(name, help=f"(not installed: pip install {dist})", add_help=False, prefix_chars="\0")
            stub.add_argument("rest", nargs=argparse.REMAINDER)
            stub.set_defaults(func=lambda args, name=name, dist=dist: _not_installed(name, dist))


def _not_installed(name: str, dist: str) -> int:
    print(f"error: `rlcore {name}` comes with the distribution {dist}, which is not installed: pip install {dist}", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    stack_dump.install()  # `kill -USR1 <pid>` prints every thread's stack (a run that seems stuck)
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # overrides may come after flags: `rlcore train run.yaml --dry-run rollout.n=8`
    if extra and hasattr(args, "overrides") and all("=" in e and not e.startswith("-") for e in extra):
        args.overrides = [*args.overrides, *extra]
    elif extra:
        hints = "".join(dialect_hint(e.split("=")[0]) for e in extra if e.startswith("--"))
        parser.error(f"unrecognized arguments: {' '.join(extra)}" + (f" (an option of a dialect plugin{hints})" if hints else ""))
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print("error: the config has problems:\n", file=sys.stderr)
        for p in exc.problems:
            print("  " + p.render().replace("\n", "\n  "), file=sys.stderr)
        return 1
    except (UserError, FileNotFoundError, WorkerError) as exc:
        if os.environ.get("RL_CORE_DEBUG"):
            raise
        print(f"error: {mask_text(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
