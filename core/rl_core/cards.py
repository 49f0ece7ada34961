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
    """A rollout (generation) engine.

    ``factory`` is called as ``factory(config, context)`` inside a worker and
    returns an object following :class:`rl_core.backends.RolloutEngine`.
    ``checks`` are light callables ``check(run_config) -> list[Problem]`` for
    engine-specific constraints (e.g. head sizes the CPU kernels support);
    they must not import the engine.
    """

    devices: frozenset[str] = _names(DEVICES)
    max_tp: int | None = 1
    weight_formats: frozenset[str] = _names({"hf"})
    logprobs: bool = True
    logprobs_free: bool = False  # costs ~nothing next to sampling (hf): rollout.calculate_log_probs=null keeps them on
    # rollout.exact: its log-probs from the Plan's LogProbForwardCard (WorkerContext.log_prob_forward), as the trainer's (issue 51)
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
    moe_parallel: frozenset[str] = _names()
    # the engine returns the experts each token was routed to (rollout.return_routed_experts; rl-routing-replay)
    routed_experts: bool = False
    # the engine generates from prompts that carry images (the batch's multi_modal_inputs; rl-multimodal)
    images: bool = False
    # one engine's TP group may span nodes (TP > a node's devices), its ranks on several nodes of a Ray cluster
    # (trainer.placement=ray); False: a TP group stays within one node
    multi_node_tp: bool = False
    checks: tuple[Callable, ...] = _checks()
    # the engine computes in FP8 (weights and KV cache) with rollout.precision=fp8 (rl_core.rollout.precision)
    fp8: bool = False


@card("train")
class TrainCard(CardBase):
    """A training backend providing actor / critic / ref roles.

    ``factory`` is called as ``factory(role, config, context)`` inside a worker
    and returns an object following :class:`rl_core.backends.TrainEngine`.
    """

    devices: frozenset[str] = _names(DEVICES)
    parallelism: frozenset[str] = _names({"dp"})
    roles: frozenset[str] = _names(ROLES)
    export_formats: frozenset[str] = _names({"hf"})
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
    # rollout.exact: the actor / ref log-probs from the Plan's LogProbForwardCard (WorkerContext.log_prob_forward; issue 51)
    exact: bool = False
    # what train.options may hold (as EstimatorCard.options): an attrs class deriving from rl_core.card_options.Options,
    # or its "module:Class" path; checked by `rlcore check` (None: unchecked, with a warning when train.options is set)
    options: Any = None
    checks: tuple[Callable, ...] = _checks()
    # how each feature runs on GPUs: {feature: "native" (the engine's own path, e.g. megatron-core's) | "reference" (a
    # plain re-implementation kept for conformance: correct, not fast) | "emulated" (accepted, does not do what it is for)};
    # the backend's checks warn when a GPU run would use a non-native path (empty: not stated)
    features: dict[str, str] = attrs.field(factory=dict, converter=dict, hash=False, validator=attrs.validators.deep_mapping(
        key_validator=attrs.validators.instance_of(str), value_validator=attrs.validators.in_(("native", "reference", "emulated"))))


@card("estimator")
class EstimatorCard(CardBase):
    """An advantage estimator.

    ``factory`` resolves to a function with the common estimator signature
    (see :mod:`rl_core.algorithms.advantages`).
    """

    needs_critic: bool = False
    needs_groups: bool = False
    needs_greedy_baseline: bool = False
    # what algorithm.options may hold: an attrs class deriving from rl_core.card_options.Options, or its
    # "module:Class" path; checked by `rlcore check` (None: the card declares none, its options go unchecked)
    options: Any = None
    # per-token log-probs of the sampled responses the estimator reads, by role name: "actor" (the policy that
    # sampled: rollout log-probs or the old log-prob pass) or a LogProbRoleCard's name (e.g. "teacher"); the loop
    # computes them and passes ``log_probs={name: Tensor[B, T]}`` (only to an estimator that declares some)
    log_probs: tuple[str, ...] = _checks()


@card("policy_loss")
class PolicyLossCard(CardBase):
    """A policy-gradient loss (see :mod:`rl_core.algorithms.policy_loss`)."""

    options: Any = None  # what actor.policy_loss_options may hold (as EstimatorCard.options)
    # the per-token loss and its gradient are exactly 0 wherever the advantage is 0 (a loss of the form A * f(ratio)),
    # so rows whose advantages are all 0 may be left out of the update (actor.skip_zero_advantage_rows;
    # rl_core.algorithms.zero_advantage). False (the default): every row is trained on.
    skips_zero_advantage: bool = False


@card("reward")
class RewardCard(CardBase):
    """A reward function.

    ``factory`` resolves to ``score(*, data_source, solution_str, ground_truth,
    extra_info, **kwargs) -> float | dict`` (per sample), or, with
    ``batched=True``, to a function taking lists of those and returning a list.
    ``data_sources`` lists the ``data_source`` values this reward scores by
    default when the config does not name a reward.
    """

    fields: frozenset[str] = _names({"ground_truth"})
    batched: bool = False
    data_sources: frozenset[str] = _names()


@card("reward_model")
class RewardModelCard(CardBase):
    """A model-based reward (a learned reward model, an LLM judge): ``reward_model.name``.

    ``factory`` is loaded once when the stack resolves (``Stack.reward_model_fn``) and called as
    ``factory(config, context)`` inside the worker that holds the reward model (the actor's, or a pool
    of its own, rl-reward-model's ``rl_reward_model.role.RewardModelRole``); it returns an object following
    ``rl_reward_model.role.ModelScorer``: it scores
    ``rl_reward_model.role.ScoreRequest`` s (texts, never the
    policy's token ids). ``checks`` are light ``check(run_config) -> list[Problem]``
    callables (``rlcore check``) that must not load the model.

    ``rollout_key``: a dotted config key naming a rollout card the reward model generates with (a
    generative judge); the resolver puts that card in ``Stack.reward_model_rollout`` and the factory is
    then called as ``factory(config, context, rollout=card)``. ``memory``: the memory estimate's
    reward-model terms, ``memory(config, shape, dtype_bytes) -> (parameters, extra bytes)``: the
    parameters it holds on the device and the bytes one micro-batch needs beyond a forward's temporaries
    (e.g. a KV cache); None: the whole model of ``reward_model.model.path``, a forward only.
    """

    devices: frozenset[str] = _names(DEVICES)
    checks: tuple[Callable, ...] = _checks()
    rollout_key: str | None = None
    memory: Callable | None = _code()


@card("converter")
class ConverterCard(CardBase):
    """Bridges a train backend's exported weight format to one a rollout accepts.

    ``factory`` resolves to ``convert(named_tensors_iter, model_config) -> iter``.
    """

    source: str
    target: str


@card("tool")
class ToolCard(CardBase):
    """A tool an agent loop may call (tools of the ``rl-agent`` plugin, ``plugins/agent``).

    ``factory`` resolves to a plain typed function with a docstring (its
    schema then comes from ``transformers.utils.get_json_schema``), or to a
    zero-argument callable returning a ``Tool`` of the agent plugin.
    ``schema`` is an OpenAI-style function schema
    (``{"type": "function", "function": {"name", "description", "parameters"}}``);
    given here, it is shown by ``rlcore plugins`` and checked without importing the tool.
    """

    schema: dict | None = _code()


@card("agent_loop")
class AgentLoopCard(CardBase):
    """An agent loop (the ``rl-agent`` plugin's handle and trajectory): ``async fn(handle, sample) -> Trajectory``.

    ``runner``: the factory of the runtime that runs loops over a rollout engine, ``runner(multi_turn_config,
    cards) -> rl_core.rollout.multi_turn.AgentRuntime`` (dotted path or callable; loaded once when the stack is
    resolved). A loop built on another plugin's handle may leave it None: the one runner installed runs it.
    """

    runner: str | Callable | None = _code()


@card("tool_parser")
class ToolParserCard(CardBase):
    """A tool-call format (parsers of the ``rl-agent`` plugin): ``factory() -> ToolCallParser``."""


#: the stages of the plan's checks, in the order a user fixes them (rl_core.plan.checks runs them in this order)
CHECK_STAGES = ("keys", "values", "rules", "names", "files", "device")


@card("check")
class CheckCard(CardBase):
    """A check of the run plan, registered beside the feature it checks (``rl_core_register_checks``).

    ``factory`` is ``"module:function"``, called once per plan (`rlcore check`, `rlcore train`) as
    ``check(config, registry) -> Iterable[Problem]`` on the normalised config, after the names resolved. ``stage``
    (one of :data:`CHECK_STAGES`) places its problems in the fixing order; ``order`` orders checks within a stage
    (lower first). ``device`` checks read this machine's GPUs and cores: `rlcore check --skip-device-check` skips them.
    A check that raises becomes a problem naming it; the others still run.
    """

    stage: str = attrs.field(validator=attrs.validators.in_(CHECK_STAGES))
    order: int = 100


@card("log_prob_role")
class LogProbRoleCard(CardBase):
    """A model role that scores the policy's sampled tokens: per-token log-probs of a second model (a teacher).

    ``factory(config, tokenizer) -> role`` is called once by the trainer when the run's estimator names the card in
    its ``log_probs``; ``role.log_probs(batch, temperature) -> Tensor[B, T]`` (float32, CPU) is called every step
    after the reference model's pass, on the same batch (``input_ids``, ``attention_mask``, ``position_ids``,
    ``responses``), and the result goes into the batch as ``<name>_log_prob`` and to the estimator. The role's model
    is not in the plan's memory estimate yet.
    """



def _cli_options(value: Any) -> tuple:
    return tuple((str(flag), dict(kwargs)) for flag, kwargs in value)


@card("dialect")
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

    detect: str | Callable
    keys: str | Callable | None = None
    cli_options: tuple[tuple[str, dict], ...] = attrs.field(default=(), converter=_cli_options, eq=False)
    detects: str = ""


@card("command")
class CommandCard(CardBase):
    """An ``rlcore`` sub-command of a plugin: ``factory`` resolves to ``add_parser(subparsers)``, which adds the
    command's parser and sets its ``func(args) -> int`` (as core's own commands, rl_core.cli.main)."""

    help: str = ""



@card("observer")
class ObserverCard(CardBase):
    """A step observer (``rl_core_register_observers``): the controller hands it each step's rollouts and each
    validation's (:mod:`rl_core.observers`). ``factory`` resolves to ``make(config, options, output_dir) -> observer |
    None`` (None: off for this run), called once when the trainer starts; ``options``: what
    ``trainer.observers.<name>`` may hold (as EstimatorCard.options), checked by ``rlcore check``. Every installed
    observer is built for every run; its options say whether it does anything."""

    options: Any = None



@card("run_kind")
class RunKindCard(CardBase):
    """A kind of run of the same loop and Plan (``trainer.kind``; the built-in ``rl`` is the loop itself).

    ``factory`` resolves to ``make(handle) -> RunKind`` (:mod:`rl_core.run_kind`): the run's data loaders, its step
    and its validation, over what the loop hands it (the actor's update and log-probs, the tokenizer, the config).
    ``rollout``: whether its workers hold a rollout engine; ``policy_loss``: the policy-loss card its actor updates
    with (None: the config's ``actor.policy_loss``); ``options``: what ``trainer.kind_options`` may hold (an attrs
    class deriving from :class:`rl_core.card_options.Options`, checked as ``algorithm.options`` is).
    """

    rollout: bool = False
    policy_loss: str | None = None
    options: Any = None



@card("config_section")
class ConfigSectionCard(CardBase):
    """A config section a package contributes (``rl_core_register_config_sections``, :mod:`rl_core.config.sections`):
    ``name`` is its key (``ray``; dotted under one of core's sections: ``rollout.multi_turn``), ``factory`` resolves to
    its attrs class (defaults for every field; validators as core's sections use, rl_core.config.schema's helpers)."""



@card("placement")
class PlacementCard(CardBase):
    """Where the workers run (``trainer.placement``; core's own is ``local``, rl-placement-ray's ``ray``).

    ``factory`` resolves to ``make(plan, *, roles=None, pool="main") -> Placement``
    (:class:`rl_core.placement.contract.Placement`): one pool's workers started, holding ``roles`` (None: every role
    of the main pool), ``pool`` ``main`` or a role with workers of its own (``Sizes.pools``). The Plan holds the card
    (resolved once); :func:`rl_core.placement.make_cluster` loads its factory. ``doctor`` (optional,
    ``"module:function"``): ``run(args) -> int``, what ``rlcore doctor --cluster`` (rl-doctor) runs to check the
    placement's machines (``args.address``, ``args.json``).
    """

    doctor: str | Callable | None = None



@card("feature")
class FeatureCard(CardBase):
    """A cross-cutting feature a config switches on (LoRA: rl-lora's ``lora``), registered by
    ``rl_core_register_features`` and loaded once into the Plan (``Plan.features``, :mod:`rl_core.plan.features`).

    ``factory`` resolves to ``enabled(config) -> bool``; ``keys``: the config keys that switch it on. Optional, each a
    ``"module:function"`` path (or the object): ``memory(config, shape, S, c) -> MemoryTerms | None``, the actor's
    train-state terms the plan's device / host / disk estimates use in place of a full fine-tune's;
    ``alternatives(config) -> [(label, config)]``, configs with the feature on that the device estimate tries when a
    full fine-tune does not fit; ``hooks``: ``{name: path}``, what the kernel calls where the feature acts
    (``rollout_adapters``: the hf rollout's in-place adapter state); ``provides``: the feature's object (module-level:
    the Plan pickles it by reference) that the kernel's call sites use whether or not a config key switched it on
    (rl-multimodal's image encoder for rows with images, rl-routing-replay's recorder): ``Plan.features.get(name)``,
    ``WorkerContext.feature(name, key)``.
    """

    keys: tuple[str, ...] = _checks()
    memory: str | Callable | None = _code()
    alternatives: str | Callable | None = _code()
    hooks: dict[str, Any] = attrs.field(factory=dict, converter=dict, eq=False, hash=False)
    provides: str | Callable | None = _code()



@card("rollout_pool")
class RolloutPoolCard(CardBase):
    """A rollout pool of its own (``rollout.n_gpus_per_node``): its step schedule and its weight transfer (the
    ``rl-async`` package's ``async``; :mod:`rl_core.placement.rollout_pool` is the contract).

    ``factory`` resolves to ``make(handle) -> RolloutSchedule``, called once when the trainer starts, on the
    controller; ``worker`` (``"module:attr"``) to ``make(worker) -> extension``, called in every worker of the train
    and rollout pools; ``methods``: the extension's methods the controller may call on those workers
    (``WorkerMethod.EXTENSION``). The plan holds the one installed card when the rollout has a pool of its own."""

    worker: str | Callable = attrs.field()
    methods: frozenset = attrs.field(converter=_frozenset, factory=frozenset)

    def load_worker(self) -> Any:
        """Import and return the worker extension's factory."""
        return load_object(self.worker)



@card("reward_shaping")
class RewardShapingCard(CardBase):
    """A change of the training rewards after the reward function scored them (``rl_core_register_reward_shapers``;
    e.g. rl-algorithms' DAPO overlong penalty). ``enabled_by``: the boolean config key that turns it on (dotted, e.g.
    ``reward.overlong_penalty.enable``); the plan holds the shapers whose key is true, in name order, and a key that is
    true with no installed card claiming it is an ``rlcore check`` error (:mod:`rl_core.plan.step_hooks`).
    ``factory`` resolves to ``make(config) -> shaper``, called once when the trainer starts;
    ``shaper(scores, batch) -> (scores, metrics)`` gets the reward function's scores (``[B]``) and the scored batch.
    Training rewards (the greedy baseline's too) are shaped; validation scores never are."""

    enabled_by: str


@card("batch_sampler")
class BatchSamplerCard(CardBase):
    """How a training step gathers its batch when one generation round is not it (``rl_core_register_batch_samplers``;
    e.g. rl-algorithms' DAPO dynamic sampling: rounds until enough groups differ). ``enabled_by`` as
    :class:`RewardShapingCard`; at most one sampler is on. ``factory`` resolves to ``make(config) -> sampler``, called
    once when the trainer starts; ``sampler(prompts, *, run_round, draw, step, pad_token_id, counters) -> (batch,
    metrics)``: ``run_round(prompts) -> (rl_core.observers.StepRollouts, metrics)`` generates and scores one round,
    ``draw()`` gives the next prompts, ``counters``: the prefixes of batch meta entries that add up over rounds."""

    enabled_by: str



@card("log_prob_forward")
class LogProbForwardCard(CardBase):
    """A canonical log-prob forward the rollout and the trainer both run, so their log-probs agree bit for bit
    (``rollout.exact=true`` resolves the card named ``exact``: the ``rl-exact`` distribution's; docs/exact.md).

    ``factory`` resolves to ``forward(model, input_ids, attention_mask, responses, *, temperature=1.0,
    with_entropy=False, entropy_grad=True, compute_dtype=None, lockstep=False) -> (log_probs [b, R], entropy | None)``
    (float32, 0 past each response; gradients flow when grad is on). The Plan loads it once; the workers hand it to
    the engines as :attr:`rl_core.backends.WorkerContext.log_prob_forward`, and a rollout / train backend whose card
    declares ``exact`` calls it in place of its own log-prob forward.
    """



@card("tracker")
class TrackerCard(CardBase):
    """A metric logger ``trainer.loggers`` may name beside core's own ``console`` and ``jsonl``
    (:mod:`rl_core.trainer.tracking`; hook ``rl_core_register_trackers``, e.g. rl-tracking's tensorboard and wandb).

    ``factory`` resolves to ``make(*, output_dir, project, experiment, config_dict, print_fn) -> logger``: loaded once by
    the resolver (``Plan.trackers``), called once when the trainer starts. The logger has ``log(metrics, step)`` (a
    ``{name: float}`` dict), ``close()`` and, optionally, ``truncate_after(step) -> int`` (a resumed run: hide what was
    logged after ``step``). A start that fails (no package, no login) raises a :class:`rl_core.problems.UserError`
    naming the logger and the fix; ``config_dict`` has its secrets masked already. Whether its own packages are
    installed is a check the plugin registers (``rl_core_register_checks``)."""


@card("generator")
class GeneratorCard(CardBase):
    """Prompt rows generated at start-up instead of read from files: ``data.train_generator.name`` /
    ``data.val_generator.name`` (hook ``rl_core_register_generators``, e.g. rl-data's ``reasoning_gym``).

    ``factory`` resolves to ``generate(gen, split) -> list[dict]``: ``gen`` is the
    :class:`~rl_core.config.schema.GeneratorConfig`, the rows are in verl's row format and go through core's row
    validation as rows read from a file do (:func:`rl_core.data.dataset.generate_rows`); a bad dataset or option raises
    a :class:`rl_core.problems.UserError` naming it and the fix. Loaded once by the resolver (``Plan.generators``).
    ``checks``: light ``check(gen, key) -> list[Problem]`` callables (``key``: ``data.train_generator`` or
    ``data.val_generator``; its package installed, its options typed) that `rlcore check` runs before it generates a
    two-row sample."""

    checks: tuple[Callable, ...] = _checks()

