"""Fused ops on sharded JAX arrays, on 8 host CPU devices in one process.

Not collected by the default run (the name does not match ``test_*.py``): JAX fixes its device
count when it is first imported, so ``tests/test_jax_sharding.py`` runs this file in a pytest
process of its own with ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` (it can also be
run directly: the flag is set below when missing). Every case is compared with the unsharded
call (or NumPy), and the compiled HLO is checked for the collectives the IR's rules imply:
no all-gather of an input, an all-reduce per combined reduction.
"""
from __future__ import annotations

import os
import re

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import fusegen as fg  # noqa: E402
import fusegen.examples as ex  # noqa: E402
from fusegen.plan import dimflow  # noqa: E402

pytestmark = pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 devices: jax was imported before "
                                "XLA_FLAGS=--xla_force_host_platform_device_count=8 was set")

AUTO = (AxisType.Auto, AxisType.Auto)
_FNS: dict = {}


def function(op, dtype="float32"):
    """One JaxFunction per op for the whole module (one dtype's handlers: builds cost seconds)."""
    if (op, dtype) not in _FNS:
        _FNS[op, dtype] = fg.jax.function(op, dtypes=dtype)
    return _FNS[op, dtype]


def collectives(hlo: str) -> list[tuple[str, str]]:
    """(kind, result shape) of every collective in compiled HLO text."""
    return re.findall(r"= (\S+) (all-gather|all-reduce|all-to-all|reduce-scatter|collective-permute)(?:-start)?\(",
                      hlo)


def kinds(hlo: str) -> list[str]:
    return [k for _, k in collectives(hlo)]


def spec_of(a) -> tuple:
    """An array's PartitionSpec as a tuple without trailing Nones (P('a') == P('a', None))."""
    t = tuple(a.sharding.spec)
    while t and t[-1] is None:
        t = t[:-1]
    return t


def put(mesh, x, spec):
    return jax.device_put(x, NamedSharding(mesh, spec))


def close(got, want, rtol=2e-5, atol=2e-6):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


def _np_layer_norm(x, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps), mean, 1 / np.sqrt(var + eps)


# --- the default cases ------------------------------------------------------------------------

def test_layer_norm_on_a_2x4_mesh_with_explicit_axes():
    """jax.make_mesh's default axis types are Explicit: the result shardings are in the types.
    The normalized dim is split 4 ways: two rounds of partial sums, two all-reduces, no gather."""
    mesh = jax.make_mesh((2, 4), ("a", "b"))
    assert mesh.axis_types == (AxisType.Explicit,) * 2
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    xs = put(mesh, x, P("a", "b"))
    f = function(ex.layer_norm)
    with jax.set_mesh(mesh):
        g = jax.jit(lambda v: f(v, eps=1e-5))
        y, mean, rstd = g(xs)
        hlo = g.lower(xs).compile().as_text()
    close((y, mean, rstd), _np_layer_norm(x))
    assert [spec_of(o) for o in (y, mean, rstd)] == [("a", "b"), ("a",), ("a",)]
    assert jax.typeof(y).sharding.spec == P("a", "b")
    assert kinds(hlo) == ["all-reduce", "all-reduce"], collectives(hlo)
    assert hlo.count("replica_groups={{0,1,2,3},{4,5,6,7}}") == 2   # over 'b', within each row of the mesh
    # Auto axes, no mesh context (the shardings say it all): the same rounds and collectives
    xs = put(jax.make_mesh((2, 4), ("a", "b"), axis_types=AUTO), x, P("a", "b"))
    g = jax.jit(lambda v: f(v, eps=1e-5))
    close(g(xs), _np_layer_norm(x))
    assert [spec_of(o) for o in g(xs)] == [("a", "b"), ("a",), ("a",)]
    assert kinds(g.lower(xs).compile().as_text()) == ["all-reduce", "all-reduce"]


@pytest.mark.extended
def test_add_reduce_sum_with_auto_axes_and_without_a_mesh_context():
    x = np.random.default_rng(1).uniform(size=(8, 16)).astype(np.float32)
    f = function(ex.add_reduce_sum)
    mesh = jax.make_mesh((2, 4), ("a", "b"), axis_types=AUTO)
    xs = put(mesh, x, P("a", "b"))
    with jax.set_mesh(mesh):
        g = jax.jit(lambda u, v: f(u, v, axis=1))
        out = g(xs, xs)
        hlo = g.lower(xs, xs).compile().as_text()
    close(out, 2 * x.sum(1), rtol=1e-5)
    assert spec_of(out) == ("a",) and kinds(hlo) == ["all-reduce"]
    g = jax.jit(lambda u, v: f(u, v, axis=0))   # no mesh context: the shardings say it all
    out = g(xs, xs)
    close(out, 2 * x.sum(0), rtol=1e-5)
    assert spec_of(out) == ("b",) and kinds(g.lower(xs, xs).compile().as_text()) == ["all-reduce"]


@pytest.mark.extended
def test_gradient_of_a_sharded_rms_norm_sums_the_weight_gradient_across_rows():
    """fg.grad's op is partitioned like any op: dw is a sum over the split rows (one all-reduce);
    the weight, replicated, follows the split of x's last dim nowhere (that dim is not split)."""
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    c = rng.standard_normal((8, 16)).astype(np.float32)
    f = function(ex.rms_norm)

    def loss(u, v, cot):
        return jnp.sum(f(u, v) * cot)

    want = jax.grad(loss, argnums=(0, 1))(x, w, c)
    mesh = jax.make_mesh((2, 4), ("a", "b"))
    args = put(mesh, x, P(("a", "b"))), put(mesh, w, P()), put(mesh, c, P(("a", "b")))
    with jax.set_mesh(mesh):
        g = jax.jit(jax.grad(loss, argnums=(0, 1)))
        got = g(*args)
        hlo = g.lower(*args).compile().as_text()
    close(got, want, rtol=1e-4, atol=1e-5)
    assert "all-gather" not in kinds(hlo), collectives(hlo)
    assert spec_of(got[0]) == (("a", "b"),) and spec_of(got[1]) == ()


def test_vmap_inside_shard_map():
    f = function(ex.layer_norm)
    mesh = jax.make_mesh((2, 4), ("a", "b"))
    x = np.random.default_rng(3).uniform(size=(4, 8, 16)).astype(np.float32)
    xs = put(mesh, x, P(None, "a", None))
    body = jax.shard_map(lambda u: jax.vmap(lambda v: f(v, eps=1e-5))(u), mesh=mesh,
                         in_specs=P(None, "a", None), out_specs=P(None, "a"))
    close(jax.jit(body)(xs), _np_layer_norm(x))


@pytest.mark.extended
def test_vmap_over_a_sharded_batch_of_inputs_of_different_ranks_says_why_it_cannot():
    """rms_norm's (N, D) x and (D,) weight: the batch rule runs one element at a time, which JAX
    refuses over a sharded batch dim (an Explicit mesh); the error names the op and the way out
    (it was JAX's "0th dimension of all xs should be replicated")."""
    f = function(ex.rms_norm)
    mesh = jax.make_mesh((2, 4), ("a", "b"))
    x = put(mesh, np.ones((8, 4, 6), np.float32), P(("a", "b")))
    with jax.set_mesh(mesh), pytest.raises(fg.ArgumentError, match=r"op rms_norm: jax.vmap over a sharded batch "
                                                                  r"dim: this op's inputs differ in rank"):
        jax.jit(jax.vmap(lambda u, w: f(u, w, eps=1e-6), in_axes=(0, None)))(x, np.ones(6, np.float32))


def test_shard_map_types_results_as_varying_and_takes_gradients_inside():
    # the FFI call types its results as its inputs vary (JAX's check_vma, on by default): a
    # per-device gradient (data parallel) passes the check, and out_specs claiming a varying
    # result replicated is refused, as for jax.numpy's ops
    f = function(ex.layer_norm)
    mesh = jax.make_mesh((8,), ("a",), axis_types=(AxisType.Auto,))
    x = np.random.default_rng(4).uniform(size=(16, 8)).astype(np.float32)

    def per_device(u):
        return jax.grad(lambda v: (f(v, eps=1e-5)[0] ** 3).sum())(u)

    got = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=P("a"), out_specs=P("a")))(x)
    want = jax.grad(lambda v: (((v - v.mean(-1, keepdims=True)) / jnp.sqrt(v.var(-1, keepdims=True) + 1e-5))
                               ** 3).sum())(x)
    close(got, want, rtol=1e-3, atol=1e-4)
    with pytest.raises(Exception, match="vary|varying|out_specs"):
        jax.jit(jax.shard_map(lambda u: f(u, eps=1e-5)[0], mesh=mesh, in_specs=P("a"), out_specs=P()))(x)


@fg.op
def center_rows(x, *, scale: float = 1.0):
    """Traced per rank (``x.ndim``): the partition rules come from each specialization's graph."""
    axes = tuple(range(1, x.ndim))
    return (x - fg.mean(x, axis=axes, keepdims=True)) * scale


@pytest.mark.extended
def test_an_op_traced_per_rank_is_partitioned_by_its_specializations_graph():
    """Rank 2 and rank 3 on a 2x4 mesh, split on both dims: the mean over the split trailing
    dims is one all-reduce of partial sums per specialization, no input is gathered."""
    f = function(center_rows)
    mesh = jax.make_mesh((2, 4), ("a", "b"))
    for shape, spec in (((8, 16), P("a", "b")), ((2, 8, 4), P(None, "a", "b"))):
        x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
        xs = put(mesh, x, spec)
        axes = tuple(range(1, x.ndim))
        with jax.set_mesh(mesh):
            g = jax.jit(lambda v: f(v, scale=2.0))
            out = g(xs)
            hlo = g.lower(xs).compile().as_text()
        close(out, (x - x.mean(axes, keepdims=True)) * 2.0, rtol=1e-5, atol=1e-5)
        assert spec_of(out) == tuple(spec) and kinds(hlo) == ["all-reduce"], collectives(hlo)
    assert len(f.specializations) == 2


@fg.op
def complex_rows(x, y):
    return fg.sum(x * fg.conj(y), axis=-1), fg.exp(x) * y


@pytest.mark.extended
def test_complex128_under_the_x64_context_manager_is_partitioned_in_complex128():
    """XLA runs the partition callback on a thread of its own, where ``with jax.enable_x64(True)``
    is not in effect: the callback takes the caller's setting, so the split sum's partials are
    exchanged in complex128 (not complex64) and the result is complex128 to the last bits."""
    f = function(complex_rows, "complex128")
    rng = np.random.default_rng(5)
    x, y = (rng.standard_normal((4, 16)) + 1j * rng.standard_normal((4, 16)) for _ in range(2))
    mesh = jax.make_mesh((2, 4), ("a", "b"))
    with jax.enable_x64(True), jax.set_mesh(mesh):
        g = jax.jit(f)
        s, e = g(put(mesh, x, P("a", "b")), put(mesh, y, P("a", "b")))
        hlo = g.lower(put(mesh, x, P("a", "b")), put(mesh, y, P("a", "b"))).compile().as_text()
    assert s.dtype == np.complex128 and e.dtype == np.complex128
    close((s, e), (np.sum(x * np.conj(y), -1), np.exp(x) * y), rtol=1e-13, atol=1e-13)
    assert kinds(hlo) == ["all-reduce"] and "c128" in hlo, collectives(hlo)


# --- the matrix (slow) ---------------------------------------------------------------------------

CASES = [
    (ex.add_reduce_sum, [(8, 16), (8, 16)], dict(axis=0)),
    (ex.add_reduce_sum, [(8, 16), (8, 16)], dict(axis=1, keep_dims=True)),
    (ex.add_mul_div, [(8, 16), (1, 16)], {}),
    (ex.smooth_l1, [(8, 16), (8, 16)], dict(sigma=0.7)),
    (ex.softmax, [(8, 16)], {}),
    (ex.softmax, [(8, 16)], dict(axis=0)),
    (ex.layer_norm, [(8, 16)], {}),
    (ex.layer_norm, [(8, 16)], dict(axis=0)),
    (ex.rms_norm, [(8, 16), (16,)], {}),
    (ex.bias_gelu, [(8, 16), (16,)], {}),
]
SPECS = [P(("a", "b"), None), P(None, ("a", "b")), P("a", "b")]


def _inputs(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(0.5, 1.5, s).astype(np.float32) for s in shapes]


def _spec_for(x, spec):
    """The main input's spec; a lower-rank or size-1-dim input (a broadcast partner) replicated."""
    return spec if x.ndim == 2 and 1 not in x.shape else P()


def _expected_collectives(op, xs, attrs, spec, mesh):
    spec_ = fg.infer(op, ["float32"] * len(xs), [x.shape for x in xs], op.bind_attrs(attrs))
    flow = dimflow.analyze(spec_)
    axes = [[(e,) if isinstance(e, str) else tuple(e or ()) for e in (tuple(_spec_for(x, spec)) + (None,) * x.ndim)[:x.ndim]]
            for x in xs]
    prog = dimflow.program(flow, dimflow.assign(flow, axes, dict(mesh.shape)))
    return [] if prog is None else prog.collectives


@pytest.mark.slow
@pytest.mark.parametrize("types", [None, AUTO], ids=["explicit", "auto"])
@pytest.mark.parametrize("spec", SPECS, ids=["dim0", "dim1", "both"])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0].name}-{i}" for i, c in enumerate(CASES)])
def test_every_reference_op_sharded_along_each_dim(case, spec, types):
    op, shapes, attrs = case
    xs = _inputs(shapes)
    f = function(op)
    want = f(*xs, **attrs)
    mesh = jax.make_mesh((2, 4), ("a", "b"), axis_types=types)
    args = [put(mesh, x, _spec_for(x, spec)) for x in xs]
    with jax.set_mesh(mesh):
        g = jax.jit(lambda *a: f(*a, **attrs))
        got = g(*args)
        hlo = g.lower(*args).compile().as_text()
    close(got, want)
    found = kinds(hlo)
    assert "all-gather" not in found, collectives(hlo)
    expected = _expected_collectives(op, xs, attrs, spec, mesh)
    assert ("all-reduce" in found) == bool(expected), (found, expected)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0].name}-{i}" for i, c in enumerate(CASES)])
def test_every_gradient_sharded_on_two_mesh_axes(case):
    check_sharded_gradient(case)


@pytest.mark.extended
def test_a_sum_gradient_gathers_no_operand():
    """The gradient of a sum over rows, whose sum_to moves nothing at these shapes: the sharded
    call takes its rules from the op with the sum_to (x's and y's rows one factor), each shard
    runs without it. (Its rules from the op without it gathered y: 2026-11-28.)"""
    check_sharded_gradient(CASES[0])


def check_sharded_gradient(case):
    op, shapes, attrs = case
    xs = _inputs(shapes, seed=1)
    f = function(op)
    outs = f(*xs, **attrs)
    cots = [np.random.default_rng(2).standard_normal(np.shape(o)).astype(np.float32)
            for o in (outs if isinstance(outs, tuple) else (outs,))]

    def pullback(*a):
        y, vjp = jax.vjp(lambda *v: f(*v, **attrs), *a[:len(xs)])
        return vjp(tuple(a[len(xs):]) if isinstance(y, tuple) else a[len(xs)])

    want = pullback(*xs, *cots)
    mesh = jax.make_mesh((2, 4), ("a", "b"))
    args = [put(mesh, x, _spec_for(x, P("a", "b"))) for x in xs]
    with jax.set_mesh(mesh):   # cotangents typed as the outputs are (Explicit axes)
        ys = jax.jit(lambda *a: f(*a, **attrs))(*args)
    args += [put(mesh, c, y.sharding.spec) for c, y in zip(cots, ys if isinstance(ys, tuple) else (ys,))]
    with jax.set_mesh(mesh):
        g = jax.jit(pullback)
        got = g(*args)
        hlo = g.lower(*args).compile().as_text()
    close(got, want, rtol=1e-4, atol=1e-5)
    # A replicated input (a broadcast weight) has a replicated gradient: its gradient, computed
    # split like its partner dim, is gathered (a few floats). Nothing else is gathered.
    replicated = {"f32[" + ",".join(map(str, x.shape)) + "]" for x in xs if _spec_for(x, P("a", "b")) == P()}
    gathered = {shape.split("{")[0] for shape, kind in collectives(hlo) if kind == "all-gather"}
    assert gathered <= replicated, collectives(hlo)


@fg.op
def row_prod(x):
    return fg.prod(x, axis=-1)


@pytest.mark.slow
def test_a_product_gathers_partial_products_not_inputs():
    x = _inputs([(8, 16)])[0]
    f = function(row_prod)
    mesh = jax.make_mesh((2, 4), ("a", "b"))
    xs = put(mesh, x, P("a", "b"))
    with jax.set_mesh(mesh):
        g = jax.jit(f)
        got = g(xs)
        hlo = g.lower(xs).compile().as_text()
    close(got, np.prod(x, -1), rtol=1e-5)
    (shape, kind), = collectives(hlo)
    assert kind == "all-gather" and shape.startswith("f32[4,4]")   # 4 partial products per device, not x


@pytest.mark.slow
@pytest.mark.parametrize("types", [None, AUTO], ids=["explicit", "auto"])
def test_inputs_split_differently_are_resharded_to_one_split(types):
    """x and y split their dims over crossed axes: the first input's split wins and y is moved
    to it (a collective, not a gather of x); the results are right either way."""
    x, y = _inputs([(8, 16), (8, 16)])
    f = function(ex.add_mul_div)
    mesh = jax.make_mesh((2, 4), ("a", "b"), axis_types=types)
    args = put(mesh, x, P("a", "b")), put(mesh, y, P("b", "a"))
    with jax.set_mesh(mesh):
        got = jax.jit(f)(*args)
    close(got, f(x, y))
    if types is None:   # Explicit: the types say where the results are; Auto: propagation decides
        assert [spec_of(o) for o in got] == [("a", "b")] * 3


@pytest.mark.slow
def test_vmap_of_a_sharded_batch_keeps_the_batch_split():
    f = function(ex.softmax)
    mesh = jax.make_mesh((2, 4), ("a", "b"))
    x = _inputs([(4, 8, 16)])[0]
    xs = put(mesh, x, P(None, "a", "b"))
    with jax.set_mesh(mesh):
        g = jax.jit(jax.vmap(f))
        got = g(xs)
        hlo = g.lower(xs).compile().as_text()
    close(got, f(x, axis=-1))
    assert spec_of(got) == (None, "a", "b")
    assert "all-gather" not in kinds(hlo) and kinds(hlo).count("all-reduce") == 2


@pytest.mark.slow
def test_the_gspmd_partitioner_gets_the_same_rules():
    f = function(ex.add_reduce_sum)
    x = _inputs([(8, 16)])[0]
    mesh = jax.make_mesh((2, 4), ("a", "b"), axis_types=AUTO)
    xs = put(mesh, x, P("a", "b"))
    jax.config.update("jax_use_shardy_partitioner", False)
    try:
        with jax.set_mesh(mesh):
            g = jax.jit(lambda u: f(u, u, axis=1))
            got = g(xs)
            hlo = g.lower(xs).compile().as_text()
    finally:
        jax.config.update("jax_use_shardy_partitioner", True)
    close(got, 2 * x.sum(1), rtol=1e-5)
    assert kinds(hlo) == ["all-reduce"] and spec_of(got) == ("a",)


@fg.op
def major_split(x):
    """(16, 3) -> (8, 2, 3): the -1 dim is the major part of x's rows (dimflow's MAJOR link)."""
    y = fg.reshape(x, (-1, 2, 3))
    return y * 2.0, fg.mean(y, axis=0)


@pytest.mark.extended
@pytest.mark.parametrize("types", [None, AUTO], ids=["explicit", "auto"])
def test_a_reshape_keeps_the_split_on_the_major_part(types):
    """x's rows split 8 ways stay split through the reshape (each device: 2 rows -> 1 pair); the
    mean over the pairs is a partial sum per device, one all-reduce, divided by 8 (not 16)."""
    x = _inputs([(16, 3)])[0]
    f = function(major_split)
    mesh = jax.make_mesh((2, 4), ("a", "b"), axis_types=types)
    xs = put(mesh, x, P(("a", "b")))
    with jax.set_mesh(mesh):
        g = jax.jit(f)
        y, m = g(xs)
        hlo = g.lower(xs).compile().as_text()
    close((y, m), (2 * x.reshape(8, 2, 3), x.reshape(8, 2, 3).mean(0)), rtol=1e-5)
    assert kinds(hlo) == ["all-reduce"], collectives(hlo)
    assert spec_of(y) == (("a", "b"),) and spec_of(m) == ()


@fg.op
def shifted_diff(x):
    """A slice along the last dim: each element needs its neighbour, which may be on another device."""
    return x[:, 1:] - x[:, :-1]


@pytest.mark.extended
def test_a_slice_along_a_split_dim_gathers_it_and_says_so():
    x = _inputs([(8, 16)])[0]
    f = function(shifted_diff)
    mesh = jax.make_mesh((2, 4), ("a", "b"), axis_types=AUTO)
    xs = put(mesh, x, P("a", "b"))
    g = jax.jit(f)
    with pytest.warns(fg.errors.ShardingWarning, match=r"op shifted_diff: input 'x' dim 1 over \('b',\): "
                      "the op needs this dim whole on each device"):
        hlo = g.lower(xs).compile().as_text()
    close(g(xs), x[:, 1:] - x[:, :-1])
    assert spec_of(g(xs)) == ("a",)                # the rows stay split
    assert kinds(hlo) == ["all-gather"], collectives(hlo)   # x's last dim, over 'b' only
