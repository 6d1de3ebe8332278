"""One op computing a whole table of cases, so a test compiles once: each case is ``(name, fn,
args)`` with ``fn(namespace, *args)`` written against a NumPy-like namespace (``fg`` inside the
op, ``np`` or a stand-in for the reference)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import fusegen as fg


def batched_op(table, name: str):
    """The op: inputs a0, a1, ... case by case, one output per case."""
    names, calls, j, ns = [], [], 0, {"fg": fg}
    for k, (_, fn, args) in enumerate(table):
        ns[f"f{k}"] = fn
        mine = [f"a{j + i}" for i in range(len(args))]
        names += mine
        j += len(args)
        calls.append(f"f{k}(fg, {', '.join(mine)})")
    exec(f"def {name}({', '.join(names)}):\n    return ({', '.join(calls)},)\n", ns)
    return fg.op(ns[name])


def inputs(table) -> list:
    return [a for _, _, args in table for a in args]


#: (backend, quick): the table's quick share on Numba in the default run; the whole table on Numba
#: and the emitted C++ in ``-m extended``.
RUNS = [("numba", True), pytest.param("numba", False, marks=pytest.mark.extended),
        pytest.param("aot", False, marks=pytest.mark.extended)]


def check_table(cases, quick_names, backend: str, quick: bool, name: str, reference, rtol: float, atol: float):
    """Compiles the table (its ``quick_names`` share when ``quick``) as one op and compares each
    output with ``fn(reference, *args)``: shape, dtype and values (NaN equal to NaN)."""
    table = [c for c in cases if c[0] in quick_names or not quick]
    got = fg.compile(batched_op(table, name), backend=backend)(*inputs(table))
    for (case, fn, args), g in zip(table, got):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # (NumPy warns of all-NaN slices and overflow)
            want = fn(reference, *args)
        assert np.shape(g) == np.shape(want) and np.asarray(g).dtype == np.asarray(want).dtype, case
        np.testing.assert_allclose(g, want, rtol=rtol, atol=atol, equal_nan=True, err_msg=case)
