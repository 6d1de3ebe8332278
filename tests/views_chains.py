"""Random chains of view steps and their evaluation, shared by ``tests/test_views.py``
(``fusegen/plan/views.py`` against NumPy) and ``tests/test_views_cpp.py`` (the C++ twin,
``emitters/templates/_fg_views.inc.j2``, against ``fusegen/plan/views.py``).

A *case* is one to three operands read over one domain. An operand is a C-contiguous array of
``arange`` values (so an element's value is its address) read through a chain of *steps*; its
NumPy twin (``Operand.array``) applies the same steps with NumPy, filling inactive places of
concat/pad pieces with -1. The domain is the first operand's final shape; the others reach it
through a reshape, a broadcast or a piece.

* ``cases()``: the hypothesis strategy. Steps are drawn from NumPy's shapes only, so a chain
  that ``views`` cannot evaluate (a ``MapError``) is kept, and its error compared; a few chains
  end with a step whose parameters do not fit (``FG_ERR_VIEW_PARAM``).
* ``evaluate(case)``: what ``views`` makes of it (``Result``): the error, or the views, the
  nest, the boxes with their layouts and every element's address, walked box by box as a
  kernel's loop would.
* ``program(case)`` and ``encode(result, base)``: the flat int64 lists the C++ driver
  (``tests/views_driver.cc``) reads and writes.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

from fusegen.plan import views as V

STEP_KINDS = {"broadcast": 1, "permute": 2, "index": 3, "flip": 4, "place": 5, "reshape": 6}
ITEM_KINDS = {"slice": 0, "int": 1, "new": 2}


@dataclass
class Operand:
    shape: tuple[int, ...]          # the array's, C-contiguous
    steps: list[tuple]              # ("broadcast", shape), ("permute", perm), ("index", items),
                                    # ("flip", axes), ("place", axis, start, total), ("reshape", shape)
    array: np.ndarray | None        # NumPy's result (-1: inactive); None after a step that does not fit


@dataclass
class Case:
    operands: list[Operand]
    domain: tuple[int, ...]


@dataclass
class Result:
    error: tuple[str, int, int] | None = None   # (code, operand, step): step -1 is the contiguous start,
    views: list = field(default_factory=list)   # operand -1 is refine
    nest: V.Nest | None = None
    boxes: list = field(default_factory=list)   # (ranges, active, (extents, offsets) or an error code)
    addresses: np.ndarray | None = None         # (operands, domain size): -1 inactive, -2 no layout


def apply_view(v: V.View, step: tuple) -> V.View:
    kind, *args = step
    return getattr(V, kind)(v, *args)


def apply_numpy(a: np.ndarray, step: tuple) -> np.ndarray:
    kind, *args = step
    if kind == "broadcast":
        return np.broadcast_to(a, args[0])
    if kind == "permute":
        return a.transpose(args[0])
    if kind == "flip":
        return np.flip(a, args[0]) if args[0] else a
    if kind == "reshape":
        return a.reshape(args[0])
    if kind == "place":
        axis, start, total = args
        out = np.full(a.shape[:axis] + (total,) + a.shape[axis + 1:], -1, np.int64)
        idx = [slice(None)] * a.ndim
        idx[axis] = slice(start, start + a.shape[axis])
        out[tuple(idx)] = a
        return out
    items = []
    for it in args[0]:
        if it[0] == "new":
            items.append(None)
        elif it[0] == "int":
            items.append(it[1])
        else:
            _, start, step, length = it
            stop = start + step * length
            items.append(slice(start, stop if stop >= 0 else None, step) if length else slice(0, 0))
    return a[tuple(items)]


def factorizations(n: int, rank: int) -> list[tuple[int, ...]]:
    """Shapes of ``rank`` with product n (n > 0)."""
    if rank == 0:
        return [()] if n == 1 else []
    if rank == 1:
        return [(n,)]
    return [(d,) + rest for d in range(1, n + 1) if n % d == 0 for rest in factorizations(n // d, rank - 1)]


# --- the strategy ---------------------------------------------------------------------------
def _draw_steps(draw, a: np.ndarray) -> list[tuple]:
    """One step that fits ``a`` (NumPy-style parameters drawn, then normalized), or a permute and
    a reshape (the way grouped dims and modular maps arise), or nothing."""
    if a.ndim > 1 and draw(st.booleans()):
        perm = ("permute", tuple(draw(st.permutations(range(a.ndim)))))
        reshape = _draw_step(draw, a.transpose(perm[1]), "reshape")
        return [perm, reshape] if reshape else [perm]
    step = _draw_step(draw, a, draw(st.sampled_from(["broadcast", "permute", "index", "reshape", "reshape", "flip",
                                                     "place"])))
    return [step] if step else []


def _draw_step(draw, a: np.ndarray, kind: str) -> tuple | None:
    r = a.ndim
    if kind == "broadcast":
        lead = draw(st.lists(st.integers(1, 3), max_size=2))
        tail = [draw(st.integers(1, 3)) if d == 1 else d for d in a.shape]
        return ("broadcast", tuple(lead) + tuple(tail))
    if kind == "permute":
        return ("permute", tuple(draw(st.permutations(range(r)))))
    if kind == "index":
        items = []
        for k in range(r):
            n = a.shape[k]
            c = draw(st.sampled_from(["full", "slice", "int", "new"] if n else ["full", "slice", "new"]))
            if c == "new":
                items.append(("new",))
                c = "full"
            if c == "full":
                items.append(("slice", 0, 1, n))
            elif c == "int":
                items.append(("int", draw(st.integers(-n, n - 1)) % n))
            else:
                lo = draw(st.one_of(st.none(), st.integers(-n - 2, n + 2)))
                hi = draw(st.one_of(st.none(), st.integers(-n - 2, n + 2)))
                sl = slice(lo, hi, draw(st.sampled_from([1, 2, 3, -1, -2])))
                start, stop, step = sl.indices(n)
                length = len(range(start, stop, step))
                items.append(("slice", start if length else 0, step, length))
        if draw(st.booleans()):
            items.insert(draw(st.integers(0, len(items))), ("new",))
        return ("index", items)
    if kind == "reshape":
        n = a.size
        rank = draw(st.integers(0, 4))
        if n:
            opts = factorizations(n, rank)
        else:
            opts = [s for s in [tuple(draw(st.lists(st.integers(0, 3), min_size=1, max_size=3)))] if 0 in s]
        return ("reshape", draw(st.sampled_from(opts))) if opts else None
    if r == 0:
        return None
    if kind == "flip":
        return ("flip", tuple(draw(st.lists(st.integers(0, r - 1), unique=True, max_size=r))))
    k = draw(st.integers(0, r - 1))
    before, after = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    return ("place", k, before, a.shape[k] + before + after)


def _draw_bad_step(draw, a: np.ndarray) -> tuple:
    """A step whose parameters do not fit ``a``: views must answer FG_ERR_VIEW_PARAM."""
    r, shape = a.ndim, a.shape
    options = [("permute", tuple(range(r + 1))), ("flip", (r,)), ("reshape", (a.size + 1,)),
               ("place", r, 0, 1), ("broadcast", (2,) * (r - 1)) if r else ("reshape", (2,))]
    if r >= 2:
        options.append(("permute", (0,) * r))
    for k, n in enumerate(shape):
        full = [("slice", 0, 1, m) for m in shape]
        options.append(("index", full[:k] + [("int", n)] + full[k + 1:]))
        options.append(("index", full[:k] + [("slice", 0, 1, n + 1)] + full[k + 1:]))
        options.append(("index", full[:k] + [("slice", n - 1 if n else 0, 2, n // 2 + 2)] + full[k + 1:]))
        if n > 1:
            options.append(("broadcast", shape[:k] + (n + 1,) + shape[k + 1:]))
            options.append(("place", k, 1, n))
    return draw(st.sampled_from(options))


@st.composite
def operands(draw, bad: bool = True) -> Operand:
    smallest = 0 if draw(st.integers(0, 7)) == 3 else 1  # size-0 arrays, but not mostly
    shape = tuple(draw(st.lists(st.integers(smallest, 6), min_size=0, max_size=4)))
    a = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    steps = []
    for _ in range(draw(st.integers(0, 6))):
        for step in _draw_steps(draw, a):
            steps.append(step)
            a = apply_numpy(a, step)
    if bad and draw(st.integers(0, 15)) == 7:  # 1 in 16 (hypothesis favours 0, the bound)
        steps.append(_draw_bad_step(draw, a))
        a = None
    return Operand(shape, steps, a)


def _other_operand(draw, domain: tuple[int, ...]) -> Operand:
    """An operand over ``domain``: the output itself, a reshape of a permuted array (grouped or
    modular), a broadcast, or a concat/pad piece."""
    size, rank = math.prod(domain), len(domain)
    kind = draw(st.sampled_from(["output", "reshaped", "reshaped", "broadcast", "piece"]))
    if kind == "reshaped" and size:
        shape = draw(st.sampled_from(factorizations(size, draw(st.integers(1, 4)))[:50]))
        steps = [("permute", tuple(draw(st.permutations(range(len(shape))))))]
        if draw(st.booleans()):
            steps.append(("flip", (draw(st.integers(0, len(shape) - 1)),)))
        steps.append(("reshape", domain))
    elif kind == "broadcast":
        keep = draw(st.integers(0, rank))
        shape = tuple(1 if draw(st.booleans()) else d for d in domain[rank - keep:])
        steps = [("broadcast", domain)]
    elif kind == "piece" and rank:
        k = draw(st.integers(0, rank - 1))
        before = draw(st.integers(0, domain[k]))
        after = draw(st.integers(0, domain[k] - before))
        shape = domain[:k] + (domain[k] - before - after,) + domain[k + 1:]
        steps = [("place", k, before, domain[k])]
    else:
        shape, steps = domain, []
    a = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    for step in steps:
        a = apply_numpy(a, step)
    return Operand(shape, steps, a)


@st.composite
def cases(draw, max_operands: int = 3) -> Case:
    first = draw(operands())
    if first.array is None or first.array.ndim > V.MAX_RANK:
        return Case([first], ())
    domain = first.array.shape
    others = [_other_operand(draw, domain) for _ in range(draw(st.integers(0, max_operands - 1)))]
    return Case([first] + others, domain)


def make_case(*operands: tuple, domain=None, numpy: bool = True) -> Case:
    """A case from (shape, steps) pairs, with the NumPy twins unless ``numpy`` is false; the
    domain defaults to the first operand's final shape."""
    ops = []
    for shape, steps in operands:
        a = np.arange(math.prod(shape), dtype=np.int64).reshape(shape) if numpy else None
        for step in steps if numpy else ():
            a = apply_numpy(a, step)
        ops.append(Operand(tuple(shape), list(steps), a))
    return Case(ops, tuple(domain) if domain is not None else ops[0].array.shape)


# --- hand-written cases: the shapes the design exists for, and the reference's corner cases --
B, H, S, D = 2, 3, 4, 5
_HEADS = [("permute", (1, 0, 2)), ("reshape", (4, 6))]   # (2, 4, 3) -> (4, 2, 3) -> (4, 6): dim 1 grouped
SHAPE_CASES: dict[str, Case] = {
    # attention's heads merge: x.transpose(0, 2, 1, 3).reshape(b, s, h * d), written contiguously
    "heads_merge": make_case(((B, H, S, D), [("permute", (0, 2, 1, 3)), ("reshape", (B, S, H * D))]),
                             ((B, S, H * D), [])),
    "modular_reshape": make_case(((3, 2), [("permute", (1, 0)), ("reshape", (3, 2))])),
    # domain (6, 4): operand 0 groups dim 0 as (2, 3) (a transposed source), the others do not
    "two_operands": make_case(((4, 3, 2), [("permute", (2, 1, 0)), ("reshape", (6, 4))]), ((6, 4), []), ((6, 4), [])),
    # rotate_half along the last dim of (3, 8): concat([x[..., 4:], x[..., :4]]), and the output
    "rope_concat": make_case(((3, 8), [("index", [("slice", 0, 1, 3), ("slice", 4, 1, 4)]), ("place", 1, 0, 8)]),
                             ((3, 8), [("index", [("slice", 0, 1, 3), ("slice", 0, 1, 4)]), ("place", 1, 4, 8)]),
                             ((3, 8), [])),
    # dims 0-2 merge into one digit before the padded dim 3 (the reference refused: see views.reshape)
    "pad_then_reshape": make_case(((2, 3, 4, 5), [("place", 3, 1, 6), ("reshape", (4, 6, 6))])),
    # a size-1 piece squeezed away: its one coordinate decides the activity
    "size1_piece_inactive": make_case(((0,), [("place", 0, 1, 1), ("reshape", ())])),
    "size1_piece_active": make_case(((1,), [("place", 0, 0, 1), ("reshape", (1, 1))])),
    # slices of a grouped dim: whole inner blocks stay strided, others go modular
    **{f"group_slice_{n}": make_case(((2, 4, 3), _HEADS + [("index", [("slice", 0, 1, 4), item])]))
       for n, item in enumerate([("slice", 3, 1, 3), ("slice", 1, 2, 3), ("slice", 5, -1, 6), ("int", 4)])},
    # slices of a piece [2, 7) of 9 that start outside it (the active interval is pulled back
    # with ceil/floor divisions), and one that ends before it (an interval past the slice: clamped)
    "strided_slice_of_piece": make_case(((5,), [("place", 0, 2, 9), ("index", [("slice", 1, 2, 4)])])),
    "negative_slice_of_piece": make_case(((5,), [("place", 0, 2, 9), ("index", [("slice", 7, -2, 4)])])),
    "slice_before_piece": make_case(((2, 3), [("place", 1, 5, 8), ("index", [("new",), ("slice", 0, 1, 2),
                                                                             ("slice", 0, 1, 2)])])),
    # a flipped piece, sliced with a negative step, broadcast, then reshaped
    "flipped_piece": make_case(((3, 2), [("place", 0, 1, 6), ("flip", (0, 1)), ("index", [("slice", 5, -2, 3),
                               ("new",), ("slice", 0, 1, 2)]), ("broadcast", (2, 3, 4, 2)), ("reshape", (2, 3, 8))])),
}


# --- hand-written failures: (expected error or None, case); all but the last fail ------------
def scrambled(n: int, rounds: int) -> list[tuple]:
    """Steps that leave a (2**n,) array as one dim grouping 8, 15, 22, ... strided sub-dims of 2:
    each round splits off seven 2s and reverses the dims, so no two sub-dims merge."""
    rnd = [("reshape", (2,) * 7 + (2 ** (n - 7),)), ("permute", tuple(range(7, -1, -1))), ("reshape", (2 ** n,))]
    return rnd * rounds


def grouped_pairs(j: int, dims: int = 4) -> tuple:
    """(32,)*dims, every dim grouped as (2**j, 2**(5-j)): its one cut point is 2**(5-j)."""
    a, b = 2 ** (5 - j), 2 ** j
    swap = tuple(k + 1 - 2 * (k % 2) for k in range(2 * dims))   # (1, 0, 3, 2, ...)
    return (a, b) * dims, [("permute", swap), ("reshape", (32,) * dims)]


_FULL23 = [("slice", 0, 1, 2), ("slice", 0, 1, 3)]
_MODULAR = [("permute", (1, 0)), ("reshape", (3, 2))]                   # (3, 2).T.reshape(3, 2)
_GROUP23 = ((3, 2), [("permute", (1, 0)), ("reshape", (6,))])           # dim of 6 grouped (2, 3)
_GROUP32 = ((2, 3), [("permute", (1, 0)), ("reshape", (6,))])           # grouped (3, 2)
# two groupings of one dim that do not nest ((2, 3) and (3, 2)): the second operand reads through
# a div/mod map (refine's fallback), x.T.reshape(6) + y.T.reshape(6)
SHAPE_CASES["groupings_not_nesting"] = make_case(_GROUP23, _GROUP32)
ERROR_CASES: list[tuple[tuple[str, int, int] | None, Case]] = [
    (("FG_ERR_VIEW_PARAM", 0, -1), make_case(((2, -1), []), domain=(), numpy=False)),
    (("FG_ERR_VIEW_PARAM", 0, -1), make_case(((2 ** 40, 2 ** 40), []), domain=(), numpy=False)),
    *[(("FG_ERR_VIEW_PARAM", 0, 0), make_case(((2, 3), [step]), domain=(), numpy=False)) for step in [
        ("permute", (0, 0)), ("permute", (0,)), ("permute", (0, 2)), ("flip", (2,)), ("flip", (1, 1)),
        ("flip", (-1,)), ("broadcast", (3,)), ("broadcast", (2, 4)), ("broadcast", (2, -3)), ("reshape", (7,)),
        ("reshape", (-2, -3)), ("place", 1, 1, 3), ("place", 2, 0, 3), ("place", -1, 0, 3), ("place", 0, -1, 3),
        ("place", 0, 0, 2 ** 62), ("index", [("slice", 0, 1, 2)]), ("index", _FULL23 + [("int", 0)]),
        ("index", [("int", 2), ("slice", 0, 1, 3)]), ("index", [("int", -1), ("slice", 0, 1, 3)]),
        ("index", [("int", 0), ("slice", 1, 1, 3)]), ("index", [("int", 0), ("slice", 2, -1, 4)]),
        ("index", [("int", 0), ("slice", 0, 0, 1)]), ("index", [("int", 0), ("slice", 0, 1, -1)]),
        ("index", [("int", 0), ("slice", 3, 1, 1)]), ("index", [("int", 0), ("slice", 2, 2 ** 62, 3)]),
        ("index", [("int", 0), ("slice", 2, -(2 ** 62), 3)]), ("index", [(3,), ("int", 0), ("int", 0)])]],
    (("FG_ERR_VIEW_PARAM", -1, -1), make_case(((2, 3), []), domain=(3, 2), numpy=False)),
    (("FG_ERR_VIEW_PARAM", 1, -1), make_case(((2, 3), []), ((1, -1), []), domain=(2, 3), numpy=False)),
    # (one dim past V.MAX_RANK, however it comes)
    (("FG_ERR_VIEW_RANK", 0, -1), make_case(((1,) * (V.MAX_RANK + 1), []), domain=(), numpy=False)),
    (("FG_ERR_VIEW_RANK", 0, 0), make_case(((1,) * V.MAX_RANK, [("broadcast", (1,) * (V.MAX_RANK + 1))]), domain=(),
                                           numpy=False)),
    (("FG_ERR_VIEW_RANK", 0, 0), make_case(((2,) * 8, [("reshape", (1,) * (V.MAX_RANK - 7) + (2,) * 8)]), domain=(),
                                           numpy=False)),
    (("FG_ERR_VIEW_RANK", 0, 0), make_case(((1,) * V.MAX_RANK, [("index", [("new",)] + [("slice", 0, 1, 2)] *
                                                                 V.MAX_RANK)]), domain=(), numpy=False)),
    (("FG_ERR_VIEW_RANK", -1, -1), make_case(((2,) * 8, []), domain=(1,) * (V.MAX_RANK - 7) + (2,) * 8, numpy=False)),
    (("FG_ERR_VIEW_SUBDIMS", 0, 8), make_case(((2 ** 22,), scrambled(22, 3)), domain=(), numpy=False)),
    (("FG_ERR_VIEW_SUBDIMS", 0, 8), make_case(((2 ** 22,), scrambled(22, 3)[:-1] + [
        ("index", [("slice", 1, 1, 2)] + [("slice", 0, 1, 2)] * 7)]), domain=(), numpy=False)),
    (("FG_ERR_VIEW_LOOP_DIMS", -1, -1), make_case(*[grouped_pairs(j, 8) for j in (1, 2, 3, 4)], domain=(32,) * 8,
                                                  numpy=False)),
    (("FG_ERR_VIEW_MODULAR", 0, 3), make_case(((3, 2), _MODULAR + [("permute", (1, 0)), ("reshape", (3, 2))]))),
    (("FG_ERR_VIEW_MODULAR", 0, 4), make_case(((3, 2), _MODULAR + [("permute", (1, 0)), ("reshape", (6,)),
                                                                   ("index", [("slice", 1, 1, 2)])]))),
    (("FG_ERR_VIEW_MODULAR", 0, 4), make_case(((3, 2), _MODULAR + [("permute", (1, 0)), ("reshape", (6,)),
                                                                   ("place", 0, 1, 8)]))),
    (("FG_ERR_VIEW_PIECE", 0, 1), make_case(((2, 3), [("place", 1, 1, 5), ("reshape", (10,))]))),
    (("FG_ERR_VIEW_PIECE", 0, 1), make_case(((2, 3), [("place", 1, 1, 5), ("reshape", (5, 2))]))),
    (("FG_ERR_VIEW_PIECE", 0, 2), make_case(((2, 3), [("place", 1, 1, 5), ("permute", (1, 0)), ("reshape", (10,))]))),
    (None, make_case(_GROUP23, ((4,), [("place", 0, 2, 6)]))),  # every box: FG_ERR_VIEW_BOX
]


# --- evaluation -----------------------------------------------------------------------------
def evaluate(case: Case, walk: bool = True) -> Result:
    """The case through fusegen/plan/views.py, as the C++ driver runs it (``walk``: also every
    element's address, box by box)."""
    views = []
    for i, op in enumerate(case.operands):
        j = -1
        try:
            v = V.contiguous(op.shape)
            for j, step in enumerate(op.steps):
                v = apply_view(v, step)
        except V.MapError as e:
            return Result(error=(e.code, i, j))
        views.append(v)
    try:
        nest = V.refine(views, case.domain)
    except V.MapError as e:
        return Result(error=(e.code, -1, -1))
    res = Result(views=views, nest=nest)
    size = math.prod(case.domain)
    res.addresses = np.full((len(views), size), -2, np.int64) if walk else None
    for ranges, act in V.boxes(nest, case.domain):
        try:
            layout = V.box_layout(nest, ranges)
        except V.MapError as e:
            res.boxes.append((ranges, act, e.code))
            continue
        res.boxes.append((ranges, act, layout))
        if walk:
            _walk(nest, case.domain, ranges, act, layout, res.addresses)
    return res


def _walk(nest: V.Nest, domain, ranges, act, layout, addresses) -> None:
    """One box's loop, as a kernel runs it: refined coordinates over the layout's extents, each
    operand at offset + sum(coordinate * stride), unravelled by its Inner when modular."""
    extents, offsets = layout
    for sub in itertools.product(*[range(e) for e in extents]):
        coords = [0] * len(domain)
        for j, c in enumerate(sub):
            k = nest.origin[j]
            coords[k] = coords[k] * nest.extents[j] + c
        flat = 0
        for k, c in enumerate(coords):
            flat = flat * domain[k] + c + ranges[k][0]
        for i in range(len(offsets)):
            lin = offsets[i] + sum(c * s for c, s in zip(sub, nest.strides[i]))
            got = nest.inners[i].address(lin) if nest.inners[i] is not None else lin
            assert addresses[i, flat] == -2, "two boxes cover one element"
            addresses[i, flat] = got if act[i] else -1


def expected_addresses(case: Case, res: Result) -> np.ndarray:
    """The operands' NumPy arrays as the walk should give them: -2 in boxes without a layout."""
    want = np.stack([op.array.reshape(-1) for op in case.operands]) if case.operands else None
    domain = case.domain
    for ranges, _, layout in res.boxes:
        if isinstance(layout, str):
            for c in itertools.product(*[range(lo, hi) for lo, hi in ranges]):
                want[:, np.ravel_multi_index(c, domain) if domain else 0] = -2
    return want


# --- the driver's encoding ------------------------------------------------------------------
def program(case: Case) -> list[int]:
    """The case as fgv_run's program (tests/views_driver.cc)."""
    out = [len(case.operands)]
    for op in case.operands:
        out += [len(op.shape), *op.shape, len(op.steps)]
        for kind, *args in op.steps:
            if kind in ("broadcast", "reshape", "permute", "flip"):
                flat = list(args[0])
            elif kind == "place":
                flat = list(args)
            else:
                flat = []
                for it in args[0]:
                    flat += [ITEM_KINDS.get(it[0], it[0]), *(list(it[1:]) + [0, 0, 0])[:3]]
            out += [STEP_KINDS[kind], len(flat), *flat]
    return out + [len(case.domain), *case.domain]


def _inner(inner: V.Inner | None) -> list[int]:
    if inner is None:
        return []
    return [len(inner.digits), *[x for d in inner.digits for x in d], inner.offset]


def _view(v: V.View) -> list[int]:
    out = [len(v.dims)]
    for a in v.dims:
        piece = a.hi is not None
        out += [len(a.sub), *[x for d in a.sub for x in d], int(piece), a.lo if piece else 0, a.hi if piece else 0]
    return out + [v.offset, int(v.inner is not None), *_inner(v.inner), int(v.active)]


def encode(res: Result, base: int) -> list[int]:
    """fgv_run's result list for ``res``; error codes numbered from ``base`` in views.ERRORS' order."""
    def code(name):
        return base + V.ERROR_NAMES.index(name)
    if res.error is not None:
        name, i, j = res.error
        return [code(name), i, j]
    out = [0, -1, -1]
    for v in res.views:
        out += _view(v)
    nest = res.nest
    rank = len(res.views[0].dims) if res.views else 0
    out += [len(nest.extents), *nest.extents, *nest.origin]
    for i in range(len(res.views)):
        out += [*nest.strides[i], nest.offsets[i], int(nest.inners[i] is not None), *_inner(nest.inners[i])]
        for k in range(rank):
            lo, hi = nest.intervals[i].get(k, (0, 0))
            out += [int(k in nest.intervals[i]), lo, hi]
        out.append(int(nest.active[i]))
    out.append(len(res.boxes))
    for ranges, act, layout in res.boxes:
        out += [x for r in ranges for x in r] + [int(x) for x in act]
        if isinstance(layout, str):
            out.append(code(layout))
        else:
            out += [0, *layout[0], *layout[1]]
    return out
