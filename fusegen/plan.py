"""Graph -> Plan: the schedule every backend shares.

A Plan is rank-agnostic (it is decided before shapes are known, so an emitted AOT
kernel can carry it). It is a list of *stages*; each stage is one loop nest over
one iteration *domain* (the broadcast shape of the stage's leaf tensors):

* a reduction stage computes one or more reductions that share domain, axes and
  dependency level (e.g. ``max`` and ``min`` of the same ``x``), plus *finals*:
  elementwise outputs computed from its results alone (layer_norm's ``rstd``);
* an elementwise stage writes outputs that share the same leaves (hence shape).

Elementwise nodes are recomputed inline wherever they are consumed; only a
reduction result that a later stage reads is kept, in a declared workspace.

At run time (``layout``, mirrored in the emitted C++), each stage's domain is
collapsed to the canonical nest ``[O, RO, RI, I]`` (outer kept dims, outer reduced
dims, the innermost reduced dim, the innermost kept dim) and consecutive stages
with the same domain and aligned reads are *fused*: they run one after another on
the same tile, so a softmax reads its row from DRAM once. When fusion is not
possible the stages run one after another over their whole domains: slower, never
wrong.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from .ir import AttrRef, Node, Op, OpDef, ShapeOf, Spec, UNKNOWN_DIM, value_srcs
from .errors import ShapeError


@dataclass(frozen=True)
class Stage:
    index: int
    level: int
    leaves: tuple[Node, ...]           # INPUT and REDUCE nodes whose broadcast is the domain
    axes: tuple[int, ...] | AttrRef | None | str  # reduction axes spec; "elementwise" for none
    reductions: tuple[Node, ...] = ()  # computed here
    writes: tuple[tuple[int, Node], ...] = ()   # (output index, node) written over the domain
    finals: tuple[tuple[int, Node], ...] = ()   # (output index, node) written per reduced index

    @property
    def is_reduction(self) -> bool:
        return bool(self.reductions)


@dataclass(frozen=True)
class Plan:
    opdef: OpDef
    stages: tuple[Stage, ...]
    buffers: tuple[Node, ...]          # reductions read by later stages: workspaces (acc dtype)
    reduce_outputs: dict               # id(reduction node) -> output indices it is written to

    def buffer_index(self, node: Node) -> int:
        return next(i for i, b in enumerate(self.buffers) if b is node)

    def stage_of(self, node: Node) -> Stage:
        return next(s for s in self.stages if any(r is node for r in s.reductions))


def leaves_of(node: Node) -> tuple[Node, ...]:
    """The INPUT and REDUCE nodes an elementwise expression reads (REDUCE nodes are opaque)."""
    out: dict[int, Node] = {}
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if n.op in (Op.INPUT, Op.REDUCE):
            out[id(n)] = n
        else:
            stack.extend(value_srcs(n))
    return tuple(sorted(out.values(), key=_leaf_key))


def _leaf_key(n: Node):
    return (0, n.arg) if n.op is Op.INPUT else (1, stable_key(n))


_STABLE: dict[Node, str] = {}


def stable_key(node: Node) -> str:
    """A digest of a node's structure that is the same in every process. ``hash(node)`` is not
    (it mixes in string hashes, salted per process), and leaf order decides the generated
    source, hence the disk cache's key: ordering by it recompiled in half the processes."""
    if node in _STABLE:
        return _STABLE[node]
    if len(_STABLE) > 1 << 16:  # a bound for long-lived processes that trace many ops
        _STABLE.clear()
    stack = [node]
    while stack:  # post-order without recursion: graphs may be deep chains
        n = stack[-1]
        todo = [s for s in n.srcs if s not in _STABLE]
        if todo:
            stack.extend(todo)
            continue
        stack.pop()
        h = hashlib.sha1(f"{n.op.value}|{n.arg!r}".encode())
        for s in n.srcs:
            h.update(_STABLE[s].encode())
        _STABLE[n] = h.hexdigest()
    return _STABLE[node]


def computed_nodes(g) -> set[int]:
    """ids of the nodes whose values the outputs need: shape-only sources (``value_srcs``)
    and shape checks are measured, never computed."""
    seen: set[int] = set()
    stack = list(g.outputs)
    while stack:
        n = stack.pop()
        if id(n) not in seen:
            seen.add(id(n))
            stack.extend(value_srcs(n))
    return seen


def _stage_key(r: Node):
    """What reductions must share to share a loop: the axes spec, and for a ``ShapeOf``
    spec also the node whose shape decides the axes."""
    return (r.arg.axes, tuple(map(id, r.srcs[1:]))) if isinstance(r.arg.axes, ShapeOf) else r.arg.axes


def build_plan(opdef: OpDef) -> Plan:
    g = opdef.graph
    level: dict[int, int] = {}
    computed = computed_nodes(g)
    reductions = [n for n in g.nodes if n.op is Op.REDUCE and id(n) in computed]
    for r in reductions:  # topological order: a reduction's sources are levelled first
        deps = [level[id(l)] for l in leaves_of(r.srcs[0]) if l.op is Op.REDUCE]
        level[id(r)] = 1 + max(deps, default=0)

    # Reductions that share (level, leaves, axes spec) share a stage, hence one loop.
    groups: dict[tuple, list[Node]] = {}
    for r in reductions:
        key = (level[id(r)], tuple(id(l) for l in leaves_of(r.srcs[0])), _stage_key(r))
        groups.setdefault(key, []).append(r)
    stages: list[dict] = []
    for (lvl, _, _), rs in groups.items():
        leaves = leaves_of(rs[0].srcs[0])
        if isinstance(rs[0].arg.axes, ShapeOf) and rs[0].arg.axes.rule == "broadcast":
            # sum_to's loop spans like's (and the span's) shapes: measured, not read
            leaves += tuple(n for i, n in enumerate(rs[0].srcs[1:], 1)
                            if all(n is not m for m in leaves + rs[0].srcs[1:i]))
        stages.append(dict(level=lvl, leaves=leaves, axes=rs[0].arg.axes, reductions=tuple(rs),
                           writes=[], finals=[]))

    reduce_outputs: dict[int, list[int]] = {}
    ew_groups: dict[tuple, dict] = {}
    for k, o in enumerate(g.outputs):
        if o.op is Op.REDUCE:
            reduce_outputs.setdefault(id(o), []).append(k)
            continue
        lv = leaves_of(o)
        # An output computed only from one stage's reductions (same keep_dims, so one
        # shape) is finished in that stage's epilogue instead of a pass of its own.
        owners = {id(_stage_for(stages, l)) for l in lv if l.op is Op.REDUCE}
        if lv and all(l.op is Op.REDUCE for l in lv) and len(owners) == 1 and \
                len({repr(l.arg.keep_dims) for l in lv}) == 1:
            _stage_for(stages, lv[0])["finals"].append((k, o))
            continue
        key = tuple(id(l) for l in lv)
        if key not in ew_groups:
            lvl = 1 + max((level[id(l)] for l in lv if l.op is Op.REDUCE), default=0)
            ew_groups[key] = dict(level=lvl, leaves=lv, axes="elementwise", reductions=(), writes=[], finals=[])
            stages.append(ew_groups[key])
        ew_groups[key]["writes"].append((k, o))

    stages.sort(key=lambda s: (s["level"], not s["reductions"]))
    final = tuple(Stage(i, s["level"], s["leaves"], s["axes"], s["reductions"], tuple(s["writes"]),
                        tuple(s["finals"])) for i, s in enumerate(stages))
    # A reduction gets a workspace when a later stage reads it (outputs are written directly).
    read_later = []
    for s in final:
        exprs = [r.srcs[0] for r in s.reductions] + [n for _, n in s.writes]
        for e in exprs:
            for l in leaves_of(e):
                if l.op is Op.REDUCE and all(l is not b for b in read_later):
                    read_later.append(l)
    return Plan(opdef, final, tuple(read_later), {k: tuple(v) for k, v in reduce_outputs.items()})


def _stage_for(stages: list[dict], r: Node) -> dict:
    return next(s for s in stages if any(x is r for x in s["reductions"]))


# ---------------------------------------------------------------------------------------------
# Run-time layout (the Python twin of the emitted C++ ``fg_layout``)
# ---------------------------------------------------------------------------------------------
def c_strides(shape: tuple[int, ...]) -> list[int]:
    """Element strides of a C-contiguous array of ``shape``."""
    st, acc = [0] * len(shape), 1
    for k in range(len(shape) - 1, -1, -1):
        st[k] = acc
        acc *= max(shape[k], 1)
    return st


def read_strides(shape: tuple[int, ...], dom: tuple[int, ...]) -> list[int]:
    """Strides of a C-contiguous ``shape`` read broadcast into ``dom`` (0 where broadcast)."""
    st = c_strides(shape)
    off = len(dom) - len(shape)
    return [0 if k < off or shape[k - off] == 1 else st[k - off] for k in range(len(dom))]


def write_strides(result_shape: tuple[int, ...], dom: tuple[int, ...], axes: tuple[int, ...]) -> list[int]:
    """Strides, over ``dom``, of a reduction result stored C-contiguous in ``result_shape``.

    The result's dims other than 1 are ``dom``'s unreduced dims other than 1, in order,
    however the size-1 dims sit (kept, dropped, missing in front as for ``sum_to``, or put
    back as for ``unreduce``), so pairing those two lists is the whole rule."""
    st = c_strides(result_shape)
    big = [st[j] for j, d in enumerate(result_shape) if d != 1]
    out = []
    for k in range(len(dom)):
        out.append(0 if k in axes or dom[k] == 1 else big.pop(0))
    return out


@dataclass
class Layout:
    """One fused group's canonical loop nest and every operand's strides in it."""

    o_ext: list[int]
    ro_ext: list[int]
    ri: int
    inner: int
    o_str: list[list[int]]   # per operand, per O dim
    ro_str: list[list[int]]  # per operand, per RO dim
    ri_str: list[int]
    i_str: list[int]

    @property
    def o_total(self) -> int:
        return _prod(self.o_ext)

    @property
    def ro_total(self) -> int:
        return _prod(self.ro_ext)


def _prod(xs) -> int:
    p = 1
    for x in xs:
        p *= x
    return p


def collapse(dom: tuple[int, ...], reduced: tuple[int, ...], strides: list[list[int]]) -> Layout:
    """Drop size-1 dims, merge adjacent dims that stay affine for every operand, then
    split the result into the canonical ``[O, RO, RI, I]`` nest."""
    dims = [(dom[k], k in reduced, [s[k] for s in strides]) for k in range(len(dom)) if dom[k] != 1]
    merged: list[tuple[int, bool, list[int]]] = []
    for ext, red, st in dims:
        if merged:
            pext, pred, pst = merged[-1]
            if pred == red and all(pst[j] == st[j] * ext for j in range(len(st))):
                merged[-1] = (pext * ext, red, st)
                continue
        merged.append((ext, red, list(st)))
    nops = len(strides)
    inner, i_str = 1, [0] * nops
    if merged and not merged[-1][1]:
        inner, _, i_str = merged.pop()
    red_dims = [d for d in merged if d[1]]
    ri, ri_str = 1, [0] * nops
    if red_dims:
        last = red_dims[-1]
        ri, ri_str = last[0], last[2]
        merged = [d for d in merged if d is not last]
    o = [d for d in merged if not d[1]]
    ro = [d for d in merged if d[1]]
    return Layout([d[0] for d in o], [d[0] for d in ro], ri, inner,
                  [[d[2][j] for d in o] for j in range(nops)], [[d[2][j] for d in ro] for j in range(nops)],
                  list(ri_str), list(i_str))


@dataclass
class GroupRun:
    stages: tuple[int, ...]          # stage indices fused in this group
    dom: tuple[int, ...]
    axes: tuple[int, ...]
    operands: list[tuple]            # ("in", i) | ("out", k) | ("buf", b): arrays the group touches
    layout: Layout


def stage_domain(spec: Spec, stage: Stage) -> tuple[int, ...]:
    from .ir import broadcast_shapes
    shapes = [spec.of(l).shape for l in stage.leaves]
    return broadcast_shapes(shapes, lambda m: (_ for _ in ()).throw(ShapeError(m)))


def schedule(plan: Plan, spec: Spec) -> list[GroupRun]:
    """Group the plan's stages for concrete shapes and compute each group's layout."""
    groups: list[dict] = []
    for st in plan.stages:
        dom = stage_domain(spec, st)
        if dom is None or UNKNOWN_DIM in dom:
            raise ShapeError(f"op {plan.opdef.name}: shapes must be known to run (got {dom})")
        axes = spec.of(st.reductions[0]).axes if st.reductions else None
        g = groups[-1] if groups else None
        if g is not None and g["dom"] == dom and (axes is None or axes == g["axes"]) \
                and _aligned(plan, spec, st, g, dom):
            g["stages"].append(st)
            continue
        groups.append(dict(stages=[st], dom=dom, axes=axes if axes is not None else ()))
    return [_group_run(plan, spec, g) for g in groups]


def _reads(st: Stage) -> list[Node]:
    exprs = [r.srcs[0] for r in st.reductions] + [n for _, n in st.writes]
    seen: dict[int, Node] = {}
    for e in exprs:
        for l in leaves_of(e):
            seen[id(l)] = l
    return list(seen.values())


def _aligned(plan: Plan, spec: Spec, st: Stage, g: dict, dom) -> bool:
    """A stage may join a group if every buffer it reads that the group writes is read
    at exactly the index where it was written (keep_dims, or leading reduced axes)."""
    written = {id(r) for s in g["stages"] for r in s.reductions}
    for l in _reads(st):
        if l.op is Op.REDUCE and id(l) in written:
            info = spec.of(l)
            if read_strides(info.shape, dom) != write_strides(info.shape, dom, g["axes"]):
                return False
    return True


def _group_run(plan: Plan, spec: Spec, g: dict) -> GroupRun:
    dom, axes = g["dom"], g["axes"]
    operands: list[tuple] = []
    strides: list[list[int]] = []

    def add(key, st):
        if key not in operands:
            operands.append(key)
            strides.append(st)

    for st in g["stages"]:
        for l in _reads(st):
            if l.op is Op.INPUT:
                add(("in", l.arg), read_strides(spec.of(l).shape, dom))
            else:
                add(("buf", plan.buffer_index(l)), read_strides(spec.of(l).shape, dom))
        for r in st.reductions:
            info = spec.of(r)
            w = write_strides(info.shape, dom, axes)
            for k in plan.reduce_outputs.get(id(r), ()):
                add(("out", k), w)
            if any(r is b for b in plan.buffers):
                add(("buf", plan.buffer_index(r)), w)
        for k, n in st.finals:
            add(("out", k), write_strides(spec.of(n).shape, dom, axes))
        for k, n in st.writes:
            add(("out", k), c_strides(dom))
    lay = collapse(dom, axes, strides)
    return GroupRun(tuple(s.index for s in g["stages"]), dom, axes, operands, lay)
