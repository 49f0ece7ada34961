"""RewardManager without the pool: scorer choice, errors, metrics, custom files, token placement."""

from __future__ import annotations

import textwrap

import pytest
import torch
from rl_core.batch import Batch
from rl_core.cards import Provider, RewardCard
from rl_core.config.schema import CustomRewardConfig, RewardConfig
from rl_core.plugins import Registry
from rl_core.rewards.manager import (
    RewardConfigError,
    RewardError,
    RewardManager,
    match_data_source,
    scores_to_token_level,
)

S = "tests.rewards.scorers"


def make_registry(*cards: RewardCard) -> Registry:
    registry = Registry()
    for card in cards:
        registry.add(card, Provider(distribution="test-dist", version="0", entry_point="test"))
    return registry


def make_batch(texts, sources=None, truths=None, infos=None, **tensors) -> Batch:
    n = len(texts)
    non = {"response_text": list(texts)}
    if sources is not None:
        non["data_source"] = sources if isinstance(sources, list) else [sources] * n
    if truths is not None:
        non["ground_truth"] = list(truths)
    if infos is not None:
        non["extra_info"] = list(infos)
    return Batch(tensors, non)


@pytest.fixture
def registry() -> Registry:
    return make_registry(
        RewardCard(name="exact", factory=f"{S}:exact", data_sources={"src/a", "src/b"}),
        RewardCard(name="odd", factory=f"{S}:raises_on_odd", data_sources={"odd"}),
        RewardCard(name="family", factory=f"{S}:fixed_signature", data_sources={"fam/*"}),
        RewardCard(name="family_special", factory=f"{S}:length", data_sources={"fam/special*"}, fields=()),
        RewardCard(name="batched", factory=f"{S}:batched", batched=True),
        RewardCard(name="text", factory=f"{S}:returns_text"),
        RewardCard(name="nan", factory=f"{S}:returns_nan"),
    )


# ------------------------------------------------------------------ choice
def test_scores_metrics_and_extras_in_process(registry):
    batch = make_batch(["1", "2", "3", "4"], "src/a", ["1", "x", "3", "x"])
    scores, metrics, extras = RewardManager(RewardConfig(), registry).score(batch)
    assert scores.dtype == torch.float32 and scores.tolist() == [1.0, 0.0, 1.0, 0.0]
    # numeric keys -> reward/<key>_mean (bools count, strings do not); "score" is the reward itself
    assert metrics == {"reward/timeouts": 0.0, "reward/errors": 0.0, "reward/hit_mean": 0.5, "reward/flag_mean": 1.0,
                       # per data source: the reward, its rule part, the failed samples
                       "reward/src/a/mean": 0.5, "reward/src/a/rule_mean": 0.5, "reward/src/a/failed": 0.0}
    assert extras[0] == {"hit": 1.0, "flag": True, "note": "text is not a metric"}


def test_kwargs_reach_the_scorer(registry):
    cfg = RewardConfig(name="exact", kwargs={"scale": 3.0})
    scores, _, _ = RewardManager(cfg, registry).score(make_batch(["a", "b"], None, ["a", "a"]))
    assert scores.tolist() == [3.0, 0.0]


def test_exact_source_beats_glob_and_the_longest_glob_wins(registry):
    cards = list(registry.cards["reward"].values())
    assert match_data_source(cards, "src/b").name == "exact"
    assert match_data_source(cards, "fam/x").name == "family"
    assert match_data_source(cards, "fam/special_1").name == "family_special"
    assert match_data_source(cards, "nobody") is None


def test_mixed_sources_in_one_batch(registry):
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]])
    batch = make_batch(["a", "b", "c"], ["src/a", "fam/x", "fam/special"], ["a", "-", "-"], response_mask=mask)
    scores, _, _ = RewardManager(RewardConfig(), registry).score(batch)
    # exact hit, fixed_signature's 0.25, and the token count 1 from response_mask
    assert scores.tolist() == [1.0, 0.25, 1.0]


def test_unknown_data_source_names_it_and_the_installed_rewards(registry):
    batch = make_batch(["a", "b"], ["src/a", "mystery/set"], ["a", "b"])
    with pytest.raises(RewardConfigError) as err:
        RewardManager(RewardConfig(), registry).score(batch)
    msg = str(err.value)
    assert "'mystery/set'" in msg and "exact (src/a, src/b)" in msg and "family (fam/*)" in msg
    assert "reward.name" in msg and "reward.custom.path" in msg


def test_unknown_reward_name_is_a_config_error(registry):
    with pytest.raises(RewardConfigError, match="no reward named 'nope' is installed"):
        RewardManager(RewardConfig(name="nope"), registry)


def test_missing_fields(registry):
    with pytest.raises(KeyError, match="response_text"):
        RewardManager(RewardConfig(), registry).score(Batch(non_tensors={"data_source": ["src/a"]}))
    with pytest.raises(KeyError, match="data_source"):
        RewardManager(RewardConfig(), registry).score(make_batch(["a"]))
    with pytest.raises(KeyError, match=r"needs the batch field\(s\) \['ground_truth'\]"):
        RewardManager(RewardConfig(), registry).score(make_batch(["a"], "src/a"))


def test_batched_card_is_called_once(registry):
    scores, metrics, _ = RewardManager(RewardConfig(name="batched"), registry).score(make_batch(["a", "b", "c"], "s", ["a", "a", "c"]))
    assert scores.tolist() == [1.0, 0.0, 1.0]
    assert metrics["reward/batch_size_mean"] == 3.0


# ------------------------------------------------------------------ errors
def test_raising_scorer_names_index_source_and_exception(registry):
    batch = make_batch(["2", "4", "7", "9"], "odd", ["0"] * 4)
    with pytest.raises(RewardError) as err:
        RewardManager(RewardConfig(), registry).score(batch)
    msg = str(err.value)
    assert "sample 2" in msg and "data_source='odd'" in msg and "ZeroDivisionError: odd response 7" in msg
    assert "on_error=skip" in msg
    assert (err.value.index, err.value.data_source) == (2, "odd")


def test_skip_mode_counts_errors_and_scores_zero(registry):
    batch = make_batch(["2", "4", "7", "9"], "odd", ["0"] * 4)
    scores, metrics, extras = RewardManager(RewardConfig(on_error="skip"), registry).score(batch)
    assert scores.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert metrics["reward/errors"] == 2.0 and metrics["reward/timeouts"] == 0.0
    assert "ZeroDivisionError: odd response 9" in extras[3]["reward_error"]


@pytest.mark.parametrize("name, what", [("text", "expected a number"), ("nan", "non-finite")])
def test_bad_return_values_are_errors(registry, name, what):
    with pytest.raises(RewardError, match=what):
        RewardManager(RewardConfig(name=name), registry).score(make_batch(["a"], "s", ["a"]))


# ------------------------------------------------------------- custom file
def write(tmp_path, text, name="my_reward.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_custom_function_from_a_file(tmp_path):
    path = write(
        tmp_path,
        """
        def compute_score(data_source, solution_str, ground_truth, extra_info=None):
            return {"score": float(solution_str.strip() == ground_truth), "len": len(solution_str)}
        """,
    )
    cfg = RewardConfig(custom=CustomRewardConfig(path=path))
    scores, metrics, _ = RewardManager(cfg, registry=make_registry()).score(make_batch(["42", " 41"], "any", ["42", "42"]))
    assert scores.tolist() == [1.0, 0.0]
    assert metrics["reward/len_mean"] == 2.5


def test_custom_file_errors(tmp_path):
    missing = str(tmp_path / "nope.py")
    with pytest.raises(RewardConfigError, match=r"reward.custom.path: .*nope.py' does not exist"):
        RewardManager(RewardConfig(custom=CustomRewardConfig(path=missing)), Registry())
    path = write(tmp_path, "def other(**kw):\n    return 1.0\nNOT_A_FUNCTION = 3\n")
    with pytest.raises(RewardConfigError, match=r"defines no 'compute_score'; functions it defines: other"):
        RewardManager(RewardConfig(custom=CustomRewardConfig(path=path)), Registry())
    with pytest.raises(RewardConfigError, match=r"'NOT_A_FUNCTION' .* is a int, not a function"):
        RewardManager(RewardConfig(custom=CustomRewardConfig(path=path, name="NOT_A_FUNCTION")), Registry())
    broken = write(tmp_path, "import not_a_module_anywhere\n", "broken.py")
    with pytest.raises(RewardConfigError, match=r"importing .*broken.py' raised ModuleNotFoundError"):
        RewardManager(RewardConfig(custom=CustomRewardConfig(path=broken)), Registry())
    with pytest.raises(RewardConfigError, match="both set"):
        RewardManager(RewardConfig(name="gsm8k", custom=CustomRewardConfig(path=path, name="other")), Registry())


# ---------------------------------------------------------- token placement
def test_scores_to_token_level():
    scores = torch.tensor([1.0, -2.0, 3.0, 4.0])
    mask = torch.tensor(
        [
            [1, 1, 1, 0, 0],  # last valid token at 2
            [1, 1, 1, 1, 1],  # at 4
            [0, 0, 0, 0, 0],  # no response token: no score
            [1, 0, 1, 1, 0],  # a hole: the last 1 is at 3
        ]
    )
    out = scores_to_token_level(scores, mask)
    expected = torch.zeros(4, 5)
    expected[0, 2], expected[1, 4], expected[3, 3] = 1.0, -2.0, 4.0
    assert torch.equal(out, expected)
    assert out.dtype == torch.float32
    with pytest.raises(ValueError, match=r"scores \[B\] and response_mask \[B, R\]"):
        scores_to_token_level(scores[:3], mask)


# ------------------------------------------------------------ from the Stack
def _stack(cfg, *, cards=(), reward=None, reward_fn=None, broken=()):
    """What RewardManager.for_stack reads of a resolved Stack."""
    from types import SimpleNamespace

    config = SimpleNamespace(reward=cfg, reward_model=SimpleNamespace(enable=False, name=None))
    return SimpleNamespace(config=config, reward_cards=tuple(cards), reward=reward, reward_fn=reward_fn, plugin_errors=tuple(broken))


@pytest.fixture
def no_registry(monkeypatch):
    """The manager of a resolved run must not read the process-wide registry."""

    def refuse(*a, **k):
        raise AssertionError("the reward manager looked the registry up again")

    monkeypatch.setattr("rl_core.plugins.get_registry", refuse)


def test_for_stack_scores_with_the_function_the_resolver_loaded(no_registry):
    seen = []

    def loaded(*, data_source, solution_str, ground_truth, extra_info=None, **_):
        seen.append(solution_str)
        return 0.5

    # the card's factory does not even import: only the Stack's loaded function can have scored
    card = RewardCard(name="mine", factory="not_a_module:nothing", provider=Provider(distribution="d"))
    manager = RewardManager.for_stack(_stack(RewardConfig(name="mine"), cards=[card], reward=card, reward_fn=loaded))
    scores, _, _ = manager.score(make_batch(["a", "b"], "anything", ["a", "b"]))
    assert scores.tolist() == [0.5, 0.5] and seen == ["a", "b"]


def test_for_stack_matches_data_sources_against_the_stacks_cards(no_registry):
    cards = [
        RewardCard(name="exact", factory=f"{S}:exact", data_sources={"fam/special1"}),
        RewardCard(name="family", factory=f"{S}:fixed_signature", data_sources={"fam/*"}),
        RewardCard(name="special", factory=f"{S}:length", data_sources={"fam/special*"}),
    ]
    manager = RewardManager.for_stack(_stack(RewardConfig(), cards=cards))
    batch = make_batch(["x", "yy", "zzz"], ["fam/special1", "fam/other", "fam/special2"], ["x", "q", "q"], response_mask=torch.ones(3, 4))
    scores, _, _ = manager.score(batch)
    # exact name first (1.0 for a hit), then the longest glob (length scorer: 4 tokens), then the shorter one (0.25)
    assert scores.tolist() == [1.0, 0.25, 4.0]
    with pytest.raises(RewardConfigError, match=r"no installed reward scores data_source 'elsewhere'.*exact \(fam/special1\).*broken-dist"):
        RewardManager.for_stack(_stack(RewardConfig(), cards=cards, broken=["broken-dist"])).score(make_batch(["a"], "elsewhere"))
