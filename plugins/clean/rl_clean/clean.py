"""`rlcore clean RUN_DIR [--dry-run]`: free a run folder's checkpoints, keep what the run produced.

Removes ``checkpoints/`` and an interrupted final write's leftovers (``.hf_final.partial``, ``.hf_final.old``); keeps
the config, metrics, plots, loggers' folders, generations, ``eval/`` and ``hf_final``. The run can no longer be
resumed. The run's lock is taken first: a run still writing into the folder is refused.
"""

from __future__ import annotations

import os
import shutil

from rl_core.problems import UserError
from rl_core.trainer.outputs import CONFIG_FILE, output_lock

REMOVED = ("checkpoints", ".hf_final.partial", ".hf_final.old")


def add_parser(sub) -> None:
    p = sub.add_parser("clean", help="remove a run folder's checkpoints (keeps metrics, plots and the final model)")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run's trainer.output_dir")
    p.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    p.set_defaults(func=run)


def clean(run_dir: str, *, dry_run: bool = False) -> list[tuple[str, int]]:
    """Remove the checkpoints of the run in ``run_dir``; returns ``(path, bytes)`` of what was (or would be) removed."""
    if not os.path.isdir(run_dir) or not os.path.isfile(os.path.join(run_dir, CONFIG_FILE)):
        raise UserError(f"{run_dir!r} is not a run folder (no {CONFIG_FILE} in it); name a run's trainer.output_dir")
    from rl_core.checkpoints.kept import tree_size  # imports torch: every rlcore command builds this parser

    found = [(p, tree_size(p)) for p in (os.path.join(run_dir, n) for n in REMOVED) if os.path.exists(p)]
    if dry_run or not found:
        return found
    with output_lock(run_dir):  # a run writing into the folder is refused, naming its pid
        for path, _ in found:
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    return found


def run(args) -> int:
    from rl_core.checkpoints.kept import size_text  # imports torch (above)

    found = clean(args.run_dir, dry_run=args.dry_run)
    if not found:
        print(f"{args.run_dir}: no checkpoints to remove")
        return 0
    total = sum(n for _, n in found)
    verb = "would remove" if args.dry_run else "removed"
    for path, n in found:
        print(f"{verb} {path} ({size_text(n)})")
    final = os.path.join(args.run_dir, "hf_final")
    kept = f"kept the metrics, plots and {'the final model ' + final if os.path.isdir(final) else 'no final model (the run did not finish)'}"
    print(f"{verb} {size_text(total)}; {kept}" + ("" if args.dry_run else "; the run can no longer be resumed"))
    return 0
