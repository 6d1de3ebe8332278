"""complex64/complex128 rows of the expression tables (``plan/exprs``): each dialect's spelling
of the functions the array API standard defines on complex numbers (``graph/cplx`` refuses the
others before anything is lowered).

Every backend computes with NumPy's formulas where NumPy has its own (multiplication and Smith's
division; ``log1p``, ``expm1``, ``log2``, ``log10``; ``sign`` is ``z / |z|``), so results agree
across backends; the transcendental functions are the platform's C99 Annex G ones, whose branch
cuts and special values are the standard's: Python's ``cmath`` in Numba (CPU and CUDA), glibc's
through ``std::complex`` in host C++, libcu++'s ``cuda::std::complex`` in CUDA C++ (the helpers
are ``emitters/templates/_fg_complex.inc.j2`` and ``lower/pyhelpers.py``).
"""
from __future__ import annotations

from .. import dtypes as dt
from ..dtypes import DType
from ..ir import Op

# functions with the same name in cmath, std:: and cuda::std:: (NumPy's arc* are the a* here)
_SAME = {Op.EXP: "exp", Op.LOG: "log", Op.SQRT: "sqrt", Op.SIN: "sin", Op.COS: "cos", Op.TAN: "tan",
         Op.SINH: "sinh", Op.COSH: "cosh", Op.TANH: "tanh", Op.ASIN: "asin", Op.ACOS: "acos",
         Op.ATAN: "atan", Op.ASINH: "asinh", Op.ACOSH: "acosh", Op.ATANH: "atanh"}

# rows every dialect shares: the parts of a real number (the identity, zero, itself)
_REAL_PARTS = {Op.REAL: "{0}", Op.IMAG: "{zero}", Op.CONJ: "{0}"}

# (the helpers patch Numba's cmath, and in C++ libcu++, where they miss Annex G's special values)
_PY_PATCHED = (Op.SINH, Op.COSH, Op.TANH, Op.ASINH, Op.ATANH, Op.ACOS, Op.ACOSH, Op.SIN, Op.COS, Op.TAN, Op.ASIN,
               Op.ATAN)
PY_COMPLEX = {
    **{op: f"cmath.{f}({{0}})" for op, f in _SAME.items()},
    **{op: f"_fg_c{_SAME[op]}({{0}})" for op in _PY_PATCHED[:7]},
    # Annex G's identities: sin(z) = -i sinh(iz), cos(z) = cosh(iz), tan(z) = -i tanh(iz), ...
    Op.SIN: "_fg_cback(_fg_csinh(_fg_ctimes_i({0})))", Op.COS: "_fg_ccosh(_fg_ctimes_i({0}))",
    Op.TAN: "_fg_cback(_fg_ctanh(_fg_ctimes_i({0})))", Op.ASIN: "_fg_cback(_fg_casinh(_fg_ctimes_i({0})))",
    Op.ATAN: "_fg_cback(_fg_catanh(_fg_ctimes_i({0})))",
    Op.ABS: "abs({0})", Op.MUL: "_fg_cmul({0}, {1})", Op.DIV: "_fg_cdiv({0}, {1})",
    Op.RECIPROCAL: "_fg_cdiv({one}, {0})", Op.SQUARE: "_fg_cmul({0}, {0})", Op.POW: "_fg_cpow({0}, {1})",
    Op.EXPM1: "_fg_cexpm1({0})", Op.LOG1P: "_fg_clog1p({0})", Op.LOG2: "_fg_cscale(cmath.log({0}), 1.4426950408889634)",
    Op.LOG10: "_fg_cscale(cmath.log({0}), 0.4342944819032518)", Op.SIGN: "_fg_csign({0})", Op.ROUND: "_fg_cround({0})",
    Op.ISNAN: "cmath.isnan({0})", Op.ISINF: "cmath.isinf({0})", Op.ISFINITE: "cmath.isfinite({0})",
    Op.REAL: "{0}.real", Op.IMAG: "{0}.imag", Op.CONJ: "{0}.conjugate()",
}

CPP_COMPLEX = {
    **{op: f"fg::cx::{f}({{0}})" for op, f in _SAME.items()},
    **{op: f"fg::c{_SAME[op]}({{0}})" for op in (*_PY_PATCHED, Op.SQRT)},
    Op.ABS: "fg::cx::abs({0})", Op.MUL: "fg::cmul({0}, {1})", Op.DIV: "fg::cdiv({0}, {1})",
    Op.RECIPROCAL: "fg::cdiv({one}, {0})", Op.SQUARE: "fg::cmul({0}, {0})", Op.POW: "fg::cpow({0}, {1})",
    Op.EXPM1: "fg::cexpm1({0})", Op.LOG1P: "fg::clog1p({0})", Op.LOG2: "fg::cscale(fg::cx::log({0}), 1.4426950408889634)",
    Op.LOG10: "fg::cscale(fg::cx::log({0}), 0.4342944819032518)", Op.SIGN: "fg::csign({0})", Op.ROUND: "fg::cround({0})",
    Op.ISNAN: "fg::cisnan({0})", Op.ISINF: "fg::cisinf({0})", Op.ISFINITE: "fg::cisfinite({0})",
    Op.REAL: "{0}.real()", Op.IMAG: "{0}.imag()", Op.CONJ: "fg::cx::conj({0})",
    Op.WHERE: "({0} ? {1} : {2})",
}

#: the names complex64/complex128 have in emitted C++ (aliases the complex partial defines)
CPP_TYPES = {"complex64": "fg::complex64", "complex128": "fg::complex128"}


def _py_literal(v, d: DType, real_literal) -> str:
    v = complex(v)
    parts = ", ".join(repr(p) if p == p and abs(p) != float("inf") else f"float('{p}')" for p in (v.real, v.imag))
    return f"complex({parts})" if d is dt.complex128 else f"np.complex64(complex({parts}))"


def _cpp_literal(v, d: DType, real_literal) -> str:
    v = complex(v)
    real = dt.real_of(d)
    return f"{CPP_TYPES[d.name]}({real_literal(v.real, real)}, {real_literal(v.imag, real)})"


def _wrap(dialect, literal, type_name=None, cast=None) -> None:
    """Teach ``dialect`` the complex dtypes' literals, type names and casts (a complex value
    from a real one: the constructor; between complex dtypes: the converting constructor)."""
    old_literal, old_type, old_cast = dialect.literal, dialect.type_name, dialect.cast
    dialect.literal = lambda v, d: literal(v, d, old_literal) if d.is_complex else old_literal(v, d)
    if type_name is not None:
        dialect.type_name = lambda d: type_name(d) if d.is_complex else old_type(d)
    if cast is not None:
        dialect.cast = lambda t, d: cast(t, d) if d.is_complex else old_cast(t, d)


def install(python, cuda_python, cpp, cuda_cpp) -> None:
    """Add the complex rows to ``plan/exprs``'s four dialects (once, when it is imported)."""
    for d in (python, cuda_python, cpp, cuda_cpp):
        for k in ("b", "i", "u", "f"):
            d.kinds.setdefault(k, {}).update(_REAL_PARTS)
    python.kinds["c"] = dict(PY_COMPLEX)
    cuda_python.kinds["c"] = dict(PY_COMPLEX)
    cpp.kinds["c"] = dict(CPP_COMPLEX)
    cuda_cpp.kinds["c"] = dict(CPP_COMPLEX)
    for d in (python, cuda_python):
        _wrap(d, _py_literal)
    for d in (cpp, cuda_cpp):
        _wrap(d, _cpp_literal, lambda d: CPP_TYPES[d.name], lambda t, d: f"{CPP_TYPES[d.name]}({t})")


def _is_complex(d) -> bool:
    return d == "complex" or (isinstance(d, DType) and d.is_complex)


def spec_uses_complex(spec) -> bool:
    """Whether a specialization computes with a complex value anywhere (its Python kernels then
    carry the complex helpers, ``lower/pyhelpers.COMPLEX_HELPERS``)."""
    return any(_is_complex(i.dtype) or _is_complex(i.compute) for i in spec.info)


def uses_complex(op, combos) -> bool:
    """Whether an emitted file needs the complex partial: a complex input or output in one of its
    dtype combinations (dtype names), or a complex constant or cast inside the op."""
    if any(name.startswith("complex") for c in combos for name in c):
        return True
    return any((n.op is Op.CONST and n.arg[0] == "complex") or (n.op is Op.CAST and isinstance(n.arg, DType)
                                                                and n.arg.is_complex) for n in op.graph.nodes)
