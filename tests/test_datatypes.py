"""The array API's data types in fusegen's namespace: dtype objects (and NumPy's view of them),
``astype``, ``finfo``/``iinfo``, ``result_type``, ``can_cast``, ``isdtype``, the constants, ``asarray``
inside an op, and a traced value's ``x.dtype`` converting (never answering a question it cannot)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import fusegen as fg

from _optional import backends_extended, needs_gxx

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


@fg.op
def causal_fill(s):
    n = s.shape[-1]
    keep = fg.arange(n)[:, None] >= fg.arange(n)[None, :]
    return fg.where(keep, s, fg.finfo(s.dtype).min)   # the dtype's own lowest value


@fg.op
def upcast_half(x):
    if x.dtype == fg.float16:   # a branch on a dtype: Python control flow, per input dtype
        return x.astype(fg.float32) * 2
    return x * 2


@fg.op
def rank_and_dtype(x):
    b, n = x.shape              # a rank question, then a dtype one: traced per rank (which fixes dtypes)
    return x * fg.finfo(x.dtype).eps + n


def _causal_fill_ref(s):
    return np.where(np.tril(np.ones(s.shape, bool)), s, np.finfo(s.dtype).min)


@pytest.mark.parametrize("backend", ["numba", pytest.param("aot", marks=[needs_gxx, pytest.mark.extended])])
def test_questions_about_a_dtype_trace_the_op_per_input_dtype(backend):
    assert (causal_fill.specializes, upcast_half.specializes, rank_and_dtype.specializes) == ("dtype", "dtype", "rank")
    assert "traced per input dtype" in str(causal_fill) and "test_datatypes.py" in causal_fill.why
    x = np.random.default_rng(1).standard_normal((3, 3)).astype(np.float32)
    fill, half, both = (fg.compile(o, backend=backend) for o in (causal_fill, upcast_half, rank_and_dtype))
    for d in (np.float32, np.float64):
        got = fill(x.astype(d))
        assert got.dtype == d
        np.testing.assert_array_equal(got, _causal_fill_ref(x.astype(d)))
    assert half(x.astype(np.float16)).dtype == np.float32 and half(x).dtype == np.float32
    np.testing.assert_allclose(both(x), x * np.finfo(np.float32).eps + 3)


@needs_gxx
def test_emitting_an_op_traced_per_dtype_takes_one_combination():
    with pytest.raises(fg.TraceError, match=r"traced per input dtype.*dtypes='float32,int64' \(one combination\)"):
        fg.emit(causal_fill, abi="mindspore-aot")
    src = fg.emit(causal_fill, abi="mindspore-aot", dtypes="float64").source
    assert "const -1.7976931348623157e+308" in src and "(float64) -> (float64)" in src
    # a rank specialization that read a dtype serves that dtype only
    with pytest.raises(fg.TraceError, match="reads its inputs' dtypes"):
        fg.emit(rank_and_dtype, abi="mindspore-aot", ranks=[2])
    assert "(float64) -> (float64)" in fg.emit(rank_and_dtype, abi="mindspore-aot", ranks=[2], dtypes="float64").source


def test_an_array_is_not_baked_into_a_kernel():
    with pytest.raises(fg.TraceError, match="asarray takes a traced value or a Python scalar"):
        @fg.op
        def baked(x):
            return x + fg.asarray(np.ones(3))


# --- Python integers outside a dtype's range (NumPy 2, NEP 50) -------------------------------------
@fg.op
def int_scalars(x, *, s: int = 3):
    return x + 300, x * s


@fg.op
def int_comparisons(x):
    return x < 300, x == 300, x > -200, x != 1000, x >= -1


@fg.op
def past_int64(x):
    return x * 2**64, x * 10**30, x - 2**70


@pytest.mark.parametrize("backend", backends_extended("numba", "aot"))
def test_python_integers_outside_the_dtype_range(backend):
    u8 = np.array([1, 200, 255], np.uint8)
    k = fg.compile(int_scalars, backend=backend)
    # arithmetic: NumPy 2's OverflowError (it wrapped: 300 became 44), an attribute or a dim alike
    with pytest.raises(OverflowError, match="op int_scalars: .*Python integer 300 out of bounds for uint8"):
        k(u8)
    with pytest.raises(fg.ScalarRangeError, match="Python integer -1 out of bounds for uint16"):
        k(np.array([1], np.uint16), s=-1)   # (x + 300 fits uint16; x * -1 does not)
    # comparisons stay exact, as NumPy's
    got = fg.compile(int_comparisons, backend=backend)(u8)
    want = (u8 < 300, u8 == 300, u8 > -200, u8 != 1000, u8 >= -1)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    # past int64 with a float tensor: the value, not a wrapped int64 literal
    f = np.ones(3, np.float32)
    got = fg.compile(past_int64, backend=backend)(f)
    for g, w in zip(got, (f * np.float32(2**64), f * np.float32(10**30), f - np.float32(2**70))):
        np.testing.assert_allclose(g, w, rtol=1e-6)
