"""Issue 48's SGLang rows: ``part_sglang(args, rg)`` for bench/rollout_gpu.py (``--part sglang``), or alone.

    python bench/rollout_sglang_part.py                  # this part alone, in this process (the table in $OUT)
    SMOKE=1 python bench/rollout_sglang_part.py          # CPU: the tiny model, tiny shapes (sglang's CPU engine)
    bash bench/rollout_sglang.sh                         # the device call: SGLang's bundle segment, then this

``rg`` is the bench module (bench/rollout_gpu.py): its workloads, floor, prompts, run config and rows. ONE engine,
built by rl-core's adapter (``rl_rollout_sglang.engine.SGLangRollout``, as a GRPO run builds it: ``sglang.Engine``
in this process, its scheduler in child processes, memory saver + weights CPU backup for sleep), then on that same
engine, on ``scale`` and ``long``:

- "SGLang alone": the engine's own ``generate(input_ids=prompts, sampling_params={"n": n, "temperature": 1,
  "max_new_tokens": R})`` (SGLang 0.5.17 and 0.5.23 take ``n`` in the sampling params: its tokenizer manager first
  sends each prompt once with ``max_new_tokens=0`` to fill the radix cache, then the n samples), no log-probs;
- "SGLang alone, logprobs": the same with ``return_logprob=True`` (the sampled token's log-prob: rl-core's work);
- "rl-core SGLang, no log-probs" and "rl-core SGLang" (log-probs): rl-core's ``generate(batch, SamplingParams(n,
  max_new_tokens=R, temperature=1, seed=3))``: one request per sample (a seed each), all in one engine call;
- "rl-core SGLang, no prefix sharing" (``long`` only): rl-core and SGLang have no per-request switch; the radix cache
  off is ``sglang.Engine(disable_radix_cache=True)``, a second engine started after the first is shut down (only
  when the deadline leaves time for its start: ``NO_SHARING=0`` skips it; the adapter's prefill-first is off there);
- "rl-core SGLang, no log-probs, share_prefill=false (before)" (``long``; ``BEFORE=0`` skips it): rl-core's adapter
  sends each distinct prompt once with ``max_new_tokens=0`` before a group's n requests (``engine_kwargs.share_prefill``,
  default on since session 22; SGLang's own n path does the same); this row is the adapter without it: SGLang's
  default ``schedule_policy=fcfs`` then prefills the requests of one batch without sharing their prefix (the CPU
  smoke prefilled prompts x n x length);
- one sleep + wake-up (``release_memory_occupation`` / ``resume_memory_occupation``; GPU only: on CPU they do nothing):
  two cycles, each resumed in full (the wake-up's weights, then what a generation resumes: the KV cache and the CUDA
  graphs' memory); the row is the second (a run's steady state: the first release also pins the host copy of the
  weights, kept from then on), the first's seconds beside it.

``SGLANG_ENGINE_KWARGS`` (JSON) adds ``sglang.Engine`` arguments to both engines (e.g. ``{"attention_backend": "triton"}``
if sglang-kernel's fa3 fails to start, ``{"schedule_policy": "lpm"}`` to try in-batch prefix sharing).

Timing: ``rg.run_rounds`` / ``rg.rows_from_rounds`` (``ROUNDS`` rounds, default 2; the order alternates so no row always goes first), the radix
cache flushed before every timed call; a row's seconds are the median of its rounds, every sample kept.
Prefilled prompt tokens: SGLang's own per-request counters, ``sum(meta_info.prompt_tokens - meta_info.cached_tokens)``
over the requests a call returns; ``prompt_tokens`` = prompts x prompt length (what one prefill per group costs).
SGLang's ``n`` path prefills each prompt in a warm-up request it does not return: its rows add that request's
``prompts x length`` (its cache was flushed), marked ``prefilled_note``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHIMS = REPO / "plugins" / "rollout_sglang" / "tests" / "cpu_shims"
ROUNDS = int(os.environ.get("ROUNDS", "2"))


# ------------------------------------------------------------------------------------------------- helpers
def _cpu_stand_ins() -> None:
    """SGLang 0.5.23 on CPU imports sgl_kernel and torchvision: the plugin's tests' set-up puts its import-only stand-ins
    for the missing ones on sys.path and PYTHONPATH (SGLang's scheduler is a spawned process) when it is loaded."""
    spec = importlib.util.spec_from_file_location("rl_sglang_test_setup", SHIMS.parent / "conftest.py")
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


def _prefilled(metas: list[dict]) -> int | None:
    """sum(prompt_tokens - cached_tokens) over SGLang's answers (None when it reported no counts)."""
    if not metas or any("prompt_tokens" not in m for m in metas):
        return None
    return int(sum(m["prompt_tokens"] - (m.get("cached_tokens") or 0) for m in metas))


def _flush(engine, tries: int = 300) -> None:
    """SGLang's radix cache emptied. The scheduler refuses while it still holds the last call's requests (it answers
    success=False: "Cache not flushed because there are pending requests", a race right after generate returns): ask again."""
    for _ in range(tries):
        result = engine.flush_cache()
        if getattr(result, "success", result if isinstance(result, bool) else True):
            return
        time.sleep(0.02)
    raise RuntimeError(f"SGLang's flush_cache failed {tries} times: {result!r}")


def _time_left(args) -> float:
    start = float(os.environ.get("ROLLOUT_BENCH_START", getattr(args, "start", time.time())))
    return args.deadline - (time.time() - start)


def _build(rg, args, device: str, **engine_kwargs):
    from rl_core.backends import WorkerContext
    from rl_rollout_sglang.engine import SGLangRollout

    t0 = time.perf_counter()
    eng = SGLangRollout(rg.run_config(args.model, "sglang", engine_kwargs=engine_kwargs), WorkerContext(device=device, seed=0))
    start_s = time.perf_counter() - t0
    print(f"SGLang engine{' ' + json.dumps(engine_kwargs) if engine_kwargs else ''} ready in {start_s:.0f} s", flush=True)
    metas: list[dict] = []
    inner = eng.client.generate

    def recording(input_ids, sampling, return_logprob, **kw):  # SGLang's per-request counters of rl-core's calls
        outs = inner(input_ids, sampling, return_logprob, **kw)
        metas.extend(dict(o.get("meta_info") or {}) for o in outs)
        return outs

    eng.client.generate = recording
    return eng, start_s, metas


def _memory(rg, device: str, eng) -> dict:
    return dict(device_used_gib=rg._device_used_gib(device), fraction_gib=rg._fraction_gib(device, eng.config.rollout.gpu_memory_utilization))


# ---------------------------------------------------------------------------------------------------- part
def part_sglang(args, rg) -> list[dict]:
    import attrs
    from rl_core.backends import SamplingParams

    device = "cpu" if rg.SMOKE else "cuda"
    if device == "cpu":
        _cpu_stand_ins()
    run_rounds, rows_from_rounds = rg.run_rounds, rg.rows_from_rounds
    shape = rg.shape_of(args.model)
    user = json.loads(os.environ.get("SGLANG_ENGINE_KWARGS") or "{}")
    eng, start_s, metas = _build(rg, args, device, **user)
    engine = eng.client.engine  # the sglang.Engine the adapter started
    rows: list[dict] = []
    warm = rg.workloads()["scale"]
    eng.generate(rg.batch_of(rg.prompts_for(dict(warm, prompts=2), shape["vocab"])), SamplingParams(n=2, max_new_tokens=16, temperature=1.0, seed=0, logprobs=True))
    engine.generate(input_ids=rg.prompts_for(dict(warm, prompts=2), shape["vocab"]), sampling_params={"n": 2, "temperature": 1.0, "max_new_tokens": 16})

    def reset():
        _flush(engine)  # every call prefills its prompts itself
        metas.clear()

    def rl_rows(w: dict, prompts, suffix: str = "", target=eng, counters=metas):
        params = SamplingParams(n=w["n"], max_new_tokens=w["new"], temperature=1.0, seed=3, logprobs=True)

        def rlcore(logprobs: bool):
            def go():
                out = target.generate(rg.batch_of(prompts), attrs.evolve(params, logprobs=logprobs))
                return int(out.tensors["response_mask"].sum()), dict(prefilled=_prefilled(counters), requests=len(counters))
            return go

        return [(f"rl-core SGLang{suffix}, no log-probs", rlcore(False)), (f"rl-core SGLang{suffix}", rlcore(True))]

    def each_sample(fn):
        """``fn`` (an rl-core call) with ``engine_kwargs.share_prefill=false``: the n requests of a group sent as they
        are, no prefill first (rl-core's SGLang path before session 22)."""
        def go():
            eng.share_prefill = False
            try:
                return fn()
            finally:
                eng.share_prefill = True
        return go

    for wname, w in rg.workloads().items():
        prompts = rg.prompts_for(w, shape["vocab"], seed=1 if wname == "scale" else 2)
        floor = rg.floor_seconds(shape, w, args.bandwidth)
        nominal = w["prompts"] * w["n"] * w["new"]
        prompt_tokens = w["prompts"] * w["prompt"]

        def alone(logprob: bool):
            def go():
                outs = engine.generate(input_ids=prompts, sampling_params={"n": w["n"], "temperature": 1.0, "max_new_tokens": w["new"]},
                                       return_logprob=logprob)
                if len(outs) != w["prompts"] * w["n"]:
                    raise RuntimeError(f"SGLang alone answered {len(outs)} samples for {w['prompts']} prompts x n={w['n']}")
                answered = [dict(o.get("meta_info") or {}) for o in outs]
                seen = _prefilled(answered)
                # + the warm-up request per prompt (max_new_tokens=0; the cache was flushed): not among the answers
                return sum(len(o["output_ids"]) for o in outs), dict(prefilled=None if seen is None else seen + prompt_tokens,
                                                                     prefilled_note="answers + one warm-up per prompt")
            return go

        rl_none, rl_lp = rl_rows(w, prompts)
        runs = [("SGLang alone", alone(False)), rl_none, ("SGLang alone, logprobs", alone(True)), rl_lp]
        if wname == "long" and os.environ.get("BEFORE", "1") != "0":
            runs.append(("rl-core SGLang, no log-probs, share_prefill=false (before)", each_sample(rl_none[1])))
        samples = run_rounds(runs, ROUNDS, reset, args.deadline_ok)
        got = rows_from_rounds(samples, wname, floor, nominal, prompt_tokens=prompt_tokens, engine_start_s=start_s, **_memory(rg, device, eng))
        for r in got:
            print(json.dumps(r), flush=True)
        rows += got
    if device == "cuda" and args.deadline_ok():
        cycles = []
        for _ in range(2):
            eng._stats = {}
            eng.sleep()
            eng.wake_up()  # the weights (a sync would follow)
            eng._resume_if_released()  # the KV cache and the graphs' memory, as a generation starts with
            cycles.append(dict(eng._stats))
        first, stats = cycles
        rows.append(dict(name="rl-core SGLang: one sleep + wake-up", workload="-", seconds=stats.get("rollout/sleep_s", 0) + stats.get("rollout/wake_s", 0),
                         sleep_freed_gib=stats.get("rollout/sleep_freed_gib"), sleep_s=stats.get("rollout/sleep_s"), wake_s=stats.get("rollout/wake_s"),
                         first_sleep_s=first.get("rollout/sleep_s"), first_wake_s=first.get("rollout/wake_s")))
        print(json.dumps(rows[-1]), flush=True)
    eng.shutdown()

    # the radix cache off: another engine (long only); its start costs as much as the first's
    left = _time_left(args)
    if os.environ.get("NO_SHARING", "1") != "0" and (rg.SMOKE or left > 2 * start_s + 60):
        w = rg.workloads()["long"]
        prompts = rg.prompts_for(w, shape["vocab"], seed=2)
        floor, nominal = rg.floor_seconds(shape, w, args.bandwidth), w["prompts"] * w["n"] * w["new"]
        off, off_start, off_metas = _build(rg, args, device, **user, disable_radix_cache=True)
        off.generate(rg.batch_of(rg.prompts_for(dict(warm, prompts=2), shape["vocab"])), SamplingParams(n=2, max_new_tokens=16, temperature=1.0, seed=0, logprobs=True))
        runs = rl_rows(w, prompts, ", no prefix sharing", target=off, counters=off_metas)
        samples = run_rounds(runs, ROUNDS, lambda: (_flush(off.client.engine), off_metas.clear()), args.deadline_ok)
        got = rows_from_rounds(samples, "long", floor, nominal, prompt_tokens=w["prompts"] * w["prompt"], engine_start_s=off_start, **_memory(rg, device, off))
        for r in got:
            print(json.dumps(r), flush=True)
        rows += got
        off.shutdown()
    else:
        print(f"skipped the no-prefix-sharing engine ({left:.0f} s left; NO_SHARING={os.environ.get('NO_SHARING', '1')})", flush=True)
    return rows


# ---------------------------------------------------------------------------------------------------- alone
def main() -> None:
    """This part in this process, without bench/rollout_gpu.py's driver: $OUT/parts/sglang.json, $OUT/rollout_sglang.md."""
    import argparse
    from datetime import datetime, timezone

    spec = importlib.util.spec_from_file_location("rollout_gpu", REPO / "bench" / "rollout_gpu.py")
    rg = importlib.util.module_from_spec(spec)
    sys.modules["rollout_gpu"] = rg
    spec.loader.exec_module(rg)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None)
    ap.add_argument("--bandwidth", type=float, default=4.8e12)
    ap.add_argument("--deadline", type=float, default=float(os.environ.get("DEADLINE", 420)))
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    args = ap.parse_args()
    out = Path(args.out)
    (out / "parts").mkdir(parents=True, exist_ok=True)
    args.start = float(os.environ.get("ROLLOUT_BENCH_START", time.time()))
    args.deadline_ok = lambda: time.time() - args.start < args.deadline - 20
    if args.model is None:
        args.model = str(rg._smoke_model(out) if rg.SMOKE else REPO / ".gpu" / "qwen15b-gpt2")
    errors = {}
    try:
        rows = part_sglang(args, rg)
    except Exception as exc:  # noqa: BLE001 - the table still says what failed
        import traceback

        traceback.print_exc()
        rows, errors["sglang"] = [], f"{type(exc).__name__}: {exc}"[:600]
    (out / "parts" / "sglang.json").write_text(json.dumps(rows, indent=1))
    versions = rg.versions()
    import importlib.metadata as md

    for d in ("sglang", "sglang-kernel", "flashinfer-python", "rl-rollout-sglang"):
        try:
            versions[d] = md.version(d)
        except md.PackageNotFoundError:
            pass
    results = {"info": {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                        "command": ("SMOKE=1 " if rg.SMOKE else "") + " ".join(["python", *sys.argv]) + f" (ROUNDS={ROUNDS})", "versions": versions,
                        "bandwidth": args.bandwidth, "copy_bandwidth": None, "workloads": rg.workloads(), "model": args.model, "shape": rg.shape_of(args.model)},
               "rows": rows, "errors": errors}
    (out / "rollout_sglang.results.json").write_text(json.dumps(results, indent=1))
    text = rg.table(results)
    (out / "rollout_sglang.md").write_text(text)
    print(text)
    if errors:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
