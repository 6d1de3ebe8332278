"""The bench rows beyond the reference ops (issue #19): the logistic function and the Adam step
of ``examples.PERF_OPS`` (the other activations are ``bench.activations``' rows), and a small
*user-written* set: ops written in a user's own words rather than the reference spelling (a layer
norm with gamma and beta, a tanh-GELU with a bias and ``h ** 3``, softmax as max, exp, sum,
divide), so a speed target is checked for spellings, not for one spelling; and ``fg.log_softmax``
beside them. ``ALL_OPS`` is every
row ``fusegen bench`` knows. The reference code of each row is written once against an array
namespace, as in ``bench.cases``.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from .. import examples
from ..graph import vocab as fg
from ..ir import op
from .cases import OPS, OpBench, uniform

_GELU_C = math.sqrt(2.0 / math.pi)


# --- reference code -------------------------------------------------------------------------------
def xp_sigmoid(xp, x):
    return 1.0 / (1.0 + xp.exp(-x))


def xp_adam_step(xp, param, grad, m, v, *, lr, beta1, beta2, eps, step):
    m1 = beta1 * m + (1.0 - beta1) * grad
    v1 = beta2 * v + (1.0 - beta2) * grad * grad
    mhat = m1 / (1.0 - beta1 ** step)
    vhat = v1 / (1.0 - beta2 ** step)
    return param - lr * mhat / (xp.sqrt(vhat) + eps), m1, v1


def xp_user_layer_norm(xp, x, gamma, beta, *, eps):
    mu = xp.mean(x, axis=-1, keepdims=True)
    var = xp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / xp.sqrt(var + eps) * gamma + beta


def xp_user_bias_gelu_tanh(xp, x, b):
    h = x + b
    return 0.5 * h * (1.0 + xp.tanh(_GELU_C * (h + 0.044715 * h ** 3)))


def xp_log_softmax(xp, x):
    z = x - xp.max(x, axis=-1, keepdims=True)
    return z - xp.log(xp.sum(xp.exp(z), axis=-1, keepdims=True))


def xp_user_softmax(xp, x):
    m = xp.max(x, axis=-1, keepdims=True)
    e = xp.exp(x - m)
    s = xp.sum(e, axis=-1, keepdims=True)
    return e / s


# --- the user-written ops ---------------------------------------------------------------------------
@op
def user_layer_norm(x, gamma, beta, *, eps: float = 1e-5):
    """A layer norm with gamma and beta, written the obvious way."""
    mu = fg.mean(x, axis=-1, keep_dims=True)
    var = fg.mean((x - mu) ** 2, axis=-1, keep_dims=True)
    return (x - mu) / fg.sqrt(var + eps) * gamma + beta


@op
def user_bias_gelu_tanh(x, b):
    """A tanh-GELU with a bias, with ``h ** 3`` as a user writes it."""
    h = x + b
    return 0.5 * h * (1.0 + fg.tanh(_GELU_C * (h + 0.044715 * h ** 3)))


@op
def log_softmax(x):
    """``fg.log_softmax`` over the last axis (beside the softmax rows: one exp per element)."""
    return fg.log_softmax(x, axis=-1)


@op
def user_softmax(x):
    """Softmax over the last axis as max, exp, sum, divide."""
    m = fg.max(x, axis=-1, keep_dims=True)
    e = fg.exp(x - m)
    s = fg.sum(e, axis=-1, keep_dims=True)
    return e / s


# --- hand-written Numba versions (float32, fused, parallel: see bench.cases) -------------------------
_JIT = dict(parallel=True, fastmath=True, cache=True)
_HALF, _ONE = np.float32(0.5), np.float32(1.0)


@njit(**_JIT)
def nb_sigmoid(x):  # pragma: no cover - compiled by Numba
    out = np.empty_like(x)
    a, o = x.ravel(), out.ravel()
    for i in prange(a.size):
        o[i] = _ONE / (_ONE + np.exp(-a[i]))
    return out


@njit(parallel=True, cache=True)  # no fastmath: its approximate division and sqrt miss the tolerance
def nb_adam_step(p, g, m, v, lr, b1, b2, eps, c1, c2):  # pragma: no cover - compiled by Numba
    po, mo, vo = np.empty_like(p), np.empty_like(p), np.empty_like(p)
    pf, gf, mf, vf = p.ravel(), g.ravel(), m.ravel(), v.ravel()
    pof, mof, vof = po.ravel(), mo.ravel(), vo.ravel()
    for i in prange(pf.size):
        m1 = b1 * mf[i] + (1.0 - b1) * gf[i]
        v1 = b2 * vf[i] + (1.0 - b2) * gf[i] * gf[i]
        pof[i] = pf[i] - lr * (m1 / c1) / (np.sqrt(v1 / c2) + eps)
        mof[i], vof[i] = m1, v1
    return po, mo, vo


def _adam_args(arrays: tuple, at: dict) -> tuple:
    # float64 scalars: the arithmetic runs in float64 and rounds once (float32 constants drift
    # past the bench's tolerance over the update's dozen operations)
    c1, c2 = 1.0 - at["beta1"] ** at["step"], 1.0 - at["beta2"] ** at["step"]
    return nb_adam_step, (*arrays, at["lr"], at["beta1"], at["beta2"], at["eps"], c1, c2)


def _row_len(shape: tuple[int, ...], attrs: dict) -> int:
    return shape[-1]


_X = ("x", uniform(-6.0, 6.0))
_ADAM = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "step": 10}

#: the rows of ``examples.PERF_OPS``
PERF_ROWS: dict[str, OpBench] = {b.name: b for b in (
    OpBench("sigmoid", xp_sigmoid, lambda a, at: (nb_sigmoid, a), (_X,), ({},)),
    OpBench("adam_step", xp_adam_step, _adam_args,
            (("x", uniform(-1.0, 1.0)), ("x", uniform(-1.0, 1.0)), ("x", uniform(-0.1, 0.1)),
             ("x", uniform(0.0, 0.01))), (_ADAM,)),
)}
assert list(PERF_ROWS) == [o.name for o in examples.PERF_OPS]

#: the user-written spellings (their own ops; the hand-written Numba code is the reference rows')
VARIANTS: dict[str, OpBench] = {b.name: b for b in (
    OpBench("user_layer_norm", xp_user_layer_norm, None,
            (("x", uniform(0.0, 1.0)), ("row", uniform(0.5, 1.5)), ("row", uniform(-0.5, 0.5))),
            ({"eps": 1e-5},), reduced=_row_len, op_def=user_layer_norm),
    OpBench("user_bias_gelu_tanh", xp_user_bias_gelu_tanh, None,
            (("x", uniform(-3.0, 3.0)), ("row", uniform(-0.5, 0.5))), ({},), op_def=user_bias_gelu_tanh),
    OpBench("user_softmax", xp_user_softmax, None, (("x", uniform(-8.0, 8.0)),), ({},),
            reduced=_row_len, op_def=user_softmax),
    OpBench("log_softmax", xp_log_softmax, None, (("x", uniform(-8.0, 8.0)),), ({},),
            reduced=_row_len, op_def=log_softmax),
)}

#: every row of ``fusegen bench``, reference ops first
ALL_OPS: dict[str, OpBench] = {**OPS, **PERF_ROWS, **VARIANTS}
