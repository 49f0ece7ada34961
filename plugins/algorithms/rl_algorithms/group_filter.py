"""DAPO's group filter: which prompt groups carry a learning signal.

A group is the n samples of one prompt (one ``uid``). Under a group-relative estimator (GRPO, ...) a group whose
samples all score the same has zero advantage and teaches nothing; dynamic sampling
(:mod:`rl_core.trainer.dynamic_sampling`) drops such groups and generates more. A group of one sample is kept
(its spread is undefined, as in verl). "The same" is exact equality (verl tests ``np.std(values) > 0``, which
can keep a group of equal floats by rounding noise).
"""

from __future__ import annotations

from typing import Any, Hashable, Sequence


def groups_in_order(uids: Sequence[Hashable]) -> dict[Hashable, list[int]]:
    """``uid -> row indices``, groups in the order of their first row."""
    rows: dict[Hashable, list[int]] = {}
    for i, uid in enumerate(uids):
        rows.setdefault(uid, []).append(i)
    return rows


def kept_groups(values: Sequence[float], uids: Sequence[Hashable]) -> list[Hashable]:
    """The uids of the groups whose ``values`` are not all equal (or that have one sample), in first-row order."""
    if len(values) != len(uids):
        raise ValueError(f"{len(values)} values for {len(uids)} rows: one value per row is needed")
    kept = []
    for uid, rows in groups_in_order(uids).items():
        vals = [float(values[i]) for i in rows]
        if len(vals) == 1 or max(vals) != min(vals):
            kept.append(uid)
    return kept


def rows_of(groups: Sequence[Hashable], uids: Sequence[Any]) -> list[int]:
    """The row indices of ``groups`` (rows keep their order)."""
    wanted = set(groups)
    return [i for i, uid in enumerate(uids) if uid in wanted]
