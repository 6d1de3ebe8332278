"""The runtime: one ``Kernel`` object per (op, backend, device).

A call goes: normalize arrays -> look the *input signature* (dtypes, shapes,
attribute values and their types) up in a per-kernel dict -> run. Everything that
depends only on the signature (validation, shape inference, grouping, layouts,
compiled functions, workspace sizes) is computed once, on the first call with that
signature, so a repeated call pays a dict lookup, output allocation and the native
call. Non-contiguous inputs are *copied* to C order before the call (one extra pass;
say ``np.ascontiguousarray`` yourself to pay it once).
"""
from __future__ import annotations

import builtins
import os
import threading
from dataclasses import dataclass, field

import numpy as np

from . import dtypes as dt
from . import requests
from .errors import ArgumentError, DTypeError, ShapeError
from .exprs import reg_dtype
from .ir import OpDef, infer
from .plan import Plan, build_plan, schedule

#: Below this many domain elements a group runs on the calling thread: waking a
#: thread pool costs more than it saves on small inputs.
PARALLEL_THRESHOLD = int(os.environ.get("FUSEGEN_PARALLEL_THRESHOLD", 1 << 17))


def _num_threads() -> int:
    import numba
    return numba.get_num_threads()


def choose_tile(layout, nthreads: int) -> int:
    """Width of the inner-dim tile a task handles. Wide tiles stream memory well (a task
    reads rows, not 512-byte pieces of them), so cut only as many tiles as it takes to give
    every thread work, and keep col-mode accumulator tiles within L1/L2."""
    inner = layout.inner
    if inner <= 1:
        return 1
    cap = 2048 if layout.ri * layout.ro_total > 1 else 16384
    tiles = max(1, -(-nthreads // max(1, layout.o_total)))  # tiles per outer index
    per = -(-inner // tiles)
    per = -(-per // 64) * 64
    return max(min(256, inner), min(per, cap, inner))


def split_count(plan: Plan, run, nthreads: int) -> int:
    """How many chunks to cut a group's reduced dim into (1: don't).

    Splitting pays when a lone reduction has too few outputs to keep every thread on
    contiguous memory (a column sum of a tall matrix, a full reduction): each task then
    streams whole rows into a private partial row, and the partials are folded at the end.
    """
    L = run.layout
    stages = [plan.stages[i] for i in run.stages]
    if len(stages) != 1 or not stages[0].reductions or stages[0].writes:
        return 1
    if L.o_total >= 2 * nthreads or L.ri < 64 * nthreads:
        return 1
    per_outer = -(-4 * nthreads // L.o_total)
    return max(1, min(per_outer, L.ri // 32))


@dataclass
class _Group:
    func: object
    meta: np.ndarray
    sources: tuple      # per operand: (kind, index)
    attrs: tuple        # attribute names passed as scalars
    source: str


@dataclass
class _Call:
    """Everything a call with one input signature needs."""

    out_shapes: tuple
    out_dtypes: tuple          # what the caller gets
    reg_out_dtypes: tuple      # what the kernel writes (float16 -> float32)
    in_reg: tuple              # per input: the dtype to convert to (None: as is)
    ws: list                   # workspace (shape, dtype)
    groups: list
    attr_values: dict
    pool: list = field(default_factory=list)
    run: object = None         # the runner _make_runner generated for this signature


class Kernel:
    """A compiled fused op: ``kernel(*arrays, out=None, **attrs)``."""

    def __init__(self, op: OpDef, backend: str = "numba", device: str = "cpu"):
        if not isinstance(op, OpDef):
            raise TypeError(f"fusegen.compile expects an @fusegen.op, got {type(op).__name__}")
        self.op = op
        self.backend = backend
        self.device = device
        self.plan: Plan = build_plan(op)
        self._calls: dict = {}
        self._variants: dict = {}   # write-request variants of the op -> their kernels
        self._lock = threading.Lock()
        self._last: _Call | None = None

    def __repr__(self) -> str:
        return f"<fusegen.Kernel {self.op.name} backend={self.backend} device={self.device}>"

    @property
    def source(self) -> str:
        """Generated source of the most recently prepared signature."""
        if self._last is None:
            return "# no call yet: the source is generated per input signature on the first call\n"
        return "\n\n".join(g.source for g in self._last.groups)

    def sources(self) -> dict:
        return {k: "\n\n".join(g.source for g in c.groups) for k, c in self._calls.items()}

    # --- the call path ------------------------------------------------------------------------
    def __call__(self, *arrays, out=None, accumulate=False, skip=None, inplace=False, **attrs):
        if accumulate is not False or skip is not None or inplace:
            return requests.call(self, self._derived, arrays, out, accumulate, skip, inplace, attrs)
        try:
            # The signature key: dtypes and shapes, then attribute values *and types*
            # (1, 1.0 and True are equal as dict keys but must not share an entry).
            key = tuple([(a.dtype, a.shape) for a in arrays])
            if attrs:
                key = (key, *attrs.items(), *map(type, attrs.values()))
            run = self._calls[key].run
        except (KeyError, AttributeError, TypeError):
            # first call with this signature, a non-array input, or an unhashable attribute
            return self._slow_call(arrays, out, attrs)
        return run(arrays, out)

    def _derived(self, op: OpDef) -> Kernel:
        """The kernel of a write-request variant of this op (``fusegen.requests``), cached."""
        with self._lock:
            k = self._variants.get(op)
            if k is None:
                k = self._variants[op] = Kernel(op, self.backend, self.device)
        return k

    def _slow_call(self, arrays, out, attrs):
        arrs, key = call_signature(self.op, arrays, attrs)
        call = self._calls.get(key) if key is not None else None
        if call is None:
            call = self._prepare(arrs, attrs, key)
        return call.run(arrs, out)

    def _prepare(self, arrs, attrs, key) -> _Call:
        op = self.op
        for i, a in enumerate(arrs):
            try:
                dt.as_dtype(a.dtype)
            except DTypeError:
                raise DTypeError(f"op {op.name}: input {op.inputs[i]!r} has dtype {a.dtype}, which fusegen "
                                 f"does not support ({', '.join(dt.DTYPES)})") from None
        bound = op.bind_attrs(attrs)
        spec = infer(op, [a.dtype for a in arrs], [a.shape for a in arrs], bound)
        runs = schedule(self.plan, spec)
        from .lower_cpu import compile_group, meta_array
        nthreads = _num_threads()
        groups = []
        for run in runs:
            numel = int(np.prod(run.dom)) if run.dom else 1
            big = numel >= PARALLEL_THRESHOLD and nthreads > 1
            nsplit = split_count(self.plan, run, nthreads) if big else 1
            tile = run.layout.inner if nsplit > 1 else choose_tile(run.layout, nthreads)
            meta = meta_array(run, tile, nsplit)
            ntasks = int(meta[6] * meta[4] * nsplit)
            parallel = big and ntasks > 1
            gk = compile_group(self.plan, spec, run, parallel, nsplit > 1)
            groups.append(_Group(gk.func, meta, tuple(run.operands), gk.attrs, gk.source))
        ws = []
        for b in self.plan.buffers:
            info = spec.of(b)
            ws.append((info.shape, reg_dtype(info.acc).np))
        out_dtypes = tuple(d.np for d in spec.out_dtypes)
        call = _Call(spec.out_shapes, out_dtypes, tuple(reg_dtype(d).np for d in spec.out_dtypes),
                     tuple(np.dtype(np.float32) if a.dtype == np.float16 else None for a in arrs),
                     ws, groups, bound)
        call.run = _make_runner(self, call)
        if key is not None:
            with self._lock:
                self._calls[key] = call
        self._last = call
        return call

    def _outputs(self, call: _Call, out):
        if out is None:
            return [np.empty(s, d) for s, d in zip(call.out_shapes, call.reg_out_dtypes)]
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(outs) != len(call.out_shapes):
            raise ArgumentError(f"op {self.op.name}: out= needs {len(call.out_shapes)} arrays, got {len(outs)}")
        res = []
        for k, (o, s, d, r) in enumerate(zip(outs, call.out_shapes, call.out_dtypes, call.reg_out_dtypes)):
            if not isinstance(o, np.ndarray):
                raise ArgumentError(f"op {self.op.name}: out[{k}] must be a numpy array, got {type(o).__name__}")
            if o.shape != tuple(s):
                raise ShapeError(f"op {self.op.name}: out[{k}] must have shape {tuple(s)}, got {o.shape}")
            if o.dtype != d:
                raise DTypeError(f"op {self.op.name}: out[{k}] must have dtype {d}, got {o.dtype}")
            if not o.flags.writeable:
                raise ArgumentError(f"op {self.op.name}: out[{k}] is read-only")
            direct = o.flags.c_contiguous and r == d
            res.append(o if direct else np.empty(s, r))
        return res

    def _finish(self, call: _Call, outs, out):
        given = (list(out) if isinstance(out, (tuple, list)) else [out]) if out is not None else None
        results = []
        for k, (o, d) in enumerate(zip(outs, call.out_dtypes)):
            if given is not None:
                if given[k] is not o:
                    np.copyto(given[k], o, casting="unsafe")
                results.append(given[k])
            else:
                results.append(o if o.dtype == d else o.astype(d))
        return tuple(results) if self.op.multi_output else results[0]


def call_signature(op: OpDef, arrays, attrs: dict):
    """The slow path's view of a call: inputs as arrays (count checked) and the signature key
    the fast path looks up; the key is None when an attribute value is unhashable (a list:
    such calls are prepared every time, not cached)."""
    if len(arrays) != len(op.inputs):
        raise ArgumentError(f"op {op.name} takes {len(op.inputs)} inputs ({', '.join(op.inputs)}), "
                            f"got {len(arrays)}")
    arrs = [a if type(a) is np.ndarray else np.asarray(a) for a in arrays]
    key = tuple([(a.dtype, a.shape) for a in arrs])
    if attrs:
        key = (key, *attrs.items(), *map(type, attrs.values()))
    try:
        hash(key)
    except TypeError:
        key = None
    return arrs, key


def _make_runner(kernel: Kernel, call: _Call):
    """A small function specialized to one signature: no loops or lookups on the hot path.

    Generated because a generic loop over inputs, outputs and groups costs more than the
    native call itself at small sizes (the per-call target is a few microseconds).
    """
    nin, nout = len(kernel.op.inputs), len(call.out_shapes)
    g = {"np": np, "_ascontig": np.ascontiguousarray, "_nd": np.ndarray, "_pool": call.pool,
         "_outputs": kernel._outputs, "_finish": kernel._finish, "_call": call}
    ins = ", ".join(f"a{i}" for i in range(nin)) + ("," if nin == 1 else "")
    lines = ["def run(arrays, out):", f"    {ins} = arrays"]
    for i, conv in enumerate(call.in_reg):
        lines.append(f"    if type(a{i}) is not _nd:")
        lines.append(f"        a{i} = np.asarray(a{i})")
        if conv is not None:  # float16: Numba has no CPU float16, the kernel reads float32
            g[f"_c{i}"] = conv
            lines.append(f"    a{i} = a{i}.astype(_c{i})")
        else:
            lines.append(f"    if not a{i}.flags.c_contiguous:")
            lines.append(f"        a{i} = _ascontig(a{i})")
    outs = ", ".join(f"o{k}" for k in range(nout)) + ("," if nout == 1 else "")
    lines.append("    if out is None:")
    for k, (shp, d) in enumerate(zip(call.out_shapes, call.reg_out_dtypes)):
        g[f"_S{k}"], g[f"_D{k}"] = tuple(shp), d
        lines.append(f"        o{k} = np.empty(_S{k}, _D{k})")
    lines.append("    else:")
    lines.append(f"        {outs} = _outputs(_call, out)")
    if call.ws:
        lines.append("    try:")  # pop, not check-then-pop: another thread may empty the pool between
        lines.append("        ws = _pool.pop()")
        lines.append("    except IndexError:")
        lines.append("        ws = [np.empty(s, d) for s, d in _call.ws]")
    names = {"in": "a", "out": "o"}
    for j, grp in enumerate(call.groups):
        g[f"_f{j}"], g[f"_m{j}"] = grp.func, grp.meta
        args = [f"ws[{i}]" if k == "buf" else f"{names[k]}{i}" for k, i in grp.sources]
        args.append(f"_m{j}")
        for a in grp.attrs:
            g[f"_A{j}_{a}"] = call.attr_values[a]
            args.append(f"_A{j}_{a}")
        lines.append(f"    _f{j}({', '.join(args)})")
    if call.ws:
        lines.append("    _pool.append(ws)")
    if call.reg_out_dtypes != call.out_dtypes:
        lines.append(f"    return _finish(_call, [{outs}], out)")
    else:
        lines.append("    if out is not None:")
        lines.append(f"        return _finish(_call, [{outs}], out)")
        lines.append(f"    return {'(' + outs + ')' if kernel.op.multi_output else 'o0'}")
    src = "\n".join(lines) + "\n"
    exec(builtins.compile(src, f"<fusegen runner {kernel.op.name}>", "exec"), g)
    run = g["run"]
    run.source = src
    return run


_DEFAULT: dict[int, Kernel] = {}


def default_kernel(op: OpDef) -> Kernel:
    """The kernel an op uses when called directly on arrays (Numba, CPU)."""
    k = _DEFAULT.get(id(op))
    if k is None:
        k = _DEFAULT[id(op)] = Kernel(op)
    return k


def compile(op: OpDef, backend: str = "numba", device: str = "cpu", **options):
    """Compile ``op`` for a backend and device; returns a callable kernel."""
    if not isinstance(op, OpDef):
        raise TypeError(f"fusegen.compile expects an @fusegen.op, got {type(op).__name__}")
    if backend not in ("numba", "aot"):
        raise ValueError(f"unknown backend {backend!r}: use 'numba' or 'aot'")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}: use 'cpu' or 'cuda'")
    if backend == "numba" and device == "cpu":
        return Kernel(op, backend, device)
    if backend == "aot" and device == "cpu":
        from .aot_compile import compile_aot
        return compile_aot(op, device=device, **options)
    if backend == "numba" and device == "cuda":
        from .runtime_cuda import CudaKernel
        return CudaKernel(op, **options)
    if backend == "aot" and device == "cuda":
        from .aot_cuda import compile_aot_cuda
        return compile_aot_cuda(op, **options)
    raise NotImplementedError(f"backend={backend!r} device={device!r} is not available yet")
