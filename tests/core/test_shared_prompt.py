"""One prompt forward per group of responses: same log-probs, entropy and gradients as the plain forward."""

from __future__ import annotations

import pytest
import torch
from rl_core.modeling import forward_response, load_causal_lm, position_ids_from_mask
from rl_core.train_engine.shared_prompt import can_share_prompts, prompt_groups

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def model(request, tiny_model_dir):
    path = tiny_model_dir(request.param)
    return load_causal_lm(path, dtype=torch.float32, device="cpu", seed=0)


def test_prompt_groups_are_runs_of_equal_prompt_ids_and_mask():
    a, b = [5, 6, 7], [5, 6, 8]
    ids = torch.tensor([a + [1], a + [2], b + [1], b + [3], b + [1], a + [1]])
    mask = torch.ones_like(ids)
    assert prompt_groups(ids, mask, 3).tolist() == [0, 0, 1, 1, 1, 2]  # `a` again after `b`: a new group
    mask[1, 0] = 0  # same ids, other padding: not the same prompt
    assert prompt_groups(ids, mask, 3).tolist() == [0, 1, 2, 2, 2, 3]
    assert prompt_groups(ids[:1], mask[:1], 3).tolist() == [0]


def _batch(prompt_len=7, response_len=5, groups=(3, 1, 2), vocab=100, seed=0):
    """Left-padded prompts repeated per group, right-padded responses (one ends after a single token)."""
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(3, vocab, (len(groups), prompt_len), generator=g)
    pmask = torch.ones_like(prompts)
    pmask[1, :3] = 0
    pmask[2, :1] = 0
    reps = torch.tensor(groups)
    rows = int(reps.sum())
    responses = torch.randint(3, vocab, (rows, response_len), generator=g)
    rmask = torch.ones_like(responses)
    rmask[0, 3:] = 0
    rmask[rows - 1, 1:] = 0
    ids = torch.cat([prompts.repeat_interleave(reps, 0), responses], 1)
    mask = torch.cat([pmask.repeat_interleave(reps, 0), rmask], 1)
    return ids, mask, position_ids_from_mask(mask), responses, rmask


def _run(model, share, batch, temperature=1.0):
    ids, mask, pos, responses, rmask = batch
    model.zero_grad(set_to_none=True)
    lp, ent = forward_response(model, ids, mask, pos, responses, temperature=temperature, with_entropy=True, share_prompts=share)
    ((lp * rmask).sum() + 0.1 * (ent * rmask).sum()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return lp.detach(), ent.detach(), grads


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_shared_forward_matches_plain_forward(model, temperature):
    batch = _batch()
    calls = []
    handle = model.register_forward_pre_hook(lambda mod, args, kwargs: calls.append(kwargs["input_ids"].shape), with_kwargs=True)
    try:
        plain = _run(model, False, batch, temperature)
        assert calls == [batch[0].shape]
        calls.clear()
        shared = _run(model, True, batch, temperature)
    finally:
        handle.remove()
    # one prompt pass over the 3 distinct prompts, then the 6 rows' responses (all but the last token)
    assert calls == [torch.Size([3, 7]), torch.Size([6, 4])]
    valid = batch[4].bool()
    torch.testing.assert_close(shared[0][valid], plain[0][valid], rtol=0, atol=1e-5)
    torch.testing.assert_close(shared[1][valid], plain[1][valid], rtol=0, atol=1e-5)
    assert plain[2].keys() == shared[2].keys() and len(plain[2]) > 0
    for name, grad in plain[2].items():
        torch.testing.assert_close(shared[2][name], grad, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")


def test_all_distinct_prompts_and_one_token_responses_use_the_plain_forward(model):
    ids, mask, pos, responses, rmask = _batch(groups=(1, 1, 1))
    calls = []
    handle = model.register_forward_pre_hook(lambda mod, args, kwargs: calls.append(kwargs["input_ids"].shape), with_kwargs=True)
    try:
        with torch.no_grad():
            forward_response(model, ids, mask, pos, responses, share_prompts=True)
            assert len(calls) == 1  # no group of two: nothing to share
            one = _batch(response_len=1)
            lp_shared, _ = forward_response(model, *one[:4], share_prompts=True)
            lp_plain, _ = forward_response(model, *one[:4], share_prompts=False)
    finally:
        handle.remove()
    torch.testing.assert_close(lp_shared, lp_plain, rtol=0, atol=1e-5)


def test_not_shared_under_gradient_checkpointing(model):
    assert can_share_prompts(model)
    model.gradient_checkpointing_enable()
    try:
        assert not can_share_prompts(model)  # transformers drops past_key_values under checkpointing
    finally:
        model.gradient_checkpointing_disable()
    assert can_share_prompts(model)


def test_trailing_padding_columns_are_not_computed(model):
    """Columns that are padding in every row are cut before the forward; valid positions and gradients are unchanged."""
    from rl_core.modeling import log_probs_from_logits, response_columns_in_use, response_logits

    ids, mask, pos, responses, rmask = _batch(response_len=6, groups=(2, 2, 2))
    rmask[:, 4:] = 0  # the longest response has 4 tokens
    mask[:, -6:] = rmask
    assert response_columns_in_use(mask, 6) == 4
    assert response_columns_in_use(torch.zeros_like(mask), 6) == 1

    model.zero_grad(set_to_none=True)
    full = log_probs_from_logits(response_logits(model, ids, mask, pos, 6).float(), responses)
    (full * rmask).sum().backward()
    ref_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    calls = []
    handle = model.register_forward_pre_hook(lambda mod, args, kwargs: calls.append(kwargs["input_ids"].shape[1]), with_kwargs=True)
    try:
        model.zero_grad(set_to_none=True)
        lp, ent = forward_response(model, ids, mask, pos, responses, with_entropy=True)
        (lp * rmask).sum().backward()
    finally:
        handle.remove()
    assert calls == [7 + 4]  # 7 prompt columns + the 4 response columns in use
    assert lp.shape == ent.shape == (6, 6) and not lp[:, 4:].any() and not ent[:, 4:].any()
    valid = rmask.bool()
    torch.testing.assert_close(lp[valid], full.detach()[valid], rtol=0, atol=1e-5)
    for name, grad in ref_grads.items():
        torch.testing.assert_close(model.get_parameter(name).grad, grad, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")
