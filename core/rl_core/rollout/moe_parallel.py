"""The generic checks of MoE parallelism inside one rollout engine (verl's sizes): ``rollout.data_parallel_size`` (DP
attention: one engine spans TP x DP devices, which must divide the rollout's) and ``rollout.expert_parallel_size``
(1, or TP x DP: the experts spread over all the engine's ranks, as verl requires). Which engines run them is on their
card (``RolloutCard.moe_parallel``).
"""

from __future__ import annotations

from rl_core.problems import Problem


def rollout_devices(config) -> int:
    """Devices (CPU: processes) the rollout runs on: its own pool, or the actor's workers."""
    r, t = config.rollout, config.trainer
    if r.n_gpus_per_node is not None:
        return r.nnodes * r.n_gpus_per_node
    return t.nnodes * t.n_gpus_per_node


def engine_size(config) -> int:
    """Ranks of one engine: TP x DP."""
    return config.rollout.tensor_model_parallel_size * config.rollout.data_parallel_size


def moe_parallel_problems(config, card, installed: str = "") -> list[Problem]:
    """Refusals of ``rollout.data_parallel_size`` / ``rollout.expert_parallel_size`` the chosen card cannot run,
    and of sizes that do not fit (``installed``: the engines that run them, for the fix)."""
    r = config.rollout
    tp, dp, ep = r.tensor_model_parallel_size, r.data_parallel_size, r.expert_parallel_size
    problems: list[Problem] = []
    name = card.name if card is not None else r.name
    offered = card.moe_parallel if card is not None else frozenset()
    for cap, key, size, what in (
        ("dp_attention", "rollout.data_parallel_size", dp, "data-parallel attention"),
        ("ep", "rollout.expert_parallel_size", ep, "expert parallelism"),
    ):
        if size > 1 and card is not None and cap not in offered:
            problems.append(Problem(
                key=key,
                what=f"is {size} but rollout backend {name!r} does not run {what} (its card lists {', '.join(sorted(offered)) or 'no MoE parallelism'})",
                fix=f"set {key}=1, or use a rollout backend with {what}{installed}"))
    if problems:
        return problems
    if ep > 1 and ep != tp * dp:
        problems.append(Problem(
            key="rollout.expert_parallel_size",
            what=f"is {ep} but the engine has rollout.tensor_model_parallel_size x rollout.data_parallel_size = {tp} x {dp} = {tp * dp} ranks",
            why="the experts are spread over all the ranks of one engine (an engine's expert parallelism has no size of its own); verl itself "
                "refuses this too (its RolloutConfig asserts expert_parallel_size == tensor_model_parallel_size x data_parallel_size)",
            fix=f"set rollout.expert_parallel_size={tp * dp}, or 1 (no expert parallelism), or change TP / DP so that TP x DP = {ep}"))
    devices = rollout_devices(config)
    if dp > 1 and devices % (tp * dp):
        problems.append(Problem(
            key="rollout.data_parallel_size",
            what=f"one engine spans TP x DP = {tp} x {dp} = {tp * dp} devices, which does not divide the rollout's {devices} devices",
            fix=f"choose TP x DP among the divisors of {devices}: " + ", ".join(str(x) for x in range(1, devices + 1) if devices % x == 0)))
    return problems
