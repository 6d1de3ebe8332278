"""Run-time index maps (the face of the plan's view evaluator): a loop nest over operands read
through view chains.

The steps that build one operand's view (``contiguous``, ``broadcast``, ``permute``, ``index``,
``flip``, ``place``, ``reshape``) live in ``viewsteps``; this module takes the views of a group's
operands to a loop nest: ``refine`` splits the domain's dims so every operand is strided,
``boxes`` cuts the domain where piecewise operands switch on and off, ``box_layout`` gives one
box's extents and offsets. The C++ twin of both is ``emitters/templates/_fg_views.inc.j2``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .viewsteps import (  # noqa: F401  (re-exported: the evaluator's whole API is reached from here)
    ERROR_NAMES, ERRORS, MAX_LOOP_DIMS, MAX_RANK, MAX_SUBDIMS, Axis, Inner, MapError, View, broadcast, c_strides,
    check_shape, contiguous, flip, index, permute, place, reshape, to_modular,
)


# ---------------------------------------------------------------------------------------------
# The loop nest: refine the domain so every operand is strided, then cut it into boxes.
# ---------------------------------------------------------------------------------------------
@dataclass
class Nest:
    """A domain refined for a set of operands: ``extents`` over the refined dims, ``origin[j]``
    = the domain dim refined dim j belongs to, and per operand its strides over the refined dims
    (``strides[i]``), offset, optional ``Inner`` and per-domain-dim active intervals."""

    extents: list[int]
    origin: list[int]
    strides: list[list[int]]
    offsets: list[int]
    inners: list[Inner | None]
    intervals: list[dict[int, tuple[int, int]]]
    active: list[bool] = field(default_factory=list)


def _boundaries(radix) -> list[int]:
    """Suffix products of a radix (outer first), excluding 1 and the total: the cut points."""
    out, acc = [], 1
    for e in reversed(radix[1:]):
        acc *= e
        out.append(acc)
    return out


def refine(views: list[View], domain) -> Nest:
    """Split each domain dim into the common refinement of the groupings the operands give it.
    Where two groupings of a dim do not nest (``x.T.reshape(6) + y.T.reshape(6)``: 3x2 and 2x3),
    the last operand still strided that groups it reads through a div/mod map instead
    (``to_modular``), until the rest nest; the C++ twin does the same."""
    views = list(views)
    while True:
        try:
            return _refine(views, domain)
        except _NoNest as e:
            grouped = [i for i, v in enumerate(views) if v.inner is None and v.dims[e.dim].grouped]
            if not grouped:
                raise MapError("FG_ERR_VIEW_NEST", f"the groupings of domain dim {e.dim} do not nest") from None
            views[grouped[-1]] = to_modular(views[grouped[-1]], "a grouping that does not nest with another's")


class _NoNest(Exception):
    def __init__(self, dim: int):
        super().__init__(dim)
        self.dim = dim


def _refine(views: list[View], domain) -> Nest:
    domain = check_shape(domain, "a loop domain")
    for v in views:
        if v.shape != domain:
            raise MapError("FG_ERR_VIEW_PARAM", f"operand shape {v.shape} is not the domain {domain}")
    extents, origin = [], []
    subs: list[list[tuple[int, int]]] = [[] for _ in views]
    for k, E in enumerate(domain):
        cuts: set[int] = set()
        for v in views:
            a = v.dims[k]
            radix = [e for e, _ in a.sub if e != 1]
            if len(radix) > 1:
                if a.hi is not None:  # place and reshape never make one: unreachable
                    raise MapError("FG_ERR_VIEW_PIECE", "a piece's dim is also a group")
                cuts.update(_boundaries(radix))
        pts = [1] + sorted(c for c in cuts if 1 < c < E) + [E]
        if E <= 1:
            radix = [E]
        else:
            if any(b % a for a, b in zip(pts, pts[1:])):
                raise _NoNest(k)
            radix = [b // a for a, b in zip(pts, pts[1:])][::-1]
        if len(extents) + len(radix) > MAX_LOOP_DIMS:
            raise MapError("FG_ERR_VIEW_LOOP_DIMS", f"a loop nest of more than {len(extents) + len(radix) - 1} dims")
        extents += radix
        origin += [k] * len(radix)
        for i, v in enumerate(views):
            subs[i] += _resplit(v.dims[k], radix)
    intervals = [{k: (a.lo, a.hi) for k, a in enumerate(v.dims) if a.hi is not None} for v in views]
    return Nest(extents, origin, [[s for _, s in sub] for sub in subs], [v.offset for v in views],
                [v.inner for v in views], intervals, [v.active for v in views])


def _resplit(a: Axis, radix: list[int]) -> list[tuple[int, int]]:
    """The axis's sub-dims re-cut to ``radix`` (outer first), which refines its own grouping."""
    digits = [(e, s) for e, s in a.sub if e != 1]
    out = []
    for E in radix:
        if E <= 1 or not digits:
            out.append((E, 0))
            continue
        e, s = digits[0]
        if e == E:
            out.append((E, s))
            digits.pop(0)
        elif e % E == 0:
            out.append((E, s * (e // E)))
            digits[0] = (e // E, s)
        else:  # the radix holds every operand's boundaries: unreachable
            raise MapError("FG_ERR_VIEW_INTERNAL", "a radix that does not refine an operand's grouping")
    return out


def boxes(nest: Nest, domain) -> list[tuple[list[tuple[int, int]], list[bool]]]:
    """Cut the domain into boxes along the dims where some operand has an interval: per box, the
    range ``[lo, hi)`` of every domain dim and which operands are active in it. Boxes come in C
    order of their ranges (the first dim slowest); a size-0 dim gives the one range (0, 0)."""
    domain = tuple(int(d) for d in domain)
    cuts = {k: {0, E} for k, E in enumerate(domain)}
    for iv in nest.intervals:
        for k, (lo, hi) in iv.items():
            cuts[k].update((min(max(lo, 0), domain[k]), min(max(hi, 0), domain[k])))
    segs = {k: sorted(c) for k, c in cuts.items()}
    out = []

    def rec(k, ranges):
        if k == len(domain):
            act = []
            for i, iv in enumerate(nest.intervals):
                ok = nest.active[i] if nest.active else True
                for d, (lo, hi) in iv.items():
                    r0, r1 = ranges[d]
                    ok = ok and lo <= r0 and r1 <= hi
                act.append(ok)
            out.append((list(ranges), act))
            return
        pts = segs[k]
        if len(pts) == 1:  # a size-0 dim
            rec(k + 1, ranges + [(0, 0)])
            return
        for a, b in zip(pts, pts[1:]):
            if b > a:
                rec(k + 1, ranges + [(a, b)])

    rec(0, [])
    return out


def address(nest: Nest, i: int, coords) -> int | None:
    """Address of operand ``i`` at domain coordinates ``coords`` (a test oracle, not a hot path);
    None where the operand is inactive."""
    for d, (lo, hi) in nest.intervals[i].items():
        if not lo <= coords[d] < hi:
            return None
    if nest.active and not nest.active[i]:
        return None
    sub_coords = []
    for k, c in enumerate(coords):
        radix = [e for e, o in zip(nest.extents, nest.origin) if o == k]
        digs = []
        for e in reversed(radix):
            c, r = divmod(c, e) if e else (c, 0)
            digs.append(r)
        sub_coords += list(reversed(digs))
    lin = nest.offsets[i] + sum(c * s for c, s in zip(sub_coords, nest.strides[i]))
    inner = nest.inners[i]
    return inner.address(lin) if inner is not None else lin


def box_layout(nest: Nest, ranges) -> tuple[list[int], list[int]]:
    """One box's loop: extents over the refined dims and each operand's offset at the box's
    first element (strides are the nest's). A domain dim cut into a range is never refined
    (``refine`` refuses pieces on grouped dims), so its range maps to its one refined dim."""
    extents = list(nest.extents)
    offsets = list(nest.offsets)
    for k, (lo, hi) in enumerate(ranges):
        dims = [j for j, o in enumerate(nest.origin) if o == k]
        if len(dims) == 1:
            j = dims[0]
            extents[j] = hi - lo
            for i in range(len(offsets)):
                offsets[i] += lo * nest.strides[i][j]
        elif (lo, hi) != (0, math.prod(nest.extents[j] for j in dims)):
            raise MapError("FG_ERR_VIEW_BOX", "a box range on a refined dim")
    return extents, offsets
