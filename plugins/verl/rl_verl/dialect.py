"""verl's launch read into rl-core's config: the dialect card's three functions (:class:`rl_core.cards.DialectCard`).

* :func:`detect`: a verl launch is one with ``--config-name`` (verl's own ``ppo_trainer`` or a user's file), an
  override in Hydra's grammar (``+key=v``, ``~key``, ``group@package=option``), or verl's profile chosen
  (``--profile verl``, ``profile=verl``, a top-level ``profile: verl``).
* :func:`translate`: such a launch, whole: Hydra's grammar (:mod:`rl_verl.translate`), verl's keys
  (:mod:`rl_verl.keys`), and under the verl profile verl's defaults for what it leaves unset (:mod:`rl_verl.profile`).
* :func:`keys`: a native launch (a YAML file, ``key=value``) that writes some of verl's keys: those keys are
  translated, rl-core's own keys keep rl-core's meaning, and no default changes.

verl users can paste their keys: ``actor_rollout_ref.actor.X`` maps to ``actor.X``, ``actor_rollout_ref.rollout.X``
to ``rollout.X`` and so on (see :data:`VERL_PREFIXES` and docs/config.md).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import attrs

from rl_core.config.dialect import Launch, Translated, flatten, grammar_of, parse_override as native_override
from rl_core.config.load import config_to_dict, merge, set_dotted
from rl_core.config.schema import RolloutConfig, RunConfig
from rl_core.config.sections import installed
from rl_core.problems import Problem
from rl_verl import dtype, engines, reward_model
from rl_verl.keys import norm
from rl_verl.profile import generated_batch, get_dotted, unset_defaults
from rl_verl.translate import DELETE, ENGINES, Translation, parse_override, read_hydra_config, translate_item

DOC_VERL = "docs/migrating-from-verl.md"
from rl_verl.plugin import PROFILES


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
# verl's knobs of individual policy losses (rl-algorithms: rl_algorithms.policy_loss_pg / _cov) -> their options
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



def _reward_model_fields() -> frozenset[str]:
    """The keys of rl-reward-model's ``reward_model`` section (none while it is not installed)."""
    section = installed().get("reward_model")
    return frozenset(f.name for f in attrs.fields(section)) if section is not None else frozenset()

#: verl's top-level sections that have no section of ours: their keys are translated one by one
VERL_SECTIONS = frozenset({"actor_rollout_ref", "reward_model", "custom_reward_function", "ray_kwargs", "ray_init"})


def translate_verl_key(key: str) -> str:
    if key in VERL_KEYS:
        return VERL_KEYS[key]
    parts = key.split(".")
    if parts[0] == "reward_model" and len(parts) > 1 and parts[1] in _reward_model_fields():
        return key  # our own reward_model section (verl's keys of these names mean the same)
    for old, new in VERL_PREFIXES.items():
        if key == old or key.startswith(old):
            return new + key[len(old):]
    return key


#: verl's config groups a launch selects by name (a Hydra defaults-list choice: composing verl's config)
GROUPS = frozenset({"model_engine"})


def detect(launch: Launch) -> bool:
    """Whether ``launch`` is a verl launch (module docstring)."""
    options = launch.options
    if options.get("config_name") is not None or options.get("profile") == "verl":
        return True
    if str(launch.data.get("profile", "")) == "verl":
        return True
    return any(grammar_of(text) or text.replace(" ", "") == "profile=verl" or text.partition("=")[0].strip() in GROUPS
               for text in launch.overrides)


def translate(launch: Launch) -> Translated:
    """A verl launch, whole (:func:`detect`)."""
    return _run(launch, whole=True)


def keys(launch: Launch) -> Translated:
    """A native launch's verl keys (no verl default applies)."""
    return _run(launch, whole=False)


def translation(data: Mapping[str, Any] | None = None, overrides: Iterable[str] = (), *, native: bool = False) -> Translation:
    """A config file's keys, then the overrides in order, as rl-core's flat items (:mod:`rl_verl.translate`); ``native``:
    rl-core's own override form and keys (a native launch)."""
    tr = Translation()
    for key, value in flatten(data or {}):
        translate_item(tr, key, key, value, fallback=translate_verl_key, native=native)
    tr.stage = "overrides"  # an override may change what the file says, under any spelling; two spellings within one level may not
    for text in overrides:
        if native:
            key, value, problem = native_override(text)
            written = key
        else:
            written, key, value, problem = parse_override(text)
        if problem is not None:
            tr.problems.append(problem)
            continue
        translate_item(tr, written, key, value, fallback=translate_verl_key, native=native)
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


def _run(launch: Launch, *, whole: bool) -> Translated:
    problems: list[Problem] = []
    data: dict[str, Any] = dict(launch.data)
    selections: list[tuple[str, Any]] = []
    verl_file = False
    config_name, profile = launch.options.get("config_name"), launch.options.get("profile")
    if whole and config_name is not None:
        extra, selections, found, verl_file = read_hydra_config(launch.options.get("config_path"), config_name)
        problems += found
        data = merge(data, extra)
    tr = translation(data, [*(f"{k}={_hydra_value(v)}" for k, v in selections), *launch.overrides], native=not whole)
    problems += tr.problems
    if whole:
        grammar = any(grammar_of(text) for text in launch.overrides)
        chosen = profile or tr.profile or ("verl" if (tr.verl_spelled or verl_file or grammar) else "rl-core")
    else:
        chosen = "rl-core"  # a native launch: rl-core's defaults
    if chosen not in PROFILES:
        problems.append(Problem(key="profile", what=f"{chosen!r} is not a profile", fix="use profile=verl (verl's defaults) or profile=rl-core"))
        chosen = "rl-core"
    tree = _resolve_interpolations(tr_tree({}, tr), tr, problems)
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
    found, engine_defaults = engines.apply(tree, tr, chosen)  # veomni / fsdp_turbo / mlite settings
    problems += found
    applied += engine_defaults
    found, rm_defaults = reward_model.apply(tree, tr)  # reward.reward_model.rollout.*: a reward model verl serves
    problems += found
    applied += rm_defaults

    def after(config: RunConfig) -> list[Problem]:
        return [*_ties(config, tr), *dtype.agreement(config.model.dtype, tr.dtypes)]  # verl's per-worker dtypes vs model.dtype

    return Translated(
        raw=tree, problems=problems, origin=tr.origin, profile=chosen, defaults=applied, after=after,
        defaults_heading="verl profile: unset keys take verl's defaults (--profile rl-core for rl-core's); where they differ from rl-core's:",
        default_note="is verl's default, from the verl profile; set it, or --profile rl-core",
        unknown_note=f"not a typo of a key of ours; as a verl setting it is a verl feature rl-core does not have ({DOC_VERL} lists every verl key rl-core reads)",
    )


def _resolve_interpolations(tree: dict[str, Any], tr: Translation, problems: list[Problem]) -> dict[str, Any]:
    """``${a.b}`` in values, resolved as verl resolves its config (OmegaConf, against the whole config, rl-core's key names
    and the verl names as written); one that does not resolve is refused, never taken literally."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    def has(node: Any) -> bool:
        if isinstance(node, str):
            return "${" in node
        if isinstance(node, dict):
            return any(has(v) for v in node.values())
        return isinstance(node, list) and any(has(v) for v in node)

    if not has(tree):
        return tree
    written = tr_tree({}, Translation(items=[(w, get_dotted(tree, k)) for k, w in tr.origin.items() if get_dotted(tree, k) is not None]))
    # a reference may use rl-core's name or the verl name as written; unset keys have rl-core's defaults
    scope = merge(merge(config_to_dict(RunConfig(), mask=False), written), tree)
    out = merge({}, tree)
    for key, value in flatten(tree):
        if not has(value):
            continue
        try:
            resolved = OmegaConf.to_container(OmegaConf.create({**scope, "__value__": value}), resolve=True)["__value__"]
        except OmegaConfBaseException as exc:
            problems.append(Problem(key=tr.origin.get(key, key), what=f"is {value!r}: an interpolation that does not resolve "
                                    f"({type(exc).__name__}: {str(exc).splitlines()[0]})", fix="write the value itself, or refer to a key the config sets"))
            continue
        set_dotted(out, key, resolved)
    return out


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
    out = []
    flat = config_to_dict(config, mask=False)
    for written, value, target, note, soft in tr.ties:
        have = get_dotted(flat, target) if target != "@world" else config.trainer.nnodes * config.trainer.n_gpus_per_node
        want = norm(value)
        if target == "@world" and want in (-1, have):
            continue
        if isinstance(want, str) and target == "train.name":
            want = engines.BACKEND_OF.get(want.lower(), want)
        if want is None or want == norm(have) or (isinstance(have, str) and str(want) == have):
            continue
        target = "the world size (trainer.nnodes x trainer.n_gpus_per_node)" if target == "@world" else target
        if soft:
            out.append(Problem(key=written, what=f"is {value!r}; rl-core uses {target}={have!r} for it: {note}", severity="warning"))
            continue
        out.append(Problem(key=written, what=f"is {value!r} but rl-core's {target} is {have!r}: {note}",
                           fix=f"give both the same value (set {target}={value!r}), or remove {written}"))
    return out
