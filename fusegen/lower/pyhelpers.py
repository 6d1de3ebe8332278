"""The Python helpers of the array API's elementwise functions (#18), shared by the Numba CPU and
numba-cuda sources: NumPy's floor_divide and remainder (``npy_divmod``: every special case,
integer division by zero gives 0 and ``INT_MIN // -1`` wraps, with no trap), its shifts (a count
outside ``[0, bits)`` gives 0, or -1 for a negative value shifted right), logaddexp, and for
numba-cuda (which has no ``rint``) round half to even.

``python_helpers(math)`` is the source text, with ``math`` the module whose floor, fmod, copysign,
log1p and exp the helpers call: ``"np"`` in CPU kernels (NumPy's scalar functions keep float32 in
float32), ``"math"`` in CUDA kernels (libdevice; NumPy's scalars under the simulator). Each
backend wraps every name in ``HELPER_NAMES`` as an inlined device or njit function.
"""
from __future__ import annotations

import re

from ..plan.exprs import VMATH_NUMBA_IMPORTS

def vmath_imports(body: str) -> str:
    """The import line of fusegen.vmath's float32 functions that a generated CPU ``body`` calls
    (``_<name>_f32(``), or "" when it calls none: a kernel without them never imports (and
    decorates) the vmath module, 15 ms of a warm start."""
    used = [n for n in VMATH_NUMBA_IMPORTS if re.search(rf"(?<!\w)_{n}_f32\(", body)]   # (not tanh_softplus for softplus)
    if not used:
        return ""
    return "from fusegen.vmath_numba import " + ", ".join(f"{n}_f32 as _{n}_f32" for n in used) + "\n"

#: the functions ``python_helpers`` defines
HELPER_NAMES = ("_fg_floor_divide", "_fg_remainder", "_fg_floor_divide_int", "_fg_remainder_int", "_fg_shl",
                "_fg_shr", "_fg_shr_u", "_fg_logaddexp", "_fg_trunc", "_fg_rint")
#: the functions ``COMPLEX_HELPERS`` defines (a kernel that computes with complex values has them)
COMPLEX_HELPER_NAMES = ("_fg_cmul", "_fg_cdiv", "_fg_cpow", "_fg_cexpm1", "_fg_clog1p", "_fg_cscale", "_fg_cround", "_fg_csign",
                "_fg_csinh", "_fg_ccosh", "_fg_ctanh", "_fg_casinh", "_fg_catanh", "_fg_cacos", "_fg_cacosh",
                "_fg_ctimes_i", "_fg_cback")

_TEXT = '''

def _fg_floor_divide(a, b, one):  # NumPy's floor_divide on floats (npy_divmod), but where an
    if b == 0 or M.isinf(a) or M.isinf(b):  # operand is infinite the standard's table: the quotient
        return a / b                        # (inf // 2 = inf, -1 // inf = -0; NumPy: nan, -1)
    mod = M.fmod(a, b)
    div = (a - mod) / b
    if mod != 0 and ((b < 0) != (mod < 0)):
        div = div - one
    if div != 0:
        fl = M.floor(div)
        if div - fl > 0.5:
            fl = fl + one
        return fl
    return M.copysign(div - div, a / b)


def _fg_remainder(a, b, one):  # NumPy's remainder on floats: the sign of the divisor
    mod = M.fmod(a, b)
    if b == 0:
        return mod
    if mod != 0:
        if (b < 0) != (mod < 0):
            mod = mod + b
        return mod
    return M.copysign(mod - mod, b)


def _fg_floor_divide_int(a, b):  # x // 0 is 0 and INT_MIN // -1 wraps, as NumPy's (no SIGFPE)
    if b == 0:
        return a - a
    if b == -1:
        return (a - a) - a
    return a // b


def _fg_remainder_int(a, b):
    if b == 0 or b == -1:
        return a - a
    return a % b


def _fg_shl(a, b, bits):  # NumPy: a count outside [0, bits) shifts everything out
    if b < 0 or b >= bits:
        return a - a
    return a << b


def _fg_shr(a, b, bits):
    if b < 0 or b >= bits:
        return (a - a) - (a < 0)
    return a >> b


def _fg_shr_u(a, b, bits):
    if b >= bits:
        return a - a
    return a >> b


def _fg_logaddexp(x, y):  # NumPy's npy_logaddexp: equal infinities give themselves
    if x == y:
        return x + 0.6931471805599453
    tmp = x - y
    if tmp > 0:
        return x + M.log1p(M.exp(-tmp))
    if tmp <= 0:
        return y + M.log1p(M.exp(tmp))
    return tmp


def _fg_trunc(x):
    return M.trunc(x) if x - x == 0 else x


def _fg_rint(x, one):  # round half to even, the sign of a zero kept (numba-cuda has no rint)
    if not (x - x == 0):
        return x
    f = M.floor(x)
    d = x - f
    half = one / (one + one)
    if d > half or (d == half and M.fmod(f, one + one) != 0):
        f = f + one
    return M.copysign(f, x)

'''


# complex numbers (plan/cexprs.py): NumPy's formulas, part by part, so that every backend gives
# NumPy's results (Numba's own complex division raises on a zero divisor; multiplying a complex by
# a real through complex arithmetic would turn inf * 0 into NaN in the other part). They call
# ``math`` (NumPy's scalars under the CUDA simulator) and ``cmath``.
COMPLEX_HELPERS = '''

import cmath  # (complex numbers: plan/cexprs.py)


def _fg_cmul(a, b):  # NumPy's: (ar*br - ai*bi, ar*bi + ai*br), no Annex G recovery
    return complex(a.real * b.real - a.imag * b.imag, a.real * b.imag + a.imag * b.real)


def _fg_cdiv(a, b):  # NumPy's Smith division; a zero divisor divides each part by |0|
    ar, ai, br, bi = a.real, a.imag, b.real, b.imag
    abr, abi = abs(br), abs(bi)
    if abr >= abi:
        if abr == 0 and abi == 0:
            return complex(ar / abr, ai / abi)
        rat = bi / br
        scl = 1.0 / (br + bi * rat)
        return complex((ar + ai * rat) * scl, (ai - ar * rat) * scl)
    rat = br / bi
    scl = 1.0 / (bi + br * rat)
    return complex((ar * rat + ai) * scl, (ai * rat - ar) * scl)


def _fg_cpow(a, b):  # NumPy's: z ** 0 is 1; 0 ** w is 0 for Re(w) > 0, else NaN; else exp(w log z)
    if b.real == 0 and b.imag == 0:
        return complex(1.0, 0.0)
    if a.real == 0 and a.imag == 0:
        if b.real > 0:
            return complex(0.0, 0.0)
        return complex(float("nan"), float("nan"))
    w = cmath.log(a)   # (no helper calls a helper: numba-cuda compiles nested ones for a present GPU only)
    return cmath.exp(complex(b.real * w.real - b.imag * w.imag, b.real * w.imag + b.imag * w.real))


def _fg_cexpm1(z):  # NumPy's: expm1(x) cos(y) - 2 sin(y/2)^2 + i exp(x) sin(y); the standard's table
    x, y = z.real, z.imag   # where a part is not finite (NumPy's formula gives expm1(inf) = inf + NaN j)
    if not (x - x == 0 and y - y == 0):
        if x != x:
            return complex(x, y if y == 0 else x)
        if math.isinf(x) and x < 0:
            return complex(-1.0, math.copysign(0.0, y) if y - y == 0 else 0.0)
        if math.isinf(x):
            if y == 0:
                return complex(x, y)
            if y - y == 0:
                return complex(x * math.cos(y), x * math.sin(y))
            return complex(x, y - y)
        return complex(y - y, y - y)
    s = math.sin(z.imag / 2)   # (+ 0.0: expm1(-0 + 0j) is +0 + 0j in the standard's table)
    return complex(math.expm1(z.real) * math.cos(z.imag) - 2 * s * s + 0.0, math.exp(z.real) * math.sin(z.imag))


def _fg_clog1p(z):  # NumPy's: log|1 + z| + i arg(1 + z)
    x = z.real + 1
    return complex(math.log(math.hypot(x, z.imag)), math.atan2(z.imag, x))


def _fg_cscale(z, s):  # z * s for a real s, part by part
    return complex(z.real * s, z.imag * s)


def _fg_cround(z):  # the standard's round on complex numbers: each part, ties to even (_fg_rint)
    return complex(_fg_rint(z.real, 1.0), _fg_rint(z.imag, 1.0))


def _fg_csign(z):  # the standard's sign, z / |z| and 0 at 0, with NumPy's infinities: inf + 1j gives 1
    x, y = z.real, z.imag
    if math.isinf(x) and not math.isinf(y):  # (an infinite part wins over a NaN one)
        return complex(math.copysign(1.0, x), math.copysign(0.0, y))
    if math.isinf(y) and not math.isinf(x):
        return complex(math.copysign(0.0, x), math.copysign(1.0, y))
    if x != x or y != y or math.isinf(x):
        return complex(float("nan"), float("nan"))
    a = abs(z)
    if a == 0:
        return complex(0.0, 0.0)
    return complex(x / a, y / a)


# Numba's cmath (and numba-cuda's copy) misses some of C99 Annex G's special values for a
# non-finite argument (sinh(NaN + 0j) is NaN + NaNj, not NaN + 0j; atanh(NaN + 0j) gives pi/2);
# these give them as glibc does (the array API's tables: the sign of an unspecified zero or
# infinity is glibc's), and the finite arguments to cmath. sin, cos, tan, asin and atan are
# Annex G's identities, spelled by the rows: sin(z) = -i sinh(iz), cos(z) = cosh(iz), ...

def _fg_csinh(z):
    x, y = z.real, z.imag
    if x != x and y == 0:
        return complex(x, y)
    if x == 0 and not (y - y == 0):
        return complex(x, y - y)
    if math.isinf(x) and not (y - y == 0):
        return complex(abs(x), y - y)
    return cmath.sinh(z)


def _fg_ccosh(z):
    x, y = z.real, z.imag
    if x != x and y == 0:
        return complex(x, y)
    if x == 0 and not (y - y == 0):
        return complex(y - y, 0.0)
    if math.isinf(x) and not (y - y == 0):
        return complex(abs(x), y - y)
    return cmath.cosh(z)


def _fg_ctanh(z):
    x, y = z.real, z.imag
    if x != x and y == 0:
        return complex(x, y)
    if x == 0 and not (y - y == 0):
        return complex(x, y - y)
    if math.isinf(x) and y == y:   # the standard's 1 + 0j for a positive y (C99 signs it by sin 2y)
        return complex(math.copysign(1.0, x), math.copysign(0.0, y))
    return cmath.tanh(z)


def _fg_casinh(z):
    if z.real != z.real and z.imag == 0:
        return complex(z.real, z.imag)
    return cmath.asinh(z)


def _fg_catanh(z):
    x, y = z.real, z.imag
    if x != x and y - y == 0:
        return complex(x, x)
    if x == 0 and y != y:
        return complex(x, y)
    return cmath.atanh(z)


def _fg_cacos(z):
    if z.real == 0 and z.imag != z.imag:
        return complex(1.5707963267948966, z.imag)
    return cmath.acos(z)


def _fg_cacosh(z):
    if z.real == 0 and z.imag != z.imag:
        return complex(z.imag, 1.5707963267948966)
    return cmath.acosh(z)


def _fg_ctimes_i(z):  # i z
    return complex(-z.imag, z.real)


def _fg_cback(w):  # -i w
    return complex(w.imag, -w.real)

'''


def python_helpers(math: str) -> str:
    """The helpers' source, calling ``math``'s floor/fmod/copysign/log1p/exp/trunc."""
    return _TEXT.replace("M.", math + ".")
