"""``fg.compile(op, backend="aot")``: emit the MindSpore-AOT C++ source, build it, and run
it through ``AotKernel``, behind the same call interface as the Numba backend.

The emitted library reads attributes at Init time (as MindSpore's do), so one
``AotKernel`` (one ``AotExtra``) exists per distinct attribute value set; all of them
share the one compiled library.

Dtypes on demand: the library built at construction holds the ``dtypes=`` combinations
(default: every float dtype). A call bringing another combination (int8, bool, ...) emits
and builds a library for that combination alone, on first use, as the Numba backend
compiles per signature. One library per new combination, rather than one library
regenerated with the union, because a library's content then depends only on its
combination: the build cache serves it in any later process whatever order the calls
come in, nothing already loaded is rebuilt or reloaded, and a combination already built
costs a call exactly what it cost before (the per-signature cache is looked up first).
"""
from __future__ import annotations

import hashlib
import threading
from pathlib import Path


from . import dtypes as dt
from . import requests
from .abi_emit import emit
from .build import MINDSPORE_CPU_FLAGS, cache_dir
from .errors import DTypeError
from .ir import OpDef, infer
from .runtime import call_signature


class AotCompiled:
    """A fused op compiled to a native AOT library: ``kernel(*arrays, out=None, **attrs)``."""

    backend = "aot"

    def __init__(self, op: OpDef, device: str = "cpu", dtypes=None, flags=None, dynamic_workspace="kernel", *,
                 kernel_device: str | None = None):
        if flags == "mindspore":
            flags = list(MINDSPORE_CPU_FLAGS)
        self.op, self.flags, self._dynamic_workspace = op, flags, dynamic_workspace
        # Where the kernel's memory lives (the source's device, unless fusegen.aot_cuda runs a C++
        # source on the simulator's device arrays in CI).
        self.device, self._source_device = kernel_device or device, device
        self._variants: dict = {}   # write-request variants of the op -> their compiled kernels
        self.emitted, self.directory, self.func = self._emit(dtypes)
        # each input dtype combination -> the "lib.cc:Name" that holds it (the first library's,
        # then one more library per combination a call brings: see the module docstring)
        self._funcs: dict[tuple[str, ...], str] = {tuple(c): self.func for c in self.emitted.dtypes}
        # An op that returns a 1-tuple gets a 1-tuple back (AotKernel returns a bare array).
        self._one_tuple = op.multi_output and len(op.graph.outputs) == 1
        self._by_attrs: dict[tuple, object] = {}
        self._calls: dict[tuple, object] = {}
        self._lock = threading.Lock()
        self._first = self._kernel(tuple(op.bind_attrs({}).items()) if not any(
            s.required for s in op.attrs.values()) else None)

    def _emit(self, dtypes):
        """Emit the op's source for ``dtypes`` into the cache (named by its content); returns the
        ``Emitted``, its directory and its ``"path.cc:Name"``."""
        emitted = emit(self.op, abi="mindspore-aot", device=self._source_device, dtypes=dtypes,
                       dynamic_workspace=self._dynamic_workspace)
        digest = hashlib.sha256(emitted.source.encode()).hexdigest()[:16]
        directory = Path(cache_dir()) / "aot-src" / f"{self.op.name}-{digest}"
        emitted.write(directory)
        return emitted, directory, emitted.func(directory)

    @property
    def _combos(self) -> set[tuple[str, ...]]:
        """Every input dtype combination built so far."""
        return set(self._funcs)

    def _func_for(self, names: tuple[str, ...]) -> str:
        """The library holding dtype combination ``names``, emitted and built on first use."""
        func = self._funcs.get(names)
        if func is None:
            with self._lock:
                func = self._funcs.get(names)
                if func is None:
                    func = self._emit([names])[2]
                    self._funcs[names] = func
        return func

    @property
    def source(self) -> str:
        """The source of the library built at construction (for the ``dtypes=`` combinations)."""
        return self.emitted.source

    @property
    def lib_path(self):
        k = next((k for (func, _), k in self._by_attrs.items() if func == self.func), None)
        return k.lib_path if k is not None else None

    def __repr__(self) -> str:
        return f"<fusegen.AotCompiled {self.op.name} device={self.device} func={self.func}>"

    def _kernel(self, attrs: tuple | None, func: str | None = None):
        """The ``AotKernel`` of library ``func`` (default: the first one) for attribute values ``attrs``."""
        if attrs is None:
            return None
        key = (func or self.func, attrs)
        k = self._by_attrs.get(key)
        if k is None:
            from .aot_kernel import AotKernel
            with self._lock:
                k = self._by_attrs.get(key)
                if k is None:
                    k = AotKernel(key[0], attrs={n: (list(v) if isinstance(v, tuple) else v) for n, v in attrs},
                                  out_shape=None, out_dtype=None, flags=self.flags,
                                  n_outputs=len(self.op.graph.outputs), n_inputs=len(self.op.inputs),
                                  name=self.op.name, device=self.device, reentrant=True)
                    self._by_attrs[key] = k
        return k

    def __call__(self, *arrays, out=None, accumulate=False, skip=None, inplace=False, **attrs):
        if accumulate is not False or skip is not None or inplace:
            return requests.call(self, self._derived, arrays, out, accumulate, skip, inplace, attrs)
        try:
            # Same signature key as the Numba kernel (see runtime.Kernel.__call__).
            key = tuple([(a.dtype, a.shape) for a in arrays])
            if attrs:
                key = (key, *attrs.items(), *map(type, attrs.values()))
            kernel, signature = self._calls[key]
        except (KeyError, AttributeError, TypeError):
            return self._slow_call(arrays, out, attrs)
        for a in arrays:
            if not a.flags.c_contiguous:  # copied, as AotKernel does
                res = kernel(*arrays, out=out)
                break
        else:
            res = kernel.run_prepared(signature, arrays, out)
        return (res,) if self._one_tuple else res

    def _derived(self, op: OpDef) -> AotCompiled:
        """The compiled write-request variant of this op."""
        return self._variant(op, lambda combos: AotCompiled(
            op, device=self._source_device, dtypes=combos, flags=self.flags, dynamic_workspace=self._dynamic_workspace))

    def _variant(self, op: OpDef, make):
        """``make(combos)``, cached per variant op: its dtype combinations are this op's, each with
        the accumulated outputs' dtypes appended (their ``prev`` inputs)."""
        with self._lock:
            k = self._variants.get(op)
        if k is None:
            combos = []
            for combo in sorted(self._combos):
                spec = infer(self.op, combo, [None] * len(combo),
                             {n: s.default for n, s in self.op.attrs.items()})
                combos.append(combo + tuple(spec.out_dtypes[j].name for j in sorted(op.accumulate)))
            k = make(combos)
            with self._lock:
                k = self._variants.setdefault(op, k)
        return k

    def _slow_call(self, arrays, out, attrs):
        arrs, key = call_signature(self.op, arrays, attrs)
        hit = self._calls.get(key) if key is not None else None
        kernel = hit[0] if hit is not None else self._prepare(arrs, attrs, key)
        res = kernel(*arrs, out=out)
        return (res,) if self._one_tuple else res

    def _prepare(self, arrs, attrs, key):
        """Validate with the IR's rules first, so errors name the op and the node."""
        op = self.op
        names = []
        for i, a in enumerate(arrs):
            try:
                names.append(dt.as_dtype(a.dtype).name)
            except DTypeError:
                raise DTypeError(f"op {op.name}: input {op.inputs[i]!r} has dtype {a.dtype}, which fusegen "
                                 f"does not support") from None
        bound = op.bind_attrs(attrs)
        infer(op, names, [a.shape for a in arrs], bound)  # raises with the op, node and source line
        kernel = self._kernel(tuple(bound.items()), self._func_for(tuple(names)))
        if key is not None:
            signature, _ = kernel.prepare(*arrs)
            self._calls[key] = (kernel, signature)
        return kernel

    def close(self) -> None:
        for k in self._by_attrs.values():
            k.close()
        self._by_attrs.clear()
        self._calls.clear()


def compile_aot(op: OpDef, device: str = "cpu", dtypes=None, flags=None, dynamic_workspace="kernel") -> AotCompiled:
    """emit -> build -> AotKernel. ``flags="mindspore"`` builds with MindSpore's own command;
    ``dynamic_workspace`` is passed to ``fg.emit``."""
    return AotCompiled(op, device=device, dtypes=dtypes, flags=flags, dynamic_workspace=dynamic_workspace)
