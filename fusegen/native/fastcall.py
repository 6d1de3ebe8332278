"""The AOT backend's small-call path and the Numba runners' fresh outputs: ``host/fastcall.cc``, a
CPython extension built once into fusegen's build cache (content-keyed like every build: its
source, the compiler, and the Python and NumPy it is built against) and loaded from there.

``module()`` is the loaded extension, or None where it cannot be had (no compiler, no Python
headers, a build or load error, or ``FUSEGEN_FASTCALL=0``): the callers then keep the ctypes
path (AOT) or ``np.empty`` (Numba), which give the same results and the same errors, only slower.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import sysconfig
import threading
from pathlib import Path

import numpy as np

from . import build

_SOURCE = Path(__file__).resolve().parent / "host" / "fastcall.cc"
_lock = threading.Lock()
_state: list = []   # [module or None] once tried


def _build():
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").is_file():
        return None
    # -isystem: the headers are the interpreter's and NumPy's, not hashed into the key file by
    # file; the defines put their versions into the key instead.
    flags = ["-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", f"-isystem{include}",
             f"-isystem{np.get_include()}", f"-DFG_PYTHON_ABI={sys.implementation.cache_tag}",
             f"-DFG_NUMPY_VERSION={np.__version__}"]
    path = build.compile_cached(_SOURCE, flags, None)
    spec = importlib.util.spec_from_file_location("fusegen_fastcall", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def module():
    """The extension (``call``, ``fresh``), or None where it is not available (see the module
    docstring)."""
    if _state:
        return _state[0]
    with _lock:
        if not _state:
            mod = None
            if os.environ.get("FUSEGEN_FASTCALL", "1") != "0":
                try:
                    mod = _build()
                except Exception:  # noqa: BLE001 - any failure leaves the ctypes path, which works
                    mod = None
            _state.append(mod)
    return _state[0]


#: The most bytes (inputs and outputs) a call may move and hold the GIL through the kernel: at
#: memory speed a few microseconds, less than handing the GIL to another thread and back costs.
#: Larger calls release it while the kernel runs (``enter``/``leave`` below), as the ctypes path
#: does, without that path's Python (~4 us a call: (16, 4096) float32 layer_norm 19 -> 15 us).
SMALL_CALL_BYTES = 64 * 1024


def small_call(kernel, signature, nbytes: int, call_main, kernel_error):
    """``(call, call_out, prepared, error)`` for a reentrant CPU ``AotKernel``'s ``signature``
    moving ``nbytes``: ``call(prepared, *inputs)`` runs it with fresh outputs and returns them (one
    array or a tuple), ``call_out(prepared, out, *inputs)`` writes into ``out`` (one array, or a
    tuple or list of them) and returns it as the ctypes path does; False: not a call this path
    runs, nothing was done, take the ctypes path; else the shim's status, which
    ``error(status, out)`` turns into the exception the ctypes path raises (``out``: the call had
    ``out=`` arrays, which may hold partial results). None where the path is not available.

    The call gets an argument block of its own (its own workspaces): a ctypes-path call of the
    same signature may be using the others with the GIL released. Above ``SMALL_CALL_BYTES`` the
    kernel runs with the GIL released: the call is counted running on the kernel (``enter`` and
    ``leave``: ``close()`` and eviction wait for it), and a second thread's call while the block
    is in use takes the ctypes path."""
    mod = module()
    if mod is None or not kernel.reentrant:
        return None
    entry = signature.new_block()   # (block, address, params, workspaces): held by ``error``
    n_inputs = len(signature.key) // 2
    large = () if nbytes <= SMALL_CALL_BYTES else kernel.running_calls(signature)
    prepared = mod.prepare(kernel, signature, ctypes_address(call_main), entry[1], n_inputs,
                           [(tuple(s), np.dtype(d)) for s, d in signature.outputs], *large)

    def error(status: int, out: bool = False):
        block = entry[0]
        e = kernel_error(kernel.function, status, block.result, block.error)
        if large:
            mod.release(prepared)   # (a failed large call kept the block until its error was read)
        if out:
            e.args = (e.args[0] + PARTIAL_OUT,)
        return e
    return mod.call, mod.call_out, prepared, error


#: What an error of a call with ``out=`` adds: the kernel wrote into the caller's arrays directly.
PARTIAL_OUT = " (the out= arrays may hold partial results; guard=True keeps them untouched on failure)"


def fresh_outputs(n_inputs: int, outputs) -> tuple | None:
    """``(fresh, prepared)`` for a Numba runner whose signature has ``n_inputs`` inputs and
    ``outputs`` (``(shape, dtype)`` each): ``fresh(prepared, *inputs)`` returns fresh outputs
    (uninitialized, as ``np.empty``'s; one array or a tuple) when every input is an ndarray,
    C-contiguous and aligned, else False with nothing allocated. None where the extension is not
    available (the runner then allocates with ``np.empty``)."""
    mod = module()
    if mod is None or not outputs:
        return None
    return mod.fresh, mod.prepare_fresh(n_inputs, [(tuple(s), np.dtype(d)) for s, d in outputs])


def overlap_fn():
    """``overlap(out, *inputs)``: whether an ndarray of ``out`` (one, or a tuple or list) spans
    bytes that an ndarray among ``inputs`` spans (bounds only, as ``np.may_share_memory``); the
    extension's (one C call on a kernel's ``out=`` path), else NumPy's."""
    mod = module()
    return mod.overlap if mod is not None else numpy_overlap


def numpy_overlap(out, *inputs) -> bool:
    """``overlap`` without the extension, with ``np.may_share_memory``."""
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return any(isinstance(o, np.ndarray) and isinstance(a, np.ndarray) and np.may_share_memory(o, a)
               for o in outs for a in inputs)


def ctypes_address(function) -> int:
    """The address of a ctypes foreign function."""
    import ctypes
    return ctypes.cast(function, ctypes.c_void_p).value


def empty(shape, dtype) -> np.ndarray:
    """``np.empty(shape, dtype)``, its data 64-byte aligned from 64 KiB on where the extension is
    available (``host/fastcall.cc``'s ``kAlignBytes``: a kernel's vector stores then never straddle
    two cache lines); an ordinary array that owns its data either way."""
    mod = module()
    return np.empty(shape, dtype) if mod is None else mod.empty(tuple(shape), np.dtype(dtype))
