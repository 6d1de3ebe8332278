"""The array API's data types, their functions and its constants, as fusegen's namespace offers
them: ``fg.float32`` and the other dtype objects, ``astype``, ``finfo``, ``iinfo``,
``result_type``, ``can_cast``, ``isdtype``, and ``e``, ``inf``, ``nan``, ``pi``, ``newaxis``.

In an op's generic trace a traced value's ``x.dtype`` (``trace.TracedDType``) is not known yet
(one graph serves every input dtype): it converts (``astype``, ``dtype=``), and the functions here
that answer a question about it make the op trace per input dtype, where it is known.
"""
from __future__ import annotations

import builtins
import math
from dataclasses import dataclass

import numpy as np

from .. import dtypes as dt
from ..dtypes import DType
from ..errors import DTypeError
from .trace import Tensor, TracedDType, cast, op_prefix

e = math.e
inf = math.inf
nan = math.nan
pi = math.pi
newaxis = None
_PY_SCALARS = (builtins.bool, int, float, complex)   # (``bool`` below is the dtype)


def astype(x, dtype, /, *, copy: bool = True, device=None) -> Tensor:
    """The array API's ``astype``: ``x`` converted to ``dtype`` (a dtype, its name, or another
    traced value's ``.dtype``). A fused kernel never aliases its input, so ``copy`` changes
    nothing; NumPy's conversion rules (float to int truncates toward zero)."""
    return cast(x, dtype)


def _concrete(x, fn: str) -> DType:
    """``x`` as a DType: a dtype object, a name, a NumPy dtype or array, a traced value or its dtype
    (in the generic trace: ``NeedsDtype``, so the op is traced per input dtype)."""
    if isinstance(x, Tensor):
        x = x.dtype
    if isinstance(x, TracedDType):
        x.unknown(f"fg.{fn}")
    if isinstance(x, np.ndarray):
        x = x.dtype
    return dt.as_dtype(x)


@dataclass(frozen=True)
class finfo_object:  # noqa: N801  (the standard's name)
    """Machine limits of a floating-point dtype (the array API's ``finfo`` result)."""

    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: DType


@dataclass(frozen=True)
class iinfo_object:  # noqa: N801
    """Machine limits of an integer dtype (the array API's ``iinfo`` result)."""

    bits: int
    max: int
    min: int
    dtype: DType


def finfo(type, /) -> finfo_object:  # noqa: A002  (the standard's argument name)
    """The array API's ``finfo``: for a complex dtype, the limits of its real component's dtype."""
    d = _concrete(type, "finfo")
    if d.kind not in "fc":
        raise DTypeError(f"{op_prefix()}fg.finfo takes a floating-point dtype, got {d} (fg.iinfo is for integers)")
    real = dt.real_of(d) if d.kind == "c" else d
    f = np.finfo(real.np)
    return finfo_object(int(f.bits), float(f.eps), float(f.max), float(f.min), float(f.smallest_normal), real)


def iinfo(type, /) -> iinfo_object:  # noqa: A002
    """The array API's ``iinfo``."""
    d = _concrete(type, "iinfo")
    if d.kind not in "iu":
        raise DTypeError(f"{op_prefix()}fg.iinfo takes an integer dtype, got {d} (fg.finfo is for floats)")
    i = np.iinfo(d.np)
    return iinfo_object(int(i.bits), int(i.max), int(i.min), d)


def result_type(*arrays_and_dtypes) -> DType:
    """The array API's ``result_type``: the dtype promotion gives dtypes, arrays and Python
    scalars (weak: a scalar never widens a dtype, NumPy 2's rule). Traced values' dtypes are not
    known while the op is traced: ``x + y`` carries the promoted dtype already."""
    if not arrays_and_dtypes:
        raise DTypeError("fg.result_type needs at least one array or dtype")
    args = []
    for a in arrays_and_dtypes:
        if isinstance(a, _PY_SCALARS) and not isinstance(a, np.generic):
            args.append(a)
        else:
            args.append(_concrete(a, "result_type").np)
    if all(isinstance(a, _PY_SCALARS) for a in args):
        raise DTypeError("fg.result_type needs at least one array or dtype, not Python scalars alone")
    return dt.as_dtype(np.result_type(*args))


def can_cast(from_, to, /) -> bool:
    """The array API's ``can_cast``: whether promotion's rules allow ``from_`` to become ``to``."""
    return builtins.bool(np.can_cast(_concrete(from_, "can_cast").np, _concrete(to, "can_cast").np))


_KINDS = {
    "bool": "b", "signed integer": "i", "unsigned integer": "u", "integral": "iu",
    "real floating": "f", "complex floating": "c", "numeric": "iufc",
}


def isdtype(dtype, kind, /) -> bool:
    """The array API's ``isdtype``: ``kind`` is a dtype, one of the standard's kind names, or a
    tuple of either."""
    d = _concrete(dtype, "isdtype")
    if isinstance(kind, tuple):
        return any(isdtype(d, k) for k in kind)
    if isinstance(kind, str) and kind in _KINDS:
        return d.kind in _KINDS[kind]
    return d == _concrete(kind, "isdtype")


# the standard's dtype objects: fg.float32, ... (``bool`` too, as the namespace's attribute)
bool = dt.bool_  # noqa: A001
int8, int16, int32, int64 = dt.int8, dt.int16, dt.int32, dt.int64
uint8, uint16, uint32, uint64 = dt.uint8, dt.uint16, dt.uint32, dt.uint64
float16, float32, float64 = dt.float16, dt.float32, dt.float64
complex64, complex128 = dt.complex64, dt.complex128
