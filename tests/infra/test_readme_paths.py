"""Every path the README names exists (issue 56: it named `scripts/install_cpu_engine.sh` at the repo root, which lives
under each engine plugin). A path is any token under one of the checkout's folders (`.ci/`, `core/`, `plugins/`,
`docs/`, `bench/`, `examples/`, `tests/`, `scripts/`), in text, code spans, code blocks or links; globs must match
something. Folders a run creates (`outputs/`, `data/`, `models/`, `dist/`) are not checked."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = (".ci", "core", "plugins", "docs", "bench", "examples", "tests", "scripts")
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w.*/-]*[\w*])" % "|".join(re.escape(f) for f in FOLDERS))


def named_paths(text: str) -> list[str]:
    return sorted({m.group(1) for m in PATH.finditer(text)})


def missing(text: str) -> list[str]:
    return [p for p in named_paths(text) if not (any(ROOT.glob(p)) if "*" in p else (ROOT / p).exists())]


def test_every_path_the_readme_names_exists():
    text = (ROOT / "README.md").read_text()
    paths = named_paths(text)
    assert "examples/quickstart.yaml" in paths and "bench/README.md" in paths and ".ci/kernels.sh" in paths, paths
    assert missing(text) == [], f"README.md names paths that do not exist: {missing(text)}"


def test_a_missing_path_is_caught():
    assert missing("run `scripts/install_cpu_engine.sh` then see [x](docs/nothing.md) and examples/*.nothing") == [
        "docs/nothing.md", "examples/*.nothing", "scripts/install_cpu_engine.sh"]
    assert missing("`plugins/rollout_vllm/scripts/install_cpu_engine.sh`, examples/*.yaml, outputs/quickstart") == []
