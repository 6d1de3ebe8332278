"""The numba-cuda kernel source of one fused group (``CudaGroupSource``): thread mode, block mode
(a shared-memory tree finished with warp shuffles) and the combine kernel of a split reduction,
written as Python for ``numba.cuda.jit``. ``fusegen.lower_cuda`` (the face) chooses the launch,
writes and loads the source, and explains the kernel shapes.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import dtypes as dt
from ..dtypes import DType
from ..ir import Node, Op, Spec, nodes_of
from ..plan import GroupRun, Plan
from ..plan.paths import is_param, path_steps
from ..plan.exprs import CUDA_PY, ExprWriter, reduce_identity, reg_dtype
from .gathers import GatherSlots
from .pysource import combine, general_maps, group_params, operand_kind, operand_name
from .rng import RandomText

# meta: nO, nRO, RI, I, O_total, RO_total, count, nsplit, chunk; then extents, then strides
HEADER = 9


@dataclass(frozen=True)
class Launch:
    """How one group is launched: decided on the host from the layout, baked into the source."""

    mode: str         # "thread" or "block"
    block: int        # threads per block (a power of two in block mode)
    nsplit: int       # chunks of the reduced range (1: no split)
    warp: bool        # block mode: finish the tree with warp shuffles



def _nodes_of(st) -> list[Node]:
    return nodes_of([r for r in st.reductions] + [n for _, n in st.writes] + [n for _, n in st.finals])


def numba_type_name(d: DType) -> str:
    return "numba.types.boolean" if d.kind == "b" else f"numba.types.{d.name}"


class CudaGroupSource:
    """Builds the source of one group's kernel (and its combine kernel when split)."""

    def __init__(self, plan: Plan, spec: Spec, run: GroupRun, launch: Launch):
        self.plan, self.spec, self.run, self.launch = plan, spec, run, launch
        self.stages = [plan.stages[i] for i in run.stages]
        self.ops = {key: (operand_name(key), k) for k, key in enumerate(run.operands)}
        inners = run.inners or [None] * len(run.operands)
        self.kind = {key: operand_kind(key, inner) for key, inner in zip(run.operands, inners)}
        self.active = dict(zip(run.operands, run.active or [True] * len(run.operands)))
        self.general = general_maps(self.stages, inners)
        self.rng = RandomText()   # random numbers: one Philox block per element (one thread each)
        # the group's accesses: which operand a loaded leaf is in its view context, where a
        # reduction's result goes
        self.slot_of = {id(a.node): a.slot for st in self.stages for a in st.reads}
        self.store_slots: dict[int, list] = {}
        for st in self.stages:
            for a in st.stores:
                if a.node.op is Op.REDUCE:
                    self.store_slots.setdefault(id(a.node), []).append(run.operand_of[(a.slot, a.steps)])
        self.attrs = sorted({n.arg for st in self.stages for n in _nodes_of(st) if n.op is Op.ATTR})
        self.dim_params = group_params(self.stages)
        self.reductions = [r for st in self.stages for r in st.reductions]
        self.split = launch.nsplit > 1
        self.lines: list[str] = []
        self.g = GatherSlots(self.stages, run)   # gathers (issue #17): bad indices via atomics into gerr

    # --- public -----------------------------------------------------------------------------
    def params(self) -> list[str]:
        parts = [f"p{j}" for j in range(len(self.stages[0].reductions))] if self.split else []
        arrays = [n for key, (n, _) in self.ops.items() if not self.kind[key].startswith("iota")]
        gathers = (["gerr"] if self.g.checks else []) + self.g.args()
        return arrays + parts + ["meta"] + [f"a_{a}" for a in self.attrs] + [self.param_name(n) for n in self.dim_params] \
            + gathers

    def param_name(self, n: Node) -> str:
        return f"d_{self.plan.opdef.graph.idx(n)}"

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
        nops = len(self.ops)
        for n, k in self.ops.values():
            # offsets: a slice's start, a piece's place, an iota's first value (plans with layout ops)
            w(pad, f"b_{n} = meta[SB + {nops} * W + {k}] + i * si_{n}" if self.general else f"b_{n} = i * si_{n}")
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
        """The operands a stage reads in this box (a piece's only where it is active)."""
        out = []
        for a in st.reads:
            key = self.run.operand_of[(a.slot, a.steps)]
            if self.active[key] and self.ops[key][0] not in out:
                out.append(self.ops[key][0])
        return out

    def _load(self, n: Node, ctx: tuple = ()) -> str:
        if n.op is Op.ATTR:
            return f"a_{n.arg}"
        if is_param(n):
            return self.param_name(n)
        key = self.run.operand_of[(self.slot_of[id(n)], path_steps(ctx, n))]
        name, k = self.ops[key]
        if self.kind[key] != "array" and self.g.nodes and self.g.address_terms(n, ctx, self._ew):
            self.g.refuse(self.plan.opdef.name)
        if self.kind[key] == "iota":
            return f"c_{name}"
        nops = len(self.ops)
        if self.kind[key] == "iota_modular":   # (the unravelled address is the value)
            return f"_inner(meta, meta[SB + {nops} * W + {nops} + {k}], c_{name})"
        d = dt.materialize(self.spec.of(n).dtype) if n.op is Op.INPUT else None
        if self.kind[key] == "modular":
            text = f"{name}[_inner(meta, meta[SB + {nops} * W + {nops} + {k}], c_{name})]"
        else:
            text = f"{name}[c_{name}{self.g.address_terms(n, ctx, self._ew) if self.g.nodes else ''}]"
        # half is loaded as half and widened: the expression table computes in float32
        return CUDA_PY.cast(text, dt.float32) if d is dt.float16 else text

    def _gather_index(self, node: Node, ctx: tuple, raw: str, ew: ExprWriter) -> str:
        # a bad index: gerr[2c] = 1, gerr[2c + 1] = the largest bad value (set to INT64_MIN by the host)
        return self.g.index_lines(node, raw, ew, lambda c, bad, r: [
            (f"{bad}n", f"cuda.atomic.max(gerr, {2 * c}, 1) if {bad} else 0"),
            (f"{bad}v", f"cuda.atomic.max(gerr, {2 * c + 1}, {r}) if {bad} else 0")])

    def _store(self, value: str, have: DType, want: DType) -> str:
        return value if reg_dtype(want) is want and want is have else CUDA_PY.cast(value, want)

    def _body(self, pad: int, st, tag: str) -> tuple[list[str], list[tuple[str, str]]]:
        """Emit one loop body of stage ``st``: returns (reduction values, (store target, value))."""
        ew = ExprWriter(self.spec, CUDA_PY, self._load, prefix=f"{tag}{st.index}_", variant=self.run.variant,
                        gather=self._gather_index, random=self.rng)
        self._ew = ew
        vals = [ew.value(r.srcs[0], reg_dtype(self.spec.of(r).acc)) for r in st.reductions]
        stores = []
        for k, n in st.writes:
            out = dt.materialize(self.spec.of(n).dtype)
            stores.append((self.ops[("out", k)][0], self._store(ew.value(n), reg_dtype(out), out)))
        for name, expr in ew.lines:
            self._w(pad, f"{name} = {expr}")
        return vals, stores

    def _targets(self, r: Node) -> list[str]:
        return [self.ops[k][0] for k in self.store_slots.get(id(r), ())]

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
        ew = ExprWriter(self.spec, CUDA_PY, lambda n, ctx=(): results[id(n)] if n.op is Op.REDUCE else f"a_{n.arg}",
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
                # a scan's thread carries its line's running value and stores it at every step
                scans = [(a, r, t) for a, r in zip(accs, st.reductions) if r.arg.scan for t in self._targets(r)]
                self._point(3, self._reads(st) + [t for _, _, t in scans if t not in self._reads(st)])
                vals, _ = self._body(3, st, "s")
                for a, r, v in zip(accs, st.reductions, vals):
                    w(3, combine(r.arg.kind, a, v))
                for a, r, t in scans:
                    acc, out = reg_dtype(self.spec.of(r).acc), dt.materialize(self.spec.of(r).dtype)
                    w(3, f"{t}[c_{t}] = {a if t.startswith('ws') else self._store(a, acc, out)}")
                if self.split:
                    for j, a in enumerate(accs):
                        w(2, f"p{j}[(o * I + i) * nsplit + s] = {a}")
                elif not st.is_scan:   # (a scan stored its results along the way)
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
