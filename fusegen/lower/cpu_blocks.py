"""Transposed reads of the Numba CPU backend's blocked groups (``rt.policy.choose_block``): an
operand read across the rows (y in ``x + y.T``: strided along the inner dim) is copied once per
block along its rows into a transposed buffer, ``pk_<name>``, whose row ``o`` the block's loop
reads at unit stride (``_fg_row(pk_<name>, (o - o0) * TILE)``). Gathered row after row with its
large stride instead, y's lines (4 KiB-aliased where the stride is a power of two) left L1 before
the next row reused them, and the loop ran LLVM's vector gathers. Whole tiles of 16 float32s
(8 float64s) square are transposed in registers (``_fg_transpose``), the rest element by element."""
from __future__ import annotations

from ..plan.exprs import reg_dtype
from .cpu_layout import unravel_lines


def tile_lanes(itemsize: int) -> int:
    """Rows (and lanes) of the square tiles ``_fg_transpose`` moves for elements of ``itemsize``
    bytes: one cache line (64 bytes) per row; 0 where it has no form (1-, 2- and 16-byte elements).
    The intrinsic takes its width from here too."""
    return 64 // itemsize if itemsize in (4, 8) else 0


def transposed_reads(gs) -> list:
    """The operands group source ``gs`` copies transposed per block: inputs strided along the
    inner dim, in a col-mode blocked group of elementwise stages only (no reduction or scan: then
    the rows' loops move them along no other dim), not split nor a box run a row at a time."""
    if gs.block <= 1 or gs.mode != "col" or gs.split or gs.rows or any(
            gs.plan.stages[i].reductions or gs.plan.stages[i].is_scan for i in gs.run.stages):
        return []
    return [o for o in gs.ops.values() if o.kind == "array" and not o.kept and o.key[0] == "in" and o.i == "n"
            and o.ri == 0]


def block_transposes(gs) -> list[str]:
    """A blocked task's lines (at the task's level, before its rows) copying each of
    ``transposed_reads(gs)``: read along the block's rows (its stride along the last outer dim,
    unit for y: row views of 8 rows at a time, so their loads are in flight together) into
    ``pt_<name>[row, i]``; 2-d stores and row views, so LLVM sees no negative index to wrap."""
    ops = transposed_reads(gs)
    if not ops:
        return []
    pad = "        "
    lines = [f"{pad}# read across the rows: {', '.join(o.name for o in ops)}, copied once per block along its rows",
             f"{pad}o0 = ob * rows + r0",
             f"{pad}nr = min(rows, r0 + BLOCK) - r0"]
    for o in ops:
        start = f"meta[SB + {len(gs.ops)} * W + {o.k}] + " if gs.general else ""
        lines.append(f"{pad}p_{o.name} = {start}i0 * {o.name}_si")
    lines += unravel_lines(pad, "o0", "nO", "", "p", ops)
    for o in ops:
        n, si = o.name, f"{o.name}_si"
        lines += [f"{pad}pk_{n} = np.empty(BLOCK * TILE, dtype={n}_.dtype)",
                  f"{pad}pt_{n} = pk_{n}.reshape((BLOCK, TILE))",
                  f"{pad}so_{n} = meta[SB + {o.k} * W + nO - 1]",
                  f"{pad}ii = 0"]
        lanes = tile_lanes(reg_dtype(gs.spec.dtypes[o.key[1]]).np.itemsize)
        if lanes:   # whole tiles of lanes x lanes, transposed in registers
            lines += [f"{pad}if so_{n} == 1 and nr >= {lanes}:",
                      f"{pad}    while ii + {lanes} <= n:",
                      f"{pad}        for rr in range(0, nr - {lanes - 1}, {lanes}):",
                      f"{pad}            _fg_transpose(pk_{n}, rr * TILE + ii, TILE, {n}_, p_{n} + ii * {si} + rr, {si})",
                      f"{pad}        for rr in range(nr - nr % {lanes}, nr):   # (the rows after the last whole tile)",
                      f"{pad}            for a in range({lanes}):",
                      f"{pad}                pt_{n}[rr, ii + a] = {n}_[p_{n} + (ii + a) * {si} + rr]",
                      f"{pad}        ii += {lanes}"]
        lines += [f"{pad}if so_{n} == 1:   # 8 rows at a time: their loads in flight together",
                  f"{pad}    while ii + 8 <= n:"]
        lines += [f"{pad}        s{a} = _fg_row({n}_, p_{n} + (ii + {a}) * {si})" for a in range(8)]
        lines += [f"{pad}        for rr in range(nr):"]
        lines += [f"{pad}            pt_{n}[rr, ii + {a}] = s{a}[rr]" for a in range(8)]
        lines += [f"{pad}        ii += 8",
                  f"{pad}while ii < n:",
                  f"{pad}    srs = {n}_[p_{n} + ii * {si}::so_{n}]",
                  f"{pad}    for rr in range(nr):",
                  f"{pad}        pt_{n}[rr, ii] = srs[rr]",
                  f"{pad}    ii += 1"]
    return lines
