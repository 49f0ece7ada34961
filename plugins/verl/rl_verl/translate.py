"""verl's command line and config files onto rl-core's keys (rules: :mod:`rl_verl.keys`).

* Overrides are parsed with hydra-core's override grammar, as verl's ``main_ppo`` reads them:
  ``key=value``, ``+key=value``, ``++key=value``, ``~key`` (back to the default) and group selections
  ``group@package=option`` (``actor@actor_rollout_ref.actor=megatron_actor``). Values are Hydra's:
  ``[a,b]`` lists, quoted strings, ``null``.
* ``--config-path`` / ``--config-name`` name a YAML file read with OmegaConf (interpolations resolved);
  its Hydra ``defaults`` list may name the user's own files beside it and verl's ``ppo_trainer`` /
  ``ppo_megatron_trainer``, which select the verl profile (:mod:`rl_verl.profile`).
* Every problem names the key as the user wrote it, with rl-core's name beside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

import attrs

from rl_core.config.dialect import is_ours, parse_override as native_override
from rl_core.problems import Problem
from rl_verl import keys as vk


#: verl's top-level names with no section of ours: a config that uses one is written in verl's spelling
VERL_ONLY_ROOTS = frozenset({"actor_rollout_ref", "reward_model", "custom_reward_function", "ray_kwargs", "ray_init", "model_engine", "global_profiler", "distillation"})
#: rollout engines whose part of verl's rollout.engine_kwargs.<engine>.* is passed on
ENGINES = ("vllm", "sglang", "trtllm")
#: verl's own config files (and verl-recipe's DAPO ones, which extend them): the engine each selects
VERL_CONFIGS = {"ppo_trainer": {}, "ppo_megatron_trainer": {"train.name": "megatron"},
                "dapo_trainer": {}, "dapo_megatron_trainer": {"train.name": "megatron"}}


@attrs.define
class Translation:
    """What the translation produced: rl-core's flat items, problems, and where each rl-core key came from."""

    items: list[tuple[str, Any]] = attrs.field(factory=list)  # (rl-core key, value); a value of DELETE removes
    problems: list[Problem] = attrs.field(factory=list)
    origin: dict[str, str] = attrs.field(factory=dict)  # rl-core key -> key as written
    ties: list[tuple[str, Any, str, str, bool]] = attrs.field(factory=list)  # (key as written, value, rl-core key, note, soft)
    verl_spelled: bool = False
    held: dict[str, tuple[str, Any]] = attrs.field(factory=dict)  # HOLD rules: name -> (key as written, value), for verl_engines.apply
    selected: dict[str, Any] = attrs.field(factory=dict)  # verl's engine selections: key as written -> value (veomni, mlite_actor, ...)
    profile: str | None = None  # "verl" / "rl-core" when a config says so
    dtypes: list[tuple[str, str, Any]] = attrs.field(factory=list)  # verl's compute-dtype keys: (as written, key, value)

    stage: str = "file"  # where the items being added come from: "file" (the config file), then "overrides"
    setters: dict[str, tuple[str, Any, str]] = attrs.field(factory=dict)  # rl-core key -> (key as written, value, stage)

    def add(self, written: str, key: str, value: Any) -> None:
        before = self.setters.get(key)
        if before is not None and before[2] == self.stage and before[0] != written and value is not DELETE and before[1] is not DELETE \
                and key not in AGREED_ELSEWHERE and _differ(before[1], value):
            where = "the config file" if self.stage == "file" else "the overrides"
            self.problems.append(Problem(
                key=written,
                what=f"is {value!r} but {before[0]}={before[1]!r}, also in {where}, is the same setting ({key}) with another value: "
                     "which one the run should use is ambiguous",
                fix=f"keep one of {before[0]} and {written} (rl-core's name is {key})",
            ))
        self.setters[key] = (written, value, self.stage)
        self.items.append((key, value))
        if written != key:
            self.origin[key] = written


def _differ(a: Any, b: Any) -> bool:
    """Two spellings of a value that differ (1e-5 and 0.00001 are the same; "1e-5" from a command line and 1e-5 too)."""
    if a == b:
        return False
    try:
        return float(a) != float(b)
    except (TypeError, ValueError):
        return str(a) != str(b)


DELETE = object()
#: keys that several verl keys set on purpose, whose disagreement rl_verl.dtype.agreement reports with its own message
AGREED_ELSEWHERE = frozenset({"model.dtype"})


def translate_item(tr: Translation, written: str, key: str, value: Any, *, fallback: Callable[[str], str], native: bool = False) -> None:
    """One verl (or rl-core) key and its value -> rl-core items / problems in ``tr``. ``native``: a key of rl-core's
    schema is taken as it is (a native launch: only verl's keys are translated)."""
    if native and written == key and is_ours(key):
        tr.add(written, key, value)
        return
    root = key.split(".")[0]
    if (root in VERL_ONLY_ROOTS and not (root == "reward_model" and is_ours(key))) or "@" in key:
        tr.verl_spelled = True  # rl-core's own reward_model.* keys (i30) do not make a config verl-spelled
    if key == "profile":
        tr.profile = str(value)
        return
    refused = vk.VALUES.get((key, str(vk.norm(value)).lower()))
    if refused is not None:
        tr.problems.append(refusal(written, value, refused))
        return
    rule = vk.rule_for(key)
    if rule is not None and is_ours(key) and not (rule.kind == vk.MAP and rule.target == key):
        rule = None  # a key of rl-core's own (trainer.device, ...) means what rl-core says
    if rule is None:
        tr.add(written, key if is_ours(key) else fallback(key), value)
        return
    if rule.target == "train.name" and value is not DELETE:
        tr.selected[written] = vk.norm(value)
    if rule.kind == vk.ALIAS:  # read as the verl key it names (a megatron-lite / veomni spelling of it), named as written
        translate_item(tr, written, rule.target, rule.convert(value) if rule.convert and value is not DELETE else value, fallback=fallback, native=native)
        return
    if rule.kind == vk.HOLD:
        if value is DELETE:
            tr.held.pop(rule.target, None)
        else:
            tr.held[rule.target] = (written, value)
        return
    if value is DELETE:
        if rule.kind in (vk.MAP, vk.ENGINE):
            tr.add(written, _target(rule, key), DELETE)
        return
    if rule.kind == vk.MAP and rule.ok and not _accepted(value, rule.ok):
        tr.problems.append(refusal(written, value, attrs.evolve(rule, note=rule.refused)))
    elif rule.kind == vk.MAP:
        tr.add(written, vk.star_target(rule, key), rule.convert(value) if rule.convert else value)
    elif rule.kind == vk.ENGINE:
        tr.add(written, f"rollout.engine_kwargs.{rule.target}", value)
    elif rule.kind == vk.TIE:
        tr.ties.append((written, value, vk.star_target(rule, key), rule.note, rule.soft))
    elif rule.kind == vk.SAME:
        if rule.maps and _accepted(value, rule.maps):
            tr.add(written, rule.target, rule.convert(value) if rule.convert else value)
        elif not _accepted(value, rule.ok):
            tr.problems.append(refusal(written, value, rule))
            return
        if rule.maps:
            tr.dtypes.append((written, key, value))
    elif rule.kind == vk.IGNORE:
        tr.problems.append(Problem(key=written, what=f"ignored: {rule.note}", severity="warning"))
    else:
        tr.problems.append(refusal(written, value, rule))


def _target(rule: vk.Rule, key: str) -> str:
    return vk.star_target(rule, key) if rule.kind == vk.MAP else f"rollout.engine_kwargs.{rule.target}"


def _accepted(value: Any, ok: tuple) -> bool:
    v = vk.norm(value)
    for o in ok:
        if isinstance(o, list):
            if isinstance(value, (list, tuple)) and sorted(map(str, value)) == sorted(map(str, o)):
                return True
        elif v == vk.norm(o) and type(v) is type(vk.norm(o)):
            return True
    return False


def refusal(written: str, value: Any, rule: vk.Rule) -> Problem:
    shown = f"={value!r}" if value is not None and rule.kind == vk.SAME else ""
    what = f"{written}{shown}: {rule.note} is a verl feature rl-core does not have"
    fix = f"nearest rl-core setting: {rule.nearest}" if rule.nearest else "remove the key"
    if rule.kind == vk.SAME:
        fix += f"; or remove the key / set it to {'null' if rule.ok[0] is None else repr(rule.ok[0])} (what rl-core does)"
    return Problem(key=written, what=what.split(": ", 1)[1], fix=f"{fix}; see {rule.ref}")


# ------------------------------------------------------------------ Hydra overrides
_PARSER: Any = None  # hydra's OverridesParser, built once (building it costs ~10 ms)


def parse_override(text: str) -> tuple[str, str, Any, Problem | None]:
    """``(written key, bare key, value or DELETE, problem)`` of one override, by Hydra's grammar."""
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from hydra.errors import HydraException
    except ImportError:  # hydra-core is a dependency; a broken install still gets key=value
        key, sep, raw = text.partition("=")
        if not sep:
            return text, text, None, Problem(key=text, what="is not a key=value override", fix="write overrides as dotted.key=value, e.g. rollout.n=8")
        import yaml

        try:
            return key, key.lstrip("+"), yaml.safe_load(raw) if raw.strip() else "", None
        except yaml.YAMLError:
            return key, key.lstrip("+"), raw, None
    global _PARSER
    if _PARSER is None:
        _PARSER = OverridesParser.create()
    try:
        o = _PARSER.parse_override(text)
    except HydraException as exc:
        plain = _plain_override(text)  # rl-core's own key=value (a `~/dir`, a URL with '=', a '*' key)
        if plain is not None:
            return plain
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "cannot be parsed"
        key = text.partition("=")[0].strip() or text
        return key, key, None, Problem(key=key, what=f"{text!r} is not a valid override (Hydra's grammar: {first})",
                                         fix="write key=value, +key=value, ~key; quote values with spaces or brackets, e.g. 'key=[a,b]'")
    key = o.key_or_group + (f"@{o.package}" if o.package else "")
    written = ("~" if o.is_delete() else "++" if o.is_force_add() else "+" if o.is_add() else "") + key
    if o.is_delete():
        return written, key, DELETE, None
    if o.is_sweep_override():
        return written, key, None, Problem(key=written, what=f"{text!r} is a Hydra sweep (several values): rl-core runs one job",
                                           fix=f"give one value, or a list in brackets, e.g. {key}=[a,b]")
    return written, key, _plain(o.value()), None


#: YAML's spellings of the special floats, which rl-core's overrides read before they used Hydra's grammar
_YAML_FLOATS = {".nan": float("nan"), ".inf": float("inf"), "+.inf": float("inf"), "-.inf": float("-inf")}


def _plain_override(text: str) -> tuple[str, str, Any, None] | None:
    """rl-core's override form that Hydra's grammar refuses: a plain dotted key, ``=``, a YAML scalar or list."""
    key, value, problem = native_override(text)
    return None if problem is not None else (key, key, value, None)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, str) and value.strip().lower() in _YAML_FLOATS:
        return _YAML_FLOATS[value.strip().lower()]
    return value


# ------------------------------------------------------------------ --config-path / --config-name
def read_hydra_config(config_path: str | None, config_name: str) -> tuple[dict[str, Any], list[tuple[str, Any]], list[Problem], bool]:
    """``(data, group selections, problems, is verl's own)`` of ``--config-path`` / ``--config-name``."""
    name = config_name[:-5] if config_name.endswith(".yaml") else config_name
    folder = Path(config_path or ".")
    path = folder / f"{name}.yaml"
    if not path.is_file():
        if name in VERL_CONFIGS:
            return {}, [(k, v) for k, v in VERL_CONFIGS[name].items()], [], True
        return {}, [], [Problem(key="--config-name", what=f"{path} does not exist", fix=f"point --config-path at the folder that holds {name}.yaml (verl's own: ppo_trainer, ppo_megatron_trainer)")], False
    return _compose(folder, name, set())


def _compose(folder: Path, name: str, seen: set[str]) -> tuple[dict[str, Any], list[tuple[str, Any]], list[Problem], bool]:
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    problems: list[Problem] = []
    selections: list[tuple[str, Any]] = []
    verl_own = False
    path = folder / f"{name}.yaml"
    if name in seen:
        return {}, [], [Problem(key=str(path), what="includes itself through its defaults list", fix="remove the cycle")], False
    seen = seen | {name}
    try:
        conf = OmegaConf.load(path)
    except (OSError, OmegaConfBaseException, ValueError) as exc:
        return {}, [], [Problem(key=str(path), what=f"cannot be read: {exc}", fix="fix the YAML")], False
    if not OmegaConf.is_dict(conf):
        return {}, [], [Problem(key=str(path), what="must hold a mapping of sections", fix="start the file with sections")], False
    defaults = conf.pop("defaults", []) or []
    merged = OmegaConf.create({})
    own_at = len(defaults)
    for i, entry in enumerate(defaults):
        if entry == "_self_":
            own_at = i
        elif isinstance(entry, str):
            if entry in VERL_CONFIGS and not (folder / f"{entry}.yaml").is_file():
                verl_own = True
                selections.extend(VERL_CONFIGS[entry].items())
                continue
            sub, sel, probs, own = _compose(folder, entry, seen)
            selections += sel
            problems += probs
            verl_own |= own
            merged = OmegaConf.merge(merged, sub)
        elif OmegaConf.is_dict(entry) or isinstance(entry, Mapping):
            for group, option in dict(entry).items():
                group = str(group).removeprefix("override ").strip()
                selections.append((group, option))
    data = OmegaConf.merge(merged, conf) if own_at >= len(defaults) or own_at > 0 else OmegaConf.merge(conf, merged)
    try:
        plain = OmegaConf.to_container(data, resolve=True)
    except OmegaConfBaseException:
        plain = OmegaConf.to_container(data, resolve=False)
    return plain, selections, problems, verl_own
