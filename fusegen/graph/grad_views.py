"""Adjoints of the layout ops, for ``fg.grad``: each is another layout op (or a sum).

A view moves elements without changing them, so its adjoint moves the cotangent back: the
inverse permutation, the same flip, a reshape to the source's shape, a sum over the broadcast
dims; a piece of a concat or the interior of a pad is a slice of the cotangent; a slice's
adjoint pads the cotangent with zeros back to the source's shape (a strided slice's first
spreads it over its span: zeros between the picked elements). Bounds are traced scalars
(attributes and dims work), so one backward op serves every shape. What needs the rank (a
slice's per-axis pad widths) asks for a rank-specialized trace, as any op may.

``g`` always has the view's own shape here (``grad`` broadcasts it first): the rules never
see a smaller cotangent.
"""
from __future__ import annotations

from ..errors import TraceError
from . import layout as L
from . import vocab as fg
from .nodes import Node, Op, Perm
from .trace import Tensor, sum_to


def view_adjoints(n: Node, g: Tensor) -> list[tuple[Node, Tensor]]:
    """(source, contribution) pairs of layout node ``n`` with cotangent ``g`` (``n``'s shape)."""
    x = Tensor(n.srcs[0])
    if n.op is Op.PERMUTE:
        return [(n.srcs[0], L.permute(g, _inverse(n.arg)))]
    if n.op is Op.FLIP:
        return [(n.srcs[0], L.flip(g, axis=n.arg))]
    if n.op is Op.RESHAPE:
        return [(n.srcs[0], L.reshape_like(g, x))]
    if n.op is Op.BROADCAST_TO:
        return [(n.srcs[0], sum_to(g, x))]
    if n.op is Op.CONCAT:
        return _concat(n, g)
    if n.op is Op.PAD:
        return _pad(n, g)
    if n.op is Op.INDEX:
        return [(n.srcs[0], _unindex(n, g))]
    raise TraceError(f"fg.grad: no adjoint for layout op {n.op.value}")  # pragma: no cover


def _inverse(p: Perm) -> Perm:
    if p.kind in ("reverse", "swap"):
        return p                     # both are their own inverse
    if p.kind == "move":
        return Perm("move", p.b, p.a)
    r = len(p.a)                     # an explicit permutation names every axis: its length is the rank
    perm = [a % r for a in p.a]
    inv = [0] * r
    for k, a in enumerate(perm):
        inv[a] = k
    return Perm("explicit", tuple(inv))


def _along(axis: int, rank: int | None, sl: slice) -> tuple:
    """An index tuple applying ``sl`` along ``axis`` (negative axes work without the rank)."""
    if axis >= 0:
        return (slice(None),) * axis + (sl,)
    return (Ellipsis, sl) + (slice(None),) * (-axis - 1)


def _concat(n: Node, g: Tensor) -> list[tuple[Node, Tensor]]:
    axis, start, out = n.arg, 0, []
    for piece in n.srcs:
        size = L.dim(Tensor(piece), axis)
        out.append((piece, L.index(g, _along(axis, None, slice(start, start + size)))))
        start = start + size
    return out


def _pad(n: Node, g: Tensor) -> list[tuple[Node, Tensor]]:
    x = Tensor(n.srcs[0])
    kind, _ = n.arg
    widths = [Tensor(w) for w in n.srcs[2:]]
    r = L.ndim_of(x)
    pairs = [(widths[0], widths[1])] * r if kind == "all" else list(zip(widths[0::2], widths[1::2]))
    key = tuple(slice(b, b + L.dim(x, k)) for k, (b, _a) in enumerate(pairs))
    inner = L.index(g, key)
    out = [(n.srcs[0], inner)]
    # the fill value, if it is traced, receives every padded element's cotangent
    out.append((n.srcs[1], fg.sum(g) - fg.sum(inner)))
    return out


def _norm_bound(v, d, step: int, default):
    """NumPy's slice bound normalization (``slice.indices``) on traced scalars."""
    if v is None:
        return default
    lo, hi = (0, d) if step > 0 else (-1, d - 1)
    return fg.where(v < 0, fg.maximum(v + d, lo), fg.minimum(v, hi))


def _unindex(n: Node, g: Tensor) -> Tensor:
    """The adjoint of basic indexing: new axes dropped, integer-indexed axes put back as size 1,
    negative-step slices flipped back, strided slices spread back over their span (zeros between
    the picked elements), then zeros padded around each slice's span."""
    x = Tensor(n.srcs[0])
    r = L.ndim_of(x)
    items, srcs = n.arg, iter(n.srcs[1:])
    consumed = sum(1 for it in items if it.kind in ("slice", "int", "squeeze"))
    fill = [None] * (r - consumed)   # the axes no item names: whole
    kinds = [it.kind for it in items]
    if "ellipsis" in kinds:
        e = kinds.index("ellipsis")
        expanded = list(items[:e]) + fill + list(items[e + 1:])
    else:
        expanded = list(items) + fill
    out_axis, drop_new, put_back, spans, flips, strided = 0, [], [], [], [], []
    k = 0
    for it in expanded:
        if it is not None and it.kind == "new":
            drop_new.append(out_axis)
            out_axis += 1
            continue
        d = L.dim(x, k)
        if it is None:
            spans.append(None)
        elif it.kind in ("int", "squeeze"):
            if it.kind == "int":
                i = Tensor(next(srcs))
                i = fg.where(i < 0, i + d, i)
            else:
                i = 0
            put_back.append(k)
            spans.append((i, 1))
            k += 1
            continue
        else:
            start, stop, step = (Tensor(next(srcs)) if given else None for given in it.given)
            s = 1 if step is None else _const_step(step)
            if s == 1:
                a = _norm_bound(start, d, 1, 0)
                b = _norm_bound(stop, d, 1, d)
                length = fg.maximum(b - a, 0)
                spans.append((a, length))
            elif s == -1:
                a = _norm_bound(start, d, -1, d - 1)
                b = _norm_bound(stop, d, -1, -1)
                length = fg.maximum(a - b, 0)
                flips.append(out_axis)
                spans.append((a - length + 1, length))
            else:
                strided.append((k, step if s is None else s, _strided_lo(start, stop, step if s is None else s, d)))
                spans.append(None)   # spread over the whole dim (_spread)
        out_axis += 1
        k += 1
    if drop_new:
        g = L.squeeze(g, axis=tuple(drop_new))
        flips = [f - sum(1 for q in drop_new if q < f) for f in flips]
    if flips:
        g = L.flip(g, axis=tuple(flips))
    if put_back:
        g = L.expand_dims(g, axis=tuple(put_back))
    for axis, step, lo in strided:
        g = _spread(g, axis, r, step, lo, L.dim(x, axis))
    pairs = [(0, 0) if sp is None else (sp[0], L.dim(x, j) - sp[0] - sp[1]) for j, sp in enumerate(spans)]
    if all(sp is None for sp in spans):
        return g
    return L.pad(g, pairs)


def _const_step(step: Tensor) -> int | None:
    """A slice step known while tracing (an int), or None for a traced one (an attribute)."""
    node = step.node
    if node.op is Op.CONST and isinstance(node.arg[1], int) and not isinstance(node.arg[1], bool):
        return int(node.arg[1])
    return None


def _pick(step, positive, negative):
    """``positive`` where the slice runs forward, else ``negative``: chosen while tracing for an
    int step, per call (a ``where``) for a traced one."""
    if isinstance(step, int):
        return positive if step > 0 else negative
    return fg.where(step > 0, positive, negative)


def _strided_lo(start, stop, step, d):
    """Where the lowest element a slice with step ``step`` (|step| > 1, or traced) picks lies, in
    a dim of size ``d`` (0 when it picks none)."""
    m = abs(step) if isinstance(step, int) else fg.where(step > 0, step, -step)
    a = _pick(step, _norm_bound(start, d, 1, 0), _norm_bound(start, d, -1, d - 1))
    b = _pick(step, _norm_bound(stop, d, 1, d), _norm_bound(stop, d, -1, -1))
    length = fg.maximum((_pick(step, b - a, a - b) + m - 1) // m, 0)
    # a backward slice ends at its lowest element; an empty one at 0
    return _pick(step, fg.where(length > 0, a, 0), fg.where(length > 0, a - (length - 1) * m, 0))


def _spread(g: Tensor, axis: int, rank: int, step, lo, d) -> Tensor:
    """``g`` (the picked elements, on ``axis``) spread back over the ``d`` elements of the
    source's dim, the lowest picked one at ``lo``: zeros between and around them. An index map,
    not a scatter: each element but the last repeated ``|step|`` times (a broadcast merged by a
    reshape: a div map) and masked through an iota where ``j % |step| != 0``, padded; the last
    element padded into place on its own (so no slice cuts a repeated group)."""
    m = abs(step) if isinstance(step, int) else fg.where(step > 0, step, -step)
    if not isinstance(step, int):
        g = fg.where(step > 0, g, L.flip(g, axis=axis))
    elif step < 0:   # the lowest picked element first
        g = L.flip(g, axis=axis)
    n = L.dim(g, axis)
    head = L.index(g, _along(axis, rank, slice(0, n - 1)))
    dims = [L.dim(head, a) for a in range(rank)]
    t = L.broadcast_to(L.expand_dims(head, axis=axis + 1), (*dims[:axis + 1], m, *dims[axis + 1:]))
    k = dims[axis] * m
    t = L.reshape(t, (*dims[:axis], k, *dims[axis + 1:]))
    on_axis = (None,) * axis + (slice(None),) + (None,) * (rank - axis - 1)
    t = fg.where(L.index(L.iota(k) % m == 0, on_axis), t, 0)
    last = L.index(g, _along(axis, rank, slice(n - 1, n)))
    width = L.dim(last, axis)   # 1, or 0 when nothing is picked
    return _pad_axis(t, axis, rank, lo, d - lo - k) + _pad_axis(last, axis, rank, lo + k, d - lo - k - width)


def _pad_axis(t: Tensor, axis: int, rank: int, before, after) -> Tensor:
    return L.pad(t, [(0, 0)] * axis + [(before, after)] + [(0, 0)] * (rank - axis - 1))
