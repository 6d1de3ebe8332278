"""The array API's data types in fusegen's namespace: dtype objects (and NumPy's view of them),
``astype``, ``finfo``/``iinfo``, ``result_type``, ``can_cast``, ``isdtype``, the constants, ``asarray``
inside an op, and a traced value's ``x.dtype`` converting (never answering a question it cannot)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import fusegen as fg

from _optional import needs_gxx

NAMES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64",
         "complex64", "complex128"]


@pytest.mark.parametrize("name", NAMES)
def test_dtype_objects_are_numpy_dtypes_to_numpy(name):
    d = getattr(fg, name)
    assert isinstance(d, fg.DType) and d.name == name and d == fg.as_dtype(name)
    assert np.dtype(d) == np.dtype(name) and np.zeros(2, d).dtype == np.dtype(name)
    assert np.zeros(2, name).dtype == d and d == np.zeros(2, name).dtype


def test_constants_and_no_builtin_shadowing():
    assert (fg.e, fg.pi, fg.inf, fg.newaxis) == (math.e, math.pi, math.inf, None) and math.isnan(fg.nan)
    assert "bool" not in fg.__all__   # from fusegen import * keeps Python's bool
    ns: dict = {}
    exec("from fusegen import *", ns)
    assert "bool" not in ns and ns["float32"] is fg.float32


@pytest.mark.parametrize("name", ["float16", "float32", "float64", "complex64", "complex128"])
def test_finfo_matches_numpy(name):
    got, want = fg.finfo(getattr(fg, name)), np.finfo(name)
    assert (got.bits, got.eps, got.max, got.min, got.smallest_normal) == \
        (want.bits, float(want.eps), float(want.max), float(want.min), float(want.smallest_normal))
    assert got.dtype == fg.as_dtype(want.dtype)   # a complex dtype's: its real component's
    assert fg.finfo(np.ones(2, name)).bits == want.bits


@pytest.mark.parametrize("name", ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"])
def test_iinfo_matches_numpy(name):
    got, want = fg.iinfo(name), np.iinfo(name)
    assert (got.bits, got.max, got.min, got.dtype) == (want.bits, int(want.max), int(want.min), fg.as_dtype(name))


def test_info_of_the_wrong_kind_is_a_dtype_error():
    with pytest.raises(fg.DTypeError, match="iinfo"):
        fg.finfo(fg.int8)
    with pytest.raises(fg.DTypeError, match="finfo"):
        fg.iinfo(fg.float32)


def test_promotion_functions_follow_numpy():
    names = [n for n in NAMES]
    for a in names:
        for b in names:
            assert fg.result_type(a, getattr(fg, b)) == fg.as_dtype(np.result_type(a, b)), (a, b)
            assert fg.can_cast(a, b) == np.can_cast(a, b), (a, b)
    # Python scalars are weak: they never widen a dtype
    assert fg.result_type(fg.float32, 1.0, 2) == fg.float32
    assert fg.result_type(fg.int8, True) == fg.int8
    assert fg.result_type(np.ones(2, np.int16), fg.float32) == fg.float32
    with pytest.raises(fg.DTypeError):
        fg.result_type(1.0, 2)


def test_isdtype_kinds():
    assert fg.isdtype(fg.int8, "signed integer") and not fg.isdtype(fg.uint8, "signed integer")
    assert fg.isdtype(fg.uint8, "integral") and fg.isdtype(fg.float32, ("integral", "real floating"))
    assert fg.isdtype(fg.complex64, "numeric") and not fg.isdtype(fg.bool, "numeric")
    assert fg.isdtype(fg.bool, "bool") and fg.isdtype(fg.float64, fg.float64) and not fg.isdtype(fg.float64, "float32")


@fg.op
def conversions(x, like, *, scale: float = 0.05):
    q = fg.astype(fg.clip(fg.round(x / scale), -128, 127), fg.int8)        # an int8 quantizer
    back = (x * 2).astype(like.dtype)                                       # to another input's dtype
    made = fg.zeros_like(x, dtype=like.dtype) + fg.arange(x.shape[-1], dtype=like.dtype)
    total = fg.sum(x, axis=-1, dtype=like.dtype)
    pi = fg.full((2,), fg.pi, dtype=x.dtype)
    norm = x / fg.sqrt(fg.asarray(x.shape[-1], dtype=x.dtype))
    return q, back, made, total, pi, x[:, fg.newaxis], norm


def _want(x, like):
    d = like.dtype
    return (np.clip(np.round(x / np.float32(0.05)), -128, 127).astype(np.int8), (x * 2).astype(d),
            np.zeros_like(x, dtype=d) + np.arange(x.shape[-1], dtype=d), x.sum(-1, dtype=d),
            np.full(2, np.pi, dtype=x.dtype), x[:, None], x / np.sqrt(np.asarray(x.shape[-1], dtype=x.dtype)))


@pytest.mark.parametrize("backend, likes", [
    ("numba", ["int16"]),
    pytest.param("numba", ["float64"], marks=pytest.mark.extended),
    pytest.param("aot", ["int16", "float64"], marks=[needs_gxx, pytest.mark.extended]),
])
def test_conversions_in_an_op(backend, likes):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, 4)) * 5).astype(np.float32)
    k = fg.compile(conversions, backend=backend)
    for like in (np.ones(2, d) for d in likes):
        for got, want in zip(k(x, like), _want(x, like)):
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_traced_dtype_converts_but_answers_nothing():
    with pytest.raises(fg.TraceError, match=r"fg.finfo of a traced value's dtype.*test_datatypes.py"):
        @fg.op
        def masked(x):
            return fg.full((2,), fg.finfo(x.dtype).min)
    with pytest.raises(fg.TraceError, match="== of a traced value's dtype"):
        @fg.op
        def branch(x):
            return x if x.dtype == fg.float32 else x * 2
    with pytest.raises(fg.TraceError, match="asarray takes a traced value or a Python scalar"):
        @fg.op
        def baked(x):
            return x + fg.asarray(np.ones(3))
