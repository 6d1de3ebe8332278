"""``AotKernel``: run any library that speaks MindSpore's AOT custom-kernel ABI.

Mirrors ``ops.Custom(func, out_shape, out_dtype, "aot")``: ``func`` is
``"path/file.cc:Name"`` (sources are compiled through ``fusegen.native.build``), the
library exports ``Name`` and optionally ``NameInit``, ``NameInferShape``,
``NameInferType`` and fusegen's ``const char *NameErrorString(int code)``.

How a call runs.  Per input signature (dtypes and shapes) the kernel gets one
``AotExtra`` (holding the attributes), its outputs are inferred, ``NameInit`` runs
once, the workspace sizes it set are read back and the workspaces allocated;
the whole argument block (params pointer array, ndims, shapes, dtype strings) is
built then and cached, so a later call with the same signature only writes the
data pointers and crosses ctypes with one pointer argument.  Workspaces are
reused between calls.

Hosting.  ``AotExtra`` is implemented in C++ by ``host/aot_host.cc``, built once
per libstdc++ string ABI; a kernel is hosted by the copy matching its ABI (see
``detect_string_abi``), and every call into kernel code goes through a shim
wrapper that turns a C++ exception into a ``KernelError``.

Threads.  By default calls on one ``AotKernel`` are serialised by a lock: a hand-written
kernel may change its kernel data during a call, as nothing in MindSpore runs one kernel
instance twice at once.  ``reentrant=True`` (what ``backend="aot"`` uses: fusegen's kernels
only read their kernel data) lets calls run at the same time, each with an argument block and
workspaces of its own (taken from a per-signature pool).  ``close()`` waits for running calls,
and a signature evicted from the cache is destroyed only once no call uses it, so a library or
its kernel data is never released under a running call.
"""
from __future__ import annotations

import _ctypes
import ctypes
import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..emitters.common import TYPE_IDS
from ..errors import ArgumentError, BoundsError, DTypeError, KernelError, LibraryError, ShapeError
from . import aot_cuda, build, fastcall, opinfo
from .buffers import DeviceBuffer, GuardedBuffer, GuardedCalls, aligned_workspace, guard_default
from .host import (NAMES_BY_ID, FgCall, as_np_dtype, canonical_attrs, canonical_dtypes, canonical_shapes,
                   detect_string_abi, dtype_name, host_shim, is_function, positional_arity, set_attrs,
                   set_float64_attrs, shape_block)
from .library import Loaded, Signature, pin_dependencies

__all__ = ["AotKernel", "detect_string_abi", "TYPE_IDS"]

_MAX_SIGNATURES = 64  # Init'ed extras kept per kernel; the oldest is destroyed beyond this

_c_void_p, _c_int, _c_int64, _c_size_t = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_size_t
_ERROR_STRING = ctypes.CFUNCTYPE(ctypes.c_char_p, _c_int)   # NameErrorString(int) -> const char*
_from_buffer, _addressof = ctypes.c_char.from_buffer, ctypes.addressof


class AotKernel(aot_cuda.DeviceCalls, GuardedCalls):
    """A kernel in a library that follows MindSpore's AOT ABI, callable on NumPy arrays.

    ``func`` is ``"path:Name"``; a ``.cc``/``.cpp``/``.cu`` path is compiled (``flags``
    as in ``build.build_library``).  ``attrs`` maps names to bool, int, float, str,
    lists (of int/float) or lists of such lists.  ``out_shape``: None (use the
    library's ``NameInferShape``), a shape, a list of shapes, or a callable taking
    the input shapes (as lists).  ``out_dtype``: None (``NameInferType`` if present,
    else the first input's dtype), a dtype, a list, or a callable taking the input
    dtypes.  ``n_outputs`` (it selects the infer functions' C++ signature) and ``n_inputs``
    (checked on every call): a fusegen-emitted library's own (``native.opinfo``), else what
    the arguments imply, else 1 output and the first call's inputs.
    """

    def __init__(self, func: str, attrs: dict | None = None, out_shape: Any = None, out_dtype: Any = None, *,
                 flags: list[str] | None = None, n_outputs: int | None = None, n_inputs: int | None = None,
                 name: str | None = None, guard: bool | None = None, device: str | None = None,
                 reentrant: bool = False):
        if device not in (None, "cpu", "cuda"):
            raise ArgumentError(f"device must be None (from the library), 'cpu' or 'cuda', got {device!r}")
        path, sep, symbol = str(func).rpartition(":")
        if not sep or not path or not symbol.isidentifier():
            raise ArgumentError(f"func must look like 'path/to/file.cc:FunctionName', got {func!r}")
        self.function = symbol
        self.name = name or symbol
        self.guard = guard_default() if guard is None else bool(guard)
        self.attrs = canonical_attrs(attrs)
        counts = {"n_outputs": n_outputs}
        self._out_shape, self._out_dtype = out_shape, out_dtype
        if out_shape is not None and not is_function(out_shape):
            self._out_shape = canonical_shapes(out_shape, "out_shape")
            counts["out_shape"] = len(self._out_shape)
        if out_dtype is not None and not is_function(out_dtype):
            self._out_dtype = canonical_dtypes(out_dtype, "out_dtype")
            if isinstance(out_dtype, (list, tuple)):  # a single dtype applies to every output
                counts["out_dtype"] = len(self._out_dtype)
        given = {k: v for k, v in counts.items() if v is not None}
        if len(set(given.values())) > 1:
            raise ArgumentError(f"inconsistent output counts: {given}")
        if next(iter(given.values()), 1) < 1:
            raise ArgumentError("a kernel needs at least one output")
        arities = {positional_arity(f) for f in (out_shape, out_dtype) if is_function(f)} - {None}
        n_inputs = n_inputs if n_inputs is not None else (arities.pop() if len(arities) == 1 else None)

        self.lib_path = build.build_library(path, flags=flags)
        self.cuda_code = build.has_cuda_code(self.lib_path)
        self.device = device or ("cuda" if self.cuda_code else "cpu")
        self._check_device()
        self.string_abi = detect_string_abi(self.lib_path)
        shim = host_shim(self.string_abi)
        try:   # (dlopen itself, not ctypes.CDLL: a CDLL makes a class each time, which stays)
            handle = _ctypes.dlopen(str(self.lib_path), os.RTLD_LOCAL)
        except OSError as exc:
            raise LibraryError(f"cannot load {self.lib_path}: {exc}") from None
        pin_dependencies(self.lib_path)
        self._loaded = Loaded(handle, shim)
        self._finalizer = weakref.finalize(self, self._loaded.release)
        self._call_main = shim.fg_call_main
        self._open = True
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # notified when the last running call ends
        self._running = 0
        # Concurrent calls need no lock around the kernel: not with guard fences (checked per
        # call) nor on a GPU (launches are asynchronous anyway).
        self.reentrant = bool(reentrant) and not self.guard and self.device == "cpu"
        self._signatures: dict[tuple, Signature] = {}
        try:
            self._main = self._symbol(handle, symbol, required=True)
            self._init = self._symbol(handle, symbol + "Init")
            self._infer_shape = self._symbol(handle, symbol + "InferShape")
            self._infer_type = self._symbol(handle, symbol + "InferType")
            error_string = self._symbol(handle, symbol + "ErrorString")
            self._error_string = _ERROR_STRING(error_string) if error_string else None
            self.op_info = opinfo.read(self._symbol(handle, symbol + "OpInfo"))   # (a fusegen-emitted library)
            self.n_outputs, self.n_inputs = opinfo.settle(self.op_info, self.name, given, n_inputs, self.attrs)
            if out_shape is None and not self._infer_shape:
                raise LibraryError(f"{self.lib_path} has no symbol {symbol + 'InferShape'!r} and out_shape "
                                   "is None; pass out_shape=... or export the InferShape function")
        except BaseException:
            self._finalizer()
            raise

    def _check_device(self) -> None:
        """Refuse a pairing that would hand a kernel pointers to memory it cannot read."""
        if self.device == "cpu" and self.cuda_code:
            raise LibraryError(f"{self.name}: {self.lib_path} holds CUDA device code, whose kernels read device "
                               "memory; use device='cuda' (the default for such a library), not device='cpu'")
        if self.device == "cuda" and not self.cuda_code:
            from ..lower_cuda import simulator  # under the simulator, device arrays are host memory
            if not simulator():
                raise LibraryError(f"{self.name}: {self.lib_path} holds no CUDA device code (no .nv_fatbin "
                                   "section), so its kernel cannot read device memory; build it from a .cu "
                                   "with nvcc, or use device='cpu'")

    def _symbol(self, handle: int, symbol: str, required: bool = False) -> int | None:
        try:
            return _ctypes.dlsym(handle, symbol)
        except OSError:
            if required:
                raise LibraryError(f"library {self.lib_path} has no symbol {symbol!r} "
                                   "(is it declared extern \"C\"?)") from None
            return None

    # ----------------------------------------------------------------- lifecycle

    @property
    def closed(self) -> bool:
        return not self._open

    def close(self) -> None:
        """Wait for running calls, destroy every kernel instance (``DestructKernelData``) and
        unload the library."""
        with self._lock:
            self._open = False
            while self._running:
                self._idle.wait()
            self._signatures.clear()
            self._finalizer()

    def __enter__(self) -> AotKernel:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"signatures={len(self._signatures)}"
        return (f"AotKernel(name={self.name!r}, lib_path='{self.lib_path}', device={self.device!r}, "
                f"outputs={self.n_outputs}, string_abi={'cxx11' if self.string_abi else 'old'}, {state})")

    # ----------------------------------------------------------------- errors

    def _kernel_error(self, function: str, status: int, result: int, message: bytes) -> KernelError:
        if status:
            text = message.decode(errors="replace")
            return KernelError(f"{self.name}: {function} in {self.lib_path} threw a C++ exception: {text}",
                               library=str(self.lib_path), function=function)
        meaning = None
        if self._error_string is not None:
            raw = self._error_string(result)
            meaning = raw.decode(errors="replace") if raw else None
        if meaning and meaning.startswith("FG_ERR_GATHER: "):  # a bad gathered index (issue #17): Numba's text
            return BoundsError(meaning[len("FG_ERR_GATHER: "):])
        text = f"{self.name}: {function} in {self.lib_path} returned error code {result}"
        return KernelError(text + (f": {meaning}" if meaning else ""), library=str(self.lib_path),
                           function=function, code=result, meaning=meaning)

    # ----------------------------------------------------------------- preparation (once per signature)

    def _prepare(self, key: tuple, arrays: list[np.ndarray]) -> Signature:
        if self.device == "cuda":
            aot_cuda.require_device(self)  # Init's workspaces are device memory
        in_shapes = [tuple(a.shape) for a in arrays]
        opinfo.check_ranks(self.op_info, self.name, in_shapes)
        in_dtypes = [a.dtype for a in arrays]
        in_names = [dtype_name(d) for d in in_dtypes]
        shim, loaded = self._loaded.shim, self._loaded
        extra = shim.fg_extra_new()
        if not extra:
            raise MemoryError("cannot allocate an AotExtra")
        loaded.extras.append(extra)
        try:
            set_attrs(shim, extra, self.attrs)
            set_float64_attrs(shim, extra, self.attrs)
            out_shapes = self._output_shapes(in_shapes, extra)
            for k, shape in enumerate(out_shapes):
                if int(np.prod(shape, dtype=object)) >= 2 ** 62:
                    raise ShapeError(f"{self.name}: output {k} would have shape {tuple(shape)}, which is too "
                                     "large: its element count overflows int64 indexing")
            out_dtypes = self._output_dtypes(in_dtypes, in_names, extra)
            if len(out_dtypes) == 1 and self.n_outputs > 1:
                out_dtypes = out_dtypes * self.n_outputs
            if len(out_dtypes) != self.n_outputs:
                raise DTypeError(f"{self.name}: got {len(out_dtypes)} output dtypes, expected {self.n_outputs}")
            names = in_names + [dtype_name(d) for d in out_dtypes]
            ndims, shapes, rows = shape_block(in_shapes + out_shapes)
            dtypes = (ctypes.c_char_p * len(names))(*[n.encode() for n in names])
            if self._init:
                result, error = _c_int(0), ctypes.create_string_buffer(1024)
                status = shim.fg_call_init(self._init, ndims, shapes, dtypes, extra, ctypes.byref(result),
                                           error, len(error))
                if status or result.value:
                    raise self._kernel_error(self.function + "Init", status, result.value, error.value)
            count = shim.fg_extra_workspace(extra, None, 0)
            sizes = (_c_size_t * max(count, 1))()
            shim.fg_extra_workspace(extra, sizes, count)
            if self.device == "cuda":
                fenced = [DeviceBuffer(sizes[i], f"workspace {i}", self.guard) for i in range(count)]
                workspaces = [(b, b.address) for b in fenced]
            elif self.guard:
                fenced = [GuardedBuffer(sizes[i], f"workspace {i}") for i in range(count)]
                workspaces = [(g, g.address) for g in fenced]
            else:
                workspaces = [aligned_workspace(sizes[i]) for i in range(count)]
            n_in, n_out = len(arrays), len(out_shapes)
            params = (_c_void_p * (n_in + n_out + count))()
            for i, (_, address) in enumerate(workspaces):
                params[n_in + n_out + i] = address
            block = FgCall(fn=self._main, nparam=len(params), params=_addressof(params),
                            ndims=_addressof(ndims), shapes=_addressof(shapes), dtypes=_addressof(dtypes),
                            stream=None, extra=extra)
        except BaseException:
            loaded.drop_extra(extra)
            raise
        signature = Signature(key, extra, list(zip(out_shapes, out_dtypes)), [sizes[i] for i in range(count)],
                               block, params, [ndims, shapes, rows, dtypes, workspaces])
        if len(self._signatures) >= _MAX_SIGNATURES:
            self._evict(self._signatures.pop(next(iter(self._signatures))))
        self._signatures[key] = signature
        if self.n_inputs is None:
            self.n_inputs = n_in
        return signature

    def _evict(self, signature: Signature) -> None:
        """Drop a signature's kernel instance, at once or, if calls still run on it, when the
        last one ends. A caller holding the signature (``prepare``) gets it re-prepared."""
        signature.evicted = True
        if not signature.busy:
            self._loaded.drop_extra(signature.extra)

    def _output_shapes(self, in_shapes: list[tuple[int, ...]], extra: int) -> list[tuple[int, ...]]:
        if is_function(self._out_shape):
            shapes = canonical_shapes(self._out_shape(*[list(s) for s in in_shapes]), "out_shape callable result")
        elif self._out_shape is not None:
            shapes = self._out_shape
        else:
            shapes = self._call_infer_shape(in_shapes, extra)
        if len(shapes) != self.n_outputs:
            raise ShapeError(f"{self.name}: got {len(shapes)} output shapes {shapes}, expected {self.n_outputs}")
        if any(d < 0 for s in shapes for d in s):
            raise ShapeError(f"{self.name}: output shapes {shapes} are not concrete (negative dims)")
        return shapes

    def _call_infer_shape(self, in_shapes: list[tuple[int, ...]], extra: int) -> list[tuple[int, ...]]:
        ndims, shapes, _rows = shape_block(in_shapes)
        cap_dims, cap_outs = 64, max(self.n_outputs, 1)
        for _ in range(2):  # the second round has buffers of the size the first reported
            dims, ranks = (_c_int64 * cap_dims)(), (_c_int64 * cap_outs)()
            n_outs, n_dims, error = _c_size_t(), _c_size_t(), ctypes.create_string_buffer(1024)
            status = self._loaded.shim.fg_call_infer_shape(
                self._infer_shape, int(self.n_outputs > 1), ndims, shapes, extra, dims, cap_dims, ranks,
                cap_outs, ctypes.byref(n_outs), ctypes.byref(n_dims), error, len(error))
            if status == 1:
                raise self._kernel_error(self.function + "InferShape", 1, 0, error.value)
            if status == 0:
                out, pos = [], 0
                for k in range(n_outs.value):
                    out.append(tuple(dims[pos:pos + ranks[k]]))
                    pos += ranks[k]
                return out
            cap_dims, cap_outs = max(n_dims.value, 1), max(n_outs.value, 1)
        raise ShapeError(f"{self.name}: InferShape returned inconsistent sizes")

    def _output_dtypes(self, in_dtypes: list[np.dtype], in_names: list[str], extra: int) -> list[np.dtype]:
        if is_function(self._out_dtype):
            return canonical_dtypes(self._out_dtype(*in_dtypes), "out_dtype callable result")
        if self._out_dtype is not None:
            return self._out_dtype
        if self._infer_type:
            ids = (_c_int * max(len(in_names), 1))(*[TYPE_IDS[n] for n in in_names])
            out = (_c_int * 64)()
            n_out, error = _c_size_t(), ctypes.create_string_buffer(1024)
            status = self._loaded.shim.fg_call_infer_type(self._infer_type, int(self.n_outputs > 1), ids,
                                                          len(in_names), extra, out, 64, ctypes.byref(n_out),
                                                          error, len(error))
            if status == 1:
                raise self._kernel_error(self.function + "InferType", 1, 0, error.value)
            if status == 2:
                raise DTypeError(f"{self.name}: InferType returned {n_out.value} types (more than 64)")
            unknown = [t for t in out[:n_out.value] if t not in NAMES_BY_ID]
            if unknown:
                raise DTypeError(f"{self.name}: InferType returned TypeId(s) {unknown} fusegen cannot map")
            return [as_np_dtype(NAMES_BY_ID[t], "InferType result") for t in out[:n_out.value]]
        if not in_dtypes:
            raise DTypeError(f"{self.name}: no inputs to take the output dtype from; pass out_dtype=...")
        return [in_dtypes[0]] * self.n_outputs

    # ----------------------------------------------------------------- the call

    def _arrays(self, inputs: tuple) -> tuple[list[np.ndarray], tuple]:
        """C-contiguous arrays for ``inputs`` (others are copied) and their signature key.

        A CUDA kernel also takes device arrays (zero-copy views; see ``fusegen.native.aot_cuda``)."""
        if self.n_inputs is not None and len(inputs) != self.n_inputs:
            raise ArgumentError(f"{self.name}: expected {self.n_inputs} inputs, got {len(inputs)}")
        if self.device == "cuda":
            arrays = aot_cuda.device_arrays(self.name, inputs)
            return arrays, tuple(v for a in arrays for v in (np.dtype(a.dtype), tuple(a.shape)))
        arrays, key = [], []
        for x in inputs:
            if type(x) is not np.ndarray or not x.flags.c_contiguous:
                x = np.asarray(x, order="C")
            arrays.append(x)
            key += (x.dtype, x.shape)
        return arrays, tuple(key)

    def _signature(self, key: tuple, arrays: list[np.ndarray]) -> Signature:
        if not self._open:
            raise LibraryError(f"{self.name}: the kernel has been closed")
        return self._signatures.get(key) or self._prepare(key, arrays)

    def _enter(self, signature: Signature, arrays: Sequence) -> Signature:
        """Under the lock: the live signature for a call (re-prepared if it was evicted), counted busy."""
        if not self._open:
            raise LibraryError(f"{self.name}: the kernel has been closed")
        if signature.evicted:
            signature = self._signature(signature.key, list(arrays))
        signature.busy += 1
        self._running += 1
        return signature

    def _leave(self, signature: Signature) -> None:
        """Under the lock: the call on ``signature`` has ended."""
        signature.busy -= 1
        self._running -= 1
        self._leave_idle(signature)

    def _leave_idle(self, signature: Signature) -> None:
        """Under the lock, after a call's counts went down: release what waited for it."""
        if signature.evicted and not signature.busy:
            self._loaded.drop_extra(signature.extra)
        if not self._running and not self._open:  # close() waits (notify costs ~0.5 us: only then)
            self._idle.notify_all()

    def workspace_sizes(self, *inputs: Any) -> list[int]:
        """Byte sizes of the workspaces ``NameInit`` set for these inputs' signature (runs Init if needed)."""
        arrays, key = self._arrays(inputs)
        with self._lock:
            return list(self._signature(key, arrays).workspace_sizes)

    def __call__(self, *inputs: Any, out: Any = None, stream: Any = None) -> Any:
        """Run the kernel.  Inputs that are not C-contiguous arrays are converted (copied).

        A CUDA kernel runs on ``stream`` (a numba/CuPy/PyTorch stream or a ``cudaStream_t`` int;
        default: the default stream) and takes NumPy or device arrays (see ``fusegen.native.aot_cuda``)."""
        arrays, key = self._arrays(inputs)
        with self._lock:
            signature = self._signature(key, arrays)
        return self.run_prepared(signature, arrays, out, stream=stream)

    def prepare(self, *inputs: Any) -> tuple[Any, list[np.ndarray]]:
        """The prepared signature (Init done, argument block cached) for these inputs.

        With ``run_prepared`` this lets a caller that already keys its own calls (the
        ``backend="aot"`` kernel) skip computing the key a second time.
        """
        arrays, key = self._arrays(inputs)
        with self._lock:
            return self._signature(key, arrays), arrays

    def run_prepared(self, signature: Signature, arrays: Sequence[np.ndarray], out: Any = None,
                     stream: Any = None):
        """Call the kernel on C-contiguous ``arrays`` whose signature ``prepare`` returned."""
        if self.device == "cuda":
            return self._run_device(signature, arrays, out, stream)
        if stream is not None:
            raise ArgumentError(f"{self.name}: stream= is for CUDA kernels; this library runs on the CPU")
        if self.guard:
            return self._run_guarded(signature, arrays, out)
        lock = self._lock
        if not self.reentrant:
            with lock:
                signature = self._enter(signature, arrays)
                try:
                    return self._run_block(signature, signature.spare[0], arrays, out)
                finally:
                    self._leave(signature)
        with lock:  # (the common case inline: this is most of a small call's overhead)
            if signature.evicted or not self._open:
                signature = self._enter(signature, arrays)
            else:
                signature.busy += 1
                self._running += 1
            spare = signature.spare
            entry = spare.pop() if spare else None
        try:
            if entry is None:  # more calls at once than ever before: one more block, kept after
                entry = signature.new_block()
            return self._run_block(signature, entry, arrays, out)
        finally:
            with lock:
                if entry is not None:
                    spare.append(entry)
                signature.busy -= 1
                self._running -= 1
                if signature.evicted or not self._open:
                    self._leave_idle(signature)

    def running_calls(self, signature: Signature) -> tuple:
        """``(enter, leave)`` for the small-call extension's calls on ``signature`` that release the
        GIL: ``enter()`` counts one running under the lock, as ``run_prepared`` does (False: the
        kernel was closed or the signature evicted: take ``run_prepared``), ``leave()`` ends it."""
        def enter() -> bool:
            with self._lock:
                ok = self._open and not signature.evicted
                if ok:
                    signature.busy += 1
                    self._running += 1
                return ok

        def leave() -> None:
            with self._lock:
                self._leave(signature)
        return enter, leave

    def small_call(self, signature: Signature) -> tuple | None:
        """The small-call path for ``signature`` (``fastcall.small_call``), or None."""
        key = signature.key   # (dtype, shape) per input
        arrays = [*zip(key[1::2], key[0::2]), *signature.outputs]
        nbytes = sum(int(np.prod(s)) * np.dtype(d).itemsize for s, d in arrays)
        return fastcall.small_call(self, signature, nbytes, self._call_main, self._kernel_error)

    def call_block(self, signature: Signature, keep: Any = None) -> int:
        """Call the main function on ``signature``'s first argument block as the last call left
        it, and return its status: the native time alone, for benchmarks. The arrays of that call
        (passed as ``keep``) must still be alive, as the block points into them."""
        del keep  # held by the caller for the duration of the call
        return self._call_main(signature.block_address)

    def _run_block(self, signature: Signature, entry: tuple, arrays: Sequence[np.ndarray], out: Any):
        """One call through the argument block ``entry`` (``(block, address, params, keep)``)."""
        block, address, params, _ = entry
        if out is None:
            outs = [fastcall.empty(shape, dtype) for shape, dtype in signature.outputs]   # (64-byte aligned)
        else:
            outs = signature.check_out(self.name, out)
        i = 0
        for array in (*arrays, *outs):
            # c_char.from_buffer is ~4x cheaper than array.ctypes.data (this loop is most
            # of a small call's cost) but needs a writable, non-empty buffer.
            try:
                params[i] = _addressof(_from_buffer(array))
            except (TypeError, ValueError, BufferError):
                params[i] = array.ctypes.data
            i += 1
        status = self._call_main(address)
        if status or block.result:
            error = self._kernel_error(self.function, status, block.result, block.error)
            if out is not None:  # the kernel wrote into the caller's arrays directly
                error.args = (error.args[0] + fastcall.PARTIAL_OUT,)
            raise error
        return outs[0] if self.n_outputs == 1 else tuple(outs)
