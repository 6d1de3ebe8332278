"""NumPy's array methods on a traced value, for ops written the way NumPy code is: ``x.var(-1)``,
``x.argmax(axis=-1)``, ``x.cumsum(0)``, ``x.clip(0, 6)``, ``x.round(2)``, ``x.any()``, ``x.take(i)``,
``x.conj()``, ``x.real``. Each is the namespace function with NumPy's method signature (``ddof``
for the array API's ``correction``; ``axis=None`` flattening a scan, as ``ndarray.cumsum`` does).
"""
from __future__ import annotations

from ..errors import DTypeError, TraceError
from .datatypes import isdtype
from .elementwise import clip, conj, imag, real, round as fground
from .gathers import take
from .layout import is_int, reshape
from .scans import cumulative_prod, cumulative_sum
from .searching import argmax, argmin
from .stats import all as fgall, any as fgany, std, var
from .trace import Tensor, cast, op_prefix, user_loc


def _no_out(out, method: str) -> None:
    if out is not None:
        raise TraceError(f"{op_prefix()}x.{method}(out=...): a traced value has no memory to write into; "
                         f"return the result from the op [at {user_loc()}]")


def _moment(fn, method: str):
    def moment(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, correction=None):
        _no_out(out, method)
        r = fn(self, axis=axis, correction=ddof if correction is None else correction, keepdims=keepdims)
        return r if dtype is None else r.astype(dtype)
    moment.__name__ = method
    return moment


def _scan(fn, method: str):
    def scan(self, axis=None, dtype=None, out=None):
        _no_out(out, method)
        if axis is None:   # NumPy's: over the flattened array
            return fn(reshape(self, (-1,)), axis=0, dtype=dtype)
        return fn(self, axis=axis, dtype=dtype)
    scan.__name__ = method
    return scan


def _arg(fn, method: str):
    def arg(self, axis=None, out=None, *, keepdims=False):
        _no_out(out, method)
        return fn(self, axis=axis, keepdims=keepdims)
    arg.__name__ = method
    return arg


def _truth(fn, method: str):
    def truth(self, axis=None, out=None, keepdims=False, *, where=None):
        _no_out(out, method)
        if where is not None:
            raise TraceError(f"{op_prefix()}x.{method}(where=...) is not supported: use fg.where first [at {user_loc()}]")
        return fn(self, axis=axis, keepdims=keepdims)
    truth.__name__ = method
    return truth


def _round(self, decimals=0, out=None):
    """NumPy's ``round``: halves to even; with ``decimals``, as NumPy computes it, ``rint(x * 10**d)
    / 10**d`` (for d < 0: ``rint(x / 10**-d) * 10**-d``). An integer keeps its dtype, as NumPy's
    does: unchanged for d > 0, and for d < 0 that float64 computation cast back (a bool with
    decimals is NumPy's error too). Which applies depends on the dtype: such an op is traced per
    input dtype."""
    _no_out(out, "round")
    if not is_int(decimals):
        raise TraceError(f"{op_prefix()}x.round(decimals): decimals must be a Python int [at {user_loc()}]")
    d = int(decimals)
    if d == 0:
        return fground(self)
    if isdtype(self.dtype, "bool"):
        raise DTypeError(f"{op_prefix()}x.round(decimals={d}) of a bool (NumPy refuses it too) [at {user_loc()}]")
    scale = 10.0 ** abs(d)
    if isdtype(self.dtype, "integral"):
        return fground(self) if d > 0 else cast(fground(self / scale) * scale, self.dtype)
    return fground(self * scale) / scale if d > 0 else fground(self / scale) * scale


def _clip(self, min=None, max=None, out=None):  # noqa: A002  (NumPy's names)
    _no_out(out, "clip")
    return clip(self, min, max)


def _take(self, indices, axis=None, out=None, mode="raise"):
    _no_out(out, "take")
    return take(self, indices, axis=axis, mode=mode)


Tensor.var = _moment(var, "var")
Tensor.std = _moment(std, "std")
Tensor.cumsum = _scan(cumulative_sum, "cumsum")
Tensor.cumprod = _scan(cumulative_prod, "cumprod")
Tensor.argmax = _arg(argmax, "argmax")
Tensor.argmin = _arg(argmin, "argmin")
Tensor.any = _truth(fgany, "any")
Tensor.all = _truth(fgall, "all")
Tensor.round = _round
Tensor.clip = _clip
Tensor.take = _take
Tensor.conj = Tensor.conjugate = conj
Tensor.real = property(real, doc="The real component (NumPy's ``x.real``).")
Tensor.imag = property(imag, doc="The imaginary component (NumPy's ``x.imag``; 0 for real dtypes).")
