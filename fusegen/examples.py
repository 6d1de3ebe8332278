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


__all__ = ["add_reduce_sum", "add_mul_div", "smooth_l1", "softmax", "layer_norm", "rms_norm", "bias_gelu",
           "quantize_int8", "dequantize", "softplus", "silu", "mish", "gelu", "REFERENCE_OPS", "ACTIVATION_OPS"]

REFERENCE_OPS = [add_reduce_sum, add_mul_div, smooth_l1, softmax, layer_norm, rms_norm, bias_gelu]
#: the #18 reference ops (kept apart from REFERENCE_OPS, which every backend's golden text and
#: cross-backend tests iterate over: these are checked by tests/test_elementwise.py and the bench)
ACTIVATION_OPS = [quantize_int8, dequantize, softplus, silu, mish, gelu]
