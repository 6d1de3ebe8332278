"""The fused-op IR: nodes, tracing (``@fg.op``), shape/dtype rules and the text form.

A traced op is a small DAG of frozen, hashable ``Node``s. It is *rank- and
dtype-polymorphic*: inputs carry neither, and attributes stay symbolic (an ``ATTR``
node, or an ``AttrRef`` in a reduction's axes/keep_dims), because an emitted AOT
kernel only learns them at Init/run time. ``infer`` evaluates the shape and dtype
rules for concrete (or partly unknown: -1 dims, unknown rank) inputs; the C++
emitter renders the very same rules (see ``abi_emit``), so the two cannot drift.
"""
from __future__ import annotations

import enum
import hashlib
import inspect
import os
import re
import sys
import threading
import typing
from dataclasses import dataclass, field
from typing import Any

from . import dtypes as dt
from .dtypes import AttrType, DType
from .errors import AttrError, ArgumentError, DTypeError, ShapeError, TraceError

UNKNOWN_DIM = -1   # the AOT ABI's marker for a dim unknown until run time
UNKNOWN_RANK = -2  # the AOT ABI's shape [-2]: rank unknown


class Op(enum.Enum):
    INPUT = "input"
    ATTR = "attr"
    CONST = "const"
    # unary
    NEG = "neg"
    ABS = "abs"
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    SIN = "sin"
    COS = "cos"
    TANH = "tanh"
    SIGMOID = "sigmoid"
    RELU = "relu"
    ERF = "erf"
    FLOOR = "floor"
    CEIL = "ceil"
    NOT = "logical_not"
    # binary
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    POW = "pow"
    MAX = "maximum"
    MIN = "minimum"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    EQ = "eq"
    NE = "ne"
    AND = "logical_and"
    OR = "logical_or"
    # others
    WHERE = "where"
    CAST = "cast"
    REDUCE = "reduce"


# Each elementwise op's dtype rule is the NumPy ufunc whose type resolution it follows.
UNARY_UFUNC = {
    Op.NEG: "negative", Op.ABS: "absolute", Op.EXP: "exp", Op.LOG: "log", Op.SQRT: "sqrt",
    Op.RSQRT: "sqrt", Op.SIN: "sin", Op.COS: "cos", Op.TANH: "tanh", Op.SIGMOID: "exp",
    Op.RELU: "absolute", Op.ERF: "exp", Op.FLOOR: "floor", Op.CEIL: "ceil", Op.NOT: "logical_not",
}
BINARY_UFUNC = {
    Op.ADD: "add", Op.SUB: "subtract", Op.MUL: "multiply", Op.DIV: "true_divide", Op.POW: "power",
    Op.MAX: "maximum", Op.MIN: "minimum", Op.LT: "less", Op.LE: "less_equal", Op.GT: "greater",
    Op.GE: "greater_equal", Op.EQ: "equal", Op.NE: "not_equal", Op.AND: "logical_and",
    Op.OR: "logical_or",
}
REDUCE_KINDS = ("sum", "mean", "prod", "max", "min")


@dataclass(frozen=True, slots=True)
class AttrRef:
    """A reduction axis or keep_dims flag that names an attribute instead of a value."""

    name: str

    def __repr__(self) -> str:
        return f"@{self.name}"


@dataclass(frozen=True, slots=True)
class ShapeOf:
    """Reduction axes read off a *shape-only* second source (``srcs[1]``), which the
    kernel never loads: gradients need them, and only the shapes known at run time say
    which axes they are.

    * ``"broadcast"`` (``fg.sum_to(x, like)``): the axes along which ``like`` was
      broadcast to ``x``'s shape; the result has ``like``'s shape. The adjoint of
      broadcasting.
    * ``"unreduce"``: none; the result is ``x`` (shaped like the reduction ``srcs[1]``)
      with that reduction's axes put back as size-1 dims, so it broadcasts against the
      reduction's source. The adjoint of dropping dims (``keep_dims=False``).
    """

    rule: str

    def __repr__(self) -> str:
        return f"{self.rule}(%like)"


@dataclass(frozen=True, slots=True)
class DTypeOf:
    """A cast's target: the dtype of the shape-only second source (``fg.cast_like``)."""

    def __repr__(self) -> str:
        return "dtype(%like)"


@dataclass(frozen=True, slots=True)
class ReduceArg:
    kind: str                                  # one of REDUCE_KINDS
    axes: tuple[int, ...] | AttrRef | ShapeOf | None   # None: every axis
    keep_dims: bool | AttrRef = False


@dataclass(frozen=True, slots=True)
class Node:
    """One IR node. Structural equality and a cached hash; ``loc`` is not part of either."""

    op: Op
    srcs: tuple[Node, ...] = ()
    arg: Any = None
    loc: str = field(default="", compare=False, repr=False)
    _hash: int = field(default=0, compare=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "_hash", hash((self.op, self.srcs, self.arg)))

    def __hash__(self) -> int:
        return self._hash


def value_srcs(n: Node) -> tuple[Node, ...]:
    """The sources whose *values* ``n`` reads. A ``sum_to``/``unreduce``/``cast_like``
    node's second source is shape- or dtype-only: shape inference visits it, kernels don't."""
    if (n.op is Op.REDUCE and isinstance(n.arg.axes, ShapeOf)) or (n.op is Op.CAST and isinstance(n.arg, DTypeOf)):
        return n.srcs[:1]
    return n.srcs


@dataclass(frozen=True, slots=True)
class AttrSpec:
    name: str
    type: AttrType
    default: Any = None
    required: bool = False


# ---------------------------------------------------------------------------------------------
# Tracing
# ---------------------------------------------------------------------------------------------
_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_TRACING_FILES = {os.path.join(_PKG_DIR, f) for f in ("ir.py", "ops.py")}
_tls = threading.local()


def _user_loc() -> str:
    """file:line of the innermost frame outside the tracer: where the user wrote the node."""
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename in _TRACING_FILES:
        f = f.f_back
    if f is None:
        return ""
    return f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}"


def _make(op: Op, srcs=(), arg=None) -> Node:
    node = Node(op, tuple(srcs), arg, _user_loc())
    intern = getattr(_tls, "intern", None)
    if intern is None:
        return node
    return intern.setdefault(node, node)  # common subexpressions become one node


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
    def __add__(self, o): return _binary(Op.ADD, self, o)
    def __radd__(self, o): return _binary(Op.ADD, o, self)
    def __sub__(self, o): return _binary(Op.SUB, self, o)
    def __rsub__(self, o): return _binary(Op.SUB, o, self)
    def __mul__(self, o): return _binary(Op.MUL, self, o)
    def __rmul__(self, o): return _binary(Op.MUL, o, self)
    def __truediv__(self, o): return _binary(Op.DIV, self, o)
    def __rtruediv__(self, o): return _binary(Op.DIV, o, self)
    def __pow__(self, o): return _binary(Op.POW, self, o)
    def __rpow__(self, o): return _binary(Op.POW, o, self)
    def __lt__(self, o): return _binary(Op.LT, self, o)
    def __le__(self, o): return _binary(Op.LE, self, o)
    def __gt__(self, o): return _binary(Op.GT, self, o)
    def __ge__(self, o): return _binary(Op.GE, self, o)
    def __eq__(self, o): return _binary(Op.EQ, self, o)  # type: ignore[override]
    def __ne__(self, o): return _binary(Op.NE, self, o)  # type: ignore[override]
    def __and__(self, o): return _binary(Op.AND, self, o)
    def __rand__(self, o): return _binary(Op.AND, o, self)
    def __or__(self, o): return _binary(Op.OR, self, o)
    def __ror__(self, o): return _binary(Op.OR, o, self)
    def __neg__(self): return _unary(Op.NEG, self)
    def __pos__(self): return self
    def __abs__(self): return _unary(Op.ABS, self)
    def __invert__(self): return _unary(Op.NOT, self)
    __hash__ = None  # type: ignore[assignment]

    def astype(self, dtype) -> Tensor:
        return Tensor(_make(Op.CAST, (self.node,), dt.as_dtype(dtype)))

    def sum(self, axis=None, keep_dims=False): return reduce("sum", self, axis, keep_dims)
    def mean(self, axis=None, keep_dims=False): return reduce("mean", self, axis, keep_dims)
    def prod(self, axis=None, keep_dims=False): return reduce("prod", self, axis, keep_dims)
    def max(self, axis=None, keep_dims=False): return reduce("max", self, axis, keep_dims)
    def min(self, axis=None, keep_dims=False): return reduce("min", self, axis, keep_dims)

    # control flow is not traceable -----------------------------------------------------------
    def _no(self, how: str):
        what = "attribute" if self.node.op is Op.ATTR else "tensor"
        extra = (f" (attribute {self.node.arg!r} is read by the kernel at run time)"
                 if self.node.op is Op.ATTR else "")
        raise TraceError(_op_prefix() + _CONTROL_FLOW.format(what=what, how=how, extra=extra)
                         + f" [at {_user_loc()}]")

    def __bool__(self): self._no("if/while/and/or/not")
    def __index__(self): self._no("indexing or int()")
    def __int__(self): self._no("int()")
    def __float__(self): self._no("float()")
    def __len__(self): self._no("len()")
    def __iter__(self): self._no("iteration or unpacking")

    def __repr__(self) -> str:
        return f"<fusegen traced {self.node.op.value}>"


class Attr(Tensor):
    """A traced attribute: usable as a scalar operand, a reduction axis or keep_dims."""

    __slots__ = ("spec",)

    def __init__(self, node: Node, spec: AttrSpec):
        super().__init__(node)
        self.spec = spec


def _op_prefix() -> str:
    name = getattr(_tls, "op_name", None)
    return f"op {name}: " if name else ""


def _operand(x) -> Node:
    if isinstance(x, Attr) and not x.spec.type.is_scalar:
        raise TraceError(f"{_op_prefix()}attribute {x.spec.name!r} of type {x.spec.type.value} cannot be an operand; "
                         f"only bool, int and float attributes can [at {_user_loc()}]")
    if isinstance(x, Tensor):
        return x.node
    import numpy as np
    if isinstance(x, (bool, np.bool_)):
        return _make(Op.CONST, (), ("bool", bool(x)))
    if isinstance(x, (int, np.integer)):
        return _make(Op.CONST, (), ("int", int(x)))
    if isinstance(x, (float, np.floating)):
        return _make(Op.CONST, (), ("float", float(x)))
    raise TraceError(f"{_op_prefix()}cannot use {type(x).__name__} {x!r} in a fused op: operands are traced tensors, "
                     f"attributes or Python scalars [at {_user_loc()}]")


def _unary(op: Op, x) -> Tensor:
    return Tensor(_make(op, (_operand(x),)))


def _binary(op: Op, a, b) -> Tensor:
    return Tensor(_make(op, (_operand(a), _operand(b))))


def _axes_arg(axis):
    if axis is None:
        return None
    if isinstance(axis, Attr):
        if axis.spec.type not in (AttrType.INT, AttrType.INTS):
            raise TraceError(f"attribute {axis.spec.name!r} ({axis.spec.type.value}) cannot be an axis; "
                             f"use an int or list[int] attribute [at {_user_loc()}]")
        return AttrRef(axis.spec.name)
    import numpy as np
    if isinstance(axis, (int, np.integer)) and not isinstance(axis, bool):
        return (int(axis),)
    if isinstance(axis, (tuple, list)) and all(isinstance(a, (int, np.integer)) and not isinstance(a, bool)
                                               for a in axis):
        return tuple(int(a) for a in axis)
    raise TraceError(f"axis must be None, an int, a tuple of ints or an int/list[int] attribute, "
                     f"got {axis!r} [at {_user_loc()}]")


def _keep_arg(keep_dims):
    if isinstance(keep_dims, Attr):
        if keep_dims.spec.type is not AttrType.BOOL:
            raise TraceError(f"keep_dims attribute {keep_dims.spec.name!r} must be a bool attribute "
                             f"[at {_user_loc()}]")
        return AttrRef(keep_dims.spec.name)
    if isinstance(keep_dims, bool):
        return keep_dims
    raise TraceError(f"keep_dims must be a bool or a bool attribute, got {keep_dims!r} [at {_user_loc()}]")


def reduce(kind: str, x, axis=None, keep_dims=False) -> Tensor:
    """Reduce ``x`` over ``axis`` (None: all) with ``kind`` in sum/mean/prod/max/min."""
    if kind not in REDUCE_KINDS:
        raise TraceError(f"unknown reduction {kind!r}")
    return Tensor(_make(Op.REDUCE, (_operand(x),), ReduceArg(kind, _axes_arg(axis), _keep_arg(keep_dims))))


def where(cond, a, b) -> Tensor:
    """Elementwise ``a`` where ``cond`` is true, else ``b`` (NumPy's ``np.where``)."""
    return Tensor(_make(Op.WHERE, (_operand(cond), _operand(a), _operand(b))))


def cast(x, dtype) -> Tensor:
    return Tensor(_make(Op.CAST, (_operand(x),), dt.as_dtype(dtype)))


def _tensor_operand(x, fn: str) -> Node:
    if not isinstance(x, Tensor) or isinstance(x, Attr):
        raise TraceError(f"{_op_prefix()}{fn} takes traced tensors, got {type(x).__name__} [at {_user_loc()}]")
    return x.node


def sum_to(x, like, span=()) -> Tensor:
    """``x`` broadcast with ``like``, then summed down to ``like``'s shape: over the axes
    along which ``like`` broadcasts (leading axes it lacks, and its size-1 dims). The
    adjoint of broadcasting; which axes those are is decided by the shapes at run time.
    ``like`` is only measured, never read; so are the tensors in ``span``, whose shapes
    the loop also spans (``x`` is taken broadcast to them first: how fg.grad sums an
    adjoint that stayed smaller than the value it belongs to)."""
    shape_only = (_tensor_operand(like, "sum_to"),) + tuple(_tensor_operand(t, "sum_to") for t in span)
    return Tensor(_make(Op.REDUCE, (_tensor_operand(x, "sum_to"),) + shape_only,
                        ReduceArg("sum", ShapeOf("broadcast"), True)))


def cast_like(x, like) -> Tensor:
    """``x`` converted to ``like``'s dtype (whatever it turns out to be at run time)."""
    return Tensor(_make(Op.CAST, (_operand(x), _tensor_operand(like, "cast_like")), DTypeOf()))


def unreduce(x, reduction: Tensor) -> Tensor:
    """``x``, shaped like ``reduction``'s result, with the reduced axes put back as size-1
    dims (so it broadcasts against the reduction's source). Materialized, not a view: a
    reduction's result is small."""
    r = _tensor_operand(reduction, "unreduce")
    if r.op is not Op.REDUCE:
        raise TraceError(f"{_op_prefix()}unreduce needs a reduction's result [at {_user_loc()}]")
    return Tensor(_make(Op.REDUCE, (_tensor_operand(x, "unreduce"), r), ReduceArg("sum", ShapeOf("unreduce"), True)))


def expect_same_shape(a: Tensor, b: Tensor, what: str) -> None:
    """Inside a trace: require ``a`` and ``b`` to have one shape at run time (checked by
    ``infer`` and by the emitted InferShape), ``what`` naming the failure."""
    checks = getattr(_tls, "checks", None)
    if checks is None:
        raise TraceError("expect_same_shape is only meaningful while an op is traced")
    checks.append((_tensor_operand(a, "expect_same_shape"), _tensor_operand(b, "expect_same_shape"), what))


# ---------------------------------------------------------------------------------------------
# The traced op
# ---------------------------------------------------------------------------------------------
class Graph:
    """An op's nodes in topological order, with its outputs."""

    def __init__(self, outputs: tuple[Node, ...], checks: tuple = ()):
        self.outputs = outputs
        # (a, b, message): nodes whose shapes must agree at run time (fg.grad's cotangents)
        self.checks = checks
        order: list[Node] = []
        seen: set[int] = set()
        roots = tuple(outputs) + tuple(n for c in checks for n in c[:2])
        stack: list[tuple[Node, bool]] = [(o, False) for o in reversed(roots)]
        while stack:  # iterative DFS: deep chains must not hit the recursion limit
            n, done = stack.pop()
            if done:
                order.append(n)
                continue
            if id(n) in seen:
                continue
            seen.add(id(n))
            stack.append((n, True))
            stack.extend((s, False) for s in reversed(n.srcs) if id(s) not in seen)
        self.nodes: tuple[Node, ...] = tuple(order)
        self.index: dict[int, int] = {id(n): i for i, n in enumerate(self.nodes)}

    def idx(self, node: Node) -> int:
        return self.index[id(node)]


class OpDef:
    """A traced fused op: what ``@fg.op`` returns.

    Call it on arrays to run it with the default backend (Numba, CPU); call it on
    traced tensors inside another ``@fg.op`` to inline it.
    """

    def __init__(self, fn, name: str | None = None, inplace=None):
        self.fn = fn
        # The name becomes C symbols and file names: "<lambda>" -> "lambda"
        self.name = re.sub(r"\W", "", name or fn.__name__) or "fused_op"
        if self.name[0].isdigit():
            self.name = "op_" + self.name
        self.doc = fn.__doc__
        sig = inspect.signature(fn)
        try:
            hints = typing.get_type_hints(fn)
        except Exception:  # unresolvable string annotations: fall back to the raw text
            hints = {}
        self.inputs: list[str] = []
        self.attrs: dict[str, AttrSpec] = {}
        for p in sig.parameters.values():
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                if p.default is not p.empty:
                    raise TraceError(f"op {self.name}: tensor parameter {p.name!r} cannot have a default; "
                                     "make attributes keyword-only (after *)")
                self.inputs.append(p.name)
            elif p.kind is p.KEYWORD_ONLY:
                if p.name in ("out", "accumulate", "skip", "inplace", "stream"):
                    raise TraceError(f"op {self.name}: an attribute cannot be named {p.name!r}: kernel calls "
                                     "take that keyword for themselves")
                self.attrs[p.name] = self._attr_spec(p, hints.get(p.name, p.annotation))
            else:
                raise TraceError(f"op {self.name}: *args/**kwargs are not supported ({p})")
        self.graph = self._trace()
        self.multi_output = self._multi
        from .requests import declared_inplace
        self.inplace: dict[int, int] = declared_inplace(self, inplace)  # output -> input it may overwrite
        self.key = hashlib.sha256(self.text(locations=False).encode()).hexdigest()[:16]

    def _attr_spec(self, p, ann) -> AttrSpec:
        t = None if ann is inspect.Parameter.empty else dt.attr_type_from_annotation(ann)
        if t is None and ann is inspect.Parameter.empty and p.default is not p.empty:
            t = {bool: AttrType.BOOL, int: AttrType.INT, float: AttrType.FLOAT, str: AttrType.STR}.get(
                type(p.default))
        if t is None:
            got = "no annotation" if ann is inspect.Parameter.empty else f"got {ann!r}"
            raise TraceError(f"op {self.name}: attribute {p.name!r} needs a type annotation among bool, int, "
                             f"float, str, list[int], list[float], list[list[int]], list[list[float]]; {got}")
        if p.default is p.empty:
            return AttrSpec(p.name, t, None, True)
        try:
            default = dt.coerce_attr(t, p.default)
        except TypeError as e:
            raise AttrError(f"op {self.name}: default of attribute {p.name!r}: {e}") from None
        return AttrSpec(p.name, t, default, False)

    def _trace(self) -> Graph:
        prev = getattr(_tls, "intern", None), getattr(_tls, "op_name", None), getattr(_tls, "checks", None)
        _tls.intern, _tls.op_name, _tls.checks = {}, self.name, []
        try:
            args = [Tensor(_make(Op.INPUT, (), i)) for i in range(len(self.inputs))]
            kwargs = {n: Attr(_make(Op.ATTR, (), n), s) for n, s in self.attrs.items()}
            out = self.fn(*args, **kwargs)
            checks = tuple(_tls.checks)
        finally:
            _tls.intern, _tls.op_name, _tls.checks = prev
        self._multi = isinstance(out, (tuple, list))
        outs = tuple(out) if self._multi else (out,)
        if not outs:
            raise TraceError(f"op {self.name} returns no outputs")
        nodes = []
        for i, o in enumerate(outs):
            if not isinstance(o, Tensor):
                raise TraceError(f"op {self.name}: output {i} is a {type(o).__name__}, not a traced tensor")
            nodes.append(o.node)
        g = Graph(tuple(nodes), checks)
        for i, o in enumerate(g.outputs):
            if not any(n.op is Op.INPUT for n in Graph((o,)).nodes):
                at = f" [at {o.loc}]" if o.loc else ""
                raise TraceError(f"op {self.name}: output {i} does not depend on any input; "
                                 f"its shape would be undefined{at}")
        return g

    # --- calling ------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if any(isinstance(a, Tensor) for a in args):
            return self._inline(*args, **kwargs)
        from . import runtime  # the default kernel: Numba on the CPU
        return runtime.default_kernel(self)(*args, **kwargs)

    def _inline(self, *args, **kwargs):
        if len(args) != len(self.inputs):
            raise ArgumentError(f"op {self.name} takes {len(self.inputs)} inputs, got {len(args)}")
        # Re-tracing the body on the caller's tensors inlines it (attributes pass through).
        return self.fn(*args, **kwargs)

    def signature_for(self, tensors: list[str]) -> inspect.Signature:
        """A signature with ``tensors`` as tensor parameters and this op's attributes: how
        ops derived from this one (gradients, write requests) are declared for tracing."""
        P = inspect.Parameter
        return inspect.Signature(
            [P(t, P.POSITIONAL_OR_KEYWORD) for t in tensors]
            + [P(s.name, P.KEYWORD_ONLY, annotation=s.type.value, default=P.empty if s.required else s.default)
               for s in self.attrs.values()])

    def with_requests(self, accumulate=(), skip=()) -> OpDef:
        """This op with the outputs in ``accumulate`` added to new inputs ``prev<k>`` and those
        in ``skip`` dropped (see ``fusegen.requests``): what ``kernel(..., accumulate=...,
        skip=...)`` runs, and what ``fg.emit`` can ship as an add-to kernel."""
        from . import requests
        return requests.derive(self, requests.output_indices(self, accumulate, "accumulate"),
                               requests.output_indices(self, skip, "skip"))

    # --- attributes ---------------------------------------------------------------------------
    def bind_attrs(self, given: dict) -> dict:
        """Validate attribute values; fill defaults. Returns canonical values by name."""
        out = {}
        for n in given:
            if n not in self.attrs:
                known = ", ".join(self.attrs) or "none"
                raise AttrError(f"op {self.name}: unknown attribute {n!r} (attributes: {known})")
        for n, spec in self.attrs.items():
            if n in given:
                try:
                    out[n] = dt.coerce_attr(spec.type, given[n])
                except TypeError as e:
                    raise AttrError(f"op {self.name}: attribute {n!r}: {e}") from None
            elif spec.required:
                raise AttrError(f"op {self.name}: missing required attribute {n!r} ({spec.type.value})")
            else:
                out[n] = spec.default
        return out

    # --- text form ----------------------------------------------------------------------------
    def text(self, locations: bool = True) -> str:
        g = self.graph
        names = {}
        attrs = ", ".join(f"{s.name}: {s.type.value}" + ("" if s.required else f" = {s.default!r}")
                          for s in self.attrs.values())
        lines = [f"op {self.name}({', '.join(self.inputs)}{'; ' + attrs if attrs else ''}) {{"]
        for i, n in enumerate(g.nodes):
            names[id(n)] = f"%{i}"
            body = node_text(n, [names[id(s)] for s in n.srcs], self)
            line = f"  %{i} = {body}"
            if locations and n.loc and n.op not in (Op.INPUT, Op.ATTR):
                line = f"{line:<48} # {n.loc}"
            lines.append(line)
        for a, b, what in g.checks:
            lines.append(f"  check shape {names[id(a)]} == {names[id(b)]}  # {what}")
        lines.append("  return " + ", ".join(names[id(o)] for o in g.outputs))
        lines.append("}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return f"<fusegen op {self.name}({', '.join(self.inputs)}; {', '.join(self.attrs)})>"


def node_text(n: Node, src_names: list[str], opdef: OpDef | None = None) -> str:
    if n.op is Op.INPUT:
        return f"input {opdef.inputs[n.arg] if opdef else n.arg}"
    if n.op is Op.ATTR:
        return f"attr @{n.arg}"
    if n.op is Op.CONST:
        return f"const {n.arg[1]!r}"
    if n.op is Op.CAST:
        if isinstance(n.arg, DTypeOf):
            return f"cast {src_names[0]} to dtype of {src_names[1]}"
        return f"cast {src_names[0]} to {n.arg}"
    if n.op is Op.REDUCE and isinstance(n.arg.axes, ShapeOf):
        if n.arg.axes.rule == "broadcast":
            return f"sum_to {src_names[0]}, shape of {src_names[1]}"
        return f"unreduce {src_names[0]}, axes of {src_names[1]}"
    if n.op is Op.REDUCE:
        a = n.arg
        axes = "all" if a.axes is None else (repr(a.axes) if isinstance(a.axes, AttrRef) else
                                             ",".join(map(str, a.axes)))
        return f"{a.kind} {src_names[0]}, axis={axes}, keep_dims={a.keep_dims!r}"
    return f"{n.op.value} {', '.join(src_names)}"


def op(fn=None, *, name: str | None = None, inplace=None):
    """Decorator: trace a Python function into a fused op (an ``OpDef``).

    Positional parameters are tensor inputs; keyword-only parameters are attributes,
    typed by their annotation, with their default as default (none: required).
    ``inplace={output index: "input name"}`` (or just ``"input name"`` for output 0)
    declares outputs that may be written over an input's memory (``kernel(..., inplace=True)``).
    """
    if fn is None:
        return lambda f: OpDef(f, name, inplace)
    return OpDef(fn, name, inplace)


# ---------------------------------------------------------------------------------------------
# Shape and dtype rules (evaluated here; rendered to C++ by the emitter)
# ---------------------------------------------------------------------------------------------
Shape = typing.Optional[tuple]  # None: unknown rank; -1 entries: unknown dims


@dataclass(frozen=True)
class NodeInfo:
    dtype: DType | str         # a DType, or a weak scalar kind "bool"/"int"/"float"
    shape: Shape
    compute: DType | str | None = None   # elementwise: the dtype the op computes in
    acc: DType | None = None             # reductions: the accumulation dtype
    axes: tuple[int, ...] | None = None  # reductions: normalized axes (None if rank unknown)
    keep_dims: bool = False


@dataclass(frozen=True)
class Spec:
    """The op specialized to input dtypes, shapes and attribute values."""

    opdef: OpDef
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


def _where(opdef: OpDef, node: Node) -> str:
    i = opdef.graph.idx(node)
    src = [f"%{opdef.graph.idx(s)}" for s in node.srcs]
    at = f" at {node.loc}" if node.loc else ""
    return f"op {opdef.name}: node %{i} = {node_text(node, src, opdef)}{at}"


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
                 else f"axis {a} is out of range: the operand is a scalar (rank 0)")
        out.append(a % rank)
    if len(set(out)) != len(out):
        fail(f"repeated axis in {tuple(axes)}")
    return tuple(sorted(out))


def reduce_dtypes(kind: str, x: DType) -> tuple[DType, DType]:
    """(output dtype, accumulation dtype) of a reduction, as NumPy's np.<kind> gives."""
    if kind in ("max", "min"):
        out = x
    elif kind == "mean":
        out = x if x.is_float else dt.float64
    elif x.kind == "u":
        out = dt.uint64
    elif x.kind in "ib":
        out = dt.int64
    else:
        out = x
    acc = dt.float32 if out is dt.float16 else out
    return out, acc


def infer(opdef: OpDef, in_dtypes, in_shapes, attrs: dict) -> Spec:
    """Evaluate the op's dtype and shape rules.

    ``in_shapes`` entries are tuples (with -1 for unknown dims) or None / ``(-2,)`` for an
    unknown rank. ``attrs`` must already be bound (``opdef.bind_attrs``).
    """
    g = opdef.graph
    if len(in_dtypes) != len(opdef.inputs) or len(in_shapes) != len(opdef.inputs):
        raise ArgumentError(f"op {opdef.name} takes {len(opdef.inputs)} inputs "
                            f"({', '.join(opdef.inputs)}), got {len(in_dtypes)}")
    in_dtypes = tuple(dt.as_dtype(d) for d in in_dtypes)
    shapes = [None if (s is None or tuple(s) == (UNKNOWN_RANK,)) else tuple(int(d) for d in s)
              for s in in_shapes]
    info: list[NodeInfo] = []
    for n in g.nodes:
        def fail(msg, _n=n, exc=ShapeError):
            raise exc(f"{_where(opdef, _n)}: {msg}")

        srcs = [info[g.idx(s)] for s in n.srcs]
        if n.op is Op.INPUT:
            info.append(NodeInfo(in_dtypes[n.arg], shapes[n.arg]))
        elif n.op is Op.ATTR:
            kind = {AttrType.BOOL: "bool", AttrType.INT: "int", AttrType.FLOAT: "float"}[opdef.attrs[n.arg].type]
            info.append(NodeInfo(kind, ()))
        elif n.op is Op.CONST:
            info.append(NodeInfo(n.arg[0], ()))
        elif n.op is Op.CAST:
            to = dt.materialize(srcs[1].dtype) if isinstance(n.arg, DTypeOf) else n.arg
            info.append(NodeInfo(to, srcs[0].shape))
        elif n.op is Op.REDUCE and isinstance(n.arg.axes, ShapeOf):
            info.append(_infer_shape_of(n, srcs, info, g, fail))
        elif n.op is Op.REDUCE:
            a, x = n.arg, srcs[0]
            axes = attrs[a.axes.name] if isinstance(a.axes, AttrRef) else a.axes
            if isinstance(axes, int):
                axes = (axes,)
            keep = attrs[a.keep_dims.name] if isinstance(a.keep_dims, AttrRef) else a.keep_dims
            xd = dt.materialize(x.dtype)
            out_dt, acc = reduce_dtypes(a.kind, xd)
            if x.shape is None:
                info.append(NodeInfo(out_dt, None, xd, acc, None, keep))
                continue
            ax = normalize_axes(axes, len(x.shape), fail)
            if keep:
                shp = tuple(1 if k in ax else d for k, d in enumerate(x.shape))
            else:
                shp = tuple(d for k, d in enumerate(x.shape) if k not in ax)
            if a.kind in ("max", "min") and any(x.shape[k] == 0 for k in ax):
                fail(f"{a.kind} over an axis of size 0 has no identity", exc=ShapeError)
            info.append(NodeInfo(out_dt, shp, xd, acc, ax, keep))
        else:
            if n.op in UNARY_UFUNC:
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
            if n.op is Op.RELU and comp == "bool" or (isinstance(comp, DType) and comp.kind == "b"
                                                       and n.op is Op.RELU):
                fail("relu is not defined for bool", exc=DTypeError)
            info.append(NodeInfo(out, broadcast_shapes([s.shape for s in srcs], fail), comp))
    for n, i in zip(g.nodes, info):  # kernels index with int64: refuse before anything is allocated
        if i.shape is not None and UNKNOWN_DIM not in i.shape:
            count = 1
            for d in i.shape:
                count *= d
            if count >= 2 ** 62:
                raise ShapeError(f"{_where(opdef, n)}: shape {i.shape} is too large: {count} elements "
                                 "overflow a kernel's int64 indexing")
    for a, b, what in g.checks:
        sa, sb = info[g.idx(a)].shape, info[g.idx(b)].shape
        if not _same_shape(sa, sb):
            raise ShapeError(f"op {opdef.name}: {what}: {sa} != {sb}")
    spec = Spec(opdef, in_dtypes, tuple(sorted(attrs.items())), tuple(info))
    return spec


def _same_shape(a: Shape, b: Shape) -> bool:
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
    if not _same_shape(x.shape, rinfo.shape):
        fail(f"the value has shape {x.shape}, but the reduction it undoes gives {rinfo.shape}")
    if src.shape is None or rinfo.axes is None:
        return NodeInfo(out_dt, None, dt.materialize(x.dtype), acc, None, True)
    shape = tuple(1 if k in rinfo.axes else d for k, d in enumerate(src.shape))
    return NodeInfo(out_dt, shape, dt.materialize(x.dtype), acc, (), True)
