"""The reference workload's reward: 0 or 1 from a hash of the response text, for a model with random weights.

A random-weight model answers nothing right, so a real scorer gives every response 0, every group's advantages
are 0 and an update learns nothing; rl-core would then skip those rows' forward and backward entirely
(``actor.skip_zero_advantage_rows``), and the step table would compare our empty update with TRL's full one.
With a coin per response almost every group of 8 has mixed rewards, so both sides (rl-core through
``reward.custom.path``, TRL through ``bench/reference/trl_grpo.py``) run the whole update, as they do on a real
task. Scoring costs microseconds.
"""

from __future__ import annotations

import hashlib


def coin(text: str) -> float:
    """1.0 or 0.0, fixed by the text (the same response always scores the same)."""
    return float(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[0] & 1)


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    return coin(solution_str)
