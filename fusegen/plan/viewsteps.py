"""Run-time index maps: how one loop-nest operand is addressed, for concrete shapes.

A plan describes each operand of a loop nest as an array (or a virtual iota) read through a
chain of view steps up to the nest's domain. This module evaluates such a chain, for concrete
shapes and step parameters, the way NumPy builds views: it starts from the array's C-contiguous
layout and applies each step to (dims, offset). The result addresses element ``c`` of the
domain at ``offset + sum_k c_k * stride_k``, so every loop renderer keeps working on offsets
and strides (collapse, stride classes, packing, tiling).

Three things go beyond NumPy's views, because a fused kernel must never copy:

* **Grouped dims.** A reshape that merges dims which cannot be merged in memory (NumPy would
  copy: ``x.transpose(0, 2, 1, 3).reshape(b, s, h * d)``) leaves the merged dim as a *group* of
  sub-dims, each strided. The loop nest then iterates over the sub-dims (``refine`` splits the
  domain dim), and every operand stays strided: splitting a dim is always affine.
* **Modular maps.** When the two radices of a reshape do not nest (``(2, 3) -> (3, 2)`` of a
  transposed view), no split helps. The operand then keeps an affine *linear index* into the
  reshape's result, and each element's address is found by unravelling that index over the
  source's digits (``Inner``): div/mod per element, on a slow path that is still fused.
* **Pieces.** A concat/stack/pad piece is its source placed at ``[lo, hi)`` along one dim
  (``place``); outside that interval the operand is inactive. ``boxes`` cuts the domain into
  boxes in which every piecewise operand is either wholly active or wholly inactive, so each box
  runs a loop without branches.

The C++ twin is ``emitters/templates/_fg_views.inc.j2`` (namespace ``fg::views``), which every emitted
kernel uses to evaluate the same chains at run time. The two must agree exactly, on results and
on failures: every failure is a ``MapError`` whose ``code`` names the C++ error code
(``ERRORS``, in the C++ enum's order), and the C++ has fixed-size storage whose bounds
(``MAX_RANK``, ``MAX_SUBDIMS``, ``MAX_LOOP_DIMS``) are enforced here too, at the same points, so
the plan can tell from Python which chains an emitted kernel can evaluate.
``tests/test_views_cpp.py`` runs random chains through both.

Every step first checks its parameters against its operand's shape (``FG_ERR_VIEW_PARAM``):
shape inference should have rejected anything that fails there, but a kernel must return an
error code rather than address memory from a bad permutation or slice.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import FusegenError

#: Dims of a view (and of a tensor: ``fg::kMaxRank``).
MAX_RANK = 32
#: Sub-dims of one dim of a view (a group), and digits of a modular map (``Inner``).
MAX_SUBDIMS = 16
#: Dims of a refined loop nest (``refine``).
MAX_LOOP_DIMS = 32
_INT64_MAX = 2**63 - 1

#: The C++ error codes, in the enum's order: (name, message). The emitted error table takes
#: the messages; the C++ enum ``fg::ViewError`` lists the names in this order.
ERRORS: list[tuple[str, str]] = [
    ("FG_ERR_VIEW_PARAM", "a view step's parameters do not fit its operand (a permutation, axis, index, slice, "
                          "target shape or domain that shape inference should have rejected)"),
    ("FG_ERR_VIEW_RANK", f"a view would have more dims than kernels support ({MAX_RANK})"),
    ("FG_ERR_VIEW_SUBDIMS", f"a reshaped dim would be a group of more than {MAX_SUBDIMS} strided sub-dims, or a "
                            f"div/mod index map would need more than {MAX_SUBDIMS} digits"),
    ("FG_ERR_VIEW_LOOP_DIMS", f"the loop nest refined for the operands' reshapes would have more than "
                              f"{MAX_LOOP_DIMS} dims"),
    ("FG_ERR_VIEW_MODULAR", "a view needs div/mod index arithmetic on top of a reshape that already needs it "
                            "(only one level is supported)"),
    ("FG_ERR_VIEW_PIECE", "a reshape splits or merges the dim along which a concat/pad/stack piece lies"),
    ("FG_ERR_VIEW_NEST", "operands split a domain dim by reshapes whose radices do not nest"),
    ("FG_ERR_VIEW_BOX", "a concat/pad boundary falls on a domain dim that another operand's reshape splits"),
    ("FG_ERR_VIEW_INTERNAL", "internal error in the view evaluator (a fusegen bug: please report it)"),
]
ERROR_NAMES = [name for name, _ in ERRORS]


class MapError(FusegenError):
    """The chain cannot be evaluated as a strided or modular view (the plan materializes), or a
    step's parameters do not fit. ``code``: the C++ error code's name (one of ``ERROR_NAMES``)."""

    def __init__(self, code: str, message: str):
        assert code in ERROR_NAMES, code
        super().__init__(f"{message} ({code})")
        self.code = code


def c_strides(shape) -> list[int]:
    """Element strides of a C-contiguous array of ``shape`` (as ``plan.c_strides``)."""
    st, acc = [0] * len(shape), 1
    for k in range(len(shape) - 1, -1, -1):
        st[k] = acc
        acc *= max(int(shape[k]), 1)
    return st


def _prod(xs) -> int:
    p = 1
    for x in xs:
        p *= x
    return p


def check_shape(shape, what: str) -> tuple[int, ...]:
    """A target shape: at most MAX_RANK dims, none negative, and a size that fits int64 (the
    C++ computes strides and sizes in int64; it checks in the same order)."""
    shape = tuple(int(d) for d in shape)
    if len(shape) > MAX_RANK:
        raise MapError("FG_ERR_VIEW_RANK", f"{what} to rank {len(shape)}")
    if any(d < 0 for d in shape):
        raise MapError("FG_ERR_VIEW_PARAM", f"{what}: negative dim in {shape}")
    if _prod(max(d, 1) for d in shape) > _INT64_MAX:
        raise MapError("FG_ERR_VIEW_PARAM", f"{what}: the size of {shape} overflows int64")
    return shape


@dataclass
class Axis:
    """One dim of a view: sub-dims ``(extent, stride)``, outer first (one unless grouped), and
    the coordinate interval ``[lo, hi)`` where the operand is active (``hi=None``: all)."""

    sub: list[tuple[int, int]]
    lo: int = 0
    hi: int | None = None

    @property
    def extent(self) -> int:
        return _prod(e for e, _ in self.sub)

    @property
    def grouped(self) -> bool:
        return sum(1 for e, _ in self.sub if e != 1) > 1

    def copy(self) -> Axis:
        return Axis(list(self.sub), self.lo, self.hi)


@dataclass
class Inner:
    """A modular map's second half: the digits (extent, stride) over which an element's linear
    index is unravelled, outer first, and their base offset."""

    digits: list[tuple[int, int]]
    offset: int

    def address(self, linear: int) -> int:
        a = self.offset
        for e, s in reversed(self.digits):
            linear, r = divmod(linear, e) if e else (linear, 0)
            a += r * s
        return a


@dataclass
class View:
    dims: list[Axis]
    offset: int = 0
    inner: Inner | None = None   # set: the strides give a linear index, not an address
    active: bool = True          # False: an integer index fell outside this piece

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(a.extent for a in self.dims)

    def copy(self) -> View:
        return View([a.copy() for a in self.dims], self.offset, self.inner, self.active)


def contiguous(shape) -> View:
    """A C-contiguous array of ``shape``: where every chain starts (an iota is ``contiguous((n,))``:
    its "address" is the index)."""
    shape = check_shape(shape, "a contiguous array")
    return View([Axis([(e, s)]) for e, s in zip(shape, c_strides(shape))])


def _single(a: Axis, what: str) -> tuple[int, int]:
    real = [(e, s) for e, s in a.sub if e != 1]
    if len(real) > 1:  # callers go modular first: unreachable
        raise MapError("FG_ERR_VIEW_INTERNAL", f"{what} of a dim that is a group of {len(real)} sub-dims")
    return real[0] if real else (a.extent, 0)


def to_modular(v: View, why: str) -> View:
    """``v`` as a modular map: a C-order linear index over its current shape, unravelled per
    element over its digits. Used where a step would cut through a grouped dim."""
    if v.inner is not None:
        raise MapError("FG_ERR_VIEW_MODULAR", f"{why}, after a reshape that already needs div/mod")
    digits = [(e, s) for a in v.dims for e, s in a.sub if e != 1]
    if len(digits) > MAX_SUBDIMS:
        raise MapError("FG_ERR_VIEW_SUBDIMS", f"{why}: a div/mod map over {len(digits)} digits")
    lin = contiguous(v.shape)
    for a, b in zip(v.dims, lin.dims):
        b.lo, b.hi = a.lo, a.hi
    return View(lin.dims, 0, Inner(digits, v.offset), v.active)


def _check_axes(axes, rank: int, what: str, permutation: bool = False) -> list[int]:
    axes = [int(k) for k in axes]
    if any(not 0 <= k < rank for k in axes) or len(set(axes)) != len(axes) or (permutation and len(axes) != rank):
        raise MapError("FG_ERR_VIEW_PARAM", f"{what} {axes} of a rank-{rank} view")
    return axes


# ---------------------------------------------------------------------------------------------
# Steps. Each takes concrete parameters (already normalized by shape inference) and returns a new
# View; the input is not modified.
# ---------------------------------------------------------------------------------------------
def broadcast(v: View, shape) -> View:
    """NumPy broadcasting of ``v`` to ``shape`` (right-aligned; new and size-1 dims get stride 0)."""
    shape = check_shape(shape, "broadcast")
    off = len(shape) - len(v.dims)
    if off < 0:
        raise MapError("FG_ERR_VIEW_PARAM", f"cannot broadcast rank {len(v.dims)} to rank {len(shape)}")
    dims = [Axis([(shape[k], 0)]) for k in range(off)]
    active = v.active
    for k, a in enumerate(v.dims):
        e = shape[off + k]
        if a.extent == e:
            dims.append(a.copy())
        elif a.extent == 1:
            # a size-1 piece dim stretched: its one coordinate decides, for every new one
            if a.hi is not None and not (a.lo <= 0 < a.hi):
                active = False
            dims.append(Axis([(e, 0)]))
        else:
            raise MapError("FG_ERR_VIEW_PARAM", f"cannot broadcast dim {a.extent} to {e}")
    return View(dims, v.offset, v.inner, active)


def permute(v: View, perm) -> View:
    """``permute_dims``: dim k of the result is dim ``perm[k]`` of ``v``."""
    perm = _check_axes(perm, len(v.dims), "permutation", permutation=True)
    return View([v.dims[p].copy() for p in perm], v.offset, v.inner, v.active)


def _check_items(v: View, items) -> None:
    """The items cover the view's dims, give at most MAX_RANK dims, and stay in range."""
    kinds = [it[0] for it in items]
    if any(k not in ("slice", "int", "new") for k in kinds):
        raise MapError("FG_ERR_VIEW_PARAM", f"unknown index item kind in {kinds}")
    if sum(k != "new" for k in kinds) != len(v.dims):
        raise MapError("FG_ERR_VIEW_PARAM", f"index items cover {sum(k != 'new' for k in kinds)} dims "
                                            f"of {len(v.dims)}")
    if sum(k != "int" for k in kinds) > MAX_RANK:
        raise MapError("FG_ERR_VIEW_RANK", f"indexing to rank {sum(k != 'int' for k in kinds)}")
    dims = iter(v.dims)
    for it in items:
        if it[0] == "new":
            continue
        n = next(dims).extent
        if it[0] == "int":
            ok = 0 <= it[1] < n
        else:
            _, start, step, length = it
            # every selected coordinate start + step*j (j < length) lies in [0, n)
            ok = step != 0 and length >= 0 and (length == 0 or (0 <= start < n and 0 <= start + step * (length - 1) < n))
        if not ok:
            raise MapError("FG_ERR_VIEW_PARAM", f"index item {it} out of range for a dim of {n}")


def index(v: View, items) -> View:
    """Basic indexing with normalized items, one per input dim plus insertions:
    ``("slice", start, step, length)`` (start in range, as Python's slice.indices gives),
    ``("int", k)`` with 0 <= k < extent, ``("new",)`` for None."""
    _check_items(v, items)
    dims, offset, active = [], v.offset, v.active
    k = 0
    for it in items:
        if it[0] == "new":
            dims.append(Axis([(1, 0)]))
            continue
        a = v.dims[k]
        k += 1
        if it[0] == "int":
            i = it[1]
            if a.hi is not None and not (a.lo <= i < a.hi):
                active = False
            offset += _digit_offset(a, i)
            continue
        _, start, step, length = it
        if length == 0:
            dims.append(Axis([(0, 0)]))
            continue
        if step == 1 and start == 0 and length == a.extent:
            dims.append(a.copy())
            continue
        if a.grouped:
            b = _slice_group(a, start, step, length)
            if b is None:  # not whole inner blocks: the rest of the chain works on a linear index
                return index(to_modular(v, "a slice through a grouped dim"), items)
            dims.append(b)
            offset += _digit_offset(a, start)
            continue
        e, s = _single(a, "slicing")
        offset += start * s
        b = Axis([(length, s * step)])
        if a.hi is not None:
            b.lo, b.hi = _pull_interval(a.lo, a.hi, start, step, length)
        dims.append(b)
    return View(dims, offset, v.inner, active)


def _digit_offset(a: Axis, i: int) -> int:
    """Offset of coordinate ``i`` of a (possibly grouped) dim."""
    off = 0
    for e, s in reversed(a.sub):
        i, r = divmod(i, e) if e else (i, 0)
        off += r * s
    return off


def _slice_group(a: Axis, start: int, step: int, length: int) -> Axis | None:
    """A slice of a grouped dim stays strided only when it selects whole inner blocks."""
    sub = [(e, s) for e, s in a.sub if e != 1]
    inner = _prod(e for e, _ in sub[1:])
    if a.hi is None and step == 1 and start % inner == 0 and length % inner == 0:
        return Axis([(length // inner, sub[0][1])] + sub[1:])
    return None


def _pull_interval(lo: int, hi: int, start: int, step: int, length: int) -> tuple[int, int]:
    """The new coordinates j in [0, length) with start + step*j in [lo, hi), as an interval."""
    if step > 0:
        jlo = max(0, -(-(lo - start) // step))
        jhi = min(length, -(-(hi - start) // step))
    else:
        jlo = max(0, -(-(start - (hi - 1)) // -step))
        jhi = min(length, (start - lo) // -step + 1)
    return (jlo, max(jlo, jhi))


def flip(v: View, axes) -> View:
    """Reverse ``axes``: each sub-dim of a grouped dim reverses (offset moves to its last element)."""
    axes = _check_axes(axes, len(v.dims), "flip axes")
    dims, offset = [a.copy() for a in v.dims], v.offset
    for k in axes:
        a = dims[k]
        offset += sum((e - 1) * s for e, s in a.sub if e > 0)
        a.sub = [(e, -s) for e, s in a.sub]
        if a.hi is not None:
            e = a.extent
            a.lo, a.hi = e - a.hi, e - a.lo
    return View(dims, offset, v.inner, v.active)


def place(v: View, axis: int, start: int, total: int) -> View:
    """``v`` as piece ``[start, start + extent)`` of a dim of length ``total`` (concat, pad)."""
    r = len(v.dims)
    if not 0 <= axis < r or start < 0 or total < start + v.dims[axis].extent:
        raise MapError("FG_ERR_VIEW_PARAM", f"piece [{start}, +{v.shape[axis] if 0 <= axis < r else '?'}) "
                                            f"of a dim of {total} on axis {axis} of a rank-{r} view")
    check_shape(v.shape[:axis] + (total,) + v.shape[axis + 1:], "placing a piece")
    if v.dims[axis].grouped:
        v = to_modular(v, "placing a grouped dim")
    dims = [a.copy() for a in v.dims]
    a = dims[axis]
    n = a.extent
    if a.hi is not None:
        lo, hi = a.lo + start, a.hi + start
    else:
        lo, hi = start, start + n
    e, s = _single(a, "placing a piece")
    a.sub = [(total, s)]
    a.lo, a.hi = lo, hi
    return View(dims, v.offset - start * s, v.inner, v.active)


def reshape(v: View, shape) -> View:
    """Reshape in C order. Strided where NumPy's no-copy reshape is; grouped where the dims merge
    but not in memory; otherwise a modular map (one level; a second one raises MapError)."""
    shape = check_shape(shape, "reshape")
    total = _prod(v.shape)
    if _prod(shape) != total:
        raise MapError("FG_ERR_VIEW_PARAM", f"cannot reshape {v.shape} to {shape}")
    if total == 0:
        return View([Axis([(e, 0)]) for e in shape], v.offset, v.inner, v.active)
    # A piece's dim of extent 1 has one coordinate: it decides the activity of the whole view,
    # as when broadcast stretches it, and the dim is free to vanish or merge.
    active = v.active
    piece_dims = []
    for k, a in enumerate(v.dims):
        if a.hi is not None:
            if a.extent == 1:
                active = active and a.lo <= 0 < a.hi
            else:
                piece_dims.append(k)
    digits = []  # (extent, stride, source dim or -1 for a merge of several), outer first
    for k, a in enumerate(v.dims):
        for e, s in a.sub:
            if e == 1:
                continue
            if digits and digits[-1][1] == s * e and k not in piece_dims and digits[-1][2] not in piece_dims:
                pe, _, pk = digits[-1]   # contiguous in memory: one digit (pieces stay their own)
                digits[-1] = (pe * e, s, pk if pk == k else -1)
            else:
                digits.append((e, s, k))
    out = _distribute(digits, shape)
    if out is None:
        if piece_dims:
            raise MapError("FG_ERR_VIEW_PIECE", "a reshape that does not keep a piece's dim whole")
        return reshape(to_modular(v, "a reshape whose radices do not nest"), shape)
    dims = []
    for group in out:
        sub = _merge([(e, s) for e, s, _ in group]) or [(1, 0)]
        if len(sub) > MAX_SUBDIMS:
            raise MapError("FG_ERR_VIEW_SUBDIMS", f"a reshaped dim grouping {len(sub)} sub-dims")
        dims.append(Axis(sub))
    for k in piece_dims:  # a piece's dim must come through as one whole output dim
        src = v.dims[k]
        hits = [j for j, g in enumerate(out) if any(d[2] == k for d in g)]
        if len(hits) != 1 or any(d[2] != k for d in out[hits[0]]) or shape[hits[0]] != src.extent:
            raise MapError("FG_ERR_VIEW_PIECE", "a reshape that does not keep a piece's dim whole")
        dims[hits[0]].lo, dims[hits[0]].hi = src.lo, src.hi
    return View(dims, v.offset, v.inner, active)


def _distribute(digits, shape):
    """Split the digit sequence (outer first) into one group per output dim, splitting a digit
    where an output boundary falls inside it and divides it. None if the radices do not nest."""
    digits = list(digits)
    out = []
    i = 0
    for E in shape:
        group, need = [], E
        while need > 1:
            if i >= len(digits):  # the sizes agree: unreachable
                return None
            e, s, k = digits[i]
            if need % e == 0:
                group.append((e, s, k))
                need //= e
                i += 1
            elif e % need == 0:
                group.append((need, s * (e // need), k))
                digits[i] = (e // need, s, k)
                need = 1
            else:
                return None
        out.append(group)
    return out


def _merge(sub):
    """Merge adjacent sub-dims that are contiguous in memory (outer stride = inner stride * extent)."""
    out: list[tuple[int, int]] = []
    for e, s in sub:
        if out and out[-1][1] == s * e:
            pe, _ = out[-1]
            out[-1] = (pe * e, s)
        else:
            out.append((e, s))
    return out
