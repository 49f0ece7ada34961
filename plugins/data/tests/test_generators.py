"""rl-data's generators (rl_data.generators): rows validated and named by their key, reasoning_gym's rows carry what
the reasoning_gym reward (rl-reward-rule) needs to score them offline, core's data sets read them through the
``generated_data`` feature, and without rl-data a generator's key names the install."""

from __future__ import annotations

import json

import pytest
from rl_core.config.schema import DataConfig
from rl_core.data.dataset import load_prompt_dataset
from rl_core.data.rows import DataError
from rl_core.plugins import get_registry
from rl_core.problems import UserError
from rl_data.config import GeneratorConfig
from rl_data.generators import GENERATORS, generate_rows, generated_rows, sample_rows


def _row(i):
    return {"data_source": "toy", "prompt": [{"role": "user", "content": f"what is {i} ?"}],
            "reward_model": {"style": "rule", "ground_truth": str(i)}, "extra_info": {"index": i}}


def test_generator_rows_are_validated_and_named_by_their_key(tiny_tokenizer, monkeypatch):
    calls = []

    def generate(gen, split):  # a generator's function, as GENERATORS names it
        calls.append((gen.dataset, gen.size, split))
        return [_row(i) for i in range(gen.size)]

    gen = GeneratorConfig(name="mine", dataset="arith", size=3)
    monkeypatch.setitem(GENERATORS, "mine", (generate, ()))
    rows = generate_rows(gen, "val")
    assert calls == [("arith", 3, "val")] and [r["ground_truth"] for r in rows] == [str(i) for i in range(3)]
    data = DataConfig(sections={"train_generator": gen}, max_prompt_length=1000)
    ds = load_prompt_dataset(data, tiny_tokenizer, "train", extra_rows=generated_rows)
    assert len(ds) == 3 and ds.source == "mine/arith"
    with pytest.raises(DataError, match=r"data.train_generator.name='mine': its rows are made by rl-data's generated_data feature, which was not passed"):
        load_prompt_dataset(data, tiny_tokenizer, "train")  # no extra_rows: never the generator left out silently
    with pytest.raises(DataError, match=r"data.train_generator.name 'other': no such generator; set it to one of: reasoning_gym"):
        generate_rows(GeneratorConfig(name="other", dataset="arith"), "train")

    def refuses(gen, split):
        raise UserError("no dataset 'arith' here; pick another")

    with pytest.raises(DataError, match=r"^data.val_generator: no dataset 'arith' here"):
        generate_rows(gen, "val", refuses)
    with pytest.raises(DataError, match=r"mine/arith, row 0: "):
        generate_rows(gen, "train", lambda g, s: [{"prompt": "not messages"}])


def test_check_names_the_generator_and_its_dataset_and_samples_two_rows(monkeypatch):
    from types import SimpleNamespace

    monkeypatch.setitem(GENERATORS, "mine", (lambda gen, split: [_row(i) for i in range(gen.size)], ()))

    def check(**gens):
        return sample_rows(SimpleNamespace(data=SimpleNamespace(**{f"{s}_generator": g for s, g in gens.items()})))

    problems, rows = check(train=GeneratorConfig(name="mine", dataset="arith", size=50), val=None)
    assert problems == [] and len(rows) == 2  # a sample, for the reward checks
    (p,), _ = check(train=GeneratorConfig(name="mien", dataset="arith"), val=GeneratorConfig())
    assert p.key == "data.train_generator.name" and "no generator named 'mien'" in p.what and "set data.train_generator.name to one of: reasoning_gym, mine" in p.fix
    (p,), _ = check(train=GeneratorConfig(), val=GeneratorConfig(name="mine"))
    assert p.key == "data.val_generator.dataset" and p.what == "is empty"


def test_reasoning_gym_rows_carry_what_scoring_needs():
    reasoning_gym = pytest.importorskip("reasoning_gym")

    gen = GeneratorConfig(
        name="reasoning_gym", dataset="basic_arithmetic", size=6, seed=3,
        kwargs={"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}, system_prompt="Answer with the final number only.",
    )
    rows = generate_rows(gen)
    assert len(rows) == 6
    r = rows[4]
    assert r["data_source"] == "reasoning_gym/basic_arithmetic"
    assert r["prompt"][0] == {"role": "system", "content": "Answer with the final number only."}
    assert r["prompt"][1]["role"] == "user"
    json.dumps(r)  # json-able throughout
    info = r["extra_info"]
    # what the reasoning_gym scorer does offline: rebuild the dataset from the stored config, or use the entry
    config = json.loads(info["config"])
    assert config == {**gen.kwargs, "seed": 3, "size": 6}
    ds = reasoning_gym.create_dataset(info["dataset"], **config)
    entry = ds[info["index"]]
    assert entry["question"] == r["prompt"][1]["content"] == info["question"]
    assert ds.score_answer(r["ground_truth"], entry) == 1.0
    stored = json.loads(info["entry"])
    assert stored["question"] == entry["question"] and ds.score_answer(r["ground_truth"], stored) == 1.0
    assert ds.score_answer(str(int(r["ground_truth"]) + 1), stored) == 0.0
    assert info["split"] == "train" and generate_rows(gen, "val")[0]["extra_info"]["split"] == "val"
    with pytest.raises(DataError, match="data.val_generator: reasoning-gym has no dataset 'no_such_dataset'"):
        generate_rows(GeneratorConfig(name="reasoning_gym", dataset="no_such_dataset", size=2), "val")



def test_generated_rows_score_with_the_reasoning_gym_reward():
    pytest.importorskip("reasoning_gym")
    rgym = pytest.importorskip("rl_reward_rule.rgym", reason="the reasoning_gym scorer lives in rl-reward-rule")
    rows = generate_rows(GeneratorConfig(name="reasoning_gym", dataset="basic_arithmetic", size=4, seed=1))
    for r in rows:
        kw = dict(data_source=r["data_source"], ground_truth=r["ground_truth"], extra_info=r["extra_info"])
        assert rgym.score(solution_str=f"<answer>{r['ground_truth']}</answer>", **kw)["score"] == 1.0
        assert rgym.score(solution_str="<answer>nonsense</answer>", **kw)["score"] < 1.0
        # without the stored entry the scorer regenerates it from config + index
        no_entry = {**r["extra_info"], "entry": None}
        assert rgym.score(solution_str=r["ground_truth"], **{**kw, "extra_info": no_entry})["score"] == 1.0


# ----------------------------------------------------------------- the plan
def test_the_plan_carries_the_generated_rows(tmp_path):
    from rl_core.config.load import load_config
    from rl_core.plan.resolver import resolve
    from rl_core_testing.tiny_run import write_tiny_run

    cfg = load_config(write_tiny_run(tmp_path, **{"data.train_generator": {"name": "reasoning_gym", "dataset": "basic_arithmetic", "size": 4}}))
    plan, problems = resolve(cfg, get_registry())
    assert plan is not None, [p.render() for p in problems]
    assert plan.features.get("generated_data") is generated_rows and cfg.data.train_generator.size == 4
    assert load_config(write_tiny_run(tmp_path / "null", **{"data.train_generator": None})).data.train_generator == GeneratorConfig()  # null: none


def test_a_generator_without_its_package_names_the_install(tmp_path, env, capsys):
    from rl_core.cli.main import main
    from rl_core_testing.tiny_run import write_tiny_run

    config = write_tiny_run(tmp_path, **{"data.train_generator": {"name": "reasoning_gym", "dataset": "basic_arithmetic", "size": 4}})
    env.setenv("RL_CORE_BLOCK_PLUGINS", "rl-data")
    get_registry(reload=True)
    assert main(["check", str(config), "--skip-device-check"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "data.train_generator" in err and "pip install rl-data" in err, err


def test_a_checkpoint_whose_config_saved_the_sections_as_null_resumes_unchanged():
    """rl-core before the move saved ``data.*_generator: null`` for a file-data run; the sections are rl-data's now and
    a config holds their defaults: a resume compares them as unchanged, and a generator set now is still a change."""
    from rl_core.config.load import load_config
    from rl_core.trainer.outputs import config_diff, plain_config

    saved = plain_config(load_config())
    saved["data"]["train_generator"] = saved["data"]["val_generator"] = None
    assert config_diff(saved, plain_config(load_config())) == []
    now = plain_config(load_config(overrides=["data.train_generator.name=reasoning_gym", "data.train_generator.dataset=basic_arithmetic"]))
    changed = config_diff(saved, now)
    assert "data.train_generator.name: '<unset>' -> 'reasoning_gym'" in changed and not any("val_generator" in line for line in changed)


def test_another_package_declares_a_generator_by_entry_point(monkeypatch):
    """A third party's generator: entry-point group ``rl_data.generators`` (``name = "module:object"``), loaded when a
    config names it; a declared one that cannot be loaded is a check problem naming it, not a crash."""
    import importlib.metadata

    from rl_core.config.load import load_config

    class Declared:  # what importlib.metadata.entry_points returns, without installing a package
        def __init__(self, name, value, obj):
            self.name, self.value, self.group, self._obj = name, value, "rl_data.generators", obj

        def load(self):
            if isinstance(self._obj, Exception):
                raise self._obj
            return self._obj

    def generate(gen, split):
        return [_row(i) for i in range(gen.size)]

    eps = [Declared("theirs", "their_pkg:generate", generate)]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: [e for e in eps if e.group == group])
    cfg = load_config(overrides=["data.train_generator.name=theirs", "data.train_generator.dataset=any", "data.train_generator.size=3"])
    rows, origins, source = generated_rows(cfg.data, "train")
    assert [r["prompt"] for r in rows] == [_row(i)["prompt"] for i in range(3)] and source == "theirs/any"
    eps.append(Declared("broken", "broken_pkg:gen", ImportError("No module named 'broken_pkg'")))
    problems, sample = sample_rows(cfg)  # a broken one nobody names is not loaded: "theirs" still checks and samples
    assert problems == [] and len(sample) == 2
    broken = load_config(overrides=["data.train_generator.name=broken", "data.train_generator.dataset=any"])
    problems, _ = sample_rows(broken)
    (p,) = [p for p in problems if p.key == "data.train_generator.name"]
    assert "'broken'" in p.what and "broken_pkg:gen" in p.what and "No module named" in p.what
