"""Boxes run a row at a time: where pieces (``concat``, ``pad``) cut an elementwise group's
domain along an inner dim, every box of one index of the dims before the cut runs in one task.

A group's boxes otherwise run one after another over the whole domain, each its own loop nest
(``layout._group_runs``). That is right for the pieces' own operands, but an operand every box
reads across the cut is then read from memory once per box: RoPE's
``concat([-x[..., h:], x[..., :h]]) * sin + x * cos`` cuts the last dim in two, and each half
reads the whole row of ``x`` (one half for ``x * cos``, the other for the rotated piece), so a
box-by-box schedule streams ``x`` twice. Run per row instead (a *row*: one index of the dims
before the first cut), the second box finds the row in cache: ``x`` streams once.

The decision is the plan's: ``box_rows`` turns a group's boxes into one ``BoxRows`` where

* the group is elementwise (no reduction: a reduction's accumulators would have to live across
  the boxes of a row) with no gather or random numbers, and every operand strided (no modular
  map, whose linear index the row's offset would have to unravel);
* the first cut is on domain dim ``k`` >= 1 and the rows, ``prod(dom[:k])``, number at least
  ``MIN_ROWS`` (fewer rows than that leave threads idle, and a long row no longer fits in cache
  anyway: the boxes then run over the whole domain, as before).

Each box keeps its own ``GroupRun`` over the dims from ``k`` on; the rows' dims are outside it, in
``extents``, with each operand's ``strides`` over them (the same in every box: a box only moves
the operands' offsets). A backend runs ``for row in rows: for box in boxes: run box at row``.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import Op, nodes_of

#: Fewest rows worth a task each (below: the boxes run one after another over the domain).
MIN_ROWS = 64


@dataclass
class BoxRows:
    """An elementwise group's boxes, run a row at a time (see the module docstring)."""

    stages: tuple[int, ...]
    extents: tuple[int, ...]        # the rows' dims (refined), outer first
    strides: list[list[int]]        # per operand, over those dims
    boxes: list                     # per box: a GroupRun over the dims after them, its offsets at row 0
    operands: list[tuple]           # the group's operand keys (every box's)

    @property
    def rows(self) -> int:
        n = 1
        for e in self.extents:
            n *= e
        return n


def may_run_rows(stages) -> bool:
    """Whether a group of ``stages`` may run its boxes a row at a time, as far as the plan
    tells (elementwise, no gathers or random numbers); the emitted C++ decides the rest at run
    time (``fg::row_boxes``)."""
    if any(st.reductions or st.is_scan for st in stages):
        return False
    roots = [n for st in stages for _, n in st.writes + st.finals]
    return not any(n.op in (Op.GATHER, Op.RANDOM) for n in nodes_of(roots))


def row_dims(stages, boxes, dom, axes, inners) -> int:
    """How many leading domain dims are rows (0: run box by box): see the module docstring."""
    if len(boxes) < 2 or axes or any(inner is not None for inner in inners) or not may_run_rows(stages):
        return 0
    k = next((d for d in range(len(dom)) if any(ranges[d] != (0, dom[d]) for ranges, _ in boxes)), 0)
    rows = 1
    for e in dom[:k]:
        rows *= e
    return k if k >= 1 and rows >= MIN_ROWS else 0


def split_rows(nest, k: int) -> int:
    """The number of refined dims (``nest.origin``) of the first ``k`` domain dims."""
    return sum(1 for o in nest.origin if o < k)
