"""A loaded kernel library and what ``AotKernel`` keeps per input signature: ``Loaded`` (the
library handle and the ``AotExtra`` instances to destroy before unloading it) and ``Signature``
(the Init'ed extra, the outputs, and the cached argument blocks).
"""
from __future__ import annotations

import _ctypes
import ctypes
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ArgumentError, DTypeError, ShapeError
from . import build
from .buffers import aligned_workspace
from .host import FgCall

_c_void_p = ctypes.c_void_p
_addressof = ctypes.addressof


def pin_dependencies(lib_path: Path) -> None:
    """Keep the libraries a kernel pulled in loaded after the kernel is unloaded.

    Closing the kernel must unload only the kernel's own code: a runtime it
    brought in may own threads (libgomp's idle OpenMP workers), and unloading
    it under them crashes the process.  RTLD_NOLOAD|RTLD_NODELETE on an already
    loaded library just marks it as never to be unloaded.
    """
    for soname in build.needed_libraries(lib_path):
        if soname in _PINNED:   # (pinned for good: once is enough)
            continue
        try:
            _ctypes.dlopen(soname, os.RTLD_NOLOAD | os.RTLD_NODELETE | os.RTLD_LOCAL)
            _PINNED.add(soname)
        except OSError:
            pass  # not loaded under that name (should not happen for a direct dependency)


_PINNED: set[str] = set()


class Loaded:
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


class Signature:
    """Everything cached for one input signature: the Init'ed extra, the outputs' shapes and
    dtypes, and the argument block (``block``, ``params``; ``keep`` holds what they point to).

    A reentrant kernel's concurrent calls take blocks from ``spare`` (more are made by
    ``new_block``, each with workspaces of its own); ``busy`` counts the calls running on
    this signature, and ``evicted`` marks one dropped from the cache while calls still ran.
    """

    __slots__ = ("key", "extra", "outputs", "workspace_sizes", "block", "block_address", "params", "keep",
                 "spare", "busy", "evicted")

    def __init__(self, key: tuple, extra: int, outputs: list[tuple[tuple[int, ...], np.dtype]],
                 workspace_sizes: list[int], block: FgCall, params: Any, keep: list):
        self.key, self.extra, self.outputs, self.workspace_sizes = key, extra, outputs, workspace_sizes
        self.block, self.params, self.keep = block, params, keep
        self.block_address = _addressof(block)
        self.spare: list[tuple] = [(block, self.block_address, params, None)]
        self.busy, self.evicted = 0, False

    def new_block(self) -> tuple:
        """Another argument block, sharing the shapes and the extra, with its own host workspaces."""
        ndims, shapes, _rows, dtypes, _workspaces = self.keep
        workspaces = [aligned_workspace(size) for size in self.workspace_sizes]
        params = (_c_void_p * len(self.params))()
        first = len(self.params) - len(workspaces)
        for i, (_, address) in enumerate(workspaces):
            params[first + i] = address
        block = FgCall(fn=self.block.fn, nparam=len(params), params=_addressof(params), ndims=_addressof(ndims),
                        shapes=_addressof(shapes), dtypes=_addressof(dtypes), stream=None, extra=self.extra)
        return block, _addressof(block), params, workspaces

    def check_out(self, name: str, out: Any) -> list[np.ndarray]:
        """``out=`` (one array, or a list or tuple of them) as the list of arrays the kernel
        ``name`` may write into: one per output, ndarrays of its shape and dtype, C-contiguous
        and writeable (a None entry: a new array); else the error that says which is wrong."""
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        if len(outs) != len(self.outputs):
            raise ArgumentError(f"{name}: out= has {len(outs)} arrays, the kernel has {len(self.outputs)} outputs")
        for k, (array, (shape, dtype)) in enumerate(zip(outs, self.outputs)):
            if array is None and isinstance(out, (list, tuple)):   # NumPy's ufuncs: None is allocated
                outs[k] = np.empty(shape, dtype)
                continue
            if not isinstance(array, np.ndarray):
                raise ArgumentError(f"{name}: out[{k}] is a {type(array).__name__}, not a numpy array")
            if array.shape != shape:
                raise ShapeError(f"{name}: out[{k}] has shape {array.shape}, expected {shape}")
            if array.dtype != dtype:
                raise DTypeError(f"{name}: out[{k}] has dtype {array.dtype}, expected {dtype}")
            if not (array.flags.c_contiguous and array.flags.writeable):
                raise ArgumentError(f"{name}: out[{k}] must be C-contiguous and writeable")
        return outs
