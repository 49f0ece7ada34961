"""A failing test's report holds no flood of empty DEBUG lines (issue 56): torch's structured-trace logger, which
dynamo / inductor feed with empty DEBUG records on every compile, is off in test sessions without TORCH_TRACE
(conftest.py; pytest attaches its capture handlers to non-propagating loggers too)."""

from __future__ import annotations

import logging


def test_a_compile_logs_no_empty_debug_records(caplog):
    import torch
    import torch._dynamo

    caplog.set_level(logging.DEBUG)
    torch._dynamo.reset()
    fn = torch.compile(lambda x: (x.sin() + 1).relu(), backend="eager")
    fn(torch.randn(4, 4))
    empty = [r for r in caplog.records if not r.getMessage().strip()]
    assert not empty, f"{len(empty)} empty log records from {sorted({r.name for r in empty})}"
    torch._dynamo.reset()
