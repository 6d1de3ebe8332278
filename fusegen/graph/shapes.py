"""Shape rules of the layout ops (dims as values, views, pieces, iota) and the values of static
scalars, for ``fusegen.graph.rules.infer``. Each rule gives the node's ``NodeInfo`` and its
*resolved parameters* (``params``: the permutation; each index item as ``(slice, start, step,
length)``/``(int, k)``/``(new,)``; the reshaped or broadcast shape; a concat's piece offsets; pad
widths), which the plan's index maps are evaluated with (``fusegen.plan.viewsteps``). Unknown dims
(-1) and an unknown rank (None) propagate as the AOT ABI expects; the emitted ``NameInferShape``
renders the same rules in C++.
"""
from __future__ import annotations

import math
import operator
import typing
from dataclasses import dataclass

import numpy as np

from .. import dtypes as dt
from ..dtypes import DType
from ..errors import AxisError, BoundsError, DTypeError, ShapeError
from .nodes import UNKNOWN_DIM, Node, Op

Shape = typing.Optional[tuple]  # None: unknown rank; -1 entries: unknown dims


@dataclass(frozen=True)
class NodeInfo:
    dtype: DType | str         # a DType, or a weak scalar kind "bool"/"int"/"float"
    shape: Shape
    compute: DType | str | None = None   # elementwise: the dtype the op computes in
    acc: DType | None = None             # reductions: the accumulation dtype
    axes: tuple[int, ...] | None = None  # reductions: normalized axes (None if rank unknown)
    keep_dims: bool = False
    value: object = None                 # static scalars (dims, attributes, constants): the value
    params: object = None                # layout ops: their parameters resolved for these shapes


# --- static scalars ----------------------------------------------------------------------------
def _floordiv(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return 0 if b == 0 else a // b   # NumPy's integer floor_divide by zero gives 0
    return float(np.floor_divide(a, b))


def _mod(a, b):
    if isinstance(a, int) and isinstance(b, int):
        return 0 if b == 0 else a % b
    return float(np.remainder(a, b))


_STATIC = {
    Op.ADD: operator.add, Op.SUB: operator.sub, Op.MUL: operator.mul, Op.DIV: operator.truediv,
    Op.FLOOR_DIVIDE: _floordiv, Op.REMAINDER: _mod, Op.MAX: max, Op.MIN: min,
    Op.LT: operator.lt, Op.LE: operator.le, Op.GT: operator.gt, Op.GE: operator.ge, Op.EQ: operator.eq,
    Op.NE: operator.ne, Op.AND: lambda a, b: bool(a) and bool(b), Op.OR: lambda a, b: bool(a) or bool(b),
    Op.NEG: operator.neg, Op.ABS: abs, Op.NOT: lambda a: not a, Op.WHERE: lambda c, a, b: a if c else b,
    Op.CEIL: math.ceil, Op.FLOOR: math.floor, Op.POW: operator.pow,
}


def static_value(op: Op, values: list, fail):
    """The value of an elementwise op on static scalars (what shape parameters are made of), or
    None where it is not needed for shapes (transcendentals)."""
    f = _STATIC.get(op)
    if f is None:
        return None
    try:
        return f(*values)
    except ZeroDivisionError:
        return float("nan")


def static_cast(v, to) -> object:
    if v is None:
        return None
    kind = to.kind if isinstance(to, DType) else {"bool": "b", "int": "i", "float": "f", "complex": "c"}[to]
    if kind == "c":
        return complex(v)
    if isinstance(v, complex):  # complex -> real is refused (rules); a shape never needs it
        return None
    return bool(v) if kind == "b" else (int(v) if kind in "iu" else float(v))


# --- helpers -----------------------------------------------------------------------------------
def _axis(a: int, rank: int, fail, what: str = "axis") -> int:
    if not -rank <= a < rank:
        fail(f"{what} {a} is out of range for rank {rank} (valid: {-rank}..{rank - 1})" if rank
             else f"{what} {a} is out of range: the operand is a scalar (rank 0)", exc=AxisError)
    return a % rank


def _known(d) -> bool:
    return d is not None and d >= 0


def _vals(srcs, start: int = 1) -> list:
    """The static values of a node's parameter sources (None where a dim is unknown)."""
    return [s.value for s in srcs[start:]]


# --- the rules ---------------------------------------------------------------------------------
def _dim(n: Node, srcs, fail) -> NodeInfo:
    shp = srcs[0].shape
    if shp is None:
        return NodeInfo("int", ())
    if n.arg is None:
        return NodeInfo("int", (), value=math.prod(shp) if all(d >= 0 for d in shp) else None)
    k = _axis(n.arg, len(shp), fail, "shape index")
    return NodeInfo("int", (), value=shp[k] if shp[k] >= 0 else None)


def resolve_perm(p, rank: int, fail) -> tuple[int, ...]:
    """A ``Perm`` as the permutation of ``range(rank)`` it means."""
    if p.kind == "explicit":
        if len(p.a) != rank:
            fail(f"permutation {p.a} has {len(p.a)} axes, the operand has rank {rank}")
        perm = tuple(_axis(a, rank, fail) for a in p.a)
        if sorted(perm) != list(range(rank)):
            fail(f"{p.a} is not a permutation of the axes 0..{rank - 1}")
        return perm
    if p.kind == "reverse":
        return tuple(range(rank - 1, -1, -1))
    if p.kind == "swap":
        if rank < 2 and p.a == (-2, -1):
            fail(f"matrix_transpose needs rank >= 2, the operand has rank {rank}")
        a, b = (_axis(x, rank, fail) for x in p.a)
        perm = list(range(rank))
        perm[a], perm[b] = perm[b], perm[a]
        return tuple(perm)
    src = [_axis(x, rank, fail, "source axis") for x in p.a]
    dst = [_axis(x, rank, fail, "destination axis") for x in p.b]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        fail(f"moveaxis: repeated axis in source {p.a} or destination {p.b}")
    order = [k for k in range(rank) if k not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return tuple(order)


def _permute(n: Node, srcs, fail) -> NodeInfo:
    x = srcs[0]
    if x.shape is None:
        return NodeInfo(x.dtype, None)
    perm = resolve_perm(n.arg, len(x.shape), fail)
    return NodeInfo(x.dtype, tuple(x.shape[p] for p in perm), params=perm)


def _index(n: Node, srcs, fail) -> NodeInfo:
    x = srcs[0]
    vals = iter(_vals(srcs))
    items = n.arg
    consumed = sum(1 for it in items if it.kind in ("slice", "int", "squeeze"))
    if x.shape is None:
        return NodeInfo(x.dtype, None)
    r = len(x.shape)
    if consumed > r:
        fail(f"too many indices ({consumed}) for a tensor of rank {r}", exc=AxisError)
    expanded = []
    for it in items:
        if it.kind == "ellipsis":
            expanded += [None] * (r - consumed)
        else:
            expanded.append(it)
    if not any(it.kind == "ellipsis" for it in items):
        expanded += [None] * (r - consumed)
    shape, params, k = [], [], 0
    for it in expanded:
        if it is not None and it.kind == "new":
            shape.append(1)
            params.append(("new",))
            continue
        d = x.shape[k]
        k += 1
        if it is None:
            shape.append(d)
            params.append(("slice", 0, 1, d))
        elif it.kind == "int":
            i = next(vals)
            if i is not None and _known(d):
                if not -d <= i < d:
                    fail(f"index {i} is out of bounds for axis {k - 1} with size {d}", exc=BoundsError)
                params.append(("int", i % d))
            else:
                params.append(None)
        elif it.kind == "squeeze":
            if _known(d) and d != 1:
                fail(f"cannot squeeze axis {k - 1}: its size is {d}, not 1")
            params.append(("int", 0) if _known(d) else None)
        else:
            start, stop, step = (next(vals) if g else (1 if j == 2 else None) for j, g in enumerate(it.given))
            if step is not None and step == 0:
                fail("slice step cannot be zero")
            unknown = (it.given[0] and start is None) or (it.given[1] and stop is None) or step is None
            if unknown or not _known(d):
                shape.append(UNKNOWN_DIM)
                params.append(None)
                continue
            a, b, s = slice(start, stop, step).indices(d)
            length = len(range(a, b, s))
            shape.append(length)
            params.append(("slice", a if length else 0, s, length))
    return NodeInfo(x.dtype, tuple(shape), params=None if None in params else tuple(params))


def _reshape(n: Node, srcs, fail) -> NodeInfo:
    x = srcs[0]
    if n.arg == "like":  # to another node's shape, whatever its rank (roll's way back)
        target = srcs[1].shape
        # A -1 there is a dim unknown until run time (a trace per rank), not one to infer: the
        # dims are another node's, and its size is x's, so the target is the shape as it is.
        if target is None or x.shape is None or UNKNOWN_DIM in target or UNKNOWN_DIM in x.shape:
            return NodeInfo(x.dtype, target)
        dims = list(target)
    else:
        dims = _vals(srcs)
    for d in dims:
        if d is not None and d < -1:
            fail(f"reshape dims must be >= 0 or -1 (inferred), got {d}")
    if sum(1 for d in dims if d == -1) > 1:
        fail(f"reshape: only one dim can be -1, got {tuple(dims)}")
    numel = math.prod(x.shape) if x.shape is not None and all(d >= 0 for d in x.shape) else None
    known = [d for d in dims if d is not None and d != -1]
    if -1 in dims:
        rest = math.prod(known)
        if numel is None or any(d is None for d in dims):
            inferred = UNKNOWN_DIM
        elif rest == 0:
            fail(f"cannot reshape a tensor of size {numel} into {tuple(dims)}: -1 is ambiguous with a 0 dim")
        elif numel % rest:
            fail(f"cannot reshape a tensor of size {numel} into shape {tuple(dims)}")
        else:
            inferred = numel // rest
        out = tuple(inferred if d == -1 else (UNKNOWN_DIM if d is None else d) for d in dims)
    else:
        out = tuple(UNKNOWN_DIM if d is None else d for d in dims)
        if numel is not None and all(d >= 0 for d in out) and math.prod(out) != numel:
            fail(f"cannot reshape a tensor of size {numel} into shape {out}")
    ok = numel is not None and all(d >= 0 for d in out)
    return NodeInfo(x.dtype, out, params=out if ok else None)


def _broadcast_to(n: Node, srcs, fail) -> NodeInfo:
    x = srcs[0]
    if n.arg[0] == "like":
        target = srcs[1].shape
    else:
        target = tuple(UNKNOWN_DIM if d is None else d for d in _vals(srcs))
        for d in target:
            if d < -1:
                fail(f"broadcast_to: dims must be >= 0, got {d}")
    if target is None or x.shape is None:
        return NodeInfo(x.dtype, target)
    if len(x.shape) > len(target):
        fail(f"cannot broadcast shape {x.shape} to {target}: the target has fewer dims")
    off = len(target) - len(x.shape)
    for k, d in enumerate(x.shape):
        t = target[off + k]
        if d != 1 and d != t and UNKNOWN_DIM not in (d, t):
            fail(f"cannot broadcast shape {x.shape} to {target}: dim {d} at axis {k} is neither 1 nor {t}")
    ok = all(d >= 0 for d in target) and all(d >= 0 for d in x.shape)
    return NodeInfo(x.dtype, target, params=target if ok else None)


def _flip(n: Node, srcs, fail) -> NodeInfo:
    x = srcs[0]
    if x.shape is None:
        return NodeInfo(x.dtype, None)
    r = len(x.shape)
    axes = tuple(range(r)) if n.arg is None else tuple(_axis(a, r, fail) for a in n.arg)
    if len(set(axes)) != len(axes):
        fail(f"flip: repeated axis in {n.arg}")
    return NodeInfo(x.dtype, x.shape, params=tuple(sorted(axes)))


def _concat(n: Node, srcs, fail) -> NodeInfo:
    try:
        out_dt = dt.as_dtype(np.result_type(*[dt.materialize(s.dtype).np for s in srcs]))
    except Exception as e:  # noqa: BLE001 - NumPy's message names the dtypes
        fail(f"concat cannot promote {', '.join(str(s.dtype) for s in srcs)}: {e}", exc=DTypeError)
    if any(s.shape is None for s in srcs):
        return NodeInfo(out_dt, None)
    ranks = {len(s.shape) for s in srcs}
    if len(ranks) != 1:
        fail(f"concat needs arrays of one rank, got shapes {[s.shape for s in srcs]}")
    r = ranks.pop()
    if r == 0:
        fail("concat cannot join 0-d arrays (use stack)")
    a = _axis(n.arg, r, fail)
    shape = []
    for k in range(r):
        dims = [s.shape[k] for s in srcs]
        if k == a:
            shape.append(sum(dims) if all(d >= 0 for d in dims) else UNKNOWN_DIM)
            continue
        known = {d for d in dims if d >= 0}
        if len(known) > 1:
            fail(f"concat along axis {a}: dims at axis {k} differ ({[s.shape for s in srcs]})")
        shape.append(known.pop() if known else UNKNOWN_DIM)
    starts = None
    if all(s.shape[a] >= 0 for s in srcs):
        starts = tuple(int(x) for x in np.cumsum([0] + [s.shape[a] for s in srcs[:-1]]))
    return NodeInfo(out_dt, tuple(shape), params=None if starts is None else (a, starts))


def _pad(n: Node, srcs, fail) -> NodeInfo:
    x, value = srcs[0], srcs[1]
    if value.shape != ():
        fail(f"pad: constant_values must be a scalar, got shape {value.shape}")
    kind, npairs = n.arg
    w = _vals(srcs, 2)
    pairs = [(w[2 * i], w[2 * i + 1]) for i in range(npairs)]
    for b, a in pairs:
        if (b is not None and b < 0) or (a is not None and a < 0):
            fail(f"pad widths must be >= 0, got {pairs}")
    if x.shape is None:
        return NodeInfo(x.dtype, None)
    r = len(x.shape)
    if kind == "per_axis" and npairs != r:
        fail(f"pad: {npairs} (before, after) pairs for a tensor of rank {r}")
    pairs = pairs * r if kind == "all" else pairs
    shape = tuple(UNKNOWN_DIM if (d < 0 or b is None or a is None) else d + b + a
                  for d, (b, a) in zip(x.shape, pairs))
    ok = all(b is not None and a is not None for b, a in pairs)
    return NodeInfo(x.dtype, shape, params=tuple(pairs) if ok else None)


def _iota(n: Node, srcs, fail) -> NodeInfo:
    length = srcs[0].value
    if length is not None and length < 0:
        fail(f"arange length {length} is negative")
    return NodeInfo(dt.int64, (UNKNOWN_DIM if length is None else int(length),),
                    params=None if length is None else int(length))


# --- gathers (issue #17) -------------------------------------------------------------------------
def _gather(n: Node, srcs, fail) -> NodeInfo:
    """``take`` (the indices' dims replace ``axis``) and ``take_along_axis`` (same rank; the
    indices' extent on ``axis``, the broadcast of both elsewhere). params: (axis, extent of x
    on axis)."""
    x, idx = srcs
    name = "take" if n.arg.kind == "take" else "take_along_axis"
    idt = dt.materialize(idx.dtype)
    if idt.kind == "b":   # x[mask]: NumPy's boolean indexing
        fail(f"{name}: indices must have an integer dtype, got bool: a boolean mask selects a number of "
             "elements known only from its values, which a fused kernel's shapes cannot depend on; "
             "use fg.where(mask, x, fill) to keep x's shape", exc=DTypeError)
    if idt.kind not in "iu":
        fail(f"{name}: indices must have an integer dtype, got {idt}", exc=DTypeError)
    if x.shape is None or idx.shape is None:
        return NodeInfo(x.dtype, None)
    if n.arg.kind == "take":
        if not x.shape:
            fail(f"{name}: x must have rank >= 1 (got a 0-d array)")
        a = _axis(n.arg.axis, len(x.shape), fail)
        shape = x.shape[:a] + idx.shape + x.shape[a + 1:]
    else:
        if len(idx.shape) != len(x.shape) or not x.shape:
            fail(f"{name}: indices must have the rank of x ({len(x.shape)}), got rank {len(idx.shape)}")
        a = _axis(n.arg.axis, len(x.shape), fail)
        xs = tuple(1 if k == a else d for k, d in enumerate(x.shape))
        shape = []
        for k, (p, q) in enumerate(zip(xs, idx.shape)):
            if p not in (1, UNKNOWN_DIM) and q not in (1, UNKNOWN_DIM) and p != q:
                fail(f"{name}: cannot broadcast x {x.shape} and indices {idx.shape} at axis {k}")
            shape.append(q if p == 1 else (p if q in (1, UNKNOWN_DIM) else q))
        shape = tuple(shape)
    if x.shape[a] == 0 and UNKNOWN_DIM not in shape and math.prod(shape) > 0:
        fail(f"{name}: cannot take from axis {a} of size 0", exc=BoundsError)
    return NodeInfo(x.dtype, shape, params=(a, x.shape[a]))


#: The rule of each layout op (``rules.infer`` dispatches here).
LAYOUT_RULES = {
    Op.DIM: _dim, Op.PERMUTE: _permute, Op.INDEX: _index, Op.RESHAPE: _reshape,
    Op.BROADCAST_TO: _broadcast_to, Op.FLIP: _flip, Op.CONCAT: _concat, Op.PAD: _pad, Op.IOTA: _iota,
    Op.GATHER: _gather,
}
