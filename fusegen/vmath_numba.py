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

from .vmath import (COS_POLY, PIO2_HI, PIO2_LO, SIN_POLY, TRIG_CHUNKS, TRIG_FULL, ERF_BIG, ERF_CLAMP, ERF_MID, ERF_SMALL, EXP_LIMIT, EXP_POLY, EXPM1_POLY, LN2_HI, LN2_LO, LOG2E, LOG10_2_HI, LOG10_2_LO, LOG10E,
                    LOG_POLY, SHIFTER, SHIFTER_BITS, SIGMOID_POLY, SIGMOID_SMALL, SQRT_HALF_BITS, TANH_CLAMP, TANH_POLY, TANH_SMALL)

__all__ = ["exp_f32", "expm1_f32", "tanh_f32", "sigmoid_f32", "log_f32", "log1p_f32", "log2_f32",
           "log10_f32", "erf_f32", "sin_f32", "cos_f32", "tan_f32"]


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


@njit(**_JIT)
def _mul(a, b):
    """a * b as the C++ twins write it (vm_mul: fma(a, b, +0.0), a product g++ and nvcc cannot
    fuse into a following addition); +0.0 where a plain product would be -0.0."""
    return _fma(a, b, 0.0)


def _horner(coeffs):
    """An inlined function t -> c[0] + t (c[1] + t (c[2] + ...)), one fma per coefficient (the
    loop over the constant array is unrolled and its loads folded by LLVM)."""
    c = np.array(coeffs, np.float64)
    n = len(c)

    @njit(**_JIT)
    def poly(t):
        s = c[n - 1]
        for i in range(n - 2, -1, -1):
            s = _fma(s, t, c[i])
        return s
    return poly


_exp_poly = _horner(EXP_POLY)
_expm1_poly = _horner(EXPM1_POLY)
_tanh_poly = _horner((1.0,) + TANH_POLY)
_sigmoid_poly = _horner(SIGMOID_POLY)
_log_poly = _horner(LOG_POLY)
_erf_small = _horner(ERF_SMALL)
_erf_big = _horner(ERF_BIG)
_sin_poly = _horner(SIN_POLY)
_cos_poly = _horner(COS_POLY)
_TRIG = np.array(TRIG_CHUNKS, np.float64)
_TRIG_N = len(TRIG_CHUNKS)


# --- exp, tanh, sigmoid, expm1 -----------------------------------------------------------------
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
def exp_f32(x):
    """np.exp for a float32 x, vectorizable (see fusegen/vmath.py)."""
    return np.float32(_exp_core(_clamp_exp_arg(np.float64(x))))  # overflow, underflow: this one rounding


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


@njit(**_JIT)
def tanh_f32(x):
    """np.tanh for a float32 x, vectorizable (see fusegen/vmath.py)."""
    xd = np.float64(x)
    a = abs(xd)
    x2 = xd * xd
    small = xd * _tanh_poly(x2)          # keeps -0.0, subnormals
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
    x3 = xd * x2
    p = _sigmoid_poly(x2)
    hi = _fma(x3, p, head)                               # 1/2 + x/4 + x^3 p, and what rounding it
    small = _round_odd(hi, _fma(x3, p, head - hi))       # lost (head - hi is exact: |x^3 p| < |x/4|)
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
    return np.float32(_log_special(xd, _fma(kd, LOG10_2_HI, _fma(kd, LOG10_2_LO, p * LOG10E))))


# --- erf -----------------------------------------------------------------------------------------
@njit(**_JIT)
def erf_f32(x):
    """math.erf for a float32 x (scipy.special.erf), vectorizable (see fusegen/vmath.py)."""
    xd = np.float64(x)
    a = abs(xd)
    small = xd * _erf_small(xd * xd)                     # |x| < 1; keeps -0.0, subnormals
    a = ERF_CLAMP if a > ERF_CLAMP else a                # float32 erf is +-1 there; inf too; NaN passes
    big = _fma(-_exp_core(-(a * a)), _erf_big(a - ERF_MID), 1.0)   # a * a is exact
    return np.float32(small if abs(xd) < 1.0 else np.copysign(big, xd))


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
