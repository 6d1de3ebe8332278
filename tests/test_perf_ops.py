"""The ops issue #19 added to the bench: ``examples.PERF_OPS`` (sigmoid,
adam_step) and the user-written spellings of ``bench.variants``, against NumPy on float64 copies
(the bench's own check), on the Numba and AOT backends; adam_step in place; and the ``x ** 2`` /
``x ** 3`` rewrite. (Their vectorization: tests/test_vectorize.py.)"""
from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

import fusegen as fg
import fusegen.examples as ex
from fusegen.bench import cases, variants

BACKENDS = ["numba", pytest.param("aot", marks=pytest.mark.skipif(shutil.which("g++") is None,
                                                                    reason="needs g++ (apt install g++)"))]
ROWS = [*variants.PERF_ROWS.values(), *variants.VARIANTS.values()]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spec", ROWS, ids=lambda s: s.name)
def test_rows_match_numpy(spec, backend):
    arrays = spec.make_inputs((3, 67), "float32", seed=1)   # 67: vector body and a remainder
    attrs = spec.variants[0]
    k = fg.compile(spec.op, backend=backend, **({"dtypes": "float32"} if backend == "aot" else {}))
    ref = cases.reference(spec, arrays, attrs)
    err, ok = cases.check(k(*arrays, **attrs), ref, cases.tolerance(np.dtype(np.float32), spec.reduced((3, 67), attrs)))
    assert ok, (spec.name, err)


@pytest.mark.parametrize("backend", BACKENDS)
def test_adam_step_writes_in_place(backend):
    spec = variants.PERF_ROWS["adam_step"]
    p, g, m, v = spec.make_inputs((8, 33), "float32")
    attrs = dict(spec.variants[0], step=3)
    k = fg.compile(ex.adam_step, backend=backend, **({"dtypes": "float32"} if backend == "aot" else {}))
    want = k(p, g, m, v, **attrs)
    p2, m2, v2 = p.copy(), m.copy(), v.copy()
    got = k(p2, g, m2, v2, inplace=True, **attrs)
    assert got[0] is p2 and got[1] is m2 and got[2] is v2
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    # each loop has a copy that reads the input through the output it is written over (so the
    # vectorizer sees the same element, not an overlap: fusegen.lower.cpu_inplace)
    if backend == "numba":
        assert k.source.count("if v_out0.ctypes.data == v_x0.ctypes.data:") == 1
        assert "if v_out1.ctypes.data == v_x2.ctypes.data:" in k.source
        assert re.search(r"s0_\d+ = \(v_out0\[i\] - s0_\d+\)", k.source)
    else:
        assert re.search(r"w(\d+)\[i\] = s0_w0\(w\1\[i\], v1\[i\], v2\[i\], v3\[i\], a\);", k.source)


def test_small_integer_powers_are_products():
    @fg.op
    def powers(x):
        return x ** 2, x ** 3, x ** 2.5, x ** 3.0

    x = np.linspace(-3, 3, 13).astype(np.float32)
    k = fg.compile(powers)
    got = k(x)
    src = k.source
    assert re.search(r"\(\(v_x0\[i\] \* v_x0\[i\]\) \* v_x0\[i\]\)", src) and "** np.float32(2.5)" in src
    assert "** np.float32(3" not in src and "** np.float32(2.0)" not in src
    np.testing.assert_array_equal(got[0], np.square(x))          # NumPy's own x ** 2
    np.testing.assert_array_equal(got[1], x * x * x)
    np.testing.assert_array_equal(got[3], x * x * x)
    with np.errstate(invalid="ignore"):  # negative ** 2.5 is NaN, as in NumPy
        np.testing.assert_allclose(got[2], x.astype(np.float64) ** 2.5, rtol=1e-6)
    cpp = fg.emit(powers, abi="mindspore-aot", device="cpu", dtypes="float32").source
    stage = cpp[cpp.index("FG_INLINE float s0_w0"):cpp.index("void stage0(")]
    assert stage.count("fg::fg_pow(") == 1 and "fg::fg_pow(v0, (float)(2.5))" in stage   # only x ** 2.5
