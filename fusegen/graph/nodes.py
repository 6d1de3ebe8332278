"""The IR's data: the ``Op`` enum, frozen hashable ``Node``s and their arguments, the ``Graph`` of
an op (nodes in topological order), and the queries every later layer asks of a graph (which
leaves an expression reads, which nodes the outputs need, a process-independent node key).

A traced op is a small DAG of nodes. It is *rank- and dtype-polymorphic*: inputs carry neither,
and attributes stay symbolic (an ``ATTR`` node, or an ``AttrRef`` in a reduction's
axes/keep_dims), because an emitted AOT kernel only learns them at Init/run time.
"""
from __future__ import annotations

import enum
import hashlib
import struct
from dataclasses import dataclass, field
from typing import Any

from ..dtypes import AttrType

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
    FLOOR_DIVIDE = "floor_divide"
    REMAINDER = "remainder"
    # --- the array API's elementwise functions (#18) ---------------------------------------------
    EXPM1 = "expm1"
    LOG1P = "log1p"
    LOG2 = "log2"
    LOG10 = "log10"
    TAN = "tan"
    ASIN = "asin"
    ACOS = "acos"
    ATAN = "atan"
    SINH = "sinh"
    COSH = "cosh"
    ASINH = "asinh"
    ACOSH = "acosh"
    ATANH = "atanh"
    TRUNC = "trunc"
    ROUND = "round"
    SIGN = "sign"
    SIGNBIT = "signbit"
    ISNAN = "isnan"
    ISINF = "isinf"
    ISFINITE = "isfinite"
    SQUARE = "square"
    RECIPROCAL = "reciprocal"
    INVERT = "bitwise_invert"
    ATAN2 = "atan2"
    HYPOT = "hypot"
    COPYSIGN = "copysign"
    NEXTAFTER = "nextafter"
    LOGADDEXP = "logaddexp"
    BIT_AND = "bitwise_and"
    BIT_OR = "bitwise_or"
    BIT_XOR = "bitwise_xor"
    SHL = "bitwise_left_shift"
    SHR = "bitwise_right_shift"
    XOR = "logical_xor"
    # complex numbers (their parts, and the conjugate; the identity, or zero, on real dtypes)
    REAL = "real"
    IMAG = "imag"
    CONJ = "conj"
    # others
    WHERE = "where"
    CAST = "cast"
    REDUCE = "reduce"
    # shapes and layouts (fusegen.graph.layout): a dim as a value, views, pieces, iota
    DIM = "dim"
    PERMUTE = "permute_dims"
    INDEX = "index"
    RESHAPE = "reshape"
    BROADCAST_TO = "broadcast_to"
    FLIP = "flip"
    CONCAT = "concat"
    PAD = "pad"
    IOTA = "iota"
    # gathers (fusegen.graph.gathers, issue #17): a read at a data-dependent place
    GATHER = "gather"
    # counter-based random numbers (fusegen.graph.rng): elementwise in an element counter
    RANDOM = "random"


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
    Op.OR: "logical_or", Op.FLOOR_DIVIDE: "floor_divide", Op.REMAINDER: "remainder",
}
# --- the array API's elementwise functions (#18): NumPy's ufunc for each one's dtype rule --------
# (round follows np.trunc's: integers stay integers; complex ones np.rint's, which takes them (the
# rules pick it: graph/rules.py); reciprocal follows np.sqrt's, as the array
# API defines it for floats only: NumPy's integer reciprocal, 1 // x, is not reproduced)
UNARY_UFUNC.update({
    Op.EXPM1: "expm1", Op.LOG1P: "log1p", Op.LOG2: "log2", Op.LOG10: "log10", Op.TAN: "tan",
    Op.ASIN: "arcsin", Op.ACOS: "arccos", Op.ATAN: "arctan", Op.SINH: "sinh", Op.COSH: "cosh",
    Op.ASINH: "arcsinh", Op.ACOSH: "arccosh", Op.ATANH: "arctanh", Op.TRUNC: "trunc", Op.ROUND: "trunc",
    Op.SIGN: "sign", Op.SIGNBIT: "signbit", Op.ISNAN: "isnan", Op.ISINF: "isinf", Op.ISFINITE: "isfinite",
    Op.SQUARE: "square", Op.RECIPROCAL: "sqrt", Op.INVERT: "invert",
})
# real and imag give the real dtype of a complex one (np.absolute's rule); conj keeps the dtype
UNARY_UFUNC.update({Op.REAL: "absolute", Op.IMAG: "absolute", Op.CONJ: "conjugate"})
BINARY_UFUNC.update({
    Op.ATAN2: "arctan2", Op.HYPOT: "hypot", Op.COPYSIGN: "copysign", Op.NEXTAFTER: "nextafter",
    Op.LOGADDEXP: "logaddexp", Op.BIT_AND: "bitwise_and", Op.BIT_OR: "bitwise_or", Op.BIT_XOR: "bitwise_xor",
    Op.SHL: "left_shift", Op.SHR: "right_shift", Op.XOR: "logical_xor",
})
#: "copy" reduces over no axes: a materialized value (``fusegen.graph.canon``); it folds like
#: "max" (identity -inf, NaN wins), so a tree or a split of it is still an exact copy.
REDUCE_KINDS = ("sum", "mean", "prod", "max", "min", "copy")
#: A scan is a REDUCE node with ``ReduceArg.scan`` set: it folds like the reduction of its kind,
#: but keeps every running value (``logaddexp`` folds with np.logaddexp, identity -inf). It is a
#: leaf like any reduction: later stages read its workspace.
SCAN_KINDS = ("sum", "prod", "max", "min", "logaddexp")


def is_scan(n: Node) -> bool:
    return n.op is Op.REDUCE and n.arg.scan


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
    # max/min over an empty axis is refused (NumPy has no identity for them); a scan's internal
    # running max sets this, as its result is empty exactly when the axis is
    empty_ok: bool = False
    # a scan (fusegen.graph.scans): the running value along the one axis in ``axes``, so the
    # result keeps the source's shape; ``kind`` is one of SCAN_KINDS
    scan: bool = False

    def __repr__(self) -> str:
        # the repr feeds stable_key (leaf order, hence generated text and cache keys): a field
        # at its default leaves it as it was before the field existed
        extra = (", empty_ok=True" if self.empty_ok else "") + (", scan=True" if self.scan else "")
        return f"ReduceArg(kind={self.kind!r}, axes={self.axes!r}, keep_dims={self.keep_dims!r}{extra})"


@dataclass(frozen=True, slots=True)
class Perm:
    """A permutation, spelled so it can be stated before the rank is known and resolved with it:
    ``("explicit", perm)``, ``("reverse",)`` (``.T``), ``("swap", (a, b))`` (swapaxes, ``.mT``),
    ``("move", (src...), (dst...))`` (moveaxis). Negative axes count from the end."""

    kind: str
    a: tuple = ()
    b: tuple = ()

    def __repr__(self) -> str:
        if self.kind == "explicit":
            return f"({', '.join(map(str, self.a))})"
        if self.kind == "reverse":
            return "reversed"
        if self.kind == "swap":
            return f"swap {self.a[0]},{self.a[1]}"
        return f"move {self.a} to {self.b}"


#: The kinds of basic-indexing items (``Op.INDEX``'s arg is a tuple of them): a slice whose
#: start/stop/step each are given (a source node) or not, an integer, ``None``, ``...``, and a
#: dim that ``squeeze`` drops (index 0, checked to be of size 1).
SLICE_FLAGS = ((False, False, False), (True, False, False), (False, True, False), (False, False, True),
               (True, True, False), (True, False, True), (False, True, True), (True, True, True))


@dataclass(frozen=True, slots=True)
class Item:
    """One basic-indexing item: ``kind`` in slice/int/new/ellipsis/squeeze; for a slice, which of
    start, stop, step are sources (in that order, after the indexed tensor and earlier items')."""

    kind: str
    given: tuple = (False, False, False)

    @property
    def nsrcs(self) -> int:
        return sum(self.given) if self.kind == "slice" else (1 if self.kind == "int" else 0)


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


def arg_key(a):
    """A node's ``arg`` as a dict key that tells apart what ``==`` does not: a float by its bits
    (a constant -0.0 is not 0.0, whose product with x has the other sign), and each value with
    its type (1, 1.0 and True)."""
    if isinstance(a, float):
        return (float, struct.pack("<d", a))
    if isinstance(a, complex):
        return (complex, struct.pack("<dd", a.real, a.imag))
    if isinstance(a, tuple):
        return (tuple, tuple(arg_key(x) for x in a))
    return (type(a), a)


def squeeze_items(axes) -> tuple[Item, ...] | None:
    """The INDEX items that drop ``axes`` (ints, written all negative or all non-negative; a
    squeeze checks each dim is 1), else None."""
    if not isinstance(axes, tuple) or not axes or not all(isinstance(a, int) for a in axes):
        return None
    if all(a >= 0 for a in axes):
        items = [Item("slice")] * (max(axes) + 1) + [Item("ellipsis")]
    elif all(a < 0 for a in axes):
        items = [Item("ellipsis")] + [Item("slice")] * -min(axes)
    else:
        return None
    for a in axes:
        items[a] = Item("squeeze")
    return tuple(items)


#: Layout ops whose sources after the first are static parameters (bounds, dims, widths):
#: evaluated by shape inference, never read by a kernel.
STATIC_PARAMS = frozenset({Op.INDEX, Op.RESHAPE, Op.BROADCAST_TO})
#: Nodes that read no value at all: a dim reads a shape, an iota computes its value from its index.
NO_VALUE = frozenset({Op.DIM, Op.IOTA})
#: Views: each output element is one element of the first source, at a place the node's index
#: map says (fusegen.plan evaluates the maps; kernels never materialize a view).
VIEWS = frozenset({Op.PERMUTE, Op.INDEX, Op.RESHAPE, Op.BROADCAST_TO, Op.FLIP})
#: Piecewise nodes: each output element comes from one of several sources (or a constant).
PIECEWISE = frozenset({Op.CONCAT, Op.PAD})


@dataclass(frozen=True, slots=True)
class GatherArg:
    """``Op.GATHER``'s argument (srcs ``(x, indices)``): ``kind`` "take" (NumPy's ``take``: the
    indices' dims replace ``axis``) or "along" (``take_along_axis``: same rank, broadcast);
    ``axis`` may be negative (resolved by shape inference); ``mode`` "raise" (an out-of-range
    index is a ``BoundsError``), "wrap" or "clip" (NumPy's spellings)."""

    kind: str
    axis: int
    mode: str = "raise"

    def __repr__(self) -> str:
        return f"{self.kind} axis={self.axis} mode={self.mode}"


def value_srcs(n: Node) -> tuple[Node, ...]:
    """The sources whose *values* ``n`` reads. A ``sum_to``/``unreduce``/``cast_like``
    node's second source is shape- or dtype-only: shape inference visits it, kernels don't;
    so are a layout op's parameters (``STATIC_PARAMS``) and a pad's widths."""
    if (n.op is Op.REDUCE and isinstance(n.arg.axes, ShapeOf)) or (n.op is Op.CAST and isinstance(n.arg, DTypeOf)):
        return n.srcs[:1]
    if n.op in STATIC_PARAMS:
        return n.srcs[:1]
    if n.op is Op.PAD:
        return n.srcs[:2]
    if n.op in NO_VALUE:
        return ()
    return n.srcs


@dataclass(frozen=True, slots=True)
class AttrSpec:
    name: str
    type: AttrType
    default: Any = None
    required: bool = False


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


# --- queries on a graph --------------------------------------------------------------------------
def leaves_of(node: Node) -> tuple[Node, ...]:
    """The INPUT, REDUCE and IOTA nodes an expression reads (REDUCE nodes are opaque), through
    elementwise ops, views and pieces."""
    out: dict[int, Node] = {}
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if n.op in (Op.INPUT, Op.REDUCE, Op.IOTA):
            out[id(n)] = n
        else:
            stack.extend(value_srcs(n))
    return tuple(sorted(out.values(), key=_leaf_key))


def shape_atoms(node: Node) -> tuple[Node, ...]:
    """The nodes whose shapes broadcast to ``node``'s: through elementwise ops (whose shape is the
    broadcast of their sources') down to the first node that is not one (an input, a reduction,
    a view, a piece, an iota). Scalars (constants, attributes, dims) have shape () and drop out.
    Two expressions with the same atoms have the same shape at run time."""
    out: dict[int, Node] = {}
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if n.op in (Op.CONST, Op.ATTR, Op.DIM):
            continue
        if n.op in (Op.INPUT, Op.REDUCE, Op.IOTA, Op.GATHER) or n.op in VIEWS or n.op in PIECEWISE:
            out[id(n)] = n
        else:
            stack.extend(value_srcs(n))
    return tuple(sorted(out.values(), key=_leaf_key))


def _leaf_key(n: Node):
    return (0, n.arg) if n.op is Op.INPUT else (1, stable_key(n))


def is_static(n: Node) -> bool:
    """A scalar whose value shape inference knows: constants, attributes, dims (which read only a
    shape), and elementwise ops and casts on them only: no tensor data."""
    stack, seen = [n], set()
    while stack:
        m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        if m.op is Op.DIM or m.op in (Op.CONST, Op.ATTR):
            continue
        if m.op in (Op.INPUT, Op.REDUCE, Op.IOTA, Op.GATHER) or m.op in VIEWS or m.op in PIECEWISE:
            return False
        stack.extend(m.srcs)
    return True


_STABLE: dict[Node, str] = {}


def stable_key(node: Node) -> str:
    """A digest of a node's structure that is the same in every process. ``hash(node)`` is not
    (it mixes in string hashes, salted per process), and leaf order decides the generated
    source, hence the disk cache's key: ordering by it recompiled in half the processes."""
    if node in _STABLE:
        return _STABLE[node]
    if len(_STABLE) > 1 << 16:  # a bound for long-lived processes that trace many ops
        _STABLE.clear()
    stack = [node]
    while stack:  # post-order without recursion: graphs may be deep chains
        n = stack[-1]
        todo = [s for s in n.srcs if s not in _STABLE]
        if todo:
            stack.extend(todo)
            continue
        stack.pop()
        h = hashlib.sha1(f"{n.op.value}|{n.arg!r}".encode())
        for s in n.srcs:
            h.update(_STABLE[s].encode())
        _STABLE[n] = h.hexdigest()
    return _STABLE[node]


def computed_nodes(g) -> set[int]:
    """ids of the nodes whose values the outputs need: shape-only sources (``value_srcs``)
    and shape checks are measured, never computed."""
    seen: set[int] = set()
    stack = list(g.outputs)
    while stack:
        n = stack.pop()
        if id(n) not in seen:
            seen.add(id(n))
            stack.extend(value_srcs(n))
    return seen


def nodes_of(roots) -> list[Node]:
    """Every node the expressions ``roots`` are made of, in topological order."""
    roots = tuple(roots)
    return list(Graph(roots).nodes) if roots else []
