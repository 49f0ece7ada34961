"""The reasoning_gym generator card (rl_data.generators) through core's generate_rows: rows that carry what the
reasoning_gym reward (rl-reward-rule) needs to score them offline."""

from __future__ import annotations

import json

import pytest
from rl_core.config.schema import GeneratorConfig
from rl_core.data.dataset import DataError
from rl_core.data.dataset import generate_rows as core_generate_rows
from rl_data.generators import generate


def generate_rows(gen, split="train"):
    return core_generate_rows(gen, split, generate)


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
def _resolve(tmp_path, without_generators=False):
    import attrs
    from rl_core.config.load import load_config
    from rl_core.plan.resolver import resolve
    from rl_core.plugins import get_registry
    from rl_core_testing.tiny_run import write_tiny_run

    base = get_registry()
    cards = {kind: dict(table) for kind, table in base.cards.items()}
    if without_generators:
        cards["generator"] = {}
    cfg = load_config(write_tiny_run(tmp_path, **{"data.train_generator": {"name": "reasoning_gym", "dataset": "basic_arithmetic", "size": 4}}))
    return resolve(cfg, attrs.evolve(base, cards=cards))


def test_the_plan_carries_the_generators_factory(tmp_path):
    plan, problems = _resolve(tmp_path)
    assert plan is not None, [p.render() for p in problems]
    assert plan.generators == (("reasoning_gym", generate),)


def test_a_generator_without_its_package_names_the_install(tmp_path):
    plan, problems = _resolve(tmp_path, without_generators=True)
    assert plan is None
    (p,) = [p for p in problems if p.severity == "error"]
    assert p.key == "data.train_generator.name" and "pip install rl-data" in p.what and p.fix.startswith("pip install rl-data")
