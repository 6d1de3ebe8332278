"""AOT kernels on the GPU: ``AotKernel``'s device-memory calls and ``backend="aot", device="cuda"``.

An ``AotKernel`` whose library carries CUDA device code (``build.has_cuda_code``) is called the
way MindSpore calls it on a GPU: ``params`` hold device pointers, ``stream`` is a
``cudaStream_t``, workspaces are device memory. Everything else (Init, InferShape, InferType,
the cached argument block, error strings) is the host path's, so this module adds only what
differs: where the memory lives and when to wait.

Memory rules (the same as the numba-cuda backend's): NumPy inputs are copied to the device and
the outputs back, and the call waits for the stream; when any input is a device array
(``__cuda_array_interface__``: Numba, CuPy, PyTorch) nothing is copied, the outputs stay on the
device and the call returns once the kernel is queued. A fault inside the kernel then surfaces
at the next synchronization, as it does in CUDA; ``guard=True`` always synchronizes and checks
fences around every output and workspace, so an out-of-bounds write is named at the call.

Under numba-cuda's simulator, "device" arrays are host memory: a CPU-built AOT library can then
stand in for the CUDA one, which is how CI exercises this path without a GPU
(``tests/cuda/test_aot_cuda.py``).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import requests
from .aot_compile import AotCompiled
from .errors import KernelError
from .ir import OpDef
from .lower_cuda import simulator
from .runtime_cuda import (CudaUnavailableError, _as_device, deliver, device_outputs, device_pointer,
                           is_device_array, require_gpu, resolve_stream, stream_handle)

GUARD_BYTES = 256   # a multiple of cudaMalloc's alignment, so guarded buffers stay aligned
_GUARD_BYTE = 0xA5


def require_device(kernel) -> None:
    """A usable GPU for this kernel's library, or a ``CudaUnavailableError`` saying why not."""
    require_gpu()
    if simulator() and kernel.cuda_code:
        raise CudaUnavailableError(f"{kernel.name}: {kernel.lib_path} holds native CUDA code, which needs a real "
                                   "GPU; numba-cuda's simulator (NUMBA_ENABLE_CUDASIM=1) runs only Numba kernels")


class DeviceBuffer:
    """``nbytes`` of device memory, optionally between two fences of a known byte pattern."""

    __slots__ = ("raw", "start", "nbytes", "what", "address")

    def __init__(self, nbytes: int, what: str, guard: bool):
        from numba import cuda
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
        before = np.flatnonzero(self.raw[:self.start].copy_to_host() != _GUARD_BYTE)
        after = np.flatnonzero(self.raw[self.start + self.nbytes:].copy_to_host() != _GUARD_BYTE)
        if after.size:
            return f"{self.what}: wrote {int(after[-1]) + 1} byte(s) past its end ({self.nbytes} bytes)"
        if before.size:
            return f"{self.what}: wrote {self.start - int(before[0])} byte(s) before its start"
        return None


def device_arrays(name: str, inputs: Sequence) -> list:
    """Inputs as the device path takes them: device arrays as zero-copy views (C-contiguous or
    an error), anything else as a C-contiguous NumPy array, copied to the device at the call."""
    return [_as_device(x, f"{name}: input {i}") if is_device_array(x) else np.asarray(x, order="C")
            for i, x in enumerate(inputs)]


def run(kernel, signature, arrays: Sequence, out, stream):
    """One device-memory call of ``kernel`` (an ``AotKernel``) on prepared ``signature``."""
    from numba import cuda
    require_device(kernel)
    st = resolve_stream(stream)
    name = kernel.name
    on_device = any(is_device_array(a) for a in arrays)
    shapes = [s for s, _ in signature.outputs]
    dtypes = [d for _, d in signature.outputs]
    outs, given = device_outputs(name, shapes, dtypes, out, on_device, st)
    fences = []
    if kernel.guard:  # the kernel writes into fenced buffers; the caller's arrays only once it is known good
        fences = [DeviceBuffer(int(np.prod(s, dtype=np.int64)) * np.dtype(d).itemsize, f"output {k}", True)
                  for k, (s, d) in enumerate(signature.outputs)]
        written = [f.array(s, d) for f, (s, d) in zip(fences, signature.outputs)]
    else:
        written = outs
    ins = [a if is_device_array(a) else cuda.to_device(a, stream=st) for a in arrays]
    with kernel._lock:
        signature = kernel._enter(signature, arrays)
        try:
            _launch(kernel, signature, (*ins, *written), st)
            if kernel.guard:
                _synchronize(kernel, st)
                workspaces = [w for w, _ in signature.keep[4] if isinstance(w, DeviceBuffer) and w.start]
                damage = [d for d in (f.damage() for f in fences + workspaces) if d]
                if damage:
                    raise KernelError(f"{name}: {kernel.function} in {kernel.lib_path} wrote out of bounds "
                                      f"(guard mode): " + "; ".join(damage), library=str(kernel.lib_path),
                                      function=kernel.function, code=None, meaning="out-of-bounds write")
                for o, w in zip(outs, written):
                    o.copy_to_device(w, stream=st)
        finally:
            kernel._leave(signature)
    outs = deliver(outs, given, on_device, st, lambda: _synchronize(kernel, st))
    return outs[0] if kernel.n_outputs == 1 else tuple(outs)


def _launch(kernel, signature, operands, st) -> None:
    """Queue the kernel on ``st`` with ``operands``' device pointers (under the kernel's lock)."""
    params = signature.params
    for i, a in enumerate(operands):
        params[i] = device_pointer(a)
    block = signature.block
    block.stream = stream_handle(st)
    status = kernel._call_main(signature.block_address)
    if status or block.result:
        raise kernel._kernel_error(kernel.function, status, block.result, block.error)


def _synchronize(kernel, st) -> None:
    """Wait for the stream; a fault inside the kernel becomes a ``KernelError`` naming it."""
    try:
        st.synchronize()
    except Exception as exc:  # numba's CudaAPIError / CudaDriverError: the context is now unusable
        raise KernelError(f"{kernel.name}: {kernel.function} in {kernel.lib_path} failed on the GPU: {exc} "
                          "(an asynchronous fault, e.g. an illegal address, leaves the CUDA context unusable "
                          "for this process)", library=str(kernel.lib_path), function=kernel.function) from exc


class AotCudaCompiled(AotCompiled):
    """The emitted MindSpore-AOT ``.cu`` of an op, built with nvcc and run through ``AotKernel``
    on device memory: ``kernel(*arrays, out=None, stream=None, **attrs)``.

    ``flags``: None builds with ``build.default_cuda_flags(fast_math=False)`` (the results then
    agree with NumPy as the other backends' do); ``"mindspore"`` with MindSpore's own GPU flags
    (``--use_fast_math``), for the architectures this machine's nvcc supports. Building needs
    only nvcc; running needs a GPU.
    """

    def __init__(self, op: OpDef, dtypes=None, flags=None, emit_device: str = "cuda"):
        from .build import default_cuda_flags
        if emit_device not in ("cuda", "cpu"):
            raise ValueError(f"emit_device must be 'cuda' or 'cpu', got {emit_device!r}")
        if emit_device == "cuda":  # "cpu": the C++ source run on simulated device memory (CI's tests)
            flags = default_cuda_flags(fast_math=flags == "mindspore") if flags in (None, "mindspore") else flags
        self.emit_device = emit_device
        super().__init__(op, device=emit_device, dtypes=dtypes, flags=flags, kernel_device="cuda")

    def __repr__(self) -> str:
        return f"<fusegen.AotCudaCompiled {self.op.name} func={self.func}>"

    def _derived(self, op: OpDef) -> AotCudaCompiled:
        """The write-request variant of this op (``fusegen.requests``), built the same way."""
        return self._variant(op, lambda combos: AotCudaCompiled(op, dtypes=combos, flags=self.flags,
                                                                 emit_device=self.emit_device))

    def __call__(self, *arrays, out=None, stream=None, accumulate=False, skip=None, inplace=False, **attrs):
        if accumulate is not False or skip is not None or inplace:
            extra = {} if stream is None else {"stream": stream}
            return requests.call(self, self._derived, arrays, out, accumulate, skip, inplace, {**attrs, **extra})
        ins = device_arrays(f"op {self.op.name}", arrays)
        key = (tuple((a.dtype, tuple(a.shape)) for a in ins), *attrs.items(), *map(type, attrs.values()))
        try:
            hit = self._calls.get(key)
        except TypeError:  # an unhashable attribute value (a list): prepared, not cached
            key, hit = None, None
        if hit is None:
            kernel = self._prepare(ins, attrs, key)
            hit = self._calls[key] if key is not None else (kernel, None)
        kernel, signature = hit
        res = kernel(*ins, out=out, stream=stream) if signature is None else \
            kernel.run_prepared(signature, ins, out, stream=stream)
        return (res,) if self._one_tuple else res


def compile_aot_cuda(op: OpDef, dtypes=None, flags=None) -> AotCudaCompiled:
    """emit the ``.cu`` -> build it with nvcc -> run it through ``AotKernel`` on device memory."""
    return AotCudaCompiled(op, dtypes=dtypes, flags=flags)
