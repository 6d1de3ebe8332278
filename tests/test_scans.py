"""Scans (issue #17) against NumPy on Numba CPU: cumulative_sum/prod (array API 2024.12: axis,
dtype, include_initial, the accumulation dtype), cummax/cummin (NaN propagates), logcumsumexp;
every axis, fused with what follows, ranks 1-3, size-0 axes, errors."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import fusegen as fg


@fg.op
def scans(x):
    c = fg.cumulative_sum(x, axis=-1)
    return (c, fg.cumulative_sum(x, axis=0, include_initial=True), fg.cumulative_prod(x, axis=1),
            fg.cummax(x, axis=-1), fg.cummin(x, axis=0), fg.sum(c * 2, axis=-1))


def _ref(x):
    c = np.cumsum(x, -1)
    init = np.concatenate([np.zeros((1,) + x.shape[1:], c.dtype), np.cumsum(x, 0)], 0)
    return (c, init, np.cumprod(x, 1), np.maximum.accumulate(x, -1), np.minimum.accumulate(x, 0), (c * 2).sum(-1))


@pytest.mark.parametrize("dtype", ["float32", "int8", pytest.param("uint8", marks=pytest.mark.slow),
                                   pytest.param("bool", marks=pytest.mark.slow)])
def test_scans_match_numpy(dtype):
    rng = np.random.default_rng(0)
    x = rng.integers(0 if dtype in ("uint8", "bool") else -3, 4, (3, 4, 2)).astype(dtype)
    if dtype == "float32":
        x[1, 2, 0] = np.nan
    got = fg.compile(scans)(x)
    for k, (g, w) in enumerate(zip(got, _ref(x))):
        if k == 0:   # the standard's accumulation dtype: int64 for signed ints and bool, uint64 for unsigned
            assert g.dtype == w.dtype == {"int8": np.int64, "bool": np.int64, "uint8": np.uint64}.get(dtype, g.dtype)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-5, err_msg=f"output {k}")


@fg.op
def scan_misc(x):
    return (fg.cumulative_sum(x, dtype="float64", include_initial=True), fg.logcumsumexp(x, axis=0),
            fg.cumulative_prod(x, axis=0, dtype="int32"))


@pytest.mark.parametrize("n", [6, 0])
def test_1d_dtype_and_logcumsumexp(n):
    x = np.linspace(-30, 40, n).astype(np.float32)
    a, b, c = fg.compile(scan_misc)(x)
    np.testing.assert_allclose(a, np.concatenate([[0.0], np.cumsum(x, dtype=np.float64)]))
    assert a.dtype == np.float64 and c.dtype == np.int32
    np.testing.assert_allclose(b, np.logaddexp.accumulate(x.astype(np.float64)), rtol=1e-5)
    np.testing.assert_array_equal(c, np.cumprod(x.astype(np.int32), dtype=np.int32))


def test_errors():
    with pytest.raises(fg.TraceError, match="axis is required"):
        fg.compile(fg.op(lambda x: fg.cumulative_sum(x), name="noaxis"))(np.zeros((2, 2)))
    with pytest.raises(fg.ShapeError, match="out of range"):
        fg.compile(fg.op(lambda x: fg.cummax(x, axis=3), name="badaxis"))(np.zeros((2, 2)))


@fg.op
def scan_extremes(x):
    return fg.cummax(x, axis=1), fg.cummin(x, axis=1), fg.logcumsumexp(x, axis=1)


@pytest.mark.parametrize("backend", ["numba", pytest.param("aot", marks=pytest.mark.skipif(
    shutil.which("g++") is None, reason="needs g++ (apt install g++)"))])
@pytest.mark.parametrize("shape", [(3, 0), (0, 4), (2, 5)])
def test_running_extremes_on_empty_axes(shape, backend):
    # a scan over an empty axis is empty, as np.maximum.accumulate's is (the emitted C++'s
    # empty-reduction check included); a plain max is refused
    x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape) % 3
    a, b, c = fg.compile(scan_extremes, backend=backend)(x)
    np.testing.assert_array_equal(a, np.maximum.accumulate(x, axis=1))
    np.testing.assert_array_equal(b, np.minimum.accumulate(x, axis=1))
    np.testing.assert_allclose(c, np.logaddexp.accumulate(x, axis=1))
    with pytest.raises(fg.ShapeError, match="no identity"):
        fg.compile(fg.op(lambda x: fg.max(x, axis=1), name="emptymax"))(np.zeros((0, 0)))
