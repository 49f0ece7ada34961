"""Cards: what a plugin registers.

A card is a small frozen record the resolver can read without importing any
heavy engine. It carries a name, a lazy factory (``"module:attr"`` dotted path
or a callable; heavy imports happen inside it) and the capabilities the
resolver checks a config against.

Every card kind shares :class:`CardBase`; the plugin manager fills in
``provider`` (distribution name and version) when the card is registered.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar

import attrs

from rl_core.util.objects import load_object  # noqa: F401 - re-exported: cards.load_object is public
from rl_core.card_options import describe, options_class

DEVICES = frozenset({"cpu", "cuda"})
PARALLELISM = frozenset({"dp", "fsdp", "tp", "pp", "sp", "ulysses"})  # ulysses: Ulysses sequence parallelism (#33)
ROLES = frozenset({"actor", "critic", "ref"})


def _frozenset(value: Any) -> frozenset:
    if isinstance(value, str):
        return frozenset({value})
    return frozenset(value)


def _opt_frozenset(value: Any) -> frozenset | None:
    return None if value is None else _frozenset(value)


@attrs.frozen(kw_only=True)
class Provider:
    """Who registered a card: the distribution (or 'builtin'/'local') and its version."""

    distribution: str
    version: str = ""
    entry_point: str = ""

    def __str__(self) -> str:
        return f"{self.distribution} {self.version}".strip()


@attrs.frozen(kw_only=True)
class CardBase:
    kind: ClassVar[str] = "card"

    name: str = attrs.field()
    factory: str | Callable = attrs.field()
    description: str = ""
    provider: Provider | None = attrs.field(default=None, eq=False)

    @name.validator
    def _check_name(self, _attr, value):
        if not isinstance(value, str) or not value or not value.replace("_", "").replace("-", "").replace(".", "").isalnum():
            raise ValueError(f"card name {value!r} must be a non-empty identifier (letters, digits, '_', '-', '.')")

    def load(self) -> Any:
        """Import and return the factory object (heavy imports happen here)."""
        return load_object(self.factory)

    def capabilities(self) -> dict[str, Any]:
        """The declared capabilities as plain JSON-able data (for `rlcore plugins`)."""
        skip = {"name", "factory", "description", "provider", "checks", "memory"}  # memory: a function (RewardModelCard)
        out = {}
        for field in attrs.fields(type(self)):
            if field.name in skip:
                continue
            value = getattr(self, field.name)
            if isinstance(value, frozenset):
                value = sorted(value)
            if field.name == "options" and value is not None:  # typed options: "name: type = default, ..."

                try:
                    value = describe(options_class(self))
                except Exception as exc:  # noqa: BLE001 - shown, not raised: rlcore check reports it
                    value = f"(do not load: {type(exc).__name__}: {exc})"
            out[field.name] = value
        return out


@attrs.frozen(kw_only=True)
class RolloutCard(CardBase):
    """A rollout (generation) engine.

    ``factory`` is called as ``factory(config, context)`` inside a worker and
    returns an object following :class:`rl_core.backends.RolloutEngine`.
    ``checks`` are light callables ``check(run_config) -> list[Problem]`` for
    engine-specific constraints (e.g. head sizes the CPU kernels support);
    they must not import the engine.
    """

    kind: ClassVar[str] = "rollout"

    devices: frozenset[str] = attrs.field(default=DEVICES, converter=_frozenset)
    max_tp: int | None = 1
    weight_formats: frozenset[str] = attrs.field(default=frozenset({"hf"}), converter=_frozenset)
    logprobs: bool = True
    # rollout.exact: its log-probs from rl_core.rollout.exact.sequence_log_probs, the trainer's per-sequence forward (issue 51)
    exact: bool = False
    architectures: frozenset[str] | None = attrs.field(default=None, converter=_opt_frozenset)
    engine: str | None = None
    engine_versions: str | None = None
    # how to install the engine, shown when it is missing (default: pip install the engine at its tested version)
    engine_install: str | None = None
    # the engine reserves rollout.gpu_memory_utilization of a GPU (the memory estimate counts that, not weights + KV)
    memory_fraction: bool = False
    # GiB such an engine keeps on the device while asleep (rollout.enable_sleep): what its sleep does not release
    # (e.g. CUDA graph memory, memory outside torch); counted in the memory estimate's training phases
    asleep_gib: float = 0.0
    # the engine loads LoRA adapters through its own LoRA API (``load_adapter``): rollout.lora_sync=adapter
    lora_adapters: bool = False
    # MoE parallelism the engine runs: "ep" (rollout.expert_parallel_size), "dp_attention" (rollout.data_parallel_size)
    moe_parallel: frozenset[str] = attrs.field(default=frozenset(), converter=_frozenset)
    # the engine returns the experts each token was routed to (rollout.return_routed_experts; rl-routing-replay)
    routed_experts: bool = False
    # the engine generates from prompts that carry images (the batch's multi_modal_inputs; rl-multimodal)
    images: bool = False
    # one engine's TP group may span nodes (TP > a node's devices), its ranks on several nodes of a Ray cluster
    # (trainer.placement=ray); False: a TP group stays within one node
    multi_node_tp: bool = False
    checks: tuple[Callable, ...] = attrs.field(default=(), converter=tuple)
    # the engine computes in FP8 (weights and KV cache) with rollout.precision=fp8 (rl_core.rollout.precision)
    fp8: bool = False


@attrs.frozen(kw_only=True)
class TrainCard(CardBase):
    """A training backend providing actor / critic / ref roles.

    ``factory`` is called as ``factory(role, config, context)`` inside a worker
    and returns an object following :class:`rl_core.backends.TrainEngine`.
    """

    kind: ClassVar[str] = "train"

    devices: frozenset[str] = attrs.field(default=DEVICES, converter=_frozenset)
    parallelism: frozenset[str] = attrs.field(default=frozenset({"dp"}), converter=_frozenset)
    roles: frozenset[str] = attrs.field(default=ROLES, converter=_frozenset)
    export_formats: frozenset[str] = attrs.field(default=frozenset({"hf"}), converter=_frozenset)
    architectures: frozenset[str] | None = attrs.field(default=None, converter=_opt_frozenset)
    engine: str | None = None
    engine_versions: str | None = None
    engine_install: str | None = None  # as for RolloutCard
    # The actor's update accepts a batch without ``old_log_probs`` when on-policy (one
    # mini-batch, one epoch) and uses its own detached log-probs: the loop then skips a forward pass.
    on_policy_without_old_log_probs: bool = False
    # replays recorded MoE routing in the actor's forwards (actor.router_replay R2 / R3; rl-routing-replay)
    router_replay: bool = False
    # the actor / ref forwards read the prompts' images (the batch's multi_modal_inputs; rl-multimodal)
    images: bool = False
    # how the train states (parameters, gradients, optimizer) are split, for the memory estimate:
    # "data" over every rank, "model" over the tensor x pipeline ranks, "none" a full copy per rank
    state_sharding: str = attrs.field(default="none", validator=attrs.validators.in_(("none", "data", "model")))
    # the train backend a config without train.name gets (one installed card at most should say so)
    default: bool = False
    # trains LoRA adapters (model.lora_rank > 0) / offloads to host memory (actor.fsdp_config.*_offload): issue #32
    lora: bool = False
    offload: bool = False
    # rollout.exact: the actor / ref log-probs from rl_core.rollout.exact.sequence_log_probs (issue 51)
    exact: bool = False
    # what train.options may hold (as EstimatorCard.options): an attrs class deriving from rl_core.card_options.Options,
    # or its "module:Class" path; checked by `rlcore check` (None: unchecked, with a warning when train.options is set)
    options: Any = None
    checks: tuple[Callable, ...] = attrs.field(default=(), converter=tuple)
    # how each feature runs on GPUs: {feature: "native" (the engine's own path, e.g. megatron-core's) | "reference" (a
    # plain re-implementation kept for conformance: correct, not fast) | "emulated" (accepted, does not do what it is for)};
    # the backend's checks warn when a GPU run would use a non-native path (empty: not stated)
    features: dict[str, str] = attrs.field(factory=dict, converter=dict, hash=False, validator=attrs.validators.deep_mapping(
        key_validator=attrs.validators.instance_of(str), value_validator=attrs.validators.in_(("native", "reference", "emulated"))))


@attrs.frozen(kw_only=True)
class EstimatorCard(CardBase):
    """An advantage estimator.

    ``factory`` resolves to a function with the common estimator signature
    (see :mod:`rl_core.algorithms.advantages`).
    """

    kind: ClassVar[str] = "estimator"

    needs_critic: bool = False
    needs_groups: bool = False
    needs_greedy_baseline: bool = False
    # what algorithm.options may hold: an attrs class deriving from rl_core.card_options.Options, or its
    # "module:Class" path; checked by `rlcore check` (None: the card declares none, its options go unchecked)
    options: Any = None
    # per-token log-probs of the sampled responses the estimator reads, by role name: "actor" (the policy that
    # sampled: rollout log-probs or the old log-prob pass) or a LogProbRoleCard's name (e.g. "teacher"); the loop
    # computes them and passes ``log_probs={name: Tensor[B, T]}`` (only to an estimator that declares some)
    log_probs: tuple[str, ...] = attrs.field(default=(), converter=tuple)


@attrs.frozen(kw_only=True)
class PolicyLossCard(CardBase):
    """A policy-gradient loss (see :mod:`rl_core.algorithms.policy_loss`)."""

    kind: ClassVar[str] = "policy_loss"

    options: Any = None  # what actor.policy_loss_options may hold (as EstimatorCard.options)


@attrs.frozen(kw_only=True)
class RewardCard(CardBase):
    """A reward function.

    ``factory`` resolves to ``score(*, data_source, solution_str, ground_truth,
    extra_info, **kwargs) -> float | dict`` (per sample), or, with
    ``batched=True``, to a function taking lists of those and returning a list.
    ``data_sources`` lists the ``data_source`` values this reward scores by
    default when the config does not name a reward.
    """

    kind: ClassVar[str] = "reward"

    fields: frozenset[str] = attrs.field(default=frozenset({"ground_truth"}), converter=_frozenset)
    batched: bool = False
    data_sources: frozenset[str] = attrs.field(default=frozenset(), converter=_frozenset)


@attrs.frozen(kw_only=True)
class RewardModelCard(CardBase):
    """A model-based reward (a learned reward model, an LLM judge): ``reward_model.name``.

    ``factory`` is loaded once when the stack resolves (``Stack.reward_model_fn``) and called as
    ``factory(config, context)`` inside the worker that holds the reward model (the actor's, or a pool
    of its own, :class:`rl_core.rewards.model_role.RewardModelRole`); it returns an object following
    :class:`rl_core.rewards.model_role.ModelScorer`: it scores
    :class:`~rl_core.rewards.model_role.ScoreRequest` s (texts, never the
    policy's token ids). ``checks`` are light ``check(run_config) -> list[Problem]``
    callables (``rlcore check``) that must not load the model.

    ``rollout_key``: a dotted config key naming a rollout card the reward model generates with (a
    generative judge); the resolver puts that card in ``Stack.reward_model_rollout`` and the factory is
    then called as ``factory(config, context, rollout=card)``. ``memory``: the memory estimate's
    reward-model terms, ``memory(config, shape, dtype_bytes) -> (parameters, extra bytes)``: the
    parameters it holds on the device and the bytes one micro-batch needs beyond a forward's temporaries
    (e.g. a KV cache); None: the whole model of ``reward_model.model.path``, a forward only.
    """

    kind: ClassVar[str] = "reward_model"

    devices: frozenset[str] = attrs.field(default=DEVICES, converter=_frozenset)
    checks: tuple[Callable, ...] = attrs.field(default=(), converter=tuple)
    rollout_key: str | None = None
    memory: Callable | None = attrs.field(default=None, eq=False)


@attrs.frozen(kw_only=True)
class ConverterCard(CardBase):
    """Bridges a train backend's exported weight format to one a rollout accepts.

    ``factory`` resolves to ``convert(named_tensors_iter, model_config) -> iter``.
    """

    kind: ClassVar[str] = "converter"

    source: str
    target: str


@attrs.frozen(kw_only=True)
class ToolCard(CardBase):
    """A tool an agent loop may call (tools of the ``rl-agent`` plugin, ``plugins/agent``).

    ``factory`` resolves to a plain typed function with a docstring (its
    schema then comes from ``transformers.utils.get_json_schema``), or to a
    zero-argument callable returning a ``Tool`` of the agent plugin.
    ``schema`` is an OpenAI-style function schema
    (``{"type": "function", "function": {"name", "description", "parameters"}}``);
    given here, it is shown by ``rlcore plugins`` and checked without importing the tool.
    """

    kind: ClassVar[str] = "tool"

    schema: dict | None = attrs.field(default=None, eq=False)


@attrs.frozen(kw_only=True)
class AgentLoopCard(CardBase):
    """An agent loop (the ``rl-agent`` plugin's handle and trajectory): ``async fn(handle, sample) -> Trajectory``.

    ``runner``: the factory of the runtime that runs loops over a rollout engine, ``runner(multi_turn_config,
    cards) -> rl_core.rollout.multi_turn.AgentRuntime`` (dotted path or callable; loaded once when the stack is
    resolved). A loop built on another plugin's handle may leave it None: the one runner installed runs it.
    """

    kind: ClassVar[str] = "agent_loop"

    runner: str | Callable | None = attrs.field(default=None, eq=False)


@attrs.frozen(kw_only=True)
class ToolParserCard(CardBase):
    """A tool-call format (parsers of the ``rl-agent`` plugin): ``factory() -> ToolCallParser``."""

    kind: ClassVar[str] = "tool_parser"


#: the stages of the plan's checks, in the order a user fixes them (rl_core.plan.checks runs them in this order)
CHECK_STAGES = ("keys", "values", "rules", "names", "files", "device")


@attrs.frozen(kw_only=True)
class CheckCard(CardBase):
    """A check of the run plan, registered beside the feature it checks (``rl_core_register_checks``).

    ``factory`` is ``"module:function"``, called once per plan (`rlcore check`, `rlcore train`) as
    ``check(config, registry) -> Iterable[Problem]`` on the normalised config, after the names resolved. ``stage``
    (one of :data:`CHECK_STAGES`) places its problems in the fixing order; ``order`` orders checks within a stage
    (lower first). ``device`` checks read this machine's GPUs and cores: `rlcore check --skip-device-check` skips them.
    A check that raises becomes a problem naming it; the others still run.
    """

    kind: ClassVar[str] = "check"

    stage: str = attrs.field(validator=attrs.validators.in_(CHECK_STAGES))
    order: int = 100


@attrs.frozen(kw_only=True)
class LogProbRoleCard(CardBase):
    """A model role that scores the policy's sampled tokens: per-token log-probs of a second model (a teacher).

    ``factory(config, tokenizer) -> role`` is called once by the trainer when the run's estimator names the card in
    its ``log_probs``; ``role.log_probs(batch, temperature) -> Tensor[B, T]`` (float32, CPU) is called every step
    after the reference model's pass, on the same batch (``input_ids``, ``attention_mask``, ``position_ids``,
    ``responses``), and the result goes into the batch as ``<name>_log_prob`` and to the estimator. The role's model
    is not in the plan's memory estimate yet.
    """

    kind: ClassVar[str] = "log_prob_role"


CARD_TYPES: dict[str, type[CardBase]] = {
    cls.kind: cls
    for cls in (RolloutCard, TrainCard, EstimatorCard, PolicyLossCard, RewardCard, RewardModelCard, ConverterCard, ToolCard, AgentLoopCard,
                ToolParserCard, CheckCard, LogProbRoleCard)
}


def _cli_options(value: Any) -> tuple:
    return tuple((str(flag), dict(kwargs)) for flag, kwargs in value)


@attrs.frozen(kw_only=True)
class DialectCard(CardBase):
    """Another framework's way of writing a launch, read into rl-core's config (:mod:`rl_core.config.dialect`).

    ``factory`` resolves to ``translate(launch) -> Translated`` (a whole launch in the dialect's syntax, the
    dialect's defaults included); ``detect`` to ``detect(launch) -> bool`` (is this launch in that syntax?);
    ``keys`` (optional) to ``keys(launch) -> Translated`` (a native launch's keys that are not rl-core's, no
    defaults). All three are ``"module:function"`` paths, imported when a launch is read. ``cli_options`` are the
    command-line options the dialect reads, ``(flag, argparse keyword arguments)``: ``rlcore check`` / ``train``
    take them, and the launch carries them by dest (``--config-name`` -> ``config_name``). ``detects`` says in
    words what makes a launch the dialect's (``rlcore plugins``).
    """

    kind: ClassVar[str] = "dialect"

    detect: str | Callable
    keys: str | Callable | None = None
    cli_options: tuple[tuple[str, dict], ...] = attrs.field(default=(), converter=_cli_options, eq=False)
    detects: str = ""


@attrs.frozen(kw_only=True)
class CommandCard(CardBase):
    """An ``rlcore`` sub-command of a plugin: ``factory`` resolves to ``add_parser(subparsers)``, which adds the
    command's parser and sets its ``func(args) -> int`` (as core's own commands, rl_core.cli.main)."""

    kind: ClassVar[str] = "command"

    help: str = ""


CARD_TYPES.update({cls.kind: cls for cls in (DialectCard, CommandCard)})


@attrs.frozen(kw_only=True)
class ObserverCard(CardBase):
    """A step observer (``rl_core_register_observers``): the controller hands it each step's rollouts and each
    validation's (:mod:`rl_core.observers`). ``factory`` resolves to ``make(config, options, output_dir) -> observer |
    None`` (None: off for this run), called once when the trainer starts; ``options``: what
    ``trainer.observers.<name>`` may hold (as EstimatorCard.options), checked by ``rlcore check``. Every installed
    observer is built for every run; its options say whether it does anything."""

    kind: ClassVar[str] = "observer"

    options: Any = None


CARD_TYPES.update({ObserverCard.kind: ObserverCard})


@attrs.frozen(kw_only=True)
class RunKindCard(CardBase):
    """A kind of run of the same loop and Plan (``trainer.kind``; the built-in ``rl`` is the loop itself).

    ``factory`` resolves to ``make(handle) -> RunKind`` (:mod:`rl_core.run_kind`): the run's data loaders, its step
    and its validation, over what the loop hands it (the actor's update and log-probs, the tokenizer, the config).
    ``rollout``: whether its workers hold a rollout engine; ``policy_loss``: the policy-loss card its actor updates
    with (None: the config's ``actor.policy_loss``); ``options``: what ``trainer.kind_options`` may hold (an attrs
    class deriving from :class:`rl_core.card_options.Options`, checked as ``algorithm.options`` is).
    """

    kind: ClassVar[str] = "run_kind"

    rollout: bool = False
    policy_loss: str | None = None
    options: Any = None


CARD_TYPES[RunKindCard.kind] = RunKindCard


@attrs.frozen(kw_only=True)
class FeatureCard(CardBase):
    """A cross-cutting feature that lives in a package of its own (``rl_core_register_features``): prompt images
    (rl-multimodal), MoE routing replay (rl-routing-replay), ...

    ``factory`` resolves to the feature's object (module-level, so the Plan pickles to worker processes by reference),
    loaded once by the resolver into ``Plan.features[name]`` and handed to the workers' engines as
    ``WorkerContext.features``; core calls the methods its call site documents and never looks the name up again. The
    feature's checks are CheckCards of the same package. A config that needs a feature no installed card provides is an
    `rlcore check` problem naming the distribution (``rl_core.plugins.KNOWN_PROVIDERS["feature"]``)."""

    kind: ClassVar[str] = "feature"


CARD_TYPES.update({FeatureCard.kind: FeatureCard})
