"""Index-set splitting (README "Index maps", item 6): a ``where`` whose predicate compares two
iotas (``arange(q)[:, None] >= arange(k)[None, :]``, a causal mask) is constant on at most three
intervals of any loop, since both iotas are affine in the loop counter (``q + i * s``). A loop
that would evaluate such a ``where`` per element instead runs once per interval with the branch
that holds there, so the masked operand is never read and the other branch never computed.

This module finds the candidates at plan time (they are part of the plan's text); the lowering
computes the intervals per outer index from the iotas' offsets and strides (``true_range``).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import VIEWS, Node, Op

#: Comparisons an integer split handles, as (which side is subtracted from which, and the bias):
#: ``a >= b`` holds where ``a - b >= 0``; ``a > b`` where ``a - b - 1 >= 0``; ``<=``, ``<`` mirrored.
COMPARISONS = {Op.GE: (False, 0), Op.GT: (False, 1), Op.LE: (True, 0), Op.LT: (True, 1)}


@dataclass(frozen=True)
class Split:
    """A ``where`` (in view context ``ctx``) whose predicate ``a <cmp> b`` compares iotas ``a``
    and ``b``, each an (iota node, its view context)."""

    where: Node
    ctx: tuple
    cmp: Op
    a: tuple
    b: tuple


def _iota(n: Node, ctx: tuple):
    while n.op in VIEWS:
        n, ctx = n.srcs[0], ctx + ((n, 0),)
    return (n, ctx) if n.op is Op.IOTA else None


def stage_splits(st) -> list[Split]:
    """The ``where`` nodes of stage ``st`` (outside pieces and gathers) whose predicate is an
    ordering comparison of two iotas, in first-use order. A value the stage reads back instead of
    computing (``Stage.kept``, ``plan.shared``) is not searched: its loop evaluates no ``where``."""
    roots = [r.srcs[0] for r in st.reductions] + [n for _, n in st.writes]
    out: list[Split] = []
    seen: set = {(id(n), ()) for _, n in st.kept}

    def walk(n: Node, ctx: tuple) -> None:
        if (id(n), ctx) in seen:
            return
        seen.add((id(n), ctx))
        if n.op in VIEWS:
            walk(n.srcs[0], ctx + ((n, 0),))
            return
        if n.op is Op.WHERE and n.srcs[0].op in COMPARISONS:
            a, b = (_iota(s, ctx) for s in n.srcs[0].srcs)
            if a is not None and b is not None:
                out.append(Split(n, ctx, n.srcs[0].op, a, b))
        if n.op in (Op.GATHER, Op.CONCAT, Op.PAD, Op.REDUCE, Op.RANDOM):
            return
        for s in n.srcs:
            walk(s, ctx)

    for r in roots:
        walk(r, ())
    return out


def true_range(d0: int, ds: int, n: int) -> tuple[int, int]:
    """The interval ``[lo, hi)`` of ``i`` in ``[0, n)`` where ``d0 + i * ds >= 0`` (a NumPy
    oracle of the lowering's text, ``TRUE_RANGE``)."""
    if ds == 0:
        return (0, n) if d0 >= 0 else (n, n)
    if ds > 0:
        return min(n, max(0, -(d0 // ds))), n
    return 0, max(0, min(n, d0 // -ds + 1))
