"""The SFT loss through core's update (the fsdp backend) equals token-weighted cross-entropy computed in plain torch,
padded or packed, in any micro-batch split (fixed or by a token budget), with holes in the loss mask."""

from __future__ import annotations

import pytest
import torch
from rl_core.backends import WorkerContext
from rl_core.cards import load_object
from rl_core.config.schema import ActorConfig, DataConfig, ModelConfig, OptimConfig, RolloutConfig, RunConfig, TrainerConfig
from rl_core.train_engine.engine import build_role_engine
from rl_sft.data import Example
from rl_sft.loader import collate
from rl_sft.loss import sft_loss

pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")

# hand-built sequences: (ids, loss mask); different lengths, different prompt lengths, masks with holes (multi-turn)
SEQS = [
    ([1, 30, 31, 32, 2, 1, 40, 41, 2], [0, 0, 0, 0, 0, 0, 1, 1, 1]),
    ([1, 50, 2, 1, 60, 61, 62, 63, 2, 1, 70, 2, 1, 80, 81, 2], [0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1]),
    ([1, 90, 91, 2, 1, 100, 2], [0, 0, 0, 0, 0, 1, 1]),
    ([1, 33, 34, 35, 36, 37, 2, 1, 44, 45, 46, 47, 48, 49, 50, 2], [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1]),
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from rl_core_testing.tiny_model import make_tiny_model_dir

    return make_tiny_model_dir(tmp_path_factory.mktemp("m") / "model", arch="qwen2")


def reference_loss(model_dir) -> float:
    """sum over every trained token of -log p(token | the tokens before it), over the number of trained tokens."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), torch_dtype=torch.float32).eval()
    nll, count = 0.0, 0
    with torch.no_grad():
        for ids, mask in SEQS:
            x = torch.tensor([ids])
            logp = torch.log_softmax(model(input_ids=x).logits[0, :-1].double(), dim=-1)
            tok = logp.gather(-1, x[0, 1:, None])[:, 0]
            m = torch.tensor(mask[1:], dtype=torch.float64)
            nll -= float((tok * m).sum())
            count += int(m.sum())
    return nll / count


def config(model_dir, **actor) -> RunConfig:
    return RunConfig(
        model=ModelConfig(path=str(model_dir), share_prompt_forward=False),
        data=DataConfig(train_batch_size=len(SEQS), max_prompt_length=16, max_response_length=16),
        rollout=RolloutConfig(n=1),
        actor=ActorConfig(policy_loss="sft", ppo_mini_batch_size=len(SEQS), **{"ppo_micro_batch_size_per_gpu": 1, "optim": OptimConfig(lr=1e-3), **actor}),
        trainer=TrainerConfig(kind="sft", device="cpu", total_training_steps=1, seed=0),
    )


def update_loss(model_dir, **actor) -> float:
    cfg = config(model_dir, **actor)
    engine = build_role_engine(load_object("rl_train_fsdp.engine:FSDPBackend"), "actor", cfg, WorkerContext(), policy_loss=sft_loss)
    batch = collate([Example(tuple(i), tuple(m), f"seq {k}") for k, (i, m) in enumerate(SEQS)], pad_id=0)
    try:
        return engine.update(batch)["loss"]
    finally:
        engine.shutdown()


@pytest.mark.parametrize(
    "actor",
    [
        {"use_remove_padding": False, "ppo_micro_batch_size_per_gpu": 1},
        {"use_remove_padding": False, "ppo_micro_batch_size_per_gpu": 2},
        {"use_remove_padding": True, "ppo_micro_batch_size_per_gpu": 1},
        {"use_remove_padding": True, "ppo_micro_batch_size_per_gpu": 4},
        {"use_remove_padding": True, "use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 24},
    ],
    ids=["padded-micro1", "padded-micro2", "packed-micro1", "packed-micro4", "packed-token-budget"],
)
def test_update_loss_equals_plain_torch_token_weighted_cross_entropy(model_dir, actor):
    assert update_loss(model_dir, **actor) == pytest.approx(reference_loss(model_dir), rel=1e-5, abs=1e-6)


def test_the_loss_is_token_weighted_not_a_mean_of_sequence_means():
    lp = torch.tensor([[-1.0, -2.0, 0.0], [-4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    loss, _ = sft_loss(log_prob=lp, response_mask=mask, loss_agg_mode="token-mean", old_log_prob=None, advantages=None)
    assert float(loss) == pytest.approx((1 + 2 + 4) / 3)  # a mean of sequence means would be (1.5 + 4) / 2


def test_collate_puts_the_loss_mask_over_exactly_the_trained_tokens():
    batch = collate([Example(tuple(i), tuple(m), "") for i, m in SEQS], pad_id=0)
    R = batch["responses"].shape[1]
    for r, (ids, mask) in enumerate(SEQS):
        row = batch["input_ids"][r][batch["attention_mask"][r].bool()].tolist()
        assert row == ids
        trained = batch["responses"][r][batch["response_mask"][r].bool()].tolist()
        assert trained == [t for t, m in zip(ids, mask) if m]
        assert batch["response_mask"].shape[1] == R
