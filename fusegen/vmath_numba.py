"""The Numba versions of fusegen/vmath.py's float32 functions (the algorithms and constants are
described there; fusegen/templates/_vmath.inc.j2 holds the C++ twins, operation for operation).

Generated CPU kernels call them for float32 operands (fusegen/exprs.py); each takes a float32
(or float64 holding a float32 value) and returns a float32. Numba details that make them
vectorize and stay exact:

* ``forceinline=True`` marks them ``alwaysinline`` for LLVM, so the kernel's loop sees plain
  arithmetic (a call would keep it scalar). This is LLVM inlining, not Numba's IR-level
  ``inline="always"``: the inlined instructions keep the flags they were compiled with.
* ``fastmath=False`` explicitly: Numba otherwise inherits the caller's flags, and the kernels'
  ``reassoc`` would let LLVM fold ``(t + SHIFTER) - SHIFTER`` back to ``t``.
* ``a if c else b`` between values already computed becomes an LLVM ``select`` (a blend), not a
  branch; every function computes all its paths and selects.

The float <-> int64 bit casts are LLVM ``bitcast``s (free, and vectorizable), through two
small intrinsics; integer ``+``, ``>>`` and ``<<`` on int64 compile to plain wrapping
instructions; ``_fma`` is ``llvm.fma.f64`` (one vfmadd), ``np.rint`` is ``llvm.rint`` (vroundpd).
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .vmath import (EXP_LIMIT, EXP_POLY, EXPM1_POLY, LN2_HI, LN2_LO, LOG2E, LOG10_2_HI, LOG10_2_LO, LOG10E,
                    LOG_POLY, SHIFTER, SHIFTER_BITS, SIGMOID_POLY, SIGMOID_SMALL, SQRT_HALF_BITS, TANH_CLAMP, TANH_POLY, TANH_SMALL)

__all__ = ["exp_f32", "expm1_f32", "tanh_f32", "sigmoid_f32", "log_f32", "log1p_f32", "log2_f32",
           "log10_f32"]


@intrinsic
def _bits(typingctx, x):
    """float64 -> its IEEE bits as int64."""
    sig = types.int64(types.float64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return sig, codegen


@intrinsic
def _from_bits(typingctx, b):
    """int64 IEEE bits -> the float64 they encode."""
    sig = types.float64(types.int64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return sig, codegen


@intrinsic
def _fma(typingctx, a, b, c):
    """a * b + c with one rounding (float64)."""
    sig = types.float64(types.float64, types.float64, types.float64)

    def codegen(context, builder, signature, args):
        return builder.fma(*args)

    return sig, codegen


_JIT = dict(fastmath=False, forceinline=True, error_model="numpy", nogil=True)
INF = np.inf
NAN = np.nan

C2, C3, C4, C5, C6, C7, C8, C9, C10 = EXP_POLY
E2, E3, E4, E5, E6, E7, E8, E9, E10, E11 = EXPM1_POLY
T3, T5, T7, T9 = TANH_POLY
S3, S5, S7, S9 = SIGMOID_POLY
G1, G2, G3, G4, G5, G6, G7 = LOG_POLY


# --- exp, tanh, sigmoid, expm1 -----------------------------------------------------------------
@njit(**_JIT)
def _exp_reduce(x):
    """(k, n, r): n = round(x / ln2) as a float64, k = n + SHIFTER (its low bits hold n), and
    r = x - n ln2 with |r| <= ln2 / 2 (x is a float64 with |x| <= EXP_LIMIT, or NaN)."""
    k = _fma(x, LOG2E, SHIFTER)
    n = k - SHIFTER
    r = _fma(-n, LN2_LO, x - n * LN2_HI)   # n * LN2_HI is exact
    return k, n, r


@njit(**_JIT)
def _pow2(k):
    """2^n for k = n + SHIFTER (|n| <= 1022): the low 12 bits of bits(k) + 1023 are n + 1023 (the
    shifter's are 0); << 52 moves them into the exponent field and drops the rest."""
    return _from_bits((_bits(k) + 1023) << 52)


@njit(**_JIT)
def _exp_core(x):
    """exp(x) for a float64 |x| <= EXP_LIMIT (or NaN, which propagates)."""
    k, n, r = _exp_reduce(x)
    s = _fma(C10, r, C9)
    s = _fma(s, r, C8)
    s = _fma(s, r, C7)
    s = _fma(s, r, C6)
    s = _fma(s, r, C5)
    s = _fma(s, r, C4)
    s = _fma(s, r, C3)
    s = _fma(s, r, C2)
    return (1.0 + _fma(r * r, s, r)) * _pow2(k)


@njit(**_JIT)
def _clamp_exp_arg(xd):
    """|x| clamped to EXP_LIMIT, its sign kept; NaN fails the test and passes."""
    return np.copysign(EXP_LIMIT, xd) if abs(xd) > EXP_LIMIT else xd


@njit(**_JIT)
def exp_f32(x):
    """np.exp for a float32 x, vectorizable (see fusegen/vmath.py)."""
    return np.float32(_exp_core(_clamp_exp_arg(np.float64(x))))  # overflow, underflow: this one rounding


@njit(**_JIT)
def _expm1_core(xd):
    """expm1(x) for a float64 |x| <= EXP_LIMIT (or NaN); exact for +-0 only up to the sign."""
    k, n, r = _exp_reduce(xd)
    s = _fma(E11, r, E10)
    s = _fma(s, r, E9)
    s = _fma(s, r, E8)
    s = _fma(s, r, E7)
    s = _fma(s, r, E6)
    s = _fma(s, r, E5)
    s = _fma(s, r, E4)
    s = _fma(s, r, E3)
    s = _fma(s, r, E2)
    q = _fma(r * r, s, r)                  # expm1(r); r = x exactly when n = 0
    scale = _pow2(k)
    big = _fma(scale, q, scale - 1.0)      # 2^n (q + 1) - 1; scale - 1 is exact for n <= 53
    return q if n == 0.0 else big


@njit(**_JIT)
def expm1_f32(x):
    """np.expm1 for a float32 x, vectorizable (see fusegen/vmath.py)."""
    xd = np.float64(x)
    r = _expm1_core(_clamp_exp_arg(xd))
    return np.float32(xd if xd == 0.0 else r)  # -0.0 stays -0.0


@njit(**_JIT)
def tanh_f32(x):
    """np.tanh for a float32 x, vectorizable (see fusegen/vmath.py)."""
    xd = np.float64(x)
    a = abs(xd)
    x2 = xd * xd
    small = xd * _fma(x2, _fma(x2, _fma(x2, _fma(x2, T9, T7), T5), T3), 1.0)  # keeps -0.0, subnormals
    a = TANH_CLAMP if a > TANH_CLAMP else a  # inf -> 1; NaN passes
    e = _exp_core(2.0 * a)
    big = (e - 1.0) / (e + 1.0)
    big = -big if xd < 0.0 else big
    return np.float32(small if a < TANH_SMALL else big)


@njit(**_JIT)
def _round_odd(hi, lo):
    """hi + lo (hi > 0, hi = fl(hi + lo)) rounded to odd: hi moved one float64 ulp towards lo if
    lo != 0 and hi's last bit is 0. Rounding that to float32 gives hi + lo's correctly rounded
    float32 value (Boldo and Melquiond, "Emulation of FMA and correctly rounded sums: proved
    algorithms using rounding to odd", IEEE Trans. Computers 57(4), 2008), also where hi alone
    is a float32 midpoint."""
    b = _bits(hi)
    step = np.int64(lo > 0.0) - np.int64(lo < 0.0)
    return _from_bits(b + (step & ((b & 1) - 1)))


@njit(**_JIT)
def sigmoid_f32(x):
    """1 / (1 + exp(-x)) for a float32 x, evaluated in float64, vectorizable. Correctly rounded
    also where the float32 formula's exp overflows, and near 0, where 1/2 + x/4 is often a
    float32 midpoint and only the x^3 term decides (see SIGMOID_POLY)."""
    xd = np.float64(x)
    big = 1.0 / (1.0 + _exp_core(_clamp_exp_arg(-xd)))
    x2 = xd * xd
    head = _fma(xd, 0.25, 0.5)                           # exact for |x| >= 2^-27
    tail = xd * x2 * _fma(x2, _fma(x2, _fma(x2, S9, S7), S5), S3)
    hi = head + tail
    small = _round_odd(hi, tail - (hi - head))               # Fast2Sum: |head| >= |tail|
    return np.float32(small if abs(xd) < SIGMOID_SMALL else big)


# --- log, log1p, log2, log10 ---------------------------------------------------------------------
@njit(**_JIT)
def _log_parts(h, lo):
    """(k, log1p(f)) with h + lo = 2^k (1 + f), 1 + f in [sqrt(1/2), sqrt(2)), for a positive
    normal float64 h and a correction |lo| <= ulp(h); k is returned as a float64."""
    b = _bits(h)
    k = (b - SQRT_HALF_BITS) >> 52                       # arithmetic shift: floor
    m = _from_bits(b - (k << 52))                        # h 2^-k
    f = _fma(lo, _from_bits((1023 - k) << 52), m - 1.0)  # m - 1 is exact; lo 2^-k too
    s = f / (2.0 + f)
    z = s * s
    big_r = z * _fma(z, _fma(z, _fma(z, _fma(z, _fma(z, _fma(z, G7, G6), G5), G4), G3), G2), G1)
    hf = 0.5 * f * f
    kd = _from_bits(SHIFTER_BITS + k) - SHIFTER          # k as a float64, without a conversion
    return kd, f - _fma(-s, hf + big_r, hf)


@njit(**_JIT)
def _log_special(h, r):
    """r where h is positive and finite; log's value at 0, below 0, +inf and NaN elsewhere."""
    r = r if h < INF else h                              # +inf -> +inf, NaN -> NaN
    r = -INF if h == 0.0 else r
    return NAN if h < 0.0 else r


@njit(**_JIT)
def _ln(kd, p):
    return _fma(kd, LN2_LO, p) + kd * LN2_HI             # kd * LN2_HI is exact


@njit(**_JIT)
def log_f32(x):
    """np.log for a float32 x, vectorizable (see fusegen/vmath.py)."""
    xd = np.float64(x)
    kd, p = _log_parts(xd, 0.0)
    return np.float32(_log_special(xd, _ln(kd, p)))


@njit(**_JIT)
def log1p_f32(x):
    """np.log1p for a float32 x, vectorizable (see fusegen/vmath.py)."""
    xd = np.float64(x)
    h = 1.0 + xd
    kd, p = _log_parts(h, xd - (h - 1.0))                # Fast2Sum: the rounding error of 1 + x
    r = _log_special(h, _ln(kd, p))
    return np.float32(xd if xd == 0.0 else r)            # -0.0 stays -0.0


@njit(**_JIT)
def log2_f32(x):
    """np.log2 for a float32 x, vectorizable (see fusegen/vmath.py)."""
    xd = np.float64(x)
    kd, p = _log_parts(xd, 0.0)
    return np.float32(_log_special(xd, _fma(p, LOG2E, kd)))


@njit(**_JIT)
def log10_f32(x):
    """np.log10 for a float32 x, vectorizable (see fusegen/vmath.py)."""
    xd = np.float64(x)
    kd, p = _log_parts(xd, 0.0)
    return np.float32(_log_special(xd, _fma(kd, LOG10_2_LO, p * LOG10E) + kd * LOG10_2_HI))
