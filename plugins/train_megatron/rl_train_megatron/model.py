"""megatron-core ``GPTModel`` built from a Hugging Face Llama / Qwen2 / Qwen3 / Qwen2-MoE / Qwen3-MoE / HY-V3 / GLM-4-MoE config, and its
forward passes.

:func:`model_shape` reads what the conversion and the model need from the
HF config (and rejects what they cannot express, naming the field);
:func:`build_model` makes this rank's ``GPTModel`` (local layer spec: torch
RMSNorm, Megatron Column/RowParallelLinear, ``DotProductAttention`` computed by torch's fused attention:
:mod:`rl_train_megatron.sdpa`) with
fp32 parameters on the CPU, no initialisation (weights come from
:mod:`rl_train_megatron.convert`).

MoE models (Qwen2-MoE, Qwen3-MoE) get megatron-core's ``MoELayer`` in every layer: a top-k softmax router
(``norm_topk_prob`` true = softmax over the top-k logits, megatron's ``moe_router_pre_softmax=False``; false = the
top-k of the softmax over all experts, ``pre_softmax=True``), ``SequentialMLP`` experts (one SwiGLU per expert,
split over ``train.expert_model_parallel_size`` ranks), Qwen2-MoE's shared expert with its sigmoid gate, and the
``allgather`` token dispatcher unless ``moe_token_dispatcher_type`` says otherwise (on a GPU). HY-V3 and GLM-4-MoE
(:mod:`rl_train_megatron.sigmoid_moe`): sigmoid routers with an expert bias, an ungated shared expert, dense first layers.

The forward pass (:func:`response_hidden`) calls the model's embedding,
decoder and head itself instead of ``GPTModel.forward``, for two reasons:

- rotary angles come from the batch's ``position_ids`` (left-padded prompts
  start at position 0, as in transformers), not from the column index;
- the attention mask is causal *and* hides padding keys, built here as a
  boolean ``[b, 1, s, s]`` tensor (True = masked), so megatron never builds
  its CUDA causal mask.

Log-probs and entropy (:func:`vocab_parallel_log_probs`) are computed from
each TP rank's slice of the vocabulary with all-reduces of ``[b, R]``
tensors: full-vocabulary logits are never gathered.
"""

from __future__ import annotations

import contextlib

import attrs
import torch
import torch.nn.functional as F
from rl_core.problems import UserError

CAUSAL_LM_ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM",
                           "HYV3ForCausalLM", "Glm4MoeForCausalLM")
MODEL_TYPES = ("llama", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "hy_v3", "glm4_moe")
MOE_TYPES = ("qwen2_moe", "qwen3_moe", "hy_v3", "glm4_moe")


#: the layers' core attention: "sdpa" (:class:`rl_train_megatron.sdpa.SDPAttention`) or "unfused" (megatron-core's
#: DotProductAttention as its local spec builds it; bench/megatron_update_mfu_gpu.py's A/B, not a setting)
CORE_ATTENTION = "sdpa"


class UnsupportedModelError(UserError, ValueError):
    """A model config the Megatron converter cannot express."""


class ParallelSizeError(UserError, ValueError):
    """TP x PP that does not fit the number of worker processes or the model."""


@attrs.frozen(kw_only=True)
class ModelShape:
    """What the HF <-> Megatron conversion needs to know about a model."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    tied: bool
    qkv_bias: bool
    eps: float
    max_positions: int
    critic: bool = False
    score_bias: bool = True
    qk_norm: bool = False  # Qwen3: RMSNorm over each head's queries / keys before the rotary embedding
    # MoE (Qwen2-MoE / Qwen3-MoE): 0 experts = a dense model
    experts: int = 0
    topk: int = 0
    moe_ffn: int = 0  # each routed expert's intermediate size
    shared_ffn: int = 0  # Qwen2-MoE's shared expert (0: none)
    norm_topk: bool = True  # renormalise the top-k routing weights (HF norm_topk_prob)
    # sigmoid-routed families (rl_train_megatron.sigmoid_moe): the HF naming family (model_type), the router's score function
    # (a sigmoid router carries an expert bias), its top-k scaling factor and expert groups, the layers with a dense MLP
    family: str = ""
    score: str = "softmax"
    topk_scale: float | None = None
    groups: int | None = None
    group_topk: int | None = None
    dense_layers: tuple[int, ...] = ()
    # decoder layers on each pipeline stage (rl_train_megatron.stages; empty: layers / PP each); with virtual stages on
    # each model chunk, in virtual-stage order (chunk v of stage p: v x PP + p)
    stages: tuple[int, ...] = ()

    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def expert_bias(self) -> bool:
        return self.moe and self.score == "sigmoid"

    def moe_layer(self, layer: int) -> bool:
        """Whether global layer ``layer`` is an MoE layer (else a dense SwiGLU MLP of width ``ffn``)."""
        return self.moe and layer not in self.dense_layers

    @property
    def group_rows(self) -> int:
        """Rows of one query group in Megatron's fused QKV weight: its q heads, one k, one v."""
        return (self.heads // self.kv_heads + 2) * self.head_dim


def model_shape(hf_config, *, critic: bool = False, key: str = "model.path") -> ModelShape:
    """The :class:`ModelShape` of a Llama / Qwen2 / Qwen3 config; a clear error for anything else."""
    mtype = getattr(hf_config, "model_type", None)
    if mtype not in MODEL_TYPES:
        raise UnsupportedModelError(
            f"{key}: model_type {mtype!r} ({getattr(hf_config, 'architectures', None)}) cannot be converted to Megatron; "
            f"the megatron train backend converts {', '.join(CAUSAL_LM_ARCHITECTURES)} (use train.name=fsdp for other models)"
        )
    if getattr(hf_config, "hidden_act", "silu") != "silu":
        raise UnsupportedModelError(f"{key}: hidden_act={hf_config.hidden_act!r}; the Megatron conversion supports SwiGLU (silu) MLPs only")
    if getattr(hf_config, "mlp_bias", False):
        raise UnsupportedModelError(f"{key}: mlp_bias=true is not supported by the Megatron conversion (set train.name=fsdp)")
    if mtype == "llama" and getattr(hf_config, "attention_bias", False):
        raise UnsupportedModelError(f"{key}: attention_bias=true (o_proj bias) is not supported by the Megatron conversion (set train.name=fsdp)")
    if mtype == "qwen3" and getattr(hf_config, "attention_bias", False):
        raise UnsupportedModelError(f"{key}: attention_bias=true is not supported by the Megatron conversion (set train.name=fsdp)")
    if mtype in ("qwen2", "qwen3") and getattr(hf_config, "use_sliding_window", False):
        raise UnsupportedModelError(f"{key}: use_sliding_window=true is not supported by the Megatron backend (set train.name=fsdp)")
    heads = hf_config.num_attention_heads
    moe = {}
    if mtype in ("hy_v3", "glm4_moe"):
        from rl_train_megatron.sigmoid_moe import shape_fields

        moe = shape_fields(hf_config, key)
    elif mtype in MOE_TYPES:
        moe = _moe_fields(hf_config, key)
    moe = {"qkv_bias": mtype in ("qwen2", "qwen2_moe"), "qk_norm": mtype in ("qwen3", "qwen3_moe"), "family": mtype, **moe}
    return ModelShape(
        layers=hf_config.num_hidden_layers,
        hidden=hf_config.hidden_size,
        heads=heads,
        kv_heads=getattr(hf_config, "num_key_value_heads", None) or heads,
        head_dim=getattr(hf_config, "head_dim", None) or hf_config.hidden_size // heads,
        ffn=hf_config.intermediate_size,
        vocab=hf_config.vocab_size,
        tied=bool(getattr(hf_config, "tie_word_embeddings", False)) and not critic,
        eps=float(hf_config.rms_norm_eps),
        max_positions=int(getattr(hf_config, "max_position_embeddings", 4096)),
        critic=critic,
        score_bias=bool(getattr(hf_config, "token_classification_bias", True)),
        **moe,
    )


def _moe_fields(hf_config, key: str) -> dict:
    """Qwen2-MoE / Qwen3-MoE's expert layout; every layer must be an MoE layer (no dense ``mlp_only_layers``)."""
    if getattr(hf_config, "mlp_only_layers", None) or int(getattr(hf_config, "decoder_sparse_step", 1) or 1) != 1:
        raise UnsupportedModelError(
            f"{key}: mlp_only_layers={getattr(hf_config, 'mlp_only_layers', None)} / decoder_sparse_step={getattr(hf_config, 'decoder_sparse_step', 1)}: "
            "the Megatron backend builds MoE models whose every layer is an MoE layer (set train.name=fsdp)"
        )
    return dict(
        experts=int(hf_config.num_experts),
        topk=int(hf_config.num_experts_per_tok),
        moe_ffn=int(hf_config.moe_intermediate_size),
        shared_ffn=int(getattr(hf_config, "shared_expert_intermediate_size", 0) or 0),
        norm_topk=bool(getattr(hf_config, "norm_topk_prob", False)),
    )


def check_divisible(shape: ModelShape, tp: int, pp: int, ep: int = 1, etp: int | None = None, sp: bool = False) -> None:
    """TP must divide the heads, KV heads, FFN width and vocabulary; PP the layers; EP the experts and ETP each
    expert's width (clear errors)."""
    key = "train.tensor_model_parallel_size"
    dims = [("attention heads", shape.heads), ("key/value heads", shape.kv_heads), ("vocab_size", shape.vocab)]
    if shape.moe:
        dims += [("shared_expert_intermediate_size", shape.shared_ffn)] if shape.shared_ffn else []
        dims += [("intermediate_size (dense layers)", shape.ffn)] if shape.dense_layers else []
    else:
        dims += [("intermediate_size", shape.ffn)]
    if shape.moe and tp > 1 and not sp:
        raise ParallelSizeError(
            f"{key}={tp} with an MoE model: megatron-core's MoE layers train with TP > 1 only under sequence parallelism; set "
            "train.options.transformer_config.sequence_parallel=true (verl: actor_rollout_ref.actor.megatron.sequence_parallel=True), or "
            "split the experts with train.expert_model_parallel_size and set train.tensor_model_parallel_size=1"
        )
    if ep > 1 and not shape.moe:
        raise ParallelSizeError(f"train.expert_model_parallel_size={ep}, but the model has no experts (a dense model); set train.expert_model_parallel_size=1")
    if shape.moe and shape.experts % ep:
        raise ParallelSizeError(
            f"train.expert_model_parallel_size={ep} does not divide the model's {shape.experts} experts "
            f"({shape.experts} % {ep} = {shape.experts % ep}); pick an EP that divides {shape.experts}"
        )
    etp = tp if etp is None else etp
    if shape.moe and shape.moe_ffn % etp:
        raise ParallelSizeError(
            f"train.expert_tensor_parallel_size={etp} does not divide each expert's moe_intermediate_size {shape.moe_ffn}; pick one that divides it"
        )
    for what, n in dims:
        if n % tp:
            raise ParallelSizeError(f"{key}={tp} does not divide the model's {what} ({n} % {tp} = {n % tp}); pick a TP that divides {n}")
    if shape.stages:
        if len(shape.stages) != pp or sum(shape.stages) != shape.layers:
            raise ParallelSizeError(f"the pipeline split {shape.stages} does not give the model's {shape.layers} layers to {pp} stages")
    elif shape.layers % pp:
        raise ParallelSizeError(
            f"train.pipeline_model_parallel_size={pp} does not divide the model's {shape.layers} layers "
            f"({shape.layers} % {pp} = {shape.layers % pp}); pick a PP that divides {shape.layers}"
        )


def rotary_inv_freq(hf_config) -> torch.Tensor:
    """The rotary inverse frequencies transformers uses for this config (any rope type with no attention scaling)."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    if getattr(hf_config, "model_type", None) == "glm4_moe":  # GLM rotates part of each head (partial_rotary_factor)
        from transformers.models.glm4_moe.modeling_glm4_moe import Glm4MoeRotaryEmbedding as LlamaRotaryEmbedding
    rope = LlamaRotaryEmbedding(hf_config)
    if float(getattr(rope, "attention_scaling", 1.0)) != 1.0:
        raise UnsupportedModelError(
            f"model.path: rope type {getattr(rope, 'rope_type', '?')!r} scales attention ({rope.attention_scaling}); not supported by the Megatron backend"
        )
    return rope.inv_freq.detach().float().clone()


def moe_config(shape: ModelShape, ep: int, etp: int, passed: dict | None = None) -> dict:
    """The TransformerConfig fields of the model's MoE layers (none for a dense model)."""
    if not shape.moe:
        return {}
    out = dict(
        num_moe_experts=shape.experts,
        moe_router_topk=shape.topk,
        moe_ffn_hidden_size=shape.moe_ffn,
        moe_router_pre_softmax=not shape.norm_topk,
        moe_router_score_function="softmax",
        moe_grouped_gemm=False,
        moe_token_dispatcher_type="allgather",
        moe_aux_loss_coeff=0.0,
        expert_model_parallel_size=ep,
        expert_tensor_parallel_size=etp,
    )
    if shape.shared_ffn:
        out.update(moe_shared_expert_intermediate_size=shape.shared_ffn, moe_shared_expert_gate=True)
    if shape.expert_bias:
        from rl_train_megatron import sigmoid_moe

        out.update(sigmoid_moe.moe_config(shape, passed))
    return out


def transformer_config(shape: ModelShape, tp: int, pp: int, passed: dict | None = None, ep: int = 1, etp: int | None = None, vpp: int = 1):
    """The model's TransformerConfig: its shape, :data:`rl_train_megatron.options.FIXED`, and the ``passed`` fields
    (``train.options.transformer_config``: activation recomputation, :data:`~rl_train_megatron.options.PASSED_THROUGH`)."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    from rl_train_megatron.options import FIXED, PASSED_THROUGH

    from rl_train_megatron.options import MOE_PASSED
    from rl_train_megatron.stages import split_fields

    moe = moe_config(shape, ep, tp if etp is None else etp, passed)
    if moe:
        from rl_train_megatron.sigmoid_moe import check_expert_bias

        check_expert_bias(shape, passed)
    extra = {k: v for k, v in (passed or {}).items() if k in PASSED_THROUGH or (moe and k in MOE_PASSED)}
    if shape.expert_bias:  # the model's router scaling and the parsed update rate (rl_train_megatron.sigmoid_moe)
        extra = {k: v for k, v in extra.items() if k not in ("moe_router_topk_scaling_factor", "moe_router_bias_update_rate")}
    if pp > 1:  # uneven pipeline stages: megatron-core builds each stage's layers by them (the conversion follows shape.stages)
        extra.update(split_fields(passed))
    if vpp > 1:  # virtual pipeline stages: each GPTModel chunk (vp_stage) builds its layers (rl_train_megatron.stages.virtual_split)
        extra["virtual_pipeline_model_parallel_size"] = vpp
    from rl_train_megatron.layout import LAYOUT, layout_string

    if pp > 1 and layout_string(passed):  # a custom pipeline layout (rl_train_megatron.layout; the conversion follows shape.stages)
        extra[LAYOUT] = layout_string(passed)
    from rl_train_megatron import sequence_parallel

    if sequence_parallel.wanted(passed, tp):  # rl_train_megatron.sequence_parallel
        extra["sequence_parallel"] = True
    return TransformerConfig(
        num_layers=shape.layers,
        hidden_size=shape.hidden,
        num_attention_heads=shape.heads,
        num_query_groups=shape.kv_heads,
        kv_channels=shape.head_dim,
        ffn_hidden_size=shape.ffn,
        layernorm_epsilon=shape.eps,
        activation_func=F.silu,
        add_qkv_bias=shape.qkv_bias,
        qk_layernorm=shape.qk_norm,
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp,
        pipeline_dtype=torch.float32,
        params_dtype=torch.float32,
        **FIXED,
        **{**moe, **extra},
    )


def build_model(
    shape: ModelShape, hf_config, tp: int, pp: int, passed: dict | None = None, cp: int = 1, ep: int = 1, etp: int | None = None,
    vpp: int = 1, vp_stage: int = 0,
) -> torch.nn.Module:
    """This rank's ``GPTModel`` (fp32, CPU, uninitialised); the critic gets ``value_head`` instead of the LM head.
    ``cp > 1``: the attention is :class:`rl_train_megatron.context_parallel.ContextParallelAttention`. ``vpp > 1``: the
    model chunk ``vp_stage`` of this pipeline stage (the embedding on chunk 0 of the first stage, the final norm and
    the heads on the last chunk of the last stage)."""
    from megatron.core import parallel_state as mpu
    from megatron.core.models.gpt import GPTModel

    from rl_train_megatron import sequence_parallel

    sp = sequence_parallel.wanted(passed, tp)
    check_divisible(shape, tp, pp * vpp, ep, etp, sp)
    if sp:
        sequence_parallel.install_norm()
    config = transformer_config(shape, tp, pp, passed, ep, etp, vpp)
    with _virtual_world(mpu, vpp if config.pipeline_model_parallel_layout is not None else None):
        spec = _layer_spec(shape, config, cp, vpp, vp_stage)
        model = _gpt_model(GPTModel, config, spec, shape, pp, vpp, vp_stage, mpu)
    model.rotary_pos_emb.inv_freq = rotary_inv_freq(hf_config)
    if shape.expert_bias:
        from rl_train_megatron.sigmoid_moe import hold_bias_as_parameter

        hold_bias_as_parameter(model)
    if sp and model.post_process and hasattr(model, "output_layer"):
        # the engine gathers the final hidden states itself and slices the predicting rows: the LM head runs as an ordinary
        # vocabulary-parallel linear (input gradient summed over TP), not on sequence-parallel input
        model.output_layer.sequence_parallel, model.output_layer.allreduce_dgrad = False, True
    if shape.critic and model.post_process:
        del model.output_layer
        model.value_head = torch.nn.Linear(shape.hidden, 1, bias=shape.score_bias)
    return model


def _layer_spec(shape: ModelShape, config, cp: int, vpp: int, vp_stage: int):
    """The local layer spec (every layer alike), or with dense layers in an MoE model megatron-core's block spec of
    this stage's layers (``moe_layer_freq``); with ``cp > 1`` the context-parallel attention in each."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec, get_gpt_layer_local_spec

    if shape.dense_layers:
        spec = get_gpt_decoder_block_spec(config, use_transformer_engine=False, normalization="RMSNorm", vp_stage=vp_stage if vpp > 1 else None)
        layers = spec.layer_specs
    else:
        spec = get_gpt_layer_local_spec(num_experts=shape.experts or None, moe_grouped_gemm=False, normalization="RMSNorm", qk_layernorm=shape.qk_norm)
        layers = [spec]
    from rl_train_megatron import sdpa

    if cp > 1:
        from rl_train_megatron.context_parallel import ContextParallelAttention as core_attention
    elif CORE_ATTENTION == "sdpa":
        core_attention = sdpa.SDPAttention  # torch's fused attention in megatron-core's DotProductAttention slot
    else:  # megatron-core's own unfused DotProductAttention (the bench's A/B)
        return spec
    for layer in layers:
        sdpa.use_in_spec(layer, core_attention)
    return spec


@contextlib.contextmanager
def _virtual_world(mpu, vpp: int | None):
    """megatron-core's custom pipeline layout reads the model chunks per stage from its parallel state (the engine does
    not set it otherwise: it runs the virtual stages itself); set while a chunk is built."""
    if not vpp or vpp == 1:
        yield
        return
    before = mpu.get_virtual_pipeline_model_parallel_world_size()
    mpu.set_virtual_pipeline_model_parallel_world_size(vpp)
    try:
        yield
    finally:
        mpu.set_virtual_pipeline_model_parallel_world_size(before)


def _gpt_model(GPTModel, config, spec, shape: ModelShape, pp: int, vpp: int, vp_stage: int, mpu):
    return GPTModel(
        config=config,
        transformer_layer_spec=spec,
        vocab_size=shape.vocab,
        max_sequence_length=shape.max_positions,
        pre_process=mpu.is_pipeline_first_stage() and vp_stage == 0,
        post_process=mpu.is_pipeline_last_stage() and vp_stage == vpp - 1,
        parallel_output=True,
        # PP > 1: the last stage's LM head is a copy of the tied embedding (loaded from the same tensor, gradients
        # summed over the embedding group by the engine); megatron's own tying would move it to CUDA at build time
        share_embeddings_and_output_weights=shape.tied and pp == 1,
        position_embedding_type="rope",
        **({"vp_stage": vp_stage} if vpp > 1 else {}),
    )


# ------------------------------------------------------------------- forward
def attention_mask(mask: torch.Tensor) -> torch.Tensor | None:
    """``[b, s]`` padding mask (1 = token) -> ``[b, 1, s, s]`` bool, True where a query may not look; None (causal:
    :class:`rl_train_megatron.sdpa.SDPAttention` runs the causal kernel, flash attention on GPUs) when no column is
    padding."""
    if CORE_ATTENTION == "sdpa" and bool(mask.all()):
        return None
    s = mask.shape[1]
    causal = torch.ones(s, s, dtype=torch.bool, device=mask.device).triu(1)
    return causal[None, None] | ~mask.bool()[:, None, None, :]


def rotary_angles(model, position_ids: torch.Tensor) -> torch.Tensor:
    """``[s, b, 1, head_dim]`` rotary angles at the given positions (non-interleaved halves, as transformers)."""
    rope = model.rotary_pos_emb
    inv = rope.inv_freq
    if inv.device != position_ids.device:  # a plain attribute (model.to does not move it): one copy kept on the device
        src, cached = getattr(rope, "_rl_inv_freq", (None, None))
        if src is not inv or cached.device != position_ids.device:
            cached = inv.to(position_ids.device)
            rope._rl_inv_freq = (inv, cached)
        inv = cached
    freqs = position_ids.float()[..., None] * inv  # [b, s, d/2]
    return torch.cat((freqs, freqs), dim=-1).transpose(0, 1)[:, :, None, :]


def stage_hidden(model, input_ids, attention, position_ids, hidden_in: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
    """This pipeline stage's output ``[s, b, h]``: from the tokens on the first stage, else from ``hidden_in``.

    The last stage's output has been through the final norm. ``mask``: a ready ``[b, 1, s, s_keys]`` attention mask
    (context parallelism) instead of the one built from ``attention``.
    """
    if model.pre_process:
        x = model.embedding(input_ids=input_ids, position_ids=position_ids)
    else:
        model.decoder.set_input_tensor(hidden_in)
        x = None
    mask = attention_mask(attention) if mask is None else mask
    return model.decoder(hidden_states=x, attention_mask=mask, rotary_pos_emb=rotary_angles(model, position_ids))


def response_hidden(model, input_ids, attention, position_ids, response_length: int) -> torch.Tensor:
    """Final hidden states ``[R, b, h]`` at the positions that predict the last ``R`` tokens (one stage, PP 1)."""
    R = response_length
    return stage_hidden(model, input_ids, attention, position_ids)[-R - 1 : -1]


def local_logits(model, hidden: torch.Tensor) -> torch.Tensor:
    """``[b, R, V / TP]``: this TP rank's slice of the vocabulary, float32."""
    weight = model.shared_embedding_or_output_weight() if model.share_embeddings_and_output_weights else None
    logits, _ = model.output_layer(hidden, weight=weight)
    return logits.transpose(0, 1).float()


def values(model, hidden: torch.Tensor) -> torch.Tensor:
    """Critic values ``[b, R]`` from the value head."""
    return model.value_head(hidden).squeeze(-1).transpose(0, 1).float()


def vocab_parallel_log_probs(
    logits: torch.Tensor, labels: torch.Tensor, *, with_entropy: bool = False, entropy_grad: bool = True, group=None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``log softmax(logits)[labels]`` and the entropy, from this TP rank's vocabulary slice.

    ``logits [b, R, V / TP]`` (rank ``r`` holds ids ``r * V/TP ...``),
    ``labels [b, R]`` -> ``[b, R]`` each. Three all-reduces of ``[b, R]``
    (max, sum of exps, picked logit; one more for the entropy); gradients
    flow through the sums (megatron's reduce-from-TP region: all-reduce
    forward, identity backward), which is right because every term after a
    reduction is computed identically on all TP ranks. With one TP rank this
    is the plain formula.
    """
    from megatron.core import parallel_state as mpu
    from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region as tp_sum

    group = group if group is not None else mpu.get_tensor_model_parallel_group()
    world = torch.distributed.get_world_size(group)
    rank = torch.distributed.get_rank(group)
    local_v = logits.shape[-1]
    start = rank * local_v
    m = logits.detach().max(-1).values
    if world > 1:
        torch.distributed.all_reduce(m, op=torch.distributed.ReduceOp.MAX, group=group)
    shifted = logits - m.unsqueeze(-1)
    exp = shifted.exp()
    sum_exp = exp.sum(-1)
    mine = (labels >= start) & (labels < start + local_v)
    picked = shifted.gather(-1, (labels - start).clamp(0, local_v - 1).unsqueeze(-1)).squeeze(-1) * mine
    if world > 1:
        sum_exp, picked = tp_sum(sum_exp, group), tp_sum(picked, group)
    log_z = sum_exp.log()
    log_probs = picked - log_z
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(torch.is_grad_enabled() and entropy_grad):
            # sum_v p_v * s_v = (sum_v e^s_v * s_v) / Z with both sums all-reduced first: everything after the
            # all-reduces is the same on every rank, which the identity backward of the reduction assumes
            weighted = (exp * shifted).sum(-1)
            if world > 1:
                weighted = tp_sum(weighted, group)
            entropy = log_z - weighted / sum_exp
        if not entropy_grad:
            entropy = entropy.detach()
    return log_probs, entropy


# ------------------------------------------------------------------- MoE
#: the routers' losses megatron-core's tracker records (unscaled: the loss divided by its coefficient)
AUX_LOSS_NAMES = ("load_balancing_loss", "seq_load_balancing_loss", "global_load_balancing_loss", "z_loss")


def check_moe_on_cpu(given: dict) -> None:
    """MoE settings that need CUDA (``alltoall`` / ``flex`` dispatchers, DeepEP, the shared-expert overlap): a clear
    error at the engine's start on the CPU."""
    from rl_train_megatron.options import moe_cpu_problems

    bad = moe_cpu_problems(given or {})
    if bad:
        name, why = bad[0]
        raise UnsupportedModelError(
            f"train.options.transformer_config.{name} {why}; it runs on a GPU only. "
            f"Remove it (or set moe_token_dispatcher_type=allgather) to train on the CPU"
        )


def set_aux_loss_scale(weight: float, device: torch.device) -> None:
    """The weight of the next backward's router aux / z losses: the micro-batch's share of the mini-batch (as its loss)."""
    from megatron.core.transformer.moe.moe_utils import MoEAuxLossAutoScaler

    MoEAuxLossAutoScaler.set_loss_scale(torch.tensor(float(weight), device=device))


def aux_loss_metrics(shape: ModelShape, dp_group, pp_group, sp_group=None) -> dict[str, float]:
    """``moe/<loss>``: each router loss megatron-core recorded since the last call, mean over the MoE layers, the
    forward passes and the data-parallel ranks (summed over pipeline stages, which hold different layers); the
    tracker is cleared. Every rank must call it (collectives).

    Sequence / context parallelism (``sp_group``: the TP x CP group): each rank's router saw its share of the tokens. A
    loss megatron-core records with a reduce group (the load-balancing losses: this rank's part of the whole) is summed
    over it, one recorded without (the z loss: this share's mean) is averaged over the group (equal shares)."""
    from megatron.core.transformer.moe.moe_utils import get_moe_layer_wise_logging_tracker

    tracker = get_moe_layer_wise_logging_tracker()
    rows = []
    for name in AUX_LOSS_NAMES:
        entry = tracker.get(name)
        values = entry["values"].detach().float().cpu() if entry else torch.zeros(shape.layers)
        if entry and sp_group is not None and not entry.get("reduce_group_has_dp", False):
            group = entry.get("reduce_group")
            values = values.clone()
            torch.distributed.all_reduce(values, group=group if group is not None else sp_group)
            if group is None:
                values /= torch.distributed.get_world_size(sp_group)
        rows.append(torch.cat([values[: shape.layers], torch.tensor([float(entry is not None)])]))
        if entry:
            entry["values"].zero_()
    table = torch.stack(rows)  # [names, layers + 1 (recorded)]
    forwards = torch.tensor([float(_FORWARDS["n"])])
    _FORWARDS["n"] = 0
    if pp_group is not None and torch.distributed.get_world_size(pp_group) > 1:
        torch.distributed.all_reduce(table, group=pp_group)
    if dp_group is not None and torch.distributed.get_world_size(dp_group) > 1:
        torch.distributed.all_reduce(table, group=dp_group)
        torch.distributed.all_reduce(forwards, group=dp_group)
    n = max(float(forwards), 1.0) * (shape.layers - len(shape.dense_layers))  # (dense layers record no router loss)
    return {f"moe/{name}": float(table[i, :-1].sum()) / n for i, name in enumerate(AUX_LOSS_NAMES) if table[i, -1] > 0}


_FORWARDS = {"n": 0}  # training forwards since the last aux_loss_metrics (this process)


def fit_aux_loss_tracker(layers: int) -> None:
    """megatron-core's router-loss tracker is one per process, each entry sized by the first model that recorded into
    it: an entry sized for another depth (an engine of another model in this process: a critic, an earlier engine) would
    make this model's deeper layers index past its end. Such entries are dropped before this model's training forward
    (:func:`aux_loss_metrics` has already read and zeroed what the other engine recorded)."""
    from megatron.core.transformer.moe.moe_utils import get_moe_layer_wise_logging_tracker

    tracker = get_moe_layer_wise_logging_tracker()
    for name in [n for n, entry in tracker.items() if entry["values"].numel() != layers]:
        del tracker[name]


def count_training_forward() -> None:
    _FORWARDS["n"] += 1
