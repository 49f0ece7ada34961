"""`rlcore check` / `train` probes for ``model.lora_*`` (issue #32): rl-lora's check (``lora``).

Pure functions ``probe(config, registry) -> list[Problem]`` that never raise:

- :func:`lora_problems`: the LoRA keys are consistent (an adapter folder or ``trainer.save_merged_lora`` with
  ``lora_rank=0`` would be ignored: refused), ``target_modules`` / ``exclude_modules`` name linear layers of the model (built on the meta device
  from its ``config.json``: no weights read), the adapter folder is a LoRA adapter of the configured rank; and a
  train backend whose card does not declare ``lora`` refuses ``lora_rank > 0`` instead of silently ignoring it.
- :func:`lora_sync_problems`: ``rollout.lora_sync=adapter`` needs a rollout engine with a LoRA adapter API.

What fits the memory is rl-memory-estimate's check (:mod:`rl_memory_estimate.checks`), which reads LoRA's terms through
rl-lora's feature card; offload's check is rl-offload's.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rl_core.plan.builtin_model import cache_dir
from rl_core.plan.probes import pickled_weights_problem
from rl_core.problems import Problem

from rl_lora.adapters import ALL_LINEAR, LoraError, LoraSpec, check_adapter_folder, linear_names, target_names, target_problems


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

