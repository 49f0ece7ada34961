"""The verl profile: a verl launch gets verl's defaults for what it leaves unset.

A launch is verl's (:func:`rl_verl.dialect.detect`) when it names a config file (``--config-name``, e.g. verl's
own ``ppo_trainer``), writes an override in Hydra's grammar (``+key``, ``~key``, ``group@package=...``), selects
verl's ``model_engine`` group, or chooses the profile: ``--profile verl``, ``profile=verl`` (an override, or a
top-level ``profile:`` in the YAML); ``profile=rl-core`` keeps rl-core's defaults. A native launch with some of
verl's keys never takes these defaults. :data:`VERL_DEFAULTS` holds verl's default for every rl-core key whose own
default differs (verl 0.9's ``ppo_trainer.yaml``; ``plugins/verl/tests/test_verl_profile.py`` compares them with
verl's generated config). ``rlcore check`` lists each one a launch leaves unset.
"""

from __future__ import annotations

from typing import Any

from rl_core.problems import Problem

#: rl-core key -> verl's default, where rl-core's own default differs
VERL_DEFAULTS: dict[str, Any] = {
    "data.train_batch_size": 1024,
    "data.filter_overlong_prompts": False,  # verl keeps them (and data.truncation=error refuses one)
    "actor.ppo_mini_batch_size": 256,
    "actor.optim.lr_warmup_steps": -1,  # -1: lr_warmup_steps_ratio decides (0.0)
    "model.enable_gradient_checkpointing": True,
    "rollout.n": 1,
    "rollout.tensor_model_parallel_size": 2,
    # verl returns the rollout's log-probs on every step (its mismatch metrics); rl-core's auto (null) returns them
    # where something uses them, else every GAP_EVERY-th step
    "rollout.calculate_log_probs": True,
    "algorithm.adv_estimator": "gae",
    "trainer.total_epochs": 30,
    "trainer.max_ckpt_to_keep": None,  # keep every checkpoint
    "trainer.loggers": ["console", "wandb"],
    "trainer.project_name": "verl_examples",
    "trainer.experiment_name": "gsm8k",
    "trainer.n_gpus_per_node": 8,
    "trainer.device": "cuda",
    "reward.num_workers": 8,
}
#: verl's trainer.default_local_dir: checkpoints/${trainer.project_name}/${trainer.experiment_name}
OUTPUT_DIR = "trainer.output_dir"
#: verl runs every job on Ray: a config over several nodes (trainer.nnodes > 1) gets trainer.placement=ray
PLACEMENT = "trainer.placement"


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 1


def get_dotted(tree: dict[str, Any], key: str, missing: Any = None) -> Any:
    node: Any = tree
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return missing
        node = node[part]
    return node


def unset_defaults(tree: dict[str, Any]) -> list[tuple[str, Any]]:
    """``(rl-core key, verl's value)`` for every profile default the config ``tree`` leaves unset."""
    marker = object()
    out = [(k, v) for k, v in VERL_DEFAULTS.items() if get_dotted(tree, k, marker) is marker]
    if get_dotted(tree, PLACEMENT, marker) is marker and _int(get_dotted(tree, "trainer.nnodes", 1)) > 1:
        out.append((PLACEMENT, "ray"))  # verl always runs on Ray; rl-core's local placement is one machine
    if get_dotted(tree, OUTPUT_DIR, marker) is marker:
        project = get_dotted(tree, "trainer.project_name", VERL_DEFAULTS["trainer.project_name"])
        experiment = get_dotted(tree, "trainer.experiment_name", VERL_DEFAULTS["trainer.experiment_name"])
        out.append((OUTPUT_DIR, f"checkpoints/{project}/{experiment}"))
    return out


def generated_batch(tree: dict[str, Any]) -> Problem | None:
    """verl trains a step on every prompt it generated: ``data.gen_batch_size`` without dynamic sampling is the step's
    batch (verl's data.train_batch_size then only enters its size checks). The tree gets train_batch_size = gen_batch_size,
    and a warning says so."""
    gen = get_dotted(tree, "data.gen_batch_size")
    enabled = str(get_dotted(tree, "algorithm.filter_groups.enable", False)).lower() == "true"
    train = get_dotted(tree, "data.train_batch_size", VERL_DEFAULTS["data.train_batch_size"])
    if gen is None or enabled or _int(gen) == _int(train):
        return None
    tree["data"]["train_batch_size"] = gen  # "data" holds gen_batch_size, so it exists
    del tree["data"]["gen_batch_size"]
    return Problem(key="data.gen_batch_size", severity="warning",
                   what=f"is {gen} with algorithm.filter_groups.enable=false: verl trains each step on all {gen} generated prompts, "
                   f"so rl-core's data.train_batch_size is {gen} (verl's data.train_batch_size={train} only enters its size checks)")
