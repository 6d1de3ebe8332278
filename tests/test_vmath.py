"""Tests of fusegen.vmath: the vectorizable float32 exp and tanh of the CPU backends.

Layer (a): the expression tables pick them for float32 only (float64 keeps libm, CUDA its own).
Layer (b): the generated code really is vector code without libm calls (Numba's LLVM IR; the
C++ stage functions' machine code).
Layer (c): accuracy over a dense float32 sweep, on the Numba backend, the AOT C++ backend and the
XLA FFI handlers (the latter two share the C++ runtime include), and on every float16 value.

Accuracy is measured in ulps (steps between adjacent float32 values) against the correctly
rounded result, taken as NumPy's float64 function rounded to float32 (float64's own error is
2^-29 of a float32 ulp, far below what is tested). Measured over all 2^32 float32 inputs
(benchmarks/vmath_exhaustive.py), both backends: exp and tanh are correctly rounded everywhere
(0 ulp, no input off; NaN exactly where NumPy has it). NumPy's own float32 functions are not:
exp is up to 3 ulp off (e.g. exp(25.994385)) on 209,785,608 inputs, tanh up to 1 ulp on
63,317,654; so fusegen is up to 3 ulp (exp) and 1 ulp (tanh) from NumPy. The asserted bounds:
within 1 ulp of the correct result (0 on the sweep), and within 1 ulp of NumPy wherever NumPy
is within 1 ulp of the correct result.
"""
from __future__ import annotations

import re

import numba
import numpy as np
import pytest

import fusegen as fg
from fusegen import dtypes as dt
from fusegen import vmath
from fusegen.plan import exprs
from fusegen.abi_emit import emit
from fusegen.ir import Op
from fusegen.lower_cpu import JIT_OPTIONS

from _optional import backends, needs, require


@fg.op
def v_exp(x):
    return fg.exp(x)


@fg.op
def v_tanh(x):
    return fg.tanh(x)


@fg.op
def v_sigmoid(x):
    return fg.sigmoid(x)


OPS = {"exp": (v_exp, np.exp), "tanh": (v_tanh, np.tanh),
       "sigmoid": (v_sigmoid, lambda x: 1 / (1 + np.exp(-x)))}
F32 = np.float32


# --- helpers ----------------------------------------------------------------------------------
def ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Steps between float32 (or float16) values a and b (0 where both are NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    ity = np.int32 if a.dtype == np.float32 else np.int16
    sign = np.iinfo(ity).max

    def key(v):  # bit patterns -> integers in the order of the values (-0.0 == +0.0)
        i = v.view(ity).astype(np.int64)
        return np.where(i < 0, -(i & sign), i)
    d = np.abs(key(a) - key(b))
    return np.where(np.isnan(a) & np.isnan(b), 0, d)


def neighbours(values, k: int = 4) -> np.ndarray:
    """Each value and the k float32 values on either side of it."""
    v = np.asarray(values, F32)
    out = [v]
    up, down = v.copy(), v.copy()
    for _ in range(k):
        up, down = np.nextafter(up, F32(np.inf)), np.nextafter(down, F32(-np.inf))
        out += [up, down]
    return np.concatenate(out)


def sweep() -> np.ndarray:
    """Every 2^11-th float32 bit pattern (the whole range, each binade evenly), 2^20 random ones,
    the specials, and dense neighbourhoods of every threshold the implementations have."""
    rng = np.random.default_rng(20261121)
    strided = np.arange(0, 1 << 32, 1 << 11, dtype=np.uint64).astype(np.uint32).view(F32)
    random = rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(F32)
    fi = np.finfo(F32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, fi.max, -fi.max, fi.tiny, -fi.tiny,
                         fi.smallest_subnormal, -fi.smallest_subnormal, 1.0, -1.0], F32)
    payload_nan = np.array([0x7FC00001, 0xFFC12345, 0x7F800001], np.uint32).view(F32)  # quiet/signalling
    subnormals = np.arange(1, 1 << 23, 97, dtype=np.uint32).view(F32)
    thresholds = neighbours([
        88.72283935546875, 88.72284, -87.33654, -103.97208, -103.2789, -104.0, 104.0,  # exp: overflow,
        vmath.EXP_LIMIT, -vmath.EXP_LIMIT,                                           # normal/subnormal,
        9.010913, -9.010913, vmath.TANH_CLAMP, -vmath.TANH_CLAMP,                    # underflow, clamp;
        vmath.TANH_SMALL, -vmath.TANH_SMALL, 2.0 ** -12, 1e-4, -1e-4],               # tanh: saturation,
        k=64)                                                                         # branch, near 0
    near_zero = np.geomspace(1e-45, 1.0, 200_000).astype(F32)
    subnormal_results = np.linspace(-104.5, -87.0, 200_000, dtype=F32)   # exp's subnormal range
    return np.concatenate([strided, random, specials, payload_nan, subnormals, thresholds,
                           near_zero, -near_zero, subnormal_results])


SWEEP = sweep()


def reference(name: str, x: np.ndarray) -> np.ndarray:
    """The correctly rounded float32 result (float64 evaluation, one rounding)."""
    with np.errstate(all="ignore"):
        return OPS[name][1](x.astype(np.float64)).astype(x.dtype)


def check(name: str, got: np.ndarray, x: np.ndarray, exact_bound: int = 1) -> dict:
    """Asserts the accuracy contract; returns the measured maxima (ulps)."""
    want = reference(name, x)
    with np.errstate(all="ignore"):
        npy = OPS[name][1](x)
    assert got.dtype == x.dtype
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all(), f"{name}: NaN where NumPy has none, or the reverse"
    assert (np.signbit(got[~nan]) == np.signbit(want[~nan])).all(), f"{name}: sign (of a zero)"
    err = ulps(got, want)
    bad = err > exact_bound
    assert not bad.any(), f"{name}: {err.max()} ulp at x={x[bad][:5]}: {got[bad][:5]} vs {want[bad][:5]}"
    vs_np = ulps(got, npy)
    npy_err = ulps(npy, want)
    bad = (vs_np > 1) & (npy_err <= 1)
    assert not bad.any(), f"{name}: {vs_np[bad].max()} ulp from NumPy at x={x[bad][:5]}"
    return dict(correct=int(err.max()), numpy=int(vs_np.max()), numpy_own=int(npy_err.max()))


# --- (a) the tables -----------------------------------------------------------------------------
def test_float32_rows_use_vmath_and_float64_keeps_libm():
    for op in (Op.EXP, Op.TANH, Op.SIGMOID):
        assert "_f32(" in exprs.PYTHON.row(op, dt.float32)
        assert "fg::" in exprs.CPP.row(op, dt.float32)
        assert exprs.PYTHON.row(op, dt.float64) == exprs.PY_TABLE[op]
        assert exprs.CPP.row(op, dt.float64) == exprs.CPP_TABLE[op]
        # CUDA's expf/tanhf are fast already: its dialects have no float32 rows
        assert exprs.CUDA_PY.row(op, dt.float32) == exprs.CUDA_PY_TABLE[op]
        assert exprs.CUDA_CPP.row(op, dt.float32) == exprs.CUDA_CPP_TABLE[op]
    assert "std::exp(" in exprs.CPP.row(Op.EXP, dt.float64)


def test_emitted_cpp_calls_them_for_float32_only():
    src = emit(v_sigmoid, dtypes=["float32", "float64", "float16"]).source
    assert "FG_INLINE float exp_f32(float x)" in src

    def block(name):  # one dtype combination's stage functions
        start = src.index(f"namespace {name} {{")
        return src[start:src.index("}  // namespace", start)]
    f32, f64 = block("k_float32"), block("k_float64")
    assert "fg::exp_f32(" in f32 and "std::exp(" not in f32
    assert "std::exp(" in f64 and "fg::exp_f32(" not in f64
    for c in vmath.EXP_POLY:  # the coefficients come from fusegen/vmath.py, exactly
        assert repr(c) in src


def test_generated_numba_source_names_the_implementation_digest():
    k = fg.compile(v_exp)
    k(np.ones(3, F32))
    assert "_exp_f32(" in k.source
    assert f"fusegen.vmath {vmath.source_digest()}" in k.source
    k(np.ones(3, np.float64))
    assert "np.exp(" in k.source and "_exp_f32(" not in k.source


@needs("mpmath")
def test_stored_coefficients_meet_their_error_bound():
    assert vmath.exp_poly_error(vmath.EXP_POLY, n=400) < 3e-16


# --- (b) vector code ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["exp", "tanh", "sigmoid"])
def test_numba_loop_is_vectorized_without_libm_calls(name):
    k = fg.compile(OPS[name][0])
    k(np.ones(4096, F32))
    cached = k._last.groups[0].func
    # the disk-cached dispatcher keeps no IR: compile the same generated function again, uncached
    func = numba.njit(**dict(JIT_OPTIONS, cache=False))(cached.py_func)
    func.compile(cached.signatures[0])
    llvm = func.inspect_llvm(cached.signatures[0])
    assert re.search(r"<\d+ x double>", llvm), "no vector float64 arithmetic"
    assert not re.search(r"call [^\n]*@(llvm\.)?(exp|tanh)f?(\.|\()", llvm), "a libm call remains"
    # Numba would let the kernel's fastmath flags reach the helper: (t + 1.5 * 2^52) - 1.5 * 2^52
    # must not be reassociated (folded back to t)
    assert not re.search(r"reassoc[^\n]*0x4338000000000000", llvm)


@needs("g++", "objdump")
def test_cpp_stage_loops_are_vectorized_without_libm_calls(tmp_path):
    import subprocess
    from fusegen.native import build
    e = emit(v_sigmoid, dtypes=["float32"])
    e.write(tmp_path)
    lib = build.build_library(tmp_path / e.main, flags=build.default_cpp_flags())
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", str(lib)], capture_output=True,
                         text=True, check=True).stdout
    body = dis[dis.index("k_float32::stage0"):]
    body = body[:body.index("\n\n")]
    assert not re.search(r"call.*<(exp|expf|tanh|tanhf)[@>]", body)
    # the float64 polynomial on packed registers (ymm or zmm, whichever -march=native picks)
    assert re.search(r"\bv(fmadd\w*|mul)pd\s.*%[yz]mm", body)


# --- (c) accuracy -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def numba_kernels():
    return {name: fg.compile(op) for name, (op, _) in OPS.items()}


@pytest.fixture(scope="module")
def aot_kernels():
    return {name: fg.compile(op, backend="aot", dtypes=["float32", "float16"]) for name, (op, _) in OPS.items()}


@pytest.mark.parametrize("name", ["exp", "tanh"])
@pytest.mark.parametrize("backend", backends("numba", "aot"))
def test_float32_sweep_matches_numpy(request, backend, name):
    kernels = request.getfixturevalue(f"{backend}_kernels")
    got = kernels[name](SWEEP)
    measured = check(name, got, SWEEP, exact_bound=1)
    assert measured["correct"] == 0  # correctly rounded on the whole sweep


@pytest.mark.parametrize("backend", backends("numba", "aot"))
def test_sigmoid_is_its_float32_formula_with_a_correctly_rounded_exp(request, backend):
    # 1 / (1 + exp(-x)) in float32, as fusegen (and NumPy users) write it: exp's result rounded,
    # then the add and the divide. With exp correctly rounded the result is that formula's exactly
    # (not the correct sigmoid: for x < -88.7 exp(-x) overflows and the formula gives 0).
    kernels = request.getfixturevalue(f"{backend}_kernels")
    got = kernels["sigmoid"](SWEEP)
    # NumPy's own float32 formula differs from this only by its exp's errors (up to 3 ulp, carried
    # through 1 / (1 + e) in relative terms), which test_float32_sweep_matches_numpy bounds.
    with np.errstate(all="ignore"):
        want = F32(1) / (F32(1) + reference("exp", -SWEEP))
    assert (np.isnan(got) == np.isnan(want)).all()
    assert ulps(got, want).max() == 0


@pytest.mark.parametrize("name", ["exp", "tanh", "sigmoid"])
@pytest.mark.parametrize("backend", backends("numba", "aot"))
def test_every_float16_value(request, backend, name):
    # float16 is computed in float32 registers and rounded once at the store (fusegen's rule for
    # every op): the float32 function's correctly rounded result, rounded to half
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    with np.errstate(over="ignore"):  # exp(12) is inf in half
        got = request.getfixturevalue(f"{backend}_kernels")[name](x)
        x32 = x.astype(F32)
        if name == "sigmoid":
            want = (F32(1) / (F32(1) + reference("exp", -x32))).astype(np.float16)
        else:
            want = reference(name, x32).astype(np.float16)
    assert got.dtype == np.float16
    assert (np.isnan(got) == np.isnan(want)).all()
    assert ulps(got, want).max() == 0
    if name != "sigmoid":  # NumPy's float16 exp/tanh go through float32 too (its sigmoid formula
        with np.errstate(all="ignore"):  # would be float16 arithmetic)
            assert ulps(got, OPS[name][1](x)).max() <= 1


def flush(v: np.ndarray) -> np.ndarray:
    """Subnormals -> zeros of the same sign."""
    return np.where(np.abs(v) < np.finfo(v.dtype).tiny, np.copysign(v.dtype.type(0), v), v).astype(v.dtype)


def test_xla_ffi_handlers_share_the_cpp_versions():
    # XLA usually runs CPU handlers with denormals flushed to zero (FTZ/DAZ: a plain x * 0.5
    # handler flushes too, and jnp.exp does the same), but not on every thread it may use (a CI
    # run got subnormal results): each element must be the correctly rounded result under one
    # contract or the other, nothing in between
    require("jax", "g++")
    import fusegen.jax as fgj
    both = fgj.function(fg.op(lambda x: (fg.exp(x), fg.tanh(x)), name="v_exp_tanh"), dtypes=["float32"])
    for name, got in zip(("exp", "tanh"), both(SWEEP)):  # one handler library for both (a build costs seconds)
        got = np.asarray(got)
        flushed, exact = flush(reference(name, flush(SWEEP))), reference(name, SWEEP)
        nan = np.isnan(exact)
        assert (np.isnan(got) == nan).all() and (np.isnan(flushed) == nan).all()
        assert (np.signbit(got[~nan]) == np.signbit(exact[~nan])).all()
        assert ((ulps(got, flushed) == 0) | (ulps(got, exact) == 0)).all()
