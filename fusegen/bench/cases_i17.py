"""``fusegen bench`` rows of issue #17 (gathers, arg-reductions and scans): cross_entropy (and its
gradient with respect to the logits, ``cross_entropy_grad``: fg.grad's backward op), accuracy,
embedding_layer_norm, cumsum_last and cumsum_first, each with its obvious NumPy/jax.numpy code and
a hand-written Numba version (see ``fusegen.bench.cases``). The inputs come from the case's shape
``(rows, cols)``: logits of that shape with int64 labels per row; an embedding table of that shape
read at ``rows`` random ids; for the scans, a matrix of that shape summed along its last or first
axis.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

# as fusegen.bench.cases's hand-written versions: fused, prange over rows, float32 constants
_JIT = dict(parallel=True, fastmath=True, cache=True)
_F0, _ONE = np.float32(0.0), np.float32(1.0)


def xp_cross_entropy(xp, z, y):
    m = xp.max(z, axis=-1, keepdims=True)
    lse = xp.log(xp.sum(xp.exp(z - m), axis=-1)) + m[:, 0]
    return xp.mean(lse - xp.take_along_axis(z, y[:, None], axis=-1)[:, 0])


def xp_cross_entropy_grad(xp, z, y, d):
    """d(mean loss)/d(logits): softmax minus the label's one-hot, times d_out / rows (the one-hot
    as a compare with an arange: what jax.grad and torch's backward compute, written out)."""
    m = xp.max(z, axis=-1, keepdims=True)
    e = xp.exp(z - m)
    p = e / xp.sum(e, axis=-1, keepdims=True)
    return xp.where(xp.arange(z.shape[-1]) == y[:, None], p - 1.0, p) * (d / z.shape[0])


def xp_accuracy(xp, z, y):
    return xp.mean(xp.astype(xp.argmax(z, axis=-1) == y, z.dtype) if hasattr(xp, "astype") else
                   (xp.argmax(z, axis=-1) == y) * 1.0)


def xp_embedding_layer_norm(xp, table, ids, gamma, beta, *, eps):
    e = table[ids]
    mean = xp.mean(e, axis=-1, keepdims=True)
    d = e - mean
    return d / xp.sqrt(xp.mean(d * d, axis=-1, keepdims=True) + eps) * gamma + beta


@njit(fastmath=True, cache=True, inline="always")
def _max_sumexp(zi):  # pragma: no cover - compiled by Numba
    """A row's max and the sum of ``exp(z - max)``: two passes over the row, in cache."""
    mx = zi[0]
    for j in range(zi.shape[0]):
        mx = max(mx, zi[j])
    s = _F0
    for j in range(zi.shape[0]):
        s += np.exp(zi[j] - mx)
    return mx, s


@njit(**_JIT)
def nb_cross_entropy(z, y):  # pragma: no cover - compiled by Numba
    n, m = z.shape
    losses = np.empty(n, np.float64)
    for i in prange(n):
        zi = z[i]
        mx, s = _max_sumexp(zi)
        losses[i] = np.log(s) + mx - zi[y[i]]
    return np.float32(losses.mean())


@njit(**_JIT)
def nb_cross_entropy_grad(z, y, d):  # pragma: no cover - compiled by Numba
    n, m = z.shape
    out = np.empty_like(z)
    c = np.float32(d / n)
    for i in prange(n):
        zi, oi = z[i], out[i]
        mx, s = _max_sumexp(zi)
        r = c / s
        for j in range(m):
            oi[j] = np.exp(zi[j] - mx) * r
        oi[y[i]] -= c
    return out


@njit(**_JIT)
def nb_accuracy(z, y):  # pragma: no cover - compiled by Numba
    n, m = z.shape
    hits = np.empty(n, np.float64)
    for i in prange(n):
        zi = z[i]
        best, at = zi[0], 0
        for j in range(m):
            if zi[j] > best:
                best, at = zi[j], j
        hits[i] = 1.0 if at == y[i] else 0.0
    return hits.mean()


@njit(**_JIT)
def nb_embedding_layer_norm(table, ids, gamma, beta, eps):  # pragma: no cover - compiled by Numba
    n, d = ids.shape[0], table.shape[1]
    out = np.empty((n, d), table.dtype)
    for i in prange(n):
        e, o = table[ids[i]], out[i]
        s = _F0
        for j in range(d):
            s += e[j]
        mean = s / d
        v = _F0
        for j in range(d):
            v += (e[j] - mean) * (e[j] - mean)
        r = np.float32(_ONE / np.sqrt(v / d + eps))
        for j in range(d):
            o[j] = (e[j] - mean) * r * gamma[j] + beta[j]
    return out


def _f32(fn):
    """A scalar result as a float32 0-d value, as the references and fusegen give it."""
    return lambda *a: np.float32(fn(*a))


def _whole(shape):
    """The input kind whose values get the case's whole shape (and pick their own)."""
    return shape


def _labels(rng, shape, dtype):
    return rng.integers(0, shape[-1], shape[:-1], dtype=np.int64)


def _ids(rng, shape, dtype):
    return rng.integers(0, shape[0], shape[:1], dtype=np.int64)


def _scalar(shape):
    """The input kind of a 0-d value (a cotangent of a scalar loss)."""
    return ()


def _one(rng, shape, dtype):
    return np.asarray(1.0, dtype)


def _uniform(lo: float, hi: float):
    return lambda rng, shape, dtype: (lo + (hi - lo) * rng.random(shape, dtype=np.float32)).astype(dtype)


def xp_cumsum_last(xp, x):
    return xp.cumulative_sum(x, axis=-1)


def xp_cumsum_first(xp, x):
    return xp.cumulative_sum(x, axis=0)


@njit(**_JIT)
def nb_cumsum_last(x):  # pragma: no cover - compiled by Numba
    n, m = x.shape
    out = np.empty_like(x)
    for i in prange(n):
        acc = x[i, 0] - x[i, 0]
        for j in range(m):
            acc += x[i, j]
            out[i, j] = acc
    return out


@njit(**_JIT)
def nb_cumsum_first(x):  # pragma: no cover - compiled by Numba
    n, m = x.shape
    out = np.empty_like(x)
    blocks = (m + 511) // 512   # column blocks across threads; each row of a block one vector add
    for b in prange(blocks):
        lo, hi = b * 512, min(m, b * 512 + 512)
        for j in range(lo, hi):
            out[0, j] = x[0, j]
        for i in range(1, n):
            for j in range(lo, hi):
                out[i, j] = out[i - 1, j] + x[i, j]
    return out


# the config's square case and the issue's logits (8192 rows of a 32000-word vocabulary: 1 GiB)
_ISSUE_SHAPES, _SMALL = ((4096, 4096), (8192, 32000)), ((256, 256), (4, 5))

#: ``fusegen.bench.cases.OpBench`` fields per row (cases.py makes the rows: no import back).
I17_ROWS = (
    dict(name="cross_entropy", xp_ref=xp_cross_entropy, njit=lambda a, at: (_f32(nb_cross_entropy), a),
         inputs=(("x", _uniform(-8.0, 8.0)), (_whole, _labels)), variants=({},),
         reduced=lambda shape, at: shape[0] * shape[1], shapes=_ISSUE_SHAPES, small_shapes=_SMALL),
    dict(name="accuracy", xp_ref=xp_accuracy, njit=lambda a, at: (_f32(nb_accuracy), a),
         inputs=(("x", _uniform(-8.0, 8.0)), (_whole, _labels)), variants=({},),
         reduced=lambda shape, at: shape[0], shapes=_ISSUE_SHAPES, small_shapes=_SMALL),
    dict(name="embedding_layer_norm", xp_ref=xp_embedding_layer_norm,
         njit=lambda a, at: (nb_embedding_layer_norm, (*a, at["eps"])),
         inputs=(("x", _uniform(0.0, 1.0)), (_whole, _ids), ("row", _uniform(0.5, 1.5)), ("row", _uniform(-0.5, 0.5))),
         variants=({"eps": 1e-5},), reduced=lambda shape, at: shape[-1]),
    dict(name="cumsum_last", xp_ref=xp_cumsum_last, njit=lambda a, at: (nb_cumsum_last, a),
         inputs=(("x", _uniform(-1.0, 1.0)),), variants=({},), reduced=lambda shape, at: shape[-1]),
    dict(name="cumsum_first", xp_ref=xp_cumsum_first, njit=lambda a, at: (nb_cumsum_first, a),
         inputs=(("x", _uniform(-1.0, 1.0)),), variants=({},), reduced=lambda shape, at: shape[0]),
    # fg.grad(cross_entropy) (fusegen.examples.cross_entropy_grad): one read of the logits, one write
    dict(name="cross_entropy_grad", xp_ref=xp_cross_entropy_grad, njit=lambda a, at: (nb_cross_entropy_grad, a),
         inputs=(("x", _uniform(-8.0, 8.0)), (_whole, _labels), (_scalar, _one)), variants=({},),
         reduced=lambda shape, at: shape[1], shapes=_ISSUE_SHAPES, small_shapes=_SMALL),
)
