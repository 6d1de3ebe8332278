"""Dim flow: how every dim of an op relates to its inputs' dims, and the rewrite that runs an op
with some of those dims split across devices. The IR-level analysis behind fusegen's sharding
rules (``fusegen.jax`` partitions XLA calls with it, ``fusegen.torch`` DTensor strategies); it
knows nothing of JAX or PyTorch.

**Factors.** ``analyze(spec)`` groups every dim of every node of an op specialized to shapes (an
``ir.Spec``) into *factors*: the dims that walk one index space together (an elementwise node's
output dim and the input dims it reads one for one). Per node kind a rule in ``DIM_RULES`` lists
the node's *loop dims*: which source dims each one reads and which output dim it becomes, and
its role:

* ``KEEP``: source dims and the output dim are one index space (elementwise, broadcast partner,
  a reduction's kept dims). A size-1 dim broadcast against a larger one is not linked: it is
  its own (size-1) factor, so it never carries a sharding;
* ``REDUCE``: the node folds its source dims away (``kind`` says how: sum, mean, prod, max, min);
* ``REPLICATE``: the node must see the whole of these source dims on one device (a slice or a
  gather along them, a dim merged *under* another by a reshape);
* ``MAJOR``: the output dim is the major part of the source dim, or the reverse (a reshape that
  splits or merges dims): a sharding carries over when it divides both sizes.

A new IR op kind costs one entry in ``DIM_RULES`` (a transpose: ``KEEP`` loop dims with permuted
members; a slice: ``REPLICATE`` for the source dim and a fresh ``KEEP`` output dim).

**Sharding.** ``assign`` decides, from the mesh axes that shard each input dim, which factors are
split (one mesh-axis set per factor, sizes that divide, nothing marked ``REPLICATE``): every
input and output dim then follows its factor, so an elementwise dim keeps its sharding and a
broadcast dim follows its partner.

**Rounds.** ``program`` rewrites the op for that sharding. A reduction over a split factor gives a
partial result per shard, which a collective combines (sum and mean: a sum of partial sums, mean
then divided by the global count; max/min: the max/min of partial ones; prod: an all-gather of
partial products, multiplied (a psum of logs would not be exact)). Reductions that read other
split reductions (softmax: the sum of ``exp(x - max)``; layer norm's variance around the mean)
need the combined value first, so the op is cut at those *levels*: round ``k`` is an ordinary
fused op computing the level-``k`` partials from the inputs and the combined results of earlier
rounds, and a last round computes the outputs. Every round is planned, fused and emitted like
any op, so the code that runs per shard comes from the same Plan as the unsharded kernel.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from . import dtypes as dt
from .errors import ShapeError
from .ir import (BINARY_UFUNC, UNARY_UFUNC, Node, NodeInfo, Op, OpDef, ReduceArg, ShapeOf, Spec, Tensor,
                 broadcast_shapes, value_srcs)
from .plan import computed_nodes

KEEP, REDUCE, REPLICATE, MAJOR = "keep", "reduce", "replicate", "major"
_CACHE_LOCK = threading.Lock()


@dataclass(frozen=True)
class LoopDim:
    """One dim a node iterates over: the source dims read along it (``(source position, dim)``),
    the node's own dim it becomes (``out``; None for a reduced or replicated one) and its role."""

    members: tuple[tuple[int, int], ...] = ()
    out: int | None = None
    role: str = KEEP
    kind: str = ""   # REDUCE: how the node folds it (sum, mean, prod, max, min)


# --- the rules, per IR op kind -----------------------------------------------------------------
def _aligned(srcs: Sequence[NodeInfo], dom: tuple[int, ...], d: int) -> tuple[tuple[int, int], ...]:
    """The source dims read along dim ``d`` of a broadcast domain: right-aligned, same size
    (a size-1 dim broadcast against a larger one is read at index 0, not along ``d``)."""
    out = []
    for p, s in enumerate(srcs):
        k = d - (len(dom) - len(s.shape))
        if k >= 0 and s.shape[k] == dom[d]:
            out.append((p, k))
    return tuple(out)


def elementwise_rule(n: Node, info: NodeInfo, srcs: list[NodeInfo]) -> list[LoopDim]:
    """Unary, binary, ``where``, casts: NumPy broadcasting of the value sources (a ``cast_like``'s
    second source gives a dtype, not a shape)."""
    vals = srcs[:len(value_srcs(n))]
    return [LoopDim(_aligned(vals, info.shape, d), d) for d in range(len(info.shape))]


def reduce_rule(n: Node, info: NodeInfo, srcs: list[NodeInfo]) -> list[LoopDim]:
    """Reductions over axes, and the gradient helpers that share the REDUCE node kind."""
    arg: ReduceArg = n.arg
    if isinstance(arg.axes, ShapeOf) and arg.axes.rule == "unreduce":
        # srcs[0] is shaped like the reduction srcs[1]; the result puts its axes back as 1s
        red = srcs[1]
        kept = [d for d in range(len(info.shape)) if red.keep_dims or d not in red.axes]
        loops = [LoopDim(((0, k), (1, k)), d) for k, d in enumerate(kept)]
        return loops + [LoopDim((), d) for d in range(len(info.shape)) if d not in kept]
    if isinstance(arg.axes, ShapeOf):   # sum_to: a sum over the broadcast of every source
        dom = broadcast_shapes([s.shape for s in srcs], _unreachable)
        off = len(dom) - len(info.shape)
        return [LoopDim(_aligned(srcs, dom, d), None, REDUCE, "sum") if d in info.axes
                else LoopDim(_aligned(srcs, dom, d), d - off) for d in range(len(dom))]
    x, loops, j = srcs[0], [], 0
    for k in range(len(x.shape)):
        if k in info.axes:
            loops.append(LoopDim(((0, k),), None, REDUCE, arg.kind))
            if info.keep_dims:
                loops.append(LoopDim((), k))
        else:
            loops.append(LoopDim(((0, k),), k if info.keep_dims else j))
            j += 1
    return loops


def _unreachable(msg: str):  # pragma: no cover - infer has checked broadcasting already
    raise ShapeError(msg)


DimRule = Callable[[Node, NodeInfo, list], list]

#: IR op kind -> its rule: ``rule(node, its NodeInfo, its sources' NodeInfos) -> [LoopDim]``.
#: INPUT, ATTR and CONST are leaves: their dims start factors.
DIM_RULES: dict[Op, DimRule] = {
    **{o: elementwise_rule for o in (*UNARY_UFUNC, *BINARY_UFUNC, Op.WHERE, Op.CAST)},
    Op.REDUCE: reduce_rule,
}
_LEAVES = (Op.INPUT, Op.ATTR, Op.CONST)


def rule_for(op: Op) -> DimRule:
    try:
        return DIM_RULES[op]
    except KeyError:
        raise NotImplementedError(f"fusegen.dimflow has no rule for IR op {op.value!r}: add an entry to "
                                  "DIM_RULES saying how its dims relate to its sources' dims") from None


# --- the analysis --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Factor:
    index: int
    sizes: tuple[int, ...]        # the sizes of its dims (one, unless a MAJOR link joined two)
    replicate: bool               # some node needs all of it on one device
    reduced_by: tuple[int, ...]   # graph indices of the computed reductions that fold it
    in_outputs: bool


@dataclass(frozen=True)
class Reduction:
    kind: str                     # sum, mean, prod, max, min
    factors: tuple[int, ...]      # the factors it folds
    count: int                    # how many elements each result folds (mean divides by it)


@dataclass(frozen=True)
class DimFlow:
    """An op's dims grouped into factors, for one specialization (``analyze``)."""

    spec: Spec
    factors: tuple[Factor, ...]
    node_dims: tuple[tuple[int, ...], ...]   # per graph node, per dim: its factor
    reductions: dict                         # graph index of a computed reduction -> Reduction

    @property
    def inputs(self) -> tuple[tuple[int, ...], ...]:
        g = self.spec.opdef.graph
        ins = {n.arg: self.node_dims[i] for i, n in enumerate(g.nodes) if n.op is Op.INPUT}
        return tuple(ins.get(i, ()) for i in range(len(self.spec.opdef.inputs)))

    @property
    def outputs(self) -> tuple[tuple[int, ...], ...]:
        g = self.spec.opdef.graph
        return tuple(self.node_dims[g.idx(o)] for o in g.outputs)

    def text(self) -> str:
        """A readable summary: one line per input and output, factors named f0, f1, ..."""
        op = self.spec.opdef
        name = lambda f: f"f{f}" + ("!" if self.factors[f].replicate else "")  # noqa: E731
        lines = [f"{op.inputs[i]}: ({', '.join(map(name, d))})" for i, d in enumerate(self.inputs)]
        lines += [f"out{k}: ({', '.join(map(name, d))})" for k, d in enumerate(self.outputs)]
        for i, r in sorted(self.reductions.items()):
            lines.append(f"%{i} {r.kind} over {', '.join(map(name, r.factors))} ({r.count} each)")
        return "\n".join(lines)


class _Sets:
    """Union-find over (node, dim) keys."""

    def __init__(self):
        self.parent: dict = {}

    def add(self, k) -> None:
        self.parent.setdefault(k, k)

    def find(self, k):
        while self.parent[k] != k:
            self.parent[k] = self.parent[self.parent[k]]
            k = self.parent[k]
        return k

    def union(self, a, b) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)   # the earlier key names the set


def analyze(spec: Spec) -> DimFlow:
    """Group the dims of ``spec``'s op (shapes fully known) into factors."""
    op, g = spec.opdef, spec.opdef.graph
    for i, info in enumerate(spec.info):
        if info.shape is None or any(d < 0 for d in info.shape):
            raise ShapeError(f"op {op.name}: dims can only be traced across devices for known shapes, got "
                             f"{info.shape} at node %{i}")
    sets, replicate, reduced = _Sets(), set(), {}
    for i, info in enumerate(spec.info):
        for d in range(len(info.shape)):
            sets.add((i, d))
    computed = computed_nodes(g)
    for i, n in enumerate(g.nodes):
        if n.op in _LEAVES:
            continue
        src_idx = [g.idx(s) for s in n.srcs]
        for loop in rule_for(n.op)(n, spec.info[i], [spec.info[s] for s in src_idx]):
            keys = [(src_idx[p], k) for p, k in loop.members]
            if loop.role == REPLICATE:
                replicate.update(keys)
                continue
            if loop.out is not None:
                keys.append((i, loop.out))
            for k in keys[1:]:
                sets.union(keys[0], k)
            if loop.role == REDUCE and id(n) in computed and keys:
                reduced.setdefault(i, (loop.kind, []))[1].append(keys[0])
    # Factors are numbered in order of first appearance (inputs come first in the graph).
    number: dict = {}
    node_dims = tuple(tuple(number.setdefault(sets.find((i, d)), len(number)) for d in range(len(info.shape)))
                      for i, info in enumerate(spec.info))
    sizes: dict[int, set] = {}
    for i, info in enumerate(spec.info):
        for d, f in enumerate(node_dims[i]):
            sizes.setdefault(f, set()).add(info.shape[d])
    rep = {node_dims[i][d] for i, d in replicate}
    for i, n in enumerate(g.nodes):  # a factor twice in one tensor cannot be split (a transpose of a square)
        if n.op is Op.INPUT or any(o is n for o in g.outputs):
            seen = node_dims[i]
            rep.update(f for f in seen if seen.count(f) > 1)
    reductions = {}
    for i, (kind, keys) in reduced.items():
        fs = tuple(dict.fromkeys(node_dims[k[0]][k[1]] for k in keys))
        count = math.prod(spec.info[k[0]].shape[k[1]] for k in keys)
        reductions[i] = Reduction(kind, fs, count)
    outs = {f for o in g.outputs for f in node_dims[g.idx(o)]}
    factors = tuple(Factor(f, tuple(sorted(sizes[f])), f in rep,
                           tuple(i for i, r in reductions.items() if f in r.factors), f in outs)
                    for f in range(len(number)))
    return DimFlow(spec, factors, node_dims, reductions)


# --- which factors a mesh splits --------------------------------------------------------------
Axes = tuple  # mesh axis names, major to minor; () = not split


@dataclass(frozen=True)
class Sharding:
    """Split factors and the resulting per-dim mesh axes of every input and output."""

    factor_axes: dict             # factor -> Axes
    inputs: tuple[tuple[Axes, ...], ...]
    outputs: tuple[tuple[Axes, ...], ...]
    dropped: tuple[str, ...] = () # why a sharding the inputs asked for was not kept

    @property
    def trivial(self) -> bool:
        return not self.factor_axes


def assign(flow: DimFlow, in_axes: Sequence[Sequence[Axes]], axis_sizes: dict) -> Sharding:
    """Split factors from the mesh axes sharding each input dim (``in_axes[i][d]``): inputs in
    order, dims in order, the first sharding seen for a factor wins; a factor is split only when
    each of its sizes divides by the axes' device count, no other factor uses those axes and no
    node needs it whole (``dropped`` says why a sharding was not kept: XLA or DTensor gathers
    that dim of that input)."""
    chosen: dict[int, Axes] = {}
    used: set = set()
    dropped = []
    names = flow.spec.opdef.inputs
    for i, dims in enumerate(in_axes):
        for d, axes in enumerate(dims):
            axes = tuple(axes or ())
            if not axes:
                continue
            f = flow.inputs[i][d]
            if chosen.get(f) == axes:
                continue
            n = math.prod(axis_sizes[a] for a in axes)
            fac = flow.factors[f]
            why = ("another input splits this dim differently" if f in chosen else
                   "a mesh axis is already used by another dim" if used & set(axes) else
                   "the op needs this dim whole on each device" if fac.replicate else
                   f"size {fac.sizes} does not divide by {n} devices" if any(s % n for s in fac.sizes) else None)
            if why:
                dropped.append(f"input {names[i]!r} dim {d} over {axes}: {why}")
                continue
            chosen[f] = axes
            used.update(axes)
    per = lambda dims: tuple(chosen.get(f, ()) for f in dims)  # noqa: E731
    return Sharding(chosen, tuple(map(per, flow.inputs)), tuple(map(per, flow.outputs)), tuple(dropped))


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


__all__ = ["KEEP", "REDUCE", "REPLICATE", "MAJOR", "LoopDim", "DIM_RULES", "rule_for", "elementwise_rule",
           "reduce_rule", "Factor", "Reduction", "DimFlow", "analyze", "Sharding", "assign", "Partial", "Round",
           "Program", "program", "split_reductions"]
