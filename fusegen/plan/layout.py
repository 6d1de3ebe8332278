"""Run-time layouts: what a Plan's index maps evaluate to once shapes are known, which stages
fuse, and the canonical loop nest of each fused group (the Python twin of the emitted C++
``fg::read_strides``, ``fg::write_strides``, ``fg::collapse`` and its fusion rule).

``evaluate`` is the one place a map is evaluated in Python: NumPy-style, from the array's
C-contiguous (shape, strides, offset 0), each step transforms the view until it is indexed by
the domain; the result is ``(offset, strides over the domain's dims)``. Everything downstream
(collapsing into the canonical nest ``[O, RO, RI, I]``: outer kept dims, outer reduced dims, the
innermost reduced dim, the innermost kept dim; stride classes; tiles; split reductions) consumes
only offsets and strides, so it serves every map kind that evaluates to strides.

Consecutive stages with the same domain whose reads of the group's results are aligned (read at
exactly the index where they were written) are *fused*: they run one after another on the same
tile, so a softmax reads its row from memory once. Otherwise stages run one after another over
their whole domains: slower, never wrong.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ShapeError
from ..ir import UNKNOWN_DIM, Op, Spec, broadcast_shapes, nodes_of
from . import views as V
from .access import Access, Broadcast, Gather, Piece, Reduced, View
from .boxrows import BoxRows, row_dims, split_rows
from .stages import Plan, Stage


def c_strides(shape: tuple[int, ...]) -> list[int]:
    """Element strides of a C-contiguous array of ``shape``."""
    st, acc = [0] * len(shape), 1
    for k in range(len(shape) - 1, -1, -1):
        st[k] = acc
        acc *= max(shape[k], 1)
    return st


def read_strides(shape: tuple[int, ...], dom: tuple[int, ...]) -> list[int]:
    """Strides of a C-contiguous ``shape`` read broadcast into ``dom`` (0 where broadcast)."""
    return list(strides_of(evaluate((Broadcast(),), V.contiguous(shape), None, dom))[1])


def write_strides(result_shape: tuple[int, ...], dom: tuple[int, ...], axes: tuple[int, ...]) -> list[int]:
    """Strides, over ``dom``, of a reduction result stored C-contiguous in ``result_shape``
    (see ``fusegen.plan.access.Reduced``)."""
    return list(strides_of(evaluate((Reduced(),), V.contiguous(result_shape), None, dom, axes))[1])


def _broadcast(v, step, spec, dom, axes):
    return V.broadcast(v, dom if step.to is None else spec.of(step.to).shape)


def _view(v, step, spec, dom, axes):
    return _VIEW_STEP[step.node.op](v, spec.of(step.node).params)


def _piece(v, step, spec, dom, axes):
    info = spec.of(step.node)
    if step.node.op is Op.CONCAT:
        axis, starts = info.params
        return V.place(v, axis, starts[step.index], info.shape[axis])
    for k, (before, _) in enumerate(info.params):  # a pad's interior: placed along every axis
        v = V.place(v, k, before, info.shape[k])
    return v


def _reduced(v, step, spec, dom, axes):
    # The result's dims other than 1 are ``dom``'s unreduced dims other than 1, in order, however
    # the size-1 dims sit, so pairing those two lists is the whole rule.
    big = [a.sub[0][1] for a in v.dims if a.extent != 1]
    strides = [0 if k in axes or dom[k] == 1 else big.pop(0) for k in range(len(dom))]
    return V.View([V.Axis([(e, st)]) for e, st in zip(dom, strides)], v.offset)


_VIEW_STEP = {
    Op.PERMUTE: V.permute, Op.INDEX: V.index, Op.RESHAPE: V.reshape, Op.BROADCAST_TO: V.broadcast,
    Op.FLIP: V.flip,
}

def _gather(v, step, spec, dom, axes):
    """A gather's sources carried to its result's shape (``fusegen.plan.access.Gather``)."""
    n = step.node
    info = spec.of(n)
    a = info.params[0]
    if n.arg.kind == "take":
        ishape = spec.of(n.srcs[1]).shape
        if step.index == 0:
            dims = v.dims[:a] + [V.Axis([(e, 0)]) for e in ishape] + v.dims[a + 1:]
            return V.View(dims, v.offset, v.inner, v.active)
        pre, post = a, len(info.shape) - a - len(ishape)
        v = V.broadcast(v, ishape)
        dims = [V.Axis([(e, 0)]) for e in info.shape[:pre]] + v.dims + \
            [V.Axis([(e, 0)]) for e in info.shape[len(info.shape) - post:]]
        return V.View(dims, v.offset, v.inner, v.active)
    if step.index == 0:   # take_along_axis: x's axis becomes a size-1 dim, then both broadcast
        v = V.View(v.dims[:a] + [V.Axis([(1, 0)])] + v.dims[a + 1:], v.offset, v.inner, v.active)
    return V.broadcast(v, info.shape)


def gather_stride(a: Access, k: int, spec: Spec, dom, axes) -> int:
    """The element stride of the gathered axis of the array read by ``a`` at its ``k``-th step
    (a ``Gather`` step with index 0): the data-dependent term of its address is index * stride."""
    step = a.steps[k]
    v = evaluate(a.steps[:k], V.contiguous(spec.of(a.node).shape), spec, dom, axes)
    ax = v.dims[spec.of(step.node).params[0]]
    digits = [d for d in ax.sub if d[0] != 1]
    if v.inner is not None or len(digits) > 1 or ax.hi is not None:
        raise V.MapError("FG_ERR_VIEW_PARAM", "a gather from a reshaped or piecewise view is not supported: "
                         "gather from the array itself")
    return digits[0][1] if digits else 0


#: How each kind of map step carries a view (``fusegen.plan.views``) toward the domain. A new
#: kind of index map is a new step class and one row here.
STEP_RULES = {Broadcast: _broadcast, View: _view, Piece: _piece, Reduced: _reduced, Gather: _gather}


def evaluate(steps: tuple, v: V.View, spec: Spec | None, dom: tuple[int, ...], axes: tuple[int, ...] = ()
             ) -> V.View:
    """The view ``v`` (an array's, or an iota's) carried through map ``steps`` up to a loop over
    ``dom`` (reducing ``axes``)."""
    for step in steps:
        v = STEP_RULES[type(step)](v, step, spec, dom, axes)
    return v


def access_view(a: Access, spec: Spec, dom: tuple[int, ...], axes: tuple[int, ...],
                own: tuple[int, ...] | None = None) -> V.View:
    """Access ``a`` for the signature ``spec``, evaluated over ``dom`` (reducing ``axes``). With
    ``own``: ``a`` belongs to an elementwise stage whose domain is ``own``, run over ``dom`` (the
    same elements in C order, ``regroup``), so its view over ``own`` is reshaped to ``dom``."""
    if own is not None and own != dom:
        return V.reshape(access_view(a, spec, own, ()), dom)
    start = dom if a.steps == () else spec.of(a.node).shape
    return evaluate(a.steps, V.contiguous(start), spec, dom, axes)


def access_layout(a: Access, spec: Spec, dom: tuple[int, ...], axes: tuple[int, ...]):
    """``(offset, strides over dom)`` of a strided access (None for a modular one)."""
    return strides_of(access_view(a, spec, dom, axes))


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
    """One loop nest to run: a fused group of stages over one box of its (refined) domain."""

    stages: tuple[int, ...]          # stage indices fused in this group
    dom: tuple[int, ...]             # the box's extents over the refined domain dims
    axes: tuple[int, ...]            # the reduced ones among them
    operands: list[tuple]            # per operand: its key, the slot ("in", i) | ("out", k) | ("buf", b) |
                                     # ("iota", node) of the first access, the slot + (n,) for another map
    layout: Layout
    offsets: list[int]               # per operand: the element offset (or iota value) at the box's start
    operand_of: dict = None          # (slot, steps) of every access -> its operand key
    inners: list = None              # per operand: a modular map's digits (views.Inner), else None
    active: list = None              # per operand: read in this box (a piece's operands only in its own)
    variant: dict = None             # (piecewise node, context) -> the piece active in this box (None: constant)
    box: tuple = ()                  # the box's (lo, hi) per domain dim; () for the whole domain

    def slot(self, k: int) -> tuple:
        """The array operand ``k`` reads or writes (its key without a map number)."""
        key = self.operands[k]
        return key[:2]


def stage_domain(spec: Spec, stage: Stage) -> tuple[int, ...]:
    shapes = [spec.of(l).shape for l in stage.leaves]
    return broadcast_shapes(shapes, lambda m: (_ for _ in ()).throw(ShapeError(m)))


def schedule(plan: Plan, spec: Spec, regroup: bool = False, rows: bool = False) -> list:
    """Group the plan's stages for concrete shapes and compute each group's layout: one
    ``GroupRun`` per box where pieces cut the domain, else one per group. With ``regroup``, an
    elementwise stage over another domain of as many elements may join the group before it by
    running over that group's domain (``regroup_ok``): a group norm's output, over (N, C, H, W),
    joins its statistics over (N, groups, C/groups * H * W), so a group is read while in cache.
    With ``rows``, an elementwise group's boxes may come as one ``BoxRows`` (``plan.boxrows``)."""
    groups: list[dict] = []
    for st in plan.stages:
        dom = stage_domain(spec, st)
        if dom is None or UNKNOWN_DIM in dom:
            raise ShapeError(f"op {plan.opdef.name}: shapes must be known to run (got {dom})")
        axes = spec.of(st.reductions[0]).axes if st.reductions else None

        def joins(g, st=st, dom=dom, axes=axes):
            return g["dom"] == dom and (axes is None or axes == g["axes"]) and _aligned(spec, st, g, dom) \
                and not _cuts_reduction(st, g)
        if groups and joins(groups[-1]):
            groups[-1]["stages"].append(st)
            continue
        if regroup and groups and regroup_ok(st, groups[-1], dom) and _strided_over(spec, st, groups[-1]["dom"], dom) \
                and _aligned(spec, st, groups[-1], groups[-1]["dom"], dom):
            groups[-1]["stages"].append(st)
            groups[-1].setdefault("own", {})[st.index] = dom
            continue
        g = _earlier_group(groups, st, joins)
        if g is not None:
            g["stages"].append(st)
            continue
        groups.append(dict(stages=[st], dom=dom, axes=axes if axes is not None else ()))
    if any("own" in g for g in groups):
        try:
            return [run for g in groups for run in _group_runs(spec, g, rows)]
        except V.MapError:   # (the operands' groupings of a dim do not nest: each stage its own domain)
            return schedule(plan, spec, rows=rows)
    return [run for g in groups for run in _group_runs(spec, g, rows)]


def _cuts_reduction(st: Stage, g: dict) -> bool:
    """Whether ``st`` joining group ``g`` would put a reduction and a piecewise operand (concat,
    pad, stack) in one loop nest. Pieces cut the group's domain into boxes, one loop per box, and
    a reduction run box by box would keep only its last box's partial result: ``sum(z, axis=0)``
    beside ``pad(x, ((1, 0), (0, 0)))`` over the same (3, 3) domain summed rows 1-2 only."""
    stages = g["stages"] + [st]
    return any(s.reductions for s in stages) and any(s.instances for s in stages)


def _strided_over(spec: Spec, st: Stage, dom, own) -> bool:
    """Every access of stage ``st`` (domain ``own``) stays strided over ``dom``: no modular map."""
    try:
        return all(access_view(a, spec, dom, (), own).inner is None for a in st.reads + st.stores)
    except V.MapError:
        return False


def _earlier_group(groups: list[dict], st: Stage, joins) -> dict | None:
    """An earlier group stage ``st`` may join, running before the groups after it: ``st`` only
    fills workspaces (nothing it writes is an output, which in-place calls may share with an
    input that those groups read) and reads nothing they write. Cross-entropy's exp-sum so
    joins its max past the small stage that gathers the label's logit: one pass over the
    logits, not two."""
    if st.is_scan or any(a.slot[0] != "buf" for a in st.stores):
        return None
    reads = {a.slot for a in st.reads}
    for k in range(len(groups) - 2, -1, -1):
        between = groups[k + 1]["stages"]
        if any(a.slot in reads for s in between for a in s.stores):
            return None
        g = groups[k]
        if not any(s.is_scan for s in g["stages"]) and joins(g):
            return g
    return None


def strides_of(v: V.View) -> tuple:
    """A single-digit view's (offset, strides), size-1 dims' strides made 0 (they are never
    stepped, and broadcasting and slicing leave different values there)."""
    if v.inner is not None or any(len([d for d in a.sub if d[0] != 1]) > 1 for a in v.dims):
        return None
    return v.offset, tuple(0 if a.extent == 1 else [d for d in a.sub if d[0] != 1][0][1] for a in v.dims)


def regroup_ok(st: Stage, g: dict, dom) -> bool:
    """Whether elementwise stage ``st`` over ``dom`` may run over group ``g``'s other domain of as
    many elements (then ``_aligned`` decides on the maps): no reduction, piece, gather, iota or
    random number in it (their loops are laid out by the stage's own domain), and the group no
    scan (a scan's results are not workspaces read per element)."""
    if st.reductions or st.instances or g["dom"] == dom or _prod(g["dom"]) != _prod(dom):
        return False
    if any(s.is_scan for s in g["stages"]) or any(a.slot[0] == "iota" for a in st.reads):
        return False
    return not any(n.op in (Op.GATHER, Op.RANDOM) for n in nodes_of([n for _, n in st.writes]))


def _aligned(spec: Spec, st: Stage, g: dict, dom, own=None) -> bool:
    """A stage may join a group if every workspace it reads that the group writes is read
    at exactly the index where it was written (keep_dims, or leading reduced axes); ``own``:
    the stage's own domain where it runs over the group's (``regroup_ok``)."""
    written = {a.slot: a for s in g["stages"] for a in s.stores if a.slot[0] == "buf"}
    for a in st.reads:
        w = written.get(a.slot)
        if w is None:
            continue
        r, wv = access_view(a, spec, dom, g["axes"], own), access_view(w, spec, dom, g["axes"])
        if r.inner is not None or strides_of(r) is None or strides_of(r) != strides_of(wv):
            return False
    return True


def _group_runs(spec: Spec, g: dict, rows: bool = False) -> list:
    dom, axes = g["dom"], g["axes"]
    keys: list[tuple] = []
    views: list[V.View] = []
    operand_of: dict = {}
    own = g.get("own", {})
    for st in g["stages"]:
        for a in st.reads + st.stores:
            v = access_view(a, spec, dom, axes, own.get(st.index))
            k = next((i for i, (key, w) in enumerate(zip(keys, views))
                      if key[:2] == a.slot and v.inner is None and w.inner is None
                      and strides_of(v) is not None and strides_of(v) == strides_of(w)
                      and _active_same(v, w)), None)
            if k is None:
                n = sum(1 for key in keys if key[:2] == a.slot)
                keys.append(a.slot if n == 0 else a.slot + (n,))
                views.append(v)
                k = len(keys) - 1
            operand_of[(a.slot, a.steps)] = keys[k]
    probes, instances = [], []
    for st in g["stages"]:
        for inst, piece_steps in st.instances:
            instances.append((inst, len(probes), len(piece_steps)))
            for p, steps in enumerate(piece_steps):
                start = inst[0].srcs[p]
                probes.append(evaluate(steps, V.contiguous(spec.of(start).shape), spec, dom, axes))
    nest = V.refine(views + probes, dom)
    reduced = tuple(j for j, o in enumerate(nest.origin) if o in axes)
    nops = len(views)
    runs = []
    boxes = V.boxes(nest, dom)
    # rows: the leading refined dims a backend runs outside the boxes (``plan.boxrows``)
    jk = split_rows(nest, row_dims(g["stages"], boxes, dom, axes, nest.inners[:nops])) if rows else 0
    for ranges, active in boxes:
        ext, offs = V.box_layout(nest, ranges)
        variant = {}
        for inst, first, count in instances:
            on = [p for p in range(count) if active[nops + first + p]]
            variant[inst] = on[0] if on else None
        lay = collapse(tuple(ext[jk:]), tuple(j - jk for j in reduced), [list(s[jk:]) for s in nest.strides[:nops]])
        runs.append(GroupRun(tuple(s.index for s in g["stages"]), tuple(ext[jk:]), reduced, keys, lay, offs[:nops],
                             operand_of, nest.inners[:nops], active[:nops], variant,
                             tuple(ranges) if len(boxes) > 1 else ()))
    if jk:
        return [BoxRows(runs[0].stages, tuple(nest.extents[:jk]), [list(s[:jk]) for s in nest.strides[:nops]],
                        runs, keys)]
    return runs


def _active_same(v: V.View, w: V.View) -> bool:
    return all((a.lo, a.hi) == (b.lo, b.hi) for a, b in zip(v.dims, w.dims)) and v.active == w.active
