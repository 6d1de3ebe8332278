"""argmax, argmin, count_nonzero, searchsorted (issue #17) against NumPy on Numba CPU: ties and
NaN (first occurrence; NaN wins), every axis incl. None and keepdims, ranks 0-4, int/bool/float,
fused with what follows (``argmax(z) == labels``)."""
from __future__ import annotations

import numpy as np
import pytest

import fusegen as fg
from _optional import backends_extended


@fg.op
def searching(x, y):
    return (fg.argmax(x, axis=-1), fg.argmin(x, axis=0), fg.argmax(x), fg.argmin(x, keepdims=True),
            fg.argmax(x, axis=1, keepdims=True), fg.sum(fg.cast(fg.argmax(x, axis=-1) == y, "float32")),
            fg.count_nonzero(x, axis=0), fg.count_nonzero(x), fg.count_nonzero(x, axis=-1, keepdims=True))


def _want(x, y):
    return (np.argmax(x, -1), np.argmin(x, 0), np.argmax(x), np.argmin(x, keepdims=True),
            np.argmax(x, 1, keepdims=True), np.float32((np.argmax(x, -1) == y).sum()),
            np.count_nonzero(x, 0), np.count_nonzero(x), np.count_nonzero(x, -1, keepdims=True))


@fg.op
def searching_small(x, y):
    return (fg.argmax(x, axis=-1), fg.sum(fg.cast(fg.argmax(x, axis=-1) == y, "float32")),
            fg.argmin(x, axis=0, keepdims=True), fg.count_nonzero(x, axis=-1))


def test_searching_fused():
    # the default run's one compile: ties, NaN, an argmax fused with a compare and a sum
    rng = np.random.default_rng(0)
    x = rng.integers(-2, 3, (2, 3, 1, 5)).astype(np.float32)
    x.reshape(-1)[[1, 5, 6, 17]] = np.nan
    y = rng.integers(0, 5, (2, 3, 1))
    a, hits, b, c = fg.compile(searching_small)(x, y)
    np.testing.assert_array_equal(a, np.argmax(x, -1))
    assert hits == (np.argmax(x, -1) == y).sum() and a.dtype == b.dtype == c.dtype == np.int64
    np.testing.assert_array_equal(b, np.argmin(x, 0, keepdims=True))
    np.testing.assert_array_equal(c, np.count_nonzero(x, -1))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "int8", "bool", "float64"])
@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 1, 5)])
def test_searching_matches_numpy(dtype, shape):
    rng = np.random.default_rng(0)
    x = rng.integers(-2, 3, shape).astype(dtype)   # many ties
    if dtype.startswith("float"):
        x.reshape(-1)[[1, 5, 6]] = np.nan           # NaN wins, first one
    y = rng.integers(0, shape[-1], shape[:-1])
    got = fg.compile(searching)(x, y)
    for k, (g, w) in enumerate(zip(got, _want(x, y))):
        assert np.shape(g) == np.shape(w), k
        assert g.dtype == np.int64 or k == 5, (k, g.dtype)
        np.testing.assert_array_equal(g, w, err_msg=f"output {k}")


@fg.op
def arg_any(x):
    return fg.argmax(x), fg.argmin(x, axis=None, keepdims=True), fg.count_nonzero(x)


@pytest.mark.parametrize("shape", [pytest.param((), marks=pytest.mark.slow), pytest.param((5,), marks=pytest.mark.slow),
                                   (2, 1, 3, 2)])
def test_ranks(shape):
    x = np.random.default_rng(1).standard_normal(shape)
    a, b, c = fg.compile(arg_any)(x)
    np.testing.assert_array_equal(a, np.argmax(x))
    np.testing.assert_array_equal(b, np.argmin(x, axis=None, keepdims=True))
    assert c == np.count_nonzero(x)


def test_empty():
    with pytest.raises(fg.ShapeError, match="size 0"):
        fg.compile(arg_any)(np.zeros((0, 3)))
    assert fg.compile(fg.op(lambda x: fg.count_nonzero(x, axis=0), name="cnz"))(np.zeros((0, 3))).tolist() == [0] * 3


@fg.op
def search(a, v):
    return fg.searchsorted(a, v), fg.searchsorted(a, v, side="right")


@pytest.mark.parametrize("dtype", ["float64", "int32"])
def test_searchsorted(dtype):
    a = np.array([1, 2, 2, 3, 7], dtype)
    v = np.array([[0, 2, 3, 9], [1, 1, 7, -5]], dtype)
    left, right = fg.compile(search)(a, v)
    np.testing.assert_array_equal(left, np.searchsorted(a, v))
    np.testing.assert_array_equal(right, np.searchsorted(a, v, side="right"))
    if dtype == "float64":   # NaN sorts last
        a, v = np.array([1.0, 2, np.nan]), np.array([np.nan, 2.0, 5.0])
        left, right = fg.compile(search)(a, v)
        np.testing.assert_array_equal(left, np.searchsorted(a, v))
        np.testing.assert_array_equal(right, np.searchsorted(a, v, side="right"))


def test_errors():
    for fn, m in ((lambda x: fg.argmax(x, axis=1.5), "axis must be an int"),
                  (lambda x: fg.searchsorted(x, x, side="middle"), "side must be"),
                  (lambda x: fg.count_nonzero(x, axis="a"), "axis must be")):
        with pytest.raises(fg.TraceError, match=m):
            fg.op(fn, name="bad").graph
    with pytest.raises(fg.ShapeError, match="out of range"):
        fg.infer(fg.op(lambda x: fg.argmax(x, axis=2), name="ax"), ["float32"], [(3, 4)], {})


@fg.op
def search_sorter(a, v, order):
    return fg.searchsorted(a, v, sorter=order), fg.searchsorted(a, v, side="right", sorter=order)


@pytest.mark.parametrize("backend", ["numba", "aot"])
def test_searchsorted_with_a_sorter(backend):
    """x1 unsorted with the indices that sort it (NumPy's ``sorter``), ties and NaN included; an
    index outside x1 is a BoundsError, as any gather's."""
    a = np.array([3.0, 1.0, np.nan, 2.0, 2.0, 5.0])
    order = np.argsort(a, kind="stable")
    v = np.array([[0.0, 2.0, 2.5], [6.0, np.nan, 1.0]])
    left, right = fg.compile(search_sorter, backend=backend)(a, v, order)
    np.testing.assert_array_equal(left, np.searchsorted(a, v, sorter=order))
    np.testing.assert_array_equal(right, np.searchsorted(a, v, side="right", sorter=order))
    with pytest.raises(fg.BoundsError, match="search_sorter"):
        fg.compile(search_sorter, backend=backend)(a, v, np.array([0, 1, 2, 3, 4, 6]))


@pytest.mark.parametrize("backend", backends_extended("numba", "aot"))
def test_searchsorted_needs_a_1d_x1(backend):
    """The standard's x1 is 1-d (NumPy's too): a matrix, a 0-d or an empty 2-d x1 is a ShapeError
    (it was flattened); the op stays one trace for every rank, so it still emits without ranks."""
    k = fg.compile(search_sorter, backend=backend)
    v = np.array([2.5])
    for a in (np.array([[1.0, 2.0], [3.0, 4.0]]), np.float64(1.0), np.zeros((0, 3))):
        with pytest.raises(fg.ShapeError, match=r"op search_sorter: searchsorted: x1 must be 1-d"):
            k(a, v, np.zeros(np.shape(a), np.int64))
    assert search_sorter.graph is not None and fg.emit(search_sorter, dtypes="float64,float64,int64").main
