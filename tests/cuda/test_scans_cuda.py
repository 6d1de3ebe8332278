"""Scans (issue #17) on numba-cuda (simulator or GPU) against NumPy: one thread per scan line,
sequential along the scanned axis, storing every running value; fused before and after, every
kind, include_initial, NaN, an int dtype and a size-0 axis."""
from __future__ import annotations

import numpy as np
import pytest

import fusegen as fg


@fg.op
def scans(x, y):
    c = fg.cumulative_sum(x * 2, axis=1)
    return (c + y, fg.cummax(x, axis=0), fg.logcumsumexp(x, axis=1), fg.sum(c, axis=1),
            fg.cumulative_prod(x, axis=-1, include_initial=True), fg.cummin(x, axis=1))


_K = []


def kernel():
    if not _K:
        _K.append(fg.compile(scans, backend="numba", device="cuda"))
    return _K[0]


def _ref(x, y):
    c = np.cumsum(x * 2, 1)
    one = np.ones(x.shape[:-1] + (1,), np.cumprod(x, -1).dtype)
    with np.errstate(invalid="ignore"):
        return (c + y, np.maximum.accumulate(x, 0), np.logaddexp.accumulate(x.astype(np.float64), 1).astype(
            np.result_type(x.dtype, np.float16) if x.dtype.kind == "f" else np.float64), c.sum(1),
            np.concatenate([one, np.cumprod(x, -1)], -1), np.minimum.accumulate(x, 1))


@pytest.mark.parametrize("dtype,shape", [("float64", (3, 4, 2)), ("int8", (2, 5, 3)), ("float32", (2, 0, 3))])
def test_scans_match_numpy(dtype, shape):
    rng = np.random.default_rng(0)
    x = rng.integers(-3, 4, shape).astype(dtype)
    y = np.ones(shape, dtype)
    if dtype == "float64":
        x[1, 2, 0] = np.nan
    got = kernel()(x, y)
    for k, (g, w) in enumerate(zip(got, _ref(x, y))):
        assert g.shape == w.shape, f"output {k}"
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64),
                                   rtol=2e-3 if g.dtype == np.float16 else 1e-6, err_msg=f"output {k}")


def test_one_thread_per_line_in_the_source():
    kernel()(np.ones((2, 3, 2)), np.ones((2, 3, 2)))
    src = kernel().source
    assert "one thread per output point" in src and "scan" in str(kernel().op)
    assert "_fg_logaddexp(acc" in src and "iota" not in src
