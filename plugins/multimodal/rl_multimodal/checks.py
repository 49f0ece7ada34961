"""rl-multimodal's checks: what of a run cannot carry the prompts' images (the model, the backends' cards, the
estimator, multi-turn rollouts, rows with and without images over several train ranks), and ``data.image_patch_size``
against the model folder's image processor."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rl_core.plan.preflight import data_rows
from rl_core.problems import Problem


def stack_problems(stack: Any, datasets: list, registry: Any = None) -> list:
    """What of a resolved stack cannot carry the prompts' images (``datasets``: the run's PromptDatasets), as Problems.
    ``registry`` (code that has one) names the installed backends that read images; a run has none to ask."""

    items = [it for ds in datasets if ds is not None for it in ds.items]
    with_images = sum(bool(it.get("images")) for it in items)
    if not with_images:
        return []
    cfg, out = stack.config, []
    if with_images < len(items) and stack.sizes.ranks("actor")[0] > 1:
        out.append(Problem(key="data.train_files", what=f"mix {with_images} prompts with images and {len(items) - with_images} without, over "
                           f"{stack.sizes.ranks('actor')[0]} train ranks: a rank whose micro-batch has no image would skip the vision "
                           "tower that the others run (its sharded weights are gathered collectively)",
                           fix="use one train process (trainer.n_gpus_per_node=1), or data where every row has an image"))
    out += card_problems(cfg, stack.rollout, stack.train, stack.estimator, registry)
    return out


def card_problems(cfg: Any, rollout: Any, train: Any, estimator: Any, registry: Any = None) -> list:
    """Prompts with images and the run's cards (any may be None: not resolved): a rollout / train backend that cannot
    carry them, an estimator with a critic, multi-turn rollouts; as Problems naming the key."""

    out = []
    for kind, card, does in (("rollout", rollout, "does not generate from prompts with images"), ("train", train, "has forwards that do not read the prompts' images")):
        if card is not None and not card.images:
            able = ", ".join(sorted(c.name for c in registry.cards[kind].values() if c.images)) or "none" if registry is not None else "`rlcore plugins` lists them"
            out.append(Problem(key=f"{kind}.name", what=f"is {card.name!r}, which {does}",
                               fix=f"set {kind}.name to a backend that reads images (installed: {able}), or use text-only data"))
    if estimator is not None and estimator.needs_critic:
        out.append(Problem(key="algorithm.adv_estimator", what=f"is {cfg.algorithm.adv_estimator!r}, which needs a critic, and the critic's forward does not read images yet",
                           fix="use a critic-free estimator (grpo, rloo, reinforce_plus_plus, ...), or text-only data"))
    if getattr(getattr(cfg.rollout, "multi_turn", None), "enable", False):  # rl-agent's section
        out.append(Problem(key="rollout.multi_turn.enable", what="is true, and multi-turn rollouts do not carry images yet", fix="set it to false, or use text-only data"))
    return out


def data_problems(cfg: Any, registry: Any, rows: list[dict]) -> list:
    """``rlcore check``: the first rows read hold images (``images``) -> the model must have a vision tower and the
    configured cards must carry them (:func:`card_problems`)."""

    if not any(r.get("images") for r in rows):
        return []
    from rl_core.modeling import load_hf_config  # transformers: only for rows with images

    out = []
    try:
        vision = getattr(load_hf_config(cfg.model.path, trust_remote_code=cfg.model.trust_remote_code), "vision_config", None) is not None
    except Exception:  # noqa: BLE001 - the model folder's own problems are reported by its check
        vision = True
    if not vision:
        out.append(Problem(key="model.path", what=f"{cfg.model.path!r} has no vision tower, and the data's rows hold images ({cfg.data.image_key!r})",
                           fix="use a vision-language model (e.g. Qwen2.5-VL), or text-only rows"))

    def card(kind: str, name: str | None):
        cards = registry.cards[kind]
        if name is None:
            defaults = [c for c in cards.values() if getattr(c, "default", False)]
            return defaults[0] if len(defaults) == 1 else None
        return cards.get(name)

    estimator = registry.cards["estimator"].get(cfg.algorithm.adv_estimator)
    return out + card_problems(cfg, card("rollout", cfg.rollout.name), card("train", cfg.train.name), estimator, registry)


def processor_patch_size(folder: Path) -> int | None:
    """The image processor's ``patch_size`` as the model folder's JSON files record it (no processor is loaded):
    ``preprocessor_config.json`` at the top level, or ``processor_config.json``'s ``image_processor`` section."""
    for name, section in (("preprocessor_config.json", None), ("processor_config.json", "image_processor")):
        try:
            data = json.loads((folder / name).read_text())
        except (OSError, ValueError):
            continue
        if section is not None:
            data = data.get(section) if isinstance(data, dict) else None
        if isinstance(data, dict) and isinstance(data.get("patch_size"), int):
            return data["patch_size"]
    return None


def patch_size_problems(config: Any, registry: Any = None) -> list[Problem]:
    """``data.image_patch_size`` (verl's) against the model folder's image processor, before any data is read: rl-core
    resizes images with the processor's own settings (rl_multimodal.images.check_patch_size is the same rule at train start)."""
    value = config.data.image_patch_size
    folder = Path(os.path.expanduser(config.model.path or ""))
    if value is None or not folder.is_dir():
        return []
    own = processor_patch_size(folder)
    if own is None or own == value:
        return []
    return [Problem(key="data.image_patch_size", what=f"is {value}, but the image processor in {folder} uses patch_size {own}",
                    why="rl-core resizes images only with the model processor's own settings",
                    fix=f"set data.image_patch_size={own} or leave it out")]


def image_problems(config: Any, registry: Any) -> list[Problem]:
    """``rlcore check``'s ``images`` check: the first data rows (read once by the plan's files check) against the run."""
    return data_problems(config, registry, data_rows(config))
