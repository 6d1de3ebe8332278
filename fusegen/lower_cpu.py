"""Plan -> Python source -> one Numba function per fused group (CPU).

Each group runs the canonical nest of ``plan.Layout``::

    for t in prange(tasks):          # t -> (outer index o, tile of the inner kept dim)
        for stage in group:          # fused stages reuse the tile while it is in cache
            for ro in range(RO):     # outer reduced dims (usually none)
                for ri in range(RI): # innermost reduced dim: scalar accumulators ("row" mode)
                    for i in tile:   # innermost kept dim: vector accumulators ("col" mode)

Extents and strides arrive at run time in one int64 ``meta`` array, so one compiled
function serves every shape; what is baked in is what changes the machine code:
dtypes, the group's stages, row or col mode, and which operands have unit or zero
stride on the hot loop (so LLVM sees ``x[i]`` and vectorizes). Float reductions use
``fastmath={'reassoc'}``: the reassociation is what lets LLVM keep several vector
accumulators (NaN and Inf semantics are untouched). Not 'contract': an expression that
two fused stages recompute must give bit-identical values in both (``x >= max(x)``),
and FMA contraction can differ between a vector loop and its scalar remainder.
"""
from __future__ import annotations

from dataclasses import dataclass

from .ir import Node, Op, Spec, nodes_of
from .lower import cpu_blocks, cpu_fold, cpu_inplace, cpu_kept, cpu_moments, cpu_rows, cpu_scans, cpu_splits, cpu_stream
from .lower import rng as rnglower
from .lower.cpu_layout import HEADER, OperandSlot, index_text, meta_array, stride_pattern, unravel_lines, view_text  # noqa: F401  (HEADER, meta_array: part of the face)
from .lower.gathers import GatherSlots
from .lower.cpu_module import JIT_OPTIONS, GroupKernel, build_module  # noqa: F401  (JIT_OPTIONS: part of the face)
from .lower.pysource import combine, general_maps, group_params, hoist_invariant, operand_kind, operand_name
from .plan import CenteredPair, GroupRun, Plan
from .plan.boxrows import BoxRows
from .plan.paths import is_param, path_steps
from .plan.exprs import PYTHON, ExprWriter, reduce_identity, reg_dtype

class GroupSource:
    """Builds the source of one group function."""

    def __init__(self, plan: Plan, spec: Spec, run: GroupRun, pattern: tuple, mode: str, parallel: bool,
                 split: bool = False, block: int = 1, rows: bool = False, single: frozenset = frozenset()):
        self.plan, self.spec, self.run, self.mode, self.parallel = plan, spec, run, mode, parallel
        # rows: one box of a ``plan.boxrows.BoxRows``, run for the row whose offsets (``r_<name>``,
        # one per operand) its driver passes
        self.rows = rows
        # block: rows of the last outer dim a task runs on its tile (rt.policy.choose_block), > 1
        # where an operand is read transposed: a square block instead of one long row.
        self.block = block
        # split: one reduction stage whose reduced dim is cut into chunks, one per task, each
        # into its own partial accumulator row, combined at the end. Used when there are too
        # few outputs to give every thread a contiguous share (e.g. a column sum).
        self.split = split
        self.scan_pass = None   # a split scan's pass: "totals" or "write" (emit)
        inners = run.inners or [None] * len(run.operands)
        self.ops = {key: OperandSlot(operand_name(key), key, p[0], p[1], k, operand_kind(key, inner))
                    for k, (key, p, inner) in enumerate(zip(run.operands, pattern, inners))}
        self.active = run.active or [True] * len(run.operands)
        self.invariant = [p[2] for p in pattern]
        # the group's accesses: which operand a loaded leaf is in its view context, where a
        # reduction's result goes
        self.slot_of = {id(a.node): a.slot for st in self._stages() for a in st.reads}
        self.store_slots: dict[int, list] = {}
        for st in self._stages():
            for a in st.stores:
                if a.node.op is Op.REDUCE:
                    self.store_slots.setdefault(id(a.node), []).append(run.operand_of[(a.slot, a.steps)])
        # code that reads offsets and digits from meta only for plans whose maps can have them
        self.general = rows or general_maps(self._stages(), inners)   # (a box's row offsets: from meta)
        self.lines: list[str] = []
        self.attrs: list[str] = sorted({n.arg for st in self._stages() for n in _nodes_of(st) if n.op is Op.ATTR})
        self.params = group_params(self._stages())
        self.g = GatherSlots(self._stages(), run)
        # random numbers, four per Philox call where a counter is contiguous (fusegen/lower/rng.py)
        self.fills = rnglower.LoopFills(spec, run.variant, self._counter_operand)
        self.rng = self.fills.text
        self.pairs = cpu_moments.group_pairs(self) if mode == "row" and not split else {}
        # workspaces this group alone writes and reads back in the same task: locals, not arrays
        # (``single``: those no other group names; ``lower/cpu_kept``)
        self.kept = cpu_kept.candidates(self, single)
        for key in self.kept:
            self.ops[key].kept = True

    def _stages(self):
        return [self.plan.stages[i] for i in self.run.stages]

    def param_name(self, n: Node) -> str:
        return f"p_{self.plan.opdef.graph.idx(n)}"

    def emit(self, fname: str) -> str:
        args = [o.name for o in self.ops.values() if o.is_array and not o.kept] + ["meta"] + [f"a_{a}" for a in self.attrs]
        args += [self.param_name(n) for n in self.params]
        args += self.g.args() + ([f"r_{o.name}" for o in self.ops.values()] if self.rows else [])
        w = self.lines.append
        w(f"def {fname}({', '.join(args)}):")
        w(f"    # stages {', '.join(str(s) for s in self.run.stages)} of op {self.plan.opdef.name}, "
          f"{self.mode} mode{', reduced dim split across tasks' if self.split else ''}"
          f"{f', blocked: {self.block} rows by TILE' if self.block > 1 else ''}")
        if self.run.variant:
            w("    # pieces in this box: " + ", ".join(
                f"%{self.plan.opdef.graph.idx(n)} {'constant' if p is None else f'source {p}'}"
                for (n, _), p in self.run.variant.items()))
        for o in self.ops.values():
            if o.is_array and not o.kept:
                w(f"    {o.name}_ = _fg_flat({o.name})")
        w("    nO = meta[0]; nRO = meta[1]; RI = meta[2]; I = meta[3]")
        w("    ntiles = meta[4]; TILE = meta[5]; ROT = meta[7]; count = meta[8]")
        w(f"    nsplit = meta[9]; chunk = meta[10]; W = nO + nRO + 2; SB = {HEADER} + nO + nRO")
        if self.block > 1:   # tasks are blocks: BLOCK rows of the last outer dim by one tile
            w(f"    BLOCK = {self.block}; rows = meta[{HEADER} + nO - 1]; nrb = (rows + BLOCK - 1) // BLOCK")
            w("    ntasks = (meta[6] // rows) * nrb * ntiles")
        else:
            w("    ntasks = meta[6] * ntiles * nsplit")
        self.lines += self.g.cpu_lines("alloc")
        for o in self.ops.values():
            if o.ri == "n":
                w(f"    {o.name}_sri = meta[SB + {o.k} * W + nO + nRO]")
            if o.i == "n":
                w(f"    {o.name}_si = meta[SB + {o.k} * W + nO + nRO + 1]")
        if self.split:
            for j, r in enumerate(self._stages()[0].reductions):
                acc = reg_dtype(self.spec.of(r).acc)
                w(f"    part{j} = np.empty((ntasks, max(I, 1)), dtype=np.{acc.name})")
        # A split scan runs its tasks twice (the blocked scan): each chunk's total, an exclusive
        # scan of the totals along the chunks, then each chunk again from its carried prefix.
        self.scan_split = self.split and self._stages()[0].is_scan
        for self.scan_pass in (("totals", "write") if self.scan_split else (None,)):
            if self.scan_pass == "write":
                self.lines += cpu_scans.carry_lines(self._stages()[0], self.spec)
            self._task_loop()
        if self.split and not self.scan_split:
            self._combine_partials(self._stages()[0])
        self.lines += self.g.cpu_lines("return") if self.g.checks else ["    return 0"]
        return "\n".join(self.lines) + "\n"

    def _task_loop(self) -> None:
        """The parallel loop over tasks, each running every stage of the group on its tile."""
        w = self.lines.append
        loop, start = "prange" if self.parallel else "range", len(self.lines)
        w(f"    for t in {loop}(ntasks):")
        w("        _fg_wide()   # LLVM: 512-bit vectors where the CPU has them (fusegen/pyhelpers_numba.py)")
        if self.block > 1:
            w("        ob = t // (nrb * ntiles)")
            w("        u = t - ob * (nrb * ntiles)")
            w("        r0 = (u // ntiles) * BLOCK")
            w("        i0 = (u - (u // ntiles) * ntiles) * TILE")
            w("        r_lo = 0")
            w("        r_hi = RI")
        elif self.split:
            w("        o = t // (ntiles * nsplit)")
            w("        u = t - o * (ntiles * nsplit)")
            w("        i0 = (u // nsplit) * TILE")
            w("        r_lo = (u - (u // nsplit) * nsplit) * chunk")
            w("        r_hi = min(RI, r_lo + chunk)")
        else:   # (nsplit is 1: no divisions for it, a few per task that count at a tiny shape)
            # (row mode: one tile; a copy, not an alias: parfors refuse a write to the loop index)
            # (a box of rows of boxes: one tile too, its meta's TILE is the inner extent)
            one = self.mode == "row" or self.rows
            w("        o = t + 0" if one else "        o = t // ntiles")
            w("        i0 = 0" if one else "        i0 = (t - o * ntiles) * TILE")
            w("        r_lo = 0")
            w("        r_hi = RI")
        w("        n = min(TILE, I - i0)")
        alloc_at = len(self.lines)
        self.lines += cpu_blocks.block_transposes(self)
        if self.block > 1:   # the block's rows, each run as a task of one row would be
            w("        for o in range(ob * rows + r0, ob * rows + min(rows, r0 + BLOCK)):")
        body_at = len(self.lines)
        for o in self.ops.values():
            if self.general:  # an offset (a slice's start, a piece's place, an iota's first value)
                w(f"        b_{o.name} = meta[SB + {len(self.ops)} * W + {o.k}]{f' + r_{o.name}' if self.rows else ''}"
                  f" + i0 * meta[SB + {o.k} * W + nO + nRO + 1]")
            else:
                w(f"        b_{o.name} = i0 * meta[SB + {o.k} * W + nO + nRO + 1]")
        self.lines += unravel_lines("        ", "o", "nO", "", "b", self.ops.values())
        self.lines += self.g.cpu_lines("task start")
        done = {p.var_stage for p in self.pairs.values()}   # computed with their mean's stage
        for st in self._stages():
            if st.index not in done:
                self._stage(st, self.pairs.get(st.index))
        if self.block > 1:
            self.lines[body_at:] = ["    " + line for line in self.lines[body_at:]]
        self.lines += self.g.cpu_lines("task end")
        self.lines[alloc_at:alloc_at] = self.fills.allocations("        ")
        if self.stream:   # outputs stored around the cache (rt.policy.stream_order, lower/cpu_stream)
            self.lines[start:] = cpu_stream.stream_task_loop(self.lines[start:], [o.name for o in self.ops.values() if o.key[0] == "out"])

    # --- one stage ----------------------------------------------------------------------------
    def _stage(self, st, pair: CenteredPair | None = None):
        """One stage's loops; with ``pair``, the stage of its mean also computes its centered
        variance (row mode), in one pass of sums shifted by a pivot."""
        w = self.lines.append
        pad = "        "
        w(f"{pad}# stage {st.index}: " + ", ".join(
            [f"{'scan ' if r.arg.scan else ''}{r.arg.kind}{'' if r.arg.scan else ' reduction'}" for r in st.reductions]
            + ([f"({self.scan_pass} pass)"] if self.scan_pass else []) + [f"output {k}" for k, _ in st.writes]))
        if pair is not None:
            w(f"{pad}# and stage {pair.var_stage}, its centered {pair.var.arg.kind} of squares, in the same pass: "
              "sums shifted by a pivot from the row (fusegen.plan.moments)")
        reads = [self.ops[key] for key in self.read_keys(st)]
        accs = []
        for j, r in enumerate(st.reductions + ((pair.var,) if pair else ())):
            info = self.spec.of(r)
            acc = reg_dtype(info.acc)
            init = PYTHON.literal(reduce_identity(r.arg.kind, acc), acc)
            if self.scan_pass == "write":   # from the carry into this chunk
                w(f"{pad}acc{j} = part{j}[t, 0]" if self.mode == "row" else f"{pad}acc{j} = part{j}[t]")
            elif self.mode == "row":
                w(f"{pad}acc{j} = {init}")
            elif self.split:
                w(f"{pad}acc{j} = part{j}[t]")
                w(f"{pad}acc{j}[:n] = {init}")
            else:
                w(f"{pad}acc{j} = np.full(n, {init}, dtype=np.{acc.name})")
            accs.append((r, acc))
        if pair is not None:
            self.lines += cpu_moments.pivot_lines(self, st, pair, accs[0][1], pad)
        needs_r = bool(st.reductions) or self.run.layout.ri > 1 or self.run.layout.ro_total > 1
        w(f"{pad}for ro in range(ROT):")
        p2 = pad + "    "
        for o in reads:
            w(f"{p2}c_{o.name} = b_{o.name}")
        written = self._elem_targets(st)
        moving = reads + [o for o in written if all(o is not r for r in reads)]   # (Stage.kept: both)
        kept = ExprWriter.outputs_read(self.spec, st)
        for o in moving[len(reads):]:
            w(f"{p2}c_{o.name} = b_{o.name}")
        if needs_r:
            self.lines += unravel_lines(p2, "ro", "nRO", "nO + ", "c", moving)
        if self.mode == "row":
            self.lines += cpu_scans.row_views(self, moving, written, "r_lo", p2)   # slice views per row
            p3 = p2 + "    "
            self._hot_loops(st, accs, "row", p2, kept, pair, (reads, written))
            if st.is_scan:   # every running value is a result: stored at each step, no epilogue
                self.lines += cpu_scans.store_lines(self, accs, p3, pad, "ri", "acc{j}")
            elif self.split:
                for j in range(len(accs)):
                    w(f"{pad}part{j}[t, 0] = acc{j}")
            elif pair is not None:
                self._finalize_moments(st, pair, accs, pad)
            else:
                self._finalize_row(st, accs, pad)
        else:
            r_start = "r_lo"
            if accs and not st.writes and not st.keeps and not st.is_scan and all(o.i == 1 and o.kind == "array" for o in moving) and not self.g.nodes:
                self.lines += cpu_fold.fold4(self, st, accs, moving, p2)
                r_start = "ri"
            elif cpu_scans.rows_at_once(self, st, moving, kept):   # (the rows left: the loop below)
                self.lines += cpu_scans.col_rows(self, st, accs, moving, p2)
                r_start = "ri"
            w(f"{p2}for ri in range({r_start}, r_hi):")
            p3 = p2 + "    "
            across = {o.name for o in cpu_blocks.transposed_reads(self)}
            for o in moving:
                at = f"c_{o.name} + {index_text(o.ri, 'ri', o.name + '_sri')}"
                if o.name in across:   # its row of the block's transposed copy (lower/cpu_blocks)
                    w(f"{p3}v_{o.name} = _fg_row(pk_{o.name}, (o - o0) * TILE)")
                    continue
                w(f"{p3}{view_text(o, o.i, at, o.name + '_si', cpu_scans.view_prefix(o, written))}" if o.kind == "array"
                  else f"{p3}q_{o.name} = {at}")
                if o.key in self.g.operands:
                    w(f"{p3}ga_{o.name} = {at}")
            p4 = p3 + "    "
            self._hot_loops(st, accs, "col", p3, kept)
            if st.is_scan:   # (the totals pass: acc is the partial row already)
                self.lines += cpu_scans.store_lines(self, accs, p4, None, "i", "acc{j}[i]")
            elif not self.split:
                self._finalize_col(st, accs, pad)

    def _hot_loops(self, st, accs, mode: str, pad: str, kept, pair: CenteredPair | None = None, moved=()) -> None:
        """The stage's innermost loop at ``pad`` (``ri``: row mode, ``i``: col mode), one per interval
        of an index-set split (``lower/cpu_splits``); ``kept``: values stored once and read back
        (``plan.shared``); ``pair`` (row mode): sums of the pivot-shifted values and their squares;
        ``moved`` (row mode): the (reads, written) operands a blocked scan re-views (``cpu_scans``)."""
        w = self.lines.append
        var, count, acc_at = ("ri", "r_hi - r_lo", "acc{j}") if mode == "row" else ("i", "n", "acc{j}[i]")
        body = pad + "    "
        bounds, loops = cpu_splits.segments(self, st, mode, count, pad)
        self.lines += bounds
        alias, start = cpu_inplace.aliases(self, st, mode, accs), len(self.lines)
        for rng, choice in loops:
            self.fills.begin(lambda n, ctx: self._load(n, ctx, mode), f"r{st.index}_", mode, var, count)
            ew = ExprWriter(self.spec, PYTHON, lambda n, ctx: self._load(n, ctx, mode),
                            prefix=f"s{st.index}{_tag(choice)}_", variant={**(self.run.variant or {}), **choice},
                            gather=self.g.cpu_index, random=self.rng, stored=kept, stage=st)
            self._ew = ew
            if pair is not None:
                e = ew.value(pair.e, accs[0][1])
                vals = cpu_moments.loop_values(st)
            else:
                vals = [ew.value(r.srcs[0], acc) for r, acc in accs]
            outs = [(self.ops[("out", k)], n, ew.value(n)) for k, n in st.writes + st.keeps]
            self.lines += self.fills.end(pad) + (cpu_moments.late_pivot(st, pair, ew.lines, e, pad) if pair else [])
            blocked = moved and st.is_scan and len(loops) == 1 and cpu_scans.blocked(self, st)
            if blocked:   # (the line's last stretch: the loop below, from pos)
                scan = cpu_scans.vector_lines if cpu_scans.vectored(accs) else cpu_scans.blocked_lines
                self.lines += scan(self, accs, vals, ew.lines, *moved, pad)
            lines, folded = ew.lines, set()
            # (a gather's index constant along the loop, an embedding's id per row, is checked
            # once before it: its bad-index count and value lines are invariant then, so the
            # gathered row is a plain strided read and the loop vectorizes)
            if not (blocked or st.is_scan or self.rng.used):
                hoisted, lines = hoist_invariant(lines, var)
                # (a loop over no element reads no index: nothing to flag, whatever is read before it)
                hoisted = [(n, f"({e}) & (len(range({rng})) > 0)" if n in self.g.bad_flags else e) for n, e in hoisted]
                self.lines += [f"{pad}{name} = {expr}" for name, expr in hoisted]
                if mode == "row" and pair is None:   # reductions of a constant: not per element
                    more, folded = cpu_splits.constant_folds(accs, vals, lines, var, rng, pad, True)
                    self.lines += more
            if pair is None and not outs and len(folded) == len(accs):
                continue   # (nothing left for the loop to do)
            w(f"{pad}for {var} in range({rng}{' - pos' if blocked else ''}):")
            for name, expr in lines:
                w(f"{body}{name} = {expr}")
            if pair is not None:
                w(f"{body}dv{st.index} = {e} - piv{st.index}")
            for j, ((r, acc), v) in enumerate(zip(accs, vals)):
                if j not in folded:
                    w(f"{body}{combine('sum' if pair else r.arg.kind, acc_at.format(j=j), v, mode == 'row' and acc.is_float)}")
            for o, n, v in outs:
                w(f"{body}v_{o.name}[{var}] = {v}")
        self.lines[start:] = cpu_inplace.versioned(self.lines[start:], alias, pad)

    def _combine_partials(self, st):
        """After the split tasks: fold each output's partial accumulators, then finish as
        col mode does (mean, casts, finals)."""
        w = self.lines.append
        w("    # combine the partial accumulators of the split reduced dim")
        w("    n = max(I, 1)")
        w("    for o in range(meta[6]):")
        for o in self.ops.values():
            w(f"        b_{o.name} = " + (f"meta[SB + {len(self.ops)} * W + {o.k}]" if self.general else "0"))
        self.lines += unravel_lines("        ", "o", "nO", "", "b", self.ops.values())
        accs = []
        for j, r in enumerate(st.reductions):
            accs.append((r, reg_dtype(self.spec.of(r).acc)))
            w(f"        acc{j} = part{j}[o * nsplit]")
            w("        for s in range(1, nsplit):")
            w(f"            q{j} = part{j}[o * nsplit + s]")
            w("            for i in range(n):")
            w(f"                {combine(r.arg.kind, f'acc{j}[i]', f'q{j}[i]')}")
        self._finalize_col(st, accs, "        ")

    def _finalize_moments(self, st, pair: CenteredPair, accs, pad):
        """The mean and the variance from the shifted sums, then both stages' stores and finals."""
        lines, values = cpu_moments.results(st, pair, accs[0][1], pad)
        self.lines += lines
        self._finalize_row(st, accs, pad, values, st.finals + self.plan.stages[pair.var_stage].finals, pair.var_stage)

    def _finalize_row(self, st, accs, pad, values=None, finals=None, tag=None):
        w = self.lines.append
        results = {}
        for j, (r, acc) in enumerate(accs):
            val = values[j] if values is not None else (f"acc{j} / {PYTHON.cast('count', acc)}" if r.arg.kind == "mean" else f"acc{j}")
            w(f"{pad}r{j} = {val}")
            results[id(r)] = f"r{j}"
            for dst in self.result_targets(r):
                at = f"k_{dst.name}" if dst.kept else f"{dst.name}_[b_{dst.name}]"
                w(f"{pad}{at} = {self.store_result(r, dst, f'r{j}')}")
        ew = ExprWriter(self.spec, PYTHON, lambda n, ctx=(): results[id(n)] if n.op is Op.REDUCE else self._attr(n),
                        prefix=f"f{st.index if tag is None else tag}_")
        outs = [(self.ops[("out", k)], n, ew.value(n)) for k, n in (st.finals if finals is None else finals)]
        for name, expr in ew.lines:
            w(f"{pad}{name} = {expr}")
        for o, n, v in outs:
            w(f"{pad}{o.name}_[b_{o.name}] = {v}")

    def _finalize_col(self, st, accs, pad):
        if not accs:
            return
        w = self.lines.append
        targets = {o.key: o for r, _ in accs for o in self.result_targets(r)}
        targets.update({("out", k): self.ops[("out", k)] for k, _ in st.finals})
        for o in targets.values():
            w(f"{pad}{view_text(o, o.i, f'b_{o.name}', o.name + '_si', prefix='f')}")
        w(f"{pad}for i in range(n):")
        p = pad + "    "
        results = {}
        for j, (r, acc) in enumerate(accs):
            val = f"acc{j}[i]"
            if r.arg.kind == "mean":
                val = PYTHON.cast(f"acc{j}[i] / {PYTHON.cast('count', acc)}", acc)
            w(f"{p}r{j} = {val}")
            results[id(r)] = f"r{j}"
            for dst in self.result_targets(r):
                w(f"{p}f_{dst.name}[i] = {self.store_result(r, dst, f'r{j}')}")
        ew = ExprWriter(self.spec, PYTHON, lambda n, ctx=(): results[id(n)] if n.op is Op.REDUCE else self._attr(n),
                        prefix=f"f{st.index}_")
        outs = [(self.ops[("out", k)], n, ew.value(n)) for k, n in st.finals]
        for name, expr in ew.lines:
            w(f"{p}{name} = {expr}")
        for o, n, v in outs:
            w(f"{p}f_{o.name}[i] = {v}")

    # --- helpers -----------------------------------------------------------------------------
    def read_keys(self, st) -> list[tuple]:
        """The operands a stage reads in this box (a piece's only where it is active)."""
        keys = []
        for a in st.reads:
            key = self.run.operand_of[(a.slot, a.steps)]
            if key not in keys and self.active[self.ops[key].k]:
                keys.append(key)
        return keys

    def _counter_operand(self, n: Node, ctx: tuple, mode: str):
        """(name, key) of an iota operand with unit stride along the ``mode`` loop, else None."""
        o = self.ops[self.operand(n, ctx)]
        return (o.name, o.key) if o.kind == "iota" and (o.i if mode == "col" else o.ri) == 1 else None

    def operand(self, n: Node, ctx: tuple) -> tuple:
        return self.run.operand_of[(self.slot_of[id(n)], path_steps(ctx, n))]

    def _elem_targets(self, st) -> list[OperandSlot]:
        """The operands a stage writes at every index of its domain: its outputs, and a scan
        stage's results (which have the domain's shape)."""
        out = [self.ops[("out", k)] for k, _ in st.writes + st.keeps]
        if st.is_scan:
            out += [o for r in st.reductions for o in self.result_targets(r) if o not in out]
        return out

    def result_targets(self, r: Node) -> list[OperandSlot]:
        return [self.ops[k] for k in self.store_slots.get(id(r), ())]

    def _load(self, n: Node, ctx: tuple, mode: str) -> str:
        if n.op is Op.ATTR:
            return self._attr(n)
        if is_param(n):
            return self.param_name(n)
        o = self.ops[self.operand(n, ctx)]
        cls = o.ri if mode == "row" else o.i
        var = "ri" if mode == "row" else "i"
        terms = self.g.address_terms(n, ctx, self._ew)
        if terms:
            if o.kind != "array":
                self.g.refuse(self.plan.opdef.name)
            step = {0: "", 1: f" + {var}"}.get(cls, f" + {var} * {o.name}_s{var}")
            # (unsigned: the address is never negative, and Numba's wraparound test on a signed
            # index, a select per element, kept the gathered row loop scalar)
            return f"{o.name}_[np.uint64(ga_{o.name}{step}{terms})]"
        if o.kind == "array":
            return f"s_{o.name}" if cls == 0 and o.key[0] != "out" else f"v_{o.name}[{var}]"   # (out: a slice)
        lin = f"q_{o.name}" if cls == 0 else (f"(q_{o.name} + {var})" if cls == 1 else f"(q_{o.name} + {var} * {o.name}_s{var})")
        if o.kind == "iota":
            return lin
        nops = len(self.ops)
        address = f"_inner(meta, meta[SB + {nops} * W + {nops} + {o.k}], {lin})"
        # (an iota read through a reshape's div/mod map: its value is the unravelled address)
        return address if o.kind == "iota_modular" else f"{o.name}_[{address}]"

    def _attr(self, n: Node) -> str:
        return f"a_{n.arg}"

    def store_result(self, r: Node, dst: OperandSlot, v: str) -> str:
        if dst.key[0] == "buf":
            return v
        out = reg_dtype(self.spec.of(r).dtype)
        acc = reg_dtype(self.spec.of(r).acc)
        return v if out is acc else PYTHON.cast(v, out)


def _tag(choice: dict) -> str:
    """A split loop's name prefix: its branch (t, f), so two loops' temporaries never share a name."""
    return "".join("t" if v else "f" for v in choice.values())


def _nodes_of(st) -> list[Node]:
    return nodes_of([r for r in st.reductions] + [n for _, n in st.writes] + [n for _, n in st.finals])


# ---------------------------------------------------------------------------------------------
# Compilation (``lower/cpu_module``: the file, its header and the njit wrapping)
# ---------------------------------------------------------------------------------------------
def compile_group(plan: Plan, spec: Spec, run: GroupRun, parallel: bool, split: bool = False,
                  block: int = 1, single: frozenset = frozenset(), stream: bool = False) -> GroupKernel:
    """Generate, write, import and JIT the function for one fused group (``block``: rows per task
    where it runs in blocks, ``rt.policy.choose_block``; ``single``: the workspaces no other group
    names, which it may keep in locals, ``lower/cpu_kept``; ``GroupKernel.kept`` says which it did;
    ``stream``: outputs stored around the cache, ``lower/cpu_stream``)."""
    gs = _source(plan, spec, run, parallel, split, block, single=single, stream=stream)
    body = gs.emit("kernel")
    if cpu_kept.leaks(body, [gs.ops[key].name for key in gs.kept]):
        gs = _source(plan, spec, run, parallel, split, block, stream=stream)
        body = gs.emit("kernel")
    src, mod = build_module(plan, spec, body, [gs], parallel)
    return GroupKernel(src, mod.__file__, mod.kernel, tuple(gs.attrs), tuple(gs.params), gs.g, gs.kept)


def compile_rows(plan: Plan, spec: Spec, rows: BoxRows, parallel: bool) -> GroupKernel:
    """The function running an elementwise group's boxes a row at a time (``plan.boxrows``): one
    function per box over the dims after the rows, called for each row by a parallel driver."""
    gss = [_source(plan, spec, run, False, rows=True) for run in rows.boxes]
    body = "".join(gs.emit(f"box{b}") for b, gs in enumerate(gss))
    body += cpu_rows.driver(plan, rows, gss[0], parallel)
    src, mod = build_module(plan, spec, body, gss, parallel, boxes=len(gss))
    gs = gss[0]
    return GroupKernel(src, mod.__file__, mod.kernel, tuple(gs.attrs), tuple(gs.params), gs.g)


def _source(plan, spec, run, parallel, split=False, block=1, rows=False, single=frozenset(), stream=False) -> GroupSource:
    gs = GroupSource(plan, spec, run, stride_pattern(run), "row" if run.layout.inner == 1 else "col", parallel, split, block, rows, single)
    gs.stream = stream
    return gs
