"""The reference ops: tests, the demo and the benchmarks use these.

Each is written the way a user would write it; none is special-cased anywhere.
"""
from __future__ import annotations

import math

from .graph import vocab as fg
from .ir import cast_like, op


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


# --- layout ops: the kernels people fuse around attention and norms (issue #16) -----------------
@op
def transpose_add(x, y):
    """``x + y.T``: one operand read transposed, in blocks."""
    return x + y.T


@op
def rope(x, cos, sin):
    """Rotary position embedding, the rotate-half form: ``x * cos + rotate_half(x) * sin`` with
    ``x`` (..., seq, dim) and ``cos``, ``sin`` (seq, dim)."""
    half = x.shape[-1] // 2
    rotated = fg.concat([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


@op
def heads_split(x, *, heads: int = 16, scale: float = 1.0):
    """Attention's head split: (batch, seq, heads * d) -> (batch, heads, seq, d), scaled."""
    b, s, e = x.shape[0], x.shape[1], x.shape[2]
    return fg.permute_dims(x.reshape(b, s, heads, e // heads), (0, 2, 1, 3)) * scale


@op
def causal_softmax(x):
    """Softmax over the last axis of attention scores (..., q, k), keys after the query masked."""
    q, k = x.shape[-2], x.shape[-1]
    keep = fg.arange(q)[:, None] >= fg.arange(k)[None, :]
    z = fg.where(keep, x, -math.inf)
    m = fg.max(z, axis=-1, keepdims=True)
    e = fg.exp(z - m)
    return e / fg.sum(e, axis=-1, keepdims=True)


@op
def swiglu(x):
    """SwiGLU's gate: the last axis split in two halves ``a``, ``b``; ``silu(a) * b``."""
    a, b = fg.split(x, 2, axis=-1)
    return a * fg.sigmoid(a) * b


@op
def group_norm(x, gamma, beta, *, groups: int = 32, eps: float = 1e-5):
    """Group normalization of ``x`` (N, C, H, W) over ``groups`` groups of channels, then the
    per-channel affine ``gamma``, ``beta`` (C,)."""
    g = x.reshape(x.shape[0], groups, -1)
    mean = fg.mean(g, axis=-1, keepdims=True)
    d = g - mean
    var = fg.mean(d * d, axis=-1, keepdims=True)
    y = (d * fg.rsqrt(var + eps)).reshape(x.shape[0], x.shape[1], -1)
    return (y * gamma[:, None] + beta[:, None]).reshape(x.shape[0], x.shape[1], x.shape[2], x.shape[3])


@op
def sigmoid(x):
    """The logistic function, ``1 / (1 + exp(-x))``."""
    return fg.sigmoid(x)


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
           "transpose_add", "rope", "heads_split", "causal_softmax", "swiglu", "group_norm",
           "sigmoid", "adam_step", "REFERENCE_OPS", "LAYOUT_OPS", "PERF_OPS",
           "cross_entropy", "accuracy", "embedding_layer_norm", "cumsum_last", "cumsum_first", "GATHER_OPS"]


__all__ = ["add_reduce_sum", "add_mul_div", "smooth_l1", "softmax", "layer_norm", "rms_norm", "bias_gelu",
           "dropout_add_layer_norm", "REFERENCE_OPS", "RANDOM_OPS"]

#: The reference ops every backend runs (the emitted C++/CUDA/XLA included).
REFERENCE_OPS = [add_reduce_sum, add_mul_div, smooth_l1, softmax, layer_norm, rms_norm, bias_gelu]

#: The layout reference ops (issue #16): every backend that evaluates index maps runs them.
LAYOUT_OPS = [transpose_add, rope, heads_split, causal_softmax, swiglu, group_norm]

#: More rows of ``fusegen bench`` (issue #19): the logistic function and an optimizer step (the
#: other activations are ``ACTIVATION_OPS``). Checked numerically and for vectorization (tests/test_perf_ops.py, tests/test_vectorize.py),
#: not by every backend-wide suite that loops over ``REFERENCE_OPS`` (golden text, sanitizers, MindSpore).
PERF_OPS = [sigmoid, adam_step]

# --- issue #17: gathers, arg-reductions and scans ------------------------------------------------
# (not in REFERENCE_OPS yet: the emitted CPU C++ and XLA CPU handlers run them, the emitted CUDA
# sources still refuse gathers)
from .graph.gathers import take, take_along_axis  # noqa: E402
from .graph.scans import cumulative_sum  # noqa: E402
from .graph.searching import argmax  # noqa: E402


@op
def cross_entropy(logits, labels):
    """Mean softmax cross-entropy: ``logsumexp(z) - z[label]`` per row. (The picked logit is
    summed over its size-1 axis instead of indexed, so fg.grad needs no view adjoint.)"""
    lse = fg.log(fg.sum(fg.exp(logits - fg.max(logits, axis=-1, keepdims=True)), axis=-1)) + fg.max(logits, axis=-1)
    picked = fg.sum(take_along_axis(logits, labels[..., None], axis=-1), axis=-1)
    return fg.mean(lse - picked)


@op
def accuracy(logits, labels):
    """Top-1 accuracy: the fraction of rows whose argmax is the label."""
    return fg.mean(fg.cast(argmax(logits, axis=-1) == labels, "float32"))


@op
def embedding_layer_norm(table, ids, gamma, beta, *, eps: float = 1e-5):
    """An embedding lookup (rows of ``table`` at ``ids``) followed by a layer norm over the
    embedding dim: the gathered rows are read once per reduction pass, never materialized."""
    e = take(table, ids, axis=0)
    mean = fg.mean(e, axis=-1, keepdims=True)
    d = e - mean
    rstd = fg.rsqrt(fg.mean(d * d, axis=-1, keepdims=True) + eps)
    return d * rstd * gamma + beta


@op
def cumsum_last(x):
    return cumulative_sum(x, axis=-1)


@op
def cumsum_first(x):
    return cumulative_sum(x, axis=0)


GATHER_OPS = [cross_entropy, accuracy, embedding_layer_norm, cumsum_last, cumsum_first]

#: cross_entropy's gradient with respect to the logits (softmax minus the label's one-hot, times
#: ``d_out / rows``): a ``fusegen bench`` row of its own (not in ``GATHER_OPS``: the backend-wide
#: suites run the forward ops; the backward is checked by tests/test_examples_i17.py).
from .graph.grad import grad  # noqa: E402

cross_entropy_grad = grad(cross_entropy, wrt="logits")


# --- quantization and activations (#18) -----------------------------------------------------
@op
def quantize_int8(x, scale):
    """Symmetric int8 quantization: ``clip(round(x / scale), -128, 127)`` as int8, halves to even
    (``np.rint``'s rounding, as PyTorch's ``quantize_per_tensor``). ``scale`` broadcasts (a
    0-d per-tensor scale, or per channel)."""
    return fg.clip(fg.round(x / scale), -128, 127).astype("int8")


@op
def dequantize(q, scale):
    """``q * scale`` in ``scale``'s dtype (int8 codes back to floats)."""
    return cast_like(q, scale) * scale


@op
def softplus(x):
    """``log(1 + exp(x))`` without overflow: ``max(x, 0) + log1p(exp(-|x|))`` (jax.nn.softplus's)."""
    return fg.maximum(x, 0.0) + fg.log1p(fg.exp(-abs(x)))


@op
def silu(x):
    """SiLU (swish): ``x * sigmoid(x)``."""
    return x * fg.sigmoid(x)


@op
def mish(x):
    """Mish: ``x * tanh(softplus(x))``."""
    return x * fg.tanh(fg.maximum(x, 0.0) + fg.log1p(fg.exp(-abs(x))))


_SQRT1_2 = math.sqrt(0.5)


@op
def gelu(x):
    """GELU, the exact (erf) form: ``0.5 x (1 + erf(x / sqrt(2)))``."""
    return 0.5 * x * (1.0 + fg.erf(x * _SQRT1_2))


__all__ += ["quantize_int8", "dequantize", "softplus", "silu", "mish", "gelu", "ACTIVATION_OPS"]
#: the #18 reference ops (kept apart from REFERENCE_OPS, which every backend's golden text and
#: cross-backend tests iterate over: these are checked by tests/test_activations.py and the bench)
ACTIVATION_OPS = [quantize_int8, dequantize, softplus, silu, mish, gelu]


# --- random numbers (fusegen/graph/rng.py) ------------------------------------------------------
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
    mean = fg.mean(h, axis=-1, keepdims=True)
    d = h - mean
    var = fg.mean(d * d, axis=-1, keepdims=True)
    return d * fg.rsqrt(var + eps) * gamma + beta, h


__all__ += ["dropout_add_layer_norm", "RANDOM_OPS"]
#: Reference ops with random numbers (every backend; the emitted C++: fusegen/emitters/rng.py).
RANDOM_OPS = [dropout_add_layer_norm]
