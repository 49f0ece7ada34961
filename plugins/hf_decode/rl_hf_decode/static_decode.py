"""The ``hf`` rollout's GPU decode loop (rl-hf-decode): a static KV cache and a decode step captured in a CUDA graph.

The plain loop (:meth:`rl_core.rollout.hf.HFRolloutEngine._decode`) calls the
transformers model once per token: ~26 ms a step on an H100 for a 0.5B model
whatever the batch, all of it kernel launches and Python. Here the decoder
layers of a Llama-family model (llama, qwen2, qwen3, mistral: the classes whose
layers are ``input_layernorm -> self_attn(q, k, v, o) -> post_attention_layernorm
-> mlp``) run from the model's own modules over preallocated buffers:

- prefill runs the prompts once (``[b, P]``), and their keys / values are
  written, repeated for the ``n`` samples, into a static cache of ``S`` slots
  per layer, ``S`` the prompt width plus ``max_new_tokens`` rounded up to 128.
  The cache is allocated whole before the first token, sized by the token
  count (batch bucket x ``S`` slots x layers x 2 x kv heads x head dim): one
  that does not fit the device's free memory is refused at once
  (:class:`CacheTooLarge`, naming the keys to lower) rather than running out
  of memory thousands of tokens in;
- the slots are the cache's *first* dimension (``[S, B, kv, d]``), so its
  first ``cap`` slots are one contiguous view: a decode step attends only over
  the capacity the response has reached, in steps of ``chunk`` slots
  (``engine_kwargs.decode_chunk``; by default 256 slots, or ``S / 32`` rounded up to 128 for caches longer
  than 8,192 slots, so that a cache keeps at most ~32 graphs), not over all ``S`` slots from
  the first token (a 16k-token response would otherwise read 16k slots of
  keys / values for every token, about twice the traffic);
- a decode step reads the token, position and cache slot from device tensors
  and writes the logits into a static buffer, so on CUDA it is captured once in
  a CUDA graph per (batch bucket, capacity) and replayed: one launch a step; a
  capacity's graph is captured when the response first reaches it, and every
  graph of a bucket shares its cache. Batches are padded to a power-of-two
  bucket (extra rows are dropped);
- sampling (temperature, top-k, top-p, the seeded generator) runs on the
  device from that buffer with the same code as the plain loop, so the random
  stream is the same; plain temperature sampling runs as one Triton kernel
  (``engine_kwargs.decode_sampler``, :mod:`rl_hf_decode.sampler`: the same
  draw, the logits read about 1.5 times instead of five passes); nothing syncs
  with the host except the all-finished check every ``check_every`` steps.

A decode step's attention (``engine_kwargs.decode_attention``): on CUDA with
Triton (``auto``, the default) one kernel per layer,
:func:`rl_hf_decode.decode_attention.decode_attention`, that reads the cache
only up to the slot the step wrote, with the grouped query heads of a kv head
in one tile; otherwise (``sdpa``, a CPU, no Triton, or a kernel that fails its
check against ``sdpa`` on the first decode) ``scaled_dot_product_attention``
over the capacity view with a mask of the valid slots (grouped-query heads
share their key / value head without copies). On an H200 (1.5B shape, 256
rows) the latter took 1.5 ms a step, about half the KV-read bandwidth; two
batched matmuls with a float32 softmax over the same views took as long
(session 22, bench/results/rollout_speed_h200_s22); the kernel made the scale
rollout 1.16x faster (4.93 -> 4.24 s, session 23,
bench/results/rollout_speed_h200_s23). Prefill always uses ``sdpa``.

With packing on, the lm_head's weight is padded to a multiple of 64 rows
(:func:`rl_hf_decode.packed_weights.pad_rows`: the parameter becomes a view of
the padded tensor, so the only extra memory is the padding rows, at most 63 x
hidden size): an odd vocab (50257) otherwise gets a legacy ``align1`` GEMM
kernel (0.38 ms of a 4.2 ms step on an H200, 0.07 ms padded); the logits are the
GEMM's first ``vocab`` columns. Results equal the plain loop's to float rounding, and a
chunked decode equals an unchunked one: tests compare tokens and log-probs on
CPU, where the same code runs without graph capture. Models it does not
cover (another architecture, sliding-window attention, stop strings) use the
plain loop.
"""

from __future__ import annotations

import logging
import time
import warnings
from typing import Callable

import torch

from rl_hf_decode.decode_attention import decode_attention, kernel_or, splits_for
from rl_hf_decode import sampler as fused
from rl_hf_decode.keys import ATTENTION
from rl_hf_decode.packed_weights import HEAD_ROWS, LayerPack, pack_layer, pad_rows, still_packed, still_padded
from rl_core.rollout.output import position_ids_from_mask

logger = logging.getLogger(__name__)

ARCHS = ("llama", "qwen2", "qwen3", "mistral")
CACHE_ROUND = 128
# cache slots a decode step's capacity grows by: a step reads the keys / values of its capacity, so on average
# chunk / 2 slots more than the responses reached
DEFAULT_CHUNK = 256
AUTO_GRAPHS = 32  # the default chunk grows with the cache so that a cache keeps at most about this many graphs
MARGIN = 1 << 30  # device bytes left free next to a new cache: prefill activations, logits, sampling
MAX_CACHES = 4  # batch buckets whose caches (and graphs) are kept at once
MAX_VIEWS = 64  # capacities (and graphs) kept per cache: multi-turn calls of many lengths add a last capacity each
FIX = "lower rollout.generation_batch_size (sequences decoded at once), rollout.n, data.max_response_length or data.max_prompt_length"


class CacheTooLarge(RuntimeError):
    """The static KV cache a decode needs does not fit the device's free memory."""


def unsupported_reason(model: torch.nn.Module) -> str | None:
    """Why ``model`` cannot use the static decoder, or None when it can."""
    cfg = getattr(model, "config", None)
    kind = getattr(cfg, "model_type", None)
    if kind not in ARCHS:
        return f"model_type {kind!r} is not one of {', '.join(ARCHS)}"
    # qwen2 / qwen3 name a window but use it only with use_sliding_window; mistral uses any window it names
    windowed = getattr(cfg, "use_sliding_window", kind == "mistral")
    if windowed and getattr(cfg, "sliding_window", None):
        return "sliding-window attention"
    body = getattr(model, "model", None)
    rot = getattr(body, "rotary_emb", None)
    if body is None or rot is None or not hasattr(rot, "inv_freq") or model.get_output_embeddings() is None:
        return "no model.model.rotary_emb / layers / lm_head"
    for layer in body.layers:
        attn = getattr(layer, "self_attn", None)
        if attn is None or not all(hasattr(attn, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj", "scaling", "head_dim")):
            return f"decoder layer {type(layer).__name__} has no q/k/v/o projections"
    return None


def _rms_norm(norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The model's RMSNorm with its float32 statistics in one ``F.rms_norm`` call (fewer kernels per step).

    The same formula as transformers' Llama / Qwen2 ``RMSNorm`` (normalise in float32, cast back, scale);
    other norm classes run as they are.
    """
    eps = getattr(norm, "variance_epsilon", None)
    if eps is None or type(norm).__name__ not in ("LlamaRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "MistralRMSNorm"):
        return norm(x)
    return norm.weight * torch.nn.functional.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class StaticDecoder:
    """Decode with a static cache; ``cuda_graph`` captures the decode step (CUDA only)."""

    def __init__(
        self, model: torch.nn.Module, *, cuda_graph: bool = True, check_every: int = 16, compile: bool = False, pack: bool = True,
        chunk: int | None = DEFAULT_CHUNK, fix: str = FIX, auto_chunk: bool = False, attention: str = "auto", sampler: str = "auto",
    ) -> None:
        reason = unsupported_reason(model)
        if reason:
            raise ValueError(f"the static decoder cannot run this model: {reason}")
        self.model = model
        self.body = model.model
        self.head = model.get_output_embeddings()
        cfg = model.config
        attn0 = self.body.layers[0].self_attn
        self.n_heads = cfg.num_attention_heads
        self.n_kv = getattr(cfg, "num_key_value_heads", None) or self.n_heads
        self.head_dim = attn0.head_dim
        self.scaling = attn0.scaling
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.cuda_graph = bool(cuda_graph) and self.device.type == "cuda"
        self.check_every = max(1, int(check_every)) if self.device.type == "cuda" else 1
        # torch.compile fuses the step's elementwise work (norms, rotary, residuals, cache writes): on an H100 the
        # 0.5B step went from ~680 to ~350 kernels and from 2.3 to 1.4 ms of GPU time (bench/results/profile_h100.md);
        # the graph then captures the compiled kernels. One compilation per process (batch bucket and capacity
        # are dynamic dimensions, :class:`_View`), ~15-20 s for a 0.5B model, cached on disk by inductor.
        self.compiled = bool(compile)
        self._step_fn = torch.compile(self._decode_step) if compile else self._decode_step
        if chunk is not None and (isinstance(chunk, bool) or int(chunk) < 0):
            raise ValueError(f"rollout.engine_kwargs.decode_chunk must be a number of cache slots >= 0 (0: no chunks), got {chunk!r}")
        self.chunk = int(chunk or 0)  # 0: every step attends over the whole cache
        # the default (no decode_chunk given): at least length / AUTO_GRAPHS slots per step, rounded up to CACHE_ROUND
        self.auto_chunk = bool(auto_chunk) and self.chunk > 0
        self.fix = fix
        self._caches: dict[int, _Cache] = {}  # batch bucket -> its cache, buffers and per-capacity graphs
        self._pool = None
        # q / k / v and gate / up as one GEMM each (rl_hf_decode.packed_weights); off when the engine adopts
        # the trainer's tensors (packing would copy them and the sharing would silently stop)
        self.pack = bool(pack)
        self._packs: list[LayerPack | None] | None = None
        self._head_pad: torch.Tensor | None = None  # the lm_head weight padded to HEAD_ROWS rows (packed_weights.pad_rows)
        # engine_kwargs.decode_attention: triton | sdpa
        self.attention = kernel_or("decode_attention", attention, ATTENTION, "sdpa", self.device)
        self._attention_checked = self.attention == "sdpa"
        self.sampler = fused.choose(sampler, self.device)  # engine_kwargs.decode_sampler: triton | torch
        self._sampler_checked = self.sampler == "torch"

    def _check_attention(self, cache: "_Cache") -> None:
        """Once, before the first step: the kernel against ``sdpa`` on this cache's shapes (random keys, a masked
        prefix); a failure or a mismatch warns and keeps ``sdpa`` (slower, never wrong)."""
        self._attention_checked = True
        gen = torch.Generator(device=self.device).manual_seed(0)
        cap = min(cache.length, 2 * CACHE_ROUND)
        rows = min(cache.bucket, 8)
        shape = (cap, rows, self.n_kv, self.head_dim)
        k = torch.randn(shape, generator=gen, device=self.device).to(self.dtype)
        v = torch.randn(shape, generator=gen, device=self.device).to(self.dtype)
        q = torch.randn((rows, self.n_heads, self.head_dim), generator=gen, device=self.device).to(self.dtype)
        valid = torch.ones(cap, rows, dtype=torch.bool, device=self.device)
        valid[: cap // 4, ::2] = False  # left padding on every other row
        slot = torch.tensor([cap - 3], device=self.device)  # the kernel must not read the two slots after it
        before = valid.clone()
        before[cap - 2:] = False
        want = _sdpa_decode(q, k, v, before, self.scaling, self.n_kv)
        try:
            worst = 0.0
            for splits in (1, 3):
                got = decode_attention(q, k, v, valid, slot, self.scaling, splits)
                worst = max(worst, float((got.float() - want.float()).abs().max()))
        except Exception as exc:  # noqa: BLE001 - a kernel that does not build or run here: sdpa instead, never stop
            warnings.warn(f"hf rollout: the Triton decode attention failed ({type(exc).__name__}: {exc}); decoding with sdpa "
                          "(set rollout.engine_kwargs.decode_attention=sdpa to skip this check)", stacklevel=3)
            self.attention = "sdpa"
            return
        if not worst <= 2e-2:
            warnings.warn(f"hf rollout: the Triton decode attention differs from sdpa by {worst:.3g} on random inputs; decoding "
                          "with sdpa", stacklevel=3)
            self.attention = "sdpa"

    def _sampler_for(self, sample, sampling: dict | None, vocab: int, want_log_probs: bool):
        """The fused sampler (:mod:`rl_hf_decode.sampler`) where ``sampling`` is plain temperature sampling and the
        kernel passed its check (once per decoder; a failure warns and keeps ``sample``), else ``sample``."""
        if self.sampler != "triton" or not fused.eligible(sampling, vocab):
            return sample
        if not self._sampler_checked:
            self._sampler_checked = True
            try:
                wrong = fused.check(vocab, self.device)
            except Exception as exc:  # noqa: BLE001 - a kernel that does not build or run here: the torch sampler, never stop
                wrong = f"{type(exc).__name__}: {exc}"
            if wrong:
                warnings.warn(f"hf rollout: the fused Triton sampler failed its check ({wrong}); sampling with torch "
                              "(set rollout.engine_kwargs.decode_sampler=torch to skip this check)", stacklevel=3)
                self.sampler = "torch"
                return sample
        generator, temperature = sampling.get("generator"), float(sampling.get("temperature", 1.0))

        def fused_sample(logits):  # the plain loop's draw: one uniform per row from the same generator
            u = torch.rand(logits.shape[0], 1, generator=generator, device=logits.device, dtype=torch.float32)
            return fused.sample(logits, u, temperature, want_log_probs)

        return fused_sample

    def reset(self) -> None:
        """Drop captured graphs and caches (weights moved, memory wanted back)."""
        self._caches.clear()
        self._pool = None

    def release(self) -> None:
        """Sleep: :meth:`reset`, and the packed projections dropped too (they hold device memory of their own once
        the parameters have moved: the q / k / v and gate / up weights would stay on the device)."""
        self.reset()
        self._packs = None
        self._head_pad = None

    def _ensure_packed(self) -> None:
        """Pack the projections, again if something gave them new storage (then the graphs read stale memory)."""
        if not self.pack:
            return
        layers = self.body.layers
        head = self.head.weight
        wants_pad = head.shape[0] % HEAD_ROWS != 0 and self.head.bias is None
        head_ok = still_padded(head, self._head_pad) if wants_pad and self._head_pad is not None else not wants_pad
        if head_ok and self._packs is not None and all(pk is None or still_packed(layer, pk) for layer, pk in zip(layers, self._packs)):
            return
        self.reset()
        self._packs = [pack_layer(layer) for layer in layers]
        # no bias: a padded bias would be one more copy to keep in step; none of the covered models has one
        self._head_pad = pad_rows(head) if self.head.bias is None else None

    def cache_bytes(self) -> int:
        """Device memory held by the static caches and buffers of every batch bucket."""
        return sum(c.nbytes() for c in self._caches.values())

    # ------------------------------------------------------------ the math
    def _rope(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rot = self.body.rotary_emb
        freqs = pos[..., None].float() * rot.inv_freq.float()
        emb = torch.cat((freqs, freqs), dim=-1)
        scale = getattr(rot, "attention_scaling", 1.0)
        return (emb.cos() * scale).to(self.dtype).unsqueeze(2), (emb.sin() * scale).to(self.dtype).unsqueeze(2)  # [b, s, 1, d]

    def _pack_of(self, i: int) -> LayerPack | None:
        return self._packs[i] if self._packs is not None else None

    def _qkv(self, i: int, layer, x: torch.Tensor, cos, sin):
        """``q [b, h, s, d]``, ``k``, ``v [b, kv, s, d]``; the rotary embedding on q and k at once (one set of kernels)."""
        b, s, _ = x.shape
        attn = layer.self_attn
        pk = self._pack_of(i)
        if pk is not None:
            q, k, v = torch.nn.functional.linear(x, pk.qkv_w, pk.qkv_b).split(pk.qkv_split, dim=-1)
        else:
            q, k, v = attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)
        q = q.view(b, s, -1, self.head_dim)
        k = k.view(b, s, -1, self.head_dim)
        v = v.view(b, s, -1, self.head_dim).transpose(1, 2)
        if getattr(attn, "q_norm", None) is not None:  # qwen3
            q, k = attn.q_norm(q), attn.k_norm(k)
        qk = torch.cat((q, k), dim=2)
        qk = qk * cos + _rotate_half(qk) * sin
        h = q.shape[2]
        return qk[:, :, :h].transpose(1, 2), qk[:, :, h:].transpose(1, 2), v

    def _attend(self, layer, x, q, k_all, v_all, bias):
        """``x`` plus the layer's output projection of :func:`_grouped_sdpa`."""
        return x + layer.self_attn.o_proj(_grouped_sdpa(q, k_all, v_all, bias, self.n_kv, self.scaling))

    def _mlp(self, i: int, layer, x):
        h = _rms_norm(layer.post_attention_layernorm, x)
        pk = self._pack_of(i)
        if pk is None or pk.gu_w is None:
            return x + layer.mlp(h)
        mlp = layer.mlp
        gate, up = torch.nn.functional.linear(h, pk.gu_w, pk.gu_b).chunk(2, dim=-1)
        return x + mlp.down_proj(mlp.act_fn(gate) * up)

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        h = _rms_norm(self.body.norm, x)
        if self._head_pad is None:
            return self.head(h).float()
        return torch.nn.functional.linear(h, self._head_pad)[..., : self.head.weight.shape[0]].float()

    @torch.no_grad()
    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor, write: Callable[[int, torch.Tensor, torch.Tensor], None]) -> torch.Tensor:
        """Run left-padded prompts ``[b, P]``; ``write(layer, k, v)`` gets each layer's keys / values; returns last-position logits."""
        b, P = ids.shape
        x = self.body.embed_tokens(ids)
        cos, sin = self._rope(pos)
        causal = torch.ones(P, P, dtype=torch.bool, device=ids.device).tril()
        allowed = causal[None] & mask.bool()[:, None, :]
        bias = torch.zeros(b, 1, P, P, dtype=x.dtype, device=ids.device).masked_fill_(~allowed[:, None], torch.finfo(x.dtype).min)
        for i, layer in enumerate(self.body.layers):
            q, k, v = self._qkv(i, layer, _rms_norm(layer.input_layernorm, x), cos, sin)
            write(i, k, v)
            x = self._mlp(i, layer, self._attend(layer, x, q, k, v, bias))
        return self._logits(x[:, -1:])[:, 0]

    def _decode_step(self, st: "_View") -> None:
        """One token for every row, from and into ``st``'s buffers (the captured part).

        The cache views are ``[cap, bucket, kv, d]``: attention reads them as ``[bucket, kv, cap, d]`` (a permuted
        view, no copy) and the token's keys / values go to slot ``st.slot``.
        """
        st.valid.index_fill_(0, st.slot, True)
        cap, bucket = st.valid.shape
        kernel = st.splits > 0
        if not kernel:
            bias = _valid_bias(st.valid, self.dtype)
        x = self.body.embed_tokens(st.token[:, None])
        cos, sin = self._rope(st.pos[:, None])
        for i, layer in enumerate(self.body.layers):
            q, k, v = self._qkv(i, layer, _rms_norm(layer.input_layernorm, x), cos, sin)
            st.k[i].index_copy_(0, st.slot, k.permute(2, 0, 1, 3))
            st.v[i].index_copy_(0, st.slot, v.permute(2, 0, 1, 3))
            if kernel:
                out = decode_attention(q[:, :, 0], st.k[i], st.v[i], st.valid, st.slot, self.scaling, st.splits)
                x = self._mlp(i, layer, x + layer.self_attn.o_proj(out.reshape(bucket, 1, -1)))
            else:
                x = self._mlp(i, layer, self._attend(layer, x, q, st.k[i].permute(1, 2, 0, 3), st.v[i].permute(1, 2, 0, 3), bias))
        st.logits.copy_(self._logits(x)[:, 0])

    def _capture(self, st: "_View") -> None:
        """Capture ``st``'s step; if that fails, without torch.compile, then without a graph (with a warning)."""
        while True:
            try:
                st.capture()
                return
            except Exception as exc:  # noqa: BLE001 - an op that cannot be compiled or captured: fall back, never stop
                torch.cuda.synchronize(self.device)
                if self.compiled:
                    warnings.warn(f"static decode: torch.compile of the decode step failed ({type(exc).__name__}: {exc}); capturing it uncompiled", stacklevel=3)
                    self.compiled, self._step_fn = False, self._decode_step
                    continue
                warnings.warn(f"static decode: CUDA graph capture failed ({type(exc).__name__}: {exc}); decoding without graphs", stacklevel=3)
                self.cuda_graph = False
                return

    # -------------------------------------------------------- the buffers
    def _available(self) -> int | None:
        """Device bytes a new cache can take: free memory plus what torch's allocator holds unused (None: not CUDA)."""
        if self.device.type != "cuda":
            return None
        free, _ = torch.cuda.mem_get_info(self.device)
        return int(free) + torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)

    def _cache_for(self, bucket: int, length: int, rows: int, P: int, R: int) -> "_Cache":
        """The cache of ``bucket`` rows with at least ``length`` slots: reused, or allocated whole after a memory check."""
        cache = self._caches.get(bucket)
        if cache is not None and cache.length >= length:
            return cache
        self._caches.pop(bucket, None)  # too short: freed before the longer one is allocated
        need = _Cache.bytes_for(self, bucket, length)
        avail = self._available()
        if avail is not None and need + MARGIN > avail and self._caches:
            self.reset()  # other buckets' caches and graphs first
            torch.cuda.empty_cache()
            avail = self._available()
        if avail is not None and need + MARGIN > avail:
            gib = 2**30
            raise CacheTooLarge(
                f"hf rollout: the static KV cache for {rows} sequences (a batch bucket of {bucket}) x {length:,} tokens "
                f"(prompt {P} + response {R}, rounded up to {CACHE_ROUND}) x {len(self.body.layers)} layers x 2 (K, V) x "
                f"{self.n_kv} KV heads x {self.head_dim} x {self.dtype.itemsize} bytes needs {need / gib:.1f} GiB, but the device "
                f"has {avail / gib:.1f} GiB free (less {MARGIN / gib:.0f} GiB kept for the prefill and sampling); {self.fix}"
            )
        while len(self._caches) >= MAX_CACHES:
            self._caches.pop(next(iter(self._caches)))
        cache = self._caches[bucket] = _Cache(self, bucket, length)
        return cache

    def capacity(self, slot: int, length: int) -> int:
        """Slots a step writing ``slot`` attends over: the next multiple of ``chunk`` above it, at most ``length``."""
        if not self.chunk:
            return length
        step = self.chunk
        if self.auto_chunk:
            step = max(step, -(-length // (AUTO_GRAPHS * CACHE_ROUND)) * CACHE_ROUND)
        return min(length, (slot // step + 1) * step)

    def _view_for(self, cache: "_Cache", cap: int) -> "_View":
        st = cache.views.get(cap)
        if st is None:
            while len(cache.views) >= MAX_VIEWS:
                cache.views.pop(next(iter(cache.views)))
            st = cache.views[cap] = _View(cache, cap)
        if self.cuda_graph and st.graph is None:
            t0 = time.perf_counter()
            self._capture(st)
            if self.compiled and time.perf_counter() - t0 > 5:
                logger.info("hf rollout: compiled and captured the decode step for %d rows x %d cache slots in %.0f s",
                            cache.bucket, cap, time.perf_counter() - t0)
        return st

    @torch.no_grad()
    def decode(self, ids, mask, n: int, R: int, *, sample, pad_id: int, eos: torch.Tensor, want_log_probs: bool,
               sampling: dict | None = None):
        """``(responses [B, R], lengths [B], log_probs [B, R] or None)`` for ``B = rows * n``.

        ``sample(logits) -> (token, log_prob)`` is the plain loop's sampler; ``sampling`` its settings (``greedy``,
        ``temperature``, ``top_k``, ``top_p``, ``generator``): plain temperature sampling runs the fused sampler.
        """

        self._ensure_packed()
        b0, P = ids.shape
        B = b0 * n
        bucket = 1 << (B - 1).bit_length()
        length = -(-(P + R) // CACHE_ROUND) * CACHE_ROUND
        cache = self._cache_for(bucket, length, B, P, R)
        if not self._attention_checked:
            self._check_attention(cache)
        sample = self._sampler_for(sample, sampling, _vocab(self), want_log_probs)
        pos = position_ids_from_mask(mask)
        rows = torch.arange(bucket, device=ids.device).clamp_(max=B - 1) // n  # the prompt of each bucket row

        def write(i, k, v):  # [b0, kv, P, d] -> slots 0..P-1 of [S, bucket, kv, d]
            cache.k[i][:P].copy_(k[rows].permute(2, 0, 1, 3))
            cache.v[i][:P].copy_(v[rows].permute(2, 0, 1, 3))

        logits = self.prefill(ids, mask, pos, write)[rows[:B]]
        cache.valid.zero_()
        cache.valid[:P] = mask.bool()[rows].t()
        cache.pos.copy_(pos[rows, -1] + 1)
        cache.slot.fill_(P)
        responses = torch.full((B, R), pad_id, dtype=ids.dtype, device=ids.device)
        log_probs = torch.zeros((B, R), dtype=torch.float32, device=ids.device) if want_log_probs else None
        lengths = torch.full((B,), R, dtype=torch.long, device=ids.device)
        done = torch.zeros(B, dtype=torch.bool, device=ids.device)
        st = None
        for t in range(R):
            token, lp = sample(logits)
            token = torch.where(done, torch.full_like(token, pad_id), token)
            responses[:, t] = token
            if log_probs is not None:
                log_probs[:, t] = torch.where(done, torch.zeros_like(lp), lp)
            finished = ~done & torch.isin(token, eos)
            lengths = torch.where(finished, torch.full_like(lengths, t + 1), lengths)
            done |= finished
            if t == R - 1 or ((t + 1) % self.check_every == 0 and bool(done.all())):
                break
            cap = self.capacity(P + t, length)  # this step writes token t's keys / values into slot P + t
            if st is None or st.cap != cap:
                st = self._view_for(cache, cap)
            cache.token[:B].copy_(token)
            if st.graph is not None:
                st.graph.replay()
            else:
                self._step_fn(st)
            cache.pos += 1
            cache.slot += 1
            logits = cache.logits[:B]
        return responses, lengths, log_probs


class _Cache:
    """The static buffers of one batch bucket: per layer keys and values ``[length, bucket, kv, d]`` (slot-major,
    so the first ``cap`` slots are one contiguous view), valid slots ``[length, bucket]``, and the step's inputs
    and logits. ``views`` holds one :class:`_View` (and its CUDA graph) per capacity reached."""

    def __init__(self, dec: StaticDecoder, bucket: int, length: int) -> None:
        dev, L = dec.device, len(dec.body.layers)
        shape = (length, bucket, dec.n_kv, dec.head_dim)
        self.bucket, self.length = bucket, length
        self.k = [torch.zeros(shape, dtype=dec.dtype, device=dev) for _ in range(L)]
        self.v = [torch.zeros(shape, dtype=dec.dtype, device=dev) for _ in range(L)]
        self.valid = torch.zeros(length, bucket, dtype=torch.bool, device=dev)
        self.token = torch.zeros(bucket, dtype=torch.long, device=dev)
        self.pos = torch.zeros(bucket, dtype=torch.long, device=dev)
        self.slot = torch.zeros(1, dtype=torch.long, device=dev)
        self.logits = torch.zeros(bucket, _vocab(dec), dtype=torch.float32, device=dev)
        self.dec = dec
        self.views: dict[int, _View] = {}

    @staticmethod
    def bytes_for(dec: StaticDecoder, bucket: int, length: int) -> int:
        """What :meth:`nbytes` will be, before allocating."""
        kv = 2 * len(dec.body.layers) * length * bucket * dec.n_kv * dec.head_dim * dec.dtype.itemsize
        return kv + length * bucket + bucket * (8 + 8 + 4 * _vocab(dec)) + 8

    def nbytes(self) -> int:
        tensors = [*self.k, *self.v, self.valid, self.token, self.pos, self.slot, self.logits]
        return sum(t.numel() * t.element_size() for t in tensors)


def _grouped_sdpa(q: torch.Tensor, k_all: torch.Tensor, v_all: torch.Tensor, bias: torch.Tensor, n_kv: int, scale: float) -> torch.Tensor:
    """``[b, s, h * d]``: ``q [b, h, s, d]`` over ``k_all``, ``v_all [b, kv, S, d]`` with the additive ``bias [b, 1, s, S]``;
    grouped heads attend to their kv head through a reshape (no copies)."""
    b, h, s, d = q.shape
    g = h // n_kv
    qg = q.reshape(b, n_kv, g * s, d)
    out = torch.nn.functional.scaled_dot_product_attention(qg, k_all, v_all, attn_mask=bias.repeat(1, 1, g, 1) if g > 1 and s > 1 else bias, scale=scale)
    return out.reshape(b, h, s, d).transpose(1, 2).reshape(b, s, h * d)


def _valid_bias(valid: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The additive mask ``[rows, 1, 1, cap]`` of a slot-major ``valid [cap, rows]``: 0 where a slot holds a key, the
    dtype's minimum elsewhere."""
    return torch.zeros(valid.t().shape, dtype=dtype, device=valid.device).masked_fill_(~valid.t(), torch.finfo(dtype).min)[:, None, None, :]


def _sdpa_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, valid: torch.Tensor, scale: float, n_kv: int) -> torch.Tensor:
    """The reference of the kernel's check: ``q [rows, heads, d]`` over ``k``, ``v [cap, rows, kv, d]`` where ``valid``."""
    rows, heads, d = q.shape
    out = _grouped_sdpa(q[:, :, None], k.permute(1, 2, 0, 3), v.permute(1, 2, 0, 3), _valid_bias(valid, q.dtype), n_kv, scale)
    return out.reshape(rows, heads, d)


def _vocab(dec: StaticDecoder) -> int:
    return dec.head.weight.shape[0]


class _View:
    """The first ``cap`` slots of a :class:`_Cache` (views, no copies) with the shared step buffers: what one
    decode step reads and writes, and its CUDA graph once captured."""

    def __init__(self, cache: _Cache, cap: int) -> None:
        self.dec, self.cap = cache.dec, cap
        self.k = [k[:cap] for k in cache.k]
        self.v = [v[:cap] for v in cache.v]
        self.valid = cache.valid[:cap]
        self.token, self.pos, self.slot, self.logits = cache.token, cache.pos, cache.slot, cache.logits
        self.graph = None
        # programs per (row, kv head) of the decode attention kernel; 0: sdpa
        sms = torch.cuda.get_device_properties(self.dec.device).multi_processor_count if self.dec.device.type == "cuda" else 1
        self.splits = splits_for(cache.bucket, self.dec.n_kv, cap, sms) if self.dec.attention == "triton" else 0
        if self.dec.compiled:  # batch buckets and capacities change: one compiled step serves them all
            import torch._dynamo as dynamo

            for t in (*self.k, *self.v, self.valid):
                dynamo.maybe_mark_dynamic(t, 0)
                dynamo.maybe_mark_dynamic(t, 1)
            for t in (self.token, self.pos, self.logits):
                dynamo.maybe_mark_dynamic(t, 0)

    def capture(self) -> None:
        """Warm up on a side stream, then capture one decode step; the buffers are restored afterwards."""
        saved = [t.clone() for t in (self.valid, self.pos, self.slot)]
        slot = int(self.slot)
        keep_k = [k[slot].clone() for k in self.k]
        keep_v = [v[slot].clone() for v in self.v]
        try:
            side = torch.cuda.Stream(self.dec.device)
            side.wait_stream(torch.cuda.current_stream(self.dec.device))
            with torch.cuda.stream(side):
                for _ in range(2):
                    self.dec._step_fn(self)
            torch.cuda.current_stream(self.dec.device).wait_stream(side)
            if self.dec._pool is None:
                self.dec._pool = torch.cuda.graph_pool_handle()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.dec._pool):
                self.dec._step_fn(self)
            self.graph = graph
        finally:  # the warm-up and the capture wrote one slot: put the state back
            for dst, src in zip((self.valid, self.pos, self.slot), saved):
                dst.copy_(src)
            for k, v, kk, vv in zip(self.k, self.v, keep_k, keep_v):
                k[slot].copy_(kk)
                v[slot].copy_(vv)
