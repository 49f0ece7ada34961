"""Every module and data file of every distribution reaches its wheel; a wheel that lacks one is caught."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.packaging.wheel_check import REPO, build, distribution_dirs, main, project_table, wheel_problems

NAMES = [project_table(d)["project"]["name"] for d in distribution_dirs()]


@pytest.mark.parametrize("name", NAMES)
def test_wheel_has_every_module_and_data_file(built, name):
    b = built[name]
    assert wheel_problems(b.wheel, b.dist_dir) == []


def test_core_wheel_ships_its_data_files(built):
    """The checker's rule on a known case: rl_core's py.typed marker is a data file, not a module."""
    import zipfile

    names = set(zipfile.ZipFile(built["rl-core"].wheel).namelist())
    assert "rl_core/py.typed" in names
    assert "rl_core/cli/main.py" in names


def _broken_copy(tmp_path: Path) -> Path:
    """plugins/reward_rule, copied, with a subpackage and data files its pyproject does not ship."""
    src = REPO / "plugins" / "reward_rule"
    dst = tmp_path / "reward_rule"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__", "build", "dist"))
    pkg = dst / "rl_reward_rule"
    (pkg / "tables").mkdir()
    (pkg / "tables" / "__init__.py").write_text('"""A subpackage the include pattern below leaves out."""\n')
    (pkg / "tables" / "units.json").write_text('{"km": 1000}\n')
    (pkg / "aliases.yaml").write_text("gsm8k: [openai/gsm8k]\n")
    pyproject = dst / "pyproject.toml"
    text = pyproject.read_text()
    assert 'include = ["rl_reward_rule*"]' in text
    text = text.replace('include = ["rl_reward_rule*"]', 'include = ["rl_reward_rule"]')
    text = text.replace('reward_rule = "rl_reward_rule.plugin"', 'reward_rule = "rl_reward_rule.plugin"\ntables = "rl_reward_rule.tables"')
    pyproject.write_text(text)
    return dst


def test_a_wheel_missing_a_module_or_data_file_is_caught(tmp_path, capsys):
    pytest.importorskip("build", reason="building wheels needs the `build` package: pip install build")
    broken = _broken_copy(tmp_path)
    out = tmp_path / "wheels"
    _, wheel = build(broken, out, isolation=False)
    problems = wheel_problems(wheel, broken)
    missing = sorted(p.split(": ", 1)[1].split(" ", 1)[0] for p in problems if "is in the source tree but not in the wheel" in p)
    assert missing == ["rl_reward_rule/aliases.yaml", "rl_reward_rule/tables/__init__.py", "rl_reward_rule/tables/units.json"]
    assert any("entry point `tables = rl_reward_rule.tables` names rl_reward_rule.tables, which is not in the wheel" in p for p in problems), problems
    assert len(problems) == 4, problems
    # the CI step's command line (.ci/wheels.sh) fails on the same wheel and names the files
    assert main(["--wheels", str(out), "--repo", str(broken)]) == 1
    err = capsys.readouterr().err
    assert "rl_reward_rule/tables/units.json is in the source tree but not in the wheel" in err


def test_a_missing_wheel_is_reported(tmp_path, capsys):
    fsdp = REPO / "plugins" / "train_fsdp"
    assert main(["--wheels", str(tmp_path), "--repo", str(fsdp)]) == 1
    version = project_table(fsdp)["project"]["version"]
    assert f"expected one wheel and one sdist of rl-train-fsdp {version} in {tmp_path}, found []" in capsys.readouterr().err
