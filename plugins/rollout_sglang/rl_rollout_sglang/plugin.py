"""Entry point of rl-rollout-sglang: the ``sglang`` rollout card and its checks.

Light on purpose: the resolver reads this module for every ``rlcore check``,
so nothing here imports SGLang (or torch). The engine is imported by the
factory, :func:`rl_rollout_sglang.engine.build`, inside a worker.

What the core resolver checks from the card alone, and is not repeated here:
the engine is installed (``sglang``; the problem names the package to
install), its version is in ``engine_versions`` (outside it: an error, or a
warning with ``RL_CORE_ALLOW_UNTESTED_ENGINE=1``), devices, TP that divides
the devices and stays within ``max_tp``, and weight formats.
"""

from __future__ import annotations

from rl_core import hookimpl
from rl_core.cards import RolloutCard
from rl_core.problems import Problem


def check_engine_kwargs(config) -> list[Problem]:
    """Settings only this engine reads: the server URL and the weight-sync bucket size."""
    problems = []
    kwargs = dict(config.rollout.engine_kwargs or {})
    url = kwargs.get("server_url")
    if url is not None and not (isinstance(url, str) and url.startswith(("http://", "https://"))):
        problems.append(
            Problem(
                key="rollout.engine_kwargs.server_url",
                what=f"{url!r} is not an http(s) URL",
                fix="set it to the running SGLang server's address, e.g. http://127.0.0.1:30000, or remove it to start the engine in each worker",
            )
        )
    if url and config.trainer.nnodes > 1:
        problems.append(
            Problem(
                key="rollout.engine_kwargs.server_url",
                what=f"one SGLang server at {url} cannot serve {config.trainer.nnodes} nodes",
                why="weight sync hands tensors to the server through the operating system, so it must run on the worker's machine",
                fix="remove rollout.engine_kwargs.server_url (each worker then starts its own engine), or train on one node",
            )
        )
    mb = kwargs.get("weight_sync_bucket_mb")
    if mb is not None and (isinstance(mb, bool) or not isinstance(mb, (int, float)) or mb <= 0):
        problems.append(
            Problem(
                key="rollout.engine_kwargs.weight_sync_bucket_mb",
                what=f"must be a positive number of MiB, got {mb!r}",
                fix="e.g. rollout.engine_kwargs.weight_sync_bucket_mb=256 (smaller: less peak memory, more calls)",
            )
        )
    return problems


SGLANG_ROLLOUT = RolloutCard(
    name="sglang",
    factory="rl_rollout_sglang.engine:build",
    description="SGLang offline engine in each worker (or a running server); TP by SGLang; memory release / resume on GPU",
    devices={"cpu", "cuda"},
    max_tp=8,
    weight_formats={"hf"},
    colocate=True,
    logprobs=True,
    engine="sglang",
    engine_versions="==0.5.23",
    checks=(check_engine_kwargs,),
)


@hookimpl
def rl_core_register_rollout_backends(register):
    register(SGLANG_ROLLOUT)
