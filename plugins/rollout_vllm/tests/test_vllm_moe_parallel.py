"""``rollout.data_parallel_size`` / ``rollout.expert_parallel_size`` on vLLM (verl's rollout DP attention and EP):
the resolver's arithmetic, this plugin's checks, and the arguments the engine is built with, read back through
vLLM's own ``ParallelConfig`` where vLLM is installed (no engine start: vLLM's CPU build has no MoE kernels)."""

from __future__ import annotations

import os
import types

import pytest
from rl_core.backends import WorkerContext
from rl_core.config.load import load_config
from rl_core.problems import errors
from rl_rollout_vllm.plugin import VLLM_ROLLOUT, parallel_kwargs
from rl_rollout_vllm.replicas import engine_rank_env

from test_vllm_plugin import _model, _resolve, vllm_cpu_version  # noqa: F401  (fixture)

GPUS8 = ("trainer.device=cuda", "trainer.n_gpus_per_node=8", "data.train_batch_size=8", "actor.ppo_mini_batch_size=8",
         "actor.ppo_micro_batch_size_per_gpu=1")


def _errs(tmp_path, *overrides):
    stack, problems = _resolve(_model(tmp_path, 128, 2), *GPUS8, *overrides)
    return stack, errors(problems)


def test_card_lists_both(vllm_cpu_version):
    assert VLLM_ROLLOUT.moe_parallel == {"ep", "dp_attention"}


def test_dp_attention_and_ep_over_the_whole_rollout_resolve(tmp_path, vllm_cpu_version):
    stack, errs = _errs(tmp_path, "rollout.tensor_model_parallel_size=2", "rollout.data_parallel_size=4", "rollout.expert_parallel_size=8")
    assert stack is not None and not errs, [p.render() for p in errs]
    stack, errs = _errs(tmp_path, "rollout.tensor_model_parallel_size=8", "rollout.expert_parallel_size=8")
    assert stack is not None and not errs, [p.render() for p in errs]


@pytest.mark.parametrize(
    "overrides, key, words",
    [
        # verl's rule: the experts spread over the engine's TP x DP ranks (235b_a22b's ep=64 with TP 8, DP 1 is refused)
        (("rollout.tensor_model_parallel_size=8", "rollout.expert_parallel_size=64"), "rollout.expert_parallel_size", "8 x 1 = 8 ranks"),
        (("rollout.tensor_model_parallel_size=4", "rollout.expert_parallel_size=2"), "rollout.expert_parallel_size", "set rollout.expert_parallel_size=4"),
        (("rollout.tensor_model_parallel_size=2", "rollout.data_parallel_size=3"), "rollout.data_parallel_size", "does not divide the rollout's 8 devices"),
        (("rollout.data_parallel_size=2", "rollout.multi_turn.enable=true"), "rollout.data_parallel_size", "lockstep"),
    ],
)
def test_bad_sizes_are_refused_by_key(tmp_path, vllm_cpu_version, overrides, key, words):
    stack, errs = _errs(tmp_path, *overrides)
    assert stack is None and [p.key for p in errs] == [key], [p.render() for p in errs]
    assert words in errs[0].render()


def test_engines_side_by_side_resolve(tmp_path, vllm_cpu_version):
    """Several engines of TP x DP over the rollout's devices (rl_rollout_vllm.replicas): 2 of TP 2 x DP 2 on 8 GPUs, 4 of
    TP 1 x DP 2 with EP 2; verl's DeepSeek-V4 layout (TP 1 x DP 4, EP 4, 16 engines over 8 nodes of 8) too."""
    for overrides in (("rollout.tensor_model_parallel_size=2", "rollout.data_parallel_size=2"),
                      ("rollout.data_parallel_size=2", "rollout.expert_parallel_size=2"),
                      ("trainer.nnodes=8", "trainer.placement=ray", "data.train_batch_size=64", "actor.ppo_mini_batch_size=64",
                       "rollout.data_parallel_size=4", "rollout.expert_parallel_size=4")):
        stack, errs = _errs(tmp_path, *overrides)
        assert stack is not None and not errs, (overrides, [p.render() for p in errs])


def _measure():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("verl_scripts_measure", Path(__file__).parents[3] / "bench/verl_scripts/measure.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


DSV4 = "examples/grpo_trainer/run_deepseek_v4_flash_megatron.sh"
ROLLOUT = "actor_rollout_ref.rollout."


def _verl_script_problems(tmp_path, replace=()):
    """What ``rlcore check`` says of verl's DeepSeek-V4 script (model and data replaced, as bench/verl_scripts measures),
    with ``replace`` (key -> value) changed in it."""
    import json
    from pathlib import Path

    from rl_core.plugins import get_registry

    pytest.importorskip("rl_verl", reason="verl's launch scripts are read by the rl-verl plugin")
    m = _measure()
    scripts = json.loads((Path(__file__).parents[3] / "plugins/verl/tests/verl_scripts/scripts.json").read_text())["scripts"]
    overrides = [f"{o.split('=', 1)[0]}={dict(replace)[o.split('=', 1)[0]]}" if o.split("=", 1)[0] in dict(replace) else o
                 for o in scripts[DSV4]["overrides"]]
    rows = (Path(__file__).parents[3] / m.FIXTURE).read_text().splitlines()
    data = tmp_path / "train.jsonl"
    data.write_text("\n".join(rows * (4096 // len(rows))) + "\n")
    return m.check(overrides, str(data), get_registry(), m.reward_model_folder(tmp_path / "rm"), m.standin_dataset(tmp_path / "ds.py"), str(tmp_path))


@pytest.mark.slow
def test_verl_deepseek_v4_rollout_layout(tmp_path):
    """verl's run_deepseek_v4_flash_megatron.sh: its rollout of 16 engines of TP 1 x DP 4 with EP 4 over 64 GPUs draws no
    refusal of a rollout key; with TP x DP = 6 (EP 6), which does not divide 64, the refusal names the key as the script
    wrote it and the sizes that fit."""
    # (enable_rollout_routing_replay depends on the engine installed here: vllm-cpu refuses it, vLLM 0.26 returns them)
    layout = lambda problems: [p for p in problems if p.key.startswith(ROLLOUT) and not p.key.endswith("routing_replay")]  # noqa: E731
    problems = layout(_verl_script_problems(tmp_path))
    assert not problems, [p.render() for p in problems]
    (p,) = layout(_verl_script_problems(tmp_path, {f"{ROLLOUT}data_parallel_size": 6, f"{ROLLOUT}expert_parallel_size": 6}))
    assert p.key == f"{ROLLOUT}data_parallel_size" and "TP x DP = 1 x 6 = 6 devices, which does not divide the rollout's 64 devices" in p.what, p.render()
    assert "1, 2, 4, 8, 16, 32, 64" in p.fix, p.render()


def test_engine_kwargs_cannot_set_them_behind_rl_cores_back(tmp_path, vllm_cpu_version):
    stack, errs = _errs(tmp_path, "rollout.engine_kwargs.enable_expert_parallel=true")
    assert stack is None and "rollout.expert_parallel_size" in errs[0].render()


def _engine_kwargs(*overrides, rank=0, world=8, local_rank=None, device="cuda"):
    """The ``vllm.LLM`` arguments VLLMRollout builds for ``rank`` (its set-up without starting vLLM)."""
    from rl_rollout_vllm.engine import VLLMRollout

    cfg = load_config(overrides=["model.path=/m", "rollout.name=vllm", "trainer.device=cuda", *overrides])
    engine = VLLMRollout.__new__(VLLMRollout)
    local = rank if local_rank is None else local_rank
    engine.config, engine.context = cfg, WorkerContext(rank=rank, world_size=world, local_rank=local, device=device)
    engine.tp, engine.lora_rank, engine.device_type = cfg.rollout.tensor_model_parallel_size, 0, "cuda"
    engine.sleep_enabled, engine.external = False, True
    engine.precision = cfg.rollout.precision
    return engine._llm_kwargs({})


def test_the_engine_is_built_with_vllms_arguments(monkeypatch):
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    kwargs = _engine_kwargs("rollout.tensor_model_parallel_size=2", "rollout.data_parallel_size=4", "rollout.expert_parallel_size=8", rank=5)
    assert (kwargs["tensor_parallel_size"], kwargs["data_parallel_size"], kwargs["enable_expert_parallel"]) == (2, 4, True)
    assert kwargs["distributed_executor_backend"] == "external_launcher"
    plain = _engine_kwargs("rollout.tensor_model_parallel_size=2")
    assert "data_parallel_size" not in plain and "enable_expert_parallel" not in plain
    assert parallel_kwargs(types.SimpleNamespace(data_parallel_size=1, expert_parallel_size=4)) == {"enable_expert_parallel": True}
    try:
        from vllm.config import ParallelConfig
    except Exception:  # noqa: BLE001
        pytest.skip("vLLM is not importable here (its own venv runs this)")
    # what vLLM makes of them on rank 5: one engine of TP 2 x DP 4 = 8 ranks, DP rank 5 // 2 = 2, experts spread
    assert kwargs is not None and os.environ["RANK"] == "5"
    names = ("tensor_parallel_size", "data_parallel_size", "enable_expert_parallel", "distributed_executor_backend")
    pc = ParallelConfig(**{k: kwargs[k] for k in names})
    assert (pc.world_size, pc.data_parallel_size, pc.data_parallel_rank, pc.enable_expert_parallel) == (8, 4, 2, True)
    # rank 13 of 16: the second engine. vLLM alone derives DP rank 13 // 2 = 6 and refuses; built as the engine builds it
    # (rl_rollout_vllm.replicas: RANK is 13 % 8 = 5 meanwhile), DP rank 2 of that engine, and RANK is 13 again after
    monkeypatch.delenv("RANK")
    kwargs = _engine_kwargs("rollout.tensor_model_parallel_size=2", "rollout.data_parallel_size=4", "rollout.expert_parallel_size=8", rank=13, world=16)
    assert os.environ["RANK"] == "13"
    with pytest.raises(ValueError, match=r"data_parallel_rank \(6\)"):
        ParallelConfig(**{k: kwargs[k] for k in names})
    with engine_rank_env(13, kwargs) as local:
        pc = ParallelConfig(**{k: kwargs[k] for k in names})
    assert (local, pc.world_size, pc.data_parallel_rank, os.environ["RANK"]) == (5, 8, 2, "13")
    with engine_rank_env(13, {**kwargs, "data_parallel_size": 1}) as local:  # no DP: vLLM does not read it, nothing changes
        assert (local, os.environ["RANK"]) == (None, "13")


def test_a_tp_group_across_ray_nodes_gets_its_gpu_and_the_node_address(monkeypatch):
    """TP 16 over two Ray nodes of 8: rank 13 (the 6th on the second node) sees only its own GPU as cuda:0, so vLLM's
    LOCAL_RANK is 0, not 5; vLLM's cross-node broadcast queue binds the address the node registered with Ray."""
    import os
    import sys

    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "VLLM_HOST_IP"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(
        is_initialized=lambda: True, util=types.SimpleNamespace(get_node_ip_address=lambda: "10.0.0.2")))
    kwargs = _engine_kwargs("rollout.tensor_model_parallel_size=16", rank=13, world=16, local_rank=5, device="cuda:0")
    assert (kwargs["tensor_parallel_size"], kwargs["distributed_executor_backend"]) == (16, "external_launcher")
    assert (os.environ["RANK"], os.environ["LOCAL_RANK"], os.environ["WORLD_SIZE"], os.environ["VLLM_HOST_IP"]) == ("13", "0", "16", "10.0.0.2")
    # a user's VLLM_HOST_IP is kept; local placement (cuda:LOCAL_RANK, no Ray worker) sets none
    monkeypatch.setenv("VLLM_HOST_IP", "10.9.9.9")
    monkeypatch.delenv("LOCAL_RANK")
    _engine_kwargs("rollout.tensor_model_parallel_size=16", rank=13, world=16, local_rank=5, device="cuda:0")
    assert os.environ["VLLM_HOST_IP"] == "10.9.9.9"
    monkeypatch.delitem(sys.modules, "ray")
    for key in ("LOCAL_RANK", "VLLM_HOST_IP"):
        monkeypatch.delenv(key)
    _engine_kwargs("rollout.tensor_model_parallel_size=2", rank=3, world=8, local_rank=3, device="cuda:3")
    assert os.environ["LOCAL_RANK"] == "3" and "VLLM_HOST_IP" not in os.environ
    try:
        from vllm.config import ParallelConfig
        from vllm.utils.network_utils import get_ip
    except Exception:  # noqa: BLE001
        pytest.skip("vLLM is not importable here (its own venv runs this)")
    # vLLM's own reading of them: one TP group of 16 ranks (nothing about nodes: the process group spans them), and
    # the address its queue binds is the one given
    pc = ParallelConfig(tensor_parallel_size=16, distributed_executor_backend="external_launcher")
    assert (pc.world_size, pc.nnodes) == (16, 1)
    monkeypatch.setenv("VLLM_HOST_IP", "10.0.0.2")
    assert get_ip() == "10.0.0.2"
