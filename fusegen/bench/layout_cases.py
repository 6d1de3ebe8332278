"""The layout ops' bench rows (issue #16): their reference code and hand-written Numba versions.

Written like ``cases.py``'s: the reference once against an array namespace ``xp`` (NumPy,
jax.numpy, or torch through ``cases.torch_namespace``), the obvious way; the Numba versions
fused and ``prange``-parallel over the outer loop, as a competent user writes them. Their
shapes are the issue's (attention-sized 4-D tensors), not the 2-D shapes the elementwise rows
share, so each row says its own shapes and how each input's shape follows from the case's.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

_JIT = dict(parallel=True, fastmath=True, cache=True)
_F0, _ONE = np.float32(0.0), np.float32(1.0)


# --- references, once per op ------------------------------------------------------------------------
def xp_transpose_add(xp, x, y):
    return x + y.T


def xp_rope(xp, x, cos, sin):
    h = x.shape[-1] // 2
    return x * cos + xp.concat([-x[..., h:], x[..., :h]], axis=-1) * sin


def xp_heads_split(xp, x, *, heads, scale):
    b, s, e = x.shape
    return xp.permute_dims(x.reshape(b, s, heads, e // heads), (0, 2, 1, 3)) * scale


def xp_causal_softmax(xp, x):
    q, k = x.shape[-2:]
    keep = xp.arange(q)[:, None] >= xp.arange(k)[None, :]
    z = xp.where(keep, x, -math.inf)
    e = xp.exp(z - xp.max(z, axis=-1, keepdims=True))
    return e / xp.sum(e, axis=-1, keepdims=True)


def xp_swiglu(xp, x):
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    return a / (1.0 + xp.exp(-a)) * b


def xp_group_norm(xp, x, gamma, beta, *, groups, eps):
    n, c = x.shape[0], x.shape[1]
    g = x.reshape(n, groups, -1)
    mean = xp.mean(g, axis=-1, keepdims=True)
    d = g - mean
    var = xp.mean(d * d, axis=-1, keepdims=True)
    y = (d / xp.sqrt(var + eps)).reshape(x.shape)
    return y * gamma[:, None, None] + beta[:, None, None]


# --- hand-written Numba -------------------------------------------------------------------------------
@njit(**_JIT)
def nb_transpose_add(x, y):  # pragma: no cover - compiled by Numba
    n, m = x.shape
    out = np.empty_like(x)
    b = 64                                  # square tiles: y is read in cache-sized blocks
    for bi in prange((n + b - 1) // b):
        for bj in range(0, m, b):
            for i in range(bi * b, min(n, bi * b + b)):
                for j in range(bj, min(m, bj + b)):
                    out[i, j] = x[i, j] + y[j, i]
    return out


@njit(**_JIT)
def nb_rope(x, cos, sin):  # pragma: no cover - compiled by Numba
    b, h, s, d = x.shape
    half = d // 2
    out = np.empty_like(x)
    for r in prange(b * h):
        xr, orow = x[r // h, r % h], out[r // h, r % h]
        for i in range(s):
            for j in range(half):
                orow[i, j] = xr[i, j] * cos[i, j] - xr[i, j + half] * sin[i, j]
            for j in range(half, d):
                orow[i, j] = xr[i, j] * cos[i, j] + xr[i, j - half] * sin[i, j]
    return out


@njit(**_JIT)
def nb_heads_split(x, heads, scale):  # pragma: no cover - compiled by Numba
    b, s, e = x.shape
    d = e // heads
    out = np.empty((b, heads, s, d), x.dtype)
    sc = x.dtype.type(scale)
    for r in prange(b * heads):
        bi, hi = r // heads, r % heads
        for i in range(s):
            for j in range(d):
                out[bi, hi, i, j] = x[bi, i, hi * d + j] * sc
    return out


@njit(**_JIT)
def nb_causal_softmax(x):  # pragma: no cover - compiled by Numba
    shp = x.shape
    q, k = shp[-2], shp[-1]
    flat = x.reshape(-1, q, k)
    out = np.zeros_like(flat)
    for r in prange(flat.shape[0] * q):
        a, i = r // q, r % q
        row, o = flat[a, i], out[a, i]
        m = row[0]
        for j in range(1, min(i + 1, k)):
            m = max(m, row[j])
        s = _F0
        for j in range(min(i + 1, k)):
            e = np.exp(row[j] - m)
            o[j] = e
            s += e
        inv = _ONE / s
        for j in range(min(i + 1, k)):
            o[j] *= inv
    return out.reshape(shp)


@njit(**_JIT)
def nb_swiglu(x):  # pragma: no cover - compiled by Numba
    n, m = x.shape
    h = m // 2
    out = np.empty((n, h), x.dtype)
    for i in prange(n):
        for j in range(h):
            a = x[i, j]
            out[i, j] = a / (_ONE + np.exp(-a)) * x[i, j + h]
    return out


@njit(**_JIT)
def nb_group_norm(x, gamma, beta, groups, eps):  # pragma: no cover - compiled by Numba
    n, c, hh, ww = x.shape
    per = c // groups
    out = np.empty_like(x)
    for r in prange(n * groups):
        bi, gi = r // groups, r % groups
        blk = x[bi, gi * per:(gi + 1) * per]
        cnt = per * hh * ww
        s = _F0
        for ci in range(per):
            for i in range(hh):
                for j in range(ww):
                    s += blk[ci, i, j]
        mu = np.float32(s / cnt)
        v = _F0
        for ci in range(per):
            for i in range(hh):
                for j in range(ww):
                    v += (blk[ci, i, j] - mu) * (blk[ci, i, j] - mu)
        rs = np.float32(1.0 / np.sqrt(v / cnt + eps))
        for ci in range(per):
            ch = gi * per + ci
            gsc, gb = gamma[ch] * rs, beta[ch]
            for i in range(hh):
                for j in range(ww):
                    out[bi, ch, i, j] = (blk[ci, i, j] - mu) * gsc + gb
    return out


# --- input shapes from the case's shape -------------------------------------------------------------
def same(shape):
    return shape


def transposed(shape):
    return tuple(reversed(shape))


def last_two(shape):
    return shape[-2:]


def channels(shape):
    return shape[1:2]

