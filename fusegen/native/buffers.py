"""Memory a hosted kernel writes: 64-byte aligned workspaces, and buffers fenced by guard zones.

Guard mode (``guard=True`` or ``FUSEGEN_GUARD=1``): every output and workspace sits between two
zones of a known byte pattern, checked after each call, so a kernel that writes out of bounds is
named in a ``KernelError`` instead of silently corrupting the heap (or crashing much later).
``GuardedBuffer`` is host memory, ``DeviceBuffer`` device memory (fenced or not).
"""
from __future__ import annotations

import os

import numpy as np

from ..errors import KernelError

#: Bytes of each guard zone: a multiple of cudaMalloc's alignment, so device buffers stay aligned.
GUARD_BYTES = 256
_GUARD_BYTE = 0xA5


def guard_default() -> bool:
    """Guard mode unless asked otherwise: ``FUSEGEN_GUARD`` set to anything but 0."""
    return os.environ.get("FUSEGEN_GUARD", "") not in ("", "0")


def aligned_workspace(size: int) -> tuple[np.ndarray, int]:
    """A 64-byte aligned buffer of ``size`` bytes (never a NULL pointer, even for 0)."""
    raw = np.empty(size + 64, np.uint8)
    address = raw.ctypes.data
    return raw, address + (-address) % 64


def fence_damage(what: str, nbytes: int, before: np.ndarray, after: np.ndarray) -> str | None:
    """How the guard zones ``before`` and ``after`` a buffer were overwritten, or None."""
    start = len(before)
    bad_before = np.flatnonzero(before != _GUARD_BYTE)
    bad_after = np.flatnonzero(after != _GUARD_BYTE)
    if bad_after.size:
        return f"{what}: wrote {int(bad_after[-1]) + 1} byte(s) past its end ({nbytes} bytes)"
    if bad_before.size:
        return f"{what}: wrote {start - int(bad_before[0])} byte(s) before its start"
    return None


class GuardedBuffer:
    """A host buffer of ``nbytes`` bytes, 64-byte aligned, fenced by guard zones."""

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
        return fence_damage(self.what, self.nbytes, self.raw[:self.start], self.raw[self.start + self.nbytes:])


class DeviceBuffer:
    """``nbytes`` of device memory, optionally between two fences of a known byte pattern."""

    __slots__ = ("raw", "start", "nbytes", "what", "address")

    def __init__(self, nbytes: int, what: str, guard: bool):
        from numba import cuda

        from .device import device_pointer
        pad = GUARD_BYTES if guard else 0
        self.nbytes, self.what, self.start = nbytes, what, pad
        if guard:
            self.raw = cuda.to_device(np.full(nbytes + 2 * pad, _GUARD_BYTE, np.uint8))
        else:
            self.raw = cuda.device_array(max(nbytes, 1), np.uint8)  # never a NULL pointer, even for 0 bytes
        self.address = device_pointer(self.raw) + pad

    def array(self, shape, dtype):
        """The buffer as a device array of ``shape`` and ``dtype`` (a view, no copy)."""
        return self.raw[self.start:self.start + self.nbytes].view(np.dtype(dtype)).reshape(shape)

    def damage(self) -> str | None:
        """How the fences were overwritten, or None (call after the stream is synchronized)."""
        return fence_damage(self.what, self.nbytes, self.raw[:self.start].copy_to_host(),
                            self.raw[self.start + self.nbytes:].copy_to_host())


def out_of_bounds(kernel, damage: list[str]) -> KernelError:
    """The error of a guard-mode call whose fences show ``damage``."""
    return KernelError(f"{kernel.name}: {kernel.function} in {kernel.lib_path} wrote out of bounds "
                       f"(guard mode): " + "; ".join(damage), library=str(kernel.lib_path),
                       function=kernel.function, code=None, meaning="out-of-bounds write")


class GuardedCalls:
    """The guard-mode call of an ``AotKernel`` on the CPU (a base class: it runs on the kernel's
    lock, argument blocks and error strings)."""

    def _run_guarded(self, signature, arrays, out):
        """run_prepared in guard mode: outputs in fenced buffers, every fence checked after the call;
        a caller's out= arrays are only written once the kernel is known to have stayed in bounds."""
        given = signature.check_out(self.name, out) if out is not None else None
        fences = [GuardedBuffer(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize, f"output {k}")
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
                workspaces = [w for w, _ in signature.keep[4] if isinstance(w, GuardedBuffer)]
                damage = [d for d in (f.damage() for f in fences + workspaces) if d]
                if damage:
                    raise out_of_bounds(self, damage)
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
