"""complex64 and complex128 (#18) on the CPU backends.

(a) IR: NumPy's type promotion (weak Python complex scalars), result dtypes of abs/real/imag and the
    reductions, the standard's refusals (orderings, rounding, floor_divide...; complex -> real casts;
    a backward op's real trace called with complex inputs) as clear DTypeErrors naming the op and node;
(b) generated sources: the complex helpers each backend calls, the C++ partial only where needed;
(c) numbers against NumPy on every pair of edge parts (signed zeros, infinities, NaN) and the
    standard's special-case tables (branch cuts with signed zeros), through Numba, the AOT C++
    kernel and the XLA FFI handler: each case one many-output op (tests/complex_cases.py; the CUDA
    twin is tests/cuda/test_complex_cuda.py); 0-d, size-0 and Python-scalar operands.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fusegen as fg
from fusegen.ir import infer

sys.path.insert(0, str(Path(__file__).parent))
import complex_cases as cases  # noqa: E402
from _optional import needs_gxx, needs_jax, needs_nvcc  # noqa: E402

C64, C128 = np.complex64, np.complex128
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _dtypes(op, dtypes, shapes=None) -> list[str]:
    shapes = shapes or [(2,)] * len(dtypes)
    spec = infer(op, dtypes, shapes, {})
    return [str(d) for d in spec.out_dtypes]


# --- (a) the IR -------------------------------------------------------------------------------
@fg.op
def _add(x, y):
    return x + y, x * 1j, x + 2.0, fg.abs(x), fg.real(x), fg.imag(x), fg.conj(x), fg.sum(x), fg.mean(x), fg.prod(x)


@pytest.mark.parametrize("a,b", [("float32", "complex64"), ("float64", "complex64"), ("int8", "complex64"),
                                 ("int32", "complex64"), ("complex64", "complex128"), ("bool", "complex64"),
                                 ("uint64", "complex128"), ("float16", "complex64"), ("int16", "float32")])
def test_promotion_is_numpys(a, b):
    x, y = np.ones(2, a), np.ones(2, b)
    want = [x + y, x * 1j, x + 2.0, np.abs(x), np.real(x), np.imag(x), np.conj(x), np.sum(x), np.mean(x), np.prod(x)]
    assert _dtypes(_add, [a, b]) == [str(np.asarray(w).dtype) for w in want]


REFUSED = {
    "less": lambda x: x < x, "maximum": lambda x: fg.maximum(x, x), "floor": lambda x: fg.floor(x), "ceil": lambda x: fg.ceil(x),
    "trunc": lambda x: fg.trunc(x), "remainder": lambda x: x % x, "floor_divide": lambda x: x // x,
    "atan2": lambda x: fg.atan2(x, x), "signbit": lambda x: fg.signbit(x), "copysign": lambda x: fg.copysign(x, x),
    "hypot": lambda x: fg.hypot(x, x), "logaddexp": lambda x: fg.logaddexp(x, x),
    "max": lambda x: fg.max(x), "min": lambda x: fg.min(x, axis=0), "astype": lambda x: x.astype("float32"),
    "logical_and": lambda x: fg.logical_and(x, x), "where": lambda x: fg.where(x, 1.0, 2.0),
    "clip": lambda x: fg.clip(x, 0, 1), "relu": lambda x: fg.relu(x),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_the_standard_leaves_undefined_is_refused(name):
    op = fg.op(REFUSED[name], name=f"refuse_{name}")
    with pytest.raises(fg.DTypeError, match=rf"op refuse_{name}: node %\d+ = .*complex"):
        infer(op, ["complex64"], [(2,)], {})
    infer(op, ["float32"], [(2,)], {})   # the same op is fine on reals


def test_gradients_of_complex_values_take_their_own_trace():
    # fg.grad differentiates complex values (tests/test_grad_complex.py); its backward op is traced
    # per set of complex inputs, and the real trace refuses complex inputs by name, clearly
    @fg.op
    def f(x):
        return fg.sum(x * x)

    gop = fg.grad(f)
    with pytest.raises(fg.DTypeError, match=r"op f_grad \(fg.grad of f\) was traced for real x, called with "
                                            r"x: complex64: .*for_dtypes"):
        infer(gop, ["complex64", "complex64"], [(3,), ()], {})
    assert gop.for_dtypes(["complex64", "complex64"]).complex_inputs == ("x",)
    assert gop.for_dtypes(["float32", "float32"]) is gop


def test_text_form_and_python_complex_scalars():
    text = str(_add)
    for name in ("real", "imag", "conj"):
        assert f"= {name} %0" in text
    assert "1j" in text or "complex" in text


# --- (b) generated sources --------------------------------------------------------------------
@needs_gxx
def test_each_backend_calls_the_complex_helpers():
    src = fg.emit(cases.binary, dtypes=["complex64"]).source
    assert "#include <complex>" in src and "fg::cmul(" in src and "fg::cdiv(" in src
    assert "using complex64 = cx::complex<float>;" in src
    real_only = fg.op(lambda x: fg.exp(x) + 1, name="real_only")
    assert "cx::complex" not in fg.emit(real_only, dtypes=["float32"]).source   # the partial only when used
    cu = fg.emit(cases.unary_a, device="cuda", dtypes=["complex128"]).source
    assert "#include <cuda/std/complex>" in cu and "fg::cx::exp(" in cu and "fg::clog1p(" in cu
    k = kernel("unary_b", "numba")
    k(np.ones(2, C128))   # (the dtype the numbers test compiles it for)
    assert "_fg_csign(" in k.source and "_fg_catanh(" in k.source and "cmath.isnan(" in k.source


# --- (c) numbers ------------------------------------------------------------------------------
_KERNELS: dict = {}


def kernel(case: str, backend: str, dtype=None):
    """One compiled kernel per (case, backend), shared by the tests here (an AOT library per dtype)."""
    key = (case, backend, dtype if backend == "aot" else None)
    if key not in _KERNELS:
        op = shapes if case == "shapes" else cases.CASES[case][0]
        opts = {"dtypes": [np.dtype(dtype).name]} if backend == "aot" else {}
        _KERNELS[key] = fg.compile(op, backend=backend, **opts)
    return _KERNELS[key]


def _slow(*marks):
    return [pytest.mark.slow, *marks]


# One compile per (case, backend, dtype): the default run takes one dtype of each Numba case and
# the AOT arithmetic; the rest (the same partial and helpers) runs with -m slow. Where NumPy's
# result is infinite or NaN, the AOT kernel's is glibc's (what NumPy calls on Linux) and Numba's
# fusegen's Annex G patches over Numba's cmath: both are compared, NaN for NaN.
@pytest.mark.parametrize("backend,case,dtype", [
    ("numba", "unary_a", C64), ("numba", "unary_b", C128), ("numba", "binary", C64),
    pytest.param("numba", "unary_a", C128, marks=_slow()), pytest.param("numba", "unary_b", C64, marks=_slow()),
    pytest.param("numba", "binary", C128, marks=_slow()),
    pytest.param("aot", "binary", C128, marks=needs_gxx),
    *[pytest.param("aot", c, d, marks=_slow(needs_gxx)) for c in ("unary_a", "unary_b") for d in (C64, C128)],
    pytest.param("aot", "binary", C64, marks=_slow(needs_gxx))])
def test_functions_match_numpy_and_the_standards_tables(backend, case, dtype):
    args = cases.inputs(case, dtype)
    got = kernel(case, backend, dtype)(*args)
    cases.check(case, got, args, backend)
    if case != "binary":
        names = cases.UNARY_NAMES[:16] if case == "unary_a" else cases.UNARY_NAMES[16:]
        cases.check_standard(dict(zip(names, got)), f"{backend} {dtype.__name__}")


@fg.op
def shapes(x, y):
    return x * y + 1j, fg.sum(x), fg.abs(y) ** 2.0, 2 / x, fg.real(x) + fg.imag(y), fg.exp(1j * x)


@pytest.mark.parametrize("xs,ys", [((), ()), ((2, 3), (3,)), ((2, 0), (1, 0))])
def test_zero_rank_size_zero_and_broadcasting(xs, ys):
    rng = np.random.default_rng(0)
    x = (rng.normal(size=xs) + 1j * rng.normal(size=xs)).astype(C64)
    y = (rng.normal(size=ys) + 1j * rng.normal(size=ys)).astype(C128)
    got = kernel("shapes", "numba")(x, y)
    want = [x * y + 1j, np.sum(x), np.abs(y) ** 2.0, 2 / x, x.real + y.imag,
            np.exp(1j * x)]
    for g, w in zip(got, want):
        assert np.asarray(g).dtype == np.asarray(w).dtype and np.asarray(g).shape == np.shape(w)
        np.testing.assert_allclose(g, w, rtol=1e-5)


@fg.op
def _bridge(x, y):
    """A few complex functions, a real result and a reduction: one small handler library."""
    return fg.exp(x) * y + fg.conj(x), fg.abs(x), fg.sum(x * y, axis=-1)


def _bridge_ref(x, y):
    return np.exp(x) * y + np.conj(x), np.abs(x), np.sum(x * y, axis=-1)


@needs_jax
def test_jax_bridge_takes_complex64_and_complex128_under_jit_and_vmap():
    """Both complex dtypes through ``fg.jax.function`` (XLA's C64/C128 buffers), against NumPy;
    complex128 needs x64 (here the context manager: JAX otherwise makes it complex64)."""
    import jax
    import fusegen.jax as fgj
    f = fgj.function(_bridge, dtypes=["complex64", "complex128"])
    with jax.enable_x64(True):
        for dt, tol in ((C64, 2e-6), (C128, 1e-14)):
            x = (np.arange(12).reshape(3, 4) * (0.25 - 0.5j) + 0.5j).astype(dt)
            y = (np.cos(np.arange(12.0)).reshape(3, 4) + 1j).astype(dt)
            for how, got in (("eager", f(x, y)), ("jit", jax.jit(f)(x, y)), ("vmap", jax.vmap(f)(x, y))):
                for g, w in zip(got, _bridge_ref(x, y)):
                    assert np.asarray(g).dtype == w.dtype, (how, dt)
                    np.testing.assert_allclose(np.asarray(g), w, rtol=tol, atol=tol, err_msg=f"{how} {dt}")
    # without x64 a complex128 array is complex64 to JAX, as every 64-bit type
    x = np.ones((2, 2), C128) * (1 + 1j)
    assert np.asarray(f(x, x)[0]).dtype == C64


@needs_jax
@pytest.mark.slow   # (an XLA handler build: ~8 s)
def test_xla_ffi_handler_matches_numpy():
    import fusegen.jax as fgj
    x = cases.inputs("unary_a", C64)[0]
    x = x[np.isfinite(x)]   # XLA's CPU runtime flushes subnormals; JAX without x64 has no complex128
    got = fgj.function(cases.unary_a, dtypes=["complex64"])(x)
    cases.check("unary_a", tuple(np.asarray(g) for g in got), (x,), "xla", finite_only=True)


# The emitted .cu's complex functions (libcu++'s, through _fg_complex.inc.j2's patches) are
# __host__ __device__: a host program built by nvcc runs the very rows of the CUDA C++ table on
# every edge value without a GPU (the device's libm aside).
_HARNESS = r"""
#include <cmath>
#include <cstdio>
#include <limits>
#define FG_INLINE inline
%s
using C = fg::complex128;
int main() {
  const double inf = 1.0 / 0.0, nan = 0.0 / 0.0;
  double v[][2] = {%s};
  for (auto& p : v) {
    C z(p[0], p[1]);
    C r[] = {%s};
    for (C w : r) std::printf("%%.17g %%.17g ", w.real(), w.imag());
    std::printf("\n");
  }
}
"""


@needs_nvcc
@pytest.mark.slow   # (an nvcc build: ~15 s)
def test_cuda_cpp_rows_match_numpy_on_the_host(tmp_path):
    from fusegen.emitters.common import TEMPLATES
    from fusegen.ir import Op
    from fusegen.plan.cexprs import CPP_COMPLEX
    ops = [Op.EXP, Op.EXPM1, Op.LOG, Op.LOG1P, Op.LOG2, Op.LOG10, Op.SQRT, Op.SIN, Op.COS, Op.TAN, Op.SINH,
           Op.COSH, Op.TANH, Op.ASIN, Op.ACOS, Op.ATAN]   # unary_a's outputs, in order
    x = cases.values(C128)
    vals = ", ".join("{%s, %s}" % (repr(float(z.real)), repr(float(z.imag))) for z in x)
    src = _HARNESS % ((TEMPLATES / "_fg_complex.inc.j2").read_text(), vals,
                      ", ".join(CPP_COMPLEX[op].format("z") for op in ops))
    (tmp_path / "t.cu").write_text(src)
    subprocess.run(["nvcc", "-std=c++17", "-o", str(tmp_path / "t"), str(tmp_path / "t.cu")], check=True)
    lines = subprocess.run([str(tmp_path / "t")], capture_output=True, text=True, check=True).stdout.split("\n")
    parts = np.array([[float(p) for p in line.split()] for line in lines[:len(x)]])
    got = tuple(np.empty(len(x), C128) for _ in ops)   # (re + 1j * im would turn inf parts into NaN)
    for k, g in enumerate(got):
        g.real, g.imag = parts[:, 2 * k], parts[:, 2 * k + 1]
    cases.check("unary_a", got, (x,), "libcu++ (host)")


@needs_nvcc
@pytest.mark.slow   # (an nvcc build: ~10 s)
def test_emitted_cu_with_complex_compiles_with_nvcc(tmp_path):
    e = fg.emit(cases.binary, abi="mindspore-aot", device="cuda", dtypes=["complex64", "complex128"])
    e.write(tmp_path)
    cmd = ["nvcc", "--shared", "-Xcompiler", "-fPIC", "-O3", "--use_fast_math", "--expt-relaxed-constexpr",
           "-std=c++17", "-gencode", "arch=compute_90,code=sm_90", f"-I{tmp_path}", "-o", str(tmp_path / "b.so"),
           str(tmp_path / e.main)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
