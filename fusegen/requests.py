"""Write requests (MXNet's ``OpReqType``): write an output, add to it, skip it, or write it in
place of an input.

Adding to and skipping outputs are *graph rewrites*, not runtime passes: the op is re-traced
with output ``k`` replaced by ``prev_k + y_k`` (``prev_k`` a new input that the caller's
``out[k]`` is bound to) and skipped outputs removed. The derived op is planned and fused
like any other, so the addition happens in the loop that computes ``y_k``, a skipped output
costs nothing (nodes only it needs are never computed), and every backend and emitter takes
it: ``fg.emit(op.with_requests(accumulate=[0]))`` ships an add-to kernel.

Reading ``prev_k`` and writing ``out[k]`` through one buffer is safe: ``prev_k`` is read only
by the expression of output ``k``, at the index being written.

In place: ``@fg.op(inplace={0: "x"})`` declares that output 0 may take input ``x``'s memory;
a call with ``inplace=True`` then writes it there when ``inplace_hazard`` finds the plan safe
for it and the arrays allow it (same shape and dtype, contiguous, writeable, not shared with
another input), and refuses with the reason otherwise.
"""
from __future__ import annotations

import threading

import numpy as np

from .errors import ArgumentError, DTypeError, ShapeError, TraceError
from .ir import Op, OpDef
from .plan import Plan, leaves_of

#: Keyword arguments a kernel call takes for itself: no attribute may have these names.
RESERVED = ("out", "accumulate", "skip", "inplace", "stream")

_lock = threading.Lock()


def output_indices(op: OpDef, which, what: str) -> frozenset:
    """``which`` (True: all, False/None: none, an int or iterable of ints) as output indices."""
    n = len(op.graph.outputs)
    if which is True:
        return frozenset(range(n))
    if which is None or which is False:
        return frozenset()
    items = [which] if isinstance(which, int) else list(which)
    out = set()
    for k in items:
        if isinstance(k, bool) or not isinstance(k, int) or not -n <= k < n:
            raise ArgumentError(f"op {op.name}: {what}={which!r}: outputs are numbered 0..{n - 1}")
        out.add(k % n)
    return frozenset(out)


def derive(op: OpDef, accumulate: frozenset, skip: frozenset) -> OpDef:
    """``op`` with outputs in ``accumulate`` added to new inputs ``prev<k>`` and outputs in
    ``skip`` removed (cached on ``op``)."""
    key = (accumulate, skip)
    cache = op.__dict__.setdefault("_derived", {})
    if key in cache:
        return cache[key]
    n = len(op.graph.outputs)
    _check_disjoint(op, accumulate, skip)
    if len(skip) == n:
        raise ArgumentError(f"op {op.name}: every output is skipped: nothing to compute")
    acc = sorted(accumulate)

    def body(*args, **attrs):
        out = op.fn(*args[:len(op.inputs)], **attrs)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        prev = dict(zip(acc, args[len(op.inputs):]))
        # prev + y, not y + prev: the result keeps the output's dtype either way; this order
        # reads as "out += y" in the generated source
        kept = [prev[k] + o if k in prev else o for k, o in enumerate(outs) if k not in skip]
        return tuple(kept) if op.multi_output or len(kept) > 1 else kept[0]

    body.__signature__ = op.signature_for(op.inputs + [f"prev{k}" for k in acc])
    tag = "".join("a" if k in accumulate else "s" if k in skip else "w" for k in range(n))
    derived = OpDef(body, f"{op.name}_{tag}")
    derived.base, derived.accumulate, derived.skip = op, accumulate, skip
    with _lock:
        return cache.setdefault(key, derived)


def call(kernel, derived_kernel, arrays, out, accumulate, skip, inplace, attrs):
    """A call with write requests, for any kernel class: ``derived_kernel(op)`` compiles an op
    with the same backend and options."""
    op = kernel.op
    acc = output_indices(op, accumulate, "accumulate")
    skp = output_indices(op, skip, "skip")
    _check_disjoint(op, acc, skp)   # before out= is checked against skip: the clearer error
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
        raise type(e)(f"op {op.name}: cannot write in place: {e}") from None


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


def _check_disjoint(op: OpDef, accumulate: frozenset, skip: frozenset) -> None:
    if accumulate & skip:
        raise ArgumentError(f"op {op.name}: output(s) {sorted(accumulate & skip)} cannot be both skipped and "
                            "accumulated into")


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
def declared_inplace(op: OpDef, spec) -> dict[int, int]:
    """``@fg.op(inplace=...)``'s value as {output index: input index}; TraceError if malformed."""
    if spec is None:
        return {}
    items = spec.items() if isinstance(spec, dict) else [(0, spec)]
    out: dict[int, int] = {}
    for k, name in items:
        if not isinstance(k, int) or not 0 <= k < len(op.graph.outputs):
            raise TraceError(f"op {op.name}: inplace={spec!r}: {k!r} is not an output index")
        if name not in op.inputs:
            raise TraceError(f"op {op.name}: inplace={spec!r}: {name!r} is not an input "
                             f"({', '.join(op.inputs)})")
        if op.inputs.index(name) in out.values():
            raise TraceError(f"op {op.name}: inplace={spec!r}: input {name!r} is given to two outputs")
        out[k] = op.inputs.index(name)
    return out


def inplace_hazard(plan: Plan, k: int, i: int) -> str | None:
    """Why output ``k`` may not be written over input ``i``, or None when it may.

    Safe when output ``k`` is an elementwise write of its stage, no other write of that
    stage reads input ``i``, and no later stage reads input ``i`` at all: every read of the
    input then happens before, or at the very index of, the write that overwrites it."""
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


def _inplace_outputs(kernel, arrays, outs: list, skip: frozenset) -> list:
    op = kernel.op
    pairs = getattr(op, "inplace", {})
    if not pairs:
        raise ArgumentError(f"op {op.name}: inplace=True, but the op declares no output that may share an "
                            "input's memory (@fg.op(inplace={output: 'input'}))")
    from .plan import build_plan
    plan = getattr(kernel, "plan", None) or build_plan(op)
    outs = list(outs)
    for k, i in pairs.items():
        if k in skip:
            continue
        why = inplace_hazard(plan, k, i)
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
