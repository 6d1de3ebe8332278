"""Scans (issue #17) as compositions: ``cumulative_sum`` and ``cumulative_prod`` (the array API's,
2024.12: ``axis``, ``dtype``, ``include_initial``; the accumulation dtype is the sum's/prod's:
int64 for signed ints and bool, uint64 for unsigned), and ``cummax``, ``cummin``,
``logcumsumexp`` (PyTorch's names and NumPy's ``maximum.accumulate`` semantics: NaN propagates).

**What this is, and is not.** Each output element ``i`` along the axis is a reduction over the
input elements ``j <= i`` (``j < i`` with ``include_initial``), masked with an iota comparison:
exact, fusable with anything before and after (the scan is an ordinary reduction stage reading a
broadcast view), every backend that runs reductions runs it. It costs O(n) reads per output
(O(n^2) along the axis, from cache): right for the short axes of fused epilogues, not for long
ones. The blocked O(n) scan (per-block totals, then a second pass) is not done yet.
"""
from __future__ import annotations

from .. import dtypes as dt
from ..errors import TraceError
from .layout import as_tensor, iota, is_int, moveaxis
from .trace import Tensor, cast, op_prefix, reduce, user_loc, where
from .vocab import exp, log


def _setup(x, axis, fn: str):
    x = as_tensor(x, fn)
    if axis is None:
        if x.ndim != 1:
            raise TraceError(f"{op_prefix()}{fn}: axis is required for an input of rank {x.ndim} (the array API "
                             f"allows axis=None for 1-d input only) [at {user_loc()}]")
        axis = 0
    if not is_int(axis):
        raise TraceError(f"{op_prefix()}{fn}: axis must be an int, got {axis!r} [at {user_loc()}]")
    return x, int(axis)


def _masked(x, axis: int, include_initial: bool):
    """``y`` (x with ``axis`` last, read as (..., 1, n)) and the (n_out, n) mask of the inputs each
    output accumulates."""
    y = moveaxis(x, axis, -1)
    n = y.shape[-1]
    j = iota(n)
    i = iota(n + 1 if include_initial else n)[:, None]
    keep = (j < i) if include_initial else (j <= i)
    return y, y[..., None, :], keep


def _back(r: Tensor, axis: int) -> Tensor:
    return moveaxis(r, -1, axis)


def _sumprod(kind: str, x, axis, dtype, include_initial: bool, fn: str) -> Tensor:
    x, axis = _setup(x, axis, fn)
    if dtype is not None:
        x = cast(x, dt.as_dtype(dtype))
    _, yy, keep = _masked(x, axis, include_initial)
    r = reduce(kind, where(keep, yy, 0 if kind == "sum" else 1), -1, False)
    if dtype is not None:
        r = cast(r, dt.as_dtype(dtype))
    return _back(r, axis)


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial: bool = False) -> Tensor:
    """The array API's ``cumulative_sum`` (``include_initial``: a leading 0 along ``axis``)."""
    return _sumprod("sum", x, axis, dtype, include_initial, "cumulative_sum")


def cumulative_prod(x, /, *, axis=None, dtype=None, include_initial: bool = False) -> Tensor:
    """The array API's ``cumulative_prod`` (``include_initial``: a leading 1 along ``axis``)."""
    return _sumprod("prod", x, axis, dtype, include_initial, "cumulative_prod")


def _extreme(kind: str, x, axis, fn: str) -> Tensor:
    x, axis = _setup(x, axis, fn)
    y, yy, keep = _masked(x, axis, False)
    # masked-out inputs read the first element, which every output includes: neutral for max/min
    return _back(reduce(kind, where(keep, yy, y[..., None, :1]), -1, False), axis)


def cummax(x, /, *, axis=None) -> Tensor:
    """Running maximum along ``axis`` (``np.maximum.accumulate``; NaN propagates)."""
    return _extreme("max", x, axis, "cummax")


def cummin(x, /, *, axis=None) -> Tensor:
    """Running minimum along ``axis`` (``np.minimum.accumulate``; NaN propagates)."""
    return _extreme("min", x, axis, "cummin")


def logcumsumexp(x, /, *, axis=None) -> Tensor:
    """``log(cumulative_sum(exp(x)))`` without overflow: each output is shifted by the running
    maximum of its inputs."""
    x, axis = _setup(x, axis, "logcumsumexp")
    y, yy, keep = _masked(x, axis, False)
    m = reduce("max", where(keep, yy, y[..., None, :1]), -1, True)       # (..., n, 1)
    s = reduce("sum", where(keep, exp(yy - m), 0), -1, False)
    return _back(log(s) + m[..., 0], axis)
