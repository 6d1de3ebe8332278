"""The Python array API standard's (2024.12) elementwise functions that fusegen's first vocabulary
(``graph/vocab``) lacked, with the standard's names and positional-only parameters, NumPy's
aliases (``arcsin``, ``invert``, ``left_shift``...), and a few compositions users reach for:
``clip``, ``nan_to_num``, ``lerp``, ``conj``/``real``/``imag`` on real dtypes.

Each IR op's dtype rule is its NumPy ufunc's type resolution (``graph/nodes.UNARY_UFUNC``); its
special cases (signed zeros, infinities, NaN, integer division by zero, shifts by the bit width)
are NumPy's, spelled per backend in ``plan/exprs``. complex64/complex128: see ``graph/cplx`` for
the functions the standard allows on them (the rest refuse complex operands).
"""
from __future__ import annotations

from .nodes import Op
from .trace import Tensor, binary, cast_like, operand, unary, where


def _unary(op: Op, name: str, doc: str):
    def f(x, /) -> Tensor:
        return unary(op, x)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = doc
    return f


def _binary(op: Op, name: str, doc: str):
    def f(x1, x2, /) -> Tensor:
        return binary(op, x1, x2)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = doc
    return f


expm1 = _unary(Op.EXPM1, "expm1", "exp(x) - 1, accurate near 0.")
log1p = _unary(Op.LOG1P, "log1p", "log(1 + x), accurate near 0.")
log2 = _unary(Op.LOG2, "log2", "Base-2 logarithm.")
log10 = _unary(Op.LOG10, "log10", "Base-10 logarithm.")
tan = _unary(Op.TAN, "tan", "Tangent (radians).")
asin = _unary(Op.ASIN, "asin", "Inverse sine, in [-pi/2, pi/2]; NaN outside [-1, 1].")
acos = _unary(Op.ACOS, "acos", "Inverse cosine, in [0, pi]; NaN outside [-1, 1].")
atan = _unary(Op.ATAN, "atan", "Inverse tangent, in [-pi/2, pi/2].")
sinh = _unary(Op.SINH, "sinh", "Hyperbolic sine.")
cosh = _unary(Op.COSH, "cosh", "Hyperbolic cosine.")
asinh = _unary(Op.ASINH, "asinh", "Inverse hyperbolic sine.")
acosh = _unary(Op.ACOSH, "acosh", "Inverse hyperbolic cosine; NaN below 1.")
atanh = _unary(Op.ATANH, "atanh", "Inverse hyperbolic tangent; +-inf at +-1, NaN outside [-1, 1].")
trunc = _unary(Op.TRUNC, "trunc", "Rounds toward zero (integers unchanged).")
round = _unary(Op.ROUND, "round", "Rounds to the nearest integer, halves to even (integers unchanged).")  # noqa: A001
sign = _unary(Op.SIGN, "sign", "-1, 0 or 1 by the sign of x; NaN stays NaN, -0.0 gives 0.0 (NumPy's).")
signbit = _unary(Op.SIGNBIT, "signbit", "True where the sign bit is set (-0.0 and negative NaN too).")
isnan = _unary(Op.ISNAN, "isnan", "True where x is NaN.")
isinf = _unary(Op.ISINF, "isinf", "True where x is +inf or -inf.")
isfinite = _unary(Op.ISFINITE, "isfinite", "True where x is neither infinite nor NaN.")
square = _unary(Op.SQUARE, "square", "x * x.")
reciprocal = _unary(Op.RECIPROCAL, "reciprocal", "1 / x (integers give floats, as np.sqrt does).")
bitwise_invert = _unary(Op.INVERT, "bitwise_invert", "~x: bitwise NOT of integers, logical NOT of bool.")

atan2 = _binary(Op.ATAN2, "atan2", "The angle of the point (x2, x1), in [-pi, pi], with the signs of zeros.")
hypot = _binary(Op.HYPOT, "hypot", "sqrt(x1**2 + x2**2) without overflow; inf if either is infinite.")
copysign = _binary(Op.COPYSIGN, "copysign", "|x1| with the sign of x2.")
nextafter = _binary(Op.NEXTAFTER, "nextafter", "The next representable value after x1 toward x2 "
                    "(float32 and float64: float16 is computed in float32 registers, so it is refused).")
logaddexp = _binary(Op.LOGADDEXP, "logaddexp", "log(exp(x1) + exp(x2)) without overflow.")
floor_divide = _binary(Op.FLOOR_DIVIDE, "floor_divide",
                       "x1 // x2 (rounded toward -inf), NumPy's: integer division by 0 gives 0, never a trap; "
                       "an infinite operand follows the array API's table (inf // 2 is inf, -1 // inf is -0; "
                       "NumPy gives nan and -1).")
remainder = _binary(Op.REMAINDER, "remainder", "x1 % x2 with the sign of x2, NumPy's: integer x % 0 gives 0.")
bitwise_and = _binary(Op.BIT_AND, "bitwise_and", "x1 & x2 (integers, bool).")
bitwise_or = _binary(Op.BIT_OR, "bitwise_or", "x1 | x2 (integers, bool).")
bitwise_xor = _binary(Op.BIT_XOR, "bitwise_xor", "x1 ^ x2 (integers, bool).")
bitwise_left_shift = _binary(Op.SHL, "bitwise_left_shift",
                             "x1 << x2; a count outside [0, bits) gives 0, as NumPy's.")
bitwise_right_shift = _binary(Op.SHR, "bitwise_right_shift",
                              "x1 >> x2 (arithmetic for signed); a count outside [0, bits) gives 0, "
                              "or -1 for negative x1, as NumPy's.")
logical_xor = _binary(Op.XOR, "logical_xor", "Truth of x1 != truth of x2 (bool result).")


def negative(x, /) -> Tensor:
    """-x."""
    return unary(Op.NEG, x)


def positive(x, /) -> Tensor:
    """+x: x itself."""
    return Tensor(operand(x))


def conj(x, /) -> Tensor:
    """The complex conjugate; a real array is its own."""
    return unary(Op.CONJ, x)


def real(x, /) -> Tensor:
    """The real part (complex64 -> float32, complex128 -> float64); a real array is its own."""
    return unary(Op.REAL, x)


def imag(x, /) -> Tensor:
    """The imaginary part (a real dtype); zeros of x's dtype and shape for a real array (np.imag's)."""
    return unary(Op.IMAG, x)


def clip(x, /, min=None, max=None) -> Tensor:  # noqa: A002 - the array API's names
    """The array API's ``clip``: ``minimum(maximum(x, min), max)`` for the bounds given. NaN in x or
    a bound gives NaN; where min > max the result is max (NumPy's order)."""
    y = Tensor(operand(x))
    if min is not None:
        y = binary(Op.MAX, y, min)
    if max is not None:
        y = binary(Op.MIN, y, max)
    return y


def nan_to_num(x, /, nan: float = 0.0, posinf=None, neginf=None) -> Tensor:
    """NumPy's ``nan_to_num`` (without ``copy``): NaN -> ``nan``, +inf -> ``posinf`` (default: the
    dtype's largest finite value), -inf -> ``neginf`` (default: the most negative). Integers and
    bool pass through. float16 needs explicit ``posinf``/``neginf`` (the default is computed with
    ``nextafter``, which float16 does not have here)."""
    x = Tensor(operand(x))
    inf = cast_like(Tensor(operand(float("inf"))), x)
    hi = nextafter(inf, 0.0) if posinf is None else posinf
    lo = -nextafter(inf, 0.0) if neginf is None else neginf
    y = where(x != x, nan, x)
    y = where(x == float("inf"), hi, y)
    y = where(x == float("-inf"), lo, y)
    return cast_like(y, x)


def lerp(start, end, weight) -> Tensor:
    """Linear interpolation ``start + weight * (end - start)``. Neither NumPy nor the array API has
    it; this is PyTorch's ``lerp`` formula, exact at both ends: for ``weight >= 0.5`` it is
    computed as ``end - (end - start) * (1 - weight)``."""
    d = binary(Op.SUB, end, start)
    w = Tensor(operand(weight))
    return where(abs(w) < 0.5, binary(Op.ADD, start, w * d), binary(Op.SUB, end, d * (1 - w)))


# NumPy's names for the same functions
arcsin, arccos, arctan, arctan2 = asin, acos, atan, atan2
arcsinh, arccosh, arctanh = asinh, acosh, atanh
invert = bitwise_not = bitwise_invert
left_shift, right_shift = bitwise_left_shift, bitwise_right_shift
conjugate = conj
rint = round
