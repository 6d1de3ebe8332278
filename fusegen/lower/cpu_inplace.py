"""In-place writes in the Numba CPU loops (``kernel(..., inplace=True)``: ``@fg.op(inplace=...)``).

An elementwise loop ``v_out0[i] = f(v_x0[i], ...)`` whose output is the very memory of its input
is safe: each element is read before it is written, at the same index. LLVM cannot know that: it
vectorizes the loop behind a run-time check that the stored range overlaps no loaded range, and
runs the scalar copy when it does, which the same buffer always does (4x slower on an Adam step).

So a stage that writes a declared in-place output and reads its input gets its loop twice: when
the two views start at the same address, a copy that reads the input *through the output's view*
(the dependence is then visibly at distance 0, which the vectorizer accepts without a check for
that pair); otherwise the loop as it was. The two views are the same memory in the first branch,
so both loops compute the same thing in the same order.
"""
from __future__ import annotations

import re


def aliases(gs, st, mode: str, accs) -> dict[str, str]:
    """Input operand name -> output operand name, for the op's declared in-place pairs whose output
    this purely elementwise stage writes and whose input it reads, both unit-stride on the loop."""
    if mode != "col" or accs or st.keeps:
        return {}
    pairs = getattr(gs.plan.opdef, "inplace", None) or {}
    written = {k for k, _ in st.writes}
    reads = set(gs.read_keys(st))
    out = {}
    for k, i in sorted(pairs.items()):
        src, dst = gs.ops.get(("in", i)), gs.ops.get(("out", k))
        if (k in written and ("in", i) in reads and src is not None and dst is not None
                and src.kind == dst.kind == "array" and src.i == dst.i == 1):
            out[src.name] = dst.name
    return out


def versioned(lines: list[str], alias: dict[str, str], pad: str) -> list[str]:
    """``lines`` (a stage's loop at ``pad``) twice: reading each aliased input through its
    output's view where the two start at the same address, and unchanged otherwise. (The loads
    are renamed in the generated text: an array operand's element is always ``v_<name>[i]``.)
    With no aliased operand, ``lines`` as they are."""
    if not alias:
        return lines
    same = " and ".join(f"v_{dst}.ctypes.data == v_{src}.ctypes.data" for src, dst in alias.items())
    loads = re.compile(r"\bv_(" + "|".join(map(re.escape, alias)) + r")\[i\]")
    inner = ["    " + line for line in lines]
    return ([f"{pad}if {same}:   # written in place: read through the output's view (fusegen.lower.cpu_inplace)"]
            + [loads.sub(lambda m: f"v_{alias[m.group(1)]}[i]", line) for line in inner]
            + [f"{pad}else:"] + inner)
