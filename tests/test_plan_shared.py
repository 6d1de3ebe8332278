"""Shared subexpressions (fusegen.plan.shared): an expensive value a reduction stage computes and
a later stage needs again is stored once, in the later stage's output, and read back.

The plan text shows the mechanism for every spelling of softmax; the numbers are checked against
NumPy through Numba and the emitted C++ (one small kernel per backend in the default run; the
dtype, axis and spelling matrix is `extended`)."""
from __future__ import annotations

import numpy as np
import pytest

import fusegen as fg
from fusegen import examples
from fusegen.bench.variants import user_softmax
from fusegen.plan import build_plan


@fg.op
def softmax_fn(x, *, axis: int = -1):
    return fg.softmax(x, axis=axis)


@fg.op
def log_softmax_fn(x, *, axis: int = -1):
    return fg.log_softmax(x, axis=axis)


@fg.op
def softmax_via_logsumexp(x):
    return fg.exp(x - fg.logsumexp(x, axis=-1, keepdims=True))


@fg.op
def softmax_and_input(x):
    """The output's expression reads the input besides the shared exp: stored nowhere."""
    m = fg.max(x, axis=-1, keep_dims=True)
    e = fg.exp(x - m)
    return e / fg.sum(e, axis=-1, keep_dims=True) + x


@fg.op
def two_softmaxes(x):
    """Two outputs of one loop: the exp goes into the first that is arithmetic on it alone."""
    m = fg.max(x, axis=0, keep_dims=True)
    e = fg.exp(x - m)
    s = fg.sum(e, axis=0, keep_dims=True)
    return e > 0.5, e / s


@fg.op(inplace={0: "x"})
def softmax_in_place(x):
    return fg.softmax(x, axis=-1)


def _np_softmax(x, axis):
    m = x.max(axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("op", [examples.softmax, softmax_fn, user_softmax], ids=lambda o: o.name)
def test_softmax_stores_its_exp_once(op):
    text = str(build_plan(op))
    assert "workspaces: ws0 = %1 (max), ws1 = %4 (sum); stored once: %3 (exp) in out0" in text, text
    stages = text.split("\n  stage ")
    assert "sum %4, keeps %3 in out0" in stages[2] and "store out0   %3    through identity" in stages[2], text
    # the output stage reads the stored exp and the sum, no longer the input or the max
    assert "read  out0   %3    through broadcast" in stages[3], text
    assert "x0" not in stages[3] and "ws0" not in stages[3], text


def test_what_is_not_shared():
    # log_softmax computes its one exp in the sum stage only; nothing to share
    assert "stored once" not in str(build_plan(log_softmax_fn))
    # exp(x - logsumexp(x)): the output's exp has another argument than the sum's
    assert "stored once" not in str(build_plan(softmax_via_logsumexp))
    # the output also reads x (it could be x's own memory, in place): recomputed
    assert "stored once" not in str(build_plan(softmax_and_input))
    # add-to: the output reads its previous value, the array the exp would overwrite
    assert "stored once" not in str(build_plan(examples.softmax.with_requests(accumulate=[0])))
    # CUDA plans keep recomputing
    assert "stored once" not in str(build_plan(examples.softmax, share=False))
    # a comparison cannot hold the exp: it goes into the second output
    assert "stored once: %3 (exp) in out1" in str(build_plan(two_softmaxes))


@pytest.fixture(scope="module")
def numba_softmax():
    return fg.compile(softmax_fn)


def test_shared_exp_numbers(numba_softmax):
    """Rows along either axis (row and col mode), against NumPy; size-1 and empty dims, the
    other dtypes, spellings and the AOT backend are the extended test's."""
    rng = np.random.default_rng(3)
    for shape, axis in (((33, 70), -1), ((33, 70), 0)):
        x = (rng.standard_normal(shape) * 6).astype(np.float32)
        np.testing.assert_allclose(numba_softmax(x, axis=axis), _np_softmax(x.astype(np.float64), axis),
                                   rtol=2e-6, atol=1e-9)


@pytest.mark.extended   # (the default run's in-place softmax: test_requests)
def test_shared_exp_in_place():
    """In place, the exp overwrites x, which no later pass reads."""
    x = np.random.default_rng(4).standard_normal((5, 40)).astype(np.float32)
    want = _np_softmax(x.astype(np.float64), -1)
    got = fg.compile(softmax_in_place)(x, inplace=True)
    assert np.shares_memory(got, x)
    np.testing.assert_allclose(x, want, rtol=2e-6, atol=1e-9)


@pytest.mark.extended
@pytest.mark.parametrize("backend", ["numba", "aot"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_shared_exp_every_spelling(backend, dtype):
    rng = np.random.default_rng(5)
    tol = dict(rtol=3e-3, atol=1e-4) if dtype == "float16" else \
        dict(rtol=2e-6 if dtype == "float32" else 1e-12, atol=1e-9)
    for shape in ((17, 40), (1, 1), (6, 1), (1, 6), (0, 4)):
        x = (rng.standard_normal(shape) * 4).astype(dtype)
        xd = x.astype(np.float64)
        for axis in (-1, 0, 1, -2):
            if x.shape[axis] == 0:
                continue
            want = _np_softmax(xd, axis)
            for op in (examples.softmax, softmax_fn):
                got = fg.compile(op, backend=backend)(x, axis=axis)
                np.testing.assert_allclose(got.astype(np.float64), want, **tol)
            with np.errstate(divide="ignore"):
                got = fg.compile(log_softmax_fn, backend=backend)(x, axis=axis)
                # (x - max - log(sum): float32's absolute rounding near 0)
                np.testing.assert_allclose(got.astype(np.float64), np.log(want), **dict(tol, atol=max(tol["atol"], 2e-6)))
        if x.shape[-1]:
            for op in (user_softmax, softmax_via_logsumexp):
                got = fg.compile(op, backend=backend)(x)
                np.testing.assert_allclose(got.astype(np.float64), _np_softmax(xd, -1), **tol)
        if x.shape[0]:
            both = fg.compile(two_softmaxes, backend=backend)(x)
            np.testing.assert_allclose(both[1].astype(np.float64), _np_softmax(xd, 0), **tol)
