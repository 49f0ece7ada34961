"""What keeps rl-core's vLLM rollout as fast as ``LLM.generate`` alone (issue 48).

Found against a plain ``LLM.generate(prompts, SamplingParams(n=8, ...))``:

- **Per-request seeds.** A ``SamplingParams.seed`` gives each request its own ``torch.Generator``, and vLLM's
  sampler then draws the noise of those requests one row at a time (``random_sample``: a Python loop over the
  batch, one small kernel each, every decode step; vLLM's own comment: "This can be slow") and leaves the
  FlashInfer top-k / top-p sampler for the native one. rl-core seeds every training step, so every step took that
  path (256 rows x 1,024 steps on the scale workload). With the engine in this process (rl-core's default,
  ``VLLM_ENABLE_V1_MULTIPROCESSING=0``) the same reproducibility comes from seeding the device's default generator
  once per ``generate`` call (:func:`batch_seed`) and sending the requests unseeded: the same seed and prompts give
  the same samples, no two rows share a draw (one noise tensor for the whole batch), and the caller's RNG streams
  (the colocated trainer's) are restored afterwards. ``rollout.engine_kwargs.seed_mode=request`` keeps vLLM's
  per-request seeds (samples then do not depend on which other prompts share the batch).
- **Log-prob objects.** ``logprobs=0`` makes vLLM build one ``dict[int, Logprob]`` per token (262k objects a
  step on the scale workload, with the garbage collector's passes over them); ``flat_logprobs=True`` (vLLM's
  :class:`FlatLogprobs`) keeps them in flat lists, read here without a per-token lookup (:func:`sampled_log_probs`).
- **The garbage collector.** In-process the engine shares the interpreter with the colocated trainer, whose
  modules, tensors and optimizer state the collector's oldest generation walks on every full pass; a generation
  allocates ~262k objects a step on the scale workload (outputs, log-probs), enough to trigger such passes, and
  the same call measured 11.4 s and 16.2 s on one H200 (session 21). vLLM freezes its own start-up heap for the
  same reason (``freeze_gc_heap``); rl-core pauses the cyclic collector for the length of one ``generate`` call
  (:func:`gc_paused`; reference counting still frees everything acyclic; a collection runs when it ends if one
  was due). ``rollout.engine_kwargs.pause_gc=false`` leaves the collector on.
- Already as vLLM alone: ``n`` samples per request (one prefill per group: vLLM forks the request after its
  prompt), ``detokenize=False`` unless stop strings need the text, CUDA graphs on (``enforce_eager`` only on CPU).

Nothing here imports vLLM at module level.
"""

from __future__ import annotations

import contextlib
import gc
import os
from typing import Any, Iterator

import torch

SEED_MODES = ("batch", "request")
#: ``rollout.precision=fp8``: weights quantized to FP8 (E4M3, per-tensor scales) as they load, and an FP8 KV cache
FP8_KWARGS = {"quantization": "fp8", "kv_cache_dtype": "fp8"}


def in_process() -> bool:
    """Whether vLLM's engine core runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, rl-core's default)."""
    return os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") in ("0", "false", "False")


def seed_mode(extra: dict[str, Any]) -> str:
    """``rollout.engine_kwargs.seed_mode`` (taken out of ``extra``): ``batch`` (default) or ``request``."""
    mode = str(extra.pop("seed_mode", "batch"))
    if mode not in SEED_MODES:
        raise ValueError(f"rollout.engine_kwargs.seed_mode={mode!r}: use 'batch' (one seed per generate call, fast) or 'request' "
                         "(vLLM's per-request generators: samples independent of the batch, slower)")
    return mode


def pause_gc(extra: dict[str, Any]) -> bool:
    """``rollout.engine_kwargs.pause_gc`` (taken out of ``extra``): pause the cyclic collector during ``generate`` (default on)."""
    value = extra.pop("pause_gc", True)
    if not isinstance(value, bool):
        raise ValueError(f"rollout.engine_kwargs.pause_gc={value!r}: use true (the default: no collector passes during a "
                         "generation) or false")
    return value


@contextlib.contextmanager
def gc_paused(enabled: bool = True) -> Iterator[None]:
    """The cyclic garbage collector off for the block (when ``enabled`` and it was on); back on afterwards."""
    if not enabled or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@contextlib.contextmanager
def batch_seed(seed: int | None, device: torch.device) -> Iterator[None]:
    """Seed the default generators of the CPU and ``device`` for one ``generate`` call; restore them afterwards."""
    if seed is None:
        yield
        return
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices, device_type="cuda"):
        torch.manual_seed(int(seed))
        yield


def flat_logprobs_supported() -> bool:
    """Whether the installed vLLM's ``SamplingParams`` has ``flat_logprobs``."""
    from vllm import SamplingParams

    fields = getattr(SamplingParams, "__struct_fields__", None)
    return "flat_logprobs" in (fields if fields is not None else ())


def sampled_log_probs(comp) -> list[float]:
    """The sampled tokens' log-probs from a ``CompletionOutput`` asked with ``logprobs=0``.

    With ``flat_logprobs`` each position holds exactly the sampled token (checked: the flat token ids are the
    sampled ones), so the flat list is the answer; otherwise one dict lookup per token.
    """
    lps = comp.logprobs
    if lps is None:
        raise RuntimeError("vLLM returned no log-probs although logprobs=0 was requested")
    flat_ids = getattr(lps, "token_ids", None)
    if flat_ids is not None and len(flat_ids) == len(comp.token_ids) and list(flat_ids) == list(comp.token_ids):
        return list(lps.logprobs)
    return [float(lps[pos][tok].logprob) for pos, tok in enumerate(comp.token_ids)]
