"""The Numba versions of fusegen/vmath.py's float32 functions (the algorithms and constants are
described there; fusegen/emitters/templates/_vmath.inc.j2 holds the C++ twins, operation for operation).

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

``cache=True``: compiled once into Numba's disk cache (8 functions in a kernel: 2.8 s cold, 0.75 s).
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .vmath_lanes import (erf_f32, exp_f32, exp_shifted_f32, horner, log1p_f32, sigmoid_f32,  # noqa: F401
                          softplus_f32, tanh_f32, tanh_softplus_f32)  # (float32 lanes)
from .vmath import (ASINH_BIG, ATAN_POLY, CBRT2, CBRT4, CBRT_POLY, COS_POLY, EXPM1_POLY, EXP_LIMIT, EXP_POLY, LN2_HI, LN2_LO, LOG10E, LOG10_2_HI,
                    LOG10_2_LO, LOG2E, LOG_POLY, PIO2_HI, PIO2_LO, PI_HI, PI_LO, SHIFTER, SHIFTER_BITS,
                    SIN_POLY, SQRT_HALF_BITS, TAN_PI8, TRIG_CHUNKS, TRIG_FULL)

__all__ = ["exp_f32", "exp_shifted_f32", "expm1_f32", "tanh_f32", "tanh_softplus_f32", "softplus_f32", "sigmoid_f32", "log_f32", "log1p_f32", "log2_f32",
           "log10_f32", "erf_f32", "sin_f32", "cos_f32", "tan_f32", "atan_f32", "atan2_f32", "asin_f32",
           "acos_f32", "sinh_f32", "cosh_f32", "asinh_f32", "acosh_f32", "atanh_f32", "hypot_f32", "cbrt_f32"]


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


_JIT = dict(fastmath=False, forceinline=True, error_model="numpy", nogil=True, cache=True)
INF = np.inf
NAN = np.nan


@njit(**_JIT)
def _mul(a, b):
    """a * b as the C++ twins write it (vm_mul: fma(a, b, +0.0), a product g++ and nvcc cannot
    fuse into a following addition); +0.0 where a plain product would be -0.0."""
    return _fma(a, b, 0.0)


def _horner(coeffs):
    """t -> c[0] + t (c[1] + t (c[2] + ...)) in float64, one fma per coefficient."""
    return horner(coeffs, np.float64, _fma)


_exp_poly = _horner(EXP_POLY)
_expm1_poly = _horner(EXPM1_POLY)
_log_poly = _horner(LOG_POLY)
_sin_poly = _horner(SIN_POLY)
_cos_poly = _horner(COS_POLY)
_atan_poly = _horner(ATAN_POLY)
_cbrt_poly = _horner(CBRT_POLY)
_TRIG = np.array(TRIG_CHUNKS, np.float64)
_TRIG_N = len(TRIG_CHUNKS)


# --- exp in float64 (under expm1, sinh, cosh), expm1 ------------------------------------
@njit(**_JIT)
def _exp_reduce(x):
    """(k, n, r): n = round(x / ln2) as a float64, k = n + SHIFTER (its low bits hold n), and
    r = x - n ln2 with |r| <= ln2 / 2 (x is a float64 with |x| <= EXP_LIMIT, or NaN)."""
    k = _fma(x, LOG2E, SHIFTER)
    n = k - SHIFTER
    r = _fma(-n, LN2_LO, _fma(-n, LN2_HI, x))   # n * LN2_HI is exact
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
    return _mul(1.0 + _fma(r * r, _exp_poly(r), r), _pow2(k))


@njit(**_JIT)
def _clamp_exp_arg(xd):
    """|x| clamped to EXP_LIMIT, its sign kept; NaN fails the test and passes."""
    return np.copysign(EXP_LIMIT, xd) if abs(xd) > EXP_LIMIT else xd


@njit(**_JIT)
def _expm1_core(xd):
    """expm1(x) for a float64 |x| <= EXP_LIMIT (or NaN); exact for +-0 only up to the sign."""
    k, n, r = _exp_reduce(xd)
    q = _fma(r * r, _expm1_poly(r), r)     # expm1(r); r = x exactly when n = 0
    scale = _pow2(k)
    big = _fma(scale, q, scale - 1.0)      # 2^n (q + 1) - 1; scale - 1 is exact for n <= 53
    return q if n == 0.0 else big


@njit(**_JIT)
def expm1_f32(x):
    """np.expm1 for a float32 x, vectorizable (see fusegen/vmath.py)."""
    xd = np.float64(x)
    r = _expm1_core(_clamp_exp_arg(xd))
    return np.float32(xd if xd == 0.0 else r)  # -0.0 stays -0.0


# --- log, log2, log10 (log1p: vmath_lanes) ------------------------------------------------------
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
    hf = 0.5 * f * f
    kd = _from_bits(SHIFTER_BITS + k) - SHIFTER          # k as a float64, without a conversion
    return kd, f - _fma(-s, _fma(z, _log_poly(z), hf), hf)


@njit(**_JIT)
def _log_special(h, r):
    """r where h is positive and finite; log's value at 0, below 0, +inf and NaN elsewhere."""
    r = r if h < INF else h                              # +inf -> +inf, NaN -> NaN
    r = -INF if h == 0.0 else r
    return NAN if h < 0.0 else r


@njit(**_JIT)
def _ln(kd, p):
    return _fma(kd, LN2_HI, _fma(kd, LN2_LO, p))         # kd * LN2_HI is exact


@njit(**_JIT)
def log_f32(x):
    """np.log for a float32 x, vectorizable (see fusegen/vmath.py)."""
    xd = np.float64(x)
    kd, p = _log_parts(xd, 0.0)
    return np.float32(_log_special(xd, _ln(kd, p)))


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
    return np.float32(_log_special(xd, _fma(kd, LOG10_2_HI, _fma(kd, LOG10_2_LO, p * LOG10E))))


# --- sin, cos, tan -------------------------------------------------------------------------------
@njit(**_JIT)
def _trig_reduce(xd):
    """(q, r) with x = (4 m + q + f) pi/2, q in {-2, ..., 2} (a float64) and r = f pi/2, |f| <=
    1/2 + 2^-12, for any float64 x holding a float32 (Payne-Hanek style, table-free: x times each
    28-bit chunk of 2/pi is exact; see TRIG_CHUNKS)."""
    acc = 0.0                                    # the fraction so far, in [-1/2, 1/2]
    quad = 0.0                                   # the whole quarter turns so far, mod 4
    for i in range(TRIG_FULL):
        s = _fma(xd, _TRIG[i], acc)              # exact: at most 53 significant bits
        k = np.rint(s)                           # (s itself from 2^52 on)
        acc = s - k                              # exact
        quad = quad + _fma(-4.0, np.rint(0.25 * k), k)   # k mod 4, exact; off acc's dependency chain
    light = _TRIG[_TRIG_N - 1] * xd              # the rest add less than 2^-12: no more whole turns
    for i in range(_TRIG_N - 2, TRIG_FULL - 1, -1):
        light = _fma(xd, _TRIG[i], light)
    acc = acc + light
    q = _fma(-4.0, np.rint(0.25 * quad), quad)   # in {-2, ..., 2}
    return q, _fma(acc, PIO2_HI, acc * PIO2_LO)


@njit(**_JIT)
def _sin_cos(r):
    """(sin r, cos r) for |r| <= pi/4 (1 + 2^-11); cos as w + ((1 - w) - r^2/2 + r^4 C), w = 1 - r^2/2,
    which keeps the rounding error of w."""
    z = r * r
    sin = _fma(r * z, _sin_poly(z), r)
    w = _fma(-0.5, z, 1.0)
    cos = w + _fma(z * z, _cos_poly(z), _fma(-0.5, z, 1.0 - w))
    return sin, cos


@njit(**_JIT)
def sin_f32(x):
    """np.sin for a float32 x, vectorizable, correct for every float32 (see fusegen/vmath.py)."""
    xd = np.float64(x)
    q, r = _trig_reduce(xd)
    s, c = _sin_cos(r)
    v = c if abs(q) == 1.0 else s                # sin, cos, -sin, -cos for q = 0, 1, 2, 3 (mod 4)
    v = -v if (q < 0.0) | (q > 1.5) else v
    return np.float32(xd if xd == 0.0 else v)    # -0.0 stays -0.0


@njit(**_JIT)
def cos_f32(x):
    """np.cos for a float32 x, vectorizable, correct for every float32 (see fusegen/vmath.py)."""
    q, r = _trig_reduce(np.float64(x))
    s, c = _sin_cos(r)
    v = s if abs(q) == 1.0 else c                # cos, -sin, -cos, sin for q = 0, 1, 2, 3 (mod 4)
    return np.float32(-v if (q > 0.5) | (q < -1.5) else v)


@njit(**_JIT)
def tan_f32(x):
    """np.tan for a float32 x, vectorizable: sin / cos of the reduced argument in float64."""
    xd = np.float64(x)
    q, r = _trig_reduce(xd)
    s, c = _sin_cos(r)
    odd = abs(q) == 1.0
    v = (-c if odd else s) / (s if odd else c)   # tan r, or -1 / tan r an odd quadrant on
    return np.float32(xd if xd == 0.0 else v)


# --- atan, atan2, asin, acos -----------------------------------------------------------------------
@njit(**_JIT)
def _atan2_core(ya, xa):
    """atan2(ya, xa) in [0, pi/2] for float64 ya, xa >= 0 (NaN is the callers'): u = lo / hi, or
    (lo - hi) / (lo + hi) and pi/4 more above tan(pi/8) (one division either way), then pi/2
    minus that if ya > xa. inf/inf is pi/4, finite/inf 0, 0/0 0."""
    inf = (ya == INF) | (xa == INF)
    y1 = (1.0 if ya == INF else 0.0) if inf else ya
    x1 = (1.0 if xa == INF else 0.0) if inf else xa
    lo = y1 if y1 < x1 else x1
    hi = x1 if y1 < x1 else y1
    big = lo > TAN_PI8 * hi
    den = lo + hi if big else hi
    u = (lo - hi if big else lo) / (1.0 if hi == 0.0 else den)   # |u| <= tan(pi/8); exact operands
    z = u * u                                                    # for float32 inputs (atan, atan2)
    a = _fma(u * z, _atan_poly(z), u)
    a = PIO2_HI / 2 + (a + PIO2_LO / 2) if big else a
    return (PIO2_HI - a) + PIO2_LO if y1 > x1 else a


@njit(**_JIT)
def atan_f32(x):
    """np.arctan for a float32 x, vectorizable (see fusegen/vmath.py)."""
    xd = np.float64(x)
    r = np.copysign(_atan2_core(abs(xd), 1.0), xd)
    return np.float32(xd if xd != xd else r)


@njit(**_JIT)
def atan2_f32(y, x):
    """np.arctan2 for float32 y, x, vectorizable (see fusegen/vmath.py)."""
    yd = np.float64(y)
    xd = np.float64(x)
    a = _atan2_core(abs(yd), abs(xd))
    a = (PI_HI - a) + PI_LO if _bits(xd) < 0 else a      # x < 0 or x = -0.0: pi minus that
    r = np.copysign(a, yd)
    return np.float32(yd + xd if (yd != yd) | (xd != xd) else r)


@njit(**_JIT)
def asin_f32(x):
    """np.arcsin for a float32 x: atan2(x, sqrt((1 - x)(1 + x))) in float64, vectorizable."""
    xd = np.float64(x)
    s = np.sqrt((1.0 - xd) * (1.0 + xd))                # NaN for |x| > 1 (and NaN)
    r = np.copysign(_atan2_core(abs(xd), s), xd)
    return np.float32(s if s != s else r)


@njit(**_JIT)
def acos_f32(x):
    """np.arccos for a float32 x: atan2(sqrt((1 - x)(1 + x)), x) in float64, vectorizable."""
    xd = np.float64(x)
    s = np.sqrt((1.0 - xd) * (1.0 + xd))
    a = _atan2_core(s, abs(xd))
    a = (PI_HI - a) + PI_LO if xd < 0.0 else a
    return np.float32(s if s != s else a)


# --- sinh, cosh, asinh, acosh, atanh, hypot, cbrt ------------------------------------------------------
@njit(**_JIT)
def sinh_f32(x):
    """np.sinh for a float32 x: (E + E / (E + 1)) / 2 with E = expm1(|x|), no cancellation."""
    xd = np.float64(x)
    a = abs(xd)
    e = _expm1_core(EXP_LIMIT if a > EXP_LIMIT else a)  # NaN passes
    return np.float32(np.copysign(0.5 * (e + e / (e + 1.0)), xd))


@njit(**_JIT)
def cosh_f32(x):
    """np.cosh for a float32 x: (e + 1 / e) / 2 with e = exp(|x|)."""
    a = abs(np.float64(x))
    e = _exp_core(EXP_LIMIT if a > EXP_LIMIT else a)
    return np.float32(0.5 * (e + 1.0 / e))


@njit(**_JIT)
def _one_plus(w):
    """1 + w as h + lo, exactly (Fast2Sum, the larger operand first), for a float64 w >= 0."""
    h = 1.0 + w
    return h, (1.0 - (h - w)) if w > 1.0 else (w - (h - 1.0))


@njit(**_JIT)
def asinh_f32(x):
    """np.arcsinh for a float32 x: log1p(a + a^2 / (1 + sqrt(1 + a^2))), a = |x|, or log(2a)
    from ASINH_BIG on, in float64; vectorizable."""
    xd = np.float64(x)
    a = abs(xd)
    h, lo = _one_plus(a + a * a / (1.0 + np.sqrt(_fma(a, a, 1.0))))
    big = a >= ASINH_BIG
    kd, p = _log_parts(2.0 * a if big else h, 0.0 if big else lo)
    r = np.copysign(a if a == INF else _ln(kd, p), xd)
    return np.float32(xd if xd != xd else r)


@njit(**_JIT)
def acosh_f32(x):
    """np.arccosh for a float32 x: log1p(d + sqrt(d (d + 2))), d = x - 1 (exact), or log(2x) from
    ASINH_BIG on, in float64; vectorizable."""
    xd = np.float64(x)
    d = xd - 1.0
    h, lo = _one_plus(d + np.sqrt(d * (d + 2.0)))
    big = xd >= ASINH_BIG
    kd, p = _log_parts(2.0 * xd if big else h, 0.0 if big else lo)
    r = xd if xd == INF else _ln(kd, p)
    r = NAN if xd < 1.0 else r
    return np.float32(xd if xd != xd else r)


@njit(**_JIT)
def atanh_f32(x):
    """np.arctanh for a float32 x: log1p(2a / (1 - a)) / 2, a = |x| (1 - a is exact), in float64."""
    xd = np.float64(x)
    a = abs(xd)
    h, lo = _one_plus(2.0 * a / (1.0 - a))
    kd, p = _log_parts(h, lo)
    r = INF if a == 1.0 else 0.5 * _ln(kd, p)
    r = NAN if a > 1.0 else np.copysign(r, xd)
    return np.float32(xd if xd != xd else r)


@njit(**_JIT)
def hypot_f32(x, y):
    """np.hypot for float32 x, y: sqrt(x^2 + y^2) in float64 (the squares are exact, no overflow),
    +inf if either is infinite, even with a NaN (the array API's rule)."""
    xd = np.float64(x)
    yd = np.float64(y)
    r = np.sqrt(_fma(xd, xd, yd * yd))
    return np.float32(INF if (abs(xd) == INF) | (abs(yd) == INF) else r)


@njit(**_JIT)
def cbrt_f32(x):
    """np.cbrt for a float32 x: |x| = m 2^(3j + r), cbrt(m 2^r) from a polynomial and one Halley
    step, times 2^j; the exponent arithmetic on the bits (no division, no conversion)."""
    xd = np.float64(x)
    a = abs(xd)
    b = _bits(a)
    e = (b >> 52) - 1023
    j = (((e + 153) * 21846) >> 16) - 51                 # floor(e / 3) for -153 <= e < 32000
    rem = e - 3 * j                                      # 0, 1 or 2
    mant = b & 0x000FFFFFFFFFFFFF
    m = _from_bits(mant | (1023 << 52))                  # in [1, 2)
    y = _from_bits(mant | ((1023 + rem) << 52))          # m 2^r, in [1, 8)
    t = _mul(_cbrt_poly(m), 1.0 if rem == 0 else (CBRT2 if rem == 1 else CBRT4))
    t2 = _mul(t, t)                                      # (nvcc turns 2 t2 into t2 + t2, which it
                                                         # would fuse with a plain product t * t)
    t = _fma(-t, _fma(t2, t, -y) / _fma(2.0 * t2, t, y), t)   # Halley: t - t (t^3 - y) / (2 t^3 + y)
    v = np.copysign(t * _from_bits((1023 + j) << 52), xd)
    return np.float32(xd if (a == 0.0) | (a == INF) | (xd != xd) else v)
