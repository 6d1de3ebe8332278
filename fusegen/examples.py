"""The reference ops: tests, the demo and the benchmarks use these.

Each is written the way a user would write it; none is special-cased anywhere.
"""
from __future__ import annotations

import math

from .graph import vocab as fg
from .ir import op


@op
def add_reduce_sum(x, y, *, axis: int = 1, keep_dims: bool = False):
    """The seeds' fused Add + ReduceSum: ``sum(x + y, axis, keep_dims)``."""
    tmp = x + y
    return fg.sum(tmp, axis=axis, keep_dims=keep_dims)


@op
def add_mul_div(x, y):
    """Two inputs, three outputs: ``x + y``, ``x * y``, ``x / y`` (the seeds' multi-output example)."""
    return x + y, x * y, x / y


@op
def smooth_l1(x, y, *, sigma: float = 1.0):
    """MXNet's smooth L1 loss of ``d = x - y``: ``0.5 (sigma d)^2`` where ``|d| < 1/sigma^2``,
    else ``|d| - 0.5 / sigma^2``."""
    d = x - y
    s2 = sigma * sigma
    ad = abs(d)
    return fg.where(ad < 1.0 / s2, 0.5 * s2 * d * d, ad - 0.5 / s2)


@op
def softmax(x, *, axis: int = -1):
    """Numerically stable softmax along ``axis``."""
    m = fg.max(x, axis=axis, keep_dims=True)
    e = fg.exp(x - m)
    return e / fg.sum(e, axis=axis, keep_dims=True)


@op
def layer_norm(x, *, axis: int = -1, eps: float = 1e-5):
    """Layer normalization without affine parameters; outputs ``y``, ``mean``, ``rstd``."""
    mean = fg.mean(x, axis=axis, keep_dims=True)
    d = x - mean
    var = fg.mean(d * d, axis=axis, keep_dims=True)
    rstd = fg.rsqrt(var + eps)
    return d * rstd, mean, rstd


@op
def rms_norm(x, w, *, eps: float = 1e-6):
    """RMSNorm over the last axis, scaled by ``w``."""
    ms = fg.mean(x * x, axis=-1, keep_dims=True)
    return x * fg.rsqrt(ms + eps) * w


_GELU_C = math.sqrt(2.0 / math.pi)


@op
def bias_gelu(x, b):
    """GELU (tanh approximation) of ``x + b``."""
    h = x + b
    return 0.5 * h * (1.0 + fg.tanh(_GELU_C * (h + 0.044715 * h * h * h)))


# --- random numbers (fusegen/graph/rng.py) ------------------------------------------------------
# (imported here, not at the top: the reference ops above keep their line numbers, which their
# text form, hence the golden emitted files, quotes)
from . import random as fg_random  # noqa: E402
@op
def dropout_add_layer_norm(x, residual, gamma, beta, *, p: float = 0.1, seed: int = 0, eps: float = 1e-5):
    """The fused block of transformer training: ``h = dropout(x) + residual``, then layer norm of
    ``h`` over the last axis, scaled by ``gamma`` and shifted by ``beta``; outputs ``y`` and ``h``
    (the residual stream the next block adds to). Dropout keeps ``x`` where
    ``fg.random.uniform(seed, x.shape) >= p`` and scales it by ``1 / (1 - p)``: no mask is read or
    written, and ``fg.grad`` recomputes the same numbers."""
    keep = fg_random.uniform(seed, x.shape) >= p
    h = fg.where(keep, x / (1.0 - p), 0.0) + residual
    mean = fg.mean(h, axis=-1, keep_dims=True)
    d = h - mean
    var = fg.mean(d * d, axis=-1, keep_dims=True)
    return d * fg.rsqrt(var + eps) * gamma + beta, h


__all__ = ["add_reduce_sum", "add_mul_div", "smooth_l1", "softmax", "layer_norm", "rms_norm", "bias_gelu",
           "dropout_add_layer_norm", "REFERENCE_OPS", "RANDOM_OPS"]

#: The reference ops every backend runs (the emitted C++/CUDA/XLA included).
REFERENCE_OPS = [add_reduce_sum, add_mul_div, smooth_l1, softmax, layer_norm, rms_norm, bias_gelu]
#: Reference ops with random numbers: Numba CPU and numba-cuda only, until the emitters compute them.
RANDOM_OPS = [dropout_add_layer_norm]
