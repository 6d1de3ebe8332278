"""The bench rows of the #18 reference ops (quantize_int8, dequantize, softplus, silu, mish, gelu):
their reference code, written once against an array namespace ``xp`` (NumPy, jax.numpy, torch's
thin namespace in ``bench.cases``), the hand-written Numba competitors, and their input values.
``bench.cases.OPS`` holds the rows."""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

# as bench.cases' hand-written versions: fastmath (a user chasing speed), float32 constants
_JIT = dict(parallel=True, fastmath=True, cache=True)
_F0, _HALF, _ONE = np.float32(0.0), np.float32(0.5), np.float32(1.0)


def xp_quantize_int8(xp, x, scale):
    return xp.astype(xp.clip(xp.round(x / scale), -128, 127), xp.int8) if hasattr(xp, "astype") else \
        xp.clip(xp.round(x / scale), -128, 127).astype(xp.int8)


def xp_dequantize(xp, q, scale):
    return xp.astype(q, scale.dtype) * scale if hasattr(xp, "astype") else q.astype(scale.dtype) * scale


def xp_softplus(xp, x):
    return xp.maximum(x, 0.0) + xp.log1p(xp.exp(-xp.abs(x)))


def xp_silu(xp, x):
    return x / (1.0 + xp.exp(-x))


def xp_mish(xp, x):
    return x * xp.tanh(xp.maximum(x, 0.0) + xp.log1p(xp.exp(-xp.abs(x))))


def xp_gelu(xp, x):
    return 0.5 * x * (1.0 + _erf(xp)(x * math.sqrt(0.5)))


def _erf(xp):
    """erf in namespace ``xp`` (NumPy has none: SciPy's, or math.erf elementwise)."""
    if getattr(xp, "__name__", "") == "jax.numpy":   # jax.numpy has none: jax.scipy's traces
        import jax.scipy.special
        return jax.scipy.special.erf
    if hasattr(xp, "special") and hasattr(xp.special, "erf"):
        return xp.special.erf
    if hasattr(xp, "erf"):
        return xp.erf
    try:
        from scipy.special import erf
        return erf
    except ImportError:
        return np.vectorize(math.erf, otypes=[np.float64])



@njit(parallel=True, cache=True)  # (no fastmath: rint's halves must stay exact)
def nb_quantize_int8(x, scale):  # pragma: no cover - compiled by Numba
    n, m = x.shape
    out = np.empty((n, m), np.int8)
    for i in prange(n):
        for j in range(m):
            out[i, j] = np.int8(min(max(np.rint(x[i, j] / scale[j]), np.float32(-128)), np.float32(127)))
    return out


@njit(**_JIT)
def nb_dequantize(q, scale):  # pragma: no cover - compiled by Numba
    n, m = q.shape
    out = np.empty((n, m), scale.dtype)
    for i in prange(n):
        for j in range(m):
            out[i, j] = np.float32(q[i, j]) * scale[j]
    return out


@njit(**_JIT)
def nb_softplus(x):  # pragma: no cover - compiled by Numba
    out = np.empty_like(x)
    for i in prange(x.shape[0]):
        for j in range(x.shape[1]):
            v = x[i, j]
            out[i, j] = max(v, _F0) + np.log1p(np.exp(-abs(v)))
    return out


@njit(**_JIT)
def nb_silu(x):  # pragma: no cover - compiled by Numba
    out = np.empty_like(x)
    for i in prange(x.shape[0]):
        for j in range(x.shape[1]):
            v = x[i, j]
            out[i, j] = v / (_ONE + np.exp(-v))
    return out


@njit(**_JIT)
def nb_mish(x):  # pragma: no cover - compiled by Numba
    out = np.empty_like(x)
    for i in prange(x.shape[0]):
        for j in range(x.shape[1]):
            v = x[i, j]
            out[i, j] = v * np.tanh(max(v, _F0) + np.log1p(np.exp(-abs(v))))
    return out


@njit(**_JIT)
def nb_gelu(x):  # pragma: no cover - compiled by Numba
    out = np.empty_like(x)
    for i in prange(x.shape[0]):
        for j in range(x.shape[1]):
            v = x[i, j]
            out[i, j] = _HALF * v * (_ONE + np.float32(math.erf(v * _SQRT1_2)))
    return out


_SQRT1_2 = np.float32(math.sqrt(0.5))


def pow2_scales(rng, shape, dtype):
    """Per-channel power-of-two scales: x / scale is exact, so every method rounds the same value."""
    return (2.0 ** -rng.integers(4, 8, shape)).astype(dtype)


def int8_codes(rng, shape, dtype):
    return rng.integers(-128, 128, shape, dtype=np.int8)
