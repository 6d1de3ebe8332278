"""``fg.linalg`` (the array API's linear-algebra extension, ``graph/linalg_ext.py``) against
NumPy's: norms of every ``ord`` it takes, diagonals at any offset, trace, outer, cross; values,
dtypes (integers give float64, complex its real dtype) and shapes."""
from __future__ import annotations

import math
import types

import numpy as np
import pytest

import fusegen as fg
from table_ops import RUNS, check_table

rng = np.random.default_rng(0)
x = rng.standard_normal((3, 4, 5)); xi = rng.integers(-3, 4, (3, 4)).astype(np.int32); c = (rng.standard_normal((2, 3)) + 1j * rng.standard_normal((2, 3))).astype(np.complex64)
v3a, v3b = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
cases = [
 ("vn2", lambda m, a: m.linalg.vector_norm(a), [x]), ("vn axis", lambda m, a: m.linalg.vector_norm(a, axis=-1, keepdims=True), [x]),
 ("vn ax tuple", lambda m, a: m.linalg.vector_norm(a, axis=(0, 2)), [x]), ("vn1", lambda m, a: m.linalg.vector_norm(a, ord=1, axis=1), [x]),
 ("vn inf", lambda m, a: m.linalg.vector_norm(a, ord=math.inf), [x]), ("vn -inf", lambda m, a: m.linalg.vector_norm(a, ord=-math.inf, axis=0), [x]),
 ("vn0", lambda m, a: m.linalg.vector_norm(a, ord=0, axis=1), [xi]), ("vn3", lambda m, a: m.linalg.vector_norm(a, ord=3, axis=-1), [x]),
 ("vn int", lambda m, a: m.linalg.vector_norm(a), [xi]), ("vn complex", lambda m, a: m.linalg.vector_norm(a, axis=1), [c]),
 ("mn fro", lambda m, a: m.linalg.matrix_norm(a), [x]), ("mn 1", lambda m, a: m.linalg.matrix_norm(a, ord=1), [x]),
 ("mn -1", lambda m, a: m.linalg.matrix_norm(a, ord=-1, keepdims=True), [x]), ("mn inf", lambda m, a: m.linalg.matrix_norm(a, ord=math.inf), [x]),
 ("mn -inf", lambda m, a: m.linalg.matrix_norm(a, ord=-math.inf), [x]),
 ("diag", lambda m, a: m.linalg.diagonal(a), [x]), ("diag +1", lambda m, a: m.linalg.diagonal(a, offset=1), [x]),
 ("diag -2", lambda m, a: m.linalg.diagonal(a, offset=-2), [x]), ("diag +9", lambda m, a: m.linalg.diagonal(a, offset=9), [x]),
 ("trace", lambda m, a: m.linalg.trace(a, offset=1), [x]), ("trace int", lambda m, a: m.linalg.trace(a), [xi]),
 ("outer", lambda m, a, b: m.linalg.outer(a, b), [x[0, 0], x[1, 1, :3]]), ("cross", lambda m, a, b: m.linalg.cross(a, b), [v3a, v3b]),
 ("cross ax0", lambda m, a, b: m.linalg.cross(a, b, axis=-2), [v3a.T, v3b.T]), ("matmul", lambda m, a, b: m.linalg.matmul(a, b), [x[0], x[1].T]),
]
npm = types.SimpleNamespace(linalg=types.SimpleNamespace(vector_norm=np.linalg.vector_norm, matrix_norm=np.linalg.matrix_norm,
     diagonal=lambda a, offset=0: np.diagonal(a, offset=offset, axis1=-2, axis2=-1),
     trace=lambda a, offset=0, dtype=None: np.trace(a, offset=offset, axis1=-2, axis2=-1, dtype=dtype),
     outer=np.outer, cross=lambda a, b, axis=-1: np.cross(a, b, axis=axis), matmul=np.matmul))


#: The default run's share (the whole table: ``-m extended``, on Numba and the emitted C++).
QUICK = {"vn ax tuple", "vn0", "vn complex", "mn 1", "diag -2", "cross ax0"}


@pytest.mark.parametrize("backend, quick", RUNS)
def test_linalg_against_numpy(backend, quick):
    check_table(cases, QUICK, backend, quick, 'linalg_table', npm, rtol=1e-5, atol=1e-6)


def test_linalg_refusals():
    with pytest.raises(fg.TraceError, match=r"linalg.matrix_norm: ord='nuc' is not available in a fused kernel"):
        fg.op(lambda a: fg.linalg.matrix_norm(a, ord="nuc"), name="nuclear")
    with pytest.raises(fg.TraceError, match=r"linalg.outer: both inputs must be 1-D"):
        fg.compile(fg.op(lambda a, b: fg.linalg.outer(a, b), name="outer2d"))(np.ones((2, 2)), np.ones(2))
    with pytest.raises(fg.ShapeError, match=r"linalg.cross: the axis must have size 3"):
        fg.compile(fg.op(lambda a, b: fg.linalg.cross(a, b), name="cross4"))(np.ones(4), np.ones(4))
