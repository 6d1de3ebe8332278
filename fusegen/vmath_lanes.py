"""The Numba versions of fusegen/vmath.py's float32-lane functions: ``exp``, ``sigmoid`` and
``tanh`` computed in float32 arithmetic throughout (the algorithms and the error budget are in
vmath.py, section "float32 lanes"; fusegen/emitters/templates/_vmath.inc.j2 holds the C++ twins,
operation for operation).

Why a second set: the float64 versions in fusegen/vmath_numba.py are correctly rounded, but a
float64 polynomial runs on half as many lanes per instruction, after two conversions per element:
exp over 16 M elements took 16.0 ms against 5.9 ms here (a copy: 4.1 ms), and the silu and sigmoid
rows of ``fusegen bench`` fell from 3.6-3.8x to 2.3-2.4x the memory bound.
They stay within 1 ulp (measured over every float32 input) by carrying exp's result as an
unevaluated sum hi + lo where a later step would lose its last bits.

The same Numba rules as vmath_numba: ``forceinline`` (the kernel's loop sees the arithmetic),
``fastmath=False`` (no reassociation may undo the shifter trick or the error terms), selects
rather than branches. Every constant is a float32 global, and integer work is int64 narrowed to
int32 only in the bit casts, so no float64 and no conversion enters the loop (a bare Python
float literal would widen the expression to float64).
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .vmath import (EXP32_LIMIT, EXP32_POLY, LN2_HI32, LN2_LO32, LOG2E32, SHIFTER32, SHIFTER32_BITS,
                    TANH32_CLAMP, TANH32_POLY, TANH32_SMALL)

__all__ = ["exp_f32", "sigmoid_f32", "tanh_f32"]


@intrinsic
def _bits(typingctx, x):
    """The bits of a float32, as an int64 (the low 32 bits, sign-extended)."""
    sig = types.int64(types.float32)

    def codegen(context, builder, signature, args):
        return builder.sext(builder.bitcast(args[0], ir.IntType(32)), ir.IntType(64))

    return sig, codegen


@intrinsic
def _from_bits(typingctx, b):
    """The float32 whose bits are the low 32 bits of an int64."""
    sig = types.float32(types.int64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.trunc(args[0], ir.IntType(32)), ir.FloatType())

    return sig, codegen


@intrinsic
def _fma(typingctx, a, b, c):
    """a * b + c with one rounding (float32: llvm.fma.f32)."""
    sig = types.float32(types.float32, types.float32, types.float32)

    def codegen(context, builder, signature, args):
        return builder.fma(*args)

    return sig, codegen


_JIT = dict(fastmath=False, forceinline=True, error_model="numpy", nogil=True, cache=True)
_F = np.float32
ZERO, ONE = _F(0.0), _F(1.0)
_C = tuple(_F(c) for c in EXP32_POLY)
C2, C3, C4, C5, C6 = _C
_T = tuple(_F(c) for c in TANH32_POLY)
T3, T5 = _T
LOG2E, SHIFTER, LN2_HI, LN2_LO = _F(LOG2E32), _F(SHIFTER32), _F(LN2_HI32), _F(LN2_LO32)
LIMIT, CLAMP, SMALL = _F(EXP32_LIMIT), _F(TANH32_CLAMP), _F(TANH32_SMALL)


@njit(**_JIT)
def _mul(a, b):
    """a * b as the C++ twins write it (vm_mulf: fma(a, b, +0)): a rounded product that no
    compiler fuses into a following addition."""
    return _fma(a, b, ZERO)


@njit(**_JIT)
def _exp_parts(x):
    """exp(x) = (hi + lo) * s1 * s2 for a float32 |x| <= EXP32_LIMIT (or NaN): hi + lo is
    exp(r) to about 2^-27 relative, with hi = fl(hi + lo); s1 s2 = 2^n, both normal."""
    k = _fma(x, LOG2E, SHIFTER)                # n + 1.5 * 2^23: rounded to an integer
    n = k - SHIFTER
    r_hi = _fma(-n, LN2_HI, x)                 # exact: n * LN2_HI has 24 bits, r a multiple of 2^-25
    r_lo = _mul(-n, LN2_LO)
    r = r_hi + r_lo
    p = _fma(_fma(_fma(_fma(C6, r, C5), r, C4), r, C3), r, C2)
    u = _fma(r * r, p, r_lo)                   # exp(r) - 1 - r_hi, small
    s = ONE + r_hi
    v = ((ONE - s) + r_hi) + u                 # (1 - s) + r_hi: what s lost (Fast2Sum)
    hi = s + v
    lo = (s - hi) + v                          # what hi lost (Fast2Sum, |s| > |v|)
    m = _bits(k) - SHIFTER32_BITS              # n, from the shifter's low mantissa bits
    m1 = m >> 1
    s1 = _from_bits((m1 + 127) << 23)
    s2 = _from_bits((m - m1 + 127) << 23)      # two factors: 2^n alone is not normal below -126
    return hi, lo, s1, s2


@njit(**_JIT)
def exp_f32(x):
    """np.exp for a float32 x in float32 lanes, within 1 ulp (see fusegen/vmath.py)."""
    a = np.copysign(LIMIT, x) if abs(x) > LIMIT else x   # NaN fails the test and passes
    hi, lo, s1, s2 = _exp_parts(a)
    return _mul(hi * s1, s2)                   # exact, then one rounding (also to a subnormal, inf)


@njit(**_JIT)
def _exp_pair(a):
    """exp(a) for a float32 a <= 0 as (hi, lo), hi + lo within about 2^-27 relative."""
    a = -LIMIT if a < -LIMIT else a
    hi, lo, s1, s2 = _exp_parts(a)
    return _mul(hi * s1, s2), _mul(lo * s1, s2)   # hi * s1 is exact


@njit(**_JIT)
def _div_pair(n_hi, n_lo, d_hi, d_lo):
    """(n_hi + n_lo) / (d_hi + d_lo) for 1 <= d_hi <= 2, to one rounding and a small error: one
    division, then one correction step from the residual of the first quotient."""
    inv = ONE / d_hi
    q = _mul(n_hi, inv)
    res = _fma(-q, d_hi, n_hi)                 # n_hi - q d_hi, exact or nearly
    corr = _fma(-q, d_lo, res + n_lo)
    return _fma(corr, inv, q)


@njit(**_JIT)
def sigmoid_f32(x):
    """1 / (1 + exp(-x)) for a float32 x in float32 lanes, within 1 ulp: with e = exp(-|x|) as a
    pair, 1 / (1 + e) for x >= 0 and e / (1 + e) below."""
    e_hi, e_lo = _exp_pair(-abs(x))            # NaN passes
    d_hi = ONE + e_hi
    d_lo = ((ONE - d_hi) + e_hi) + e_lo
    neg = x < ZERO
    return _div_pair(e_hi if neg else ONE, e_lo if neg else ZERO, d_hi, d_lo)


@njit(**_JIT)
def tanh_f32(x):
    """np.tanh for a float32 x in float32 lanes, within 1 ulp: (1 - e) / (1 + e) with e =
    exp(-2|x|) as a pair (1 - e keeps its digits: the pair's low part holds what 1 - e_hi
    cancels), and x + x^3 P(x^2) below TANH32_SMALL (exact for -0 and subnormals)."""
    a = abs(x)
    a2 = a * a
    small = _fma(a2 * a, _fma(a2, T5, T3), a)
    c = CLAMP if a > CLAMP else a              # tanh is +-1 from 9.01 on; NaN passes
    e_hi, e_lo = _exp_pair(-(c + c))
    n_hi = ONE - e_hi
    n_lo = ((ONE - n_hi) - e_hi) - e_lo
    d_hi = ONE + e_hi
    d_lo = ((ONE - d_hi) + e_hi) + e_lo
    big = _div_pair(n_hi, n_lo, d_hi, d_lo)
    return np.copysign(small if a < SMALL else big, x)   # the sign last: right for -0 flushed
