"""Reading a run config: YAML file + dotted ``key=value`` overrides -> RunConfig.

Every problem (duplicate YAML keys, unknown keys with a "did you mean", wrong types, :mod:`rl_core.config.rules`) is
raised together as one :class:`~rl_core.problems.ConfigError`, so ``rlcore check`` and ``rlcore train`` refuse the same
configs. :func:`config_to_dict` masks credentials (:func:`mask_secrets`) wherever the config is printed or saved.
Another framework's launch is read by a dialect plugin (:mod:`rl_core.config.dialect`).
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

from rl_core.cards import load_object
from rl_core.config.dialect import Launch, Translated, flatten, grammar_of, is_ours, parse_override
from rl_core.config.rules import check_config
from rl_core.config.schema import RunConfig
from rl_core.config.sections import Sectioned, added_to, flatten_sections, section_class
from rl_core.problems import ConfigError, Problem, did_you_mean
from rl_core.util.secrets import mask_text
from rl_core.util.type_hints import type_hints
from rl_core.util.user_paths import expand_user_paths
from rl_core.plugins import dialect_hint, section_hint

logger = logging.getLogger(__name__)


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
        raise ConfigError([Problem(key=key, what=f"appears {len(lines)} times in {path} (lines {', '.join(map(str, lines))}); "
                                           "YAML would silently keep only the last",
                                   fix=f"keep one {key!r} (merge the two into one section if it is a section)")
                           for key, lines in duplicates.items()])
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


# ----------------------------------------------------------------- structuring
class _Mismatch(Exception):
    pass


def type_name(tp: Any) -> str:
    """How a field's type is named in messages and docs ("int or null", "list[float]")."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in typing.get_args(tp))
    if origin is not None:
        return f"{origin.__name__}[{', '.join(type_name(a) for a in typing.get_args(tp))}]"
    if tp is type(None):
        return "null"
    if tp is Any:
        return "any"
    return getattr(tp, "__name__", str(tp))


_ARTICLES = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}


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


def structure(cls: type, data: Mapping[str, Any], prefix: str, problems: list[Problem]) -> Any:
    """Build ``cls`` from ``data``, appending a problem for every bad key."""
    hints = type_hints(cls)
    fields = {f.name: f for f in attrs.fields(cls) if f.name != "sections"}
    added = added_to(cls)
    kwargs: dict[str, Any] = {}
    given: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if key in added:
            if value is None:  # null: the section's defaults (data.train_generator=null: no generator)
                given[key] = added[key]()
            elif not isinstance(value, Mapping):
                problems.append(Problem(key=dotted, what=f"expected a section, got {value!r} ({type(value).__name__})",
                                        fix=f"{dotted} is a section: give it sub-keys, e.g. {dotted}.<key>=<value>"))
            else:
                given[key] = structure(added[key], value, dotted, problems)
            continue
        if key not in fields:
            where = f"section {prefix!r}" if prefix else "the config"
            names = [*fields, *added]
            problems.append(Problem(key=dotted,
                                    what=f"unknown key in {where}" + (section_hint(dotted) or _typo(str(key), names)),
                                    fix=f"valid keys here: {', '.join(sorted(names))}"))
            continue
        tp = hints[key]
        try:
            kwargs[key] = _coerce(value, tp, dotted, problems)
        except _Mismatch:
            if section_class(tp) is not None:
                fix = f"{dotted} is a section: give it sub-keys, e.g. {dotted}.<key>=<value>"
            else:
                name = type_name(tp)
                fix = f"set {dotted} to {_ARTICLES.get(name, f'a value of type {name}')}"
            problems.append(Problem(key=dotted, what=f"expected {type_name(tp)}, got {value!r} ({type(value).__name__})", fix=fix))
    if added:
        kwargs["sections"] = {key: given[key] if key in given else schema() for key, schema in added.items()}
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:  # a section's own validators (the schema's are rules, checked after)
        problems.append(Problem(key=prefix or "config", what=str(exc)))
        return cls()


@attrs.frozen(kw_only=True)
class Loaded:
    """What :func:`load_report` found: the config (None when an error stops it), every problem, the profile."""

    config: RunConfig | None
    problems: list[Problem]
    profile: str  # whose defaults filled what the launch left unset: "rl-core", or a dialect's (rl_core.config.dialect)
    profile_defaults: list[tuple[str, Any, Any]]  # (rl-core key, the dialect's value, rl-core's own) applied under its profile
    origin: dict[str, str] = attrs.field(factory=dict)  # rl-core key -> key as the user wrote it
    rule_keys: frozenset[str] = frozenset()  # keys a cross-key rule reported (the ``rules`` stage of rlcore check)
    defaults_heading: str = ""  # rlcore check's line above profile_defaults (the dialect's)
    default_note: str = ""  # ends a later problem about a key from profile_defaults (the dialect's)
    unknown_note: str = ""  # ends a later problem about an unknown translated key (the dialect's)

    def as_written(self, problems: Iterable[Problem]) -> list[Problem]:
        """Later problems (resolver, normaliser) naming the keys as the user wrote them, or as the dialect's defaults."""
        from_profile = {k for k, _, _ in self.profile_defaults}
        return [attrs.evolve(p, what=p.what + f" ({p.key} {self.default_note})")
                if p.key in from_profile else _as_written(p, self.origin, self.unknown_note) for p in problems]


def dialects() -> list:
    """The installed :class:`rl_core.cards.DialectCard` s, by name."""
    from rl_core.plugins import get_registry

    table = get_registry().cards.get("dialect", {})
    return [table[name] for name in sorted(table)]


def option_dests(cards: Iterable[Any] | None = None) -> dict[str, str]:
    """``{argparse dest: flag}`` of every command-line option the dialects read (``config_name``: ``--config-name``)."""
    return {kw.get("dest") or flag.lstrip("-").replace("-", "_"): flag
            for card in (dialects() if cards is None else cards) for flag, kw in card.cli_options}


def _native(launch: Launch) -> Translated:
    """rl-core's own launch: the file's keys, then ``key=value`` overrides in order."""
    tree: dict[str, Any] = {}
    problems: list[Problem] = []
    items: list[tuple[str, Any]] = list(flatten(launch.data))
    for text in launch.overrides:
        if grammar_of(text):
            problems.append(Problem(key=text.partition("=")[0].strip(), what=f"{text!r} is written in Hydra's override grammar (+key, ~key, "
                                    "group@package), which rl-core reads only through a dialect plugin, and no installed dialect reads it",
                                    fix="write key=value" + dialect_hint("+key / ~key / group@package")))
            continue
        key, value, problem = parse_override(text)
        if problem is not None:
            problems.append(problem)
        else:
            items.append((key, value))
    for key, value in items:
        hint = dialect_hint(key)
        if hint and not is_ours(key):
            problems.append(Problem(key=key, what="is another framework's spelling of a key, and no installed dialect plugin reads it",
                                    fix="write rl-core's key (docs/config.md)" + hint))
        else:
            set_dotted(tree, key, value)
    return Translated(raw=tree, problems=problems)


def _translate(launch: Launch, problems: list[Problem]) -> Translated:
    """The launch as rl-core's raw config: by the dialect whose syntax it is, else rl-core's own (a dialect translating
    the keys that are not rl-core's)."""
    cards = dialects()
    for card in cards:
        if load_object(card.detect)(launch):
            return card.load()(launch)
    given = {dest: value for dest, value in launch.options.items() if value is not None}
    known = option_dests(cards)
    for dest in given:
        if dest not in known:
            flag = "--" + dest.replace("_", "-")
            problems.append(Problem(key=flag, what="is an option of a dialect plugin, and no installed dialect reads it",
                                    fix=f"remove {flag}" + dialect_hint(flag)))
    keys = [k for k, _ in flatten(launch.data)] + [t.partition("=")[0].strip() for t in launch.overrides]
    if any(not is_ours(k) for k in keys):
        for card in cards:
            if card.keys is not None:
                return load_object(card.keys)(launch)
    return _native(launch)


def load_report(
    path: str | Path | None = None, overrides: Iterable[str] = (), *, base: Mapping[str, Any] | None = None, **options: Any,
) -> Loaded:
    """YAML file (optional) + overrides (+ the dialects' options, e.g. ``config_name``) -> :class:`Loaded`; never raises ConfigError."""
    problems: list[Problem] = []
    data: dict[str, Any] = dict(base or {})
    if path is not None:
        data = merge(data, read_yaml(path))
    launch = Launch(path=None if path is None else str(path), data=data, overrides=tuple(overrides), options=options)
    tr = _translate(launch, problems)
    problems += tr.problems
    config = structure(RunConfig, tr.raw, "", problems)
    seen = {p.key for p in problems}
    rule_keys: set[str] = set()
    problems.extend(p for p in check_config(config, rule_keys=rule_keys) if p.key not in seen)
    if tr.after is not None:
        problems.extend(tr.after(config))
    problems = [_as_written(p, tr.origin, tr.unknown_note) for p in problems]
    config = expand_user_paths(config)  # `~` once, here: check and the run see the same folders
    return Loaded(config=config, problems=problems, profile=tr.profile, profile_defaults=tr.defaults, origin=dict(tr.origin),
                  defaults_heading=tr.defaults_heading, default_note=tr.default_note, unknown_note=tr.unknown_note,
                  rule_keys=frozenset(rule_keys))


def load_config(
    path: str | Path | None = None, overrides: Iterable[str] = (), *, base: Mapping[str, Any] | None = None,
    warnings: list[Problem] | None = None, **kw: Any,
) -> RunConfig:
    """YAML file (optional) + overrides -> RunConfig, or raise ConfigError with every problem; warnings go to
    ``warnings`` when given, else to the log."""
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


def _as_written(p: Problem, origin: Mapping[str, str], unknown_note: str = "") -> Problem:
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
    if what.startswith("unknown key") and "looks like a typo" not in what and unknown_note:
        what += f": {unknown_note}"
    return attrs.evolve(p, key=written, what=f"{what} (rl-core's {key})")


# --------------------------------------------------------------------- secrets
MASK = "***"
_SECRET_WORDS = {"key", "token", "secret", "secrets", "password", "passwd", "pwd", "apikey", "credential", "credentials", "auth"}


def looks_secret(name: str) -> bool:
    """Whether a key's name looks like a credential: a word of it is key, token, secret, password, ..."""
    words = re.split(r"[^a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(name)).lower())
    return any(w in _SECRET_WORDS for w in words) or "password" in str(name).lower() or "secret" in str(name).lower()


def mask_secrets(value: Any, *, by_key: bool = True) -> Any:
    """A copy of a plain dict / list tree with the non-empty string values of credential-like keys replaced by ``***``
    (unless ``by_key`` is false), and secret-shaped parts of every other string too (a URL's password, ``Bearer ...``,
    ``sk-...``: rl_core.util.secrets)."""
    if isinstance(value, Mapping):
        return {k: MASK if by_key and looks_secret(k) and isinstance(v, str) and v else mask_secrets(v, by_key=by_key) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(mask_secrets(v, by_key=by_key) for v in value)
    return mask_text(value) if isinstance(value, str) else value


def _mask_config(config: Any, data: dict[str, Any]) -> dict[str, Any]:
    """Mask inside free-form dicts (kwargs, options, ...); schema fields such as data.prompt_key are not secrets."""
    for f in attrs.fields(type(config)):
        value = getattr(config, f.name)
        if f.name == "sections" and isinstance(config, Sectioned):
            data[f.name] = {k: _mask_config(v, data[f.name][k]) for k, v in value.items()}
        elif attrs.has(type(value)):
            data[f.name] = _mask_config(value, data[f.name])
        elif isinstance(data.get(f.name), dict):
            data[f.name] = mask_secrets(data[f.name])
    return data


def config_to_dict(config: Any, *, mask: bool = True) -> dict[str, Any]:
    """A plain dict of ``config``; credential-like values masked unless ``mask=False``."""
    data = attrs.asdict(config, recurse=True)
    data = mask_secrets(_mask_config(config, data), by_key=False) if mask else data
    return flatten_sections(data)  # packages' sections under their own keys (``async:``), read back the same way
