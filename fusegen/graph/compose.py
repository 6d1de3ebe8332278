"""Layout ops made of other layout ops, and array creation: ``roll``, ``split``, ``unstack``,
``tile``, ``repeat``, ``broadcast_arrays``, ``arange``, ``linspace``, ``zeros``/``ones``/``full``
and their ``_like`` forms, ``eye``, ``tril``/``triu``, ``meshgrid``; then the ``Tensor`` methods
NumPy users reach for (``x.T``, ``x[...]``, ``x.reshape``...), registered once at the end.

None of these adds an IR op: ``roll`` is two slices and a concat; ``tile`` and ``repeat`` are a
new axis, a broadcast and a reshape (a refined reshape: affine, no div/mod); creation is a scalar
broadcast (``zeros``) or arithmetic on an ``iota`` (``arange``, ``eye``, the masks of
``tril``/``triu``), which cost no memory in a kernel.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from ..errors import TraceError
from .layout import (SymShape, axes_arg, as_tensor, is_int, broadcast_like, broadcast_to, concat, dim, expand_dims, flip, index,
                     iota, matrix_transpose, ndim_of, pad, permute_dims, reshape, scalar, shape_of, size_of, squeeze,
                     swapaxes, transpose)
from .gathers import take
from .nodes import Op
from .trace import (
    Attr, NeedsShape, Tensor, TracedDType, cast, cast_like, expect_same_shape, make, op_prefix, operand, user_loc,
)


def _along(axis: int, item) -> tuple:
    """An index applying ``item`` along ``axis`` whatever the rank (negative axes from the end)."""
    return (slice(None),) * axis + (item, Ellipsis) if axis >= 0 else (Ellipsis, item) + (slice(None),) * (-axis - 1)


def roll(x, /, shift, *, axis=None) -> Tensor:
    """The array API's ``roll``: elements shifted by ``shift`` along ``axis`` (None: the flattened
    array), wrapping around. Two slices and a concat: no div/mod in the kernel."""
    x = as_tensor(x, "roll")
    if axis is None:
        flat = roll(reshape(x, (-1,)), shift, axis=0)
        return Tensor(make(Op.RESHAPE, (flat.node, x.node), "like"))
    shifts = shift if isinstance(shift, (tuple, list)) else (shift,)
    axes = axes_arg(axis, "roll")
    if len(shifts) == 1 and len(axes) > 1:
        shifts = shifts * len(axes)
    if len(shifts) != len(axes):
        raise TraceError(f"{op_prefix()}roll: {len(shifts)} shifts for {len(axes)} axes [at {user_loc()}]")
    for s, a in zip(shifts, axes):
        n = dim(x, a)
        s = Tensor(scalar(s, "a roll shift")) % n
        cut = n - s
        x = concat([index(x, _along(a, slice(cut, None))), index(x, _along(a, slice(None, cut)))], axis=a)
    return x


def split(ary, indices_or_sections, axis: int = 0) -> tuple[Tensor, ...]:
    """NumPy's ``split``: ``indices_or_sections`` equal parts (the dim must divide) or the split
    points; returns a tuple of views."""
    x = as_tensor(ary, "split")
    axis = int(axis)
    n = dim(x, axis)
    if isinstance(indices_or_sections, (tuple, list)):
        cuts = [None] + list(indices_or_sections) + [None]
        return tuple(index(x, _along(axis, slice(a, b))) for a, b in zip(cuts, cuts[1:]))
    parts = indices_or_sections
    if not is_int(parts) or parts <= 0:
        raise TraceError(f"{op_prefix()}split: sections must be a positive int or a list of indices, got "
                         f"{parts!r} [at {user_loc()}]")
    size = n // parts
    # NumPy refuses an unequal division: the two iotas' shapes are equal only when it divides
    expect_same_shape(iota(n), iota(size * parts), f"split: axis {axis} does not divide into {parts} equal parts")
    return tuple(index(x, _along(axis, slice(size * i, size * (i + 1)))) for i in range(parts))


def unstack(x, /, *, axis: int = 0) -> tuple[Tensor, ...]:
    """The array API's ``unstack``: the slices along ``axis`` (as many as its size: a concrete dim)."""
    x = as_tensor(x, "unstack")
    dims = _dims(x)
    count = dims[axis]
    if not is_int(count):
        raise NeedsShape(f"{op_prefix()}unstack needs the size of axis {axis} (its output count) "
                         f"[at {user_loc()}]")
    return tuple(index(x, _along(int(axis), i)) for i in range(count))


def tile(x, /, repetitions) -> Tensor:
    """The array API's ``tile``: ``x`` repeated ``repetitions`` times along each axis (NumPy's rule
    when the lengths differ). A broadcast new axis merged by a reshape: affine, no copy."""
    x = as_tensor(x, "tile")
    reps = tuple(repetitions) if isinstance(repetitions, (tuple, list)) else (repetitions,)
    r = ndim_of(x)
    if len(reps) < r:
        reps = (1,) * (r - len(reps)) + reps
    while r < len(reps):
        x = expand_dims(x, axis=0)
        r += 1
    dims = _dims(x)
    inter = []
    for d in dims:
        inter += [1, d]
    y = reshape(x, tuple(inter))
    big = []
    for rep, d in zip(reps, dims):
        big += [rep, d]
    y = broadcast_to(y, tuple(big))
    return reshape(y, tuple(rep * d for rep, d in zip(reps, dims)))


#: The most per-element counts ``repeat`` takes: each output element compares its position with
#: every boundary (a few instructions per count), so long count lists belong in a gather with an
#: index array the caller computes.
MAX_REPEAT_COUNTS = 1024


def repeat(x, repeats, /, *, axis=None) -> Tensor:
    """The array API's ``repeat``: each element ``repeats`` times along ``axis`` (None: of the
    flattened array). ``repeats`` is a static count (an int or an int attribute) or a sequence of
    static counts, one per element along the axis (a one-element sequence counts for all): the
    output's size must be known when the op is traced, so a traced array of counts is refused."""
    x = as_tensor(x, "repeat")
    if isinstance(repeats, np.ndarray):
        repeats = repeats.tolist()
    counts = list(repeats) if isinstance(repeats, (tuple, list)) else None
    if counts is not None and len(counts) == 1:
        repeats, counts = counts[0], None
    if counts is None and not (is_int(repeats) or isinstance(repeats, Attr)):
        raise TraceError(f"{op_prefix()}repeat: repeats must be an int or a sequence of ints (static counts), "
                         f"got {type(repeats).__name__} [at {user_loc()}]")
    if counts is not None and (not all(is_int(c) and int(c) >= 0 for c in counts)
                               or len(counts) > MAX_REPEAT_COUNTS):
        raise TraceError(f"{op_prefix()}repeat: per-element repeats must be at most {MAX_REPEAT_COUNTS} "
                         f"non-negative ints, got {len(counts)} counts [at {user_loc()}]")
    if axis is None:
        x = reshape(x, (-1,))
        axis = 0
    if counts is not None:
        return _repeat_each(x, [int(c) for c in counts], int(axis))
    dims = _dims(x)
    r = len(dims)
    a = int(axis) % r if r else 0
    y = expand_dims(x, axis=a + 1)
    y = broadcast_to(y, tuple(dims[:a + 1]) + (repeats,) + tuple(dims[a + 1:]))
    return reshape(y, tuple(dims[:a]) + (dims[a] * repeats,) + tuple(dims[a + 1:]))


def _repeat_each(x: Tensor, counts: list[int], axis: int) -> Tensor:
    """``repeat`` with one count per element along ``axis``: a gather whose index at output
    position j is the number of element boundaries (running totals of the counts) at or below j."""
    expect_same_shape(iota(dim(x, axis)), iota(len(counts)),
                      f"repeat: {len(counts)} counts for the elements along axis {axis}")
    bounds = np.cumsum(counts)[:-1].tolist()
    j = iota(int(sum(counts)))
    idx = j * 0
    for b in bounds:
        idx = idx + cast(j >= b, "int64")
    return take(x, idx, axis=axis)


def broadcast_arrays(*arrays) -> list[Tensor]:
    """The array API's ``broadcast_arrays``: every array broadcast to their common shape."""
    ts = [as_tensor(a, "broadcast_arrays") for a in arrays]
    if not ts:
        return []
    common = ts[0] * 0
    for t in ts[1:]:
        common = common + t * 0   # a shape-only node: its shape is the broadcast of all
    return [broadcast_like(t, common) for t in ts]


# --- creation --------------------------------------------------------------------------------
def _kind_dtype(*values, default=None):
    """The array API's default dtype of Python scalars/attributes: bool, int64, else float64."""
    if default is not None:
        return default if isinstance(default, TracedDType) else dt.as_dtype(default)
    kinds = set()
    for v in values:
        if isinstance(v, (bool, np.bool_)):
            kinds.add("b")
        elif is_int(v):
            kinds.add("i")
        elif isinstance(v, Attr):
            kinds.add({"bool": "b", "int": "i"}.get(v.spec.type.value, "f"))
        elif isinstance(v, Tensor):
            kinds.add("i")
        else:
            kinds.add("f")
    if kinds <= {"b"}:
        return dt.bool_
    return dt.float64 if "f" in kinds else dt.int64


def arange(start, /, stop=None, step=1, *, dtype=None, device=None) -> Tensor:
    """The array API's ``arange``: ``[start, stop)`` by ``step`` (bounds may be attributes or
    dims). Values follow NumPy's fill rule: ``start + i * ((start + step) - start)`` in the result
    dtype."""
    if stop is None:
        start, stop = 0, start
    out = _kind_dtype(start, stop, step, default=dtype)
    if isinstance(out, TracedDType):   # (y's dtype: the values in the scalars' own, then converted)
        return cast(arange(start, stop, step), out)
    if is_int(step) and step == 0:
        raise TraceError(f"{op_prefix()}arange: step cannot be zero [at {user_loc()}]")
    ints = all(is_int(v) or isinstance(v, Tensor) and not (isinstance(v, Attr) and v.spec.type.value == "float")
               for v in (start, stop, step))
    if is_int(start) and is_int(step) and start == 0 and step == 1:
        n = stop if is_int(stop) and not ints else (max(int(stop), 0) if is_int(stop) else stop)
        i = iota(n if ints else cast(Tensor(make(Op.MAX, (operand(fgceil(stop)), operand(0)))), dt.int64))
        return i if out is dt.int64 else cast(i, out)   # NumPy's fill: 0 + i * 1, exact
    a, b, s = (Tensor(operand(v)) for v in (start, stop, step))
    if ints:
        span = b - a
        # ceil(span / s) with integers, clamped at 0
        n = (span + s - 1) // s * (s > 0) + (span + s + 1) // s * (s < 0)
    else:
        n = fgceil((b - a) / s)
    i = iota(cast(Tensor(make(Op.MAX, (operand(n), operand(0)))), dt.int64))
    if out.kind in "iub":
        return cast(cast(a, dt.int64) + i * cast(s, dt.int64), out)
    first = cast(a, out)
    delta = cast(a + s, out) - first
    return first + cast(i, out) * delta


def fgceil(x) -> Tensor:
    return Tensor(make(Op.CEIL, (operand(x),)))


def linspace(start, stop, /, num, *, dtype=None, device=None, endpoint: bool = True) -> Tensor:
    """The array API's ``linspace``: ``num`` evenly spaced values, computed as NumPy does in float64
    (``i * step + start``, the last one exactly ``stop`` when ``endpoint``)."""
    out = dtype if dtype is not None else dt.float64
    n = Tensor(scalar(num, "linspace's num"))
    div = n - 1 if endpoint else n
    a, b = cast(Tensor(operand(start)), dt.float64), cast(Tensor(operand(stop)), dt.float64)
    step = (b - a) / cast(div, dt.float64)
    i = iota(n)
    y = cast(i, dt.float64) * step + a
    if endpoint:
        y = Tensor(make(Op.WHERE, ((i == n - 1).node, b.node, y.node)))
    return cast(y, out)


def full(shape, fill_value, *, dtype=None, device=None) -> Tensor:
    """The array API's ``full``: ``fill_value`` broadcast to ``shape`` (no memory in a kernel)."""
    out = _kind_dtype(fill_value, default=dtype)
    return broadcast_to(cast(Tensor(operand(fill_value)), out), shape)


def asarray(obj, /, *, dtype=None, device=None, copy=None) -> Tensor:
    """The array API's ``asarray`` inside an op: a traced value (converted to ``dtype`` if given)
    or a Python scalar, as a 0-d value of the standard's default dtype for it. An array's values
    are not baked into a kernel: pass it as an input."""
    if isinstance(obj, Tensor):
        return obj if dtype is None else cast(obj, dtype)
    if isinstance(obj, (bool, int, float, complex, np.generic)) and np.ndim(obj) == 0:
        if isinstance(obj, complex) and dtype is None:
            return full((), obj, dtype=dt.complex128)
        return full((), obj, dtype=dtype)
    raise TraceError(f"{op_prefix()}asarray takes a traced value or a Python scalar, got {type(obj).__name__}: "
                     f"an array's values are not baked into a kernel, pass it as an input [at {user_loc()}]")


def zeros(shape, *, dtype=None, device=None) -> Tensor:
    return full(shape, 0.0 if dtype is None else 0, dtype=dtype if dtype is not None else dt.float64)


def ones(shape, *, dtype=None, device=None) -> Tensor:
    return full(shape, 1.0 if dtype is None else 1, dtype=dtype if dtype is not None else dt.float64)


def empty(shape, *, dtype=None, device=None) -> Tensor:
    """``empty``: zeros (a fused kernel has no uninitialized memory to hand out)."""
    return zeros(shape, dtype=dtype)


def full_like(x, /, fill_value, *, dtype=None, device=None) -> Tensor:
    x = as_tensor(x, "full_like")
    v = Tensor(operand(fill_value))
    v = cast(v, dtype) if dtype is not None else cast_like(v, x)
    return broadcast_like(v, x)


def zeros_like(x, /, *, dtype=None, device=None) -> Tensor:
    return full_like(x, 0, dtype=dtype)


def ones_like(x, /, *, dtype=None, device=None) -> Tensor:
    return full_like(x, 1, dtype=dtype)


def empty_like(x, /, *, dtype=None, device=None) -> Tensor:
    return zeros_like(x, dtype=dtype)


def eye(n_rows, n_cols=None, /, *, k=0, dtype=None, device=None) -> Tensor:
    """The array API's ``eye``: ones on the ``k``-th diagonal, computed from two iotas."""
    rows = index(iota(n_rows), (slice(None), None))
    cols = index(iota(n_rows if n_cols is None else n_cols), (None, slice(None)))
    return cast(cols - rows == Tensor(operand(k)), dtype if dtype is not None else dt.float64)


def _tri_mask(x: Tensor, k, upper: bool) -> Tensor:
    rows = index(iota(dim(x, -2)), (slice(None), None))
    cols = index(iota(dim(x, -1)), (None, slice(None)))
    d = cols - rows
    return d >= Tensor(operand(k)) if upper else d <= Tensor(operand(k))


def tril(x, /, *, k=0) -> Tensor:
    """The array API's ``tril``: zero above the ``k``-th diagonal of the last two axes."""
    x = as_tensor(x, "tril")
    return Tensor(make(Op.WHERE, (_tri_mask(x, k, False).node, x.node, cast_like(0, x).node)))


def triu(x, /, *, k=0) -> Tensor:
    """The array API's ``triu``: zero below the ``k``-th diagonal of the last two axes."""
    x = as_tensor(x, "triu")
    return Tensor(make(Op.WHERE, (_tri_mask(x, k, True).node, x.node, cast_like(0, x).node)))


def meshgrid(*arrays, indexing: str = "xy") -> list[Tensor]:
    """The array API's ``meshgrid`` of 1-D arrays (``indexing`` "xy" or "ij"): broadcast views."""
    if indexing not in ("xy", "ij"):
        raise TraceError(f"{op_prefix()}meshgrid: indexing must be 'xy' or 'ij', got {indexing!r} "
                         f"[at {user_loc()}]")
    ts = [as_tensor(a, "meshgrid") for a in arrays]
    lens = [dim(t, 0) for t in ts]
    order = list(range(len(ts)))
    if indexing == "xy" and len(ts) > 1:
        order[0], order[1] = 1, 0
    shape = tuple(lens[o] for o in order)
    out = []
    for i, t in enumerate(ts):
        pos = order.index(i)
        view = reshape(t, tuple(-1 if j == pos else 1 for j in range(len(ts))))
        out.append(broadcast_to(view, shape))
    return out


# --- Tensor methods (NumPy's names) ------------------------------------------------------------
def _dims(x: Tensor) -> tuple:
    """``x.shape`` as a tuple (asking for a rank-specialized trace if the rank is unknown)."""
    dims = shape_of(x)
    if not isinstance(dims, tuple):
        ndim_of(x)  # raises NeedsRank
    return dims


def _len(self):
    return int(_dims(self)[0])  # a dim raises NeedsShape: len() is a concrete count


Tensor.shape = property(shape_of, doc="The shape: a tuple of dims (ints once the op is traced per shape).")
Tensor.ndim = property(ndim_of, doc="The rank (the op is then traced per input rank).")
Tensor.size = property(size_of, doc="The element count, a traced scalar.")
Tensor.T = property(lambda self: transpose(self), doc="Reversed axes (NumPy's .T).")
Tensor.mT = property(matrix_transpose, doc="The last two axes swapped.")
Tensor.__getitem__ = index
Tensor.__len__ = _len
Tensor.reshape = lambda self, *shape, copy=None: reshape(
    self, shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list, SymShape)) else shape)
Tensor.transpose = transpose
Tensor.swapaxes = swapaxes
Tensor.squeeze = lambda self, axis=None: squeeze(self, axis) if axis is not None else _squeeze_all(self)
Tensor.flatten = lambda self: reshape(self, (-1,))
Tensor.ravel = lambda self: reshape(self, (-1,))
Tensor.repeat = lambda self, repeats, axis=None: repeat(self, repeats, axis=axis)


def _squeeze_all(x: Tensor) -> Tensor:
    """NumPy's ``x.squeeze()``: every size-1 dim, which needs the shape."""
    dims = _dims(x)
    ones_ = tuple(k for k, d in enumerate(dims) if int(d) == 1)
    return squeeze(x, ones_) if ones_ else x


__all__ = ["roll", "split", "unstack", "tile", "repeat", "broadcast_arrays", "arange", "linspace", "full",
           "zeros", "ones", "empty", "full_like", "zeros_like", "ones_like", "empty_like", "eye", "tril", "triu",
           "meshgrid", "flip", "pad", "permute_dims", "concat", "index"]
