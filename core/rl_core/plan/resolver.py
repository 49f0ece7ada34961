"""The resolver: config names -> cards -> a matched :class:`Plan`, or problems; it reads only cards and light metadata
(distribution versions, a model's ``config.json``), before anything heavy is imported or a device is touched.
"""

from __future__ import annotations

import importlib.metadata as md  # noqa: F401  (tests patch resolver.md.version: the same module object engine_versions reads)
import json
import os
from pathlib import Path

from typing import Any, Callable

import attrs

from rl_core.cards import (
    ConverterCard, EstimatorCard, PlacementCard, PolicyLossCard, RewardCard, RewardModelCard, RolloutCard, RolloutPoolCard,
    RunKindCard, TrainCard,
)
from rl_core.config.normalize import Sizes, normalize
from rl_core.config.schema import RunConfig
from rl_core.plan.factory_paths import factory_path_problem
from rl_core.plan.features import Features, resolve_features
from rl_core.plan.roles import ACTOR, resolve_log_prob_roles
from rl_core.plan.step_hooks import step_hooks
from rl_core.plan.named import builtin_card, loaded, tracker_cards
from rl_core.engine_versions import ALLOW_UNTESTED_ENV, engine_version_problem  # noqa: F401  (rl_core.plan.resolver's names before)
from rl_core.plugins import Registry, UnknownCardError, get_registry
from rl_core.observers import observer_plan
from rl_core.problems import Problem, errors
from rl_core.rollout import log_prob_decision
from rl_core.rollout.moe_parallel import moe_parallel_problems
from rl_core.card_options import options_problems
from rl_core.run_kind import RL, run_kind_name
from rl_core.util.user_paths import get_key, section_enabled



#: keys whose value is a name looked up among the installed plugins
NAME_KEYS = frozenset({"rollout.name", "train.name", "algorithm.adv_estimator", "actor.policy_loss", "reward.name", "reward.custom.path", "reward.custom.name", "trainer.kind"})


@attrs.frozen(kw_only=True)
class Plan:
    """The run plan: a config whose backends fit together, sized, with every card it names loaded once. Built once per
    run (:func:`rl_core.plan.checks.build_plan`); the loop, workers and engines read this, never the registry."""

    config: RunConfig
    sizes: Sizes
    rollout: RolloutCard
    train: TrainCard
    estimator: EstimatorCard
    policy_loss: PolicyLossCard
    reward: RewardCard | None
    converter: ConverterCard | None
    warnings: tuple[Problem, ...] = ()
    reward_model: RewardModelCard | None = None  # reward_model.enable: the model-based reward's card
    # the rollout card named by the reward model card's rollout_key (a generative judge's engine), if any
    reward_model_rollout: RolloutCard | None = None
    # the cards' loaded functions (module-level, so the Plan pickles to worker processes by reference):
    # the loop, the workers and the engines use these; nothing looks a name up again
    estimator_fn: Callable[..., Any] | None = None
    policy_loss_fn: Callable[..., Any] | None = None
    reward_fn: Callable[..., Any] | None = None
    reward_model_fn: Callable[..., Any] | None = None  # the reward model card's factory (rl-reward-model's role calls it)
    # without reward.name, each sample's data_source is matched against these (the cards seen when resolving)
    reward_cards: tuple[RewardCard, ...] = ()
    plugin_errors: tuple[str, ...] = ()  # distributions whose plugins failed to load (named when no reward matches)
    # rollout.multi_turn: the agent runtime an agent-loop card's runner built (rl_core.rollout.multi_turn.agent_runtime)
    agent: Any = None
    # the log-prob roles the estimator reads (EstimatorCard.log_probs): (name, card, loaded factory) (rl_core.plan.roles)
    log_prob_roles: tuple[tuple[str, Any, Any], ...] = ()
    # step observers (rl_core.observers): (card, its loaded factory) of every installed ObserverCard
    observers: tuple = ()
    # trainer.kind other than rl (rl_core.run_kind): the run kind's card and its loaded factory
    run_kind: RunKindCard | None = None
    run_kind_fn: Callable[..., Any] | None = None
    # trainer.placement's card: where the workers run (rl_core.placement.make_cluster loads its factory)
    placement: PlacementCard | None = None
    # cross-cutting features (LoRA, ...): every installed FeatureCard, loaded once (rl_core.plan.features)
    features: Features = Features()
    # rollout.n_gpus_per_node: the rollout pool's card (rl-async), its schedule's factory and its worker extension's
    # (rl_core.placement.rollout_pool); None when the rollout lives in the actor's workers
    rollout_pool: RolloutPoolCard | None = None
    rollout_pool_fn: Callable[..., Any] | None = None
    rollout_pool_worker_fn: Callable[..., Any] | None = None
    # the step hooks the config turns on (rl_core.plan.step_hooks): (card, loaded factory) of each reward shaper, and
    # of the batch sampler (None: one generation round is the step's batch)
    reward_shapers: tuple = ()
    batch_sampler: Any = None
    # rollout.exact: the loaded forward of the LogProbForwardCard named "exact" (rl-exact), handed to the engines as
    # WorkerContext.log_prob_forward; None when rollout.exact is off
    log_prob_forward: Callable[..., Any] | None = None
    # trainer.loggers beyond console / jsonl: (name, the card's loaded factory) (rl_core.plan.named)
    trackers: tuple[tuple[str, Callable[..., Any]], ...] = ()
    # model.path builtin:NAME: its BuiltinModelCard's loaded factory (rl_core.plan.builtin_model.with_builtin_model makes the folder)
    builtin_model: Callable[..., Any] | None = None

    @property
    def needs_rollout(self) -> bool:
        """Whether the workers hold a rollout engine (the RL loop's do; a run kind's card says)."""
        return self.run_kind is None or self.run_kind.rollout


def _run_kind(config: RunConfig, registry: Registry, problems: list[Problem]) -> tuple[RunConfig, RunKindCard | None]:
    """trainer.kind's card (None for rl), its options checked; the policy loss it names put into actor.policy_loss."""
    name = run_kind_name(config)
    if name == RL:
        return config, None
    card = _lookup(registry, "run_kind", name, "trainer.kind", problems)
    if card is None:
        return config, None
    problems.extend(options_problems(card, config.trainer.kind_options, "trainer.kind_options"))
    wanted, default = card.policy_loss, attrs.fields(type(config.actor)).policy_loss.default
    if wanted is not None and config.actor.policy_loss != wanted:
        if config.actor.policy_loss != default:
            problems.append(Problem(key="actor.policy_loss", what=f"{config.actor.policy_loss!r} is not the loss of trainer.kind={name} ({wanted!r})",
                                    fix=f"leave actor.policy_loss unset (trainer.kind={name} trains with {wanted!r})"))
        config = attrs.evolve(config, actor=attrs.evolve(config.actor, policy_loss=wanted))
    return config, card


def _rollout_pool(config: RunConfig, registry: Registry, problems: list[Problem]) -> tuple[RolloutPoolCard | None, Any, Any]:
    """A rollout pool of its own (``rollout.n_gpus_per_node``) or ``async.*`` set: the one installed RolloutPoolCard
    (the rl-async package's) and its two factories; None when the rollout lives in the actor's workers."""
    own = config.rollout.n_gpus_per_node is not None
    section = getattr(config, "async_", None)  # rl-async's section: without the package its keys were refused when read
    default = type(section)() if section is not None else None
    changed = [f"async.{f.name}" for f in attrs.fields(type(section)) if getattr(section, f.name) != getattr(default, f.name)] if section is not None else []
    if not own and not changed:
        return None, None, None
    key = "rollout.n_gpus_per_node" if own else changed[0]
    cards = sorted(registry.cards["rollout_pool"].values(), key=lambda c: c.name)
    if len(cards) != 1:
        names = ", ".join(f"{c.name} ({c.provider})" for c in cards)
        problems.append(Problem(key=key, what="is set: a rollout pool of its own (its schedule and weight transfer, docs/async.md) comes from a "
                                + (f"rollout-pool package, and several are installed: {names}" if cards else "package that is not installed"),
                                fix="uninstall all but one of them" if cards else f"pip install rl-async, or remove {key}"))
        return None, None, None
    card = cards[0]
    if not own:  # async.* without a pool: the package's check names what is missing
        return None, None, None
    schedule_fn = load_factory(card, key, problems)
    try:
        worker_fn = card.load_worker()
    except Exception as exc:  # noqa: BLE001 - as load_factory: the plugin's failure, reported by name
        problems.append(Problem(key=key, what=f"rollout pool {card.name!r} from {card.provider} has a worker extension {card.worker!r} that does not load: "
                                f"{type(exc).__name__}: {exc}", fix=f"report this to the authors of {card.provider}"))
        worker_fn = None
    return card, schedule_fn, worker_fn


def first_per_key(problems: list[Problem]) -> list[Problem]:
    """Keep the first error per config key: later ones are usually its consequences."""
    seen: set[str] = set()
    out = []
    for p in problems:
        if p.severity == "error":
            if p.key in seen:
                continue
            seen.add(p.key)
        out.append(p)
    return out


def _lookup(registry: Registry, kind: str, name: str, key: str, problems: list[Problem]):
    try:
        return registry.get(kind, name)
    except UnknownCardError as exc:
        fix = f"set {key} to one of: {', '.join(registry.names(kind)) or '(none installed)'}"
        problems.append(Problem(key=key, what=str(exc), fix=fix))
        return None


def default_train_name(registry: Registry, problems: list[Problem]) -> str | None:
    """The train backend of a config without ``train.name``: the installed card with ``default=True``, or the only one."""
    cards = sorted(registry.cards["train"].values(), key=lambda c: c.name)
    chosen = [c for c in cards if c.default] or (cards if len(cards) == 1 else [])
    if len(chosen) == 1:
        return chosen[0].name
    names = ", ".join(c.name for c in cards) or "(none installed: pip install a train backend plugin)"
    problems.append(Problem(key="train.name", what="is not set and no single installed train backend is the default", fix=f"set train.name to one of: {names}"))
    return None


def model_architecture(path: str) -> str | None:
    """``architectures[0]`` from a local model folder's config.json, if readable."""
    cfg = Path(os.path.expanduser(path)) / "config.json"
    try:
        archs = json.loads(cfg.read_text()).get("architectures") or []
    except (OSError, ValueError):
        return None
    return archs[0] if archs else None


def _looks_local(path: str) -> bool:
    return path.startswith(("/", "./", "../", "~")) or os.sep + os.sep in path


def _check_devices(config: RunConfig, rollout: RolloutCard | None, train: TrainCard | None, problems: list[Problem]) -> None:
    device = config.trainer.device
    for card, key in ((rollout, "rollout.name"), (train, "train.name")):
        if card is not None and device not in card.devices:
            problems.append(Problem(
                key="trainer.device",
                what=f"{card.kind} backend {card.name!r} ({key}) runs on {', '.join(sorted(card.devices))}, not {device}",
                fix=f"set trainer.device to one of {', '.join(sorted(card.devices))}, or pick another {key}",
            ))


def _installed(registry: Registry, kind: str, fits) -> str:
    """``" (e.g. a, b)"``: the installed backends of ``kind`` whose card ``fits``; empty when none."""
    names = sorted(c.name for c in registry.cards[kind].values() if fits(c))
    return f" (installed: {', '.join(names)})" if names else " (none installed)"


def _check_parallel(config: RunConfig, rollout: RolloutCard | None, train: TrainCard | None, problems: list[Problem], registry: Registry) -> None:
    rtp = config.rollout.tensor_model_parallel_size
    world = config.trainer.nnodes * config.trainer.n_gpus_per_node
    # A TP size that does not divide the devices is reported by the normaliser; one root cause at a time.
    if rollout is not None and rollout.max_tp is not None and rtp > rollout.max_tp and world % rtp == 0:
        problems.append(Problem(
            key="rollout.tensor_model_parallel_size",
            what=f"rollout backend {rollout.name!r} supports tensor parallel size up to {rollout.max_tp}, got {rtp}",
            fix=f"set rollout.tensor_model_parallel_size<={rollout.max_tp}, or use a rollout backend with TP{_installed(registry, 'rollout', lambda c: c.max_tp is None or c.max_tp >= rtp)}",
        ))
    if rollout is not None:
        problems += _multi_node_tp_problems(config, rollout, registry)
        problems += moe_parallel_problems(config, rollout, _installed(registry, "rollout", lambda c: bool(c.moe_parallel)))
    if train is None:
        return
    wanted = [
        ("tp", "train.tensor_model_parallel_size", config.train.tensor_model_parallel_size),
        ("pp", "train.pipeline_model_parallel_size", config.train.pipeline_model_parallel_size),
        ("cp", "train.context_parallel_size", config.train.context_parallel_size),
        ("ep", "train.expert_model_parallel_size", config.train.expert_model_parallel_size),
        ("ep", "train.expert_tensor_parallel_size", config.train.expert_tensor_parallel_size or 1),
        ("sp", "train.sequence_parallel_size", config.train.sequence_parallel_size),
        ("ulysses", "actor.ulysses_sequence_parallel_size", config.actor.ulysses_sequence_parallel_size),
    ]
    if config.train.distributed_optimizer and "distributed_optimizer" not in train.parallelism:
        sharded = " (it shards the AdamW state over every rank already)" if train.state_sharding == "data" else ""
        problems.append(Problem(
            key="train.distributed_optimizer", what=f"train backend {train.name!r} has no distributed optimizer{sharded}",
            fix=f"set train.distributed_optimizer=false, or use a train backend with one"
                f"{_installed(registry, 'train', lambda c: 'distributed_optimizer' in c.parallelism)}",
        ))
    for cap, key, size in wanted:
        if size > 1 and cap not in train.parallelism:
            problems.append(Problem(
                key=key,
                what=f"train backend {train.name!r} does not support {cap.upper()} (it declares {', '.join(sorted(train.parallelism))})",
                fix=f"set {key}=1, or use a train backend with {cap.upper()}{_installed(registry, 'train', lambda c, cap=cap: cap in c.parallelism)}",
            ))


def _multi_node_tp_problems(config: RunConfig, rollout: RolloutCard, registry: Registry) -> list[Problem]:
    """A rollout TP group larger than one node's devices (the rollout pool's node, else the trainer's) spans nodes:
    the card must run such a group, on Ray."""
    r, t = config.rollout, config.trainer
    own = r.n_gpus_per_node is not None
    per_node, nodes = (r.n_gpus_per_node, r.nnodes) if own else (t.n_gpus_per_node, t.nnodes)
    rtp = r.tensor_model_parallel_size
    if rtp <= per_node or (nodes * per_node) % rtp:
        return []
    section = "rollout" if own else "trainer"
    span = (f"is {rtp}, more than one node's {per_node} devices ({section}.n_gpus_per_node={per_node}), so each TP group "
            f"spans {-(-rtp // per_node)} nodes")
    if not rollout.multi_node_tp:
        return [Problem(
            key="rollout.tensor_model_parallel_size", what=f"{span}, but rollout backend {rollout.name!r} runs a TP group within one node",
            fix=f"set rollout.tensor_model_parallel_size<={per_node}, or use a rollout backend whose TP group spans nodes"
                f"{_installed(registry, 'rollout', lambda c: c.multi_node_tp)}",
        )]
    if t.placement != "ray":
        return [Problem(
            key="rollout.tensor_model_parallel_size",
            what=f"{span}: a TP group across nodes runs only with trainer.placement=ray (local placement is one machine)",
            fix=f"set trainer.placement=ray (docs/ray.md), or rollout.tensor_model_parallel_size<={per_node}",
        )]
    return []


def _check_weights(
    registry: Registry, rollout: RolloutCard | None, train: TrainCard | None, problems: list[Problem]
) -> ConverterCard | None:
    if rollout is None or train is None:
        return None
    if train.export_formats & rollout.weight_formats:
        return None
    for conv in registry.cards["converter"].values():
        if conv.source in train.export_formats and conv.target in rollout.weight_formats:
            return conv  # type: ignore[return-value]
    problems.append(Problem(
        key="rollout.name",
        what=(
            f"train backend {train.name!r} exports weights as {', '.join(sorted(train.export_formats))} but rollout "
            f"{rollout.name!r} accepts {', '.join(sorted(rollout.weight_formats))}, and no installed converter bridges them"
        ),
        why="after every update the trainer's weights must be loaded into the rollout engine",
        fix="pick a rollout/train pair that share a weight format, or install a plugin that registers a converter",
    ))
    return None


def _check_architecture(config: RunConfig, cards: list, problems: list[Problem]) -> None:
    arch = config.model.architecture
    if not arch:
        return
    for card, key in cards:
        if card is not None and card.architectures is not None and arch not in card.architectures:
            problems.append(Problem(
                key="model.path", what=f"model architecture {arch} is not supported by {card.kind} backend {card.name!r} ({key})",
                fix=f"supported: {', '.join(sorted(card.architectures))}; pick another model or backend",
            ))


def _check_estimator(config: RunConfig, estimator: EstimatorCard | None, train: TrainCard | None, problems: list[Problem]) -> None:
    if estimator is None:
        return
    name = config.algorithm.adv_estimator
    if estimator.needs_critic:
        if config.critic.enable is False:
            problems.append(Problem(
                key="critic.enable", what=f"algorithm.adv_estimator={name} needs a critic (value model) but critic.enable=false",
                fix="set critic.enable=true, or pick an estimator without a critic (e.g. algorithm.adv_estimator=grpo with rollout.n>1)",
            ))
        elif train is not None and "critic" not in train.roles:
            problems.append(Problem(key="train.name", what=f"{name} needs a critic but train backend {train.name!r} has no critic role", fix="pick a train backend with a critic role"))
    if estimator.needs_groups and config.rollout.n < 2:
        problems.append(Problem(
            key="rollout.n",
            what=f"algorithm.adv_estimator={name} compares samples of the same prompt, so it needs rollout.n > 1, got {config.rollout.n}",
            why="with one sample per prompt every advantage is 0 and nothing is learned",
            fix="set rollout.n to 4 or more (e.g. rollout.n=8), or use algorithm.adv_estimator=gae with a critic",
        ))
    if config.ref.enable and train is not None and "ref" not in train.roles:
        problems.append(Problem(key="train.name", what=f"a KL term needs a reference model but train backend {train.name!r} has no ref role", fix="disable the KL term or pick another train backend"))


def _zero_advantage_rows(config: RunConfig, policy_loss: PolicyLossCard | None) -> RunConfig:
    """actor.skip_zero_advantage_rows as the run does it: off for a loss whose card does not declare
    ``skips_zero_advantage`` (its zero-advantage rows still carry a gradient; rl_core.algorithms.zero_advantage)."""
    if config.actor.skip_zero_advantage_rows and policy_loss is not None and not policy_loss.skips_zero_advantage:
        config = attrs.evolve(config, actor=attrs.evolve(config.actor, skip_zero_advantage_rows=False))
    return config


def _check_options(config: RunConfig, estimator: EstimatorCard | None, policy_loss: PolicyLossCard | None, problems: list[Problem]) -> None:
    """algorithm.options / actor.policy_loss_options against the options class the chosen card declares."""
    if estimator is not None:
        problems.extend(options_problems(estimator, config.algorithm.options, "algorithm.options"))
    if policy_loss is not None:
        problems.extend(options_problems(policy_loss, config.actor.policy_loss_options, "actor.policy_loss_options"))


def _check_reward(config: RunConfig, registry: Registry, problems: list[Problem]) -> RewardCard | None:
    custom = config.reward.custom
    if custom.path:
        if not Path(custom.path).is_file():
            problems.append(Problem(key="reward.custom.path", what=f"file {custom.path!r} does not exist", fix="point reward.custom.path at a .py file defining reward.custom.name"))
        return None
    if config.reward.name:
        return _lookup(registry, "reward", config.reward.name, "reward.name", problems)
    return None


def load_factory(card, key: str, problems: list[Problem]) -> Any:
    """Import a card's factory; a problem naming the card, its distribution and the path when it does not import."""
    if card is None:
        return None
    try:
        return card.load()
    except Exception as exc:  # noqa: BLE001 - any import-time failure of a plugin is the plugin's, reported by name
        problems.append(Problem(
            key=key,
            what=f"{card.kind} {card.name!r} from {card.provider or 'an unregistered card'} has a factory {card.factory!r} that does not load: {type(exc).__name__}: {exc}",
            fix=f"fix the card's factory path (report it to the authors of {card.provider.distribution if card.provider else 'the plugin'}), or set {key} to another {card.kind}",
        ))
        return None


def _reward_model_rollout(config: RunConfig, card: RewardModelCard | None, registry: Registry) -> RolloutCard | None:
    """The rollout card named by ``card.rollout_key`` (None without one, or when the name is unknown: the reward
    model's checks name that problem)."""
    if card is None or not card.rollout_key:
        return None
    value = get_key(config, card.rollout_key)
    try:
        return registry.get("rollout", value) if isinstance(value, str) else None
    except UnknownCardError:
        return None


def _run_card_checks(config: RunConfig, cards: list, problems: list[Problem]) -> None:
    for card, _key in cards:
        for check in getattr(card, "checks", ()) if card is not None else ():
            try:
                problems.extend(check(config) or [])
            except Exception as exc:  # noqa: BLE001 - a plugin's check must not crash the resolver
                problems.append(Problem(key=f"{card.kind}.{card.name}", what=f"the check {getattr(check, '__name__', check)} from {card.provider} raised {type(exc).__name__}: {exc}", fix="report this to the plugin's authors"))


def _log_prob_forward(config: RunConfig, registry: Registry, problems: list[Problem]) -> Callable[..., Any] | None:
    """rollout.exact: the ``exact`` LogProbForwardCard's loaded forward; a problem naming its distribution when missing."""
    if not config.rollout.exact:
        return None
    try:
        card = registry.get("log_prob_forward", "exact")
    except UnknownCardError as exc:
        problems.append(Problem(key="rollout.exact", what=f"is true but {exc}", fix="pip install rl-exact (docs/exact.md), or set rollout.exact=false"))
        return None
    return load_factory(card, "rollout.exact", problems)


def resolve(config: RunConfig, registry: Registry | None = None, *, rules: bool = True) -> tuple[Plan | None, list[Problem]]:
    """Match the config's named backends and sizes: a Plan, or None plus problems. ``rules=False``: the schema's rules
    already ran at load time. Without ``registry``: the installed plugins' (a plan built in code: tests, notebooks)."""
    registry = registry if registry is not None else get_registry()
    problems: list[Problem] = []
    builtin = builtin_card(config, registry, problems)
    if not config.model.path:
        problems.append(Problem(key="model.path", what="is required", fix="set model.path to a local HF folder or a hub name; `rlcore model smollm2 --out models/smollm2` makes an offline one"))
    elif config.model.architecture is None:
        arch = builtin.architecture if builtin is not None else model_architecture(config.model.path)
        if arch is None and _looks_local(config.model.path) and not Path(os.path.expanduser(config.model.path)).exists():
            problems.append(Problem(key="model.path", what=f"{config.model.path!r} does not exist", fix="point model.path at a folder with config.json, or run `rlcore model smollm2 --out DIR` for an offline model"))
        config = attrs.evolve(config, model=attrs.evolve(config.model, architecture=arch))

    if config.train.name is None and (name := default_train_name(registry, problems)) is not None:
        config = attrs.evolve(config, train=attrs.evolve(config.train, name=name))
    config, run_kind = _run_kind(config, registry, problems)
    rollout = _lookup(registry, "rollout", config.rollout.name, "rollout.name", problems)
    train = _lookup(registry, "train", config.train.name, "train.name", problems) if config.train.name is not None else None
    estimator = _lookup(registry, "estimator", config.algorithm.adv_estimator, "algorithm.adv_estimator", problems)
    policy_loss = _lookup(registry, "policy_loss", config.actor.policy_loss, "actor.policy_loss", problems)
    reward = _check_reward(config, registry, problems)
    rm_on = section_enabled(config, "reward_model")  # rl-reward-model's section
    reward_model = _lookup(registry, "reward_model", config.reward_model.name, "reward_model.name", problems) if rm_on else None
    placement = _lookup(registry, "placement", config.trainer.placement, "trainer.placement", problems)

    config, sizes, size_problems = normalize(config, needs_critic=bool(estimator and estimator.needs_critic), rules=rules)
    problems.extend(size_problems)
    features, feature_problems = resolve_features(config, registry)
    problems.extend(feature_problems)
    correction = features.get("rollout_correction")  # rl-rollout-correction: rollout.precision=fp8's defaults, its log-prob users
    config = correction.defaults(config) if correction is not None else config
    users = correction.log_prob_users(config) if correction is not None else []
    # rollout.calculate_log_probs=null: on where the run needs them, else a sample of steps (rl_core.rollout.log_prob_decision)
    config = log_prob_decision.decide(config, estimator_reads=ACTOR in getattr(estimator, "log_probs", ()), users=users)
    cards = [(rollout, "rollout.name"), (train, "train.name")]
    _check_devices(config, rollout, train, problems)
    _check_parallel(config, rollout, train, problems, registry)
    converter = _check_weights(registry, rollout, train, problems)
    _check_architecture(config, cards, problems)
    if run_kind is None or run_kind.rollout:  # a run kind that samples nothing computes no advantages
        _check_estimator(config, estimator, train, problems)
    _check_options(config, estimator, policy_loss, problems)
    config = _zero_advantage_rows(config, policy_loss)
    if train is not None:
        problems.extend(options_problems(train, config.train.options, "train.options"))
    problems.extend(log_prob_decision.forced_off_problems(config, users))
    for card, key in cards:
        if card is not None and (p := engine_version_problem(card, key)) is not None:
            problems.append(p)
    for card, key in [*cards, (placement, "trainer.placement")]:
        if card is not None and (p := factory_path_problem(card, key)) is not None:
            problems.append(p)
    estimator_fn = load_factory(estimator, "algorithm.adv_estimator", problems)
    log_prob_roles = resolve_log_prob_roles(registry, estimator, problems)
    policy_loss_fn = load_factory(policy_loss, "actor.policy_loss", problems)
    reward_fn = load_factory(reward, "reward.name", problems)
    reward_model_fn = load_factory(reward_model, "reward_model.name", problems)
    reward_model_rollout = _reward_model_rollout(config, reward_model, registry)
    run_kind_fn = load_factory(run_kind, "trainer.kind", problems)
    rollout_pool, rollout_pool_fn, rollout_pool_worker_fn = _rollout_pool(config, registry, problems)
    log_prob_forward = _log_prob_forward(config, registry, problems)
    trackers = loaded(tracker_cards(config, registry, problems), load_factory, problems)
    builtin_model = load_factory(builtin, "model.path", problems)
    from rl_core.rollout.multi_turn import agent_runtime

    agent, agent_problems = agent_runtime(config, registry)
    problems.extend(agent_problems)
    observers, observer_problems = observer_plan(config, registry)
    problems.extend(observer_problems)
    reward_shapers, batch_sampler, hook_problems = step_hooks(config, registry)
    problems.extend(hook_problems)
    _run_card_checks(config, [*cards, (reward_model, "reward_model.name")], problems)

    # reward.weights and a rule reward the model's score replaces: rl-reward-model's feature (its folder: the plugin's probe)
    if "reward_model" in features:
        problems.extend(features["reward_model"].problems(config))
    problems = first_per_key(problems)

    if errors(problems) or sizes is None or None in (rollout, train, estimator, policy_loss, placement) or (rm_on and reward_model_fn is None) \
            or (run_kind_name(config) != RL and run_kind_fn is None):
        return None, problems
    stack = Plan(
        config=config, sizes=sizes, rollout=rollout, train=train, estimator=estimator, policy_loss=policy_loss, reward=reward,
        converter=converter, warnings=tuple(problems), reward_model=reward_model, estimator_fn=estimator_fn,
        policy_loss_fn=policy_loss_fn, reward_fn=reward_fn, reward_model_fn=reward_model_fn, reward_model_rollout=reward_model_rollout,
        agent=agent, observers=observers, run_kind=run_kind, run_kind_fn=run_kind_fn, placement=placement, rollout_pool=rollout_pool,
        rollout_pool_fn=rollout_pool_fn, rollout_pool_worker_fn=rollout_pool_worker_fn, log_prob_roles=log_prob_roles,
        features=features, reward_shapers=reward_shapers, batch_sampler=batch_sampler, log_prob_forward=log_prob_forward,
        trackers=trackers, builtin_model=builtin_model, reward_cards=tuple(registry.cards["reward"].values()),
        plugin_errors=tuple(sorted({e.distribution for e in registry.errors})),
    )
    return stack, problems
