"""fusegen's vectorizable float32 math library: the algorithms, their constants, and the table
that says which function exists under which name in each backend.

Why: libm's ``expf``/``logf``/``sinf``... are opaque calls, so a loop that uses them stays scalar
(llvmlite has no SVML, and g++ vectorizes ``std::exp`` only under ``-ffast-math``, which breaks
the NaN rules). softmax and bias_gelu were 17x and 42x the memory bound because of it. These
versions are straight-line arithmetic, bit operations and selects, which LLVM and g++ -O3
vectorize like any other expression. Three files implement each function identically:
fusegen/vmath_numba.py (Numba, inlined into generated kernels), fusegen/emitters/templates/_vmath.inc.j2
(C++ and CUDA ``__host__ __device__``, rendered from ``template_data``) and, for the constants
and the derivations, this file and fusegen/vmath_fit.py.

How: ``exp``, ``sigmoid``, ``tanh``, ``log1p`` and ``erf``, the functions on the hot paths of
softmax, silu, softplus, mish and gelu, run in float32 lanes (fusegen/vmath_lanes.py; below, "float32 lanes"): float32 arithmetic with
the few extra bits they need carried as unevaluated sums, within 1 ulp of the correctly rounded
result (measured over every float32 input, or every 7th). Every other function widens its float32 argument to float64,
where a plain polynomial is far more accurate than float32 needs: the float64 result is within
a few 1e-16 (relative) of the exact value, so its one rounding to float32 gives the correctly
rounded result unless the exact value lies that close to a float32 rounding midpoint (then it
is 1 ulp off). float32 subnormals are normal float64 numbers, so no function needs a subnormal
path. Why two ways: the float64 way is simpler and correctly rounded, but it runs on half as many
lanes per instruction, after two conversions per element (exp over 16 M elements: 16.0 ms, in
float32 lanes 5.9 ms; see fusegen/vmath_lanes.py). Special values
(signed zeros, infinities, NaN, domain errors) are the Python array API standard's (2024.12),
produced by selects at the end, never by branches.

Bit-identity across backends: g++ and nvcc contract ``a * b + c`` into a fused multiply-add by
default, which rounds differently from Numba's separate operations. So no product in the library
feeds an addition except through an explicit fma (``_fma`` / ``fg::vm_fma``) in both backends, or
through ``vm_mul`` (fma(a, b, +0.0): a rounded product no compiler fuses further). The tests
compile the C++ with -ffp-contract=fast and =off and require the same instructions, and check
nvcc's PTX for a multiply feeding an addition.

The functions (``VMATH_F32`` lists them with their measured accuracy):

``exp`` in float32 lanes: clamp |x| to EXP32_LIMIT, keeping its sign (NaN fails the test and
passes); n = round(x / ln 2) by adding and subtracting 1.5 * 2^23 (the sum's low mantissa bits
then hold n, so no float-to-int conversion is needed, which AVX2 has no vector instruction for
and which is undefined for NaN in C++); r = x - n ln2 (Cody-Waite: two constants, n * LN2_HI32
exact) with |r| <= ln2 / 2; exp(x) = 2^n * p(r), p(r) = 1 + (r + r^2 P(r)) (two roundings: within
1 ulp, 0.4% of inputs 1 ulp off; sigmoid, tanh and erf, which need exp as a pair hi + lo, keep
1 + r_hi apart from the small terms instead), where 2^n is built in the exponent bits, as two
factors so that each is normal and a subnormal result is rounded once. The float64 ``exp``
(exp_core, EXP_POLY) is the same with 1.5 * 2^52 and underlies expm1, erf, sinh and cosh.

``expm1``: exp's reduction, and q(r) = expm1(r) from its own polynomial (EXPM1_POLY, fitted for
the relative error of expm1, which exp's is not for small r); expm1(x) = q for n = 0 (so tiny x
keeps all its digits), else 2^n q + (2^n - 1).

``tanh`` and ``sigmoid`` in float32 lanes: e = exp(-2|x|) or exp(-|x|) as a pair hi + lo, then
(1 - e) / (1 + e) and 1 / (1 + e) or e / (1 + e) by one division and one correction step from its
residual (the pair keeps the digits 1 - e cancels); tanh below TANH32_SMALL is x + x^3 P(x^2),
exact for -0.0 and subnormals. Both paths are computed and one is selected, so the loop has no
branch; tanh's sign is restored by copysign.

``log``, ``log2``, ``log10``: h = 2^k (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)) from the
float64 bits (k by an integer shift, no conversion); log1p(f) = f - (f^2/2 - s (f^2/2 + R(s^2)))
with s = f / (2 + f) (the identity log(1 + f) = 2 atanh(s), arranged so that the rounding errors
are those of the small correction terms; R: LOG_POLY); log(x) = k ln2 + log1p(f) with ln2 in two
parts. log2 and log10 scale log1p(f) and add k (times log10(2) in two parts), so log2(2^k) and
log10(10^k) are exact. asinh, acosh and atanh fold the rounding error of their 1 + w into f.

``log1p`` in float32 lanes: u = 1 + x and its rounding error c (TwoSum: exact whichever operand is
larger), u = 2^k (1 + f) from the float32 bits as above (f = m - 1 exact), and log1p(x) = k ln2 +
f - f^2/2 + (f^3/2) Q(f) + c 2^-k (1 - f + f^2) (no division: a degree-7 Q in f instead of log's
s = f / (2 + f), whose division costs more than the extra terms). k LN2_HI32 + f and f^2/2 are
split into rounded values and their exact errors, which join the small terms, so the last
addition is the only large rounding. Tiny and subnormal x come out exact through c (u = 1).

``erf`` in float32 lanes: below 1, x + x P(x^2) (one fma: exact for -0.0 and subnormals); from 1
to 3.92 (where float32 erf reaches 1), 1 - exp(L(x - 1)) with L ~= log(erfc) (smooth and free of
cancellation, so L's error is erfc's relative error, small against erf); exp as a pair and 1 - hi
with its rounding error (Fast2Sum). Both computed, one selected, the sign restored by copysign.
erfc would need its own fit out to 10.05 (float32 erfc's underflow): not provided.

``sin``, ``cos``, ``tan``: the argument reduction is exact enough for every float32, with no
table and no branch. x * 2/pi is summed chunk by chunk: 2/pi is held as 8 chunks of 28 bits
(TRIG_CHUNKS), so each x * chunk is exact in float64 (24 + 28 bits); after each of the first 5
the running sum is split into its nearest integer (whole quarter turns, kept mod 4) and the
remaining fraction in [-1/2, 1/2], and that split is exact: the fraction never carries more than
53 significant bits into the next step. The last 3 chunks add less than 2^-12 and are summed
apart, off the dependency chain. The result r = f pi/2, |r| <= pi/4, is within 2^-66 (relative)
even for 16367173 * 2^72, the float32 closest to a multiple of pi/2 (2^-29.9 quarter turns). sin
and cos of r are two polynomials, both computed; the quadrant selects and signs them; tan is one
division of the two. Why not Cody-Waite (x - n pi/2 with pi/2 in parts) with a select for huge
|x|: a branch-free loop computes both paths for every element, so the rare path's cost is paid
everywhere anyway, and Cody-Waite alone is exact only while n pi/2's parts stay exact (|x| below
about 2^25). Why not Payne-Hanek with a table of 2/pi indexed by the exponent: the lookup is a
gather, which LLVM's cost model for this CPU and g++ may well refuse to vectorize, and which is
slow where they do. The price: the 5 chained steps make sin about 3x exp's cost.

``atan``, ``atan2``, ``asin``, ``acos``: one core, atan2(|y|, |x|) in [0, pi/2]: u = lo / hi, or
(lo - hi) / (lo + hi) plus pi/4 where lo / hi > tan(pi/8) (one division either way; for float32
inputs the numerator and denominator are exact in float64), |u| <= tan(pi/8), atan(u) = u + u^3
A(u^2); pi/2 minus that if |y| > |x|. atan2 then takes pi minus it where x < 0 or x = -0.0 and
y's sign; asin(x) = atan2(x, sqrt((1 - x)(1 + x))), acos(x) = atan2(sqrt((1 - x)(1 + x)), x),
(1 - x)(1 + x) being one rounding from exact. The standard's infinities and zeros come out of the
core's conventions (inf/inf = pi/4, finite/inf = 0, 0/0 = 0) and the sign handling.

``sinh`` = (E + E / (E + 1)) / 2 with E = expm1(|x|) (no cancellation near 0), ``cosh`` = (e + 1/e)
/ 2; ``asinh`` = log1p(a + a^2 / (1 + sqrt(1 + a^2))), ``acosh`` = log1p(d + sqrt(d (d + 2))) with
d = x - 1 (exact), both log(2x) from 2^28 on; ``atanh`` = log1p(2a / (1 - a)) / 2 (1 - a exact).
The log1p argument is a float64 here, so 1 + w and its rounding error (Fast2Sum) both go into
log's reduction. ``hypot`` = sqrt(x^2 + y^2) in float64: the squares are exact and cannot
overflow, one rounding for the sum, one for the root. ``cbrt``: |x| = m 2^(3j + r) from the bits
(j = floor(e / 3) by an integer multiply), cbrt(m 2^r) from CBRT_POLY times cbrt(2^r) and one
Halley step, then times 2^j.

float64 arguments keep libm: there is no wider type to hide the polynomial's error in, and
accuracy comes first. float16 values are computed in float32 registers (fusegen/exprs.py),
so they take the float32 path.
"""
from __future__ import annotations

import functools
import hashlib
import struct
from pathlib import Path

# --- exp (float64), expm1 ---------------------------------------------------------------
#: exp(r) ~= 1 + r + r^2 * (c2 + c3 r + ... + c10 r^8) on |r| <= 0.3466 (just over ln2 / 2):
#: near-minimax for the relative error (vmath_fit.FITS["EXP_POLY"]), 2.9e-16 after rounding the
#: coefficients to float64, below float64's own evaluation error.
EXP_POLY = (0.49999999999998324, 0.16666666666611518, 0.04166666666813746, 0.008333333370888577,
            0.0013888888516042496, 0.00019841185208826579, 2.480193183306402e-05,
            2.7635003237095916e-06, 2.7476782228146016e-07)
#: expm1(r) ~= r + r^2 * (e2 + e3 r + ... + e11 r^9) on |r| <= 0.3466: relative error 3.4e-17.
EXPM1_POLY = (0.5000000000000006, 0.16666666666666588, 0.04166666666657675, 0.00833333333338948,
              0.0013888888931564815, 0.0001984126971917112, 2.4801505275523355e-05,
              2.7557407394285074e-06, 2.7626036716559644e-07, 2.505382132177562e-08)

LOG2E = 1.4426950408889634             # 1 / ln 2
LN2_HI = 0.693147180559663             # ln 2 to 40 bits: n * LN2_HI is exact for |n| < 2^13
LN2_LO = 2.8235290563031577e-13        # ln 2 - LN2_HI
SHIFTER = 6755399441055744.0           # 1.5 * 2^52: x + SHIFTER rounds x to an integer
SHIFTER_BITS = 0x4338000000000000      # its bits: bits(SHIFTER) + k encodes SHIFTER + k, |k| < 2^51
# exp(104) > FLT_MAX rounds to inf and exp(-104) < 2^-150 to 0 (the smallest float32 subnormal
# is 2^-149): clamping |x| there changes no float32 result and keeps 2^n a normal double. One
# symmetric clamp, copysign(EXP_LIMIT, x), not two constant bounds: g++ threads a select whose
# arm is a constant into a path of its own (exp(89.0) folds to inf), and its if-conversion
# cannot merge the resulting three-way join again, so the loop would stay scalar.
EXP_LIMIT = 104.0


# --- float32 lanes: exp, sigmoid, tanh (fusegen/vmath_lanes.py) -------------------------------
# The same reduction as exp's above in float32: n = round(x / ln 2) by the shifter 1.5 * 2^23,
# r = x - n ln 2 in two parts, r_hi exact (LN2_HI32 has 16 bits and |n| <= 150, so n * LN2_HI32
# has 24; r_hi is a multiple of 2^-25 below 1/2), r_lo = -n LN2_LO32 rounded. exp(r) = 1 + r_hi +
# (r_lo + r^2 P(r)): 1 + r_hi and its rounding error are kept apart (Fast2Sum) and the small terms
# added to the error first, so the one rounding that matters is the last. The budget (relative
# to exp(r) in [0.7, 1.42]): the fit 3.8e-9, r = fl(r_hi + r_lo) times exp's slope r, and the
# float32 roundings of the small terms, about 2^-26.5 in all, plus the final half ulp. 2^n is two
# normal factors, so a subnormal result is rounded once, by the second multiplication.
# sigmoid and tanh divide by 1 + e with e = exp(-|x|) or exp(-2|x|) kept as hi + lo, one
# division and one correction step from its residual: their only large error is the last
# rounding. Measured maxima: VMATH_F32's max_ulp.
#: exp(r) ~= 1 + r + r^2 (c2 + c3 r + ... + c6 r^4) on |r| <= 0.3466: vmath_fit's "EXP32_POLY" fit,
#: its coefficients rounded to float32 (stored so, exactly): relative error 3.8e-9 (2^-28).
EXP32_POLY = (0.4999999403953552, 0.1666652113199234, 0.04166838899254799, 0.008368715643882751,
              0.0013814592966809869)
LOG2E32 = 1.4426950216293335           # float32(1 / ln 2)
SHIFTER32 = 12582912.0                 # 1.5 * 2^23: x + SHIFTER32 rounds x to an integer (float32)
SHIFTER32_BITS = 0x4B400000            # its bits: bits(SHIFTER32 + n) - this = n for |n| < 2^22
LN2_HI32 = 0.693145751953125           # ln 2 to 16 bits (45426 / 2^16)
LN2_LO32 = 1.4286067653302662e-06      # float32(ln 2 - LN2_HI32)
# exp(-104) < 2^-150 rounds to 0 and exp(88.73) overflows; |x| <= 104 keeps |n| <= 150, so each
# factor of 2^n = 2^(n >> 1) 2^(n - (n >> 1)) is a normal float32.
EXP32_LIMIT = 104.0
# exp(x - max) summed over the max's own slice (logsumexp, cross-entropy, log_softmax:
# plan/fusedmath.py finds them): the argument is at most 0 and the sum holds the max's exp(0) = 1,
# so one clamp from below, at EXP32_SUM_FLOOR where 2^n is still one normal float32 (n >= -126),
# and one scaling factor: 15 operations instead of exp_f32's 22. Bit for bit exp_f32 on
# [EXP32_SUM_FLOOR, 0]; below it exp(EXP32_SUM_FLOOR) ~ 1.6e-38 stands in for a smaller value,
# which changes no bit of a sum that holds a 1 unless the slice has more than 2^100 elements.
EXP32_SUM_FLOOR = -87.0
# tanh(x) = x + x^3 (t3 + t5 x^2) for |x| < 2^-7 (the next term is below 2^-43 relative); from
# there on the quotient: 1 - e_hi cancels, but e's low part holds the digits it loses.
TANH32_POLY = (-1.0 / 3.0, 2.0 / 15.0)
TANH32_SMALL = 0.0078125
TANH32_CLAMP = 10.0                    # tanh(|x|) rounds to 1 from 9.01 on; exp(-20) stays normal

# log1p in float32 lanes: u = 1 + x and its rounding error c (TwoSum, exact); u = 2^k (1 + f) with
# 1 + f in [sqrt(1/2), sqrt(2)) from the bits (f = m - 1 exact, |f| <= 0.4143); then
# log1p(x) = k ln2 + f - f^2/2 + (f^3/2) Q(f) + c 2^-k (1 - f + f^2), the last term being
# log1p's slope at f times c 2^-k (to 2^-24 relative of the result: c is at most half an ulp of u).
# k LN2_HI32 + f is split into its rounded sum and the sum's error (Fast2Sum), f^2/2 into a rounded
# product and its error (fma); everything else is a small correction added to the error first, so
# the one large rounding is the last. The budget: Q's fit 2^-27.3, the corrections' roundings
# about 2^-25.5 of the result (the f^2/2 term, at f = 0.41), plus the final half ulp.
#: Q(f) ~= (log1p(f) - f + f^2/2) / (f^3/2) for f in [sqrt(1/2) - 1, sqrt(2) - 1]: vmath_fit's
#: "LOG1P32_POLY" (float32 coefficients): relative error of log1p 5.8e-9 (2^-27.3).
LOG1P32_POLY = (0.6666666269302368, -0.5000163912773132, 0.4000248610973358, -0.3324682116508484,
                0.28403082489967346, -0.2631910741329193, 0.25524938106536865, -0.1527380794286728)
SQRT_HALF32_BITS = 0x3F3504F3          # bits of float32(sqrt(1/2)): bits(u) - this, >> 23, is k
# erf in float32 lanes: below ERF32_SPLIT, x + x P(x^2) (one rounding: fma(x, P, x), exact for -0.0
# and subnormals); from there, erf(t) = 1 - erfc(t) with erfc(t) = exp(L(t - 1)) and L ~= log(erfc)
# (smooth, no cancellation: L's error is erfc's relative error, and a float32 L's rounding, half an
# ulp of 1.85 at t = 1, is 2^-25.5 of erfc(1) = 0.157, 0.16 ulp of erf(1)); exp as the pair hi + lo
# and 1 - hi's rounding error kept (Fast2Sum), so the final subtraction is the one rounding.
#: erf(x) = x + x P(x^2), |x| < 1: vmath_fit's "ERF32_SMALL" (float32 coefficients): relative error of erf 1.4e-9.
ERF32_SMALL = (0.12837916612625122, -0.3761262595653534, 0.11283578723669052, -0.026853347197175026,
               0.005187162198126316, -0.0007997853099368513, 7.806903158780187e-05)
#: log(erfc(t)) ~= L(t - 1), 1 <= t <= 3.92: vmath_fit's "ERF32_BIG", the powers of t - 1 (exact for
#: t >= 1; no cancellation near t = 1, where erfc weighs most), float32 coefficients but the first,
#: log(erfc(1)) to 48 bits as a float32 pair (its rounding alone would cost 9e-9): relative error of
#: erf 1.3e-9. The pair's low part scales exp's result (fma(hi, lo0, lo)).
ERF32_BIG = (-1.849605515652751, -2.6389667987823486, -0.8431190252304077, -0.041496194899082184,
             0.009880363009870052, -0.0018162146443501115, 0.00018237408949062228)
ERF32_SPLIT = 1.0
# float32 erf(x) is 1 from x = 3.9192059 on (erfc(x) < 2^-25 there): clamping |x| to 3.92 keeps the
# polynomial inside its fitted range; inf -> 1, and NaN passes.
ERF32_CLAMP = 3.92

# softplus in float32 lanes (a chain computed as one function, plan/fusedmath.py): max(x, 0) +
# log1p(e) with e = exp(-|x|) in (0, 1] as a pair hi + lo. e is already inside the polynomial's range,
# so log1p needs no reduction: log1p(e) = e - e^2/2 + e^3 G(e), e^2/2 as a rounded product and its
# exact error (fma), the cubic term (at most a sixth of the result) rounded; the small terms are added
# first, and max(x, 0) + e by Fast2Sum, so the one large rounding is the last. softplus's result is
# at least its log1p part, so G's error weighs relative to log1p(e).
#: G(e) ~= (log1p(e) - e + e^2/2) / e^3 for 0 <= e <= 1: vmath_fit's "SOFTPLUS32_POLY" (float32
#: coefficients): relative error of log1p(e) 1.2e-9 (2^-29.6).
SOFTPLUS32_POLY = (0.3333309292793274, -0.2499331533908844, 0.19926369190216064, -0.16228516399860382,
                   0.12679868936538696, -0.08592236787080765, 0.0443015992641449, -0.014683730900287628,
                   0.0022766876500099897)

# --- log, log1p, log2, log10 -----------------------------------------------------------------
#: R(z) = z (g1 + g2 z + ... + g7 z^6) ~= 2 atanh(s) / s - 2, z = s^2 <= 0.0295 (|s| <= 0.1716):
#: the error of log1p(f) it causes is below 2e-18 relative.
LOG_POLY = (0.6666666666666734, 0.3999999999941464, 0.2857142874239458, 0.22222198572543195,
            0.18183564356840645, 0.15314049814874098, 0.14795956708164054)
SQRT_HALF_BITS = 0x3FE6A09E667F3BCD    # bits of sqrt(1/2): bits(h) - this, >> 52, is k
LOG10_2_HI = 0.3010299956640665        # log10(2) to 40 bits: k * LOG10_2_HI exact for |k| < 2^13
LOG10_2_LO = -8.532344317057107e-14    # log10(2) - LOG10_2_HI
LOG10E = 0.4342944819032518            # 1 / ln 10

# --- sin, cos, tan -------------------------------------------------------------------------------
#: 2/pi in 8 chunks of 28 bits (chunk i: bits 28 i + 1 ... 28 i + 28 after the binary point), so
#: x * chunk is exact for every float32 x (24 + 28 bits): vmath_fit.two_over_pi_chunks(8, 28).
TRIG_CHUNKS = (0.6366197690367699, 3.3308114738561656e-09, 2.276010047810136e-18, 2.5268260189002822e-26,
               1.6682867657019525e-34, 1.158871328288855e-43, 7.053959174404295e-52, 8.910067885731021e-60)
#: The first TRIG_FULL chunks can contribute whole quarter turns (x * chunk >= 1/2 for some float32
#: x < 2^128), so after each the running sum is reduced mod 4 (quadrant) and mod 1 (fraction); the
#: rest are only added. 224 bits in all: the float32 closest to a multiple of pi/2 is 16367173 *
#: 2^72, 2^-29.86 quarter turns away (vmath_fit.reduction_worst_case), and the bits left out are
#: below 2^-96 of a quarter turn for any float32, so the reduced argument keeps 2^-66 relative.
TRIG_FULL = 5
PIO2_HI = 1.5707963267948966           # pi/2 rounded to float64
PIO2_LO = 6.123233995736766e-17        # pi/2 - PIO2_HI
#: sin(r) = r + r^3 S(r^2), |r| <= pi/4 (1 + 2^-10): relative error 8e-18.
SIN_POLY = (-0.1666666666666663, 0.008333333333322007, -0.00019841269829497252,
            2.755731358827874e-06, -2.5050742417632166e-08, 1.5895911424987852e-10)
#: cos(r) = 1 - r^2/2 + r^4 C(r^2), |r| <= pi/4 (1 + 2^-10): relative error 1.6e-18.
COS_POLY = (0.041666666666666595, -0.0013888888888872897, 2.4801587288749738e-05,
            -2.7557314149116363e-07, 2.0875696644753654e-09, -1.1358314459320228e-11)

# --- atan, atan2, asin, acos ----------------------------------------------------------------------
#: atan(u) = u + u^3 A(u^2), |u| <= tan(pi/8) (1 + 2^-20): relative error 5e-18.
ATAN_POLY = (-0.333333333333332, 0.1999999999995324, -0.1428571428016597, 0.1111111078212751,
             -0.09090897724506916, 0.0769205970482681, -0.06663099066520857, 0.05847858311476554,
             -0.05039186234353201, 0.03806203655114669, -0.01790492936827541)
TAN_PI8 = 0.41421356237309503          # tan(pi/8) = sqrt(2) - 1: above it, atan(t) = pi/4 + atan((t-1)/(t+1))
PI_HI = 3.141592653589793              # pi, and its remainder; pi/2 and pi/4 are these halved
PI_LO = 1.2246467991473532e-16
# asinh, acosh: from 2^28 on, log(2x) is the result to 2^-58 (relative), and x^2 + 1 no longer
# matters; below, log1p(x + x^2 / (1 + sqrt(1 + x^2))) and log1p(d + sqrt(d (d + 2))), d = x - 1.
ASINH_BIG = 268435456.0

# --- cbrt --------------------------------------------------------------------------------------
#: cbrt(m) ~= P(m) for 1 <= m <= 2 (relative error 1.2e-6), scaled by cbrt(2^r), r = e mod 3, then
#: one Halley step (cubic convergence: ~2e-18).
CBRT_POLY = (0.4733320393012346, 0.8381551827162871, -0.4692219045524485, 0.2027725138229704,
             -0.05038493145454188, 0.00534833145140777)
CBRT2 = 1.2599210498948732             # cbrt(2), cbrt(4)
CBRT4 = 1.5874010519681996


def _f32(v: float) -> float:
    """v rounded to float32 (to nearest), as the Numba twins' np.float32(v) rounds it."""
    return struct.unpack("f", struct.pack("f", v))[0]


def _entry(numba: str, deps: tuple[str, ...], max_ulp: int, measured: str, arity: int = 1) -> dict:
    return dict(numba=numba, cpp="fg::" + numba, deps=deps, arity=arity, max_ulp=max_ulp, measured=measured)


#: Every float32 function: its name in fusegen.vmath_numba (``numba``) and in the C++ partial
#: (``cpp``), the C++ blocks of _vmath.inc.j2 it needs besides its own (``deps``, in include
#: order), its arity, and its measured accuracy: the largest distance in ulp from the correctly
#: rounded result (``max_ulp``) over all 2^32 float32 inputs (``measured="exhaustive"``,
#: benchmarks/vmath_exhaustive.py), every 7th bit pattern (``"strided"``: 613 M inputs, every
#: binade, both signs) or over benchmarks/ulp_table.py's sweep (``"sweep"``). Keys are
#: the Python array API's function names (``sigmoid`` is fusegen's).
VMATH_F32: dict[str, dict] = {
    "exp": _entry("exp_f32", ("lanes",), 1, "exhaustive"),
    "expm1": _entry("expm1_f32", ("exp_core", "expm1_core"), 0, "sweep"),
    "tanh": _entry("tanh_f32", ("lanes",), 1, "strided"),
    "sigmoid": _entry("sigmoid_f32", ("lanes",), 1, "strided"),
    "log": _entry("log_f32", ("log_core",), 0, "sweep"),
    "log1p": _entry("log1p_f32", ("lanes",), 1, "sweep"),
    "log2": _entry("log2_f32", ("log_core",), 0, "sweep"),
    "log10": _entry("log10_f32", ("log_core",), 0, "sweep"),
    "erf": _entry("erf_f32", ("lanes",), 1, "sweep"),
    "sin": _entry("sin_f32", ("trig_core",), 0, "sweep"),
    "cos": _entry("cos_f32", ("trig_core",), 0, "sweep"),
    "tan": _entry("tan_f32", ("trig_core",), 0, "sweep"),
    "atan": _entry("atan_f32", ("atan_core",), 0, "sweep"),
    "atan2": _entry("atan2_f32", ("atan_core",), 0, "sweep", arity=2),
    "asin": _entry("asin_f32", ("atan_core",), 0, "sweep"),
    "acos": _entry("acos_f32", ("atan_core",), 0, "sweep"),
    "sinh": _entry("sinh_f32", ("exp_core", "expm1_core"), 0, "sweep"),
    "cosh": _entry("cosh_f32", ("exp_core",), 0, "sweep"),
    "asinh": _entry("asinh_f32", ("log_core", "one_plus"), 0, "sweep"),
    "acosh": _entry("acosh_f32", ("log_core", "one_plus"), 0, "sweep"),
    "atanh": _entry("atanh_f32", ("log_core", "one_plus"), 0, "sweep"),
    "hypot": _entry("hypot_f32", (), 0, "sweep", arity=2),
    "cbrt": _entry("cbrt_f32", (), 0, "sweep"),
}

#: Float32-lane functions of a chain of the functions above, not in the array API: what
#: fusegen/plan/fusedmath.py computes a user's composition with (same fields as VMATH_F32;
#: tests/test_fusedmath.py measures them).
FUSED_F32: dict[str, dict] = {
    "tanh_softplus": _entry("tanh_softplus_f32", ("lanes", "fast_two_sum"), 1, "sweep"),
    "softplus": _entry("softplus_f32", ("lanes", "fast_two_sum"), 1, "sweep"),
    "exp_shifted": _entry("exp_shifted_f32", ("lanes",), 1, "exhaustive"),   # exp_f32's bits on its domain
}

#: The C++ partial's blocks in the order it defines them (a helper before its users).
CPP_BLOCKS = ("lanes", "exp", "exp_shifted", "sigmoid", "tanh", "fast_two_sum", "tanh_softplus", "softplus", "log1p", "erf", "exp_core", "expm1_core", "expm1", "log_core", "log",
              "log2", "log10", "trig_core", "sin", "cos", "tan", "atan_core", "atan", "atan2", "asin", "acos",
              "sinh", "cosh", "one_plus", "asinh", "acosh", "atanh", "hypot", "cbrt")


def blocks_for(functions) -> list[str]:
    """The _vmath.inc.j2 blocks that define ``functions`` (VMATH_F32 keys), in include order."""
    table = {**VMATH_F32, **FUSED_F32}
    unknown = set(functions) - set(table)
    if unknown:
        raise KeyError(f"no vectorized float32 function {sorted(unknown)}; known: {sorted(table)}")
    need = set(functions)
    for name in functions:
        need.update(table[name]["deps"])
    return [b for b in CPP_BLOCKS if b in need]


def template_data(functions=("exp", "tanh", "sigmoid")) -> dict:
    """The constants as C++ literals, and the blocks of _vmath.inc.j2 to emit for ``functions``
    (by default those the expression tables use today)."""
    lit = repr  # the shortest round-tripping text, a valid C++ double literal

    def lits(values):
        return [lit(float(v)) for v in values]

    def lits32(values):  # float32 values, written so that a float literal (suffix f) reads them exactly
        return [lit(_f32(v)) for v in values]
    return dict(
        blocks=blocks_for(functions),
        exp32_poly=lits32(EXP32_POLY), log2e32=lit(LOG2E32),
        shifter32=lit(SHIFTER32), shifter32_bits=hex(SHIFTER32_BITS), ln2_hi32=lit(LN2_HI32), ln2_lo32=lit(LN2_LO32),
        exp32_limit=lit(EXP32_LIMIT), exp32_sum_floor=lit(EXP32_SUM_FLOOR), tanh32_poly=lits32(TANH32_POLY),
        tanh32_small=lit(TANH32_SMALL), tanh32_clamp=lit(TANH32_CLAMP), log1p32_poly=lits32(LOG1P32_POLY),
        sqrt_half32_bits=hex(SQRT_HALF32_BITS), erf32_small=lits32(ERF32_SMALL),
        softplus32_poly2=lits32(2.0 * c for c in SOFTPLUS32_POLY),   # 2 G: the doubling is exact
        erf32_big=lits32(ERF32_BIG), erf32_big_lo=lit(_f32(ERF32_BIG[0] - _f32(ERF32_BIG[0]))),
        erf32_split=lit(ERF32_SPLIT), erf32_clamp=lit(ERF32_CLAMP),
        exp_poly=lits(EXP_POLY), expm1_poly=lits(EXPM1_POLY), log_poly=lits(LOG_POLY),
        log2e=lit(LOG2E), ln2_hi=lit(LN2_HI), ln2_lo=lit(LN2_LO), shifter=lit(SHIFTER),
        shifter_bits=hex(SHIFTER_BITS), exp_limit=lit(EXP_LIMIT),
        sqrt_half_bits=hex(SQRT_HALF_BITS), log10_2_hi=lit(LOG10_2_HI),
        log10_2_lo=lit(LOG10_2_LO), log10e=lit(LOG10E), trig_chunks=lits(TRIG_CHUNKS), trig_full=TRIG_FULL,
        pio2_hi=lit(PIO2_HI), pio2_lo=lit(PIO2_LO), sin_poly=lits(SIN_POLY), cos_poly=lits(COS_POLY),
        atan_poly=lits(ATAN_POLY), tan_pi8=lit(TAN_PI8), pi_hi=lit(PI_HI), pi_lo=lit(PI_LO),
        pio4_hi=lit(PIO2_HI / 2), pio4_lo=lit(PIO2_LO / 2), asinh_big=lit(ASINH_BIG), cbrt_poly=lits(CBRT_POLY),
        cbrt2=lit(CBRT2), cbrt4=lit(CBRT4))


def render_cpp(functions=None, namespace: str = "fg", headers: bool = True) -> str:
    """_vmath.inc.j2 rendered on its own, inside ``namespace`` (for harnesses and tests; generated
    kernels include it from _fg_runtime.inc.j2). ``None``: every function."""
    import jinja2
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "emitters" / "templates")),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             trim_blocks=True, lstrip_blocks=True)
    body = env.get_template("_vmath.inc.j2").render(
        vmath=template_data(VMATH_F32 if functions is None else functions))
    head = ("#include <cmath>\n#include <cstdint>\n#include <cstring>\n"
            "#if !defined(FG_INLINE)\n#define FG_INLINE inline __attribute__((always_inline))\n#endif\n")
    return (head if headers else "") + f"namespace {namespace} {{\n{body}}}  // namespace {namespace}\n"


@functools.lru_cache(maxsize=None)
def source_digest() -> str:
    """Hash of the implementation (this file and the Numba one). Generated Numba sources carry
    it, so Numba's disk cache, keyed by the generated file, never serves a kernel compiled
    with older versions of these functions inlined into it."""
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for name in ("vmath.py", "vmath_numba.py", "vmath_lanes.py"):
        h.update((here / name).read_bytes())
    return h.hexdigest()[:16]
