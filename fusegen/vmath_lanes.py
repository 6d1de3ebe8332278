"""The Numba versions of fusegen/vmath.py's float32-lane functions: ``exp``, ``sigmoid``,
``tanh``, ``log1p`` and ``erf`` computed in float32 arithmetic throughout (the algorithms and the
error budget are in vmath.py, section "float32 lanes"; fusegen/emitters/templates/_vmath.inc.j2
holds the C++ twins, operation for operation).

Why a second set: the float64 versions in fusegen/vmath_numba.py are correctly rounded, but a
float64 polynomial runs on half as many lanes per instruction, after two conversions per element:
exp over 16 M elements took 16.0 ms against 5.9 ms here (a copy: 4.1 ms), and the silu and sigmoid
rows of ``fusegen bench`` fell from 3.6-3.8x to 2.3-2.4x the memory bound.
They stay within 1 ulp (exp, sigmoid and tanh measured over every 7th float32 input, log1p and
erf over a dense sweep) by carrying a partial result as an unevaluated sum hi + lo where a later
step would lose its last bits.

The same Numba rules as vmath_numba: ``forceinline`` (the kernel's loop sees the arithmetic),
``fastmath=False`` (no reassociation may undo the shifter trick or the error terms), selects
rather than branches. Every constant is a float32 global, and integer work is int64 narrowed to
int32 only in the bit casts (log1p's reduction, whose shift and min LLVM could not narrow, is
32-bit IR of its own: ``_log_split``), so no float64 and no conversion enters the loop (a bare
Python float literal would widen the expression to float64).
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .vmath import (ERF32_BIG, ERF32_CLAMP, ERF32_SMALL, ERF32_SPLIT, EXP32_LIMIT, EXP32_POLY, EXP32_SUM_FLOOR, LN2_HI32,
                    LN2_LO32, LOG1P32_POLY, LOG2E32, SHIFTER32, SHIFTER32_BITS, SOFTPLUS32_POLY, SQRT_HALF32_BITS,
                    TANH32_CLAMP, TANH32_POLY, TANH32_SMALL)

__all__ = ["exp_f32", "exp_shifted_f32", "sigmoid_f32", "tanh_f32", "tanh_softplus_f32", "softplus_f32", "log1p_f32", "erf_f32"]


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
def _log_split(typingctx, u):
    """(m, k + SHIFTER32, 2^-min(k, 126)) as float32s for a positive normal float32 u = 2^k m, m in
    [sqrt(1/2), sqrt(2)): bits(u) - bits(sqrt(1/2)), >> 23 (arithmetic: floor), is k. In 32-bit
    integer arithmetic, as the C++ twin: Numba's own integer arithmetic is int64, which LLVM cannot
    narrow here (the shift and the min need the high bits), so the loop would carry twice as many
    integer lanes as float ones."""
    sig = types.UniTuple(types.float32, 3)(types.float32)

    def codegen(context, builder, signature, args):
        i32, f32 = ir.IntType(32), ir.FloatType()

        def const(v):
            return ir.Constant(i32, v)
        b = builder.bitcast(args[0], i32)
        k = builder.ashr(builder.sub(b, const(SQRT_HALF32_BITS)), const(23))
        m = builder.bitcast(builder.sub(b, builder.shl(k, const(23))), f32)
        kf = builder.bitcast(builder.add(const(SHIFTER32_BITS), k), f32)
        ks = builder.select(builder.icmp_signed("<", k, const(126)), k, const(126))
        scale = builder.bitcast(builder.shl(builder.sub(const(127), ks), const(23)), f32)
        return context.make_tuple(builder, signature.return_type, (m, kf, scale))

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
ZERO, HALF, ONE, TWO = _F(0.0), _F(0.5), _F(1.0), _F(2.0)
INF, NAN = _F(np.inf), _F(np.nan)
FLT_MAX = _F(np.finfo(np.float32).max)
_C = tuple(_F(c) for c in EXP32_POLY)
C2, C3, C4, C5, C6 = _C
_T = tuple(_F(c) for c in TANH32_POLY)
T3, T5 = _T
LOG2E, SHIFTER, LN2_HI, LN2_LO = _F(LOG2E32), _F(SHIFTER32), _F(LN2_HI32), _F(LN2_LO32)
LIMIT, CLAMP, SMALL = _F(EXP32_LIMIT), _F(TANH32_CLAMP), _F(TANH32_SMALL)
SUM_FLOOR = _F(EXP32_SUM_FLOOR)
_UNBIAS = np.int64(127 - SHIFTER32_BITS)   # bits(k) + this = n + 127, the exponent field of 2^n
ERF_SPLIT, ERF_CLAMP = _F(ERF32_SPLIT), _F(ERF32_CLAMP)
ERF_L0_LO = _F(ERF32_BIG[0] - float(_F(ERF32_BIG[0])))   # the low part of L's constant term


def horner(coeffs, dtype=np.float32, fma=_fma):
    """An inlined function t -> c[0] + t (c[1] + t (c[2] + ...)), one ``fma`` per coefficient, in
    ``dtype`` (fusegen/vmath_numba.py's float64 polynomials pass theirs): the loop over the
    constant array is unrolled and its loads folded by LLVM."""
    c = np.array(coeffs, dtype)
    n = len(c)

    @njit(**_JIT)
    def poly(t):
        s = c[n - 1]
        for i in range(n - 2, -1, -1):
            s = fma(s, t, c[i])
        return s
    return poly


_log1p_poly = horner(LOG1P32_POLY)
_erf_small = horner(ERF32_SMALL)
_erf_big = horner(ERF32_BIG)
_softplus_g2 = horner(tuple(2.0 * c for c in SOFTPLUS32_POLY))   # 2 G (the doubling is exact)


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
    """np.exp for a float32 x in float32 lanes, within 1 ulp (see fusegen/vmath.py): the reduction
    of ``_exp_parts``, then 1 + (r + r^2 P(r)) in two roundings, where the pair users (sigmoid, tanh,
    erf) keep 1 + r_hi apart from the small terms: 8 fewer operations, 0.8% of inputs 1 ulp off
    instead of 0.05%, the same bound."""
    a = LIMIT if x > LIMIT else x              # |x| clamped to LIMIT; NaN fails both tests and passes
    a = -LIMIT if a < -LIMIT else a
    k = _fma(a, LOG2E, SHIFTER)                # n + 1.5 * 2^23: rounded to an integer
    n = k - SHIFTER
    r = _fma(-n, LN2_LO, _fma(-n, LN2_HI, a))  # the inner product is exact (see _exp_parts)
    p = _fma(_fma(_fma(_fma(C6, r, C5), r, C4), r, C3), r, C2)
    y = ONE + _fma(r * r, p, r)
    m = _bits(k) - SHIFTER32_BITS
    m1 = m >> 1
    s1 = _from_bits((m1 + 127) << 23)
    s2 = _from_bits((m - m1 + 127) << 23)
    return _mul(y * s1, s2)                    # exact, then one rounding (also to a subnormal, inf)


@njit(**_JIT)
def exp_shifted_f32(x):
    """exp(x) for a float32 x <= 0 that is summed with a 1 (x = z - max(z) over the sum's slice;
    see fusegen/vmath.py, EXP32_SUM_FLOOR): ``exp_f32``'s bits from EXP32_SUM_FLOOR to 0, about
    1.6e-38 below; one clamp and one scaling factor, 2^n being normal there."""
    a = SUM_FLOOR if x < SUM_FLOOR else x      # NaN fails the test and passes
    k = _fma(a, LOG2E, SHIFTER)
    n = k - SHIFTER
    r = _fma(-n, LN2_LO, _fma(-n, LN2_HI, a))
    p = _fma(_fma(_fma(_fma(C6, r, C5), r, C4), r, C3), r, C2)
    y = ONE + _fma(r * r, p, r)
    return _mul(y, _from_bits((_bits(k) + _UNBIAS) << 23))   # one rounding, as exp_f32's


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


@njit(**_JIT)
def _fast_two_sum(a, b):
    """(s, e) with s = fl(a + b) and a + b = s + e exactly, for any a, b of which the larger in
    magnitude is positive (here: both are): the larger is taken first (Fast2Sum)."""
    s = a + b
    big = a if a > b else b
    small = b if a > b else a
    return s, (big - s) + small


@njit(**_JIT)
def tanh_softplus_f32(x):
    """tanh(softplus(x)) = tanh(log(1 + e)) = n / (n + 2) with n = e (e + 2), e = exp(x), for a
    float32 x in float32 lanes (mish's x * tanh(softplus(x)); plan/fusedmath.py finds it): one exp and
    one division where the composition takes exp, log1p and tanh's exp and division. e as a pair,
    n and n + 2 as pairs (their rounding errors kept exactly), then one division and a correction
    from its residual, so the one large rounding is the last (within 1 ulp; t = 1 from x = 9.01 on,
    where |x| is clamped to TANH32_CLAMP; -inf gives 0, NaN passes)."""
    e_hi, e_lo = _exp_pair(CLAMP if x > CLAMP else x)
    p_hi, p_lo = _fast_two_sum(e_hi, TWO)          # e + 2
    n_hi = _mul(e_hi, p_hi)
    n_lo = _fma(e_hi, p_lo + e_lo, _fma(e_lo, p_hi, _fma(e_hi, p_hi, -n_hi)))   # e (e + 2) - n_hi
    d_hi, d_lo = _fast_two_sum(n_hi, TWO)          # n + 2
    return _div_pair(n_hi, n_lo, d_hi, d_lo + n_lo)


@njit(**_JIT)
def softplus_f32(x):
    """log(1 + exp(x)) for a float32 x in float32 lanes: max(x, 0) + log1p(e), e = exp(-|x|) in (0, 1]
    as a pair, where log1p needs no reduction: e - e^2/2 + e^3 G(e), e^2/2 as a rounded product and
    its exact error, then max(x, 0) + e by Fast2Sum with the small terms added first, so the last
    addition is the one large rounding (plan/fusedmath.py finds softplus however it is spelled;
    +inf -> inf, -inf -> 0, NaN passes)."""
    e_hi, e_lo = _exp_pair(-abs(x))           # NaN passes
    hs = HALF * e_hi                          # exact
    sq = _mul(hs, e_hi)                       # e^2/2, rounded
    sq_err = _fma(hs, e_hi, -sq)              # and its rounding error, exactly
    a = e_hi - sq                             # e - e^2/2 (at least half the result)
    a_err = (e_hi - a) - sq                   # and its rounding error (Fast2Sum: e >= e^2/2)
    h = _mul(e_hi, _softplus_g2(e_hi))        # 2 e G: e^3 G = (e^2/2) h, a sixth of the result at most
    small = _fma(sq, h, (a_err - sq_err) + e_lo)
    s, err = _fast_two_sum(x if x > ZERO else ZERO, a)
    return s + (err + small) if s <= FLT_MAX else s   # x = +inf: inf - inf in the sum's error


@njit(**_JIT)
def log1p_f32(x):
    """np.log1p for a float32 x in float32 lanes, within 1 ulp: u = 1 + x and its rounding error c
    (TwoSum), u = 2^k (1 + f) from the bits, k ln2 + log1p(f) + c 2^-k / (1 + f) with the large
    sums' rounding errors kept apart (see fusegen/vmath.py)."""
    u = ONE + x
    xr = u - ONE
    c = (ONE - (u - xr)) + (x - xr)            # TwoSum: 1 + x = u + c exactly, whichever is larger
    m, k_shifted, scale = _log_split(u)        # u = 2^k m (scale: 2^-k, 2^-126 from u >= 2^126.5 on,
    f = m - ONE                                # where c 2^-k is below the result's ulp anyway)
    cs = c * scale                             # c 2^-k, exact; f = m - 1 is exact too
    kf = k_shifted - SHIFTER                   # k as a float32, without a conversion
    big = _mul(kf, LN2_HI)                     # exact: 8 + 16 bits
    w = big + f
    w_err = (big - w) + f                      # Fast2Sum: |k ln2| > |f|, or k = 0 and w = f
    hf = HALF * f
    sq = _mul(hf, f)                           # f^2/2, rounded
    sq_err = _fma(hf, f, -sq)                  # and its rounding error, exactly
    tail = _fma(f * sq, _log1p_poly(f), -sq_err)    # (f^3/2) Q(f) - sq_err
    corr = _fma(cs, _fma(f, f, -f), cs)        # c 2^-k (1 - f + f^2) ~= c 2^-k / (1 + f)
    r = w + ((w_err + _mul(kf, LN2_LO)) + ((tail - sq) + corr))
    r = r if u < INF else u                    # +inf -> +inf, NaN -> NaN
    r = -INF if u == ZERO else r
    r = NAN if u < ZERO else r
    return x if x == ZERO else r               # -0.0 stays -0.0


@njit(**_JIT)
def erf_f32(x):
    """math.erf for a float32 x (scipy.special.erf) in float32 lanes, within 1 ulp: x + x P(x^2)
    below ERF32_SPLIT, 1 - exp(L(|x| - 1)) from there, L ~= log(erfc) (see fusegen/vmath.py)."""
    small = _fma(x, _erf_small(x * x), x)      # one rounding; -0.0 and subnormals exact
    a = abs(x)
    t = ERF_CLAMP if a > ERF_CLAMP else a      # float32 erf is +-1 from 3.9192 on; inf too; NaN passes
    e_hi, e_lo = _exp_pair(_erf_big(t - ONE))  # exp(L - L0_LO) as hi + lo; t - 1 is exact
    e_lo = _fma(e_hi, ERF_L0_LO, e_lo)         # erfc(t) = that times 1 + L0_LO
    s = ONE - e_hi
    big = s + (((ONE - s) - e_hi) - e_lo)      # 1 - hi's rounding error kept (Fast2Sum, hi <= 0.16)
    return small if a < ERF_SPLIT else np.copysign(big, x)
