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
from ..ir import PIECEWISE, VIEWS, Node, Op, Spec
from .paths import is_param

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


def _vmath_rows(exp: str, tanh: str) -> dict[Op, str]:
    """exp, tanh and sigmoid through a backend's vectorizable float32 functions."""
    return {Op.EXP: f"{exp}({{0}})", Op.TANH: f"{tanh}({{0}})",
            Op.SIGMOID: f"({{one}} / ({{one}} + {exp}(-{{0}})))"}


# float32 (and float16, computed in float32) on the CPU: libm's expf/tanhf are opaque calls
# that keep a loop scalar, so these use fusegen's branch-free versions, which vectorize and are
# correctly rounded in practice (fusegen/vmath.py). float64 keeps libm: accuracy first. CUDA's
# dialects have no such rows: its expf/tanhf are fast already.
PY_F32_ROWS = _vmath_rows("_exp_f32", "_tanh_f32")
CPP_F32_ROWS = _vmath_rows("fg::exp_f32", "fg::tanh_f32")


def reduce_identity(kind: str, acc: DType):
    """The value a reduction's accumulator starts from, in accumulation dtype ``acc``."""
    import numpy as np
    if kind in ("sum", "mean"):
        return 0
    if kind == "prod":
        return 1
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

    def row(self, op: Op, comp: DType) -> str:
        """The expression text of ``op`` on operands of register dtype ``comp``."""
        return self.typed.get(comp, {}).get(op) or self.table[op]


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
                 frozenset({dt.float32, dt.float64, dt.bool_, dt.int64, dt.uint64}), {dt.float32: PY_F32_ROWS})

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
                                       dt.uint32}), {dt.float32: CPP_F32_ROWS})


class ExprWriter:
    """Renders a stage's elementwise expressions as a list of named temporaries.

    ``leaf(node, ctx)`` gives the text (already in register dtype) of an INPUT/REDUCE/ATTR
    leaf. Each interior node becomes one ``name = expr`` line, in dependency order,
    so generated code reads like the IR's text form. ``random(writer, node, ctx)`` renders a
    random node (``Op.RANDOM``: the lowering's, fusegen/lower/rng.py); without it one is refused.
    """

    def __init__(self, spec: Spec, dialect: Dialect, leaf: Callable[[Node, tuple], str], prefix: str = "t",
                 variant: dict | None = None, random: Callable | None = None):
        self.spec, self.d, self.leaf, self.prefix = spec, dialect, leaf, prefix
        self.random = random
        self.lines: list[tuple[str, str]] = []   # (name, expr)
        self.names: dict[tuple, str] = {}
        self.types: dict[tuple, DType] = {}
        self.variant: dict = variant or {}

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
        if node.op is Op.CONST:
            d = reg_dtype(dt.materialize(info.dtype))
            return self.d.literal(node.arg[1], d), d
        if node.op in (Op.INPUT, Op.REDUCE, Op.ATTR, Op.IOTA) or is_param(node):
            d = reg_dtype(info.acc) if (node.op is Op.REDUCE and info.acc is not None) else \
                reg_dtype(dt.materialize(info.dtype))
            return self.leaf(node, ctx), d
        if node.op in VIEWS:
            return self._emit(node.srcs[0], ctx + ((node, 0),))
        key = (id(node), ctx)
        if key in self.names:
            return self.names[key], self.types[key]
        out = reg_dtype(dt.materialize(info.dtype))
        if node.op in PIECEWISE:
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
            elif node.op in (Op.AND, Op.OR, Op.NOT):  # truth values, whatever the operands' dtype
                comp = dt.bool_
                args = [self.value(s, dt.bool_, ctx) for s in node.srcs]
            else:
                args = [self.value(s, comp, ctx) for s in node.srcs]
            expr = self.d.row(node.op, comp).format(*args, one=self.d.literal(1, comp), zero=self.d.literal(0, comp))
            result_type = dt.bool_ if node.op in _BOOL_OPS else comp
            if result_type not in self.d.exact_types or node.op in _INEXACT:
                expr = self.d.cast(expr, result_type)
            if result_type is not out:
                expr = self.d.cast(expr, out)
        name = f"{self.prefix}{getattr(self, '_count', 0) + len(self.lines)}"
        self.lines.append((name, expr))
        self.names[key] = name
        self.types[key] = out
        return name, out


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

CUDA_PY = Dialect(CUDA_PY_TABLE, PYTHON.type_name, _py_cast, _py_literal, PYTHON.exact_types)

# CUDA C++ device code: CUDA's math API overloads exp/log/... for float and double in the global
# namespace (std:: versions are host functions), and fusegen's NumPy-compatible helpers live in
# namespace fgd as __host__ __device__ functions (see templates/_cuda_stages.inc.j2).
CUDA_CPP_TABLE = {**CPP_TABLE, **{op: C_TABLE[op] for op in (
    Op.EXP, Op.LOG, Op.SQRT, Op.SIN, Op.COS, Op.TANH, Op.ERF, Op.FLOOR, Op.CEIL)},
    Op.RSQRT: "({one} / sqrt({0}))", Op.SIGMOID: "({one} / ({one} + exp(-{0})))",
    **{op: "fgd::" + C_TABLE[op] for op in (Op.ABS, Op.POW, Op.MAX, Op.MIN)}}

_CUDA_TYPES = {**_CPP_TYPES, "float16": "__half"}

CUDA_CPP = Dialect(CUDA_CPP_TABLE, lambda d: _CUDA_TYPES[d.name],
                   lambda t, d: f"({t} != 0)" if d.kind == "b" else f"({_CUDA_TYPES[d.name]})({t})",
                   _cpp_literal, CPP.exact_types)
