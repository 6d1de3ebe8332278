"""One node for each value: an expression written twice is one node (trace interning, which
tells constants apart by their bits), and a reduction without keepdims beside its keepdims twin
reads the twin through a squeeze (fusegen.graph.canon.share_common); the values and shapes stay
NumPy's on both CPU backends."""
from __future__ import annotations

import numpy as np
import pytest

import fusegen as fg
from fusegen import examples as ex
from fusegen.ir import Op


def _reductions(op, kind: str) -> int:
    return sum(1 for n in op.graph.nodes if n.op is Op.REDUCE and n.arg.kind == kind)


@fg.op
def twice(x, y):
    return fg.exp(x * y) + fg.exp(x * y), fg.sum(x * y, axis=0)


@fg.op
def twins(x):
    """keepdims and not, over one axis, two (positive) and every axis; and a pair that is not
    merged (the same axis written two ways)."""
    return (fg.max(x, axis=-1, keepdims=True) - fg.max(x, axis=-1)[..., None],
            fg.sum(x, axis=(0, 2), keepdims=True), fg.sum(x, axis=(0, 2)),
            fg.min(x, axis=None, keepdims=True), fg.min(x),
            fg.mean(x, axis=1, keepdims=True), fg.mean(x, axis=-2))


@fg.op
def lookalikes(x):
    """Constants that compare equal in Python but are not the same value or kind."""
    return x * 0.0, x * -0.0, x + 1, x + True, x * 2, x * 2.0, fg.copysign(1.0, x * float("nan")), \
        fg.copysign(1.0, x * -float("nan"))


def test_constants_equal_in_python_stay_apart():
    x = np.ones(3, np.float32)
    got = fg.compile(lookalikes)(x)
    assert not np.signbit(got[0]).any() and np.signbit(got[1]).all()
    assert got[2].dtype == got[3].dtype == np.float32
    want = fg.compile(lookalikes, backend="aot")(x)
    for g, w in zip(got, want):
        assert np.array_equal(np.signbit(g), np.signbit(w)) and np.array_equal(g, w, equal_nan=True)
    assert sum(1 for n in lookalikes.graph.nodes if n.op is Op.CONST) == 9   # (1.0 twice: one)


def test_an_expression_written_twice_is_one_node():
    assert sum(1 for n in twice.graph.nodes if n.op is Op.EXP) == 1
    assert sum(1 for n in twice.graph.nodes if n.op is Op.MUL) == 1


@fg.op
def plain_twins(x):
    return fg.max(x, axis=-1, keepdims=True) + 1.0, fg.max(x, axis=-1)


def test_an_op_without_views_keeps_both_and_its_plain_stages():
    assert _reductions(plain_twins, "max") == 2
    assert not any(n.op is Op.INDEX for n in plain_twins.graph.nodes)
    assert "chunk_view" not in fg.emit(plain_twins, dtypes=["float32"]).source


def test_a_reduction_without_keepdims_reads_its_twin():
    assert _reductions(ex.cross_entropy, "max") == 1
    assert _reductions(twins, "max") == 1 and _reductions(twins, "sum") == 1
    assert _reductions(twins, "min") == 2      # axis=None: no squeeze items without the rank
    assert _reductions(twins, "mean") == 2     # 1 and -2 are not the same text


@pytest.mark.parametrize("backend", ["numba", pytest.param("aot", marks=pytest.mark.extended)])
def test_values_and_shapes_stay_numpys(backend):
    x = np.random.default_rng(0).standard_normal((3, 4, 5)).astype(np.float32)
    got = fg.compile(twins, backend=backend)(x)
    want = (np.zeros((3, 4, 1), np.float32), x.sum(axis=(0, 2), keepdims=True), x.sum(axis=(0, 2)),
            x.min(keepdims=True), x.min(), x.mean(axis=1, keepdims=True), x.mean(axis=-2))
    for g, w in zip(got, want):
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    a, b = fg.compile(twice, backend=backend)(x[0], x[1])
    np.testing.assert_allclose(a, 2 * np.exp(x[0] * x[1]), rtol=1e-6)


@pytest.mark.extended   # (9 s of Numba compiles: the default run's 5 minutes lack it)
def test_gradients_through_merged_nodes():
    x = np.random.default_rng(1).standard_normal((3, 4, 5))
    cot = [np.ones(np.shape(o)) for o in fg.compile(twins)(x)]
    got = fg.compile(fg.grad(twins, wrt=0))(x, *cot)
    got = got[0] if isinstance(got, tuple) else got
    # the max minus itself: 0; sum twice: 2; mean over 4 twice: 0.5; min twice: 2 at the argmin
    want = np.full_like(x, 2.5)
    want[np.unravel_index(np.argmin(x), x.shape)] += 2.0
    np.testing.assert_allclose(got, want, rtol=1e-12)
