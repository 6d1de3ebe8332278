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
