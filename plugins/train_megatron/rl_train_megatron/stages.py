"""How many decoder layers each pipeline stage holds (imports neither torch nor megatron-core).

megatron-core 0.16.1's rule (``transformer_block.get_num_layers_to_build`` / ``transformer_layer.get_transformer_layer_offset``,
without virtual stages; with them: :func:`virtual_split`), from four TransformerConfig fields (verl's ``megatron.override_transformer_config.*``):

- ``num_layers_in_first_pipeline_stage`` / ``num_layers_in_last_pipeline_stage``: those stages hold that many layers,
  the stages in between share the rest equally;
- ``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split``: the embedding (the loss) counts
  as one more layer of the first (last) stage, then ``layers + 1 (+ 1)`` are split equally;
- none of them: ``layers / PP`` each;
- virtual pipeline stages (``virtual_pipeline_model_parallel_size`` VPP, :func:`virtual_split`): each stage holds VPP
  model chunks of ``layers / (PP x VPP)`` layers, interleaved.

The engine passes these fields to megatron-core's TransformerConfig (which builds each stage's layers) and converts
weights by :func:`stage_sizes` (:func:`rl_train_megatron.convert.stage_layers`); both must agree, which loading the
converted weights checks name by name.
"""

from __future__ import annotations

from typing import Any

FIRST, LAST = "num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage"
EMBEDDING, LOSS = "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"
FIELDS = (FIRST, LAST, EMBEDDING, LOSS)
VIRTUAL = "virtual_pipeline_model_parallel_size"


class StageSplitError(ValueError):
    """A pipeline split megatron-core would not build; ``field`` names the TransformerConfig field to fix."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _flag(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip("'\"").lower() == "true"
    return bool(value)


def _count(value: Any) -> int | None:
    if value is None or (isinstance(value, str) and value.strip("'\"").lower() in ("null", "none", "")):
        return None
    return int(value)


def split_fields(given: dict[str, Any] | None) -> dict[str, Any]:
    """The pipeline-split fields of a ``transformer_config`` mapping that change the split (normalised; defaults left out)."""
    given = given or {}
    out: dict[str, Any] = {}
    for name in (FIRST, LAST):
        n = _count(given.get(name))
        if n is not None:
            out[name] = n
    for name in (EMBEDDING, LOSS):
        if _flag(given.get(name, False)):
            out[name] = True
    return out


def stage_sizes(layers: int, pp: int, given: dict[str, Any] | None = None) -> tuple[int, ...]:
    """The number of decoder layers on each of the ``pp`` stages, in stage order (raises :class:`StageSplitError`)."""
    f = split_fields(given)
    first, last = f.get(FIRST), f.get(LAST)
    embedding, loss = f.get(EMBEDDING, False), f.get(LOSS, False)
    if (first is not None or last is not None) and (embedding or loss):
        field = EMBEDDING if embedding else LOSS
        raise StageSplitError(field, f"{field} cannot be set together with {FIRST if first is not None else LAST} (megatron-core refuses both at once)")
    if (f and pp == 1):
        field = next(iter(f))
        raise StageSplitError(field, f"{field} splits the layers over pipeline stages, but train.pipeline_model_parallel_size is 1")
    if first is not None or last is not None:
        for name, n in ((FIRST, first), (LAST, last)):
            if n is not None and n <= 0:
                raise StageSplitError(name, f"{name}={n}: a stage must hold at least one layer")
        middle_stages = pp - (first is not None) - (last is not None)
        middle = layers - (first or 0) - (last or 0)
        name = FIRST if first is not None else LAST
        if middle_stages == 0:
            if middle != 0:
                raise StageSplitError(name, f"{FIRST}={first} + {LAST}={last} = {(first or 0) + (last or 0)} is not the model's {layers} layers "
                                            f"(train.pipeline_model_parallel_size={pp} has no stages in between)")
            return (first, last)
        if middle <= 0 or middle % middle_stages:
            raise StageSplitError(name, f"{name}={first if name == FIRST else last} leaves {middle} of the model's {layers} layers for the "
                                        f"{middle_stages} stage(s) in between, which must share them equally (at least one each)")
        per = middle // middle_stages
        return tuple([first] if first is not None else []) + (per,) * middle_stages + tuple([last] if last is not None else [])
    n = layers + embedding + loss
    if n % pp:
        name = EMBEDDING if embedding else LOSS if loss else None
        what = f" ({layers} + the {' and the '.join(w for w, on in (('embedding', embedding), ('loss', loss)) if on)})" if name else ""
        raise StageSplitError(name or "pipeline_model_parallel_size", f"train.pipeline_model_parallel_size={pp} does not divide {n} layers{what} "
                                                                    f"({n} % {pp} = {n % pp})")
    per = n // pp
    sizes = [per] * pp
    sizes[0] -= embedding
    sizes[-1] -= loss
    if min(sizes) <= 0:
        raise StageSplitError(EMBEDDING if embedding else LOSS, f"with {EMBEDDING if embedding else LOSS} a stage would hold no layer "
                                                               f"({sizes}); the megatron train backend needs at least one per stage")
    return tuple(sizes)


def virtual_split(layers: int, pp: int, vpp: int, given: dict[str, Any] | None = None) -> tuple[int, ...]:
    """Virtual (interleaved) pipeline stages: the layers of each of the ``pp x vpp`` model chunks in the order the
    micro-batches go through them (chunk ``v`` of stage ``p`` is virtual stage ``v * pp + p``), megatron-core 0.16.1's
    rule (``get_num_layers_to_build`` / ``get_transformer_layer_offset`` with ``vp_stage``): ``layers / (pp x vpp)`` each.
    With 8 layers, PP 2, VPP 2: stage 0 holds layers [0, 1] and [4, 5], stage 1 [2, 3] and [6, 7].

    Uneven stages together with virtual ones are refused (megatron-core splits each stage's layers over its chunks;
    rl-core does not build that split)."""
    if vpp == 1:
        return stage_sizes(layers, pp, given) if pp > 1 else (layers,)
    f = split_fields(given)
    if f:
        field = next(iter(f))
        raise StageSplitError(field, f"{field} with virtual pipeline stages (train.options.virtual_pipeline_model_parallel_size={vpp}) is a split "
                                     "the megatron train backend does not build; use one of them")
    if pp == 1:
        raise StageSplitError(VIRTUAL, f"virtual_pipeline_model_parallel_size={vpp} interleaves the layers over pipeline stages, but "
                                       "train.pipeline_model_parallel_size is 1")
    chunks = pp * vpp
    if layers % chunks:
        raise StageSplitError(VIRTUAL, f"train.pipeline_model_parallel_size={pp} x virtual_pipeline_model_parallel_size={vpp} = {chunks} model chunks "
                                       f"do not divide the model's {layers} layers ({layers} % {chunks} = {layers % chunks}): every chunk holds "
                                       "an equal share")
    return (layers // chunks,) * chunks


def stage_starts(sizes: tuple[int, ...]) -> tuple[int, ...]:
    out, start = [], 0
    for n in sizes:
        out.append(start)
        start += n
    return tuple(out)
