"""Divisions by row values, shared by the Numba and the AOT tests: the CPU backends compute
``a / s``, with ``s`` a reduction result (or an expression of reduction results, attributes and
constants), as ``a * (1 / s)``, the reciprocal once per row (``plan.exprs.ExprWriter._quotient``).
That is two roundings instead of one, so within 2 ulp of NumPy's quotient, and the reciprocal
must give the division's infinities, NaNs and signed zeros (``x/0``, ``0/0``, ``inf/inf``)."""
from __future__ import annotations

import numpy as np

import fusegen as fg
from conftest import ulp_error, ulps_apart


@fg.op
def row_quotients(x, y):
    """``x`` over its row's sum of ``y`` (row mode: a scalar per row), over its column's (col
    mode: a value per element of the row), and over an expression of the row's sum."""
    s = fg.sum(y, axis=-1, keepdims=True)
    return x / s, x / fg.sum(y, axis=0, keepdims=True), x / (s * 3.0 + 1.0)


def row_quotient_inputs(dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``y`` whose sums are exact in any order (small integers) and, row by row, 0, inf,
    NaN, inf - inf and negative; ``x`` with 0, +-inf and NaN in its first columns."""
    rng = np.random.default_rng(7)
    y = rng.integers(1, 10, (7, 40)).astype(dtype)
    y[1] = 0.0
    y[2, 5] = np.inf
    y[3, 6] = np.nan
    y[4, 7], y[4, 8] = np.inf, -np.inf
    y[5] = -y[5]
    y[:, 9] = 0.0
    x = (rng.standard_normal((7, 40)) * 2.0 ** rng.integers(-30, 30, (7, 40))).astype(dtype)
    x[:, 0], x[:, 1], x[:, 2], x[:, 3] = 0.0, np.inf, -np.inf, np.nan
    x[6, 4] = -0.0
    return x, y


def check_row_quotients(got: tuple, x: np.ndarray, y: np.ndarray) -> int:
    """Each quotient has NumPy's NaNs, infinities and signs, and its finite values are within
    2 ulp of NumPy's (which rounds once); returns the largest distance seen, in ulp."""
    with np.errstate(all="ignore"):
        s = y.sum(axis=-1, keepdims=True)
        want = (x / s, x / y.sum(axis=0, keepdims=True), x / (s * x.dtype.type(3.0) + x.dtype.type(1.0)))
    worst = 0
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype, (k, g.dtype, w.dtype)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"output {k}: NaN pattern")
        np.testing.assert_array_equal(np.isinf(g) & (g > 0), np.isinf(w) & (w > 0), err_msg=f"output {k}: +inf")
        np.testing.assert_array_equal(np.isinf(g) & (g < 0), np.isinf(w) & (w < 0), err_msg=f"output {k}: -inf")
        num = ~np.isnan(w)
        np.testing.assert_array_equal(np.signbit(g[num]), np.signbit(w[num]), err_msg=f"output {k}: signs (of zeros too)")
        fin = np.isfinite(w)
        apart = ulps_apart(g[fin], w[fin])
        assert apart.max(initial=0) <= 2, f"output {k}: {apart.max()} ulp from NumPy's quotient"
        worst = max(worst, int(apart.max(initial=0)))
    return worst


def softmax_ulp_error(got: np.ndarray, x: np.ndarray) -> float:
    """The largest error of a float32 softmax over the last axis against float64's, in ulp. The
    reference starts from ``x - max`` in float32 (a correctly rounded subtraction, in fusegen as in
    NumPy): its rounding, up to half an ulp of 16 at these inputs, is the formula's own, which exp
    multiplies by |x - max| (8 ulp of the result); what is left is the kernel's (exp, the sum, the
    division)."""
    z = (x - x.max(axis=-1, keepdims=True)).astype(np.float64)
    e = np.exp(z)
    return float(ulp_error(got, e / e.sum(axis=-1, keepdims=True)).max())
