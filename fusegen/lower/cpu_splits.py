"""Index-set splitting in the Numba CPU group functions (``fusegen.plan.splits``): a stage's hot
loop whose body has a ``where`` on a comparison of two iotas runs as three loops, the predicate
false, true, false, each with the body of its branch, so the masked operand is never read.

Per outer index the bounds come from the iotas' values at the loop's start and their strides
along it (both iotas are affine in the counter: ``d0 + i * ds >= 0`` holds on one interval,
``fusegen.plan.splits.true_range``, whose text ``BOUNDS`` is)."""
from __future__ import annotations

import re

from ..ir import Op, nodes_of
from ..plan.splits import COMPARISONS, stage_splits
from .pysource import combine

BOUNDS = """\
sp_n = {count}
sp_d = {d0}
sp_s = {ds}
if sp_s > 0:
    sp_lo = min(sp_n, max(0, -(sp_d // sp_s)))
    sp_hi = sp_n
elif sp_s < 0:
    sp_lo = 0
    sp_hi = max(0, min(sp_n, sp_d // -sp_s + 1))
else:
    sp_lo = 0 if sp_d >= 0 else sp_n
    sp_hi = sp_n"""


def _iota_terms(gs, ref, mode: str):
    """(value at the loop's start, stride along it) of an iota read in the loop, or None (the
    stage then runs whole, its ``where`` evaluated per element)."""
    try:
        o = gs.ops[gs.operand(ref[0], ref[1])]
    except KeyError:
        # No operand of this loop reads the iota at the split's path: a where read through a
        # view inside another iota where, tril(where(i >= j, x, c))[..., :1], had none (a
        # KeyError in the lowering, found by test_layout_differential).
        return None
    if o.kind != "iota":
        return None
    cls = o.ri if mode == "row" else o.i
    return f"q_{o.name}", {0: "0", 1: "1"}.get(cls, f"{o.name}_s{'ri' if mode == 'row' else 'i'}")


def segments(gs, st, mode: str, count: str, pad: str) -> tuple[list[str], list[tuple[str, dict]]]:
    """The lines computing the split bounds before stage ``st``'s hot loop (``count``
    iterations), and the loops to run: (range arguments, the ``where`` choices of its body).
    One loop with no choices where the stage has no split (or one this lowering keeps whole:
    scans, split reductions, gathers, random numbers in the body)."""
    whole = ([], [(count, {})])
    sps = stage_splits(st)
    if not sps or st.is_scan or gs.split or gs.g.nodes:
        return whole
    if any(n.op is Op.RANDOM for n in nodes_of([r.srcs[0] for r in st.reductions] + [n for _, n in st.writes])):
        return whole
    sp = sps[0]
    a, b = _iota_terms(gs, sp.a, mode), _iota_terms(gs, sp.b, mode)
    if a is None or b is None:
        return whole
    flip, bias = COMPARISONS[sp.cmp]
    (qa, sa), (qb, sb) = (b, a) if flip else (a, b)
    d0 = f"{qa} - {qb}" + (f" - {bias}" if bias else "")
    lines = [f"{pad}# split %{gs.plan.opdef.graph.idx(sp.where)}: its mask holds on [sp_lo, sp_hi)"]
    lines += [pad + line for line in BOUNDS.format(count=count, d0=d0, ds=f"{sa} - {sb}").split("\n")]
    key = (sp.where, sp.ctx)
    return lines, [("sp_lo", {key: False}), ("sp_lo, sp_hi", {key: True}), ("sp_hi, sp_n", {key: False})]


#: Reductions that fold a value constant over a loop without visiting every element: max and
#: min once (idempotent), sum, mean and prod not at all where it is their identity.
_IDENTITY = {"sum": "0", "mean": "0", "prod": "1"}


def constant_folds(accs, vals, body_lines, var: str, rng: str, pad: str, ieee: bool) -> tuple[list[str], set[int]]:
    """A row loop ``for var in range(rng)`` whose reductions fold a value that does not depend
    on ``var`` (a split's masked interval: a causal softmax's ``-inf`` for the max, its
    ``exp(-inf - max)`` = 0 for the sum): lines folding each such value before the loop, and
    which reductions (by position in ``accs``) the loop no longer folds. Max and min fold it once
    where the interval is not empty; sum, mean and prod loop only where it is not their identity
    (adding 0 to a row accumulator, which starts at +0.0 and so is never -0.0, changes nothing),
    so the row's reductions end at the diagonal."""
    varying = {var} | {name for name, _ in body_lines}
    lo, hi = rng.split(", ") if ", " in rng else ("0", rng)
    lines, done = [], set()
    for j, ((r, acc), v) in enumerate(zip(accs, vals)):
        kind = r.arg.kind
        if kind not in ("max", "min", *_IDENTITY) or varying & set(re.findall(r"[A-Za-z_]\w*", v)):
            continue
        done.add(j)
        if kind in ("max", "min"):
            lines += [f"{pad}if {hi} > {lo}:   # constant over the loop: folded once",
                      f"{pad}    {combine(kind, f'acc{j}', v, ieee and acc.is_float)}"]
        else:
            lines += [f"{pad}if {v} != {_IDENTITY[kind]}:   # constant over the loop: its identity adds nothing",
                      f"{pad}    for {var} in range({rng}):",
                      f"{pad}        {combine(kind, f'acc{j}', v)}"]
    return lines, done
