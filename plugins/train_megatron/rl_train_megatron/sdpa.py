"""The core attention of the engine's layers: torch's ``scaled_dot_product_attention`` in megatron-core's
``DotProductAttention`` slot (issue 49).

megatron-core's local layer spec computes attention unfused without TransformerEngine (``DotProductAttention``: the
``[b, heads, s, s]`` scores materialised by ``baddbmm``, masked, a torch softmax, ``bmm``): on GPUs every layer writes
and reads the scores and their gradients several times. The fsdp backend runs transformers' ``sdpa`` attention (flash /
memory-efficient kernels). :class:`SDPAttention` is the same module with the computation replaced by
``torch.nn.functional.scaled_dot_product_attention``: one fused kernel on GPUs (flash attention when the micro-batch has
no padding, the memory-efficient kernel with the padding mask otherwise), the same numbers as megatron-core's path (on
the CPU torch's math kernel, which the conformance tests compare with transformers).

Mask semantics are megatron-core's: ``attention_mask`` ``[b, 1, sq, sk]`` bool, True = masked; ``None`` = causal (the
engine passes ``None`` when no key of the micro-batch is padding, :func:`rl_train_megatron.model.attention_mask`). A
query row whose keys are all masked (a padding position of a left-padded prompt) gets what megatron-core's
``masked_fill(-10000)`` + softmax gives it (a uniform softmax: the mean of the values); its output feeds no real token,
but MoE routers see it (their losses count padding positions).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from megatron.core.transformer.dot_product_attention import DotProductAttention


def allowed_keys(attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """megatron-core's ``[b, 1, sq, sk]`` mask (True = masked) -> (SDPA's mask, True = may attend; ``[b, 1, sq, 1]``
    True for the rows with no key left). Such a row is let attend to every key (no NaN from the kernel); its output is
    then replaced by the one megatron-core's -10000 fill gives it (:func:`_uniform_rows`)."""
    allowed = ~attention_mask
    empty = ~allowed.any(-1, keepdim=True)
    return allowed | empty, empty


def _uniform_rows(out: torch.Tensor, v: torch.Tensor, empty: torch.Tensor) -> torch.Tensor:
    """``out [b, n, sq, hn]`` with the ``empty`` rows replaced by the mean of the values (a uniform softmax: the
    gradient reaches the values only, as megatron-core's constant masked scores give)."""
    return torch.where(empty, v.mean(dim=2, keepdim=True).to(out.dtype), out)


class SDPAttention(DotProductAttention):
    """megatron-core's ``DotProductAttention`` computed by ``scaled_dot_product_attention`` (same inputs, outputs and
    parameters: none)."""

    def forward(self, query, key, value, attention_mask, attn_mask_type=None, attention_bias=None, packed_seq_params=None):
        if packed_seq_params is not None or attention_bias is not None or self.softmax_offset is not None:
            raise NotImplementedError("SDPAttention: packed sequences, an attention bias or a softmax offset are not built here")
        sq, b, heads, hn = query.shape
        groups = key.shape[2]
        if heads // groups > 1:  # grouped-query attention: every query head its group's key / value (as megatron-core expands them)
            key = key.repeat_interleave(heads // groups, dim=2)
            value = value.repeat_interleave(heads // groups, dim=2)
        # [s, b, n, hn] -> [b, n, s, hn], contiguous: with strided inputs torch's CPU kernel rounds differently depending on
        # whether they require grad (an actor's and a frozen reference's log-probs differed in the last bit)
        q, k, v = (t.permute(1, 2, 0, 3).contiguous() for t in (query, key, value))
        mask, empty = (None, None) if attention_mask is None else allowed_keys(attention_mask)
        p = self.attention_dropout.p if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=mask is None, scale=self.softmax_scale)
        if empty is not None:
            out = _uniform_rows(out, v, empty)
        return out.permute(2, 0, 1, 3).reshape(sq, b, heads * hn)  # [b, n, sq, hn] -> [sq, b, hp]


def use_in_spec(spec, attention=SDPAttention):
    """A layer spec with ``attention`` as its core attention (in place; returned)."""
    spec.submodules.self_attention.submodules.core_attention = attention
    return spec
