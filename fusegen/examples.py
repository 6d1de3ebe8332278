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


_SQRT1_2 = math.sqrt(0.5)


@op
def gelu_erf(x):
    """GELU, the exact (erf) form: ``x * (1 + erf(x / sqrt(2))) / 2``."""
    return 0.5 * x * (1.0 + fg.erf(x * _SQRT1_2))


@op
def silu(x):
    """SiLU (swish): ``x * sigmoid(x)``."""
    return x * fg.sigmoid(x)


@op
def sigmoid(x):
    """The logistic function, ``1 / (1 + exp(-x))``."""
    return fg.sigmoid(x)


@op
def softplus(x):
    """``log(1 + exp(x))``, written the overflow-free way: ``max(x, 0) + log(1 + exp(-|x|))``."""
    return fg.maximum(x, 0.0) + fg.log(1.0 + fg.exp(-abs(x)))


@op(inplace={0: "param", 1: "m", 2: "v"})
def adam_step(param, grad, m, v, *, lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999,
              eps: float = 1e-8, step: int = 1):
    """One Adam update (Kingma & Ba, with bias correction): returns the new ``param``, ``m`` and
    ``v``; each may be written over its input (``kernel(..., inplace=True)``)."""
    m1 = beta1 * m + (1.0 - beta1) * grad
    v1 = beta2 * v + (1.0 - beta2) * grad * grad
    mhat = m1 / (1.0 - beta1 ** step)
    vhat = v1 / (1.0 - beta2 ** step)
    return param - lr * mhat / (fg.sqrt(vhat) + eps), m1, v1


__all__ = ["add_reduce_sum", "add_mul_div", "smooth_l1", "softmax", "layer_norm", "rms_norm", "bias_gelu",
           "gelu_erf", "silu", "sigmoid", "softplus", "adam_step", "REFERENCE_OPS", "PERF_OPS"]

REFERENCE_OPS = [add_reduce_sum, add_mul_div, smooth_l1, softmax, layer_norm, rms_norm, bias_gelu]

#: More rows of ``fusegen bench`` (issue #19): transcendental-heavy activations and an optimizer
#: step. Checked numerically and for vectorization (tests/test_perf_ops.py), not by every
#: backend-wide suite that loops over ``REFERENCE_OPS`` (golden text, sanitizers, MindSpore).
PERF_OPS = [gelu_erf, silu, sigmoid, softplus, adam_step]
