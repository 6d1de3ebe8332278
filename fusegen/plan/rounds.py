"""Dim flow, part 2: the multi-round rewrite that runs an op with some dims split across devices
(partials per shard, collectives between rounds). The face is ``fusegen.plan.dimflow``."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from .. import dtypes as dt
from ..ir import Node, Op, OpDef, ReduceArg, ShapeOf, Tensor, value_srcs
from .factors import Axes, DimFlow, Sharding

_CACHE_LOCK = threading.Lock()  # the rounds' ops are built once per (op, split) and cached on the op

# --- the rounds --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Partial:
    """A reduction computed per shard and combined across devices."""

    node: int                     # its graph index in the original op
    combine: str                  # "sum", "max", "min" or "prod": the collective
    axes: Axes                    # mesh axes to combine over
    count: int                    # mean: the combined sum is divided by this; else 0
    dtype: dt.DType               # the reduction's result dtype (the combined value is cast to it)


@dataclass(frozen=True)
class Round:
    op: OpDef                     # an ordinary fused op, run on each shard
    args: tuple[tuple[str, int], ...]   # ("input", i) or ("combined", graph index), in op.inputs order
    dtypes: tuple[str, ...]       # the dtype of each arg
    partials: tuple[Partial, ...] = ()  # what its outputs are, in order (the last round: none)


@dataclass(frozen=True)
class Program:
    """An op cut into rounds around split reductions (``program``)."""

    rounds: tuple[Round, ...]
    final: Round | None           # computes the outputs that are not combined reductions
    outputs: tuple[tuple[str, int], ...]   # per op output: ("final", k) or ("combined", graph index)

    @property
    def collectives(self) -> list[Partial]:
        return [p for r in self.rounds for p in r.partials]

    def run(self, inputs: Sequence, call: Callable[[Round, list], Sequence], combine: Callable[[Any, Partial], Any]):
        """Run on one shard: ``call(round, args)`` runs a round's op and returns its outputs;
        ``combine(partial value, Partial)`` does the collective, the division by ``count`` and
        the cast to ``dtype``. Returns the op's outputs, as a tuple."""
        combined: dict[int, Any] = {}

        def arg(a):
            return inputs[a[1]] if a[0] == "input" else combined[a[1]]

        for rnd in self.rounds:
            outs = call(rnd, [arg(a) for a in rnd.args])
            for p, v in zip(rnd.partials, outs):
                combined[p.node] = combine(v, p)
        finals = call(self.final, [arg(a) for a in self.final.args]) if self.final is not None else ()
        return tuple(finals[k] if src == "final" else combined[k] for src, k in self.outputs)


def split_reductions(flow: DimFlow, sharding: Sharding) -> dict[int, Axes]:
    """The computed reductions that fold a split factor -> the mesh axes their partials combine over."""
    out = {}
    for i, r in flow.reductions.items():
        axes = tuple(a for f in r.factors for a in sharding.factor_axes.get(f, ()))
        if axes:
            out[i] = axes
    return out


def program(flow: DimFlow, sharding: Sharding, exchange: Callable[[dt.DType], dt.DType] | None = None
            ) -> Program | None:
    """``flow``'s op rewritten into rounds for ``sharding``; None when no reduction folds a split
    factor (each shard then runs the op itself). ``exchange`` maps a dtype to the one values
    travel between rounds in (JAX without ``jax_enable_x64`` has no 64-bit arrays: a float64 count
    of elements crosses as float32 and is cast back inside the next round)."""
    split = split_reductions(flow, sharding)
    if not split:
        return None
    spec, op = flow.spec, flow.spec.opdef
    g = op.graph
    level = _levels(g, set(split))
    outputs = {g.idx(o) for o in g.outputs}
    casts, wire = {}, {}
    for i in sorted(split):
        info, kind = spec.info[i], flow.reductions[i].kind
        src, out = dt.materialize(spec.info[g.idx(g.nodes[i].srcs[0])].dtype), dt.materialize(info.dtype)
        acc = info.acc if kind in ("sum", "mean", "prod") and info.acc is not None and info.acc != src else None
        part = acc or src
        to = exchange or (lambda d: d)
        wire[i] = out if i in outputs else to(out)
        # (accumulate in, send the partial as, read the combined value back as): None = as is
        casts[i] = (acc, to(part) if to(part) != part else None, out if wire[i] != out else None)
    rounds_ops, final_op = _round_ops(op, tuple(sorted(split)), tuple(casts[i] for i in sorted(split)), level)

    def dtype_of(a) -> str:
        return spec.dtypes[a[1]].name if a[0] == "input" else wire[a[1]].name

    rounds = []
    for (rop, args, nodes) in rounds_ops:
        red = flow.reductions
        parts = tuple(Partial(i, {"mean": "sum"}.get(red[i].kind, red[i].kind), split[i],
                              red[i].count if red[i].kind == "mean" else 0, wire[i]) for i in nodes)
        rounds.append(Round(rop, args, tuple(dtype_of(a) for a in args), parts))
    final = None
    if final_op is not None:
        fop, fargs, _ = final_op
        final = Round(fop, fargs, tuple(dtype_of(a) for a in fargs))
    outs, k = [], 0
    for o in g.outputs:
        if g.idx(o) in split:
            outs.append(("combined", g.idx(o)))
        else:
            outs.append(("final", k))
            k += 1
    return Program(tuple(rounds), final, tuple(outs))


def _levels(g, split: set) -> dict[int, int]:
    """Per split reduction: 1 + the highest level among the split reductions its value reads."""
    below: dict[int, int] = {}   # graph index -> highest split level its value depends on
    level: dict[int, int] = {}
    for i, n in enumerate(g.nodes):
        deps = max((below[g.idx(s)] for s in value_srcs(n)), default=0)
        if i in split:
            level[i] = deps + 1
            below[i] = deps + 1
        else:
            below[i] = deps
    return level


def _round_ops(op: OpDef, split: tuple[int, ...], casts: tuple, level: dict[int, int]):
    """The rounds' ops, cached on ``op`` per split set (they depend on the graph and the dtype
    casts, not on shapes): ``([(op, args, partial nodes)], final or None)``."""
    cache = op.__dict__.setdefault("_dimflow_rounds", {})
    key = (split, casts)
    if key in cache:
        return cache[key]
    g = op.graph
    by_node = dict(zip(split, casts))
    rounds = []
    top = max(level.values())
    for k in range(1, top + 1):
        nodes = [i for i in split if level[i] == k]
        avail = {i for i in split if level[i] < k}
        rounds.append(_rewrite(op, f"{op.name}_round{k}", [("partial", i) for i in nodes], avail, by_node)
                      + (tuple(nodes),))
    rest = [g.idx(o) for o in g.outputs if g.idx(o) not in by_node]
    final = _rewrite(op, f"{op.name}_final", [("node", i) for i in rest], set(split), by_node) + ((),) if rest else None
    with _CACHE_LOCK:
        return cache.setdefault(key, (rounds, final))



def _rewrite(op: OpDef, name: str, roots: list[tuple[str, int]], avail: set[int], casts: dict):
    """A new op computing ``roots`` (("node", i): node i of ``op``; ("partial", i): the per-shard
    partial of reduction i) where the reductions in ``avail`` are inputs (their combined values).
    ``casts[i]``: (accumulation dtype, partial's wire dtype, combined value's dtype), None = as is.
    Returns ``(op, args)``: args as ``Round.args``."""
    g = op.graph
    used_in: dict[int, None] = {}
    used_comb: dict[int, None] = {}
    seen: set = set()

    def walk(i: int, whole: bool) -> None:   # whole: keep a reduction node itself (unreduce's source)
        if (i, whole) in seen:
            return
        seen.add((i, whole))
        n = g.nodes[i]
        if i in avail and not whole:
            used_comb[i] = None
        elif n.op is Op.INPUT:
            used_in[n.arg] = None
        else:
            for p, s in enumerate(n.srcs):
                walk(g.idx(s), _keeps_source(n, p))

    for kind, i in roots:
        n = g.nodes[i]
        for p, s in enumerate(n.srcs):
            walk(g.idx(s), _keeps_source(n, p))
        if kind == "node":
            walk(i, False)
    ins = sorted(used_in)
    comb = sorted(used_comb)
    taken = set(op.inputs) | set(op.attrs)
    comb_names = []
    for i in comb:
        nm = f"{g.nodes[i].arg.kind}{i}"
        while nm in taken:
            nm += "_"
        taken.add(nm)
        comb_names.append(nm)

    def body(*args, **attrs):
        slot = {("in", j): a.node for j, a in zip(ins, args)}
        for i, a in zip(comb, args[len(ins):]):
            back = casts[i][2]
            slot[("comb", i)] = a.node if back is None else Node(Op.CAST, (a.node,), back, g.nodes[i].loc)
        memo: dict = {}

        def build(i: int, whole: bool) -> Node:
            if (i, whole) in memo:
                return memo[(i, whole)]
            n = g.nodes[i]
            if i in avail and not whole:
                new = slot[("comb", i)]
            elif n.op is Op.INPUT:
                new = slot[("in", n.arg)]
            elif n.op is Op.ATTR:
                new = attrs[n.arg].node
            elif n.op is Op.CONST:
                new = n
            else:
                new = Node(n.op, tuple(build(g.idx(s), _keeps_source(n, p)) for p, s in enumerate(n.srcs)), n.arg, n.loc)
            memo[(i, whole)] = new
            return new

        outs = []
        for kind, i in roots:
            n = g.nodes[i]
            if kind == "node":
                outs.append(Tensor(build(i, False)))
                continue
            srcs = [build(g.idx(s), _keeps_source(n, p)) for p, s in enumerate(n.srcs)]
            acc, send, _ = casts[i]
            if acc is not None:   # partial sums accumulate as the whole sum does
                srcs[0] = Node(Op.CAST, (srcs[0],), acc, n.loc)
            arg = ReduceArg("sum", n.arg.axes, n.arg.keep_dims) if n.arg.kind == "mean" else n.arg
            part = Node(Op.REDUCE, tuple(srcs), arg, n.loc)
            outs.append(Tensor(part if send is None else Node(Op.CAST, (part,), send, n.loc)))
        return tuple(outs)

    body.__signature__ = op.signature_for([op.inputs[j] for j in ins] + comb_names)
    body.__name__ = name
    new = OpDef(body, name)
    if new.text(locations=False).replace(f"op {name}(", f"op {op.name}(", 1) == op.text(locations=False):
        new = op   # the partials are the op's own outputs (a lone sum): the same kernel serves
    return new, tuple([("input", j) for j in ins] + [("combined", i) for i in comb])


def _keeps_source(n: Node, p: int) -> bool:
    """Whether source ``p`` of ``n`` must stay the node it is: ``unreduce`` reads the axes of the
    reduction it undoes off that node, so it cannot be replaced by the reduction's value."""
    return p == 1 and n.op is Op.REDUCE and isinstance(n.arg.axes, ShapeOf) and n.arg.axes.rule == "unreduce"

