"""The AOT-ABI host: what lets Python call any library that speaks MindSpore's AOT custom-kernel
ABI. ``host/aot_host.cc`` implements ``AotExtra`` (attributes, workspace sizes, kernel data) and
wraps every call into kernel code so that a C++ exception becomes an error code; it is built once
per libstdc++ string ABI (``host_shim``), and a library is hosted by the copy matching its ABI
(``detect_string_abi``). Here too: the ctypes mirror of one call's argument block (``FgCall``),
and turning Python values (attributes, shapes, dtypes) into what the ABI takes.
"""
from __future__ import annotations

import ctypes
import inspect
import operator
import os
import struct
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..emitters.common import TYPE_IDS
from ..errors import AttrError, DTypeError, LibraryError, ShapeError
from . import build

#: MindSpore TypeId values back to dtype names (what InferType returns).
NAMES_BY_ID = {v: k for k, v in TYPE_IDS.items()}
_HOST_SOURCE = Path(__file__).resolve().parent / "host" / "aot_host.cc"

_c_void_p, _c_int, _c_int64, _c_size_t = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_size_t
_addressof = ctypes.addressof


class FgCall(ctypes.Structure):
    """Mirror of ``FgCall`` in aot_host.cc: one main-function call's arguments."""
    _fields_ = [("fn", _c_void_p), ("nparam", _c_int), ("params", _c_void_p), ("ndims", _c_void_p),
                ("shapes", _c_void_p), ("dtypes", _c_void_p), ("stream", _c_void_p), ("extra", _c_void_p),
                ("result", _c_int), ("error", ctypes.c_char * 512)]


# --------------------------------------------------------------------------- host shim

# restype and argtypes of the shim's C API, in the order of aot_host.cc's declarations
# (P: a pointer or handle, S: size_t, I: int, C: char*).
_P, _S, _I, _C = _c_void_p, _c_size_t, _c_int, ctypes.c_char_p
_SHIM_SIGNATURES: dict[str, tuple[Any, list]] = {
    "fg_abi": (_I, []),
    "fg_extra_new": (_P, []),
    "fg_extra_free": (None, [_P]),
    "fg_extra_set_bool": (_I, [_P, _C, _I]),
    "fg_extra_set_int": (_I, [_P, _C, _c_int64]),
    "fg_extra_set_float": (_I, [_P, _C, ctypes.c_float]),
    "fg_extra_set_str": (_I, [_P, _C, _C, _S]),
    "fg_extra_set_int_vec": (_I, [_P, _C, _P, _S]),
    "fg_extra_set_float_vec": (_I, [_P, _C, _P, _S]),
    "fg_extra_set_int_2d": (_I, [_P, _C, _P, _P, _S]),
    "fg_extra_set_float_2d": (_I, [_P, _C, _P, _P, _S]),
    "fg_extra_set_empty_list": (_I, [_P, _C]),
    "fg_extra_workspace": (_S, [_P, _P, _S]),
    "fg_extra_destruct_kernel_data": (_I, [_P, _P, _S]),
    "fg_call_main": (_I, [_P]),
    # fn, ndims, shapes, dtypes, extra, &result, error, error_size
    "fg_call_init": (_I, [_P, _P, _P, _P, _P, _P, _P, _S]),
    # fn, multi, ndims, shapes, extra, dims, dims_cap, ranks, ranks_cap, &n_out, &n_dims, error, error_size
    "fg_call_infer_shape": (_I, [_P, _I, _P, _P, _P, _P, _S, _P, _S, _P, _P, _P, _S]),
    # fn, multi, input_types, n_inputs, extra, output_types, capacity, &n_out, error, error_size
    "fg_call_infer_type": (_I, [_P, _I, _P, _S, _P, _P, _S, _P, _P, _S]),
}
_shims: dict[int, ctypes.CDLL] = {}
_shims_lock = threading.Lock()


def host_shim(abi: int) -> ctypes.CDLL:
    """The AotExtra host for string ABI ``abi`` (0 or 1), built into the cache on first use."""
    with _shims_lock:
        if abi not in _shims:
            flags = ["-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall", "-Wextra",
                     f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-I{build.HEADER_PATH.parent}"]
            # The shim is fusegen's own code: built without the user whitelist check.
            path = build.compile_cached(_HOST_SOURCE, flags, None)
            lib = ctypes.CDLL(str(path), mode=os.RTLD_LOCAL)
            for name, (restype, argtypes) in _SHIM_SIGNATURES.items():
                fn = getattr(lib, name)
                fn.restype, fn.argtypes = restype, argtypes
            if lib.fg_abi() != abi:
                raise LibraryError(f"host shim {path} was built with string ABI {lib.fg_abi()}, expected {abi}")
            _shims[abi] = lib
        return _shims[abi]


def detect_string_abi(lib_path: str | os.PathLike) -> int:
    """The libstdc++ string ABI (0 = old, 1 = cxx11) a library was compiled with.

    1. Symbols mentioning ``AotExtra`` decide when they mention a std::string
       (``__cxx11`` / ``B5cxx11`` means 1, ``Ss`` means 0).
    2. Otherwise any old-ABI string symbol (``_ZNSs...`` / ``_ZNKSs...``) means 0:
       copy-on-write strings always call into libstdc++, so old-ABI code that
       touches a std::string leaves these behind even when optimised.
    3. Otherwise 1.  That covers new-ABI code (``__cxx11`` symbols), optimised
       new-ABI code that inlined every string operation (short literals fit the
       small-string buffer, so no symbol is left at all), and libraries that use
       no std::string, for which either host works.
    """
    symbols = build.dynamic_symbols(lib_path)
    aot = [s for s in symbols if "8AotExtra" in s]
    if any("cxx11" in s for s in aot):
        return 1
    if any("Ss" in s.split("8AotExtra", 1)[1] for s in aot):
        return 0
    if any(s.startswith(("_ZNSs", "_ZNKSs")) for s in symbols):
        return 0
    return 1


# --------------------------------------------------------------------------- canonicalisation

def dtype_name(dtype: np.dtype) -> str:
    if dtype.name not in TYPE_IDS or not dtype.isnative:
        raise DTypeError(f"dtype {dtype} is not supported by the AOT ABI (supported: {', '.join(TYPE_IDS)}; "
                         "byte-swapped arrays must be converted first)")
    return dtype.name


def as_np_dtype(value: Any, what: str) -> np.dtype:
    try:
        dtype = np.dtype(value)
    except TypeError:
        raise DTypeError(f"{what}: {value!r} is not a dtype") from None
    dtype_name(dtype)
    return dtype


def _is_shape(value: Any) -> bool:
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        return False
    try:
        [operator.index(d) for d in value]
    except TypeError:
        return False
    return True


def canonical_shapes(value: Any, what: str) -> list[tuple[int, ...]]:
    """A shape or a sequence of shapes, as a list of int tuples."""
    if _is_shape(value):
        return [tuple(operator.index(d) for d in value)]
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) and all(_is_shape(s) for s in value):
        return [tuple(operator.index(d) for d in s) for s in value]
    raise ShapeError(f"{what}: expected a shape (sequence of ints) or a sequence of shapes, got {value!r}")


def canonical_dtypes(value: Any, what: str) -> list[np.dtype]:
    if isinstance(value, (list, tuple)):
        return [as_np_dtype(v, what) for v in value]
    return [as_np_dtype(value, what)]


def is_function(value: Any) -> bool:
    """Callable but not a type: ``np.float32`` is callable, yet it is a dtype here."""
    return callable(value) and not isinstance(value, (type, np.dtype))


def positional_arity(fn: Callable) -> int | None:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    kinds = [p.kind for p in params]
    if inspect.Parameter.VAR_POSITIONAL in kinds or any(p.default is not p.empty for p in params):
        return None
    return sum(k in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD) for k in kinds)


def canonical_attrs(attrs: dict | None) -> dict[str, tuple[str, Any]]:
    """Attribute values as (kind, value) with kind one of the shim's eight types (or "empty")."""
    out = {}
    for name, value in (attrs or {}).items():
        if not isinstance(name, str) or not name or "\0" in name:
            raise AttrError(f"attribute names must be non-empty strings, got {name!r}")
        out[name] = _attr_value(name, value)
    return out


def _attr_value(name: str, value: Any) -> tuple[str, Any]:
    def scalar_kind(v: Any) -> str | None:
        if isinstance(v, (bool, np.bool_)):
            return None
        if isinstance(v, (int, np.integer)):
            return "int"
        if isinstance(v, (float, np.floating)):
            return "float"
        return None

    if isinstance(value, (bool, np.bool_)):
        return "bool", bool(value)
    if isinstance(value, str):
        return "str", value.encode()
    kind = scalar_kind(value)
    if kind == "int":
        if not -2**63 <= int(value) < 2**63:
            raise AttrError(f"attribute {name!r}: {value} does not fit in int64")
        return "int", int(value)
    if kind == "float":
        return "float", float(value)
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        if not value:
            return "empty", None
        if all(isinstance(row, (list, tuple, np.ndarray)) for row in value):
            rows = [list(row) for row in value]
            kinds = {scalar_kind(v) for row in rows for v in row}
            if kinds <= {"int"}:
                return "int2d", rows
            if kinds <= {"int", "float"}:
                return "float2d", [[float(v) for v in row] for row in rows]
        else:
            kinds = {scalar_kind(v) for v in value}
            if kinds == {"int"}:
                return "intvec", [int(v) for v in value]
            if kinds <= {"int", "float"}:
                return "floatvec", [float(v) for v in value]
    raise AttrError(f"attribute {name!r}: {type(value).__name__} value {value!r} is not one of the AOT attribute "
                    "types (bool, int, float, str, list of int/float, list of lists of int/float)")


def set_float64_attrs(shim: ctypes.CDLL, extra: int, attrs: dict[str, tuple[str, Any]]) -> None:
    """Each float attribute's float64 value beside it, as its IEEE-754 bits in an int64 attribute
    ``name:f64``: the ABI's only float attribute is ``Attr<float>`` (float32), and a Python
    float's value is float64 (``1.0 - beta2`` in float64 is what NumPy computes). fusegen's
    emitted Init reads it where present (``fg::f64_from_bits``); under MindSpore, which gives
    only the float, the kernel computes with the float32 value. Other kernels never ask for it."""
    for name, (kind, value) in attrs.items():
        if kind == "float":
            bits = struct.unpack("<q", struct.pack("<d", float(value)))[0]
            if shim.fg_extra_set_int(extra, (name + ":f64").encode(), bits):
                raise AttrError(f"attribute {name!r}: the host shim could not store it")


def set_attrs(shim: ctypes.CDLL, extra: int, attrs: dict[str, tuple[str, Any]]) -> None:
    for name, (kind, value) in attrs.items():
        key = name.encode()
        if kind == "bool":
            status = shim.fg_extra_set_bool(extra, key, int(value))
        elif kind == "int":
            status = shim.fg_extra_set_int(extra, key, value)
        elif kind == "float":
            status = shim.fg_extra_set_float(extra, key, value)
        elif kind == "str":
            status = shim.fg_extra_set_str(extra, key, value, len(value))
        elif kind in ("intvec", "floatvec"):
            ctype = _c_int64 if kind == "intvec" else ctypes.c_float
            setter = shim.fg_extra_set_int_vec if kind == "intvec" else shim.fg_extra_set_float_vec
            status = setter(extra, key, (ctype * len(value))(*value), len(value))
        elif kind in ("int2d", "float2d"):
            ctype = _c_int64 if kind == "int2d" else ctypes.c_float
            setter = shim.fg_extra_set_int_2d if kind == "int2d" else shim.fg_extra_set_float_2d
            flat = [v for row in value for v in row]
            lengths = (_c_size_t * len(value))(*[len(row) for row in value])
            status = setter(extra, key, (ctype * max(len(flat), 1))(*flat), lengths, len(value))
        else:
            status = shim.fg_extra_set_empty_list(extra, key)
        if status:
            raise AttrError(f"attribute {name!r}: the host shim could not store it")


def shape_block(shapes: Sequence[tuple[int, ...]]) -> tuple[Any, Any, list]:
    """ctypes ``ndims`` and ``shapes`` arrays (0-d: ndims 0, shape pointer NULL) plus keep-alives."""
    rows = [(_c_int64 * len(s))(*s) if s else None for s in shapes]
    ndims = (_c_int * max(len(shapes), 1))(*[len(s) for s in shapes])
    ptrs = (_c_void_p * max(len(shapes), 1))(*[_addressof(r) if r is not None else None for r in rows])
    return ndims, ptrs, rows

