"""Shared fixtures and helpers of fusegen's core tests (IR, plan, Numba CPU lowering, runtime).

Every test compares against NumPy: the *dtype* of a result must equal NumPy's exactly, the
*values* must agree within the tolerance of that dtype (table ``TOL`` below).

Tolerances, and why:

* bool and integer results: exact.
* float64: ``rtol=1e-10, atol=1e-12``. Numba calls libm, NumPy its own SIMD routines (both within a
  few ulp); float reductions are compiled with ``fastmath reassoc`` (a different summation order
  than NumPy's pairwise sums), which costs ~n ulp on an n-term sum.
* float32: ``rtol=2e-5, atol=1e-6``: the same reasons at float32's precision (eps 1.2e-7).
* float16: ``rtol=2e-3, atol=2e-3``. fusegen computes float16 in float32 registers and rounds once,
  at the store (1 ulp of half is 2**-10 ~ 1e-3 relative); a one-ulp disagreement at a rounding
  boundary is allowed.

The reference *values* are NumPy's computed from float inputs widened to float64 and rounded to the
dtype NumPy gives for the original inputs (``np_ref``): the correctly rounded answer. Comparing
with NumPy's own float16 arithmetic instead would measure NumPy's per-operation rounding.

Compilation is the cost of these tests (each distinct (dtypes, op structure, row/col mode, stride
pattern, ranks) compiles a Numba function, ~0.5-2 s), so tests share ops defined at module level
and use small shapes below ``runtime.PARALLEL_THRESHOLD`` unless they test the parallel path.
"""
from __future__ import annotations

import hashlib
import math
import os
import tempfile
from pathlib import Path



def _default_cache_dir() -> str:
    """A cache directory under the temp dir, named by a digest of fusegen's own sources.

    Numba's on-disk cache keeps working across test runs of the same code (the generated
    sources are written to $FUSEGEN_CACHE_DIR/numba with their .nbi/.nbc beside them), while
    an edit anywhere in fusegen starts a fresh directory: Numba's index is keyed by the
    generated source and the signature, not by the JIT options a lowering passes, so machine
    code cached by an older fusegen could otherwise be loaded by a newer one."""
    pkg = Path(__file__).resolve().parents[1] / "fusegen"
    h = hashlib.sha256()
    for f in sorted(pkg.rglob("*")):
        if f.is_file() and f.suffix in (".py", ".j2", ".h", ".cc"):
            h.update(f.relative_to(pkg).as_posix().encode() + b"\0" + f.read_bytes())
    user = os.getuid() if hasattr(os, "getuid") else "user"
    return os.path.join(tempfile.gettempdir(), f"fusegen-test-cache-{user}-{h.hexdigest()[:12]}")


# Never touch a user's own cache; only where the caller set none.
if not os.environ.get("FUSEGEN_CACHE_DIR"):
    os.environ["FUSEGEN_CACHE_DIR"] = _default_cache_dir()

import numpy as np  # noqa: E402
import pytest  # noqa: E402

TESTS_DIR = Path(__file__).resolve().parent

#: Tolerances by result dtype (see the module docstring).
TOL = {
    np.dtype(np.float16): dict(rtol=2e-3, atol=2e-3),
    np.dtype(np.float32): dict(rtol=2e-5, atol=1e-6),
    np.dtype(np.float64): dict(rtol=1e-10, atol=1e-12),
}

FLOATS = ("float16", "float32", "float64")
SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
ALL_DTYPES = ("bool",) + SIGNED + UNSIGNED + FLOATS

#: True: long property-based runs (a few hundred random graphs instead of a few dozen).
LONG_TESTS = os.environ.get("FUSEGEN_LONG_TESTS", "") not in ("", "0")


#: The emitted C++ compiles warning-free: test_abi_emit.py builds every reference op's source with
#: these added to MindSpore's flags and to fusegen's, and test_aot_backend.py builds its kernels with
#: exactly the same flags, so the build cache compiles each source once for both.
WARNINGS = ("-Wall", "-Wextra", "-Werror")


def strict_cpp_flags(kind: str) -> list[str]:
    """MindSpore's auto-compile flags (``"mindspore"``) or fusegen's (``"fusegen"``), then ``WARNINGS``."""
    from fusegen.native import build
    base = list(build.MINDSPORE_CPU_FLAGS) if kind == "mindspore" else build.default_cpp_flags()
    return base + list(WARNINGS)


def compile_for(op, backend: str, dtypes="float32", **options):
    """``fg.compile(op, backend=backend)``; the AOT backend builds ahead only ``dtypes`` (the ones the
    test calls with; any other a call brings is built on first use). The default three float
    combinations cost g++ about three times the time of one, for combinations never called."""
    import fusegen as fg
    if backend == "aot":
        options.setdefault("dtypes", dtypes)
    return fg.compile(op, backend=backend, **options)


def assert_close(got, want, *, rtol: float | None = None, atol: float | None = None, what: str = "") -> None:
    """``got`` (fusegen) equals ``want`` (NumPy): same type, shape and dtype; values exactly for
    bool/int, within ``TOL[dtype]`` (or the given overrides) for floats; NaN matches NaN."""
    want = np.asarray(want)
    label = f"{what}: " if what else ""
    assert isinstance(got, np.ndarray), f"{label}expected an ndarray, got {type(got).__name__}"
    assert got.dtype == want.dtype, f"{label}dtype {got.dtype} differs from NumPy's {want.dtype}"
    assert got.shape == want.shape, f"{label}shape {got.shape} differs from NumPy's {want.shape}"
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=label)
        return
    tol = dict(TOL[want.dtype])
    if rtol is not None:
        tol["rtol"] = rtol
    if atol is not None:
        tol["atol"] = atol
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), equal_nan=True,
                               err_msg=label, **tol)


def assert_all_close(got, want, *, what: str = "", **kw) -> None:
    """``assert_close`` on each of several outputs (tuples of the same length)."""
    if not isinstance(want, (tuple, list)):
        got, want = (got,), (want,)
    assert isinstance(got, tuple), f"expected a tuple of {len(want)} outputs, got {type(got).__name__}"
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, what=f"{what} output {k}".strip(), **kw)


def _wide(a):
    if isinstance(a, np.ndarray) and a.dtype.kind == "f":
        return a.astype(np.float64)
    return a


def np_ref(fn, *args, **kwargs):
    """NumPy's result of ``fn(*args, **kwargs)`` as the reference for fusegen's.

    The dtype(s) are the ones NumPy gives for the arguments exactly as they are (so a dtype
    mismatch is a fusegen bug); the values are computed with float arguments widened to float64
    and rounded to that dtype, i.e. the correctly rounded result, which fusegen's float32 register
    arithmetic must match within ``TOL``. Integer and bool arguments are kept (wrap-around is part
    of their semantics). Floating-point warnings (log(0), 0/0, overflow) are silenced."""
    with np.errstate(all="ignore"):
        typed = fn(*args, **kwargs)
        if any(isinstance(a, np.ndarray) and a.dtype.kind == "f" for a in args):
            vals = fn(*[_wide(a) for a in args], **kwargs)
        else:
            vals = typed
    if isinstance(typed, tuple):
        return tuple(np.asarray(v).astype(np.asarray(t).dtype) for t, v in zip(typed, vals))
    return np.asarray(vals).astype(np.asarray(typed).dtype)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def np_erf(x):
    """erf with NumPy's dtype rule for a transcendental (the dtype of ``np.exp(x)``); SciPy is not
    a dependency, so the values come from ``math.erf``."""
    x = np.asarray(x)
    out_dtype = np.exp(np.zeros((), x.dtype)).dtype
    return _erf(x.astype(np.float64)).astype(out_dtype) if x.size else np.zeros(x.shape, out_dtype)


def sample(rng: np.random.Generator, shape, dtype, *, lo: float = -3.0, hi: float = 3.0) -> np.ndarray:
    """Random values of ``dtype`` in [lo, hi) (non-negative for unsigned ints; 0/1 for bool)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.kind == "u":
        return rng.integers(0, max(int(hi), 1) + 1, size=shape).astype(dtype)
    if dtype.kind == "i":
        return rng.integers(int(lo), int(hi) + 1, size=shape).astype(dtype)
    return rng.uniform(lo, hi, size=shape).astype(dtype)


def line_of(path, marker: str) -> int:
    """1-based line number of the (unique) line of ``path`` that ends with the comment ``# marker``:
    lets a test assert that an error names the user's source line without hard-coding numbers."""
    lines = [i + 1 for i, text in enumerate(Path(path).read_text().splitlines())
             if text.rstrip().endswith(f"# {marker}")]
    assert len(lines) == 1, f"marker {marker!r} found on lines {lines} of {path}"
    return lines[0]


def loc_of(path, marker: str) -> str:
    """``'file.py:NN'``, as fusegen names a user's source line in its messages."""
    return f"{Path(path).name}:{line_of(path, marker)}"


@pytest.fixture
def rng() -> np.random.Generator:
    """A fixed-seed generator: every run sees the same data."""
    return np.random.default_rng(20240607)


# --- reporting how many random graphs the property tests tried -------------------------------
PROPERTY_STATS: dict[str, int] = {}


def pytest_terminal_summary(terminalreporter):
    if PROPERTY_STATS:
        terminalreporter.write_sep("-", "fusegen property tests")
        for name, count in sorted(PROPERTY_STATS.items()):
            terminalreporter.write_line(f"{name}: {count} examples tried")


# --- the default run's representatives ----------------------------------------------------------
# The default run must cover every backend and every public function within 5 minutes on two
# cold cores, and nearly all of its time is compiling (Numba groups, g++ builds). For these
# parametrized tests it takes the cases listed here (each backend and each function still run at
# least once); their other cases, the dtype/shape/backend matrix, carry the `extended` marker,
# which CI runs as a step of its own (`pytest -m extended`). One table, so the trade is visible.
DEFAULT_CASES = {
    "test_elementwise.py::test_float_functions_match_numpy": {"unary_a-numba", "unary_b-numba", "binary_f-numba",
                                                               "binary_f-aot"},
    "test_grad.py::test_reference_op_gradients_match_finite_differences": {"add_mul_div-3-numba", "layer_norm-8-aot"},
    "test_layout_backends.py::test_layout_cases_against_numpy": {"generic-numba-quick", "per_rank-aot-quick",
                                                                  "generic-xla-quick", "per_rank-xla-quick"},
    "test_bench.py::test_rows_match_their_reference": {"cross_entropy", "accuracy"},
    "test_abi_emit.py::test_compiles_warning_free": {"softmax-fusegen", "layer_norm-mindspore"},
    "test_numeric_cpu.py::test_binary_ops_with_broadcasting": {"float32-float32", "int8-int8", "uint8-int8"},
    "test_numeric_cpu.py::test_unary_ops": {"float32", "int8"},
    "test_numeric_cpu.py::test_broadcasting_ranks_and_sizes": {"sx0-sy0", "sx2-sy2", "sx5-sy5", "sx7-sy7"},
    "test_numeric_cpu.py::test_python_scalars_and_scalar_attributes": {"int8", "float32"},
    "test_numeric_cpu.py::test_reductions_dtypes_row_mode": {"float32", "int8", "bool"},
    "test_numeric_cpu.py::test_reductions_dtypes_col_mode": {"float32", "int8"},
    "test_numeric_cpu.py::test_layer_norm_every_axis": {"shape0-0-float32", "shape1-1-float32", "shape2-2-float32",
                                                         "shape3--2-float32", "shape5--1-float16"},
    "test_numeric_cpu.py::test_softmax_every_axis": {"shape0-0-float32", "shape1-1-float32", "shape2-2-float32",
                                                      "shape3--1-float32", "shape4--3-float32", "shape5-0-float64"},
    "test_numeric_cpu.py::test_rms_norm": {"sx0-float32", "sx2-float64"},
    "test_numeric_cpu.py::test_nan_propagates_through_max_and_min": {"-1"},
    "test_aot_backend.py::test_matches_numba_backend": {"add_reduce_sum-float64-10", "softmax-float32-3",
                                                        "bias_gelu-float16-4", "add_mul_div-float32-5"},
    "test_aot_backend.py::test_workspace_sizes": {"add_reduce_sum", "add_mul_div", "softmax", "layer_norm"},
    "test_requests.py::test_accumulate_into_a_reduction": {"numba-0-False", "aot-0-False", "aot-1-True",
                                                           "aot--1-False"},
    "test_requests.py::test_accumulate_adds_every_output_in_one_pass": {"numba-shape0", "aot-shape0", "aot-shape1"},
    "test_requests.py::test_inplace_softmax_overwrites_its_input": {"numba-shape0", "aot-shape0", "aot-shape1"},
    "test_grad.py::test_sum_to_and_cast_like": {"like_shape0-numba", "like_shape1-aot", "like_shape8-numba"},
    "test_vmath.py::test_float32_sweep_matches_numpy": {"numba-exp", "aot-tanh"},
    "test_perf_ops.py::test_rows_match_numpy": {"sigmoid-numba", "sigmoid-aot", "adam_step-numba", "adam_step-aot",
                                                "user_layer_norm-numba", "user_bias_gelu_tanh-numba",
                                                "user_bias_gelu_tanh-aot", "user_softmax-numba"},
    "test_gathers.py::test_take_ranks_and_size0": {"xshape0-ishape0", "xshape1-ishape1", "xshape3-ishape3"},
    "test_gathers.py::test_take_dtypes": {"int8-uint8"},
    "test_gathers.py::test_take_along_axis_grad_accumulates_repeats": {"3000"},
    "test_complex.py::test_zero_rank_size_zero_and_broadcasting": {"xs0-ys0", "xs1-ys1"},
    "test_percall_benchmark.py::test_call_at_4x5": {"add_reduce_sum-numba", "add_reduce_sum-aot", "layer_norm-numba",
                                                    "bias_gelu-numba", "bias_gelu-aot", "adam_step-numba"},
}


@pytest.hookimpl(tryfirst=True)   # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    seen: dict[str, set] = {}
    for item in items:
        base, _, case = item.nodeid.rpartition("/")[2].partition("[")
        keep = DEFAULT_CASES.get(base)
        if keep is not None and case:
            seen.setdefault(base, set()).add(case[:-1])
            if case[:-1] not in keep and item.get_closest_marker("slow") is None:   # slow stays slow
                item.add_marker(pytest.mark.extended)
    # A renamed case would silently leave its test without a default representative. Checked
    # when whole files are collected (not for a node id, -k, --lf or --deselect: a subset).
    subset = (any("::" in a for a in config.args) or config.getoption("keyword")
              or config.getoption("lf", False) or config.getoption("deselect", None))
    for base, cases in seen.items():
        if DEFAULT_CASES[base] - cases and not subset:
            raise pytest.UsageError(f"tests/conftest.py DEFAULT_CASES[{base!r}] names cases that do not exist: "
                                    f"{sorted(DEFAULT_CASES[base] - cases)}")
