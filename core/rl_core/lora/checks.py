"""`rlcore check` / `train` probes for ``model.lora_*`` and ``actor.fsdp_config.*_offload`` (issue #32).

Pure functions ``probe(config, registry) -> list[Problem]`` that never raise:

- :func:`lora_problems`: the LoRA keys are consistent (an adapter folder or ``trainer.save_merged_lora`` with
  ``lora_rank=0`` would be ignored: refused), ``target_modules`` / ``exclude_modules`` name linear layers of the model (built on the meta device
  from its ``config.json``: no weights read), the adapter folder is a LoRA adapter of the configured rank; and a
  train backend whose card does not declare ``lora`` refuses ``lora_rank > 0`` instead of silently ignoring it.
- :func:`offload_problems`: the same for parameter / optimizer offload (card ``offload``); on several ranks the
  fsdp backend uses FSDP2's ``CPUOffloadPolicy``.
- :func:`memory_problems`: a full fine-tune whose train states alone exceed the GPU is refused, naming which of
  LoRA or offload would fit (e.g. Qwen2.5-7B on one 80 GB GPU).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rl_core.cards import CheckCard
from rl_core.hookspecs import hookimpl
from rl_core.problems import Problem
from rl_core.config.normalize import normalize
from rl_core.lora import ALL_LINEAR, LoraError, LoraSpec, check_adapter_folder, linear_names, target_names, target_problems
from rl_core.plan.probes import pickled_weights_problem
from rl_core.lora.memory import actor_terms
from rl_core.models import cache_dir
from rl_core.plan.memory import GB, device_memory, model_shape
from rl_core.plan.memory import estimate
from rl_core.plan.memory_host import host_estimate, host_ram

def _train_card(config: Any, registry: Any):
    """The train card the run would use (None when it cannot be told)."""
    if registry is None:
        from rl_core.plugins import get_registry

        registry = get_registry()
    cards = registry.cards["train"]
    if config.train.name is not None:
        return cards.get(config.train.name)
    chosen = [c for c in cards.values() if c.default] or (list(cards.values()) if len(cards) == 1 else [])
    return chosen[0] if len(chosen) == 1 else None  # as rl_core.plan.resolver.default_train_name picks it


def _unsupported(config: Any, registry: Any, feature: str) -> str | None:
    """The train backend's name when its card does not declare ``feature`` (``lora`` / ``offload``)."""
    try:
        card = _train_card(config, registry)
    except Exception:  # noqa: BLE001 - the resolver reports an unknown train backend
        return None
    return card.name if card is not None and not getattr(card, feature, False) else None


def _capable(registry: Any, feature: str) -> str:
    """``train.name=<a card that declares feature>`` (or the words for none installed)."""
    if registry is None:
        from rl_core.plugins import get_registry

        registry = get_registry()
    names = sorted(c.name for c in registry.cards["train"].values() if getattr(c, feature, False))
    return "train.name=" + " or ".join(names) if names else "a train backend that declares it (none installed)"


def _model_dir(path: str) -> Path | None:
    if path.startswith("builtin:"):
        folder = cache_dir() / "models" / path.split(":", 1)[1]
    else:
        folder = Path(os.path.expanduser(path))
    return folder if (folder / "config.json").is_file() else None


def meta_model(path: str, override: dict[str, Any] | None = None, trust_remote_code: bool = False):
    """The model of the folder ``path`` built on the meta device (its modules, no memory); None without a local config.json."""
    folder = _model_dir(path)
    if folder is None:
        return None
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(str(folder), trust_remote_code=trust_remote_code, **(override or {}))
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(cfg, trust_remote_code=trust_remote_code)


def lora_problems(config: Any, registry: Any = None) -> list[Problem]:
    m = config.model
    out: list[Problem] = []
    if m.lora_rank == 0:
        if m.lora_adapter_path:
            out.append(Problem(key="model.lora_adapter_path", what=f"is set ({m.lora_adapter_path!r}) but model.lora_rank is 0 (LoRA off): the adapter would be ignored",
                               fix="set model.lora_rank to the adapter's rank, or remove model.lora_adapter_path"))
        if config.trainer.save_merged_lora:
            out.append(Problem(key="trainer.save_merged_lora", what="is true but model.lora_rank is 0 (LoRA off): there are no adapters to merge "
                               "(a full fine-tune's hf_final is the model's own weights)", fix="remove trainer.save_merged_lora, or set model.lora_rank"))
        return out

    spec = LoraSpec.from_model_config(m)
    adapter: dict[str, Any] | None = None
    if spec.adapter_path:
        try:
            adapter = check_adapter_folder(spec)
        except LoraError as exc:
            out.append(Problem(key="model.lora_adapter_path", what=str(exc).split(": ", 1)[-1], fix="point it at a folder written by save_pretrained of a LoRA adapter"))
        else:
            out += _adapter_weight_problems(Path(os.path.expanduser(spec.adapter_path)))
    try:
        model = meta_model(m.path, m.override_config, m.trust_remote_code)
        found = [] if model is None else target_problems(model, spec) + rank_problems(model, spec) + _adapter_fit(model, adapter)
    except Exception as exc:  # noqa: BLE001 - the model-folder probes report an unreadable config
        out.append(Problem(key="model.target_modules", severity="warning", what=f"not checked: the model could not be built from its config.json ({type(exc).__name__}: {exc})"))
        found = []
    out += [Problem(key=k, what=w, fix=f) for k, w, f in found]
    if (backend := _unsupported(config, registry, "lora")) is not None:
        out.append(Problem(key="model.lora_rank", what=f"is {m.lora_rank}, but the {backend} train backend does not train LoRA adapters",
                           why="the run would train every weight and ignore the adapters' settings",
                           fix=f"use {_capable(registry, 'lora')}, or model.lora_rank=0 (full fine-tune)"))
    return out + lora_sync_problems(config, registry)


def rank_problems(model: Any, spec: LoraSpec) -> list[tuple[str, str, str]]:
    """A rank above every targeted layer's smaller side (A: r x in, B: out x r) adds memory and compute, never capacity:
    refused. (Above only some layers' width, e.g. narrow grouped-query k/v projections, it is common and allowed.)"""
    targets = set(target_names(model, spec))
    widths = {n: min(mod.in_features, mod.out_features) for n, mod in model.named_modules() if n in targets and hasattr(mod, "in_features")}
    if not widths or spec.rank <= max(widths.values()):
        return []
    widest = max(widths, key=widths.get)
    return [("model.lora_rank", f"is {spec.rank}, larger than every targeted layer: the widest, {widest}, is {widths[widest]} on its smaller side, "
             "so the extra rank adds memory and compute but no capacity (an update's rank cannot exceed it)",
             f"set model.lora_rank <= {widths[widest]} (8 to 64 is usual)")]


def _adapter_fit(model: Any, adapter: dict[str, Any] | None) -> list[tuple[str, str, str]]:
    """An adapter folder whose target modules are not linear layers of this model (another architecture's adapter)."""
    if not adapter:
        return []
    wanted = adapter.get("target_modules") or []
    wanted = [wanted] if isinstance(wanted, str) else wanted
    leaves = set(linear_names(model).values())
    missing = [t for t in wanted if isinstance(t, str) and t != ALL_LINEAR and t.rsplit(".", 1)[-1] not in leaves]
    if not missing:
        return []
    return [("model.lora_adapter_path", f"holds an adapter for the modules {missing}, which are not linear layers of {model.config.model_type!r} "
             f"({', '.join(sorted(leaves))}): it was trained on another model", "use an adapter trained on this model (model.path)")]


def _adapter_weight_problems(folder: Path) -> list[Problem]:
    """Adapter weights as peft reads them: a pickled ``adapter_model.bin`` must hold plain tensors (checked without running it)."""
    if (folder / "adapter_model.safetensors").is_file() or not (folder / "adapter_model.bin").is_file():
        return []
    why = pickled_weights_problem(folder / "adapter_model.bin")
    return [] if why is None else [Problem(key="model.lora_adapter_path", what=f"{folder / 'adapter_model.bin'} {why}",
                                           fix="use an adapter saved as adapter_model.safetensors, or delete the file if you did not put it there")]


def lora_sync_problems(config: Any, registry: Any = None) -> list[Problem]:
    """``rollout.lora_sync=adapter`` needs a rollout engine whose card declares ``lora_adapters``."""
    if config.model.lora_rank == 0 or config.rollout.lora_sync != "adapter":
        return []
    if registry is None:
        from rl_core.plugins import get_registry

        registry = get_registry()
    cards = registry.cards["rollout"]
    card = cards.get(config.rollout.name)
    if card is None or card.lora_adapters:
        return []
    able = sorted(c.name for c in cards.values() if c.lora_adapters)
    return [Problem(key="rollout.lora_sync", what=f"is 'adapter', but the {card.name} rollout engine has no LoRA adapter API",
                    why="the engine can only load whole weights",
                    fix="set rollout.lora_sync=merged (or auto)" + (f", or use rollout.name={' or '.join(able)}" if able else ""))]


def offload_problems(config: Any, registry: Any = None) -> list[Problem]:
    keys = [f"{role}.fsdp_config.{k}" for role in ("actor", "critic") for k in ("param_offload", "optimizer_offload", "offload_policy")
            if getattr(getattr(getattr(config, role), "fsdp_config", None), k, False)]
    if not keys:
        return []
    out = []
    if (backend := _unsupported(config, registry, "offload")) is not None:
        out += [Problem(key=k, what=f"is true, but the {backend} train backend does not offload to host memory",
                        why="the run would keep everything on the device and ignore the setting", fix=f"use {_capable(registry, 'offload')}, or set {k}=false")
                for k in keys]
    return out


def memory_problems(config: Any, registry: Any = None, *, available: float | None = None) -> list[Problem]:
    """A full fine-tune whose train states alone (float32 weights, AdamW, gradients) exceed the GPU's memory can
    never run, whatever the batch sizes: refused, naming which of LoRA or CPU offload would fit (rl_core.lora.memory).
    ``available``: the GPU's bytes (default: this machine's GPU; nothing is checked without one)."""
    if config.trainer.device == "cpu" or config.model.lora_rank > 0:
        return []

    config, sizes, _ = normalize(config)
    if sizes is None or sizes.device == "cpu":
        return []
    rm_card = registry.cards["reward_model"].get(config.reward_model.name) if registry is not None and config.reward_model.enable else None
    est = estimate(config, sizes, available=available, reward_model=rm_card)
    if est is None or est.available is None or est.fits is not False:
        return []
    terms = actor_terms(config, est.shape, sizes.world_size if sizes.world_size > 1 else 1, 4)
    need = sum(terms.states.values()) + sum(terms.update.values())
    if need <= est.available:
        return []
    fits = [a.split(" (not wired")[0] for a in est.advice if a.startswith(("LoRA: ", "offload: "))]
    return [Problem(key="model.lora_rank", what=f"is 0 (full fine-tune): {est.shape.params / 1e9:.1f}B parameters need {need / GB:.0f} GiB per GPU for their train states alone "
                    f"(float32 weights, AdamW state, gradients) but the GPU has {est.available / GB:.0f} GiB",
                    why="no batch size makes it fit", fix="; or ".join(fits) + "; or more GPUs (trainer.n_gpus_per_node)")]


def host_memory_problems(config: Any, registry: Any = None, *, available: float | None = None) -> list[Problem]:
    """A GPU run whose host-memory estimate (rl_core.plan.memory_host: offloaded state, the model load, the rollout
    asleep) exceeds the node's RAM would be ended by the OOM killer mid-run: refused, naming what to change.
    ``available``: the node's RAM in bytes (default: this machine's, when this machine has a GPU, i.e. the run is
    for here; ``rlcore check --target gpu:1x80GB,ram=128GB`` passes the target's)."""

    if config.trainer.device == "cpu":
        return []
    if available is None:
        if device_memory("cuda") is None:  # no GPU here: the config is for another machine (--target ...,ram= checks it)
            return []
        available = host_ram()
    config, sizes, _ = normalize(config)
    shape = model_shape(config.model.path, config.model.override_config)
    if sizes is None or sizes.device == "cpu" or shape is None or available is None:
        return []
    est = host_estimate(config, shape, world_size=sizes.world_size, available=available)
    if est.fits is not False:
        return []
    f = config.actor.fsdp_config
    switches = [f"actor.fsdp_config.{k}" for k in ("optimizer_offload", "param_offload", "offload_policy") if getattr(f, k, False)]
    fixes = []
    if config.model.lora_rank == 0:
        import attrs

        alt = attrs.evolve(config, model=attrs.evolve(config.model, lora_rank=32, lora_alpha=64.0, target_modules="all-linear"))
        fixes.append(f"LoRA (model.lora_rank=32 model.lora_alpha=64: host peak {host_estimate(alt, shape, world_size=sizes.world_size).peak / GB:.0f} GiB)")
    if switches:
        fixes.append(f"{' / '.join(f'{k}=false' for k in switches)} if the GPU holds the state (see the device estimate)")
    if config.rollout.enable_sleep:
        fixes.append("rollout.enable_sleep=false (the rollout keeps its weights on the GPU)")
    fixes.append(f"a node with at least {est.peak / GB:.0f} GiB of RAM")
    biggest = max(est.terms, key=est.terms.get)
    return [Problem(key=switches[0] if switches else "trainer.n_gpus_per_node",
                    what=f"the run needs about {est.peak / GB:.0f} GiB of host memory per node (largest: {biggest}, {est.terms[biggest] / GB:.0f} GiB) "
                         f"but the node has {available / GB:.0f} GiB of RAM",
                    why="the host's OOM killer would end the run partway (rl_core.plan.memory_host)", fix="; or ".join(fixes))]


PROBES = (("files", lora_problems), ("rules", offload_problems), ("values", memory_problems), ("values", host_memory_problems))


def lora_and_offload_problems(config: Any, registry: Any = None) -> list[Problem]:
    """Both checks, registered below as one (``lora_and_offload``)."""
    return lora_problems(config, registry) + offload_problems(config, registry) + memory_problems(config, registry) + host_memory_problems(config, registry)


@hookimpl
def rl_core_register_checks(register) -> None:
    register(CheckCard(name="lora_and_offload", stage="values", order=40, factory=f"{__name__}:lora_and_offload_problems",
                       description="model.lora_* and actor.fsdp_config.*_offload: what the engines apply"))
