"""pytest imports a test folder without ``__init__.py`` under the file's bare name (rootdir-less "prepend" import mode), so
two such modules with one basename stop the whole session at collection ("import file mismatch"): CI then runs nothing."""

from __future__ import annotations

import collections
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_rootless_test_modules_have_unique_names():
    by_name: dict[str, list[str]] = collections.defaultdict(list)
    for path in [*ROOT.glob("tests/**/test_*.py"), *ROOT.glob("plugins/*/tests/**/test_*.py")]:
        if ".venv" in path.parts or (path.parent / "__init__.py").exists():
            continue  # a package's test modules are imported under their dotted name
        by_name[path.name].append(str(path.relative_to(ROOT)))
    clashes = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not clashes, f"rename one of each (pytest collects them as one module name): {clashes}"
