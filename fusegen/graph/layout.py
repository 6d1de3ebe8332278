"""Layout ops while tracing: shapes as values, views, pieces (the ``fg.`` functions and ``Tensor``
methods of the array API's manipulation and indexing groups, NumPy's where the standard has none).

Every function here builds IR nodes and nothing else: a view (``permute_dims``, basic indexing,
``reshape``, ``broadcast_to``, ``flip``) is an index map the plan evaluates, never a copy; a
piece (``concat``, ``pad``) picks, per output element, one source or a constant; compositions
(``stack``, ``split``, ``roll``, ``tile``, ``repeat``, ``moveaxis``...) are built from those.
Scalar parameters (slice bounds, dims, widths) become source nodes: constants, attributes,
``x.shape[i]`` (a ``Dim``) or arithmetic on them, evaluated by shape inference.

**Shapes inside a trace.** ``x.shape[i]`` is a traced weak-int scalar (``Op.DIM``) whose value
shape inference knows. What needs more than that raises a *specialization request*: the rank
(``len(x.shape)``, ``x.ndim``, unpacking ``b, s, d = x.shape``) raises ``NeedsRank``; a dim's
concrete value (``int(d)``, ``if d > 1``, ``range(d)``, builtin ``min``) raises ``NeedsShape``.
``OpDef`` catches them and traces the op again per input rank (or shape), lazily: there,
``x.shape`` is a tuple of ``Dim`` values (or of Python ints), so any Python logic on shapes works.
"""
from __future__ import annotations

import numpy as np

from ..errors import AxisError, ShapeError, TraceError
from .nodes import GatherArg, Item, Node, Op, Perm, is_static, squeeze_items
from .trace import (Attr, NeedsRank, NeedsShape, Tensor, current_shape, make, op_prefix, operand, specialization,
                    user_loc)


def _where() -> str:
    return f" [at {user_loc()}]"


def _need(kind, what: str):
    raise kind(f"{op_prefix()}{what} needs the {'rank' if kind is NeedsRank else 'shape'} of an input"
               + _where())


# --- shapes as values ------------------------------------------------------------------------
def is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def scalar(v, what: str) -> Node:
    """An integer parameter as a node: a Python int, an int attribute, a dim or arithmetic on
    them (any traced scalar whose value shape inference can compute)."""
    if is_int(v):
        return make(Op.CONST, (), ("int", int(v)))
    if isinstance(v, Attr):
        if v.spec.type.value != "int":
            raise TraceError(f"{op_prefix()}{what} must be an integer; attribute {v.spec.name!r} is "
                             f"{v.spec.type.value}{_where()}")
        return v.node
    if isinstance(v, Tensor) and is_static(v.node):
        return v.node
    raise TraceError(f"{op_prefix()}{what} must be an int, an int attribute or a dim (x.shape[i]) or "
                     f"arithmetic on them, got {type(v).__name__} {v!r}{_where()}")


def dim(x: Tensor, axis: int) -> Tensor:
    """``x.shape[axis]`` as a traced weak-int scalar."""
    return Tensor(make(Op.DIM, (x.node,), int(axis)))


class SymShape:
    """``x.shape`` while the rank is unknown: integer indexing works (``x.shape[-1]``); anything
    that needs the length asks for a rank-specialized trace."""

    __slots__ = ("t",)

    def __init__(self, t: Tensor):
        self.t = t

    def __getitem__(self, i):
        if is_int(i):
            return dim(self.t, int(i))
        _need(NeedsRank, "slicing x.shape")

    def __len__(self):
        _need(NeedsRank, "len(x.shape)")

    def __iter__(self):
        _need(NeedsRank, "iterating over x.shape")

    def __repr__(self) -> str:
        return "<fusegen traced shape of unknown rank>"


def shape_of(t: Tensor):
    """``t.shape`` in the current trace: a tuple of ints (shape-specialized), of dims
    (rank-specialized) or a ``SymShape`` (generic)."""
    mode = specialization()
    shp = current_shape(t.node)
    if shp is None:
        return SymShape(t)
    if mode == "shape" and all(d >= 0 for d in shp):
        return tuple(int(d) for d in shp)
    return tuple(dim(t, k) for k in range(len(shp)))


def ndim_of(t: Tensor) -> int:
    shp = current_shape(t.node)
    if shp is None:
        _need(NeedsRank, "x.ndim")
    return len(shp)


def size_of(t: Tensor):
    """``x.size``: the element count, as a traced scalar (an int when shapes are specialized)."""
    shp = shape_of(t)
    if isinstance(shp, tuple) and all(is_int(d) for d in shp):
        return int(np.prod(shp, dtype=np.int64)) if shp else 1
    return Tensor(make(Op.DIM, (t.node,), None))


# --- views -----------------------------------------------------------------------------------
def as_tensor(x, fn: str) -> Tensor:
    if isinstance(x, Tensor) and not isinstance(x, Attr):
        return x
    return Tensor(operand(x)) if not isinstance(x, (list, tuple)) else _bad(fn, x)


def _bad(fn, x):
    raise TraceError(f"{op_prefix()}{fn} takes a traced tensor, got {type(x).__name__}{_where()}")


def axes_arg(axis, fn: str) -> tuple[int, ...]:
    if is_int(axis):
        return (int(axis),)
    if isinstance(axis, (tuple, list)) and all(is_int(a) for a in axis):
        return tuple(int(a) for a in axis)
    raise TraceError(f"{op_prefix()}{fn}: axis must be an int or a tuple of ints, got {axis!r}{_where()}")


def permute(x, p: Perm) -> Tensor:
    """``x`` with its axes permuted as ``p`` says (a ``Perm`` of any kind)."""
    return Tensor(make(Op.PERMUTE, (as_tensor(x, "permute_dims").node,), p))


def permute_dims(x, /, axes) -> Tensor:
    """The array API's ``permute_dims``: ``axes`` is a permutation of ``range(x.ndim)``."""
    return permute(x, Perm("explicit", axes_arg(axes, "permute_dims")))


def matrix_transpose(x, /) -> Tensor:
    """Swap the last two axes (``x.mT``)."""
    return permute(x, Perm("swap", (-2, -1)))


def swapaxes(x, axis1: int, axis2: int) -> Tensor:
    return permute(x, Perm("swap", (int(axis1), int(axis2))))


def moveaxis(x, source, destination) -> Tensor:
    """The array API's ``moveaxis``: axes ``source`` go to positions ``destination``."""
    src, dst = axes_arg(source, "moveaxis"), axes_arg(destination, "moveaxis")
    if len(src) != len(dst):
        raise TraceError(f"{op_prefix()}moveaxis: source {src} and destination {dst} differ in length{_where()}")
    return permute(x, Perm("move", src, dst))


def transpose(x, *axes) -> Tensor:
    """NumPy's ``x.transpose()``: reversed axes with none given, else the permutation given."""
    if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
        axes = tuple(axes[0])
    if not axes or axes == (None,):
        return permute(x, Perm("reverse"))
    return permute_dims(x, axes)


def index(x, key) -> Tensor:
    """Basic indexing ``x[key]``: ints, slices (negative and symbolic bounds, negative steps),
    ``None`` and ``...``; the result is a view."""
    x = as_tensor(x, "indexing")
    items = tuple(_list_index(it) if isinstance(it, list) else it for it in (key if isinstance(key, tuple) else (key,)))
    nodes: list[Node] = []
    arg: list[Item] = []
    if sum(1 for it in items if it is Ellipsis) > 1:
        raise TraceError(f"{op_prefix()}an index can only have a single ellipsis ('...'){_where()}")
    for it in items:
        if it is Ellipsis:
            arg.append(Item("ellipsis"))
        elif it is None:
            arg.append(Item("new"))
        elif isinstance(it, slice):
            given = tuple(v is not None for v in (it.start, it.stop, it.step))
            if is_int(it.step) and int(it.step) == 0:
                raise TraceError(f"{op_prefix()}slice step cannot be zero{_where()}")
            for v, what in zip((it.start, it.stop, it.step), ("slice start", "slice stop", "slice step")):
                if v is not None:
                    nodes.append(scalar(v, what))
            arg.append(Item("slice", given))
        elif isinstance(it, (bool, np.bool_)):
            raise TraceError(f"{op_prefix()}boolean indexing has a data-dependent shape and cannot be fused; "
                             f"use fg.where{_where()}")
        elif is_int(it) or isinstance(it, Attr) or (isinstance(it, Tensor) and is_static(it.node)):
            nodes.append(scalar(it, "an index"))
            arg.append(Item("int"))
        elif isinstance(it, Tensor):   # integer-array indexing: a gather (issue #17)
            return advanced_index(x, items)
        else:
            raise TraceError(f"{op_prefix()}cannot index with {type(it).__name__} {it!r}: use ints, slices, "
                             f"None, ... or an integer tensor{_where()}")
    if all(a.kind == "slice" and a.given == (False, False, False) for a in arg) or not arg:
        return x
    return Tensor(make(Op.INDEX, (x.node, *nodes), tuple(arg)))


def _list_index(items: list) -> Tensor:
    """A list of Python ints in an index (``x[:, [0, 2, 3]]``): NumPy's integer-array indexing with
    that array, built from the constants (a small index expression, nothing stored); bools and
    nested lists are refused by name (a mask's shape is data; a 2-D index array wants a tensor)."""
    if any(isinstance(i, (bool, np.bool_)) for i in items):
        raise TraceError(f"{op_prefix()}boolean indexing has a data-dependent shape and cannot be fused; "
                         f"use fg.where{_where()}")
    if not all(is_int(i) for i in items):
        raise TraceError(f"{op_prefix()}cannot index with list {items!r}: a list index holds Python ints (pass an "
                         f"integer tensor for anything else){_where()}")
    if not items:
        return iota(0)
    return stack([Tensor(operand(int(i))) for i in items])


# --- gathers (issue #17; take and take_along_axis are fusegen.graph.gathers) ------------------------
def gather(x: Tensor, idx: Tensor, arg: GatherArg) -> Tensor:
    """An ``Op.GATHER`` node: ``x`` read at the places ``idx`` holds along ``arg.axis``."""
    return Tensor(make(Op.GATHER, (x.node, idx.node), arg))


def advanced_index(x: Tensor, items: tuple) -> Tensor:
    """``x[items]`` where one item is an integer tensor and the others are slices, ``None`` and
    ``...``: the basic part as a view, then a take along the advanced item's axis (NumPy's result
    shape for a single advanced index)."""
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
    return gather(basic, items[k], GatherArg("take", axis, "raise"))


def reshape(x, /, shape, *, copy=None) -> Tensor:
    """The array API's ``reshape`` (C order): one dim may be -1 (inferred). Never copies inside a
    kernel; ``copy=False`` is accepted (a fused read is always a view), ``copy=True`` too (the
    result is a new array either way)."""
    x = as_tensor(x, "reshape")
    if is_int(shape) or isinstance(shape, Tensor):
        shape = (shape,)
    dims = tuple(scalar(d, "a reshape dim") for d in shape)
    if sum(1 for d in dims if d.op is Op.CONST and d.arg[1] == -1) > 1:
        raise TraceError(f"{op_prefix()}reshape: only one dim can be -1, got {tuple(shape)}{_where()}")
    return Tensor(make(Op.RESHAPE, (x.node, *dims), len(dims)))


def reshape_like(x, like: Tensor) -> Tensor:
    """``x`` reshaped (C order) to ``like``'s shape, whatever its rank."""
    return Tensor(make(Op.RESHAPE, (as_tensor(x, "reshape").node, as_tensor(like, "reshape").node), "like"))


def broadcast_to(x, /, shape) -> Tensor:
    """The array API's ``broadcast_to``: NumPy's broadcasting rule, as a view."""
    node = operand(x)
    if is_int(shape) or isinstance(shape, Tensor):
        shape = (shape,)
    dims = tuple(scalar(d, "a broadcast dim") for d in shape)
    return Tensor(make(Op.BROADCAST_TO, (node, *dims), ("dims", len(dims))))


def broadcast_like(x, like: Tensor) -> Tensor:
    """``x`` broadcast to ``like``'s shape, whatever its rank (``full_like`` and friends)."""
    return Tensor(make(Op.BROADCAST_TO, (operand(x), as_tensor(like, "broadcast").node), ("like",)))


def expand_dims(x, /, axis=0) -> Tensor:
    """The array API's ``expand_dims``: a size-1 dim inserted at ``axis`` (negative axes count in
    the result, as the standard says). A tuple of axes inserts several, as NumPy does."""
    x = as_tensor(x, "expand_dims")
    axes = axes_arg(axis, "expand_dims")
    if len(axes) > 1:
        if any(a < 0 for a in axes) and any(a >= 0 for a in axes):
            # NumPy's: each axis counts in the result, of rank ndim + len(axes)
            if specialization() is None:
                _need(NeedsRank, "expand_dims with both negative and non-negative axes")
            out = ndim_of(x) + len(axes)
            if any(not -out <= a < out for a in axes):
                raise AxisError(f"{op_prefix()}expand_dims: axis {axes} is out of range for the result's rank "
                                f"{out}{_where()}")
            axes = tuple(a % out for a in axes)
        if len(set(axes)) != len(axes):
            raise ShapeError(f"{op_prefix()}expand_dims: repeated axis in {axes}{_where()}")
        for a in sorted(axes, key=lambda a: (a < 0, a if a >= 0 else -a)):
            x = expand_dims(x, axis=a)
        return x
    a = axes[0]
    full = Item("slice")
    items = [full] * a + [Item("new"), Item("ellipsis")] if a >= 0 else \
        [Item("ellipsis"), Item("new")] + [full] * (-a - 1)
    return Tensor(make(Op.INDEX, (x.node,), tuple(items)))


def squeeze(x, /, axis) -> Tensor:
    """The array API's ``squeeze``: drop the size-1 dims ``axis`` (an error if one is not 1)."""
    x = as_tensor(x, "squeeze")
    axes = axes_arg(axis, "squeeze")
    if len(set(axes)) != len(axes):
        raise TraceError(f"{op_prefix()}squeeze: repeated axis in {axes}{_where()}")
    if not axes:   # axis=(): nothing to drop
        return x
    if any(a < 0 for a in axes) and any(a >= 0 for a in axes):
        if specialization() is None:
            _need(NeedsRank, "squeeze with both negative and non-negative axes")
        r = ndim_of(x)
        axes = tuple(a % r for a in axes)
    return Tensor(make(Op.INDEX, (x.node,), squeeze_items(axes)))


def flip(x, /, *, axis=None) -> Tensor:
    """The array API's ``flip``: reverse along ``axis`` (None: every axis)."""
    x = as_tensor(x, "flip")
    return Tensor(make(Op.FLIP, (x.node,), None if axis is None else axes_arg(axis, "flip")))


# --- pieces ----------------------------------------------------------------------------------
def concat(arrays, /, *, axis=0) -> Tensor:
    """The array API's ``concat``: join along ``axis`` (None: flatten first). The result's dtype
    is the arrays' promoted type."""
    arrays = [as_tensor(a, "concat") for a in arrays]
    if not arrays:
        raise TraceError(f"{op_prefix()}concat needs at least one array{_where()}")
    if axis is None:
        arrays = [reshape(a, (-1,)) for a in arrays]
        axis = 0
    if not is_int(axis):
        raise TraceError(f"{op_prefix()}concat: axis must be an int or None, got {axis!r}{_where()}")
    if len(arrays) == 1:
        return arrays[0]
    return Tensor(make(Op.CONCAT, tuple(a.node for a in arrays), int(axis)))


def stack(arrays, /, *, axis=0) -> Tensor:
    """The array API's ``stack``: join along a new axis."""
    arrays = [as_tensor(a, "stack") for a in arrays]
    if not arrays:
        raise TraceError(f"{op_prefix()}stack needs at least one array{_where()}")
    out = [expand_dims(a, axis=axis) for a in arrays]
    if len(out) == 1:
        return out[0]
    return Tensor(make(Op.CONCAT, tuple(a.node for a in out), int(axis)))


def pad(array, pad_width, mode: str = "constant", constant_values=0) -> Tensor:
    """NumPy's ``pad`` in constant mode: ``pad_width`` is an int, ``(before, after)``,
    ``((before, after),)`` (every axis alike) or one pair per axis."""
    x = as_tensor(array, "pad")
    if mode != "constant":
        raise TraceError(f"{op_prefix()}pad: only mode='constant' can be fused, got {mode!r}{_where()}")
    pw = pad_width
    if is_int(pw) or (isinstance(pw, Tensor) and not isinstance(pw, (list, tuple))):
        pairs, kind = [(pw, pw)], "all"
    elif isinstance(pw, (list, tuple)) and len(pw) == 2 and all(not isinstance(p, (list, tuple)) for p in pw):
        pairs, kind = [tuple(pw)], "all"
    elif isinstance(pw, (list, tuple)) and all(isinstance(p, (list, tuple)) for p in pw):
        pairs = [tuple(p) if len(p) == 2 else (p[0], p[0]) for p in pw]
        kind = "all" if len(pairs) == 1 else "per_axis"
    else:
        raise TraceError(f"{op_prefix()}pad: pad_width {pad_width!r} is not an int, a (before, after) pair or "
                         f"one pair per axis{_where()}")
    widths = [scalar(v, "a pad width") for p in pairs for v in p]
    value = constant_values
    if isinstance(value, (list, tuple)):
        raise TraceError(f"{op_prefix()}pad: per-axis constant_values are not supported; give one scalar"
                         f"{_where()}")
    return Tensor(make(Op.PAD, (x.node, operand(value), *widths), (kind, len(pairs))))


# --- creation --------------------------------------------------------------------------------
def iota(n) -> Tensor:
    """int64 ``[0, n)``: the index itself, costing no memory."""
    return Tensor(make(Op.IOTA, (scalar(n, "an arange length"),)))
