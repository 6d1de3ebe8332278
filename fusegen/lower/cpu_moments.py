"""The Numba CPU lowering's one-pass norm statistics (``fusegen.lower_cpu``): a mean and the
variance centered on it (``fusegen.plan.moments``) summed in the mean's row loop, shifted by a
pivot read from the row, when both stages run in the same group in row mode (not split)."""
from __future__ import annotations

from ..ir import Op, nodes_of
from ..plan import CenteredPair, centered_pairs
from ..plan.exprs import PYTHON, ExprWriter
from ..plan.paths import is_param


def group_pairs(gs) -> dict[int, CenteredPair]:
    """The mean stages of ``gs``'s group whose centered variance stage runs later in it, with no
    stage between them storing what the variance stage reads (it then runs early, in the mean's
    pass: a dropout's stage writing ``h`` between the two does not stop it), where every operand
    of the pair is a strided array (its pivot is one load each) or a random stream."""
    order = list(gs.run.stages)
    out = {}
    for p in centered_pairs(gs.plan, random=True).values():
        k = order.index(p.mean_stage) if p.mean_stage in order else -1
        if k < 0 or p.var_stage not in order[k + 1:]:
            continue
        var = gs.plan.stages[p.var_stage]
        between = order[k + 1:order.index(p.var_stage)]
        if {a.slot for a in var.reads} & {a.slot for j in between for a in gs.plan.stages[j].stores}:
            continue
        stages = (gs.plan.stages[p.mean_stage], var)
        if all(gs.ops[key].kind in ("array", "iota") if _random(p) else gs.ops[key].kind == "array"
               for st in stages for key in gs.read_keys(st)):
            out[p.mean_stage] = p
    return out


def _random(pair: CenteredPair) -> bool:
    """``e`` holds random numbers (or iotas): its pivot is not one load per operand."""
    return any(n.op in (Op.RANDOM, Op.IOTA) for n in nodes_of([pair.e]))


def late_pivot(st, pair: CenteredPair, lines, e: str, pad: str) -> list[str]:
    """Where ``e`` holds random numbers, its pivot is taken in the row pass itself: the loop body
    (``lines``, computing ``e``) once at the first element of the first row, from the numbers the
    pass has just drawn (``pivot_lines`` then only starts it at 0)."""
    if not _random(pair):
        return []
    body = pad + "        "
    return ([f"{pad}if ro == 0:   # the pivot: e at the row's first element, from this pass's random numbers",
             f"{pad}    for ri in range(min(1, r_hi - r_lo)):"] + [f"{body}{n} = {x}" for n, x in lines]
            + [f"{body}if math.isfinite({e}):", f"{body}    piv{st.index} = {e}"])


def pivot_lines(gs, st, pair: CenteredPair, acc, pad: str) -> list[str]:
    """``piv<i>``: the pair's ``e`` at the row's first element (0 for an empty row or where it is
    not finite, so an inf or NaN reaches the results as in the two-pass form)."""
    if _random(pair):   # (late_pivot)
        return [f"{pad}piv{st.index} = {PYTHON.literal(0.0, acc)}"]
    def leaf(n, ctx):
        if n.op is Op.ATTR:
            return f"a_{n.arg}"
        if is_param(n):
            return gs.param_name(n)
        o = gs.ops[gs.operand(n, ctx)]
        return f"k_{o.name}" if o.kept else f"{o.name}_[b_{o.name}]"
    ew = ExprWriter(gs.spec, PYTHON, leaf, prefix=f"k{st.index}_")
    k = ew.value(pair.e, acc)
    return [f"{pad}piv{st.index} = {PYTHON.literal(0.0, acc)}", f"{pad}if count > 0:"] + \
        [f"{pad}    {name} = {expr}" for name, expr in ew.lines] + \
        [f"{pad}    if math.isfinite({k}):", f"{pad}        piv{st.index} = {k}"]


def loop_values(st) -> list[str]:
    """What the row loop folds into the pair's two sums (after ``dv<i> = e - piv<i>``)."""
    return [f"dv{st.index}", f"dv{st.index} * dv{st.index}"]


def results(st, pair: CenteredPair, acc, pad: str) -> tuple[list[str], list[str]]:
    """The lines after the loop, and the mean's and the variance's values from the shifted sums
    (the variance clamped at 0 against rounding; NaN stays NaN)."""
    n, zero, a = PYTHON.cast("count", acc), PYTHON.literal(0.0, acc), f"mq{st.index}"
    second = f"acc1 / {n} - {a} * {a}" if pair.var.arg.kind == "mean" else f"acc1 - acc0 * {a}"
    return [f"{pad}{a} = acc0 / {n}"], [f"piv{st.index} + {a}", f"_fmax({second}, {zero})"]
