"""LoRA adapter sync to a rollout engine (``rollout.lora_sync``, issue #32), verified: the worker's side of rl-lora's
``weight_sync`` feature hook (``rl_core.plan.features``).

With ``adapter`` sync the engine gets the trainer's frozen base weights once, then after each update only the adapters
(its ``load_adapter``); every transfer is checked as core's :mod:`rl_core.weight_sync_check` checks a weight sync: the
engine holds what was sent, what was sent is the trainer's live adapters, and an engine that merges the adapters into
its weights (the hf rollout: :mod:`rl_lora.merge`) holds ``W + scale * B @ A`` there. ``merged`` sync needs nothing of
this package at run time (the trainer's merged weights go through core's plain weight sync).
"""

from __future__ import annotations

from typing import Any

import torch

from rl_core.weight_sync_check import StaleWeightsError, WeightTap, fingerprint, load_verified, sample_positions, verify_sent, verify_sync


def sync_mode(config: Any, rollout: Any) -> str | None:
    """How LoRA weights reach ``rollout`` (rollout.lora_sync): ``adapter`` (the engine's LoRA API), ``merged``, or None
    (no LoRA, or no colocated engine). ``auto`` is ``adapter`` where the engine has ``load_adapter``."""
    if config.model.lora_rank == 0 or rollout is None:
        return None
    mode, able = config.rollout.lora_sync, hasattr(rollout, "load_adapter")
    if mode == "adapter" and not able:
        raise RuntimeError(f"rollout.lora_sync=adapter, but the {config.rollout.name} rollout engine has no LoRA adapter API "
                           "(load_adapter): set rollout.lora_sync=merged or auto")
    return "adapter" if mode == "adapter" or (mode == "auto" and able) else "merged"


def adapter_sync(config: Any, rollout: Any) -> Any:
    """The ``weight_sync`` hook: a worker's sync function for ``rollout`` under adapter sync (:func:`sync_adapters`),
    None when the worker's plain weight sync serves (``merged``, or no colocated engine)."""
    return sync_adapters if sync_mode(config, rollout) == "adapter" else None


def sync_adapters(rollout: Any, actor: Any, *, base: bool, engine_name: str, version: int) -> None:
    """One sync through the engine's LoRA API: the frozen base first when ``base`` (once per engine), then the adapters."""
    if base:
        load_verified(rollout, actor.named_base_weights(), None, engine_name=engine_name, version=version,
                      load=getattr(rollout, "load_base_weights", None))  # an engine may keep the frozen base (hf)
    # in the dtype the engine holds adapters in (e.g. vLLM's bf16 LoRA slots): half the bytes, the same values
    tensors, peft_config = actor.lora_adapter(getattr(rollout, "adapter_dtype", None))
    load_adapter_verified(rollout, tensors, peft_config, actor.sample_weights, engine_name=engine_name, version=version)


def load_adapter_verified(engine: Any, tensors: dict[str, torch.Tensor], peft_config: dict, trainer_sample=None, *,
                          engine_name: str, version: int) -> int | None:
    """``engine.load_adapter(tensors, peft_config, version)``, verified as ``rl_core.weight_sync_check.load_verified``:
    an adapter that did not arrive or a stale one raises ``StaleWeightsError``; ``trainer_sample`` (the trainer's live
    adapters) checks what was sent, and a merging engine's weights (:func:`verify_merged`)."""
    tap = WeightTap(tensors.items())
    engine.load_adapter(dict(tap), peft_config, version)
    n = verify_sync(tap, engine, engine_name=engine_name, version=version, what=f" (its LoRA adapter of weight version {version})")
    if trainer_sample is not None:
        verify_sent(tap, trainer_sample(tap.positions), engine_name=engine_name, version=version)
        if n is not None:
            verify_merged(engine, tensors, peft_config, trainer_sample, engine_name=engine_name, version=version)
    return n


def verify_merged(engine: Any, tensors: dict[str, torch.Tensor], peft_config: dict, trainer_sample, *, engine_name: str, version: int) -> int | None:
    """An engine that merges adapters into its weights (``engine.merged_weights()``: HF names -> sizes) must hold
    ``W + scale * B @ A`` there, ``A`` and ``B`` rounded to its dtype, to one rounding step of that dtype; else
    ``StaleWeightsError``. The number of weights compared (None: the engine does not merge)."""
    numels = getattr(engine, "merged_weights", lambda: None)()
    if not numels:
        return None
    positions = {name: sample_positions(name, numel) for name, numel in numels.items()}
    held, want = engine.sample_weights(positions) or {}, trainer_sample(positions)
    scale = float(peft_config.get("lora_alpha", peft_config["r"])) / float(peft_config["r"])
    wrong = []
    for name, pos in positions.items():
        got, exp = held.get(name), want.get(name)
        module = "base_model.model." + name.removesuffix(".weight")
        a, b = tensors.get(module + ".lora_A.weight"), tensors.get(module + ".lora_B.weight")
        if got is None or exp is None or a is None or b is None:
            wrong.append(f"{name} ({'the engine' if got is None else 'the trainer' if exp is None else 'the adapter sent'} does not report it)")
            continue
        rows, cols = pos // a.shape[1], pos % a.shape[1]
        br, ac = b.detach().cpu()[rows].float(), a.detach().cpu()[:, cols].T.float()
        rounded = (br.to(got.dtype).float() * ac.to(got.dtype).float()).sum(-1) - (br * ac).sum(-1)
        exp = exp.float() + scale * rounded  # the trainer's policy with the adapters in the engine's precision
        rtol = max(1e-4, torch.finfo(got.dtype).eps)  # one rounding step of a 16-bit dtype; float32: as verify_sent
        if not torch.allclose(got.float(), exp, rtol=rtol, atol=1e-6):
            diff = float((got.double() - exp.double()).abs().max())
            wrong.append(f"{name} (fingerprint held {fingerprint(name, got.float()):.6g}, trained {fingerprint(name, exp):.6g}; max |diff| {diff:.3g})")
    if wrong:
        shown = "; ".join(wrong[:4]) + (f"; and {len(wrong) - 4} more" if len(wrong) > 4 else "")
        raise StaleWeightsError(
            f"weight sync check failed at weight version {version}: the rollout engine {engine_name!r} merged its LoRA adapter "
            f"but {len(wrong)} of {len(positions)} merged weights differ from the policy being trained: {shown}. "
            "It would keep sampling another policy; the run is stopped instead"
        )
    return len(positions)
