"""RewardManager with rl-reward-pool's process pool: timeouts kill and replace workers, errors, reuse, shutdown."""

from __future__ import annotations

import textwrap
import threading
import time

import pytest
from rl_core.batch import Batch
from rl_core.config.schema import CustomRewardConfig, RewardConfig
from rl_core.plugins import Registry, get_registry
from rl_core.rewards.manager import RewardError, RewardManager

TIMEOUT_S = 1.0
MARGIN_S = 2.0  # startup of the replacement + scheduling on a busy 2-core machine

SCORER = """
import os

def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    mode = (extra_info or {}).get("mode")
    if mode == "hang":
        while True:   # a scorer that never returns
            pass
    if mode == "raise":
        raise KeyError("missing piece")
    if mode == "die":  # a death Python cannot intercept (os._exit itself is contained: test_reward_exits.py)
        import ctypes
        ctypes.CDLL(None)._exit(7)
    return {"score": float(solution_str == ground_truth), "pid": os.getpid()}
"""


def batch_of(n: int, marks: dict[int, str] | None = None) -> Batch:
    marks = marks or {}
    return Batch(
        non_tensors={
            "response_text": [str(i % 2) for i in range(n)],
            "data_source": ["toy"] * n,
            "ground_truth": ["0"] * n,
            "extra_info": [{"mode": marks.get(i)} for i in range(n)],
        }
    )


def score_within(manager, batch, limit_s: float):
    """``manager.score(batch)``, failing (instead of hanging the suite) if it takes longer than ``limit_s``."""
    result: dict = {}

    def target():
        try:
            result["value"] = manager.score(batch)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            result["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    start = time.monotonic()
    thread.start()
    thread.join(limit_s)
    elapsed = time.monotonic() - start
    assert not thread.is_alive(), f"scoring did not finish within {limit_s:.1f} s"
    if "error" in result:
        raise result["error"]
    return (*result["value"], elapsed)


def expected_scores(n: int, marks: dict[int, str]) -> list[float]:
    return [0.0 if i in marks else float(i % 2 == 0) for i in range(n)]


@pytest.fixture(scope="module")
def scorer_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("reward") / "toy_reward.py"
    path.write_text(textwrap.dedent(SCORER))
    return str(path)


@pytest.fixture(scope="module")
def manager(scorer_file):
    cfg = RewardConfig(custom=CustomRewardConfig(path=scorer_file), num_workers=2, timeout_s=TIMEOUT_S, on_error="skip")
    with RewardManager(cfg, registry=get_registry()) as m:
        m.score(batch_of(4))  # start the workers outside the timed sections
        yield m


def test_a_hung_sample_times_out_and_the_batch_finishes(manager):
    marks = {137: "hang"}
    scores, metrics, extras, elapsed = score_within(manager, batch_of(256, marks), TIMEOUT_S + 30)
    assert elapsed < TIMEOUT_S + MARGIN_S, f"took {elapsed:.2f} s"
    assert metrics["reward/timeouts"] == 1.0 and metrics["reward/errors"] == 0.0
    assert extras[137]["reward_timeout"] is True
    assert scores.tolist() == expected_scores(256, marks)


def test_the_pool_keeps_working_after_a_kill(manager):
    before = manager.pool.restarts
    score_within(manager, batch_of(32, {3: "hang"}), TIMEOUT_S + 30)
    assert manager.pool.restarts == before + 1
    scores, metrics, extras = manager.score(batch_of(64))
    assert metrics["reward/timeouts"] == 0.0
    assert scores.tolist() == expected_scores(64, {})
    assert len({e["pid"] for e in extras}) <= 2  # the same two workers, not one per batch


def test_two_hangs_in_one_batch_are_two_timeouts(manager):
    marks = {10: "hang", 50: "hang"}
    scores, metrics, _, _ = score_within(manager, batch_of(64, marks), 2 * TIMEOUT_S + 30)
    assert metrics["reward/timeouts"] == 2.0
    assert scores.tolist() == expected_scores(64, marks)


def test_errors_and_dead_workers_are_counted_in_skip_mode(manager):
    marks = {5: "raise", 20: "die"}
    scores, metrics, extras = manager.score(batch_of(40, marks))
    assert metrics["reward/errors"] == 2.0 and metrics["reward/timeouts"] == 0.0
    assert "KeyError: 'missing piece'" in extras[5]["reward_error"]
    assert "died (exit code 7)" in extras[20]["reward_error"]
    assert scores.tolist() == expected_scores(40, marks)


def test_raise_mode_names_index_source_and_exception(scorer_file):
    cfg = RewardConfig(custom=CustomRewardConfig(path=scorer_file), num_workers=1, timeout_s=TIMEOUT_S)
    with RewardManager(cfg, registry=get_registry()) as m:
        with pytest.raises(RewardError) as err:
            m.score(batch_of(16, {9: "raise"}))
        assert err.value.index == 9 and err.value.data_source == "toy"
        assert "sample 9" in str(err.value) and "KeyError: 'missing piece'" in str(err.value)
        assert "in compute_score" in err.value.detail  # the worker's traceback comes along
        scores, metrics, _ = m.score(batch_of(8))  # and the pool is still usable
        assert scores.tolist() == expected_scores(8, {})


def test_close_stops_every_worker(scorer_file):
    cfg = RewardConfig(custom=CustomRewardConfig(path=scorer_file), num_workers=2, timeout_s=TIMEOUT_S)
    m = RewardManager(cfg, registry=get_registry())
    m.score(batch_of(8))
    procs = [w.proc for w in m.pool._workers]
    assert all(p.is_alive() for p in procs)
    m.close()
    assert not any(p.is_alive() for p in procs)
    m.close()  # idempotent


def test_registered_cards_and_token_lengths_in_the_pool():
    import torch
    from rl_core.cards import Provider, RewardCard

    from rl_reward_pool.plugin import rl_core_register_features

    registry = Registry()
    rl_core_register_features(lambda card: registry.add(card, Provider(distribution="rl-reward-pool")))  # the pool's card alone
    for card in (
        RewardCard(name="exact", factory="tests.rewards.scorers:exact", data_sources={"a"}),
        RewardCard(name="length", factory="tests.rewards.scorers:length", data_sources={"b"}, fields=()),
    ):
        registry.add(card, Provider(distribution="test-dist"))
    mask = torch.zeros(6, 8, dtype=torch.long)
    for i in range(6):
        mask[i, : i + 1] = 1
    batch = Batch(
        {"response_mask": mask},
        {"response_text": ["x", "y"] * 3, "data_source": ["a", "b"] * 3, "ground_truth": ["x"] * 6},
    )
    with RewardManager(RewardConfig(num_workers=2, kwargs={"scale": 2.0}), registry) as m:
        scores, _, _ = m.score(batch)
    # "a" rows: exact match x2 (kwargs reach the workers); "b" rows: their token count
    assert scores.tolist() == [2.0, 2.0, 2.0, 4.0, 2.0, 6.0]
