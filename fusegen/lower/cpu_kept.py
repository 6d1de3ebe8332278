"""Workspaces a Numba CPU group keeps as scalars of its task (``fusegen.lower_cpu``).

A row-mode group that computes a reduction (a norm's mean and variance, a softmax's max and
sum) and reads it back in a later stage of the same task stores it into a workspace array and
loads it again, at the row's own offset. Where no other group reads that workspace, the value
never needs the array: the group keeps it in a local (``k_<name>``), and the function no longer
takes the array. At a small shape that is most of what such a workspace costs: the runner's
pool, and Numba's unboxing of one more array argument per call (~0.05 us each).
"""
from __future__ import annotations

import re


def shared_counts(runs) -> dict[tuple, int]:
    """How many operand slots of the schedule ``runs`` (group runs, box runs) name each workspace
    (``("buf", i)``): one slot in all means one group reads and writes it through one map."""
    counts: dict[tuple, int] = {}
    for run in runs:
        for key in run.operands:
            if key[0] == "buf":
                counts[key[:2]] = counts.get(key[:2], 0) + 1
    return counts


def candidates(gs, single: frozenset) -> frozenset:
    """The operand keys of group source ``gs`` it may keep as task scalars: workspaces named by
    this group alone (``single``, from ``shared_counts``), in a row-mode group (one row per task),
    read at the row's own offset only (stride 0 along and across the reduced dims), written by a
    reduction that is not a scan and read by no gather."""
    if gs.mode != "row" or gs.split or gs.rows:
        return frozenset()
    stages = [gs.plan.stages[i] for i in gs.run.stages]
    written = {key for st in stages if not st.is_scan for r in st.reductions
               for key in (o.key for o in gs.result_targets(r))}
    return frozenset(key for key, o in gs.ops.items()
                     if key[:2] in single and key in written and o.kind == "array" and o.ri == 0
                     and gs.invariant[o.k] and key not in gs.g.operands)


def leaks(source: str, names) -> bool:
    """Whether ``source`` still indexes the array of a kept workspace (a path that reads it some
    other way): then the group is generated again with its workspaces as arrays."""
    return any(re.search(rf"\b{re.escape(name)}_\b", source) for name in names)
