"""Vectorizable float32 ``exp`` and ``tanh`` for the CPU backends: the constants, shared by both.

Why: libm's ``expf``/``tanhf`` are opaque calls, so a loop that uses them stays scalar
(llvmlite has no SVML, and g++ vectorizes ``std::exp`` only under ``-ffast-math``, which
breaks NaN rules). softmax and bias_gelu were 17x and 42x the memory bound because of it.
These versions are straight-line arithmetic and bit operations, which LLVM and g++ -O3
vectorize like any other expression.

How (both backends, identically): a float32 argument is evaluated in float64, where a plain
polynomial is far more accurate than float32 needs: the float64 result is within about 1e-15
(relative) of the exact value, so its one rounding to float32 gives the correctly rounded
result unless the exact value lies that close to a float32 rounding midpoint (then it is 1 ulp
off). Over all 2^32 float32 inputs there is no such case (tests/test_vmath.py); NumPy's own
float32 exp is up to 3 ulp off, its tanh 1.

``exp``: clamp |x| to EXP_LIMIT, keeping its sign (NaN fails the test and passes); n = round(x /
ln 2) by adding and subtracting 1.5 * 2^52 (the sum's low mantissa bits then hold n, so no
float-to-int conversion is needed, which AVX2 has no vector instruction for and which is
undefined for NaN in C++); r = x - n ln2 (Cody-Waite: two constants, n * LN2_HI exact) with
|r| <= ln2 / 2; exp(x) = 2^n * p(r), where 2^n is built in the exponent bits. Overflow to
inf and underflow to 0 or a float32 subnormal then happen in the conversion to float32, with
one rounding, exactly where NumPy's do.

``tanh``: |x| below TANH_SMALL: an odd Taylor polynomial (exact for -0.0 and subnormals);
above: 1 - 2 / (exp(2|x|) + 1) written as (e - 1) / (e + 1) with |x| clamped to TANH_CLAMP
(where float32 tanh is already +-1), the sign restored by a select. Both are computed and
one is selected, so the loop has no branch.

float64 arguments keep libm: there is no wider type to hide the polynomial's error in, and
accuracy comes first. float16 values are computed in float32 registers (fusegen/exprs.py),
so they take the float32 path.

Coefficients: ``python -m fusegen.vmath`` re-derives the exp polynomial (needs mpmath).
"""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path

#: exp(r) ~= 1 + r + r^2 * (c2 + c3 r + ... + c10 r^8) on |r| <= 0.3466 (just over ln2 / 2):
#: near-minimax for the relative error (Lawson iteration, see ``fit_exp_poly``), 2.9e-16 after
#: rounding the coefficients to float64, below float64's own evaluation error.
EXP_POLY = (0.49999999999998324, 0.16666666666611518, 0.04166666666813746, 0.008333333370888577,
            0.0013888888516042496, 0.00019841185208826579, 2.480193183306402e-05,
            2.7635003237095916e-06, 2.7476782228146016e-07)

LOG2E = 1.4426950408889634             # 1 / ln 2
LN2_HI = 0.693147180559663             # ln 2 to 40 bits: n * LN2_HI is exact for |n| < 2^13
LN2_LO = 2.8235290563031577e-13        # ln 2 - LN2_HI
SHIFTER = 6755399441055744.0           # 1.5 * 2^52: x + SHIFTER rounds x to an integer
# exp(104) > FLT_MAX rounds to inf and exp(-104) < 2^-150 to 0 (the smallest float32 subnormal
# is 2^-149): clamping |x| there changes no float32 result and keeps 2^n a normal double. One
# symmetric clamp, copysign(EXP_LIMIT, x), not two constant bounds: g++ threads a select whose
# arm is a constant into a path of its own (exp(89.0) folds to inf), and its if-conversion
# cannot merge the resulting three-way join again, so the loop would stay scalar.
EXP_LIMIT = 104.0

# tanh(x) for |x| < 2^-5: x (1 + x^2 (t3 + x^2 (t5 + x^2 (t7 + x^2 t9)))), Taylor; the next term
# is below 1e-17 relative there. Above, (e - 1) / (e + 1) loses at most ~1e-14 to cancellation.
TANH_POLY = (-1.0 / 3.0, 2.0 / 15.0, -17.0 / 315.0, 62.0 / 2835.0)
TANH_SMALL = 0.03125
# float32 tanh is 1 from |x| ~= 9.01 on (1 - 2e^-2|x| rounds up to 1); 10 keeps exp(2|x|) small.
TANH_CLAMP = 10.0


def template_data() -> dict:
    """The constants as C++ literals, for ``fg::exp_f32``/``fg::tanh_f32`` in _fg_runtime."""
    lit = repr  # the shortest round-tripping text, a valid C++ double literal
    return dict(exp_poly=[lit(c) for c in EXP_POLY], tanh_poly=[lit(c) for c in TANH_POLY],
                log2e=lit(LOG2E), ln2_hi=lit(LN2_HI), ln2_lo=lit(LN2_LO), shifter=lit(SHIFTER),
                exp_limit=lit(EXP_LIMIT), tanh_small=lit(TANH_SMALL), tanh_clamp=lit(TANH_CLAMP))


@functools.lru_cache(maxsize=None)
def source_digest() -> str:
    """Hash of the implementation (this file and the Numba one). Generated Numba sources carry
    it, so Numba's disk cache, keyed by the generated file, never serves a kernel compiled
    with older versions of these functions inlined into it."""
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for name in ("vmath.py", "vmath_numba.py"):
        h.update((here / name).read_bytes())
    return h.hexdigest()[:16]


def fit_exp_poly(degree: int = 10, bound: float = 0.3466, points: int = 300, iterations: int = 40):
    """Re-derive ``EXP_POLY``: p(r) = 1 + r + r^2 s(r), s of degree ``degree - 2``, minimizing
    max |p(r) / e^r - 1| on [-bound, bound] by Lawson's iteratively reweighted least squares
    on Chebyshev points, in 50-digit arithmetic. Returns (coefficients as floats, max error
    of the float coefficients on a 4001-point grid)."""
    import mpmath as mp
    mp.mp.dps = 50
    a = mp.mpf(bound)
    xs = [a * mp.cos(mp.pi * (k + mp.mpf(0.5)) / points) for k in range(points)]
    m = degree - 1
    rows = [[x ** (k + 2) / mp.exp(x) for k in range(m)] for x in xs]
    rhs = [(mp.exp(x) - 1 - x) / mp.exp(x) for x in xs]
    w = [mp.mpf(1) / points] * points
    for _ in range(iterations):
        normal, b = mp.matrix(m, m), mp.matrix(m, 1)
        for i in range(points):
            for j in range(m):
                b[j] += w[i] * rows[i][j] * rhs[i]
                for k in range(m):
                    normal[j, k] += w[i] * rows[i][j] * rows[i][k]
        c = mp.lu_solve(normal, b)
        err = [abs(sum(rows[i][j] * c[j] for j in range(m)) - rhs[i]) for i in range(points)]
        total = sum(w[i] * err[i] for i in range(points))
        w = [w[i] * err[i] / total for i in range(points)]
    coeffs = [float(c[j]) for j in range(m)]
    return coeffs, exp_poly_error(coeffs, bound)


def exp_poly_error(coeffs, bound: float = 0.3466, n: int = 2000) -> float:
    """Max relative error of 1 + r + r^2 s(r) (exact arithmetic on the float coefficients)."""
    import mpmath as mp
    mp.mp.dps = 50
    worst = mp.mpf(0)
    for k in range(-n, n + 1):
        r = mp.mpf(bound) * k / n
        s = mp.mpf(0)
        for c in reversed(coeffs):
            s = s * r + mp.mpf(c)
        worst = max(worst, abs((1 + r + r * r * s) / mp.exp(r) - 1))
    return float(worst)


if __name__ == "__main__":
    coeffs, err = fit_exp_poly()
    print("EXP_POLY =", tuple(coeffs))
    print(f"max relative error {err:.3g}")
