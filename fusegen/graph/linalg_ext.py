"""The array API's ``linalg`` extension (2024.12), as far as fused kernels go: the norms, the
diagonal, trace, cross and outer products, and the main namespace's contractions again
(``fg.linalg``). Each is a composition of views, elementwise ops and reductions, so it fuses into
the op around it (a cosine similarity's norms, a clip-by-norm's scale). The decompositions and
solvers (``cholesky``, ``inv``, ``solve``, ``svd``, ``eigh``, ``det``, ...) are not fused-kernel
material and are not here; neither is ``matrix_norm``'s ``ord=2``/``-2``/``"nuc"`` (singular
values).

``vector_norm`` and ``matrix_norm`` take integer inputs too and return NumPy's float64 for
them (the standard specifies real-valued floating-point inputs only); a complex input gives
its real dtype.
"""
from __future__ import annotations

import math

from ..errors import TraceError
from .datatypes import isdtype
from .layout import as_tensor, dim, iota, ndim_of, permute_dims, reshape, squeeze, stack
from .searching import count_nonzero
from .stats import sum as fgsum
from .trace import Tensor, cast, expect_same_shape, op_prefix, user_loc
from .vocab import abs as fgabs, max as fgmax, maximum, min as fgmin, minimum, pow as fgpow, sqrt

__all__ = ["cross", "diagonal", "matrix_norm", "outer", "trace", "vector_norm"]


def _fail(fn: str, msg: str):
    raise TraceError(f"{op_prefix()}linalg.{fn}: {msg} [at {user_loc()}]")


def _floating(x: Tensor) -> Tensor:
    """``x`` as the floating dtype its norm is computed in (an integer or bool: float64)."""
    return x if isdtype(x.dtype, ("real floating", "complex floating")) else cast(x, "float64")


def vector_norm(x, /, *, axis=None, keepdims=False, ord=2) -> Tensor:  # noqa: A002  (the standard's name)
    """The standard's ``vector_norm``: over ``axis`` (an int, a tuple, or None: every element),
    ``ord`` 2 (Euclidean), 1, inf, -inf, 0 (the count of nonzeros) or any other p (``(sum |x|^p)^(1/p)``)."""
    if isinstance(ord, bool) or not isinstance(ord, (int, float)):
        _fail("vector_norm", f"ord must be a number, got {ord!r}")
    x = _floating(as_tensor(x, "linalg.vector_norm"))
    a = fgabs(x)
    if ord == 2:
        return sqrt(fgsum(a * a, axis=axis, keepdims=keepdims))
    if ord == 1:
        return fgsum(a, axis=axis, keepdims=keepdims)
    if ord == math.inf:
        return fgmax(a, axis=axis, keepdims=keepdims)
    if ord == -math.inf:
        return fgmin(a, axis=axis, keepdims=keepdims)
    if ord == 0:
        return cast(count_nonzero(a, axis=axis, keepdims=keepdims), a.dtype)
    return fgpow(fgsum(fgpow(a, float(ord)), axis=axis, keepdims=keepdims), 1.0 / float(ord))


def matrix_norm(x, /, *, keepdims=False, ord="fro") -> Tensor:  # noqa: A002
    """The standard's ``matrix_norm`` over the last two axes: ``"fro"``, 1 / -1 (the largest /
    smallest column sum of |x|), inf / -inf (row sums). ``ord`` 2, -2 and ``"nuc"`` need singular
    values, which no fused kernel computes."""
    if not (ord == "fro" or (not isinstance(ord, (bool, str)) and ord in (1, -1, math.inf, -math.inf))):
        _fail("matrix_norm", f"ord={ord!r} is not available in a fused kernel (2, -2 and 'nuc' need singular "
                             "values); use 'fro', 1, -1, inf or -inf")
    x = _floating(as_tensor(x, "linalg.matrix_norm"))
    if ndim_of(x) < 2:
        _fail("matrix_norm", "the input must have at least 2 dims")
    a = fgabs(x)
    if ord == "fro":
        return sqrt(fgsum(a * a, axis=(-2, -1), keepdims=keepdims))
    over, then = (-2, -1) if ord in (1, -1) else (-1, -2)
    sums = fgsum(a, axis=over, keepdims=True)
    out = (fgmax if ord > 0 else fgmin)(sums, axis=then, keepdims=True)
    return out if keepdims else squeeze(out, axis=(-2, -1))


def diagonal(x, /, *, offset=0) -> Tensor:
    """The standard's ``diagonal``: the last two axes' diagonal (``offset`` above it when
    positive), a view: the two axes flattened and read with a stride of one column more."""
    x = as_tensor(x, "linalg.diagonal")
    r = ndim_of(x)
    if r < 2:
        _fail("diagonal", "the input must have at least 2 dims")
    if not isinstance(offset, int) or isinstance(offset, bool):
        _fail("diagonal", f"offset must be an int, got {offset!r}")
    m, n = dim(x, r - 2), dim(x, r - 1)
    flat = reshape(x, tuple(dim(x, k) for k in range(r - 2)) + (m * n,))
    start = offset if offset >= 0 else -offset * n
    # (minimum/maximum of dims: static values, so one trace serves every shape)
    length = maximum(minimum(m, n - offset) if offset >= 0 else minimum(m + offset, n), 0)
    return flat[..., start:start + length * (n + 1):n + 1]


def trace(x, /, *, offset=0, dtype=None) -> Tensor:
    """The standard's ``trace``: the sum of ``diagonal(x, offset=offset)`` (in ``sum``'s dtype, or
    ``dtype``)."""
    return fgsum(diagonal(x, offset=offset), axis=-1, dtype=dtype)


def outer(x1, x2, /) -> Tensor:
    """The standard's ``outer`` of two 1-D arrays."""
    a, b = as_tensor(x1, "linalg.outer"), as_tensor(x2, "linalg.outer")
    if ndim_of(a) != 1 or ndim_of(b) != 1:
        _fail("outer", f"both inputs must be 1-D, got ranks {ndim_of(a)} and {ndim_of(b)}")
    return reshape(a, (dim(a, 0), 1)) * reshape(b, (1, dim(b, 0)))


def cross(x1, x2, /, *, axis=-1) -> Tensor:
    """The standard's ``cross`` of 3-element vectors along ``axis`` (the other axes broadcast)."""
    a, b = as_tensor(x1, "linalg.cross"), as_tensor(x2, "linalg.cross")
    ra, rb = ndim_of(a), ndim_of(b)
    if not isinstance(axis, int) or not -min(ra, rb) <= axis <= -1:
        _fail("cross", f"axis {axis!r} must lie in [-{min(ra, rb)}, -1]")
    for t, rank in ((a, ra), (b, rb)):
        expect_same_shape(iota(dim(t, rank + axis)), iota(3), "linalg.cross: the axis must have size 3")
    a, b = (permute_dims(t, tuple(k for k in range(rank) if k != rank + axis) + (rank + axis,))
            for t, rank in ((a, ra), (b, rb)))
    a0, a1, a2 = (a[..., k] for k in range(3))
    b0, b1, b2 = (b[..., k] for k in range(3))
    out = _stack_last([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0])
    r = ndim_of(out)
    at = r + axis
    return permute_dims(out, tuple(range(at)) + (r - 1,) + tuple(range(at, r - 1)))


def _stack_last(parts):
    return stack(parts, axis=-1)

