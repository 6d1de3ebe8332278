"""Plan -> Python source -> numba-cuda kernels, one per fused group (plus a combine kernel when
a reduction is split).

Every group runs ``plan.Layout``'s canonical nest ``[O, RO, RI, I]``; extents and strides
arrive in one small int64 ``meta`` device array, so one compiled kernel serves every shape.
Two kernel shapes cover every group:

* **thread** mode (the innermost dim is kept, or nothing is reduced): one thread per output
  point ``(o, i)``, threads across the contiguous dim, so a reduction of leading axes reads
  coalesced rows and keeps its accumulators in registers; elementwise groups are the same
  loop with nothing reduced (a grid-stride loop over the domain).
* **block** mode (the innermost dim is reduced): one block per output row (a single warp when
  the row is short); threads stride along the row, then a shared-memory tree reduction whose
  last 32 lanes use warp shuffles (not under the simulator, which has none).

A lone reduction with few outputs and a long reduced dim is *split*: the reduced range is cut
into ``nsplit`` chunks, each task leaves a partial accumulator in a declared workspace, and a
second kernel folds them and finishes (mean, casts, epilogue outputs).

float16 is loaded and stored as half and computed in float32 (``exprs.reg_dtype``).
"""
from __future__ import annotations

import importlib.metadata
import math
from dataclasses import dataclass

import numpy as np

from . import dtypes as dt
from .dtypes import DType
from . import __version__
from .exprs import CUDA_PY, ExprWriter, reduce_identity, reg_dtype
from .pysource import NAN_HELPERS, combine, import_source
from .ir import Graph, Node, Op, Spec
from .plan import GroupRun, Plan, _reads

# meta: nO, nRO, RI, I, O_total, RO_total, count, nsplit, chunk; then extents, then strides
HEADER = 9
#: Accumulator dtypes ``cuda.shfl_down_sync`` can move (32- and 64-bit ints and floats).
SHUFFLE_DTYPES = {"float32", "float64", "int32", "int64", "uint32", "uint64"}


def numba_cuda_missing() -> str | None:
    """Why the numba-cuda backend cannot be used here (what to install), or None.

    The ``numba-cuda`` distribution decides, not ``import numba.cuda``: Numba still ships its own
    deprecated CUDA target under that name, which imports without numba-cuda and fails only
    later (``CudaSupportError`` in ``compile_ptx``, no GPU found on a machine that has one)."""
    try:
        importlib.metadata.version("numba-cuda")
    except importlib.metadata.PackageNotFoundError:
        return ("the CUDA backend needs numba-cuda (Numba's own built-in numba.cuda is not enough): "
                "pip install 'fusegen[cuda]'")
    return None


def simulator() -> bool:
    """True when numba-cuda runs kernels on the CPU (``NUMBA_ENABLE_CUDASIM=1``)."""
    from numba import config
    return bool(getattr(config, "ENABLE_CUDASIM", False))


@dataclass(frozen=True)
class Launch:
    """How one group is launched: decided on the host from the layout, baked into the source."""

    mode: str         # "thread" or "block"
    block: int        # threads per block (a power of two in block mode)
    nsplit: int       # chunks of the reduced range (1: no split)
    warp: bool        # block mode: finish the tree with warp shuffles


def meta_array(run: GroupRun, nsplit: int = 1) -> np.ndarray:
    """The int64 layout block a group kernel reads (see ``HEADER``)."""
    L = run.layout
    count = L.ro_total * L.ri
    head = [len(L.o_ext), len(L.ro_ext), L.ri, L.inner, L.o_total, L.ro_total, count, nsplit,
            -(-count // nsplit) if count else 0]
    body = list(L.o_ext) + list(L.ro_ext)
    for k in range(len(run.operands)):
        body += L.o_str[k] + L.ro_str[k] + [L.ri_str[k], L.i_str[k]]
    return np.array(head + body, dtype=np.int64)


def _opname(key: tuple) -> str:
    return {"in": "x", "out": "out", "buf": "ws"}[key[0]] + str(key[1])


def _nodes_of(st) -> list[Node]:
    roots = [r for r in st.reductions] + [n for _, n in st.writes] + [n for _, n in st.finals]
    return list(Graph(tuple(roots)).nodes) if roots else []


def numba_type_name(d: DType) -> str:
    return "numba.types.boolean" if d.kind == "b" else f"numba.types.{d.name}"


class CudaGroupSource:
    """Builds the source of one group's kernel (and its combine kernel when split)."""

    def __init__(self, plan: Plan, spec: Spec, run: GroupRun, launch: Launch):
        self.plan, self.spec, self.run, self.launch = plan, spec, run, launch
        self.stages = [plan.stages[i] for i in run.stages]
        self.ops = {key: (_opname(key), k) for k, key in enumerate(run.operands)}
        self.attrs = sorted({n.arg for st in self.stages for n in _nodes_of(st) if n.op is Op.ATTR})
        self.reductions = [r for st in self.stages for r in st.reductions]
        self.split = launch.nsplit > 1
        self.lines: list[str] = []

    # --- public -----------------------------------------------------------------------------
    def params(self) -> list[str]:
        parts = [f"p{j}" for j in range(len(self.stages[0].reductions))] if self.split else []
        return [n for n, _ in self.ops.values()] + parts + ["meta"] + [f"a_{a}" for a in self.attrs]

    def emit(self) -> str:
        self.lines = []
        self._kernel()
        if self.split:
            self.lines.append("")
            self._combine_kernel()
        return "\n".join(self.lines) + "\n"

    # --- pieces -------------------------------------------------------------------------------
    def _w(self, pad: int, text: str) -> None:
        self.lines.append("    " * pad + text)

    def _header(self, name: str, what: str) -> None:
        w = self._w
        w(0, f"def {name}({', '.join(self.params())}):")
        w(1, f"# {what}")
        w(1, "nO = meta[0]")
        w(1, "nRO = meta[1]")
        w(1, "RI = meta[2]")
        w(1, "I = meta[3]")
        w(1, "OT = meta[4]")
        w(1, "count = meta[6]")
        w(1, "nsplit = meta[7]")
        w(1, "chunk = meta[8]")
        w(1, "W = nO + nRO + 2")
        w(1, f"SB = {HEADER} + nO + nRO")
        for n, k in self.ops.values():
            w(1, f"sri_{n} = meta[SB + {k} * W + nO + nRO]")
            w(1, f"si_{n} = meta[SB + {k} * W + nO + nRO + 1]")

    def _base(self, pad: int) -> None:
        """Offsets of every operand at outer index ``o`` and inner index ``i``."""
        w = self._w
        for n, _ in self.ops.values():
            w(pad, f"b_{n} = i * si_{n}")
        w(pad, "rem = o")
        w(pad, "for d in range(nO - 1, -1, -1):")
        w(pad + 1, f"e = meta[{HEADER} + d]")
        w(pad + 1, "q = rem // e")
        w(pad + 1, "ix = rem - q * e")
        w(pad + 1, "rem = q")
        for n, k in self.ops.values():
            w(pad + 1, f"b_{n} += ix * meta[SB + {k} * W + d]")

    def _point(self, pad: int, names: list[str]) -> None:
        """Offsets ``c_<op>`` at reduced index ``r`` (-> ro, ri) for the operands in ``names``."""
        w = self._w
        if not self.run.axes:  # nothing reduced in this group: r is always 0
            for n in names:
                w(pad, f"c_{n} = b_{n}")
            return
        w(pad, "ro = r // RI")
        w(pad, "ri = r - ro * RI")
        for n in names:
            w(pad, f"c_{n} = b_{n} + ri * sri_{n}")
        w(pad, "rem = ro")
        w(pad, "for d in range(nRO - 1, -1, -1):")
        w(pad + 1, f"e = meta[{HEADER} + nO + d]")
        w(pad + 1, "q = rem // e")
        w(pad + 1, "ix = rem - q * e")
        w(pad + 1, "rem = q")
        for n in names:
            k = dict(self.ops.values())[n]
            w(pad + 1, f"c_{n} += ix * meta[SB + {k} * W + nO + d]")

    def _reads(self, st) -> list[str]:
        keys = [("in", l.arg) if l.op is Op.INPUT else ("buf", self.plan.buffer_index(l)) for l in _reads(st)]
        return [self.ops[k][0] for k in keys]

    def _load(self, n: Node) -> str:
        if n.op is Op.ATTR:
            return f"a_{n.arg}"
        key = ("in", n.arg) if n.op is Op.INPUT else ("buf", self.plan.buffer_index(n))
        name = self.ops[key][0]
        d = dt.materialize(self.spec.of(n).dtype) if n.op is Op.INPUT else None
        text = f"{name}[c_{name}]"
        # half is loaded as half and widened: the expression table computes in float32
        return CUDA_PY.cast(text, dt.float32) if d is dt.float16 else text

    def _store(self, value: str, have: DType, want: DType) -> str:
        return value if reg_dtype(want) is want and want is have else CUDA_PY.cast(value, want)

    def _body(self, pad: int, st, tag: str) -> tuple[list[str], list[tuple[str, str]]]:
        """Emit one loop body of stage ``st``: returns (reduction values, (store target, value))."""
        ew = ExprWriter(self.spec, CUDA_PY, self._load, prefix=f"{tag}{st.index}_")
        vals = [ew.value(r.srcs[0], reg_dtype(self.spec.of(r).acc)) for r in st.reductions]
        stores = []
        for k, n in st.writes:
            out = dt.materialize(self.spec.of(n).dtype)
            stores.append((self.ops[("out", k)][0], self._store(ew.value(n), reg_dtype(out), out)))
        for name, expr in ew.lines:
            self._w(pad, f"{name} = {expr}")
        return vals, stores

    def _targets(self, r: Node) -> list[str]:
        keys = [("out", k) for k in self.plan.reduce_outputs.get(id(r), ())]
        if any(r is b for b in self.plan.buffers):
            keys.append(("buf", self.plan.buffer_index(r)))
        return [self.ops[k][0] for k in keys]

    def _finalize(self, pad: int, st, accs: list[str]) -> None:
        """Mean, casts and the stores of a stage's results at the base offsets; then its finals."""
        w = self._w
        results = {}
        for j, (r, a) in enumerate(zip(st.reductions, accs)):
            acc = reg_dtype(self.spec.of(r).acc)
            name = f"r{st.index}_{j}"
            val = a if r.arg.kind != "mean" else CUDA_PY.cast(f"{a} / {CUDA_PY.cast('count', acc)}", acc)
            w(pad, f"{name} = {val}")
            results[id(r)] = name
            out = dt.materialize(self.spec.of(r).dtype)
            for t in self._targets(r):
                v = name if t.startswith("ws") else self._store(name, acc, out)
                w(pad, f"{t}[b_{t}] = {v}")
        ew = ExprWriter(self.spec, CUDA_PY, lambda n: results[id(n)] if n.op is Op.REDUCE else f"a_{n.arg}",
                        prefix=f"f{st.index}_")
        outs = []
        for k, n in st.finals:
            out = dt.materialize(self.spec.of(n).dtype)
            outs.append((self.ops[("out", k)][0], self._store(ew.value(n), reg_dtype(out), out)))
        for name, expr in ew.lines:
            w(pad, f"{name} = {expr}")
        for t, v in outs:
            w(pad, f"{t}[b_{t}] = {v}")

    def _init(self, r: Node) -> str:
        acc = reg_dtype(self.spec.of(r).acc)
        return CUDA_PY.literal(reduce_identity(r.arg.kind, acc), acc)

    def _writes(self, pad: int, st, first: str, step: str) -> None:
        w = self._w
        outs = [self.ops[("out", k)][0] for k, _ in st.writes]
        w(pad, f"for r in range({first}, count, {step}):")
        self._point(pad + 1, self._reads(st) + outs)
        _, stores = self._body(pad + 1, st, "s")
        for t, v in stores:
            w(pad + 1, f"{t}[c_{t}] = {v}")

    # --- thread mode --------------------------------------------------------------------------
    def _kernel(self) -> None:
        if self.launch.mode == "block":
            return self._block_kernel()
        w = self._w
        self._header("kernel", f"stages {', '.join(map(str, self.run.stages))} of op "
                     f"{self.plan.opdef.name}: one thread per output point"
                     + (", reduced dim split into chunks" if self.split else ""))
        w(1, "for t in range(cuda.grid(1), OT * I * nsplit, cuda.gridsize(1)):")
        w(2, "i = t % I")
        w(2, "v = t // I")
        w(2, "s = v % nsplit")
        w(2, "o = v // nsplit")
        self._base(2)
        for st in self.stages:
            w(2, f"# stage {st.index}")
            accs = [f"acc{st.index}_{j}" for j in range(len(st.reductions))]
            if st.reductions:
                for a, r in zip(accs, st.reductions):
                    w(2, f"{a} = {self._init(r)}")
                w(2, "r_lo = s * chunk")
                w(2, "for r in range(r_lo, min(count, r_lo + chunk)):")
                self._point(3, self._reads(st))
                vals, _ = self._body(3, st, "s")
                for a, r, v in zip(accs, st.reductions, vals):
                    w(3, combine(r.arg.kind, a, v))
                if self.split:
                    for j, a in enumerate(accs):
                        w(2, f"p{j}[(o * I + i) * nsplit + s] = {a}")
                else:
                    self._finalize(2, st, accs)
            if st.writes:
                self._writes(2, st, "0", "1")

    # --- block mode ---------------------------------------------------------------------------
    def _block_kernel(self) -> None:
        w, B = self._w, self.launch.block
        self._header("kernel", f"stages {', '.join(map(str, self.run.stages))} of op "
                     f"{self.plan.opdef.name}: one block of {B} threads per output row"
                     + (", reduced dim split into chunks" if self.split else ""))
        w(1, "tid = cuda.threadIdx.x")
        for st in self.stages:
            for j, r in enumerate(st.reductions):
                acc = reg_dtype(self.spec.of(r).acc)
                w(1, f"sh{st.index}_{j} = cuda.shared.array({B}, {numba_type_name(acc)})")
        w(1, "i = 0")
        w(1, "for blk in range(cuda.blockIdx.x, OT * nsplit, cuda.gridDim.x):")
        w(2, "o = blk // nsplit")
        w(2, "s = blk - o * nsplit")
        self._base(2)
        for st in self.stages:
            w(2, f"# stage {st.index}")
            accs = [f"acc{st.index}_{j}" for j in range(len(st.reductions))]
            if st.reductions:
                for a, r in zip(accs, st.reductions):
                    w(2, f"{a} = {self._init(r)}")
                w(2, "r_lo = s * chunk")
                w(2, f"for r in range(r_lo + tid, min(count, r_lo + chunk), {B}):")
                self._point(3, self._reads(st))
                vals, _ = self._body(3, st, "s")
                for a, r, v in zip(accs, st.reductions, vals):
                    w(3, combine(r.arg.kind, a, v))
                self._tree(2, st, accs)
            if st.writes:
                self._writes(2, st, "tid", str(B))
                w(2, "cuda.syncthreads()")

    def _tree(self, pad: int, st, accs: list[str]) -> None:
        """Shared-memory tree down to one warp, then shuffles (or shared memory to the end)."""
        w, B = self._w, self.launch.block
        shs = [f"sh{st.index}_{j}" for j in range(len(accs))]
        for sh, a in zip(shs, accs):
            w(pad, f"{sh}[tid] = {a}")
        w(pad, "cuda.syncthreads()")
        step, stop = B // 2, (32 if self.launch.warp else 1)
        while step >= stop:
            w(pad, f"if tid < {step}:")
            for sh, r in zip(shs, st.reductions):
                w(pad + 1, combine(r.arg.kind, f"{sh}[tid]", f"{sh}[tid + {step}]"))
            w(pad, "cuda.syncthreads()")
            step //= 2
        if self.launch.warp:
            w(pad, "if tid < 32:")
            for sh, a in zip(shs, accs):
                w(pad + 1, f"{a} = {sh}[tid]")
            for off in (16, 8, 4, 2, 1):
                for a, r in zip(accs, st.reductions):
                    w(pad + 1, combine(r.arg.kind, a, f"cuda.shfl_down_sync(0xffffffff, {a}, {off})"))
            w(pad + 1, "if tid == 0:")
            inner = pad + 2
        else:
            w(pad, "if tid == 0:")
            for sh, a in zip(shs, accs):
                w(pad + 1, f"{a} = {sh}[0]")
            inner = pad + 1
        if self.split:
            for j, a in enumerate(accs):
                w(inner, f"p{j}[blk] = {a}")
        else:
            self._finalize(inner, st, accs)
        w(pad, "cuda.syncthreads()")  # results (workspaces) visible to the block; shared reusable

    # --- split: fold the partials -------------------------------------------------------------
    def _combine_kernel(self) -> None:
        w = self._w
        st = self.stages[0]
        self._header("combine", "folds the partial accumulators of the split reduced dim and finishes")
        w(1, "for u in range(cuda.grid(1), OT * I, cuda.gridsize(1)):")
        w(2, "i = u % I")
        w(2, "o = u // I")
        self._base(2)
        accs = [f"acc{st.index}_{j}" for j in range(len(st.reductions))]
        for j, (a, r) in enumerate(zip(accs, st.reductions)):
            w(2, f"{a} = p{j}[u * nsplit]")
            w(2, "for s in range(1, nsplit):")
            w(3, combine(r.arg.kind, a, f"p{j}[u * nsplit + s]"))
        self._finalize(2, st, accs)


PRELUDE = '''\
# Generated by fusegen {version} from op {op!r} ({dtypes}) for numba-cuda. Do not edit: regenerate instead.
# numba {numba_version}, @cuda.jit(cache=True): part of the file's content hash (Numba's cache key).
import math
import numba
import numpy as np
from numba import cuda
''' + NAN_HELPERS


def group_source(plan: Plan, spec: Spec, run: GroupRun, launch: Launch) -> tuple[str, CudaGroupSource]:
    gs = CudaGroupSource(plan, spec, run, launch)
    body = gs.emit()
    import numba
    head = PRELUDE.format(op=plan.opdef.name, dtypes=", ".join(map(str, spec.dtypes)), version=__version__,
                          numba_version=numba.__version__)
    return head + body, gs


# ---------------------------------------------------------------------------------------------
# Under the simulator kernels run as Python: give them NumPy's scalar math (float32 stays
# float32, log(-1) is NaN instead of a ValueError, floor(inf) is inf instead of an OverflowError).
# ---------------------------------------------------------------------------------------------
class _SimMath:
    exp, log, sqrt, sin, cos, tanh = np.exp, np.log, np.sqrt, np.sin, np.cos, np.tanh
    floor, ceil = np.floor, np.ceil

    @staticmethod
    def erf(x):
        return type(x)(math.erf(x)) if x == x else x


# ---------------------------------------------------------------------------------------------
# Compilation: write the source to a content-addressed file (readable, and cacheable by Numba)
# ---------------------------------------------------------------------------------------------
@dataclass
class CudaGroupKernel:
    source: str
    path: str
    kernel: object          # cuda.jit dispatcher (or, for compile_ptx, the module's Python function)
    combine: object | None
    module: object
    attrs: tuple
    n_partials: int


def load_group(plan: Plan, spec: Spec, run: GroupRun, launch: Launch, jit: bool = True) -> CudaGroupKernel:
    """Generate, write and import one group's module; ``jit`` wraps its kernels in ``cuda.jit``."""
    from numba import cuda
    src, gs = group_source(plan, spec, run, launch)
    sim = simulator()

    def setup(mod):
        if sim:
            mod.math = _SimMath
        mod._fmax = cuda.jit(device=True, inline=True)(mod._fmax)
        mod._fmin = cuda.jit(device=True, inline=True)(mod._fmin)
        if jit:
            opts = {} if sim else {"cache": True}
            mod.kernel = cuda.jit(**opts)(mod.kernel)
            if hasattr(mod, "combine"):
                mod.combine = cuda.jit(**opts)(mod.combine)

    mod = import_source(src, "numba-cuda", "fusegen_cuda", setup, key_extra=repr((sim, jit)))
    n_parts = len(gs.stages[0].reductions) if gs.split else 0
    return CudaGroupKernel(src, mod.__file__, mod.kernel, getattr(mod, "combine", None), mod,
                           tuple(gs.attrs), n_parts)


def choose_launch(plan: Plan, run: GroupRun, max_threads: int, split: int | None = None,
                  warp_ok: bool = True, spec: Spec | None = None) -> Launch:
    """Thread or block mode, block size, and whether to split the reduced dim.

    ``split``: force this many chunks on an eligible group (a lone reduction stage), for tests.
    """
    L = run.layout
    stages = [plan.stages[i] for i in run.stages]
    has_red = any(st.reductions for st in stages)
    count = L.ro_total * L.ri
    lone = len(stages) == 1 and bool(stages[0].reductions) and not stages[0].writes
    if has_red and L.inner == 1:
        block = 1
        while block < min(count, max_threads):
            block *= 2
        block = max(block, 32 if warp_ok else 2)
        block = min(block, max(max_threads, 32 if warp_ok else 2))
        warp = warp_ok and block >= 32 and spec is not None and all(
            reg_dtype(spec.of(r).acc).name in SHUFFLE_DTYPES for st in stages for r in st.reductions)
        nsplit = 1
        if lone:
            if split is not None:
                nsplit = max(1, min(split, count))
            elif L.o_total < 32 and count >= 16 * block:
                nsplit = min(-(-count // (8 * block)), -(-128 // max(1, L.o_total)))
        return Launch("block", block, nsplit, warp)
    nsplit = 1
    if lone and has_red:
        outputs = L.o_total * L.inner
        if split is not None:
            nsplit = max(1, min(split, count))
        elif outputs < 1024 and count >= 256:
            nsplit = max(1, min(count // 64, -(-4096 // max(1, outputs))))
    return Launch("thread", max_threads, nsplit, False)


def kernel_signature(spec: Spec, plan: Plan, run: GroupRun, gs_attrs: tuple, n_partials: int,
                     partial_dtypes: list[DType]):
    """The numba-cuda signature of a group kernel (for ``compile_ptx``)."""
    import numba
    from numba import types

    def arr(d: DType):
        return types.Array(numba.from_dtype(d.np), 1, "C")

    out_dtypes = spec.out_dtypes
    args = []
    for kind, i in run.operands:
        if kind == "in":
            args.append(arr(spec.dtypes[i]))
        elif kind == "out":
            args.append(arr(out_dtypes[i]))
        else:
            args.append(arr(reg_dtype(spec.of(plan.buffers[i]).acc)))
    args += [arr(d) for d in partial_dtypes[:n_partials]]
    args.append(types.Array(types.int64, 1, "C"))
    scalar = {"bool": types.boolean, "int": types.int64, "float": types.float64}
    for a in gs_attrs:
        args.append(scalar[plan.opdef.attrs[a].type.value])
    return tuple(args)


def compile_ptx(op, dtypes, shapes, attrs: dict | None = None, cc=(9, 0), max_threads: int = 256,
                split: int | None = None) -> list[tuple[str, str]]:
    """PTX of every kernel ``op`` runs for these input dtypes/shapes: ``[(name, ptx), ...]``.

    Works without a GPU (not under the simulator): ``numba.cuda.compile_ptx``; a ``CompileError``
    saying what to install without numba-cuda.
    """
    missing = numba_cuda_missing()
    if missing:
        from .errors import CompileError
        raise CompileError(f"op {op.name}: {missing}")
    from numba import cuda
    from .ir import infer
    from .plan import build_plan, schedule
    plan = build_plan(op)
    spec = infer(op, dtypes, shapes, op.bind_attrs(attrs or {}))
    out = []
    for g, run in enumerate(schedule(plan, spec)):
        launch = choose_launch(plan, run, max_threads, split, True, spec)
        gk = load_group(plan, spec, run, launch, jit=False)
        parts = [reg_dtype(spec.of(r).acc) for r in plan.stages[run.stages[0]].reductions]
        sig = kernel_signature(spec, plan, run, gk.attrs, gk.n_partials, parts)
        fns = [("kernel", gk.module.kernel)] + ([("combine", gk.module.combine)] if gk.combine else [])
        for name, fn in fns:
            ptx, _ = cuda.compile_ptx(fn, sig, cc=cc)
            out.append((f"group{g}_{launch.mode}_{name}", ptx))
    return out


# ---------------------------------------------------------------------------------------------
# The emitted MindSpore-AOT .cu (templates/mindspore_aot_cuda.cu.j2): the same tables and entry
# points as the C++ emitter (abi_emit), device code rendered with the CUDA_CPP dialect.
# ---------------------------------------------------------------------------------------------
def _cuda_combo_data(op, plan: Plan, combo) -> dict:
    from .abi_emit import _TYPE_IDS, _operand_ids
    from .exprs import CUDA_CPP
    from .ir import infer
    g = op.graph
    spec = infer(op, combo, [None] * len(combo), {n: s.default for n, s in op.attrs.items()})
    of = _operand_ids(op, plan)
    out_dtypes = list(spec.out_dtypes)
    op_types = list(combo) + out_dtypes + [reg_dtype(spec.of(b).acc) for b in plan.buffers]

    def body(node: Node, want: DType, names: dict) -> list[str]:
        w = ExprWriter(spec, CUDA_CPP, lambda n: names[id(n)] if n.op is not Op.ATTR else f"a.{n.arg}", prefix="t")
        v = w.value(node, want)
        return [f"const auto {name} = {expr};" for name, expr in w.lines] + [f"return {v};"]

    stages = []
    for st in plan.stages:
        reads = _reads(st)
        params = []
        for l in reads:
            key = ("in", l.arg) if l.op is Op.INPUT else ("buf", plan.buffer_index(l))
            params.append(dict(op=of(key), name=f"v{of(key)}", reg=CUDA_CPP.type_name(reg_dtype(op_types[of(key)]))))
        names = {id(l): p["name"] for l, p in zip(reads, params)}
        values, targets = [], []
        for j, r in enumerate(st.reductions):
            acc = reg_dtype(spec.of(r).acc)
            tg = [of(("out", k)) for k in plan.reduce_outputs.get(id(r), ())] + \
                ([of(("buf", plan.buffer_index(r)))] if any(r is b for b in plan.buffers) else [])
            targets += [t for t in tg if t not in targets]
            values.append(dict(kind="reduce", fn=f"s{st.index}_r{j}", reduce=r.arg.kind, acc=CUDA_CPP.type_name(acc),
                               init=CUDA_CPP.literal(reduce_identity(r.arg.kind, acc), acc),
                               body=body(r.srcs[0], acc, names), targets=tg))
        for k, n in st.writes:
            out = reg_dtype(dt.materialize(spec.of(n).dtype))
            values.append(dict(kind="write", fn=f"s{st.index}_w{k}", op=of(("out", k)),
                               reg=CUDA_CPP.type_name(out), body=body(n, out, names)))
            targets.append(of(("out", k)))
        finals = []
        for k, n in st.finals:
            rnames = {id(r): f"r{j}" for j, r in enumerate(st.reductions)}
            fparams = [dict(name=f"r{j}", reg=CUDA_CPP.type_name(reg_dtype(spec.of(r).acc)))
                       for j, r in enumerate(st.reductions)]
            out = reg_dtype(dt.materialize(spec.of(n).dtype))
            finals.append(dict(fn=f"s{st.index}_f{k}", op=of(("out", k)), reg=CUDA_CPP.type_name(out),
                               params=fparams, body=body(n, out, rnames)))
            if of(("out", k)) not in targets:
                targets.append(of(("out", k)))
        stages.append(dict(index=st.index, params=params, values=values, finals=finals, targets=targets))
    return dict(suffix="_".join(d.name for d in combo), inputs=[d.name for d in combo],
                outputs=[d.name for d in out_dtypes], types=[CUDA_CPP.type_name(d) for d in op_types],
                type_ids=[_TYPE_IDS[d.name] for d in out_dtypes], in_type_ids=[_TYPE_IDS[d.name] for d in combo],
                ws_itemsize=[reg_dtype(spec.of(b).acc).itemsize for b in plan.buffers],
                ws_nodes=[g.idx(b) for b in plan.buffers], stages=stages)


def nvcc_command(op_name: str) -> str:
    """The build command for an emitted .cu that works with CUDA 11.8 to 13 (no compute_70)."""
    from .build import CUDA_DEFAULT_ARCHS
    arch = " ".join(f"-gencode arch=compute_{a},code=sm_{a}" for a in CUDA_DEFAULT_ARCHS)
    last = CUDA_DEFAULT_ARCHS[-1]
    return (f"nvcc --shared -Xcompiler -fPIC -O3 --use_fast_math --expt-relaxed-constexpr "
            f"-D_GLIBCXX_USE_CXX11_ABI=0 {arch} -gencode arch=compute_{last},code=compute_{last} "
            f"-I. -o {op_name}.so {op_name}.cu")


def emit_cuda(op, dtypes=None):
    """``fg.emit(op, abi="mindspore-aot", device="cuda")``: the ``.cu`` and its header."""
    from .abi_emit import HEADER_NAME, TEMPLATES, Emitted, _env, _parse_dtypes, c_name, error_table, template_data
    from .plan import build_plan
    plan = build_plan(op)
    combos = _parse_dtypes(op, dtypes)
    name = c_name(op.name)
    data = template_data(op, plan, [_cuda_combo_data(op, plan, c) for c in combos],
                         nvcc_command=nvcc_command(op.name))
    src = _env().get_template("mindspore_aot_cuda.cu.j2").render(**data)
    main = f"{op.name}.cu"
    return Emitted({main: src, HEADER_NAME: (TEMPLATES / HEADER_NAME).read_text()}, main, name, error_table(name),
                   [tuple(d.name for d in c) for c in combos])
