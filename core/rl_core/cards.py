"""Cards: what a plugin registers (docs/plugins.md has each card's contract).

A card is a small frozen record the resolver reads without importing any heavy engine: a name, a lazy factory
(``"module:attr"`` or a callable; heavy imports happen inside it) and the capabilities a config is checked against.
The plugin manager fills in ``provider`` when the card is registered."""

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


def _names(default: Any = ()) -> Any:
    """A frozenset field; a single string becomes a set of one."""
    return attrs.field(default=frozenset(default), converter=_frozenset)


def _checks() -> Any:
    """A tuple of light ``check(...) -> list[Problem]`` callables."""
    return attrs.field(default=(), converter=tuple)


def _code(default: Any = None) -> Any:
    """A callable or ``"module:attr"`` path; not compared."""
    return attrs.field(default=default, eq=False)


#: card kind -> its class, in definition order (what ``rlcore plugins`` lists)
CARD_TYPES: dict[str, type["CardBase"]] = {}


def card(kind: str) -> Callable[[type], type]:
    """Class decorator: a frozen keyword-only attrs card of ``kind``, registered in :data:`CARD_TYPES`."""

    def register(cls: type) -> type:
        cls.kind = kind
        cls = attrs.frozen(kw_only=True)(cls)
        CARD_TYPES[kind] = cls
        return cls

    return register


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
    provider: Provider | None = _code()

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


@card("rollout")
class RolloutCard(CardBase):
    """A rollout engine: ``factory(config, context) -> rl_core.backends.RolloutEngine``, called in a worker.

    ``checks``: light ``check(run_config) -> list[Problem]`` callables that must not import the engine."""

    devices: frozenset[str] = _names(DEVICES)
    max_tp: int | None = 1
    weight_formats: frozenset[str] = _names({"hf"})
    logprobs: bool = True
    exact: bool = False  # rollout.exact: its log-probs from the Plan's LogProbForwardCard, as the trainer's
    architectures: frozenset[str] | None = attrs.field(default=None, converter=_opt_frozenset)
    engine: str | None = None
    engine_versions: str | None = None
    engine_install: str | None = None  # shown when the engine is missing (default: pip install it at its tested version)
    memory_fraction: bool = False  # the engine reserves rollout.gpu_memory_utilization of a GPU (estimated as such)
    asleep_gib: float = 0.0  # GiB the engine keeps on the device while asleep (CUDA graphs, memory outside torch)
    lora_adapters: bool = False  # the engine loads LoRA adapters through its own LoRA API (``load_adapter``): rollout.lora_sync=adapter
    moe_parallel: frozenset[str] = _names()  # "ep" (rollout.expert_parallel_size), "dp_attention" (rollout.data_parallel_size)
    routed_experts: bool = False  # returns the experts each token was routed to (rollout.return_routed_experts)
    images: bool = False  # the engine generates from prompts that carry images (the batch's multi_modal_inputs; rl-multimodal)
    multi_node_tp: bool = False  # one engine's TP group may span nodes of a Ray cluster (trainer.placement=ray)
    checks: tuple[Callable, ...] = _checks()
    fp8: bool = False  # computes in FP8 (weights and KV cache) with rollout.precision=fp8


@card("train")
class TrainCard(CardBase):
    """A training backend (actor / critic / ref): ``factory(role, config, context) -> rl_core.backends.TrainEngine``."""

    devices: frozenset[str] = _names(DEVICES)
    parallelism: frozenset[str] = _names({"dp"})
    roles: frozenset[str] = _names(ROLES)
    export_formats: frozenset[str] = _names({"hf"})
    architectures: frozenset[str] | None = attrs.field(default=None, converter=_opt_frozenset)
    engine: str | None = None
    engine_versions: str | None = None
    engine_install: str | None = None  # as for RolloutCard
    on_policy_without_old_log_probs: bool = False  # on-policy the update uses its own detached log-probs
    router_replay: bool = False  # replays recorded MoE routing in the actor's forwards (actor.router_replay R2 / R3; rl-routing-replay)
    images: bool = False  # the actor / ref forwards read the prompts' images (the batch's multi_modal_inputs; rl-multimodal)
    # how train states are split (memory estimate): "data" over every rank, "model" over TP x PP, "none" not
    state_sharding: str = attrs.field(default="none", validator=attrs.validators.in_(("none", "data", "model")))
    default: bool = False  # the backend a config without train.name gets (one installed card at most)
    lora: bool = False  # trains LoRA adapters (model.lora_rank > 0)
    offload: bool = False  # offloads to host memory (actor.fsdp_config.*_offload)
    exact: bool = False  # rollout.exact: the actor / ref log-probs from the Plan's LogProbForwardCard
    options: Any = None  # train.options' class, as EstimatorCard.options (None: unchecked, a warning when set)
    checks: tuple[Callable, ...] = _checks()
    # how each feature runs on GPUs: {feature: "native" | "reference" | "emulated"} (docs/plugins.md)
    features: dict[str, str] = attrs.field(factory=dict, converter=dict, hash=False, validator=attrs.validators.deep_mapping(
        key_validator=attrs.validators.instance_of(str), value_validator=attrs.validators.in_(("native", "reference", "emulated"))))


@card("estimator")
class EstimatorCard(CardBase):
    """An advantage estimator: ``factory`` resolves to a function of the signature in :mod:`rl_core.algorithms.advantages`."""

    needs_critic: bool = False
    needs_groups: bool = False
    needs_greedy_baseline: bool = False
    # what algorithm.options may hold: an rl_core.card_options.Options class or its "module:Class" path (None: unchecked)
    options: Any = None
    # the per-token log-probs it reads, by role: "actor" (the sampling policy's) or a LogProbRoleCard's name;
    # the loop passes ``log_probs={name: Tensor[B, T]}`` only to an estimator that declares some
    log_probs: tuple[str, ...] = _checks()


@card("policy_loss")
class PolicyLossCard(CardBase):
    """A policy-gradient loss (see :mod:`rl_core.algorithms.policy_loss`)."""

    options: Any = None  # what actor.policy_loss_options may hold (as EstimatorCard.options)
    # loss and gradient are exactly 0 where the advantage is (A * f(ratio)): all-zero-advantage rows may be left out
    # of the update (actor.skip_zero_advantage_rows, rl_core.algorithms.zero_advantage)
    skips_zero_advantage: bool = False


@card("reward")
class RewardCard(CardBase):
    """A reward function: ``score(*, data_source, solution_str, ground_truth, extra_info, **kw) -> float | dict``
    (``batched=True``: lists in, a list out). ``data_sources``: what it scores when the config names no reward.
    ``trial``: ``rlcore check`` calls it once on the data's first row with an empty response; False for a scorer of
    what only the rollout makes (an agent program's reward), which a data row does not carry."""

    fields: frozenset[str] = _names({"ground_truth"})
    batched: bool = False
    data_sources: frozenset[str] = _names()
    trial: bool = True


@card("reward_model")
class RewardModelCard(CardBase):
    """A model-based reward (``reward_model.name``): ``factory(config, context) -> rl_reward_model.role.ModelScorer``.

    ``rollout_key``: a dotted config key naming a rollout card to generate with (a generative judge; the factory then gets
    ``rollout=card``). ``memory(config, shape, dtype_bytes) -> (parameters, extra bytes)`` for the memory estimate
    (None: the whole ``reward_model.model.path``, a forward only). ``checks`` must not load the model."""

    devices: frozenset[str] = _names(DEVICES)
    checks: tuple[Callable, ...] = _checks()
    rollout_key: str | None = None
    memory: Callable | None = _code()


@card("converter")
class ConverterCard(CardBase):
    """Bridges a train backend's export format to a rollout's: ``convert(named_tensors_iter, model_config) -> iter``."""

    source: str
    target: str


@card("tool")
class ToolCard(CardBase):
    """A tool an agent loop may call (rl-agent): a typed function with a docstring, or a callable returning a ``Tool``.
    ``schema``: its OpenAI-style function schema, shown by ``rlcore plugins`` and checked without importing the tool."""

    schema: dict | None = _code()


@card("agent_loop")
class AgentLoopCard(CardBase):
    """An agent loop (rl-agent): ``async fn(handle, sample) -> Trajectory``. ``runner(multi_turn_config, cards) ->
    rl_core.rollout.multi_turn.AgentRuntime``; None: the one installed runner runs it."""

    runner: str | Callable | None = _code()


@card("tool_parser")
class ToolParserCard(CardBase):
    """A tool-call format (parsers of the ``rl-agent`` plugin): ``factory() -> ToolCallParser``."""


#: the stages of the plan's checks, in the order a user fixes them (rl_core.plan.checks runs them in this order)
CHECK_STAGES = ("keys", "values", "rules", "names", "files", "device")


@card("check")
class CheckCard(CardBase):
    """A check of the run plan: ``check(config, registry) -> Iterable[Problem]``, once per plan, after the names resolved.

    ``stage`` (:data:`CHECK_STAGES`) places its problems in the fixing order, ``order`` within a stage (lower first);
    ``device`` checks are skipped by ``--skip-device-check``. A check that raises becomes a problem naming it."""

    stage: str = attrs.field(validator=attrs.validators.in_(CHECK_STAGES))
    order: int = 100


@card("log_prob_role")
class LogProbRoleCard(CardBase):
    """A second model scoring the sampled tokens (a teacher): ``factory(config, tokenizer) -> role`` (docs/plugins.md)."""


def _cli_options(value: Any) -> tuple:
    return tuple((str(flag), dict(kwargs)) for flag, kwargs in value)


@card("dialect")
class DialectCard(CardBase):
    """Another framework's launch syntax (:mod:`rl_core.config.dialect`): ``translate(launch) -> Translated``,
    ``detect(launch) -> bool``, optional ``keys(launch) -> Translated``. ``cli_options``: ``(flag, argparse kwargs)`` pairs
    the launch carries by dest; ``detects``: in words, what makes a launch the dialect's."""

    detect: str | Callable
    keys: str | Callable | None = None
    cli_options: tuple[tuple[str, dict], ...] = attrs.field(default=(), converter=_cli_options, eq=False)
    detects: str = ""


@card("command")
class CommandCard(CardBase):
    """An ``rlcore`` sub-command: ``add_parser(subparsers)`` adds its parser and sets ``func(args) -> int``."""

    help: str = ""


@card("observer")
class ObserverCard(CardBase):
    """A step observer (:mod:`rl_core.observers`): ``make(config, options, output_dir) -> observer | None`` (None: off).
    ``options``: what ``trainer.observers.<name>`` may hold. Every installed observer is built for every run."""

    options: Any = None


@card("run_kind")
class RunKindCard(CardBase):
    """A run kind (``trainer.kind``): ``make(handle) -> RunKind`` (:mod:`rl_core.run_kind`). ``rollout``: its workers hold
    a rollout engine; ``policy_loss``: the loss its actor uses (None: ``actor.policy_loss``); ``options``: ``trainer.kind_options``."""

    rollout: bool = False
    policy_loss: str | None = None
    options: Any = None


@card("config_section")
class ConfigSectionCard(CardBase):
    """A config section (:mod:`rl_core.config.sections`): ``name`` is its key (dotted under a core section:
    ``rollout.multi_turn``); ``factory`` resolves to its attrs class, every field with a default."""


@card("placement")
class PlacementCard(CardBase):
    """Where the workers run (``trainer.placement``): ``make(plan, *, roles=None, pool="main") -> Placement``
    (:mod:`rl_core.placement.contract`). ``doctor``: ``run(args) -> int``, what ``rlcore doctor --cluster`` (rl-doctor) runs."""

    doctor: str | Callable | None = None


@card("feature")
class FeatureCard(CardBase):
    """A cross-cutting feature a config switches on (``enabled(config) -> bool``), loaded once into ``Plan.features``.
    ``keys``, ``memory``, ``alternatives``, ``hooks`` and ``provides``: docs/plugins.md, "Cross-cutting features"."""

    keys: tuple[str, ...] = _checks()
    memory: str | Callable | None = _code()
    alternatives: str | Callable | None = _code()
    hooks: dict[str, Any] = attrs.field(factory=dict, converter=dict, eq=False, hash=False)
    provides: str | Callable | None = _code()


@card("rollout_pool")
class RolloutPoolCard(CardBase):
    """A rollout pool of its own (:mod:`rl_core.placement.rollout_pool`): ``make(handle) -> RolloutSchedule`` on the
    controller; ``worker``: ``make(worker) -> extension`` in every worker, whose ``methods`` the controller may call."""

    worker: str | Callable = attrs.field()
    methods: frozenset = attrs.field(converter=_frozenset, factory=frozenset)

    def load_worker(self) -> Any:
        """Import and return the worker extension's factory."""
        return load_object(self.worker)


@card("reward_shaping")
class RewardShapingCard(CardBase):
    """Changes the training rewards after scoring: ``make(config) -> shaper``, ``shaper(scores, batch) -> (scores, metrics)``.
    On when the boolean key ``enabled_by`` is true (:mod:`rl_core.plan.step_hooks`); validation scores are never shaped."""

    enabled_by: str


@card("batch_sampler")
class BatchSamplerCard(CardBase):
    """Gathers a step's batch over generation rounds: ``make(config) -> sampler``, ``sampler(prompts, *, run_round, draw,
    step, pad_token_id, counters) -> (batch, metrics)``. ``enabled_by`` as :class:`RewardShapingCard`; one at most is on."""

    enabled_by: str


@card("log_prob_forward")
class LogProbForwardCard(CardBase):
    """The log-prob forward rollout and trainer both run so their log-probs agree bit for bit (``rollout.exact``;
    docs/exact.md): ``forward(model, input_ids, attention_mask, responses, *, temperature=1.0, with_entropy=False,
    entropy_grad=True, compute_dtype=None, lockstep=False) -> (log_probs [b, R], entropy | None)``, float32, 0 past each response."""


@card("tracker")
class TrackerCard(CardBase):
    """A metric logger for ``trainer.loggers`` (:mod:`rl_core.trainer.tracking`): ``make(*, output_dir, project, experiment,
    config_dict, print_fn) -> logger`` with ``log(metrics, step)``, ``close()``, optional ``truncate_after(step) -> int``.
    A failed start raises a :class:`rl_core.problems.UserError` naming the fix."""



@card("builtin_model")
class BuiltinModelCard(CardBase):
    """A model made offline (``model.path: builtin:<name>``): ``make(out_dir, *, force=False, log=print) -> Path`` writes
    a Hugging Face folder, :data:`rl_core.plan.builtin_model.MARKER` last; ``architecture``: its ``architectures[0]``, known before."""

    architecture: str
