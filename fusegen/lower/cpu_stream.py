"""Streaming stores for the Numba CPU backend's large permuted copies (``rt.policy.stream_order``):
the group's tasks run in blocks, each block with a buffer per output as wide as a tile; a task
computes its output row into the buffer, in cache, and ``_fg_stream`` writes it out with
non-temporal stores; each block ends with ``_fg_fence``. The emitted C++ does the same
(``fg::stream_out``).

Why blocks: a head split's task is one row of ``d`` elements (128 floats), so a buffer allocated
per task would cost more than the row; a block of tasks shares one.

The group this applies to (``rt.policy.stream_order`` decides) is one elementwise stage without
gathers or random numbers, whose col-mode text (``GroupSource``) is a task loop with one view per
operand and the hot loops after them: ``stream_task_loop`` rewrites that text, so the generator
keeps a single path.
"""
from __future__ import annotations

import re

#: blocks of tasks per group call: enough to balance the threads' shares
BLOCKS = 256

_VIEW = re.compile(r"^(\s*)v_(\w+) = _fg_row\((\w+)_, (.+)\)$")


def stream_task_loop(lines: list[str], outputs: list[str]) -> list[str]:
    """The task loop's text (its ``for t in ...`` header first, the body at 8 spaces) run in
    blocks, the views of ``outputs`` (their flat array names) redirected to buffers that are
    streamed to the array once the row is computed."""
    head, body = lines[0], lines[1:]
    assert head.strip().startswith("for t in "), head
    loop = "prange" if "prange(" in head else "range"
    out = [f"    TPB = max(1, (ntasks + {BLOCKS - 1}) // {BLOCKS})",
           f"    for tb in {loop}((ntasks + TPB - 1) // TPB):"]
    out += [f"        sb_{name} = np.empty(TILE, dtype={name}_.dtype)" for name in outputs]
    out.append("        for t in range(tb * TPB, min(ntasks, tb * TPB + TPB)):")
    pending = []   # (indent, line): a stream call due when its view's loop body ends
    for line in body:
        indent = len(line) - len(line.lstrip())
        while pending and line.strip() and indent < pending[-1][0]:
            out.append("    " + pending.pop()[1])
        m = _VIEW.match(line)
        if m and m.group(3) in outputs:
            pad, view, name, at = m.groups()
            out.append(f"    {pad}v_{view} = sb_{name}")
            pending.append((len(pad), f"{pad}_fg_stream({name}_, {at}, sb_{name}, n)"))
            continue
        out.append("    " + line)
    out += ["    " + text for _, text in reversed(pending)]
    streamed = {line.split("(", 1)[1].split("_,", 1)[0] for line in out if "_fg_stream(" in line}
    # (an output whose view took another form would keep an unused buffer and cached stores:
    # the generator's text changed under this rewrite, which must follow it)
    assert streamed == set(outputs), (sorted(streamed), outputs)
    out.append("        _fg_fence()   # the block's streamed stores, ordered before the task ends")
    return out
