"""Tracing: the ``Tensor`` a traced op body computes with, and the functions that build nodes
from it (operators, ``reduce``, ``where``, ``cast``, ``sum_to``, ``cast_like``, ``unreduce``).

While an op is traced (``tracing``), identical nodes are interned (common subexpressions become
one node) and every node records the user's source line (``loc``): the first frame outside this
module and the fg. functions (``fusegen.graph.vocab``). Python control flow on a traced value is
a ``TraceError`` pointing to ``fg.where``.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading

from .. import dtypes as dt
from ..dtypes import AttrType
from ..errors import AttrError, AxisError, BoundsError, DTypeError, ScalarRangeError, ShapeError, TraceError
from .nodes import AttrRef, AttrSpec, DTypeOf, Node, Op, REDUCE_KINDS, ReduceArg, ShapeOf, arg_key

_HERE = os.path.dirname(os.path.abspath(__file__))
_TRACING_FILES = {os.path.join(_HERE, f) for f in ("trace.py", "vocab.py", "layout.py", "compose.py", "gathers.py", "searching.py", "scans.py")}
_TRACING_FILES |= {os.path.join(_HERE, f) for f in ("elementwise.py", "stats.py")}  # (#18)
_TRACING_FILES |= {os.path.join(_HERE, f) for f in ("rng.py", "datatypes.py", "methods.py")}  # random numbers; dtypes; methods
_TRACING_FILES |= {os.path.join(_HERE, f) for f in ("linalg.py", "linalg_ext.py", "einsum.py", "numpy_names.py")}  # contractions; NumPy's
_tls = threading.local()


def user_loc() -> str:
    """file:line of the innermost frame outside the tracer: where the user wrote the node."""
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename in _TRACING_FILES:
        f = f.f_back
    if f is None:
        return ""
    return f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}"


_PACKAGE = os.path.dirname(_HERE)
_PLAIN = (AttrError, AxisError, BoundsError, DTypeError, ScalarRangeError, ShapeError, TraceError)


def named(exc: Exception, op_name: str) -> Exception | None:
    """For an error a helper raised while ``op_name`` was traced (``x.astype(attr)`` reaching
    ``dtypes.as_dtype``), the same error naming the op and the user's line; None where the text
    names an op already or the error is not a plain fusegen one."""
    text = str(exc)
    if type(exc) not in _PLAIN or text.startswith("op "):
        return None
    loc, tb = "", exc.__traceback__
    while tb is not None:   # the innermost frame outside fusegen: the op's body
        if not tb.tb_frame.f_code.co_filename.startswith(_PACKAGE):
            loc = f"{os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"
        tb = tb.tb_next
    return type(exc)(f"op {op_name}: {text}" + (f" [at {loc}]" if loc and "[at " not in text else ""))


def make(op: Op, srcs=(), arg=None) -> Node:
    """A new node (the interned one, while tracing), located at the user's line."""
    node = Node(op, tuple(srcs), arg, user_loc())
    intern = getattr(_tls, "intern", None)
    if intern is None:
        return node
    # common subexpressions become one node; the key holds the sources themselves (interned
    # already) and the arg by ``arg_key``, so x * -0.0 is not x * 0.0 (Node's == says they are)
    return intern.setdefault((op, tuple(id(s) for s in node.srcs), arg_key(arg)), node)


@contextlib.contextmanager
def tracing(op_name: str, mode: str | None = None, shape_fn=None, dtype_fn=None):
    """The scope of one op's trace: interning, the op's name for messages, and the shape checks
    (``expect_same_shape``) the body declares, yielded as a list to read after the body ran.
    ``mode`` is None for the generic trace, ``"dtype"``, ``"rank"`` or ``"shape"`` for a specialized
    one, where ``shape_fn(node)`` gives a node's shape and ``dtype_fn(node)`` its dtype (inferred from
    the specialization's inputs).
    Nested traces (an op calling another op, ``fg.grad``) restore the outer one; an inlined op
    body runs in its caller's trace (and specialization)."""
    prev = (getattr(_tls, "intern", None), getattr(_tls, "op_name", None), getattr(_tls, "checks", None),
            getattr(_tls, "spec", None))
    _tls.intern, _tls.op_name, _tls.checks = {}, op_name, []
    _tls.spec = (mode, shape_fn, dtype_fn) if (mode or shape_fn) else None
    try:
        yield _tls.checks
    finally:
        _tls.intern, _tls.op_name, _tls.checks, _tls.spec = prev


class NeedsRank(TraceError):
    """The body needs an input's rank (``len(x.shape)``, ``x.ndim``, unpacking ``x.shape``):
    ``OpDef`` traces the op again per input-rank tuple."""


class NeedsShape(TraceError):
    """The body needs a concrete dim (``int(d)``, ``if d > 1``, ``range(d)``): ``OpDef`` traces the
    op again per input-shape tuple."""


class NeedsDtype(TraceError):
    """The body asks about a value's dtype (``x.dtype == fg.float16``, ``fg.finfo(x.dtype)``):
    ``OpDef`` traces the op again per input-dtype tuple (shapes stay generic)."""


def specialization() -> str | None:
    """The current trace's specialization: None (generic), ``"dtype"``, ``"rank"`` or ``"shape"``."""
    spec = getattr(_tls, "spec", None)
    return spec[0] if spec else None


def current_shape(node: Node):
    """A node's shape as far as the trace knows it: in a specialized trace, inferred from the
    inputs' ranks or shapes; in the generic one, only what the ops fix whatever the inputs (a
    reshape's rank, an iota's). None: the rank is unknown."""
    spec = getattr(_tls, "spec", None)
    return spec[1](node) if spec and spec[1] else None


def current_dtype(node: Node):
    """A node's dtype in a specialized trace (a DType; a weak scalar's materialized), else None."""
    spec = getattr(_tls, "spec", None)
    if not spec or spec[2] is None:
        return None
    return dt.materialize(spec[2](node))


def op_prefix() -> str:
    name = getattr(_tls, "op_name", None)
    return f"op {name}: " if name else ""


_CONTROL_FLOW = ("a traced {what} has no concrete value while the op is being traced, so it cannot "
                 "drive Python control flow ({how}); use fg.where(cond, a, b) for a data-dependent "
                 "choice{extra}")


class Tensor:
    """A traced value. Operators build IR nodes; Python control flow on it is an error."""

    __slots__ = ("node",)
    __array_priority__ = 1000  # numpy scalars defer to our reflected operators

    def __init__(self, node: Node):
        self.node = node

    # arithmetic ---------------------------------------------------------------------------
    def __add__(self, o): return binary(Op.ADD, self, o)
    def __radd__(self, o): return binary(Op.ADD, o, self)
    def __sub__(self, o): return binary(Op.SUB, self, o)
    def __rsub__(self, o): return binary(Op.SUB, o, self)
    def __mul__(self, o): return binary(Op.MUL, self, o)
    def __rmul__(self, o): return binary(Op.MUL, o, self)
    def __truediv__(self, o): return binary(Op.DIV, self, o)
    def __rtruediv__(self, o): return binary(Op.DIV, o, self)
    def __pow__(self, o): return binary(Op.POW, self, o)
    def __rpow__(self, o): return binary(Op.POW, o, self)
    def __floordiv__(self, o): return binary(Op.FLOOR_DIVIDE, self, o)
    def __rfloordiv__(self, o): return binary(Op.FLOOR_DIVIDE, o, self)
    def __mod__(self, o): return binary(Op.REMAINDER, self, o)
    def __rmod__(self, o): return binary(Op.REMAINDER, o, self)
    def __lt__(self, o): return binary(Op.LT, self, o)
    def __le__(self, o): return binary(Op.LE, self, o)
    def __gt__(self, o): return binary(Op.GT, self, o)
    def __ge__(self, o): return binary(Op.GE, self, o)
    def __eq__(self, o): return binary(Op.EQ, self, o)  # type: ignore[override]
    def __ne__(self, o): return binary(Op.NE, self, o)  # type: ignore[override]
    # NumPy's (and the array API's) operators: & | ^ ~ are bitwise (logical on bool), << >> shift
    def __and__(self, o): return binary(Op.BIT_AND, self, o)
    def __rand__(self, o): return binary(Op.BIT_AND, o, self)
    def __or__(self, o): return binary(Op.BIT_OR, self, o)
    def __ror__(self, o): return binary(Op.BIT_OR, o, self)
    def __xor__(self, o): return binary(Op.BIT_XOR, self, o)
    def __rxor__(self, o): return binary(Op.BIT_XOR, o, self)
    def __lshift__(self, o): return binary(Op.SHL, self, o)
    def __rlshift__(self, o): return binary(Op.SHL, o, self)
    def __rshift__(self, o): return binary(Op.SHR, self, o)
    def __rrshift__(self, o): return binary(Op.SHR, o, self)
    def __neg__(self): return unary(Op.NEG, self)
    def __pos__(self): return self
    def __abs__(self): return unary(Op.ABS, self)
    def __invert__(self): return unary(Op.INVERT, self)
    def __divmod__(self, o): return binary(Op.FLOOR_DIVIDE, self, o), binary(Op.REMAINDER, self, o)
    def __rdivmod__(self, o): return binary(Op.FLOOR_DIVIDE, o, self), binary(Op.REMAINDER, o, self)

    def __round__(self, ndigits=None):
        if ndigits is not None:
            raise TraceError(f"{op_prefix()}round(x, ndigits) is not supported: the array API's round "
                             f"rounds to integers (halves to even) [at {user_loc()}]")
        return unary(Op.ROUND, self)
    __hash__ = None  # type: ignore[assignment]

    def astype(self, dtype, /, *, copy=True, device=None) -> Tensor:
        return cast(self, dtype)

    @property
    def dtype(self):
        """The array API's ``x.dtype``. In the generic trace (one graph for every input dtype) a
        ``TracedDType``: it converts (``y.astype(x.dtype)``), and a question about it traces the op
        per input dtype; there, and in any specialized trace, the ``DType`` itself."""
        d = current_dtype(self.node)
        return TracedDType(self.node) if d is None else d

    def sum(self, axis=None, keepdims=False, *, keep_dims=None):
        return reduce("sum", self, axis, keepdims if keep_dims is None else keep_dims)
    def mean(self, axis=None, keepdims=False, *, keep_dims=None):
        return reduce("mean", self, axis, keepdims if keep_dims is None else keep_dims)
    def prod(self, axis=None, keepdims=False, *, keep_dims=None):
        return reduce("prod", self, axis, keepdims if keep_dims is None else keep_dims)
    def max(self, axis=None, keepdims=False, *, keep_dims=None):
        return reduce("max", self, axis, keepdims if keep_dims is None else keep_dims)
    def min(self, axis=None, keepdims=False, *, keep_dims=None):
        return reduce("min", self, axis, keepdims if keep_dims is None else keep_dims)

    # control flow is not traceable -----------------------------------------------------------
    def _no(self, how: str):
        if reads_a_dim(self.node):  # a shape value: traceable once the op is traced per shape
            raise NeedsShape(f"{op_prefix()}{how} on a dim (x.shape[i]) needs the shape of an input "
                             f"[at {user_loc()}]")
        what = "attribute" if self.node.op is Op.ATTR else "tensor"
        extra = (f" (attribute {self.node.arg!r} is read by the kernel at run time)"
                 if self.node.op is Op.ATTR else "")
        raise TraceError(op_prefix() + _CONTROL_FLOW.format(what=what, how=how, extra=extra)
                         + f" [at {user_loc()}]")

    def __bool__(self): self._no("if/while/and/or/not")
    def __index__(self): self._no("indexing or int()")
    def __int__(self): self._no("int()")
    def __float__(self): self._no("float()")
    def __len__(self): self._no("len()")
    def __iter__(self): self._no("iteration or unpacking")

    def __repr__(self) -> str:
        return f"<fusegen traced {self.node.op.value}>"


def reads_a_dim(n: Node) -> bool:
    """A static scalar made of dims (and constants/attributes): its value is a shape's."""
    stack, seen, dim = [n], set(), False
    while stack:
        m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        if m.op is Op.DIM:
            dim = True
            continue
        if m.op in (Op.INPUT, Op.REDUCE, Op.IOTA):
            return False
        stack.extend(m.srcs)
    return dim


class Attr(Tensor):
    """A traced attribute: usable as a scalar operand, a reduction axis or keep_dims."""

    __slots__ = ("spec",)

    def __init__(self, node: Node, spec: AttrSpec):
        super().__init__(node)
        self.spec = spec


def operand(x) -> Node:
    """The node of an operand: a traced tensor, a scalar attribute or a Python scalar."""
    if isinstance(x, Attr) and x.spec.type is AttrType.STR:
        # (the usual way here: `if reduction == "mean":`, `mode=mode`)
        raise TraceError(f"{op_prefix()}attribute {x.spec.name!r} is a str, which the kernel receives (the AOT ABI's "
                         f"string attribute) but the trace cannot read: one traced graph serves every value, so a "
                         f"string cannot choose what to compute, nor be an operand or an argument such as mode=; "
                         f"choose with an int or bool attribute and fg.where, or write one op per choice "
                         f"[at {user_loc()}]")
    if isinstance(x, Attr) and not x.spec.type.is_scalar:
        raise TraceError(f"{op_prefix()}attribute {x.spec.name!r} of type {x.spec.type.value} cannot be an operand; "
                         f"only bool, int and float attributes can [at {user_loc()}]")
    if isinstance(x, Tensor):
        return x.node
    import numpy as np
    if isinstance(x, (bool, np.bool_)):
        return make(Op.CONST, (), ("bool", bool(x)))
    if isinstance(x, (int, np.integer)):
        return make(Op.CONST, (), ("int", int(x)))
    if isinstance(x, (float, np.floating)):
        return make(Op.CONST, (), ("float", float(x)))
    if isinstance(x, (complex, np.complexfloating)):
        return make(Op.CONST, (), ("complex", complex(x)))
    raise TraceError(f"{op_prefix()}cannot use {type(x).__name__} {x!r} in a fused op: operands are traced tensors, "
                     f"attributes or Python scalars [at {user_loc()}]")


def unary(op: Op, x) -> Tensor:
    return Tensor(make(op, (operand(x),)))


def binary(op: Op, a, b) -> Tensor:
    return Tensor(make(op, (operand(a), operand(b))))


def _axes_arg(axis):
    if axis is None:
        return None
    if isinstance(axis, Attr):
        if axis.spec.type not in (AttrType.INT, AttrType.INTS):
            raise TraceError(f"attribute {axis.spec.name!r} ({axis.spec.type.value}) cannot be an axis; "
                             f"use an int or list[int] attribute [at {user_loc()}]")
        return AttrRef(axis.spec.name)
    import numpy as np
    if isinstance(axis, (int, np.integer)) and not isinstance(axis, bool):
        return (int(axis),)
    if isinstance(axis, (tuple, list)) and all(isinstance(a, (int, np.integer)) and not isinstance(a, bool)
                                               for a in axis):
        return tuple(int(a) for a in axis)
    raise TraceError(f"axis must be None, an int, a tuple of ints or an int/list[int] attribute, "
                     f"got {axis!r} [at {user_loc()}]")


def _keep_arg(keep_dims):
    if isinstance(keep_dims, Attr):
        if keep_dims.spec.type is not AttrType.BOOL:
            raise TraceError(f"keep_dims attribute {keep_dims.spec.name!r} must be a bool attribute "
                             f"[at {user_loc()}]")
        return AttrRef(keep_dims.spec.name)
    if isinstance(keep_dims, bool):
        return keep_dims
    raise TraceError(f"keep_dims must be a bool or a bool attribute, got {keep_dims!r} [at {user_loc()}]")


def reduce(kind: str, x, axis=None, keep_dims=False, empty_ok=False) -> Tensor:
    """Reduce ``x`` over ``axis`` (None: all) with ``kind`` in sum/mean/prod/max/min."""
    if kind not in REDUCE_KINDS:
        raise TraceError(f"unknown reduction {kind!r}")
    arg = ReduceArg(kind, _axes_arg(axis), _keep_arg(keep_dims), bool(empty_ok))
    return Tensor(make(Op.REDUCE, (operand(x),), arg))


def where(cond, a, b) -> Tensor:
    """Elementwise ``a`` where ``cond`` is true, else ``b`` (NumPy's ``np.where``)."""
    return Tensor(make(Op.WHERE, (operand(cond), operand(a), operand(b))))


def cast(x, dtype) -> Tensor:
    """``x`` converted to ``dtype``: a dtype, its name, a NumPy dtype, or another traced value's
    ``.dtype`` (then the conversion follows whatever dtype that value has at run time)."""
    if isinstance(dtype, TracedDType):
        return Tensor(make(Op.CAST, (operand(x), dtype.node), DTypeOf()))
    return Tensor(make(Op.CAST, (operand(x),), dt.as_dtype(dtype)))


class TracedDType:
    """``x.dtype`` in an op's generic trace, where one graph serves every input dtype, so the value
    is not a ``DType`` yet: it converts (``astype``, ``cast``, a creation function's ``dtype=``), and
    a question about it (``==``, ``finfo``) raises ``NeedsDtype``: ``OpDef`` then traces the op per
    input-dtype combination, where ``x.dtype`` is the ``DType`` itself."""

    __slots__ = ("node",)

    def __init__(self, node: Node):
        self.node = node

    def unknown(self, how: str):
        """A question the generic trace cannot answer: the op is traced again per input dtype."""
        raise NeedsDtype(f"{op_prefix()}{how} of a traced value's dtype needs the input dtypes [at {user_loc()}]")

    def __eq__(self, other):
        self.unknown("==")

    def __ne__(self, other):
        self.unknown("!=")

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<fusegen dtype of a traced {self.node.op.value}>"


def _tensor_operand(x, fn: str) -> Node:
    if not isinstance(x, Tensor) or isinstance(x, Attr):
        raise TraceError(f"{op_prefix()}{fn} takes traced tensors, got {type(x).__name__} [at {user_loc()}]")
    return x.node


def sum_to(x, like, span=()) -> Tensor:
    """``x`` broadcast with ``like``, then summed down to ``like``'s shape: over the axes
    along which ``like`` broadcasts (leading axes it lacks, and its size-1 dims). The
    adjoint of broadcasting; which axes those are is decided by the shapes at run time.
    ``like`` is only measured, never read; so are the tensors in ``span``, whose shapes
    the loop also spans (``x`` is taken broadcast to them first: how fg.grad sums an
    adjoint that stayed smaller than the value it belongs to)."""
    shape_only = (_tensor_operand(like, "sum_to"),) + tuple(_tensor_operand(t, "sum_to") for t in span)
    return Tensor(make(Op.REDUCE, (_tensor_operand(x, "sum_to"),) + shape_only,
                       ReduceArg("sum", ShapeOf("broadcast"), True)))


def cast_like(x, like) -> Tensor:
    """``x`` converted to ``like``'s dtype (whatever it turns out to be at run time)."""
    return Tensor(make(Op.CAST, (operand(x), _tensor_operand(like, "cast_like")), DTypeOf()))


def unreduce(x, reduction: Tensor) -> Tensor:
    """``x``, shaped like ``reduction``'s result, with the reduced axes put back as size-1
    dims (so it broadcasts against the reduction's source). Materialized, not a view: a
    reduction's result is small."""
    r = _tensor_operand(reduction, "unreduce")
    if r.op is not Op.REDUCE:
        raise TraceError(f"{op_prefix()}unreduce needs a reduction's result [at {user_loc()}]")
    return Tensor(make(Op.REDUCE, (_tensor_operand(x, "unreduce"), r), ReduceArg("sum", ShapeOf("unreduce"), True)))


def expect_same_shape(a: Tensor, b: Tensor, what: str) -> None:
    """Inside a trace: require ``a`` and ``b`` to have one shape at run time (checked by
    ``infer`` and by the emitted InferShape), ``what`` naming the failure."""
    checks = getattr(_tls, "checks", None)
    if checks is None:
        raise TraceError("expect_same_shape is only meaningful while an op is traced")
    checks.append((_tensor_operand(a, "expect_same_shape"), _tensor_operand(b, "expect_same_shape"), what))
