"""verl's data.custom_cls, rl-data's ``custom_dataset`` feature: the user's own dataset class (a .py file named in the config)
gives the rows; without rl-data, a config naming one is a check problem and a data error naming the install."""

import pytest
from rl_core.config.schema import DataConfig
from rl_core.data.dataset import DataError, build_loaders, load_prompt_dataset
from rl_core.plan.features import load_features
from rl_core.plan.preflight import data_problems
from rl_core.plugins import get_registry

from rl_data.config import CustomDatasetConfig
from rl_data.custom import Section, custom_class_problems, custom_rows, data_section
from rl_data.testing import write_dataset_class


@pytest.fixture
def setup(tmp_path):
    return write_dataset_class(tmp_path)


def _cfg(code, data, name, **kw):
    return DataConfig(train_files=[data], val_files=[data], sections={"custom_cls": CustomDatasetConfig(path=code, name=name)}, **kw)


def test_the_class_items_are_the_rows(setup, tiny_tokenizer):
    code, data = setup
    cfg = _cfg(code, data, "Lines", train_batch_size=2, val_max_samples=4, shuffle=False)
    train = load_prompt_dataset(cfg, tiny_tokenizer, "train", custom_rows=load_features(get_registry(), []).get("custom_dataset"))
    assert len(train) == 6
    item = train[3]
    assert item["prompt"] == [{"role": "user", "content": "Q: what is 3 plus 3 ?"}]  # raw_prompt, as verl's rollout reads it
    assert (item["data_source"], item["ground_truth"], item["extra_info"]) == ("lines", "6", {"index": 3})
    assert item["input_ids"] == tiny_tokenizer(item["prompt_text"], add_special_tokens=False)["input_ids"]
    assert "Q: what is 3 plus 3 ?" in item["prompt_text"]
    loader, val, info = build_loaders(cfg, tiny_tokenizer, custom_rows=custom_rows)
    assert info["train_prompts"] == 6 and info["val_prompts"] == 4  # max_samples reaches the class for validation
    batch = loader.next_batch()
    assert list(batch["ground_truth"]) == ["0", "2"]


@pytest.mark.parametrize("name, path, message", [
    ("Lines", "missing.py", r"data.custom_cls.path: 'missing.py' does not exist"),
    ("Linez", None, r"data.custom_cls.name: .* defines no 'Linez'; classes it defines: Iterable, Lines, NoRows, NotADict, OldSignature"),
    ("compute", None, r"data.custom_cls.name: 'compute' in .* is a int, not a class"),
    ("Iterable", None, r"data.custom_cls.name: 'Iterable' .* has no __getitem__ / __len__: rl-core reads a map-style dataset"),
    ("OldSignature", None, r"data.custom_cls.name: OldSignature\(data_files, tokenizer, config, processor, max_samples\) cannot be called"),
    ("NoRows", None, r"data.custom_cls.name=NoRows \(.*\), train item 0: no ground truth"),
    ("NotADict", None, r"data.custom_cls.name=NotADict \(.*\), train item 0: an item must be a row dict"),
])
def test_bad_class_errors_name_the_key(setup, tiny_tokenizer, name, path, message):
    code, data = setup
    with pytest.raises(DataError, match=message):
        load_prompt_dataset(_cfg(path or code, data, name), tiny_tokenizer, "train", custom_rows=custom_rows)


def test_check_imports_the_class_and_reads_no_rows_itself(setup, tmp_path):
    from types import SimpleNamespace

    code, data = setup
    config = SimpleNamespace(data=_cfg(code, data, "Lines"))
    problems, rows = data_problems(config, get_registry())
    assert problems == [] and rows == [] and custom_class_problems(config) == []  # the text file is the class's format, not a row file
    config = SimpleNamespace(data=_cfg(code, data, "OldSignature"))
    assert [p.key for p in custom_class_problems(config)] == ["data.custom_cls.name"] and data_problems(config, get_registry())[0] == []
    problems, _ = data_problems(SimpleNamespace(data=_cfg(code, str(tmp_path / "none.txt"), "Lines")), get_registry())
    assert {p.key for p in problems} == {"data.train_files", "data.val_files"}


def test_the_data_section_without_omegaconf(monkeypatch):
    """omegaconf is no dependency of rl-core (rl-verl brings it): without it the class gets a dict whose keys read as attributes."""
    import sys

    monkeypatch.setitem(sys.modules, "omegaconf", None)
    section = data_section(DataConfig(prompt_key="question", max_prompt_length=64))
    assert isinstance(section, Section) and section.get("prompt_key") == "question" and section.max_prompt_length == 64
    assert section.custom_cls.path is None and section.get("missing", 1) == 1


def test_a_caller_without_the_reader_is_told(setup, tiny_tokenizer):
    code, data = setup
    with pytest.raises(DataError, match=r"data.custom_cls.path=.*custom_dataset feature, which was not passed"):
        load_prompt_dataset(_cfg(code, data, "Lines"), tiny_tokenizer, "train")  # no custom_rows: never the files read as rows


def test_without_rl_data_rlcore_check_names_the_install(tmp_path, setup, env, capsys):
    from rl_core.cli.main import main
    from rl_core_testing.tiny_run import write_tiny_run

    code, _ = setup
    config = write_tiny_run(tmp_path, **{"data.custom_cls": {"path": code, "name": "Lines"}})
    assert load_features(get_registry(), []).get("custom_dataset") is custom_rows  # installed: the plan's feature object
    env.setenv("RL_CORE_BLOCK_PLUGINS", "rl-data")
    get_registry(reload=True)
    assert main(["check", str(config), "--skip-device-check"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "data.custom_cls" in err and "pip install rl-data" in err, err


def test_path_and_name_come_together():
    """rl-data's check (core's load-time rule until session 21): one of data.custom_cls.path / .name alone is refused by key."""
    from rl_core.config.load import load_report
    from rl_core.plan.checks import build_plan

    for given, key in (("data.custom_cls.path=ds.py", "data.custom_cls.name"), ("data.custom_cls.name=Lines", "data.custom_cls.path")):
        errs = build_plan(load_report(None, [given]), get_registry(), devices=False).errors
        assert key in [p.key for p in errs] and "is not set while" in next(p.what for p in errs if p.key == key)
