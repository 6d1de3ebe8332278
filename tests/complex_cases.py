"""complex64/complex128 cases as a few many-output ops with NumPy references, shared by
tests/test_complex.py (Numba CPU, AOT C++, XLA) and tests/cuda/test_complex_cuda.py (numba-cuda
under the simulator): every backend runs the same cases, each op compiled once per dtype.

Inputs are every pair of real and imaginary parts from ``PARTS`` (signed zeros, infinities, NaN,
values on and off the branch cuts); ``STANDARD`` lists special cases as the array API standard
tables them, compared exactly (the sign of every zero included).
"""
from __future__ import annotations

import numpy as np

import fusegen as fg


@fg.op
def unary_a(x):
    return (fg.exp(x), fg.expm1(x), fg.log(x), fg.log1p(x), fg.log2(x), fg.log10(x), fg.sqrt(x), fg.sin(x),
            fg.cos(x), fg.tan(x), fg.sinh(x), fg.cosh(x), fg.tanh(x), fg.asin(x), fg.acos(x), fg.atan(x))


@fg.op
def unary_b(x):
    return (fg.asinh(x), fg.acosh(x), fg.atanh(x), fg.abs(x), fg.sign(x), fg.conj(x), fg.real(x), fg.imag(x),
            fg.isnan(x), fg.isinf(x), fg.isfinite(x), fg.square(x), fg.reciprocal(x), -x, x * 1j, x + 2.5)


@fg.op
def binary(x, y):
    return (x + y, x - y, x * y, x / y, x ** y, x == y, x != y, fg.where(fg.real(x) > 0, x, y),
            fg.sum(x), fg.prod(y), fg.mean(x), fg.round(x * 0.75))


def _expm1(z):  # NumPy's formula where z is finite; the standard's table (exp(z) - 1) elsewhere:
    with np.errstate(all="ignore"):   # NumPy's expm1(inf + 0j) is inf + NaN j, the standard's inf + 0j
        return np.where(np.isfinite(z), np.expm1(z), np.exp(z) - 1)


def _reciprocal(z):  # the standard's reciprocal is 1 / x (NumPy's np.reciprocal(0j) is NaN + NaNj)
    return np.divide(1, z)


UNARY_A = [np.exp, _expm1, np.log, np.log1p, np.log2, np.log10, np.sqrt, np.sin, np.cos, np.tan, np.sinh,
           np.cosh, np.tanh, np.arcsin, np.arccos, np.arctan]
UNARY_B = [np.arcsinh, np.arccosh, np.arctanh, np.abs, np.sign, np.conj, np.real, np.imag, np.isnan, np.isinf,
           np.isfinite, np.square, _reciprocal, np.negative, lambda x: x * 1j, lambda x: x + 2.5]
BINARY = [np.add, np.subtract, np.multiply, np.divide, np.power, np.equal, np.not_equal,
          lambda x, y: np.where(x.real > 0, x, y), np.sum, lambda x, y: np.prod(y), np.mean,
          lambda x, y: np.round(x * 0.75)]   # (each part, ties to even: the standard's round)
CASES = {"unary_a": (unary_a, UNARY_A), "unary_b": (unary_b, UNARY_B), "binary": (binary, BINARY)}

PARTS = [0.0, -0.0, 1.0, -1.0, 0.5, -2.0, 3.0, np.inf, -np.inf, np.nan]
FINITE = [0.0, -0.0, 1.0, -1.0, 0.5, -2.0, 3.0, 0.25, -0.75, 1.5]


def values(dtype, parts=PARTS) -> np.ndarray:
    re, im = np.meshgrid(np.array(parts), np.array(parts))
    z = np.empty(re.size, dtype)
    z.real, z.imag = re.ravel(), im.ravel()
    return z


def inputs(case: str, dtype) -> tuple[np.ndarray, ...]:
    if case == "binary":  # products and quotients of finite values (NumPy's formulas are the same
        # everywhere, but NumPy's own power and Annex G's infinities are not worth pinning here)
        x = values(dtype, FINITE)
        return x, x[::-1].copy()
    return (np.concatenate([values(dtype), standard_input(dtype)]),)


def reference(case: str, args) -> list:
    out = []
    with np.errstate(all="ignore"):
        for f in CASES[case][1]:
            n = 1 if case != "binary" or f in (np.sum, np.mean) else 2
            out.append(np.asarray(f(*args[:n])))
    return out


def _parts_close(got, want, tol) -> np.ndarray:
    with np.errstate(all="ignore"):
        return (got == want) | (np.isnan(got) & np.isnan(want)) | (np.abs(got - want) <= tol * (1 + np.abs(want)))


def mismatches(got, want, finite_only: bool) -> str:
    """'' when ``got`` matches NumPy's ``want``: the same dtype; bools exactly; each part within
    a tolerance (the backends' complex functions are C99's, NumPy's the platform's: a few ulp
    apart), NaN where NumPy has NaN. ``finite_only``: compare only where NumPy's result is finite
    (Annex G's infinite and NaN results are pinned by ``STANDARD``, not by NumPy's libm)."""
    got = np.asarray(got)
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, NumPy's {want.dtype}"
    if want.dtype.kind == "b":
        ok = got == want
    else:
        tol = 1e-5 if want.dtype in (np.complex64, np.float32) else 1e-12
        g, w = np.atleast_1d(got).astype(np.complex128), np.atleast_1d(want).astype(np.complex128)
        ok = _parts_close(g.real, w.real, tol) & _parts_close(g.imag, w.imag, tol)
        if finite_only:
            ok |= ~np.isfinite(w)
    if np.all(ok):
        return ""
    bad = np.flatnonzero(~np.ravel(ok))[:4]
    return f"at {bad.tolist()}: {np.ravel(got)[bad].tolist()}, NumPy {np.ravel(want)[bad].tolist()}"


def check(case: str, results, args, where: str, finite_only: bool = False) -> None:
    results = results if isinstance(results, tuple) else (results,)
    errors = []
    for k, (got, want) in enumerate(zip(results, reference(case, args))):
        msg = mismatches(got, want, finite_only)
        if msg:
            errors.append(f"output {k} ({getattr(CASES[case][1][k], '__name__', '?')}): {msg}")
    assert not errors, f"{where} {case} {args[0].dtype}: " + "; ".join(errors)


# The array API standard's special cases (its tables for each function), exact: (function, input,
# result). Every backend must give these, whatever NumPy's libm does.
INF, NAN = float("inf"), float("nan")
STANDARD = [
    ("log", complex(-0.0, 0.0), complex(-INF, np.pi)), ("log", complex(0.0, 0.0), complex(-INF, 0.0)),
    ("log", complex(1.0, INF), complex(INF, np.pi / 2)), ("log", complex(-INF, 1.0), complex(INF, np.pi)),
    ("log", complex(INF, 1.0), complex(INF, 0.0)), ("log", complex(-1.0, 0.0), complex(0.0, np.pi)),
    ("log", complex(-1.0, -0.0), complex(0.0, -np.pi)),
    ("sqrt", complex(-4.0, 0.0), complex(0.0, 2.0)), ("sqrt", complex(-4.0, -0.0), complex(0.0, -2.0)),
    ("sqrt", complex(0.0, 0.0), complex(0.0, 0.0)), ("sqrt", complex(-0.0, 0.0), complex(0.0, 0.0)),
    ("sqrt", complex(1.0, INF), complex(INF, INF)), ("sqrt", complex(NAN, INF), complex(INF, INF)),
    ("sqrt", complex(-INF, 1.0), complex(0.0, INF)), ("sqrt", complex(INF, 1.0), complex(INF, 0.0)),
    ("exp", complex(0.0, 0.0), complex(1.0, 0.0)), ("exp", complex(-0.0, 0.0), complex(1.0, 0.0)),
    ("exp", complex(-INF, 1.0), complex(0.0, 0.0)), ("exp", complex(INF, 0.0), complex(INF, 0.0)),
    ("exp", complex(NAN, 0.0), complex(NAN, 0.0)),
    ("sin", complex(0.0, 0.0), complex(0.0, 0.0)), ("cos", complex(0.0, 0.0), complex(1.0, -0.0)),
    ("tanh", complex(0.0, 0.0), complex(0.0, 0.0)), ("tanh", complex(INF, 1.0), complex(1.0, 0.0)),
    ("sinh", complex(0.0, 0.0), complex(0.0, 0.0)), ("cosh", complex(0.0, 0.0), complex(1.0, 0.0)),
    ("asin", complex(0.0, 0.0), complex(0.0, 0.0)), ("acos", complex(0.0, 0.0), complex(np.pi / 2, -0.0)),
    ("atan", complex(0.0, 0.0), complex(0.0, 0.0)), ("asinh", complex(0.0, 0.0), complex(0.0, 0.0)),
    ("acosh", complex(0.0, 0.0), complex(0.0, np.pi / 2)), ("atanh", complex(0.0, 0.0), complex(0.0, 0.0)),
    ("atanh", complex(1.0, 0.0), complex(INF, 0.0)), ("acosh", complex(-INF, 1.0), complex(INF, np.pi)),
    ("log1p", complex(-1.0, 0.0), complex(-INF, 0.0)), ("expm1", complex(0.0, 0.0), complex(0.0, 0.0)),
    ("expm1", complex(-0.0, 0.0), complex(0.0, 0.0)), ("tanh", complex(INF, 2.0), complex(1.0, 0.0)),
    ("tanh", complex(-INF, -2.0), complex(-1.0, -0.0)),
    ("expm1", complex(INF, 0.0), complex(INF, 0.0)), ("expm1", complex(-INF, 1.0), complex(-1.0, 0.0)),
    ("expm1", complex(NAN, 0.0), complex(NAN, 0.0)), ("expm1", complex(-INF, NAN), complex(-1.0, 0.0)),
]


#: the outputs of unary_a and unary_b, by function name (where check_standard finds them)
UNARY_NAMES = ["exp", "expm1", "log", "log1p", "log2", "log10", "sqrt", "sin", "cos", "tan", "sinh", "cosh", "tanh",
               "asin", "acos", "atan", "asinh", "acosh", "atanh"]


def standard_input(dtype) -> np.ndarray:
    return np.array([z for _, z, _ in STANDARD], dtype)


def check_standard(outputs: dict, where: str) -> None:
    """Each STANDARD case from ``outputs[function name]``, whose last ``len(STANDARD)`` values are
    the function of ``standard_input``: equal parts (rounded to the dtype), NaN where NaN, the sign
    of each zero."""
    errors = []
    for k, (fn, z, want) in enumerate(STANDARD):
        if fn not in outputs:
            continue
        res = np.asarray(outputs[fn])[-len(STANDARD):]
        got = complex(res[k])
        w = complex(np.array([want], res.dtype)[0])
        for g, e in ((got.real, w.real), (got.imag, w.imag)):
            same = (g == e and np.signbit(g) == np.signbit(e)) or (g != g and e != e)
            if not same:
                errors.append(f"{fn}({z}) = {got}, the standard's {want}")
                break
    assert not errors, f"{where}: " + "; ".join(errors)
