"""The numba-cuda runtime, ``CudaKernel`` (``fg.compile(op, device="cuda")``), and the device
helpers it shares with the AOT CUDA path (``fusegen.aot_cuda``): GPU checks, device-array
classification, streams, output allocation.

A ``CudaKernel`` call: classify the arrays (NumPy, or device arrays through
``__cuda_array_interface__``: Numba, CuPy, PyTorch) -> look the signature up -> on first use
infer shapes, schedule the plan, generate and JIT one kernel per fused group and upload each
group's ``meta`` layout once -> launch every group on the stream. NumPy inputs are copied to
the device and the results back (the call then waits for the stream); when any input is a
device array the outputs stay on the device and the call returns without synchronizing.

numba.cuda is imported only when a CUDA kernel is built, so the CPU backends never pay for it.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from . import dtypes as dt
from . import requests
from .errors import ArgumentError, DTypeError, FusegenError, ShapeError
from .exprs import reg_dtype
from .ir import OpDef, infer
from .plan import Plan, build_plan, schedule


class CudaUnavailableError(FusegenError, RuntimeError):
    """No CUDA GPU (or driver) is present, and the simulator is not enabled."""


def require_gpu() -> None:
    """Raise ``CudaUnavailableError`` unless numba-cuda is installed and a GPU (or
    ``NUMBA_ENABLE_CUDASIM=1``) is usable; the message says what is missing."""
    from .lower_cuda import numba_cuda_missing
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


def _c_contiguous(shape, strides, itemsize: int) -> bool:
    if strides is None or 0 in tuple(shape):
        return True  # an empty array has no layout to get wrong (NumPy calls it contiguous too)
    expect = itemsize
    for n, s in zip(reversed(shape), reversed(strides)):
        if n > 1 and s != expect:
            return False
        expect *= max(n, 1)
    return True


def _as_device(a, what: str):
    """A numba device array viewing ``a`` without a copy; C-contiguous or an error."""
    from numba import cuda
    if hasattr(cuda, "as_cuda_array") and not hasattr(a, "copy_to_host"):
        a = cuda.as_cuda_array(a)  # CuPy, PyTorch, ...: a zero-copy view
    if not _c_contiguous(a.shape, a.strides, a.dtype.itemsize):
        raise ArgumentError(f"{what} is a non-contiguous device array (shape {tuple(a.shape)}, strides "
                            f"{tuple(a.strides)}); the CUDA kernel reads C-contiguous device memory: make a "
                            f"contiguous copy first (e.g. cupy.ascontiguousarray / tensor.contiguous())")
    return a


def _flat(a):
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
            res.append(_as_device(o, f"{what}: out[{k}]"))
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
        np.copyto(g, h)
    return given


@dataclass
class _Group:
    kernel: object
    combine: object
    meta_host: np.ndarray
    meta: object               # the device copy, uploaded once per signature
    operands: tuple
    attrs: tuple
    grid: int
    block: int
    combine_grid: int
    partials: list             # (size, numpy dtype) per split reduction
    source: str
    skip: bool


@dataclass
class _Call:
    out_shapes: tuple
    out_dtypes: tuple
    ws: list                   # (size, numpy dtype) per plan buffer
    groups: list
    attr_values: dict
    pool: list = field(default_factory=list)


class CudaKernel:
    """A fused op compiled with numba-cuda: ``kernel(*arrays, out=None, stream=None, **attrs)``.

    Options: ``threads`` (max threads per block; default 256, 16 under the simulator),
    ``max_blocks`` (grid cap; the kernels grid-stride), ``split`` (force a chunk count on
    splittable reductions; for tests).
    """

    def __init__(self, op: OpDef, threads: int | None = None, max_blocks: int | None = None,
                 split: int | None = None):
        if not isinstance(op, OpDef):
            raise TypeError(f"fusegen.compile expects an @fusegen.op, got {type(op).__name__}")
        if threads is not None and (threads < 1 or threads & (threads - 1) or threads > 1024):
            raise ValueError(f"threads must be a power of two in 1..1024, got {threads}")
        for name, v in (("max_blocks", max_blocks), ("split", split)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        self.op, self.backend, self.device = op, "numba", "cuda"
        self.plan: Plan = build_plan(op)
        self.threads, self.max_blocks, self.split = threads, max_blocks, split
        self._variants: dict = {}   # write-request variants of the op -> their kernels
        self._calls: dict = {}
        self._lock = threading.Lock()
        self._last: _Call | None = None

    def __repr__(self) -> str:
        return f"<fusegen.CudaKernel {self.op.name} backend=numba device=cuda>"

    @property
    def source(self) -> str:
        """Generated source of the most recently prepared signature."""
        if self._last is None:
            return "# no call yet: the source is generated per input signature on the first call\n"
        return "\n\n".join(g.source for g in self._last.groups)

    def _derived(self, op: OpDef) -> CudaKernel:
        """The kernel of a write-request variant of this op (``fusegen.requests``), cached."""
        k = self._variants.get(op)
        if k is None:
            k = self._variants.setdefault(op, CudaKernel(op, self.threads, self.max_blocks, self.split))
        return k

    # --- the call -----------------------------------------------------------------------------
    def __call__(self, *arrays, out=None, stream=None, accumulate=False, skip=None, inplace=False, **attrs):
        if accumulate is not False or skip is not None or inplace:
            extra = {} if stream is None else {"stream": stream}
            return requests.call(self, self._derived, arrays, out, accumulate, skip, inplace, {**attrs, **extra})
        require_gpu()
        op = self.op
        if len(arrays) != len(op.inputs):
            raise ArgumentError(f"op {op.name} takes {len(op.inputs)} inputs ({', '.join(op.inputs)}), "
                                f"got {len(arrays)}")
        from numba import cuda
        st = resolve_stream(stream)
        on_device = any(is_device_array(a) for a in arrays)
        ins = []
        for i, a in enumerate(arrays):
            if is_device_array(a):
                ins.append(_as_device(a, f"op {op.name}: input {op.inputs[i]!r}"))
            else:
                ins.append(np.asarray(a))
        key = (tuple((np.dtype(a.dtype), tuple(a.shape)) for a in ins), tuple(sorted(attrs.items())),
               tuple(type(v) for _, v in sorted(attrs.items())))
        try:
            call = self._calls.get(key)
        except TypeError:  # an unhashable attribute value (a list): prepared, not cached
            key, call = None, None
        if call is None:
            call = self._prepare(ins, attrs, key)
        dev_in = [_flat(a) if is_device_array(a) else
                  cuda.to_device(np.ascontiguousarray(a).reshape(-1), stream=st) for a in ins]
        outs, given = device_outputs(f"op {op.name}", call.out_shapes, call.out_dtypes, out, on_device, st)
        flat_outs = [_flat(o) for o in outs]
        ws = [cuda.device_array(max(n, 1), d, stream=st) for n, d in call.ws]
        names = {"in": dev_in, "out": flat_outs, "buf": ws}
        for g in call.groups:
            if g.skip:
                continue
            args = [names[k][i] for k, i in g.operands]
            parts = [cuda.device_array(max(n, 1), d, stream=st) for n, d in g.partials]
            tail = [g.meta] + [call.attr_values[a] for a in g.attrs]
            g.kernel[g.grid, g.block, st](*args, *parts, *tail)
            if g.combine is not None:
                g.combine[g.combine_grid, g.block, st](*args, *parts, *tail)
        results = deliver([o.reshape(s) for o, s in zip(outs, call.out_shapes)], given, on_device, st)
        return tuple(results) if op.multi_output else results[0]

    def _prepare(self, ins, attrs, key) -> _Call:
        from numba import cuda
        from .lower_cuda import choose_launch, load_group, meta_array, simulator
        op = self.op
        for i, a in enumerate(ins):
            try:
                dt.as_dtype(a.dtype)
            except DTypeError:
                raise DTypeError(f"op {op.name}: input {op.inputs[i]!r} has dtype {a.dtype}, which fusegen "
                                 f"does not support ({', '.join(dt.DTYPES)})") from None
        bound = op.bind_attrs(attrs)
        spec = infer(op, [a.dtype for a in ins], [tuple(a.shape) for a in ins], bound)
        sim = simulator()
        threads = self.threads or (16 if sim else 256)
        max_blocks = self.max_blocks or (4 if sim else 4096)
        groups = []
        for run in schedule(self.plan, spec):
            launch = choose_launch(self.plan, run, threads, self.split, not sim, spec)
            gk = load_group(self.plan, spec, run, launch)
            meta = meta_array(run, launch.nsplit)
            L = run.layout
            outputs = L.o_total * L.inner
            if launch.mode == "block":
                grid = min(max(L.o_total * launch.nsplit, 1), max_blocks)
            else:
                grid = min(max(-(-outputs * launch.nsplit // launch.block), 1), max_blocks)
            stage0 = self.plan.stages[run.stages[0]]
            partials = [(outputs * launch.nsplit, reg_dtype(spec.of(r).acc).np)
                        for r in stage0.reductions] if launch.nsplit > 1 else []
            cgrid = min(max(-(-outputs // launch.block), 1), max_blocks)
            groups.append(_Group(gk.kernel, gk.combine, meta, cuda.to_device(meta), tuple(run.operands), gk.attrs,
                                 grid, launch.block, cgrid, partials, gk.source, skip=outputs == 0))
        ws = [(int(np.prod(spec.of(b).shape)) if spec.of(b).shape else 1, reg_dtype(spec.of(b).acc).np)
              for b in self.plan.buffers]
        call = _Call(spec.out_shapes, tuple(d.np for d in spec.out_dtypes), ws, groups, bound)
        if key is not None:
            with self._lock:
                self._calls[key] = call
        self._last = call
        return call
