"""The numba-cuda backend's executor (``backend="numba", device="cuda"``): for a signature,
schedule the plan, generate and JIT one kernel per fused group (``fusegen.lower_cuda``), choose
each group's launch (thread or block mode, block size, split), upload each group's ``meta``
layout once; the runner copies NumPy inputs to the device, allocates outputs and workspaces
there, launches every group on the stream and delivers the results (``fusegen.native.device``).

numba.cuda is imported only when a CUDA kernel is prepared, so the CPU backends never pay for it.
"""
from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field

import numpy as np

from ..lower.pysource import group_params
from ..lower_cuda import choose_launch, load_group, meta_array, simulator
from ..native.device import deliver, device_outputs, flat, is_device_array, resolve_stream
from ..plan import build_plan, schedule
from ..plan.noops import without_noops
from ..plan.exprs import reg_dtype
from .call import Call, Executor
from .cuda import classify


@dataclass
class CudaGroup:
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
    dims: tuple = ()           # values of the dims (static scalars) the kernel takes after the attributes
    gathers: tuple = ()        # gathers (issue #17): extents and strides after the dims
    gerr: object = None        # checked gathers: the host's initial error block, and the raising function
    on_error: object = None
    loaded: bool = False       # its kernels' modules are in the context (``_launch``)


@dataclass
class NumbaCudaCall(Call):
    ws: list = field(default_factory=list)       # (size, numpy dtype) per plan buffer
    groups: list = field(default_factory=list)


class NumbaCudaExecutor(Executor):
    """Options: ``threads`` (max threads per block; default 256, 16 under the simulator),
    ``max_blocks`` (grid cap; the kernels grid-stride), ``split`` (force a chunk count on
    splittable reductions; for tests)."""

    def __init__(self, kernel, threads: int | None = None, max_blocks: int | None = None, split: int | None = None):
        if threads is not None and (threads < 1 or threads & (threads - 1) or threads > 1024):
            raise ValueError(f"threads must be a power of two in 1..1024, got {threads}")
        for name, v in (("max_blocks", max_blocks), ("split", split)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        super().__init__(kernel)
        self.threads, self.max_blocks, self.split = threads, max_blocks, split

    def variant_options(self, op) -> dict:
        return dict(threads=self.threads, max_blocks=self.max_blocks, split=self.split)

    def prepare(self, spec, bound: dict, arrs, key) -> NumbaCudaCall:
        from numba import cuda
        plan = self.kernel.plan
        # planned per signature, as on the CPU: a gradient's sum_to/unreduce that move nothing at
        # these shapes are views, so the stages around them fuse (``plan.noops``; cross-entropy's
        # gradient: one row group, not eight stages)
        op, spec = without_noops(spec, [a.dtype for a in arrs], [tuple(a.shape) for a in arrs], bound)
        if op is not plan.opdef:
            plan = build_plan(op)
        sim = simulator()
        threads = self.threads or (16 if sim else 256)
        max_blocks = self.max_blocks or (4 if sim else 4096)
        groups = []
        for run in schedule(plan, spec):
            launch = choose_launch(plan, run, threads, self.split, not sim, spec)
            gk = load_group(plan, spec, run, launch)
            meta = meta_array(run, launch.nsplit)
            L = run.layout
            outputs = L.o_total * L.inner
            if launch.mode == "block":
                grid = min(max(L.o_total * launch.nsplit, 1), max_blocks)
            else:
                grid = min(max(-(-outputs * launch.nsplit // launch.block), 1), max_blocks)
            stage0 = plan.stages[run.stages[0]]
            partials = [(outputs * launch.nsplit, reg_dtype(spec.of(r).acc).np)
                        for r in stage0.reductions] if launch.nsplit > 1 else []
            cgrid = min(max(-(-outputs // launch.block), 1), max_blocks)
            arrays = tuple(k[:2] for k in run.operands if k[0] != "iota")
            dims = tuple(spec.of(n).value for n in group_params([plan.stages[i] for i in run.stages]))
            groups.append(CudaGroup(gk.kernel, gk.combine, meta, cuda.to_device(meta), arrays,
                                    gk.attrs, grid, launch.block, cgrid, partials, gk.source, skip=outputs == 0,
                                    dims=dims, **_gather_fields(plan, spec, gk.gathers)))
        ws = [(int(np.prod(spec.of(b).shape)) if spec.of(b).shape else 1, reg_dtype(spec.of(b).acc).np)
              for b in plan.buffers]
        call = NumbaCudaCall(spec.out_shapes, tuple(d.np for d in spec.out_dtypes), bound, ws=ws, groups=groups)
        call.run = _runner(self.kernel.op, call)
        return call

    def rebind(self, template: NumbaCudaCall, spec, bound: dict, arrs) -> NumbaCudaCall:
        # (the runner reads the attribute values from its call at each launch)
        call = dataclasses.replace(template, attr_values=bound)
        call.run = _runner(self.kernel.op, call)
        return call


def _runner(op, call: NumbaCudaCall):
    """The call of one signature: inputs to the device, outputs and workspaces allocated there,
    every group launched on the stream, results delivered."""
    def run(arrays, out, stream=None):
        from numba import cuda
        st = resolve_stream(stream)
        ins = classify(op, arrays)
        on_device = any(is_device_array(a) for a in ins)
        dev_in = [flat(a) if is_device_array(a) else
                  cuda.to_device(np.ascontiguousarray(a).reshape(-1), stream=st) for a in ins]
        outs, given = device_outputs(f"op {op.name}", call.out_shapes, call.out_dtypes, out, on_device, st)
        flat_outs = [flat(o) for o in outs]
        ws = [cuda.device_array(max(n, 1), d, stream=st) for n, d in call.ws]
        names = {"in": dev_in, "out": flat_outs, "buf": ws}
        for g in call.groups:
            if g.skip:
                continue
            args = [names[k][i] for k, i in g.operands]
            parts = [cuda.device_array(max(n, 1), d, stream=st) for n, d in g.partials]
            tail = [g.meta] + [call.attr_values[a] for a in g.attrs] + list(g.dims)
            gerr = None if g.gerr is None else cuda.to_device(g.gerr, stream=st)
            tail += ([] if gerr is None else [gerr]) + list(g.gathers)
            _launch(g, g.kernel, g.grid, g.block, st, (*args, *parts, *tail))
            if g.combine is not None:
                _launch(g, g.combine, g.combine_grid, g.block, st, (*args, *parts, *tail))
            if gerr is not None:   # a checked gather: its error block decides before anything is delivered
                code = gerr.copy_to_host(stream=st)
                st.synchronize()
                for c in range(len(code) // 2):
                    if code[2 * c]:
                        g.on_error((c + 1, code[2 * c + 1]))
        results = deliver([o.reshape(s) for o, s in zip(outs, call.out_shapes)], given, on_device, st)
        return tuple(results) if op.multi_output else results[0]
    return run


def _gather_fields(plan, spec, slots) -> dict:
    """A group's gather arguments (extents, strides), its error block and the function that
    raises a BoundsError from it (issue #17; the same message as Numba CPU's)."""
    if slots is None or not slots.nodes:
        return {}
    from .numba_cpu import gather_error
    from ..plan.layout import gather_stride
    values = tuple(int(spec.of(n).params[1]) for n in slots.nodes) + \
        tuple(int(gather_stride(a, k, spec, None, ())) for a, k in slots.terms)
    init = np.array([0, np.iinfo(np.int64).min] * len(slots.checks), dtype=np.int64) if slots.checks else None
    return dict(gathers=values, gerr=init, on_error=gather_error(plan.opdef, spec, tuple(slots.checks)))


#: Held by the first launch of each group's kernels (``_launch``).
_FIRST_LAUNCH = threading.Lock()


def _launch(g: CudaGroup, kernel, grid, block, st, args) -> None:
    """``kernel[grid, block, st](*args)``; the group's first launches under one lock: numba-cuda
    loads a kernel's module into the context at its first launch, and two threads doing that at
    once both insert it, the second failing with "key already in dictionary" (seen on an H200:
    four threads' first calls of one softmax kernel). Later launches find it loaded."""
    if g.loaded:
        kernel[grid, block, st](*args)
        return
    with _FIRST_LAUNCH:
        kernel[grid, block, st](*args)
        if kernel is g.kernel and g.combine is None or kernel is g.combine:
            g.loaded = True
