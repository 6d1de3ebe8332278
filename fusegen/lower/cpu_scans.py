"""The Numba CPU lowering's scan pieces (``fusegen.lower_cpu``): a scan stage is a reduction
stage whose accumulators are stored at every step of the carried loop; a split one (the blocked
scan) runs its tasks twice, a ``"totals"`` pass that keeps each chunk's fold in the partial rows,
then, after ``carry_lines`` turned those into each chunk's carry, a ``"write"`` pass.

**A line along the contiguous axis is scanned in blocks** (``blocked_lines``): one running value
is a chain of dependent adds (4 cycles each, whatever the memory does), so a line's piece of up
to ``SCAN_PIECE`` elements is cut into ``SCAN_BLOCKS`` blocks: their values evaluated into a
scratch row (vectorized), the blocks scanned side by side (``SCAN_BLOCKS`` independent chains,
in place, ``SCAN_STEPS`` steps of a chain at a time), then each block combined with the carry into it on the way out (vectorized). Exact
for integers, max and min; for floats a sum's rounding changes only in that the carry is added
to each block's partial sums instead of element by element (``|error| <= (k + 1) u sum |x|``
for the k-th element, as the sequential scan's bound).

**A running sum is scanned in vector registers** (``vector_lines``) where its accumulator is a
4- or 8-byte number: the piece's values into the scratch row (vectorized), the row scanned in
place by ``_fg_scan_sum`` (``pyhelpers_numba``: each 64-byte vector's own prefix sums by shifts
and adds, then the carry), then stored (vectorized). The blocks' scalar chains ran a load, an
add and a store per element. In cache, one thread, 16 x 4096 float32, ns per element: Numba
0.40 -> 0.32, the emitted C++ (`fg::scan_sum`, the same method) 0.39 -> 0.32.
"""
from __future__ import annotations

from ..ir import Op, nodes_of
from ..plan.exprs import PYTHON, ExprWriter, reduce_identity, reg_dtype
from .cpu_fold import row_leaf
from .cpu_layout import index_text, view_text
from .pysource import combine

#: Blocks scanned side by side: enough independent chains to keep both adders busy.
SCAN_BLOCKS = 8
#: The most scans of one stage run blocked: one scan's chains (``SCAN_BLOCKS`` accumulators and
#: scratch pointers) fill the registers, and the source stays quick to compile (a stage of four
#: blocked scans took twice as long, a parallel one of two 2.5 times); more run one chain each.
SCAN_FOLDS = 1
#: Steps of one chain written one after another: their stores fill a cache line together (a
#: store per step to eight lines in turn ran at one a cycle, half the speed).
SCAN_STEPS = 4
#: Elements per piece: its scratch row (8 KiB of float32) stays in L1 with the piece's input.
SCAN_PIECE = 2048
#: Col mode (the scanned axis not the contiguous one): rows of the tile a running value advances
#: through in a register before it goes back to the carry row, so that many rows stream at once
#: (``col_rows``; the emitted C++'s ``fg::kScanRows``).
SCAN_ROWS = 4
#: A split scan's chunk along its lines (``fusegen.rt.policy``, ``fg::scan_split``): long enough
#: that its write pass, which reads the chunk again after the totals pass, streams.
SCAN_SPLIT_CHUNK = 1 << 13
#: Shorter lines (and a line's last few elements) are scanned as one chain.
SCAN_MIN = 256
#: The accumulator dtypes a running sum is scanned in vector registers in (``vector_lines``).
SCAN_SUM_DTYPES = ("float32", "float64", "int32", "int64", "uint32", "uint64")
#: A block's place in the scratch row: 16 times an odd number of elements apart, so no two
#: blocks lie a multiple of 4 KiB apart (a load would wait on an unrelated store: 4K aliasing).
SCAN_STRIDE = (SCAN_PIECE // SCAN_BLOCKS // 32) * 32 + 16


def carry_lines(st, spec) -> list[str]:
    """Between a split scan's passes: each chunk's total replaced by the fold of the totals of the
    chunks before it (an exclusive scan along the chunks: the carry its second pass starts from)."""
    out = ["    # the carry into each chunk: an exclusive scan of the chunk totals",
           "    for o in range(meta[6] * ntiles):",
           "        for i in range(max(I, 1)):"]
    for j, r in enumerate(st.reductions):
        acc = reg_dtype(spec.of(r).acc)
        out += [f"            carry = {PYTHON.literal(reduce_identity(r.arg.kind, acc), acc)}",
                "            for s in range(nsplit):",
                f"                total = part{j}[o * nsplit + s, i]",
                f"                part{j}[o * nsplit + s, i] = carry",
                f"                {combine(r.arg.kind, 'carry', 'total')}"]
    return out


def store_lines(gs, accs, pad: str, end_pad: str | None, var: str, acc: str) -> list[str]:
    """The statements storing each running value ``acc`` (``{j}``: the scan's number) at index
    ``var`` of its targets; in a totals pass, none: row mode (``end_pad`` given) keeps the fold in
    the partial row after the loop, col mode's accumulators are that row."""
    if gs.scan_pass == "totals":
        return [f"{end_pad}part{j}[t, 0] = acc{j}" for j in range(len(accs))] if end_pad is not None else []
    return [f"{pad}v_{dst.name}[{var}] = {gs.store_result(r, dst, acc.format(j=j))}"
            for j, (r, _) in enumerate(accs) for dst in gs.result_targets(r)]


def blocked(gs, st) -> bool:
    """Whether a row-mode scan stage's lines run blocked: not its totals pass (a plain fold), not
    with gathers or random numbers in the loop body (whose per-element state assumes one pass),
    and not for more than ``SCAN_FOLDS`` scans at once."""
    return (gs.mode == "row" and gs.scan_pass != "totals" and not gs.g.nodes and len(st.reductions) <= SCAN_FOLDS
            and not any(n.op is Op.RANDOM for n in nodes_of([r.srcs[0] for r in st.reductions])))


def row_views(gs, ops, written: list, start: str, pad: str) -> list[str]:
    """Each operand's view of the line from index ``start`` on. (Indexing a view with the loop
    counter lets LLVM drop the negative-index check and vectorize; a computed base does not.)"""
    out = []
    for o in ops:
        at = f"c_{o.name} + {index_text(o.ri, start, o.name + '_sri')}"
        out.append(f"{pad}{view_text(o, o.ri, at, o.name + '_sri', view_prefix(o, written))}" if o.kind == "array"
                   else f"{pad}q_{o.name} = {at}")
        if o.key in gs.g.operands:
            out.append(f"{pad}ga_{o.name} = {at}")
    return out


def blocked_lines(gs, accs, vals: list[str], ew_lines, reads, written, pad: str) -> list[str]:
    """The blocked scan of the line ``[r_lo, r_hi)`` (module docstring) up to ``pos``, the start
    of its last stretch (shorter than ``SCAN_MIN``), which the caller's loop scans from there."""
    K, S = SCAN_BLOCKS, SCAN_STRIDE
    p1, p2, p3, p4 = (pad + "    " * k for k in range(1, 5))
    out = [f"{pad}# the blocked scan: pieces of {SCAN_PIECE}, each cut into {K} blocks scanned side by side",
           f"{pad}pos = 0",
           f"{pad}if r_hi - r_lo >= {SCAN_MIN}:"]
    out += [f"{p1}sv{j} = np.empty({K * S}, dtype=np.{acc.name})" for j, (_, acc) in enumerate(accs)]
    out += [f"{p1}while r_hi - r_lo - pos >= {SCAN_MIN}:",
            f"{p2}pb = min({SCAN_PIECE}, r_hi - r_lo - pos) // {K * SCAN_STEPS} * {SCAN_STEPS}",
            f"{p2}# each block's values into its scratch row (vectorized)",
            f"{p2}for kb in range({K}):",
            f"{p3}b0 = pos + kb * pb"]
    out += row_views(gs, reads, written, "(r_lo + b0)", p3)
    out += [f"{p3}w{j} = _fg_row(sv{j}, kb * {S})" for j in range(len(accs))]
    out += [f"{p3}for ri in range(pb):"] + [f"{p4}{name} = {expr}" for name, expr in ew_lines]
    out += [f"{p4}w{j}[ri] = {v}" for j, v in enumerate(vals)]
    out.append(f"{p2}# the blocks scanned in place, side by side: {K} independent chains")
    for j, (r, acc) in enumerate(accs):
        out += [f"{p2}h{j}_{k} = _fg_row(sv{j}, {k * S})" for k in range(K)]
        out.append(f"{p2}{' = '.join(f'a{j}_{k}' for k in range(K))} = "
                   f"{PYTHON.literal(reduce_identity(r.arg.kind, acc), acc)}")
    out += [f"{p2}for ri in range(0, pb, {SCAN_STEPS}):"]
    for k in range(K):   # (LLVM unrolls each constant-length loop: the source stays short to compile)
        for j, (r, _) in enumerate(accs):
            out += [f"{p3}for u in range(ri, ri + {SCAN_STEPS}):",
                    f"{p4}{combine(r.arg.kind, f'a{j}_{k}', f'h{j}_{k}[u]')}", f"{p4}h{j}_{k}[u] = a{j}_{k}"]
    out += [f"{p2}# each block combined with the carry into it (vectorized)",
            f"{p2}for kb in range({K}):",
            f"{p3}b0 = pos + kb * pb"]
    out += row_views(gs, written, written, "(r_lo + b0)", p3)
    out += [f"{p3}w{j} = _fg_row(sv{j}, kb * {S})" for j in range(len(accs))]
    out.append(f"{p3}for ri in range(pb):")
    for j, (r, _) in enumerate(accs):
        out += [f"{p4}t{j} = acc{j}", f"{p4}{combine(r.arg.kind, f't{j}', f'w{j}[ri]')}"]
    out += store_lines(gs, accs, p4, None, "ri", "t{j}")
    out += [f"{p3}{combine(r.arg.kind, f'acc{j}', f'w{j}[pb - 1]')}" for j, (r, _) in enumerate(accs)]
    out.append(f"{p2}pos += {K} * pb")
    return out + row_views(gs, list(reads) + list(written), written, "(r_lo + pos)", pad)


def vectored(accs) -> bool:
    """Whether a blocked scan's line runs as ``vector_lines``: one running sum whose accumulator
    ``_fg_scan_sum`` adds in vector lanes."""
    return len(accs) == 1 and accs[0][0].arg.kind == "sum" and accs[0][1].name in SCAN_SUM_DTYPES


def vector_lines(gs, accs, vals: list[str], ew_lines, reads, written, pad: str) -> list[str]:
    """The line ``[r_lo, r_hi)`` scanned whole, a piece of up to ``SCAN_PIECE`` at a time, as the
    module docstring says (``vectored``); leaves ``pos`` at the line's end."""
    (_, acc), = accs
    p1, p2 = pad + "    ", pad + "        "
    out = [f"{pad}# the vector scan: each piece's values into the scratch row (vectorized), the row",
           f"{pad}# scanned in vector registers from the carry, then stored (vectorized)",
           f"{pad}pos = 0",
           f"{pad}sv0 = np.empty({SCAN_PIECE}, dtype=np.{acc.name})",
           f"{pad}while pos < r_hi - r_lo:",
           f"{p1}pb = min({SCAN_PIECE}, r_hi - r_lo - pos)"]
    out += row_views(gs, reads, written, "(r_lo + pos)", p1)
    out += [f"{p1}for ri in range(pb):"] + [f"{p2}{name} = {expr}" for name, expr in ew_lines]
    out += [f"{p2}sv0[ri] = {vals[0]}", f"{p1}acc0 = _fg_scan_sum(sv0, pb, acc0)"]
    out += row_views(gs, written, written, "(r_lo + pos)", p1)
    out += [f"{p1}for ri in range(pb):"] + store_lines(gs, accs, p2, None, "ri", "sv{j}[ri]")
    out.append(f"{p1}pos += pb")
    return out + row_views(gs, list(reads) + list(written), written, "(r_lo + pos)", pad)


def view_prefix(o, written: list) -> str:
    """The view prefix of an operand the loop writes (a view even where its stride is 0: a scan's
    workspace over a size-1 dim), "" for one it reads."""
    return "v" if any(o is w for w in written) else ""


def rows_at_once(gs, st, moving, kept) -> bool:
    """Whether a col-mode scan stage advances ``SCAN_ROWS`` rows per pass (``col_rows``): every
    operand a plain array, the stored ones unit-stride across the tile and the read ones that or
    constant across it; no gathers, random numbers or values read back in the loop body (whose
    per-row state the one-row loop sets up), and no elementwise outputs beside the scans."""
    written = [o for r in st.reductions for o in gs.result_targets(r)]
    return (gs.mode == "col" and st.is_scan and not st.writes and not st.keeps and not kept
            and not gs.g.nodes and not gs.rng.used and all(o.kind == "array" for o in moving)
            and all(o.i == 1 or (o.i == 0 and all(o is not w for w in written)) for o in moving))


def col_rows(gs, st, accs, moving, pad: str) -> list[str]:
    """Col mode, ``SCAN_ROWS`` rows per pass over the tile (what the emitted C++ does): each
    element's running value goes from the carry row into a register, through that many rows
    (a load of each row's value, a store of each row's result), and back, so the carry row is
    read and written once per ``SCAN_ROWS`` rows, and as many input and output rows stream at
    once. Leaves ``ri`` at the first row left, which the caller's one-row loop takes from there.
    Each running value takes the rows' values in the same order as the one-row loop does."""
    K = SCAN_ROWS
    p1, p2 = pad + "    ", pad + "        "
    out = [f"{pad}# {K} rows per pass: each running value stays in a register across them (the carry row",
           f"{pad}# is loaded and stored once per {K} rows), and {K} rows of each operand stream at once",
           f"{pad}ri = r_lo",
           f"{pad}while ri + {K} <= r_hi:"]
    rows = []
    for k in range(K):
        row, names = f"(ri + {k})" if k else "ri", {}
        for o in moving:
            at = f"c_{o.name} + {index_text(o.ri, row, o.name + '_sri')}"
            names[o.key] = f"{o.name}_r{k}" + ("[i]" if o.i == 1 else "")
            out.append(f"{p1}{o.name}_r{k} = " + (f"_fg_row({o.name}_, {at})" if o.i == 1 else f"{o.name}_[{at}]"))
        rows.append(names)
    out.append(f"{p1}for i in range(n):")
    out += [f"{p2}r{j} = acc{j}[i]" for j in range(len(accs))]
    chain = []   # (every row's values are loaded before the first store)
    for k, names in enumerate(rows):
        ew = ExprWriter(gs.spec, PYTHON, row_leaf(gs, names), prefix=f"s{st.index}_k{k}_", variant=gs.run.variant)
        vals = [ew.value(r.srcs[0], acc) for r, acc in accs]
        out += [f"{p2}{name} = {expr}" for name, expr in ew.lines]
        for j, ((r, _), v) in enumerate(zip(accs, vals)):
            out.append(f"{p2}e{j}_{k} = {v}")
            chain.append(f"{p2}{combine(r.arg.kind, f'r{j}', f'e{j}_{k}')}")
            if gs.scan_pass != "totals":
                chain += [f"{p2}{dst.name}_r{k}[i] = {gs.store_result(r, dst, f'r{j}')}" for dst in gs.result_targets(r)]
    out += chain
    out += [f"{p2}acc{j}[i] = r{j}" for j in range(len(accs))]
    out.append(f"{p1}ri += {K}")
    return out
