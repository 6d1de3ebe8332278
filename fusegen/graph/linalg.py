"""The array API's main-namespace linear algebra (``matmul``, ``tensordot``, ``vecdot``; ``@`` on
traced tensors) and its utility ``diff``, as compositions of views, products and sums.

A contraction is a broadcast product summed over the contracted axes: ``matmul`` of ``(.., M, K)``
and ``(.., K, N)`` is ``sum(a[.., :, :, None] * b[.., None, :, :], axis=-2)``, one fused loop nest
that never stores the ``M x K x N`` product. That is the right shape for what fused kernels
contract (a head's ``q . k`` row, a small projection inside an elementwise chain); a large GEMM
belongs to a BLAS, not to a fused op. The sum is taken in the product's dtype (``dtype=``), as
the standard's type promotion says (NumPy's ``matmul`` of int8 stays int8); bool contracts with
``any``. Contracted axes must match in size: checked at run time like any shape rule
(``expect_same_shape`` on their iotas), never broadcast.
"""
from __future__ import annotations

from ..errors import TraceError
from .elementwise import conj
from .layout import as_tensor, concat, dim, expand_dims, index, iota, is_int, ndim_of, permute_dims, squeeze
from .trace import Tensor, cast_like, expect_same_shape, op_prefix, reduce, user_loc


def contract(product: Tensor, axes) -> Tensor:
    """``product`` summed over ``axes``, in the product's dtype: NumPy's sum accumulates small
    ints in int64 and bool as a count, and the cast back gives the standard's dtype with the same
    values (an int8 sum wraps as int8 arithmetic does; a bool count is nonzero where any is)."""
    return cast_like(reduce("sum", product, axes, False), product)


def _same_size(a: Tensor, i: int, b: Tensor, j: int, fn: str) -> None:
    expect_same_shape(iota(dim(a, i)), iota(dim(b, j)),
                      f"{fn}: contracted axis {i} of x1 and axis {j} of x2 differ in size")


def _axis(a, n: int, fn: str, what: str = "axis") -> int:
    if not is_int(a) or not -n <= int(a) < n:
        raise TraceError(f"{op_prefix()}{fn}: {what} {a!r} is out of range for rank {n} [at {user_loc()}]")
    return int(a) % n


def matmul(x1, x2, /) -> Tensor:
    """The array API's ``matmul`` (PEP 465's ``@``): ``(.., M, K) @ (.., K, N)``, batch dims
    broadcast, a 1-D operand promoted to a matrix and its dim removed again."""
    a, b = as_tensor(x1, "matmul"), as_tensor(x2, "matmul")
    ra, rb = ndim_of(a), ndim_of(b)
    if ra == 0 or rb == 0:
        raise TraceError(f"{op_prefix()}matmul: operands must have at least one dimension, got ranks {ra} and "
                         f"{rb} [at {user_loc()}]")
    if ra == 1:
        a = expand_dims(a, axis=0)
    if rb == 1:
        b = expand_dims(b, axis=-1)
    _same_size(a, -1, b, -2, "matmul")
    out = contract(expand_dims(a, axis=-1) * expand_dims(b, axis=-3), -2)
    if ra == 1:
        out = squeeze(out, -2)
    if rb == 1:
        out = squeeze(out, -1)
    return out


def tensordot(x1, x2, /, *, axes=2) -> Tensor:
    """The array API's ``tensordot``: ``x1``'s free axes, then ``x2``'s, contracted over ``axes``
    (an int N: x1's last N with x2's first N; or two sequences of axes)."""
    a, b = as_tensor(x1, "tensordot"), as_tensor(x2, "tensordot")
    ra, rb = ndim_of(a), ndim_of(b)
    if is_int(axes):
        n = int(axes)
        if n < 0 or n > min(ra, rb):
            raise TraceError(f"{op_prefix()}tensordot: axes={n} must lie in [0, {min(ra, rb)}] for ranks {ra} and "
                             f"{rb} [at {user_loc()}]")
        ca, cb = list(range(ra - n, ra)), list(range(n))
    else:
        try:
            ca, cb = ([_axis(x, r, "tensordot", "axes entry") for x in seq] for seq, r in zip(axes, (ra, rb)))
        except (TypeError, ValueError):
            raise TraceError(f"{op_prefix()}tensordot: axes must be an int or two sequences of axes, got {axes!r} "
                             f"[at {user_loc()}]") from None
        if len(ca) != len(cb) or len(set(ca)) != len(ca) or len(set(cb)) != len(cb):
            raise TraceError(f"{op_prefix()}tensordot: axes {axes!r} must be two sequences of one length, each "
                             f"without repeats [at {user_loc()}]")
    for i, j in zip(ca, cb):
        _same_size(a, i, b, j, "tensordot")
    fa, fb = [i for i in range(ra) if i not in ca], [j for j in range(rb) if j not in cb]
    # a as (free a.., contracted.., 1 per free b), b as (1 per free a, contracted.., free b..)
    a = permute_dims(a, tuple(fa + ca))
    b = permute_dims(b, tuple(cb + fb))
    for _ in fb:
        a = expand_dims(a, axis=-1)
    for _ in fa:
        b = expand_dims(b, axis=0)
    return contract(a * b, tuple(range(len(fa), len(fa) + len(ca))))


def vecdot(x1, x2, /, *, axis: int = -1) -> Tensor:
    """The array API's ``vecdot``: ``sum(conj(x1) * x2, axis=axis)``, the other axes broadcast
    (``axis`` counts from the end: [-N, -1] with N the smaller rank)."""
    a, b = as_tensor(x1, "vecdot"), as_tensor(x2, "vecdot")
    n = min(ndim_of(a), ndim_of(b))
    if not is_int(axis) or not -n <= int(axis) <= -1:
        raise TraceError(f"{op_prefix()}vecdot: axis {axis!r} must lie in [-{n}, -1] [at {user_loc()}]")
    _same_size(a, int(axis), b, int(axis), "vecdot")
    # (cast back: NumPy's conj turns bool into int8, and vecdot of bools is bool)
    return contract(cast_like(conj(a), a) * b, int(axis))


def diff(x, /, *, axis: int = -1, n: int = 1, prepend=None, append=None) -> Tensor:
    """The array API's ``diff``: the n-th forward difference along ``axis`` (``prepend`` and
    ``append`` joined first). Numeric dtypes, as the standard says: a bool operand is refused as
    bool subtraction is (NumPy's own diff takes ``!=`` there)."""
    x = as_tensor(x, "diff")
    r = ndim_of(x)
    if r == 0:
        raise TraceError(f"{op_prefix()}diff: the operand must have at least one dimension [at {user_loc()}]")
    a = _axis(axis, r, "diff")
    if not is_int(n) or int(n) < 0:
        raise TraceError(f"{op_prefix()}diff: n must be a non-negative int, got {n!r} [at {user_loc()}]")
    pieces = [as_tensor(p, "diff") for p in (prepend, x, append) if p is not None]
    if len(pieces) > 1:
        x = concat(pieces, axis=a)
    head = (slice(None),) * a
    for _ in range(int(n)):
        x = index(x, head + (slice(1, None),)) - index(x, head + (slice(None, -1),))
    return x


def _rmatmul(self, other):
    return matmul(other, self)


Tensor.__matmul__ = matmul
Tensor.__rmatmul__ = _rmatmul

__all__ = ["matmul", "tensordot", "vecdot", "diff"]
