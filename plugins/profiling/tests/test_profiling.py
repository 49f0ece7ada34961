"""profiler.* (rl_profiling.profiling; verl's global_profiler with tool=torch): torch.profiler traces of the chosen steps,
roles and ranks, written under profiler.save_path; nothing for the other steps. The trainer's side (the step set on
every worker, 2 processes) is checked in tests/e2e/test_loop.py::test_two_step_job[grpo-2]."""

from __future__ import annotations

import json

import torch
from rl_core.config.load import load_config
from rl_core.placement.contract import dispatch
from rl_profiling.checks import problems
from rl_profiling.profiling import StepProfiler, profiled_roles


class _Worker:
    def __init__(self, profiler):
        self.profiler = profiler

    def update_actor(self, x):
        return (torch.ones(8, 8) @ x).sum().item()

    def generate(self, x):
        return x.sum().item()

    def profile_step(self, step):
        self.profiler.set_step(step)


def test_only_the_chosen_steps_roles_and_ranks_are_recorded(tmp_path):
    cfg = load_config(None, ["profiler.tool=torch", "profiler.steps=[2]", "profiler.actor=true", f"profiler.save_path={tmp_path}"])
    assert profiled_roles(cfg) == {"actor"}
    assert StepProfiler.for_worker(cfg, rank=1) is None  # rank 1 is not among profiler.ranks ([0])
    worker = _Worker(StepProfiler.for_worker(cfg, rank=0))
    x = torch.ones(8, 1)
    assert dispatch(worker, "update_actor", (x,)) == 64.0  # no step set: not recorded
    dispatch(worker, "profile_step", (2,))
    dispatch(worker, "update_actor", (x,))
    dispatch(worker, "generate", (x,))  # the rollout's call: rollout not chosen
    dispatch(worker, "profile_step", (None,))
    dispatch(worker, "update_actor", (x,))
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert files == ["step_2/actor_update_actor_rank0.json"]
    events = json.loads((tmp_path / files[0]).read_text())["traceEvents"]
    assert any(e.get("name") == "actor.update_actor" for e in events) and any("matmul" in str(e.get("name")) for e in events)
    assert load_config(None, ["profiler.tool=torch", "profiler.steps=[1]"]).profiler.tool == "torch"
    assert profiled_roles(load_config(None, [])) == {"actor", "rollout", "ref", "critic", "reward_model"}  # none set: every role


def test_profiler_rules():
    def errors(*overrides):
        return [p.key for p in problems(load_config(None, list(overrides))) if p.severity == "error"]

    assert errors("profiler.tool=torch", "profiler.steps=[1]") == []
    # with async.max_staleness > 0: rl-async's check (plugins/async_rl/tests/test_async_config_section.py)
    assert errors("profiler.tool=torch", "profiler.steps=[0]") == ["profiler.steps"]


def test_nsys_marks_the_chosen_calls_and_opens_the_capture_range(monkeypatch, tmp_path):
    """tool=nsys: NVTX range per chosen call, cudaProfilerStart/Stop per step (discrete=false) or per call (true);
    the CUDA calls are recorded here (no GPU), and nothing is written."""
    calls = []
    monkeypatch.setattr(torch.cuda.profiler, "start", lambda: calls.append("start"))
    monkeypatch.setattr(torch.cuda.profiler, "stop", lambda: calls.append("stop"))
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda name: calls.append(f"push {name}"))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: calls.append("pop"))
    x = torch.ones(8, 1)
    for discrete, want in ((False, ["start", "push actor.update_actor", "pop", "stop"]),
                           (True, ["start", "push actor.update_actor", "pop", "stop"] * 2)):
        calls.clear()
        cfg = load_config(None, ["profiler.tool=nsys", "profiler.steps=[2]", "profiler.actor=true", f"profiler.discrete={discrete}",
                                 f"profiler.save_path={tmp_path}", "trainer.device=cuda"])
        worker = _Worker(StepProfiler.for_worker(cfg, rank=0, device="cuda:0"))
        dispatch(worker, "update_actor", (x,))  # step 1: nothing
        dispatch(worker, "profile_step", (2,))
        dispatch(worker, "update_actor", (x,))
        dispatch(worker, "generate", (x,))  # not a chosen role
        if discrete:
            dispatch(worker, "update_actor", (x,))
        dispatch(worker, "profile_step", (None,))
        dispatch(worker, "update_actor", (x,))
        assert calls == want, discrete
    assert not list(tmp_path.rglob("*"))
    import pytest

    with pytest.raises(ValueError, match="profiler.tool=nsys on a cpu worker"):
        StepProfiler.for_worker(cfg, rank=0, device="cpu")


def test_nsys_rules():
    def found(*overrides):
        return [(p.key, p.severity) for p in problems(load_config(None, list(overrides)))]

    assert found("profiler.tool=nsys", "profiler.steps=[1]", "trainer.device=cuda") == [("profiler.tool", "warning")]  # run it under nsys
    assert found("profiler.tool=nsys", "profiler.steps=[1]", "trainer.device=cpu") == [("profiler.tool", "error")]
    assert found("profiler.tool=nsys", "profiler.steps=[1]", "trainer.device=cuda", "trainer.placement=ray") == [("profiler.tool", "error")]



def test_without_the_package_profiler_keys_name_it(monkeypatch):
    from rl_core import plugins
    from rl_core.config.load import load_report

    monkeypatch.setenv(plugins.BLOCK_ENV, "rl-profiling")
    try:
        plugins.get_registry(reload=True)
        errors = {p.key: p.render() for p in load_report(None, ["profiler.tool=torch", "profiler.steps=[1]"]).problems if p.severity == "error"}
        assert "pip install rl-profiling" in errors["profiler"], errors
        assert load_report(None, []).config is not None  # a config without the section reads as before
    finally:
        monkeypatch.delenv(plugins.BLOCK_ENV)
        plugins.get_registry(reload=True)


def test_the_feature_hooks_say_which_steps_and_workers_record(tmp_path):
    from rl_core.plugins import get_registry
    from rl_core.plan.features import resolve_features

    cfg = load_config(None, ["profiler.tool=torch", "profiler.steps=[2]", f"profiler.save_path={tmp_path}"])
    features, problems = resolve_features(cfg, get_registry())
    assert problems == []
    profiled_step = features.hook(cfg, "profiled_step")
    assert [s for s in (1, 2, 3) if profiled_step(cfg, s)] == [2]
    assert isinstance(features.hook(cfg, "worker_profiler")(cfg, 0, "cpu"), StepProfiler)
    assert features.hook(load_config(None, []), "profiled_step") is None  # profiler.tool unset: the feature is off
