"""Chunked log-probs / entropy (rl_core.logprobs): the same values and gradients as the plain full-vocab computation."""

from __future__ import annotations

import pytest
import torch
from rl_core.logprobs import chunked_log_probs, forward_response_chunked, leading_pad_columns
from rl_core.modeling import entropy_from_logits, forward_response, load_causal_lm, log_probs_from_logits, position_ids_from_mask

pytestmark = pytest.mark.usefixtures("one_thread")


def _plain(hidden, weight, labels, temperature):
    """The textbook computation, unchunked: full logits, log_softmax, gather; entropy -sum p log p."""
    z = (hidden @ weight.t()) / temperature
    logp = torch.log_softmax(z, dim=-1)
    lp = logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    ent = -(logp.exp() * logp).sum(-1)
    return lp, ent


@pytest.mark.parametrize("chunk", [1, 5, 64])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_values_and_gradients_equal_the_plain_computation(chunk, temperature):
    g = torch.Generator().manual_seed(chunk)
    h0 = 0.25 * torch.randn(3, 7, 16, generator=g)  # logits of a few units, as in an LM
    w0 = torch.randn(50, 16, generator=g)
    labels = torch.randint(0, 50, (3, 7), generator=g)
    a_lp, a_ent = torch.randn(3, 7, generator=g), torch.randn(3, 7, generator=g)  # arbitrary upstream gradients

    h1, w1 = h0.clone().requires_grad_(), w0.clone().requires_grad_()
    lp, ent = chunked_log_probs(h1, w1, labels, temperature=temperature, with_entropy=True, chunk_size=chunk)
    ((lp * a_lp).sum() + (ent * a_ent).sum()).backward()

    h2, w2 = h0.clone().requires_grad_(), w0.clone().requires_grad_()
    ref_lp, ref_ent = _plain(h2, w2, labels, temperature)
    ((ref_lp * a_lp).sum() + (ref_ent * a_ent).sum()).backward()

    assert lp.dtype == ent.dtype == torch.float32
    torch.testing.assert_close(lp, ref_lp, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent, ref_ent, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(h1.grad, h2.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w1.grad, w2.grad, atol=1e-5, rtol=1e-5)


def test_log_prob_only_and_detached_entropy_give_log_prob_gradients_only():
    g = torch.Generator().manual_seed(3)
    h0, w0 = torch.randn(9, 8, generator=g), torch.randn(20, 8, generator=g)
    labels = torch.randint(0, 20, (9,), generator=g)
    ref_h, ref_w = h0.clone().requires_grad_(), w0.clone().requires_grad_()
    _plain(ref_h, ref_w, labels, 1.0)[0].sum().backward()
    for with_entropy in (False, True):
        h, w = h0.clone().requires_grad_(), w0.clone().requires_grad_()
        lp, ent = chunked_log_probs(h, w, labels, with_entropy=with_entropy, entropy_grad=False, chunk_size=4)
        assert (ent is None) == (not with_entropy)
        if ent is not None:
            assert not ent.requires_grad
        lp.sum().backward()
        torch.testing.assert_close(h.grad, ref_h.grad, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(w.grad, ref_w.grad, atol=1e-5, rtol=1e-5)


def test_rejects_a_zero_chunk():
    with pytest.raises(ValueError, match="chunk_size"):
        chunked_log_probs(torch.zeros(2, 4), torch.zeros(5, 4), torch.zeros(2, dtype=torch.long), chunk_size=0)


def test_leading_pad_columns():
    mask = torch.tensor([[0, 0, 1, 1, 1], [0, 0, 0, 1, 1]])
    assert leading_pad_columns(mask, 3) == 2
    assert leading_pad_columns(torch.ones(2, 5, dtype=torch.long), 3) == 0


@pytest.fixture(scope="module", params=[("llama", True), ("qwen2", False)], ids=["llama-tied", "qwen2-untied"])
def model(request, tiny_model_dir):
    arch, tied = request.param
    path = tiny_model_dir(arch, tie_word_embeddings=tied)
    return load_causal_lm(path, dtype=torch.float32, device="cpu", seed=0)


def _batch(vocab=100):
    """Groups of identical left-padded prompts (two leading columns are padding everywhere), right-padded responses."""
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, vocab, (3, 7), generator=g).repeat_interleave(2, dim=0)
    pmask = torch.ones_like(prompts)
    pmask[:, :2] = 0
    pmask[2:4, :4] = 0
    responses = torch.randint(3, vocab, (6, 6), generator=g)
    rmask = torch.ones_like(responses)
    rmask[0, 2:] = 0
    rmask[:, 4:] = 0  # the last two columns are padding in every row
    ids = torch.cat([prompts, responses], 1)
    mask = torch.cat([pmask, rmask], 1)
    return ids, mask, position_ids_from_mask(mask), responses, rmask


@pytest.mark.parametrize("share_prompts", [False, True])
def test_forward_response_chunked_equals_forward_response(model, share_prompts):
    ids, mask, pos, responses, rmask = _batch()
    g = torch.Generator().manual_seed(1)
    a_lp, a_ent = torch.randn(responses.shape, generator=g), torch.randn(responses.shape, generator=g)

    def run(fn, **kw):
        model.zero_grad(set_to_none=True)
        lp, ent = fn(model, ids, mask, pos, responses, temperature=0.8, with_entropy=True, share_prompts=share_prompts, **kw)
        (((lp * a_lp + ent * a_ent) * rmask).sum()).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return lp.detach() * rmask, ent.detach() * rmask, grads

    lp1, ent1, g1 = run(forward_response)
    lp2, ent2, g2 = run(forward_response_chunked, chunk_size=5)
    torch.testing.assert_close(lp2, lp1, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent2, ent1, atol=1e-5, rtol=1e-5)
    assert g1.keys() == g2.keys() and len(g1) > 3
    for name in g1:
        torch.testing.assert_close(g2[name], g1[name], atol=1e-5, rtol=1e-4, msg=lambda m, n=name: f"{n}: {m}")
    assert (lp2[:, 4:] == 0).all()


def test_chunk_size_none_is_the_plain_path(model):
    ids, mask, pos, responses, rmask = _batch()
    with torch.no_grad():
        lp1, _ = forward_response(model, ids, mask, pos, responses)
        lp2, ent2 = forward_response_chunked(model, ids, mask, pos, responses, chunk_size=None)
    assert ent2 is None
    assert torch.equal(lp1, lp2)


def test_bf16_autocast_matches_the_plain_path_within_bf16_noise(model):
    ids, mask, pos, responses, rmask = _batch()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        lp1, ent1 = forward_response(model, ids, mask, pos, responses, with_entropy=True)
        lp2, ent2 = forward_response_chunked(model, ids, mask, pos, responses, with_entropy=True, chunk_size=7)
    torch.testing.assert_close(lp2 * rmask, lp1 * rmask, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(ent2 * rmask, ent1 * rmask, atol=2e-2, rtol=2e-2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: measures GPU memory")
def test_cuda_peak_memory_is_a_fraction_of_the_plain_path():
    """152k vocabulary, 4096 tokens, bf16 hidden states: forward + backward peak, chunked vs plain."""
    g = torch.Generator(device="cuda").manual_seed(0)
    h0 = 0.05 * torch.randn(4096, 896, device="cuda", generator=g)
    w0 = 0.05 * torch.randn(151936, 896, device="cuda", generator=g)
    labels = torch.randint(0, 151936, (4096,), device="cuda", generator=g)

    def run(fn):
        h, w = h0.clone().requires_grad_(), w0.clone().requires_grad_()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            lp, ent = fn(h, w)
        (lp.sum() + ent.sum()).backward()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**30, lp.detach(), h.grad

    def plain(h, w):
        logits = (h @ w.t()).float()  # what forward_response does under autocast: bf16 logits, then float32
        return log_probs_from_logits(logits, labels), entropy_from_logits(logits)

    peak_plain, lp1, gh1 = run(plain)
    peak_chunk, lp2, gh2 = run(lambda h, w: chunked_log_probs(h, w, labels, with_entropy=True, chunk_size=512))
    torch.testing.assert_close(lp2, lp1, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(gh2, gh1, atol=2e-2, rtol=5e-2)
    assert peak_chunk < peak_plain / 3, (peak_chunk, peak_plain)
