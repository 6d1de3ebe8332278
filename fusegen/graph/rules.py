"""Shape and dtype rules: ``infer`` evaluates them for concrete (or partly unknown: -1 dims, an
unknown rank) inputs and gives a ``Spec``, the op specialized to a signature. The C++ emitters
render the very same rules (``NameInferShape``, the emitted kernel's checks), so the two cannot
drift; a change here is a change to ``emitters/templates/_fg_runtime.inc.j2`` too.
"""
from __future__ import annotations

import typing
from dataclasses import dataclass

import numpy as np

from .. import dtypes as dt
from ..dtypes import AttrType, DType
from ..errors import ArgumentError, AxisError, DTypeError, ScalarRangeError, ShapeError
from .nodes import (AttrRef, BINARY_UFUNC, DTypeOf, Graph, Node, Op, ShapeOf, UNARY_UFUNC, UNKNOWN_DIM,
                    UNKNOWN_RANK)
from .shapes import LAYOUT_RULES, NodeInfo, Shape, static_cast, static_value  # noqa: F401
from .rng import infer_random
from . import cplx
from .text import where_text

@dataclass(frozen=True)
class Spec:
    """The op specialized to input dtypes, shapes and attribute values."""

    opdef: object   # the OpDef (not imported: the op's module calls these rules)
    dtypes: tuple[DType, ...]
    attrs: tuple
    info: tuple[NodeInfo, ...]

    def of(self, node: Node) -> NodeInfo:
        return self.info[self.opdef.graph.idx(node)]

    @property
    def out_shapes(self) -> tuple[Shape, ...]:
        return tuple(self.of(o).shape for o in self.opdef.graph.outputs)

    @property
    def out_dtypes(self) -> tuple[DType, ...]:
        return tuple(dt.materialize(self.of(o).dtype) for o in self.opdef.graph.outputs)


def broadcast_shapes(shapes, fail) -> Shape:
    """NumPy broadcasting with the AOT ABI's unknowns (-1 dims; None for unknown rank)."""
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(rank):
        dims = [s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0]
        known = {d for d in dims if d not in (1, UNKNOWN_DIM)}
        if len(known) > 1:
            fail(f"cannot broadcast shapes {' and '.join(map(str, shapes))}: dims {sorted(known)} "
                 f"at axis {k - rank}")
        if known:
            out.append(known.pop())
        elif UNKNOWN_DIM in dims:
            out.append(UNKNOWN_DIM)
        else:
            out.append(1)
    return tuple(out)


def normalize_axes(axes, rank: int, fail) -> tuple[int, ...]:
    """Canonical reduction axes: sorted, non-negative, unique. ``None`` means all axes."""
    if axes is None:
        return tuple(range(rank))
    out = []
    for a in axes:
        if not -rank <= a < rank:
            fail(f"axis {a} is out of range for rank {rank} (valid: {-rank}..{rank - 1})" if rank
                 else f"axis {a} is out of range: the operand is a scalar (rank 0)", exc=AxisError)
        out.append(a % rank)
    if len(set(out)) != len(out):
        fail(f"repeated axis in {tuple(axes)}")
    return tuple(sorted(out))


def reduce_dtypes(kind: str, x: DType) -> tuple[DType, DType]:
    """(output dtype, accumulation dtype) of a reduction, as NumPy's np.<kind> gives."""
    if kind in ("max", "min", "copy"):
        out = x
    elif kind == "mean":
        out = x if x.kind in "fc" else dt.float64
    elif x.kind == "u":
        out = dt.uint64
    elif x.kind in "ib":
        out = dt.int64
    else:
        out = x
    acc = dt.float32 if out is dt.float16 else out
    return out, acc


def _infer_scan(n: Node, x: NodeInfo, fail) -> NodeInfo:
    """A scan keeps its source's shape; it accumulates as the reduction of its kind does (int64
    for signed ints and bool, uint64 for unsigned, float32 for float16), and ``logaddexp`` in the
    dtype ``np.exp`` gives (a float)."""
    xd = dt.materialize(x.dtype)
    if n.arg.kind == "logaddexp":
        try:
            _, out_dt = dt.resolve_ufunc("exp", (xd,))
        except DTypeError as e:
            fail(str(e), exc=DTypeError)
        acc = dt.float32 if out_dt is dt.float16 else out_dt
    else:
        cplx.check_reduce(n.arg.kind, xd, fail)
        out_dt, acc = reduce_dtypes(n.arg.kind, xd)
    if x.shape is None:
        return NodeInfo(out_dt, None, xd, acc, None, True)
    return NodeInfo(out_dt, x.shape, xd, acc, normalize_axes(n.arg.axes, len(x.shape), fail), True)


def infer(opdef, in_dtypes, in_shapes, attrs: dict, consulted: set | None = None) -> Spec:
    """Evaluate the op's dtype and shape rules.

    ``in_shapes`` entries are tuples (with -1 for unknown dims) or None / ``(-2,)`` for an
    unknown rank. ``attrs`` must already be bound (``opdef.bind_attrs``). ``consulted``: see
    ``infer_nodes``.
    """
    g = opdef.graph
    if len(in_dtypes) != len(opdef.inputs) or len(in_shapes) != len(opdef.inputs):
        raise ArgumentError(f"op {opdef.name} takes {len(opdef.inputs)} inputs "
                            f"({', '.join(opdef.inputs)}), got {len(in_dtypes)}")
    in_dtypes = tuple(dt.as_dtype(d) for d in in_dtypes)
    try:
        info = infer_nodes(opdef, g, in_dtypes, in_shapes, attrs, consulted)
    except DTypeError as e:   # a backward op's complex values may first trip a real-only rule
        cplx.check_grad(opdef, in_dtypes, e)
        raise
    cplx.check_grad(opdef, in_dtypes)
    for n, i in zip(g.nodes, info):  # kernels index with int64: refuse before anything is allocated
        if i.shape is not None and UNKNOWN_DIM not in i.shape:
            count = 1
            for d in i.shape:
                count *= d
            if count >= 2 ** 62:
                raise ShapeError(f"{where_text(opdef, n)}: shape {i.shape} is too large: {count} elements "
                                 "overflow a kernel's int64 indexing")
    for a, b, what in g.checks:
        sa, sb = info[g.idx(a)].shape, info[g.idx(b)].shape
        if not same_shape(sa, sb):
            raise ShapeError(f"op {opdef.name}: {what}: {sa} != {sb}")
    return Spec(opdef, in_dtypes, tuple(sorted(attrs.items())), tuple(info))


def infer_nodes(opdef, g: Graph, in_dtypes, in_shapes, attrs: dict,
                consulted: set | None = None) -> list[NodeInfo]:
    """The rules evaluated over ``g``'s nodes (``opdef`` names the op, its inputs and attribute
    types in messages: an ``OpDef``, or while tracing an object with the same fields).

    ``consulted``, when given, collects the attributes whose *values* decided anything but other
    static values and the checks: a shape, a layout op's parameters, reduction axes, the dtype a
    comparison computes in. The others reach the kernel as run-time scalars, so one trace and
    one compiled kernel serve every value of them (``OpDef.specialize``, ``rt.kernel``)."""
    shapes = [None if (s is None or tuple(s) == (UNKNOWN_RANK,)) else tuple(int(d) for d in s)
              for s in in_shapes]
    info: list[NodeInfo] = []
    taint: list[frozenset] = []   # per node: the attributes its static value was computed from
    for n in g.nodes:
        def fail(msg, _n=n, exc=ShapeError):
            raise exc(f"{where_text(opdef, _n)}: {msg}")

        srcs = [info[g.idx(s)] for s in n.srcs]
        if consulted is not None:
            taint.append(_taint(n, [taint[g.idx(s)] for s in n.srcs], consulted))
        if n.op is Op.INPUT:
            info.append(NodeInfo(in_dtypes[n.arg], shapes[n.arg]))
        elif n.op is Op.ATTR:
            kind = {AttrType.BOOL: "bool", AttrType.INT: "int", AttrType.FLOAT: "float"}[opdef.attrs[n.arg].type]
            info.append(NodeInfo(kind, (), value=attrs.get(n.arg)))
        elif n.op is Op.CONST:
            info.append(NodeInfo(n.arg[0], (), value=n.arg[1]))
        elif n.op is Op.CAST:
            to = dt.materialize(srcs[1].dtype) if isinstance(n.arg, DTypeOf) else n.arg
            cplx.check_cast(srcs[0].dtype, to, fail)
            info.append(NodeInfo(to, srcs[0].shape, value=static_cast(srcs[0].value, to)))
        elif n.op in LAYOUT_RULES:
            info.append(LAYOUT_RULES[n.op](n, srcs, fail))
        elif n.op is Op.RANDOM:
            info.append(infer_random(n, srcs, fail))
        elif n.op is Op.REDUCE and isinstance(n.arg.axes, ShapeOf):
            info.append(_infer_shape_of(n, srcs, info, g, fail))
        elif n.op is Op.REDUCE and n.arg.scan:
            info.append(_infer_scan(n, srcs[0], fail))
        elif n.op is Op.REDUCE:
            a, x = n.arg, srcs[0]
            axes = attrs[a.axes.name] if isinstance(a.axes, AttrRef) else a.axes
            if isinstance(axes, int):
                axes = (axes,)
            keep = attrs[a.keep_dims.name] if isinstance(a.keep_dims, AttrRef) else a.keep_dims
            xd = dt.materialize(x.dtype)
            cplx.check_reduce(a.kind, xd, fail)
            out_dt, acc = reduce_dtypes(a.kind, xd)
            if x.shape is None:
                info.append(NodeInfo(out_dt, None, xd, acc, None, keep))
                continue
            ax = normalize_axes(axes, len(x.shape), fail)
            if keep:
                shp = tuple(1 if k in ax else d for k, d in enumerate(x.shape))
            else:
                shp = tuple(d for k, d in enumerate(x.shape) if k not in ax)
            if a.kind in ("max", "min") and not a.empty_ok and any(x.shape[k] == 0 for k in ax):   # NumPy raises, even for an empty result
                fail(f"{a.kind} over an axis of size 0 has no identity", exc=ShapeError)
            info.append(NodeInfo(out_dt, shp, xd, acc, ax, keep))
        else:
            if n.op is Op.ROUND and cplx.is_complex(srcs[0].dtype):
                uf = "rint"   # (np.trunc takes no complex values; rint does, part by part)
            elif n.op in UNARY_UFUNC:
                uf = UNARY_UFUNC[n.op]
            elif n.op in BINARY_UFUNC:
                uf = BINARY_UFUNC[n.op]
            else:  # WHERE: the branches promote as np.where's do; the condition is tested != 0
                uf = "add"
            operands = tuple(s.dtype for s in (srcs[1:] if n.op is Op.WHERE else srcs))
            if n.op is Op.WHERE and len({str(o) for o in operands}) == 1:
                comp = out = operands[0]  # np.where(c, a, a) keeps a's dtype (bool included)
            else:
                try:
                    comp, out = dt.resolve_ufunc(uf, operands)
                except DTypeError as e:
                    fail(str(e), exc=DTypeError)
                if n.op is Op.WHERE:
                    comp = out
            checked = _weak_ints_in_range(n, srcs, comp, fail)
            if checked is not comp and consulted is not None:   # (a comparison widened by a value)
                consulted.update(*(taint[g.idx(s)] - {_DIM} for s in n.srcs))
            comp = checked
            cplx.check_elementwise(n, tuple(s.dtype for s in srcs), comp, fail)
            if n.op is Op.RELU and comp == "bool" or (isinstance(comp, DType) and comp.kind == "b"
                                                       and n.op is Op.RELU):
                fail("relu is not defined for bool", exc=DTypeError)
            if n.op is Op.NEXTAFTER and comp is dt.float16:  # (#18) a float32 step is not a float16 one
                fail("nextafter is not supported for float16 (computed in float32 registers, its step "
                     "would be float32's); cast to float32", exc=DTypeError)
            value = static_value(n.op, [s.value for s in srcs], fail) if all(
                s.value is not None and s.shape == () for s in srcs) else None
            if out == "int" and isinstance(value, int) and not -2 ** 63 <= value < 2 ** 63 and \
                    n.op not in _COMPARISONS:
                # Python computes it exactly; a kernel computes arithmetic on attributes and dims
                # in int64, where it would wrap (n * n at n = 2**32 gave 0)
                fail(f"Python integer {value} (computed from attributes, dims or constants) is out of bounds "
                     "for int64, which the kernel computes it in", exc=ScalarRangeError)
            info.append(NodeInfo(out, broadcast_shapes([s.shape for s in srcs], fail), comp, value=value))
    return info


_COMPARISONS = (Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE)
#: the sources of each layout op whose static values its rule reads (the others: tensors, whose
#: shapes it reads, and a pad's constant, which the kernel reads)
_STATIC_SRCS = {Op.IOTA: slice(0, None), Op.PAD: slice(2, None), Op.GATHER: slice(0, 0), Op.CONCAT: slice(0, 0),
                Op.DIM: slice(0, 0)}


_DIM = ""   # (in a taint: the value reads a dim)


def _taint(n: Node, srcs: list[frozenset], consulted: set) -> frozenset:
    """The attributes ``n``'s static value comes from (and ``_DIM`` where it reads a dim); those
    its rule reads go to ``consulted`` (see ``infer_nodes``), and so do those mixed with a dim:
    ``x.shape[-1] * scale`` is computed here and handed to the kernel as one value. A narrow
    comparison's widening is found where it happens."""
    if n.op is Op.ATTR:
        return frozenset((n.arg,))
    if n.op is Op.DIM:
        return frozenset((_DIM,))
    if n.op is Op.REDUCE:
        consulted.update(a.name for a in (getattr(n.arg, "axes", None), getattr(n.arg, "keep_dims", None))
                         if isinstance(a, AttrRef))
        return frozenset()
    if n.op in LAYOUT_RULES:
        for t in srcs[_STATIC_SRCS.get(n.op, slice(1, None))]:
            consulted.update(t - {_DIM})
        return frozenset()
    if n.op is Op.RANDOM or not srcs:   # (a random op reads its parameters' values only to check them)
        return frozenset()
    t = frozenset().union(*srcs)
    if _DIM in t and len(t) > 1:
        consulted.update(t - {_DIM})
    return t


def _weak_ints_in_range(n: Node, srcs: list[NodeInfo], comp, fail):
    """``comp``, the integer dtype a Python integer operand (a literal, an attribute, a dim) is
    computed in, checked as NumPy 2 does: outside its range, a comparison is still exact
    (computed in int64 here, which holds both sides) and anything else a ``ScalarRangeError``,
    NumPy's ``OverflowError``."""
    if not isinstance(comp, DType) or comp.kind not in "iu":
        return comp
    if n.op in _COMPARISONS and comp.itemsize < 8 and any(
            s.dtype == "int" and m.op is not Op.CONST for s, m in zip(srcs, n.srcs)):
        # an attribute or a dim: its value is known only at run time where the source is emitted
        # once for all values (AOT, XLA), so the comparison is computed where any value is exact
        return dt.int64
    info = np.iinfo(comp.np)
    for s in srcs:
        v = s.value
        if s.dtype != "int" or not isinstance(v, int) or info.min <= v <= info.max:
            continue
        if n.op in _COMPARISONS and comp is not dt.uint64 and -2**63 <= v < 2**63:
            comp = dt.int64
            continue
        fail(f"Python integer {v} out of bounds for {comp.name}", exc=ScalarRangeError)
    return comp


def same_shape(a: Shape, b: Shape) -> bool:
    """Equal shapes, where an unknown rank or dim (known only at run time) matches anything."""
    if a is None or b is None:
        return True
    return len(a) == len(b) and all(x == y or UNKNOWN_DIM in (x, y) for x, y in zip(a, b))


def _infer_shape_of(n: Node, srcs: list[NodeInfo], info: list[NodeInfo], g: Graph, fail) -> NodeInfo:
    """sum_to and unreduce: a sum whose axes (and result shape) come from ``srcs[1]``'s shape."""
    x, like = srcs[:2]
    out_dt, acc = reduce_dtypes("sum", dt.materialize(x.dtype))
    if n.arg.axes.rule == "broadcast":
        if any(s.shape is None for s in srcs):
            return NodeInfo(out_dt, like.shape, dt.materialize(x.dtype), acc, None, True)
        # The loop runs over all the shapes broadcast (the value may be smaller than ``like``
        # or the span); ``like``'s size-1 and missing leading dims are summed.
        dom = broadcast_shapes([s.shape for s in srcs], fail)
        off = len(dom) - len(like.shape)
        axes = tuple(k for k in range(len(dom)) if k < off or like.shape[k - off] == 1)
        return NodeInfo(out_dt, like.shape, dt.materialize(x.dtype), acc, axes, True)
    r = n.srcs[1]
    rinfo, src = info[g.idx(r)], info[g.idx(r.srcs[0])]
    if not same_shape(x.shape, rinfo.shape):
        fail(f"the value has shape {x.shape}, but the reduction it undoes gives {rinfo.shape}")
    if src.shape is None or rinfo.axes is None:
        return NodeInfo(out_dt, None, dt.materialize(x.dtype), acc, None, True)
    shape = tuple(1 if k in rinfo.axes else d for k, d in enumerate(src.shape))
    return NodeInfo(out_dt, shape, dt.materialize(x.dtype), acc, (), True)
