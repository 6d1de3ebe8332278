"""Transposed reads of the Numba CPU backend's blocked groups (``rt.policy.choose_block``): an
operand read across the rows (y in ``x + y.T``: strided along the inner dim) is copied once per
block along its rows into a transposed buffer, ``pk_<name>``, whose row ``o`` the block's loop
reads at unit stride (``_fg_row(pk_<name>, (o - o0) * TILE)``). Gathered row after row with its
large stride instead, y's lines (4 KiB-aliased where the stride is a power of two) left L1 before
the next row reused them, and the loop ran LLVM's vector gathers."""
from __future__ import annotations

from .cpu_layout import unravel_lines


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
    unit for y: a row view) into ``pt_<name>[row, i]``; 2-d stores and row views, so LLVM sees
    no negative index to wrap."""
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
        lines += [f"{pad}pk_{o.name} = np.empty(BLOCK * TILE, dtype={o.name}_.dtype)",
                  f"{pad}pt_{o.name} = pk_{o.name}.reshape((BLOCK, TILE))",
                  f"{pad}so_{o.name} = meta[SB + {o.k} * W + nO - 1]",
                  f"{pad}for ii in range(n):",
                  f"{pad}    if so_{o.name} == 1:",
                  f"{pad}        src = _fg_row({o.name}_, p_{o.name} + ii * {o.name}_si)",
                  f"{pad}        for rr in range(nr):",
                  f"{pad}            pt_{o.name}[rr, ii] = src[rr]",
                  f"{pad}    else:",
                  f"{pad}        srs = {o.name}_[p_{o.name} + ii * {o.name}_si::so_{o.name}]",
                  f"{pad}        for rr in range(nr):",
                  f"{pad}            pt_{o.name}[rr, ii] = srs[rr]"]
    return lines
