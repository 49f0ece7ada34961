"""LoRA adapters on a Hugging Face causal LM, from ``model.lora_*`` (issue #32, docs/lora.md).

Built on the ``peft`` library (``pip install rl-lora`` brings it):

- :func:`apply_lora` wraps a model: the base weights are frozen and cast to the compute dtype (no float32
  master copy, no optimizer state, no gradients for them); only the adapters (float32) are trainable.
  ``target_modules="all-linear"`` means what it means in peft: every linear layer except the LM head.
  ``model.lora_adapter_path`` starts from a saved PEFT adapter folder instead of fresh adapters.
- :func:`adapters_disabled`: the reference policy is the same model with its adapters off (no second copy).
- :func:`adapter_state_dict`: the adapters alone, under peft's names (what an engine with LoRA support loads);
  :func:`merged_state_dict`: the base model's own names and shapes with ``W + scale * B @ A`` folded in, for
  rollout engines without LoRA support. Neither changes the model.
- :func:`save_adapter`: a PEFT adapter folder (``save_pretrained``), and on request the merged weights beside it.

The fsdp train backend applies it to the actor (``plugins/train_fsdp``): :func:`iter_merged` is its weight sync,
:func:`sample_effective` the trainer's side of the sync check (:mod:`rl_core.weight_sync_check`),
:func:`write_adapter_folder` its ``save_hf``.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
from pathlib import Path
from typing import Any, Iterator

import attrs
import torch
from rl_core.modeling import adapter_folder_base  # noqa: F401  (a PEFT folder's base: core's model-path check reads it too)
from rl_core.problems import UserError, did_you_mean

ALL_LINEAR = "all-linear"
ADAPTER_NAME = "default"
INSTALL = "pip install rl-lora (installs peft)"


class LoraError(UserError):
    """A LoRA setting or adapter folder that cannot be used."""


@attrs.frozen(kw_only=True)
class LoraSpec:
    """The ``model.lora_*`` keys of a config."""

    rank: int
    alpha: float
    target_modules: str | tuple[str, ...] = ALL_LINEAR
    exclude_modules: tuple[str, ...] = ()
    dropout: float = 0.0
    adapter_path: str | None = None

    @classmethod
    def from_model_config(cls, m: Any) -> LoraSpec:
        targets = m.target_modules if isinstance(m.target_modules, str) else tuple(m.target_modules)
        return cls(rank=int(m.lora_rank), alpha=float(m.lora_alpha), target_modules=targets,
                   exclude_modules=tuple(m.exclude_modules or ()), dropout=float(m.lora_dropout), adapter_path=m.lora_adapter_path)

    @property
    def enabled(self) -> bool:
        return self.rank > 0

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


def _peft():
    try:
        import peft
    except ImportError as exc:
        raise LoraError(f"model.lora_rank > 0 needs the peft library, which is not installed: {INSTALL}") from exc
    return peft


# ------------------------------------------------------------------ which modules get adapters
def _is_linear(module: torch.nn.Module) -> bool:
    return isinstance(module, torch.nn.Linear)


def _output_layer_names(model: torch.nn.Module) -> set[str]:
    """The LM head's module name (peft's all-linear leaves it out)."""
    out = set()
    get = getattr(model, "get_output_embeddings", None)
    head = get() if callable(get) else None
    for name, module in model.named_modules():
        if head is not None and module is head:
            out.add(name)
    return out or {"lm_head"}


def _matches(name: str, wanted: str) -> bool:
    return name == wanted or name.endswith("." + wanted)


def linear_names(model: torch.nn.Module) -> dict[str, str]:
    """Every linear module's full name -> its last name part (``model.layers.0.self_attn.q_proj`` -> ``q_proj``)."""
    return {name: name.rsplit(".", 1)[-1] for name, module in model.named_modules() if name and _is_linear(module)}


def target_names(model: torch.nn.Module, spec: LoraSpec) -> list[str]:
    """Full names of the modules that get adapters, as peft picks them."""
    linears = linear_names(model)
    if spec.target_modules == ALL_LINEAR:
        heads = _output_layer_names(model)
        picked = [n for n in linears if n not in heads]
    else:
        picked = [n for n in linears if any(_matches(n, t) for t in spec.target_modules)]
    return [n for n in picked if not any(_matches(n, e) for e in spec.exclude_modules)]


def target_problems(model: torch.nn.Module, spec: LoraSpec) -> list[tuple[str, str, str]]:
    """``(key, what, fix)`` for each name in ``target_modules`` / ``exclude_modules`` that matches no linear layer."""

    leaves = sorted(set(linear_names(model).values()))
    out = []
    names = [] if spec.target_modules == ALL_LINEAR else list(spec.target_modules)
    for key, wanted in [("model.target_modules", names), ("model.exclude_modules", list(spec.exclude_modules))]:
        for name in wanted:
            if not any(_matches(n, name) for n in linear_names(model)):
                out.append((key, f"names {name!r}, which is not a linear layer of this model{did_you_mean(name, leaves)}",
                            f"use names of its linear layers ({', '.join(leaves)}) or all-linear"))
    if not out and not target_names(model, spec):
        out.append(("model.target_modules", "leaves no layer for adapters once model.exclude_modules is taken out",
                    "exclude fewer modules, or target more"))
    return out


# ------------------------------------------------------------------ apply / load
def apply_lora(model: torch.nn.Module, spec: LoraSpec, *, dtype: torch.dtype | None = None, seed: int | None = None) -> torch.nn.Module:
    """``model`` with LoRA adapters (a peft ``PeftModel``): the base frozen in ``dtype`` (default: as it is),
    the adapters float32 and trainable. Starts from ``spec.adapter_path`` when set. ``seed``: the adapters' random
    start drawn from it (the caller's RNG untouched), so that every rank of a sharded model starts from the same
    adapters (each rank keeps its slice of its own copy: different draws would mix into another start)."""
    if not spec.enabled:
        raise LoraError(f"model.lora_rank is {spec.rank}: LoRA is off (set model.lora_rank > 0, e.g. 32)")
    problems = target_problems(model, spec)
    if problems:
        raise LoraError("\n".join(f"{k}: {w}\n    fix: {f}" for k, w, f in problems))
    peft = _peft()
    if dtype is not None:
        model.to(dtype)
    for p in model.parameters():
        p.requires_grad_(False)
    if spec.adapter_path:
        check_adapter_folder(spec)
        wrapped = peft.PeftModel.from_pretrained(model, spec.adapter_path, is_trainable=True, adapter_name=ADAPTER_NAME)
    else:
        cfg = peft.LoraConfig(
            r=spec.rank, lora_alpha=spec.alpha, lora_dropout=spec.dropout, bias="none",
            target_modules=spec.target_modules if spec.target_modules == ALL_LINEAR else list(spec.target_modules),
            exclude_modules=list(spec.exclude_modules) or None, task_type="CAUSAL_LM",
        )
        with torch.random.fork_rng(devices=[], enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(seed)
            wrapped = peft.get_peft_model(model, cfg, adapter_name=ADAPTER_NAME)
    for name, p in wrapped.named_parameters():  # adapters train in float32 whatever the base's dtype
        if p.requires_grad and p.dtype != torch.float32:
            p.data = p.data.float()
    return wrapped


def check_adapter_folder(spec: LoraSpec) -> dict[str, Any]:
    """The adapter folder's ``adapter_config.json`` (read as JSON only); raises when it is missing or disagrees with the config."""
    folder = Path(os.path.expanduser(spec.adapter_path or ""))
    cfg_file = folder / "adapter_config.json"
    if not cfg_file.is_file():
        raise LoraError(f"model.lora_adapter_path: {str(folder)!r} holds no adapter_config.json (a PEFT adapter folder, written by save_pretrained)")
    try:
        cfg = json.loads(cfg_file.read_text())
    except (OSError, ValueError) as exc:
        raise LoraError(f"model.lora_adapter_path: {cfg_file} is not readable JSON: {exc}") from exc
    if cfg.get("peft_type", "LORA") != "LORA":
        raise LoraError(f"model.lora_adapter_path: {folder} is a {cfg.get('peft_type')} adapter, not LoRA")
    if int(cfg.get("r", spec.rank)) != spec.rank:
        raise LoraError(f"model.lora_rank is {spec.rank} but the adapter in {folder} has rank {cfg.get('r')}: set model.lora_rank={cfg.get('r')}")
    if not any((folder / f).is_file() for f in ("adapter_model.safetensors", "adapter_model.bin")):
        raise LoraError(f"model.lora_adapter_path: {folder} holds no adapter_model.safetensors")
    return cfg


# ------------------------------------------------------------------ use
def trainable_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def keep_input_dtype(model: torch.nn.Module) -> int:
    """Turn off peft's cast of each adapted layer's input to the adapters' dtype; the number of layers.

    For a model that always runs under autocast (the fsdp backend's unsharded mixed precision): peft casts the
    16-bit input of every adapted layer to the float32 adapters' dtype, and autocast casts it straight back to
    16 bits for ``lora_A``'s matmul, so each adapted layer made a float32 copy and a second 16-bit copy of its
    input (forward, and again in a checkpointed layer's recomputation) for the same values: bf16 -> fp32 -> bf16
    is exact, so results are bit-identical without it (plugins/train_fsdp/tests/test_fsdp_lora.py). Outside autocast a
    16-bit input would then meet float32 weights and fail loudly (a dtype error), never silently."""
    layers = 0
    for _, layer in _lora_layers(model):
        layer.cast_input_dtype_enabled = False  # read by peft's BaseTunerLayer._cast_input_dtype (peft >= 0.15)
        layers += 1
    return layers


@contextlib.contextmanager
def adapters_disabled(model: torch.nn.Module) -> Iterator[None]:
    """The reference policy: the same model with its adapters off."""
    with model.disable_adapter():
        yield


def _lora_layers(model: torch.nn.Module) -> Iterator[tuple[str, torch.nn.Module]]:
    from peft.tuners.lora import LoraLayer

    for name, module in model.named_modules():
        if isinstance(module, LoraLayer) and ADAPTER_NAME in getattr(module, "lora_A", {}):
            yield name, module


def base_name(peft_name: str) -> str:
    """A parameter name of the wrapped model as the plain HF model names it."""
    name = peft_name
    for prefix in ("base_model.model.",):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name.replace(".base_layer.", ".")


def adapter_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The adapters' weights under peft's names (as in ``adapter_model.safetensors``): detached views of the live tensors."""
    from peft import get_peft_model_state_dict

    return {k: v.detach() for k, v in get_peft_model_state_dict(model, adapter_name=ADAPTER_NAME).items()}


@torch.no_grad()
def merged_state_dict(model: torch.nn.Module, *, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """The base model's weights under its own names with every adapter folded in (``W + scale * B @ A``);
    the model is left as it is. ``dtype``: the output's (default: each base weight's)."""
    deltas = {}
    for name, layer in _lora_layers(model):
        deltas[base_name(name + ".base_layer.weight")] = layer.get_delta_weight(ADAPTER_NAME)
    out = {}
    for name, p in model.named_parameters():
        if ".lora_" in name:
            continue
        key = base_name(name)
        value = p.detach()
        if key in deltas:
            value = (value.float() + deltas[key].float()).to(value.dtype)
        out[key] = value.to(dtype) if dtype is not None else value
    return out


def _detach(t: torch.Tensor) -> torch.Tensor:
    return t.detach()


def iter_merged(model: torch.nn.Module, gather=_detach) -> Iterator[tuple[str, torch.Tensor]]:
    """The base model's weights under its own names, adapters folded in (float32 ``W + scale * B @ A``), one at a time.

    Walks ``model.state_dict()`` once (tied tensors once, HF convention); ``gather(t)`` makes a whole tensor of a
    parameter (identity by default; a sharded model's all-gather: every rank must drain the iterator). A LoRA
    layer's base weight is held until its ``A`` and ``B`` have passed, so at most one layer's tensors wait.
    """
    scales = {name: float(layer.scaling[ADAPTER_NAME]) for name, layer in _lora_layers(model)}
    waiting: dict[str, dict[str, torch.Tensor]] = {}
    seen: set[int] = set()
    for name, t in model.state_dict(keep_vars=True).items():
        if id(t) in seen:
            continue
        seen.add(id(t))
        module, part = _lora_part(name, scales)
        if module is None:
            if ".lora_" not in name:
                yield base_name(name), gather(t)
            continue
        parts = waiting.setdefault(module, {})
        parts[part] = gather(t)
        if len(parts) == 3:
            del waiting[module]
            merged = parts["W"].float() + scales[module] * (parts["B"].float() @ parts["A"].float())
            yield base_name(module + ".weight"), merged
    if waiting:
        raise RuntimeError(f"LoRA layers without their base weight or adapters in the state dict: {sorted(waiting)}")


def iter_base(model: torch.nn.Module, gather=_detach) -> Iterator[tuple[str, torch.Tensor]]:
    """The frozen base model's weights under its own names, adapters NOT folded in, one at a time (tied tensors
    once); ``gather`` as in :func:`iter_merged`. What a rollout engine that applies adapters itself loads once."""
    seen: set[int] = set()
    for name, t in model.state_dict(keep_vars=True).items():
        if id(t) in seen or ".lora_" in name:
            continue
        seen.add(id(t))
        yield base_name(name), gather(t)


def engine_adapter(model: torch.nn.Module, gather=_detach, dtype: torch.dtype | None = None) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The live adapters as a rollout engine's LoRA API takes them: ``(tensors, config)``.

    ``tensors``: peft's names (``base_model.model.<module>.lora_A.weight`` / ``lora_B.weight``), copies in ``dtype``
    (default float32; nothing aliases the trained parameters), with the scale folded into ``B`` (``scale * B``,
    computed in float32 and then rounded once to ``dtype``: what an engine that rounds float32 adapters to its own
    16-bit dtype would hold, in half the bytes); ``config``: a PEFT
    adapter config (``r``, ``lora_alpha`` = ``r``, so the engine's scale is exactly 1, ``target_modules``: the
    adapted modules' last names). Folding the scale here means the engine stores exactly what was sent, so the sync
    check (:mod:`rl_core.weight_sync_check`) can compare bit for bit."""
    tensors: dict[str, torch.Tensor] = {}
    targets: set[str] = set()
    rank = None
    for name, layer in _lora_layers(model):
        a = gather(layer.lora_A[ADAPTER_NAME].weight).detach().to(dtype or torch.float32, copy=True)
        b = (gather(layer.lora_B[ADAPTER_NAME].weight).detach().float() * float(layer.scaling[ADAPTER_NAME])).to(dtype or torch.float32)
        tensors[f"{name}.lora_A.weight"], tensors[f"{name}.lora_B.weight"] = a, b
        targets.add(name.rsplit(".", 1)[-1])
        rank = a.shape[0]
    if rank is None:
        raise RuntimeError("the model has no LoRA adapters to send (model.lora_rank is 0?)")
    return tensors, {"r": int(rank), "lora_alpha": int(rank), "target_modules": sorted(targets), "bias": "none"}


def _lora_part(name: str, scales: dict[str, float]) -> tuple[str | None, str]:
    for marker, part in ((f".lora_A.{ADAPTER_NAME}.weight", "A"), (f".lora_B.{ADAPTER_NAME}.weight", "B"), (".base_layer.weight", "W")):
        if name.endswith(marker) and name[: -len(marker)] in scales:
            return name[: -len(marker)], part
    return None, ""


@torch.no_grad()
def sample_effective(model: torch.nn.Module, positions: dict[str, torch.Tensor], gather=_detach) -> dict[str, torch.Tensor]:
    """The trainer's own weights at flat ``positions`` (base names), computed apart from :func:`iter_merged`:
    ``W[i, j] + scale * B[i, :] . A[:, j]`` element by element for LoRA layers, the parameter itself otherwise
    (float32). The sync check compares what was sent with these, so a sync that skipped the merge is caught."""
    by_peft = dict(_lora_layers(model))
    layers = {base_name(name + ".weight"): layer for name, layer in by_peft.items()}
    plain = {}
    for name, t in model.state_dict(keep_vars=True).items():
        if ".lora_" not in name:
            plain.setdefault(base_name(name), t)
    out = {}
    for key in sorted(positions):
        pos = positions[key].long()
        if key.endswith((".lora_A.weight", ".lora_B.weight")):  # an adapter as engine_adapter sends it (B scaled)
            module, part = key[: -len(".lora_A.weight")], key[-len("A.weight"):-len(".weight")]
            if module in by_peft:
                lay = by_peft[module]
                w = gather((lay.lora_A if part == "A" else lay.lora_B)[ADAPTER_NAME].weight).reshape(-1)
                t = w[pos.to(w.device)].float()
                out[key] = (t if part == "A" else t * float(lay.scaling[ADAPTER_NAME])).cpu()
            continue
        layer = layers.get(key)
        if layer is None:
            if key in plain:
                flat = gather(plain[key]).reshape(-1)
                out[key] = flat[pos.to(flat.device)].float().cpu()
            continue
        w = gather(layer.base_layer.weight)
        a = gather(layer.lora_A[ADAPTER_NAME].weight)
        b = gather(layer.lora_B[ADAPTER_NAME].weight)
        rows, cols = (pos // w.shape[1]).to(w.device), (pos % w.shape[1]).to(w.device)
        delta = (b[rows].float() * a[:, cols].T.float()).sum(-1) * float(layer.scaling[ADAPTER_NAME])
        out[key] = (w[rows, cols].float() + delta).cpu()
    return out


MERGED_FOLDER = "merged"  # save_hf's merged weights inside the adapter folder (trainer.save_merged_lora)


def base_model_reference(model_path: str | None) -> str | None:
    """What an adapter folder names as its base (``base_model_name_or_path``): ``model.path`` as an absolute path when
    it is a local folder (loads from any working directory), else as given."""
    if not model_path:
        return None
    expanded = os.path.expanduser(str(model_path))
    return os.path.abspath(expanded) if os.path.isdir(expanded) else str(model_path)


def write_adapter_folder(model: torch.nn.Module, folder: str | Path, gather=_detach, *, write: bool = True, base_model: str | None = None) -> Path:
    """A PEFT adapter folder (``adapter_config.json`` + ``adapter_model.safetensors``) of the live adapters, which
    ``peft.PeftModel.from_pretrained(base, folder)`` loads; ``gather`` as in :func:`iter_merged` (every rank calls it;
    only ``write`` ranks write). ``base_model``: the base's path or name recorded in adapter_config.json
    (:func:`base_model_reference`; default: what peft recorded when the adapters were applied)."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    folder = Path(folder)
    full = {name: gather(t).to("cpu").contiguous() for name, t in model.state_dict(keep_vars=True).items() if ".lora_" in name}
    if not write:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    weights = get_peft_model_state_dict(model, state_dict=full, adapter_name=ADAPTER_NAME)
    save_file({k: v.contiguous() for k, v in weights.items()}, str(folder / "adapter_model.safetensors"), metadata={"format": "pt"})
    cfg = copy.copy(model.peft_config[ADAPTER_NAME])
    cfg.inference_mode = True  # as peft's own save_pretrained records it
    if base_model is not None:
        cfg.base_model_name_or_path = base_model
    cfg.save_pretrained(str(folder))
    return folder


def save_adapter(model: torch.nn.Module, folder: str | Path, *, merged: bool = False) -> Path:
    """Write a PEFT adapter folder (``adapter_config.json`` + ``adapter_model.safetensors``); with ``merged``, the
    merged weights too, as ``merged/model.safetensors`` + ``merged/config.json`` (a plain HF model folder)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder), selected_adapters=[ADAPTER_NAME])
    if merged:
        from safetensors.torch import save_file

        out = folder / MERGED_FOLDER
        out.mkdir(exist_ok=True)
        weights = merged_state_dict(model)
        tied = getattr(model.get_base_model().config, "tie_word_embeddings", False)
        if tied:
            weights.pop("lm_head.weight", None)
        save_file({k: v.contiguous() for k, v in weights.items()}, str(out / "model.safetensors"), metadata={"format": "pt"})
        model.get_base_model().config.save_pretrained(str(out))
    return folder
