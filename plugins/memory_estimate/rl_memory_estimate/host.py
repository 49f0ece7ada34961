"""Host (CPU) memory of a GPU run, per node: what CPU offload, sleep and the model load keep in RAM.

The terms and their formulas: docs/memory.md, "Host memory".
"""

from __future__ import annotations

from typing import Any

import attrs
from rl_core.rollout.sleep_policy import keeps_through_sleep, threshold_of
from rl_core.plan.memory import DTYPE_BYTES, device_memory

GB = 2**30
HOST_RUNTIME_GB = 4.0  # a GPU process's own resident memory (python, torch, CUDA libraries, tokenizer, data)
EXPORT_SHARD_BYTES = 5 * 10**9  # rl_core.train_engine.hf_export.MAX_SHARD_BYTES


@attrs.frozen(kw_only=True)
class HostEstimate:
    terms: dict[str, float]  # bytes per node, held through training
    load: float  # bytes per node while the models are built on the host
    available: float | None  # the node's RAM
    export: float = 0.0  # the final model (hf_final) held on the host while it is written (a shard), on top of the terms
    checkpoint: float = 0.0  # a checkpoint's copies of the device-resident train state (trainer.save_freq > 0), on top of the terms

    @property
    def peak(self) -> float:
        return max(self.load, self.terms_total + self.export, self.terms_total + self.checkpoint)

    @property
    def terms_total(self) -> float:
        return sum(self.terms.values())

    @property
    def fits(self) -> bool | None:
        return None if self.available is None else self.peak <= self.available

    def lines(self) -> list[str]:
        g = lambda b: f"{b / GB:6.2f} GiB"  # noqa: E731
        out = ["host memory estimate, per node:"]
        out += [f"  {k:<58} {g(v)}" for k, v in self.terms.items() if v]
        out += [f"  peak while loading the model(s) on the host              {g(self.load)}",
                f"  peak while training                                        {g(self.terms_total)}",
                f"  peak while writing the final model (hf_final, by shards)   {g(self.terms_total + self.export)}"]
        if self.checkpoint:
            out.append(f"  peak while writing a checkpoint (DCP)                      {g(self.terms_total + self.checkpoint)}")
        if self.available is not None:
            out.append(f"  peak {self.peak / GB:.2f} GiB vs {self.available / GB:.1f} GiB RAM: {'fits' if self.fits else 'does NOT fit'}")
        return out


def host_ram() -> float | None:
    """This machine's RAM in bytes (``MemTotal`` of /proc/meminfo; sysconf elsewhere)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        import os

        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def host_estimate(config: Any, shape: Any, *, world_size: int = 1, available: float | None = None, features: Any = None) -> HostEstimate:
    """The estimate for a config whose device is a GPU (``shape``: :class:`rl_core.plan.memory.ModelShape`;
    ``features``: the plan's, :class:`rl_core.plan.features.Features`: LoRA's adapter count)."""
    m, t = config.model, config.trainer
    P = shape.params
    c = DTYPE_BYTES.get(m.dtype, 4)
    k = max(1, int(getattr(t, "n_gpus_per_node", 1) or 1))
    S = max(1, int(world_size))
    own = features.actor_terms(config, shape, S, c) if features is not None else None
    lora = own is not None and own.frozen_base  # the base frozen in the compute dtype, A parameters trained
    A = own.trainable if lora else 0
    terms: dict[str, float] = {"process runtime (python, torch, CUDA libraries)": k * HOST_RUNTIME_GB * GB}
    offload = features.hook(config, "host_terms") if features is not None else None  # rl-offload
    held, on_host = offload(config, P=P, A=A, c=c, k=k, S=S, lora=lora) if offload is not None else ({}, 0)
    terms.update(held)
    if _rollout_sleeps_to_host(config, shape, c, lora):
        terms["hf rollout weights asleep in host memory (rollout.enable_sleep)"] = k * c * P
    load = terms["process runtime (python, torch, CUDA libraries)"] + k * ((c if lora else 4) * P)
    export = export_bytes(config, P, A, c, lora)
    checkpoint = 0.0
    if (t.save_freq or 0) > 0:  # what a rank's DCP save copies to the host (module docstring)
        per = 12 * A if lora else 12 * P - on_host
        if getattr(config.critic, "enable", False):
            per += 12 * P
        checkpoint = k * per / S
    return HostEstimate(terms=terms, load=load, available=available, export=export, checkpoint=checkpoint)


def export_bytes(config: Any, P: int, A: int, c: int, lora: bool) -> float:
    """Host bytes save_hf holds at once beyond training (rank 0): a shard of the weights it writes and safetensors'
    serialized copy of it (see the module's docstring)."""
    shard = lambda total: 2 * min(total, EXPORT_SHARD_BYTES)  # noqa: E731
    if not lora:
        return shard(4 * P)
    return max(2 * 4 * A, shard(c * P) if config.trainer.save_merged_lora else 0)


def _rollout_sleeps_to_host(config: Any, shape: Any, c: int, lora: bool) -> bool:
    """The hf rollout moves its weights to the host while the trainer works (not kept through sleep; not LoRA adapter sync)."""
    r = config.rollout
    if r.name != "hf" or not r.enable_sleep:
        return False
    if lora and r.lora_sync != "merged":
        return False
    total = device_memory("cuda")
    return total is None or not keeps_through_sleep(c * shape.params, total, threshold_of(r.engine_kwargs))
