"""The array API's ``matmul`` (and ``@``), ``tensordot``, ``vecdot`` and ``diff`` (fusegen/graph/linalg.py):
NumPy's results, dtypes and shapes through the Numba and AOT backends, 1-D promotion, batch
broadcasting, size-0 dims, int wrap-around, bool and complex; contracted sizes that differ are a
ShapeError naming the op, never a broadcast."""
from __future__ import annotations

import numpy as np
import pytest

import fusegen as fg
from _optional import needs_gxx


@fg.op
def products(a, b, c, v):
    """matmul of a (.., M, K) and b (K, N); a matrix times a vector; tensordot; vecdot."""
    return a @ b, fg.matmul(b, v), fg.tensordot(a, c, axes=([-1], [0])), fg.vecdot(c, c, axis=-2)


def _want(a, b, c, v):
    return a @ b, np.matmul(b, v), np.tensordot(a, c, axes=([-1], [0])), np.vecdot(c, c, axis=-2)


SHAPES = {"batched": ((2, 3, 4), 5), "size0": ((0, 4), 0), "broadcast1": ((1, 3, 4), 1)}
# The default run takes one representative (each compile is a few seconds); the rest, the AOT
# library among them, is extended.
DEFAULT = {("numba", "float32", "batched")}


@pytest.mark.parametrize("backend,dtype,shapes", [
    pytest.param(b, d, s, marks=([needs_gxx] if b == "aot" else []) + ([] if (b, d, s) in DEFAULT else [pytest.mark.extended]))
    for b in ("numba", "aot") for d in ("float32", "int8", "complex128", "bool") for s in SHAPES])
def test_products_match_numpy(backend, dtype, shapes):
    rng = np.random.default_rng(1)
    dtype = np.dtype(dtype)

    def arr(*shape):
        x = rng.standard_normal(shape) * 40
        if dtype.kind == "c":
            x = x + 1j * rng.standard_normal(shape)
        return x.astype(dtype)
    a_shape, m = SHAPES[shapes]
    a, b, c, v = arr(*a_shape), arr(4, m), arr(4, 2), arr(m)
    for got, want in zip(fg.compile(products, backend=backend)(a, b, c, v), _want(a, b, c, v)):
        assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
        if dtype.kind in "iub":
            np.testing.assert_array_equal(got, want)   # int8 sums wrap as int8 arithmetic does
        else:
            np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-4)


@fg.op
def differences(x, p, q):
    return fg.diff(x), fg.diff(x, axis=0, n=2, prepend=p), fg.diff(x, n=0), fg.diff(x, axis=-1, n=2, append=q)


@pytest.mark.parametrize("backend", ["numba", pytest.param("aot", marks=[needs_gxx, pytest.mark.extended])])
def test_diff_matches_numpy(backend):
    rng = np.random.default_rng(2)
    x = rng.integers(-100, 100, (4, 3)).astype(np.int16)
    p, q = rng.integers(-9, 9, (1, 3)).astype(np.int16), rng.integers(-9, 9, (4, 2)).astype(np.int16)
    got = fg.compile(differences, backend=backend)(x, p, q)
    want = np.diff(x), np.diff(x, axis=0, n=2, prepend=p), np.diff(x, n=0), np.diff(x, axis=-1, n=2, append=q)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def test_contracted_sizes_must_match_and_arguments_are_checked():
    with pytest.raises(fg.ShapeError, match=r"op mm:.*dims \[4, 5\]"):
        fg.compile(fg.op(lambda a, b: a @ b, name="mm"))(np.ones((3, 4)), np.ones((5, 2)))
    with pytest.raises(fg.ShapeError, match=r"op vd: .*vecdot: contracted axis -1 of x1 and axis -1 of x2 differ"):
        fg.compile(fg.op(lambda a, b: fg.vecdot(a, b), name="vd"))(np.ones((3, 4)), np.ones((3, 1)))
    with pytest.raises(fg.ShapeError, match=r"op td: .*(cannot broadcast|differ in size)"):
        fg.compile(fg.op(lambda a, b: fg.tensordot(a, b, axes=1), name="td"))(np.ones((3, 4)), np.ones((2, 4)))
    for body, text in ((lambda a, b: a @ fg.sum(b), "at least one dimension"),
                       (lambda a, b: fg.tensordot(a, b, axes=3), "axes=3 must lie in"),
                       (lambda a, b: fg.tensordot(a, b, axes=([0, 0], [0, 1])), "without repeats"),
                       (lambda a, b: fg.vecdot(a, b, axis=0), "must lie in \\[-2, -1\\]"),
                       (lambda a, b: fg.diff(a, n=-1), "n must be a non-negative int"),
                       (lambda a, b: fg.diff(a, axis=2), "axis 2 is out of range for rank 2")):
        with pytest.raises(fg.TraceError, match=text):
            fg.compile(fg.op(body, name="bad"))(np.ones((3, 4)), np.ones((4, 4)))


def test_text_form_is_a_product_and_a_sum():
    op = fg.op(lambda a, b: a @ b, name="mm")
    assert "traced per input rank" in op.text()    # the 1-D promotion needs the ranks
    fg.compile(op)(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32))
    text = op.text()
    assert "= mul " in text and "= sum " in text and "cast" in text
