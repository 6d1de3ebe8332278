"""Gathers while tracing (issue #17): ``take``, ``take_along_axis`` and integer-array indexing
``x[idx]`` / ``x[:, idx]`` (one advanced index), all one IR node, ``Op.GATHER``.

A gather is a read whose address has one data-dependent term (DESIGN-indexmaps, map kind 4):
the plan reads ``x`` through a ``Gather`` step (the indexed axis replaced by the indices' dims,
stride 0) and adds ``index * stride(axis)`` per element; the indices are an ordinary expression
read in the gather's context. Indices of any integer dtype; negative ones count from the end.
``mode="raise"`` (the default) checks every index once, in the kernel, and a bad one raises
``fusegen.BoundsError`` naming the op, the node, the axis and the value; ``"wrap"`` and
``"clip"`` are NumPy's modes (``clip`` clamps negative indices to 0, as NumPy does).
"""
from __future__ import annotations

from ..errors import TraceError
from .layout import as_tensor, dim, expand_dims, gather, iota, is_int, moveaxis, reshape
from .nodes import GatherArg, Op, ReduceArg  # noqa: F401
from .trace import Tensor, current_shape, make, op_prefix, user_loc

MODES = ("raise", "wrap", "clip")


def _where() -> str:
    return f" [at {user_loc()}]"


def _indices(indices, fn: str) -> Tensor:
    if isinstance(indices, Tensor):
        return indices
    if is_int(indices):
        return Tensor(make(Op.CONST, (), ("int", int(indices))))
    raise TraceError(f"{op_prefix()}{fn}: indices must be a traced integer tensor or an int, got "
                     f"{type(indices).__name__} {indices!r}{_where()}")


def _check(x, fn: str, axis, mode: str) -> Tensor:
    x = as_tensor(x, fn)
    if not is_int(axis):
        raise TraceError(f"{op_prefix()}{fn}: axis must be an int, got {axis!r}{_where()}")
    if mode not in MODES:
        raise TraceError(f"{op_prefix()}{fn}: mode must be one of {', '.join(map(repr, MODES))}, got {mode!r}"
                         f"{_where()}")
    return x


def take(x, indices, /, *, axis=None, mode: str = "raise") -> Tensor:
    """The array API's ``take`` with NumPy's N-d indices: ``out[a, j..., b] = x[a, indices[j...], b]``
    (the indices' dims replace ``axis``). ``axis=None`` takes from the flattened ``x`` (NumPy)."""
    if axis is None:
        x, axis = reshape(as_tensor(x, "take"), (-1,)), 0
    x = _check(x, "take", axis, mode)
    idx = _indices(indices, "take")
    return gather(x, idx, GatherArg("take", int(axis), mode))


def take_along_axis(x, indices, /, *, axis: int = -1, mode: str = "raise") -> Tensor:
    """The array API's ``take_along_axis``: ``indices`` has the rank of ``x``; the result has the
    indices' extent on ``axis`` and the broadcast of both shapes elsewhere (NumPy)."""
    x = _check(x, "take_along_axis", axis, mode)
    if not isinstance(indices, Tensor):
        raise TraceError(f"{op_prefix()}take_along_axis: indices must be a traced integer tensor{_where()}")
    return gather(x, indices, GatherArg("along", int(axis), mode))


# --- the adjoint (fg.grad) -----------------------------------------------------------------------
def _normalized(idx: Tensor, n, mode: str) -> Tensor:
    """The index each element really read, as the kernel computes it. An index out of range
    raises in the backward as it does in the forward (the backward runs on its own: a one-hot
    compare would drop a bad label silently): a checked gather from ``arange(n)``, which gives
    the index with negative ones counted from the end, materialized in a pass over the indices
    alone (read in the loop over x, a gather cost cross-entropy's backward 7x in the emitted C++)."""
    from .trace import binary
    if mode == "wrap":
        return idx % n
    if mode == "clip":
        return binary(Op.MIN, binary(Op.MAX, idx, 0), n - 1)
    return Tensor(make(Op.REDUCE, (take(iota(n), idx, axis=0).node,), ReduceArg("copy", (), False)))


#: Elementwise arithmetic an index may go through (``labels + offset``, ``labels % n``).
_OFFSETS = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.REMAINDER, Op.NEG})


def _unit_extent(n, axis: int) -> bool:
    """Whether ``n``'s extent on ``axis`` is 1 whatever the inputs' shapes: a new axis there
    (``labels[..., None]`` for axis -1, ``labels[:, None]`` for axis 1), through casts and
    arithmetic with scalars; in a rank- or shape-specialized trace, a known 1."""
    shape = current_shape(n)
    if shape is not None:
        return -len(shape) <= axis < len(shape) and shape[axis] == 1
    if n.op is Op.INDEX:
        out = [it.kind for it in n.arg if it.kind in ("slice", "new", "ellipsis")]  # the dims it makes
        if axis < 0:         # counted from the end: only past an ellipsis are they known
            tail = out[out.index("ellipsis") + 1:] if "ellipsis" in out else []
            return -axis <= len(tail) and tail[axis] == "new"
        head = out[:out.index("ellipsis")] if "ellipsis" in out else out
        return axis < len(head) and head[axis] == "new"
    if n.op is Op.CAST:
        return _unit_extent(n.srcs[0], axis)
    if n.op in _OFFSETS:
        arrays = [s for s in n.srcs if s.op is not Op.CONST]
        return bool(arrays) and all(_unit_extent(s, axis) for s in arrays)
    return False


def _trailing_dims(idx: Tensor, axis: int) -> int | None:
    """How many dims follow ``axis`` in ``idx``: known for a negative axis, or a known rank."""
    shape = current_shape(idx.node)
    if shape is not None:
        return len(shape) - 1 - axis % len(shape)
    return -axis - 1 if axis < 0 else None


def gather_adjoint(node, g: Tensor) -> Tensor:
    """The adjoint of a gather with respect to its source: a scatter-add, computed
    *owner-computes*: each element of ``dx`` sums the cotangents of the result elements whose
    index selects it (``sum(where(index == c, g, 0))`` over the gathered positions). Repeated
    indices accumulate; no two threads write one element, so it is correct in parallel and on
    CUDA without atomics. It reads every index once per element of the gathered axis: O(extent x
    indices) per row, fine for ``take_along_axis`` with few indices per row (cross-entropy's one
    label: an elementwise one-hot), slow for big embedding tables."""
    from .trace import reduce, sum_to, where
    x, idx = Tensor(node.srcs[0]), Tensor(node.srcs[1])
    axis, kind = node.arg.axis, node.arg.kind
    n = dim(x, axis)
    c = iota(n)
    trailing = _trailing_dims(idx, axis) if kind == "along" and _unit_extent(idx.node, axis) else None
    if trailing is not None:
        # one index per row (cross-entropy's label): the scatter-add is a one-hot compare, no
        # reduction over the indices. Returned unsummed: fg.grad sums it to x's shape where x's
        # adjoint is complete, together with x's other parts (cross-entropy's softmax), in one
        # loop that writes the gradient (no workspace of x's size in between)
        cc = c
        for _ in range(trailing):
            cc = cc[:, None]                                                              # (C, 1, ..., 1)
        if node.arg.mode != "raise":
            return where(_normalized(idx, n, node.arg.mode) == cc, g, 0)
        # A bad label raises in the forward; this backward runs on its own, and a compare with no
        # match would leave the label's term out silently: its row is NaN instead (JAX's gathers
        # fill out of bounds with NaN). A checked gather here would split the one fused pass.
        hot = where(where(idx < 0, idx + n, idx) == cc, g, 0)
        return where((idx >= -n) & (idx < n), hot, float("nan"))
    if kind == "along":
        gi = expand_dims(moveaxis(g, axis, -1), axis=-2)                                 # (..., 1, K)
        ii = expand_dims(moveaxis(_normalized(idx, n, node.arg.mode), axis, -1), axis=-2)
        hit = ii == c[:, None]                                                            # (..., C, K)
        return sum_to(moveaxis(reduce("sum", where(hit, gi, 0), -1, False), -1, axis), x)  # x may broadcast
    r = idx.ndim                          # the indices' rank: the backward op specializes on it
    a = axis % x.ndim
    gm = moveaxis(g, tuple(range(a, a + r)), tuple(range(-r, 0))) if r else g           # pre+post+idx dims
    gm = expand_dims(gm, axis=-(r + 1))                                                   # ... 1, idx dims
    cc = c
    for _ in range(r):
        cc = cc[:, None]                                                                  # (C, 1, ..., 1)
    hit = _normalized(idx, n, node.arg.mode) == cc
    total = reduce("sum", where(hit, gm, 0), tuple(range(-r, 0)), False) if r else where(hit, gm, 0)
    return sum_to(moveaxis(total, -1, a), x)
