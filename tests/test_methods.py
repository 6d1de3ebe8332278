"""NumPy's array methods on traced values (fusegen/graph/methods.py): each against the same
method of a NumPy array, dtype and shape included, in one op (one compile)."""
from __future__ import annotations

import numpy as np
import pytest

import fusegen as fg


def _calls(x, i):
    return (x.var(-1), x.std(axis=0, ddof=1, keepdims=True), x.argmax(axis=-1), x.argmin(), x.cumsum(), x.cumsum(1),
            x.cumprod(0), x.clip(-0.5, 0.5), x.round(2), x.round(-1), x.round(), x.any(axis=0), x.all(),
            x.take(i, axis=1), x.take(i), x.conj(), x.real, x.imag, x.argmax(0, keepdims=True))


@fg.op
def methods(x, i):
    return _calls(x, i)


def test_numpy_methods_match_numpy():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4)) * 30
    x[1, 2] = 0.125   # a tie for round(2)'s halves-to-even
    i = np.array([0, 3, -1])
    for k, (got, want) in enumerate(zip(fg.compile(methods)(x, i), _calls(x, i))):
        want = np.asarray(want)
        assert got.shape == want.shape and got.dtype == want.dtype, k
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0, err_msg=f"call {k}")   # (var: summation order)


def test_out_and_where_are_refused_by_name():
    with pytest.raises(fg.TraceError, match=r"x.var\(out=...\)"):
        fg.op(lambda x: x.var(out=x))
    with pytest.raises(fg.TraceError, match=r"x.any\(where=...\)"):
        fg.op(lambda x: x.any(where=x > 0))


def test_round_with_decimals_keeps_an_integer_dtype():
    """NumPy's x.round(d) of an integer array stays integer: unchanged for d > 0, rounded to tens
    (halves to even, computed in float64 and cast back) for d < 0; it gave float64."""
    @fg.op
    def rounded(x):
        return x.round(-1), x.round(2), x.round(-2)
    for dtype in (np.int8, np.uint8, np.int32, np.int64):
        x = np.array([15, 25, 5, 14, 16, 123, 0, 49, 50, 127], dtype)
        if np.dtype(dtype).kind == "i":
            x = np.concatenate([x, -x])
        for got, want in zip(fg.compile(rounded)(x), (x.round(-1), x.round(2), x.round(-2))):
            assert got.dtype == want.dtype, dtype
            np.testing.assert_array_equal(got, want)
    with pytest.raises(fg.DTypeError, match=r"x.round\(decimals=1\) of a bool"):
        fg.compile(fg.op(lambda x: x.round(1), name="bool_round"))(np.ones(3, bool))
