"""A memory estimate per device (per rank) before anything is built: what `rlcore check` and `--dry-run` print.

The kernel's terms (model states, the rollout's weights and KV cache, activations, logits) and each phase's peak;
a feature's actor terms come from its card (:mod:`rl_core.plan.features`); a model's shape from :mod:`rl_core.plan.memory`.
How each term is counted: docs/memory.md.
"""

from __future__ import annotations

import functools
from typing import Any

import attrs

from rl_core.plan.features import Features, MemoryTerms
from rl_core.plan.memory import CPU_RUNTIME_GB, DTYPE_BYTES, GB, ModelShape, device_memory, model_shape
from rl_core.rollout.sleep_policy import keeps_through_sleep, threshold_of
from rl_core.train_engine.batch_sizes import LOGPROB_CHUNK


@attrs.frozen(kw_only=True)
class Estimate:
    """Bytes per rank: the terms and each phase's peak; ``available`` is the device memory (RAM on CPU)."""

    device: str
    shape: ModelShape
    terms: dict[str, float]
    phases: dict[str, float]
    available: float | None
    ranks_sharing: int  # ranks whose peaks add up against ``available`` (CPU: all local ranks; GPU: 1)
    advice: tuple[str, ...]
    notes: tuple[str, ...] = ()  # how a term was counted (printed after the terms)
    world: int = 1  # the run's ranks (each one holds these bytes)

    @property
    def peak(self) -> float:
        return max(self.phases.values())

    @property
    def fits(self) -> bool | None:
        return None if self.available is None else self.peak * self.ranks_sharing <= self.available

    def lines(self) -> list[str]:
        g = lambda b: f"{b / GB:6.2f} GiB"  # noqa: E731
        where = "per process (RAM)" if self.device == "cpu" else "per GPU"
        if self.world > 1:  # multi-GPU configs: every term and peak is one rank's, not the job's
            where = f"per rank, each of {self.world} {'processes (RAM)' if self.device == 'cpu' else 'GPUs'}"
        out = [f"memory estimate, {where}: {self.shape.params / 1e6:.0f}M parameters ({self.shape.source})"]
        out += [f"  {k:<42} {g(v)}" for k, v in self.terms.items() if v]
        out += [f"    ({n})" for n in self.notes]
        out += [f"  peak in {k:<34} {g(v)}" for k, v in self.phases.items()]
        if self.available is not None:
            need = self.peak * self.ranks_sharing
            label = f"{self.ranks_sharing} processes x peak" if self.ranks_sharing > 1 else "peak"
            verdict = "fits" if self.fits else "does NOT fit"
            out.append(f"  {label} {need / GB:.2f} GiB vs {self.available / GB:.1f} GiB {'RAM' if self.device == 'cpu' else 'device memory'}: {verdict}")
        out += [f"  to fit: {a}" for a in self.advice]
        return out



def activation_bytes_per_token_layer(shape: ModelShape, c: int) -> int:
    return c * (5 * shape.hidden + 2 * shape.kv_heads * shape.head_dim + 3 * shape.active_intermediate) + 16 * shape.hidden


def estimate(
    config: Any, sizes: Any, *, rollout: Any = None, train: Any = None, available: float | None = None, shape: ModelShape | None = None,
    alternatives: bool = True, reward_model: Any = None, features: Features | None = None,
) -> Estimate | None:
    """The estimate for a normalised config and its ``Sizes``; None if the model's shape is unknown. ``rollout``,
    ``train``, ``reward_model``: the stack's cards (what each holds); ``features``: the plan's (a feature's actor terms)."""
    shape = shape or model_shape(config.model.path, config.model.override_config)
    if shape is None:
        return None
    m, d, r, a = config.model, config.data, config.rollout, config.actor
    device = sizes.device
    P = shape.params
    c = DTYPE_BYTES.get(m.dtype, 4)
    sharding = getattr(train, "state_sharding", "data")
    fc = getattr(a, "fsdp_config", None)  # rl-train-fsdp's section
    hybrid = getattr(fc, "fsdp_size", -1)  # HSDP: a model copy is sharded over fsdp_size ranks
    data = hybrid if 0 < hybrid < sizes.world_size else sizes.world_size
    cp = max(1, int(getattr(sizes, "train_context_parallel", 1) or 1))  # CP ranks split the tokens and hold whole copies of their shard
    S = {"data": data, "model": sizes.train_model_parallel // cp}.get(sharding, 1)
    S = max(1, S)
    layout = getattr(sizes, "expert_layout", None)
    if sharding == "model" and layout and shape.experts:  # expert parallelism: the routed experts over expert TP x EP x PP ranks
        etp, ep, _ = layout
        pp = max(1, getattr(config.train, "pipeline_model_parallel_size", 1))
        shape = attrs.evolve(shape, expert_fraction=S / (etp * ep * pp))
        notes_moe = [f"MoE: {shape.expert_params / 1e6:.0f}M routed-expert parameters split over expert TP {etp} x EP {ep} x PP {pp} ranks, "
                     f"the other {(shape.params - shape.expert_params) / 1e6:.0f}M over the {S} model-parallel ranks"]
    else:
        notes_moe = []
    sharded = S > 1
    mixed = c < 4
    R = d.max_response_length
    prompt = d.max_prompt_length
    n = r.n
    share = (device == "cpu" if m.share_prompt_forward is None else m.share_prompt_forward) and not sharded

    t: dict[str, float] = {}
    actor = actor_terms(config, shape, S, c, features)  # full fine-tune or a feature's (LoRA, offload)
    t.update(actor.states)
    pools = getattr(sizes, "pools", {}) or {}  # roles on devices of their own: their memory is not on the actor's
    Pt = shape.train_params  # P with the routed experts' share under expert parallelism
    if config.ref.enable and "ref" not in pools and not actor.frozen_base:  # LoRA: the reference is the model with adapters off
        t["reference parameters"] = c * Pt / S
    if config.critic.enable and "critic" not in pools:
        t["critic parameters + AdamW"] = 12 * Pt / S
    zero = getattr(config.train, "distributed_optimizer", False) and sharding == "model" and not actor.frozen_base
    if zero:  # AdamW's state dealt over the ranks holding the same weights (DP x CP; experts: expert-DP): 8 P / world per rank
        world = max(1, sizes.world_size)
        if t.get("actor AdamW state"):
            t["actor AdamW state"] = 8 * P / world
        if "critic parameters + AdamW" in t:
            t["critic parameters + AdamW"] = 4 * Pt / S + 8 * P / world
        notes_moe.append(f"train.distributed_optimizer: AdamW state over all {world} ranks (each rank steps the tensors it owns)")
    fraction_engine = bool(getattr(rollout, "memory_fraction", False)) and device != "cpu"
    gen_batch = max(r.generation_batch_size or sizes.sequences_per_rollout_replica, _val_batch(config))
    decode = features.get("hf_decode") if features is not None else None  # rl-hf-decode's static cache (hf rollout)
    kv_rows, kv_slots = decode.cache_size(config, shape.model_type, device, gen_batch, prompt + R) if decode is not None else (gen_batch, prompt + R)
    kv = kv_rows * kv_slots * shape.layers * 2 * shape.kv_heads * shape.head_dim * c
    if fraction_engine:
        avail = available if available is not None else device_memory(device)
        t["rollout engine (memory fraction)"] = r.gpu_memory_utilization * (avail or 0)
    else:
        t["rollout weights"] = c * P / max(1, sizes.rollout_tp)
        t["rollout KV cache"] = kv / max(1, sizes.rollout_tp)
    micro = sizes.actor_micro_batch_per_rank
    tokens = (micro / n * prompt + micro * R) if share else micro * (prompt + R)
    bucket = f" (the static decoder's batch bucket of {kv_rows})" if kv_rows != gen_batch else ""
    rounded = ", rounded up to 128" if kv_slots != prompt + R else ""
    notes = notes_moe + [f"rollout KV cache: {gen_batch} sequences{bucket} x {kv_slots:,} tokens (prompt + response{rounded}) x {shape.layers} layers x "
             f"{shape.kv_heads} KV heads x {shape.head_dim} x 2 (K, V) x {c} bytes"]
    if a.use_dynamic_bsz:  # a micro-batch holds up to the token budget (one longer sequence forms its own)
        tokens = max(a.ppo_max_token_len_per_gpu * cp, prompt + R)  # CP: the budget is per device (divided below)
    sp = max(1, int(getattr(a, "ulysses_sequence_parallel_size", 1) or 1))
    if sp > 1:  # Ulysses: each rank of the group holds 1 / sp of the tokens
        tokens = tokens / sp
    if cp > 1:  # context parallelism: likewise 1 / cp of the tokens (plus each layer's gathered keys / values, not counted)
        tokens = tokens / cp
    if a.use_dynamic_bsz or sp > 1 or cp > 1:
        notes.append(f"update activations: {tokens:,.0f} tokens per micro-batch per rank"
                     f"{' (actor.ppo_max_token_len_per_gpu)' if a.use_dynamic_bsz else ''}{f' / Ulysses SP {sp}' if sp > 1 else ''}{f' / CP {cp}' if cp > 1 else ''}")
    per_tl = activation_bytes_per_token_layer(shape, c)
    if m.enable_gradient_checkpointing:
        act = tokens * (shape.layers * 4 * shape.hidden + per_tl)
    else:
        act = tokens * shape.layers * per_tl
    t.update(actor.update)
    if mixed and not sharded and not actor.frozen_base and not getattr(fc, "param_offload", False) and not getattr(fc, "offload_policy", False):
        t["autocast weight copy (update)"] = c * P
    elif mixed and sharded:
        t["gathered layers (update)"] = 2 * c * P / shape.layers
    t[f"activations (update, {'with' if m.enable_gradient_checkpointing else 'no'} checkpointing)"] = act
    lp_micro = a.log_prob_micro_batch_size_per_gpu or micro
    chunk = logprob_chunk(config, device)
    if chunk:
        # chunked LM head (rl_core.logprobs): one chunk of logits at a time, forward or recomputed in backward
        logits_update = t["logits (update, chunked)"] = min(micro * R, chunk) * shape.vocab * (c + 12)
        logits_lp = t["logits (log-probs, chunked)"] = min(lp_micro * R, chunk) * shape.vocab * (c + 12)
    else:
        logits_update = t["logits (update)"] = micro * R * shape.vocab * (c + 16) / cp  # CP: each rank's share of the response
        logits_lp = t["logits (log-probs)"] = lp_micro * R * shape.vocab * (c + 12) / cp
    if config.critic.enable:
        Sc = pools["critic"][1] if "critic" in pools else S
        t["critic gradients + activations (update)"] = 4 * P / Sc + act

    runtime = CPU_RUNTIME_GB * GB if device == "cpu" else 0.0
    rm_feature = features.get("reward_model") if features is not None else None  # rl-reward-model's terms
    rm = rm_feature.memory_terms(config, sizes, device, reward_model) if rm_feature is not None else {}
    rm_kept = rm.get("reward model weights (kept)", 0.0)  # colocated and not offloaded: held through every phase
    if rm_kept:
        t["reward model weights (kept)"] = rm_kept
    states = sum(actor.states.values()) + t.get("reference parameters", 0) + t.get("critic parameters + AdamW", 0) + rm_kept
    # the HF engine keeps its weights through training, except on a GPU with enable_sleep, where it frees them and
    # its KV cache unless they are small next to the device (rl_core.rollout.sleep_policy)
    rollout_held = t.get("rollout weights", 0)
    if device != "cpu" and r.enable_sleep and not fraction_engine:
        hf_held = rollout_held + t.get("rollout KV cache", 0)
        total = available if available is not None else device_memory(device)
        # device unknown (a GPU config checked on a laptop): count the engine as kept, the larger of the two
        kept = total is None or keeps_through_sleep(hf_held, total, threshold_of(r.engine_kwargs))
        rollout_held = hf_held if kept else 0.0
    elif device != "cpu" and r.enable_sleep:
        kept_asleep = float(getattr(rollout, "asleep_gib", 0.0) or 0.0) * GB
        if kept_asleep:
            t["rollout engine asleep (what its sleep keeps)"] = kept_asleep
        rollout_held = kept_asleep
    if fraction_engine and not r.enable_sleep:
        rollout_held = t["rollout engine (memory fraction)"]
    rollout_peak = t.get("rollout engine (memory fraction)", 0) + t.get("rollout weights", 0) + t.get("rollout KV cache", 0)
    phases = {
        "rollout": runtime + states + rollout_peak,
        "log-probs": runtime + states + rollout_held + logits_lp,
        "update": runtime + states + rollout_held + sum(actor.update.values()) + t.get("autocast weight copy (update)", 0)
        + t.get("gathered layers (update)", 0) + act + logits_update,
    }
    if config.critic.enable and "critic" in pools:  # on the critic's own devices: its state and its update alone
        Sc = pools["critic"][1]
        t["critic parameters + AdamW (own devices)"] = 12 * P / Sc
        phases["critic update (own devices)"] = runtime + t["critic parameters + AdamW (own devices)"] + t["critic gradients + activations (update)"]
    elif config.critic.enable:
        phases["critic update"] = runtime + states + rollout_held + t["critic gradients + activations (update)"]
    if config.ref.enable and "ref" in pools:
        t["reference parameters (own devices)"] = c * P / pools["ref"][1]
        phases["reference log-probs (own devices)"] = runtime + t["reference parameters (own devices)"] + logits_lp
    if rm:
        work = rm["reward model forward (one micro-batch)"]
        t["reward model forward (one micro-batch)"] = work
        if "reward_model" in pools:
            t["reward model weights (own devices)"] = rm["weights"]
            phases["reward model (own devices)"] = runtime + rm["weights"] + work
        else:
            if not rm_kept:
                t["reward model weights (on device while scoring)"] = rm["weights"]
            phases["reward model"] = runtime + states - rm_kept + rollout_held + rm["weights"] + work
    if runtime:
        t = {"process runtime (python, torch, ...)": runtime, **t}
    available = available if available is not None else device_memory(device)
    ranks = sizes.world_size if device == "cpu" else 1
    est = Estimate(device=device, shape=shape, terms=t, phases=phases, available=available, ranks_sharing=ranks, advice=(), notes=tuple(notes),
                   world=max(1, sizes.world_size))
    if est.fits is False and alternatives:
        with_cards = functools.partial(estimate, rollout=rollout, train=train, reward_model=reward_model, features=features)
        est = attrs.evolve(
            est,
            advice=tuple(advice(config, sizes, est, fraction_engine=fraction_engine, sharding=sharding))
            + (() if actor.frozen_base else tuple(fitting_alternatives(config, sizes, est, with_cards, features))),
        )
    return est


def actor_terms(config: Any, shape: Any, S: int, c: int, features: Features | None = None) -> MemoryTerms:
    """The actor's train states: an enabled feature's (LoRA: rl-lora; CPU offload: rl-offload) or a full fine-tune's
    (docs/memory.md)."""
    own = features.actor_terms(config, shape, S, c) if features is not None else None
    if own is not None:
        return own
    P = getattr(shape, "train_params", shape.params)  # expert parallelism: the routed experts' share on a rank
    return MemoryTerms(states={"actor parameters (fp32)": 4 * P / S, "actor AdamW state": 8 * P / S}, update={"actor gradients (update)": 4 * P / S})


def fitting_alternatives(config: Any, sizes: Any, est: Any, estimate: Any, features: Features | None = None) -> list[str]:
    """For a full fine-tune that does not fit: which of the features' alternatives (LoRA, offload) would, with their peaks."""
    if est.available is None or features is None:
        return []
    out = []
    for label, alt in features.alternatives(config):
        other = estimate(alt, sizes, available=est.available, shape=est.shape, alternatives=False)
        out.append(f"{label}: peak {other.peak / 2**30:.1f} GiB, {'fits' if other.fits else 'does not fit either'}")
    return out


def logprob_chunk(config: Any, device: str) -> int:
    """Tokens per LM-head chunk in train-side forwards (0: off), as the train backend resolves ``model.logprob_chunk_size``."""
    chunk = config.model.logprob_chunk_size
    if chunk is None:
        return 0 if device == "cpu" else LOGPROB_CHUNK
    return int(chunk)


def _val_batch(config: Any) -> int:
    gen = getattr(config.data, "val_generator", None)  # rl-data's section
    if not config.data.val_files and (gen is None or not gen.name):
        return 0
    if config.data.val_batch_size:
        return config.data.val_batch_size * config.rollout.val_n
    size = gen.size if gen is not None and gen.name else 0
    return (config.data.val_max_samples or size or 0) * config.rollout.val_n


def advice(config: Any, sizes: Any, est: Estimate, *, fraction_engine: bool = False, sharding: str = "data") -> list[str]:
    """What to change, for the phase that peaks highest."""
    phase = max(est.phases, key=est.phases.get)
    out = []
    if phase in ("update", "critic update"):
        if sizes.actor_micro_batch_per_rank > 1:
            out.append(f"lower actor.ppo_micro_batch_size_per_gpu (now {sizes.actor_micro_batch_per_rank}; activations and logits scale with it)")
        if not config.model.enable_gradient_checkpointing:
            out.append("set model.enable_gradient_checkpointing=true (keeps only each layer's input)")
    if phase == "log-probs":
        out.append("lower actor.log_prob_micro_batch_size_per_gpu")
    if phase == "rollout":
        if fraction_engine:
            out.append("lower rollout.gpu_memory_utilization")
        else:
            out.append("set rollout.generation_batch_size (sequences decoded at once; the KV cache scales with it)")
    if sharding == "data":
        out.append("more GPUs / processes (trainer.n_gpus_per_node): the train backend shards parameters, gradients and optimizer state over them")
    out.append("offload parameters / optimizer state to CPU, or tensor parallelism (train.tensor_model_parallel_size with a train backend that has it)")
    if config.model.dtype == "float32" and sizes.device != "cpu":
        out.append("model.dtype=bfloat16 (halves activations and the rollout's weights)")
    return out
