"""Verified weight sync: the rollout engine holds the weights the trainer sent, or the run stops (an engine that kept
its old weights would otherwise sample the old policy for the whole run without a sign).

:class:`WeightTap` keeps a few elements of each named tensor on its way to the engine, at flat positions fixed by
name and size (:func:`sample_positions`; per matrix of a 3-D stack); after loading, :func:`verify_sync` asks the
engine for the same elements (``engine.sample_weights(positions)``, optional: without it nothing is verified) and
they must be equal in the engine's dtype. No full tensor is copied.
"""

from __future__ import annotations

import zlib
from typing import Any, Iterable, Iterator

import torch

SAMPLES = 16  # elements per tensor


class StaleWeightsError(RuntimeError):
    """The rollout engine does not hold the weights the trainer sent."""


def _seed(name: str, numel: int) -> int:
    return zlib.crc32(f"{name}:{numel}".encode())


def sample_positions(name: str, numel: int, k: int = SAMPLES, slices: int = 1) -> torch.Tensor:
    """``k`` flat positions in a tensor of ``numel`` elements, fixed by the name and size (all of them if fewer);
    with ``slices`` > 1, ``k`` in each of that many equal contiguous slices (a stack of matrices: each one sampled)."""
    if numel <= k * slices:
        return torch.arange(numel)
    g = torch.Generator().manual_seed(_seed(name, numel))
    if slices <= 1 or numel % slices:
        return torch.randint(0, numel, (k,), generator=g)
    size = numel // slices
    return (torch.arange(slices).repeat_interleave(k) * size + torch.randint(0, size, (k * slices,), generator=g))


def gather(tensor: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The elements of ``tensor`` at flat ``positions`` (no copy of the tensor), on the CPU."""
    flat = tensor.detach()
    flat = flat.view(-1) if flat.is_contiguous() else flat.reshape(-1)
    return flat[positions.to(flat.device)].cpu()


def fingerprint(name: str, values: torch.Tensor) -> float:
    """The float64 sum of a fixed pseudo-random projection (by name) of sampled values."""
    g = torch.Generator().manual_seed(_seed(name, values.numel()) ^ 0x5EED)
    weights = torch.randn(values.numel(), generator=g, dtype=torch.float64)
    return float((values.double().reshape(-1) * weights).sum())


class WeightTap:
    """Wraps named tensors on their way to an engine, sampling each one as it passes (iterate it once)."""

    def __init__(self, weights: Iterable[tuple[str, torch.Tensor]], k: int = SAMPLES):
        self._weights = weights
        self.k = k
        self.positions: dict[str, torch.Tensor] = {}
        self.values: dict[str, torch.Tensor] = {}

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in self._weights:
            # a 3-D tensor stacks matrices (MoE experts fused, transformers 5): each of them sampled
            pos = sample_positions(name, tensor.numel(), self.k, tensor.shape[0] if tensor.dim() == 3 else 1)
            self.positions[name] = pos
            self.values[name] = gather(tensor, pos)
            yield name, tensor


def verify_sync(tap: WeightTap, engine: Any, *, engine_name: str, version: int, what: str = "") -> int | None:
    """Compare what ``tap`` saw with what ``engine`` holds (:class:`StaleWeightsError` naming the tensors that differ);
    the number of tensors verified, None when the engine cannot be asked. ``what`` follows the engine's name."""
    sample = getattr(engine, "sample_weights", None)
    if sample is None:
        return None
    held = sample(tap.positions)
    if held is None:  # the engine cannot report these tensors in this set-up (e.g. sharded over TP ranks)
        return None
    compare_samples(tap.values, held, version=version, where=f"the rollout engine {engine_name!r}{what}")
    return len(tap.values)


def compare_samples(sent: dict[str, torch.Tensor], held: dict[str, torch.Tensor], *, version: int, where: str) -> None:
    """Raise :class:`StaleWeightsError` unless ``held`` has every tensor of ``sent`` with equal elements (after
    casting the sent ones to the held dtype); ``where`` names the holder (an engine, a pool and rank)."""
    stale = []
    for name, values in sent.items():
        got = held.get(name)
        if got is None:
            stale.append(f"{name} (the engine does not report it)")
            continue
        want = values.to(got.dtype)
        if not torch.equal(want, got):
            diff = float((want.double() - got.double()).abs().max()) if want.shape == got.shape else float("nan")
            stale.append(f"{name} (fingerprint sent {fingerprint(name, want):.6g}, held {fingerprint(name, got):.6g}; max |diff| {diff:.3g})")
    if stale:
        raise StaleWeightsError(
            f"weight sync check failed at weight version {version}: {where} kept stale weights: "
            f"{len(stale)} of {len(sent)} tensors differ from what the trainer sent: {_first_four(stale)}. "
            "It would keep sampling an old policy; the run is stopped instead (a bug of the engine or its weight "
            "conversion: report it with this message)"
        )


def verify_sent(tap: WeightTap, expected: dict[str, torch.Tensor] | None, *, engine_name: str, version: int,
                rtol: float = 1e-4, atol: float = 1e-6) -> int | None:
    """Compare what ``tap`` saw on its way out with ``expected``, the trainer's policy at the same positions computed
    apart from the stream (e.g. LoRA's ``W + scale * B @ A``): unmerged adapters or an old copy raise
    :class:`StaleWeightsError`. Within ``rtol`` / ``atol``, and at least one rounding step of a 16-bit sent dtype;
    the count, or None when ``expected`` is None."""
    if expected is None:
        return None
    wrong = []
    for name, sent in tap.values.items():
        want = expected.get(name)
        if want is None:
            wrong.append(f"{name} (the trainer has no such weight)")
        elif not torch.allclose(sent.float(), want.float(), rtol=max(rtol, torch.finfo(sent.dtype).eps if sent.is_floating_point() else 0.0), atol=atol):
            diff = float((sent.double() - want.double()).abs().max())
            wrong.append(f"{name} (fingerprint sent {fingerprint(name, sent.float()):.6g}, trained {fingerprint(name, want.float()):.6g}; max |diff| {diff:.3g})")
    if wrong:
        raise StaleWeightsError(
            f"weight sync check failed at weight version {version}: the weights sent to the rollout engine {engine_name!r} "
            f"are not the policy being trained (LoRA adapters not merged, or an old copy): {len(wrong)} of {len(tap.values)} "
            f"tensors differ: {_first_four(wrong)}. The rollout would sample another policy; the run is stopped instead"
        )
    return len(tap.values)


def load_verified(engine: Any, weights: Iterable[tuple[str, torch.Tensor]], trainer_sample=None, *, engine_name: str, version: int,
                  load=None) -> int | None:
    """``(load or engine.load_weights)(weights)``, verified when the engine has ``sample_weights``: it holds what was
    sent (:func:`verify_sync`), and what was sent is ``trainer_sample(positions)`` (:func:`verify_sent`; None: not
    compared). The number of tensors verified, or None when the engine cannot be asked."""
    tap = WeightTap(weights) if hasattr(engine, "sample_weights") else None
    (load or engine.load_weights)(weights if tap is None else tap)
    if tap is None:
        return None
    n = verify_sync(tap, engine, engine_name=engine_name, version=version)
    if trainer_sample is not None:
        verify_sent(tap, trainer_sample(tap.positions), engine_name=engine_name, version=version)
    return n


def sample_state(named: Iterable[tuple[str, torch.Tensor]], positions: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An engine's ``sample_weights`` over its own named tensors (e.g. ``model.state_dict()``)."""
    named = dict(named)
    return {name: gather(named[name], pos) for name, pos in positions.items() if name in named}


#: HF module names an engine fuses into one parameter (vLLM's and SGLang's ``packed_modules_mapping`` for llama-like models)
FUSED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}


def fused_location(params: dict[str, torch.Tensor], name: str, hf_shapes: dict[str, tuple[int, ...]],
                   packed: dict[str, list[str]] | None = None) -> tuple[str, torch.Tensor, int] | None:
    """Where an engine keeps HF weight ``name``: ``(module name, parameter, first row)`` in ``params`` under the same
    name, under ``<module>.base_layer.<leaf>`` (LoRA-wrapped), or in the fused parameter ``packed`` maps it to (rows
    after the earlier parts', from ``hf_shapes``); None when the engine has no such weight."""
    module, _, leaf = name.rpartition(".")
    held = _param(params, module, leaf)
    if held is not None:
        return module, held, 0
    prefix, _, last = module.rpartition(".")
    for fused, parts in (packed or FUSED).items():
        if last in parts:
            held = _param(params, f"{prefix}.{fused}", leaf)
            if held is None:
                return None
            return f"{prefix}.{fused}", held, sum(hf_shapes.get(f"{prefix}.{q}.{leaf}", (0,))[0] for q in parts[: parts.index(last)])
    return None


def cut_rows(held: torch.Tensor, offset: int, shape: tuple[int, ...]) -> torch.Tensor:
    """HF tensor of ``shape`` inside engine parameter ``held`` from row ``offset`` (padded vocabularies: cut)."""
    return held[offset : offset + shape[0]] if len(shape) == 1 else held[offset : offset + shape[0], : shape[1]]


def _param(params: dict[str, torch.Tensor], module: str, leaf: str) -> torch.Tensor | None:
    for key in (f"{module}.{leaf}", f"{module}.base_layer.{leaf}"):
        if key in params:
            return params[key].detach()
    return None


def _first_four(problems: list[str]) -> str:
    """The first four tensors named in a sync-check error, and how many more."""
    return "; ".join(problems[:4]) + (f"; and {len(problems) - 4} more" if len(problems) > 4 else "")
