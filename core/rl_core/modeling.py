"""Hugging Face helpers shared by the built-in rollout and the train backends: loading from a local folder (errors
name the key and path), and per-token log-probs / entropy of the response tokens from one forward pass.

Log-prob convention of every engine, so their numbers compare: the log-prob of response token ``t`` is
``log_softmax(logits_{t-1} / temperature)[token_t]`` in float32 from the *unfiltered* logits (no top-k / top-p),
``temperature = 1`` for greedy; positions come from :func:`position_ids_from_mask`.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any, Mapping

import torch

from rl_core.problems import UserError
from rl_core.util.positions import position_ids_from_mask  # noqa: F401  (re-exported)
from rl_core.train_engine.shared_prompt import can_share_prompts, prompt_groups, shared_prompt_logits
from rl_core.algorithms.entropy import entropy_from_logits as _entropy

OFFLINE_MODEL_HINT = "for an offline model run `rlcore model smollm2 --out DIR` and set model.path=DIR"

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ModelPathError(UserError, FileNotFoundError):
    """A model or tokenizer path that does not exist or is not an HF folder."""


def torch_dtype(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    try:
        return DTYPES[name]
    except KeyError:
        if name == "auto":
            raise ValueError(
                "model.dtype=auto is chosen for the machine when the config is normalised "
                "(rl_core.config.normalize.normalize, or rl_core.util.precision.resolve_dtype); pass the normalised config"
            ) from None
        raise ValueError(f"dtype {name!r} is not supported; use one of {', '.join(DTYPES)}") from None


def adapter_folder_base(folder: str | Path) -> str | None:
    """The base model a PEFT adapter folder names (``base_model_name_or_path``), or None when ``folder`` is not one."""
    cfg = Path(folder).expanduser() / "adapter_config.json"
    if not cfg.is_file():
        return None
    try:
        return json.loads(cfg.read_text()).get("base_model_name_or_path") or ""
    except (OSError, ValueError):
        return ""


def check_model_path(path: str | Path | None, *, key: str = "model.path") -> Path:
    """``path`` as a :class:`Path` if it is a folder with a ``config.json``, else a clear error."""
    if not path:
        raise ModelPathError(f"{key} is not set; point it at a Hugging Face model folder ({OFFLINE_MODEL_HINT})")
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelPathError(
            f"{key}={str(path)!r} does not exist (this machine has no model hub access, so it must be a local folder); {OFFLINE_MODEL_HINT}"
        )
    if p.is_dir() and not (p / "config.json").is_file() and (p / "adapter_config.json").is_file():
        base = adapter_folder_base(p)
        raise ModelPathError(
            f"{key}={str(path)!r} is a LoRA adapter folder (a PEFT adapter_config.json, e.g. a LoRA run's hf_final), not a "
            f"model: set {key} to its base model ({base!r}, adapter_config.json's base_model_name_or_path) and "
            f"model.lora_adapter_path={str(path)!r} to continue from the adapters, or use the merged weights of a run with "
            "trainer.save_merged_lora=true (its hf_final/merged)"
        )
    if not p.is_dir() or not (p / "config.json").is_file():
        raise ModelPathError(f"{key}={str(path)!r} is not a Hugging Face model folder (no config.json in it); {OFFLINE_MODEL_HINT}")
    return p


def load_hf_config(path: str | Path, *, override: Mapping[str, Any] | None = None, trust_remote_code: bool = False, key: str = "model.path"):
    from transformers import AutoConfig

    p = check_model_path(path, key=key)
    cfg = AutoConfig.from_pretrained(str(p), trust_remote_code=trust_remote_code)
    for name, value in (override or {}).items():
        setattr(cfg, name, value)
    return cfg


def load_tokenizer(path: str | Path, *, trust_remote_code: bool = False, key: str = "model.tokenizer_path"):
    """The tokenizer at ``path`` (left padding; pad token falls back to EOS)."""
    from transformers import AutoTokenizer

    if not path or not Path(path).expanduser().is_dir():
        raise ModelPathError(f"{key}={str(path)!r} is not a folder holding a tokenizer; {OFFLINE_MODEL_HINT}")
    tok = AutoTokenizer.from_pretrained(str(Path(path).expanduser()), trust_remote_code=trust_remote_code)
    tok.padding_side = "left"
    if tok.pad_token_id is None and tok.eos_token_id is not None:
        tok.pad_token = tok.eos_token
    return tok


def _quiet_load(fn, *args, **kwargs):
    """Call a ``from_pretrained`` quietly (the critic's value head is missing from a causal-LM checkpoint by design)."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    verbosity = hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        return fn(*args, **kwargs)
    finally:
        hf_logging.set_verbosity(verbosity)
        if enabled:
            hf_logging.enable_progress_bar()


def _build(auto_cls, path, cfg, *, dtype, device, random_init, trust_remote_code, seed, init_device=None):
    """``auto_cls`` from a local folder with config ``cfg`` (or random weights from it), seeded, RNG restored;
    ``init_device="cuda"`` draws random weights on this GPU (the CPU generator is slow for big models)."""
    dtype = torch_dtype(dtype)
    on_gpu = random_init and str(init_device or "").startswith("cuda") and torch.cuda.is_available()
    init_on = torch.device("cuda", torch.cuda.current_device()) if on_gpu else None
    with torch.random.fork_rng(devices=[] if init_on is None else [init_on.index]):
        torch.manual_seed(seed)
        if random_init:
            if init_on is None:
                model = auto_cls.from_config(cfg, dtype=dtype, trust_remote_code=trust_remote_code)
            else:
                with init_on:
                    model = auto_cls.from_config(cfg, dtype=dtype, trust_remote_code=trust_remote_code)
        else:
            model = _quiet_load(auto_cls.from_pretrained, str(path), config=cfg, dtype=dtype, trust_remote_code=trust_remote_code)
    return model.to(device)


build_model = _build  # the public name, for plugins building a model with another head (e.g. sequence classification)


def load_causal_lm(
    path: str | Path,
    *,
    dtype: str | torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    random_init: bool = False,
    override_config: Mapping[str, Any] | None = None,
    trust_remote_code: bool = False,
    seed: int = 0,
    key: str = "model.path",
    init_device: str | None = None,
):
    """``AutoModelForCausalLM`` (``AutoModelForImageTextToText`` for a config with a vision tower) from a local folder,
    or random weights from its config; weights it lacks are drawn under ``seed`` (global RNG restored), so every rank
    builds the same model."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    cfg = load_hf_config(path, override=override_config, trust_remote_code=trust_remote_code, key=key)
    # a vision-language model (a vision tower in its config, e.g. Qwen2-VL) loads with its vision tower (rl-multimodal)
    auto_cls = AutoModelForImageTextToText if getattr(cfg, "vision_config", None) is not None else AutoModelForCausalLM
    model = _build(
        auto_cls, path, cfg, dtype=dtype, device=device, random_init=random_init, trust_remote_code=trust_remote_code, seed=seed,
        init_device=init_device,
    )
    contiguous_lm_head_input(model)
    return model


def _contiguous_first_arg(module: torch.nn.Module, args: tuple) -> tuple | None:
    if args and isinstance(args[0], torch.Tensor) and not args[0].is_contiguous():
        return (args[0].contiguous(), *args[1:])
    return None


def contiguous_lm_head_input(model: torch.nn.Module) -> None:
    """Make the LM head's input contiguous (a forward pre-hook; idempotent): the ``logits_to_keep`` slice is not, and
    a linear layer on a non-contiguous 3-D input takes a far slower batched-matmul path on CPU."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None or getattr(head, "_rl_core_contiguous_input", False):
        return
    head.register_forward_pre_hook(_contiguous_first_arg)
    head._rl_core_contiguous_input = True


def load_value_model(
    path: str | Path,
    *,
    dtype: str | torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    random_init: bool = False,
    override_config: Mapping[str, Any] | None = None,
    trust_remote_code: bool = False,
    seed: int = 0,
    key: str = "critic.model_path",
    init_device: str | None = None,
):
    """A critic: ``AutoModelForTokenClassification`` with ``num_labels=1`` (as in verl), the LM backbone plus a value
    head drawn under ``seed``; head dropout off so values are deterministic."""
    from transformers import AutoModelForTokenClassification

    override = {"num_labels": 1, "classifier_dropout": 0.0, **(override_config or {})}
    cfg = load_hf_config(path, override=override, trust_remote_code=trust_remote_code, key=key)
    try:
        return _build(
            AutoModelForTokenClassification, path, cfg, dtype=dtype, device=device, random_init=random_init, trust_remote_code=trust_remote_code, seed=seed,
            init_device=init_device,
        )
    except ValueError as exc:
        if "Unrecognized configuration class" in str(exc):
            raise ValueError(
                f"{key}={str(path)!r}: architecture {getattr(cfg, 'architectures', None)} has no "
                f"AutoModelForTokenClassification class in transformers, which the critic uses as LM backbone + value head"
            ) from exc
        raise


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks of an HF model (classes named in ``_no_split_modules``)."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    if not names:
        raise ValueError(f"{type(model).__name__} does not declare _no_split_modules; cannot find its decoder layers")
    return [m for m in model.modules() if type(m).__name__ in names]


def _accepts(model: torch.nn.Module, name: str) -> bool:
    fwd = getattr(model, "forward", None)
    try:
        return name in inspect.signature(fwd).parameters
    except (TypeError, ValueError):
        return False


def log_probs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``log_softmax(logits)[labels]`` in float32 without materialising the log-softmax (``[..., V], [...] -> [...]``)."""
    logits = logits.float()
    picked = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of ``softmax(logits)`` over the last dim (from :mod:`rl_core.algorithms.entropy`)."""
    return _entropy(logits.float())


def response_logits(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    response_length: int,
    *,
    share_prompts: bool = False,
) -> torch.Tensor:
    """Logits ``[b, R, V]`` that predict the last ``R`` tokens of ``input_ids`` (the LM head on those positions only,
    where the model takes ``logits_to_keep``). ``share_prompts``: rows with the same prompt run it once
    (:mod:`rl_core.train_engine.shared_prompt`), equal up to float rounding."""
    R = response_length
    if share_prompts and R < input_ids.shape[1] and can_share_prompts(model):
        groups = prompt_groups(input_ids, attention_mask, input_ids.shape[1] - R)
        if int(groups[-1]) + 1 < input_ids.shape[0]:  # some prompt has two or more rows
            return shared_prompt_logits(model, input_ids, attention_mask, position_ids, R, groups)
    kwargs: dict[str, Any] = dict(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False)
    if _accepts(model, "logits_to_keep"):
        kwargs["logits_to_keep"] = R + 1
    logits = model(**kwargs).logits
    return logits[:, -R - 1 : -1]


def response_columns_in_use(attention_mask: torch.Tensor, response_length: int) -> int:
    """How many leading response columns hold a real token in some row (at least 1); the rest need no compute."""
    used = attention_mask[:, -response_length:].bool().any(0).nonzero()
    return int(used.max()) + 1 if used.numel() else 1


def forward_response(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    responses: torch.Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = True,
    share_prompts: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One forward pass -> ``(log_probs [b, R], entropy [b, R] or None)`` of ``responses`` (``entropy_grad=False``: a
    detached metric). Padded positions hold whatever the model gives; columns padded in every row hold 0."""
    R = responses.shape[-1]
    cut = R - response_columns_in_use(attention_mask, R)
    if cut:
        input_ids, attention_mask, position_ids = (t[:, :-cut] for t in (input_ids, attention_mask, position_ids))
        responses = responses[:, :-cut]
    logits = response_logits(model, input_ids, attention_mask, position_ids, R - cut, share_prompts=share_prompts)
    log_probs, entropy = log_probs_and_entropy(logits, responses, temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad)
    return pad_response_columns(log_probs, entropy, cut)


def pad_response_columns(log_probs: torch.Tensor, entropy: torch.Tensor | None, cut: int):
    """``(log_probs, entropy)`` with ``cut`` trimmed trailing columns put back as 0."""
    if cut:
        log_probs = torch.nn.functional.pad(log_probs, (0, cut))
        entropy = torch.nn.functional.pad(entropy, (0, cut)) if entropy is not None else None
    return log_probs, entropy


def log_probs_and_entropy(
    logits: torch.Tensor, responses: torch.Tensor, *, temperature: float = 1.0, with_entropy: bool = False, entropy_grad: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(log_probs [b, R], entropy [b, R] or None)`` of ``responses`` under ``logits [b, R, V] / temperature`` (float32);
    ``entropy_grad=False``: the entropy is a detached metric."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    log_probs = log_probs_from_logits(logits, responses)
    entropy = None
    if with_entropy:
        if entropy_grad:
            entropy = entropy_from_logits(logits)
        else:
            with torch.no_grad():
                entropy = entropy_from_logits(logits.detach())
    return log_probs, entropy


def forward_values(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    response_length: int,
) -> torch.Tensor:
    """Critic values ``[b, R]`` in float32: the head's output at the position *before* each response token (as in verl)."""
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False).logits
    R = response_length
    return out[:, -R - 1 : -1, 0].float()
