"""Scans (issue #17): ``cumulative_sum`` and ``cumulative_prod`` (the array API's, 2024.12:
``axis``, ``dtype``, ``include_initial``; the accumulation dtype is the sum's/prod's: int64 for
signed ints and bool, uint64 for unsigned), and ``cummax``, ``cummin``, ``logcumsumexp``
(PyTorch's names and NumPy's ``maximum.accumulate`` semantics: NaN propagates).

**One node, O(n).** A scan is a ``REDUCE`` node with ``ReduceArg.scan`` set (text form
``scan sum %2, axis=1``): it folds its source along one axis like the reduction of its kind, but
keeps every running value, so its result has the source's shape. The planner gives it a stage of
its own, a loop nest whose scanned axis is the sequential (carried) loop and whose other dims are
parallel; later stages read its result like any array (a workspace, or fused on the same tile).
``include_initial`` puts the identity in front (a ``concat``: no copy). ``logcumsumexp`` folds
with ``logaddexp`` (stable: no overflow, ``-inf`` is the identity).

**Backends.** Numba CPU runs scan stages natively (``fusegen.lower_cpu``: vectorized across the
contiguous dim when the scanned axis is another; a blocked two-pass scan for one long line), and
numba-cuda with one thread per scan line (``fusegen.lower.cuda_source``), and so do the emitted
C++/CUDA and the XLA handlers (``emitters/templates/_cpu_stages.inc.j2``, ``_cuda_stages``,
the layout path's ``_cpu_views``/``_cuda_views``). Only where a scan reads concat/pad pieces
(the emitted layout nest cuts the domain into boxes there) do the emitters run ``composed(op)``
(``fusegen.plan.scan_form``): the op traced again with every scan written as a
reduction over the inputs ``j <= i`` masked with an iota comparison: exact and fusable, but
O(n) reads per output (O(n^2) along the axis).
"""
from __future__ import annotations

import contextlib
import threading

from ..errors import TraceError
from .compose import full_like
from .layout import as_tensor, concat, iota, is_int, moveaxis
from .nodes import Op, ReduceArg, is_scan
from .trace import Tensor, cast, cast_like, make, op_prefix, reduce, user_loc, where
from .vocab import exp, log

_mode = threading.local()
_lock = threading.Lock()


@contextlib.contextmanager
def _composing():
    prev = getattr(_mode, "composed", False)
    _mode.composed = True
    try:
        yield
    finally:
        _mode.composed = prev


def has_scans(op) -> bool:
    """Whether ``op``'s graph holds a scan node (an op traced per signature: ask its children)."""
    return op.graph is not None and any(is_scan(n) for n in op.graph.nodes)


def composed(op):
    """``op`` with its scans written as masked reductions (the O(n^2) composition), for an emitted
    kernel whose scan reads pieces; ``op`` itself when it has none. Cached on ``op``; same name."""
    if (op.graph is not None and not has_scans(op)) or op.__dict__.get("_scans_composed"):
        return op
    cached = op.__dict__.get("_composed_scans")
    if cached is not None:
        return cached

    def body(*args, **attrs):
        with _composing():
            return op.fn(*args, **attrs)

    body.__signature__ = op.signature_for(op.inputs)
    derived = type(op)(body, op.name, inplace=op._inplace_spec)
    for k, v in op.__dict__.items():   # what ops derived from others carry (a gradient's needs,
        if k not in derived.__dict__ and not k.startswith("_"):   # a write request's outputs)
            setattr(derived, k, v)
    derived._scans_composed = True
    with _lock:
        return op.__dict__.setdefault("_composed_scans", derived)


def _setup(x, axis, fn: str):
    x = as_tensor(x, fn)
    if axis is None:
        if x.ndim != 1:
            raise TraceError(f"{op_prefix()}{fn}: axis is required for an input of rank {x.ndim} (the array API "
                             f"allows axis=None for 1-d input only) [at {user_loc()}]")
        axis = 0
    if not is_int(axis):
        raise TraceError(f"{op_prefix()}{fn}: axis must be an int, got {axis!r} [at {user_loc()}]")
    return x, int(axis)


def scan(kind: str, x: Tensor, axis: int) -> Tensor:
    """The running ``kind`` (one of ``SCAN_KINDS``) of ``x`` along ``axis``: one node."""
    return Tensor(make(Op.REDUCE, (x.node,), ReduceArg(kind, (axis,), True, scan=True)))


# --- the composition (emitted scans that read pieces) ----------------------------------------------
def running_mask(x: Tensor, axis: int, include_initial: bool = False):
    """``y`` (x with ``axis`` last), ``y`` read as (..., 1, n), and the (n_out, n) mask of the
    inputs each output accumulates: the O(n^2) form of a scan (also its adjoints')."""
    y = moveaxis(x, axis, -1)
    n = y.shape[-1]
    j = iota(n)
    i = iota(n + 1 if include_initial else n)[:, None]
    keep = (j < i) if include_initial else (j <= i)
    return y, y[..., None, :], keep


def _back(r: Tensor, axis: int) -> Tensor:
    return moveaxis(r, -1, axis)


def _composed(kind: str, x: Tensor, axis: int, include_initial: bool = False) -> Tensor:
    y, yy, keep = running_mask(x, axis, include_initial)
    if kind in ("sum", "prod"):
        return _back(reduce(kind, where(keep, yy, 0 if kind == "sum" else 1), -1, False), axis)
    # masked-out inputs read the first element, which every output includes: neutral for max/min
    m = reduce("max" if kind == "logaddexp" else kind, where(keep, yy, y[..., None, :1]), -1, kind == "logaddexp",
               empty_ok=True)
    if kind != "logaddexp":
        return _back(m, axis)
    s = reduce("sum", where(keep, exp(yy - m), 0), -1, False)   # shifted by the running maximum
    return _back(log(s) + m[..., 0], axis)


def _running(kind: str, x: Tensor, axis: int, include_initial: bool = False) -> Tensor:
    if getattr(_mode, "composed", False):
        return _composed(kind, x, axis, include_initial)
    r = scan(kind, x, axis)
    if include_initial:
        # the identity in front; the slab is shaped like a keep-dims sum of x (size 1 along the
        # axis even when it is empty): measured, never computed
        slab = full_like(reduce("sum", x, axis, True), 0 if kind == "sum" else 1)
        r = concat([cast_like(slab, r), r], axis=axis)
    return r


# --- adjoints (fg.grad) ------------------------------------------------------------------------
def _reverse(kind: str, t: Tensor, axis: int) -> Tensor:
    """The running ``kind`` of ``t`` from the end of ``axis`` (a reverse scan: O(n))."""
    from .layout import flip
    return flip(scan(kind, flip(t, axis=axis), axis), axis=axis)


def scan_adjoint(n, g: Tensor) -> Tensor:
    """The adjoint of scan node ``n``'s source, given the adjoint ``g`` of its result (same shape);
    every one O(n) along the axis (a few scans, elementwise ops and, for max/min, two gathers).

    ``sum``: a reverse cumulative sum; ``prod``: that of ``g * result``, over the source, with
    the axis's first zero and what follows it apart (``_prod_adjoint``); ``max``/``min``: JAX's rule, each output's
    adjoint flows to the position that attained its running extreme (``_extreme_adjoint``);
    ``logaddexp``: ``sum_{i >= j} g_i exp(x_j - out_i)``, as two reverse logcumsumexps (of the
    positive and the negative part of ``g``: no overflow, ``exp(x_j - out_i) <= 1``); an output
    that is still -inf passes its ``g_i`` to its own input alone."""
    kind, axis = n.arg.kind, n.arg.axes[0]
    a, v = Tensor(n.srcs[0]), Tensor(n)
    if kind == "sum":
        return _reverse("sum", g, axis)
    if kind == "prod":
        return _prod_adjoint(a, v, g, axis)
    if kind == "logaddexp":
        # An output still -inf (every input up to it -inf: a row left-padded with -inf) is its
        # own input: d out_i / d x_i = 1 and nothing reaches the inputs before it; in the sum
        # its exp(x_j - out_i) would be exp(-inf + inf), NaN for every j (jax.lax.cumlogsumexp
        # gives 1 there).
        gv, empty = cast_like(g, v), v == float("-inf")
        w = where(empty, float("inf"), v)
        pos = _reverse("logaddexp", log(where(gv > 0, gv, 0)) - w, axis)
        neg = _reverse("logaddexp", log(where(gv < 0, -gv, 0)) - w, axis)
        return exp(a + pos) - exp(a + neg) + where(empty, gv, 0)
    return _extreme_adjoint(a, v, g, axis)


def others_product(a: Tensor, over) -> Tensor:
    """The product reduction's adjoint factor, d prod(a) / d a_i: the product of the slice's
    other elements (``over(t, kind)``: ``t`` reduced over the product's axes, dims kept). ``P /
    a_i`` without a zero in the slice; with one, that of the nonzero elements at the zero and 0
    elsewhere; with more, 0 (``P / a_i`` alone gave NaN at a zero, and through the sum, to the
    whole slice). Here beside the cumulative product's (``fusegen.graph.grad`` calls it)."""
    zero = a == 0
    count = over(where(zero, 1, 0), "sum")
    nonzero = over(where(zero, 1, a), "prod")
    return where(count == 0, nonzero / a, where(zero & (count == 1), nonzero, 0))


def _prod_adjoint(a: Tensor, v: Tensor, g: Tensor, axis: int) -> Tensor:
    """cumulative_prod: input ``j`` gets ``sum_{i >= j} g_i prod_{k <= i, k != j} a_k``. Before the
    axis's first zero that is ``R[j] / a_j``, ``R`` the reverse cumulative sum of ``g * out`` (the
    outputs from the zero on are 0); at the first zero, the reverse cumulative sum of ``g * w``,
    ``w`` the cumulative product with that zero taken as 1; after it, 0 (every product with ``j``
    left out still holds the first zero). O(n): three scans and a reverse one."""
    zero = a == 0
    seen = scan("sum", where(zero, 1, 0), axis)              # zeros up to and including j
    first = zero & (seen == 1)
    w = scan("prod", where(first, 1, a), axis)
    before = _reverse("sum", g * v, axis) / a
    at_zero = _reverse("sum", g * cast_like(w, v), axis)
    return where(seen == 0, before, where(first, at_zero, 0))


def _extreme_adjoint(a: Tensor, v: Tensor, g: Tensor, axis: int) -> Tensor:
    """cummax/cummin: output ``i`` equals the input at ``p(i)``, the last position ``<= i`` where
    the running extreme was attained (a *hit*: ``x == out``, or where a NaN appeared), so input
    ``j`` receives ``g`` summed over its segment, from hit ``j`` to the next hit: ``R[j] - R[next]``
    with ``R`` the reverse cumulative sum of ``g`` (O(n); ties go to the latest position)."""
    from .gathers import take_along_axis
    y, out, gg = moveaxis(a, axis, -1), moveaxis(v, axis, -1), moveaxis(g, axis, -1)
    size = y.shape[-1]
    pos = iota(size)
    hit = (y == out) | (y != y)
    first = _reverse("min", where(hit, pos, size), -1)        # the first hit at or after each index
    after = first * 0 + pos + 1                               # (the indices' shape is the data's)
    nxt = where(after < size, take_along_axis(first, where(after < size, after, 0), axis=-1, mode="clip"), size)
    r = _reverse("sum", gg, -1)
    r_next = where(nxt < size, take_along_axis(r, where(nxt < size, nxt, 0), axis=-1, mode="clip"), 0)
    return _back(where(hit, r - r_next, 0), axis)


# --- the public functions ------------------------------------------------------------------------
def _sumprod(kind: str, x, axis, dtype, include_initial: bool, fn: str) -> Tensor:
    x, axis = _setup(x, axis, fn)
    if dtype is not None:
        x = cast(x, dtype)
    r = _running(kind, x, axis, include_initial)
    if dtype is not None:
        r = cast(r, dtype)
    return r


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial: bool = False) -> Tensor:
    """The array API's ``cumulative_sum`` (``include_initial``: a leading 0 along ``axis``)."""
    return _sumprod("sum", x, axis, dtype, include_initial, "cumulative_sum")


def cumulative_prod(x, /, *, axis=None, dtype=None, include_initial: bool = False) -> Tensor:
    """The array API's ``cumulative_prod`` (``include_initial``: a leading 1 along ``axis``)."""
    return _sumprod("prod", x, axis, dtype, include_initial, "cumulative_prod")


def cummax(x, /, *, axis=None) -> Tensor:
    """Running maximum along ``axis`` (``np.maximum.accumulate``; NaN propagates)."""
    x, axis = _setup(x, axis, "cummax")
    return _running("max", x, axis)


def cummin(x, /, *, axis=None) -> Tensor:
    """Running minimum along ``axis`` (``np.minimum.accumulate``; NaN propagates)."""
    x, axis = _setup(x, axis, "cummin")
    return _running("min", x, axis)


def logcumsumexp(x, /, *, axis=None) -> Tensor:
    """``log(cumulative_sum(exp(x)))`` without overflow (``np.logaddexp.accumulate``)."""
    x, axis = _setup(x, axis, "logcumsumexp")
    return _running("logaddexp", x, axis)
