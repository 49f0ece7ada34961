"""model.compile (rl_train_fsdp.compile.compile_decoder_layers): micro-batches change their row count and length from one
to the next (rows skipped at zero advantage, longer responses); the compiled decoder layers take those dims as dynamic
from the first compile, so a new shape does not recompile (~10 s a time for a 7B model on an H100)."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def fresh_dynamo():
    import torch._dynamo

    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_decoder_layers_compile_once_for_every_row_count_and_length(fresh_dynamo):
    """Three micro-batches of other row counts and lengths (left padding: a 4-D mask), forward + backward under
    gradient checkpointing: one dynamo compile in all (the layers share it), the eager model's logits and gradients.
    Before, each new shape recompiled once (2 compiles here)."""
    from torch._dynamo.testing import CompileCounterWithBackend
    from transformers import AutoModelForCausalLM

    from rl_train_fsdp.compile import compile_decoder_layers
    from rl_core_testing.tiny_model import tiny_config

    torch.manual_seed(0)
    cfg = tiny_config("qwen2", hidden=32, layers=2)
    cfg._attn_implementation = "sdpa"
    eager, compiled = AutoModelForCausalLM.from_config(cfg), AutoModelForCausalLM.from_config(cfg)
    compiled.load_state_dict(eager.state_dict())
    for model in (eager, compiled):
        model.train()
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    counter = CompileCounterWithBackend("eager")  # dynamo alone (fast); aot_eager and inductor: the same (notes)
    assert compile_decoder_layers(compiled, backend=counter) == 2
    for rows, length in [(3, 9), (5, 6), (2, 12)]:  # rows != length: dynamo would unify equal sizes into one symbol
        ids = torch.randint(3, 200, (rows, length))
        mask = torch.ones(rows, length, dtype=torch.long)
        mask[0, :2] = 0
        pos = (mask.cumsum(1) - 1).clamp(min=0)
        results = []
        for model in (eager, compiled):
            model.zero_grad()
            logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False).logits
            logits.square().mean().backward()
            results.append((logits, [p.grad for p in model.parameters()]))
        (want, want_grads), (got, got_grads) = results
        torch.testing.assert_close(got, want)
        for g, w in zip(got_grads, want_grads):
            torch.testing.assert_close(g, w)
        assert counter.frame_count == 1, f"{rows} rows x {length} tokens: {counter.frame_count} compiles, 1 expected"
