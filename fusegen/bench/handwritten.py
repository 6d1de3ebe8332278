"""The hand-written Numba versions the bench compares fusegen with (``cases.OPS``'s ``njit`` column).

Fused, ``prange`` over rows (or over chunks of rows, with per-thread partial rows for a column
sum): the code a competent Numba user writes for the bench's 2-D shapes, not a strawman.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

_GELU_C = math.sqrt(2.0 / math.pi)


# --- the hand-written Numba versions --------------------------------------------------------------
# fastmath lets LLVM vectorize the float reductions (reassociation), as a user chasing speed
# writes it; cache=True keeps their compile out of every run but the first. Written for the
# bench's float32 2-D inputs: constants are float32 (a float64 literal would make every
# element's arithmetic float64, which no one tuning float32 code leaves in).
_JIT = dict(parallel=True, fastmath=True, cache=True)
_F0, _HALF, _ONE = np.float32(0.0), np.float32(0.5), np.float32(1.0)
_GELU_A, _GELU_B = np.float32(_GELU_C), np.float32(0.044715)


@njit(**_JIT)
def nb_sum_rows(x, y):  # pragma: no cover - compiled by Numba
    n, m = x.shape
    out = np.empty(n, x.dtype)
    for i in prange(n):
        xi, yi = x[i], y[i]
        s = _F0
        for j in range(m):
            s += xi[j] + yi[j]
        out[i] = s
    return out


@njit(**_JIT)
def nb_sum_cols(x, y, nblocks):  # pragma: no cover - compiled by Numba
    # Blocks of rows (a few per thread), each summed into a private row, then the rows folded:
    # every thread streams whole rows whatever the matrix's aspect.
    n, m = x.shape
    nt = max(1, min(n, nblocks))
    step = (n + nt - 1) // nt
    part = np.zeros((nt, m), x.dtype)
    for t in prange(nt):
        p = part[t]
        for i in range(t * step, min(n, (t + 1) * step)):
            xi, yi = x[i], y[i]
            for j in range(m):
                p[j] += xi[j] + yi[j]
    return part.sum(axis=0)


@njit(**_JIT)
def nb_add_mul_div(x, y):  # pragma: no cover - compiled by Numba
    n, m = x.shape
    a, p, q = np.empty_like(x), np.empty_like(x), np.empty_like(x)
    for i in prange(n):
        for j in range(m):
            a[i, j] = x[i, j] + y[i, j]
            p[i, j] = x[i, j] * y[i, j]
            q[i, j] = x[i, j] / y[i, j]
    return a, p, q


@njit(**_JIT)
def nb_smooth_l1(x, y, lim, half, off):  # pragma: no cover - compiled by Numba
    n, m = x.shape
    out = np.empty_like(x)
    for i in prange(n):
        for j in range(m):
            d = x[i, j] - y[i, j]
            ad = abs(d)
            out[i, j] = half * d * d if ad < lim else ad - off
    return out


@njit(**_JIT)
def nb_softmax(x):  # pragma: no cover - compiled by Numba
    n, m = x.shape
    out = np.empty_like(x)
    for i in prange(n):
        xi, oi = x[i], out[i]
        mx = xi[0]
        for j in range(1, m):
            mx = max(mx, xi[j])
        s = _F0
        for j in range(m):
            e = np.exp(xi[j] - mx)
            oi[j] = e
            s += e
        inv = _ONE / s
        for j in range(m):
            oi[j] *= inv
    return out


@njit(**_JIT)
def nb_softmax_cols(x, nblocks):  # pragma: no cover - compiled by Numba
    # Softmax down the columns (axis 0): blocks of columns, one per task, each streaming whole
    # rows of its block three times (max, exp and sum, scale), with a max and a sum per column.
    n, m = x.shape
    out = np.empty_like(x)
    nb = max(1, min(m, nblocks))
    for b in prange(nb):
        j0, j1 = b * m // nb, (b + 1) * m // nb
        mx = x[0, j0:j1].copy()
        for i in range(1, n):
            for j in range(j0, j1):
                mx[j - j0] = max(mx[j - j0], x[i, j])
        s = np.zeros(j1 - j0, x.dtype)
        for i in range(n):
            for j in range(j0, j1):
                e = np.exp(x[i, j] - mx[j - j0])
                out[i, j] = e
                s[j - j0] += e
        inv = _ONE / s
        for i in range(n):
            for j in range(j0, j1):
                out[i, j] *= inv[j - j0]
    return out


@njit(**_JIT)
def nb_layer_norm(x, eps):  # pragma: no cover - compiled by Numba
    n, m = x.shape
    y = np.empty_like(x)
    mean = np.empty((n, 1), x.dtype)
    rstd = np.empty((n, 1), x.dtype)
    for i in prange(n):
        xi, yi = x[i], y[i]
        s = _F0
        for j in range(m):
            s += xi[j]
        mu = np.float32(s / m)
        v = _F0
        for j in range(m):
            v += (xi[j] - mu) * (xi[j] - mu)
        r = np.float32(1.0 / np.sqrt(v / m + eps))
        for j in range(m):
            yi[j] = (xi[j] - mu) * r
        mean[i, 0], rstd[i, 0] = mu, r
    return y, mean, rstd


@njit(**_JIT)
def nb_rms_norm(x, w, eps):  # pragma: no cover - compiled by Numba
    n, m = x.shape
    out = np.empty_like(x)
    for i in prange(n):
        xi, oi = x[i], out[i]
        s = _F0
        for j in range(m):
            s += xi[j] * xi[j]
        r = np.float32(1.0 / np.sqrt(s / m + eps))
        for j in range(m):
            oi[j] = xi[j] * r * w[j]
    return out


@njit(**_JIT)
def nb_bias_gelu(x, b):  # pragma: no cover - compiled by Numba
    n, m = x.shape
    out = np.empty_like(x)
    for i in prange(n):
        for j in range(m):
            h = x[i, j] + b[j]
            out[i, j] = _HALF * h * (_ONE + np.tanh(_GELU_A * (h + _GELU_B * h * h * h)))
    return out


@njit(**_JIT)
def nb_dropout_add_layer_norm(x, residual, gamma, beta, keep, scale, eps):  # pragma: no cover - compiled by Numba
    n, m = x.shape
    y, h = np.empty_like(x), np.empty_like(x)
    for i in prange(n):
        xi, ri, ki, hi, yi = x[i], residual[i], keep[i], h[i], y[i]
        s = _F0
        for j in range(m):
            v = (xi[j] * scale if ki[j] else _F0) + ri[j]
            hi[j] = v
            s += v
        mu = np.float32(s / m)
        var = _F0
        for j in range(m):
            var += (hi[j] - mu) * (hi[j] - mu)
        r = np.float32(1.0 / np.sqrt(var / m + eps))
        for j in range(m):
            yi[j] = (hi[j] - mu) * r * gamma[j] + beta[j]
    return y, h
