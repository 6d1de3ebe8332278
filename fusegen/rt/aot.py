"""The AOT backend's executor (``backend="aot"``): emit the MindSpore-AOT source (``fg.emit``),
build it, and run it through ``AotKernel``, behind the same call interface as the Numba backend.

The emitted library reads attributes at Init time (as MindSpore's do), so one ``AotKernel``
(one ``AotExtra``) exists per distinct attribute value set; all of them share the one compiled
library. Per signature the runner calls the prepared argument block (``AotKernel.run_prepared``).

Dtypes on demand, as the Numba backend compiles per signature: without ``dtypes=`` nothing is
built at construction; each input dtype combination a call brings is emitted and built, alone, on
its first call. With ``dtypes=`` those combinations are built ahead, in one library, at
construction, and a call bringing another combination (int8, bool, ...) still gets a library of
its own on first use. One library per new combination, rather than one library regenerated with the
union, because a library's content then depends only on its combination: the build cache serves it
in any later process whatever order the calls come in, nothing already loaded is rebuilt or
reloaded, and a combination already built costs a call exactly what it cost before (the kernel's
signature cache is looked up first). Asking a kernel built without ``dtypes=`` for its ``func`` or
``emitted`` files before any call emits the default combinations (every float dtype; see
``fg.emit``), which the calls then share: what such a caller hands to MindSpore is what it gets.

On a GPU (``device="cuda"``) the ``.cu`` is built with nvcc (``flags``: None builds without
``--use_fast_math``, so results agree with NumPy as the other backends' do; ``"mindspore"`` keeps
MindSpore's GPU flags) and called on device memory. ``emit_device="cpu"`` runs the op's C++ twin
on the simulator's device arrays instead (how CI exercises the device path without a GPU).
"""
from __future__ import annotations

import builtins
import functools
import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..cache import cache_dir, code_stamp
from ..dtypes import exact_attr
from ..emitters.common import Emitted
from ..errors import LibraryError
from ..ir import infer
from ..native.aot_kernel import AotKernel
from ..native.build import MINDSPORE_CPU_FLAGS, default_cuda_flags
from ..native.device import is_device_array
from ..plan.noops import without_noops
from .call import MAX_SIGNATURES, Call, Executor
from .cpu import finish, host_outputs
from .cuda import classify


# --- the emission index: (op, dtypes, options, fusegen's code) -> the files emitted for them ---------
# A warm start (a new process, its kernels built before) then loads the library without tracing
# templates: importing jinja2 and emitting cost more than the rest of a first call (0.25 s of 0.28 s
# for add_reduce_sum). An entry whose files are gone or damaged is a miss: the op is emitted again.
_INDEX_FORMAT = "1"


def _index_path(key: str) -> Path:
    return Path(cache_dir()) / "aot-index" / f"{key}.json"


def _index(key: str, emitted: Emitted, directory: Path) -> None:
    record = dict(directory=str(directory), main=emitted.main, symbol=emitted.symbol, files=sorted(emitted.files),
                  dtypes=[list(combo) for combo in emitted.dtypes],   # dtype names
                  error_table={str(code): text for code, text in emitted.error_table.items()})
    path = _index_path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, path)
    except OSError:   # an unwritable cache costs only the next process's emit
        pass


def _indexed(key: str):
    """The ``(Emitted, directory, func)`` an index entry names, or None."""
    try:
        record = json.loads(_index_path(key).read_text())
        directory = Path(record["directory"])
        files = {name: (directory / name).read_text() for name in record["files"]}
        emitted = Emitted(files, record["main"], record["symbol"],
                          {int(code): text for code, text in record["error_table"].items()},
                          [tuple(str(d) for d in combo) for combo in record["dtypes"]])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    # the directory is named by its source's digest (``AotExecutor._emit``): an edited or truncated
    # file is a miss, and the emit that follows writes it again
    if not directory.name.endswith("-" + hashlib.sha256(emitted.source.encode()).hexdigest()[:16]):
        return None
    return emitted, directory, emitted.func(directory)


@dataclass
class AotCall(Call):
    """A signature's ``AotKernel`` (the one for its attribute values) and prepared signature."""

    kernel: object = None
    signature: object = None
    emitted: object = None     # the Emitted of the library the call runs (its source)
    small: object = None       # the small-call path (``AotKernel.small_call``), where the runner uses it
    func: str | None = None    # the library's "path.cc:Name"


class AotExecutor(Executor):
    """Options: ``dtypes`` (the dtype combinations to emit; see ``fg.emit``), ``flags`` (compiler
    flags, or ``"mindspore"``), ``dynamic_workspace`` (passed to ``fg.emit``), ``emit_device``
    (CUDA only: ``"cpu"`` runs the C++ source on simulated device memory)."""

    def __init__(self, kernel, dtypes=None, flags=None, dynamic_workspace="kernel", emit_device: str | None = None):
        op = kernel.op
        emit_device = emit_device or kernel.device
        if emit_device not in ("cuda", "cpu") or (kernel.device == "cpu" and emit_device != "cpu"):
            raise ValueError(f"emit_device must be 'cuda' or 'cpu' (a CUDA kernel's), got {emit_device!r}")
        if emit_device == "cuda":
            flags = default_cuda_flags(fast_math=flags == "mindspore") if flags in (None, "mindspore") else flags
        elif flags == "mindspore":
            flags = list(MINDSPORE_CPU_FLAGS)
        super().__init__(kernel)
        self.op, self.flags, self._dynamic_workspace = op, flags, dynamic_workspace
        self.emit_device = emit_device
        self.by_attrs: dict[tuple, AotKernel] = {}
        self._built: dict[str, object] = {}   # "path.cc:Name" -> the library built from it
        self._lock = threading.Lock()
        self.directory = None
        if op.graph is None:
            # traced per input rank or shape: each specialization's kernel (rt.kernel's children)
            # emits and builds its own source; this one only dispatches to them
            self.funcs, self.libraries, self._primary, self.first = {}, {}, None, None
            self._one_tuple = self._ahead = False
            return
        # each input dtype combination -> the "lib.cc:Name" that holds it; each library's Emitted
        self.funcs: dict[tuple[str, ...], str] = {}
        self.libraries: dict[str, object] = {}
        self._primary: str | None = None   # the library named by .func (see the module docstring)
        # An op that returns a 1-tuple gets a 1-tuple back (AotKernel returns a bare array).
        self._one_tuple = op.multi_output and len(op.graph.outputs) == 1
        self._ahead = dtypes is not None
        self.first = None
        if self._ahead:
            self._add_library(dtypes)
            self.first = self.kernel_for(tuple(op.bind_attrs({}).items()) if not any(
                s.required for s in op.attrs.values()) else None)

    def _add_library(self, dtypes) -> str:
        """Emit a library for ``dtypes`` (see ``_emit``) and register its combinations; the first
        one becomes the primary library (``func``, ``emitted``)."""
        emitted, directory, func = self._emit(dtypes)
        self.libraries[func] = emitted
        self.funcs.update((tuple(c), func) for c in emitted.dtypes)
        if self._primary is None:
            self._primary, self.directory = func, directory
        return func

    @property
    def func(self) -> str | None:
        """The primary library's ``"path.cc:Name"`` (emitted now if no call has built one)."""
        if self._primary is None and self.op.graph is not None:
            with self._lock:
                if self._primary is None:
                    self._add_library(None)
        return self._primary

    @property
    def emitted(self):
        """The primary library's ``Emitted`` (``fg.emit``'s result)."""
        func = self.func
        return self.libraries[func] if func is not None else None

    def _emit(self, dtypes):
        """Emit the op's source for ``dtypes`` into the cache (named by its content); returns the
        ``Emitted``, its directory and its ``"path.cc:Name"``. The emission index (``_indexed``)
        serves a source emitted before, in any process, without importing jinja2 or emitting."""
        key = self._index_key(dtypes)
        hit = _indexed(key)
        if hit is not None:
            return hit
        from ..abi_emit import emit
        emitted = emit(self.op, abi="mindspore-aot", device=self.emit_device, dtypes=dtypes,
                       dynamic_workspace=self._dynamic_workspace)
        digest = hashlib.sha256(emitted.source.encode()).hexdigest()[:16]
        directory = Path(cache_dir()) / "aot-src" / f"{self.op.name}-{digest}"
        emitted.write(directory)
        _index(key, emitted, directory)
        return emitted, directory, emitted.func(directory)

    def _index_key(self, dtypes) -> str:
        """What decides the emitted files: fusegen's code, the op's text (with its source
        locations, which the files' comments carry), the dtypes as given and the options."""
        h = hashlib.sha256()
        for part in (_INDEX_FORMAT, code_stamp(), self.op.text(), repr(sorted(self.op.inplace.items())),
                     repr(dtypes), self.emit_device, repr(self._dynamic_workspace)):
            h.update(f"{len(part)}:{part}".encode())
        return h.hexdigest()[:32]

    @property
    def combos(self) -> set[tuple[str, ...]]:
        """Every input dtype combination built so far."""
        return set(self.funcs)

    def func_for(self, names: tuple[str, ...]) -> str:
        """The library holding dtype combination ``names``, emitted and built on first use."""
        func = self.funcs.get(names)
        if func is None:
            with self._lock:
                func = self.funcs.get(names)
                if func is None:
                    func = self._add_library([names])
        return func

    def describe(self) -> str:
        return f" func={self._primary}" if self._primary is not None else " (built per dtype combination on first call)"

    def source(self, last=None) -> str:
        """The source of the latest call's library (a specialization's, for an op traced per rank
        or shape), or of the primary library before any call."""
        if last is not None and getattr(last, "emitted", None) is not None:
            return last.emitted.source
        if self.op.graph is None:
            return "// no call yet: an op traced per input rank or shape is emitted per specialization\n"
        return self.emitted.source

    @property
    def lib_path(self):
        """The primary library's build, once a call (or ``dtypes=``) built it."""
        return self._built.get(self._primary)

    def kernel_for(self, attrs: tuple | None, func: str | None = None) -> AotKernel | None:
        """The ``AotKernel`` of library ``func`` (default: the first one) for these bound attribute
        values (created on first use)."""
        if attrs is None:
            return None
        key = (func or self.func, tuple((n, exact_attr(v)) for n, v in attrs))   # (-0.0 is not 0.0)
        k = self.by_attrs.get(key)
        if k is None:
            with self._lock:
                k = self.by_attrs.get(key)
                if k is None:
                    k = self._load(key[0], {n: (list(v) if isinstance(v, tuple) else v) for n, v in attrs})
                    self.by_attrs[key] = k
                    while len(self.by_attrs) > MAX_SIGNATURES:   # (a call holding one keeps it alive)
                        del self.by_attrs[next(iter(self.by_attrs))]
        return k

    def _load(self, func: str, attrs: dict) -> AotKernel:
        """An ``AotKernel`` of ``func`` for ``attrs``: from the library a sibling (another attribute
        value set) built, where there is one (0.6 ms, not the 7 ms of keying the source again: a
        seed changed per call makes one per call)."""
        options = dict(attrs=attrs, out_shape=None, out_dtype=None, n_outputs=len(self.op.graph.outputs),
                       n_inputs=len(self.op.inputs), name=self.op.name, device=self.kernel.device, reentrant=True)
        built = self._built.get(func)
        if built is not None:
            try:
                return AotKernel(f"{built}:{func.rpartition(':')[2]}", **options)
            except LibraryError:   # (gone from the cache, or outside an AOT whitelist): from the source
                pass
        k = AotKernel(func, flags=self.flags, **options)
        self._built[func] = k.lib_path
        return k

    def variant_options(self, op) -> dict:
        """A write-request variant's options: built on demand as this kernel is, or (``dtypes=``)
        ahead for this op's combinations, each with the accumulated outputs' dtypes appended
        (their ``prev`` inputs)."""
        combos = None
        if self._ahead:
            combos = []
            for combo in sorted(self.combos):
                spec = infer(self.op, combo, [None] * len(combo), {n: s.default for n, s in self.op.attrs.items()})
                combos.append(combo + tuple(spec.out_dtypes[j].name for j in sorted(op.accumulate)))
        options = dict(dtypes=combos, flags=self.flags, dynamic_workspace=self._dynamic_workspace)
        if self.kernel.device == "cuda":
            options["emit_device"] = self.emit_device
        return options

    def prepare(self, spec, bound: dict, arrs, key) -> AotCall:
        if self.kernel.device == "cpu":
            # a gradient's sum_to/unreduce that move nothing at these shapes: the source emitted
            # without them serves the signature (its stages fuse: ``plan.noops``)
            op, _ = without_noops(spec, [a.dtype for a in arrs], [tuple(a.shape) for a in arrs], bound)
            if op is not spec.opdef:
                return self.kernel.variant(op).prepared(*arrs, **bound)
        func = self.func_for(tuple(np.dtype(a.dtype).name for a in arrs))
        return self._call(func, spec.out_shapes, tuple(d.np for d in spec.out_dtypes), bound, arrs, key)

    def rebind(self, template: AotCall, spec, bound: dict, arrs) -> AotCall | None:
        # the library's Init reads the attributes (as MindSpore's does): a kernel instance of the
        # same library for the new values
        if template.func not in self.libraries or template.signature is None:
            return None   # (a plan.noops variant's call: that kernel rebinds its own)
        return self._call(template.func, template.out_shapes, template.out_dtypes, bound, arrs, True)

    def _call(self, func: str, out_shapes, out_dtypes, bound: dict, arrs, key) -> AotCall:
        kernel = self.kernel_for(tuple(bound.items()), func)
        call = AotCall(out_shapes, out_dtypes, bound, func=func)
        call.kernel, call.emitted = kernel, self.libraries[func]
        if key is not None:
            call.signature, _ = kernel.prepare(*self._contiguous(arrs))
        call.run = self._runner(call)
        return call

    def _contiguous(self, arrays) -> list:
        return [a if is_device_array(a) or a.flags.c_contiguous else np.ascontiguousarray(a) for a in arrays]

    def _runner(self, call: AotCall):
        kernel, signature, one_tuple = call.kernel, call.signature, self._one_tuple
        run_prepared = kernel.run_prepared
        if self.kernel.device == "cuda":
            contiguous, op = self._contiguous, self.op

            def run(arrays, out, stream=None):
                arrays = contiguous(classify(op, arrays))
                res = kernel(*arrays, out=out, stream=stream) if signature is None else \
                    run_prepared(signature, arrays, out, stream=stream)
                return (res,) if one_tuple else res
            return run

        if signature is None:  # an unhashable attribute: AotKernel prepares the call itself
            def run(arrays, out):
                res = kernel(*arrays, out=out)
                return (res,) if one_tuple else res
            return run
        # The hot path, generated for this signature's input count (see numba_cpu.make_runner):
        # anything but a C-contiguous ndarray (a non-contiguous array; a NumPy or Python scalar
        # where a 0-d tensor is expected, which has the dtype and shape of the key it matched but
        # no buffer the block can point to) goes through AotKernel's own call, which converts it
        # as np.asarray does. A small call goes through the small-call extension where it is built
        # (``native.fastcall``): one C call instead of np.empty calls (or out='s checks), a ctypes
        # call and the Python that fills its block.
        n = len(self.op.inputs)
        contiguous = " and ".join(f"type(arrays[{i}]) is _nd and arrays[{i}].flags.c_contiguous"
                                  for i in range(n)) or "True"
        wrap = ("(", ",)") if one_tuple else ("", "")
        g = {"_run_prepared": run_prepared, "_signature": signature, "_kernel": kernel, "_nd": np.ndarray}
        lines = ["def run(arrays, out):"]
        small = call.small = kernel.small_call(signature)
        if small is not None:
            g["_small"], g["_small_out"], g["_prepared"], g["_error"] = small
            lines += ["    if out is None:",
                      "        res = _small(_prepared, *arrays)",
                      "    else:",
                      "        res = _small_out(_prepared, out, *arrays)",
                      "    if res is not False:",
                      "        if type(res) is int:",
                      "            raise _error(res, out is not None)",
                      f"        return {wrap[0]}res{wrap[1]}"]
        # out= that the C path declined: checked as the Numba runner checks it (the same messages),
        # written through temporaries where an array is not C-contiguous, then copied into it
        n_out = len(call.out_shapes)
        g["_outputs"] = functools.partial(host_outputs, self.op.name, shapes=call.out_shapes, dtypes=call.out_dtypes,
                                          reg_dtypes=call.out_dtypes)
        g["_finish"] = functools.partial(finish, dtypes=call.out_dtypes, multi=self.op.multi_output)
        lines += ["    if out is not None:",
                  "        outs = _outputs(out)",
                  f"        given = {'outs' if n_out > 1 else 'outs[0]'}",
                  f"        if {contiguous}:",
                  "            _run_prepared(_signature, arrays, given)",
                  "        else:",
                  "            _kernel(*arrays, out=given)",
                  "        return _finish(outs, out)",
                  f"    if {contiguous}:",
                  f"        return {wrap[0]}_run_prepared(_signature, arrays, out){wrap[1]}",
                  f"    return {wrap[0]}_kernel(*arrays, out=out){wrap[1]}"]
        src = "\n".join(lines) + "\n"
        exec(_compiled(src, f"<fusegen aot runner {self.op.name}>"), g)
        g["run"].source = src
        return g["run"]

    def close(self) -> None:
        for k in self.by_attrs.values():
            k.close()
        self.by_attrs.clear()


@functools.lru_cache(maxsize=64)
def _compiled(src: str, name: str):
    """The code of a runner's text: one text serves every attribute value set of a signature."""
    return builtins.compile(src, name, "exec")
