"""Col mode's four-rows-per-pass reduction loop of the Numba CPU group functions (``lower_cpu``)."""
from __future__ import annotations

from ..ir import Op
from ..plan.exprs import PYTHON, ExprWriter
from ..plan.paths import is_param
from .cpu_layout import index_text


def fold4(gs, st, accs, moving, pad) -> list[str]:
    """Col mode, four rows per pass over the accumulators: a quarter of the accumulator
    loads and stores, which matter once a split task's accumulator row outgrows L1."""
    lines: list[str] = []
    w = lines.append
    w(f"{pad}ri = r_lo")
    w(f"{pad}while ri + 4 <= r_hi:")
    p3 = pad + "    "
    rows = []
    for k in range(4):
        for o in moving:
            row = f"ri + {k}" if k else "ri"
            at = f"c_{o.name} + {index_text(o.ri, f'({row})', o.name + '_sri')}"
            w(f"{p3}{o.name}_r{k} = _fg_row({o.name}_, {at})")
        rows.append({o.key: f"{o.name}_r{k}[i]" for o in moving})
    w(f"{p3}for i in range(n):")
    p4 = p3 + "    "
    per_row = []
    for k, loads in enumerate(rows):
        ew = ExprWriter(gs.spec, PYTHON, row_leaf(gs, loads), prefix=f"s{st.index}_k{k}_", variant=gs.run.variant)
        vals = [ew.value(r.srcs[0], acc) for r, acc in accs]
        for name, expr in ew.lines:
            w(f"{p4}{name} = {expr}")
        per_row.append(vals)
    for j, (r, acc) in enumerate(accs):
        v = [per_row[k][j] for k in range(4)]
        kind = r.arg.kind
        if kind in ("sum", "mean"):
            w(f"{p4}acc{j}[i] += ({v[0]} + {v[1]}) + ({v[2]} + {v[3]})")
        elif kind == "prod":
            w(f"{p4}acc{j}[i] *= ({v[0]} * {v[1]}) * ({v[2]} * {v[3]})")
        else:
            f = "_fmax" if kind in ("max", "copy") else "_fmin"
            w(f"{p4}acc{j}[i] = {f}(acc{j}[i], {f}({f}({v[0]}, {v[1]}), {f}({v[2]}, {v[3]})))")
    w(f"{p3}ri += 4")
    return lines


def row_leaf(gs, loads: dict):
    """The leaf writer of a loop body over several rows at once: an operand's element is the text
    ``loads[key]`` (its load in one of the rows), an attribute or a static scalar as always."""
    def leaf(n, ctx):
        if n.op is Op.ATTR:
            return f"a_{n.arg}"
        if is_param(n):
            return gs.param_name(n)
        return loads[gs.operand(n, ctx)]
    return leaf
