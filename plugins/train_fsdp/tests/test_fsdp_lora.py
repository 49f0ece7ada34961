"""LoRA in the fsdp train backend (issue #32): the update against plain peft + torch, the reference = adapters off,
merged weight sync to the hf rollout (verified: a stale or unmerged sync stops), adapter checkpoints and exact resume,
save_hf's adapter folder, CPU offload giving the same update."""

from __future__ import annotations

import attrs
import pytest
import torch
from rl_core.config.sections import evolve_key
from rl_core.backends import WorkerContext
from rl_core.plan.features import load_features
from rl_core.plugins import get_registry
from rl_core_testing.train_conformance import PROMPTS_PER_STEP, default_config, make_step_batch

from tests.numerics import AdamWSteps, assert_adamw_steps, assert_fails, assert_reduction_close, lm_gradient_terms, perturbed

pytest.importorskip("peft")
rl_train_fsdp = pytest.importorskip("rl_train_fsdp.engine", reason="needs the rl-train-fsdp plugin installed (pip install -e plugins/train_fsdp)")

pytestmark = pytest.mark.usefixtures("one_thread")
build_engine = rl_train_fsdp.build_engine
CPU = WorkerContext(rank=0, world_size=1, device="cpu")
# the hf rollout's context as a plan's worker builds it: the plan's features (rl-lora's rollout_adapters hook)
ROLLOUT = WorkerContext(rank=0, world_size=1, device="cpu", features=load_features(get_registry(), []))


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir("qwen2", hidden=32, layers=2)


@pytest.fixture(scope="module")
def step(model_dir):
    return make_step_batch(model_dir)


def _cfg(model_dir, *, rank=4, **fsdp):
    cfg = default_config(model_dir)
    a = cfg.actor
    actor = attrs.evolve(
        a, ppo_mini_batch_size=PROMPTS_PER_STEP, ppo_micro_batch_size_per_gpu=4, ppo_epochs=1, entropy_coeff=0.0,
        optim=attrs.evolve(a.optim, lr=1e-2, lr_warmup_steps=0, lr_scheduler="constant", grad_clip=0.0),
    )
    actor = evolve_key(actor, "fsdp_config", attrs.evolve(a.fsdp_config, **fsdp))
    return attrs.evolve(cfg, model=attrs.evolve(cfg.model, lora_rank=rank, lora_alpha=2.0 * rank), actor=actor,
                        critic=attrs.evolve(cfg.critic, enable=False))


def _adapters(model):
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def _response_log_probs(model, batch):
    t = batch.tensors
    from rl_core.modeling import position_ids_from_mask

    R = t["responses"].shape[1]
    logits = model(input_ids=t["input_ids"], attention_mask=t["attention_mask"], position_ids=position_ids_from_mask(t["attention_mask"])).logits
    return torch.log_softmax(logits[:, -R - 1 : -1].float(), -1).gather(-1, t["responses"][..., None]).squeeze(-1)


def test_one_update_matches_plain_peft_and_torch(model_dir, step):
    """Only the adapters train (AdamW holds them alone; the base is bit-identical after); the update equals plain
    peft + torch AdamW on the actor loss (token-mean over the whole batch, here run in micro-batches of 4)."""
    import peft
    from rl_core.algorithms.actor_loss import compute_actor_loss
    from transformers import AutoModelForCausalLM

    cfg = _cfg(model_dir)
    engine = build_engine("actor", cfg, CPU)
    model = engine.model
    base_before = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    start = _adapters(model)
    assert start and all(".lora_A." in n or ".lora_B." in n for n in start)
    assert sum(p.numel() for g in engine.optimizer.param_groups for p in g["params"]) == sum(v.numel() for v in start.values())

    ref = peft.get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
                              peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM"))
    with torch.no_grad():
        for n, p in ref.named_parameters():
            if n in start:
                p.copy_(start[n])
            p.requires_grad_(n in start)
    # peft's lora_B starts at zero: one step first so both A and B carry gradient in the compared step
    with torch.no_grad():
        for n, p in list(model.named_parameters()) + list(ref.named_parameters()):
            if ".lora_B." in n:
                p.copy_(torch.full_like(p, 0.05))
    o = cfg.actor.optim
    opt = torch.optim.AdamW([p for p in ref.parameters() if p.requires_grad], lr=o.lr, betas=tuple(o.betas), eps=o.eps, weight_decay=o.weight_decay)
    t = step.tensors
    ref.train()
    loss, _ = compute_actor_loss(log_prob=_response_log_probs(ref, step), old_log_prob=t["old_log_probs"], advantages=t["advantages"],
                                 response_mask=t["response_mask"], ref_log_prob=t["ref_log_prob"], cfg=cfg.actor)
    loss.backward()
    opt.step()

    names = {id(p): n for n, p in model.named_parameters()}
    grads = {}
    engine.optimizer.register_step_pre_hook(lambda *_: grads.update({names[id(p)]: p.grad.clone() for g in engine.optimizer.param_groups for p in g["params"]}))
    metrics = engine.update(step)
    assert metrics["loss"] == pytest.approx(float(loss), rel=1e-5)
    # gradients compared (AdamW's first step is ~lr * sign(g): it would hide or blow up rounding in tiny gradients)
    want_g = {n: p.grad for n, p in ref.named_parameters() if p.requires_grad}
    assert grads.keys() == want_g.keys()
    for n in grads:
        torch.testing.assert_close(grads[n], want_g[n], rtol=1e-4, atol=1e-7)
    want = {n: p.detach() for n, p in ref.named_parameters() if p.requires_grad}
    got = _adapters(model)
    moved = [n for n in got if (got[n] - want[n]).abs().max() <= 2e-4 * o.lr * 100 and not torch.equal(got[n], start[n])]
    assert len(moved) == len(got)  # every adapter moved, as the reference's did
    for n, p in model.named_parameters():
        if n in base_before:
            assert torch.equal(p, base_before[n]) and p.grad is None, n


def test_reference_is_the_base_with_adapters_off_and_sync_is_merged_and_verified(model_dir, step):
    from rl_core.rollout.hf import HFRolloutEngine
    from rl_core.weight_sync_check import StaleWeightsError, load_verified
    from transformers import AutoModelForCausalLM

    cfg = _cfg(model_dir)
    actor = build_engine("actor", cfg, CPU)
    actor.update(step)  # adapters away from peft's zero start
    plain = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        base_lp = _response_log_probs(plain, step)
    mask = step.tensors["response_mask"].bool()
    ref_lp = actor.compute_log_prob(step, reference=True)["log_probs"]
    torch.testing.assert_close(ref_lp[mask], base_lp[mask], rtol=1e-5, atol=1e-5)
    assert (actor.compute_log_prob(step)["log_probs"][mask] - base_lp[mask]).abs().max() > 1e-3
    with pytest.raises(RuntimeError, match="no LoRA adapters"):
        build_engine("actor", _cfg(model_dir, rank=0), CPU).compute_log_prob(step, reference=True)

    rollout = HFRolloutEngine(cfg, ROLLOUT)
    n = load_verified(rollout, actor.named_weights(), actor.sample_weights, engine_name="hf", version=1)
    assert n == len(dict(plain.named_parameters()))  # every tensor verified (tied embeddings once)
    with torch.no_grad():  # the rollout now samples the trained policy
        torch.testing.assert_close(_response_log_probs(rollout.model, step)[mask], actor.compute_log_prob(step)["log_probs"][mask], rtol=1e-4, atol=1e-4)
    # an unmerged sync (the base weights, adapters dropped) is caught against the trainer's own view
    unmerged = [(k, v) for k, v in plain.state_dict().items() if k != "lm_head.weight"]
    with pytest.raises(StaleWeightsError, match="not the policy being trained"):
        load_verified(rollout, unmerged, actor.sample_weights, engine_name="hf", version=2)
    # a stale engine (keeps its old weights) is caught too
    actor.update(step)

    class Stale:
        def load_weights(self, weights):
            for _ in weights:
                pass

        sample_weights = rollout.sample_weights

    with pytest.raises(StaleWeightsError, match="kept stale weights"):
        load_verified(Stale(), actor.named_weights(), actor.sample_weights, engine_name="hf", version=3)


def test_adapter_checkpoint_resume_is_exact_and_save_hf_writes_a_peft_folder(model_dir, step, tmp_path):
    cfg = _cfg(model_dir)
    torch.manual_seed(0)
    a = build_engine("actor", cfg, CPU)
    a.update(step)
    a.save_checkpoint(str(tmp_path / "ckpt"))
    held = torch.load(str(tmp_path / "ckpt" / "extra_rank0.pt"), weights_only=True)
    assert held["role"] == "actor"
    from rl_train_fsdp.dcp_io import read_dcp_metadata

    keys = set(read_dcp_metadata(str(tmp_path / "ckpt" / "dcp" / ".metadata")).state_dict_metadata)
    assert any(".lora_A." in k for k in keys) and any(k.startswith("optim.") for k in keys)
    # the adapters and their AdamW state, not the frozen base (model.path's; torch keeps the tied LM head's name)
    assert not [k for k in keys if ".lora_" not in k and not k.endswith("lm_head.weight")]
    m_a = a.update(step)
    torch.manual_seed(1)  # other fresh adapters: the checkpoint must overwrite them
    b = build_engine("actor", cfg, CPU)
    b.load_checkpoint(str(tmp_path / "ckpt"))
    m_b = b.update(step)
    assert m_a == m_b
    sa, sb = a.local_state_dict(), b.local_state_dict()
    for n in sa["model"]:
        assert torch.equal(sa["model"][n], sb["model"][n]), n

    _check_save_hf(a, step, model_dir, tmp_path)


def _check_save_hf(a, step, model_dir, tmp_path):
    """save_hf of a LoRA actor: a PEFT adapter folder naming model.path as its base, which peft loads to the trained
    policy's log-probs; no merged weights unless trainer.save_merged_lora, then the merged state dict in model.dtype."""
    import json

    import peft
    from rl_lora.adapters import MERGED_FOLDER, adapter_folder_base, merged_state_dict
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    a.save_hf(str(tmp_path / "hf"))
    folder = tmp_path / "hf"
    assert sorted(p.name for p in folder.glob("*.safetensors")) == ["adapter_model.safetensors"]
    assert not (folder / MERGED_FOLDER).exists() and not (folder / "config.json").exists()
    assert (folder / "tokenizer_config.json").is_file()
    assert adapter_folder_base(folder) == str(model_dir) and json.loads((folder / "adapter_config.json").read_text())["r"] == 4
    from rl_core.modeling import ModelPathError, check_model_path

    with pytest.raises(ModelPathError, match="is a LoRA adapter folder.*model.lora_adapter_path="):
        check_model_path(folder)  # model.path=<a LoRA run's hf_final>: told to use it as the adapter path instead
    with torch.no_grad():
        mask = step.tensors["response_mask"].bool()
        want = a.compute_log_prob(step)["log_probs"][mask]
        adapted = peft.PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(adapter_folder_base(folder), dtype=torch.float32), folder).eval()
        torch.testing.assert_close(_response_log_probs(adapted, step)[mask], want, rtol=1e-5, atol=1e-5)
    # on request, the merged weights too (model.dtype; bfloat16 here, the base's dtype on a GPU run)
    a.backend.config = attrs.evolve(a.backend.config, trainer=attrs.evolve(a.backend.config.trainer, save_merged_lora=True))
    a.backend.compute_dtype = torch.bfloat16
    try:
        a.save_hf(str(tmp_path / "hf2"))
    finally:
        a.backend.compute_dtype = torch.float32
    merged = load_file(str(tmp_path / "hf2" / MERGED_FOLDER / "model.safetensors"))
    want_sd = merged_state_dict(a.backend.model, dtype=torch.bfloat16)
    want_sd.pop("lm_head.weight", None) if "lm_head.weight" not in merged else None  # tied: written once, as HF does
    assert merged.keys() == want_sd.keys()
    for k in merged:
        assert merged[k].dtype == torch.bfloat16 and torch.equal(merged[k], want_sd[k]), k
    assert json.loads((tmp_path / "hf2" / MERGED_FOLDER / "config.json").read_text())["dtype"] == "bfloat16"
    assert (tmp_path / "hf2" / "adapter_config.json").is_file()


@pytest.mark.parametrize("rank", [0, 4])
def test_offload_gives_the_same_update(model_dir, step, rank):
    """param_offload / optimizer_offload: the weights live in host copies between phases and AdamW's state steps in
    chunks (several here): the same update, bit for bit, as without offload."""
    torch.manual_seed(0)  # peft draws lora_A at random: the same start for both
    plain = build_engine("actor", _cfg(model_dir, rank=rank), CPU)
    torch.manual_seed(0)
    off = build_engine("actor", _cfg(model_dir, rank=rank, param_offload=True, optimizer_offload=True), CPU)
    off.backend.offload_chunk_bytes = 4096  # several chunks on the tiny model
    chunks, moves = [], []
    mod = rl_train_fsdp.offload
    real_step, real_move = mod.streamed_step, mod.move_params
    mod.streamed_step = lambda *a, **k: chunks.append(real_step(*a, **k)) or chunks[-1]
    mod.move_params = lambda model, device: moves.append(device.type) or real_move(model, device)
    try:
        for _ in range(2):
            assert plain.update(step) == off.update(step)
    finally:
        mod.streamed_step, mod.move_params = real_step, real_move
    assert len(chunks) == 2 and min(chunks) > 1  # AdamW stepped chunk by chunk from host copies
    assert moves == ["cpu", "cpu"] * 2  # to the device (here the CPU too) for each update, and back
    sp, so = plain.local_state_dict(), off.local_state_dict()
    for n in sp["model"]:
        assert torch.equal(sp["model"][n], so["model"][n]), n
    lp = plain.compute_log_prob(step)["log_probs"]
    assert torch.equal(lp, off.compute_log_prob(step)["log_probs"])
    assert {n: t.clone() for n, t in plain.named_weights()}.keys() == dict(off.named_weights()).keys()


class _AdapterEngine:
    """An engine with a LoRA adapter API held in plain tensors (what vLLM / SGLang do in their own layers)."""

    def __init__(self):
        self.base, self.adapter, self.version = {}, {}, None

    def load_weights(self, weights):
        self.base.update({k: v.detach().clone() for k, v in weights})

    def load_adapter(self, tensors, peft_config, version):
        self.adapter, self.version = {k: v.detach().clone() for k, v in tensors.items()}, version

    def sample_weights(self, positions):
        from rl_core.weight_sync_check import sample_state

        return sample_state({**self.base, **self.adapter}.items(), positions)


def test_adapter_sync_is_the_same_policy_and_a_stale_adapter_fires(model_dir, step):
    """rollout.lora_sync=adapter's two streams: the frozen base (sent once) and the adapters with the scale folded
    into B (engine scale 1); base + adapters == the merged policy; a stale or lost adapter names engine and version."""
    from types import SimpleNamespace

    from rl_lora.sync import sync_mode as lora_sync_mode
    from rl_core.weight_sync_check import StaleWeightsError, load_verified
    from rl_lora.sync import load_adapter_verified
    from transformers import AutoModelForCausalLM

    cfg = _cfg(model_dir)
    actor = build_engine("actor", cfg, CPU)
    actor.update(step)
    engine = _AdapterEngine()
    plain = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).state_dict()
    assert load_verified(engine, actor.named_base_weights(), None, engine_name="fake", version=0) > 0
    assert all(torch.equal(engine.base[k], plain[k]) for k in engine.base) and "lm_head.weight" not in engine.base  # tied: once
    tensors, peft_config = actor.lora_adapter()
    assert peft_config["r"] == peft_config["lora_alpha"] == 4 and "q_proj" in peft_config["target_modules"]
    assert load_adapter_verified(engine, tensors, peft_config, actor.sample_weights, engine_name="fake", version=0) == len(tensors)
    # in an engine's 16-bit dtype (vLLM's bf16 LoRA slots): the values it would round the float32 ones to, half the
    # bytes, and the sync check still holds (sent == held exactly; sent vs trained within one bf16 rounding step)
    half, _ = actor.lora_adapter(torch.bfloat16)
    assert half.keys() == tensors.keys() and all(half[k].dtype == torch.bfloat16 and torch.equal(half[k], tensors[k].to(torch.bfloat16)) for k in half)
    assert sum(t.numel() * t.element_size() for t in half.values()) * 2 == sum(t.numel() * t.element_size() for t in tensors.values())
    assert load_adapter_verified(_AdapterEngine(), half, peft_config, actor.sample_weights, engine_name="fake", version=0) == len(half)
    merged = dict(actor.named_weights())
    for name, t in tensors.items():  # base + B_scaled @ A is the merged policy the merged path sends
        if name.endswith("lora_A.weight"):
            module = name[: -len(".lora_A.weight")]
            key = module.removeprefix("base_model.model.") + ".weight"
            rebuilt = plain[key] + tensors[module + ".lora_B.weight"] @ t
            torch.testing.assert_close(rebuilt, merged[key], rtol=1e-6, atol=1e-6)
    actor.update(step)
    newer, _ = actor.lora_adapter()

    class Stale(_AdapterEngine):  # keeps the adapter it had
        def load_adapter(self, tensors, peft_config, version):
            pass

    stale = Stale()
    stale.adapter = dict(tensors)
    with pytest.raises(StaleWeightsError, match=r"weight version 1: the rollout engine 'fake' \(its LoRA adapter of weight version 1\) kept stale"):
        load_adapter_verified(stale, newer, peft_config, engine_name="fake", version=1)
    with pytest.raises(StaleWeightsError, match=r"the engine does not report it"):  # never arrived at all
        load_adapter_verified(Stale(), newer, peft_config, engine_name="fake", version=1)
    with pytest.raises(StaleWeightsError, match="not the policy being trained"):  # an old copy sent by the trainer
        load_adapter_verified(engine, tensors, peft_config, actor.sample_weights, engine_name="fake", version=1)

    def config(mode, rank=4):
        return SimpleNamespace(model=SimpleNamespace(lora_rank=rank), rollout=SimpleNamespace(lora_sync=mode, name="x"))

    assert lora_sync_mode(config("auto"), engine) == "adapter" and lora_sync_mode(config("merged"), engine) == "merged"
    assert lora_sync_mode(config("auto"), object()) == "merged" and lora_sync_mode(config("auto", 0), engine) is None
    with pytest.raises(RuntimeError, match="has no LoRA adapter API"):
        lora_sync_mode(config("adapter"), object())


def test_hf_rollout_merges_adapters_in_place_on_the_shared_base_and_every_sync_is_verified(model_dir, step):
    """rollout.lora_sync=auto with the hf engine: the base once (the engine keeps the trainer's frozen tensors as its
    base: no copy), then each sync only the adapters, merged in place (W = W_base + B_scaled @ A, one GEMM per weight);
    the rollout samples the trained policy; a stale, lost or unmerged adapter stops the run."""
    from rl_lora.sync import sync_mode as lora_sync_mode
    from rl_core.rollout.hf import HFRolloutEngine
    from rl_core.weight_sync_check import StaleWeightsError, load_verified
    from rl_lora.sync import load_adapter_verified

    cfg = _cfg(model_dir)
    actor = build_engine("actor", cfg, CPU)
    rollout = HFRolloutEngine(cfg, ROLLOUT)
    assert lora_sync_mode(cfg, rollout) == "adapter"
    load_verified(rollout, actor.named_base_weights(), None, engine_name="hf", version=0, load=rollout.load_base_weights)
    mask = step.tensors["response_mask"].bool()
    bases = {n.removeprefix("base_model.model.").replace(".base_layer", ""): p for n, p in actor.model.named_parameters() if n.endswith(".base_layer.weight")}
    before = {k: v.detach().clone() for k, v in bases.items()}
    for version in (1, 2):
        actor.update(step)
        tensors, peft_config = actor.lora_adapter()
        n = load_adapter_verified(rollout, tensors, peft_config, actor.sample_weights, engine_name="hf", version=version)
        assert n == len(tensors) and set(rollout.merged_weights()) == set(bases)
        with torch.no_grad():
            torch.testing.assert_close(_response_log_probs(rollout.model, step)[mask], actor.compute_log_prob(step)["log_probs"][mask], rtol=1e-4, atol=1e-4)
    held = rollout.model.state_dict()
    for key, p in bases.items():  # the trainer's frozen tensors are the rollout's base, untouched by the merges
        assert rollout.lora.bases[key].data_ptr() == p.data_ptr() and torch.equal(p, before[key])
        assert held[key].data_ptr() != p.data_ptr() and not torch.equal(held[key], p)
    assert not rollout.lora.owned
    # sleep on a GPU: the merged weights and the trainer's frozen others are freed (nothing copied to the host) and
    # rebuilt / pointed at again at wake-up (the engine calls these two around model.to)
    params = rollout.model.state_dict(keep_vars=True)
    snapshot = {k: v.detach().clone() for k, v in params.items()}
    assert rollout.lora.release(params) > len(bases) and all(params[k].numel() == 0 for k in bases)
    rollout.lora.restore(params, rollout.device)
    after = rollout.model.state_dict()
    assert all(torch.equal(after[k], snapshot[k]) for k in snapshot)
    embed = dict(actor.model.named_parameters())["base_model.model.model.embed_tokens.weight"]
    assert after["model.embed_tokens.weight"].data_ptr() == embed.data_ptr()  # the trainer's own tensor: no copy

    actor.update(step)
    newer, _ = actor.lora_adapter()
    real_load, old_adapter = rollout.lora.load, dict(rollout.lora.adapter)

    def keeps_adapter_unmerged(params, tensors, peft_config, version):  # records the adapter, the weights stay as they were
        rollout.lora.adapter = {k: v.clone() for k, v in tensors.items()}

    rollout.lora.load = keeps_adapter_unmerged
    with pytest.raises(StaleWeightsError, match=r"'hf' merged its LoRA adapter but \d+ of \d+ merged weights differ"):
        load_adapter_verified(rollout, newer, peft_config, actor.sample_weights, engine_name="hf", version=3)
    rollout.lora.adapter, rollout.lora.load = old_adapter, lambda *a: False  # never arrives: the old adapter is what it reports
    with pytest.raises(StaleWeightsError, match=r"\(its LoRA adapter of weight version 4\) kept stale"):
        load_adapter_verified(rollout, newer, peft_config, actor.sample_weights, engine_name="hf", version=4)
    rollout.lora.load = real_load
    assert load_adapter_verified(rollout, newer, peft_config, actor.sample_weights, engine_name="hf", version=5) == len(newer)

    # share_weights: the engine adopts the trainer's tensors; the merge must give the weight storage of its own
    shared = HFRolloutEngine(attrs.evolve(cfg, rollout=attrs.evolve(cfg.rollout, engine_kwargs={"share_weights": True})), ROLLOUT)
    load_verified(shared, actor.named_base_weights(), None, engine_name="hf", version=0, load=shared.load_base_weights)
    load_adapter_verified(shared, newer, peft_config, actor.sample_weights, engine_name="hf", version=1)
    assert all(torch.equal(p, before[k]) for k, p in bases.items())
    # weights that came by plain load_weights (a split-pool transfer, a merged sync) are never kept: the engine merges
    # onto a copy of its own
    own = HFRolloutEngine(cfg, ROLLOUT)
    load_verified(own, actor.named_base_weights(), None, engine_name="hf", version=0)
    load_adapter_verified(own, newer, peft_config, actor.sample_weights, engine_name="hf", version=1)
    assert own.lora.owned == set(bases) and all(own.lora.bases[k].data_ptr() != p.data_ptr() for k, p in bases.items())


@pytest.mark.slow
def test_lora_inside_compiled_decoder_layers_gives_the_same_update(model_dir, step):
    """model.compile with LoRA: peft's adapter layers inside the torch.compiled decoder blocks (inductor on CPU; ~20 s,
    most of it compiling) give eager's loss and gradients and so its update (issue 55: a fixed rtol 1e-5 / atol 1e-6
    on the weights failed on a CPU with AMX). Proves, with bounds from the dtype and the reduction size
    (tests/numerics.py): the loss, gradient norm and every adapter gradient equal eager's within the rounding two
    correct float32 evaluations can differ by (the chain of sums from the loss back to a LoRA weight: tokens, vocab,
    then per layer hidden, MLP, attention); each side's adapters after the step are torch AdamW's step of its own
    gradient (a float64 reference; comparing the two updates directly is ill-conditioned where a gradient is rounding
    noise: AdamW moves such an entry by ~lr either way). A 1e-3 error in the gradients or in the update fails."""
    from rl_core.modeling import decoder_layers

    cfg = _cfg(model_dir)
    eager = build_engine("actor", cfg, CPU)
    compiled = build_engine("actor", attrs.evolve(cfg, model=attrs.evolve(cfg.model, compile=True)), CPU)
    assert all(layer._compiled_call_impl is not None for layer in decoder_layers(compiled.model))
    start, runs = _adapters(eager.model), []
    for engine in (eager, compiled):
        assert all(torch.equal(w, start[n]) for n, w in _adapters(engine.model).items())
        with AdamWSteps(engine.optimizer, engine.model) as steps:
            metrics = engine.update(step)
        assert len(steps.grads) == 1 and steps.grads[0].keys() == start.keys(), "one AdamW step of every adapter expected"
        runs.append((metrics, steps, _adapters(engine.model)))
    (a, steps_a, after_a), (b, steps_b, after) = runs
    assert steps_a.hyper() == steps_b.hyper() and steps_a.lrs == steps_b.lrs
    grads_a, grads_b = steps_a.grads[0], steps_b.grads[0]
    terms = lm_gradient_terms(eager.model.config, step.tensors)
    for key in ("loss", "grad_norm", "actor/pg_loss"):
        assert_reduction_close(torch.tensor(b[key]), torch.tensor(a[key]), terms=terms, name=key, dtype=torch.float32)

    def same_gradients(got):
        for name, g in got.items():
            assert_reduction_close(g, grads_a[name], terms=terms, name=f"{name} gradient")

    def adamw_steps(afters, steps=steps_b):
        for name, w in afters.items():
            assert_adamw_steps(w, start[name], steps, name=name)

    same_gradients(grads_b)
    adamw_steps(after_a, steps_a)
    adamw_steps(after)
    # the negative cases: a gradient or an update wrong by 1e-3 fails
    assert_fails(same_gradients, {n: perturbed(g) for n, g in grads_b.items()})
    assert_fails(adamw_steps, {n: perturbed(w, around=start[n]) for n, w in after.items()})


def test_bf16_actor_skips_peft_s_fp32_input_copies_with_bit_identical_results(model_dir, step):
    """Unsharded mixed precision (autocast): peft's cast of each adapted layer's 16-bit input to the float32
    adapters' dtype is turned off (rl_lora.adapters.keep_input_dtype): autocast cast it straight back, so the log-probs
    and the update are bit-identical without it, with fewer copies (counted per forward + backward)."""
    from collections import Counter

    from rl_lora.adapters import _lora_layers
    from torch.utils._python_dispatch import TorchDispatchMode

    class CountCopies(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops, self.bytes = Counter(), 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            self.ops[func.overloadpacket] += 1
            if func.overloadpacket is torch.ops.aten._to_copy:
                self.bytes += out.numel() * out.element_size()
            return out

    cfg = _cfg(model_dir)
    cfg = attrs.evolve(cfg, model=attrs.evolve(cfg.model, dtype="bfloat16"))
    runs = {}
    for cast in (False, True):
        actor = build_engine("actor", cfg, CPU)
        layers = [layer for _, layer in _lora_layers(actor.model)]
        assert layers and all(layer.cast_input_dtype_enabled is False for layer in layers)
        for layer in layers:  # True: peft's default, as before
            layer.cast_input_dtype_enabled = cast
        with torch.no_grad():  # non-zero B, so every adapter carries gradient
            for n, p in actor.model.named_parameters():
                if ".lora_B." in n:
                    p.copy_(torch.full_like(p, 0.05))
        with CountCopies() as count:
            metrics = actor.update(step)
        lp = actor.compute_log_prob(step)["log_probs"]
        runs[cast] = (metrics, lp, _adapters(actor.model), count)
    (m0, lp0, a0, c0), (m1, lp1, a1, c1) = runs[False], runs[True]
    assert m0["loss"] == m1["loss"] and m0["grad_norm"] == m1["grad_norm"]
    assert torch.equal(lp0, lp1) and all(torch.equal(a0[n], a1[n]) for n in a1)
    copies = torch.ops.aten._to_copy
    assert c0.ops[copies] < c1.ops[copies] and c0.bytes < c1.bytes, (c0.ops[copies], c1.ops[copies], c0.bytes, c1.bytes)


def _arena_backed(engine):
    """Put the engine's offloaded parameters (and, at its first step, AdamW's state) into HostArena segments, as
    offload does on a GPU (pinned there, unpinned here): views into 64 KiB storages."""
    from rl_offload.offload import HostArena

    b = engine.backend
    b.model._rl_host_copies = {"arena": HostArena(pin=False, segment_bytes=1 << 16)}
    b.optimizer._rl_host_copies = {"arena": HostArena(pin=False, segment_bytes=1 << 16)}
    rl_train_fsdp.offload.move_params(b.model, torch.device("cpu"))
    return engine


def test_offloaded_full_fine_tune_in_host_segments_saves_hf_and_resumes(model_dir, step, tmp_path, monkeypatch):
    """The 7B offload run's end (bench/results/lora_gpu_h100/offload): its parameters were views into pinned 1 GiB
    segments, which huggingface_hub refused to save, and the fallback checkpoint's DCP writer cloned each view. Now
    save_hf streams its own copies in shards (loadable, equal to the weights) and the checkpoint hands DCP tensors on
    storages of their own bytes (nothing for it to clone), with an exact resume."""
    import rl_core.train_engine.hf_export as hf_export
    from transformers import AutoModelForCausalLM

    cfg = _cfg(model_dir, rank=0, param_offload=True, optimizer_offload=True)
    torch.manual_seed(0)
    a = _arena_backed(build_engine("actor", cfg, CPU))
    a.update(step)
    params = dict(a.backend.model.named_parameters())
    assert all(p.untyped_storage().nbytes() > p.numel() * p.element_size() for p in params.values())  # segment views
    state = [v for s in a.backend.optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    assert state and all(t.untyped_storage().nbytes() > t.numel() * t.element_size() for t in state)
    monkeypatch.setattr(hf_export, "MAX_SHARD_BYTES", 1 << 15)
    a.save_hf(str(tmp_path / "hf"))
    assert len(list((tmp_path / "hf").glob("model-*-of-*.safetensors"))) > 1 and (tmp_path / "hf" / hf_export.INDEX_NAME).is_file()
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float32).state_dict()
    for name, p in params.items():
        assert torch.equal(saved[name], p.detach()), name
    handed = []
    real = rl_train_fsdp.checkpointing.save_dcp
    monkeypatch.setattr(rl_train_fsdp.checkpointing, "save_dcp", lambda d, m, o=None: handed.append((m, o)) or real(d, m, o))
    a.save_checkpoint(str(tmp_path / "ckpt"))
    tensors = [*handed[0][0].values(), *(v for s in handed[0][1]["state"].values() for v in s.values() if isinstance(v, torch.Tensor))]
    assert len(tensors) >= len(params) + len(state)  # (a tied weight under both names)
    assert all(t.untyped_storage().nbytes() == t.numel() * t.element_size() for t in tensors)  # DCP clones no view
    m_a = a.update(step)
    torch.manual_seed(1)
    b = _arena_backed(build_engine("actor", cfg, CPU))
    b.load_checkpoint(str(tmp_path / "ckpt"))
    assert b.update(step) == m_a
    sa, sb = a.local_state_dict(), b.local_state_dict()
    for n in sa["model"]:
        assert torch.equal(sa["model"][n], sb["model"][n]), n
