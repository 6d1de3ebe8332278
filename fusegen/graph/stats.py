"""The array API's statistical and utility reductions beyond the five IR reductions: ``sum`` and
``prod`` with the standard's ``dtype=``, ``var`` and ``std`` (with ``correction``), ``all`` and
``any``, and the helpers ``logsumexp``, ``softmax`` and ``log_softmax``. All are compositions of
the IR's reductions and elementwise ops (no new node kinds), so the planner fuses them like any
other expression. ``keepdims`` is the standard's name; ``keep_dims`` (MindSpore's) is an alias.
"""
from __future__ import annotations

from .. import dtypes as dt
from .nodes import Op
from .trace import Tensor, binary, cast, cast_like, operand, reduce, unary, where


def _keep(keepdims, keep_dims):
    return keepdims if keep_dims is None else keep_dims


def _reduce_with_dtype(kind: str, x, axis, dtype, keepdims):
    if dtype is None:
        return reduce(kind, x, axis, keepdims)
    # NumPy's dtype=: the elements are converted, accumulated and returned in ``dtype`` (fusegen
    # accumulates integers in 64 bits and floats in at least 32, then rounds: the same values)
    return cast(reduce(kind, cast(x, dtype), axis, keepdims), dtype)


def sum(x, /, axis=None, dtype=None, keepdims=False, *, keep_dims=None) -> Tensor:  # noqa: A001
    """np.sum / the array API's ``sum``: over ``axis`` (None: all), in ``dtype`` if given (else
    NumPy's: int64 for signed ints and bool, uint64 for unsigned, the float dtype for floats)."""
    return _reduce_with_dtype("sum", x, axis, dtype, _keep(keepdims, keep_dims))


def prod(x, /, axis=None, dtype=None, keepdims=False, *, keep_dims=None) -> Tensor:
    """np.prod / the array API's ``prod``, with ``dtype=`` as ``sum``'s."""
    return _reduce_with_dtype("prod", x, axis, dtype, _keep(keepdims, keep_dims))


def _count(x: Tensor, axis, keepdims) -> Tensor:
    """How many elements each reduction over ``axis`` sees (known only at run time), as float64."""
    one = where(x != x, 1.0, 1.0)   # ones of x's shape, even where x is NaN or inf
    return reduce("sum", one, axis, keepdims)


def var(x, /, *, axis=None, correction=0.0, keepdims=False, keep_dims=None) -> Tensor:
    """The array API's ``var``: mean squared deviation from the mean, divided by
    ``N - correction`` (clamped at 0, so a correction >= N gives inf or NaN, as NumPy's)."""
    x = Tensor(operand(x))
    keep = _keep(keepdims, keep_dims)
    d = x - reduce("mean", x, axis, True)
    ss = reduce("sum", d * d, axis, keep)
    n = binary(Op.MAX, _count(x, axis, keep) - correction, 0.0)
    return ss / cast_like(n, ss)


def std(x, /, *, axis=None, correction=0.0, keepdims=False, keep_dims=None) -> Tensor:
    """The array API's ``std``: ``sqrt(var(...))``."""
    return unary(Op.SQRT, var(x, axis=axis, correction=correction, keepdims=keepdims, keep_dims=keep_dims))


def all(x, /, *, axis=None, keepdims=False, keep_dims=None) -> Tensor:  # noqa: A001
    """True where every element over ``axis`` is non-zero (NaN counts as non-zero); True when empty."""
    zeros = reduce("sum", cast(Tensor(operand(x)) == 0, dt.int64), axis, _keep(keepdims, keep_dims))
    return zeros == 0


def any(x, /, *, axis=None, keepdims=False, keep_dims=None) -> Tensor:  # noqa: A001
    """True where some element over ``axis`` is non-zero; False when empty."""
    nonzero = reduce("sum", cast(Tensor(operand(x)) != 0, dt.int64), axis, _keep(keepdims, keep_dims))
    return nonzero > 0


def logsumexp(x, /, *, axis=None, keepdims=False, keep_dims=None) -> Tensor:
    """``log(sum(exp(x), axis))`` without overflow (SciPy's ``logsumexp``): the maximum is taken
    out first, and a slice whose maximum is infinite (all -inf, or a +inf) or NaN gives it
    unchanged. The exps' argument is ``x - max`` itself (not a shift that is 0 for an infinite
    max), so that plan/fusedmath.py may compute them as exp_shifted_f32; where the max is not
    finite that sum is NaN, and the log is dropped. Over an empty axis it is ``log(0)``, -inf
    (SciPy's and PyTorch's): its maxima start at -inf there rather than being refused."""
    x = Tensor(operand(x))
    keep = _keep(keepdims, keep_dims)
    s = reduce("sum", unary(Op.EXP, x - reduce("max", x, axis, True, empty_ok=True)), axis, keep)
    top = reduce("max", x, axis, keep, empty_ok=True)
    return where(unary(Op.ISFINITE, top), unary(Op.LOG, s), 0) + top


def softmax(x, /, *, axis=-1) -> Tensor:
    """``exp(x - max) / sum(exp(x - max))`` over ``axis`` (an empty axis: an empty result, as
    jax.nn.softmax's; the max that nothing reads is not refused)."""
    x = Tensor(operand(x))
    e = unary(Op.EXP, x - reduce("max", x, axis, True, empty_ok=True))
    return e / reduce("sum", e, axis, True)


def log_softmax(x, /, *, axis=-1) -> Tensor:
    """``x - logsumexp(x, axis)``, computed as ``(x - max) - log(sum(exp(x - max)))``: a slice
    that holds +inf or NaN is NaN throughout, as ``jax.nn.log_softmax`` and PyTorch's are (SciPy's
    gives -inf beside a +inf)."""
    x = Tensor(operand(x))
    z = x - reduce("max", x, axis, True, empty_ok=True)
    return z - unary(Op.LOG, reduce("sum", unary(Op.EXP, z), axis, True))
