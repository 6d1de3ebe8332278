"""The one ``Kernel``: a compiled op for a (backend, device), and the call path every backend
and device shares.

A call goes: the *signature key* (dtypes and shapes, then attribute values and their types) is
looked up in a per-kernel dict -> the runner generated for that signature runs. On the first
call with a signature (``_prepare``) everything that depends only on it is done once: inputs
classified and validated, attributes bound, shapes and dtypes inferred with the IR's rules,
then the backend prepares its code and returns the runner. Write requests (``accumulate=``,
``skip=``, ``inplace=``) are rewrites of the op (``fusegen.rt.requests``), compiled as variants
of this kernel.

What differs is contributed, not copied:

* the *device* (``rt.cpu.HOST``, ``rt.cuda.CUDA``): how arguments are classified (NumPy arrays;
  device arrays and a ``stream=``), hence the signature key;
* the *executor* of a backend (``rt.numba_cpu``, ``rt.numba_cuda``, ``rt.aot``): what a signature
  prepares (Numba functions, CUDA launches, an emitted library) and the runner, which allocates
  outputs the device's way and launches.
"""
from __future__ import annotations

import operator
import threading

import numpy as np

from .. import dtypes as dt
from ..dtypes import exact_attr
from ..errors import AxisError, DTypeError
from ..ir import OpDef, infer, set_eager_executor
from ..native import fastcall
from ..plan import Plan, build_plan, scan_form
from ..plan.viewsteps import MAX_RANK, MapError
from . import requests
from .call import Call, call_fn, key_fn, remember

BACKENDS = ("numba", "aot")
DEVICES = ("cpu", "cuda")


class Kernel:
    """A compiled fused op: ``kernel(*arrays, out=None, **attrs)`` (CUDA: also ``stream=``).

    ``backend``: ``"numba"`` (generated Numba functions) or ``"aot"`` (the emitted MindSpore-AOT
    source, built and hosted); ``device``: ``"cpu"`` or ``"cuda"``. ``options`` go to the
    backend (numba-cuda: ``threads``, ``max_blocks``, ``split``; aot: ``dtypes``, ``flags``,
    ``dynamic_workspace``, ``emit_device``). An AOT kernel's ``func``, ``lib_path``, ``flags``
    and ``emitted`` are its executor's (``kernel.executor``).
    """

    def __init__(self, op: OpDef, backend: str = "numba", device: str = "cpu", **options):
        if not isinstance(op, OpDef):
            raise TypeError(f"fusegen.compile expects an @fusegen.op, got {type(op).__name__}")
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}: use 'numba' or 'aot'")
        if device not in DEVICES:
            raise ValueError(f"unknown device {device!r}: use 'cpu' or 'cuda'")
        if backend != "numba":   # the op the emitted source runs (scans composed where they read pieces)
            op = scan_form(op)
        self.op = op
        self.backend = backend
        self.device = device
        self.options = options
        # An op traced per input rank or shape (``OpDef.specializes``) has no plan of its own: each
        # specialization gets a kernel of its own (``_children``), whose calls this one caches.
        # (values shared between stages are stored on the CPU only: plan.shared)
        self.plan: Plan | None = build_plan(op, share=device == "cpu") if op.graph is not None else None
        self._children: dict = {}
        self._calls: dict = {}
        self._families: dict = {}   # what a signature's code depends on -> a prepared call (``_prepare``)
        self._variants: dict = {}   # write-request variants of the op -> their kernels
        self._lock = threading.Lock()
        self._first_calls = threading.RLock()   # one signature prepared at a time (``_slow_call``)
        self._hazards: dict = {}                  # (output, input) -> why not in place (``_hazard``)
        self._last: Call | None = None
        self.key = key_fn(op)                  # the signature key of a call (``rt.call.key_fn``)
        # (a reference cycle, as the executor's back reference is: the kernel holds its call)
        # (on the CPU an out= array sharing memory with an input takes ``_slow_call``, which sees
        # that inputs are read before it is written; a device's outputs are copied back after)
        self._overlap = fastcall.overlap_fn() if device == "cpu" else None
        self._call = call_fn(op, self._calls, self._generic, self._overlap)
        self.place = _device(device)          # what the device contributes: rt.cpu.HOST or rt.cuda.CUDA
        self.executor = _executor(backend, device)(self, **options)

    def __repr__(self) -> str:
        return f"<fusegen.Kernel {self.op.name} backend={self.backend} device={self.device}{self.executor.describe()}>"

    # An AOT kernel's own attributes are its executor's (explicit properties, not __getattr__: a
    # class with __getattr__ pays for it on every attribute access, the hot path's included).
    @property
    def func(self) -> str:
        """AOT: the ``path:Name`` of the emitted source (what MindSpore and ``fg.AotKernel`` take)."""
        return self.executor.func

    @property
    def lib_path(self):
        """AOT: the built library."""
        return self.executor.lib_path

    @property
    def flags(self):
        """AOT: the compiler flags the library is built with."""
        return self.executor.flags

    @property
    def emitted(self):
        """AOT: the emitted files (``fg.emit``'s result)."""
        return self.executor.emitted

    @property
    def source(self) -> str:
        """The generated source: the emitted file (AOT), or the most recently prepared signature's
        Numba functions."""
        return self.executor.source(self._last)

    def sources(self) -> dict:
        """Every prepared signature's generated source, by signature key (AOT: its library's
        emitted source, one for all signatures unless the op is emitted per specialization)."""
        return {k: self.executor.source(c) for k, c in self._calls.items()}

    def close(self) -> None:
        """Release native resources (AOT: unload the libraries, once the calls running on them
        end; calls meanwhile on a closed library raise LibraryError). The prepared signatures go
        too: a later call prepares its signature again, loading the library anew."""
        self.executor.close()
        self._calls.clear()

    # --- the call path ------------------------------------------------------------------------
    # ``kernel(*arrays, out=None, accumulate=False, skip=None, inplace=False, **attrs)`` runs the
    # function generated for this kernel's op (``rt.call.call_fn``): a property, as Python looks
    # ``__call__`` up on the type (the property hands back the instance's own function, with no
    # wrapper call in between); whatever that function does not serve goes to ``_generic``.
    __call__ = property(operator.attrgetter("_call"), doc="Run the kernel (see the class docstring).")

    def _generic(self, arrays, out, accumulate, skip, inplace, attrs):
        if accumulate is not False or skip is not None or inplace:
            if self.op.graph is None:   # traced per signature: the requests rewrite its specialization
                arrs, _, _ = self.place.arguments(self, arrays, attrs)
                k = self.specialized(arrs, attrs)
                return requests.call(k, k._derived, arrays, out, accumulate, skip, inplace, attrs)
            return requests.call(self, self._derived, arrays, out, accumulate, skip, inplace, attrs)
        return self._slow_call(arrays, out, attrs)

    def prepared(self, *arrays, **attrs) -> Call:
        """The ``Call`` of this input signature (its runner, output shapes, the executor's parts),
        prepared first if no call had it (``fusegen bench --calls`` times its parts)."""
        arrs, key, _ = self.place.arguments(self, arrays, attrs)
        call = self._calls.get(key) if key is not None else None
        return call if call is not None else self._prepare(arrs, attrs, key)

    def _derived(self, op: OpDef) -> Kernel:
        """The kernel of a write-request variant of this op (``fusegen.rt.requests``), cached."""
        with self._lock:
            k = self._variants.get(op)
        if k is None:
            k = Kernel(op, self.backend, self.device, **self.executor.variant_options(op))
            with self._lock:
                k = self._variants.setdefault(op, k)
        return k

    def variant(self, op: OpDef) -> Kernel:
        """The kernel of ``op``, a rewrite of this kernel's op that serves some of its signatures
        (``fusegen.plan.noops``), with this kernel's options; cached."""
        with self._lock:
            k = self._variants.get(op)
        if k is None:
            k = Kernel(op, self.backend, self.device, **self.options)
            with self._lock:
                k = self._variants.setdefault(op, k)
        return k

    def _slow_call(self, arrays, out, attrs):
        arrs, key, stream = self.place.arguments(self, arrays, attrs)
        call = self._calls.get(key) if key is not None else None
        if call is None and key is not None:
            # One thread prepares a signature, the others wait for it and share its call: threads
            # preparing one at once each made an argument block and small-call path of their own
            # (a suspect, not proven, in a CI run where one threaded call's result came back zeros).
            with self._first_calls:
                call = self._calls.get(key)
                if call is None:
                    call = self._first_call(arrs, attrs, key)
        elif call is None:
            call = self._first_call(arrs, attrs, key)
        if stream is not None:
            return call.run(arrs, out, stream)
        if out is not None and self._overlap is not None and self._overlap(out, *arrs):
            return self._aliased(call, arrs, out)
        return call.run(arrs, out)

    def _aliased(self, call: Call, arrs, out):
        """``call.run`` writing into ``out=`` arrays that share memory with inputs, as NumPy's
        ufuncs do: as if every input were read before any output is written. An output that is
        exactly an input's memory (same address, shape and strides) is written there where the
        plan reads that input only at the index it writes (``requests.inplace_hazard``: an add-to
        request's ``prev + y``, a declared in-place output); any other is computed into a
        temporary array and copied over afterwards."""
        several = isinstance(out, (tuple, list))
        outs = list(out) if several else [out]
        temps = {}
        for k, o in enumerate(outs):
            if not (isinstance(o, np.ndarray) and o.flags.writeable):
                continue   # (the runner's checks say what is wrong with it)
            shared = [i for i, a in enumerate(arrs) if np.may_share_memory(o, a)]
            if not shared or len(shared) == 1 and _same_memory(o, arrs[shared[0]]) \
                    and self._hazard(k, shared[0]) is None:
                continue
            temps[k] = np.empty(o.shape, o.dtype)
        if not temps:
            return call.run(arrs, out)
        given = [temps.get(k, o) for k, o in enumerate(outs)]
        res = call.run(arrs, given if several else given[0])
        for k, t in temps.items():
            np.copyto(outs[k], t)
        if isinstance(res, tuple):
            return tuple(outs[k] if k in temps else r for k, r in enumerate(res))
        return outs[0] if temps else res

    def _hazard(self, k: int, i: int) -> str | None:
        """Why output ``k`` may not be written over input ``i`` (None: it may), from this kernel's
        plan; an op traced per signature has none here, so it may not."""
        if self.plan is None or k >= len(self.op.graph.outputs):
            return "no plan"
        if (k, i) not in self._hazards:   # (an add-to request meets this on every call: found once)
            self._hazards[(k, i)] = requests.inplace_hazard(self.plan, k, i)
        return self._hazards[(k, i)]

    def _first_call(self, arrs, attrs, key) -> Call:
        own = self.plan is not None and self.op.for_dtypes([a.dtype for a in arrs]) is self.op
        return self._prepare(arrs, attrs, key) if own else self._specialized(arrs, attrs, key)

    def specialized(self, arrays, attrs: dict) -> Kernel:
        """The kernel of the op's specialization for these arrays (itself for an op traced once)."""
        if self.plan is not None and self.op.for_dtypes([a.dtype for a in arrays]) is self.op:
            return self
        bound = self.op.bind_attrs(attrs)
        child_op = self.op.specialize([a.dtype for a in arrays], [tuple(a.shape) for a in arrays], bound)
        with self._lock:
            k = self._children.get(id(child_op))
        if k is None:
            k = Kernel(child_op, self.backend, self.device, **self.options)
            with self._lock:   # (keyed by id: the kernel holds its op, so no other op takes that id)
                k = self._children.get(id(child_op)) or k
                remember(self._children, id(child_op), k)
        return k

    def _specialized(self, arrs, attrs, key) -> Call:
        for i, a in enumerate(arrs):
            try:
                dt.as_dtype(a.dtype)
            except DTypeError:
                raise DTypeError(f"op {self.op.name}: input {self.op.inputs[i]!r} has dtype {a.dtype}, which "
                                 f"fusegen does not support ({', '.join(dt.DTYPES)})") from None
        # the key (when there is one) makes the specialization's executor prepare the signature as
        # it does its own (AOT: its argument block and small-call path, not a whole AotKernel call
        # per call: dropout_add_layer_norm at (4, 5) took 8.7 us, 1.4 us with it)
        call = self.specialized(arrs, attrs)._prepare(arrs, attrs, key)
        if key is not None:
            with self._lock:
                remember(self._calls, key, call)
        self._last = call
        return call

    def _prepare(self, arrs, attrs, key) -> Call:
        """Everything a signature needs, once: validation, the IR's rules, the backend's code."""
        op = self.op
        for i, a in enumerate(arrs):
            try:
                dt.as_dtype(a.dtype)
            except DTypeError:
                raise DTypeError(f"op {op.name}: input {op.inputs[i]!r} has dtype {a.dtype}, which fusegen "
                                 f"does not support ({', '.join(dt.DTYPES)})") from None
        self.executor.check(arrs)
        for i, a in enumerate(arrs):   # (every backend's limit, checked before any of them runs)
            if a.ndim > MAX_RANK:
                raise AxisError(f"op {op.name}: input {op.inputs[i]!r} has {a.ndim} dims: fusegen's kernels take at "
                                f"most {MAX_RANK} (the emitted C++'s limit, as MindSpore's AOT ABI's)")
        bound = op.bind_attrs(attrs)
        consulted: set = set()
        spec = infer(op, [a.dtype for a in arrs], [tuple(a.shape) for a in arrs], bound, consulted)
        # Attributes the rules did not consult reach the code as run-time scalars: a signature
        # that differs from a prepared one only in their values takes its code, with the new
        # values (``executor.rebind``). A seed or a step changed per call costs ~0.3 ms (the rules), not
        # a plan and a lowering (17 ms a call with dropout_add_layer_norm), nor memory per value.
        family = _family(arrs, bound, consulted, spec) if key is not None else None
        template = self._families.get(family) if family is not None else None
        call = self.executor.rebind(template, spec, bound, arrs) if template is not None else None
        if call is None:
            try:
                call = self.executor.prepare(spec, bound, arrs, key)
            except MapError as e:
                if e.code != "FG_ERR_VIEW_RANK":
                    raise
                raise AxisError(f"op {op.name}: {e}: fusegen's kernels take at most {MAX_RANK} dims (the emitted "
                                f"C++'s limit, as MindSpore's AOT ABI's)") from None
        if key is not None:
            with self._lock:
                remember(self._calls, key, call)
                if family is not None and template is None:
                    remember(self._families, family, call)
        self._last = call
        return call


def _scalar_class(v):
    """What the generated code's types depend on in a run-time scalar attribute's value: its
    Python type, and for an int which machine type holds it (Numba types 2**63 as uint64)."""
    if type(v) is int:
        return (int, -2 ** 63 <= v < 2 ** 63, 0 <= v < 2 ** 64)
    return (type(v),)


def _family(arrs, bound: dict, consulted: set, spec) -> tuple:
    """What a signature's prepared code depends on: the inputs' dtypes and shapes, the values of
    the attributes the rules consulted (and of any that is not a bool, int or float), the other
    attributes' scalar classes, and the dtype each node computes in (a comparison with an int
    attribute widens with its value)."""
    attrs = tuple((n, exact_attr(v)) if n in consulted or type(v) not in (bool, int, float) else (n, _scalar_class(v))
                  for n, v in bound.items())
    return (tuple((a.dtype, tuple(a.shape)) for a in arrs), attrs, tuple(i.compute for i in spec.info))


def _same_memory(a, b) -> bool:
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0] and a.shape == b.shape
            and a.strides == b.strides and a.dtype.itemsize == b.dtype.itemsize)


def _device(device: str):
    if device == "cpu":
        from .cpu import HOST
        return HOST
    from .cuda import CUDA
    return CUDA


def _executor(backend: str, device: str):
    if backend == "aot":
        from .aot import AotExecutor
        return AotExecutor
    if device == "cpu":
        from .numba_cpu import NumbaCpuExecutor
        return NumbaCpuExecutor
    from .numba_cuda import NumbaCudaExecutor
    return NumbaCudaExecutor


_DEFAULT: dict[int, Kernel] = {}


def default_kernel(op: OpDef) -> Kernel:
    """The kernel an op uses when called directly on arrays (Numba, CPU)."""
    k = _DEFAULT.get(id(op))
    if k is None:
        k = _DEFAULT[id(op)] = Kernel(op)
    return k


def run_eagerly(op: OpDef, *arrays, **kwargs):
    """``op(*arrays)``: a call of the op's default kernel."""
    return default_kernel(op)(*arrays, **kwargs)


def compile(op: OpDef, backend: str = "numba", device: str = "cpu", **options) -> Kernel:
    """Compile ``op`` for a backend and device; returns a callable kernel."""
    return Kernel(op, backend, device, **options)


# The IR runs an op called on arrays through the runtime, which registers itself here.
set_eager_executor(run_eagerly)
