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
from .nodes import GatherArg, Op
from .trace import Tensor, make, op_prefix, user_loc

MODES = ("raise", "wrap", "clip")


def _where() -> str:
    return f" [at {user_loc()}]"


def _indices(indices, fn: str) -> Tensor:
    from .layout import is_int
    if isinstance(indices, Tensor):
        return indices
    if is_int(indices):
        return Tensor(make(Op.CONST, (), ("int", int(indices))))
    raise TraceError(f"{op_prefix()}{fn}: indices must be a traced integer tensor or an int, got "
                     f"{type(indices).__name__} {indices!r}{_where()}")


def _check(x, fn: str, axis, mode: str) -> Tensor:
    from .layout import as_tensor, is_int
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
        from .layout import as_tensor, reshape
        x, axis = reshape(as_tensor(x, "take"), (-1,)), 0
    x = _check(x, "take", axis, mode)
    idx = _indices(indices, "take")
    return Tensor(make(Op.GATHER, (x.node, idx.node), GatherArg("take", int(axis), mode)))


def take_along_axis(x, indices, /, *, axis: int = -1, mode: str = "raise") -> Tensor:
    """The array API's ``take_along_axis``: ``indices`` has the rank of ``x``; the result has the
    indices' extent on ``axis`` and the broadcast of both shapes elsewhere (NumPy)."""
    x = _check(x, "take_along_axis", axis, mode)
    if not isinstance(indices, Tensor):
        raise TraceError(f"{op_prefix()}take_along_axis: indices must be a traced integer tensor{_where()}")
    return Tensor(make(Op.GATHER, (x.node, indices.node), GatherArg("along", int(axis), "raise" if mode is None
                                                                    else mode)))


def advanced_index(x: Tensor, items: tuple) -> Tensor:
    """``x[items]`` where one item is an integer tensor and the others are slices, ``None`` and
    ``...``: the basic part as a view, then a take along the advanced item's axis (NumPy's result
    shape for a single advanced index)."""
    from .layout import index
    arrays = [k for k, it in enumerate(items) if isinstance(it, Tensor)]
    if len(arrays) != 1:
        raise TraceError(f"{op_prefix()}indexing with {len(arrays)} integer arrays is not supported: use one "
                         f"(with slices, None and ...) or fg.take / fg.take_along_axis{_where()}")
    k = arrays[0]
    others = items[:k] + items[k + 1:]
    if any(not (it is None or it is Ellipsis or isinstance(it, slice)) for it in others):
        raise TraceError(f"{op_prefix()}an integer array index can only be combined with slices, None and ...; "
                         f"index the other dims first{_where()}")
    basic = index(x, items[:k] + (slice(None),) + items[k + 1:])
    if any(it is Ellipsis for it in items[:k]):   # the axis counts from the end
        axis = -1 - sum(1 for it in items[k + 1:] if it is not Ellipsis)
    else:
        axis = sum(1 for it in items[:k])
    return take(basic, items[k], axis=axis)
