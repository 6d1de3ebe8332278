"""The array API's elementwise functions and reductions (#18) on the CPU backends.

(a) IR: names, dtype rules (NumPy's type resolution), clear errors, the text form;
(b) generated sources: which helper each backend calls;
(c) numbers against NumPy on edge values (signed zeros, infinities, NaN, subnormals, INT_MIN,
    -1 and 0 divisors, shift counts at and past the bit width) through Numba, the AOT C++ kernel
    and the XLA FFI handler, each case one many-output op compiled once per dtype
    (tests/elementwise_cases.py; the CUDA twin is tests/cuda/test_elementwise_cuda.py);
    integer division by zero and INT_MIN // -1 run in a child process (a SIGFPE would kill it,
    not the test run); hypothesis on top of the same kernels.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fusegen as fg
from fusegen.ir import Op, infer

sys.path.insert(0, str(Path(__file__).parent))
import elementwise_cases as cases  # noqa: E402
from _optional import backends_extended  # noqa: E402

F32, F64 = np.float32, np.float64


def kernel(case: str, backend: str, dtype):
    """One compiled kernel per (case, backend), shared by the tests of this module."""
    key = (case, backend)
    if key not in _KERNELS:
        op = cases.CASES[case][0]
        opts = {}
        if backend == "aot":  # every dtype the module's tests call it with, in one library
            opts["dtypes"] = (["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
                              if case == "integer" else ["float32", "float64"] + (["float16"] if case != "binary_f"
                                                                                     else []))
        _KERNELS[key] = fg.compile(op, backend=backend, **opts)
    return _KERNELS[key]


_KERNELS: dict = {}


# --- (a) the IR -------------------------------------------------------------------------------
def test_names_and_aliases_are_public():
    names = ("abs acos acosh add asin asinh atan atan2 atanh bitwise_and bitwise_left_shift bitwise_invert "
             "bitwise_or bitwise_right_shift bitwise_xor ceil clip conj copysign cos cosh divide equal exp expm1 "
             "floor floor_divide greater greater_equal hypot imag isfinite isinf isnan less less_equal log log1p "
             "log2 log10 logaddexp logical_and logical_not logical_or logical_xor maximum minimum multiply "
             "negative nextafter not_equal positive pow real reciprocal remainder round sign signbit sin sinh "
             "square sqrt subtract tan tanh trunc").split()
    missing = [n for n in names + ["var", "std", "all", "any", "logsumexp", "softmax", "log_softmax", "nan_to_num",
                                   "lerp", "neg", "power", "relu", "rsqrt", "sigmoid", "erf"] if not hasattr(fg, n)]
    assert not missing
    assert fg.arcsin is fg.asin and fg.invert is fg.bitwise_invert and fg.left_shift is fg.bitwise_left_shift


def _info(op, dtypes, node=-1):
    spec = infer(op, dtypes, [(3,)] * len(dtypes), op.bind_attrs({}))
    out = spec.out_dtypes
    return out if node == -1 else out[node]


def test_dtype_rules_are_numpys():
    assert [str(d) for d in _info(cases.unary_b, ["float32"])[:4]] == ["bool"] * 4
    assert [str(d) for d in _info(cases.integer, ["int8", "int8"])] == (["int8"] * 11 + ["bool"] * 3 + ["int8", "bool"])
    assert str(_info(cases.unary_a, ["int8"])[0]) == "float16"      # expm1(int8): NumPy's float16
    assert str(_info(cases.unary_a, ["int32"])[14]) == "int32"      # round keeps integers
    assert [str(d) for d in _info(cases.integer, ["uint8", "int16"])[:3]] == ["int16"] * 3

    @fg.op
    def weak(x):
        return x // 2, x % 2.5, x << 1, fg.atan2(x, 1)
    assert [str(d) for d in _info(weak, ["int8"])] == ["int8", "float64", "int8", "float16"]


def test_bad_dtypes_are_clear_errors():
    @fg.op
    def shift(x, y):
        return x << y

    with pytest.raises(fg.DTypeError, match=r"op shift: node %2 = bitwise_left_shift %0, %1 at .*left_shift is not "
                                            r"defined for float32"):
        infer(shift, ["float32", "float32"], [(2,), (2,)], {})

    @fg.op
    def after(x):
        return fg.nextafter(x, 0.0)
    with pytest.raises(fg.DTypeError, match="nextafter is not supported for float16"):
        infer(after, ["float16"], [(2,)], {})
    with pytest.raises(fg.TraceError, match="round.*ndigits"):
        @fg.op
        def rnd(x):
            return round(x, 2)
    with pytest.raises(fg.DTypeError, match="complex64"):
        fg.compile(after)(np.ones(2, np.complex64))


def test_operators_and_text_form():
    @fg.op
    def ops(x, y):
        q, r = divmod(x, y)
        return q, r, x & y, x | y, x ^ y, ~x, x << y, x >> y, round(x), -x, +x
    text = str(ops)
    for name in ("floor_divide", "remainder", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_invert",
                 "bitwise_left_shift", "bitwise_right_shift", "round"):
        assert f"= {name} %" in text, name
    assert [n.op for n in ops.graph.outputs][:3] == [Op.FLOOR_DIVIDE, Op.REMAINDER, Op.BIT_AND]


# --- (b) generated sources --------------------------------------------------------------------
def test_each_backend_spells_the_special_cases_with_its_helpers():
    src = fg.emit(cases.integer, dtypes=["int8"]).source
    for helper in ("fg::fg_floor_divide(", "fg::fg_remainder(", "fg::fg_shl(", "fg::fg_shr(", "fg::fg_invert("):
        assert helper in src
    assert "FG_VM T fg_floor_divide(T a, T b)" in src   # __host__ __device__ under nvcc
    src = fg.emit(cases.binary_f, dtypes=["float64"]).source
    assert "std::nextafter(" in src and "std::atan2(" in src and "fg::fg_logaddexp(" in src
    cu = fg.emit(cases.unary_a, device="cuda", dtypes=["float32"]).source
    assert "rint(" in cu and "std::expm1" not in cu.split("namespace k_float32")[1]
    k = kernel("integer", "numba", None)
    k(np.ones(2, np.int8), np.ones(2, np.int8))
    assert "_fg_shl(" in k.source and ", 8)" in k.source and "_fg_floor_divide_int(" in k.source


# --- (c) numbers ------------------------------------------------------------------------------
#: (case, dtype): a Numba compile each (the AOT library holds a case's dtypes in one build)
FLOAT_CASES = [(case, dtype) for case in ("unary_a", "unary_b", "binary_f") for dtype in ("float32", "float64", "float16")
               if not (case == "binary_f" and dtype == "float16")]


@pytest.mark.parametrize("backend", ["numba", "aot"])
@pytest.mark.parametrize("case,dtype", FLOAT_CASES, ids=[f"{c}-{d}" for c, d in FLOAT_CASES])
def test_float_functions_match_numpy(case, dtype, backend):
    args = cases.inputs(case, np.dtype(dtype).type)
    cases.check(case, kernel(case, backend, dtype)(*args), args, backend)


_CHILD = """
import sys
sys.path.insert(0, {tests!r})
import numpy as np, fusegen as fg
import elementwise_cases as cases
k = fg.compile(cases.integer, backend={backend!r}, **({opts!r}))
for d in {dtypes!r}:
    a = cases.int_pairs(np.dtype(d))
    cases.check("integer", k(*a), a, {backend!r})
print("ok")
"""


# (the hardware divides 32 and 64 bits; a Numba compile per dtype: the default run takes the
# signed 32- and 64-bit ones, conftest's DEFAULT_CASES; the AOT library builds all four at once)
@pytest.mark.parametrize("backend,dtypes", [("numba", ["int32", "int64"]), ("numba", ["int8", "uint64"]),
                                            ("aot", ["int8", "int32", "int64", "uint64"])],
                         ids=["numba-int32-int64", "numba-int8-uint64", "aot"])
def test_integer_functions_match_numpy_without_a_trap(backend, dtypes):
    # x // 0, x % 0 and INT_MIN // -1 on every integer dtype: x86 raises SIGFPE on the hardware
    # division, so a wrong kernel would kill the process: it is a child's
    opts = {"dtypes": dtypes} if backend == "aot" else {}
    code = _CHILD.format(tests=str(Path(__file__).parent), backend=backend, opts=opts, dtypes=dtypes)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "ok" in proc.stdout, (proc.returncode, proc.stderr[-3000:])


@pytest.mark.slow  # (the handlers share the AOT kernel's stage code byte for byte; building one takes ~40 s)
def test_xla_ffi_handlers_match_numpy():
    # XLA runs CPU handlers with subnormals flushed to zero (tests/test_vmath.py): normal inputs only
    pytest.importorskip("jax", reason='needs jax: pip install -e ".[jax]"')
    import fusegen.jax as fgj
    for case in ("unary_a", "binary_f"):
        op = cases.CASES[case][0]
        args = tuple(a[~((a != 0) & (np.abs(a) < np.finfo(F32).tiny))] for a in cases.inputs(case, F32))
        n = min(len(a) for a in args)
        args = tuple(a[:n] for a in args)
        got = fgj.function(op, dtypes=["float32"])(*args)
        cases.check(case, tuple(np.asarray(g) for g in got), args, "xla")


# every shape kind through one kernel per backend: ranks 0-4, size 0, a Python scalar on each side
@fg.op
def scalar_sides(x, y):
    return 7 // x, x % 3, 2 << y, fg.atan2(1.0, x), fg.copysign(x, -1.0), fg.logaddexp(x, y)


# (a Numba compile per rank: the default run takes rank 0 and a size-0 rank 3, conftest's DEFAULT_CASES)
@pytest.mark.parametrize("backend", ["numba", pytest.param("aot", marks=pytest.mark.slow)])
@pytest.mark.parametrize("shape", [(), (0,), (5,), (2, 0, 3), (2, 1, 3, 2)],
                         ids=["rank0", "size0", "rank1", "rank3-size0", "rank4"])
def test_ranks_sizes_and_scalars(backend, shape):
    k = fg.compile(scalar_sides, backend=backend, **({"dtypes": ["int32,int32"]} if backend == "aot" else {}))
    rng = np.random.default_rng(0)
    x = rng.integers(-9, 9, shape).astype(np.int32)
    x[x == 0] = 1
    y = np.array(rng.integers(0, 40), np.int32)
    got = k(x, y)
    with np.errstate(all="ignore"):
        want = (7 // x, x % 3, np.left_shift(np.int32(2), y), np.arctan2(1.0, x), np.copysign(x, -1.0),
                np.logaddexp(x, y))
    for g, w in zip(got, want):
        g = np.asarray(g)
        assert g.shape == np.broadcast(x, y).shape or g.shape == w.shape
        assert not cases.mismatches(g, np.asarray(w)), (shape, g, w)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(cases.FLOAT_EDGES) | st.floats(allow_nan=True, allow_infinity=True, width=64),
                min_size=1, max_size=12),
       st.lists(st.sampled_from(cases.FLOAT_EDGES) | st.floats(width=64), min_size=1, max_size=12))
def test_hypothesis_float64_pairs(xs, ys):
    n = min(len(xs), len(ys))
    args = (np.array(xs[:n], F64), np.array(ys[:n], F64))
    cases.check("binary_f", kernel("binary_f", "numba", F64)(*args), args, "numba")


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-2 ** 31, 2 ** 31 - 1) | st.sampled_from([-2 ** 31, -1, 0, 1, 31, 32, 33]),
                min_size=2, max_size=24))
def test_hypothesis_int32(vals):
    # in this process, so provably trap-free: no divisor is 0 or -1 (the child test has those)
    n = len(vals) // 2
    divisors = [v if v not in (0, -1) else 2 for v in vals[n:2 * n]]
    args = (np.array(vals[:n], np.int32), np.array(divisors, np.int32))
    cases.check("integer", kernel("integer", "numba", np.int32)(*args), args, "numba")


# --- compositions and reductions --------------------------------------------------------------
@fg.op
def composed(x, lo, hi, *, correction: float = 1.0):
    return (fg.clip(x, lo, hi), fg.clip(x, max=0.5), fg.nan_to_num(x), fg.nan_to_num(x, nan=1.0, posinf=2.0),
            fg.lerp(lo, hi, 0.25), fg.lerp(lo, hi, 0.75), fg.imag(x), fg.real(x) + fg.conj(x), fg.positive(x),
            fg.sum(x, axis=1, dtype="float64"), fg.prod(x, axis=-1, dtype="float64", keepdims=True),
            fg.var(x, axis=1, correction=correction), fg.std(x, axis=0, keepdims=True),
            fg.all(x, axis=1), fg.any(x), fg.logsumexp(x, axis=1))


@fg.op
def truth(x):
    return fg.all(x, axis=1), fg.any(x, axis=1), fg.sum(x, axis=1, dtype="int32"), fg.any(x)


@fg.op
def normalized(x):
    return fg.softmax(x, axis=-1), fg.log_softmax(x, axis=0), fg.logsumexp(x, axis=-1, keepdims=True)


def _composed_reference(x, lo, hi, correction=1.0):
    with np.errstate(all="ignore"):
        big = np.finfo(x.dtype).max
        m = np.max(x, axis=1)
        mm = np.where(np.isfinite(m), m, 0)
        lse = np.log(np.sum(np.exp(x - mm[:, None]), axis=1)) + mm
        return (np.clip(x, lo, hi), np.minimum(x, 0.5), np.nan_to_num(x), np.nan_to_num(x, nan=1.0, posinf=2.0),
                (lo + 0.25 * (hi - lo)).astype(x.dtype), (hi - (hi - lo) * (1 - 0.75)).astype(x.dtype),
                np.zeros_like(x), x + x, x, np.sum(x, axis=1, dtype=np.float64),
                np.prod(x, axis=-1, dtype=np.float64, keepdims=True), np.var(x, axis=1, ddof=correction).astype(x.dtype),
                np.std(x, axis=0, keepdims=True), np.all(x, axis=1), np.array(np.any(x)), lse.astype(x.dtype)), big


@pytest.mark.parametrize("backend,dtype", [("numba", F32), pytest.param("aot", F64, marks=pytest.mark.slow)])
def test_compositions_and_reductions(backend, dtype):
    k = fg.compile(composed, backend=backend, **({"dtypes": [np.dtype(dtype).name]} if backend == "aot" else {}))
    rng = np.random.default_rng(1)
    if True:
        x = rng.normal(size=(4, 6)).astype(dtype)
        x[0, 0], x[1, 1], x[2, 2], x[3, 0] = np.nan, np.inf, -np.inf, 0.0
        x[3] = 0.0      # a row of zeros: all() is False, var 0
        lo, hi = np.full(6, -0.5, dtype), np.full(6, 0.5, dtype)
        hi[0] = -1.0    # min > max: max wins (NumPy's order)
        lo[1] = np.nan  # a NaN bound gives NaN
        got = k(x, lo, hi)
        want, _ = _composed_reference(x, lo, hi)
        for i, (g, w) in enumerate(zip(got, want)):
            assert not cases.mismatches(np.asarray(g), np.asarray(w).astype(np.asarray(g).dtype)
                                        if i in (11, 15) else np.asarray(w), ulp=64), (i, g, w)
    # size-0 reductions: all() of nothing is True, any() False, sum 0
    t = fg.compile(truth, backend=backend, **({"dtypes": ["int8"]} if backend == "aot" else {}))
    got = t(np.zeros((3, 0), np.int8))
    assert got[0].tolist() == [True] * 3 and got[1].tolist() == [False] * 3 and got[2].tolist() == [0] * 3
    assert got[2].dtype == np.int32 and got[3].tolist() is False
    got = t(np.array([[1, 2, 0], [0, 0, 0], [-1, 100, 3]], np.int8))
    assert got[0].tolist() == [False, False, True] and got[1].tolist() == [True, False, True]
    assert got[2].tolist() == [3, 0, 102]
    n = fg.compile(normalized, backend=backend)
    x = rng.normal(size=(3, 5)).astype(F32)
    x[0] = -np.inf
    x[1, 2] = np.inf
    sm, lsm, lse = n(x)
    with np.errstate(all="ignore"):
        e = np.exp(x - x.max(-1, keepdims=True))
        np.testing.assert_allclose(sm[2], (e / e.sum(-1, keepdims=True))[2], rtol=1e-6)
        z = x - x.max(0, keepdims=True)
        np.testing.assert_allclose(lsm[:, 1:], (z - np.log(np.exp(z).sum(0, keepdims=True)))[:, 1:], rtol=1e-5)
    assert lse[0, 0] == -np.inf and lse[1, 0] == np.inf
    np.testing.assert_allclose(lse[2, 0], np.log(np.exp(x[2].astype(F64)).sum()), rtol=1e-6)
    # over an empty axis: logsumexp is log(0) = -inf (SciPy, PyTorch), the softmaxes are empty
    sm, lsm, lse = n(np.zeros((2, 0), F32))
    assert sm.shape == (2, 0) and lsm.shape == (2, 0) and lse.tolist() == [[-np.inf], [-np.inf]]


# --- gradients --------------------------------------------------------------------------------
@fg.op
def smooth_sum(x, y):
    return (fg.expm1(x) + fg.log1p(x) + fg.log2(x) + fg.log10(x) + fg.tan(x) + fg.asin(x) + fg.acos(x) + fg.atan(x)
            + fg.sinh(x) + fg.cosh(x) + fg.asinh(x) + fg.atanh(x) + fg.square(x) + fg.reciprocal(x)
            + fg.atan2(x, y) + fg.hypot(x, y) + fg.logaddexp(x, y) + fg.copysign(x, y) + x % y + fg.acosh(y * y + 1.5)
            + fg.round(x) + x // y + fg.trunc(y) + fg.sign(y))


def test_gradients_match_central_differences():
    # piecewise-constant functions (round, //, trunc, sign) contribute zero, as in JAX
    gk, k = fg.compile(fg.grad(smooth_sum)), fg.compile(smooth_sum)
    rng = np.random.default_rng(0)
    x = rng.uniform(0.1, 0.6, 9)
    y = rng.uniform(0.7, 1.5, 9) * np.where(rng.random(9) < 0.5, -1, 1)
    dx, dy = gk(x, y, np.ones(9))
    h = 1e-6
    np.testing.assert_allclose(dx, (k(x + h, y) - k(x - h, y)) / (2 * h), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(dy, (k(x, y + h) - k(x, y - h)) / (2 * h), rtol=1e-6, atol=1e-7)

    @fg.op
    def stepped(x, y):
        return fg.nextafter(x, y)
    with pytest.raises(fg.TraceError, match="no derivative rule for nextafter"):
        fg.grad(stepped)


@fg.op
def int_powers(x, y):
    return x ** y, 2 ** y


@pytest.mark.parametrize("backend", backends_extended("numba", "aot"))
def test_integer_powers_with_negative_exponents_agree(backend):
    # NumPy raises and the array API leaves it unspecified; every backend gives 1 / x**-y
    # truncated (1 and -1 keep their power's sign, 0 elsewhere), as they once disagreed
    x = np.array([1, -1, 2, -2, 0, 3, -1, 5], np.int32)
    y = np.array([-1, -1, -1, -2, -1, -3, -2, 2], np.int32)
    a, b = fg.compile(int_powers, backend=backend)(x, y)
    np.testing.assert_array_equal(a, [1, -1, 0, 0, 0, 0, 1, 25])
    np.testing.assert_array_equal(b, [0, 0, 0, 0, 0, 0, 0, 4])
