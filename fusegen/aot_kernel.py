"""``AotKernel``: run any library that speaks MindSpore's AOT custom-kernel ABI.

Mirrors ``ops.Custom(func, out_shape, out_dtype, "aot")``: ``func`` is
``"path/file.cc:Name"`` (sources are compiled through ``fusegen.build``), the
library exports ``Name`` and optionally ``NameInit``, ``NameInferShape``,
``NameInferType`` and fusegen's ``const char *NameErrorString(int code)``.

How a call runs.  Per input signature (dtypes and shapes) the kernel gets one
``AotExtra`` (holding the attributes), its outputs are inferred, ``NameInit`` runs
once, the workspace sizes it set are read back and the workspaces allocated;
the whole argument block (params pointer array, ndims, shapes, dtype strings) is
built then and cached, so a later call with the same signature only writes the
data pointers and crosses ctypes with one pointer argument.  Workspaces are
reused between calls.

Hosting.  ``AotExtra`` is implemented in C++ by ``host/aot_host.cc``, built once
per libstdc++ string ABI; a kernel is hosted by the copy matching its ABI (see
``detect_string_abi``), and every call into kernel code goes through a shim
wrapper that turns a C++ exception into a ``KernelError``.

Threads.  By default calls on one ``AotKernel`` are serialised by a lock: a
hand-written kernel may change its kernel data during a call, as nothing in
MindSpore runs one kernel instance twice at once.  ``reentrant=True`` (what
``backend="aot"`` uses: fusegen's kernels only read their kernel data) lets calls
run at the same time, each with an argument block and workspaces of its own
(taken from a per-signature pool).  ``close()`` waits for running calls, and a
signature evicted from the cache is destroyed only once no call uses it, so a
library or its kernel data is never released under a running call.
"""
from __future__ import annotations

import _ctypes
import ctypes
import inspect
import operator
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import build
from .errors import ArgumentError, AttrError, DTypeError, KernelError, LibraryError, ShapeError

__all__ = ["AotKernel", "detect_string_abi", "TYPE_IDS"]

#: dtype names of the ABI's ``dtypes`` strings, mapped to MindSpore TypeId values.
TYPE_IDS: dict[str, int] = {
    "bool": 30, "int8": 32, "int16": 33, "int32": 34, "int64": 35, "uint8": 37, "uint16": 38,
    "uint32": 39, "uint64": 40, "float16": 42, "float32": 43, "float64": 44, "bfloat16": 45,
    "complex64": 48, "complex128": 49,
}
_NAMES_BY_ID = {v: k for k, v in TYPE_IDS.items()}
_MAX_SIGNATURES = 64  # Init'ed extras kept per kernel; the oldest is destroyed beyond this
_HOST_SOURCE = Path(__file__).resolve().parent / "host" / "aot_host.cc"

_c_void_p, _c_int, _c_int64, _c_size_t = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_size_t
_from_buffer, _addressof = ctypes.c_char.from_buffer, ctypes.addressof


class _FgCall(ctypes.Structure):
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


def _host_shim(abi: int) -> ctypes.CDLL:
    """The AotExtra host for string ABI ``abi`` (0 or 1), built into the cache on first use."""
    with _shims_lock:
        if abi not in _shims:
            flags = ["-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall", "-Wextra",
                     f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-I{build.HEADER_PATH.parent}"]
            # The shim is fusegen's own code: built without the user whitelist check.
            path = build._compile_cached(_HOST_SOURCE, flags, None)
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

def _dtype_name(dtype: np.dtype) -> str:
    if dtype.name not in TYPE_IDS or not dtype.isnative:
        raise DTypeError(f"dtype {dtype} is not supported by the AOT ABI (supported: {', '.join(TYPE_IDS)}; "
                         "byte-swapped arrays must be converted first)")
    return dtype.name


def _as_dtype(value: Any, what: str) -> np.dtype:
    try:
        dtype = np.dtype(value)
    except TypeError:
        raise DTypeError(f"{what}: {value!r} is not a dtype") from None
    _dtype_name(dtype)
    return dtype


def _is_shape(value: Any) -> bool:
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        return False
    try:
        [operator.index(d) for d in value]
    except TypeError:
        return False
    return True


def _shapes(value: Any, what: str) -> list[tuple[int, ...]]:
    """A shape or a sequence of shapes, as a list of int tuples."""
    if _is_shape(value):
        return [tuple(operator.index(d) for d in value)]
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) and all(_is_shape(s) for s in value):
        return [tuple(operator.index(d) for d in s) for s in value]
    raise ShapeError(f"{what}: expected a shape (sequence of ints) or a sequence of shapes, got {value!r}")


def _dtypes(value: Any, what: str) -> list[np.dtype]:
    if isinstance(value, (list, tuple)):
        return [_as_dtype(v, what) for v in value]
    return [_as_dtype(value, what)]


def _is_function(value: Any) -> bool:
    """Callable but not a type: ``np.float32`` is callable, yet it is a dtype here."""
    return callable(value) and not isinstance(value, (type, np.dtype))


def _positional_arity(fn: Callable) -> int | None:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    kinds = [p.kind for p in params]
    if inspect.Parameter.VAR_POSITIONAL in kinds or any(p.default is not p.empty for p in params):
        return None
    return sum(k in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD) for k in kinds)


def _canonical_attrs(attrs: dict | None) -> dict[str, tuple[str, Any]]:
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


def _set_attrs(shim: ctypes.CDLL, extra: int, attrs: dict[str, tuple[str, Any]]) -> None:
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


def _shape_block(shapes: Sequence[tuple[int, ...]]) -> tuple[Any, Any, list]:
    """ctypes ``ndims`` and ``shapes`` arrays (0-d: ndims 0, shape pointer NULL) plus keep-alives."""
    rows = [(_c_int64 * len(s))(*s) if s else None for s in shapes]
    ndims = (_c_int * max(len(shapes), 1))(*[len(s) for s in shapes])
    ptrs = (_c_void_p * max(len(shapes), 1))(*[_addressof(r) if r is not None else None for r in rows])
    return ndims, ptrs, rows


# --------------------------------------------------------------------------- guard mode
# With guard=True (or FUSEGEN_GUARD=1) every output and workspace sits between two zones of a
# known byte pattern, checked after each call: a kernel that writes out of bounds is named in a
# KernelError instead of silently corrupting the heap (or crashing much later).
GUARD_BYTES = 256
_GUARD_BYTE = 0xA5


class _Guarded:
    """A buffer of ``nbytes`` bytes, 64-byte aligned, fenced by guard zones."""

    __slots__ = ("raw", "start", "nbytes", "what")

    def __init__(self, nbytes: int, what: str):
        self.raw = np.empty(nbytes + 2 * GUARD_BYTES + 64, np.uint8)
        address = self.raw.ctypes.data
        self.start = GUARD_BYTES + (-(address + GUARD_BYTES)) % 64
        self.nbytes, self.what = nbytes, what
        self.raw[:self.start] = _GUARD_BYTE
        self.raw[self.start + nbytes:] = _GUARD_BYTE

    @property
    def address(self) -> int:
        return self.raw.ctypes.data + self.start

    def array(self, shape, dtype) -> np.ndarray:
        return self.raw[self.start:self.start + self.nbytes].view(dtype).reshape(shape)

    def damage(self) -> str | None:
        """How the guard zones were overwritten, or None if they are intact."""
        before = np.flatnonzero(self.raw[:self.start] != _GUARD_BYTE)
        after = np.flatnonzero(self.raw[self.start + self.nbytes:] != _GUARD_BYTE)
        if after.size:
            return f"{self.what}: wrote {int(after[-1]) + 1} byte(s) past its end ({self.nbytes} bytes)"
        if before.size:
            return f"{self.what}: wrote {self.start - int(before[0])} byte(s) before its start"
        return None


def _guard_default() -> bool:
    return os.environ.get("FUSEGEN_GUARD", "") not in ("", "0")


def _aligned_workspace(size: int) -> tuple[np.ndarray, int]:
    """A 64-byte aligned buffer of ``size`` bytes (never a NULL pointer, even for 0)."""
    raw = np.empty(size + 64, np.uint8)
    address = raw.ctypes.data
    return raw, address + (-address) % 64


# --------------------------------------------------------------------------- library state

def _pin_dependencies(lib_path: Path) -> None:
    """Keep the libraries a kernel pulled in loaded after the kernel is unloaded.

    Closing the kernel must unload only the kernel's own code: a runtime it
    brought in may own threads (libgomp's idle OpenMP workers), and unloading
    it under them crashes the process.  RTLD_NOLOAD|RTLD_NODELETE on an already
    loaded library just marks it as never to be unloaded.
    """
    for soname in build.needed_libraries(lib_path):
        try:
            ctypes.CDLL(soname, mode=os.RTLD_NOLOAD | os.RTLD_NODELETE | os.RTLD_LOCAL)
        except OSError:
            pass  # not loaded under that name (should not happen for a direct dependency)


class _Loaded:
    """What must be released when the kernel goes away: the extras, then the library.

    Kept apart from ``AotKernel`` so ``weakref.finalize`` can hold it without
    keeping the kernel alive.
    """

    def __init__(self, handle: int, shim: ctypes.CDLL):
        self.handle, self.shim = handle, shim
        self.extras: list[int] = []

    def drop_extra(self, extra: int) -> None:
        if extra in self.extras:
            self.extras.remove(extra)
            error = ctypes.create_string_buffer(512)
            self.shim.fg_extra_destruct_kernel_data(extra, error, len(error))
            self.shim.fg_extra_free(extra)

    def release(self) -> None:
        for extra in list(self.extras):
            self.drop_extra(extra)  # DestructKernelData needs the library still loaded
        if self.handle:
            handle, self.handle = self.handle, 0
            _ctypes.dlclose(handle)


class _Signature:
    """Everything cached for one input signature: the Init'ed extra, the outputs' shapes and
    dtypes, and the argument block (``block``, ``params``; ``keep`` holds what they point to).

    A reentrant kernel's concurrent calls take blocks from ``spare`` (more are made by
    ``new_block``, each with workspaces of its own); ``busy`` counts the calls running on
    this signature, and ``evicted`` marks one dropped from the cache while calls still ran.
    """

    __slots__ = ("key", "extra", "outputs", "workspace_sizes", "block", "block_address", "params", "keep",
                 "spare", "busy", "evicted")

    def __init__(self, key: tuple, extra: int, outputs: list[tuple[tuple[int, ...], np.dtype]],
                 workspace_sizes: list[int], block: _FgCall, params: Any, keep: list):
        self.key, self.extra, self.outputs, self.workspace_sizes = key, extra, outputs, workspace_sizes
        self.block, self.params, self.keep = block, params, keep
        self.block_address = _addressof(block)
        self.spare: list[tuple] = [(block, self.block_address, params, None)]
        self.busy, self.evicted = 0, False

    def new_block(self) -> tuple:
        """Another argument block, sharing the shapes and the extra, with its own host workspaces."""
        ndims, shapes, _rows, dtypes, _workspaces = self.keep
        workspaces = [_aligned_workspace(size) for size in self.workspace_sizes]
        params = (_c_void_p * len(self.params))()
        first = len(self.params) - len(workspaces)
        for i, (_, address) in enumerate(workspaces):
            params[first + i] = address
        block = _FgCall(fn=self.block.fn, nparam=len(params), params=_addressof(params), ndims=_addressof(ndims),
                        shapes=_addressof(shapes), dtypes=_addressof(dtypes), stream=None, extra=self.extra)
        return block, _addressof(block), params, workspaces


# --------------------------------------------------------------------------- the kernel

class AotKernel:
    """A kernel in a library that follows MindSpore's AOT ABI, callable on NumPy arrays.

    ``func`` is ``"path:Name"``; a ``.cc``/``.cpp``/``.cu`` path is compiled (``flags``
    as in ``build.build_library``).  ``attrs`` maps names to bool, int, float, str,
    lists (of int/float) or lists of such lists.  ``out_shape``: None (use the
    library's ``NameInferShape``), a shape, a list of shapes, or a callable taking
    the input shapes (as lists).  ``out_dtype``: None (``NameInferType`` if present,
    else the first input's dtype), a dtype, a list, or a callable taking the input
    dtypes.  ``n_outputs`` defaults to what ``out_shape``/``out_dtype`` imply, else 1;
    it selects the single- or multi-output C++ signature of the infer functions.
    ``n_inputs`` is checked on every call when given or implied by a callable, else
    learned from the first call.
    """

    def __init__(self, func: str, attrs: dict | None = None, out_shape: Any = None, out_dtype: Any = None, *,
                 flags: list[str] | None = None, n_outputs: int | None = None, n_inputs: int | None = None,
                 name: str | None = None, guard: bool | None = None, device: str | None = None,
                 reentrant: bool = False):
        if device not in (None, "cpu", "cuda"):
            raise ArgumentError(f"device must be None (from the library), 'cpu' or 'cuda', got {device!r}")
        path, sep, symbol = str(func).rpartition(":")
        if not sep or not path or not symbol.isidentifier():
            raise ArgumentError(f"func must look like 'path/to/file.cc:FunctionName', got {func!r}")
        self.function = symbol
        self.name = name or symbol
        self.guard = _guard_default() if guard is None else bool(guard)
        self.attrs = _canonical_attrs(attrs)
        counts = {"n_outputs": n_outputs}
        self._out_shape, self._out_dtype = out_shape, out_dtype
        if out_shape is not None and not _is_function(out_shape):
            self._out_shape = _shapes(out_shape, "out_shape")
            counts["out_shape"] = len(self._out_shape)
        if out_dtype is not None and not _is_function(out_dtype):
            self._out_dtype = _dtypes(out_dtype, "out_dtype")
            if isinstance(out_dtype, (list, tuple)):  # a single dtype applies to every output
                counts["out_dtype"] = len(self._out_dtype)
        given = {k: v for k, v in counts.items() if v is not None}
        if len(set(given.values())) > 1:
            raise ArgumentError(f"inconsistent output counts: {given}")
        self.n_outputs = next(iter(given.values()), 1)
        if self.n_outputs < 1:
            raise ArgumentError("a kernel needs at least one output")
        arities = {_positional_arity(f) for f in (out_shape, out_dtype) if _is_function(f)} - {None}
        self.n_inputs = n_inputs if n_inputs is not None else (arities.pop() if len(arities) == 1 else None)

        self.lib_path = build.build_library(path, flags=flags)
        self.cuda_code = build.has_cuda_code(self.lib_path)
        self.device = device or ("cuda" if self.cuda_code else "cpu")
        self._check_device()
        self.string_abi = detect_string_abi(self.lib_path)
        shim = _host_shim(self.string_abi)
        try:
            lib = ctypes.CDLL(str(self.lib_path), mode=os.RTLD_LOCAL)
        except OSError as exc:
            raise LibraryError(f"cannot load {self.lib_path}: {exc}") from None
        _pin_dependencies(self.lib_path)
        self._loaded = _Loaded(lib._handle, shim)
        self._finalizer = weakref.finalize(self, self._loaded.release)
        self._call_main = shim.fg_call_main
        self._open = True
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # notified when the last running call ends
        self._running = 0
        # Concurrent calls need no lock around the kernel: not with guard fences (checked per
        # call) nor on a GPU (launches are asynchronous anyway).
        self.reentrant = bool(reentrant) and not self.guard and self.device == "cpu"
        self._signatures: dict[tuple, _Signature] = {}
        try:
            self._main = self._symbol(lib, symbol, required=True)
            self._init = self._symbol(lib, symbol + "Init")
            self._infer_shape = self._symbol(lib, symbol + "InferShape")
            self._infer_type = self._symbol(lib, symbol + "InferType")
            self._error_string = None
            if self._symbol(lib, symbol + "ErrorString"):
                self._error_string = lib[symbol + "ErrorString"]
                self._error_string.restype, self._error_string.argtypes = ctypes.c_char_p, [_c_int]
            if out_shape is None and not self._infer_shape:
                raise LibraryError(f"{self.lib_path} has no symbol {symbol + 'InferShape'!r} and out_shape "
                                   "is None; pass out_shape=... or export the InferShape function")
        except BaseException:
            self._finalizer()
            raise

    def _check_device(self) -> None:
        """Refuse a pairing that would hand a kernel pointers to memory it cannot read."""
        if self.device == "cpu" and self.cuda_code:
            raise LibraryError(f"{self.name}: {self.lib_path} holds CUDA device code, whose kernels read device "
                               "memory; use device='cuda' (the default for such a library), not device='cpu'")
        if self.device == "cuda" and not self.cuda_code:
            from .lower_cuda import simulator  # under the simulator, device arrays are host memory
            if not simulator():
                raise LibraryError(f"{self.name}: {self.lib_path} holds no CUDA device code (no .nv_fatbin "
                                   "section), so its kernel cannot read device memory; build it from a .cu "
                                   "with nvcc, or use device='cpu'")

    def _symbol(self, lib: ctypes.CDLL, symbol: str, required: bool = False) -> int | None:
        try:
            return ctypes.cast(lib[symbol], _c_void_p).value
        except AttributeError:
            if required:
                raise LibraryError(f"library {self.lib_path} has no symbol {symbol!r} "
                                   "(is it declared extern \"C\"?)") from None
            return None

    # ----------------------------------------------------------------- lifecycle

    @property
    def closed(self) -> bool:
        return not self._open

    def close(self) -> None:
        """Wait for running calls, destroy every kernel instance (``DestructKernelData``) and
        unload the library."""
        with self._lock:
            self._open = False
            while self._running:
                self._idle.wait()
            self._signatures.clear()
            self._finalizer()

    def __enter__(self) -> AotKernel:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"signatures={len(self._signatures)}"
        return (f"AotKernel(name={self.name!r}, lib_path='{self.lib_path}', device={self.device!r}, "
                f"outputs={self.n_outputs}, string_abi={'cxx11' if self.string_abi else 'old'}, {state})")

    # ----------------------------------------------------------------- errors

    def _kernel_error(self, function: str, status: int, result: int, message: bytes) -> KernelError:
        if status:
            text = message.decode(errors="replace")
            return KernelError(f"{self.name}: {function} in {self.lib_path} threw a C++ exception: {text}",
                               library=str(self.lib_path), function=function)
        meaning = None
        if self._error_string is not None:
            raw = self._error_string(result)
            meaning = raw.decode(errors="replace") if raw else None
        text = f"{self.name}: {function} in {self.lib_path} returned error code {result}"
        return KernelError(text + (f": {meaning}" if meaning else ""), library=str(self.lib_path),
                           function=function, code=result, meaning=meaning)

    # ----------------------------------------------------------------- preparation (once per signature)

    def _prepare(self, key: tuple, arrays: list[np.ndarray]) -> _Signature:
        if self.device == "cuda":
            from .aot_cuda import require_device
            require_device(self)  # Init's workspaces are device memory
        in_shapes = [tuple(a.shape) for a in arrays]
        in_dtypes = [a.dtype for a in arrays]
        in_names = [_dtype_name(d) for d in in_dtypes]
        shim, loaded = self._loaded.shim, self._loaded
        extra = shim.fg_extra_new()
        if not extra:
            raise MemoryError("cannot allocate an AotExtra")
        loaded.extras.append(extra)
        try:
            _set_attrs(shim, extra, self.attrs)
            out_shapes = self._output_shapes(in_shapes, extra)
            for k, shape in enumerate(out_shapes):
                if int(np.prod(shape, dtype=object)) >= 2 ** 62:
                    raise ShapeError(f"{self.name}: output {k} would have shape {tuple(shape)}, which is too "
                                     "large: its element count overflows int64 indexing")
            out_dtypes = self._output_dtypes(in_dtypes, in_names, extra)
            if len(out_dtypes) == 1 and self.n_outputs > 1:
                out_dtypes = out_dtypes * self.n_outputs
            if len(out_dtypes) != self.n_outputs:
                raise DTypeError(f"{self.name}: got {len(out_dtypes)} output dtypes, expected {self.n_outputs}")
            names = in_names + [_dtype_name(d) for d in out_dtypes]
            ndims, shapes, rows = _shape_block(in_shapes + out_shapes)
            dtypes = (ctypes.c_char_p * len(names))(*[n.encode() for n in names])
            if self._init:
                result, error = _c_int(0), ctypes.create_string_buffer(1024)
                status = shim.fg_call_init(self._init, ndims, shapes, dtypes, extra, ctypes.byref(result),
                                           error, len(error))
                if status or result.value:
                    raise self._kernel_error(self.function + "Init", status, result.value, error.value)
            count = shim.fg_extra_workspace(extra, None, 0)
            sizes = (_c_size_t * max(count, 1))()
            shim.fg_extra_workspace(extra, sizes, count)
            if self.device == "cuda":
                from .aot_cuda import DeviceBuffer
                fenced = [DeviceBuffer(sizes[i], f"workspace {i}", self.guard) for i in range(count)]
                workspaces = [(b, b.address) for b in fenced]
            elif self.guard:
                fenced = [_Guarded(sizes[i], f"workspace {i}") for i in range(count)]
                workspaces = [(g, g.address) for g in fenced]
            else:
                workspaces = [_aligned_workspace(sizes[i]) for i in range(count)]
            n_in, n_out = len(arrays), len(out_shapes)
            params = (_c_void_p * (n_in + n_out + count))()
            for i, (_, address) in enumerate(workspaces):
                params[n_in + n_out + i] = address
            block = _FgCall(fn=self._main, nparam=len(params), params=_addressof(params),
                            ndims=_addressof(ndims), shapes=_addressof(shapes), dtypes=_addressof(dtypes),
                            stream=None, extra=extra)
        except BaseException:
            loaded.drop_extra(extra)
            raise
        signature = _Signature(key, extra, list(zip(out_shapes, out_dtypes)), [sizes[i] for i in range(count)],
                               block, params, [ndims, shapes, rows, dtypes, workspaces])
        if len(self._signatures) >= _MAX_SIGNATURES:
            self._evict(self._signatures.pop(next(iter(self._signatures))))
        self._signatures[key] = signature
        if self.n_inputs is None:
            self.n_inputs = n_in
        return signature

    def _evict(self, signature: _Signature) -> None:
        """Drop a signature's kernel instance, at once or, if calls still run on it, when the
        last one ends. A caller holding the signature (``prepare``) gets it re-prepared."""
        signature.evicted = True
        if not signature.busy:
            self._loaded.drop_extra(signature.extra)

    def _output_shapes(self, in_shapes: list[tuple[int, ...]], extra: int) -> list[tuple[int, ...]]:
        if _is_function(self._out_shape):
            shapes = _shapes(self._out_shape(*[list(s) for s in in_shapes]), "out_shape callable result")
        elif self._out_shape is not None:
            shapes = self._out_shape
        else:
            shapes = self._call_infer_shape(in_shapes, extra)
        if len(shapes) != self.n_outputs:
            raise ShapeError(f"{self.name}: got {len(shapes)} output shapes {shapes}, expected {self.n_outputs}")
        if any(d < 0 for s in shapes for d in s):
            raise ShapeError(f"{self.name}: output shapes {shapes} are not concrete (negative dims)")
        return shapes

    def _call_infer_shape(self, in_shapes: list[tuple[int, ...]], extra: int) -> list[tuple[int, ...]]:
        ndims, shapes, _rows = _shape_block(in_shapes)
        cap_dims, cap_outs = 64, max(self.n_outputs, 1)
        for _ in range(2):  # the second round has buffers of the size the first reported
            dims, ranks = (_c_int64 * cap_dims)(), (_c_int64 * cap_outs)()
            n_outs, n_dims, error = _c_size_t(), _c_size_t(), ctypes.create_string_buffer(1024)
            status = self._loaded.shim.fg_call_infer_shape(
                self._infer_shape, int(self.n_outputs > 1), ndims, shapes, extra, dims, cap_dims, ranks,
                cap_outs, ctypes.byref(n_outs), ctypes.byref(n_dims), error, len(error))
            if status == 1:
                raise self._kernel_error(self.function + "InferShape", 1, 0, error.value)
            if status == 0:
                out, pos = [], 0
                for k in range(n_outs.value):
                    out.append(tuple(dims[pos:pos + ranks[k]]))
                    pos += ranks[k]
                return out
            cap_dims, cap_outs = max(n_dims.value, 1), max(n_outs.value, 1)
        raise ShapeError(f"{self.name}: InferShape returned inconsistent sizes")

    def _output_dtypes(self, in_dtypes: list[np.dtype], in_names: list[str], extra: int) -> list[np.dtype]:
        if _is_function(self._out_dtype):
            return _dtypes(self._out_dtype(*in_dtypes), "out_dtype callable result")
        if self._out_dtype is not None:
            return self._out_dtype
        if self._infer_type:
            ids = (_c_int * max(len(in_names), 1))(*[TYPE_IDS[n] for n in in_names])
            out = (_c_int * 64)()
            n_out, error = _c_size_t(), ctypes.create_string_buffer(1024)
            status = self._loaded.shim.fg_call_infer_type(self._infer_type, int(self.n_outputs > 1), ids,
                                                          len(in_names), extra, out, 64, ctypes.byref(n_out),
                                                          error, len(error))
            if status == 1:
                raise self._kernel_error(self.function + "InferType", 1, 0, error.value)
            if status == 2:
                raise DTypeError(f"{self.name}: InferType returned {n_out.value} types (more than 64)")
            unknown = [t for t in out[:n_out.value] if t not in _NAMES_BY_ID]
            if unknown:
                raise DTypeError(f"{self.name}: InferType returned TypeId(s) {unknown} fusegen cannot map")
            return [_as_dtype(_NAMES_BY_ID[t], "InferType result") for t in out[:n_out.value]]
        if not in_dtypes:
            raise DTypeError(f"{self.name}: no inputs to take the output dtype from; pass out_dtype=...")
        return [in_dtypes[0]] * self.n_outputs

    # ----------------------------------------------------------------- the call

    def _check_out(self, out: Any, signature: _Signature) -> list[np.ndarray]:
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        if len(outs) != len(signature.outputs):
            raise ArgumentError(f"{self.name}: out= has {len(outs)} arrays, the kernel has "
                                f"{len(signature.outputs)} outputs")
        for k, (array, (shape, dtype)) in enumerate(zip(outs, signature.outputs)):
            if not isinstance(array, np.ndarray):
                raise ArgumentError(f"{self.name}: out[{k}] is a {type(array).__name__}, not a numpy array")
            if array.shape != shape:
                raise ShapeError(f"{self.name}: out[{k}] has shape {array.shape}, expected {shape}")
            if array.dtype != dtype:
                raise DTypeError(f"{self.name}: out[{k}] has dtype {array.dtype}, expected {dtype}")
            if not (array.flags.c_contiguous and array.flags.writeable):
                raise ArgumentError(f"{self.name}: out[{k}] must be C-contiguous and writeable")
        return outs

    def _arrays(self, inputs: tuple) -> tuple[list[np.ndarray], tuple]:
        """C-contiguous arrays for ``inputs`` (others are copied) and their signature key.

        A CUDA kernel also takes device arrays (zero-copy views; see ``fusegen.aot_cuda``)."""
        if self.n_inputs is not None and len(inputs) != self.n_inputs:
            raise ArgumentError(f"{self.name}: expected {self.n_inputs} inputs, got {len(inputs)}")
        if self.device == "cuda":
            from .aot_cuda import device_arrays
            arrays = device_arrays(self.name, inputs)
            return arrays, tuple(v for a in arrays for v in (np.dtype(a.dtype), tuple(a.shape)))
        arrays, key = [], []
        for x in inputs:
            if type(x) is not np.ndarray or not x.flags.c_contiguous:
                x = np.asarray(x, order="C")
            arrays.append(x)
            key += (x.dtype, x.shape)
        return arrays, tuple(key)

    def _signature(self, key: tuple, arrays: list[np.ndarray]) -> _Signature:
        if not self._open:
            raise LibraryError(f"{self.name}: the kernel has been closed")
        return self._signatures.get(key) or self._prepare(key, arrays)

    def _enter(self, signature: _Signature, arrays: Sequence) -> _Signature:
        """Under the lock: the live signature for a call (re-prepared if it was evicted), counted busy."""
        if not self._open:
            raise LibraryError(f"{self.name}: the kernel has been closed")
        if signature.evicted:
            signature = self._signature(signature.key, list(arrays))
        signature.busy += 1
        self._running += 1
        return signature

    def _leave(self, signature: _Signature) -> None:
        """Under the lock: the call on ``signature`` has ended."""
        signature.busy -= 1
        self._running -= 1
        self._leave_idle(signature)

    def _leave_idle(self, signature: _Signature) -> None:
        """Under the lock, after a call's counts went down: release what waited for it."""
        if signature.evicted and not signature.busy:
            self._loaded.drop_extra(signature.extra)
        if not self._running and not self._open:  # close() waits (notify costs ~0.5 us: only then)
            self._idle.notify_all()

    def workspace_sizes(self, *inputs: Any) -> list[int]:
        """Byte sizes of the workspaces ``NameInit`` set for these inputs' signature (runs Init if needed)."""
        arrays, key = self._arrays(inputs)
        with self._lock:
            return list(self._signature(key, arrays).workspace_sizes)

    def __call__(self, *inputs: Any, out: Any = None, stream: Any = None) -> Any:
        """Run the kernel.  Inputs that are not C-contiguous arrays are converted (copied).

        A CUDA kernel runs on ``stream`` (a numba/CuPy/PyTorch stream or a ``cudaStream_t`` int;
        default: the default stream) and takes NumPy or device arrays (see ``fusegen.aot_cuda``)."""
        arrays, key = self._arrays(inputs)
        with self._lock:
            signature = self._signature(key, arrays)
        return self.run_prepared(signature, arrays, out, stream=stream)

    def prepare(self, *inputs: Any) -> tuple[Any, list[np.ndarray]]:
        """The prepared signature (Init done, argument block cached) for these inputs.

        With ``run_prepared`` this lets a caller that already keys its own calls (the
        ``backend="aot"`` kernel) skip computing the key a second time.
        """
        arrays, key = self._arrays(inputs)
        with self._lock:
            return self._signature(key, arrays), arrays

    def run_prepared(self, signature: _Signature, arrays: Sequence[np.ndarray], out: Any = None,
                     stream: Any = None):
        """Call the kernel on C-contiguous ``arrays`` whose signature ``prepare`` returned."""
        if self.device == "cuda":
            from . import aot_cuda
            return aot_cuda.run(self, signature, arrays, out, stream)
        if stream is not None:
            raise ArgumentError(f"{self.name}: stream= is for CUDA kernels; this library runs on the CPU")
        if self.guard:
            return self._run_guarded(signature, arrays, out)
        lock = self._lock
        if not self.reentrant:
            with lock:
                signature = self._enter(signature, arrays)
                try:
                    return self._run_block(signature, signature.spare[0], arrays, out)
                finally:
                    self._leave(signature)
        with lock:  # (the common case inline: this is most of a small call's overhead)
            if signature.evicted or not self._open:
                signature = self._enter(signature, arrays)
            else:
                signature.busy += 1
                self._running += 1
            spare = signature.spare
            entry = spare.pop() if spare else None
        try:
            if entry is None:  # more calls at once than ever before: one more block, kept after
                entry = signature.new_block()
            return self._run_block(signature, entry, arrays, out)
        finally:
            with lock:
                if entry is not None:
                    spare.append(entry)
                signature.busy -= 1
                self._running -= 1
                if signature.evicted or not self._open:
                    self._leave_idle(signature)

    def _run_block(self, signature: _Signature, entry: tuple, arrays: Sequence[np.ndarray], out: Any):
        """One call through the argument block ``entry`` (``(block, address, params, keep)``)."""
        block, address, params, _ = entry
        if out is None:
            outs = [np.empty(shape, dtype) for shape, dtype in signature.outputs]
        else:
            outs = self._check_out(out, signature)
        i = 0
        for array in (*arrays, *outs):
            # c_char.from_buffer is ~4x cheaper than array.ctypes.data (this loop is most
            # of a small call's cost) but needs a writable, non-empty buffer.
            try:
                params[i] = _addressof(_from_buffer(array))
            except (TypeError, ValueError, BufferError):
                params[i] = array.ctypes.data
            i += 1
        status = self._call_main(address)
        if status or block.result:
            error = self._kernel_error(self.function, status, block.result, block.error)
            if out is not None:  # the kernel wrote into the caller's arrays directly
                error.args = (error.args[0] + " (the out= arrays may hold partial results; "
                              "guard=True keeps them untouched on failure)",)
            raise error
        return outs[0] if self.n_outputs == 1 else tuple(outs)

    def _run_guarded(self, signature: _Signature, arrays: Sequence[np.ndarray], out: Any):
        """run_prepared in guard mode: outputs in fenced buffers, every fence checked after the call;
        a caller's out= arrays are only written once the kernel is known to have stayed in bounds."""
        given = self._check_out(out, signature) if out is not None else None
        fences = [_Guarded(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize, f"output {k}")
                  for k, (shape, dtype) in enumerate(signature.outputs)]
        outs = [f.array(shape, dtype) for f, (shape, dtype) in zip(fences, signature.outputs)]
        with self._lock:
            signature = self._enter(signature, arrays)
            try:
                params = signature.params
                for i, array in enumerate(arrays):
                    params[i] = array.ctypes.data
                for k, f in enumerate(fences):  # a 0-byte output still gets a valid, fenced pointer
                    params[len(arrays) + k] = f.address
                status = self._call_main(signature.block_address)
                block = signature.block
                workspaces = [w for w, _ in signature.keep[4] if isinstance(w, _Guarded)]
                damage = [d for d in (f.damage() for f in fences + workspaces) if d]
                if damage:
                    raise KernelError(f"{self.name}: {self.function} in {self.lib_path} wrote out of bounds "
                                      f"(guard mode): " + "; ".join(damage), library=str(self.lib_path),
                                      function=self.function, code=None, meaning="out-of-bounds write")
                if status or block.result:
                    raise self._kernel_error(self.function, status, block.result, block.error)
            finally:
                self._leave(signature)
        if given is not None:
            for g, o in zip(given, outs):
                np.copyto(g, o)
            outs = given
        else:
            outs = [o.copy() for o in outs]  # release the fenced buffers' slack
        return outs[0] if self.n_outputs == 1 else tuple(outs)
