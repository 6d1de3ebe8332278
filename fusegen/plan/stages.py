"""Graph -> Plan: the schedule every backend shares.

A Plan is rank-agnostic (it is decided before shapes are known, so an emitted AOT kernel can
carry it). It is a list of *stages*; each stage is one loop nest over one iteration *domain*
(the broadcast shape of the stage's leaf tensors):

* a reduction stage computes one or more reductions that share domain, axes and dependency
  level (e.g. ``max`` and ``min`` of the same ``x``), plus *finals*: elementwise outputs
  computed from its results alone (layer_norm's ``rstd``);
* a scan stage computes one or more scans (``fusegen.graph.scans``) that share domain, axis and
  level: a reduction stage whose accumulators are stored at every step of the scanned axis, so
  its results have the domain's shape (stored through the identity map, never "reduced");
* an elementwise stage writes outputs that share the same leaves (hence shape).

Elementwise nodes are recomputed inline wherever they are consumed; only a reduction result
that a later stage reads is kept, in a declared workspace. Every array a stage touches is an
``Access`` (``fusegen.plan.access``): ``Stage.reads`` and ``Stage.stores``, each with its index
map; ``print(plan)`` shows them. How stages fuse and what the maps evaluate to once shapes are
known is ``fusegen.plan.layout``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..ir import PIECEWISE, VIEWS, AttrRef, Node, Op, OpDef, ShapeOf, computed_nodes, leaves_of, nodes_of, shape_atoms
from ..graph.scans import composed, has_scans
from .access import REDUCED, Access, slot_name
from .paths import is_param, stage_reads
from .shared import shared_values
from .splits import stage_splits


@dataclass(frozen=True)
class Stage:
    index: int
    level: int
    leaves: tuple[Node, ...]           # the nodes whose shapes broadcast to the domain (``shape_atoms``)
    axes: tuple[int, ...] | AttrRef | None | str  # reduction axes spec; "elementwise" for none
    reductions: tuple[Node, ...] = ()  # computed here
    writes: tuple[tuple[int, Node], ...] = ()   # (output index, node) written over the domain
    finals: tuple[tuple[int, Node], ...] = ()   # (output index, node) written per reduced index
    reads: tuple[Access, ...] = ()     # the arrays the loop body loads (inputs, workspaces, iotas)
    stores: tuple[Access, ...] = ()    # where results land: reductions', then finals', then writes'
    instances: tuple = ()              # piecewise nodes read in a view context: ((node, ctx), piece probes)
    params: tuple[Node, ...] = ()      # static scalars made of dims, passed to the loop body as values
    # (output index, node): an expensive value this reduction stage computes anyway, stored at
    # every index of the domain into that output's array for a later stage (``plan.shared``)
    keeps: tuple[tuple[int, Node], ...] = ()
    kept: tuple[tuple[int, Node], ...] = ()  # (output index, node): read back from there, not recomputed

    @property
    def is_reduction(self) -> bool:
        return bool(self.reductions)

    @property
    def is_scan(self) -> bool:
        return bool(self.reductions) and self.reductions[0].arg.scan


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

    def text(self) -> str:
        """Every stage with what it computes and the arrays it reads and stores, each with its map."""
        g = self.opdef.graph

        def node(n: Node) -> str:
            return f"%{g.idx(n)}"

        ws = ", ".join(f"ws{i} = {node(b)} ({b.arg.kind})" for i, b in enumerate(self.buffers)) or "none"
        kept = ", ".join(f"{node(n)} ({n.op.value}) in out{k}" for st in self.stages for k, n in st.keeps)
        lines = [f"plan {self.opdef.name}: {len(self.stages)} stage(s); workspaces: {ws}"
                 + (f"; stored once: {kept}" if kept else "")]
        for st in self.stages:
            what = [f"{'scan ' if r.arg.scan else ''}{r.arg.kind} {node(r)}" for r in st.reductions]
            what += [f"output {k} = {node(n)}" for k, n in st.writes]
            what += [f"output {k} = {node(n)} from the results" for k, n in st.finals]
            what += [f"keeps {node(n)} in out{k}" for k, n in st.keeps]
            over = "" if st.axes == "elementwise" else f" over axes {st.axes!r}"
            lines.append(f"  stage {st.index} (level {st.level}){over}: {', '.join(what)}")
            for a in st.reads:
                lines.append(f"    read  {a.name:<6} {node(a.node):<5} through {a.map_text(node)}")
            for a in st.stores:
                lines.append(f"    store {a.name:<6} {node(a.node):<5} through {a.map_text(node)}")
            for sp in stage_splits(st):
                lines.append(f"    split {node(sp.where)} (where on {node(sp.a[0])} {sp.cmp.value} {node(sp.b[0])}): "
                             f"the loop runs per interval where the mask is constant, the masked branch unread")
            for (n, _), _ in st.instances:
                lines.append(f"    pieces of {node(n)} ({n.op.value}): the domain is cut where they change, "
                             f"one loop per box")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()


def read_leaves(st: Stage) -> list[Node]:
    """The INPUT, REDUCE and IOTA nodes a stage's loop body loads, in first-use order."""
    exprs = [r.srcs[0] for r in st.reductions] + [n for _, n in st.writes]
    seen: dict[int, Node] = {}
    for e in exprs:
        for l in leaves_of(e):
            seen[id(l)] = l
    return list(seen.values())


def _atoms(exprs) -> tuple[Node, ...]:
    out: dict[int, Node] = {}
    for e in exprs:
        for a in shape_atoms(e):
            out[id(a)] = a
    return tuple(out.values())


def _plain(n: Node) -> bool:
    """An expression of reduction results through elementwise ops only (a stage's final). Not
    one that reads a dim's value (``x.sum(-1) / x.shape[-1]``): an epilogue has no parameters,
    so an elementwise stage of its own reads the reduction back, with the dim as a parameter."""
    stack, seen = [n], set()
    while stack:
        m = stack.pop()
        if id(m) in seen or m.op is Op.REDUCE:
            continue
        seen.add(id(m))
        if m.op in VIEWS or m.op in PIECEWISE or m.op in (Op.IOTA, Op.GATHER) or is_param(m):
            return False
        stack.extend(m.srcs)
    return True


def _stage_key(r: Node):
    """What reductions must share to share a loop: the axes spec, and for a ``ShapeOf``
    spec also the node whose shape decides the axes."""
    if isinstance(r.arg.axes, ShapeOf):
        return (r.arg.axes, tuple(map(id, r.srcs[1:])))
    return ("scan", r.arg.axes) if r.arg.scan else r.arg.axes


def build_plan(opdef: OpDef, share: bool = True) -> Plan:
    """``share``: store expensive values a later stage needs again (``plan.shared``); the CUDA
    backends and the emitted layout path plan without it (they recompute them)."""
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
        # (the shape atoms too: leaves read through different views have different domains)
        key = (level[id(r)], tuple(id(l) for l in leaves_of(r.srcs[0])), _stage_key(r),
               tuple(id(a) for a in shape_atoms(r.srcs[0])))
        groups.setdefault(key, []).append(r)
    stages: list[dict] = []
    for (lvl, _, _, _), rs in groups.items():
        leaves = shape_atoms(rs[0].srcs[0])
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
        # (Not a scan's: its results have the domain's shape, so an elementwise stage reads them.)
        if lv and all(l.op is Op.REDUCE and not l.arg.scan for l in lv) and len(owners) == 1 and \
                len({repr(l.arg.keep_dims) for l in lv}) == 1 and _plain(o):
            _stage_for(stages, lv[0])["finals"].append((k, o))
            continue
        atoms = shape_atoms(o)
        key = tuple(id(a) for a in atoms)   # same atoms: same shape, so one loop writes them all
        if key not in ew_groups:
            lvl = 1 + max((level[id(l)] for l in lv if l.op is Op.REDUCE), default=0)
            ew_groups[key] = dict(level=lvl, leaves=atoms, axes="elementwise", reductions=(), writes=[], finals=[])
            stages.append(ew_groups[key])
        ew_groups[key]["writes"].append((k, o))

    stages.sort(key=lambda s: (s["level"], not s["reductions"]))
    _feeders_last(stages)
    if share:
        shared_values(stages)
    final = tuple(Stage(i, s["level"], s["leaves"], s["axes"], s["reductions"], tuple(s["writes"]),
                        tuple(s["finals"]), keeps=tuple(s.get("keeps", ())),
                        kept=tuple(s.get("kept", ())))
                  for i, s in enumerate(stages))
    # A reduction gets a workspace when a later stage reads it (outputs are written directly).
    read_later = []
    for s in final:
        for l in read_leaves(s):
            if l.op is Op.REDUCE and all(l is not b for b in read_later):
                read_later.append(l)
    outs = {k: tuple(v) for k, v in reduce_outputs.items()}
    final = tuple(_with_accesses(s, tuple(read_later), outs, g) for s in final)
    return Plan(opdef, final, tuple(read_later), outs)


def _with_accesses(st: Stage, buffers: tuple[Node, ...], reduce_outputs: dict, g) -> Stage:
    kept = {id(n): k for k, n in st.kept}

    def slot(n: Node) -> tuple:
        if id(n) in kept:
            return ("out", kept[id(n)])
        if n.op is Op.INPUT:
            return ("in", n.arg)
        if n.op is Op.IOTA:
            return ("iota", g.idx(n))
        return ("buf", next(i for i, b in enumerate(buffers) if b is n))

    found = stage_reads([r.srcs[0] for r in st.reductions] + [n for _, n in st.writes], stop=kept)
    reads = tuple(Access(slot(l), l, steps) for l, steps in found.accesses)
    stores = []
    for r in st.reductions:
        steps = () if r.arg.scan else (REDUCED,)   # a scan's result has the domain's shape
        stores += [Access(("out", k), r, steps) for k in reduce_outputs.get(id(r), ())]
        if any(r is b for b in buffers):
            stores.append(Access(slot(r), r, steps))
    stores += [Access(("out", k), n, (REDUCED,)) for k, n in st.finals]
    stores += [Access(("out", k), n, ()) for k, n in st.writes]
    stores += [Access(("out", k), n, ()) for k, n in st.keeps]
    return replace(st, reads=reads, stores=tuple(stores), instances=tuple(found.instances),
                   params=tuple(found.params))


def _feeders_last(stages: list[dict]) -> None:
    """Within a level (stages that do not read each other), put the reduction stages whose
    results the next level's first stage reads last, right before it (in place, the order
    otherwise kept): a row group of the emitted C++ joins consecutive stages only, so
    cross-entropy's max then runs with the exp-sum that reads it (one read of the logits), not
    apart from it across the small stage that gathers the label's logit (or, in its backward,
    unreduces the cotangent)."""
    for k in range(len(stages) - 1, 0, -1):
        nxt, lvl = stages[k], stages[k]["level"]
        if stages[k - 1]["level"] != lvl - 1 or not nxt["reductions"]:
            continue
        read = {id(l) for r in nxt["reductions"] for l in leaves_of(r.srcs[0]) if l.op is Op.REDUCE}
        start = k - 1
        while start > 0 and stages[start - 1]["level"] == lvl - 1:
            start -= 1
        level = stages[start:k]
        if any(not s["reductions"] for s in level):   # (elementwise stages run last in a level)
            continue
        feeds = [s for s in level if any(id(r) in read for r in s["reductions"])]
        stages[start:k] = [s for s in level if all(s is not f for f in feeds)] + feeds


def _stage_for(stages: list[dict], r: Node) -> dict:
    return next(s for s in stages if any(x is r for x in s["reductions"]))


def scan_form(op: OpDef) -> OpDef:
    """The op the C++/CUDA emitters (and the runtimes and bridges that host them) emit for
    ``op``: ``op`` itself, its scans run as scan stages (a carried loop: O(n) along the axis),
    unless a scan reads concat/pad pieces: the emitted layout nest cuts its domain into boxes
    where they change, and a carry does not cross boxes yet. Then the composition
    (``fusegen.graph.scans.composed``: masked reductions, O(n^2) along the axis). (A guard: the
    planner copies pieces a scan reads into a workspace first, so no plan has such a stage today.)"""
    if op.graph is None or not has_scans(op):   # (a specializing op: its specializations decide)
        return op
    if any(st.is_scan and st.instances for st in build_plan(op).stages):
        return composed(op)
    return op
