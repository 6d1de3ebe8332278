"""``AotKernel``'s device-memory calls: a library that carries CUDA device code
(``build.has_cuda_code``) is called the way MindSpore calls it on a GPU: ``params`` hold device
pointers, ``stream`` is a ``cudaStream_t``, workspaces are device memory. Everything else (Init,
InferShape, InferType, the cached argument block, error strings) is the host path's, so this
module adds only what differs (``DeviceCalls``, a base class of ``AotKernel``): where the memory
lives and when to wait.

Memory rules (those of ``fusegen.native.device``, shared with the numba-cuda backend): NumPy
inputs are copied to the device and the outputs back, and the call waits for the stream; when
any input is a device array nothing is copied, the outputs stay on the device and the call
returns once the kernel is queued. A fault inside the kernel then surfaces at the next
synchronization, as it does in CUDA; ``guard=True`` always synchronizes and checks fences around
every output and workspace, so an out-of-bounds write is named at the call.

Under numba-cuda's simulator, "device" arrays are host memory: a CPU-built AOT library can then
stand in for the CUDA one, which is how CI exercises this path without a GPU.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import KernelError
from .buffers import DeviceBuffer, out_of_bounds
from .device import (CudaUnavailableError, as_device, deliver, device_outputs, device_pointer, is_device_array,
                     require_gpu, resolve_stream, stream_handle)


def require_device(kernel) -> None:
    """A usable GPU for this kernel's library, or a ``CudaUnavailableError`` saying why not."""
    require_gpu()
    from ..lower_cuda import simulator  # (here: a host-only process never imports the CUDA lowering)
    if simulator() and kernel.cuda_code:
        raise CudaUnavailableError(f"{kernel.name}: {kernel.lib_path} holds native CUDA code, which needs a real "
                                   "GPU; numba-cuda's simulator (NUMBA_ENABLE_CUDASIM=1) runs only Numba kernels")


def device_arrays(name: str, inputs: Sequence) -> list:
    """Inputs as the device path takes them: device arrays as zero-copy views (C-contiguous or
    an error), anything else as a C-contiguous NumPy array, copied to the device at the call."""
    return [as_device(x, f"{name}: input {i}") if is_device_array(x) else np.asarray(x, order="C")
            for i, x in enumerate(inputs)]


class DeviceCalls:
    """The device-memory call of an ``AotKernel`` (a base class: it runs on the kernel's lock,
    argument blocks and error strings)."""

    def _run_device(self, signature, arrays: Sequence, out, stream):
        """One device-memory call on prepared ``signature``."""
        from numba import cuda
        require_device(self)
        st = resolve_stream(stream)
        name = self.name
        on_device = any(is_device_array(a) for a in arrays)
        shapes = [s for s, _ in signature.outputs]
        dtypes = [d for _, d in signature.outputs]
        outs, given = device_outputs(name, shapes, dtypes, out, on_device, st)
        fences = []
        if self.guard:  # the kernel writes into fenced buffers; the caller's arrays only once it is known good
            fences = [DeviceBuffer(int(np.prod(s, dtype=np.int64)) * np.dtype(d).itemsize, f"output {k}", True)
                      for k, (s, d) in enumerate(signature.outputs)]
            written = [f.array(s, d) for f, (s, d) in zip(fences, signature.outputs)]
        else:
            written = outs
        ins = [a if is_device_array(a) else cuda.to_device(a, stream=st) for a in arrays]
        with self._lock:
            signature = self._enter(signature, arrays)
            try:
                self._launch(signature, (*ins, *written), st)
                if self.guard:
                    self._synchronize(st)
                    workspaces = [w for w, _ in signature.keep[4] if isinstance(w, DeviceBuffer) and w.start]
                    damage = [d for d in (f.damage() for f in fences + workspaces) if d]
                    if damage:
                        raise out_of_bounds(self, damage)
                    for o, w in zip(outs, written):
                        o.copy_to_device(w, stream=st)
            finally:
                self._leave(signature)
        outs = deliver(outs, given, on_device, st, lambda: self._synchronize(st))
        return outs[0] if self.n_outputs == 1 else tuple(outs)

    def _launch(self, signature, operands, st) -> None:
        """Queue the kernel on ``st`` with ``operands``' device pointers (under the kernel's lock)."""
        params = signature.params
        for i, a in enumerate(operands):
            params[i] = device_pointer(a)
        block = signature.block
        block.stream = stream_handle(st)
        status = self._call_main(signature.block_address)
        if status or block.result:
            raise self._kernel_error(self.function, status, block.result, block.error)

    def _synchronize(self, st) -> None:
        """Wait for the stream; a fault inside the kernel becomes a ``KernelError`` naming it."""
        try:
            st.synchronize()
        except Exception as exc:  # numba's CudaAPIError / CudaDriverError: the context is now unusable
            raise KernelError(f"{self.name}: {self.function} in {self.lib_path} failed on the GPU: {exc} "
                              "(an asynchronous fault, e.g. an illegal address, leaves the CUDA context unusable "
                              "for this process)", library=str(self.lib_path), function=self.function) from exc
