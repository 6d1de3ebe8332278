"""Gathers (issue #17) on numba-cuda (simulator or GPU) against NumPy: take, take_along_axis,
x[idx] fused with elementwise ops and reductions (thread and block mode), modes, and an
out-of-range index raising BoundsError through the kernel's atomic error block."""
from __future__ import annotations

import numpy as np
import pytest

import fusegen as fg


@fg.op
def gathers(x, i):
    return (x[:, i] * 2, fg.take_along_axis(x, i[:, None], axis=1), fg.sum(fg.take(x, i, axis=0) + 1, axis=-1),
            fg.take(x, i, axis=0, mode="wrap"), fg.take(x, i, axis=0, mode="clip"))


_K = []


def kernel():
    if not _K:
        _K.append(fg.compile(gathers, backend="numba", device="cuda"))
    return _K[0]


@pytest.mark.parametrize("xd,idt", [("float32", "int32"), ("int16", "uint8"), ("float64", "int64")])
def test_gathers_match_numpy(xd, idt):
    rng = np.random.default_rng(0)
    x = rng.integers(-9, 9, (5, 7)).astype(xd)
    i = rng.integers(0 if idt[0] == "u" else -5, 5, 5).astype(idt)
    got = kernel()(x, i)
    ii = i.astype(np.int64)
    want = (x[:, ii] * 2, np.take_along_axis(x, (ii % 7)[:, None], 1), (np.take(x, ii, 0) + 1).sum(-1),
            np.take(x, ii, 0, mode="wrap"), np.take(x, ii, 0, mode="clip"))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_out_of_range_raises():
    x = np.zeros((5, 7), np.float32)
    with pytest.raises(fg.BoundsError, match=r"take: index (-6|5) is out of bounds for axis 0 with size 5"):
        kernel()(x, np.array([0, 5, -6, 1, 2], np.int64))
    # one bad index, and the kernel is still fine afterwards
    got = kernel()(x, np.array([0, 1, 2, 3, 4], np.int64))
    assert got[0].shape == (5, 5)
