"""What a CUDA device contributes to a kernel call: a usable GPU (or the simulator), a
``stream=`` (numba, CuPy or PyTorch stream, or a ``cudaStream_t`` int), and inputs that are
NumPy arrays or device arrays (``__cuda_array_interface__``: zero-copy views, C-contiguous or an
error). Where the outputs go follows ``fusegen.native.device``: NumPy inputs give NumPy results,
device inputs device results. Also here: how the ``Engine`` runs a CUDA call on a worker's stream.
"""
from __future__ import annotations

import threading

import numpy as np

from ..native.device import as_device, is_device_array, require_gpu, resolve_stream
from .call import check_count, signature_key


class CudaArguments:
    """The CUDA device's view of a call's arguments."""

    def arguments(self, kernel, arrays, attrs: dict):
        """Inputs classified (device arrays as views, others as NumPy arrays), the signature key
        (None when an attribute value is unhashable), and the resolved stream (``stream=`` is
        taken out of ``attrs``)."""
        require_gpu()
        op = kernel.op
        check_count(op, arrays)
        st = resolve_stream(attrs.pop("stream", None))
        ins = classify(op, arrays)
        return ins, signature_key(kernel, ins, attrs), st


CUDA = CudaArguments()


def classify(op, arrays) -> list:
    """Device arrays as zero-copy numba views (C-contiguous or an ``ArgumentError``), anything else
    as a NumPy array (copied to the device by the runner)."""
    return [as_device(a, f"op {op.name}: input {op.inputs[i]!r}") if is_device_array(a) else np.asarray(a)
            for i, a in enumerate(arrays)]


# --- on the Engine's workers ---------------------------------------------------------------------
# numba-cuda's simulator runs a launch by swapping the kernel module's ``cuda`` global for a fake
# one, so two launches at once from different threads corrupt each other: under the simulator
# the engine's CUDA calls take turns (the ordering logic is exercised all the same).
_SIMULATOR_LOCK = threading.Lock()


def run_on_stream(kernel, inputs, kw, stream):
    """A CUDA call on the worker's ``stream`` (or the caller's ``stream=``), synchronized before
    the call counts as done, so later calls may read its outputs from any stream or the host."""
    from ..lower_cuda import simulator
    if "stream" in kw:
        stream = resolve_stream(kw["stream"])
    else:
        kw = {**kw, "stream": stream}
    if simulator():
        with _SIMULATOR_LOCK:
            value = kernel(*inputs, **kw)
    else:
        value = kernel(*inputs, **kw)
    stream.synchronize()
    return value


_STREAM_PARAM: dict = {}  # code object -> does the function take ``stream``?


def runs_on_stream(kernel) -> bool:
    """Run on a stream: fusegen's CUDA kernels (``device == "cuda"``), or a plain function with a
    ``stream`` parameter."""
    device = getattr(kernel, "device", None)
    if device is not None:
        return device == "cuda"
    code = getattr(kernel, "__code__", None)
    if code is None:
        return False
    if code not in _STREAM_PARAM:
        _STREAM_PARAM[code] = "stream" in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    return _STREAM_PARAM[code]
