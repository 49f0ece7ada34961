"""model.compile with data parallelism (issue 54): a rank's row count changes from step to step (zero-advantage rows
left out, uneven shards of a filtered batch), and fixed micro-batches of k rows then end in a one-row micro-batch
whenever rows % k == 1. Dynamo specialises dims of size 1 even when marked dynamic, so that one row compiled the
decoder layers again (~10 s a time on an H100). rl_core.train_engine.micro_batches.micro_row_slices moves a row
from the micro-batch before: the compiled layers compile once over all the steps."""

from __future__ import annotations

import pytest
from rl_core.train_engine.micro_batches import micro_row_slices

pytestmark = pytest.mark.usefixtures("one_thread")

ROWS_PER_STEP = [7, 5, 9, 6, 13, 3]  # one rank's rows over six steps; 5, 9 and 13 leave one row over at k = 4


def test_micro_row_slices_cover_every_row_once_without_a_one_row_tail():
    for micro in (1, 2, 3, 4, 8):
        for rows in range(1, 40):
            slices = micro_row_slices(rows, micro, compiled=True)
            assert [i for s in slices for i in range(rows)[s]] == list(range(rows))
            sizes = [s.stop - s.start for s in slices]
            assert max(sizes) <= micro and len(sizes) == -(-rows // micro)
            if micro > 2 and rows > 1:
                assert min(sizes) > 1, (rows, micro, sizes)
    assert [s.stop - s.start for s in micro_row_slices(9, 4, compiled=True)] == [4, 3, 2]
    assert [s.stop - s.start for s in micro_row_slices(9, 4)] == [4, 4, 1]  # eager: the plain split
    assert [s.stop - s.start for s in micro_row_slices(8, 4, compiled=True)] == [4, 4]  # unchanged where nothing is left over


def _compiles(split) -> int:
    import torch._dynamo
    from rl_train_fsdp.compile import compile_decoder_layers
    from rl_core_testing.tiny_model import tiny_config
    from torch._dynamo.testing import CompileCounterWithBackend
    from transformers import AutoModelForCausalLM

    torch._dynamo.reset()
    torch.manual_seed(0)
    cfg = tiny_config("qwen2", hidden=32, layers=2)
    cfg._attn_implementation = "sdpa"
    model = AutoModelForCausalLM.from_config(cfg).train()
    counter = CompileCounterWithBackend("eager")
    compile_decoder_layers(model, backend=counter)
    try:
        for step, rows in enumerate(ROWS_PER_STEP):
            length = 9 + step  # and a new padded length each step
            ids = torch.randint(3, 200, (rows, length))
            mask = torch.ones(rows, length, dtype=torch.long)
            for i in range(rows):  # left padding in every micro-batch (an all-ones one takes another mask path)
                mask[i, : 1 + i % 3] = 0
            for sl in split(rows, 4):
                pos = (mask[sl].cumsum(1) - 1).clamp(min=0)
                model(input_ids=ids[sl], attention_mask=mask[sl], position_ids=pos, use_cache=False).logits.square().mean().backward()
        return counter.frame_count
    finally:
        torch._dynamo.reset()


def test_changing_row_counts_over_steps_compile_the_layers_once():
    def fixed(rows, micro):  # the split before: k rows, the rest last
        return [slice(s, min(s + micro, rows)) for s in range(0, rows, micro)]

    assert _compiles(fixed) >= 2  # the one-row micro-batches compiled again (3 compiles with torch 2.11)
    assert _compiles(lambda rows, micro: micro_row_slices(rows, micro, compiled=True)) == 1
