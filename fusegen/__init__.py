"""fusegen: describe a fused tensor op once in Python; get Numba kernels, shippable
MindSpore-AOT C++ sources and XLA FFI handlers, all run through one runtime."""
from __future__ import annotations

# The public API, registered once and visibly (names here are stable).
from .version import __version__  # noqa: E402
from .dtypes import DType, DTYPES, as_dtype  # noqa: E402
from .errors import (  # noqa: E402
    ArgumentError, AttrError, AxisError, BoundsError, CompileError, DTypeError, FusegenError, KernelError,
    LibraryError, ScalarRangeError, ShapeError, TraceError, UnsupportedError,
)
from .ir import OpDef, Tensor, cast, cast_like, infer, op, sum_to, where  # noqa: E402
from .graph.vocab import (  # noqa: E402
    abs, add, ceil, cos, divide, equal, erf, exp, floor, greater, greater_equal, less, less_equal,
    log, logical_and, logical_not, logical_or, max, maximum, mean, min, minimum, multiply, neg,
    not_equal, pow, power, prod, relu, rsqrt, sigmoid, sin, sqrt, subtract, sum, tanh,
    floor_divide, remainder,
    # layout: views, pieces, compositions, creation
    arange, asarray, broadcast_arrays, broadcast_to, concat, empty, empty_like, expand_dims, eye, flip, full, full_like,
    linspace, matrix_transpose, meshgrid, moveaxis, ones, ones_like, pad, permute_dims, repeat, reshape, roll,
    split, squeeze, stack, swapaxes, tile, tril, triu, unstack, zeros, zeros_like,
)
from .graph.gathers import take, take_along_axis  # noqa: E402  (issue #17)
from .graph.searching import argmax, argmin, count_nonzero, searchsorted  # noqa: E402  (issue #17)
from .graph.scans import cummax, cummin, cumulative_prod, cumulative_sum, logcumsumexp  # noqa: E402  (issue #17)
from .graph.vocab import (  # noqa: E402  (the array API's elementwise functions and reductions, #18)
    acos, acosh, all, any, arccos, arccosh, arcsin, arcsinh, arctan, arctan2, arctanh, asin, asinh, atan, atan2,
    atanh, bitwise_and, bitwise_invert, bitwise_left_shift, bitwise_not, bitwise_or, bitwise_right_shift,
    bitwise_xor, clip, conj, conjugate, copysign, cosh, expm1, floor_divide, hypot, imag, invert, isfinite, isinf,
    isnan, left_shift, lerp, log1p, log2, log10, log_softmax, logaddexp, logical_xor, logsumexp, nan_to_num,
    negative, nextafter, positive, real, reciprocal, remainder, right_shift, rint, round, sign, signbit, sinh,
    softmax, square, std, tan, trunc, var,
)
from .graph.linalg import diff, matmul, tensordot, vecdot  # noqa: E402  (linear algebra, utility: #18)
from .graph.einsum import einsum  # noqa: E402  (NumPy's, composed as matmul is)
from .graph.numpy_names import (  # noqa: E402  (NumPy's names and small NumPy functions, composed)
    absolute, allclose, amax, amin, concatenate, cumprod, cumsum, deg2rad, degrees, dot, exp2, fix, fliplr, flipud,
    float_power, fmax, fmin, heaviside, hstack, identity, inner, isclose, logspace, mod, nanmax, nanmean, nanmin,
    nansum, outer, ptp, rad2deg, radians, ravel, select, sinc, trace, transpose, true_divide, vdot, vstack,
)
from .graph.datatypes import (  # noqa: E402,A004  (the array API's dtypes, their functions, constants)
    astype, bool, can_cast, complex64, complex128, e, finfo, float16, float32, float64, iinfo, inf, int8, int16,
    int32, int64, isdtype, nan, newaxis, pi, result_type, uint8, uint16, uint32, uint64,
)
from .graph.grad import grad  # noqa: E402
from .runtime import Kernel, compile  # noqa: E402
from .rt.engine import Engine, EngineError  # noqa: E402

__all__ = [
    # describing ops
    "op", "OpDef", "Tensor", "where", "cast", "cast_like", "sum_to", "infer", "grad",
    "abs", "add", "ceil", "cos", "divide", "equal", "erf", "exp", "floor", "greater", "greater_equal",
    "less", "less_equal", "log", "logical_and", "logical_not", "logical_or", "max", "maximum", "mean",
    "min", "minimum", "multiply", "neg", "not_equal", "pow", "power", "prod", "relu", "rsqrt",
    "sigmoid", "sin", "sqrt", "subtract", "sum", "tanh", "floor_divide", "remainder",
    "arange", "asarray", "broadcast_arrays", "broadcast_to", "concat", "empty", "empty_like", "expand_dims", "eye", "flip",
    "full", "full_like", "linspace", "matrix_transpose", "meshgrid", "moveaxis", "ones", "ones_like", "pad",
    "permute_dims", "repeat", "reshape", "roll", "split", "squeeze", "stack", "swapaxes", "tile", "tril", "triu",
    "unstack", "zeros", "zeros_like",
    "take", "take_along_axis", "argmax", "argmin", "count_nonzero", "searchsorted",
    "cumulative_sum", "cumulative_prod", "cummax", "cummin", "logcumsumexp",
    "acos", "acosh", "all", "any", "arccos", "arccosh", "arcsin", "arcsinh", "arctan", "arctan2", "arctanh", "asin",
    "asinh", "atan", "atan2", "atanh", "bitwise_and", "bitwise_invert", "bitwise_left_shift", "bitwise_not",
    "bitwise_or", "bitwise_right_shift", "bitwise_xor", "clip", "conj", "conjugate", "copysign", "cosh", "expm1",
    "hypot", "imag", "invert", "isfinite", "isinf", "isnan", "left_shift", "lerp", "log1p", "log2",
    "log10", "log_softmax", "logaddexp", "logical_xor", "logsumexp", "nan_to_num", "negative", "nextafter",
    "positive", "real", "reciprocal", "right_shift", "rint", "round", "sign", "signbit", "sinh",
    "softmax", "square", "std", "tan", "trunc", "var",
    "matmul", "tensordot", "vecdot", "einsum", "diff",
    "absolute", "allclose", "amax", "amin", "concatenate", "cumprod", "cumsum", "deg2rad", "degrees", "dot", "exp2",
    "fix", "fliplr", "flipud", "float_power", "fmax", "fmin", "heaviside", "hstack", "identity", "inner", "isclose",
    "logspace", "mod", "nanmax", "nanmean", "nanmin", "nansum", "outer", "ptp", "rad2deg", "radians", "ravel",
    "select", "sinc", "trace", "transpose", "true_divide", "vdot", "vstack",
    # (``bool`` is an attribute but not in __all__: ``from fusegen import *`` must not hide the builtin)
    "astype", "can_cast", "finfo", "iinfo", "isdtype", "result_type", "e", "inf", "nan", "newaxis", "pi",
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64",
    "complex64", "complex128",
    "DType", "DTYPES", "as_dtype",
    # running and emitting (emit, AotKernel, jax, torch, examples and random load lazily, see __getattr__)
    "compile", "Kernel", "emit", "AotKernel", "Engine", "EngineError",
    # errors
    "FusegenError", "TraceError", "ShapeError", "AxisError", "DTypeError", "ScalarRangeError", "AttrError", "ArgumentError", "BoundsError",
    "CompileError", "LibraryError", "KernelError", "UnsupportedError",
]


def __getattr__(name):
    # The native parts load lazily: importing fusegen must not need a compiler.
    if name == "AotKernel":
        from .native.aot_kernel import AotKernel
        return AotKernel
    if name == "emit":
        from .abi_emit import emit
        return emit
    if name in ("jax", "torch"):  # optional: `pip install "fusegen[jax]"` / `"fusegen[torch]"`
        import importlib
        return importlib.import_module("." + name, __name__)
    if name == "random":  # fg.random: uniform, normal, bernoulli, randint (traced) and reference (NumPy)
        import importlib
        return importlib.import_module(".random", __name__)
    if name == "linalg":  # fg.linalg: the array API's linear-algebra extension (norms, diagonal, ...)
        import importlib
        return importlib.import_module(".linalg", __name__)
    if name == "examples":
        import importlib
        return importlib.import_module(".examples", __name__)
    raise AttributeError(f"module 'fusegen' has no attribute {name!r}")
