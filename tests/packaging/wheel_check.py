"""Build the project's distributions and check their wheels against the source tree.

Used by tests/packaging (the tests) and by .ci/wheels.sh (the CI step), so both
apply the same rules:

- every distribution is the repo root (``rl-core``) or a ``plugins/*/`` folder
  with a ``pyproject.toml``; its import package is its name with ``-`` -> ``_``;
- every file under the source package folder (modules and data files alike;
  caches excluded) is in the wheel, at the same path;
- every ``rl_core`` entry point and console script names a module in the wheel;
- the wheel's name and version are the pyproject's, and its license file is in it.

``python tests/packaging/wheel_check.py --wheels DIR`` checks the wheels in DIR
(one per distribution) and exits 1 naming every problem; ``--build-requires``
prints what the distributions' builds need.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import zipfile
from pathlib import Path

from packaging.metadata import Metadata
from packaging.utils import canonicalize_name, parse_wheel_filename

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
SKIP_PARTS = {"__pycache__"}
SKIP_SUFFIXES = {".pyc", ".pyo"}


def distribution_dirs(repo: Path = REPO) -> list[Path]:
    """The repo root and every plugins/*/ folder that holds a pyproject.toml."""
    return [repo, *sorted(p.parent for p in repo.glob("plugins/*/pyproject.toml"))]


def project_table(dist_dir: Path) -> dict:
    return tomllib.loads((dist_dir / "pyproject.toml").read_text())


def source_package(dist_dir: Path) -> Path:
    """The import package folder of the distribution in ``dist_dir`` (``rl-train-fsdp`` -> ``rl_train_fsdp``)."""
    data = project_table(dist_dir)
    name = data["project"]["name"].replace("-", "_")
    find = data.get("tool", {}).get("setuptools", {}).get("packages", {}).get("find", {})
    for where in find.get("where", ["."]):
        pkg = dist_dir / where / name
        if (pkg / "__init__.py").is_file():
            return pkg
    raise FileNotFoundError(f"{dist_dir / 'pyproject.toml'}: no package folder {name}/ with an __init__.py under {find.get('where', ['.'])}")


def expected_files(pkg: Path) -> set[str]:
    """Every file under ``pkg`` as its wheel path (``rl_core/config/load.py``), caches excluded."""
    out = set()
    for f in pkg.rglob("*"):
        rel = f.relative_to(pkg.parent)
        if f.is_file() and not SKIP_PARTS.intersection(rel.parts) and f.suffix not in SKIP_SUFFIXES:
            out.add(rel.as_posix())
    return out


def wheel_metadata(wheel: Path) -> Metadata:
    with zipfile.ZipFile(wheel) as z:
        (meta,) = [n for n in z.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        return Metadata.from_email(z.read(meta), validate=False)


def _entry_point_modules(text: str) -> list[tuple[str, str]]:
    """(entry point line, module) for every ``name = module[:attr]`` line of entry_points.txt."""
    out = []
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith(("[", "#")):
            out.append((line.strip(), line.split("=", 1)[1].strip().split(":")[0].strip()))
    return out


def wheel_problems(wheel: Path, dist_dir: Path) -> list[str]:
    """What the wheel lacks compared with the source distribution in ``dist_dir``; empty when complete."""
    project = project_table(dist_dir)["project"]
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        dist_info = {n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")}
        eps = "".join(z.read(f"{d}/entry_points.txt").decode() for d in dist_info if f"{d}/entry_points.txt" in names)
    problems = [f"{wheel.name}: {path} is in the source tree but not in the wheel" for path in sorted(expected_files(source_package(dist_dir)) - names)]
    for line, module in _entry_point_modules(eps):
        as_module, as_package = module.replace(".", "/") + ".py", module.replace(".", "/") + "/__init__.py"
        if as_module not in names and as_package not in names:
            problems.append(f"{wheel.name}: entry point `{line}` names {module}, which is not in the wheel")
    meta = wheel_metadata(wheel)
    if canonicalize_name(meta.name) != canonicalize_name(project["name"]) or str(meta.version) != project["version"]:
        problems.append(f"{wheel.name}: metadata says {meta.name} {meta.version}, pyproject.toml says {project['name']} {project['version']}")
    for lic in project.get("license-files", []):
        if not any(n.endswith(f".dist-info/licenses/{lic}") for n in names):
            problems.append(f"{wheel.name}: license file {lic} is not in the wheel")
    return problems


def build(dist_dir: Path, outdir: Path, *, isolation: bool = True) -> tuple[Path, Path]:
    """``python -m build`` (sdist, then the wheel from that sdist) into ``outdir``; (sdist, wheel)."""
    cmd = [sys.executable, "-m", "build", "--outdir", str(outdir), str(dist_dir)]
    if not isolation:
        cmd.insert(3, "--no-isolation")
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return find_built(outdir, project_table(dist_dir)["project"])


def find_built(outdir: Path, project: dict) -> tuple[Path, Path]:
    """The sdist and wheel of ``project`` (name, version) in ``outdir``."""
    name, version = canonicalize_name(project["name"]), project["version"]
    wheels = [w for w in outdir.glob("*.whl") if (name, version) == (lambda n, v, *_: (n, str(v)))(*parse_wheel_filename(w.name))]
    sdists = [s for s in outdir.glob("*.tar.gz") if s.name == f"{name.replace('-', '_')}-{version}.tar.gz"]
    if len(wheels) != 1 or len(sdists) != 1:
        raise FileNotFoundError(f"expected one wheel and one sdist of {name} {version} in {outdir}, found {[p.name for p in wheels + sdists]}")
    return sdists[0], wheels[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", type=Path, default=REPO, help="source tree (default: this checkout)")
    ap.add_argument("--wheels", type=Path, help="folder with one built wheel and sdist per distribution")
    ap.add_argument("--build-requires", action="store_true", help="print the union of the distributions' [build-system] requires, one a line")
    args = ap.parse_args(argv)
    if args.build_requires:
        print("\n".join(sorted({r for d in distribution_dirs(args.repo) for r in project_table(d)["build-system"]["requires"]})))
        return 0
    if args.wheels is None:
        ap.error("--wheels DIR is required")
    problems = []
    for dist_dir in distribution_dirs(args.repo):
        try:
            _, wheel = find_built(args.wheels, project_table(dist_dir)["project"])
        except FileNotFoundError as e:
            problems.append(str(e))
            continue
        found = wheel_problems(wheel, dist_dir)
        problems.extend(found)
        print(f"[wheel_check] {wheel.name}: {'ok' if not found else f'{len(found)} problem(s)'}")
    for p in problems:
        print(f"[wheel_check] PROBLEM {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
