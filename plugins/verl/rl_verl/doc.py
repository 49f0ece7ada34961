"""docs/migrating-from-verl.md, generated from the rules of :mod:`rl_verl.keys`.

``python -m rl_verl.doc > docs/migrating-from-verl.md`` writes it;
``plugins/verl/tests/test_verl_doc.py`` checks that the committed file is current.
"""

from __future__ import annotations

from rl_core.config.load import config_to_dict
from rl_core.config.schema import RunConfig
from rl_verl import keys as vk
from rl_verl.dialect import VERL_KEYS, VERL_PREFIXES
from rl_verl.engines import PROFILE_DEFAULTS
from rl_verl.profile import VERL_DEFAULTS, get_dotted

HEAD = """# Migrating from verl

`pip install rl-verl` (the plugin in `plugins/verl`: verl's dialect, with hydra-core and OmegaConf) and
rl-core reads verl's command line and config files: `rlcore check` / `rlcore train` take verl's overrides
as verl's `main_ppo` does (Hydra's grammar: `key=value`, `+key=value`, `++key=value`, `~key`,
`group@package=option`, through hydra-core) and `--config-path` / `--config-name` (a YAML file and its
Hydra `defaults` list, read with OmegaConf; verl's own `ppo_trainer` / `ppo_megatron_trainer` select
verl's defaults). Every verl key below is either **mapped** onto rl-core's, **accepted** where its value
is what rl-core does anyway (another value is refused), passed to the **engine**, **ignored with a
warning** (a speed / memory knob of verl's implementation: what rl-core computes is the same), or
**refused**, naming the verl feature rl-core does not have, the nearest rl-core setting and the issue or
doc that covers it. No key is accepted and then silently ignored. Problems name the key as you wrote it,
with rl-core's name beside it. A key not listed here and not one of rl-core's is "unknown": either a typo
(a hint is given only when the spelling is very close) or a verl feature rl-core lacks.

This file is generated from `plugins/verl/rl_verl/keys.py` and `engines.py` (`python -m rl_verl.doc`).
verl's other train engines are names for rl-core's backends: `veomni` and `fsdp_turbo` select the fsdp backend,
`mlite` (Megatron Lite) the megatron backend, and their settings map by what they do (below).

## verl's defaults (the verl profile)

A verl launch (`--config-name`, e.g. verl's own `ppo_trainer`; an override in Hydra's grammar, `+key=v`,
`~key`, `group@package=option`; or verl's profile chosen: `--profile verl`, `profile=verl`) takes verl's
defaults for what it leaves unset; `--profile rl-core` (or `profile=rl-core`) keeps rl-core's own. A native
launch (a YAML file and `key=value` overrides) that writes one of verl's keys gets that key translated and
nothing else: rl-core's defaults stay. `rlcore check` lists every verl default it applied that differs from
rl-core's. `rlcore import-verl run.sh > run.yaml` writes the native config a verl launch script means. Where
the defaults differ:

| rl-core key | verl's default | rl-core's own |
|---|---|---|
"""

CHECK = """
## Checking a GPU config on a laptop

`rlcore check --target gpu:8x80GB ...` (or `--skip-device-check`) checks a config for another machine:
the target's device and GPUs per node replace this machine's, engines and loggers not installed here
(vLLM, SGLang, wandb) are warnings, and `trainer.nnodes > 1` needs `trainer.placement=ray` (local
placement starts every worker on one machine). `bench/verl_scripts/RESULTS.md` lists how verl's own
example scripts fare.
"""

KIND = {vk.MAP: "mapped", vk.SAME: "accepted if", vk.ENGINE: "engine", vk.IGNORE: "ignored (warning)",
        vk.REFUSE: "refused", vk.TIE: "must agree", vk.ALIAS: "read as", vk.HOLD: "mapped"}


def _esc(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _row(rule: vk.Rule) -> str:
    if rule.kind == vk.MAP:
        what = f"`{rule.target}`" + (f" ({rule.note})" if rule.note else "")
        if rule.ok:
            what += "; only " + ", ".join(f"`{v}`" for v in rule.ok) + f": other values: {rule.refused} is a verl feature rl-core lacks"
    elif rule.kind == vk.ENGINE:
        what = f"`rollout.engine_kwargs.{rule.target}` (vLLM / SGLang engine argument)"
    elif rule.kind == vk.SAME:
        ok = ", ".join(f"`{v}`" for v in rule.ok)
        what = f"{ok} (what rl-core does)"
        if rule.maps:  # verl's float16 dtypes: rl_verl.dtype
            what += "; " + ", ".join(f"`{v}`" for v in rule.maps) + f" -> `{rule.target}=float16` (float32 master weights, dynamic loss scaling; " \
                    "the actor's dtype and rollout.dtype must both say it)"
        what += f"; other values: {rule.note} is a verl feature rl-core lacks"
        if rule.nearest:
            what += f"; nearest: {rule.nearest}"
        if rule.ref != vk.DOC:
            what += f"; {rule.ref}"
    elif rule.kind == vk.TIE:
        target = "the world size" if rule.target == "@world" else f"`{rule.target}`"
        what = f"equal to {target}: {rule.note}" + (" (a different value: warning)" if rule.soft else "")
    elif rule.kind == vk.ALIAS:
        what = f"`{rule.target}` (its row applies; {rule.note})"
    elif rule.kind == vk.IGNORE or rule.kind == vk.HOLD:
        what = rule.note
    else:
        what = f"{rule.note}; nearest: {rule.nearest}" + (f"; {rule.ref}" if rule.ref != vk.DOC else "")
    return f"| `{_esc(rule.pattern)}` | {KIND[rule.kind]} | {_esc(what)} |"


def render() -> str:
    lines = [HEAD.rstrip("\n")]
    own_defaults = config_to_dict(RunConfig(), mask=False)
    for key, value in VERL_DEFAULTS.items():
        own = get_dotted(own_defaults, key)
        lines.append(f"| `{key}` | `{value!r}` | `{own!r}` |")
    lines.append("| `trainer.output_dir` | `checkpoints/<project_name>/<experiment_name>` | `'outputs/run'` |")
    for engine, defaults in PROFILE_DEFAULTS.items():  # verl's other engines' defaults (rl_verl.engines)
        lines += [f"| `{key}` with the {engine} engine (`{groups[0]}={engine}`) | `{value!r}` | `{get_dotted(own_defaults, key)!r}` |"
                  for key, (value, groups) in defaults.items()]
    lines += ["", "## Every verl key", "",
              "`*` stands for one or more key parts, `{a,b}` for either; the first matching row applies.", "",
              "| verl key | how | rl-core |", "|---|---|---|"]
    lines += [_row(r) for r in vk.RULES]
    lines += ["", "Values of keys rl-core shares with verl that name a verl feature rl-core lacks:", "",
              "| key = value | rl-core |", "|---|---|"]
    lines += [f"| `{k} = {v}` | refused: {_esc(r.note)}; nearest: {_esc(r.nearest)} |" for (k, v), r in vk.VALUES.items()]
    lines += ["", "## Renamed keys and sections", "",
              "Any other verl key is read under these prefixes and then checked against rl-core's schema "
              "(the key table of docs/config.md):", "", "| verl | rl-core |", "|---|---|"]
    lines += [f"| `{k}` | `{v}` |" for k, v in VERL_KEYS.items()]
    lines += [f"| `{k}*` | `{v}*` |" for k, v in VERL_PREFIXES.items()]
    lines.append(CHECK.rstrip("\n"))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render(), end="")
