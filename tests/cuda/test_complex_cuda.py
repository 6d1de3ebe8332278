"""complex64/complex128 (#18) on numba-cuda, against NumPy and the array API standard's special-case
tables: the CPU tests' cases (tests/complex_cases.py), one many-output kernel per case and dtype, on
every pair of edge parts (signed zeros, infinities, NaN). Under the simulator the kernels' cmath is
NumPy's and fusegen's Annex G patches (lower/pyhelpers.py) run as Python; on a GPU, numba-cuda's
cmath with the same patches."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import fusegen as fg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import complex_cases as cases  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore:.*Grid size.*",
                                        "ignore::numba.core.errors.NumbaPerformanceWarning")


@pytest.mark.parametrize("case", ["unary_a", "unary_b", "binary"])
def test_complex_functions_match_numpy(case):
    k = fg.compile(cases.CASES[case][0], backend="numba", device="cuda")
    for dtype in (np.complex64, np.complex128):
        args = cases.inputs(case, dtype)
        got = k(*args)
        cases.check(case, got, args, "numba-cuda")
        if case != "binary":
            names = cases.UNARY_NAMES[:16] if case == "unary_a" else cases.UNARY_NAMES[16:]
            cases.check_standard(dict(zip(names, got)), f"numba-cuda {dtype.__name__}")


def test_complex_reductions_and_scalars():
    @fg.op
    def red(x):
        return fg.sum(x, axis=1), fg.prod(x, axis=0), fg.mean(x), x * 2j
    x = (np.arange(12).reshape(3, 4) + 1j * np.arange(12)[::-1].reshape(3, 4)).astype(np.complex64) / 8
    got = fg.compile(red, backend="numba", device="cuda")(x)
    for g, w in zip(got, [x.sum(axis=1), x.prod(axis=0), x.mean(), x * 2j]):
        assert np.asarray(g).dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5)
