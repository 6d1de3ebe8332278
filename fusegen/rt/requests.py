"""Calls with write requests (MXNet's ``OpReqType``): write an output, add to it, skip it, or
write it in place of an input, for any kernel.

Adding to and skipping outputs run the op's rewrite (``fusegen.graph.requests.derive``: output
``k`` becomes ``prev_k + y_k``, skipped outputs are dropped), compiled as a variant of the
kernel; this module binds the caller's ``out=`` arrays to it. In place: ``@fg.op(inplace={0:
"x"})`` declares that output 0 may take input ``x``'s memory; a call with ``inplace=True`` then
writes it there when ``inplace_hazard`` finds the plan safe for it and the arrays allow it (same
shape and dtype, contiguous, writeable, not shared with another input), and refuses with the
reason otherwise.
"""
from __future__ import annotations

import weakref

import numpy as np

from ..errors import ArgumentError, DTypeError, ShapeError
from ..graph.requests import check_disjoint, derive, output_indices
from ..ir import Op, OpDef
from ..plan import BROADCAST, Plan, build_plan, leaves_of
from ..plan.paths import stage_reads


def call(kernel, derived_kernel, arrays, out, accumulate, skip, inplace, attrs):
    """A call with write requests, for any kernel class: ``derived_kernel(op)`` compiles an op
    with the same backend and options."""
    op = kernel.op
    acc = output_indices(op, accumulate, "accumulate")
    skp = output_indices(op, skip, "skip")
    check_disjoint(op, acc, skp)   # before out= is checked against skip: the clearer error
    outs = _given_outputs(op, out, skp)
    if inplace:
        outs = _inplace_outputs(kernel, arrays, outs, skp)
    if acc and any(outs[k] is None for k in acc):
        missing = sorted(k for k in acc if outs[k] is None)
        raise ArgumentError(f"op {op.name}: accumulate needs the arrays to add to: out= is missing output(s) "
                            f"{missing}")
    try:
        return _run(kernel, derived_kernel, arrays, outs, acc, skp, attrs)
    except (ShapeError, DTypeError) as e:
        if not inplace or "out[" not in str(e):
            raise
        text = str(e).removeprefix(f"op {op.name}: ")
        raise type(e)(f"op {op.name}: cannot write in place: {text}") from None


def _run(kernel, derived_kernel, arrays, outs, acc, skp, attrs):
    op, n = kernel.op, len(kernel.op.graph.outputs)
    if not acc and not skp:
        return kernel(*arrays, out=_pack(op, outs) if any(o is not None for o in outs) else None, **attrs)
    if any(o is None for k, o in enumerate(outs) if k not in skp) and any(o is not None for o in outs):
        raise ArgumentError(f"op {op.name}: out= gives some outputs but not all of those computed")
    dk = derived_kernel(derive(op, acc, skp))
    kept = [outs[k] for k in range(n) if k not in skp]
    res = dk(*arrays, *[outs[k] for k in sorted(acc)],
             out=_pack(dk.op, kept) if kept and kept[0] is not None else None, **attrs)
    res = list(res) if isinstance(res, tuple) else [res]
    full = []
    for k in range(n):
        full.append(None if k in skp else res.pop(0))
    return tuple(full) if op.multi_output or n > 1 else full[0]


def _pack(op: OpDef, outs: list):
    return tuple(outs) if op.multi_output or len(outs) > 1 else outs[0]


def _given_outputs(op: OpDef, out, skip: frozenset) -> list:
    n = len(op.graph.outputs)
    if out is None:
        return [None] * n
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if len(outs) != n:
        raise ArgumentError(f"op {op.name}: out= needs {n} entries (None for a skipped output), got {len(outs)}")
    for k in skip:
        if outs[k] is not None:
            raise ArgumentError(f"op {op.name}: output {k} is skipped, so out[{k}] must be None")
    return outs


# --- in place ----------------------------------------------------------------------------------
def inplace_hazard(plan: Plan, k: int, i: int) -> str | None:
    """Why output ``k`` may not be written over input ``i``, or None when it may.

    Safe when output ``k`` is an elementwise write of its stage, no other write of that
    stage reads input ``i``, and no later stage reads input ``i`` at all: every read of the
    input then happens before, or at the very index of, the write that overwrites it."""
    keeper = next((s for s in plan.stages if any(kk == k for kk, _ in s.keeps)), None)
    writer = keeper or next((s for s in plan.stages if any(kk == k for kk, _ in s.writes)), None)
    shifted = _shifted_read(plan, writer, i) if writer is not None else None
    if shifted is not None:
        return shifted
    if keeper is not None:   # output k holds a stored value from this stage on (plan.shared)
        kept = {id(n) for kk, n in keeper.keeps if kk == k}
        if any(l.op is Op.INPUT and l.arg == i for l, _ in stage_reads([r.srcs[0] for r in keeper.reductions],
                                                                       stop=kept).accesses):
            return (f"stage {keeper.index} stores a value in output {k} and also reads input "
                    f"{plan.opdef.inputs[i]!r} for its reduction")
        if any(a.slot == ("in", i) for s in plan.stages[keeper.index + 1:] for a in s.reads):
            return f"a later pass reads input {plan.opdef.inputs[i]!r} after output {k} holds a stored value"
        return None
    stage = next((s for s in plan.stages if any(kk == k for kk, _ in s.writes)), None)
    if stage is None:
        return f"output {k} is a reduction's result, which is written while its source is still being read"
    x = plan.opdef.graph.outputs[k]
    for kk, n in stage.writes:
        if kk != k and n is not x and any(l.op is Op.INPUT and l.arg == i for l in leaves_of(n)):
            return f"output {kk}, computed in the same loop, also reads input {plan.opdef.inputs[i]!r}"
    for s in plan.stages[stage.index + 1:]:
        exprs = [r.srcs[0] for r in s.reductions] + [n for _, n in s.writes] + [n for _, n in s.finals]
        if any(l.op is Op.INPUT and l.arg == i for e in exprs for l in leaves_of(e)):
            return f"a later pass reads input {plan.opdef.inputs[i]!r} after output {k} is written"
    return None


def _shifted_read(plan: Plan, writer, i: int) -> str | None:
    """Why the passes up to ``writer`` (the stage writing the output) may read input ``i`` at an
    element the output has already overwritten: a read through a view (a transpose, a slice, a
    flip, a gather...) is at another index than the write beside it, and a pass fused into the
    same task as the write runs its reads after the earlier tasks' writes."""
    g = plan.opdef.graph
    for s in plan.stages[:writer.index + 1]:
        for a in s.reads:
            if a.slot == ("in", i) and a.steps not in ((), (BROADCAST,)):
                return (f"stage {s.index} reads input {plan.opdef.inputs[i]!r} through "
                        f"{a.map_text(lambda n: f'%{g.idx(n)}')}, at other indices than the output is written")
    return None


#: kernel -> {output: why it may not be written in place, or None}
_HAZARDS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _inplace_outputs(kernel, arrays, outs: list, skip: frozenset) -> list:
    op = kernel.op
    pairs = getattr(op, "inplace", {})
    if not pairs:
        raise ArgumentError(f"op {op.name}: inplace=True, but the op declares no output that may share an "
                            "input's memory (@fg.op(inplace={output: 'input'}))")
    hazards = _HAZARDS.get(kernel)
    if hazards is None:   # the plan's part depends on the kernel alone: found once, not per call
        plan = getattr(kernel, "plan", None) or build_plan(op)
        hazards = _HAZARDS[kernel] = {k: inplace_hazard(plan, k, i) for k, i in pairs.items()}
    outs = list(outs)
    for k, i in pairs.items():
        if k in skip:
            continue
        why = hazards[k]
        a = arrays[i]
        if why is None and outs[k] is not None:
            why = f"out[{k}] is given as well"
        if why is None and not isinstance(a, np.ndarray):
            why = f"input {op.inputs[i]!r} is a {type(a).__name__}, not a NumPy array"
        elif why is None and not (a.flags.c_contiguous and a.flags.writeable):
            why = f"input {op.inputs[i]!r} is not a writeable C-contiguous array"
        elif why is None and any(j != i and isinstance(b, np.ndarray) and np.shares_memory(a, b)
                                 for j, b in enumerate(arrays)):
            why = f"input {op.inputs[i]!r} shares memory with another input"
        if why is not None:
            raise ArgumentError(f"op {op.name}: cannot write output {k} in place of input "
                                f"{op.inputs[i]!r}: {why}")
        outs[k] = a  # shape and dtype are checked as for any out= array
    return outs
