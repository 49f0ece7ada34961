"""Test set-up for rl-rollout-vllm.

The environment vLLM needs on a CPU machine is set here (only where the
caller set nothing), so CI gets it without shell exports. Tests that need
the engine skip at import, with the reason, where vLLM is not importable; the pure tests (card, checks, resolver, batch
conversion, buckets) run everywhere, with the package put on ``sys.path``
when it is not installed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

for _key, _value in {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_USE_V2_MODEL_RUNNER": "0",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}.items():
    os.environ.setdefault(_key, _value)

PLUGIN_ROOT = Path(__file__).resolve().parents[1]
try:
    import rl_rollout_vllm  # noqa: F401
except ImportError:
    sys.path.insert(0, str(PLUGIN_ROOT))
