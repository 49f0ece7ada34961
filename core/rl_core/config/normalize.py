"""One normalisation step: global sizes in prompts -> per-rank sizes in sequences (the vocabulary, as in verl, and a
worked example: docs/config.md, "Sizes"). Every error prints the arithmetic and the nearest valid values.
"""

from __future__ import annotations

from typing import Any

import attrs

from rl_core.config.rules import check_config
from rl_core.config.schema import RunConfig
from rl_core.util.precision import resolve_dtype
from rl_core.util.user_paths import section_enabled
from rl_core.problems import Problem, nearest_divisors


@attrs.frozen(kw_only=True)
class Sizes:
    world_size: int
    device: str
    train_dp: int
    train_model_parallel: int
    rollout_tp: int
    rollout_replicas: int
    prompts_per_step: int
    sequences_per_step: int
    sequences_per_rollout_replica: int
    sequences_per_train_rank: int
    actor_mini_batches: int  # optimizer steps per epoch
    actor_mini_batch_per_rank: int  # sequences
    actor_micro_batch_per_rank: int  # sequences
    actor_grad_accum: int
    critic_mini_batches: int | None = None
    critic_mini_batch_per_rank: int | None = None
    critic_micro_batch_per_rank: int | None = None
    critic_grad_accum: int | None = None
    train_sequence_parallel: int = 1  # Ulysses SP size (a factor of train_model_parallel)
    train_context_parallel: int = 1  # context parallelism (a factor of train_model_parallel)
    expert_layout: tuple[int, int, int] | None = None  # MoE (EP or expert TP set): (expert TP, EP, expert data-parallel ranks)
    actor_token_budget: int | None = None  # actor.use_dynamic_bsz: micro-batches of at most this many tokens
    # roles on workers of their own (critic.n_gpus_per_node, ref.n_gpus_per_node): role -> (workers, data-parallel ranks)
    pools: dict[str, tuple[int, int]] = attrs.field(factory=dict)
    compile_choice: str = ""  # model.compile=auto: what it chose and why (resolve_compile)

    @property
    def devices(self) -> int:
        """Devices (processes on CPU) of the whole run: the actor's workers and every role's own pool."""
        return self.world_size + sum(workers for workers, _ in self.pools.values())

    def ranks(self, role: str) -> tuple[int, int]:
        """``(workers, data-parallel ranks)`` that run ``role``: its own pool's, or the actor's."""
        return self.pools.get(role, (self.world_size, self.train_dp))

    def _model_parallel_factors(self) -> str:
        return "*".join(["tp", "pp"] + (["cp"] if self.train_context_parallel > 1 else []) + (["sp"] if self.train_sequence_parallel > 1 else []))

    def table(self) -> list[tuple[str, str]]:
        rows = [
            ("device / world size", f"{self.device} x {self.world_size}"),
            ("train data-parallel ranks", f"{self.world_size} / {self.train_model_parallel} ({self._model_parallel_factors()}) = {self.train_dp}"),
            ("rollout replicas", f"{self.world_size} / {self.rollout_tp} (rollout tp) = {self.rollout_replicas}"),
            ("sequences per step", f"{self.prompts_per_step} prompts x n = {self.sequences_per_step}"),
            ("sequences per rollout replica", f"{self.sequences_per_rollout_replica}"),
            ("sequences per train rank", f"{self.sequences_per_train_rank}"),
            ("actor optimizer steps per epoch", f"{self.actor_mini_batches}"),
            ("actor mini-batch per rank", f"{self.actor_mini_batch_per_rank} sequences"),
            ("actor micro-batch per rank", f"{self.actor_micro_batch_per_rank} sequences x {self.actor_grad_accum} accumulation steps"
             if self.actor_token_budget is None else
             f"up to {self.actor_token_budget:,} tokens (actor.use_dynamic_bsz: sequences grouped by actor.ppo_max_token_len_per_gpu"
             f"{f' x CP {self.train_context_parallel}: each CP rank holds 1 / CP of them' if self.train_context_parallel > 1 else ''})"),
        ]
        if self.expert_layout is not None:
            etp, ep, edp = self.expert_layout
            rows.append(("train expert layout (MoE)", f"{self.world_size} / ({etp} (expert tp) x {ep} (ep) x pp) = {edp} expert data-parallel; "
                         f"each rank holds 1/{ep} of every MoE layer's experts"))
        if self.compile_choice:
            rows.append(("model.compile", self.compile_choice))
        for role, (workers, dp) in sorted(self.pools.items()):
            rows.append((f"{role} workers (own pool)", f"{workers} ({dp} data-parallel), {self.sequences_per_step // dp} sequences each"))
        if self.critic_mini_batches is not None:
            rows += [
                ("critic mini-batch per rank", f"{self.critic_mini_batch_per_rank} sequences"),
                ("critic micro-batch per rank", f"{self.critic_micro_batch_per_rank} sequences x {self.critic_grad_accum} accumulation steps"),
            ]
        return rows


def resolve_device(requested: str) -> str:
    if requested != "auto":
        return requested
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


#: model.compile=auto compiles a GPU run at least this long: shorter ones do not win the compile's minutes back
MIN_STEPS = 50


def resolve_compile(requested: Any, device: str, config: Any) -> tuple[bool, str]:
    """``model.compile``: ``(compile?, why)``; ``auto`` is eager on a CPU and for short GPU runs, else compiled (``why``
    says which, for ``rlcore check``; empty unless ``requested`` is ``"auto"``)."""
    if requested != "auto":
        return bool(requested), ""
    steps = config.trainer.total_training_steps
    if device == "cpu":
        return False, ("auto -> eager: on a CPU the compile of every decoder layer costs minutes (the GSM8K example's first "
                       "step: 570 s compiled, 29 s eager), more than a CPU run's steps win back")
    if steps is not None and steps < MIN_STEPS:
        return False, (f"auto -> eager: a short run (trainer.total_training_steps={steps} < {MIN_STEPS}) does not earn the "
                       "compile (minutes per process) back")
    length = f"{steps} steps" if steps is not None else "trainer.total_epochs over the data set"
    return True, (f"auto -> compiled: a {device} run of {length} earns the "
                  "compile back with fused norms / rotary / residuals each step")


def _nearest_valid(key: str, value: int, total: int) -> str:
    """The fix line for a size that must divide ``total``: the divisors nearest to ``value``."""
    return f"nearest valid {key}: {', '.join(map(str, nearest_divisors(value, total)))}"


def _more_nodes(rtp: int, per_node: int, section: str) -> str:
    """The other fix of a rollout TP larger than the devices: enough nodes for one TP group across them."""
    if rtp <= per_node or rtp % per_node:
        return ""
    return (f"; or {section}.nnodes={rtp // per_node} (a multiple of it) with trainer.placement=ray: one TP group over "
            f"{rtp // per_node} nodes (with a rollout backend whose TP group spans nodes)")


def _mini_micro(
    problems: list[Problem], section: str, *, prompts_per_step: int, n: int, dp: int, mini: int, micro: int
) -> tuple[int, int, int, int] | None:
    """Check one role's mini/micro sizes; returns (mini_batches, mini_per_rank, micro, accum)."""
    ok = True
    if mini > prompts_per_step:
        problems.append(Problem(key=f"{section}.ppo_mini_batch_size",
                                what=f"mini-batch of {mini} prompts is larger than the step's batch of data.train_batch_size={prompts_per_step} prompts",
                                fix=f"set {section}.ppo_mini_batch_size to at most {prompts_per_step} (a divisor of it: {', '.join(map(str, nearest_divisors(mini, prompts_per_step)))})"))
        return None
    if prompts_per_step % mini:
        problems.append(Problem(key=f"{section}.ppo_mini_batch_size",
                                what=f"data.train_batch_size={prompts_per_step} is not divisible by {section}.ppo_mini_batch_size={mini} ({prompts_per_step} % {mini} = {prompts_per_step % mini})",
                                fix=_nearest_valid(f"{section}.ppo_mini_batch_size", mini, prompts_per_step)))
        ok = False
    mini_seqs = mini * n
    if mini_seqs % dp:
        problems.append(Problem(key=f"{section}.ppo_mini_batch_size",
                                what=f"a mini-batch of {mini} prompts x rollout.n={n} = {mini_seqs} sequences cannot be split over {dp} data-parallel ranks ({mini_seqs} % {dp} = {mini_seqs % dp})",
                                fix=f"make {section}.ppo_mini_batch_size * rollout.n a multiple of {dp}, e.g. {section}.ppo_mini_batch_size={_first_mult(mini, n, dp)}"))
        return None
    if not ok:
        return None
    per_rank = mini_seqs // dp
    if per_rank % micro:
        problems.append(Problem(key=f"{section}.ppo_micro_batch_size_per_gpu",
                                what=f"micro-batch of {micro} sequences does not divide the per-rank mini-batch: {mini} prompts x n={n} / "
                                     f"{dp} ranks = {per_rank} sequences ({per_rank} % {micro} = {per_rank % micro})",
                                fix=_nearest_valid(f"{section}.ppo_micro_batch_size_per_gpu", micro, per_rank)))
        return None
    return prompts_per_step // mini, per_rank, micro, per_rank // micro


def _role_sizes(role: str, sizes: tuple[int, int, int, int] | None) -> dict[str, int]:
    """:func:`_mini_micro`'s result as :class:`Sizes`' ``<role>_*`` fields (none when None: their defaults)."""
    names = ("mini_batches", "mini_batch_per_rank", "micro_batch_per_rank", "grad_accum")
    return {f"{role}_{name}": value for name, value in zip(names, sizes or ())}


def _first_mult(mini: int, n: int, dp: int) -> int:
    m = mini
    while (m * n) % dp:
        m += 1
    return m


def normalize(config: RunConfig, *, needs_critic: bool = False, rules: bool = True) -> tuple[RunConfig, Sizes | None, list[Problem]]:
    """The config with its derived defaults filled, its per-rank sizes (None when a size problem prevents them) and
    the problems found."""
    problems: list[Problem] = []
    d, r, a, c, t = config.data, config.rollout, config.actor, config.critic, config.trainer

    # Value ranges are the schema's rules: checked when a config is loaded (rules=False then: once is enough), here for
    # configs built in code.
    if rules:
        problems.extend(check_config(config))
    ok = not problems

    # Fill derived defaults (frozen config: evolve).
    device = resolve_device(t.device)
    lp_micro = a.log_prob_micro_batch_size_per_gpu or r.log_prob_micro_batch_size_per_gpu or a.ppo_micro_batch_size_per_gpu
    actor = attrs.evolve(
        a, clip_ratio_low=a.clip_ratio if a.clip_ratio_low is None else a.clip_ratio_low,
        clip_ratio_high=a.clip_ratio if a.clip_ratio_high is None else a.clip_ratio_high,
        log_prob_micro_batch_size_per_gpu=lp_micro,
    )
    critic_on = needs_critic if c.enable is None else c.enable
    critic = attrs.evolve(
        c, enable=critic_on, model_path=c.model_path or config.model.path,
        ppo_mini_batch_size=c.ppo_mini_batch_size or a.ppo_mini_batch_size,
        ppo_micro_batch_size_per_gpu=c.ppo_micro_batch_size_per_gpu or a.ppo_micro_batch_size_per_gpu,
        ppo_epochs=c.ppo_epochs or a.ppo_epochs,
    )
    uses_kl = a.use_kl_loss or config.algorithm.use_kl_in_reward
    ref = attrs.evolve(
        config.ref, enable=uses_kl if config.ref.enable is None else config.ref.enable,
        log_prob_micro_batch_size_per_gpu=config.ref.log_prob_micro_batch_size_per_gpu or lp_micro,
    )
    if uses_kl and ref.enable is False:
        key = "actor.use_kl_loss" if a.use_kl_loss else "algorithm.use_kl_in_reward"
        problems.append(Problem(key="ref.enable", what=f"is false but {key}=true needs reference log-probs", fix=f"set ref.enable=true, or {key}=false"))
    data = attrs.evolve(d, seed=t.seed if d.seed is None else d.seed)
    dtype, _why = resolve_dtype(config.model.dtype, device)
    compiled, compile_why = resolve_compile(config.model.compile, device, config)
    if config.model.compile is True and device == "cpu":  # the user asked for it: kept, but said
        problems.append(Problem(key="model.compile", severity="warning", fix="set model.compile=auto (or false) on a CPU",
                                what="model.compile=true on a CPU: the first step compiles every decoder layer (minutes; "
                                     "the GSM8K example's first step took 570 s against 29 s eager); model.compile=auto picks eager here"))
    config = attrs.evolve(
        config, data=data, actor=actor, critic=critic, ref=ref, trainer=attrs.evolve(t, device=device),
        model=attrs.evolve(config.model, dtype=dtype, compile=compiled),
    )
    if not ok:
        return config, None, problems

    world = t.nnodes * t.n_gpus_per_node
    sp = config.actor.ulysses_sequence_parallel_size  # Ulysses: the ranks of a group share their data
    cp = config.train.context_parallel_size
    mp = config.train.tensor_model_parallel_size * config.train.pipeline_model_parallel_size * cp * sp
    rtp = r.tensor_model_parallel_size
    size_ok = True
    before = len(problems)
    rollout_workers = _rollout_workers(problems, config)  # a rollout pool of its own (rl-async), or None
    if len(problems) > before:
        size_ok = False
    elif rollout_workers is not None:
        if rollout_workers % rtp:
            problems.append(Problem(key="rollout.tensor_model_parallel_size",
                                    what=f"rollout TP {rtp} does not divide the rollout pool's {rollout_workers} devices (rollout.nnodes x rollout.n_gpus_per_node)",
                                    fix=_nearest_valid("rollout.tensor_model_parallel_size", rtp, rollout_workers)
                                    + _more_nodes(rtp, r.n_gpus_per_node, "rollout")))
            size_ok = False
    elif world % rtp:
        problems.append(Problem(key="rollout.tensor_model_parallel_size",
                                what=f"rollout TP {rtp} does not divide the {world} devices (trainer.nnodes={t.nnodes} x trainer.n_gpus_per_node={t.n_gpus_per_node}; {world} % {rtp} = {world % rtp})",
                                fix=_nearest_valid("rollout.tensor_model_parallel_size", rtp, world) + _more_nodes(rtp, t.n_gpus_per_node, "trainer")))
        size_ok = False
    if world % mp:
        problems.append(Problem(key="actor.ulysses_sequence_parallel_size" if sp > 1 else "train.context_parallel_size" if cp > 1 else "train.tensor_model_parallel_size",
                                what=f"train TP x PP{' x CP' if cp > 1 else ''}{' x Ulysses SP' if sp > 1 else ''} = {mp} does not divide the {world} devices ({world} % {mp} = {world % mp})",
                                fix=f"choose TP x PP{' x CP' if cp > 1 else ''}{' x SP' if sp > 1 else ''} among the divisors of {world}: {', '.join(str(x) for x in range(1, world + 1) if world % x == 0)}"))
        size_ok = False
    ep, etp = config.train.expert_model_parallel_size, config.train.expert_tensor_parallel_size or config.train.tensor_model_parallel_size
    emp = etp * ep * config.train.pipeline_model_parallel_size
    if size_ok and ep * etp > 1 and world % emp:
        pp = config.train.pipeline_model_parallel_size
        problems.append(Problem(
            key="train.expert_model_parallel_size" if ep > 1 else "train.expert_tensor_parallel_size",
            what=f"expert TP {etp} x EP {ep} x PP {pp} = {emp} does not divide the {world} devices "
                 f"({world} % {emp} = {world % emp}): each MoE layer's experts are laid out over ETP x EP ranks of every pipeline stage",
            why="verl's training library itself refuses this grid when verl's workers start (its parallel-state setup requires the "
                "world size to be divisible by expert TP x EP x PP; an unset expert TP is the TP size); verl's config checks do not look at it",
            fix=f"choose train.expert_model_parallel_size (x expert TP x PP) among the divisors of {world}: "
                f"{', '.join(str(x) for x in range(1, world + 1) if world % (x * etp * pp) == 0)}"))
        size_ok = False
    if not size_ok:
        return config, None, problems
    dp = world // mp
    replicas = (world if rollout_workers is None else rollout_workers) // rtp
    prompts = d.train_batch_size
    seqs = prompts * r.n
    if seqs % dp:
        problems.append(Problem(key="data.train_batch_size",
                                what=f"data.train_batch_size={prompts} x rollout.n={r.n} = {seqs} sequences is not divisible by the {dp} data-parallel ranks ({seqs} % {dp} = {seqs % dp})",
                                fix=f"make train_batch_size x n a multiple of {dp}, e.g. data.train_batch_size={_first_mult(prompts, r.n, dp)}"))
        size_ok = False
    if not size_ok:  # one root cause at a time: mini-batch checks would repeat it
        return config, None, problems
    pools = _pools(problems, config, mp=mp, seqs=seqs, on={"critic": critic_on, "ref": bool(ref.enable), "reward_model": section_enabled(config, "reward_model")})
    if pools is None:
        return config, None, problems
    if rollout_workers is not None:
        pools["rollout"] = (rollout_workers, replicas)
    actor_sizes = _mini_micro(problems, "actor", prompts_per_step=prompts, n=r.n, dp=dp, mini=a.ppo_mini_batch_size, micro=a.ppo_micro_batch_size_per_gpu)
    critic_sizes = None
    if critic_on:
        critic_dp = pools.get("critic", (world, dp))[1]
        critic_sizes = _mini_micro(
            problems, "critic", prompts_per_step=prompts, n=r.n, dp=critic_dp, mini=critic.ppo_mini_batch_size, micro=critic.ppo_micro_batch_size_per_gpu
        )
        if critic_sizes is None:
            size_ok = False
    if not size_ok or actor_sizes is None:
        return config, None, problems
    sizes = Sizes(
        world_size=world, device=device, train_dp=dp, train_model_parallel=mp, train_sequence_parallel=sp, train_context_parallel=cp,
        rollout_tp=rtp, rollout_replicas=replicas, prompts_per_step=prompts, sequences_per_step=seqs,
        sequences_per_rollout_replica=-(-prompts // replicas) * r.n,  # the last replica may get fewer (padded)
        sequences_per_train_rank=seqs // dp,
        **_role_sizes("actor", actor_sizes),
        actor_token_budget=(config.actor.ppo_max_token_len_per_gpu * cp or None) if config.actor.use_dynamic_bsz else None,
        **_role_sizes("critic", critic_sizes), pools=pools, compile_choice=compile_why,
        expert_layout=(etp, ep, world // emp) if ep > 1 or config.train.expert_tensor_parallel_size is not None else None,
    )
    return config, sizes, problems


def _pools(problems: list[Problem], config: RunConfig, *, mp: int, seqs: int, on: dict[str, bool]) -> dict[str, tuple[int, int]] | None:
    """``role -> (workers, data-parallel ranks)`` for the roles given workers of their own; None after a problem."""
    pools: dict[str, tuple[int, int]] = {}
    before = len(problems)
    for role in ("critic", "ref", "reward_model"):
        section = getattr(config, role, None)  # reward_model: rl-reward-model's section
        if section is None:
            continue
        if section.n_gpus_per_node is None:
            if section.nnodes != 1:
                problems.append(Problem(key=f"{role}.nnodes", what=f"is {section.nnodes} but {role}.n_gpus_per_node is not set, so the {role} has no pool of its own",
                                        fix=f"set {role}.n_gpus_per_node too, or leave {role}.nnodes at 1"))
            continue
        if not on[role]:
            problems.append(Problem(key=f"{role}.n_gpus_per_node", what=f"gives the {role} workers of its own, but the run has no {role}",
                                    fix=f"remove {role}.n_gpus_per_node, or set {role}.enable=true"))
            continue
        workers = section.nnodes * section.n_gpus_per_node
        if section.nnodes > 1 and config.trainer.placement != "ray":
            problems.append(Problem(key=f"{role}.nnodes", what=f"is {section.nnodes}: a pool on several nodes needs Ray",
                                    fix="set trainer.placement=ray (docs/ray.md)"))
            continue
        if role == "reward_model":  # no train TP / PP: every worker scores its own share of the requests
            pools[role] = (workers, workers)
            continue
        if workers % mp:
            problems.append(Problem(key=f"{role}.n_gpus_per_node",
                                    what=f"the {role}'s {workers} devices ({role}.nnodes={section.nnodes} x {role}.n_gpus_per_node={section.n_gpus_per_node}) are not divisible by train TP x PP = {mp}",
                                    fix=f"give the {role} a multiple of {mp} devices"))
            continue
        pdp = workers // mp
        if seqs % pdp:
            problems.append(Problem(key=f"{role}.n_gpus_per_node",
                                    what=f"a step's {seqs} sequences cannot be split over the {role}'s {pdp} data-parallel ranks ({seqs} % {pdp} = {seqs % pdp})",
                                    fix=f"give the {role} a number of data-parallel ranks that divides {seqs}: {', '.join(map(str, nearest_divisors(pdp, seqs)))}"))
            continue
        pools[role] = (workers, pdp)
    return None if len(problems) > before else pools


def _rollout_workers(problems: list[Problem], config: RunConfig) -> int | None:
    """Workers of the rollout's own pool (``rollout.n_gpus_per_node``), None when it shares the actor's (what runs on
    such a pool, and its own checks, come from the rl-async package: Plan.rollout_pool)."""
    r = config.rollout
    if r.n_gpus_per_node is None:
        if r.nnodes != 1:
            problems.append(Problem(key="rollout.nnodes", what=f"is {r.nnodes} but rollout.n_gpus_per_node is not set, so the rollout has no pool of its own",
                                    fix="set rollout.n_gpus_per_node too, or leave rollout.nnodes at 1"))
        return None
    if r.nnodes != 1 and config.trainer.placement != "ray":  # Ray places the pool node by node (rl-placement-ray: rl_placement_ray.pools)
        problems.append(Problem(key="rollout.nnodes", what=f"is {r.nnodes}: a rollout pool on several nodes needs Ray (local placement has one node)",
                                fix="set rollout.nnodes=1, or trainer.placement=ray (docs/ray.md)"))
        return None
    return r.nnodes * r.n_gpus_per_node
