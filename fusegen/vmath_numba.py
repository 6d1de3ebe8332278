"""The Numba versions of fusegen/vmath.py's float32 ``exp`` and ``tanh`` (the algorithm and
its constants are described there; fg::exp_f32/fg::tanh_f32 in _fg_runtime are the C++ twins).

Generated CPU kernels call ``exp_f32``/``tanh_f32`` for float32 operands (fusegen/exprs.py).
Two Numba details make them vectorize and stay exact:

* ``forceinline=True`` marks them ``alwaysinline`` for LLVM, so the kernel's loop sees plain
  arithmetic (a call would keep it scalar). This is LLVM inlining, not Numba's IR-level
  ``inline="always"``: the inlined instructions keep the flags they were compiled with.
* ``fastmath=False`` explicitly: Numba otherwise inherits the caller's flags, and the kernels'
  ``reassoc`` would let LLVM fold ``(t + SHIFTER) - SHIFTER`` back to ``t``.

The float <-> int64 bit casts are LLVM ``bitcast``s (free, and vectorizable), through two
small intrinsics; integer ``+`` and ``<<`` on int64 compile to plain wrapping instructions.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .vmath import (EXP_LIMIT, EXP_POLY, LN2_HI, LN2_LO, LOG2E, SHIFTER, TANH_CLAMP, TANH_POLY,
                    TANH_SMALL)

__all__ = ["exp_f32", "tanh_f32"]


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


_JIT = dict(fastmath=False, forceinline=True, error_model="numpy", nogil=True)

C2, C3, C4, C5, C6, C7, C8, C9, C10 = EXP_POLY
T3, T5, T7, T9 = TANH_POLY


@njit(**_JIT)
def _exp_core(x):
    """exp(x) for a float64 |x| <= EXP_LIMIT (or NaN, which propagates)."""
    k = x * LOG2E + SHIFTER             # n + SHIFTER: its low mantissa bits hold n
    n = k - SHIFTER                     # n = round(x / ln2), as a float64
    r = (x - n * LN2_HI) - n * LN2_LO   # |r| <= ln2 / 2
    s = C10
    s = s * r + C9
    s = s * r + C8
    s = s * r + C7
    s = s * r + C6
    s = s * r + C5
    s = s * r + C4
    s = s * r + C3
    s = s * r + C2
    p = 1.0 + (r + r * r * s)
    # 2^n: n + 1023 in the exponent field. k's bits are those of SHIFTER (whose low 12 bits are
    # 0) plus n, so the low 12 bits of bits(k) + 1023 are n + 1023, and << 52 drops the rest.
    scale = _from_bits((_bits(k) + 1023) << 52)
    return p * scale


@njit(**_JIT)
def exp_f32(x):
    """np.exp for a float32 x, vectorizable (see fusegen/vmath.py)."""
    xd = np.float64(x)
    xd = np.copysign(EXP_LIMIT, xd) if abs(xd) > EXP_LIMIT else xd  # NaN fails the test, passes
    return np.float32(_exp_core(xd))    # overflow, underflow, subnormals: this one rounding


@njit(**_JIT)
def tanh_f32(x):
    """np.tanh for a float32 x, vectorizable (see fusegen/vmath.py)."""
    xd = np.float64(x)
    a = abs(xd)
    x2 = xd * xd
    small = xd * (1.0 + x2 * (T3 + x2 * (T5 + x2 * (T7 + x2 * T9))))  # keeps -0.0, subnormals
    a = TANH_CLAMP if a > TANH_CLAMP else a  # inf -> 1; NaN passes
    e = _exp_core(2.0 * a)
    big = (e - 1.0) / (e + 1.0)
    big = -big if xd < 0.0 else big
    return np.float32(small if a < TANH_SMALL else big)
