"""How many of verl's example launch scripts resolve in rl-core, as `rlcore check --skip-device-check` sees them.

    python bench/verl_scripts/measure.py [--scripts plugins/verl/tests/verl_scripts/scripts.json] [--out bench/verl_scripts/RESULTS.md]

Each script's overrides (extracted by plugins/verl/tests/verl_scripts/extract.py; model and data paths replaced) go
through the same code as `rlcore check --skip-device-check` (load_report, resolve with the world checks but
not this machine's devices, the target checks; missing engines / loggers are warnings). The training data is
a local file of 4096 rows (the tiny fixture repeated) so that every script's batch fits. A reward model's path
(replaced by the policy's builtin model in scripts.json) points at a tiny local sequence-classification folder
(one label, a chat template), as verl's reward models (Skywork-Reward, FsfairX-RM) are; a dataset class's file
(data.custom_cls.path, a file of the script author's checkout) points at a local stand-in class of that name. Scripts of verl
features rl-core has no algorithm for (on-policy distillation, GDPO, OTB, MTP) are listed apart. A second reading
replaces the model by generic local stand-ins (:func:`shape_standins`), so that the checks of the model's shape run too.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import tempfile
import time
from pathlib import Path

from rl_core.cli.check_target import as_elsewhere, node_problems
from rl_core.config.load import load_report
from rl_core.plugins import get_registry
from rl_core.problems import errors
from rl_core.plan.checks import plan_for
from rl_core.plan.resolver import resolve

OTHER = ("on_policy_distillation_trainer", "gdpo_trainer", "otb_trainer", "mtp_trainer")
FIXTURE = "tests/fixtures/data/tiny_gsm8k.jsonl"
MODEL = "builtin:smollm2"  # the model every script's model path was replaced by (plugins/verl/tests/verl_scripts/extract.py)


RM_KEYS = ("reward.reward_model.model_path", "reward_model.model.path")


def reward_model_folder(path: Path) -> str:
    """A tiny LlamaForSequenceClassification (one label) with a tokenizer that has a chat template, saved to ``path``."""
    from transformers import LlamaConfig, LlamaForSequenceClassification

    from rl_reward_model.reward_tokenizer import build_other_tokenizer

    tok = build_other_tokenizer()
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=2, pad_token_id=0, num_labels=1)
    cfg.architectures = ["LlamaForSequenceClassification"]
    LlamaForSequenceClassification(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


#: a stand-in for a script's own dataset class (data.custom_cls.path names a file of the author's checkout, e.g. verl-recipe's
#: recipe/minicpmo/rl_dataset.py, a subclass of verl's RLHFDataset): verl's constructor, the jsonl rows as they are
STANDIN_DATASET = """import json


class RLHFDataset:
    def __init__(self, data_files, tokenizer, config, processor=None, max_samples=-1):
        self.rows = [json.loads(line) for f in data_files for line in open(f) if line.strip()]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]
"""


def standin_dataset(path: Path) -> str:
    path.write_text(STANDIN_DATASET)
    return str(path)


#: a stand-in for a reward function file of verl's own tree (reward.custom_reward_function.path=verl/utils/reward_score/
#: openr1mm.py: the script runs from a verl checkout, which this measurement does not have): verl's signature, a constant
STANDIN_REWARD = """def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return 0.0
"""
REWARD_PATH_KEYS = ("reward.custom_reward_function.path", "custom_reward_function.path")
REWARD_NAME_KEYS = ("reward.custom_reward_function.name", "custom_reward_function.name")


def in_verl_tree(value: str) -> bool:
    """A path into verl's / verl-recipe's own checkout (where verl's example scripts run from)."""
    return value.lstrip("/").startswith(("verl/", "recipe/"))


def standin_reward(path: Path, name: str) -> str:
    path.write_text(STANDIN_REWARD.replace("compute_score", name))
    return str(path)


def check(overrides: list[str], data: str, registry, rm: str = "", dataset_cls: str = "", tmp: str = "") -> list:
    flag = lambda n: next((o.split("=", 1)[1] for o in overrides if o.startswith(f"--{n}=")), None)  # noqa: E731
    rest = [o.replace(FIXTURE, data) for o in overrides if not o.startswith("--")]
    rest = [f"{o.split('=', 1)[0]}={rm}" if rm and o.split("=", 1)[0].lstrip("+") in RM_KEYS else o for o in rest]
    # the class keeps the script's name (data.custom_cls.name), its file is the stand-in
    rest = [f"{o.split('=', 1)[0]}={dataset_cls}" if dataset_cls and o.split("=", 1)[0].lstrip("+") == "data.custom_cls.path" else o for o in rest]
    # a reward function file of verl's own tree: a stand-in with the function the script names (its own file is verl's)
    name = next((o.split("=", 1)[1] for o in rest if o.split("=", 1)[0].lstrip("+") in REWARD_NAME_KEYS), "compute_score")
    rest = [f"{o.split('=', 1)[0]}={standin_reward(Path(tmp or tempfile.gettempdir()) / f'reward_{name}.py', name)}"
            if o.split("=", 1)[0].lstrip("+") in REWARD_PATH_KEYS and in_verl_tree(o.split("=", 1)[1]) else o for o in rest]
    # a verl launch script is a verl launch (verl's defaults for what it leaves unset): the profile says so, as
    # `rlcore check --profile verl` does (the rl-verl plugin's dialect, rl_verl.dialect.detect)
    loaded = load_report(None, rest, config_path=flag("config-path"), config_name=flag("config-name"), profile="verl")
    if errors(loaded.problems):
        return errors(loaded.problems)
    _, problems = plan_for(loaded.config, registry, devices=False)
    return errors(loaded.as_written(as_elsewhere([*problems, *node_problems(loaded.config)])))


#: scripts whose own data files (in verl's script, before the paths were replaced) are image data, although their file
#: names do not say so: geo3k (geometry problems with a figure) or openr1mm; found by reading each script's train-file
#: default at the extracted commit (git show <commit>:<script> | grep -E 'train_files|TRAIN_FILE|train_path|data_path')
IMAGE_DATA = frozenset(f"examples/{p}.sh" for p in (
    "ascend_extras/grpo_trainer/run_qwen3_5_122b_a10b_32k_megatron", "grpo_trainer/run_qwen3_5-122b-a10b_veomni",
    "grpo_trainer/run_qwen3_5_122b_a10b_megatron", "grpo_trainer/run_qwen3_5_27b_fsdp", "grpo_trainer/run_qwen3_5_27b_fsdp_turbo",
    "grpo_trainer/run_qwen3_5_2b_openr1_fsdp", "grpo_trainer/run_qwen3_5_35b_a3b_veomni", "grpo_trainer/run_qwen3_5_35b_fsdp",
    "grpo_trainer/run_qwen3_5_35b_fsdp_turbo", "grpo_trainer/run_qwen3_5_35b_megatron", "grpo_trainer/run_qwen3_5_35b_megatron_lite",
    "grpo_trainer/run_qwen3_5_397b_megatron"))


#: model families in megatron scripts' file names that rl-core's megatron backend does not build (it converts Llama,
#: Qwen2, Qwen3, Qwen2-MoE, Qwen3-MoE, HY-V3 and GLM-4-MoE): the model is refused when its config.json is read
MEGATRON_FAMILIES = (
    ("deepseek", "DeepSeek-V3 / V4 (multi-latent attention, sigmoid-routed MoE)"),
    ("moonlight", "Moonlight (the DeepSeek-V3 architecture: multi-latent attention)"),
    ("nemotron", "Nemotron-H (a Mamba / attention hybrid)"),
    ("qwen3_5", "Qwen3.5 (linear-attention layers: gated DeltaNet)"),
    ("qwen3_next", "Qwen3-Next (linear-attention layers: gated DeltaNet)"),
    ("mimo", "MiMo (multi-token prediction layers)"),
)
#: what image data needs (the backends whose cards take images; verl's image scripts use the vllm rollout)
IMAGES = ("rl-core trains on images with rollout.name=hf and train.name=fsdp only (the vllm / sglang rollouts "
          "and the megatron backend refuse rows with images when the data is read)")
MOE_NAMES = ("a3b", "a22b", "_moe", "235b")  # Qwen3-MoE checkpoints in verl's script names (Qwen3-30B-A3B, -235B-A22B)


def real_model_caveat(name: str, overrides: list[str] = ()) -> str | None:
    """Why a script that resolves with the local model / data would not with its own (read from its file name, or
    :data:`IMAGE_DATA`; for Qwen3-MoE on the megatron backend, also its tensor-parallel size)."""
    base = name.rsplit("/", 1)[-1]
    if "video" in base:
        return "trained on video data in verl's example; rl-core reads images, not videos (rows with videos are refused by data.video_key when the data is read)"
    if any(k in base for k in ("_vl_", "_vl", "1v_", "minicpm_o")):
        return f"a vision-language model trained on image data in verl's example; {IMAGES}"
    if name in IMAGE_DATA:
        return f"trained on image data in verl's example (geo3k / openr1mm: problems with a figure); {IMAGES}"
    if "megatron" not in base:
        return None
    for key, family in MEGATRON_FAMILIES:
        if key in base:
            return f"{family}: a model family rl-core's megatron backend does not build (refused when the model's config.json is read)"
    tp_keys = ("actor_rollout_ref.actor.megatron.tensor_model_parallel_size", "actor_rollout_ref.actor.engine.tp")
    tp = next((o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].lstrip("+") in tp_keys), "1")
    # Megatron sequence parallelism (on by verl's megatron defaults) is what MoE layers with TP > 1 need: only a script
    # that turns it off would stop when the model's config.json is read
    sp_off = any(o.split("=", 1)[0].lstrip("+").endswith("sequence_parallel") and o.split("=", 1)[1].lower() == "false" for o in overrides)
    if any(k in base for k in MOE_NAMES) and str(tp) not in ("1", "null") and sp_off:
        return (f"Qwen3-MoE with tensor_model_parallel_size={tp} and sequence_parallel=False: megatron-core's MoE layers train with TP > 1 "
                "only under Megatron sequence parallelism (refused when the model's config.json is read)")
    return None


#: a second reading with generic LOCAL stand-ins (a folder with config.json, the tokenizer and SmolLM2's weights linked:
#: rlcore check reads the config, and only looks for the weights), by script name: `builtin:smollm2`'s shape is not read by rlcore check (a gap of the check, RESULTS.md
#: says so), so the checks that depend on the model's shape (TP / heads, EP / experts, pipeline stages / layers, router
#: family) run only here. Both stand-ins have 32 heads (8 KV heads) and 48 layers; the MoE one 128 experts (Qwen3-MoE).
SHAPE_MOE = (*MOE_NAMES, "a10b", "30b", "35b", "80b", "122b", "397b", "moonlight", "deepseek", "hy_v3", "nemotron", "gpt_oss", "glm")
SHAPE = dict(hidden_size=1024, num_attention_heads=32, num_key_value_heads=8, head_dim=128, num_hidden_layers=48, intermediate_size=3072)


def shape_standins(tmp: Path) -> tuple[str, str]:
    """(dense, MoE) stand-in folders: SmolLM2's tokenizer, a Qwen3 / Qwen3-MoE config.json of :data:`SHAPE`."""
    import shutil

    from rl_core.plan.builtin_model import ensure_builtin_model
    from rl_model_smollm2.convert import convert_smollm2

    src = Path(ensure_builtin_model(convert_smollm2, "smollm2"))
    out = []
    for name, mtype, arch, extra in (("dense", "qwen3", "Qwen3ForCausalLM", {}),
                                     ("moe", "qwen3_moe", "Qwen3MoeForCausalLM",
                                      dict(num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768, norm_topk_prob=True,
                                           decoder_sparse_step=1, mlp_only_layers=[]))):
        folder = tmp / f"standin_{name}"
        folder.mkdir()
        for f in src.iterdir():  # the weights linked, not read (the check looks for them; their shapes are SmolLM2's)
            if f.suffix == ".safetensors":
                (folder / f.name).symlink_to(f)
            elif f.is_file() and f.name != "config.json":
                shutil.copy(f, folder / f.name)
        cfg = {**json.loads((src / "config.json").read_text()), **SHAPE, **extra, "model_type": mtype, "architectures": [arch]}
        (folder / "config.json").write_text(json.dumps(cfg))
        out.append(str(folder))
    return out[0], out[1]


def shaped(name: str, overrides: list[str], dense: str, moe: str) -> list[str]:
    folder = moe if any(k in name.lower() for k in SHAPE_MOE) else dense
    return [o.replace(MODEL, folder) for o in overrides]


def feature(p) -> str:
    """The verl feature a refusal names ("X is a verl feature rl-core does not have"), else its key and message."""
    for marker in (" is a verl feature rl-core does not have", " is a feature rl-core's"):
        if marker in p.what:
            text = p.what.split(marker)[0]
            return text.split(": ", 1)[1] if text.startswith("is ") and ": " in text else text
    return f"{p.key.lstrip('+~')}: {p.what[:120]}"


VERDICTS = "bench/verl_scripts/verl_verdicts.json"


#: what rl-core does where verl refuses (matched on verl's message): each answers "does rl-core accept something invalid?"
READINGS = (
    ("Could not append to config. An item is already at",
     "Hydra's `+key` adds a key verl's config does not have; this one it has. rl-core reads `+key=value` as setting the key "
     "(the value the script means); verl stops before it starts"),
    ("main_ppo_sync", "the script runs a module that does not exist at this verl commit; rl-core reads the overrides only, "
     "whichever entry point the script names"),
    ("unexpected keyword argument 'tau_pos'",
     "verl's SAPO temperatures are actor.tau_pos / tau_neg; the script writes them under actor.policy_loss, which verl's "
     "PolicyLossConfig lacks. rl-core maps actor.policy_loss.* (tau_pos / tau_neg included) onto actor.policy_loss_options.*, so "
     "the temperatures the script sets are used"),
    ("reward_model.overlong_buffer", "the older DAPO recipe's spelling (verl's config has no reward_model.overlong_buffer now); "
     "rl-core maps it onto reward.overlong_penalty.*"),
    ("LexerNoViableAltException", "a placeholder the user must fill (`<path_to_...>`), which Hydra's grammar refuses; rl-core reads it "
     "as a plain string, and the key it sits on (megatron.dist_checkpointing_path) is one rl-core ignores with a warning"),
)


def reading(error: str) -> str:
    return next((text for marker, text in READINGS if marker in error), "not yet examined: a question for rl-core")


def ours(errs) -> str:
    """rl-core's refusals of one script, short: each key as written with the start of its message."""
    return "; ".join(f"`{p.key}`: {p.what[:160]}" for p in errs[:3]) + (f"; and {len(errs) - 3} more" if len(errs) > 3 else "")


def verl_lines(result: dict, mine: dict, verdicts: dict) -> tuple[list[str], list[str]]:
    """The headline over the scripts verl's own config checks accept, and the sections comparing the two verdicts
    (``verdicts``: bench/verl_scripts/verl_verdicts.json, written by verl_verdicts.py in a venv with verl's deps)."""
    v = verdicts["scripts"]
    accepted = [n for n in mine if v[n]["verdict"] == "accepted"]
    ok = [n for n in accepted if not mine[n]]
    unchecked = [n for n in mine if v[n]["verdict"] == "unchecked"]
    why = "; ".join(f"`{n}`: {v[n]['why']}" for n in unchecked)
    head = [f"Of the {len(accepted)} of these {len(mine)} that verl's own config checks accept (verl_verdicts.json: verl {verdicts['verl_commit'][:12]}, "
            f"Hydra composition, validate_config, the config dataclasses' checks, the task runner's and workers' config steps), "
            f"**{len(ok)} of {len(accepted)}** resolve unchanged ({100 * len(ok) / max(1, len(accepted)):.0f}%); "
            f"verl itself refuses {sum(1 for n in mine if v[n]['verdict'] == 'refused')}"
            + (f", and {len(unchecked)} could not be checked here ({why})" if unchecked else "")
            + ".", ""]
    refused = [n for n in result if v[n]["verdict"] == "refused"]
    body = ["## Scripts verl itself refuses (its own config checks, before any GPU work)", "",
            f"`python bench/verl_scripts/verl_verdicts.py` in a separate venv ({', '.join(f'{k} {x}' for k, x in verdicts['versions'].items())}) "
            f"composes each script's config from verl's own tree at {verdicts['verl_commit'][:12]} (verl-recipe {str(verdicts.get('recipe_commit'))[:12]} for the DAPO "
            "recipe, checked against that same verl: at the older verl its REQUIRED_VERL.txt pins, its main_dapo does not import) with the overrides as written, then runs what "
            "`python -m verl.trainer.main_ppo` runs before its workers touch a device. Model paths point at a tiny stand-in model folder.", ""]
    for n in refused:
        tag = " (DAPO recipe)" if n.startswith("recipe:") else " (not an rl-core algorithm)" if n not in mine else ""
        body += [f"- `{n}`{tag}", f"  - verl ({v[n]['stage']}): {v[n]['error'][:400]}",
                 "  - rl-core: " + (ours(result[n]) if result[n] else "**resolves**")]
    both_ok = [n for n in refused if not result[n]]
    body += ["", "## Scripts rl-core accepts that verl refuses", "",
             "Each is a question for rl-core: does it accept something invalid, or does it read what the script meant where verl stops?", ""]
    body += [f"- `{n}`: verl ({v[n]['stage']}): {v[n]['error'][:200]}; rl-core: {reading(v[n]['error'])}" for n in both_ok] or ["- none"]
    return head, body + [""]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scripts", default="plugins/verl/tests/verl_scripts/scripts.json")
    ap.add_argument("--out", default="bench/verl_scripts/RESULTS.md")
    ap.add_argument("--verdicts", default=VERDICTS, help="verl's own verdicts (verl_verdicts.py's output)")
    args = ap.parse_args()
    d = json.loads(Path(args.scripts).read_text())
    registry = get_registry()
    rows = Path(FIXTURE).read_text().splitlines()
    with tempfile.TemporaryDirectory() as tmp:
        data = str(Path(tmp) / "train.jsonl")
        Path(data).write_text("\n".join(rows * (4096 // len(rows))) + "\n")
        t0 = time.time()
        rm = reward_model_folder(Path(tmp) / "reward_model")
        cls = standin_dataset(Path(tmp) / "rl_dataset.py")
        result = {name: check(s["overrides"], data, registry, rm, cls, tmp) for name, s in d["scripts"].items()}
        took = time.time() - t0
        dense, moe = shape_standins(Path(tmp))
        by_shape = {name: check(shaped(name, s["overrides"], dense, moe), data, registry, rm, cls, tmp) for name, s in d["scripts"].items()}
    mine = {n: e for n, e in result.items() if not any(f"/{a}/" in n for a in OTHER) and not n.startswith("recipe:")}
    dapo = {n: e for n, e in result.items() if n.startswith("recipe:")}
    ok = [n for n, e in mine.items() if not e]
    head, verl_body = verl_lines(result, mine, json.loads(Path(args.verdicts).read_text()))
    lines = [f"# verl's example scripts through `rlcore check --skip-device-check`", "",
             f"verl commit {d['verl_commit']}; {len(d['scripts'])} scripts extracted; measured {time.strftime('%Y-%m-%d')} in {took:.0f} s.", "",
             f"**{len(ok)} of {len(mine)}** scripts of algorithms rl-core implements resolve unchanged "
             f"({100 * len(ok) / max(1, len(mine)):.0f}%); {len(result) - len(mine) - len(dapo)} more are of verl features rl-core lacks "
             f"({', '.join(OTHER)}).", "", *head,
             f"verl-recipe's DAPO scripts (commit {d.get('recipe_commit', '?')}; recipe.dapo.main_dapo): "
             f"**{sum(1 for e in dapo.values() if not e)} of {len(dapo)}** resolve (dynamic sampling and the overlong penalty map "
             "onto algorithm.filter_groups.* / reward.overlong_penalty.*; the rest stop on the refusals listed below).", ""]
    caveats = {n: why for n in ok if (why := real_model_caveat(n, d["scripts"][n]["overrides"]))}
    lines += [f"**Caveat: model and data paths are replaced** (the issue's method; also a dataset class file or a reward function file of verl's own tree, by a stand-in with the same class / function name), so what the real model and data would add is not "
              f"checked here. Judging by the scripts' file names and their own data files, {len(caveats)} of the {len(ok)} that resolve would still stop with verl's "
              f"own model / data ({len(ok) - len(caveats)} of {len(mine)} then):", ""]
    lines += [f"- `{n}`: {why}" for n, why in sorted(caveats.items())] + [""]
    shape_ok = [n for n in mine if not by_shape[n]]
    lines += [f"**Second reading, with the model's shape checked.** The model path above is `{MODEL}`, whose shape `rlcore check` does not "
              "read (a gap of the check: a TP size that does not divide its 9 heads passes the check and fails at start; a folder's "
              "config.json is read), so the checks that depend on the model's shape did not run. With generic local stand-ins instead "
              "(a folder with a config.json: Qwen3, or Qwen3-MoE of 128 experts for the scripts whose names say MoE; 32 heads, 8 KV heads, "
              f"48 layers), **{len(shape_ok)} of {len(mine)}** resolve; those that stop only then, and why (a real checkpoint has its own "
              "layer count and router):", ""]
    here = re.compile(re.escape(tempfile.gettempdir()) + r"/[^/]+/")  # the stand-ins' temporary folder, not part of the result
    lines += [f"- `{n}`: `{by_shape[n][0].key}`: {here.sub('', by_shape[n][0].what)[:220]}" for n in ok if by_shape[n]] or ["- none"]
    lines += [""]
    lines += verl_body
    lines += ["## What the scripts that do not resolve lack (verl features, from the refusals)", "",
              "Per feature: the scripts whose refusals name it, and of those the scripts it is the only feature missing for.", ""]
    needs = {n: {feature(p) for p in e} for n, e in mine.items() if e}
    every = collections.Counter(f for fs in needs.values() for f in fs)
    alone = collections.Counter(next(iter(fs)) for fs in needs.values() if len(fs) == 1)
    lines += [f"- {c} ({alone.get(f, 0)} only this): {f}" for f, c in sorted(every.items(), key=lambda fc: (-fc[1], fc[0]))]
    lines += ["", "## Refusals, by key as written (count of scripts)", ""]
    count = collections.Counter()
    for n, errs in mine.items():
        for k in sorted({p.key.lstrip('+~') for p in errs}):
            count[k] += 1
    lines += [f"- {c} `{k}`" for k, c in sorted(count.items(), key=lambda kc: (-kc[1], kc[0]))]
    lines += ["", "## Each script that does not resolve: its first refusal", ""]
    for n, errs in result.items():
        if errs:
            p = errs[0]
            tag = " (DAPO recipe)" if n in dapo else " (not an rl-core algorithm)" if n not in mine else ""
            lines.append(f"- `{n}`{tag}: {len(errs)} refusal(s); first `{p.key}`: {p.what}")
    lines += ["", "## Resolve unchanged", ""] + [f"- `{n}`" for n in ok]
    lines += ["", "## DAPO recipe scripts that resolve unchanged", ""] + [f"- `{n}`" for n, e in dapo.items() if not e]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:6]))


if __name__ == "__main__":
    main()
