"""model.compile over whole steps (issue 56): a compiled run compiles in its first step and never again.

The GSM8K example (model.compile=true) took 570 s for its first CPU step, 523 s of them in the reference pass: the
shared-prompt forward hands the decoder layers a KV cache, and dynamo guarded on it (each layer's index, whether the
cache's layer was filled, the cache tensors' sizes), so every step recompiled every layer until the recompile limit.
Here a tiny run with the reference model (KL loss), shared prompts (the CPU default) and responses of other lengths
each step is trained for 1 and for 3 steps with dynamo counting: the 3-step run compiles exactly what the 1-step run
did (steps 2 and 3 compile nothing) and dynamo reports no recompilation.
"""

from __future__ import annotations

import json

import pytest
import torch
from rl_core_testing.tiny_run import tiny_rows

from tests.e2e.helpers import read_metrics, write_tiny_run

pytest.importorskip("rl_train_fsdp", reason="needs the rl-train-fsdp plugin (pip install -e plugins/train_fsdp)")
pytestmark = pytest.mark.usefixtures("one_thread")


def _compiled_run(tmp_path, steps: int, monkeypatch, share) -> tuple[int, int, list[dict]]:
    """(graphs compiled, recompilations, metric rows) of a ``steps``-step compiled run in this process."""
    import rl_train_fsdp.compile as fsdp_compile
    import rl_train_fsdp.engine as fsdp_engine
    import torch._dynamo
    from rl_core.config.load import load_config
    from rl_core.plan.resolver import resolve
    from rl_core.trainer.loop import Trainer
    from torch._dynamo.testing import CompileCounterWithBackend
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    counter = CompileCounterWithBackend("eager")  # dynamo's guards and recompiles are the backend's business no more
    monkeypatch.setattr(fsdp_engine, "compile_decoder_layers", lambda model: fsdp_compile.compile_decoder_layers(model, backend=counter))
    cfg = write_tiny_run(
        tmp_path, steps=steps, model__compile=True, actor__use_kl_loss=True, actor__kl_loss_coef=0.01, rollout__n=2,
        data__max_response_length=12, model__share_prompt_forward=share,
    )
    rows = tiny_rows()
    for i, row in enumerate(rows):  # prompts of other lengths from batch to batch: the batches' shapes change
        row["prompt"][0]["content"] = "0+" * (i % 5) + row["prompt"][0]["content"]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    stack, problems = resolve(load_config(cfg))
    assert stack is not None, [p.render() for p in problems]
    assert stack.config.model.compile is True and stack.config.ref.enable
    trainer = Trainer(stack, progress=False)
    try:
        trainer.fit()
    finally:
        trainer.close()
    recompiles = sum(counters["recompiles"].values()) if "recompiles" in counters else 0
    frames, graphs = counter.frame_count, dict(counters["stats"]).get("unique_graphs", 0)
    torch._dynamo.reset()
    return frames, recompiles + max(0, graphs - frames), read_metrics(tmp_path / "out")


@pytest.mark.slow
@pytest.mark.parametrize("share", [None, True], ids=["default", "shared-prompts"])
def test_a_compiled_run_compiles_in_its_first_step_only(tmp_path, monkeypatch, share):
    """``share=None``: model.compile turns the CPU's shared-prompt forward off, every train-side forward compiled;
    ``share=True``: the shared-prompt forwards (a KV cache) run eagerly: before the fix they recompiled (18 graphs
    after 1 step, 24 after 3 here)."""
    one_frames, _, _ = _compiled_run(tmp_path / "one", 1, monkeypatch, share)
    three_frames, three_recompiles, rows = _compiled_run(tmp_path / "three", 3, monkeypatch, share)
    assert len(rows) == 3
    lengths = {(row["prompt_length/mean"], row["response_length/mean"]) for row in rows}
    assert len(lengths) == 3, f"the steps' batches had the same lengths ({lengths}): the test would not see a shape change"
    assert share or one_frames >= 1, "nothing was compiled: model.compile did not reach the decoder layers"
    assert three_frames == one_frames, f"steps 2 and 3 compiled {three_frames - one_frames} more graph(s) than step 1 alone"
    assert three_recompiles == 0, f"dynamo recompiled {three_recompiles} time(s) over 3 steps"


def test_a_call_with_a_kv_cache_runs_the_layers_eagerly_with_the_same_result():
    """The shared-prompt reference pass (a KV cache through the layers): no graph compiled, eager's log-probs."""
    from rl_core.modeling import forward_response, position_ids_from_mask
    from rl_train_fsdp.compile import compile_decoder_layers
    from rl_core_testing.tiny_model import tiny_config
    from torch._dynamo.testing import CompileCounterWithBackend
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    cfg = tiny_config("qwen2", hidden=32, layers=2)
    cfg._attn_implementation = "sdpa"
    eager, compiled = AutoModelForCausalLM.from_config(cfg).eval(), AutoModelForCausalLM.from_config(cfg).eval()
    compiled.load_state_dict(eager.state_dict())
    counter = CompileCounterWithBackend("eager")
    compile_decoder_layers(compiled, backend=counter)
    for groups, n, P, R in [(2, 4, 7, 5), (3, 4, 9, 6), (2, 4, 11, 8)]:
        ids = torch.randint(3, 200, (groups * n, P + R))
        ids[:, :P] = ids[::n, :P].repeat_interleave(n, 0)
        mask = torch.ones_like(ids)
        mask[:, 0] = 0
        pos = position_ids_from_mask(mask)
        with torch.no_grad():
            want, _ = forward_response(eager, ids, mask, pos, ids[:, P:], share_prompts=True)
            got, _ = forward_response(compiled, ids, mask, pos, ids[:, P:], share_prompts=True)
            plain, _ = forward_response(compiled, ids, mask, pos, ids[:, P:], share_prompts=False)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(plain, want, rtol=1e-5, atol=1e-5)
    assert counter.frame_count == 1, f"{counter.frame_count} graphs: the cache-free forward compiles once, the cached one never"


def test_rlcore_check_says_what_auto_chose_and_why(tmp_path):
    from rl_core.config.normalize import MIN_STEPS, resolve_compile
    from rl_core.config.load import load_config
    from rl_core.config.normalize import normalize

    from tests.reliability.runs import cli

    cfg = write_tiny_run(tmp_path, model__compile="auto")
    code, out, err = cli("check", str(cfg))
    assert code == 0, out + err
    (row,) = [line for line in out.splitlines() if line.strip().startswith("model.compile")]
    assert "auto -> eager: on a CPU" in row, row
    normalized, _, _ = normalize(load_config(cfg))
    assert normalized.model.compile is False
    code, out, err = cli("check", str(cfg), "model.compile=true")
    assert code == 0 and "warning: model.compile: model.compile=true on a CPU" in err and "model.compile=auto picks eager" in err, err
    gpu = load_config(cfg, ["trainer.device=cuda", f"trainer.total_training_steps={MIN_STEPS - 1}"])
    compiled, why = resolve_compile("auto", "cuda", gpu)
    assert compiled is False and "a short run" in why, why
    long = load_config(cfg, ["trainer.device=cuda", f"trainer.total_training_steps={MIN_STEPS}"])
    assert resolve_compile("auto", "cuda", long)[0] is True
    assert resolve_compile(True, "cpu", long) == (True, "") and resolve_compile(False, "cuda", long) == (False, "")
