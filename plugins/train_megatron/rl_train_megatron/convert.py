"""Weight conversion between Hugging Face (Llama / Qwen2 / Qwen3) names and megatron-core ``GPTModel`` shards.

Three layers of names, all plain ``{name: tensor}`` mappings:

- **HF**: ``model.layers.3.self_attn.q_proj.weight``, ... (``score.*`` for the critic).
- **full Megatron** (:func:`hf_to_full` / :func:`full_to_hf`): Megatron's
  parameter names with *global* layer numbers and whole (unsharded) tensors:
  q, k, v fused per query group into ``linear_qkv`` (rows ``[q heads of the
  group, k, v]`` for each group), gate and up stacked into ``linear_fc1``.
- **shards** (:func:`split_for_rank` / :func:`merge_tp`): one rank's slice
  for TP rank ``t`` and PP stage ``p``, with the *local* layer numbers that
  rank's ``GPTModel`` uses. Column-parallel weights (``linear_qkv``,
  ``linear_fc1``, embeddings, LM head) are split on rows, row-parallel ones
  (``linear_proj``, ``linear_fc2``) on columns, norms and the value head are
  whole on every rank. TP splits ``linear_qkv`` by query groups and
  ``linear_fc1`` into matching gate and up halves.

MoE layers (Qwen2-MoE / Qwen3-MoE): HF's router ``mlp.gate.weight`` is Megatron's
``mlp.router.weight`` (whole on every rank); HF's stacked experts
``mlp.experts.gate_up_proj [E, 2f, h]`` / ``down_proj [E, h, f]`` are Megatron's
``mlp.experts.local_experts.{e}.linear_fc1.weight`` (gate rows then up rows, as
Megatron's fc1) / ``linear_fc2.weight``, one per expert: in the full layer the
*global* expert number ``e``; on a rank, the local number ``e - ep_rank * E / EP``
(:func:`split_for_rank` keeps only this expert-parallel rank's experts, sliced for
its expert-tensor-parallel rank). Qwen2-MoE's shared expert and its gate map to
``mlp.shared_experts.{linear_fc1, linear_fc2, gate_weight}``; HY-V3 / GLM-4-MoE's ungated ``mlp.shared_experts.*``
likewise, their expert bias ``e_score_correction_bias`` to ``mlp.router.expert_bias`` and their dense first layers'
MLPs as a dense model's (:mod:`rl_train_megatron.sigmoid_moe`). HF's stacked expert
tensors are rebuilt when the last expert of a layer comes by (:class:`ExpertStacker`).

Every step is an exact copy (no arithmetic), so HF -> shards -> HF gives back
every tensor bit for bit.
"""

from __future__ import annotations

import re
from typing import Mapping

import torch

from rl_train_megatron.model import ModelShape
from rl_train_megatron.sigmoid_moe import router_names, shared_fc1_names

_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.(.+)$")
_HF_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")

# per-layer names: Megatron suffix -> HF suffix (for the one-to-one ones)
_SIMPLE = {
    "input_layernorm.weight": "input_layernorm.weight",
    "pre_mlp_layernorm.weight": "post_attention_layernorm.weight",
    "self_attention.linear_proj.weight": "self_attn.o_proj.weight",
    "mlp.linear_fc2.weight": "mlp.down_proj.weight",
}
# Qwen3's per-head query / key norms (whole on every TP rank: one weight of head_dim shared by every head)
_QK_NORM = {"self_attention.q_layernorm.weight": "self_attn.q_norm.weight", "self_attention.k_layernorm.weight": "self_attn.k_norm.weight"}
_EXPERT = re.compile(r"^(.*)\.mlp\.experts\.local_experts\.(\d+)\.(linear_fc[12])\.weight$")
_ROW_SPLIT = ("embedding.word_embeddings.weight", "output_layer.weight", "linear_qkv.weight", "linear_qkv.bias", "linear_fc1.weight")
_COL_SPLIT = ("linear_proj.weight", "linear_fc2.weight")


class ConversionError(ValueError):
    """Weights that do not match the model's shape (missing, extra or mis-shaped tensors)."""


# ---------------------------------------------------------------- HF <-> full
def hf_to_full(hf: Mapping[str, torch.Tensor], shape: ModelShape) -> dict[str, torch.Tensor]:
    """HF-named tensors -> whole Megatron tensors with global layer numbers."""
    need = set(expected_hf_names(shape))
    missing, extra = need - set(hf), set(hf) - need - {"lm_head.weight"}
    if missing or extra:
        raise ConversionError(f"HF weights do not match the model: missing {sorted(missing)[:6]}, unexpected {sorted(extra)[:6]}")
    out: dict[str, torch.Tensor] = {"embedding.word_embeddings.weight": hf["model.embed_tokens.weight"]}
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        q = f"decoder.layers.{i}."
        for mc, h in _layer_simple(shape, i).items():
            out[q + mc] = hf[p + h]
        for kind in ("weight",) + (("bias",) if shape.qkv_bias else ()):
            out[q + f"self_attention.linear_qkv.{kind}"] = fuse_qkv(
                hf[p + f"self_attn.q_proj.{kind}"], hf[p + f"self_attn.k_proj.{kind}"], hf[p + f"self_attn.v_proj.{kind}"], shape
            )
        if shape.moe_layer(i):
            gate_up, down = hf[p + "mlp.experts.gate_up_proj"], hf[p + "mlp.experts.down_proj"]
            for e in range(shape.experts):
                out[q + f"mlp.experts.local_experts.{e}.linear_fc1.weight"] = gate_up[e]
                out[q + f"mlp.experts.local_experts.{e}.linear_fc2.weight"] = down[e]
            if shape.shared_ffn:
                out[q + "mlp.shared_experts.linear_fc1.weight"] = torch.cat([hf[p + n] for n in shared_fc1_names(shape)], 0)
        else:
            out[q + "mlp.linear_fc1.weight"] = torch.cat([hf[p + "mlp.gate_proj.weight"], hf[p + "mlp.up_proj.weight"]], 0)
    out["decoder.final_layernorm.weight"] = hf["model.norm.weight"]
    if shape.critic:
        for name in score_names(shape):
            out["value_head." + name.split(".", 1)[1]] = hf[name]
    elif not shape.tied:
        out["output_layer.weight"] = hf["lm_head.weight"]
    return out


def _layer_simple(shape: ModelShape, layer: int) -> dict[str, str]:
    """The one-to-one names of global layer ``layer`` of this model (Megatron suffix -> HF suffix)."""
    out = dict(_SIMPLE)
    if shape.moe_layer(layer):
        del out["mlp.linear_fc2.weight"]
        out.update(router_names(shape))
    if shape.qk_norm:
        out.update(_QK_NORM)
    return out


class ExpertStacker:
    """Collects one layer's per-expert fc1 / fc2 tensors and gives HF's stacked ``gate_up_proj`` / ``down_proj``
    once all ``E`` of a kind are there (experts may come in any order)."""

    def __init__(self, shape: ModelShape) -> None:
        self.shape = shape
        self.pending: dict[tuple[str, str], dict[int, torch.Tensor]] = {}

    def add(self, layer_prefix: str, expert: int, kind: str, t: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        got = self.pending.setdefault((layer_prefix, kind), {})
        got[expert] = t
        if len(got) < self.shape.experts:
            return []
        del self.pending[(layer_prefix, kind)]
        hf = "gate_up_proj" if kind == "linear_fc1" else "down_proj"
        return [(f"{layer_prefix}mlp.experts.{hf}", torch.stack([got[e] for e in range(self.shape.experts)]))]

    def check_done(self) -> None:
        if self.pending:
            raise ConversionError(f"experts missing for {sorted(self.pending)[:4]}: each MoE layer needs all {self.shape.experts}")


def full_to_hf(name: str, t: torch.Tensor, shape: ModelShape, stacker: ExpertStacker | None = None) -> list[tuple[str, torch.Tensor]]:
    """One whole Megatron tensor -> its HF-named tensor(s); an expert's tensor goes to ``stacker`` (HF stacks the
    experts of a layer: the stacked tensor comes with the layer's last expert)."""
    if name == "embedding.word_embeddings.weight":
        return [("model.embed_tokens.weight", t)]
    if name == "decoder.final_layernorm.weight":
        return [("model.norm.weight", t)]
    if name == "output_layer.weight":
        return [("lm_head.weight", t)]
    if name.startswith("value_head."):
        return [("score." + name.split(".", 1)[1], t)]
    m = _LAYER.match(name)
    if not m:
        raise ConversionError(f"no HF name for Megatron parameter {name!r}")
    p, suffix = f"model.layers.{m.group(1)}.", m.group(2)
    simple = _layer_simple(shape, int(m.group(1)))
    if suffix in simple:
        return [(p + simple[suffix], t)]
    e = _EXPERT.match(name)
    if e and shape.moe:
        if stacker is None:
            raise ConversionError(f"{name}: an expert's tensor needs an ExpertStacker (HF stacks a layer's experts)")
        return stacker.add(p, int(e.group(2)), e.group(3), t)
    if suffix == "mlp.shared_experts.linear_fc1.weight" and shape.shared_ffn:
        gate, up = t.chunk(2, 0)
        return list(zip([p + n for n in shared_fc1_names(shape)], (gate, up)))
    if suffix.startswith("self_attention.linear_qkv."):
        kind = suffix.rsplit(".", 1)[1]
        q, k, v = split_qkv(t, shape)
        return [(p + f"self_attn.q_proj.{kind}", q), (p + f"self_attn.k_proj.{kind}", k), (p + f"self_attn.v_proj.{kind}", v)]
    if suffix == "mlp.linear_fc1.weight":
        gate, up = t.chunk(2, 0)
        return [(p + "mlp.gate_proj.weight", gate), (p + "mlp.up_proj.weight", up)]
    raise ConversionError(f"no HF name for Megatron parameter {name!r}")


def expected_hf_names(shape: ModelShape) -> list[str]:
    names = ["model.embed_tokens.weight"]
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        names += [p + h for h in _layer_simple(shape, i).values()]
        names += [p + f"self_attn.{x}_proj.weight" for x in "qkv"]
        if shape.qkv_bias:
            names += [p + f"self_attn.{x}_proj.bias" for x in "qkv"]
        if shape.moe_layer(i):
            names += [p + "mlp.experts.gate_up_proj", p + "mlp.experts.down_proj"]
            if shape.shared_ffn:
                names += [p + n for n in shared_fc1_names(shape)]
        else:
            names += [p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"]
    names.append("model.norm.weight")
    if shape.critic:
        names += score_names(shape)
    elif not shape.tied:
        names.append("lm_head.weight")
    return names


def score_names(shape: ModelShape) -> list[str]:
    return ["score.weight"] + (["score.bias"] if shape.score_bias else [])


def fuse_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, shape: ModelShape) -> torch.Tensor:
    """q ``[H*d, ...]``, k, v ``[G*d, ...]`` -> ``[G * (H/G + 2) * d, ...]``, grouped as Megatron reads it."""
    g, d = shape.kv_heads, shape.head_dim
    rest = q.shape[1:]
    qg = q.reshape(g, (shape.heads // g) * d, *rest)
    return torch.cat([qg, k.reshape(g, d, *rest), v.reshape(g, d, *rest)], 1).reshape(g * shape.group_rows, *rest)


def split_qkv(t: torch.Tensor, shape: ModelShape) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inverse of :func:`fuse_qkv` (works on any whole number of groups)."""
    d, per = shape.head_dim, shape.heads // shape.kv_heads
    rest = t.shape[1:]
    grouped = t.reshape(-1, shape.group_rows, *rest)
    q, k, v = grouped.split([per * d, d, d], 1)
    return q.reshape(-1, *rest).contiguous(), k.reshape(-1, *rest).contiguous(), v.reshape(-1, *rest).contiguous()


# ------------------------------------------------------------ full <-> shards
def split_dim(name: str) -> int | None:
    """The dimension TP splits ``name`` along (None: the tensor is whole on every TP rank)."""
    if name.endswith(_ROW_SPLIT):
        return 0
    if name.endswith(_COL_SPLIT):
        return 1
    return None


def is_expert(name: str) -> bool:
    """A routed expert's weight (split over expert-parallel ranks, sliced by the expert tensor-parallel size)."""
    return _EXPERT.match(name) is not None


def expert_index(name: str) -> int:
    return int(_EXPERT.match(name).group(2))


def with_expert(name: str, expert: int) -> str:
    m = _EXPERT.match(name)
    return f"{m.group(1)}.mlp.experts.local_experts.{expert}.{m.group(3)}.weight"


def tp_slice(name: str, t: torch.Tensor, tp: int, rank: int) -> torch.Tensor:
    """TP rank ``rank``'s slice of a whole Megatron tensor (an expert's: pass the expert TP size / rank)."""
    dim = split_dim(name)
    if dim is None or tp == 1:
        return t
    if name.endswith("linear_fc1.weight"):  # gate and up halves, each split the same way
        gate, up = t.chunk(2, 0)
        return torch.cat([gate.chunk(tp, 0)[rank], up.chunk(tp, 0)[rank]], 0)
    return t.chunk(tp, dim)[rank]


def merge_tp(name: str, shards: list[torch.Tensor]) -> torch.Tensor:
    """Inverse of :func:`tp_slice`: the TP ranks' slices (in rank order) -> the whole tensor."""
    dim = split_dim(name)
    if dim is None or len(shards) == 1:
        return shards[0]
    if name.endswith("linear_fc1.weight"):
        halves = [s.chunk(2, 0) for s in shards]
        return torch.cat([h[0] for h in halves] + [h[1] for h in halves], 0)
    return torch.cat(shards, dim)


def stage_layers(shape: ModelShape, pp: int, pp_rank: int) -> range:
    """The global layer numbers on pipeline stage ``pp_rank``, in order: ``shape.stages`` (uneven stages,
    :mod:`rl_train_megatron.stages`) or equal shares. With virtual stages pass ``pp`` = PP x VPP and the virtual stage
    ``v x PP + pp_rank`` of model chunk ``v`` (:func:`split_for_rank` the same)."""
    if pp > 1 and shape.stages:
        start = sum(shape.stages[:pp_rank])
        return range(start, start + shape.stages[pp_rank])
    per = shape.layers // pp
    return range(pp_rank * per, (pp_rank + 1) * per)


def global_name(local: str, offset: int) -> str:
    m = _LAYER.match(local)
    return f"decoder.layers.{int(m.group(1)) + offset}.{m.group(2)}" if m else local


def local_name(name: str, offset: int) -> str:
    m = _LAYER.match(name)
    return f"decoder.layers.{int(m.group(1)) - offset}.{m.group(2)}" if m else name


def on_stage(name: str, shape: ModelShape, pp: int, pp_rank: int) -> bool:
    """Whether pipeline stage ``pp_rank`` holds the whole-model parameter ``name``."""
    m = _LAYER.match(name)
    if m:
        return int(m.group(1)) in stage_layers(shape, pp, pp_rank)
    if name.startswith("embedding."):
        return pp_rank == 0 or (shape.tied and pp_rank == pp - 1)
    return pp_rank == pp - 1  # final norm, LM head, value head


def split_for_rank(
    full: Mapping[str, torch.Tensor], shape: ModelShape, tp: int, tp_rank: int, pp: int = 1, pp_rank: int = 0,
    ep: int = 1, ep_rank: int = 0, etp: int | None = None, etp_rank: int | None = None,
) -> dict[str, torch.Tensor]:
    """One rank's local state: the parameters of its stage, sliced for its TP rank, local layer numbers; of the
    routed experts only this EP rank's ``E / EP`` (local numbers from 0), sliced for its expert-TP rank.

    With PP > 1 and tied embeddings the last stage holds the embedding as
    ``output_layer.weight`` (its LM head), as megatron-core lays it out.
    """
    offset = stage_layers(shape, pp, pp_rank).start
    etp, etp_rank = (tp, tp_rank) if etp is None else (etp, etp_rank or 0)
    per = shape.experts // ep if shape.moe else 0
    out = {}
    for name, t in full.items():
        if not on_stage(name, shape, pp, pp_rank):
            continue
        local = local_name(name, offset)
        if name.startswith("embedding.") and pp > 1 and pp_rank == pp - 1 and pp_rank != 0:
            local = "output_layer.weight"
        if is_expert(name):
            e = expert_index(name) - ep_rank * per
            if not 0 <= e < per:
                continue
            out[with_expert(local, e)] = tp_slice(name, t, etp, etp_rank).clone()
            continue
        out[local] = tp_slice(name, t, tp, tp_rank).clone()
    return out


def merge_ranks(
    per_rank: Mapping[tuple, Mapping[str, torch.Tensor]], shape: ModelShape, tp: int, pp: int, ep: int = 1, etp: int | None = None
) -> dict[str, torch.Tensor]:
    """``{(tp_rank, pp_rank): local state}`` (with EP > 1: ``{(tp_rank, pp_rank, ep_rank): ...}``) for every rank ->
    whole Megatron tensors (global layer and expert numbers). An expert's slices are those of TP ranks
    ``0 .. etp - 1`` (``etp`` 1 or TP)."""
    etp = tp if etp is None else etp
    key = (lambda t, p, e: (t, p)) if ep == 1 else (lambda t, p, e: (t, p, e))  # noqa: E731
    per = shape.experts // ep if shape.moe else 0
    full: dict[str, torch.Tensor] = {}
    for p in range(pp):
        offset = stage_layers(shape, pp, p).start
        for e in range(ep):
            for local in per_rank[key(0, p, e)]:
                name = global_name(local, offset)
                if is_expert(local):
                    full[with_expert(name, e * per + expert_index(local))] = merge_tp(name, [per_rank[key(t, p, e)][local] for t in range(etp)])
                elif e == 0 and not (local == "output_layer.weight" and shape.tied):  # not the tied copy of the embedding (PP > 1)
                    full[name] = merge_tp(name, [per_rank[key(t, p, e)][local] for t in range(tp)])
    return full


def full_to_hf_dict(full: Mapping[str, torch.Tensor], shape: ModelShape) -> dict[str, torch.Tensor]:
    out = {}
    stacker = ExpertStacker(shape)
    for name, t in full.items():
        out.update(full_to_hf(name, t, shape, stacker))
    stacker.check_done()
    return out


def load_local_state(model: torch.nn.Module, local: dict[str, torch.Tensor]) -> None:
    """Copy this rank's converted tensors into the model's parameters; every parameter exactly once."""
    params = dict(model.named_parameters())
    missing, extra = set(params) - set(local), set(local) - set(params)
    if missing or extra:
        raise ConversionError(f"converted weights do not fit the Megatron model: missing {sorted(missing)[:6]}, unexpected {sorted(extra)[:6]}")
    with torch.no_grad():
        for name, p in params.items():
            if p.shape != local[name].shape:
                raise ConversionError(f"{name}: converted shape {tuple(local[name].shape)} != model shape {tuple(p.shape)}")
            p.copy_(local[name])


def is_qk_norm(name: str) -> bool:
    """A Qwen3 query / key norm weight: each TP rank's gradient covers only its own heads (summed over TP)."""
    return name.endswith(("self_attention.q_layernorm.weight", "self_attention.k_layernorm.weight"))
