"""Centered second moments: a variance and the mean it is centered on, in one pass.

A norm written the textbook way, ``mu = mean(e)`` then ``var = mean((e - mu) ** 2)``, plans as
two reduction stages, the second reading the first's result: two passes over every row, and
the second cannot start before the first has ended. ``centered_pairs`` finds such pairs in a
plan (the square spelled ``d * d``, ``square(d)`` or ``d ** 2``; the variance a ``mean`` or a
``sum``), so a renderer whose loop holds the row can compute both in one pass from sums
shifted by a *pivot* ``k``, a value of ``e`` from the same row:

    s1 = sum(e - k),  s2 = sum((e - k) ** 2),  n = count
    mean = k + s1 / n,  var = s2 / n - (s1 / n) ** 2     (sum: s2 - s1 * s1 / n)

``var`` is a difference, but of terms of the size of ``var + (mean - k) ** 2``: with ``k`` taken
from the row, ``(mean - k) ** 2`` is at most ``n * var`` and usually about ``var``, so the
cancellation that ruins ``mean(e * e) - mean(e) ** 2`` when the mean is large next to the
spread (1e4 + N(0, 1)) does not happen; the mean's own rounding is that of a sum of small
numbers, better than ``sum(e) / n`` there. The pivot is the row's first element of ``e`` (0
where it is not finite, so an inf or NaN reaches the results as in the two-pass form), and
the variance is clamped at 0 from below against rounding (NaN stays NaN).

The plan is unchanged: the stages, their accesses and workspaces stay as they are, and a
renderer that does not fuse the pair (or runs where it cannot, e.g. the GPU's) runs them as
two passes. Only ``e`` built from inputs, constants and attributes through elementwise ops is
taken (through views, but no pieces, gathers or random numbers: its pivot is read at one
address per operand), unless the renderer asks for random numbers too (``random=True``: the Numba
CPU lowering evaluates the pivot in the row pass itself, from the same random numbers, as a
dropout-then-layer-norm needs).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import PIECEWISE, Node, Op, nodes_of
from .stages import Plan


@dataclass(frozen=True)
class CenteredPair:
    """Stage ``mean_stage`` computes ``mean`` (of ``e``); stage ``var_stage`` computes ``var``,
    the ``mean`` or ``sum`` over the same axes of ``(e - mean) ** 2``."""

    mean_stage: int
    var_stage: int
    mean: Node
    var: Node
    e: Node


def _squared(n: Node) -> Node | None:
    """``d`` when ``n`` is ``d * d``, ``square(d)`` or ``d ** 2``."""
    if n.op is Op.MUL and n.srcs[0] is n.srcs[1]:
        return n.srcs[0]
    if n.op is Op.SQUARE:
        return n.srcs[0]
    if n.op is Op.POW and n.srcs[1].op is Op.CONST and n.srcs[1].arg[1] == 2:
        return n.srcs[0]
    return None


_NOT_PLAIN = frozenset({Op.REDUCE, Op.IOTA, Op.GATHER, Op.RANDOM}) | PIECEWISE


def _plain(e: Node, random: bool = False) -> bool:
    """``e`` is made of inputs, constants and attributes (and random numbers and their counters'
    iotas, with ``random``) through elementwise ops and views only (a view is a strided read: its pivot is still one
    address per operand)."""
    return all(n.op not in _NOT_PLAIN or (random and n.op in (Op.RANDOM, Op.IOTA)) for n in nodes_of([e]))


def centered_pairs(plan: Plan, random: bool = False) -> dict[int, CenteredPair]:
    """The centered second moments of ``plan``, keyed by the variance's stage index (``random``:
    also where ``e`` holds random numbers)."""
    out: dict[int, CenteredPair] = {}
    for t in plan.stages:
        if len(t.reductions) != 1 or t.writes or t.keeps or t.is_scan:   # (keeps: plan.shared)
            continue
        var = t.reductions[0]
        if var.arg.kind not in ("mean", "sum"):
            continue
        d = _squared(var.srcs[0])
        if d is None or d.op is not Op.SUB:
            continue
        e, mean = d.srcs
        if mean.op is not Op.REDUCE or mean.arg.kind != "mean" or mean.arg.scan or mean.srcs[0] is not e \
                or mean.arg.axes != var.arg.axes or not mean.arg.keep_dims or not _plain(e, random):
            continue
        s = plan.stage_of(mean)
        if len(s.reductions) != 1 or s.writes or s.keeps or s.is_scan:
            continue
        out[t.index] = CenteredPair(s.index, t.index, mean, var, e)
    return out
