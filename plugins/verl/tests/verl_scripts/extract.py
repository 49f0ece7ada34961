"""Extract the trainer overrides of verl's example launch scripts into ``scripts.json`` (test data).

Usage (a verl checkout or bare mirror, e.g. the one the ``fetch`` tool writes)::

    python plugins/verl/tests/verl_scripts/extract.py /path/to/verl.git [--out plugins/verl/tests/verl_scripts/scripts.json]

Each ``examples/**/*trainer*/*.sh`` is run by bash itself, so arrays, ``${VAR:-default}``, ``$((...))``,
``case`` branches and quoting resolve exactly as they do for a verl user with the script's defaults
(``VERL_USE_UV=0``, ``INFER_BACKEND=vllm``, a GPU machine; variables a script expects from the
environment without a default read as empty, and path keys are replaced anyway). The run is confined: an empty temporary HOME and working folder, a
PATH holding only stubs and a few text utilities, a 20 s limit. ``python``/``python3``/``uv``/``torchrun``
stubs record the arguments of the ``-m verl.trainer.*`` command and start nothing; any other Python,
``hf``, ``huggingface-cli``, ``nvidia-smi``, ``wget``, ``curl`` call does nothing. Only the overrides are
kept (never the scripts' text); model and data paths are replaced by local test paths
(``MODEL`` / ``TRAIN`` / ``VAL`` below) so the test needs no download.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

MODEL = "builtin:smollm2"
TRAIN = "tests/fixtures/data/tiny_gsm8k.jsonl"
VAL = "tests/fixtures/data/tiny_gsm8k.jsonl"
#: keys whose value is a path of the author's machine, replaced by a local one
PATH_KEYS = {
    "data.train_files": f"['{TRAIN}']",
    "data.val_files": f"['{VAL}']",
    "actor_rollout_ref.model.path": MODEL,
    "critic.model.path": MODEL,
    "critic.model.tokenizer_path": MODEL,
    "reward_model.model.path": MODEL,
    "reward.reward_model.model_path": MODEL,
    "reward_model.model.input_tokenizer": MODEL,
    "actor_rollout_ref.model.tokenizer_path": MODEL,
    "trainer.default_local_dir": "outputs/verl_script",
}

_RECORDER = r"""#!/bin/bash
# records `-m verl.*` commands; anything else does nothing (or fails for `-c 'import torch_npu'`)
for a in "$@"; do case "$a" in *torch_npu*) exit 1;; esac; done
i=0; mod=
for a in "$@"; do
  if [ "$prev" = "-m" ]; then mod="$a"; fi; prev="$a"
done
case "$mod" in verl.*|recipe.*)
  "$REAL_PY" -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "$@" >> "$VERL_DUMP";;
esac
exit 0
"""
#: functions shadowing builtins: raising the open-files limit is refused in the sandbox; a variable the
#: script expects from the user's environment (HDFS_ROOT, RAY_DATA_HOME, ...) reads as empty instead of aborting
_PRELUDE = "ulimit() { :; }\nset() { builtin set \"$@\"; builtin set +u; }\n"
#: the environment of a verl user on a GPU machine with the scripts' documented defaults
SCRIPT_ENV = {"VERL_USE_UV": "0", "INFER_BACKEND": "vllm"}
_NOOP = "#!/bin/bash\nexit 0\n"
_UTILS = ("date", "dirname", "basename", "mkdir", "env", "cat", "tee", "head", "tail", "awk", "sed", "tr", "cut",
          "seq", "expr", "nproc", "realpath", "readlink", "grep", "printf", "sleep", "wc", "sort", "true", "false")


def _sandbox(root: Path) -> Path:
    bin_ = root / "bin"
    bin_.mkdir()
    for name in ("python", "python3", "uv", "torchrun", "ray"):
        (bin_ / name).write_text(_RECORDER)
    for name in ("hf", "huggingface-cli", "nvidia-smi", "npu-smi", "wget", "curl", "pip", "git", "ls", "rm", "cp", "mv"):
        (bin_ / name).write_text(_NOOP)
    for p in bin_.iterdir():
        p.chmod(0o755)
    for name in _UTILS:
        real = shutil.which(name)
        if real:
            (bin_ / name).symlink_to(real)
    return bin_


def run_script(text: str, root: Path) -> list[list[str]]:
    home = root / "home"
    home.mkdir(exist_ok=True)
    dump = root / "dump.jsonl"
    dump.write_text("")
    script = root / "script.sh"
    script.write_text(_PRELUDE + text)
    env = {"PATH": str(root / "bin"), "HOME": str(home), "VERL_DUMP": str(dump), "REAL_PY": sys.executable, **SCRIPT_ENV}
    subprocess.run(["/bin/bash", str(script)], cwd=home, env=env, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=20, check=False)
    return [json.loads(line) for line in dump.read_text().splitlines() if line.strip()]


def overrides_of(argv: list[str]) -> tuple[str, list[str]]:
    """``(module, overrides)`` of one recorded command; Hydra flags (``--config-path`` ...) are kept."""
    i = argv.index("-m")
    module, rest = argv[i + 1], argv[i + 2:]
    return module, [replace_paths(a) for a in rest]


def replace_paths(arg: str) -> str:
    key, sep, _ = arg.partition("=")
    bare = key.lstrip("+~")
    if sep and bare in PATH_KEYS:
        return f"{key}={PATH_KEYS[bare]}"
    return arg


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repo", help="a verl git checkout or bare mirror")
    ap.add_argument("--out", default=str(Path(__file__).with_name("scripts.json")))
    ap.add_argument("--recipe", help="a verl-recipe checkout or mirror: its dapo/*.sh are extracted too (keys 'recipe:dapo/...')")
    args = ap.parse_args()
    git = ["git", "-C", args.repo]
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    names = subprocess.run([*git, "ls-tree", "-r", "HEAD", "--name-only"], capture_output=True, text=True, check=True).stdout.split()
    names = [n for n in names if n.startswith("examples/") and n.endswith(".sh") and "trainer" in n]
    out = {"verl_commit": commit, "source": "https://github.com/verl-project/verl", "scripts": {}}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _sandbox(root)
        for name in sorted(names):
            text = subprocess.run([*git, "show", f"HEAD:{name}"], capture_output=True, text=True, check=True).stdout
            commands = [overrides_of(a) for a in run_script(text, root)]
            commands = [(m, o) for m, o in commands if m.startswith("verl.trainer.main")]
            if not commands:
                print(f"{name}: no verl.trainer.main_* command recorded", file=sys.stderr)
                continue
            module, overrides = commands[-1]
            out["scripts"][name] = {"module": module, "overrides": overrides}
        if args.recipe:
            rgit = ["git", "-C", args.recipe]
            out["recipe_commit"] = subprocess.run([*rgit, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
            rnames = subprocess.run([*rgit, "ls-tree", "-r", "HEAD", "--name-only"], capture_output=True, text=True, check=True).stdout.split()
            for name in sorted(n for n in rnames if n.startswith("dapo/") and n.endswith(".sh")):
                text = subprocess.run([*rgit, "show", f"HEAD:{name}"], capture_output=True, text=True, check=True).stdout
                commands = [c for c in (overrides_of(a) for a in run_script(text, root)) if "main" in c[0]]
                if commands:
                    module, overrides = commands[-1]
                    out["scripts"][f"recipe:{name}"] = {"module": module, "overrides": overrides}
                else:
                    print(f"recipe {name}: no trainer command recorded", file=sys.stderr)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"{len(out['scripts'])} scripts ({len(names)} verl examples, the rest verl-recipe's dapo/) -> {args.out} (verl {commit[:12]})")


if __name__ == "__main__":
    main()
