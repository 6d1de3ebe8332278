"""The Numba CPU lowering's one-pass norm statistics (``fusegen.lower_cpu``): a mean and the
variance centered on it (``fusegen.plan.moments``) summed in the mean's row loop, shifted by a
pivot read from the row, when both stages run in the same group in row mode (not split)."""
from __future__ import annotations

from ..ir import Op
from ..plan import CenteredPair, centered_pairs
from ..plan.exprs import PYTHON, ExprWriter
from ..plan.paths import is_param


def group_pairs(gs) -> dict[int, CenteredPair]:
    """The mean stages of ``gs``'s group whose centered variance stage runs right after them in
    it, where every operand of the pair is a strided array (its pivot is one load each)."""
    order = list(gs.run.stages)
    out = {}
    for p in centered_pairs(gs.plan).values():
        k = order.index(p.mean_stage) if p.mean_stage in order else -1
        if k < 0 or k + 1 >= len(order) or order[k + 1] != p.var_stage:
            continue
        stages = (gs.plan.stages[p.mean_stage], gs.plan.stages[p.var_stage])
        if all(gs.ops[key].kind == "array" for st in stages for key in gs.read_keys(st)):
            out[p.mean_stage] = p
    return out


def pivot_lines(gs, st, pair: CenteredPair, acc, pad: str) -> list[str]:
    """``piv<i>``: the pair's ``e`` at the row's first element (0 for an empty row or where it is
    not finite, so an inf or NaN reaches the results as in the two-pass form)."""
    def leaf(n, ctx):
        if n.op is Op.ATTR:
            return f"a_{n.arg}"
        if is_param(n):
            return gs.param_name(n)
        o = gs.ops[gs.operand(n, ctx)]
        return f"{o.name}_[b_{o.name}]"
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
