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
- Not the garbage collector: rl-core's flat log-probs leave it little to walk (0.01-0.08 s of collector time in a
  6-11 s generation on an H200, session 22; vLLM alone's per-token ``Logprob`` dicts cost it 0.44-0.51 s), and pausing
  it during a generation measured no faster (``bench/results/rollout_speed_h200_s22``).
- Already as vLLM alone: ``n`` samples per request (one prefill per group: vLLM forks the request after its
  prompt), ``detokenize=False`` unless stop strings need the text, CUDA graphs on (``enforce_eager`` only on CPU).

Nothing here imports vLLM at module level.
"""

from __future__ import annotations

import contextlib
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
