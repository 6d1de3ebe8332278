"""Tests of fusegen.vmath: the vectorizable float32 math library of the CPU backends.

Part 1, through fused ops (exp, tanh, sigmoid: the functions the expression tables use today):
layer (a) the expression tables pick them for float32 only (float64 keeps libm, CUDA its own);
layer (b) the generated code really is vector code without libm calls (Numba's LLVM IR; the C++
stage functions' machine code); layer (c) accuracy over a dense float32 sweep on the Numba
backend, the AOT C++ backend and the XLA FFI handlers, and on every float16 value.

Part 2, function by function (every entry of vmath.VMATH_F32, through fusegen.vmath_eval's Numba
loops and C++ harness): the table and the C++ blocks; the Python array API standard's special
cases, exactly; a few thousand inputs per function against mpmath (correctly rounded); Numba and
C++ bit-identical; odd and even functions symmetric; every function's loop vectorized by Numba
(LLVM IR) and by g++ (its vectorization report); the stored polynomial coefficients within their
fitted error. Dense sweeps (benchmarks/ulp_table.py's) run under the ``slow`` marker.

Accuracy is measured in ulps (steps between adjacent float32 values) against the correctly
rounded result. Part 1 takes it as NumPy's float64 function rounded to float32 (float64's own
error is 2^-29 of a float32 ulp, far below what is tested); part 2 from mpmath. Measured over all
2^32 float32 inputs or every 7th (benchmarks/vmath_exhaustive.py): see vmath.VMATH_F32's
``max_ulp``. exp, tanh, sigmoid, log1p and erf run in float32 lanes, within 1 ulp (not correctly
rounded: test_function also checks them densely around every threshold, and their code for
double arithmetic); NumPy's own float32 functions are not correctly rounded either: exp is up to
3 ulp off (e.g. exp(25.994385)), tanh up to 1 ulp. Part 1's asserted bounds: within 1 ulp of the correct result,
and within 1 ulp of NumPy wherever NumPy is correctly rounded.
"""
from __future__ import annotations

import functools
import importlib.util
import math
import re
import zlib

import numba
import numpy as np
import pytest

import fusegen as fg
from fusegen import dtypes as dt
from fusegen import vmath, vmath_eval, vmath_fit
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
ulps = vmath_eval.ulps


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
    thresholds = vmath_eval.neighbours([
        88.72283935546875, 88.72284, -87.33654, -103.97208, -103.2789, -104.0, 104.0,  # exp: overflow,
        vmath.EXP32_LIMIT, -vmath.EXP32_LIMIT, -126 * math.log(2), -125 * math.log(2),  # normal/subnormal,
        9.010913, -9.010913, vmath.TANH32_CLAMP, -vmath.TANH32_CLAMP,                # underflow, clamp;
        vmath.TANH32_SMALL, -vmath.TANH32_SMALL, 2.0 ** -12, 1e-4, -1e-4, 0.1733, -0.1733],  # tanh: saturation,
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
    bad = (vs_np > exact_bound) & (npy_err == 0)
    assert not bad.any(), f"{name}: {vs_np[bad].max()} ulp from NumPy at x={x[bad][:5]}"
    return dict(correct=int(err.max()), numpy=int(vs_np.max()), numpy_own=int(npy_err.max()))


def correct_sigmoid(x: np.ndarray) -> np.ndarray:
    """sigmoid correctly rounded to x's dtype (float64 evaluation: exp(-x) overflows only where
    the result is 0 in float32 anyway)."""
    with np.errstate(all="ignore"):
        return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(x.dtype)


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
    assert "FG_VM float sigmoid_f32(float x)" in src

    def block(name):  # one dtype combination's stage functions
        start = src.index(f"namespace {name} {{")
        return src[start:src.index("}  // namespace", start)]
    f32, f64 = block("k_float32"), block("k_float64")
    assert "fg::sigmoid_f32(" in f32 and "std::exp(" not in f32
    assert "std::exp(" in f64 and "fg::sigmoid_f32(" not in f64
    for c in vmath.EXP32_POLY:  # the coefficients come from fusegen/vmath.py, exactly
        assert repr(c) + "f" in src


def test_generated_numba_source_names_the_implementation_digest():
    k = fg.compile(v_exp)
    k(np.ones(3, F32))
    assert "_exp_f32(" in k.source
    assert f"fusegen.vmath {vmath.source_digest()}" in k.source
    k(np.ones(3, np.float64))
    assert "np.exp(" in k.source and "_exp_f32(" not in k.source




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
    assert re.search(r"<\d+ x float>", llvm), "no vector float32 arithmetic"
    assert not re.search(r"fpext <\d+ x float>", llvm), "float32 lanes widened to float64"
    assert not re.search(r"call [^\n]*@(llvm\.)?(exp|tanh)f?(\.|\()", llvm), "a libm call remains"
    # Numba would let the kernel's fastmath flags reach the helper: (t + 1.5 * 2^23) - 1.5 * 2^23
    # must not be reassociated (folded back to t)
    assert "0x4168000000000000" in llvm and not re.search(r"reassoc[^\n]*0x4168000000000000", llvm)


@pytest.mark.parametrize("name", ["sigmoid", "tanh"])
def test_cpp_stage_loops_are_vectorized_without_libm_calls(tmp_path, name):
    # tanh's loop was scalar until every select in _vmath.inc.j2 became a bit-mask blend
    import shutil
    import subprocess
    from fusegen.native import build
    if shutil.which("objdump") is None:
        pytest.skip("objdump is not installed")
    e = emit(OPS[name][0], dtypes=["float32"])
    e.write(tmp_path)
    lib = build.build_library(tmp_path / e.main, flags=build.default_cpp_flags())
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", str(lib)], capture_output=True,
                         text=True, check=True).stdout
    body = dis[dis.index("k_float32::stage0"):]
    body = body[:body.index("\n\n")]
    assert not re.search(r"call.*<(exp|expf|tanh|tanhf)[@>]", body)
    # the float32 polynomial on packed registers (ymm or zmm, whichever -march=native picks), and
    # no widening to double
    assert re.search(r"\bv(fmadd\w*|mul)ps\s.*%[yz]mm", body)
    assert not re.search(r"\bvcvtps2pd\b", body)


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
    assert measured["correct"] == 1  # float32 lanes: within 1 ulp, and not always correctly rounded


@pytest.mark.parametrize("backend", backends("numba", "aot"))
def test_sigmoid_is_within_one_ulp_where_the_float32_formula_is_not(request, backend):
    # 1 / (1 + exp(-x)) in float32 arithmetic gives 0 below -88.7 (exp overflows) and loses the
    # last bits of 1 + e; fusegen keeps e as a pair and corrects the quotient: within 1 ulp of the
    # correctly rounded sigmoid everywhere, subnormal results included
    got = request.getfixturevalue(f"{backend}_kernels")["sigmoid"](SWEEP)
    want = correct_sigmoid(SWEEP)
    assert (np.isnan(got) == np.isnan(want)).all()
    assert ulps(got, want).max() <= 1
    tail = (SWEEP > -103) & (SWEEP < -89)
    assert (got[tail] > 0).all()  # where the formula underflows to 0


@pytest.mark.parametrize("name", ["exp", "tanh", "sigmoid"])
@pytest.mark.parametrize("backend", backends("numba", "aot"))
def test_every_float16_value(request, backend, name):
    # float16 is computed in float32 registers and rounded once at the store (fusegen's rule for
    # every op): the float32 function's result, rounded to half
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    with np.errstate(over="ignore", invalid="ignore"):  # exp(12) is inf in half
        got = request.getfixturevalue(f"{backend}_kernels")[name](x)
        x32 = x.astype(F32)
        exact = correct_sigmoid(x) if name == "sigmoid" else OPS[name][1](x.astype(np.float64)).astype(np.float16)
    assert got.dtype == np.float16
    assert (np.isnan(got) == np.isnan(exact)).all()
    assert ulps(got, exact).max() <= 1  # the float32 result is within 1 ulp of float32, then rounded
    # and rounded once: got is the float32 function's own result rounded to half
    f32 = request.getfixturevalue(f"{backend}_kernels")[name](x32)
    with np.errstate(over="ignore"):
        assert ulps(got, f32.astype(np.float16)).max() == 0
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
        assert ((ulps(got, flushed) <= 1) | (ulps(got, exact) <= 1)).all()


# --- part 2: the library, function by function ----------------------------------------------------
NAMES = list(vmath.VMATH_F32)
PI = math.pi
# The Python array API standard's (2024.12) special cases, as (arguments, result): results are
# compared bit for bit (the sign of a zero too; any NaN for NaN). Functions outside the standard
# (sigmoid, erf) follow C99 Annex F. "an implementation-dependent approximation to pi/2" is
# float32(pi/2), the correctly rounded value.
NAN, INF = math.nan, math.inf
SPECIAL = {
    "exp": [(NAN, NAN), (0.0, 1.0), (-0.0, 1.0), (INF, INF), (-INF, 0.0)],
    "expm1": [(NAN, NAN), (0.0, 0.0), (-0.0, -0.0), (INF, INF), (-INF, -1.0)],
    "tanh": [(NAN, NAN), (0.0, 0.0), (-0.0, -0.0), (INF, 1.0), (-INF, -1.0)],
    "sigmoid": [(NAN, NAN), (0.0, 0.5), (-0.0, 0.5), (INF, 1.0), (-INF, 0.0), (-200.0, 0.0)],
    "log": [(NAN, NAN), (-1.0, NAN), (-INF, NAN), (-1e-45, NAN), (0.0, -INF), (-0.0, -INF), (1.0, 0.0),
            (INF, INF)],
    "log1p": [(NAN, NAN), (-1.5, NAN), (-INF, NAN), (-1.0, -INF), (-0.0, -0.0), (0.0, 0.0), (INF, INF)],
    "log2": [(NAN, NAN), (-1.0, NAN), (-INF, NAN), (0.0, -INF), (-0.0, -INF), (1.0, 0.0), (INF, INF),
             (2.0 ** -149, -149.0), (2.0 ** 127, 127.0), (0.5, -1.0)],
    "log10": [(NAN, NAN), (-1.0, NAN), (-INF, NAN), (0.0, -INF), (-0.0, -INF), (1.0, 0.0), (INF, INF)]
    + [(10.0 ** k, float(k)) for k in range(11)],
    "sin": [(NAN, NAN), (0.0, 0.0), (-0.0, -0.0), (INF, NAN), (-INF, NAN)],
    "cos": [(NAN, NAN), (0.0, 1.0), (-0.0, 1.0), (INF, NAN), (-INF, NAN)],
    "tan": [(NAN, NAN), (0.0, 0.0), (-0.0, -0.0), (INF, NAN), (-INF, NAN)],
    "atan": [(NAN, NAN), (0.0, 0.0), (-0.0, -0.0), (INF, PI / 2), (-INF, -PI / 2)],
    "atan2": [((NAN, 1.0), NAN), ((1.0, NAN), NAN), ((NAN, NAN), NAN), ((1.0, 0.0), PI / 2),
              ((1.0, -0.0), PI / 2), ((0.0, 1.0), 0.0), ((0.0, 0.0), 0.0), ((0.0, -0.0), PI),
              ((0.0, -1.0), PI), ((-0.0, 1.0), -0.0), ((-0.0, 0.0), -0.0), ((-0.0, -0.0), -PI),
              ((-0.0, -1.0), -PI), ((-1.0, 0.0), -PI / 2), ((-1.0, -0.0), -PI / 2), ((1.0, INF), 0.0),
              ((1.0, -INF), PI), ((-1.0, INF), -0.0), ((-1.0, -INF), -PI), ((INF, 1.0), PI / 2),
              ((-INF, 1.0), -PI / 2), ((INF, INF), PI / 4), ((INF, -INF), 3 * PI / 4),
              ((-INF, INF), -PI / 4), ((-INF, -INF), -3 * PI / 4)],
    "asin": [(NAN, NAN), (1.5, NAN), (-1.5, NAN), (INF, NAN), (0.0, 0.0), (-0.0, -0.0), (1.0, PI / 2),
             (-1.0, -PI / 2)],
    "acos": [(NAN, NAN), (1.5, NAN), (-1.5, NAN), (-INF, NAN), (1.0, 0.0), (-1.0, PI), (0.0, PI / 2),
             (-0.0, PI / 2)],
    "sinh": [(NAN, NAN), (0.0, 0.0), (-0.0, -0.0), (INF, INF), (-INF, -INF), (100.0, INF)],
    "cosh": [(NAN, NAN), (0.0, 1.0), (-0.0, 1.0), (INF, INF), (-INF, INF), (-100.0, INF)],
    "asinh": [(NAN, NAN), (0.0, 0.0), (-0.0, -0.0), (INF, INF), (-INF, -INF)],
    "acosh": [(NAN, NAN), (0.5, NAN), (-1.0, NAN), (-INF, NAN), (1.0, 0.0), (INF, INF)],
    "atanh": [(NAN, NAN), (-1.5, NAN), (1.5, NAN), (INF, NAN), (-1.0, -INF), (1.0, INF), (0.0, 0.0),
              (-0.0, -0.0)],
    "hypot": [((INF, NAN), INF), ((-INF, NAN), INF), ((NAN, INF), INF), ((NAN, -INF), INF),
              ((INF, 1.0), INF), ((0.0, -3.0), 3.0), ((-0.0, 2.0), 2.0), ((-5.0, 0.0), 5.0),
              ((1.0, NAN), NAN), ((NAN, 1.0), NAN), ((NAN, NAN), NAN), ((0.0, 0.0), 0.0),
              ((-0.0, -0.0), 0.0), ((3e38, 3e38), INF), ((1e-45, 1e-45), 1e-45)],
    "cbrt": [(NAN, NAN), (0.0, 0.0), (-0.0, -0.0), (INF, INF), (-INF, -INF), (8.0, 2.0), (-27.0, -3.0),
             (0.125, 0.5)],
    "erf": [(NAN, NAN), (0.0, 0.0), (-0.0, -0.0), (INF, 1.0), (-INF, -1.0), (3.92, 1.0), (-1e30, -1.0)],
}


def bits_equal(got, want) -> np.ndarray:
    return vmath_eval.bits_equal(np.asarray(got, F32), np.asarray(want, F32))


def impl(backend: str, name: str):
    return vmath_eval.IMPLS[backend](name)


BACKENDS = ["numba", "cpp"]


def test_the_table_names_what_each_backend_defines():
    from fusegen import vmath_numba
    src = vmath.render_cpp()
    for name, e in vmath.VMATH_F32.items():
        assert callable(getattr(vmath_numba, e["numba"])), name
        assert e["cpp"] == "fg::" + e["numba"]
        params = ", ".join([r"float \w+"] * e["arity"])
        assert re.search(rf"FG_VM float {e['numba']}\({params}\)", src), name
        assert e["max_ulp"] <= 1 and e["measured"] in ("exhaustive", "strided", "sweep")
        assert name in SPECIAL, f"{name}: no special cases tested"
    assert set(vmath.CPP_BLOCKS) >= {d for e in vmath.VMATH_F32.values() for d in e["deps"]}


def test_a_subset_renders_only_the_blocks_it_needs():
    assert vmath.blocks_for(["log2"]) == ["log_core", "log2"]
    src = vmath.render_cpp(["log2"])
    assert "log2_f32" in src and "log_parts" in src
    assert "exp_core" not in src and "float log_f32" not in src and "tanh_f32" not in src
    # log1p and erf run in float32 lanes: the lanes helpers, not the float64 log and exp cores
    assert vmath.blocks_for(["erf", "log1p"]) == ["lanes", "log1p", "erf"]
    src = vmath.render_cpp(["erf", "log1p"])
    assert "exp_pair32" in src and "log_parts" not in src and "exp_core" not in src
    with pytest.raises(KeyError, match="no vectorized float32 function"):
        vmath.blocks_for(["lgamma"])
    # what _fg_runtime.inc.j2 includes by default: the functions the expression tables use
    assert vmath.template_data()["blocks"] == ["lanes", "exp", "sigmoid", "tanh"]


@functools.lru_cache(maxsize=None)
def samples(name: str) -> tuple[np.ndarray, ...]:
    """About 3000 inputs: random bit patterns, random points of the function's span, edges."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    ref = vmath_eval.REFS[name]
    n = 1200
    args = []
    for _ in range(ref.arity):
        bits = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(F32)
        span = rng.uniform(*ref.span, n).astype(F32)
        edges = vmath_eval.neighbours(ref.edges, 2) if ref.edges else np.zeros(0, F32)
        args.append(rng.permutation(np.concatenate([bits, span, edges])))
    m = min(len(a) for a in args)
    return tuple(a[:m] for a in args)


ODD = ["tanh", "erf", "sin", "tan", "atan", "asin", "sinh", "asinh", "atanh", "cbrt"]
EVEN = ["cos", "cosh"]


def check_special_cases(name: str, backend: str) -> None:
    cases = SPECIAL[name]
    args = [np.array([c[0][k] if isinstance(c[0], tuple) else c[0] for c in cases], F32)
            for k in range(vmath.VMATH_F32[name]["arity"])]
    want = np.array([c[1] for c in cases], F32)
    got = impl(backend, name)(*args)
    bad = ~bits_equal(got, want)
    assert not bad.any(), f"{backend} {name}{tuple(a[bad] for a in args)}: {got[bad]}, want {want[bad]}"


def check_numba_vector_code(name: str) -> None:
    loop = vmath_eval.numba_loop(name)
    llvm = loop.inspect_llvm(loop.signatures[0])
    lanes = "float" if "lanes" in vmath.VMATH_F32[name]["deps"] else "double"  # float32 lanes, or float64
    assert re.search(rf"<\d+ x {lanes}>", llvm), f"{name}: no vector {lanes} arithmetic"
    if lanes == "float":  # and nothing widened to double on the way
        assert not re.search(r"fpext|<\d+ x double>|\bdouble\b", llvm), f"{name}: float32 lanes widened to double"
    called = set(re.findall(r"call [^\n]*?@([\w.]+)\(", llvm))
    # (np.sqrt is libm's sqrt to Numba, which LLVM knows and turns into vsqrtpd: llvm.sqrt.v4f64)
    libm = {c for c in called if not c.startswith(("llvm.", "NRT_", "numba_", "_ZN", "Py"))}
    if "sqrt" in libm:
        assert re.search(r"@llvm\.sqrt\.v\d+f64", llvm), f"{name}: sqrt not vectorized"
    assert not libm - {"sqrt"}, f"{name}: calls {libm}"


def check_lanes_densely(name: str) -> None:
    # a float32-lane function (within 1 ulp, so not correctly rounded: a rare bad case could hide
    # between samples) on ~2^18 inputs: its span evenly, every threshold's 256 neighbours; both
    # backends within 1 ulp and bit-identical (the loops are compiled already: 0.05 s a function)
    x = np.concatenate([np.linspace(*vmath_eval.REFS[name].span, 1 << 18, dtype=F32),
                        vmath_eval.neighbours(vmath_eval.REFS[name].edges, 256)])
    want = vmath_eval.reference(name, x)
    got = {b: impl(b, name)(x) for b in BACKENDS}
    for b, g in got.items():
        err = ulps(g, want)
        assert err.max() <= 1, f"{b} {name}: {err.max()} ulp at x={x[err > 1][:4]}"
    assert bits_equal(got["numba"], got["cpp"]).all(), f"{name}: Numba and C++ differ"


@pytest.mark.parametrize("name", NAMES)
def test_function(name):
    # one test per function, so that its Numba loop compiles once, in one xdist worker: the
    # standard's special cases exactly, ~3000 inputs against mpmath within the table's bound,
    # Numba and C++ bit-identical, odd/even symmetry bit for bit, and vector code in Numba's IR
    pytest.importorskip("mpmath")
    for backend in BACKENDS:
        check_special_cases(name, backend)
    args = samples(name)
    want = vmath_eval.reference(name, *args, exact=True)
    got = {b: impl(b, name)(*args) for b in BACKENDS}
    for b, g in got.items():
        bad = ulps(g, want) > vmath.VMATH_F32[name]["max_ulp"]
        assert not bad.any(), f"{b} {name}{tuple(a[bad][:4] for a in args)}: {g[bad][:4]}, want {want[bad][:4]}"
    assert bits_equal(got["numba"], got["cpp"]).all(), f"{name}: Numba and C++ differ"
    if "lanes" in vmath.VMATH_F32[name]["deps"]:
        check_lanes_densely(name)
    if name in ODD + EVEN:
        y = got["numba"]
        assert bits_equal(impl("numba", name)(-args[0]), -y if name in ODD else y).all(), f"{name}: symmetry"
    check_numba_vector_code(name)


def test_every_function_compiles_alone_and_warning_free(tmp_path):
    # each function with only the blocks blocks_for() names (each in a namespace of its own, so a
    # missing dependency cannot be found in another's), at -O0 as MindSpore's auto-compile builds
    import shutil
    import subprocess
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed")
    parts = [vmath.render_cpp()] + [vmath.render_cpp([n], namespace=f"only_{n}", headers=False) for n in NAMES]
    src = tmp_path / "alone.cc"
    src.write_text("\n".join(parts))
    proc = subprocess.run(["g++", "-std=c++17", "-O0", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", str(src)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _disassembly(obj) -> dict[str, list[str]]:
    """objdump of the harness's fgvm_* functions, addresses and offsets blanked."""
    import subprocess
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(obj)], capture_output=True, text=True,
                          check=True).stdout
    out = {}
    for m in re.finditer(r"<(fgvm_\w+)>:\n(.*?)(?=\n\n|\Z)", text, re.S):
        out[m.group(1)] = [re.sub(r"0x[0-9a-f]+|\b[0-9a-f]+ <", "N", re.sub(r"^\s*[0-9a-f]+:\s*", "", line))
                           for line in m.group(2).splitlines()]
    return out


def test_gcc_vectorizes_every_loop_and_contracts_nothing(tmp_path):
    # (1) g++'s vectorization report lists every function's loop; (2) g++ fuses a * b + c into an
    # fma by default (-ffp-contract=fast), which rounds differently from Numba's separate multiply
    # and add unless the product is exact: the library writes every multiply-add as an explicit
    # vm_fma, so -ffp-contract=off must compile it to the same instructions
    import shutil
    import subprocess
    if shutil.which("g++") is None or shutil.which("objdump") is None:
        pytest.skip("g++ and objdump are needed")
    src = tmp_path / "harness.cc"
    src.write_text(vmath_eval.harness_source())
    code = {}
    for mode in ("fast", "off"):
        obj = tmp_path / f"h_{mode}.o"
        proc = subprocess.run(["g++", "-std=c++17", "-O3", "-march=x86-64-v3", "-fno-math-errno",
                               f"-ffp-contract={mode}", "-fopt-info-vec-optimized", "-c", str(src), "-o", str(obj)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-2000:]
        code[mode] = _disassembly(obj)
        if mode == "fast":
            report = proc.stderr
    vectorized = {int(m) for m in re.findall(r"harness\.cc:(\d+):\d+: optimized: loop vectorized", report)}
    loops = {}
    for i, line in enumerate(src.read_text().splitlines(), 1):
        m = re.match(r"void (fgvm|libm)_(\w+)\(", line)
        if m:
            loops[(m.group(1), m.group(2))] = i + 1  # the for loop is the next line
    missed = [n for n in NAMES if loops[("fgvm", n)] not in vectorized]
    assert not missed, f"g++ left these loops scalar: {missed}"
    assert loops[("libm", "log")] not in vectorized  # the report does tell a libm call's loop apart
    assert set(code["fast"]) == {f"fgvm_{n}" for n in NAMES}
    changed = [f for f in code["fast"] if code["fast"][f] != code["off"][f]]
    assert not changed, f"g++ contracted a multiply-add in {changed}"
    # (3) the float32-lane functions: packed float arithmetic, nothing converted to or computed in double
    for n in NAMES:
        if "lanes" in vmath.VMATH_F32[n]["deps"]:
            text = "\n".join(code["fast"][f"fgvm_{n}"])
            assert re.search(r"\bvfmadd\w*ps\s.*%[yz]mm", text), f"{n}: no packed float fma"
            # (vpminsd is an integer min: the v[^p] leaves the integer instructions out)
            assert not re.search(r"\bv[^p\s]\w*(pd|sd)\b", text), f"{n}: double arithmetic or conversions"


def test_nvcc_compiles_them_as_device_code_with_nothing_to_contract(tmp_path):
    # ptxas fuses a mul.f64 whose result feeds an add.f64/sub.f64 (nvcc's default --fmad=true), and
    # the same in f32; the PTX must have no such pair, and the float32-lane functions no f64 at all
    import shutil
    import subprocess
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc (the CUDA toolkit) is not installed")
    src = tmp_path / "vm.cu"
    src.write_text(vmath_eval.cuda_source())
    subprocess.run(["nvcc", "-arch=sm_90", "-c", "--keep", "--keep-dir", str(tmp_path), str(src), "-o",
                    str(tmp_path / "vm.o")], check=True)
    ptx = (tmp_path / "vm.ptx").read_text()
    entries = dict(re.findall(r"\.entry (\w+)\((.*?)\n}", ptx, re.S))
    assert len(entries) == len(NAMES)
    for entry, body in entries.items():
        for ty, reg in (("f64", "%fd"), ("f32", "%f")):
            products = set(re.findall(rf"\bmul\.{ty}\s+({reg}\d+),", body))
            fused = [line for line in body.splitlines() if re.match(rf"\s*(add|sub)\.{ty}\s", line)
                     and any(re.search(re.escape(r) + r"\b", line.split(",", 1)[1]) for r in products)]
            assert not fused, f"{entry}: {fused[:2]}"
        name = re.search(r"vm_(\w+?)PK", entry).group(1)  # (_Z6vm_expPKfS0_Pfi: the mangled kernel name)
        if "lanes" in vmath.VMATH_F32[name]["deps"]:
            assert ".f64" not in body, f"{entry}: double arithmetic in a float32-lane function"


@pytest.mark.parametrize("fit", sorted(f for f in vmath_fit._fits() if hasattr(vmath, f))
                         if importlib.util.find_spec("mpmath") else [])
def test_stored_coefficients_meet_their_error_bound(fit):
    stored = getattr(vmath, fit)
    # cbrt's is before its Halley step; the float32 lanes' coefficients are float32 (rounded)
    bound = {"EXP_POLY": 3e-16, "CBRT_POLY": 1.3e-6, "EXP32_POLY": 4e-9, "LOG1P32_POLY": 6e-9,
             "ERF32_SMALL": 1.5e-9, "ERF32_BIG": 1.4e-9, "SOFTPLUS32_POLY": 1.3e-9}.get(fit, 4e-17)
    if fit.endswith(("32_POLY", "32_SMALL", "32_BIG")):
        # float32 values exactly, so both backends' literals are the same float; ERF32_BIG's first
        # is a float32 pair (hi + lo, the sum exact in float64)
        first = stored[0] - float(np.float32(stored[0])) if fit == "ERF32_BIG" else 0.0
        assert all(float(np.float32(c)) == c for c in (first, *stored[1:]))
    assert vmath_fit.fit_error(fit, stored, n=150) < bound


def test_the_trig_reduction_carries_enough_bits_of_2_over_pi():
    pytest.importorskip("mpmath")
    assert vmath_fit.two_over_pi_chunks(len(vmath.TRIG_CHUNKS), 28) == vmath.TRIG_CHUNKS
    log2_dist, e, m = vmath_fit.reduction_worst_case()
    assert (m, e) == (16367173, 72) and -30 < log2_dist < -29.8
    # the bits of 2/pi left out reach x * 2/pi below 2^-96 for every float32 x < 2^128
    assert 2.0 ** 128 * 2.0 ** (-28 * len(vmath.TRIG_CHUNKS)) <= 2.0 ** -96
    # chunks from TRIG_FULL on add less than 2^-12 (no whole quarter turn) for any float32
    assert 2.0 ** 128 * vmath.TRIG_CHUNKS[vmath.TRIG_FULL] < 2.0 ** -12


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_dense_sweep(name):
    # benchmarks/ulp_table.py's full sweep: ~2^24 inputs per function, both backends
    args = vmath_eval.sweep(name, stride_log2=9, random=1 << 22, dense=1 << 22, k=256)
    want = vmath_eval.reference(name, *args)
    got = {b: impl(b, name)(*args) for b in BACKENDS}
    for b, g in got.items():
        assert ulps(g, want).max() <= vmath.VMATH_F32[name]["max_ulp"], b
    assert bits_equal(got["numba"], got["cpp"]).all()
