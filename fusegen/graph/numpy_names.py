"""NumPy's names for what the array API spells otherwise, and NumPy functions that are a few of
fusegen's ops: ``concatenate``, ``transpose``, ``cumsum``, ``outer``, ``isclose``, ``dot``,
``nanmax``, ``fmax``, ``heaviside``, ``select``, ... Users port NumPy code into ops; each
function here takes NumPy's arguments and gives NumPy's values and dtypes (checked against NumPy
in tests/test_numpy_names.py), as compositions of views, elementwise ops and reductions, so it
fuses, differentiates and runs on every backend like the functions it is made of.

Where NumPy's result dtype depends on the input's (a float ufunc turns int8 into float16;
``nanmax`` of an integer is its ``max``), the composition asks for the dtype (``x.dtype``), and
an op using it is traced per input dtype. Arguments that have no meaning inside a traced op
(``out=``, ``where=``, ``initial=``) are a ``TraceError`` naming them.
"""
from __future__ import annotations

import math

from .. import dtypes as dt
from ..errors import TraceError
from .compose import asarray, eye, linspace
from .datatypes import isdtype
from .elementwise import remainder, trunc
from . import methods  # noqa: F401  (x.cumsum and x.cumprod, which cumsum and cumprod are)
from .layout import as_tensor, concat, dim, flip, moveaxis, ndim_of, reshape, transpose as layout_transpose
from .linalg_ext import diagonal, outer as linalg_outer
from .linalg import tensordot, vecdot
from .stats import all as fgall, sum as fgsum
from .trace import Attr, Tensor, TracedDType, cast, op_prefix, user_loc, where
from .vocab import (abs as fgabs, divide, isfinite, isnan, max as fgmax, maximum, mean, min as fgmin, minimum,
                    pow as fgpow, sin)

__all__ = ["absolute", "allclose", "amax", "amin", "concatenate", "cumprod", "cumsum", "deg2rad", "degrees", "dot",
           "exp2", "fix", "fliplr", "flipud", "float_power", "fmax", "fmin", "heaviside", "hstack", "identity",
           "inner", "isclose", "logspace", "mod", "nanmax", "nanmean", "nanmin", "nansum", "outer", "ptp",
           "rad2deg", "radians", "ravel", "select", "sinc", "trace", "transpose", "true_divide", "vdot", "vstack"]

absolute = fgabs
mod = remainder
true_divide = divide


def _unsupported(fn: str, **given) -> None:
    bad = [k for k, v in given.items() if v is not None]
    if bad:
        raise TraceError(f"{op_prefix()}{fn}({bad[0]}=...) has no meaning inside a traced op (return the result; "
                         f"use fg.where for a mask) [at {user_loc()}]")


def _operand(x, fn: str):
    """``x``'s dtype for NumPy's type resolution: a traced tensor's (the op then traces per
    dtype), or a Python scalar's (or scalar attribute's) weak kind."""
    if isinstance(x, Attr):
        return x.spec.type.value
    if isinstance(x, Tensor):
        d = x.dtype
        if isinstance(d, TracedDType):
            d.unknown(f"fg.{fn}")
        return dt.as_dtype(d)
    return {bool: "bool", int: "int", float: "float", complex: "complex"}[type(x)]


def _in_ufunc_dtype(name: str, *xs):
    """The operands cast to the dtype NumPy's ``name`` ufunc computes in (int8 -> float16 for a
    float ufunc); Python scalars stay weak."""
    comp, _ = dt.resolve_ufunc(name, tuple(_operand(x, name) for x in xs))
    return [cast(x, comp) if isinstance(x, Tensor) and not isinstance(comp, str) else x for x in xs]


# --- views and joins --------------------------------------------------------------------------
def transpose(a, axes=None) -> Tensor:
    """NumPy's ``transpose``: the axes reversed, or permuted as ``axes`` says."""
    a = as_tensor(a, "transpose")
    return layout_transpose(a) if axes is None else layout_transpose(a, tuple(axes))


def ravel(a, order="C") -> Tensor:
    """NumPy's ``ravel``: the elements in C order (``order="F"``: column-major)."""
    a = as_tensor(a, "ravel")
    if order == "F":
        a = transpose(a)
    elif order not in ("C", "A", "K"):
        raise TraceError(f"{op_prefix()}ravel: order must be 'C', 'F', 'A' or 'K', got {order!r} [at {user_loc()}]")
    return reshape(a, (-1,))


def concatenate(arrays, axis=0, out=None, *, dtype=None, casting=None) -> Tensor:
    """NumPy's ``concatenate`` (the array API's ``concat``; ``axis=None`` joins the flattened
    arrays; ``dtype=`` casts them first)."""
    _unsupported("concatenate", out=out, casting=casting)
    xs = [as_tensor(x, "concatenate") for x in arrays]
    if dtype is not None:
        xs = [cast(x, dtype) for x in xs]
    if axis is None:
        return concat([ravel(x) for x in xs], axis=0)
    return concat(xs, axis=axis)


def _at_least(x, n: int) -> Tensor:
    """NumPy's ``atleast_1d``/``atleast_2d``: size-1 axes put in front up to rank ``n``."""
    x = as_tensor(x, "stack")
    r = ndim_of(x)
    return x if r >= n else reshape(x, (1,) * (n - r) + tuple(dim(x, k) for k in range(r)))


def hstack(tup, *, dtype=None, casting=None) -> Tensor:
    """NumPy's ``hstack``: 1-D arrays joined end to end, others along their second axis."""
    xs = [_at_least(x, 1) for x in tup]
    return concatenate(xs, axis=0 if all(ndim_of(x) == 1 for x in xs) else 1, dtype=dtype, casting=casting)


def vstack(tup, *, dtype=None, casting=None) -> Tensor:
    """NumPy's ``vstack``: arrays (1-D ones as rows) joined along the first axis."""
    return concatenate([_at_least(x, 2) for x in tup], axis=0, dtype=dtype, casting=casting)


def fliplr(m) -> Tensor:
    """NumPy's ``fliplr``: axis 1 reversed (at least 2-D)."""
    m = as_tensor(m, "fliplr")
    if ndim_of(m) < 2:
        raise TraceError(f"{op_prefix()}fliplr: the input must be at least 2-D [at {user_loc()}]")
    return flip(m, axis=1)


def flipud(m) -> Tensor:
    """NumPy's ``flipud``: axis 0 reversed (at least 1-D)."""
    m = as_tensor(m, "flipud")
    if ndim_of(m) < 1:
        raise TraceError(f"{op_prefix()}flipud: the input must be at least 1-D [at {user_loc()}]")
    return flip(m, axis=0)


def identity(n, dtype=None) -> Tensor:
    """NumPy's ``identity``: an ``n x n`` eye, float64 by default."""
    return eye(n, dtype=dtype or "float64")


def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0) -> Tensor:
    """NumPy's ``logspace`` for scalar bounds: ``base ** linspace(start, stop, num)``."""
    if axis != 0:
        raise TraceError(f"{op_prefix()}logspace: axis applies to array bounds, which are not supported "
                         f"[at {user_loc()}]")
    y = fgpow(base, linspace(start, stop, num, endpoint=endpoint))
    return y if dtype is None else cast(y, dtype)


# --- scans and reductions ---------------------------------------------------------------------
def cumsum(a, axis=None, dtype=None, out=None) -> Tensor:
    """NumPy's ``cumsum``: ``axis=None`` over the flattened array (``x.cumsum``'s rule)."""
    return as_tensor(a, "cumsum").cumsum(axis=axis, dtype=dtype, out=out)


def cumprod(a, axis=None, dtype=None, out=None) -> Tensor:
    """NumPy's ``cumprod``: ``axis=None`` over the flattened array (``x.cumprod``'s rule)."""
    return as_tensor(a, "cumprod").cumprod(axis=axis, dtype=dtype, out=out)


def amax(a, axis=None, out=None, keepdims=False, initial=None, where=None) -> Tensor:
    """NumPy's ``amax`` (``max``)."""
    _unsupported("amax", out=out, initial=initial, where=where)
    return fgmax(a, axis=axis, keepdims=keepdims)


def amin(a, axis=None, out=None, keepdims=False, initial=None, where=None) -> Tensor:
    """NumPy's ``amin`` (``min``)."""
    _unsupported("amin", out=out, initial=initial, where=where)
    return fgmin(a, axis=axis, keepdims=keepdims)


def ptp(a, axis=None, out=None, keepdims=False) -> Tensor:
    """NumPy's ``ptp``: max - min."""
    _unsupported("ptp", out=out)
    return fgmax(a, axis=axis, keepdims=keepdims) - fgmin(a, axis=axis, keepdims=keepdims)


def _is_inexact(a: Tensor) -> bool:
    return isdtype(a.dtype, ("real floating", "complex floating"))


def nansum(a, axis=None, dtype=None, out=None, keepdims=False) -> Tensor:
    """NumPy's ``nansum``: NaNs count as zero."""
    _unsupported("nansum", out=out)
    a = as_tensor(a, "nansum")
    return fgsum(where(isnan(a), 0, a), axis=axis, dtype=dtype, keepdims=keepdims)


def _nan_extreme(kind: str, a, axis, keepdims) -> Tensor:
    a = as_tensor(a, f"nan{kind}")
    fn = fgmax if kind == "max" else fgmin
    if not _is_inexact(a):
        return fn(a, axis=axis, keepdims=keepdims)
    nan = isnan(a)
    m = fn(where(nan, -math.inf if kind == "max" else math.inf, a), axis=axis, keepdims=keepdims)
    return where(fgall(nan, axis=axis, keepdims=keepdims), math.nan, m)   # an all-NaN slice: NaN


def nanmax(a, axis=None, out=None, keepdims=False, initial=None, where=None) -> Tensor:  # noqa: A002
    """NumPy's ``nanmax``: NaNs ignored; an all-NaN slice gives NaN."""
    _unsupported("nanmax", out=out, initial=initial, where=where)
    return _nan_extreme("max", a, axis, keepdims)


def nanmin(a, axis=None, out=None, keepdims=False, initial=None, where=None) -> Tensor:  # noqa: A002
    """NumPy's ``nanmin``: NaNs ignored; an all-NaN slice gives NaN."""
    _unsupported("nanmin", out=out, initial=initial, where=where)
    return _nan_extreme("min", a, axis, keepdims)


def nanmean(a, axis=None, dtype=None, out=None, keepdims=False) -> Tensor:
    """NumPy's ``nanmean``: the mean of the non-NaN elements (an all-NaN slice: NaN)."""
    _unsupported("nanmean", out=out)
    a = as_tensor(a, "nanmean")
    if dtype is not None:
        a = cast(a, dtype)
    if not _is_inexact(a):
        return mean(a, axis=axis, keepdims=keepdims)
    keep = ~isnan(a)
    total = fgsum(where(keep, a, 0), axis=axis, keepdims=keepdims)
    return total / cast(fgsum(where(keep, 1, 0), axis=axis, keepdims=keepdims), total.dtype)


def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None) -> Tensor:
    """NumPy's ``trace``: the sum along a diagonal (``offset`` above it when positive) of the
    axes ``axis1`` and ``axis2``, read as the strided view ``linalg.diagonal`` is."""
    _unsupported("trace", out=out)
    a = moveaxis(as_tensor(a, "trace"), (axis1, axis2), (-2, -1))
    return fgsum(diagonal(a, offset=offset), axis=-1, dtype=dtype)


# --- products -----------------------------------------------------------------------------------
def dot(a, b, out=None) -> Tensor:
    """NumPy's ``dot``: a product with a scalar; otherwise the last axis of ``a`` contracted with
    the second-to-last of ``b`` (its only one when 1-D)."""
    _unsupported("dot", out=out)
    a, b = as_tensor(a, "dot"), as_tensor(b, "dot")
    ra, rb = ndim_of(a), ndim_of(b)
    if ra == 0 or rb == 0:
        return a * b
    return tensordot(a, b, axes=([ra - 1], [max(rb - 2, 0)]))


def inner(a, b) -> Tensor:
    """NumPy's ``inner``: the last axes contracted (a product with a scalar)."""
    a, b = as_tensor(a, "inner"), as_tensor(b, "inner")
    ra, rb = ndim_of(a), ndim_of(b)
    if ra == 0 or rb == 0:
        return a * b
    return tensordot(a, b, axes=([ra - 1], [rb - 1]))


def vdot(a, b) -> Tensor:
    """NumPy's ``vdot``: the flattened arrays' dot product, ``a`` conjugated."""
    return vecdot(ravel(as_tensor(a, "vdot")), ravel(as_tensor(b, "vdot")))


def outer(a, b, out=None) -> Tensor:
    """NumPy's ``outer``: every element of flattened ``a`` times every one of flattened ``b``."""
    _unsupported("outer", out=out)
    return linalg_outer(ravel(as_tensor(a, "outer")), ravel(as_tensor(b, "outer")))


# --- elementwise ----------------------------------------------------------------------------------
def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False) -> Tensor:
    """NumPy's ``isclose``: ``|a - b| <= atol + rtol |b|`` where b is finite, or ``a == b``
    (infinities of one sign); ``equal_nan`` counts two NaNs close. As NumPy's, a Python scalar
    is an array of its default dtype (a float: float64, so ``isclose(x32, 0.1)`` compares in
    float64) and ``b`` is at least floating."""
    x, y = (v if isinstance(v, Tensor) and not isinstance(v, Attr) else asarray(v) for v in (a, b))
    y, _ = _in_ufunc_dtype("add", y, 1.0)
    close = ((fgabs(x - y) <= atol + rtol * fgabs(y)) & isfinite(y)) | (x == y)
    return close | (isnan(x) & isnan(y)) if equal_nan else close


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False) -> Tensor:
    """NumPy's ``allclose``: ``all(isclose(...))``, a 0-d bool tensor inside an op."""
    return fgall(isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan))


def fmax(x1, x2) -> Tensor:
    """NumPy's ``fmax``: the larger, a NaN ignored (two NaNs: NaN)."""
    return where(isnan(x2), x1, where(isnan(x1), x2, maximum(x1, x2)))


def fmin(x1, x2) -> Tensor:
    """NumPy's ``fmin``: the smaller, a NaN ignored (two NaNs: NaN)."""
    return where(isnan(x2), x1, where(isnan(x1), x2, minimum(x1, x2)))


def heaviside(x1, x2) -> Tensor:
    """NumPy's ``heaviside``: 0 below zero, ``x2`` at zero, 1 above, NaN at NaN."""
    x1, x2 = _in_ufunc_dtype("heaviside", x1, x2)
    return where(x1 < 0, 0, where(x1 > 0, 1, where(x1 == 0, x2, x1)))


def deg2rad(x) -> Tensor:
    """NumPy's ``deg2rad`` (``radians``): ``x * (pi / 180)`` in the ufunc's float dtype."""
    (x,) = _in_ufunc_dtype("deg2rad", x)
    return x * (math.pi / 180.0)


def rad2deg(x) -> Tensor:
    """NumPy's ``rad2deg`` (``degrees``): ``x * (180 / pi)`` in the ufunc's float dtype."""
    (x,) = _in_ufunc_dtype("rad2deg", x)
    return x * (180.0 / math.pi)


radians, degrees = deg2rad, rad2deg


def exp2(x) -> Tensor:
    """NumPy's ``exp2``: ``2 ** x`` in the ufunc's float dtype."""
    (x,) = _in_ufunc_dtype("exp2", x)
    return fgpow(2.0, x)


def float_power(x1, x2) -> Tensor:
    """NumPy's ``float_power``: the power computed in float64 (complex128 for complex operands)."""
    to = "complex128" if any(isinstance(x, complex) or (isinstance(x, Tensor) and isdtype(x.dtype, "complex floating"))
                             for x in (x1, x2)) else "float64"
    return fgpow(*(cast(x, to) if isinstance(x, Tensor) else x for x in (x1, x2)))


def sinc(x) -> Tensor:
    """NumPy's ``sinc``: ``sin(pi x) / (pi x)``, as NumPy computes it (1e-20 standing in for 0)."""
    y = math.pi * where(x == 0, 1.0e-20, x)
    return sin(y) / y


def fix(x, out=None) -> Tensor:
    """NumPy's ``fix``: rounds toward zero (``trunc``)."""
    _unsupported("fix", out=out)
    return trunc(x)


def select(condlist, choicelist, default=0) -> Tensor:
    """NumPy's ``select``: where the first true condition's choice, else ``default``."""
    if len(condlist) != len(choicelist):
        raise TraceError(f"{op_prefix()}select: list of cases must be same length as list of conditions "
                         f"[at {user_loc()}]")
    if not condlist:
        raise TraceError(f"{op_prefix()}select with an empty condition list is not possible [at {user_loc()}]")
    out = default
    for c, v in zip(reversed(condlist), reversed(choicelist)):
        out = where(c, v, out)
    return as_tensor(out, "select")
