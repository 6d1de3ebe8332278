"""CUDA device memory as fusegen's kernels take it: whether a GPU is usable, device arrays
(anything with ``__cuda_array_interface__``: Numba, CuPy, PyTorch) as zero-copy numba views,
streams (numba, CuPy, PyTorch or a raw ``cudaStream_t``), device pointers, and the output rules
both CUDA backends follow: NumPy inputs give NumPy results (copied back, the call waits), device
inputs give device results (the call returns once its kernels are queued).

numba.cuda is imported only inside these functions, so the CPU backends never pay for it.
"""
from __future__ import annotations

import numpy as np

from ..errors import ArgumentError, FusegenError, ShapeError


class CudaUnavailableError(FusegenError, RuntimeError):
    """No CUDA GPU (or driver) is present, and the simulator is not enabled."""


def require_gpu() -> None:
    """Raise ``CudaUnavailableError`` unless numba-cuda is installed and a GPU (or
    ``NUMBA_ENABLE_CUDASIM=1``) is usable; the message says what is missing."""
    from ..lower_cuda import numba_cuda_missing
    missing = numba_cuda_missing()
    if missing:
        raise CudaUnavailableError(missing)
    try:
        from numba import cuda
    except ImportError as e:  # a broken numba-cuda install
        raise CudaUnavailableError(f"numba-cuda does not import ({e}): reinstall it, pip install 'fusegen[cuda]'") \
            from None
    if not cuda.is_available():
        raise CudaUnavailableError("no CUDA GPU is available (numba.cuda.is_available() is False: no device or no "
                                   "driver). Run on a machine with a GPU, or set NUMBA_ENABLE_CUDASIM=1 before "
                                   "Python starts to use numba-cuda's CPU simulator.")


def is_device_array(a) -> bool:
    """A CUDA device array: anything with ``__cuda_array_interface__`` (or a simulator array)."""
    return hasattr(a, "__cuda_array_interface__") or type(a).__name__ == "FakeCUDAArray"


def c_contiguous(shape, strides, itemsize: int) -> bool:
    if strides is None or 0 in tuple(shape):
        return True  # an empty array has no layout to get wrong (NumPy calls it contiguous too)
    expect = itemsize
    for n, s in zip(reversed(shape), reversed(strides)):
        if n > 1 and s != expect:
            return False
        expect *= max(n, 1)
    return True


def as_device(a, what: str):
    """A numba device array viewing ``a`` without a copy; C-contiguous or an error."""
    from numba import cuda
    if hasattr(cuda, "as_cuda_array") and not hasattr(a, "copy_to_host"):
        a = cuda.as_cuda_array(a)  # CuPy, PyTorch, ...: a zero-copy view
    if not c_contiguous(a.shape, a.strides, a.dtype.itemsize):
        raise ArgumentError(f"{what} is a non-contiguous device array (shape {tuple(a.shape)}, strides "
                            f"{tuple(a.strides)}); the CUDA kernel reads C-contiguous device memory: make a "
                            f"contiguous copy first (e.g. cupy.ascontiguousarray / tensor.contiguous())")
    return a


def flat(a):
    n = int(np.prod(a.shape)) if a.shape else 1
    return a.reshape(n) if tuple(a.shape) != (n,) else a


def resolve_stream(stream):
    """A numba stream from: None (the default stream), a numba stream, an int handle, or a CuPy
    (``.ptr``) / PyTorch (``.cuda_stream``) stream object."""
    from numba import cuda
    if stream is None:
        return cuda.default_stream()
    if type(stream) is type(cuda.default_stream()):
        return stream
    if isinstance(stream, bool):
        raise ArgumentError("stream must be a numba.cuda stream, a CuPy/PyTorch stream or an int handle, got bool")
    handle = stream if isinstance(stream, int) else getattr(stream, "ptr", getattr(stream, "cuda_stream", None))
    if not isinstance(handle, int):
        raise ArgumentError(f"stream must be a numba.cuda stream, a CuPy/PyTorch stream or an int cudaStream_t "
                            f"handle, got {type(stream).__name__} {stream!r}")
    return cuda.external_stream(handle)


def device_pointer(a) -> int:
    """The device address of a numba device array (0 for an empty one).

    Under the simulator a "device" array is a NumPy array in disguise, and its address is host
    memory: that is what lets the device-memory path of ``AotKernel`` be tested without a GPU.
    """
    if type(a).__name__ == "FakeCUDAArray":
        return int(a._ary.ctypes.data)
    return int(a.device_ctypes_pointer.value or 0)


def stream_handle(stream) -> int:
    """The ``cudaStream_t`` value of a numba stream (0: the legacy default stream)."""
    handle = getattr(stream, "handle", None)
    value = getattr(handle, "value", handle)  # a ctypes handle, or cuda-python's CUstream / an int
    return int(value or 0)


def device_outputs(what: str, shapes, dtypes, out, on_device: bool, st):
    """Device arrays to write the outputs into, and what the call returns them as.

    Without ``out=`` they are new device arrays. With it, device outputs must come with device
    inputs and host (NumPy) outputs with host inputs; host ``out=`` arrays get device staging
    arrays, copied back by the caller. Every check runs before anything is launched.
    """
    from numba import cuda
    if out is None:
        return [cuda.device_array(s, d, stream=st) for s, d in zip(shapes, dtypes)], None
    given = list(out) if isinstance(out, (tuple, list)) else [out]
    if len(given) != len(shapes):
        raise ArgumentError(f"{what}: out= needs {len(shapes)} arrays, got {len(given)}")
    res = []
    for k, (o, s, d) in enumerate(zip(given, shapes, dtypes)):
        if o is None and isinstance(out, (tuple, list)):   # NumPy's ufuncs: None in out= is allocated
            res.append(cuda.device_array(s, d, stream=st))
            continue
        if is_device_array(o) != on_device:
            where = "device" if on_device else "host (NumPy)"
            raise ArgumentError(f"{what}: out[{k}] is on the wrong device: the inputs are "
                                f"{'on the device' if on_device else 'NumPy arrays'}, so out= must hold "
                                f"{where} arrays")
        if not on_device and not isinstance(o, np.ndarray):
            raise ArgumentError(f"{what}: out[{k}] must be a numpy array, got {type(o).__name__}")
        if tuple(o.shape) != tuple(s) or np.dtype(o.dtype) != d:
            raise ShapeError(f"{what}: out[{k}] must have shape {tuple(s)} and dtype {d}, "
                             f"got {tuple(o.shape)} {o.dtype}")
        if not on_device and not o.flags.writeable:  # refused before launching, as the CPU backends do
            raise ArgumentError(f"{what}: out[{k}] is read-only")
        if on_device:
            res.append(as_device(o, f"{what}: out[{k}]"))
        else:
            res.append(cuda.device_array(s, d, stream=st))
    return res, (given if not on_device else res)


def deliver(results: list, given, on_device: bool, st, synchronize=None) -> list:
    """What a call returns, once its kernels are queued on ``st``: with device inputs the device
    results (or the caller's ``out=`` arrays) at once; with host inputs the results copied back,
    after waiting for the stream (``synchronize()``, default ``st.synchronize``)."""
    if on_device:
        return given if given is not None else results
    host = [r.copy_to_host(stream=st) for r in results]
    (synchronize or st.synchronize)()
    if given is None:
        return host
    for g, h in zip(given, host):
        if g is not None:
            np.copyto(g, h)
    return [h if g is None else g for g, h in zip(given, host)]
