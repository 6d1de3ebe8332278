"""Layout ops and symbolic shapes (issue #16): shape rules and errors without a compiler, then the
reference ops and random chains of views through the Numba backend against NumPy.

Every backend runs the same smoke table in ``test_layout_backends.py``; this file holds what is
about the IR: shapes, errors, specialization, and the hypothesis chains."""
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fusegen as fg
from fusegen import examples as ex
from fusegen.errors import BoundsError, ShapeError, TraceError
from _optional import backends_extended

F32 = np.float32


def _infer(op, *shapes, **attrs):
    spec = fg.infer(op, ["float32"] * len(shapes), shapes, op.bind_attrs(attrs))
    return [tuple(spec.info[op.graph.idx(o)].shape) for o in op.graph.outputs]


# --- shape rules, with symbolic dims and attributes -------------------------------------------------
def test_shapes_follow_numpy():
    @fg.op
    def views(x, y, *, n: int = 2):
        return (x.T, x[1:, ::-1], x[..., :n], x[None, 0], fg.moveaxis(y, 0, -1), y.reshape(-1, x.shape[-1]),
                fg.concat([x, x], axis=-1), fg.pad(x, ((1, 0), (2, 3))), fg.arange(x.shape[0] * 2),
                fg.broadcast_to(x[:, :1], (4, x.shape[0], 7)))

    x, y = np.empty((3, 7), F32), np.empty((2, 3, 7), F32)
    want = [a.shape for a in (x.T, x[1:, ::-1], x[..., :3], x[None, 0], np.moveaxis(y, 0, -1), y.reshape(-1, 7),
                              np.concatenate([x, x], -1), np.pad(x, ((1, 0), (2, 3))), np.arange(6),
                              np.broadcast_to(x[:, :1], (4, 3, 7)))]
    assert _infer(views, (3, 7), (2, 3, 7), n=3) == want


def test_dynamic_dims_stay_unknown_where_they_must():
    @fg.op
    def f(x):
        return x[1:], x.T, fg.concat([x, x], axis=0)

    assert _infer(f, (-1, 5)) == [(-1, 5), (5, -1), (-1, 5)]
    assert _infer(f, (4, 5)) == [(3, 5), (5, 4), (8, 5)]


@pytest.mark.parametrize("body, exc, words", [
    (lambda x: fg.permute_dims(x, (0, 0)), ShapeError, "not a permutation"),
    (lambda x: x.reshape(4, 4), ShapeError, "cannot reshape a tensor of size 6"),
    (lambda x: x.reshape(-1, -1), TraceError, "only one dim can be -1"),
    (lambda x: fg.concat([x, x.T], axis=0), ShapeError, "concat along axis 0"),
    (lambda x: x[::0], TraceError, "step cannot be zero"),
    (lambda x: x[5], BoundsError, "out of bounds for axis 0 with size 2"),
    (lambda x: fg.squeeze(x, axis=1), ShapeError, "cannot squeeze axis 1"),
    (lambda x: fg.pad(x, -1), ShapeError, "pad widths must be >= 0"),
    (lambda x: fg.repeat(x, (1, -1, 2), axis=1), TraceError, "non-negative ints"),
    (lambda x: fg.repeat(x, "2"), TraceError, "repeats must be an int or a sequence of ints"),
    # an axis past the rank, too many indices, too many dims: NumPy's IndexError (fg.AxisError)
    (lambda x: fg.expand_dims(x, axis=3), IndexError, "too many indices"),
    (lambda x: x[:, :, :, None], fg.AxisError, "too many indices"),
    (lambda x: fg.moveaxis(x, 2, 0), IndexError, "out of range for rank 2"),
    (lambda x: fg.expand_dims(x, axis=(4, -1)), IndexError, "out of range for the result's rank 4"),
    (lambda x: fg.expand_dims(x, axis=(1, -3)), ShapeError, "repeated axis"),
])
def test_bad_layouts_name_the_op_node_and_line(body, exc, words):
    with pytest.raises(exc) as e:   # at trace time where the constants show it, else at the call
        fg.compile(fg.op(body, name="bad_layout"))(np.ones((2, 3), F32))
    msg = str(e.value)
    assert words in msg and "bad_layout" in msg and re.search(r"test_layout_ops\.py:\d+", msg), msg


def test_rank_and_shape_dependent_python_specializes():
    @fg.op
    def unpack(x):
        b, s, d = x.shape           # needs the rank: traced once per rank
        return x.reshape(b * s, d)

    @fg.op
    def per_shape(x):
        n = int(x.shape[0])         # needs the value: traced once per shape
        return fg.concat([x[i:i + 1] * i for i in range(n)], axis=0)

    assert unpack.specializes == "rank" and per_shape.specializes == "shape"
    x = np.arange(24, dtype=F32).reshape(2, 3, 4)
    np.testing.assert_array_equal(fg.compile(unpack)(x), x.reshape(6, 4))
    y = np.ones((3, 2), F32)
    np.testing.assert_array_equal(fg.compile(per_shape)(y), y * np.arange(3, dtype=F32)[:, None])
    assert str(unpack).startswith("op unpack(x): traced per input rank") and "reshape" in str(unpack)

    @fg.op
    def interleaved_rope(x, cos, sin):
        # the idiom "reshape back to x's shape", as a method taking x.shape whole: traced per rank
        x1, x2 = x[..., ::2], x[..., 1::2]
        return fg.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1).reshape(x.shape)

    assert interleaved_rope.specializes == "rank"
    c, s = np.cos(x[0, :, :2]), np.sin(x[0, :, :2])
    want = np.stack([x[..., ::2] * c - x[..., 1::2] * s, x[..., ::2] * s + x[..., 1::2] * c], axis=-1).reshape(x.shape)
    np.testing.assert_allclose(fg.compile(interleaved_rope)(x, c, s), want, rtol=1e-6)


def test_data_dependent_python_is_still_refused():
    def branchy(x):
        return x if bool(fg.sum(x) > 0) else -x

    with pytest.raises(TraceError, match="use fg.where"):
        fg.op(branchy)


# --- the reference ops, against NumPy ------------------------------------------------------------
def _sig(a):
    return 1 / (1 + np.exp(-a))


def _ref_gn(x, g, b, groups, eps):
    n = x.shape[0]
    xg = x.reshape(n, groups, -1)
    m = xg.mean(-1, keepdims=True)
    v = ((xg - m) ** 2).mean(-1, keepdims=True)
    return ((xg - m) / np.sqrt(v + eps)).reshape(x.shape) * g[:, None, None] + b[:, None, None]


REFERENCE = [
    (ex.transpose_add, lambda x, y: x + y.T, [(5, 7), (7, 5)], {}),
    (ex.rope, lambda x, c, s: x * c + np.concatenate([-x[..., 4:], x[..., :4]], -1) * s,
     [(2, 3, 6, 8), (6, 8), (6, 8)], {}),
    (ex.heads_split, lambda x, heads, scale: x.reshape(2, 5, heads, -1).transpose(0, 2, 1, 3) * scale,
     [(2, 5, 12)], dict(heads=3, scale=0.5)),
    (ex.causal_softmax, lambda x: (lambda z: np.exp(z - z.max(-1, keepdims=True))
                                   / np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True))(
        np.where(np.tril(np.ones((5, 5), bool)), x, -np.inf)), [(2, 3, 5, 5)], {}),
    (ex.swiglu, lambda x: _sig(x[:, :5]) * x[:, :5] * x[:, 5:], [(4, 10)], {}),
    (ex.group_norm, lambda x, g, b, groups, eps: _ref_gn(x, g, b, groups, eps), [(2, 8, 3, 3), (8,), (8,)],
     dict(groups=4, eps=1e-5)),
]


@pytest.mark.parametrize("op, ref, shapes, attrs", REFERENCE, ids=[r[0].name for r in REFERENCE])
def test_reference_layout_ops(op, ref, shapes, attrs):
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(s).astype(F32) for s in shapes]
    got = fg.compile(op)(*xs, **attrs)
    want = ref(*[a.astype(np.float64) for a in xs], **attrs)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    assert got.dtype == F32


# --- random chains of views, hypothesis ----------------------------------------------------------
_STEPS = ["T", "flip", "slice", "neg", "reshape", "expand", "concat", "pad", "roll"]


def _apply(step, a, xp):
    """One layout step on ``a`` (NumPy or fusegen), or None where it does not apply."""
    if step == "T":
        return a.T
    if step == "flip":
        return xp.flip(a, axis=-1)
    if step == "slice":
        return a[..., 1:]
    if step == "neg":
        return a[::-1]
    if step == "reshape":
        return a.reshape(-1)
    if step == "expand":
        return xp.expand_dims(a, axis=0)
    if step == "concat":
        return xp.concat([a, a * 2], axis=-1) if xp is not np else np.concatenate([a, a * 2], axis=-1)
    if step == "pad":
        return xp.pad(a, 1)
    if step == "roll":
        return xp.roll(a, 1, axis=-1)
    raise AssertionError(step)  # pragma: no cover


def _valid(chain, shape):
    """Whether NumPy can run the chain on ``shape`` (no empty or 0-d operand mid-way)."""
    a = np.empty(shape)
    for s in chain:
        if a.ndim == 0 or a.size == 0 or (s == "slice" and a.shape[-1] < 2):
            return False
        a = _apply(s, a, np)
    return a.size > 0


_CHAINS = dict(chain=st.lists(st.sampled_from(_STEPS), min_size=1, max_size=4),
               shape=st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple))


# each chain is a new op (a compile): a few under -m extended (conftest's EXTENDED_TESTS), many
# under -m slow
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**_CHAINS)
def test_random_view_chains_match_numpy(chain, shape):
    _check_chain(chain, shape)


@pytest.mark.slow
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**_CHAINS)
def test_many_random_view_chains_match_numpy(chain, shape):
    _check_chain(chain, shape)


def _check_chain(chain, shape):
    if not _valid(chain, shape):
        return
    x = np.arange(np.prod(shape), dtype=F32).reshape(shape) - 3

    def body(t):
        for s in chain:
            t = _apply(s, t, fg)
        return t * 1.5 + 1

    want = x
    for s in chain:
        want = _apply(s, want, np)
    got = fg.compile(fg.op(body, name="chain"))(x)
    np.testing.assert_array_equal(got, want * 1.5 + 1)


def test_repeat_counts_must_match_the_axis():
    with pytest.raises(ShapeError, match=r"op rep: repeat: 2 counts for the elements along axis 1: \(3,\) != \(2,\)"):
        fg.compile(fg.op(lambda x: fg.repeat(x, (1, 2), axis=1), name="rep"))(np.ones((2, 3), F32))


def test_flat_roll_in_an_op_traced_per_rank():
    # roll(axis=None) reshapes back "like" x; in a trace per rank x's dims are all unknown (-1),
    # which the reshape rule took for several dims to infer ("only one dim can be -1"), and the
    # error's naming then failed on the unfinished trace (an AttributeError). repeat needs the
    # rank, so the op is traced per rank. (Found by test_layout_differential.py.)
    @fg.op
    def flat_roll(x):
        return fg.min(fg.repeat(fg.roll(x, 1, axis=None), 2, axis=-3), axis=0)

    x = np.arange(18, dtype=F32).reshape(2, 3, 3)
    np.testing.assert_array_equal(fg.compile(flat_roll)(x), np.repeat(np.roll(x, 1), 2, axis=-3).min(0))


def test_a_shape_error_found_while_tracing_per_shape_names_the_node():
    @fg.op
    def per_shape_bad(x, z):
        return fg.repeat(x + z, int(x.shape[0]), axis=0)   # per_shape_bad's add

    with pytest.raises(ShapeError, match=r"op per_shape_bad: add %\?, %\? at test_layout_ops\.py:\d+: "
                                         r"cannot broadcast shapes \(2, 3\) and \(4, 3\)"):
        fg.compile(per_shape_bad)(np.ones((2, 3), F32), np.ones((4, 3), F32))


def test_expand_dims_with_a_tuple_counts_axes_in_the_result():
    """NumPy's: each axis of the tuple is a position in the result (rank ndim + len(axis)), mixed
    signs included (traced per rank)."""
    x = np.arange(6, dtype=F32).reshape(2, 3)
    for axis in ((3, -4), (0, -1), (-1, -2), (0, 1), (-4, 1)):
        (got,) = [fg.compile(fg.op(lambda x: fg.expand_dims(x, axis=axis), name="ed"))(x)]
        np.testing.assert_array_equal(got, np.expand_dims(x, axis))


def test_more_than_thirty_two_dims_are_refused_by_name():
    """Kernels take up to 32 dims (the emitted C++'s fg::kMaxRank; NumPy goes to 64): past them a
    clear error naming the op, an IndexError as NumPy's AxisError. 9, 10 and 32 work."""
    op = fg.op(lambda x: x.reshape((1,) * 31 + (2, 3)), name="deep")
    with pytest.raises(fg.AxisError, match="op deep: reshape to rank 33.*at most 32 dims"):
        fg.compile(op)(np.ones((2, 3), F32))
    # an input past them: the runtime's AxisError, before any backend (test_aot_backend: the AOT's)
    with pytest.raises(fg.AxisError, match="op wide: input 'x' has 33 dims.*at most 32"):
        fg.compile(fg.op(lambda x: x * 2.0 + 1.0, name="wide"))(np.ones((1,) * 32 + (2,), F32))
    x = np.arange(6, dtype=F32).reshape(2, 3)
    for shape in ((1,) * 7 + (2, 3), (1,) * 30 + (2, 3)):
        many = fg.op(lambda x: x.reshape(shape) * 2.0, name="many")
        for backend in ("numba", "aot"):
            np.testing.assert_array_equal(fg.compile(many, backend=backend)(x), x.reshape(shape) * 2)
    y = np.random.default_rng(0).random((1, 2) * 5).astype(F32)   # rank 10: a reduction and a permute
    ten = fg.op(lambda y: (fg.sum(y, axis=(1, 9)), fg.permute_dims(y, tuple(range(10))[::-1]) + 1.0), name="ten")
    for backend in ("numba", "aot"):
        s, t = fg.compile(ten, backend=backend)(y)
        np.testing.assert_allclose(s, y.sum(axis=(1, 9)), rtol=1e-6)
        np.testing.assert_array_equal(t, y.T + 1)


def test_squeeze_of_no_axes_is_the_operand():
    x = np.arange(6, dtype=F32).reshape(1, 6)
    for backend in ("numba", "aot"):
        np.testing.assert_array_equal(fg.compile(fg.op(lambda x: fg.squeeze(x, ()) * 1.0, name="sq0"),
                                                 backend=backend)(x), x)


@fg.op
def pieces_of_constants(x, *, fill: float = -1.5):
    """Pads and concats whose pieces read no array: each piece's box writes at its own offset."""
    return (fg.pad(fg.ones((2, 3), dtype="float64"), 1), fg.pad(fg.full((3,), 1.5, dtype="float64"), (2, 1),
                                                                constant_values=fill),
            fg.concat([fg.full((2, 2), 1.5, dtype="float64"), fg.full((2, 2), 2.5, dtype="float64")], axis=1),
            x + 1)


@pytest.mark.parametrize("backend", backends_extended("numba", "aot"))
def test_pieces_of_constants_are_placed(backend):
    # (the Numba backends wrote every piece at the output's start: the rest was never written)
    got = fg.compile(pieces_of_constants, backend=backend)(np.zeros(3), fill=-2.0)
    want = (np.pad(np.ones((2, 3)), 1), np.pad(np.full(3, 1.5), (2, 1), constant_values=-2.0),
            np.concatenate([np.full((2, 2), 1.5), np.full((2, 2), 2.5)], axis=1), np.ones(3))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@fg.op
def two_flattenings(x):
    """Two outputs, each a flattening of x that groups the loop dim its own way (4x3, 3x4)."""
    return x.T.reshape((12,)) * 2, fg.cumulative_sum(x[:, ::-1].reshape((12,)))


def test_flattenings_whose_groupings_do_not_nest_share_a_loop():
    # (the Numba scheduler fused them and refine refused the pair: FG_ERR_VIEW_NEST)
    x = np.arange(12.0).reshape(3, 4)
    a, b = fg.compile(two_flattenings)(x)
    np.testing.assert_array_equal(a, x.T.reshape(12) * 2)
    np.testing.assert_array_equal(b, np.cumsum(x[:, ::-1].reshape(12)))


@fg.op
def causal_beside_modular(x):
    """A causal mask (an index-set split of the loop) beside an operand read through div/mod."""
    return fg.where(fg.arange(4)[:, None] >= fg.arange(6)[None, :], x.T.reshape(4, 6), 0.5)


@pytest.mark.parametrize("backend", backends_extended("numba", "aot"))
def test_a_split_loop_beside_a_modular_read(backend):
    x = np.arange(24.0).reshape(6, 4)
    got = fg.compile(causal_beside_modular, backend=backend)(x)
    np.testing.assert_array_equal(got, np.where(np.tril(np.ones((4, 6), bool)), x.T.reshape(4, 6), 0.5))


@pytest.mark.extended   # (a g++ build: the default run keeps its 5 minutes)
def test_more_than_thirty_two_dims_inside_an_emitted_kernel():
    op = fg.op(lambda x: x.reshape((1,) * 31 + (2, 3)), name="deep")
    with pytest.raises(fg.FusegenError, match="deep.*FG_ERR_RANK.*more dims than the kernel supports \\(32\\)"):
        fg.compile(op, backend="aot")(np.ones((2, 3), F32))
