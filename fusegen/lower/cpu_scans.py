"""The Numba CPU lowering's scan pieces (``fusegen.lower_cpu``): a scan stage is a reduction
stage whose accumulators are stored at every step of the carried loop; a split one (the blocked
scan) runs its tasks twice, a ``"totals"`` pass that keeps each chunk's fold in the partial rows,
then, after ``carry_lines`` turned those into each chunk's carry, a ``"write"`` pass."""
from __future__ import annotations

from ..plan.exprs import PYTHON, reduce_identity, reg_dtype
from .pysource import combine


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


def view_prefix(o, written: list) -> str:
    """The view prefix of an operand the loop writes (a view even where its stride is 0: a scan's
    workspace over a size-1 dim), "" for one it reads."""
    return "v" if any(o is w for w in written) else ""
