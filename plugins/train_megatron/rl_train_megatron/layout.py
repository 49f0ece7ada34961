"""Which layers each (virtual) pipeline stage holds: equal, uneven or virtual stages (:mod:`rl_train_megatron.stages`), or
megatron-core's custom pipeline layout (``pipeline_model_parallel_layout``, verl's
``megatron.override_transformer_config.pipeline_model_parallel_layout``).

A layout string lists the stages in virtual-stage order, separated by ``|``: ``E`` the embedding, ``t`` a decoder layer,
``L`` the loss (the final norm and the heads), ``m`` an MTP layer, ``x*n`` / ``(...)*n`` repeats; PP x VPP stages (VPP
follows from the count). megatron-core's :class:`PipelineParallelLayerLayout` reads it (the same parser the model's
TransformerConfig uses); the engine converts weights by the decoder layers of each stage and passes the layout to
megatron-core, which builds each stage's layers by it. The backend needs the embedding in the first stage, the loss in
the last, at least one decoder layer in every stage, and no MTP layers (the models it builds have none).
"""

from __future__ import annotations

from typing import Any

from rl_train_megatron.stages import VIRTUAL, StageSplitError, split_fields, virtual_split

LAYOUT = "pipeline_model_parallel_layout"


def layout_string(given: dict[str, Any] | None) -> str | None:
    value = (given or {}).get(LAYOUT)
    if value is None or (isinstance(value, str) and value.strip("'\" ").lower() in ("", "none", "null")):
        return None
    return str(value).strip("'\" ")


def plan(layers: int, pp: int, vpp: int | None, given: dict[str, Any] | None) -> tuple[tuple[int, ...], int]:
    """``(decoder layers of each virtual stage in virtual-stage order, model chunks per stage)``; raises
    :class:`~rl_train_megatron.stages.StageSplitError` naming the field to fix."""
    layout = layout_string(given)
    if layout is None:
        vpp = int(vpp or 1)
        return virtual_split(layers, pp, vpp, given), vpp
    if split_fields(given):
        field = next(iter(split_fields(given)))
        raise StageSplitError(field, f"{field} cannot be set together with {LAYOUT} (megatron-core refuses both at once)")
    from megatron.core.transformer.enums import LayerType
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    try:
        parsed = PipelineParallelLayerLayout(layout, pp)
    except (AssertionError, ValueError, KeyError) as exc:
        raise StageSplitError(LAYOUT, f"{layout!r} is not a layout megatron-core reads for train.pipeline_model_parallel_size={pp}: {exc}") from None
    chunks = parsed.virtual_pipeline_model_parallel_size
    if pp == 1 and chunks > 1:
        raise StageSplitError(LAYOUT, f"{layout!r} lists {chunks} pipeline stages, but train.pipeline_model_parallel_size is 1 (virtual stages "
                                      "interleave over pipeline stages)")
    if vpp not in (None, 1, chunks):
        raise StageSplitError(VIRTUAL, f"virtual_pipeline_model_parallel_size={vpp}, but {LAYOUT} {layout!r} lists {pp * chunks} stages for "
                                       f"train.pipeline_model_parallel_size={pp}: {chunks} model chunk(s) per stage")
    stages = [parsed.layout[p][v] for v in range(chunks) for p in range(pp)]  # virtual-stage order
    if any(LayerType.mtp in s for s in stages):
        raise StageSplitError(LAYOUT, f"{layout!r} places multi-token-prediction (MTP) layers ('m'), which the models the megatron train backend builds do not have")
    ends = (sum(s.count(LayerType.embedding) for s in stages), sum(s.count(LayerType.loss) for s in stages))
    if ends != (1, 1) or stages[0][:1] != [LayerType.embedding] or stages[-1][-1:] != [LayerType.loss]:
        raise StageSplitError(LAYOUT, f"{layout!r}: the megatron train backend needs the embedding ('E') once, first in the first stage, and the loss "
                                      "('L') once, last in the last stage")
    sizes = tuple(s.count(LayerType.decoder) for s in stages)
    if sum(sizes) != layers:
        raise StageSplitError(LAYOUT, f"{layout!r} places {sum(sizes)} decoder layers ('t'), the model has {layers} (num_hidden_layers)")
    if min(sizes) == 0:
        raise StageSplitError(LAYOUT, f"{layout!r} leaves a stage without decoder layers ({list(sizes)}); the megatron train backend needs at least one per stage")
    return sizes, chunks
