"""The array API's elementwise functions (#18) as a few many-output ops, with their NumPy
references and edge-value inputs: shared by tests/test_elementwise.py (Numba CPU, AOT C++, XLA)
and tests/cuda/test_elementwise_cuda.py (numba-cuda under the simulator), so every backend runs
the same cases, each compiled once per dtype.

An emitted stage holds at most 16 outputs (``emitters.common.MAX_STAGE_OPERANDS``): the unary
functions are two ops.
"""
from __future__ import annotations

import numpy as np

import fusegen as fg


@fg.op
def unary_a(x):
    return (fg.expm1(x), fg.log1p(x), fg.log2(x), fg.log10(x), fg.tan(x), fg.asin(x), fg.acos(x), fg.atan(x),
            fg.sinh(x), fg.cosh(x), fg.asinh(x), fg.acosh(x), fg.atanh(x), fg.trunc(x), fg.round(x), fg.sign(x))


@fg.op
def unary_b(x):
    return (fg.signbit(x), fg.isnan(x), fg.isinf(x), fg.isfinite(x), fg.square(x), fg.reciprocal(x),
            fg.floor(x), fg.ceil(x), -x, abs(x))


@fg.op
def binary_f(x, y):
    return (fg.atan2(x, y), fg.hypot(x, y), fg.copysign(x, y), fg.nextafter(x, y), fg.logaddexp(x, y),
            x // y, x % y, fg.logical_xor(x, y), fg.maximum(x, y), fg.minimum(x, y))


@fg.op
def integer(x, y):
    return (x // y, x % y, x & y, x | y, x ^ y, ~x, x << y, x >> y, fg.sign(x), fg.round(x), fg.trunc(x),
            fg.isinf(x), fg.isnan(x), fg.isfinite(x), fg.square(x), fg.logical_xor(x, y))


UNARY_A = [np.expm1, np.log1p, np.log2, np.log10, np.tan, np.arcsin, np.arccos, np.arctan, np.sinh, np.cosh,
           np.arcsinh, np.arccosh, np.arctanh, np.trunc, np.rint, np.sign]
UNARY_B = [np.signbit, np.isnan, np.isinf, np.isfinite, np.square, np.reciprocal, np.floor, np.ceil, np.negative,
           np.abs]
def floor_divide(x, y):
    """NumPy's floor_divide, but where an operand is infinite the array API's table: the quotient
    itself (inf // 2 = inf and -1 // inf = -0, where NumPy's divmod gives nan and -1)."""
    with np.errstate(all="ignore"):
        return np.where(np.isinf(x) | np.isinf(y), x / y, np.floor_divide(x, y))


floor_divide.nin = 2
BINARY_F = [np.arctan2, np.hypot, np.copysign, np.nextafter, np.logaddexp, floor_divide, np.remainder,
            np.logical_xor, np.maximum, np.minimum]
def _round(x):  # the array API's round: integers stay integers (np.rint would give floats)
    return np.round(x)


_round.nin = 1
INTEGER = [np.floor_divide, np.remainder, np.bitwise_and, np.bitwise_or, np.bitwise_xor, np.invert, np.left_shift,
           np.right_shift, np.sign, _round, np.trunc, np.isinf, np.isnan, np.isfinite, np.square, np.logical_xor]
CASES = {"unary_a": (unary_a, UNARY_A), "unary_b": (unary_b, UNARY_B), "binary_f": (binary_f, BINARY_F),
         "integer": (integer, INTEGER)}

FLOAT_EDGES = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.0, -7.0, 1e-40, -1e-45,
               1e30, -1e30, 0.3, -0.3, 0.99, 2.0, 100.0, 1e-3]


def float_inputs(dtype) -> np.ndarray:
    with np.errstate(over="ignore"):   # (1e30 is inf in float16)
        return np.array(FLOAT_EDGES, dtype)


def float_pairs(dtype) -> tuple[np.ndarray, np.ndarray]:
    x = float_inputs(dtype)
    a, b = np.meshgrid(x, x)
    return a.ravel(), b.ravel()


def int_pairs(dtype) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of edge values: INT_MIN, INT_MAX, 0, +-1, small values, and shift counts at and
    beyond the bit width (negative too): divisions by 0 and INT_MIN // -1 included."""
    info = np.iinfo(dtype)
    vals = {info.min, info.max, 0, 1, 2, 3, 7, min(info.max, 100)}
    if info.min < 0:
        vals |= {-1, -3, -8, -100}
    bits = 8 * np.dtype(dtype).itemsize
    counts = {c for c in (0, 1, 3, bits - 1, bits, bits + 1, 63, 64, 65) if c <= info.max}
    if info.min < 0:
        counts |= {-1, -5}
    a, b = np.meshgrid(np.array(sorted(vals), dtype), np.array(sorted(vals | counts), dtype))
    return a.ravel(), b.ravel()


def inputs(case: str, dtype) -> tuple[np.ndarray, ...]:
    if case == "integer":
        return int_pairs(dtype)
    if case == "binary_f":
        return float_pairs(dtype)
    return (float_inputs(dtype),)


def reference(case: str, args) -> list[np.ndarray]:
    with np.errstate(all="ignore"):
        return [f(*args[:f.nin]) for f in CASES[case][1]]


def mismatches(got: np.ndarray, want: np.ndarray, ulp: float = 4) -> str:
    """'' when ``got`` equals NumPy's ``want``: same dtype; integers and bools exactly; floats within
    ``ulp`` epsilons (relative; NumPy's own float32 functions are up to 3 ulp off), NaN where NumPy
    has NaN, and the sign of every zero and infinity NumPy's."""
    got = np.asarray(got)
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, NumPy's {want.dtype}"
    if want.dtype.kind == "f":
        eps = np.finfo(want.dtype).eps
        with np.errstate(all="ignore"):
            ok = (got == want) | (np.isnan(got) & np.isnan(want)) | (
                np.abs(got.astype(np.float64) - want) <= ulp * eps * np.abs(want.astype(np.float64)))
        ok &= (np.signbit(got) == np.signbit(want)) | np.isnan(want)
    else:
        ok = got == want
    if ok.all():
        return ""
    bad = np.flatnonzero(~ok.ravel())[:4]
    return f"at {bad.tolist()}: {got.ravel()[bad].tolist()}, NumPy {want.ravel()[bad].tolist()}"


def check(case: str, results, args, where: str) -> None:
    results = results if isinstance(results, tuple) else (results,)
    errors = []
    for f, got, want in zip(CASES[case][1], results, reference(case, args)):
        msg = mismatches(got, want)
        if msg:
            errors.append(f"{f.__name__}: {msg}")
    assert not errors, f"{where} {case} {args[0].dtype}: " + "; ".join(errors)
