"""Canonical form of a traced graph: where a piece must be materialized.

A piecewise node (``concat``, ``pad``) costs no memory when a loop can be cut into boxes where
each piece is whole (``fusegen.plan.views``). Three places cannot be cut that way: a reshape that
merges or splits the piece's dim (the pieces' boundaries no longer fall on one dim), a
reduction (a box cut along a reduced dim would leave each box with a partial result), and a
gather's source (the gathered coordinate is data, so no box of the output's loop holds one
piece: ``take_along_axis(pad(x, 1), i)`` was refused on Numba and failed with
``FG_ERR_VIEW_PARAM`` in the emitted C++). There the
piece is *copied* first: a ``copy`` reduction over no axes, which every backend runs as an
ordinary reduction stage into a workspace, read afterwards like any array. ``print(op)`` shows it
(``copy %9``) and ``print(plan)`` counts its workspace. A gathered address indexes an array
with one stride per axis, so under a gather's source an iota (an index expression:
``take(arange(n) * 1.5, i)`` read the wrong elements in the emitted C++, silently) and a reshape
of a permuted, sliced or flipped view (``take(x.T.reshape(-1), i)``: a div/mod map, refused) are
copied the same way. (A reshape of such a view that strides could still express is copied too:
which it is, only run time knows in the emitted code.)

Second (``share_common``): one reduction where the user wrote two. (Tracing interns nodes
already: the same expression written twice is one node, ``fusegen.graph.trace.make``.) A
reduction written without keepdims whose twin with keepdims is also there (cross-entropy's ``max(z, keepdims=True)`` for the shift
and ``max(z)`` to add back) reads that twin through a squeeze: one accumulator per element
instead of two (0.135 against 0.086 ns per float32 element for a row max). That squeeze is a
view, so only in an op that has views (or pieces, iotas, dims, gathers) already: the emitted C++
of an op without them keeps its plain stages.
"""
from __future__ import annotations

from .nodes import PIECEWISE, VIEWS, Node, Op, ReduceArg, ShapeOf, squeeze_items, value_srcs

COPY = ReduceArg("copy", (), False)


#: Views after which a reshape may merge dims no stride can step through (a div/mod map).
_REORDERING = frozenset({Op.PERMUTE, Op.INDEX, Op.FLIP})


def _pieces_below(start: Node, found: dict, gathered: bool = False) -> None:
    """The piecewise nodes ``start`` reads through elementwise ops and views (not through a
    reduction or a copy, which are arrays by then); ``gathered`` (``start`` is a gather's source):
    also its iotas and the reshapes of reordered views (a modular map), which a gathered address
    cannot index."""
    stack, seen = [start], set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if n.op in PIECEWISE or (gathered and (n.op is Op.IOTA or (n.op is Op.RESHAPE and _reordered(n.srcs[0])))):
            found[id(n)] = n
            continue
        if n.op in (Op.INPUT, Op.REDUCE, Op.IOTA, Op.CONST, Op.ATTR, Op.DIM):
            continue
        stack.extend(value_srcs(n))


def _reordered(start: Node) -> bool:
    """Whether ``start`` reads a permuted, sliced, flipped or broadcast view (tile, meshgrid) or a
    gather's result, through elementwise ops and views (a reshape of it may be a modular map:
    decided only once strides are known)."""
    stack, seen = [start], set()
    while stack:
        n = stack.pop()
        if id(n) in seen or n.op in (Op.INPUT, Op.REDUCE, Op.IOTA, Op.CONST, Op.ATTR, Op.DIM):
            continue
        seen.add(id(n))
        if n.op in _REORDERING or n.op in (Op.BROADCAST_TO, Op.GATHER):
            return True
        stack.extend(value_srcs(n))
    return False


def materialize_pieces(nodes: tuple[Node, ...], roots: tuple[Node, ...]):
    """``roots`` (outputs, then the nodes shape checks name) with every piece read through a
    reshape, by a reduction or as a gather's source replaced by a copy of it; ``nodes`` is the graph's topological
    order. Returns the new roots (the same objects when nothing is copied)."""
    targets: dict[int, Node] = {}
    for n in nodes:
        # sum_to's axes (ShapeOf "broadcast") are reduced axes too; unreduce only reshapes
        only_reshapes = isinstance(n.arg, ReduceArg) and isinstance(n.arg.axes, ShapeOf) \
            and n.arg.axes.rule != "broadcast"
        if n.op is Op.RESHAPE or (n.op is Op.REDUCE and not only_reshapes and n.arg.kind != "copy"):
            _pieces_below(n.srcs[0], targets)
        elif n.op is Op.GATHER:
            _pieces_below(n.srcs[0], targets, gathered=True)
    if not targets:
        return roots
    rebuilt: dict[int, Node] = {}
    copies: dict[int, Node] = {}
    for n in nodes:
        srcs = []
        for s in n.srcs:
            new = rebuilt[id(s)]
            if id(s) in targets:
                if id(s) not in copies:
                    copies[id(s)] = Node(Op.REDUCE, (new,), COPY, s.loc)
                new = copies[id(s)]
            srcs.append(new)
        rebuilt[id(n)] = n if all(a is b for a, b in zip(srcs, n.srcs)) else Node(n.op, tuple(srcs), n.arg, n.loc)
    return tuple(rebuilt[id(r)] for r in roots)


def _rebuilt(n: Node, srcs: tuple) -> Node:
    return n if all(a is b for a, b in zip(srcs, n.srcs)) else Node(n.op, srcs, n.arg, n.loc)


def share_common(nodes: tuple[Node, ...], roots: tuple[Node, ...]):
    """``roots`` with each reduction without keepdims that has a twin with keepdims (same source,
    kind and axes as written) replaced by a squeeze of the twin, in an op that has layout nodes
    already; ``nodes`` is the graph's topological order. Returns the same objects when nothing
    changes."""
    # Only where the op has layout nodes already: a first view would move an op of plain
    # stages onto the emitted C++'s layout path (twice the source, and its own loops).
    if not any(n.op in VIEWS or n.op in PIECEWISE or n.op in (Op.IOTA, Op.DIM, Op.GATHER) for n in nodes):
        return roots
    twins = {(id(n.srcs[0]), n.arg.kind, n.arg.axes, n.arg.empty_ok): n for n in nodes
             if n.op is Op.REDUCE and n.arg.keep_dims is True and not n.arg.scan}
    # a node some other reads for its shape or axes (fg.grad's ``unreduce``, ``sum_to``) stays
    measured = {id(s) for n in nodes for s in n.srcs[len(value_srcs(n)):]}
    final: dict[int, Node] = {}
    for n in nodes:
        if id(n) in final:           # a twin, rebuilt where its squeeze needed it
            continue
        srcs = tuple(final[id(s)] for s in n.srcs)
        r = n.arg if n.op is Op.REDUCE else None
        twin = twins.get((id(n.srcs[0]), r.kind, r.axes, r.empty_ok)) if r is not None and r.keep_dims is False \
            and not r.scan and r.kind != "copy" and id(n) not in measured else None
        items = squeeze_items(r.axes) if twin is not None else None
        if items is not None:
            if id(twin) not in final:
                final[id(twin)] = _rebuilt(twin, srcs)
            final[id(n)] = Node(Op.INDEX, (final[id(twin)],), items, n.loc)
        else:
            final[id(n)] = _rebuilt(n, srcs)
    new = tuple(final[id(r)] for r in roots)
    return roots if all(a is b for a, b in zip(new, roots)) else new
