"""Ops traced per input rank or shape through ``fusegen.jax.function``: one handler library per
specialization, built on first use and shared by specializations with the same graph.

Each check compares with the Numba backend (``fg.compile(op)``), which specializes the same way:
the random part of ``dropout_add_layer_norm`` bit for bit (the same Philox stream), the rest to a
few ulp. The default run builds four small libraries (two ops, two ranks each) and reuses them
under ``jax.jit`` and ``jax.vmap``; gradients, per-shape ops and the legacy API are
``@pytest.mark.extended``. Skips without jax (``pip install "fusegen[jax]"``).
"""
from __future__ import annotations

import numpy as np
import pytest

import fusegen as fg
import fusegen.examples as ex
from _optional import needs

pytestmark = needs("jax", "g++")


@fg.op
def center_rows(x, *, scale: float = 1.0):
    """Centred over every axis but the first (``x.ndim``: traced per rank), divided by the last dim."""
    axes = tuple(range(1, x.ndim))
    return (x - fg.mean(x, axis=axes, keepdims=True)) * scale / x.shape[-1]


@fg.op
def wide_or_narrow(x):
    """A branch on a dim (traced per shape): two graphs, whatever the other dims."""
    if x.shape[-1] > 4:
        return x / x.shape[-1]
    return x * 2.0


@fg.op
def three_d(x):
    b, s, d = x.shape
    return fg.reshape(x, (b, s * d))


_FNS: dict = {}


def function(op):
    """One JaxFunction per op for the module (float32 only: every specialization is a build)."""
    import fusegen.jax as fgj
    if op not in _FNS:
        _FNS[op] = fgj.function(op, dtypes="float32")
    return _FNS[op]


def dropout_inputs(shape, seed=0):
    rng = np.random.default_rng(seed)
    x, r = rng.standard_normal(shape, np.float32), rng.standard_normal(shape, np.float32)
    return x, r, rng.random(shape[-1], np.float32) + 0.5, rng.standard_normal(shape[-1], np.float32)


def check_dropout(got, want):
    (y, h), (y_n, h_n) = got, want
    assert np.array_equal(np.asarray(h), h_n)   # the random mask (and the add): bit for bit
    np.testing.assert_allclose(np.asarray(y), y_n, rtol=2e-6, atol=2e-6)   # the summation order differs


def test_dropout_add_layer_norm_at_two_ranks_equals_numba_eagerly_jitted_and_vmapped():
    import jax
    f = function(ex.dropout_add_layer_norm)
    numba = fg.compile(ex.dropout_add_layer_norm)
    attrs = dict(p=0.3, seed=-11)
    for shape in ((5, 37), (2, 3, 16)):
        args = dropout_inputs(shape)
        want = numba(*args, **attrs)
        check_dropout(f(*args, **attrs), want)
        check_dropout(jax.jit(lambda *a: f(*a, **attrs))(*args), want)
        # a batch of two: the rank-r specialization per element (the op reads x.shape from the front)
        x2, r2 = np.stack([args[0], args[0][::-1]]), np.stack([args[1], args[1]])
        y, h = jax.jit(jax.vmap(lambda x, r: f(x, r, *args[2:], **attrs)))(x2, r2)
        check_dropout((y[0], h[0]), want)
        check_dropout((y[1], h[1]), numba(args[0][::-1], *args[1:], **attrs))
    assert len({c.op.key for c in f.specializations}) == 2 and "2 specialization(s)" in repr(f)


def test_a_user_op_reading_ndim_and_shape_at_two_ranks_equals_numba():
    import jax
    f = function(center_rows)
    numba = fg.compile(center_rows)
    for shape in ((3, 8), (2, 3, 4)):
        x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(np.asarray(f(x, scale=3.0)), numba(x, scale=3.0), rtol=1e-6, atol=1e-6)
        xs = np.stack([x, 2 * x])
        got = jax.vmap(lambda a: f(a, scale=0.5))(xs)
        np.testing.assert_allclose(np.asarray(got[1]), numba(2 * x, scale=0.5), rtol=1e-6, atol=1e-6)
    assert len(f.specializations) == 2
    assert all(c.source in f.source for c in f.specializations)   # both specializations' sources
    # vmap: the axes are counted from the front, so one handler call per batch element (a scan)
    assert "scan[" in str(jax.make_jaxpr(jax.vmap(lambda a: f(a)))(np.ones((2, 3, 8), np.float32)))
    # the call's own errors still name the op and the cause
    with pytest.raises(fg.AttrError, match="center_rows.*scale"):
        f(np.ones((2, 2), np.float32), scale="x")
    with pytest.raises(fg.DTypeError, match="center_rows.*float32"):
        f(np.ones((2, 2), np.float64).astype(np.int32))
    # a rank the body cannot take: the op, the rank and Python's own cause (nothing is built)
    with pytest.raises(fg.TraceError, match=r"op three_d cannot be traced for input ranks \[2\]: ValueError: not enough"):
        function(three_d)(np.ones((2, 4), np.float32))


@pytest.mark.extended
def test_a_per_shape_op_shares_one_library_per_graph_and_batches_whole():
    import jax
    f = function(wide_or_narrow)
    numba = fg.compile(wide_or_narrow)
    for shape in ((3, 8), (5, 8), (3, 4)):
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        np.testing.assert_array_equal(np.asarray(f(x)), numba(x))
        np.testing.assert_array_equal(np.asarray(jax.vmap(f)(np.stack([x, x + 1]))[1]), numba(x + 1))
    assert len(f.specializations) == 2   # (3, 8) and (5, 8) trace to one graph: one library
    # a batch dim keeps each graph's meaning: one handler call on the whole batch, no scan
    jaxpr = str(jax.make_jaxpr(jax.vmap(f))(np.ones((2, 3, 8), np.float32)))
    assert "scan[" not in jaxpr and "f32[2,3,8]" in jaxpr


@pytest.mark.extended
def test_gradients_of_specialized_ops_equal_numba():
    import jax
    f = function(center_rows)
    back = fg.compile(fg.grad(center_rows))
    x = np.random.default_rng(3).standard_normal((2, 3, 4)).astype(np.float32)
    w = np.random.default_rng(4).standard_normal((2, 3, 4)).astype(np.float32)
    got = jax.grad(lambda a: (f(a, scale=3.0) * w).sum())(x)
    np.testing.assert_allclose(np.asarray(got), back(x, w, scale=3.0)[0], rtol=1e-5, atol=1e-6)
    d = function(ex.dropout_add_layer_norm)
    args = dropout_inputs((4, 8), 5)
    gx = jax.grad(lambda x, r: (d(x, r, *args[2:], p=0.5, seed=3)[1]).sum(), argnums=(0, 1))(*args[:2])
    keep = np.asarray(d(*args, p=0.5, seed=3)[1]) != args[1]   # where dropout kept x
    np.testing.assert_allclose(np.asarray(gx[0]), np.where(keep, 2.0, 0.0), atol=0)   # recomputed mask
    np.testing.assert_array_equal(np.asarray(gx[1]), np.ones((4, 8), np.float32))


@pytest.mark.extended
def test_the_legacy_api_specializes_too():
    import fusegen.jax as fgj
    f = fgj.function(center_rows, dtypes="float32", api="legacy")
    x = np.random.default_rng(6).standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(f(x)), fg.compile(center_rows)(x), rtol=1e-6, atol=1e-6)
    assert [c.api for c in f.specializations] == ["legacy"]
    assert all("_legacy_" in t for c in f.specializations for t in c.targets.values())


def test_bfloat16_inputs_run_through_float32_as_in_the_torch_bridge():
    """fusegen has no bfloat16: the JAX bridge widens such inputs to float32 (exact), and rounds to
    bfloat16 the outputs float16 inputs would give as float16, as the PyTorch bridge does (it was
    a DTypeError); gradients come back in bfloat16, and bfloat16 beside float16 is refused."""
    import jax
    import jax.numpy as jnp
    x = jnp.asarray(np.random.default_rng(0).standard_normal((4, 8)), jnp.bfloat16)
    f = fg.jax.function(ex.softmax)
    y = f(x, axis=-1)
    want = jax.nn.softmax(x.astype(jnp.float32), -1)
    assert y.dtype == jnp.bfloat16 and jax.jit(lambda t: f(t, axis=-1))(x).dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(y.astype(jnp.float32)), np.asarray(want), rtol=2 ** -8)   # (one rounding)
    g = jax.grad(lambda t: (f(t, axis=-1) ** 2).sum())(x)
    gw = jax.grad(lambda t: (jax.nn.softmax(t, -1) ** 2).sum())(x.astype(jnp.float32))
    assert g.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(g.astype(jnp.float32)), np.asarray(gw), atol=4e-3)
    h = fg.jax.function(ex.add_mul_div)
    assert [o.dtype for o in h(x, x.astype(jnp.float32))] == [jnp.float32] * 3
    with pytest.raises(fg.DTypeError, match=r"op add_mul_div: bfloat16 and float16 inputs cannot be mixed"):
        h(x, x.astype(jnp.float16))
