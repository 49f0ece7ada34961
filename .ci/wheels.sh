#!/usr/bin/env bash
# The distributions as users install them: build every distribution's sdist and wheel
# (`python -m build`, the wheel built from the sdist, in a build venv that holds only `build` and the
# pyprojects' [build-system] requires), check each wheel against the source tree, install the wheels
# -- not editable -- into a fresh venv with only what a user installs, and run the CLI from a folder
# outside the checkout, so nothing can be imported from the source tree by accident. Fails on any
# missing module or data file.
#
#   bash .ci/wheels.sh                  # from a venv with pytest and packaging (requirements-dev.txt)
#   bash .ci/wheels.sh build            # only steps 0-1 (any python3: the build venv has what they need)
#   bash .ci/wheels.sh install          # only step 3, on what `build` left in RL_CORE_WHEELS_WORK (any python3)
#   bash .ci/wheels.sh check            # only steps 2 and 4, on what `build` and `install` left there
#
# .ci/run builds and installs in the background from its start (the main suite's tests/packaging checks these
# wheels, RL_CORE_WHEELS_DIR, instead of building its own: each distribution is built once per CI run) and runs
# `check` after the main suite. `build` writes $RL_CORE_WHEELS_WORK/built when the wheels are complete.
# The wheels, the build venv and the user's venv go to RL_CORE_WHEELS_WORK (default .venv-ci-wheels/,
# git-ignored, emptied at the start and kept after, like .ci/run's .venv-ci); the CLI runs in a temp
# folder outside the checkout. ~1.7 min of CPU time (2 cores) with a warm pip cache.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
export PIP_DISABLE_PIP_VERSION_CHECK=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
unset PYTHONPATH
PY=${PYTHON:-python}
log() { echo "[wheels] ${SECONDS}s: $*"; }

MODE=${1:-all}
case "$MODE" in
    all | build | install | check) ;;
    *) echo "usage: wheels.sh [build|install|check]" >&2; exit 2;;
esac
WORK=$(realpath -m "${RL_CORE_WHEELS_WORK:-.venv-ci-wheels}")
DIST=$WORK/dist VENV=$WORK/venv SRC=$WORK/src

if [[ $MODE == all || $MODE == build ]]; then
rm -rf "$SRC" "$DIST" "$WORK/build-venv" "$VENV" "$WORK/built"
mkdir -p "$DIST" "$SRC"

# 0. Build from a snapshot of what a clone has (tracked files, plus untracked ones git does not
#    ignore): no stale build/ or *.egg-info folders, and files that appear mid-run are not half-seen.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -co --exclude-standard -z | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$SRC"
else
    cp -r . "$SRC"
fi
cd "$SRC"

# 1. sdist + wheel of rl-core (the repo root) and of every plugins/*/ with a pyproject.toml. One build
#    venv with exactly what the pyprojects' [build-system] requires (what pip's build isolation would
#    install for each; ~4x faster than isolating every build), and `build` checks they are satisfied.
DIRS=(.)
for p in plugins/*/pyproject.toml; do DIRS+=("$(dirname "$p")"); done
python3 -m venv "$WORK/build-venv"
BPY=$WORK/build-venv/bin/python
"$BPY" -m pip install -q build  # brings `packaging`, which wheel_check.py reads the pyprojects with
mapfile -t BUILD_REQUIRES < <("$BPY" tests/packaging/wheel_check.py --build-requires)
log "build venv: build ${BUILD_REQUIRES[*]}"
"$BPY" -m pip install -q "${BUILD_REQUIRES[@]}"
for d in "${DIRS[@]}"; do
    log "build $d"
    if ! "$BPY" -m build --no-isolation --outdir "$DIST" "$d" >"$WORK/build.log" 2>&1; then
        tail -40 "$WORK/build.log" >&2
        echo "[wheels] building $d failed (log above)" >&2
        exit 1
    fi
done
log "built: $(cd "$DIST" && echo *)"
touch "$WORK/built"
fi
[[ $MODE == build ]] && exit 0
if [[ ! -e $WORK/built ]]; then
    echo "[wheels] no complete build in $WORK: run \`bash .ci/wheels.sh build\` first (or plain \`bash .ci/wheels.sh\`)" >&2
    exit 2
fi
cd "$SRC"
CORE_WHEEL=$(ls "$DIST"/rl_core-*.whl)

if [[ $MODE == all || $MODE == install ]]; then
rm -rf "$VENV" "$WORK/installed"
# 3. A fresh venv with what a user installs: torch (the local CPU wheel here), then the wheels by path
#    (rl-core with its quickstart extra; every plugin without engine extras: engines are tested elsewhere).
PLUGIN_WHEELS=()
for w in "$DIST"/*.whl; do [[ "$w" == "$CORE_WHEEL" ]] || PLUGIN_WHEELS+=("$w"); done
log "install into a fresh venv: torch==2.13.0 rl-core[quickstart] ${PLUGIN_WHEELS[*]##*/}"
python3 -m venv "$VENV"
VPY=$VENV/bin/python
"$VPY" -m pip install -q -U pip
# --no-compile: byte-compiling torch & co. up front costs ~1 min here; Python compiles what it imports
"$VPY" -m pip install -q --no-compile torch==2.13.0 "$CORE_WHEEL[quickstart]" "${PLUGIN_WHEELS[@]}"
"$VPY" -m pip check
log "installed"
touch "$WORK/installed"
fi
[[ $MODE == install ]] && exit 0
if [[ ! -e $WORK/installed ]]; then
    echo "[wheels] no venv of installed wheels in $WORK: run \`bash .ci/wheels.sh install\` first" >&2
    exit 2
fi
VPY=$VENV/bin/python
RUN=$(mktemp -d -t rlcore-wheels-run.XXXXXX)
trap 'rm -rf "$RUN"' EXIT
case "$RUN/" in "$REPO"/*) echo "[wheels] the run folder $RUN must be outside the checkout ($REPO): set TMPDIR" >&2; exit 2;; esac

# 2. Every module, data file and entry-point target in its wheel; metadata and engine extras as tested.
"$PY" tests/packaging/wheel_check.py --wheels "$DIST"
RL_CORE_WHEELS_DIR=$DIST "$PY" -m pytest -q -p no:cacheprovider tests/packaging/test_wheel_metadata.py

# 4. From outside the checkout: the installed copies are the ones imported, every plugin loads,
#    the quickstart config resolves, and a 2-step GRPO job on a tiny random model trains.
cp examples/quickstart.yaml "$RUN/quickstart.yaml"
cd "$RUN"
"$VPY" - "$VENV" "$DIST" <<'PY'
import importlib, json, subprocess, sys, zipfile
from pathlib import Path

venv, dist = Path(sys.argv[1]).resolve(), Path(sys.argv[2])


def rl_core_entry_points(wheel: Path) -> bool:
    with zipfile.ZipFile(wheel) as z:
        return any(n.endswith(".dist-info/entry_points.txt") and "[rl_core]" in z.read(n).decode() for n in z.namelist())


wheels = sorted(dist.glob("*.whl"))
names = sorted(w.name.split("-")[0] for w in wheels)
for name in names:
    f = Path(importlib.import_module(name).__file__).resolve()
    assert f.is_relative_to(venv), f"{name} was imported from {f}, not from the venv's installed wheel"
# the plugins: every wheel with an rl_core entry point (rl-core-testing, the test kit, has none: tests import it)
plugin_names = sorted(w.name.split("-")[0] for w in wheels if rl_core_entry_points(w))
out = subprocess.run([str(venv / "bin" / "rlcore"), "plugins", "--json"], capture_output=True, text=True)
assert out.returncode == 0, out.stdout + out.stderr
report = json.loads(out.stdout)
Path("plugins.json").write_text(out.stdout)
assert not report["errors"] and not report["conflicts"], report
loaded = {p["distribution"].replace("-", "_") for p in report["plugins"]}
assert set(plugin_names) <= loaded, f"installed but not loaded: {sorted(set(plugin_names) - loaded)}"
print(f"[wheels] imported from the venv: {', '.join(names)}; loaded as plugins: {', '.join(plugin_names)}")
print("[wheels] rlcore plugins: " + ", ".join(f"{c['kind']} {c['name']} ({c['distribution']})" for c in report["cards"]))
PY
"$VENV/bin/rlcore" check quickstart.yaml >check.log 2>&1 || { cat check.log; exit 1; }
grep '^ok:' check.log
# the cards' engine ranges (what `rlcore check` accepts) admit what the engine extras install
(cd "$SRC" && RL_CORE_PLUGINS_JSON=$RUN/plugins.json "$PY" -m pytest -q -p no:cacheprovider tests/packaging/test_engine_cards.py)

"$VPY" - <<'PY'
import json
from pathlib import Path

import yaml
from rl_core_testing.tiny_model import make_tiny_model_dir

make_tiny_model_dir("model")
rows = [
    {"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": f"{i % 7}+{i % 5}="}],
     "reward_model": {"style": "rule", "ground_truth": str(i % 7 + i % 5)}, "extra_info": {"index": i}}
    for i in range(16)
]
Path("train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
cfg = {
    "model": {"path": "model"},
    "data": {"train_files": ["train.jsonl"], "train_batch_size": 4, "max_prompt_length": 32, "max_response_length": 8},
    "rollout": {"name": "hf", "n": 4},
    "train": {"name": "fsdp"},
    "actor": {"ppo_mini_batch_size": 2, "ppo_micro_batch_size_per_gpu": 2, "optim": {"lr": 1e-3}},
    "algorithm": {"adv_estimator": "grpo"},
    "reward": {"name": "format", "kwargs": {"pattern": "[0-9]", "match": "search"}},  # rl-reward-rule; random text varies
    "trainer": {"device": "cpu", "n_gpus_per_node": 1, "total_training_steps": 2, "output_dir": "out",
                "loggers": ["jsonl"], "test_freq": -1, "save_freq": -1, "seed": 7},
}
Path("tiny_grpo.yaml").write_text(yaml.safe_dump(cfg))
PY
log "2-step GRPO job (tiny model) with the installed wheels"
"$VENV/bin/rlcore" train tiny_grpo.yaml >train.log 2>&1 || { tail -40 train.log; exit 1; }
"$VPY" - <<'PY'
import json, math
from pathlib import Path

rows = [json.loads(line) for line in Path("out/metrics.jsonl").read_text().splitlines() if line.strip()]
assert [r["step"] for r in rows] == [1, 2], rows
assert all(math.isfinite(r["actor/pg_loss"]) and math.isfinite(r["reward/mean"]) for r in rows), rows
assert any(Path("out/hf_final").glob("*.safetensors")), "no final weights in out/hf_final"
print(f"[wheels] tiny GRPO: 2 steps, reward/mean {[round(r['reward/mean'], 3) for r in rows]}, pg_loss {[round(r['actor/pg_loss'], 4) for r in rows]}")
PY
log "ok: every distribution builds, installs from its wheel and runs outside the checkout"
