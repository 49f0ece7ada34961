"""Reading a run config: YAML file + dotted ``key=value`` overrides -> RunConfig.

Every problem is collected (duplicate YAML keys, unknown keys with a "did you
mean", wrong types naming the key and the expected type, values outside their
range or allowed set, NaN / inf: :mod:`rl_core.config.rules`), then raised
together as one :class:`~rl_core.problems.ConfigError`. So ``rlcore check``,
``rlcore train --dry-run`` and ``rlcore train`` refuse the same configs.

:func:`config_to_dict` masks values whose keys look like credentials
(:func:`mask_secrets`), and secret-shaped parts of any string value
(:func:`rl_core.util.secrets.mask_text`): the printed config, the saved ``config.yaml`` and the
trackers' copies never hold them.

verl users can paste their keys: ``actor_rollout_ref.actor.X`` maps to
``actor.X``, ``actor_rollout_ref.rollout.X`` to ``rollout.X`` and so on
(see :data:`VERL_PREFIXES` and docs/config.md).
"""

from __future__ import annotations

import logging
import re
import types
import typing
from pathlib import Path
from typing import Any, Iterable, Mapping

import attrs
import yaml

from rl_core.config.rules import check_config
from rl_core.config import verl_dtype, verl_engines, verl_reward_model
from rl_core.config.verl_profile import generated_batch, get_dotted, unset_defaults
from rl_core.config.verl_translate import DELETE, ENGINES, Translation, flatten, parse_override, read_hydra_config, translate_item
from rl_core.config.typenames import article as _article, type_name as _type_name
from rl_core.config.schema import RewardModelConfig, RolloutConfig, RunConfig
from rl_core.problems import ConfigError, Problem, did_you_mean
from rl_core.util.secrets import mask_text
from rl_core.util.type_hints import type_hints
from rl_core.util.user_paths import expand_user_paths

logger = logging.getLogger(__name__)

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
        loader = yaml.SafeLoader(text)  # parsed once: the node tree gives both the duplicates and the data
        try:
            node = loader.get_single_node()
            duplicates = duplicate_keys(node)
            data = (loader.construct_document(node) if node is not None else None) or {}
        finally:
            loader.dispose()
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
    """``["a.b=1", "c=x"]`` -> nested dict of rl-core keys (Hydra's grammar; verl's keys translated)."""
    tr = translate(overrides=overrides)
    return tr_tree({}, tr), tr.problems


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


def translate(data: Mapping[str, Any] | None = None, overrides: Iterable[str] = ()) -> Translation:
    """A config file's keys, then the overrides in order, as rl-core's flat items (:mod:`rl_core.config.verl_translate`)."""
    tr = Translation()
    for key, value in flatten(data or {}):
        translate_item(tr, key, key, value, fallback=translate_verl_key)
    for text in overrides:
        written, key, value, problem = parse_override(text)
        if problem is not None:
            tr.problems.append(problem)
            continue
        translate_item(tr, written, key, value, fallback=translate_verl_key)
    return tr


def tr_tree(base: Mapping[str, Any], tr: Translation) -> dict[str, Any]:
    """``base`` with the translation's items set (``~key`` items deleted) in order."""
    out = merge({}, base)
    for key, value in tr.items:
        if value is DELETE:
            _del_dotted(out, key)
        else:
            set_dotted(out, key, value)
    return out


def _del_dotted(tree: dict[str, Any], key: str) -> None:
    parts = key.split(".")
    node: Any = tree
    for part in parts[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(parts[-1], None)


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


#: how close a key must be spelled to one of ours to be called a typo of it (difflib's ratio); looser matches
#: named keys of another meaning ("log_prob_max_token_len_per_gpu" -> "log_prob_micro_batch_size_per_gpu")
TYPO_CUTOFF = 0.85


def _typo(key: str, fields: Iterable[str]) -> str:
    hint = did_you_mean(key, fields, cutoff=TYPO_CUTOFF)
    return f": looks like a typo{hint}" if hint else ""


#: config sections whose key is a Python keyword: the schema's field carries a trailing underscore
KEYWORD_SECTIONS = {"async": "async_"}


def structure(cls: type, data: Mapping[str, Any], prefix: str, problems: list[Problem]) -> Any:
    """Build ``cls`` from ``data``, appending a problem for every bad key."""
    hints = type_hints(cls)
    fields = {f.name: f for f in attrs.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if not prefix and key in KEYWORD_SECTIONS:
            key = KEYWORD_SECTIONS[key]
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if key not in fields:
            where = f"section {prefix!r}" if prefix else "the config"
            problems.append(
                Problem(
                    key=dotted,
                    what=f"unknown key in {where}" + _typo(str(key), fields),
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


@attrs.frozen(kw_only=True)
class Loaded:
    """What :func:`load_report` found: the config (None when an error stops it), every problem, the profile."""

    config: RunConfig | None
    problems: list[Problem]
    profile: str
    profile_defaults: list[tuple[str, Any, Any]]  # (rl-core key, verl's value, rl-core's own) applied under the verl profile
    origin: dict[str, str] = attrs.field(factory=dict)  # rl-core key -> key as the user wrote it
    rule_keys: frozenset[str] = frozenset()  # keys a cross-key rule reported (the ``rules`` stage of rlcore check)

    def as_written(self, problems: Iterable[Problem]) -> list[Problem]:
        """Later problems (resolver, normaliser) naming the keys as the user wrote them, or as verl's defaults."""
        from_profile = {k for k, _, _ in self.profile_defaults}
        return [attrs.evolve(p, what=p.what + f" ({p.key} is verl's default, from the verl profile; set it, or --profile rl-core)")
                if p.key in from_profile else _as_written(p, self.origin) for p in problems]


def load_report(
    path: str | Path | None = None, overrides: Iterable[str] = (), *, base: Mapping[str, Any] | None = None,
    config_path: str | None = None, config_name: str | None = None, profile: str | None = None,
) -> Loaded:
    """YAML file or ``--config-path`` / ``--config-name`` (optional) + overrides -> :class:`Loaded`; never raises ConfigError."""
    problems: list[Problem] = []
    data: dict[str, Any] = dict(base or {})
    selections: list[tuple[str, Any]] = []
    verl_file = False
    if path is not None:
        data = merge(data, read_yaml(path))
    if config_name is not None:
        extra, selections, found, verl_file = read_hydra_config(config_path, config_name)
        problems += found
        data = merge(data, extra)
    tr = translate(data, [*(f"{k}={_hydra_value(v)}" for k, v in selections), *overrides])
    problems += tr.problems
    chosen = profile or tr.profile or ("verl" if (tr.verl_spelled or verl_file) else "rl-core")
    if chosen not in ("verl", "rl-core"):
        problems.append(Problem(key="profile", what=f"{chosen!r} is not a profile", fix="use profile=verl (verl's defaults) or profile=rl-core"))
        chosen = "rl-core"
    tree = tr_tree({}, tr)
    tree = _engine_kwargs(tree, problems)
    applied: list[tuple[str, Any, Any]] = []
    if chosen == "verl":
        own = config_to_dict(RunConfig(), mask=False)
        for key, value in unset_defaults(tree):
            applied.append((key, value, get_dotted(own, key)))
            set_dotted(tree, key, value)
        batch = generated_batch(tree)  # data.gen_batch_size without dynamic sampling: the step's batch, as in verl
        if batch is not None:
            problems.append(batch)
    found, engine_defaults = verl_engines.apply(tree, tr, chosen)  # veomni / fsdp_turbo / mlite settings
    problems += found
    applied += engine_defaults
    found, rm_defaults = verl_reward_model.apply(tree, tr)  # reward.reward_model.rollout.*: a reward model verl serves
    problems += found
    applied += rm_defaults
    config = structure(RunConfig, tree, "", problems)
    seen = {p.key for p in problems}
    rule_keys: set[str] = set()
    problems.extend(p for p in check_config(config, rule_keys=rule_keys) if p.key not in seen)
    problems.extend(_ties(config, tr))
    problems.extend(verl_dtype.agreement(config.model.dtype, tr.dtypes))  # verl's per-worker dtypes vs model.dtype
    problems = [_as_written(p, tr.origin) for p in problems]
    config = expand_user_paths(config)  # `~` once, here: check and the run see the same folders
    return Loaded(config=config, problems=problems, profile=chosen, profile_defaults=applied, origin=dict(tr.origin), rule_keys=frozenset(rule_keys))


def load_config(
    path: str | Path | None = None, overrides: Iterable[str] = (), *, base: Mapping[str, Any] | None = None,
    warnings: list[Problem] | None = None, **kw: Any,
) -> RunConfig:
    """YAML file (optional) + overrides -> RunConfig, or raise ConfigError with every problem.

    Warnings (verl keys ignored with a reason, ...) go to ``warnings`` when given, else to the log.
    """
    loaded = load_report(path, overrides, base=base, **kw)
    errs = [p for p in loaded.problems if p.severity == "error"]
    if errs:
        raise ConfigError(errs)
    for p in loaded.problems:
        if warnings is not None:
            warnings.append(p)
        else:
            logger.warning("%s", p.render())
    return loaded.config


def _hydra_value(value: Any) -> str:
    return "null" if value is None else str(value)


def _engine_kwargs(tree: dict[str, Any], problems: list[Problem]) -> dict[str, Any]:
    """verl's ``rollout.engine_kwargs.<engine>.*``: the chosen engine's part is its kwargs; the others are unused (as in verl)."""
    kwargs = get_dotted(tree, "rollout.engine_kwargs")
    if not isinstance(kwargs, dict) or not any(e in kwargs for e in ENGINES):
        return tree
    name = str(get_dotted(tree, "rollout.name") or RolloutConfig().name)
    out = {k: v for k, v in kwargs.items() if k not in ENGINES}
    for engine in ENGINES:
        part = kwargs.get(engine)
        if part is None:
            continue
        if engine == name and isinstance(part, dict):
            out.update(part)
        elif part:
            problems.append(Problem(key=f"actor_rollout_ref.rollout.engine_kwargs.{engine}", what=f"ignored: arguments of the {engine} engine, and this run's rollout.name is {name!r} (verl passes on only the chosen engine's part too)", severity="warning"))
    tree["rollout"]["engine_kwargs"] = out
    return tree


def _ties(config: RunConfig, tr: Translation) -> list[Problem]:
    """verl keys that rl-core has one setting for: accepted when they agree with it."""
    from rl_core.config.verl_keys import norm

    out = []
    flat = config_to_dict(config, mask=False)
    for written, value, target, note, soft in tr.ties:
        have = get_dotted(flat, target) if target != "@world" else config.trainer.nnodes * config.trainer.n_gpus_per_node
        want = norm(value)
        if target == "@world" and want in (-1, have):
            continue
        if isinstance(want, str) and target == "train.name":
            want = verl_engines.BACKEND_OF.get(want.lower(), want)
        if want is None or want == norm(have) or (isinstance(have, str) and str(want) == have):
            continue
        target = "the world size (trainer.nnodes x trainer.n_gpus_per_node)" if target == "@world" else target
        if soft:
            out.append(Problem(key=written, what=f"is {value!r}; rl-core uses {target}={have!r} for it: {note}", severity="warning"))
            continue
        out.append(Problem(key=written, what=f"is {value!r} but rl-core's {target} is {have!r}: {note}",
                           fix=f"give both the same value (set {target}={value!r}), or remove {written}"))
    return out


def _as_written(p: Problem, origin: Mapping[str, str]) -> Problem:
    """A problem about a translated key names the key as the user wrote it, rl-core's name beside it."""
    key = p.key
    hit = next((k for k in sorted(origin, key=len, reverse=True) if key == k or key.startswith(k + ".") or key.startswith(k + "[")), None)
    if hit is not None:
        written = origin[hit] + key[len(hit):]
    else:  # a section of ours named by keys below it (actor.engine from actor_rollout_ref.actor.engine.ep)
        below = next((k for k in origin if k.startswith(key + ".")), None)
        if below is None or not origin[below].endswith(below[len(key):]):
            return p
        written = origin[below][: len(origin[below]) - len(below) + len(key)]
    what = p.what
    if what.startswith("unknown key") and "looks like a typo" not in what:
        what += f": not a typo of a key of ours; as a verl setting it is a verl feature rl-core does not have ({DOC_VERL} lists every verl key rl-core reads)"
    return attrs.evolve(p, key=written, what=f"{what} (rl-core's {key})")


DOC_VERL = "docs/migrating-from-verl.md"


# --------------------------------------------------------------------- secrets
MASK = "***"
_SECRET_WORDS = {"key", "token", "secret", "secrets", "password", "passwd", "pwd", "apikey", "credential", "credentials", "auth"}


def looks_secret(name: str) -> bool:
    """Whether a key's name looks like a credential: a word of it is key, token, secret, password, ..."""
    words = re.split(r"[^a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(name)).lower())
    return any(w in _SECRET_WORDS for w in words) or "password" in str(name).lower() or "secret" in str(name).lower()


def mask_secrets(value: Any) -> Any:
    """A copy of a plain dict / list tree with the values of credential-like keys replaced by ``***``,
    and secret-shaped parts of every other string too (a URL's password, ``Bearer ...``, ``sk-...``: rl_core.util.secrets).

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
    """Every string of a dict / list tree with its secret-shaped parts masked (rl_core.util.secrets)."""
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
    data = _mask_shapes(_mask_config(config, data)) if mask else data
    for key, name in KEYWORD_SECTIONS.items():  # written as the user writes it (``async:``), read back the same way
        if name in data:
            data[key] = data.pop(name)
    return data
