"""rl_lora.adapters: peft LoRA on a tiny causal LM (built from a config), checked against references built without it."""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("peft")

from rl_core_testing.tiny_model import tiny_config  # noqa: E402
from rl_lora.adapters import (  # noqa: E402
    LoraError,
    LoraSpec,
    adapter_state_dict,
    adapters_disabled,
    apply_lora,
    merged_state_dict,
    save_adapter,
    target_names,
    target_problems,
    trainable_parameters,
)

SPEC = LoraSpec(rank=4, alpha=8.0)


def _base(arch="llama", seed=0):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(tiny_config(arch, hidden=32, layers=2, heads=4, kv_heads=2), dtype=torch.float32).eval()


def _randomise_adapters(model, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if ".lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)  # lora_B starts at 0 in peft: make the update see both


def _adapted():
    """(an untouched copy of the base, the base with random adapters, a batch of token ids)."""
    base = _base()
    plain = copy.deepcopy(base)
    model = apply_lora(base, SPEC)
    _randomise_adapters(model)
    return plain, model, _batch(model.config.vocab_size)


def _batch(vocab, seed=2):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (3, 10), generator=g)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_all_linear_picks_what_peft_picks(arch):
    import peft

    ours = apply_lora(_base(arch), SPEC)
    theirs = peft.get_peft_model(_base(arch), peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM"))
    from peft.tuners.lora import LoraLayer

    picked = lambda m: {n for n, mod in m.named_modules() if isinstance(mod, LoraLayer)}  # noqa: E731
    assert picked(ours) == picked(theirs) and picked(ours)
    assert not any("lm_head" in n for n in picked(ours))
    assert {f"base_model.model.{n}" for n in target_names(_base(arch), SPEC)} == picked(ours)
    spec = LoraSpec(rank=4, alpha=8.0, target_modules=("q_proj", "v_proj"), exclude_modules=("layers.0.self_attn.v_proj",))
    assert target_names(_base(arch), spec) == ["model.layers.0.self_attn.q_proj", "model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.v_proj"]


def test_base_frozen_in_the_compute_dtype_adapters_float32():
    model = apply_lora(_base(), SPEC, dtype=torch.bfloat16)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    for n, p in model.named_parameters():
        assert p.dtype == (torch.float32 if n in trainable else torch.bfloat16), n
    n_lora = sum(p.numel() for p in trainable_parameters(model))
    # all-linear on a 2-layer llama (h=32, kv=16, I=64): r * (in + out) per layer
    per_layer = 4 * ((32 + 32) + 2 * (32 + 16) + (32 + 32) + 2 * (32 + 64) + (64 + 32))
    assert n_lora == 2 * per_layer


def _token_log_probs(logits, ids):
    return torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def _loss(kind, logits, ids, ref_logits):
    """The plain causal-LM loss, or the actor's loss (rl_core.algorithms.actor_loss: PPO clip + GRPO's KL term to the reference)."""
    if kind == "causal_lm":
        return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), ids[:, 1:].reshape(-1))
    from rl_core.algorithms.actor_loss import compute_actor_loss
    from rl_core.config.schema import ActorConfig

    lp = _token_log_probs(logits, ids)
    g = torch.Generator().manual_seed(5)
    old = lp.detach() + 0.3 * torch.randn(lp.shape, generator=g)  # some ratios outside the clip range
    adv = torch.randn(lp.shape[0], 1, generator=g).expand_as(lp)
    loss, _ = compute_actor_loss(log_prob=lp, old_log_prob=old, advantages=adv, response_mask=torch.ones_like(lp),
                                 ref_log_prob=_token_log_probs(ref_logits, ids), cfg=ActorConfig(use_kl_loss=True, kl_loss_coef=0.1))
    return loss


def _plain_update_reference(base, adapters, scale, ids, lr, kind):
    """One AdamW step on W + scale * B @ A of the plain model through torch.func, A and B as leaf tensors: no peft.
    The reference policy is the plain model itself."""
    from torch.func import functional_call

    params = {n: p.detach() for n, p in base.named_parameters()}
    leaves = {k: v.detach().clone().float().requires_grad_(True) for k, v in adapters.items()}
    opt = torch.optim.AdamW(list(leaves.values()), lr=lr, weight_decay=0.01)
    weights = dict(params)
    for key in {k.rsplit(".lora_", 1)[0] for k in leaves}:
        name = key.removeprefix("base_model.model.") + ".weight"
        weights[name] = params[name] + scale * (leaves[key + ".lora_B.weight"] @ leaves[key + ".lora_A.weight"])
    with torch.no_grad():
        ref_logits = base(input_ids=ids).logits
    loss = _loss(kind, functional_call(base, weights, (ids,)).logits, ids, ref_logits)
    loss.backward()
    opt.step()
    return loss.detach(), {k: v.detach() for k, v in leaves.items()}


@pytest.mark.parametrize("kind", ["causal_lm", "actor"])
def test_one_lora_update_matches_a_plain_torch_reference(kind):
    reference_base, model, ids = _adapted()
    before = {k: v.clone() for k, v in adapter_state_dict(model).items()}  # views of the live tensors otherwise
    # ours: the wrapped model, AdamW over its trainable parameters; the reference policy = adapters off
    opt = torch.optim.AdamW(trainable_parameters(model), lr=1e-2, weight_decay=0.01)
    model.train()
    with torch.no_grad(), adapters_disabled(model):
        ref_logits = model(input_ids=ids).logits
    loss = _loss(kind, model(input_ids=ids).logits, ids, ref_logits)
    loss.backward()
    assert all(p.grad is None for n, p in model.named_parameters() if ".lora_" not in n)  # no gradients for the base
    opt.step()
    ref_loss, ref_after = _plain_update_reference(reference_base, before, SPEC.scale, ids, 1e-2, kind)
    torch.testing.assert_close(loss.detach(), ref_loss, rtol=1e-5, atol=1e-6)
    after = adapter_state_dict(model)
    assert set(after) == set(ref_after) and len(after) == 2 * len(target_names(reference_base, SPEC))
    for k in after:
        assert not torch.equal(after[k], before[k]), k  # every adapter moved
        torch.testing.assert_close(after[k], ref_after[k], rtol=1e-4, atol=1e-6)
    # the base is untouched: merged weights differ from it exactly on the targeted layers
    merged, plain = merged_state_dict(model), reference_base.state_dict()
    changed = {n.removesuffix(".weight") for n in merged if not torch.equal(merged[n], plain[n])}
    assert changed == set(target_names(reference_base, SPEC))


def test_merged_weights_give_the_adapted_models_logits_and_disabled_adapters_the_bases():
    plain, model, ids = _adapted()
    with torch.no_grad():
        adapted = model(input_ids=ids).logits
        with adapters_disabled(model):
            torch.testing.assert_close(model(input_ids=ids).logits, plain(input_ids=ids).logits)
        merged = merged_state_dict(model)
        assert set(merged) == {n for n, _ in plain.named_parameters()}
        before = plain(input_ids=ids).logits
        plain.load_state_dict(merged, strict=False)
        after = plain(input_ids=ids).logits
        torch.testing.assert_close(after, adapted, rtol=1e-5, atol=1e-5)
        assert (after - before).abs().max() > 1e-3  # the adapters change the logits: the comparison means something


def test_save_and_start_from_an_adapter_folder(tmp_path):
    from transformers import AutoModelForCausalLM

    model = apply_lora(_base(), SPEC)
    _randomise_adapters(model)
    ids = _batch(model.config.vocab_size)
    with torch.no_grad():
        want = model(input_ids=ids).logits
    save_adapter(model, tmp_path / "adapter", merged=True)
    assert (tmp_path / "adapter" / "adapter_config.json").is_file() and (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    again = apply_lora(_base(), LoraSpec(rank=4, alpha=8.0, adapter_path=str(tmp_path / "adapter")))
    assert trainable_parameters(again)  # trainable when started from a folder
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "adapter" / "merged")
    with torch.no_grad():
        torch.testing.assert_close(again(input_ids=ids).logits, want)
        torch.testing.assert_close(merged(input_ids=ids).logits, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(LoraError, match="model.lora_rank is 8 but the adapter .* has rank 4: set model.lora_rank=4"):
        apply_lora(_base(), LoraSpec(rank=8, alpha=8.0, adapter_path=str(tmp_path / "adapter")))
    with pytest.raises(LoraError, match="holds no adapter_config.json"):
        apply_lora(_base(), LoraSpec(rank=4, alpha=8.0, adapter_path=str(tmp_path)))


def test_target_names_that_match_nothing_are_named():
    spec = LoraSpec(rank=4, alpha=8.0, target_modules=("q_prj", "v_proj"), exclude_modules=("nope",))
    problems = target_problems(_base(), spec)
    assert [(k, "q_prj" in w or "nope" in w) for k, w, _ in problems] == [("model.target_modules", True), ("model.exclude_modules", True)]
    assert "did you mean 'q_proj'" in problems[0][1]
    with pytest.raises(LoraError, match="q_prj"):
        apply_lora(_base(), spec)
    everything = LoraSpec(rank=4, alpha=8.0, target_modules=("q_proj",), exclude_modules=("q_proj",))
    assert "leaves no layer" in target_problems(_base(), everything)[0][1]
