"""Gradient bookkeeping that moves nothing at a signature's shapes, taken out of the op.

``fg.grad`` writes broadcasting's adjoint as ``sum_to(g, like)`` and dropping reduced dims' as
``unreduce(g, r)``: reductions whose axes only run-time shapes decide, so the shape-generic plan
gives each its own stage and workspace. At the shapes ops are usually called with they reduce
nothing: a ``sum_to`` then only broadcasts its value to ``like``'s shape, an ``unreduce`` only puts
the reduced dims back as 1s. Those stages cut the loop nests around them: cross-entropy's backward
ran its max and exp-sum pass, a pass over the d_out scalar, one over the rows' small values and
the output pass as four groups.

``without_noops`` is the op for one signature with each such node replaced by the view it
amounts to (``broadcast_to``, ``expand_dims``) or by its value where the shapes already match; the
replacements are elementwise, so the stages around them fuse (cross-entropy's backward: the max
and exp-sum pass, then the output pass, one row loop nest). Every other node is kept as the very
same object, so messages that name a node (a gather's bad index) name it as in the op itself. A
backend that plans per signature (the Numba CPU backend) uses it; the shape-generic emitted C++
keeps the general stages.
"""
from __future__ import annotations

import threading

from .. import dtypes as dt
from ..graph.layout import broadcast_like, expand_dims
from ..ir import Node, Op, OpDef, ShapeOf, Spec, Tensor, computed_nodes, infer

_lock = threading.Lock()


def noops(spec: Spec) -> list[Node]:
    """The op's computed ``sum_to``/``unreduce`` nodes that reduce nothing at ``spec``'s shapes and
    keep their value's dtype."""
    g = spec.opdef.graph
    computed = computed_nodes(g)
    out = []
    for n in g.nodes:
        if n.op is not Op.REDUCE or not isinstance(n.arg.axes, ShapeOf) or id(n) not in computed:
            continue
        info, src = spec.of(n), spec.of(n.srcs[0])
        if info.axes == () and info.shape is not None and src.shape is not None and \
                dt.materialize(info.dtype) == dt.materialize(src.dtype):
            out.append(n)
    return out


def without_noops(spec: Spec, in_dtypes, in_shapes, attrs: dict) -> tuple[OpDef, Spec]:
    """``(op, spec)`` for the signature, the no-op nodes (``noops``) replaced; ``spec``'s own op
    and ``spec`` where there are none. ``in_dtypes``, ``in_shapes``, ``attrs``: what ``spec`` was
    inferred from (``infer``'s arguments)."""
    op = spec.opdef
    found = noops(spec)
    if not found:
        return op, spec
    g = op.graph
    how = {}
    for n in found:
        if spec.of(n).shape == spec.of(n.srcs[0]).shape:
            how[id(n)] = ("value",)
        elif n.arg.axes.rule == "broadcast":
            how[id(n)] = ("broadcast",)
        else:   # unreduce: the reduced axes of the reduction it undoes come back as size-1 dims
            how[id(n)] = ("expand", tuple(spec.of(n.srcs[1]).axes))
    key = tuple((g.idx(n), how[id(n)]) for n in found)
    cache = op.__dict__.setdefault("_without_noops", {})
    with _lock:
        new = cache.get(key)
    if new is None:
        new = _rewrite(op, how)
        with _lock:
            new = cache.setdefault(key, new)
    return new, infer(new, in_dtypes, in_shapes, attrs)


def _rewrite(op: OpDef, how: dict) -> OpDef:
    g = op.graph

    def body(*args, **attrs):
        memo: dict[int, Node] = {}

        def build(n: Node) -> Node:
            if id(n) in memo:
                return memo[id(n)]
            rule = how.get(id(n))
            if rule is None:
                srcs = tuple(build(s) for s in n.srcs)
                new = n if all(a is b for a, b in zip(srcs, n.srcs)) else Node(n.op, srcs, n.arg, n.loc)
            elif rule[0] == "value":
                new = build(n.srcs[0])
            elif rule[0] == "broadcast":
                new = broadcast_like(Tensor(build(n.srcs[0])), Tensor(build(n.srcs[1]))).node
            else:
                new = expand_dims(Tensor(build(n.srcs[0])), axis=rule[1]).node
            memo[id(n)] = new
            return new

        outs = [Tensor(build(o)) for o in g.outputs]
        return tuple(outs) if op.multi_output else outs[0]

    body.__signature__ = op.signature_for(list(op.inputs))
    body.__name__ = op.name
    return OpDef(body, op.name)
