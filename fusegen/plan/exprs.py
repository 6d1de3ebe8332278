"""Op -> expression text: one table, and each backend overrides only its differences.

``{0}``, ``{1}``, ``{2}`` are the operands, already converted to the node's compute
dtype; ``{one}`` / ``{zero}`` are 1 and 0 in that dtype. The renderer casts the
result to the node's output dtype. float16 values are carried in float32 registers
by every backend (as Triton and Inductor do) and rounded to half when stored.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .. import dtypes as dt
from ..dtypes import DType
from ..errors import FusegenError
from ..graph.cplx import REAL_RESULT
from ..ir import PIECEWISE, VIEWS, Node, Op, Spec
from .fusedmath import FUSED_ROWS, bound_select, fused_functions, fused_row, shifted_exps
from .paths import is_param, reads_reduction, row_level

# The C-like base table. NaN handling follows NumPy: maximum/minimum propagate NaN,
# relu(NaN) is NaN (it is maximum(x, 0)).
C_TABLE: dict[Op, str] = {
    Op.NEG: "(-{0})", Op.ABS: "fg_abs({0})", Op.EXP: "exp({0})", Op.LOG: "log({0})",
    Op.SQRT: "sqrt({0})", Op.RSQRT: "({one} / sqrt({0}))", Op.SIN: "sin({0})", Op.COS: "cos({0})",
    Op.TANH: "tanh({0})", Op.SIGMOID: "({one} / ({one} + exp(-{0})))",
    Op.RELU: "({0} < {zero} ? {zero} : {0})", Op.ERF: "erf({0})", Op.FLOOR: "floor({0})",
    Op.CEIL: "ceil({0})", Op.NOT: "(!{0})",
    Op.ADD: "({0} + {1})", Op.SUB: "({0} - {1})", Op.MUL: "({0} * {1})", Op.DIV: "({0} / {1})",
    Op.POW: "fg_pow({0}, {1})", Op.MAX: "fg_max({0}, {1})", Op.MIN: "fg_min({0}, {1})",
    Op.LT: "({0} < {1})", Op.LE: "({0} <= {1})", Op.GT: "({0} > {1})", Op.GE: "({0} >= {1})",
    Op.EQ: "({0} == {1})", Op.NE: "({0} != {1})", Op.AND: "({0} && {1})", Op.OR: "({0} || {1})",
    Op.WHERE: "({0} ? {1} : {2})",
}

# C++ on the CPU: overloads from <cmath> pick the float/double version by argument type.
CPP_TABLE = {**C_TABLE, **{op: "std::" + C_TABLE[op] for op in (
    Op.EXP, Op.LOG, Op.SQRT, Op.SIN, Op.COS, Op.TANH, Op.ERF, Op.FLOOR, Op.CEIL)},
    Op.RSQRT: "({one} / std::sqrt({0}))", Op.SIGMOID: "({one} / ({one} + std::exp(-{0})))",
    Op.WHERE: "fg::fg_where({0}, {1}, {2})",  # a blend, not a branch: see _fg_runtime.inc.j2
    **{op: "fg::" + C_TABLE[op] for op in (Op.ABS, Op.POW, Op.MAX, Op.MIN)}}

# Python for Numba: NumPy's ufuncs keep float32 in float32 (math.* would widen to float64).
PY_TABLE = {**C_TABLE,
            Op.ABS: "abs({0})", Op.EXP: "np.exp({0})", Op.LOG: "np.log({0})", Op.SQRT: "np.sqrt({0})",
            Op.RSQRT: "({one} / np.sqrt({0}))", Op.SIN: "np.sin({0})", Op.COS: "np.cos({0})",
            Op.TANH: "np.tanh({0})", Op.SIGMOID: "({one} / ({one} + np.exp(-{0})))",
            Op.RELU: "({zero} if {0} < {zero} else {0})", Op.ERF: "math.erf({0})",
            Op.FLOOR: "np.floor({0})", Op.CEIL: "np.ceil({0})", Op.NOT: "(not {0})",
            Op.POW: "({0} ** {1})", Op.MAX: "_fmax({0}, {1})", Op.MIN: "_fmin({0}, {1})",
            Op.AND: "({0} & {1})", Op.OR: "({0} | {1})", Op.WHERE: "({1} if {0} else {2})"}


#: the base rows' vmath functions: every CPU float32 kernel may call them
VMATH_BASE = {Op.EXP: "exp", Op.TANH: "tanh", Op.SIGMOID: "sigmoid"}


def _vmath_rows(prefix: str) -> dict[Op, str]:
    """exp, tanh and sigmoid through a backend's vectorizable float32 functions."""
    return {op: f"{prefix}{name}_f32({{0}})" for op, name in VMATH_BASE.items()}


# float32 (and float16, computed in float32) on the CPU: libm's expf/tanhf are opaque calls
# that keep a loop scalar, so these use fusegen's branch-free versions in float32 lanes, which
# vectorize and are within 1 ulp (fusegen/vmath.py; sigmoid also where exp(-x) overflows).
# float64 keeps libm: accuracy first. CUDA's dialects have no such rows: its expf/tanhf are
# fast already.
PY_F32_ROWS = _vmath_rows("_")
CPP_F32_ROWS = _vmath_rows("fg::")

# bool + bool is logical or and bool * bool logical and (NumPy's), and must stay a bool: in both
# languages they would give an int (True + True == 2), wrong as soon as a reduction sums it.
PY_BOOL_ROWS = {Op.ADD: "({0} | {1})", Op.MUL: "({0} & {1})"}
CPP_BOOL_ROWS = {Op.ADD: "({0} || {1})", Op.MUL: "({0} && {1})"}


def reduce_identity(kind: str, acc: DType):
    """The value a reduction's accumulator starts from, in accumulation dtype ``acc``."""
    import numpy as np
    if kind in ("sum", "mean"):
        return 0
    if kind == "prod":
        return 1
    if kind == "logaddexp":   # a logcumsumexp scan's: exp(-inf) = 0
        return float("-inf")
    kind = "max" if kind == "copy" else kind   # a copy folds like max (one value per accumulator)
    if acc.kind == "f":
        return float("-inf") if kind == "max" else float("inf")
    if acc.kind == "b":
        return kind == "min"
    info = np.iinfo(acc.np)
    return info.min if kind == "max" else info.max


def reg_dtype(d: DType) -> DType:
    """The dtype a value of dtype ``d`` is computed in (float16 -> float32)."""
    return dt.float32 if d is dt.float16 else d


@dataclass
class Dialect:
    """How one backend spells types, constants and casts around the shared table."""

    table: dict[Op, str]
    type_name: Callable[[DType], str]
    cast: Callable[[str, DType], str]           # text -> value of that register dtype
    literal: Callable[[object, DType], str]
    exact_types: frozenset = field(default_factory=frozenset)  # ops on these need no result cast
    # per compute dtype: the rows that differ from ``table`` for operands of that dtype
    typed: dict[DType, dict[Op, str]] = field(default_factory=dict)

    # per dtype kind ("b", "i", "u", "f"): rows that differ for every dtype of that kind
    kinds: dict[str, dict[Op, str]] = field(default_factory=dict)
    # a float division by a row-level value (``row_level``) as a multiplication by its reciprocal
    # (the CPU loops, where that reciprocal is computed once per row: ``ExprWriter._quotient``)
    reciprocal_rows: bool = False

    def row(self, op: Op, comp: DType) -> str:
        """The expression text of ``op`` on operands of register dtype ``comp``."""
        return self.typed.get(comp, {}).get(op) or self.kinds.get(comp.kind, {}).get(op) or self.table[op]


def _py_literal(v, d: DType) -> str:
    if d.kind == "b":
        return "True" if v else "False"
    if d.kind == "f":
        v = float(v)
        txt = repr(v) if v == v and v not in (float("inf"), float("-inf")) else f"float('{v}')"
        return txt if d is dt.float64 else f"np.{d.name}({txt})"
    return str(int(v)) if d is dt.int64 else f"np.{d.name}({int(v)})"


def _py_cast(text: str, d: DType) -> str:
    return f"({text} != 0)" if d.kind == "b" else f"np.{d.name}({text})"


PYTHON = Dialect(PY_TABLE, lambda d: f"np.{d.name}", _py_cast, _py_literal,
                 frozenset({dt.float32, dt.float64, dt.bool_, dt.int64, dt.uint64}),
                 {dt.float32: PY_F32_ROWS, dt.bool_: PY_BOOL_ROWS}, reciprocal_rows=True)

_CPP_TYPES = {"bool": "bool", "float16": "_Float16", "float32": "float", "float64": "double",
              **{f"{s}int{b}": f"{s}int{b}_t" for s in ("", "u") for b in (8, 16, 32, 64)}}


def _cpp_literal(v, d: DType) -> str:
    if d.kind == "b":
        return "true" if v else "false"
    if d.kind == "f":
        v = float(v)
        if v != v:
            return "std::numeric_limits<float>::quiet_NaN()" if d is dt.float32 else \
                "std::numeric_limits<double>::quiet_NaN()"
        if v in (float("inf"), float("-inf")):
            sign = "-" if v < 0 else ""
            return f"{sign}std::numeric_limits<{_CPP_TYPES[d.name]}>::infinity()"
        txt = repr(v)
        if "e" not in txt and "." not in txt:
            txt += ".0"
        return txt + ("f" if d is dt.float32 else "")
    if d is dt.int64:
        return f"INT64_C({int(v)})"
    if d is dt.uint64:
        return f"UINT64_C({int(v)})"
    return f"({_CPP_TYPES[d.name]}){int(v)}"


CPP = Dialect(CPP_TABLE, lambda d: _CPP_TYPES[d.name],
              lambda t, d: f"({t} != 0)" if d.kind == "b" else f"({_CPP_TYPES[d.name]})({t})",
              _cpp_literal, frozenset({dt.float32, dt.float64, dt.bool_, dt.int64, dt.uint64, dt.int32,
                                       dt.uint32}), {dt.float32: CPP_F32_ROWS, dt.bool_: CPP_BOOL_ROWS},
              reciprocal_rows=True)


class ExprWriter:
    """Renders a stage's elementwise expressions as a list of named temporaries.

    ``leaf(node, ctx)`` gives the text (already in register dtype) of an INPUT/REDUCE/ATTR
    leaf. Each interior node becomes one ``name = expr`` line, in dependency order,
    so generated code reads like the IR's text form. ``random(writer, node, ctx)`` renders a
    random node (``Op.RANDOM``: the lowering's, fusegen/lower/rng.py); without it one is refused.
    """

    def __init__(self, spec: Spec, dialect: Dialect, leaf: Callable[[Node, tuple], str], prefix: str = "t",
                 variant: dict | None = None, gather: Callable | None = None, random: Callable | None = None,
                 stored=(), stage=None):
        self.spec, self.d, self.leaf, self.prefix = spec, dialect, leaf, prefix
        # values the stage reads back from an array (``Stage.kept``): leaves here; ``stored`` is
        # [(node, the register dtype of the leaf's text)], converted to the node's own
        self.stored = {id(n): d for n, d in stored}
        self.random = random
        self.shifted = shifted_exps(spec, stage)   # exps that may be exp_shifted_f32 in this loop (plan/fusedmath)
        self.lines: list[tuple[str, str]] = []   # (name, expr)
        self.names: dict[tuple, str] = {}
        self.types: dict[tuple, DType] = {}
        self.variant: dict = variant or {}
        # gathers (issue #17): ``gather(node, ctx, raw, writer)`` gives the text of the checked
        # (or wrapped, clipped) index from the raw one's, adding lines; ``gathered[(node, ctx)]``
        # is that text, which the backend's ``leaf`` adds (times the axis's stride) to the address
        # of every array read in context ctx + ((node, 0),).
        self.gather = gather
        self.gathered: dict[tuple, str] = {}

    @staticmethod
    def outputs_read(spec: Spec, st) -> list:
        """A stage's ``stored`` values read back from outputs (``Stage.kept``), as the arrays hold them."""
        return [(n, reg_dtype(spec.out_dtypes[k])) for k, n in st.kept]

    def take(self) -> list[tuple[str, str]]:
        """The lines emitted since the last take (names stay valid for reuse)."""
        out, self.lines = self.lines, []
        self._count = getattr(self, "_count", 0) + len(out)
        return out

    def value(self, node: Node, want: DType | None = None, ctx: tuple = ()) -> str:
        """Text of ``node`` read in view context ``ctx`` (``fusegen.plan.access``: the views and
        pieces between it and the stage root) converted to register dtype ``want`` (default: its
        own). A view has its source's value (read elsewhere); a piecewise node has the value of
        the piece ``variant`` says is active in this loop's box (a pad's constant where none is)."""
        text, have = self._emit(node, ctx)
        want = reg_dtype(want) if want is not None else have
        if want is have:
            return text
        return self.d.cast(text, want)

    def _emit(self, node: Node, ctx: tuple) -> tuple[str, DType]:
        info = self.spec.of(node)
        if node.op is Op.CONST:   # (a Python integer past int64: dtypes.literal_dtype)
            d = reg_dtype(dt.literal_dtype(info.dtype, node.arg[1]))
            return self.d.literal(node.arg[1], d), d
        if node.op in (Op.INPUT, Op.REDUCE, Op.ATTR, Op.IOTA) or is_param(node) or id(node) in self.stored:
            d = reg_dtype(info.acc) if (node.op is Op.REDUCE and info.acc is not None) else \
                reg_dtype(dt.materialize(info.dtype))
            have = self.stored.get(id(node), d)
            return (self.leaf(node, ctx) if have is d else self.d.cast(self.leaf(node, ctx), d)), d
        if node.op in VIEWS:
            return self._emit(node.srcs[0], ctx + ((node, 0),))
        if node.op is Op.GATHER:
            if (id(node), ctx) not in self.gathered:
                if self.gather is None:
                    from ..errors import FusegenError
                    raise FusegenError(f"op {self.spec.opdef.name}: {node.arg.kind} (a gather) is not supported by "
                                       "this backend yet (issue #17): use backend='numba' on the CPU")
                raw = self.value(node.srcs[1], dt.int64, ctx + ((node, 1),))
                self.gathered[(id(node), ctx)] = self.gather(node, ctx, raw, self)
            return self._emit(node.srcs[0], ctx + ((node, 0),))
        key = (id(node), ctx)
        if key in self.names:
            return self.names[key], self.types[key]
        out = reg_dtype(dt.materialize(info.dtype))
        if node.op is Op.WHERE and (node, ctx) in self.variant:
            # an index-set split (plan/splits.py): the predicate is known on this loop interval,
            # so only the branch that holds there is computed (and its operands read)
            expr = self.value(node.srcs[1 if self.variant[(node, ctx)] else 2], out, ctx)
        elif node.op in PIECEWISE:
            p = self.variant.get((node, ctx))
            expr = self.value(node.srcs[1], out, ctx) if p is None else self.value(node.srcs[p], out, ctx + ((node, p),))
        elif node.op is Op.CAST:
            expr = self.value(node.srcs[0], out, ctx)
        elif node.op is Op.RANDOM:
            if self.random is None:
                raise FusegenError(f"{self.spec.opdef.name}: this backend cannot compute fg.random.{node.arg.kind} "
                                   "yet; use backend='numba'")
            expr = self.random(self, node, ctx)
        else:
            comp = reg_dtype(dt.materialize(info.compute))
            if node.op is Op.WHERE:
                args = [self.value(node.srcs[0], dt.bool_, ctx)] + [self.value(s, comp, ctx) for s in node.srcs[1:]]
            elif node.op in (Op.AND, Op.OR, Op.NOT, Op.XOR):  # truth values, whatever the operands' dtype
                comp = dt.bool_
                args = [self.value(s, dt.bool_, ctx) for s in node.srcs]
            else:
                args = None
            fused = fused_row(node, self.d.typed.get(comp, {}), self.shifted) if comp is dt.float32 else None
            bound = bound_select(node) if comp.kind == "f" else None
            if bound is not None:   # max/min with a constant: a comparison and a select (plan/fusedmath.py)
                cmp, lhs, rhs, c, v = bound
                cond = self.d.row(cmp, comp).format(self.value(lhs, comp, ctx), self.value(rhs, comp, ctx))
                expr = self.d.row(Op.WHERE, comp).format(cond, self.value(c, comp, ctx), self.value(v, comp, ctx))
            elif node.op is Op.DIV and self.d.reciprocal_rows and comp.kind == "f" and row_level(node.srcs[1]) \
                    and reads_reduction(node.srcs[1]) and not row_level(node.srcs[0]):   # (``_quotient``)
                expr = self._quotient(node, comp, ctx)
            elif fused is not None:   # a chain of transcendentals as one function (plan/fusedmath.py)
                row, operand, scale = fused
                v = self.value(operand, comp, ctx)
                k = self.d.literal(scale, comp)
                expr = row.format(v) if scale == 1 else f"({k} * {row.format(f'({k} * {v})')})"
            else:
                args = args if args is not None else [self.value(s, comp, ctx) for s in node.srcs]
                expr = _small_power(node, args, comp) or \
                    self.d.row(node.op, comp).format(*args, one=self.d.literal(1, comp), zero=self.d.literal(0, comp))
            result_type = dt.bool_ if node.op in _BOOL_OPS else comp
            if comp.is_complex and node.op in REAL_RESULT:   # abs, real, imag of a complex value
                result_type = dt.real_of(comp)
            if result_type not in self.d.exact_types or node.op in _INEXACT:
                expr = self.d.cast(expr, result_type)
            if result_type is not out:
                expr = self.d.cast(expr, out)
        name = f"{self.prefix}{getattr(self, '_count', 0) + len(self.lines)}"
        self.lines.append((name, expr))
        self.names[key] = name
        self.types[key] = out
        return name, out


    def _quotient(self, node: Node, comp: DType, ctx: tuple) -> str:
        """``a / b`` with ``b`` row-level as ``a * (1 / b)``: the reciprocal is its own line, which
        depends on no loop counter, so the CPU row loops compute it once per row (Numba:
        ``lower.pysource.hoist_invariant``; the emitted C++ passes row-constant values as scalars
        and g++ hoists it) and each element costs a multiply instead of a division (0.05 against
        0.22 ns per float32 element in L1). Two roundings instead of one: within 2 ulp of the
        quotient (|error| <= 2u|a/b| + u^2, u = 2^-24 for float32: at most 1 ulp, 2 across a binade).
        b = 0, +-inf and NaN give the division's results (1/0 = inf, 1/inf = 0, so a/0 = +-inf or
        NaN for a = 0, inf/inf = NaN). Not exact where 1/b leaves the normal range: a subnormal
        divisor (|b| < 2^-126 in float32) has an infinite reciprocal. Only a divisor that reads a
        reduction: one of attributes and constants alone (dropout's 1 - p) stays a division, which
        every backend rounds alike."""
        key = (id(node.srcs[1]), ctx, "reciprocal")
        if key not in self.names:
            expr = self.d.row(Op.DIV, comp).format(self.d.literal(1, comp), self.value(node.srcs[1], comp, ctx))
            name = f"{self.prefix}{getattr(self, '_count', 0) + len(self.lines)}"
            self.lines.append((name, expr))
            self.names[key], self.types[key] = name, comp
        return self.d.row(Op.MUL, comp).format(self.value(node.srcs[0], comp, ctx), self.names[key])


def _small_power(node: Node, args: list[str], comp: DType) -> str | None:
    """``x ** 2`` and ``x ** 3`` on floats as products: ``pow`` is an opaque libm call that keeps a
    loop scalar in every backend (a user's ``h ** 3`` in a GELU made it 10x slower). ``x * x`` is
    what NumPy computes for ``x ** 2``; ``x * x * x`` may differ from ``powf`` by an ulp."""
    if node.op is not Op.POW or comp.kind != "f" or node.srcs[1].op is not Op.CONST:
        return None
    e = node.srcs[1].arg[1]
    if isinstance(e, bool) or e not in (2, 3):
        return None
    return f"({args[0]} * {args[0]})" if e == 2 else f"(({args[0]} * {args[0]}) * {args[0]})"


_BOOL_OPS = {Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE, Op.AND, Op.OR, Op.NOT}
# Ops whose result type a backend may widen even for exact types (numba: erf, pow -> float64).
_INEXACT = {Op.ERF, Op.POW, Op.ABS}


# --- CUDA -------------------------------------------------------------------------------------
# numba-cuda: math.* on a float32 stays float32 (libdevice's expf, floorf, ...), where NumPy's
# ufuncs are not available inside kernels. Everything else is the CPU Python table.
CUDA_PY_TABLE = {**PY_TABLE,
                 Op.EXP: "math.exp({0})", Op.LOG: "math.log({0})", Op.SQRT: "math.sqrt({0})",
                 Op.RSQRT: "({one} / math.sqrt({0}))", Op.SIN: "math.sin({0})", Op.COS: "math.cos({0})",
                 Op.TANH: "math.tanh({0})", Op.SIGMOID: "({one} / ({one} + math.exp(-{0})))",
                 Op.FLOOR: "math.floor({0})", Op.CEIL: "math.ceil({0})"}

CUDA_PY = Dialect(CUDA_PY_TABLE, PYTHON.type_name, _py_cast, _py_literal, PYTHON.exact_types,
                  {dt.bool_: PY_BOOL_ROWS})

# CUDA C++ device code: CUDA's math API overloads exp/log/... for float and double in the global
# namespace (std:: versions are host functions), and fusegen's NumPy-compatible helpers live in
# namespace fgd as __host__ __device__ functions (see templates/_cuda_stages.inc.j2).
CUDA_CPP_TABLE = {**CPP_TABLE, **{op: C_TABLE[op] for op in (
    Op.EXP, Op.LOG, Op.SQRT, Op.SIN, Op.COS, Op.TANH, Op.ERF, Op.FLOOR, Op.CEIL)},
    Op.RSQRT: "({one} / sqrt({0}))", Op.SIGMOID: "({one} / ({one} + exp(-{0})))", Op.WHERE: C_TABLE[Op.WHERE],
    **{op: "fgd::" + C_TABLE[op] for op in (Op.ABS, Op.POW, Op.MAX, Op.MIN)}}

_CUDA_TYPES = {**_CPP_TYPES, "float16": "__half"}

CUDA_CPP = Dialect(CUDA_CPP_TABLE, lambda d: _CUDA_TYPES[d.name],
                   lambda t, d: f"({t} != 0)" if d.kind == "b" else f"({_CUDA_TYPES[d.name]})({t})",
                   _cpp_literal, CPP.exact_types, {dt.bool_: CPP_BOOL_ROWS})


# --- the array API's elementwise functions (#18) ---------------------------------------------
# Kept apart from the rows above so other work on those rows merges mechanically. Each backend's
# spelling of the standard's special cases (signed zeros, infinities, NaN; integer division by
# zero gives 0 without a trap; shifts by >= the bit width give NumPy's results): the C++ helpers
# live in emitters/templates/_fg_elementwise.inc.j2 (host and device), the Python ones in
# lower/pyhelpers.py (Numba CPU and numba-cuda).
_BOOL_OPS |= {Op.XOR, Op.ISNAN, Op.ISINF, Op.ISFINITE, Op.SIGNBIT}
# numba widens small integers (and some float helpers) inside an expression: cast back always
_INEXACT |= {Op.SIGN, Op.INVERT, Op.SHL, Op.SHR, Op.FLOOR_DIVIDE, Op.REMAINDER, Op.SQUARE, Op.BIT_AND,
             Op.BIT_OR, Op.BIT_XOR, Op.LOGADDEXP, Op.ROUND, Op.TRUNC}

_LIBM = {Op.EXPM1: "expm1", Op.LOG1P: "log1p", Op.LOG2: "log2", Op.LOG10: "log10", Op.TAN: "tan", Op.ASIN: "asin",
         Op.ACOS: "acos", Op.ATAN: "atan", Op.SINH: "sinh", Op.COSH: "cosh", Op.ASINH: "asinh",
         Op.ACOSH: "acosh", Op.ATANH: "atanh", Op.TRUNC: "trunc"}
_LIBM2 = {Op.ATAN2: "atan2", Op.HYPOT: "hypot", Op.COPYSIGN: "copysign", Op.NEXTAFTER: "nextafter"}
# NumPy's sign: NaN stays NaN, zeros of either sign give +0
_SIGN = "({0} if {0} != {0} else ({one} if {0} > {zero} else (-{one} if {0} < {zero} else {zero})))"
_C_COMMON = {Op.SQUARE: "({0} * {0})", Op.RECIPROCAL: "({one} / {0})", Op.ISNAN: "({0} != {0})",
             Op.BIT_AND: "({0} & {1})", Op.BIT_OR: "({0} | {1})", Op.BIT_XOR: "({0} ^ {1})",
             Op.XOR: "({0} != {1})"}
# integers are their own floor, ceil, trunc and round (no trip through double: int64 is exact)
_INT_IDENTITY = {op: "{0}" for op in (Op.TRUNC, Op.ROUND, Op.FLOOR, Op.CEIL)}
_INT_KINDS = ("b", "i", "u")

CPP_TABLE.update({op: f"std::{f}({{0}})" for op, f in _LIBM.items()})
CPP_TABLE.update({op: f"std::{f}({{0}}, {{1}})" for op, f in _LIBM2.items()})
CPP_TABLE.update(_C_COMMON)
# (the fg:: helpers are __host__ __device__ under nvcc: the CUDA table uses them as they are)
_CPP_HELPERS = {
    Op.SIGN: "fg::fg_sign({0})", Op.ISINF: "fg::fg_isinf({0})", Op.ISFINITE: "fg::fg_isfinite({0})",
    Op.INVERT: "fg::fg_invert({0})", Op.LOGADDEXP: "fg::fg_logaddexp({0}, {1})",
    Op.FLOOR_DIVIDE: "fg::fg_floor_divide({0}, {1})", Op.REMAINDER: "fg::fg_remainder({0}, {1})",
    Op.SHL: "fg::fg_shl({0}, {1})", Op.SHR: "fg::fg_shr({0}, {1})"}
CPP_TABLE.update(_CPP_HELPERS)
#: the ops whose C++ rows call _fg_elementwise.inc.j2's helpers (a file includes them only if needed)
CPP_HELPER_OPS = frozenset(_CPP_HELPERS)
CPP_TABLE.update({Op.ROUND: "std::nearbyint({0})", Op.SIGNBIT: "std::signbit({0})"})
CPP.kinds.update({k: dict(_INT_IDENTITY) for k in _INT_KINDS})

PY_TABLE.update({op: f"np.{'arc' + f[1:] if f.startswith('a') else f}({{0}})" for op, f in _LIBM.items()})
PY_TABLE.update({Op.ATAN2: "np.arctan2({0}, {1})", Op.HYPOT: "np.hypot({0}, {1})",
                 Op.COPYSIGN: "np.copysign({0}, {1})", Op.NEXTAFTER: "np.nextafter({0}, {1})"})
PY_TABLE.update(_C_COMMON)
PY_TABLE.update({
    Op.ROUND: "np.rint({0})", Op.SIGN: _SIGN, Op.SIGNBIT: "np.signbit({0})", Op.ISINF: "np.isinf({0})",
    Op.ISFINITE: "np.isfinite({0})", Op.INVERT: "(~{0})", Op.LOGADDEXP: "_fg_logaddexp({0}, {1})",
    Op.FLOOR_DIVIDE: "_fg_floor_divide({0}, {1}, {one})", Op.REMAINDER: "_fg_remainder({0}, {1}, {one})"})


def _py_int_rows(d: DType) -> dict[Op, str]:
    """Integer rows that need the dtype's width or signedness (NumPy's shifts)."""
    bits = 8 * d.itemsize
    shr = "_fg_shr" if d.kind == "i" else "_fg_shr_u"
    return {Op.SHL: f"_fg_shl({{0}}, {{1}}, {bits})", Op.SHR: f"{shr}({{0}}, {{1}}, {bits})",
            Op.FLOOR_DIVIDE: "_fg_floor_divide_int({0}, {1})", Op.REMAINDER: "_fg_remainder_int({0}, {1})"}


_PY_INT_KIND = {**_INT_IDENTITY, Op.ISINF: "False", Op.ISFINITE: "True"}
PYTHON.kinds.update({k: dict(_PY_INT_KIND) for k in _INT_KINDS})
PYTHON.kinds["b"].update({Op.INVERT: "(not {0})"})
for _d in dt.DTYPES.values():
    if _d.is_int:
        PYTHON.typed.setdefault(_d, {}).update(_py_int_rows(_d))

# numba-cuda: math.* (NumPy's scalars under the simulator: lower_cuda._SimMath)
CUDA_PY_TABLE.update({op: f"math.{f}({{0}})" for op, f in _LIBM.items()})
CUDA_PY_TABLE.update({op: f"math.{f}({{0}}, {{1}})" for op, f in _LIBM2.items()})
CUDA_PY_TABLE.update(_C_COMMON)
CUDA_PY_TABLE.update({
    Op.TRUNC: "_fg_trunc({0})", Op.ROUND: "_fg_rint({0}, {one})", Op.SIGN: _SIGN,
    Op.SIGNBIT: "(math.copysign({one}, {0}) < {zero})", Op.ISINF: "math.isinf({0})",
    Op.ISFINITE: "math.isfinite({0})", Op.INVERT: "(~{0})", Op.LOGADDEXP: "_fg_logaddexp({0}, {1})",
    Op.FLOOR_DIVIDE: "_fg_floor_divide({0}, {1}, {one})", Op.REMAINDER: "_fg_remainder({0}, {1}, {one})"})
CUDA_PY.kinds.update({k: dict(_PY_INT_KIND) for k in _INT_KINDS})
CUDA_PY.kinds["b"].update({Op.INVERT: "(not {0})"})
for _d in dt.DTYPES.values():
    if _d.is_int:
        CUDA_PY.typed.setdefault(_d, {}).update(_py_int_rows(_d))

# CUDA C++ device code: CUDA's global-namespace math; fusegen's helpers are __host__ __device__
CUDA_CPP_TABLE.update({op: f"{f}({{0}})" for op, f in _LIBM.items()})
CUDA_CPP_TABLE.update({op: f"{f}({{0}}, {{1}})" for op, f in _LIBM2.items()})
CUDA_CPP_TABLE.update(_C_COMMON)
CUDA_CPP_TABLE.update(_CPP_HELPERS)
#: the ops whose C++ rows call _fg_elementwise.inc.j2's helpers (a file includes them only if needed)
CPP_HELPER_OPS = frozenset(_CPP_HELPERS)
CUDA_CPP_TABLE.update({Op.ROUND: "rint({0})", Op.SIGNBIT: "signbit({0})"})
CUDA_CPP.kinds.update({k: dict(_INT_IDENTITY) for k in _INT_KINDS})


# --- float32 through fusegen's vectorizable math library (#18; fusegen/vmath.py) -------------------
# Each function here is correctly rounded in practice (<= 1 ulp, tests/test_vmath.py) and keeps the
# standard's special cases; libm's float versions are opaque calls that keep a loop scalar. float64
# keeps libm (accuracy first); CUDA keeps its own (see docs/vmath.md). The emitted C++ carries only
# the blocks of _vmath.inc.j2 the op's float32 nodes need (``vmath_functions``).
VMATH_OPS = {Op.LOG: "log", Op.LOG1P: "log1p", Op.LOG2: "log2", Op.LOG10: "log10", Op.EXPM1: "expm1",
             Op.ERF: "erf", Op.SIN: "sin", Op.COS: "cos", Op.TAN: "tan", Op.ATAN: "atan", Op.ASIN: "asin",
             Op.ACOS: "acos", Op.SINH: "sinh", Op.COSH: "cosh", Op.ASINH: "asinh", Op.ACOSH: "acosh",
             Op.ATANH: "atanh", Op.ATAN2: "atan2", Op.HYPOT: "hypot"}


def _vmath_call(prefix: str, name: str) -> str:
    args = "{0}, {1}" if name in ("atan2", "hypot") else "{0}"
    return f"{prefix}{name}_f32({args})"


PY_F32_ROWS.update({op: _vmath_call("_", n) for op, n in VMATH_OPS.items()})
CPP_F32_ROWS.update({op: _vmath_call("fg::", n) for op, n in VMATH_OPS.items()})
# chains computed as one float32-lane function (plan/fusedmath.py; vmath.FUSED_F32)
for _name in FUSED_ROWS:
    PY_F32_ROWS[_name] = _vmath_call("_", _name)
    CPP_F32_ROWS[_name] = _vmath_call("fg::", _name)
#: the vmath functions generated Numba sources may import (``_<name>_f32``)
VMATH_NUMBA_IMPORTS = (*VMATH_BASE.values(), *VMATH_OPS.values(), *FUSED_ROWS)


def vmath_functions(nodes) -> tuple[str, ...]:
    """The vmath functions an op's C++ may call: exp, tanh and sigmoid (the base rows), those
    of its nodes in ``VMATH_OPS`` (whatever their dtype: the emitted file serves every dtype
    combination), and the chains of plan/fusedmath.py it may compute as one function."""
    used = dict.fromkeys(VMATH_BASE.values())
    used.update(dict.fromkeys(VMATH_OPS[n.op] for n in nodes if n.op in VMATH_OPS))
    used.update(dict.fromkeys(fused_functions(nodes)))
    return tuple(used)


# --- complex64 and complex128: their rows, literals, type names and casts (plan/cexprs.py) ------
from .cexprs import install as _install_complex  # noqa: E402 - it extends the dialects above

_install_complex(PYTHON, CUDA_PY, CPP, CUDA_CPP)
