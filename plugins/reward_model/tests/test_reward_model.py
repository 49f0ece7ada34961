"""The classifier reward model: texts cross from the policy to the reward model, never token ids."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from rl_core.backends import WorkerContext
from rl_core.batch import Batch
from rl_core.config.schema import RunConfig
from rl_reward_model.classifier import SequenceClassifierScorer
from rl_reward_model.role import requests_from_batch, rounds_for, split_requests
from rl_core.rewards.outcome import OK
from rl_core.trainer.loop import Trainer
from rl_core_testing.tiny_model import build_tokenizer

from rm_fixtures import build_rm_tokenizer, make_reward_model_dir, with_reward_model

PROMPTS = [[{"role": "system", "content": "be kind"}, {"role": "user", "content": "what is the weather?"}], [{"role": "user", "content": "2+2="}]]
RESPONSES = ["the heather is there", "4", "aaaa the end", ""]


def policy_batch(policy_tok) -> Batch:
    """A rollout batch as the trainer holds it: the policy's token ids, right-padded responses."""
    ids = [policy_tok(t, add_special_tokens=False)["input_ids"] + [policy_tok.eos_token_id] for t in RESPONSES]
    width = max(len(i) for i in ids)
    responses = torch.full((len(ids), width), policy_tok.pad_token_id)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for r, row in enumerate(ids):
        responses[r, : len(row)] = torch.tensor(row)
        mask[r, : len(row)] = 1
    raw = [PROMPTS[i % 2] for i in range(len(ids))]
    return Batch({"responses": responses, "response_mask": mask}, {"raw_prompt": raw, "data_source": ["chat"] * len(ids), "prompt_text": ["unused"] * len(ids)})


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory):
    return make_reward_model_dir(tmp_path_factory.mktemp("rm") / "rm")


def test_different_vocabularies_score_the_decoded_text(rm_dir):
    from transformers import AutoModelForSequenceClassification

    policy_tok, rm_tok = build_tokenizer(), build_rm_tokenizer()
    assert policy_tok("the heather")["input_ids"] != rm_tok("the heather")["input_ids"]  # the vocabularies really differ

    batch = policy_batch(policy_tok)
    batch["response_text"] = Trainer.decode_responses(SimpleNamespace(tokenizer=policy_tok), batch)  # the trainer's own decode
    assert list(batch.non_tensors["response_text"]) == RESPONSES
    config = with_reward_model(RunConfig(), enable=True, model={"path": str(rm_dir)}, micro_batch_size_per_gpu=3)
    scorer = SequenceClassifierScorer(config, WorkerContext())
    outcomes = scorer.score(requests_from_batch(batch, range(len(RESPONSES))))
    assert [o.status for o in outcomes] == [OK] * len(RESPONSES)

    # the same texts given to the reward model directly, one at a time, with its own tokenizer and template
    model = AutoModelForSequenceClassification.from_pretrained(rm_dir).eval()
    direct = []
    for i, text in enumerate(RESPONSES):
        chat = [*PROMPTS[i % 2], {"role": "assistant", "content": text}]
        ids = rm_tok(rm_tok.apply_chat_template(chat, tokenize=False), add_special_tokens=False, return_tensors="pt")["input_ids"]
        assert ids.max() < model.config.vocab_size and 1 in ids[0].tolist()  # its own <s>, not the policy's ids
        with torch.no_grad():
            direct.append(model(input_ids=ids).logits[0, 0].item())
    assert [o.score for o in outcomes] == pytest.approx(direct, abs=1e-5)

    # what crossing token ids over would have scored: something else, with no error
    crossed = [model(input_ids=batch["responses"][i : i + 1, : int(batch["response_mask"][i].sum())]).logits[0, 0].item() for i in range(3)]
    assert crossed != pytest.approx(direct[:3], abs=1e-3)


def test_long_inputs_keep_their_end_and_are_counted(rm_dir):
    config = with_reward_model(RunConfig(), enable=True, model={"path": str(rm_dir)}, max_length=30)
    scorer = SequenceClassifierScorer(config, WorkerContext())
    batch = Batch({}, {"response_text": ["x" * 40, "ok"], "raw_prompt": [PROMPTS[1]] * 2})
    reqs = requests_from_batch(batch, [0, 1])
    ids, cut = scorer.encode(reqs[0])
    assert cut and len(ids) == 30 and scorer.tokenizer.decode(ids).endswith("</s>")
    out = scorer.score(reqs)
    assert out[0].extras == {"truncated": 1} and not out[1].extras
    # max_length null (a reward model verl serves): the model's context, max_position_embeddings=512
    whole = SequenceClassifierScorer(with_reward_model(config, max_length=None), WorkerContext(), model=scorer.model, tokenizer=scorer.tokenizer)
    ids, cut = whole.encode(reqs[0])
    assert not cut and len(ids) > 30
    (longer,) = requests_from_batch(Batch({}, {"response_text": ["x" * 600], "raw_prompt": [PROMPTS[1]]}), [0])
    ids, cut = whole.encode(longer)
    assert cut and len(ids) == 512 and whole.tokenizer.decode(ids).endswith("</s>")


def test_requests_split_evenly_and_rounds_cover_the_largest_share():
    shares = split_requests(list(range(7)), 3)
    assert shares == [[0, 1, 2], [3, 4], [5, 6]]
    assert rounds_for(shares, 2) == 2 and rounds_for(split_requests([], 2), 4) == 0


def _sharded_scores(rank, world_size, rm_dir, texts_per_rank):
    from rl_core.backends import WorkerContext
    from rl_core.config.schema import RunConfig
    from rl_reward_model.classifier import SequenceClassifierScorer
    from torch.distributed.fsdp import FSDPModule

    from rm_fixtures import with_reward_model

    config = with_reward_model(RunConfig(), enable=True, model={"path": rm_dir}, strategy="fsdp", micro_batch_size_per_gpu=2)
    scorer = SequenceClassifierScorer(config, WorkerContext(rank=rank, world_size=world_size))
    assert scorer.sharded and isinstance(scorer.model, FSDPModule)
    texts = texts_per_rank[rank]
    batch = Batch({}, {"response_text": texts, "raw_prompt": [PROMPTS[1]] * len(texts)})
    shares = [texts_per_rank[r] for r in range(world_size)]
    return [o.score for o in scorer.score(requests_from_batch(batch, range(len(texts))), rounds=rounds_for(shares, 2))]


@pytest.mark.dist
def test_fsdp_sharded_reward_model_scores_like_the_whole_one(rm_dir):
    from rl_core_testing.distributed import run_distributed

    texts_per_rank = [["a", "bb", "the cc", "dd"], ["e"]]  # rank 1 runs one empty round to keep the collectives in step
    got = run_distributed(_sharded_scores, 2, str(rm_dir), texts_per_rank, timeout=180)
    config = with_reward_model(RunConfig(), enable=True, model={"path": str(rm_dir)})
    whole = SequenceClassifierScorer(config, WorkerContext())
    for texts, scores in zip(texts_per_rank, got):
        batch = Batch({}, {"response_text": texts, "raw_prompt": [PROMPTS[1]] * len(texts)})
        assert scores == pytest.approx([o.score for o in whole.score(requests_from_batch(batch, range(len(texts))))], abs=1e-5)
