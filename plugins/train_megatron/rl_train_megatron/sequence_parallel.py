"""Megatron sequence parallelism (``train.options.transformer_config.sequence_parallel`` with TP > 1; verl's
``megatron.sequence_parallel`` / ``override_transformer_config.sequence_parallel``).

megatron-core splits the activations outside the tensor-parallel matmuls (norms, residuals, dropout, MoE routing) along
the sequence over the TP ranks: the embedding scatters its output, column-parallel linears all-gather their input, row-
parallel ones reduce-scatter their output. The engine adds what its own forward needs:

- the sequence is left-padded (masked columns) to a multiple of TP (:func:`pad_columns`); with context parallelism
  the CP split right-pads it so that each CP rank's columns are a multiple of TP (``SeqSplit.of(..., multiple=TP)``);
- pipeline stages exchange their ``1 / TP`` share of the hidden states;
- the last stage all-gathers the final hidden states before the heads (:func:`gather_hidden`: backward keeps this
  rank's share; the LM head is then an ordinary vocabulary-parallel linear, whose input gradient is summed over TP);
- weights applied to a rank's share of the tokens only (the norms, an MoE router and shared-expert gate) get
  gradients from that share: megatron-core marks them ``sequence_parallel`` and the engine sums them over TP
  (:func:`sequence_parallel_params`).

megatron-core's torch norm wrapper (used without Apex / TransformerEngine) refuses sequence parallelism only because
megatron's own gradient finalisation would not know to sum its weights; :func:`install_norm` builds it with the flag
off and marks its weights, as the fused norms do.
"""

from __future__ import annotations

import torch

_FIELD = "sequence_parallel"


def wanted(given: dict | None, tp: int) -> bool:
    value = (given or {}).get(_FIELD, False)
    if isinstance(value, str):
        value = value.strip("'\"").lower() == "true"
    return bool(value) and tp > 1


def install_norm() -> None:
    """megatron-core's ``WrappedTorchNorm`` under sequence parallelism: built with the flag off, weights marked (idempotent)."""
    from megatron.core.transformer import torch_norm

    cls = torch_norm.WrappedTorchNorm
    if getattr(cls, "_rl_sequence_parallel", False):
        return
    plain = cls.__new__

    def __new__(klass, config, *args, **kwargs):
        sp = config.sequence_parallel
        config.sequence_parallel = False
        try:
            norm = plain(klass, config, *args, **kwargs)
        finally:
            config.sequence_parallel = sp
        for p in norm.parameters():
            setattr(p, _FIELD, sp)
        return norm

    cls.__new__ = __new__
    cls._rl_sequence_parallel = True


def pad_columns(y: dict[str, torch.Tensor], tp: int) -> dict[str, torch.Tensor]:
    """Left-pad ``input_ids`` / ``attention_mask`` / ``position_ids`` with masked columns to a multiple of ``tp``."""
    s = y["input_ids"].shape[1]
    extra = -s % tp
    if not extra:
        return y
    out = dict(y)
    for k in ("input_ids", "attention_mask", "position_ids"):
        out[k] = torch.nn.functional.pad(y[k], (extra, 0))
    return out


def gather_hidden(h: torch.Tensor) -> torch.Tensor:
    """``[s / TP, b, h]`` -> ``[s, b, h]`` on every TP rank; the backward keeps this rank's rows of the gradient (what
    follows computes the same value on every rank, the LM head's input gradient being summed over TP already)."""
    from megatron.core.tensor_parallel.mappings import gather_from_sequence_parallel_region

    return gather_from_sequence_parallel_region(h, tensor_parallel_output_grad=False)


def sequence_parallel_params(model: torch.nn.Module, skip) -> list[torch.nn.Parameter]:
    """The parameters megatron-core marks ``sequence_parallel`` (their gradient covers this rank's tokens only)."""
    return [p for n, p in model.named_parameters() if getattr(p, _FIELD, False) and p.requires_grad and not skip(n)]
