"""The array API's elementwise functions (#18) on numba-cuda, against NumPy: the CPU tests' cases
(tests/elementwise_cases.py), one many-output kernel per case and dtype, on edge values: signed
zeros, infinities, NaN, INT_MIN, 0 and -1 divisors, shift counts past the bit width."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import fusegen as fg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import elementwise_cases as cases  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore:.*Grid size.*",
                                        "ignore::numba.core.errors.NumbaPerformanceWarning")


@pytest.mark.parametrize("case,dtypes", [("unary_a", ["float32", "float64"]), ("unary_b", ["float32", "float64"]),
                                         ("binary_f", ["float32", "float64"]),
                                         ("integer", ["int8", "int32", "int64", "uint64"])])
def test_elementwise_functions_match_numpy(case, dtypes):
    k = fg.compile(cases.CASES[case][0], backend="numba", device="cuda")
    for dtype in dtypes:
        args = cases.inputs(case, np.dtype(dtype))
        cases.check(case, k(*args), args, "numba-cuda")
