"""``rlcore import-verl run.sh > run.yaml``: the native rl-core config a verl launch script means.

The script is read, not run: its ``python -m verl.trainer.main_ppo ...`` command (``python3``, ``uv run``,
``torchrun`` too; lines continued with ``\\`` joined), with the script's plain ``NAME=value`` assignments and
the environment substituted for ``$NAME`` / ``${NAME}`` / ``${NAME:-default}``. The command's overrides and
``--config-path`` / ``--config-name`` are a verl launch (verl's defaults for what it leaves unset, as
``main_ppo`` does); the resolved config goes to stdout as YAML, and to stderr what was mapped (verl's key ->
rl-core's), which verl defaults were applied, what was ignored (warnings) and what was refused (errors; then
nothing is written and the exit status is 1).
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

import yaml

from rl_core.config.load import config_to_dict, load_report
from rl_core.problems import UserError

#: verl's entry modules and the config each composes when the script gives no --config-name
DEFAULT_CONFIG = {"verl.trainer.main_ppo": "ppo_trainer", "verl.trainer.main_ppo_sync": "ppo_trainer", "recipe.dapo.main_dapo": "dapo_trainer"}
_ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_]\w*)=(.*)$")
_VAR = re.compile(r"\$\{([A-Za-z_]\w*)(?::?-([^}]*))?\}|\$([A-Za-z_]\w*)")


def add_parser(sub) -> None:
    p = sub.add_parser("import-verl", help="write the native config a verl launch script means (stdout), and what was mapped, "
                       "ignored and refused (stderr)")
    p.add_argument("script", help="a verl launch script (bash) running python -m verl.trainer.main_ppo ...")
    p.set_defaults(func=run)


def _expand(text: str, env: dict[str, str]) -> str:
    def one(m: re.Match) -> str:
        name = m.group(1) or m.group(3)
        if name in env and env[name] != "":
            return env[name]
        return _expand(m.group(2), env) if m.group(2) is not None else env.get(name, "")

    return _VAR.sub(one, text)


def launch_of(text: str, env: dict[str, str] | None = None) -> tuple[str, list[str]]:
    """``(module, arguments after it)`` of the script's verl command."""
    env = dict(os.environ if env is None else env)
    lines = re.sub(r"\\\n", " ", text).splitlines()
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        m = _ASSIGN.match(stripped)
        if m and " -m " not in stripped:
            try:
                words = shlex.split(_expand(m.group(2), env), comments=True)
            except ValueError:
                continue
            env[m.group(1)] = words[0] if len(words) == 1 else " ".join(words)
            continue
        if re.search(r"-m\s+(verl|recipe)\.", stripped):
            words = shlex.split(_expand(stripped, env), comments=True)
            at = words.index("-m")
            return words[at + 1], [w for w in words[at + 2:] if w not in ("$@", '"$@"')]
    raise UserError("the script runs no `python -m verl....` command (a verl launch script runs python3 -m verl.trainer.main_ppo key=value ...)")


def split_options(args: list[str]) -> tuple[dict[str, str | None], list[str]]:
    """``--config-path`` / ``--config-name`` (``--x=v`` or ``--x v``) apart from the overrides."""
    options: dict[str, str | None] = {"config_path": None, "config_name": None}
    rest: list[str] = []
    it = iter(args)
    for arg in it:
        flag, eq, value = arg.partition("=")
        if flag in ("--config-path", "--config-name", "-cp", "-cn"):
            dest = "config_path" if flag in ("--config-path", "-cp") else "config_name"
            options[dest] = value if eq else next(it, None)
        elif not arg.startswith("-"):
            rest.append(arg)
    return options, rest


def run(args) -> int:
    path = Path(args.script)
    if not path.is_file():
        raise UserError(f"{path}: no such file (give the verl launch script, e.g. examples/grpo_trainer/run_qwen2-7b.sh)")
    module, argv = launch_of(path.read_text())
    options, overrides = split_options(argv)
    if options["config_name"] is None:
        options["config_name"] = DEFAULT_CONFIG.get(module, "ppo_trainer")
    loaded = load_report(None, overrides, **options)
    err = sys.stderr
    print(f"# {path}: {module}, --config-name {options['config_name']}, {len(overrides)} overrides", file=err)
    mapped = sorted((written, ours) for ours, written in loaded.origin.items() if written.lstrip("+~") != ours)
    if mapped:
        print("mapped:", file=err)
        for written, ours in mapped:
            print(f"  {written} -> {ours}", file=err)
    if loaded.profile_defaults:
        print("verl's defaults (unset in the script) where they differ from rl-core's:", file=err)
        for key, theirs, own in loaded.profile_defaults:
            print(f"  {key} = {theirs!r} (rl-core: {own!r})", file=err)
    warnings = [p for p in loaded.problems if p.severity != "error"]
    refused = [p for p in loaded.problems if p.severity == "error"]
    for title, found in (("ignored / warnings:", warnings), ("refused:", refused)):
        if found:
            print(title, file=err)
            for p in found:
                print("  " + p.render().replace("\n", "\n  "), file=err)
    if refused or loaded.config is None:
        print(f"{len(refused)} refused: no config written; fix the script's keys (docs/migrating-from-verl.md)", file=err)
        return 1
    print(yaml.safe_dump(config_to_dict(loaded.config), sort_keys=False).rstrip())
    return 0
