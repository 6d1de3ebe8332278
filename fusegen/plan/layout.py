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
from ..ir import UNKNOWN_DIM, Spec, broadcast_shapes
from .access import Access, Broadcast, Reduced
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
    return evaluate((Broadcast(),), shape, dom)[1]


def write_strides(result_shape: tuple[int, ...], dom: tuple[int, ...], axes: tuple[int, ...]) -> list[int]:
    """Strides, over ``dom``, of a reduction result stored C-contiguous in ``result_shape``
    (see ``fusegen.plan.access.Reduced``)."""
    return evaluate((Reduced(),), result_shape, dom, axes)[1]


def _broadcast(shape, strides, offset, dom, axes):
    off = len(dom) - len(shape)
    return dom, [0 if k < off or shape[k - off] == 1 else strides[k - off] for k in range(len(dom))], offset


def _reduced(shape, strides, offset, dom, axes):
    # The result's dims other than 1 are ``dom``'s unreduced dims other than 1, in order, however
    # the size-1 dims sit, so pairing those two lists is the whole rule.
    big = [strides[j] for j, d in enumerate(shape) if d != 1]
    return dom, [0 if k in axes or dom[k] == 1 else big.pop(0) for k in range(len(dom))], offset


#: How each kind of map step transforms a view (shape, strides, offset) given the domain and the
#: reduced axes. A new kind of index map is a new step class and one row here.
STEP_RULES = {Broadcast: _broadcast, Reduced: _reduced}


def evaluate(steps: tuple, shape: tuple[int, ...], dom: tuple[int, ...], axes: tuple[int, ...] = ()
             ) -> tuple[int, list[int]]:
    """``(offset, strides over dom)`` of a C-contiguous array of ``shape`` read or written through
    the index map ``steps`` by a loop over ``dom`` (reducing ``axes``)."""
    view, strides, offset = tuple(shape), c_strides(shape), 0
    for step in steps:
        view, strides, offset = STEP_RULES[type(step)](view, strides, offset, dom, axes)
    return offset, strides


def access_layout(a: Access, spec: Spec, dom: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, list[int]]:
    """Where access ``a`` lands for the signature ``spec``: its map evaluated over ``dom``."""
    return evaluate(a.steps, spec.of(a.node).shape, dom, axes)


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
    offsets: list[int]               # per operand: the element offset its map evaluated to (0 today)


def stage_domain(spec: Spec, stage: Stage) -> tuple[int, ...]:
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
                and _aligned(spec, st, g, dom):
            g["stages"].append(st)
            continue
        groups.append(dict(stages=[st], dom=dom, axes=axes if axes is not None else ()))
    return [_group_run(spec, g) for g in groups]


def _aligned(spec: Spec, st: Stage, g: dict, dom) -> bool:
    """A stage may join a group if every workspace it reads that the group writes is read
    at exactly the index where it was written (keep_dims, or leading reduced axes)."""
    written = {a.slot: a for s in g["stages"] for a in s.stores if a.slot[0] == "buf"}
    for a in st.reads:
        w = written.get(a.slot)
        if w is not None and access_layout(a, spec, dom, g["axes"]) != access_layout(w, spec, dom, g["axes"]):
            return False
    return True


def _group_run(spec: Spec, g: dict) -> GroupRun:
    dom, axes = g["dom"], g["axes"]
    operands: list[tuple] = []
    strides: list[list[int]] = []
    offsets: list[int] = []
    for st in g["stages"]:
        for a in st.reads + st.stores:
            if a.slot not in operands:  # the first access decides (a result written, then read back)
                offset, st_ = access_layout(a, spec, dom, axes)
                operands.append(a.slot)
                strides.append(st_)
                offsets.append(offset)
    lay = collapse(dom, axes, strides)
    return GroupRun(tuple(s.index for s in g["stages"]), dom, axes, operands, lay, offsets)
