"""LoRA adapters merged in place into the hf rollout's own weights (issue #32, ``rollout.lora_sync=adapter``).

The trainer's base weights are frozen: after the start-up sync (the base, once) only the adapters change. Each
sync then rewrites only the LoRA-targeted weights of the rollout's model, one GEMM per weight on its device:
``W_rollout = W_base + scale * B @ A`` (``torch.addmm`` into the parameter's storage: no float32 copy of any
weight, no per-element Python work; the static decoder's packed q / k / v slices and captured graphs keep
reading the same storage). ``A`` and ``B`` are cast to the rollout's dtype first, as the trainer's own
mixed-precision forward casts them. On a CPU a 16-bit weight is merged through one float32 temporary (16-bit
GEMMs there measured ~10x slower than float32 on 2 cores without bf16 units): the same sums, one rounding.

``W_base`` is the tensor the base sync (``HFRolloutEngine.load_base_weights``) sent when it already has the
parameter's device and dtype (the trainer's frozen base itself: nothing is copied or kept twice); otherwise a copy
of the parameter taken before the first merge (then the rollout holds the base twice for the targeted weights).
Tensors of any other ``load_weights`` (a split-pool transfer, a merged sync) are never kept.

What the sync check (:mod:`rl_core.weight_sync_check`) asks of it: the adapters it merged (exactly as sent,
in its dtype) and the merged weights (:meth:`InPlaceLora.merged_numels` names them; compared with the
trainer's ``W + scale * B . A``).
"""

from __future__ import annotations

from typing import Any

import torch

PREFIX = "base_model.model."
A_SUFFIX, B_SUFFIX = ".lora_A.weight", ".lora_B.weight"


class InPlaceLora:
    """The adapter state of one rollout model (see the module docstring)."""

    def __init__(self) -> None:
        self.bases: dict[str, torch.Tensor] = {}  # HF weight name -> the frozen base weight
        self.adapter: dict[str, torch.Tensor] = {}  # peft name -> the tensor merged (rollout dtype / device)
        self.targets: dict[str, int] = {}  # HF weight names merged -> numel
        self.shapes: dict[str, tuple[int, ...]] = {}  # and their shapes
        self.scale = 1.0
        self.version: int | None = None
        self.owned: set[str] = set()  # bases this object copied (the others are the trainer's tensors)

    def remember(self, name: str, src: torch.Tensor | None, dst: torch.Tensor) -> None:
        """A sync wrote ``src`` into parameter ``dst``: keep ``src`` as the base when it can serve as one (None: a
        sync of other weights than the frozen base; the parameter's own copy serves, taken at the next merge)."""
        if src is not None and src.device == dst.device and src.dtype == dst.dtype and src.data_ptr() != dst.data_ptr():
            self.bases[name] = src.detach()
            self.owned.discard(name)
        else:  # the parameter itself holds the base until the first merge copies it (or it is the trainer's tensor)
            self.bases.pop(name, None)
            self.owned.discard(name)
        self.targets.pop(name, None)

    @torch.no_grad()
    def load(self, params: dict[str, torch.Tensor], tensors: dict[str, torch.Tensor], peft_config: dict[str, Any], version: int) -> bool:
        """Merge ``tensors`` (peft names, ``lora_A`` / ``lora_B`` per module) into ``params`` (the model's
        ``state_dict(keep_vars=True)``). True when a parameter got new storage (captured graphs must be dropped)."""
        scale = float(peft_config.get("lora_alpha", peft_config["r"])) / float(peft_config["r"])
        pairs = _pairs(tensors)
        moved = False
        held: dict[str, torch.Tensor] = {}
        targets: dict[str, int] = {}
        for module, (a_name, b_name) in pairs.items():
            key = module.removeprefix(PREFIX) + ".weight"
            dst = params.get(key)
            if dst is None:
                raise KeyError(f"load_adapter: adapter {module!r} targets {key!r}, which the rollout model has no weight of "
                               f"(its names look like {', '.join(list(params)[:3])}, ...): is the trainer's model the same architecture?")
            a = tensors[a_name].to(device=dst.device, dtype=dst.dtype)
            b = tensors[b_name].to(device=dst.device, dtype=dst.dtype)
            if tuple(b.shape[:1]) + tuple(a.shape[1:]) != tuple(dst.shape) or b.shape[1] != a.shape[0]:
                raise ValueError(f"load_adapter: {module!r}: B {tuple(b.shape)} @ A {tuple(a.shape)} does not make the weight's shape {tuple(dst.shape)}")
            base = self.bases.get(key)
            if base is None:  # the parameter still holds the base the base sync wrote: keep a copy of it
                base = self.bases[key] = dst.detach().clone()
                self.owned.add(key)
            elif base.data_ptr() == dst.data_ptr():  # the rollout adopted the trainer's tensor (share_weights): never write into it
                dst.data = torch.empty_like(base)
                moved = True
            if dst.device.type == "cpu" and dst.dtype != torch.float32:  # CPUs without 16-bit GEMM units: ~10x slower than float32
                dst.data.copy_(torch.addmm(base.float(), b.float(), a.float(), alpha=scale))  # the same sums, one rounding
            else:
                torch.addmm(base, b, a, alpha=scale, out=dst.data)
            held[a_name], held[b_name] = a, b
            targets[key] = dst.numel()
            self.shapes[key] = tuple(dst.shape)
        self.adapter, self.targets, self.version, self.scale = held, targets, version, scale
        return moved

    def release(self, params: dict[str, torch.Tensor]) -> int:
        """Sleep: free the weights this object can rebuild (the merged ones; those that are the trainer's frozen
        tensors) instead of copying them to host memory. The number of weights freed; :meth:`restore` undoes it."""
        n = 0
        for key in [*self.targets, *self._borrowed_plain()]:
            p = params[key]
            p.data = torch.empty(0, dtype=p.dtype, device=p.device)
            n += 1
        return n

    @torch.no_grad()
    def restore(self, params: dict[str, torch.Tensor], device: torch.device) -> None:
        """Wake-up: the trainer's frozen tensors back in place (no copy), the merged weights rebuilt from the base
        and the adapters held (one GEMM each, on ``device``)."""
        for key in self._borrowed_plain():
            if params[key].numel() == 0:
                params[key].data = self.bases[key]
        if not self.targets:
            return
        for key, shape in self.shapes.items():
            if key in self.targets and params[key].numel() == 0:
                params[key].data = torch.empty(shape, dtype=params[key].dtype, device=device)
        self.load(params, self.adapter, {"r": 1, "lora_alpha": self.scale}, self.version)

    def _borrowed_plain(self) -> list[str]:
        """Weights that are not merged and whose base is the trainer's tensor (the rollout can point at it)."""
        return [k for k in self.bases if k not in self.owned and k not in self.targets]

    def to(self, device: torch.device | str) -> None:
        """Sleep / wake-up: the copies this object owns follow the model (the trainer's tensors stay where they are)."""
        self.adapter = {k: v.to(device) for k, v in self.adapter.items()}
        self.bases = {k: v.to(device) if k in self.owned else v for k, v in self.bases.items()}

    def sleep(self, params: dict[str, torch.Tensor]) -> None:
        """The hf rollout's sleep: :meth:`release` what can be rebuilt, the owned copies to the host."""
        self.release(params)
        self.to("cpu")

    def wake(self, params: dict[str, torch.Tensor], device: torch.device) -> None:
        """The hf rollout's wake-up: the owned copies back on ``device``, then :meth:`restore`."""
        self.to(device)
        self.restore(params, device)

    def merged_numels(self) -> dict[str, int]:
        """The rollout's weights the last :meth:`load` rewrote (HF names) and their sizes."""
        return dict(self.targets)


def _pairs(tensors: dict[str, torch.Tensor]) -> dict[str, tuple[str, str]]:
    """module name -> (its lora_A name, its lora_B name); an A without its B (or the reverse) raises."""
    out: dict[str, tuple[str, str]] = {}
    for name in tensors:
        if name.endswith(A_SUFFIX):
            module = name[: -len(A_SUFFIX)]
            if module + B_SUFFIX not in tensors:
                raise KeyError(f"load_adapter: {name!r} has no {module + B_SUFFIX!r} beside it")
            out[module] = (name, module + B_SUFFIX)
        elif name.endswith(B_SUFFIX):
            if name[: -len(B_SUFFIX)] + A_SUFFIX not in tensors:
                raise KeyError(f"load_adapter: {name!r} has no {name[: -len(B_SUFFIX)] + A_SUFFIX!r} beside it")
        else:
            raise KeyError(f"load_adapter: {name!r} is not a LoRA adapter tensor (names end in {A_SUFFIX} or {B_SUFFIX})")
    if not out:
        raise ValueError("load_adapter: no adapters were sent")
    return out
