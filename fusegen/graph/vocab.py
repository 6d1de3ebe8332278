"""The op vocabulary: the functions an op body calls, ``fg.exp(x)``, ``fg.sum(x, axis=...)``,
``fg.where(...)``; ``fusegen/__init__.py`` re-exports them as the public ``fg.`` functions.

Generated from the IR's op table so a new op costs one line here.
"""
from __future__ import annotations

from .nodes import Op
from .trace import Tensor, binary, cast, reduce, unary, where  # noqa: F401
from .layout import (  # noqa: F401  (views, pieces, shapes: the manipulation and indexing groups)
    broadcast_to, concat, expand_dims, flip, matrix_transpose, moveaxis, pad, permute_dims, reshape, squeeze,
    stack, swapaxes,
)
from .compose import (  # noqa: F401  (compositions and creation)
    arange, asarray, broadcast_arrays, empty, empty_like, eye, full, full_like, linspace, meshgrid, ones, ones_like, repeat,
    roll, split, tile, tril, triu, unstack, zeros, zeros_like,
)


def _unary_fn(op: Op, name: str):
    def f(x) -> Tensor:
        return unary(op, x)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"Elementwise {name} (traced)."
    return f


def _binary_fn(op: Op, name: str):
    def f(a, b) -> Tensor:
        return binary(op, a, b)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"Elementwise {name} with NumPy broadcasting and promotion (traced)."
    return f


def _reduce_fn(kind: str):
    def f(x, axis=None, keepdims: bool = False, *, keep_dims=None) -> Tensor:
        return reduce(kind, x, axis, keepdims if keep_dims is None else keep_dims)
    f.__name__ = f.__qualname__ = kind
    f.__doc__ = (f"np.{kind} over ``axis`` (None: all; an int, a tuple of ints or an attribute; "
                 "negative axes count from the end), keeping reduced dims if ``keepdims`` (the array API's "
                 "name; ``keep_dims``, MindSpore's, is an alias).")
    return f


neg = _unary_fn(Op.NEG, "neg")
abs = _unary_fn(Op.ABS, "abs")  # noqa: A001 - the fg. namespace mirrors NumPy's names
exp = _unary_fn(Op.EXP, "exp")
log = _unary_fn(Op.LOG, "log")
sqrt = _unary_fn(Op.SQRT, "sqrt")
rsqrt = _unary_fn(Op.RSQRT, "rsqrt")
sin = _unary_fn(Op.SIN, "sin")
cos = _unary_fn(Op.COS, "cos")
tanh = _unary_fn(Op.TANH, "tanh")
sigmoid = _unary_fn(Op.SIGMOID, "sigmoid")
relu = _unary_fn(Op.RELU, "relu")
erf = _unary_fn(Op.ERF, "erf")
floor = _unary_fn(Op.FLOOR, "floor")
ceil = _unary_fn(Op.CEIL, "ceil")
logical_not = _unary_fn(Op.NOT, "logical_not")

add = _binary_fn(Op.ADD, "add")
subtract = _binary_fn(Op.SUB, "subtract")
multiply = _binary_fn(Op.MUL, "multiply")
divide = _binary_fn(Op.DIV, "divide")
pow = _binary_fn(Op.POW, "pow")  # noqa: A001
power = pow
maximum = _binary_fn(Op.MAX, "maximum")
minimum = _binary_fn(Op.MIN, "minimum")
less = _binary_fn(Op.LT, "less")
less_equal = _binary_fn(Op.LE, "less_equal")
greater = _binary_fn(Op.GT, "greater")
greater_equal = _binary_fn(Op.GE, "greater_equal")
equal = _binary_fn(Op.EQ, "equal")
not_equal = _binary_fn(Op.NE, "not_equal")
logical_and = _binary_fn(Op.AND, "logical_and")
logical_or = _binary_fn(Op.OR, "logical_or")
floor_divide = _binary_fn(Op.FLOOR_DIVIDE, "floor_divide")
remainder = _binary_fn(Op.REMAINDER, "remainder")

sum = _reduce_fn("sum")  # noqa: A001
mean = _reduce_fn("mean")
prod = _reduce_fn("prod")
max = _reduce_fn("max")  # noqa: A001
min = _reduce_fn("min")  # noqa: A001

# --- the array API's elementwise functions and reductions (#18) -------------------------------
from .elementwise import (  # noqa: E402,F401
    acos, acosh, arccos, arccosh, arcsin, arcsinh, arctan, arctan2, arctanh, asin, asinh, atan, atan2, atanh,
    bitwise_and, bitwise_invert, bitwise_left_shift, bitwise_not, bitwise_or, bitwise_right_shift, bitwise_xor,
    clip, conj, conjugate, copysign, cosh, expm1, hypot, imag, invert, isfinite, isinf, isnan, left_shift, lerp,
    log1p, log2, log10, logaddexp, logical_xor, nan_to_num, negative, nextafter, positive, real, reciprocal,
    right_shift, rint, round, sign, signbit, sinh, square, tan, trunc,
)
from .stats import all, any, log_softmax, logsumexp, prod, softmax, std, sum, var  # noqa: E402,F401,A004
