"""The generative judge on the CPU: a tiny model through the hf rollout card, parse failures, timeouts, on_error."""

from __future__ import annotations

import time

import attrs
import pytest
import torch
from rl_core.plugins import get_registry
from rl_core.backends import WorkerContext
from rl_core.batch import Batch
from rl_core.config.schema import RunConfig
from rl_reward_model.judge import JudgeScorer
from rl_core.rewards.manager import RewardError, RewardManager
from rl_reward_model.mixing import RewardWeights
from rl_reward_model.role import in_process
from rl_core_testing.tiny_model import EOS_ID, bigram_weights, build_tokenizer, make_tiny_model_dir

from rm_fixtures import with_reward_model


def tok_id(ch: str) -> int:
    return 3 + ord(ch)  # the tiny byte tokenizer: byte b is token 3 + b


@pytest.fixture(scope="module")
def judge_dir(tmp_path_factory):
    """A tiny judge that answers after the prompt's last character: '7' after 'r' or 'e', 'q' after 'x', '12' after 'z'."""
    from transformers import AutoModelForCausalLM

    path = make_tiny_model_dir(tmp_path_factory.mktemp("judge") / "judge", arch="llama")
    successor = {tok_id("r"): tok_id("7"), tok_id("e"): tok_id("7")}  # few predecessors per row keep the table exact
    successor.update({tok_id("x"): tok_id("q"), tok_id("z"): tok_id("1"), tok_id("1"): tok_id("2")})
    successor.update({tok_id("7"): EOS_ID, tok_id("q"): EOS_ID, tok_id("2"): EOS_ID})
    model = AutoModelForCausalLM.from_pretrained(path)
    model.load_state_dict(bigram_weights(path, successor))
    model.save_pretrained(path)
    return path


def judge_config(path, **judge):
    judge = {"template": "Rate: {response}", "max_new_tokens": 4, **judge}
    return with_reward_model(RunConfig(), enable=True, name="judge", model={"path": str(path)}, apply_chat_template=False,
                             micro_batch_size_per_gpu=2, judge=judge)


def batch_of(texts):
    return Batch({}, {"response_text": texts, "data_source": ["chat"] * len(texts), "raw_prompt": [[{"role": "user", "content": "hi"}]] * len(texts)})


def test_tiny_judge_scores_and_counts_parse_failures(judge_dir):
    config = judge_config(judge_dir)
    from rl_core.plugins import get_registry

    hf = get_registry().get("rollout", config.reward_model.judge.engine)  # what the resolver finds (Stack.reward_model_rollout)
    scorer = JudgeScorer(config, WorkerContext(), rollout=hf)  # the hf engine, built from that rollout card
    texts = ["good answer", "bad x", "lazy z", "fine"]
    batch = batch_of(texts)
    skip = attrs.evolve(config.reward, on_error="skip")
    scores, metrics, extras = RewardManager(skip, get_registry(), mixing=RewardWeights(None, model_name="judge")).score(batch, model=in_process(scorer, batch))
    # '7' of 0..10 -> 0.7; 'q' has no number; '12' is outside [0, 10]
    assert scores.tolist() == pytest.approx([0.7, 0.0, 0.0, 0.7])
    assert metrics["reward/model/parse_failures"] == 2 and metrics["reward/errors"] == 2 and metrics["reward/timeouts"] == 0
    assert metrics["reward/chat/failed"] == 2 and metrics["reward/chat/model_mean"] == pytest.approx(0.7)
    assert "'q'" in extras[1]["reward_error"] and "outside [0, 10]" in extras[2]["reward_error"]

    with pytest.raises(RewardError, match=r"reward_model judge.*sample 1 .*no score matching.*'q'"):
        RewardManager(config.reward, get_registry(), mixing=RewardWeights(None, model_name="judge")).score(batch, model=in_process(scorer, batch))


class SlowEngine:
    """A rollout engine that takes longer than the judge's timeout."""

    def generate(self, batch, params):
        time.sleep(0.5)
        raise AssertionError("not reached")


def test_a_judge_past_its_timeout_scores_zero_and_counts(judge_dir):
    config = judge_config(judge_dir, timeout_s=0.1)
    scorer = JudgeScorer(config, WorkerContext(), engine=SlowEngine(), tokenizer=build_tokenizer())
    batch = batch_of(["a", "b", "c"])
    start = time.perf_counter()
    scores, metrics, extras = RewardManager(config.reward, get_registry(), mixing=RewardWeights(None, model_name="judge")).score(batch, model=in_process(scorer, batch))
    assert time.perf_counter() - start < 1.0  # two micro-batches, each stopped at 0.1 s
    assert scores.tolist() == [0.0, 0.0, 0.0] and metrics["reward/timeouts"] == 3 and metrics["reward/model/timeouts"] == 3
    assert extras[0]["reward_timeout"] and "judge.timeout_s=0.1" in extras[0]["reward_error"]


def test_parser_reads_the_last_number_in_range():
    scorer = JudgeScorer.__new__(JudgeScorer)
    scorer.judge = RunConfig().reward_model.judge
    import re

    scorer.pattern = re.compile(scorer.judge.score_pattern)
    assert scorer.parse("Step 1 ... final score: 8.5").score == pytest.approx(0.85)
    assert scorer.parse("I'd say 3, no, 10").score == 1.0
    assert scorer.parse("ten").extras == {"parse_failure": 1}
    assert torch.isfinite(torch.tensor(scorer.parse("-0").score))
