"""verl's own verdict on each of its example launch scripts: do verl's config checks (those that run before any GPU work) accept it?

    .venv-verl/bin/python bench/verl_scripts/verl_verdicts.py [--scripts plugins/verl/tests/verl_scripts/scripts.json]
        [--verl-mirror /work/.mirror/verl-project+verl/repo] [--recipe-mirror /work/.mirror/verl-project+verl-recipe/repo]
        [--out bench/verl_scripts/verl_verdicts.json]

Runs in its own virtual environment with what importing verl's trainer needs (never rl-core's requirements), e.g.
``python3 -m venv .venv-verl && .venv-verl/bin/pip install torch==2.13.0 hydra-core "transformers>=5.5.3,!=5.6.0,<5.11"
"tensordict>=0.8.0,<=0.10.0,!=0.9.0" ray datasets torchdata accelerate peft pillow cachetools uvicorn fastapi codetiming
dill pandas pyarrow transferqueue==0.1.11 aiohttp`` (verl's own pins; ~2 min). Not installed: vLLM, SGLang, megatron-core,
the optional engines (their import warnings are expected).
verl's ``verl/`` tree at the commit recorded in scripts.json (and verl-recipe's ``dapo/`` at its recorded commit) is
``git archive``d from the mirrors (the ``fetch`` tool writes them) into a temporary folder; nothing of it is committed.

Per script, in the order ``python -m <module> <overrides>`` runs them (verl/trainer/main_ppo.py, main_ppo_v0.py,
ppo/v1/trainer_base.py, workers/engine_workers.py; verl-recipe's dapo/main_dapo.py):

1. ``import``: the script's module imports (a module missing at the commit is verl's refusal);
2. ``compose``: Hydra composes verl's config (the module's config dir, ``--config-path`` / ``--config-name``) with the
   overrides exactly as the script writes them (``+key``, ``~key``, ``model_engine=...``, ``hydra.searchpath``);
3. ``auto_set_device`` (a no-op without an accelerator: the script's ``trainer.device`` stays as written), and for
   the DAPO recipe ``migrate_legacy_reward_impl``;
4. ``validate_config`` (verl/utils/config.py: batch arithmetic, the actor and critic dataclasses with their
   ``__post_init__`` / ``validate``), before Ray starts for main_ppo, inside the task runner for the DAPO recipe;
5. ``task_runner``: ``OmegaConf.resolve``, the v1 trainer's class (``trainer.v1.trainer_mode``), its KL controller and
   group-filter checks, the resource pools (verl's own ``init_resource_pool_mgr``);
6. ``model_config``: ``HFModelConfig`` of actor_rollout_ref.model (as the v1 trainer's tokenizer step builds it) over a
   tiny stand-in model folder (a Qwen2-shaped config and tokenizer) in place of the script's model;
7. ``workers``: what the actor / rollout / ref worker converts before it touches a device: the profiler configs, the ref
   config (with the keys the worker moves), the actor's batch asserts, ``RolloutConfig`` (its ``__post_init__``:
   parallel sizes, MoE TP only with TensorRT-LLM, ...), the rollout world-size divisibility, the checkpoint-engine and
   distillation configs, and the critic's worker config.

Not run (they need the script's own model, the data, a cluster or devices): what the real model's config would add,
the datasets, Ray, the engines (FSDP / Megatron parallel state, vLLM / SGLang servers). A script that needs NPUs or
more nodes only at run time is "accepted" here. Every model path (scripts.json's ``builtin:smollm2``) points at the
stand-in folder; data paths are scripts.json's (never read by these checks). The verdict is the first error, as verl
would stop on it: its type and message. The DAPO recipe is checked against the same verl commit: at the verl its
dapo/REQUIRED_VERL.txt pins (rolling bcb6386, 2026-04) the recipe's main_dapo does not import (``--verl-commit bcb6386...
--only recipe:`` gives ``No module named 'verl.trainer.main_ppo_v0'`` for 30 of its 31 scripts), so the recipe at the extracted
commit runs with a newer verl, as the examples' commit is. "unchecked": a package verl imports for that script is not installed here
(the error is this machine's, not verl's verdict).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib
import importlib.metadata
import importlib.util
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

VERL_MIRROR = "/work/.mirror/verl-project+verl/repo"
RECIPE_MIRROR = "/work/.mirror/verl-project+verl-recipe/repo"
PACKAGES = ("hydra-core", "omegaconf", "torch", "transformers", "tensordict", "ray", "datasets", "peft")
#: the Hydra entry of each module the scripts run: (config dir relative to the module's folder, default config name)
ENTRY = {"verl.trainer.main_ppo": ("config", "ppo_trainer"), "recipe.dapo.main_dapo": ("config", "dapo_trainer"),
         "recipe.dapo.dapo_transfer_queue.main_dapo": ("config", "dapo_transfer_queue_trainer")}


#: the value scripts.json puts in place of every model path (rl-core's builtin model); verl reads a folder instead
REPLACED_MODEL = "builtin:smollm2"


def standin_model(path: Path) -> str:
    """A tiny Qwen2-shaped causal LM config with a word-level tokenizer (bos / eos / pad, a chat template), saved to
    ``path``: what verl's HFModelConfig reads in place of the script's model (no weights are needed by the checks)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config

    words = ["<pad>", "<s>", "</s>", "<unk>", *"abcdefghijklmnopqrstuvwxyz0123456789"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>")
    fast.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    fast.save_pretrained(path)
    cfg = Qwen2Config(vocab_size=len(words), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=2, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    cfg.architectures = ["Qwen2ForCausalLM"]
    cfg.save_pretrained(path)
    return str(path)


def unchecked(exc: BaseException, overrides: list[str]) -> str | None:
    """Why an error is this machine's, not verl's verdict (a package verl imports for the script is not installed here)."""
    missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    if missing and not missing.startswith(("verl", "recipe")):
        return f"needs the Python package {missing!r}, not installed in .venv-verl"
    if "vllm version None" in str(exc):
        return "needs vLLM installed (verl reads vLLM's LoRA ranks for actor_rollout_ref.model.lora_rank > 0)"
    for o in overrides:
        if o.startswith("hydra.searchpath=") and "pkg://" in o:
            pkg = o.split("pkg://", 1)[1].split(".")[0].split("]")[0]
            if importlib.util.find_spec(pkg) is None:
                return f"needs the package {pkg!r} that {o} names (not part of verl), not installed in .venv-verl"
    return None


def archive(mirror: str, commit: str, tree: str, dest: Path) -> None:
    """``git archive`` one folder of a bare mirror at a commit into ``dest``."""
    data = subprocess.run(["git", "--git-dir", mirror, "archive", commit, tree], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=data, check=True)


def error_text(exc: BaseException, src: Path) -> str:
    """verl's error as a user sees it: the exception type and its message (the first lines; the temporary tree's path
    as ``<verl checkout>``)."""
    msg = (str(exc).strip() or repr(exc)).replace(str(src), "<verl checkout>")
    lines = [ln for ln in msg.splitlines() if ln.strip()][:6]
    return f"{type(exc).__name__}: " + " | ".join(lines)


def compose(module: str, overrides: list[str], src: Path):
    """The config ``python -m <module> <overrides>`` builds: Hydra, the module's config dir, the overrides as written."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    rel, name = ENTRY[module]
    flags = {o.split("=", 1)[0]: o.split("=", 1)[1] for o in overrides if o.startswith("--")}
    rel = flags.get("--config-path", rel)
    name = flags.get("--config-name", name)
    config_dir = (src / module.replace(".", "/")).parent / rel
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir.resolve()), version_base=None):
        return hydra_compose(config_name=name, overrides=[o for o in overrides if not o.startswith("--")])


def ref_config(config):
    """The ref section the way verl's ActorRolloutRefWorker.init_model rewrites it before converting it (its
    log_prob_* keys become the actor-style keys; the mini-batch is the actor's)."""
    from omegaconf import open_dict

    ref = copy.deepcopy(config.actor_rollout_ref.ref)
    with open_dict(ref):
        ref.ppo_mini_batch_size = config.actor_rollout_ref.actor.ppo_mini_batch_size
        ref.ppo_micro_batch_size = ref.pop("log_prob_micro_batch_size", None)
        ref.ppo_micro_batch_size_per_gpu = ref.pop("log_prob_micro_batch_size_per_gpu", None)
        ref.use_dynamic_bsz = ref.pop("log_prob_use_dynamic_bsz", False)
        ref.ppo_max_token_len_per_gpu = ref.pop("log_prob_max_token_len_per_gpu", None)
    return ref


def worker_checks(config) -> None:
    """What verl's workers convert and assert from the config before they touch a device (engine_workers.py's
    ActorRolloutRefWorker.__init__ / init_model, trainer_base.py's critic worker config)."""
    from verl.trainer.distillation import is_distillation_enabled
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass
    from verl.utils.profiler import ProfilerConfig
    from verl.workers.config import RolloutConfig  # noqa: F401  (the rollout section's _target_)

    arr = config.actor_rollout_ref
    profiler = arr.actor.get("profiler", {})
    omega_conf_to_dataclass(profiler, dataclass_type=ProfilerConfig)
    if profiler.get("tool", None) in ["npu", "nsys", "torch", "torch_memory", "precision_debugger"]:
        omega_conf_to_dataclass(profiler.get("tool_config", {}).get(profiler.get("tool")))
    lora_rank = arr.model.get("lora", {}).get("rank", 0)
    if lora_rank <= 0:
        lora_rank = arr.model.get("lora_rank", 0)
    ref_in_actor = lora_rank > 0 or arr.model.get("lora_adapter_path") is not None
    if need_reference_policy(config) and not ref_in_actor:
        ref = ref_config(config)
        omega_conf_to_dataclass(ref)
        if ref.get("profiler", {}):
            omega_conf_to_dataclass(ref.get("profiler"))
    omega_conf_to_dataclass(arr.actor)
    if profiler:
        omega_conf_to_dataclass(profiler)
    assert arr.actor.use_dynamic_bsz == arr.rollout.log_prob_use_dynamic_bsz
    if arr.actor.use_dynamic_bsz:
        assert arr.rollout.log_prob_max_token_len_per_gpu is not None
        assert arr.actor.ppo_max_token_len_per_gpu is not None
    else:
        assert arr.rollout.log_prob_micro_batch_size_per_gpu is not None
        assert arr.actor.ppo_micro_batch_size_per_gpu is not None
    if is_distillation_enabled(config.get("distillation")):
        omega_conf_to_dataclass(config.distillation)
    rollout = omega_conf_to_dataclass(arr.rollout)
    world_size = config.trainer.n_gpus_per_node * config.trainer.nnodes  # the colocated global pool
    infer_world_size = rollout.tensor_model_parallel_size * rollout.data_parallel_size * rollout.pipeline_model_parallel_size
    assert world_size % infer_world_size == 0, (
        f"rollout world_size: {world_size} is not divisible by infer_world_size: {infer_world_size}")
    omega_conf_to_dataclass(arr.rollout.checkpoint_engine)
    if need_critic(config):
        critic = omega_conf_to_dataclass(config.critic)
        critic.engine.infer_max_token_len_per_gpu = critic.ppo_infer_max_token_len_per_gpu
        if config.critic.get("profiler", {}):
            omega_conf_to_dataclass(config.critic.get("profiler"))


def task_runner_checks(config, v1: bool) -> None:
    """The task runner's config steps before it reads the model / data and starts workers."""
    from omegaconf import OmegaConf

    from verl.trainer.main_ppo_v0 import BaseTaskRunner
    from verl.trainer.ppo import core_algos

    OmegaConf.resolve(config)
    if v1:
        from verl.trainer.ppo.v1 import get_trainer_cls

        trainer_cls = get_trainer_cls(config.trainer.v1.trainer_mode)
        if config.algorithm.use_kl_in_reward:
            core_algos.get_kl_controller(config.algorithm.kl_ctrl)
        trainer = argparse.Namespace(config=config)  # verl's trainer methods below read only self.config
        custom = config.trainer.v1.sampler.get("custom_sampler", None)
        if not (custom is not None and custom.get("path") and custom.get("name")):
            trainer_cls._resolve_filter_groups_metric(trainer)
        trainer_cls._init_resource_pool_mgr(trainer)
        return
    runner = BaseTaskRunner()
    runner.add_actor_rollout_worker(config)
    runner.add_critic_worker(config)
    runner.add_reward_model_resource_pool(config)
    runner.add_teacher_model_resource_pool(config)
    runner.init_resource_pool_mgr(config)


def verdict(module: str, overrides: list[str], src: Path) -> dict:
    """The first verl error for one script (stage + text), or accepted."""
    stage = "import"
    try:
        importlib.import_module(module)
        stage = "compose"
        config = compose(module, overrides, src)
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
        from verl.utils.config import validate_config
        from verl.utils.device import auto_set_device

        stage = "auto_set_device"
        auto_set_device(config)
        recipe = module.startswith("recipe.")
        if recipe:
            from verl.experimental.reward_loop import migrate_legacy_reward_impl

            stage = "migrate_legacy_reward_impl"
            config = migrate_legacy_reward_impl(config)
        else:
            stage = "validate_config"
            validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
        stage = "task_runner"
        task_runner_checks(config, v1=not recipe and bool(config.trainer.use_v1))
        if recipe:
            stage = "validate_config"
            validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
        stage = "model_config"
        from verl.utils.config import omega_conf_to_dataclass

        omega_conf_to_dataclass(config.actor_rollout_ref.model)
        stage = "workers"
        worker_checks(config)
    except Exception as exc:  # noqa: BLE001  (verl's own refusal, whatever its type)
        why = unchecked(exc, overrides)
        if why:
            return {"verdict": "unchecked", "stage": stage, "why": why, "error": error_text(exc, src)}
        return {"verdict": "refused", "stage": stage, "error": error_text(exc, src)}
    return {"verdict": "accepted"}


def versions() -> dict:
    out = {"python": platform.python_version()}
    for p in PACKAGES:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out[p] = importlib.metadata.version(p)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scripts", default="plugins/verl/tests/verl_scripts/scripts.json")
    ap.add_argument("--verl-mirror", default=VERL_MIRROR)
    ap.add_argument("--recipe-mirror", default=RECIPE_MIRROR)
    ap.add_argument("--out", default="bench/verl_scripts/verl_verdicts.json")
    ap.add_argument("--verl-commit", help="check against this verl commit instead of scripts.json's (e.g. the one the DAPO recipe pins)")
    ap.add_argument("--only", default="", help="only the scripts whose name starts with this (e.g. recipe:)")
    args = ap.parse_args()
    scripts_path = Path(args.scripts).resolve()
    d = json.loads(scripts_path.read_text())
    verl_commit = args.verl_commit or d["verl_commit"]
    d["scripts"] = {n: x for n, x in d["scripts"].items() if n.startswith(args.only)}
    out_path = Path(args.out).resolve()
    t0 = time.time()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp)
        archive(args.verl_mirror, verl_commit, "verl", src)
        if d.get("recipe_commit"):
            (src / "recipe").mkdir()
            archive(args.recipe_mirror, d["recipe_commit"], "dapo", src / "recipe")
        sys.path.insert(0, str(src))
        model = standin_model(src / "standin_model")
        os.chdir(src)  # the DAPO recipe's config searches file://verl/trainer/config (a verl checkout's root)
        warnings.simplefilter("ignore")
        for name, s in d["scripts"].items():
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                overrides = [o.replace(f"={REPLACED_MODEL}", f"={model}") for o in s["overrides"]]
                results[name] = verdict(s["module"], overrides, src)
            r = results[name]
            print(f"{r['verdict']:9} {name}" + (f"  [{r['stage']}] {r['error'][:200]}" if "error" in r else ""))
    report = {
        "verl_commit": verl_commit, "recipe_commit": d.get("recipe_commit"),
        "command": "python bench/verl_scripts/verl_verdicts.py" + "".join(f" {a}" for a in sys.argv[1:] if not a.startswith("/"))
                   + " (in .venv-verl; verl's tree git-archived from the mirror at verl_commit)",
        "versions": versions(), "measured": time.strftime("%Y-%m-%d"), "seconds": round(time.time() - t0),
        "checks": ["import", "compose", "auto_set_device", "migrate_legacy_reward_impl (DAPO recipe)", "validate_config",
                   "task_runner", "model_config (a stand-in model folder)", "workers"],
        "not_run": "what the script's own model adds, the datasets, Ray, the engines and rollout servers",
        "scripts": results,
    }
    out_path.write_text(json.dumps(report, indent=1) + "\n")
    count = {k: sum(1 for r in results.values() if r["verdict"] == k) for k in ("accepted", "refused", "unchecked")}
    print(f"{count['accepted']} of {len(results)} accepted by verl's config checks, {count['refused']} refused, "
          f"{count['unchecked']} unchecked -> {out_path}")


if __name__ == "__main__":
    main()
