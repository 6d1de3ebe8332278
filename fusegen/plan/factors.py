"""Dim flow, part 1: the factors of an op (which dims walk one index space) and which of them a
mesh splits. The face is ``fusegen.plan.dimflow``, whose docstring explains the whole analysis."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

from ..errors import ShapeError
from ..ir import (BINARY_UFUNC, UNARY_UFUNC, Node, NodeInfo, Op, ReduceArg, ShapeOf, Spec, broadcast_shapes,
                 computed_nodes, value_srcs)

KEEP, REDUCE, REPLICATE, MAJOR = "keep", "reduce", "replicate", "major"


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
    if arg.scan:   # a running value: a block of the scanned dim would start from the identity
        loops = [LoopDim(((0, k),), k) for k in range(len(info.shape)) if k not in info.axes]
        for k in info.axes:
            loops += [LoopDim(((0, k),), None, REPLICATE), LoopDim((), k, REPLICATE)]
        return loops
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


def whole_rule(n: Node, info: NodeInfo, srcs: list[NodeInfo]) -> list[LoopDim]:
    """Layout ops, iota, dims and gathers move elements between positions (or read a shape, or
    number positions from zero): a device holding a block of the result would need other blocks
    of the sources, or would number its block from zero. Until each has a rule of its own, every
    dim they touch stays whole on each device (correct, never split)."""
    loops = [LoopDim(((p, k),), None, REPLICATE) for p, s in enumerate(srcs) for k in range(len(s.shape))]
    return loops + [LoopDim((), d, REPLICATE) for d in range(len(info.shape))]


def broadcast_rule(n: Node, info: NodeInfo, srcs: list[NodeInfo]) -> list[LoopDim]:
    """``broadcast_like(x, like)`` (``full_like``, a gradient's ``sum_to`` that sums nothing at a
    call's shapes: ``plan.noops``): NumPy broadcasting of ``x`` against ``like``, whose shape the
    result takes, so each output dim is one index space with ``like``'s and with ``x``'s where
    that has the same size (a size-1 dim of ``x`` is read at index 0). A device holding a block of
    ``like`` makes that block of the result. Stated dims (``broadcast_to(x, (8, 16))``) stay whole:
    a device would make the whole stated shape from its block."""
    if n.arg[0] != "like":
        return whole_rule(n, info, srcs)
    return [LoopDim(_aligned(srcs, info.shape, d), d) for d in range(len(info.shape))]


def permute_rule(n: Node, info: NodeInfo, srcs: list[NodeInfo]) -> list[LoopDim]:
    """A transpose: output dim ``d`` is source dim ``perm[d]``, one index space (the sharding
    follows the dim to its new position)."""
    return [LoopDim(((0, p),), d) for d, p in enumerate(info.params)]


def reshape_rule(n: Node, info: NodeInfo, srcs: list[NodeInfo]) -> list[LoopDim]:
    """A reshape (C order). Output dim ``k`` and source dim ``i`` with as many elements before
    them (``prod(out[:k]) == prod(x[:i])``) also have as many from them on, so a block of ``1/m``
    of dim ``i``'s rows holds the same elements as a block of ``1/m`` of dim ``k``'s, when ``m``
    divides both sizes: ``k`` is the major part of ``i`` (a split), or ``i`` of ``k`` (a merge)
    (``MAJOR``). Only the output dim given as -1 can be split so: each device infers it from its
    block, where a stated size would be the whole one. Every other dim stays whole."""
    x, out = srcs[0].shape, info.shape
    whole = whole_rule(n, info, srcs)
    if n.arg == "like" or 0 in x:   # nothing to split in an empty tensor
        return whole
    ks = [d for d, s in enumerate(n.srcs[1:]) if s.op is Op.CONST and s.arg[1] == -1]
    if not ks or out[ks[0]] in (0, 1):
        return whole
    k = ks[0]
    before = math.prod(out[:k])
    i = next((i for i in range(len(x)) if x[i] != 1 and math.prod(x[:i]) == before), None)
    if i is None:
        return whole
    return [LoopDim(((0, i),), k, MAJOR)] + [d for d in whole if d.members != ((0, i),) and d.out != k]


def index_rule(n: Node, info: NodeInfo, srcs: list[NodeInfo]) -> list[LoopDim]:
    """Basic indexing: a dim taken whole (``:`` or left out) is one index space with its output
    dim; a dim sliced with bounds or a step, or indexed by an integer, stays whole on each device
    (its bounds are global positions); a new axis is a size-1 dim of its own."""
    r, items = len(srcs[0].shape), n.arg
    consumed = sum(1 for it in items if it.kind in ("slice", "int", "squeeze"))
    expanded = [x for it in items for x in ([None] * (r - consumed) if it.kind == "ellipsis" else [it])]
    if not any(it.kind == "ellipsis" for it in items):
        expanded += [None] * (r - consumed)
    loops, k, d = [], 0, 0
    for it in expanded:
        if it is not None and it.kind == "new":
            loops.append(LoopDim((), d))
            d += 1
            continue
        if it is None or (it.kind == "slice" and not any(it.given)):
            loops.append(LoopDim(((0, k),), d))
            d += 1
        elif it.kind == "slice":
            loops += [LoopDim(((0, k),), None, REPLICATE), LoopDim((), d, REPLICATE)]
            d += 1
        else:
            loops.append(LoopDim(((0, k),), None, REPLICATE))
        k += 1
    return loops


DimRule = Callable[[Node, NodeInfo, list], list]

#: IR op kind -> its rule: ``rule(node, its NodeInfo, its sources' NodeInfos) -> [LoopDim]``.
#: INPUT, ATTR and CONST are leaves: their dims start factors.
DIM_RULES: dict[Op, DimRule] = {
    **{o: elementwise_rule for o in (*UNARY_UFUNC, *BINARY_UFUNC, Op.WHERE, Op.CAST)},
    Op.REDUCE: reduce_rule,
    Op.PERMUTE: permute_rule,
    Op.RESHAPE: reshape_rule,
    Op.INDEX: index_rule,
    Op.BROADCAST_TO: broadcast_rule,
    **{o: whole_rule for o in (Op.DIM, Op.FLIP, Op.CONCAT,
                               Op.PAD, Op.IOTA, Op.GATHER, Op.RANDOM)},
}
_LEAVES = (Op.INPUT, Op.ATTR, Op.CONST)


def rule_for(op: Op) -> DimRule:
    try:
        return DIM_RULES[op]
    except KeyError:
        raise NotImplementedError(f"fusegen.plan.dimflow has no rule for IR op {op.value!r}: add an entry to "
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
                if loop.out is not None:   # the node's own dim must stay whole too
                    replicate.add((i, loop.out))
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


def assign(flow: DimFlow, in_axes: Sequence[Sequence[Axes]], axis_sizes: dict, even: bool = True) -> Sharding:
    """Split factors from the mesh axes sharding each input dim (``in_axes[i][d]``): inputs in
    order, dims in order, the first sharding seen for a factor wins; a factor is split only when
    each of its sizes divides by the axes' device count, no other factor uses those axes and no
    node needs it whole (``dropped`` says why a sharding was not kept: XLA or DTensor gathers
    that dim of that input). ``even=False`` lets a factor of one size split into unequal blocks
    (DTensor's uneven shards): the caller has checked its reductions are exact on them."""
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
                   f"size {fac.sizes} does not divide by {n} devices"
                   if any(s % n for s in fac.sizes) and (even or len(fac.sizes) > 1) else None)
            if why:
                dropped.append(f"input {names[i]!r} dim {d} over {axes}: {why}")
                continue
            chosen[f] = axes
            used.update(axes)
    per = lambda dims: tuple(chosen.get(f, ()) for f in dims)  # noqa: E731
    return Sharding(chosen, tuple(map(per, flow.inputs)), tuple(map(per, flow.outputs)), tuple(dropped))
