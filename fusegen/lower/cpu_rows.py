"""The Numba CPU driver of an elementwise group's boxes run a row at a time (``plan.boxrows``):
a parallel loop over chunks of ``ROWS`` rows whose body calls, per row, each box's function (``box0``, ``box1``, ...,
inlined by LLVM) with the row's offset of every operand, so a row's boxes run in one task and
what they share (RoPE's row of ``x``) is still in cache for the second.

Its ``meta``: the count of row dims ``nd``, the rows, then where each box's own meta block
(``cpu_layout.meta_array``, one tile: a box runs serially) starts and ends, the rows' extents,
each operand's strides over them, and the boxes' blocks."""
from __future__ import annotations

import numpy as np

from .cpu_layout import meta_array

#: Rows per task of the driver: enough that a task's start is small beside its rows.
ROWS = 16


def rows_meta(rows):
    """The driver's int64 ``meta`` block (see the module docstring)."""
    nd, nb = len(rows.extents), len(rows.boxes)
    blocks = [meta_array(run, max(1, run.layout.inner)) for run in rows.boxes]
    head = 2 + nb + 1
    table = list(rows.extents) + [s for st in rows.strides for s in st]
    starts = [head + len(table)]
    for b in blocks:
        starts.append(starts[-1] + len(b))
    out = [nd, rows.rows] + starts + table
    return np.concatenate([np.array(out, dtype=np.int64)] + blocks)


def driver(plan, rows, gs, parallel: bool) -> str:
    """The source of ``kernel``, the driver; ``gs``: a box's ``GroupSource`` (every box has the
    same operands, attributes and parameters)."""
    nb = len(rows.boxes)
    ops = list(gs.ops.values())
    arrays = [o.name for o in ops if o.is_array]
    scalars = [f"a_{a}" for a in gs.attrs] + [gs.param_name(n) for n in gs.params]
    head = 2 + nb + 1
    lines = [f"def kernel({', '.join(arrays + ['meta'] + scalars)}):",
             f"    # stages {', '.join(map(str, rows.stages))} of op {plan.opdef.name}: {nb} boxes a row at a time "
             "(fusegen.plan.boxrows): a task runs every box of its row, so what they share is read once",
             f"    nd = meta[0]; ROWS = {ROWS}"]
    lines += [f"    m{b} = meta[meta[{2 + b}]:meta[{3 + b}]]" for b in range(nb)]
    # A task runs ROWS consecutive rows; their offsets step along the last row dim, and only a
    # row whose last digit wraps (once per its extent) unravels with divisions: RoPE's rows are
    # 64 elements per box, where a division per dim per row was a large part of a row's time.
    lines += ["    R = meta[1]",
              f"    last = nd - 1; e_last = meta[{head} + last]",
              f"    for tc in {'prange' if parallel else 'range'}((R + ROWS - 1) // ROWS):",
              "        il = e_last   # (the task's first row unravels)"]
    lines += [f"        r_{o.name} = 0" for o in ops]
    lines += ["        for t in range(tc * ROWS, min(R, tc * ROWS + ROWS)):",
              "            if il == e_last:",
              "                rem = t + 0"]
    lines += [f"                r_{o.name} = 0" for o in ops]
    lines += ["                for d in range(nd - 1, -1, -1):",
              f"                    e = meta[{head} + d]",
              "                    q = rem // e",
              "                    ix = rem - q * e",
              "                    rem = q"]
    lines += [f"                    r_{o.name} += ix * meta[{head} + nd + {o.k} * nd + d]" for o in ops]
    lines += ["                il = t - (t // e_last) * e_last"]
    shifts = [f"r_{o.name}" for o in ops]
    lines += [f"            box{b}({', '.join(arrays + [f'm{b}'] + scalars + shifts)})" for b in range(nb)]
    lines += ["            il += 1"]
    lines += [f"            r_{o.name} += meta[{head} + nd + {o.k} * nd + last]" for o in ops]
    lines.append("    return 0")
    return "\n".join(lines) + "\n"
