"""An array API namespace whose functions are computed by fusegen ops, for the public conformance
suite (data-apis/array-api-tests; ``tools/array_api_conformance.py`` runs it):

    ARRAY_API_TESTS_MODULE=array_api_adapter PYTHONPATH=tools pytest array_api_tests/...

Every function of the standard that fusegen implements (``FUSEGEN_FUNCTIONS``) is traced into an
``@fg.op`` per call pattern (which arguments are arrays and which Python scalars: scalars become
attributes, so they stay weak and one kernel serves every value; static keywords such as ``axis``
are part of the op) and run through the backend ``FUSEGEN_ARRAY_API_BACKEND`` names (``numba``,
the default, or ``aot``: the emitted C++ built for the call's dtypes). Everything else (array
creation, dtypes, indexing, the functions fusegen does not have) is NumPy's array API namespace,
and the conformance script counts those functions as missing, not as passes.

complex64/complex128 are fusegen dtypes (``fusegen/graph/cplx.py``): arrays of them go through the
kernels like any other; a Python ``complex`` operand becomes a constant of the traced op (an
attribute cannot be complex), weak as the standard says, one kernel per value.
``FUSEGEN_ARRAY_API_COMPLEX=0`` leaves them out of the namespace (the suite then tests real dtypes
only).
"""
from __future__ import annotations

import builtins as _builtins
import os

import numpy as _np
from numpy import *  # noqa: F401,F403  (NumPy's array API namespace for everything fusegen does not compute)
from numpy import __array_namespace_info__  # noqa: F401

import fusegen as _fg

__array_api_version__ = "2024.12"
BACKEND = os.environ.get("FUSEGEN_ARRAY_API_BACKEND", "numba")
if os.environ.get("FUSEGEN_ARRAY_API_COMPLEX", "1") == "0":
    del complex64, complex128  # noqa: F821

# (standard name, fusegen function, array arguments, static keywords it takes)
_ELEMENTWISE_1 = ["abs", "acos", "acosh", "asin", "asinh", "atan", "atanh", "bitwise_invert", "ceil", "conj", "cos",
                  "cosh", "exp", "expm1", "floor", "imag", "isfinite", "isinf", "isnan", "log", "log1p", "log2",
                  "log10", "logical_not", "negative", "positive", "real", "reciprocal", "round", "sign", "signbit",
                  "sin", "sinh", "square", "sqrt", "tan", "tanh", "trunc"]
_ELEMENTWISE_2 = ["add", "atan2", "bitwise_and", "bitwise_left_shift", "bitwise_or", "bitwise_right_shift",
                  "bitwise_xor", "copysign", "divide", "equal", "floor_divide", "greater", "greater_equal", "hypot",
                  "less", "less_equal", "logaddexp", "logical_and", "logical_or", "logical_xor", "maximum", "minimum",
                  "multiply", "nextafter", "not_equal", "pow", "remainder", "subtract"]
_REDUCTIONS = ["max", "mean", "min", "prod", "std", "sum", "var", "all", "any", "count_nonzero"]
#: layout, gather, search and scan functions (issues #16 and #17), each a fusegen op per call
#: pattern: its arrays are the op's inputs, everything else (shapes, axes, shifts) is static
_STRUCTURAL = ["cumulative_sum", "cumulative_prod", "argmax", "argmin", "searchsorted", "broadcast_arrays",
               "broadcast_to", "concat", "expand_dims", "flip", "moveaxis", "permute_dims", "repeat", "reshape", "roll",
               "squeeze", "stack", "tile", "unstack", "take", "take_along_axis", "matrix_transpose", "matmul",
               "tensordot", "vecdot", "diff"]
#: the standard's functions computed by fusegen here
FUSEGEN_FUNCTIONS = tuple(_ELEMENTWISE_1 + _ELEMENTWISE_2 + _REDUCTIONS + ["clip", "where"] + _STRUCTURAL)

_KERNELS: dict = {}


# (``from numpy import *`` shadows ``bool`` with NumPy's: Python's types come from builtins)
def _is_scalar(v) -> _builtins.bool:
    """A Python scalar (a weak one in the standard's promotion). Not a NumPy scalar: np.float64
    subclasses float, but it is a 0-d array's value and keeps its dtype (the suite draws them)."""
    return isinstance(v, (_builtins.bool, _builtins.int, _builtins.float)) and not isinstance(v, (_np.ndarray, _np.generic))


def _attr_type(v) -> str:
    return "bool" if isinstance(v, _builtins.bool) else ("int" if isinstance(v, _builtins.int) else "float")


def _fg_function(name: str):
    if name == "count_nonzero":
        return lambda x, axis=None, keepdims=False: _fg.sum(x != 0, axis=axis, keepdims=keepdims)
    if name in ("max", "min", "mean"):
        base = getattr(_fg, name)
        return lambda x, axis=None, keepdims=False: base(x, axis=axis, keep_dims=keepdims)
    return getattr(_fg, name)


def _op_for(name: str, pattern: tuple, static: tuple):
    """The traced op of ``name`` for one call pattern: ``pattern`` is per positional argument
    "array", "none" or a scalar attribute type; ``static`` the keyword arguments."""
    params, call, attrs = [], [], []
    for i, p in enumerate(pattern):
        if p == "array":
            params.append(f"a{i}")
            call.append(f"a{i}")
        elif p == "none":
            call.append("None")
        elif p == "complex":   # a Python complex: a constant of the op (still weak)
            call.append(f"_static['_c{i}']")
        else:
            attrs.append(f"s{i}: {p}")
            call.append(f"s{i}")
    kw = "".join(f", {k}=_static[{k!r}]" for k, _ in static if not k.startswith("_c"))
    head = ", ".join(params + (["*"] + attrs if attrs else []))
    src = f"def {name}_xp({head}):\n    return _f({', '.join(call)}{kw})\n"
    scope = {"_f": _fg_function(name), "_static": dict(static)}
    exec(src, scope)  # noqa: S102 - our own text: one traced op per call pattern
    return _fg.op(scope[f"{name}_xp"])


def _kind(a) -> str:
    if a is None:
        return "none"
    if isinstance(a, _builtins.complex) and not isinstance(a, (_np.ndarray, _np.generic)):
        return "complex"
    return _attr_type(a) if _is_scalar(a) else "array"


def _call(name: str, args: tuple, static: dict):
    pattern = tuple(_kind(a) for a in args)
    if "array" not in pattern:  # scalars only: nothing for a kernel to do
        return getattr(_np, name)(*args, **{k: v for k, v in static.items() if v is not None})
    static = {**static, **{f"_c{i}": a for i, (a, p) in enumerate(zip(args, pattern)) if p == "complex"}}
    arrays = [_np.asarray(a) for a, p in zip(args, pattern) if p == "array"]
    scalars = {f"s{i}": a for i, (a, p) in enumerate(zip(args, pattern)) if p not in ("array", "none", "complex")}
    skey = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in static.items()))
    key = (name, pattern, skey) + ((tuple(str(a.dtype) for a in arrays),) if BACKEND == "aot" else ())
    k = _KERNELS.get(key)
    if k is None:
        op = _op_for(name, pattern, skey)
        opts = {"dtypes": [",".join(str(a.dtype) for a in arrays)]} if BACKEND == "aot" else {}
        k = _KERNELS[key] = _fg.compile(op, backend=BACKEND, **opts)
    return k(*arrays, **scalars)


def _unary(name):
    def f(x, /):
        return _call(name, (x,), {})
    f.__name__ = name
    return f


def _binary(name):
    def f(x1, x2, /):
        return _call(name, (x1, x2), {})
    f.__name__ = name
    return f


def _axis(axis):
    return list(axis) if isinstance(axis, tuple) else axis


for _n in _ELEMENTWISE_1:
    globals()[_n] = _unary(_n)
for _n in _ELEMENTWISE_2:
    globals()[_n] = _binary(_n)


def sum(x, /, *, axis=None, dtype=None, keepdims=False):  # noqa: A001
    return _call("sum", (x,), dict(axis=_axis(axis), dtype=None if dtype is None else _np.dtype(dtype).name,
                                   keepdims=keepdims))


def prod(x, /, *, axis=None, dtype=None, keepdims=False):
    return _call("prod", (x,), dict(axis=_axis(axis), dtype=None if dtype is None else _np.dtype(dtype).name,
                                    keepdims=keepdims))


def _reduction(name):
    def f(x, /, *, axis=None, keepdims=False):
        return _call(name, (x,), dict(axis=_axis(axis), keepdims=keepdims))
    f.__name__ = name
    return f


max, min, mean, all, any, count_nonzero = (_reduction(n) for n in  # noqa: A001
                                           ("max", "min", "mean", "all", "any", "count_nonzero"))


def var(x, /, *, axis=None, correction=0.0, keepdims=False):
    return _call("var", (x,), dict(axis=_axis(axis), correction=float(correction), keepdims=keepdims))


def std(x, /, *, axis=None, correction=0.0, keepdims=False):
    return _call("std", (x,), dict(axis=_axis(axis), correction=float(correction), keepdims=keepdims))


def clip(x, /, min=None, max=None):  # noqa: A002
    return _call("clip", (x, min, max), {})


def where(condition, x1, x2, /):
    return _call("where", (condition, x1, x2), {})


# --- layout, gathers, searches and scans ------------------------------------------------------------
def _static_value(v):
    """A static argument as a hashable key part: sequences as tuples, dtypes by name."""
    if isinstance(v, (list, tuple)):
        return tuple(_static_value(x) for x in v)
    if isinstance(v, _np.ndarray):
        return tuple(v.tolist()) if v.ndim else v.item()
    if isinstance(v, _np.dtype) or (isinstance(v, type) and issubclass(v, _np.generic)):
        return _np.dtype(v).name
    return v


def _structural(name: str, arrays, build, **static):
    """``fg.<name>`` on ``arrays`` (the op's inputs) through one traced op per (name, array count,
    static arguments): ``build(f, tensors, static)`` calls fusegen's function inside the op."""
    arrays = [_np.asarray(a) for a in arrays]
    static = {k: _static_value(v) for k, v in static.items()}
    key = (name, len(arrays), tuple(sorted(static.items(), key=lambda kv: kv[0])))
    if BACKEND == "aot":
        key += (tuple(str(a.dtype) for a in arrays),)
    k = _KERNELS.get(key)
    if k is None:
        params = ", ".join(f"a{i}" for i in range(len(arrays)))
        src = f"def {name}_xp({params}):\n    return _build(_f, [{params}], _static)\n"
        scope = {"_f": getattr(_fg, name), "_build": build, "_static": static}
        exec(src, scope)  # noqa: S102 - our own text: one traced op per call pattern
        opts = {"dtypes": [",".join(str(a.dtype) for a in arrays)]} if BACKEND == "aot" else {}
        k = _KERNELS[key] = _fg.compile(_fg.op(scope[f"{name}_xp"]), backend=BACKEND, **opts)
    return k(*arrays)


def _one(f, t, s):   # f(x, **static)
    return f(t[0], **s)


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
    return _structural("cumulative_sum", [x], _one, axis=axis, dtype=dtype, include_initial=include_initial)


def cumulative_prod(x, /, *, axis=None, dtype=None, include_initial=False):
    return _structural("cumulative_prod", [x], _one, axis=axis, dtype=dtype, include_initial=include_initial)


def argmax(x, /, *, axis=None, keepdims=False):
    return _structural("argmax", [x], _one, axis=axis, keepdims=keepdims)


def argmin(x, /, *, axis=None, keepdims=False):
    return _structural("argmin", [x], _one, axis=axis, keepdims=keepdims)


def searchsorted(x1, x2, /, *, side="left", sorter=None):
    if sorter is None:
        return _structural("searchsorted", [x1, x2], lambda f, t, s: f(t[0], t[1], **s), side=side)
    return _structural("searchsorted", [x1, x2, sorter], lambda f, t, s: f(t[0], t[1], sorter=t[2], **s), side=side)


def broadcast_arrays(*arrays):
    return list(_structural("broadcast_arrays", arrays, lambda f, t, s: tuple(f(*t))))


def broadcast_to(x, /, shape):
    return _structural("broadcast_to", [x], lambda f, t, s: f(t[0], s["shape"]), shape=shape)


def concat(arrays, /, *, axis=0):
    return _structural("concat", arrays, lambda f, t, s: f(t, **s), axis=axis)


def stack(arrays, /, *, axis=0):
    return _structural("stack", arrays, lambda f, t, s: f(t, **s), axis=axis)


def expand_dims(x, /, axis=0):
    return _structural("expand_dims", [x], lambda f, t, s: f(t[0], s["axis"]), axis=axis)


def flip(x, /, *, axis=None):
    return _structural("flip", [x], _one, axis=axis)


def moveaxis(x, source, destination, /):
    return _structural("moveaxis", [x], lambda f, t, s: f(t[0], s["source"], s["destination"]),
                       source=source, destination=destination)


def permute_dims(x, /, axes):
    return _structural("permute_dims", [x], lambda f, t, s: f(t[0], s["axes"]), axes=axes)


def repeat(x, repeats, /, *, axis=None):
    # counts in an array are static counts to fusegen (the output's size must be known when the
    # op is traced): a one-op-per-pattern adapter passes their values
    return _structural("repeat", [x], lambda f, t, s: f(t[0], s["repeats"], axis=s["axis"]), repeats=repeats, axis=axis)


def reshape(x, /, shape, *, copy=None):
    return _structural("reshape", [x], lambda f, t, s: f(t[0], s["shape"], copy=s["copy"]), shape=shape, copy=copy)


def roll(x, /, shift, *, axis=None):
    return _structural("roll", [x], lambda f, t, s: f(t[0], s["shift"], axis=s["axis"]), shift=shift, axis=axis)


def squeeze(x, /, axis):
    return _structural("squeeze", [x], lambda f, t, s: f(t[0], s["axis"]), axis=axis)


def tile(x, repetitions, /):
    return _structural("tile", [x], lambda f, t, s: f(t[0], s["repetitions"]), repetitions=repetitions)


def unstack(x, /, *, axis=0):
    x = _np.asarray(x)
    if x.ndim and x.shape[axis] == 0:   # no outputs: no kernel to run
        return ()
    return tuple(_structural("unstack", [x], lambda f, t, s: tuple(f(t[0], **s)), axis=axis))


def take(x, indices, /, *, axis=None):
    return _structural("take", [x, indices], lambda f, t, s: f(t[0], t[1], **s), axis=axis)


def take_along_axis(x, indices, /, *, axis=-1):
    return _structural("take_along_axis", [x, indices], lambda f, t, s: f(t[0], t[1], **s), axis=axis)


def matrix_transpose(x, /):
    return _structural("matrix_transpose", [x], lambda f, t, s: f(t[0]))


def matmul(x1, x2, /):
    return _structural("matmul", [x1, x2], lambda f, t, s: f(t[0], t[1]))


def tensordot(x1, x2, /, *, axes=2):
    return _structural("tensordot", [x1, x2], lambda f, t, s: f(t[0], t[1], **s), axes=axes)


def vecdot(x1, x2, /, *, axis=-1):
    return _structural("vecdot", [x1, x2], lambda f, t, s: f(t[0], t[1], **s), axis=axis)


def diff(x, /, *, axis=-1, n=1, prepend=None, append=None):
    arrays = [a for a in (x, prepend, append) if a is not None]

    def build(f, t, s):
        rest = iter(t[1:])
        return f(t[0], axis=s["axis"], n=s["n"], prepend=next(rest) if s["pre"] else None,
                 append=next(rest) if s["app"] else None)
    return _structural("diff", arrays, build, axis=axis, n=n, pre=prepend is not None, app=append is not None)
