"""What JAX's transforms may do with a fused op: the vmap rule (whether one handler call on the
whole batch keeps the op's meaning) and the ``shard_map`` typing of results and gradients
(which mesh axes their values vary along). ``fusegen.jax`` applies them.
"""
from __future__ import annotations

from typing import Any

import jax

import fusegen as fg


class BatchRule:
    """Whether a leading batch dim keeps the op's meaning (see fusegen.jax's docstring, vmap)."""

    def __init__(self, op: fg.OpDef):
        from .ir import AttrRef, Op, ShapeOf
        g = op.graph
        self.ok = g is not None                      # an op traced per rank or shape: per element
        self.axis_attrs: dict[str, list[int]] = {}   # attribute -> reduce-source nodes it sizes
        if g is None:
            return
        used_as_value = {n.arg for n in g.nodes if n.op is Op.ATTR}
        for n in g.nodes:
            if not batch_safe_layout(n, Op):
                self.ok = False
            if n.op is not Op.REDUCE:
                continue
            axes = n.arg.axes
            if axes is None or isinstance(axes, ShapeOf):
                self.ok = False                      # all axes, or axes set by shapes: a batch dim would be summed too
            elif isinstance(axes, AttrRef):
                if axes.name in used_as_value:
                    self.ok = False                  # the value is also arithmetic: cannot rewrite it
                self.axis_attrs.setdefault(axes.name, []).append(g.idx(n.srcs[0]))
            elif any(a >= 0 for a in ((axes,) if isinstance(axes, int) else axes)):
                self.ok = False                      # a constant axis counted from the front

    def normalize(self, spec, bound: dict) -> dict | None:
        """``bound`` with axis attributes counted from the end, or None if no such form exists."""
        out = dict(bound)
        for name, srcs in self.axis_attrs.items():
            ranks = {len(spec.info[s].shape) for s in srcs}
            if len(ranks) != 1:
                return None
            rank = ranks.pop()
            v = bound[name]
            out[name] = tuple(a % rank - rank for a in v) if isinstance(v, tuple) else v % rank - rank
        return out


def batch_safe_layout(n, Op) -> bool:
    """Whether layout node ``n`` means the same with one more leading dim: it names axes only
    from the end (negative axes, an index that starts with ``...``, a reshape or broadcast to
    another node's shape) and never the whole rank (``.T``, an explicit permutation, pad widths
    for every axis, ``x.size``)."""
    def from_end(axes) -> bool:
        return axes is not None and all(a < 0 for a in axes)

    if n.op is Op.PERMUTE:
        p = n.arg
        return p.kind in ("swap", "move") and from_end(p.a) and from_end(p.b or (-1,))
    if n.op is Op.INDEX:
        return bool(n.arg) and n.arg[0].kind == "ellipsis"
    if n.op in (Op.RESHAPE, Op.BROADCAST_TO):
        return n.arg == "like" or n.arg == ("like",)
    if n.op is Op.FLIP:
        return from_end(n.arg)
    if n.op is Op.CONCAT:
        return n.arg < 0
    if n.op is Op.PAD:
        return False
    if n.op is Op.DIM:
        return n.arg is not None and n.arg < 0
    if n.op is Op.GATHER:
        # take_along_axis along an axis from the end keeps its meaning with a leading batch dim on
        # both operands; take (the indices' dims replace the axis: a batched index array would
        # bring the batch dim twice) and x[idx] (axis 0) do not.
        return n.arg.kind == "along" and n.arg.axis < 0
    return True


def varying(x) -> frozenset:
    """The shard_map mesh axes along which ``x``'s value differs between devices (its type's
    varying manual axes; empty outside ``shard_map``, or where JAX does not type them)."""
    t = jax.typeof(x)
    m = getattr(t, "manual_axis_type", None)
    return frozenset(m.varying if m is not None else getattr(t, "vma", ()))


def vary(x, axes) -> Any:
    """``x`` typed as varying along mesh ``axes`` too (a cast: the value is unchanged)."""
    more = tuple(sorted(set(axes) - varying(x)))
    if not more:
        return x
    if hasattr(jax.lax, "pcast"):
        return jax.lax.pcast(x, more, to="varying")
    return jax.lax.pvary(x, more)


def typed_as_input(g, x) -> Any:
    """A gradient ``g`` typed as its input ``x`` is inside ``shard_map`` (JAX's check): summed
    over the axes along which only the gradient varies (the transpose of using an invariant
    value on varying ones: a replicated weight's gradient is the sum of the devices'), cast to
    varying along the axes only the input varies on."""
    extra = tuple(sorted(varying(g) - varying(x)))
    if extra:
        g = jax.lax.psum(g, extra)
    return vary(g, varying(x))
