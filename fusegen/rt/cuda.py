"""What a CUDA device contributes to a kernel call: a usable GPU (or the simulator), a
``stream=`` (numba, CuPy or PyTorch stream, or a ``cudaStream_t`` int), and inputs that are
NumPy arrays or device arrays (``__cuda_array_interface__``: zero-copy views, C-contiguous or an
error). Where the outputs go follows ``fusegen.native.device``: NumPy inputs give NumPy results,
device inputs device results.
"""
from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..native.device import as_device, is_device_array, require_gpu, resolve_stream


class CudaArguments:
    """The CUDA device's view of a call's arguments."""

    def arguments(self, kernel, arrays, attrs: dict):
        """Inputs classified (device arrays as views, others as NumPy arrays), the signature key
        (None when an attribute value is unhashable), and the resolved stream (``stream=`` is
        taken out of ``attrs``)."""
        require_gpu()
        op = kernel.op
        if len(arrays) != len(op.inputs):
            raise ArgumentError(f"op {op.name} takes {len(op.inputs)} inputs ({', '.join(op.inputs)}), "
                                f"got {len(arrays)}")
        st = resolve_stream(attrs.pop("stream", None))
        ins = classify(op, arrays)
        key = tuple([(np.dtype(a.dtype), tuple(a.shape)) for a in ins])
        if attrs:
            key = (key, *attrs.items(), *map(type, attrs.values()))
        try:
            hash(key)
        except TypeError:
            key = None
        return ins, key, st


CUDA = CudaArguments()


def classify(op, arrays) -> list:
    """Device arrays as zero-copy numba views (C-contiguous or an ``ArgumentError``), anything else
    as a NumPy array (copied to the device by the runner)."""
    return [as_device(a, f"op {op.name}: input {op.inputs[i]!r}") if is_device_array(a) else np.asarray(a)
            for i, a in enumerate(arrays)]
