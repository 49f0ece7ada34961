"""Reading a run config: YAML file + dotted ``key=value`` overrides -> RunConfig.

Every problem is collected (duplicate YAML keys, unknown keys with a "did you
mean", wrong types naming the key and the expected type, values outside their
range or allowed set, NaN / inf: :mod:`rl_core.config.rules`), then raised
together as one :class:`~rl_core.problems.ConfigError`. So ``rlcore check``,
``rlcore train --dry-run`` and ``rlcore train`` refuse the same configs.

:func:`config_to_dict` masks values whose keys look like credentials
(:func:`mask_secrets`), and secret-shaped parts of any string value
(:func:`rl_core.secrets.mask_text`): the printed config, the saved ``config.yaml`` and the
trackers' copies never hold them.

verl users can paste their keys: ``actor_rollout_ref.actor.X`` maps to
``actor.X``, ``actor_rollout_ref.rollout.X`` to ``rollout.X`` and so on
(see :data:`VERL_PREFIXES` and docs/config.md).
"""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any, Iterable, Mapping

import attrs
import yaml

from rl_core.config.rules import check_config
from rl_core.config.typenames import article as _article, type_name as _type_name
from rl_core.config.schema import RewardModelConfig, RunConfig
from rl_core.problems import ConfigError, Problem, did_you_mean
from rl_core.secrets import mask_text

VERL_KEYS = {
    "actor_rollout_ref.actor.strategy": "train.name",
    "actor_rollout_ref.actor.policy_loss.loss_mode": "actor.policy_loss",
    "actor_rollout_ref.actor.grad_clip": "actor.optim.grad_clip",
    "actor_rollout_ref.rollout.val_kwargs.temperature": "rollout.val_temperature",
    "actor_rollout_ref.rollout.val_kwargs.n": "rollout.val_n",
    "actor_rollout_ref.rollout.response_length": "data.max_response_length",
    "critic.grad_clip": "critic.optim.grad_clip",
    "trainer.max_actor_ckpt_to_keep": "trainer.max_ckpt_to_keep",
    "trainer.default_local_dir": "trainer.output_dir",
    "trainer.logger": "trainer.loggers",
    "rollout.response_length": "data.max_response_length",
}
# verl's knobs of individual policy losses (rl_core.algorithms.policy_loss_pg / _cov) -> their options
VERL_KEYS.update({f"actor_rollout_ref.actor.policy_loss.{k}": f"actor.policy_loss_options.{k}" for k in (
    "clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio", "ppo_kl_coef", "dro_beta")})
VERL_KEYS.update({f"actor_rollout_ref.actor.{k}": f"actor.policy_loss_options.{k}" for k in ("tau_pos", "tau_neg")})
VERL_PREFIXES = {
    "actor_rollout_ref.actor.": "actor.",
    "actor_rollout_ref.rollout.": "rollout.",
    "actor_rollout_ref.ref.": "ref.",
    "actor_rollout_ref.model.": "model.",
    "reward_model.": "reward.",
    "custom_reward_function.": "reward.custom.",
    "ray_kwargs.ray_init.": "ray.",  # address, runtime_env, num_cpus (verl >= 0.5)
    "ray_init.": "ray.",  # older verl
}


_REWARD_MODEL_FIELDS = frozenset(f.name for f in attrs.fields(RewardModelConfig))

#: verl's top-level sections that have no section of ours: their keys are translated one by one
VERL_SECTIONS = frozenset({"actor_rollout_ref", "reward_model", "custom_reward_function", "ray_kwargs", "ray_init"})


def translate_verl_key(key: str) -> str:
    if key in VERL_KEYS:
        return VERL_KEYS[key]
    parts = key.split(".")
    if parts[0] == "reward_model" and len(parts) > 1 and parts[1] in _REWARD_MODEL_FIELDS:
        return key  # our own reward_model section (verl's keys of these names mean the same)
    for old, new in VERL_PREFIXES.items():
        if key == old or key.startswith(old):
            return new + key[len(old):]
    return key


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError([Problem(key=str(path), what="config file does not exist", fix="check the path, or run `rlcore check` with no file to see the defaults")])
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([Problem(key=str(path), what=f"cannot be read: {exc}", fix="check the file's permissions and that it is UTF-8 text")]) from None
    try:
        duplicates = duplicate_keys(yaml.compose(text, Loader=yaml.SafeLoader))
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError([Problem(key=str(path), what=f"is not valid YAML{where}: {getattr(exc, 'problem', exc)}", fix="fix the YAML syntax")]) from None
    if duplicates:
        raise ConfigError(
            [
                Problem(
                    key=key,
                    what=f"appears {len(lines)} times in {path} (lines {', '.join(map(str, lines))}); YAML would silently keep only the last",
                    fix=f"keep one {key!r} (merge the two into one section if it is a section)",
                )
                for key, lines in duplicates.items()
            ]
        )
    if not isinstance(data, dict):
        raise ConfigError([Problem(key=str(path), what=f"must hold a mapping of sections, got {type(data).__name__}", fix="start the file with sections such as `data:` and `rollout:`")])
    return data


def duplicate_keys(node: yaml.Node | None, prefix: str = "") -> dict[str, list[int]]:
    """``{dotted key: [line, ...]}`` for every key that a YAML mapping (at any depth) holds twice."""
    out: dict[str, list[int]] = {}
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            name = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else None
            dotted = f"{prefix}.{name}" if prefix else str(name)
            if name is not None and name != "<<":
                if name in seen:
                    out.setdefault(dotted, [seen[name]]).append(key_node.start_mark.line + 1)
                else:
                    seen[name] = key_node.start_mark.line + 1
            for k, v in duplicate_keys(value_node, dotted).items():
                out.setdefault(k, []).extend(x for x in v if x not in out.get(k, []))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out.update(duplicate_keys(item, f"{prefix}[{i}]"))
    return out


def parse_overrides(overrides: Iterable[str]) -> tuple[dict[str, Any], list[Problem]]:
    """``["a.b=1", "c=x"]`` -> nested dict; values parsed as YAML scalars / lists."""
    tree: dict[str, Any] = {}
    problems: list[Problem] = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            problems.append(Problem(key=item, what="is not a key=value override", fix="write overrides as dotted.key=value, e.g. rollout.n=8"))
            continue
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        set_dotted(tree, translate_verl_key(key), value)
    return tree, problems


def set_dotted(tree: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = tree
    for part in parts[:-1]:
        nxt = node.get(part)
        if not isinstance(nxt, dict):
            nxt = node[part] = {}
        node = nxt
    node[parts[-1]] = value


def merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = merge(dict(out[k]), v)
        else:
            out[k] = v
    return out


def _translate_tree(data: Mapping[str, Any]) -> dict[str, Any]:
    """Move verl-style top-level sections (actor_rollout_ref, ...) onto ours."""
    out: dict[str, Any] = {}
    flat: list[tuple[str, Any]] = []

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, Mapping) and node and prefix.split(".")[0] in VERL_SECTIONS:
            for k, v in node.items():
                walk(f"{prefix}.{k}", v)
        else:
            flat.append((prefix, node))

    for k, v in data.items():
        if k in VERL_SECTIONS:
            walk(k, v)
        else:
            out = merge(out, {k: v})
    for key, value in flat:
        tmp: dict[str, Any] = {}
        set_dotted(tmp, translate_verl_key(key), value)
        out = merge(out, tmp)
    return out


# ----------------------------------------------------------------- structuring
class _Mismatch(Exception):
    pass


def _coerce(value: Any, tp: Any, key: str, problems: list[Problem]) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce_strict(value, arg, key, problems)
            except _Mismatch:
                continue
        raise _Mismatch
    return _coerce_strict(value, tp, key, problems)


def _coerce_strict(value: Any, tp: Any, key: str, problems: list[Problem]) -> Any:
    origin = typing.get_origin(tp)
    if attrs.has(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            raise _Mismatch
        return structure(tp, value, key, problems)
    if origin is list:
        (item_tp,) = typing.get_args(tp) or (Any,)
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise _Mismatch
        return [_coerce(v, item_tp, f"{key}[{i}]", problems) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, Mapping):
            raise _Mismatch
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in {"true", "false", "yes", "no"}:
            return value.lower() in {"true", "yes"}
        raise _Mismatch
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                raise _Mismatch from None
        raise _Mismatch
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)  # YAML reads "1e-5" as a string
            except ValueError:
                raise _Mismatch from None
        raise _Mismatch
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise _Mismatch
    if isinstance(value, tp):
        return value
    raise _Mismatch


def structure(cls: type, data: Mapping[str, Any], prefix: str, problems: list[Problem]) -> Any:
    """Build ``cls`` from ``data``, appending a problem for every bad key."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in attrs.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if key not in fields:
            where = f"section {prefix!r}" if prefix else "the config"
            problems.append(
                Problem(
                    key=dotted,
                    what=f"unknown key in {where}{did_you_mean(str(key), fields)}",
                    fix=f"valid keys here: {', '.join(sorted(fields))}",
                )
            )
            continue
        tp = hints[key]
        try:
            kwargs[key] = _coerce(value, tp, dotted, problems)
        except _Mismatch:
            if attrs.has(tp) or (typing.get_origin(tp) in (typing.Union, types.UnionType) and any(attrs.has(a) for a in typing.get_args(tp))):
                fix = f"{dotted} is a section: give it sub-keys, e.g. {dotted}.<key>=<value>"
            else:
                fix = f"set {dotted} to {_article(_type_name(tp))}"
            problems.append(Problem(key=dotted, what=f"expected {_type_name(tp)}, got {value!r} ({type(value).__name__})", fix=fix))
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:
        # attrs validators (in_) raise ValueError("'x' must be in (...)", attribute, options, value)
        if len(exc.args) >= 4 and isinstance(exc.args[1], attrs.Attribute):
            attr, options, bad = exc.args[1], exc.args[2], exc.args[3]
            dotted = f"{prefix}.{attr.name}" if prefix else attr.name
            problems.append(Problem(key=dotted, what=f"{bad!r} is not allowed{did_you_mean(str(bad), [str(o) for o in options])}", fix=f"use one of: {', '.join(map(str, options))}"))
            kwargs.pop(attr.name, None)
            return structure(cls, {k: v for k, v in data.items() if k != attr.name}, prefix, problems)
        problems.append(Problem(key=prefix or "config", what=str(exc)))
        return cls()


def load_config(path: str | Path | None = None, overrides: Iterable[str] = (), *, base: Mapping[str, Any] | None = None) -> RunConfig:
    """YAML file (optional) + overrides -> RunConfig, or raise ConfigError with every problem."""
    data: dict[str, Any] = dict(base or {})
    if path is not None:
        data = merge(data, read_yaml(path))
    tree, problems = parse_overrides(overrides)
    data = merge(_translate_tree(data), tree)
    config = structure(RunConfig, data, "", problems)
    seen = {p.key for p in problems}
    problems.extend(p for p in check_config(config) if p.key not in seen)
    if problems:
        raise ConfigError(problems)
    return config


# --------------------------------------------------------------------- secrets
MASK = "***"
_SECRET_WORDS = {"key", "token", "secret", "secrets", "password", "passwd", "pwd", "apikey", "credential", "credentials", "auth"}


def looks_secret(name: str) -> bool:
    """Whether a key's name looks like a credential: a word of it is key, token, secret, password, ..."""
    words = re.split(r"[^a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(name)).lower())
    return any(w in _SECRET_WORDS for w in words) or "password" in str(name).lower() or "secret" in str(name).lower()


def mask_secrets(value: Any) -> Any:
    """A copy of a plain dict / list tree with the values of credential-like keys replaced by ``***``,
    and secret-shaped parts of every other string too (a URL's password, ``Bearer ...``, ``sk-...``: rl_core.secrets).

    Only non-empty scalars are masked (``max_tokens: 512`` is a number and stays).
    """
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if looks_secret(k) and isinstance(v, str) and v:
                out[k] = MASK
            else:
                out[k] = mask_secrets(v)
        return out
    if isinstance(value, list):
        return [mask_secrets(v) for v in value]
    return mask_text(value) if isinstance(value, str) else value


def _mask_shapes(value: Any) -> Any:
    """Every string of a dict / list tree with its secret-shaped parts masked (rl_core.secrets)."""
    if isinstance(value, dict):
        return {k: _mask_shapes(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_mask_shapes(v) for v in value)
    return mask_text(value) if isinstance(value, str) else value


def _mask_config(config: Any, data: dict[str, Any]) -> dict[str, Any]:
    """Mask inside free-form dicts (kwargs, options, ...); schema fields such as data.prompt_key are not secrets."""
    for f in attrs.fields(type(config)):
        value = getattr(config, f.name)
        if attrs.has(type(value)):
            data[f.name] = _mask_config(value, data[f.name])
        elif isinstance(data.get(f.name), dict):
            data[f.name] = mask_secrets(data[f.name])
    return data


def config_to_dict(config: Any, *, mask: bool = True) -> dict[str, Any]:
    """A plain dict of ``config``; credential-like values masked unless ``mask=False``."""
    data = attrs.asdict(config, recurse=True)
    return _mask_shapes(_mask_config(config, data)) if mask else data
