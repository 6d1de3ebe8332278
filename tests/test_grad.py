"""fg.grad: reverse-mode gradients as fused ops, checked against central finite differences
(float64) on the Numba and AOT backends, plus the IR-level contract (what the backward op
needs, its signature, shape checks) and the sum_to / cast_like building blocks."""
from __future__ import annotations

import numpy as np
import pytest

import fusegen as fg
from fusegen import examples as ex
from fusegen.plan import build_plan, computed_nodes

from conftest import compile_for
from _optional import backends, backends_extended, needs_gxx, needs_jax

BACKENDS = backends("numba", "aot")


def _tuple(x):
    return x if isinstance(x, tuple) else (x,)


def finite_difference(fwd, args, cots, attrs, eps=1e-6):
    """d <cots, fwd(args)> / d args, by central differences (float64)."""
    grads = []
    for i, x in enumerate(args):
        g = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            hi = [a.copy() for a in args]
            lo = [a.copy() for a in args]
            hi[i][idx] += eps
            lo[i][idx] -= eps
            diff = [p - m for p, m in zip(_tuple(fwd(*hi, **attrs)), _tuple(fwd(*lo, **attrs)))]
            g[idx] = sum(float(np.sum(d * c)) for d, c in zip(diff, cots)) / (2 * eps)
        grads.append(g)
    return grads


def run_grad(op, args, attrs, backend, rng, wrt=None):
    fwd = compile_for(op, backend, "float64")
    outs = _tuple(fwd(*args, **attrs))
    cots = [rng.standard_normal(np.shape(o)) for o in outs]
    gop = fg.grad(op, wrt)
    ins = [a for name, a in zip(op.inputs, args) if name in gop.needs]
    got = _tuple(compile_for(gop, backend, "float64")(*ins, *cots, **attrs))
    return fwd, cots, gop, got


# (op, input shapes, attrs): every reference op, with broadcasting and both keep_dims
REFERENCE_CASES = [
    (ex.add_reduce_sum, [(3, 4), (3, 4)], dict(axis=1)),
    (ex.add_reduce_sum, [(3, 4), (4,)], dict(axis=0, keep_dims=True)),
    (ex.add_reduce_sum, [(2, 3, 4), (3, 1)], dict(axis=-2)),
    (ex.add_mul_div, [(3, 4), (1, 4)], {}),
    (ex.smooth_l1, [(3, 5), (3, 5)], dict(sigma=1.5)),
    (ex.softmax, [(3, 5)], {}),
    (ex.softmax, [(3, 5)], dict(axis=0)),
    (ex.layer_norm, [(3, 6)], {}),
    (ex.layer_norm, [(2, 3, 4)], dict(axis=1)),
    (ex.rms_norm, [(3, 6), (6,)], {}),
    (ex.bias_gelu, [(3, 6), (6,)], {}),
]


# The default run: a reduction with keep_dims and broadcasting, softmax, layer_norm over a middle
# axis and bias_gelu on Numba, that layer_norm on AOT (the same plan; two native builds per case:
# seconds each). `-m extended`: every op on Numba and the 3-d add_reduce_sum on AOT; `-m slow`:
# every case on Numba, five on AOT.
_NUMBA_DEFAULT, _NUMBA_EXTENDED = {3, 5, 8, 10}, {1, 4, 7, 9}
_AOT_DEFAULT, _AOT_EXTENDED, _AOT_SLOW = {8}, {2}, {1, 5, 9}


def _mark(i: int, default: set, extended: set) -> list:
    return [] if i in default else [pytest.mark.extended] if i in extended else [pytest.mark.slow]


_RUNS = [pytest.param(c, "numba", id=f"{c[0].name}-{i}-numba", marks=_mark(i, _NUMBA_DEFAULT, _NUMBA_EXTENDED))
         for i, c in enumerate(REFERENCE_CASES)]
_RUNS += [pytest.param(c, "aot", id=f"{c[0].name}-{i}-aot", marks=[needs_gxx] + _mark(i, _AOT_DEFAULT, _AOT_EXTENDED))
          for i, c in enumerate(REFERENCE_CASES) if i in _AOT_DEFAULT | _AOT_EXTENDED | _AOT_SLOW]


@pytest.mark.parametrize("case, backend", _RUNS)
def test_reference_op_gradients_match_finite_differences(case, backend):
    op, shapes, attrs = case
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s) for s in shapes]
    if op is ex.add_mul_div:  # keep the divisor away from 0
        args[1] += 3 * np.sign(args[1])
    fwd, cots, gop, got = run_grad(op, args, attrs, backend, rng)
    want = finite_difference(fwd, args, cots, attrs)
    assert len(got) == len(args)
    for name, g, w, x in zip(op.inputs, got, want, args):
        assert g.shape == x.shape and g.dtype == x.dtype, name
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7, err_msg=f"{op.name} d{name}")


@fg.op
def reductions(x, y, *, axis: int = -1):
    # max/min/prod/mean and sum over everything, all at once
    return (fg.max(x, axis=axis) * fg.min(y, axis=axis, keep_dims=True).sum(axis=-1)
            + fg.prod(x * 0.5 + 2.0, axis=axis) + fg.mean(y * y), )


@fg.op
def elementwise(x, y):
    z = fg.where(x > 0, fg.exp(x) * fg.sin(y), fg.log(abs(y) + 1.0) / (1.0 + x * x))
    return (fg.maximum(z, y) - fg.minimum(x, 0.25) + fg.tanh(x) * fg.sigmoid(y) + fg.relu(x - y)
            + fg.sqrt(y * y + 1.0) * fg.rsqrt(x * x + 2.0) + fg.erf(x) + fg.cos(x) + (y * y + 1.0) ** x
            + x.astype("float64") + fg.floor(x) - (-y))


@fg.op
def shared(x, w):
    # one node read by several consumers and several outputs, broadcasting w
    h = x * w
    s = fg.sum(h, axis=-1, keep_dims=True)
    return h / s, s, fg.sum(h * h)


# Every rule on Numba but the reductions' (12 fused groups: `-m extended`, with `shared` on AOT;
# the other ops on AOT: `-m slow`). The reductions' rules are also checked by the reference ops'.
_RULE_OPS = [(reductions, [(3, 5), (3, 5)]), (elementwise, [(4, 3), (3,)]), (shared, [(2, 3, 4), (4,)])]
_RULE_RUNS = [pytest.param(op, shapes, b.values[0], id=f"{op.name}-{b.values[0]}",
                           marks=list(b.marks) + ([pytest.mark.slow] if b.values[0] == "aot" and op is not shared else
                                                  [pytest.mark.extended] if b.values[0] == "aot" or op is reductions
                                                  else []))
              for b in BACKENDS for op, shapes in _RULE_OPS]


@pytest.mark.parametrize("op, shapes, backend", _RULE_RUNS)
def test_every_rule_matches_finite_differences(op, shapes, backend):
    rng = np.random.default_rng(1)
    args = [rng.uniform(0.5, 1.5, s) * rng.choice([-1, 1], s) for s in shapes]
    fwd, cots, gop, got = run_grad(op, args, {}, backend, rng)
    for name, g, w in zip(op.inputs, got, finite_difference(fwd, args, cots, {})):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"{op.name} d{name}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_ties_split_the_adjoint_evenly(backend):
    x = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]])
    k = compile_for(fg.grad(fg.op(lambda x: fg.max(x, axis=1))), backend, "float64")
    (g,) = k(x, np.array([1.0, 4.0]))
    np.testing.assert_allclose(g, [[0, 0.5, 0.5, 0], [1, 1, 1, 1]])


def test_float32_gradients_keep_their_dtype_and_agree_with_float64():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 32)).astype(np.float32)
    w = rng.standard_normal(32).astype(np.float32)
    g = rng.standard_normal((8, 32)).astype(np.float32)
    k = fg.compile(fg.grad(ex.rms_norm))
    dx, dw = k(x, w, g)
    assert dx.dtype == np.float32 and dw.dtype == np.float32
    dx64, dw64 = k(x.astype(np.float64), w.astype(np.float64), g.astype(np.float64))
    np.testing.assert_allclose(dx, dx64, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dw, dw64, rtol=1e-4, atol=1e-4)


# --- the contract ----------------------------------------------------------------------------------
def test_signature_wrt_and_declared_needs():
    gop = fg.grad(ex.add_reduce_sum)
    assert gop.name == "add_reduce_sum_grad"
    assert gop.inputs == ["x", "y", "d_out"]
    assert list(gop.attrs) == ["axis", "keep_dims"] and gop.attrs["axis"].default == 1
    # x + y is summed: the gradient is the cotangent broadcast back; x and y are only measured
    assert gop.needs == {"x": "shape", "y": "shape"}
    assert fg.grad(ex.layer_norm).inputs == ["x", "d_out0", "d_out1", "d_out2"]
    assert fg.grad(ex.rms_norm).needs == {"x": "value", "w": "value"}
    only_w = fg.grad(ex.rms_norm, wrt="w")
    assert only_w.wrt == ("w",) and len(only_w.graph.outputs) == 1
    assert fg.grad(ex.bias_gelu, wrt=[1, 0]).wrt == ("b", "x")


def test_inputs_without_any_use_are_dropped():
    @fg.op
    def first(x, y):
        return x * 3.0
    gop = fg.grad(first, wrt="x")
    assert gop.inputs == ["x", "d_out"] and gop.needs == {"x": "shape"}
    (dx,) = fg.compile(gop)(np.ones((2, 2)), np.full((2, 2), 2.0))
    np.testing.assert_allclose(dx, 6.0)


def test_shape_only_forward_values_are_not_computed():
    gop = fg.grad(ex.add_reduce_sum)
    plan = build_plan(gop)
    computed = computed_nodes(gop.graph)
    reductions = [n for n in gop.graph.nodes if n.op is fg.ir.Op.REDUCE and n.arg.kind == "sum"
                  and not isinstance(n.arg.axes, fg.ir.ShapeOf)]
    assert reductions and all(id(r) not in computed for r in reductions)  # the forward sum: measured only
    assert all(not isinstance(s.axes, tuple) or s.axes for s in plan.stages)
    text = gop.text(locations=False)
    assert "unreduce" in text and "sum_to" in text and "check shape" in text


def test_input_without_a_differentiable_path_gets_zeros():
    @fg.op
    def step(x, y):
        return fg.floor(x) + y
    dx, dy = fg.compile(fg.grad(step))(np.array([0.5, np.nan]), np.ones(2), np.full(2, 3.0))
    np.testing.assert_array_equal(dx, [0.0, 0.0])
    np.testing.assert_array_equal(dy, [3.0, 3.0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_wrong_cotangent_shape_is_a_clear_error(backend):
    k = compile_for(fg.grad(ex.softmax), backend, "float64")
    with pytest.raises(fg.ShapeError, match="cotangent 0 must have the shape of output 0|OUT_SHAPE|shape"):
        k(np.ones((3, 5)), np.ones((5,)))


def test_grad_rejects_bad_arguments():
    with pytest.raises(fg.TraceError, match="names no input"):
        fg.grad(ex.softmax, wrt="y")
    with pytest.raises(fg.TraceError, match="repeats"):
        fg.grad(ex.rms_norm, wrt=["x", 0])
    with pytest.raises(fg.TraceError, match="made with @fg.op"):
        fg.grad(lambda x: x)


def test_grad_of_grad_is_an_op_too():
    @fg.op
    def cube(x):
        return x * x * x
    g1 = fg.grad(cube)
    g2 = fg.grad(g1, wrt="x")       # d/dx <d_out, 3x^2> = 6 x d_out
    x, d = np.array([1.0, -2.0]), np.array([1.0, 0.5])
    (dd,) = fg.compile(g2)(x, d, np.ones(2))
    np.testing.assert_allclose(dd, 6 * x * d)


# --- building blocks -------------------------------------------------------------------------------
@fg.op
def to_shape_of(v, like):
    return fg.sum_to(v * 2.0, like), fg.cast_like(v, like)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("like_shape", [(4, 5), (1, 5), (4, 1), (3, 1, 5), (5,), (1,), (), (3, 4, 5),
                                        (2, 3, 4, 5)])
def test_sum_to_and_cast_like(like_shape, backend):
    v = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    like = np.zeros(like_shape, np.float64)
    opts = dict(dtypes=[("float32", "float64")]) if backend == "aot" else {}
    s, c = fg.compile(to_shape_of, backend=backend, **opts)(v, like)
    full = np.broadcast_to(v * 2.0, np.broadcast_shapes(v.shape, like_shape))
    lead = full.ndim - len(like_shape)
    want = full.sum(axis=tuple(range(lead))) if lead else full
    want = want.sum(axis=tuple(k for k, d in enumerate(like_shape) if d == 1), keepdims=True)
    assert s.shape == like_shape and s.dtype == np.float32
    np.testing.assert_allclose(s, want.reshape(like_shape))
    assert c.dtype == np.float64 and c.shape == v.shape


def test_sum_to_rejects_shapes_that_do_not_broadcast():
    with pytest.raises(fg.ShapeError, match="broadcast"):
        fg.compile(to_shape_of)(np.ones((3, 4)), np.ones((3,)))
    with pytest.raises(fg.TraceError, match="traced tensors"):
        fg.op(lambda x: fg.sum_to(x, 3.0))


# --- JAX: jax.grad through the XLA handlers runs fg.grad's fused backward -------------------------
@needs_jax
def test_jax_grad_uses_the_fused_backward_op():
    import jax
    import jax.numpy as jnp
    f = fg.jax.function(ex.rms_norm, dtypes="float32")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    w = rng.standard_normal(8).astype(np.float32)

    def loss(x, w):
        return jnp.sum(jnp.sin(f(x, w)))
    dx, dw = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, w)
    gop = fg.grad(ex.rms_norm)
    want = fg.compile(gop)(x, w, np.cos(fg.compile(ex.rms_norm)(x, w)))
    np.testing.assert_allclose(dx, want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dw, want[1], rtol=1e-5, atol=1e-5)
    assert f.backward().op.name == "rms_norm_grad"


@pytest.mark.slow
@needs_jax
def test_jax_grad_of_a_multi_output_op_with_attributes():
    import jax
    import jax.numpy as jnp
    x = np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32)
    g = fg.jax.function(ex.layer_norm, dtypes="float32")
    dx = jax.grad(lambda x: sum(jnp.sum(o * o) for o in g(x, axis=0)))(x)
    y, mean, rstd = fg.compile(ex.layer_norm)(x, axis=0)
    want = fg.compile(fg.grad(ex.layer_norm))(x, 2 * y, 2 * mean, 2 * rstd, axis=0)[0]
    np.testing.assert_allclose(dx, want, rtol=1e-4, atol=1e-4)


@fg.op
def chained_reductions(x, w):
    """Reductions of reductions without keepdims (a loss: the batch mean of per-row sums of
    squares; a sum over what a tensordot summed; a prod of sums): each adjoint comes back with
    size-1 dims where the next unreduce needs the result's shape."""
    loss = fg.mean(fg.sum(x * x, axis=-1))
    total = fg.sum(fg.sum(fg.sum(x, axis=2), axis=0))
    td = fg.sum(fg.tensordot(x[0], w, axes=1), axis=0)
    return loss, total, td, fg.prod(fg.sum(x, axis=(0, 2)))


@pytest.mark.extended   # (10 s of Numba compiles: the default run's 5 minutes lack it)
@pytest.mark.parametrize("backend", backends_extended("numba", "aot"))
def test_reductions_of_reductions(backend):
    rng = np.random.default_rng(4)
    args = [rng.standard_normal((3, 4, 5)), rng.standard_normal((5, 2))]
    fwd, cots, gop, got = run_grad(chained_reductions, args, {}, backend, rng)
    for name, g, w in zip(chained_reductions.inputs, got, finite_difference(fwd, args, cots, {})):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"d{name}")


@fg.op
def products(x):
    return fg.prod(x, axis=1), fg.cumulative_prod(x, axis=1), fg.prod(x[:2])


@pytest.mark.extended   # (10 s of Numba compiles)
@pytest.mark.parametrize("backend", backends_extended("numba", "aot"))
def test_products_with_zeros(backend):
    """d prod / d x_i is the others' product: one zero in a slice gives it to that zero and 0
    elsewhere; two give 0 (P / x_i gave NaN to the whole slice). Products are multilinear, so
    central differences are exact there too."""
    rng = np.random.default_rng(5)
    x = rng.uniform(0.5, 2.0, (5, 6))
    x[0, 1] = 0.0
    x[1, [2, 4]] = 0.0
    x[2, 0] = 0.0
    x[3, 5] = 0.0
    fwd, cots, gop, got = run_grad(products, [x], {}, backend, rng)
    (want,) = finite_difference(fwd, [x], cots, {})
    assert not np.isnan(got[0]).any()
    np.testing.assert_allclose(got[0], want, rtol=1e-6, atol=1e-7)
