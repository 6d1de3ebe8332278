"""The array API's searching functions as compositions (issue #17): ``argmax``, ``argmin``,
``count_nonzero``, ``searchsorted``. No new IR node: each is reductions over comparisons and an
iota, so it fuses with what follows (``argmax(z, axis=-1) == labels`` is one kernel's epilogue).

* ``argmax``/``argmin``: the extreme value (max/min: NaN wins, as in NumPy), then the smallest
  index where ``x`` equals it (or is NaN): the first occurrence, NumPy's answer for ties and NaN.
  Two fused stages over the same rows (the second reads the row from cache). int64 result.
* ``count_nonzero``: a sum of ``x != 0`` in int64 (the default integer dtype).
* ``searchsorted``: for each ``x2`` element, how many elements of the sorted 1-d ``x1`` sort
  before it (``side="left"``) or not after it (``"right"``), in NumPy's order (NaN last). A
  comparison per (x1, x2) pair: O(len(x1)) per result, exact, for the short sorted tables this
  is used with in fused kernels (bucket boundaries, CDFs); a binary search is not generated.
  ``sorter`` (indices that sort ``x1``) reads x1 through them: a gather.
"""
from __future__ import annotations

from ..errors import TraceError
from .gathers import take
from .layout import as_tensor, expand_dims, iota, is_int, moveaxis, reshape
from .trace import Tensor, cast, expect_same_shape, op_prefix, reduce, user_loc, where


def _axis_arg(axis, fn: str):
    if axis is not None and not is_int(axis):
        raise TraceError(f"{op_prefix()}{fn}: axis must be an int or None, got {axis!r} [at {user_loc()}]")
    return axis


def _arg_extreme(kind: str, x, axis, keepdims: bool, fn: str) -> Tensor:
    x = as_tensor(x, fn)
    axis = _axis_arg(axis, fn)
    y = reshape(x, (-1,)) if axis is None else moveaxis(x, axis, -1)
    m = reduce(kind, y, -1, True)
    hit = (y == m) | (y != y)            # y != y: the first NaN (where m is NaN, NaN won)
    n = y.shape[-1]
    first = reduce("min", where(hit, iota(n), n), -1, False)
    if not keepdims:
        return first
    if axis is None:                     # every axis kept as size 1
        return reshape(first, (1,) * x.ndim)
    return expand_dims(first, axis=axis)


def argmax(x, /, *, axis=None, keepdims: bool = False) -> Tensor:
    """The array API's ``argmax``: the index of the first maximum (NaN counts as the maximum, as
    NumPy's does) along ``axis`` (None: of the flattened array), int64."""
    return _arg_extreme("max", x, axis, keepdims, "argmax")


def argmin(x, /, *, axis=None, keepdims: bool = False) -> Tensor:
    """The array API's ``argmin``: the index of the first minimum (NaN first, as in NumPy), int64."""
    return _arg_extreme("min", x, axis, keepdims, "argmin")


def count_nonzero(x, /, *, axis=None, keepdims: bool = False) -> Tensor:
    """The array API's ``count_nonzero`` (int64)."""
    x = as_tensor(x, "count_nonzero")
    if axis is not None and not is_int(axis) and not (isinstance(axis, tuple) and all(map(is_int, axis))):
        raise TraceError(f"{op_prefix()}count_nonzero: axis must be an int, a tuple of ints or None, got {axis!r} "
                         f"[at {user_loc()}]")
    return reduce("sum", cast(x != 0, "int64"), axis, keepdims)


def searchsorted(x1, x2, /, *, side: str = "left", sorter=None) -> Tensor:
    """The array API's ``searchsorted`` (``x1`` sorted, 1-d; int64 indices shaped like ``x2``)."""
    x1, x2 = as_tensor(x1, "searchsorted"), as_tensor(x2, "searchsorted")
    if side not in ("left", "right"):
        raise TraceError(f"{op_prefix()}searchsorted: side must be 'left' or 'right', got {side!r} "
                         f"[at {user_loc()}]")
    # the standard's x1 is 1-d, as NumPy's a (flattening a matrix answered another question):
    # checked where its shape is known, so the op stays one trace for every rank
    flat = reshape(x1, (-1,))
    expect_same_shape(flat, x1, "searchsorted: x1 must be 1-d")
    if sorter is not None:   # x1 in the order the indices in sorter give (a gather, fused)
        flat = take(flat, as_tensor(sorter, "searchsorted"), axis=0)
    a, b = flat, x2[..., None]   # each x2 element against the whole table
    before = ((a < b) | ((b != b) & (a == a))) if side == "left" else ((a <= b) | (b != b))
    return reduce("sum", cast(before, "int64"), -1, False)
