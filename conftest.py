"""Fixtures shared by the core's tests (tests/) and every plugin's (plugins/*/tests).

``one_thread``: one torch thread for a whole test module (``pytestmark = pytest.mark.usefixtures("one_thread")``):
the same kernels, so the same sums to the last bit, and no oversubscription of a small CI machine.

``tiny_model_dir``: ``tiny_model_dir(arch, **sizes)`` is :func:`rl_core_testing.tiny_model.make_tiny_model_dir`
built once per test session for each set of arguments (the function is deterministic, so every caller gets the
same weights it would build itself). The folder is shared: read it, never write into it.

``rlcore_forkserver`` (session): a multiprocessing context whose forkserver imported torch, transformers, rl-core and
the backends once (FORKSERVER_PRELOAD): processes started from it cost their work, not their imports. Every session
also starts :func:`rl_core_testing.distributed.run_distributed`'s ranks from it (each still gets the caller's
environment and folder; not where CUDA is available: ranks are spawned there, since a fork of a process that touched
CUDA cannot use it); plugins/testing/tests/test_kit_distributed.py checks the default spawn start as well.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os

import pytest

# torch's structured trace (torch._logging.trace_structured: every dynamo / inductor compile) logs DEBUG records with
# an empty message to the "torch.__trace" logger, their payload meant for TORCH_TRACE's own handler. The logger does
# not propagate, but pytest (>= 8) attaches its capture handlers to every non-propagating logger as well: one failing
# test's report carried ~680 blank "DEBUG torch.__trace" lines (issue 56). Off unless TORCH_TRACE asks for the trace.
if not os.environ.get("TORCH_TRACE"):
    logging.getLogger("torch.__trace").disabled = True

# modules a missing package leaves out (the forkserver skips what does not import: e.g. megatron-core in a venv without it)
FORKSERVER_PRELOAD = [
    "torch", "transformers", "rl_core.cli.main", "rl_core.trainer.loop", "rl_core.placement.worker", "rl_train_fsdp.engine",
    "megatron.core", "rl_train_megatron.engine",
]


def forkserver_context():
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(FORKSERVER_PRELOAD)
    return context


@pytest.fixture(scope="session")
def rlcore_forkserver():
    """The forkserver context (above): ``rlcore`` children started from it (tests.reliability.cli_child.run_cli)."""
    return forkserver_context()


@pytest.fixture(scope="session", autouse=True)
def _ranks_start_from_the_forkserver():
    import torch

    from rl_core_testing import distributed

    if torch.cuda.is_available():  # the preloaded megatron-core touches CUDA in the forkserver: its children could not use it
        yield
        return
    previous = distributed.start_ranks_from(forkserver_context())
    yield
    distributed.start_ranks_from(previous)


@pytest.fixture(scope="module")
def one_thread():
    from rl_core_testing.distributed import torch_threads

    with torch_threads(1):
        yield


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    from rl_core_testing.tiny_model import make_tiny_model_dir

    built: dict[tuple, str] = {}

    def get(arch: str = "llama", **sizes):
        key = (arch, tuple(sorted(sizes.items())))
        if key not in built:
            built[key] = make_tiny_model_dir(tmp_path_factory.mktemp(f"tiny_{arch}"), arch, **sizes)
        return built[key]

    return get
