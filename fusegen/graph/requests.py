"""Write requests (MXNet's ``OpReqType``) as op rewrites, and the in-place declarations of
``@fg.op(inplace=...)``: the IR's part of write requests.

Adding to and skipping outputs are *graph rewrites*, not runtime passes: the op is re-traced
with output ``k`` replaced by ``prev_k + y_k`` (``prev_k`` a new input that the caller's
``out[k]`` is bound to) and skipped outputs removed. The derived op is planned and fused
like any other, so the addition happens in the loop that computes ``y_k``, a skipped output
costs nothing (nodes only it needs are never computed), and every backend and emitter takes
it: ``fg.emit(op.with_requests(accumulate=[0]))`` ships an add-to kernel.

Reading ``prev_k`` and writing ``out[k]`` through one buffer is safe: ``prev_k`` is read only
by the expression of output ``k``, at the index being written. Calling a kernel with requests,
and deciding whether an output may really overwrite an input, are the runtime's
(``fusegen.rt.requests``).
"""
from __future__ import annotations

import threading

from ..errors import ArgumentError, TraceError

#: Keyword arguments a kernel call takes for itself: no attribute may have these names.
RESERVED = ("out", "accumulate", "skip", "inplace", "stream")

_lock = threading.Lock()


def output_indices(op, which, what: str) -> frozenset:
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


def check_disjoint(op, accumulate: frozenset, skip: frozenset) -> None:
    if accumulate & skip:
        raise ArgumentError(f"op {op.name}: output(s) {sorted(accumulate & skip)} cannot be both skipped and "
                            "accumulated into")


def derive(op, accumulate: frozenset, skip: frozenset):
    """``op`` with outputs in ``accumulate`` added to new inputs ``prev<k>`` and outputs in
    ``skip`` removed (an op of the same class, cached on ``op``)."""
    key = (accumulate, skip)
    cache = op.__dict__.setdefault("_derived", {})
    if key in cache:
        return cache[key]
    n = len(op.graph.outputs)
    check_disjoint(op, accumulate, skip)
    if len(skip) == n:
        raise ArgumentError(f"op {op.name}: every output is skipped: nothing to compute")
    acc = sorted(accumulate)

    def body(*args, **attrs):
        out = op.fn(*args[:len(op.inputs)], **attrs)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        prev = dict(zip(acc, args[len(op.inputs):]))
        # prev + y, not y + prev: the result keeps the output's dtype either way; this order
        # reads as "out += y" in the generated source (and this line's number is in the text
        # form of every derived op: tests/golden pins it)
        kept = [prev[k] + o if k in prev else o for k, o in enumerate(outs) if k not in skip]
        return tuple(kept) if op.multi_output or len(kept) > 1 else kept[0]

    body.__signature__ = op.signature_for(op.inputs + [f"prev{k}" for k in acc])
    tag = "".join("a" if k in accumulate else "s" if k in skip else "w" for k in range(n))
    derived = type(op)(body, f"{op.name}_{tag}")
    derived.base, derived.accumulate, derived.skip = op, accumulate, skip
    with _lock:
        return cache.setdefault(key, derived)


def declared_inplace(op, spec) -> dict[int, int]:
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
