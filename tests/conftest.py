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


def ulps_apart(a, b) -> np.ndarray:
    """How many floats of their dtype lie between ``a`` and ``b`` (0 where equal, +0 and -0 equal),
    elementwise, for finite values: the integer views mapped to a monotone order."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.dtype.kind == "f"
    it = np.int32 if a.dtype == np.float32 else np.int64
    low = np.iinfo(it).min

    def order(v):
        i = v.view(it).astype(np.int64)
        return np.where(i < 0, low - i, i)
    return np.abs(order(a) - order(b))


def ulp_error(got, exact) -> np.ndarray:
    """|got - exact| in units of the last place of ``got``'s dtype at ``exact`` (float64 or
    longdouble: a reference with more digits than ``got``)."""
    got = np.asarray(got)
    scale = np.spacing(np.abs(exact).astype(got.dtype)).astype(np.longdouble)
    return (np.abs(got.astype(np.longdouble) - np.asarray(exact, np.longdouble)) / scale).astype(np.float64)


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
    # The skips by reason, always (not only under -rs): a newcomer's run skips what needs an extra
    # they have not installed, and each reason names what to install.
    reasons: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", ()):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    if reasons:
        terminalreporter.write_sep("-", f"{sum(reasons.values())} skipped, by reason")
        for reason, count in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])):
            terminalreporter.write_line(f"{count:5d}  {reason}")


# --- the default run's representatives ----------------------------------------------------------
# The default run must cover every backend and every public function within 5 minutes on two
# cold cores, and nearly all of its time is compiling (Numba groups, g++ builds). For these
# parametrized tests it takes the cases listed here (each backend and each function still run at
# least once); their other cases, the dtype/shape/backend matrix, carry the `extended` marker,
# which CI runs as a step of its own (`pytest -m extended`). One table, so the trade is visible.
DEFAULT_CASES = {
    # (each function and each float dtype once on Numba; the AOT library builds both of binary_f's dtypes at once)
    "test_elementwise.py::test_float_functions_match_numpy": {"unary_a-float32-numba", "unary_a-float16-numba",
                                                               "unary_b-float64-numba", "binary_f-float32-numba",
                                                               "binary_f-float32-aot", "binary_f-float64-aot"},
    "test_grad.py::test_reference_op_gradients_match_finite_differences": {"add_mul_div-3-numba"},
    "test_layout_backends.py::test_layout_cases_against_numpy": {"generic-numba-quick", "per_rank-aot-quick",
                                                                  "generic-xla-quick", "per_rank-xla-quick"},
    "test_abi_emit.py::test_compiles_warning_free": {"layer_norm-mindspore"},
    "test_numeric_cpu.py::test_binary_ops_with_broadcasting": {"float32-float32", "int8-int8", "uint8-int8"},
    "test_numeric_cpu.py::test_unary_ops": {"float32", "int8"},
    "test_numeric_cpu.py::test_broadcasting_ranks_and_sizes": {"sx2-sy2", "sx7-sy7"},
    "test_numeric_cpu.py::test_python_scalars_and_scalar_attributes": {"int8", "float32"},
    "test_numeric_cpu.py::test_reductions_dtypes_row_mode": {"float32", "bool"},
    "test_numeric_cpu.py::test_reductions_dtypes_col_mode": {"float32"},
    "test_numeric_cpu.py::test_layer_norm_every_axis": {"shape0-0-float32", "shape5--1-float16"},
    "test_numeric_cpu.py::test_softmax_every_axis": {"shape0-0-float32", "shape1-1-float32", "shape2-2-float32",
                                                      "shape3--1-float32", "shape4--3-float32", "shape5-0-float64"},
    "test_numeric_cpu.py::test_rms_norm": {"sx0-float32", "sx2-float64"},
    "test_numeric_cpu.py::test_nan_propagates_through_max_and_min": {"-1"},
    "test_aot_backend.py::test_matches_numba_backend": {"add_reduce_sum-float64-10", "bias_gelu-float16-4"},
    "test_aot_backend.py::test_workspace_sizes": {"add_reduce_sum", "add_mul_div", "softmax", "layer_norm"},
    "test_requests.py::test_accumulate_into_a_reduction": {"numba-0-False", "aot-0-False", "aot-1-True",
                                                           "aot--1-False"},
    "test_requests.py::test_accumulate_adds_every_output_in_one_pass": {"numba-shape0"},
    "test_requests.py::test_inplace_softmax_overwrites_its_input": {"numba-shape0", "aot-shape0", "aot-shape1"},
    "test_grad.py::test_sum_to_and_cast_like": {"like_shape0-numba", "like_shape1-aot"},
    "test_vmath.py::test_float32_sweep_matches_numpy": {"numba-exp"},
    "test_fusedmath.py::test_values_special_cases_and_agreement": {"numba"},
    "test_perf_ops.py::test_rows_match_numpy": {"sigmoid-numba", "adam_step-aot", "user_layer_norm-numba",
                                                "user_bias_gelu_tanh-numba", "user_softmax-numba"},
    "test_gathers.py::test_take_ranks_and_size0": {"xshape1-ishape1"},
    "test_gathers.py::test_take_dtypes": {"int8-uint8"},
    "test_gathers.py::test_take_along_axis_grad_accumulates_repeats": {"3000"},
    "test_complex.py::test_zero_rank_size_zero_and_broadcasting": {"xs1-ys1"},
    "test_percall_benchmark.py::test_call_at_4x5": {"add_reduce_sum-numba", "add_reduce_sum-aot", "layer_norm-numba",
                                                    "bias_gelu-numba"},
    # (each line below: the cases kept; what else the default run has of the same thing)
    "test_numeric_cpu.py::test_add_reduce_sum": {"shape0-0-False", "shape5-0-True", "shape7-1-True", "shape12-1-False",
                                                  "shape20-1-False", "shape27--1-True"},
    "test_numeric_cpu.py::test_where_and_astype": {"float32-int16-float16"},
    "test_numeric_cpu.py::test_reduction_axis_forms": {"-3-True", "None-True"},
    "test_numeric_cpu.py::test_reduction_axes_and_keep_dims_as_attributes": {"axes1-True"},
    "test_numeric_cpu.py::test_reductions_ranks_0_to_4": {"shape0-None", "shape2-axis2"},
    "test_numeric_cpu.py::test_reductions_over_size_0_dims": {"shape1-1-True"},
    "test_numeric_cpu.py::test_non_contiguous_inputs": {"float16"},
    "test_numeric_cpu.py::test_add_mul_div": {"int8-float32-sy3", "float16-float16-sy2"},
    "test_numeric_cpu.py::test_smooth_l1": {"None-float32", "3-float64"},
    "test_numeric_cpu.py::test_add_reduce_sum_dtypes": {"float16"},
    # AOT: the requests' C++ path runs in accumulate_into_a_reduction and inplace_softmax
    "test_requests.py::test_accumulate_some_outputs_and_skip_others": {"numba"},
    "test_requests.py::test_inplace_refusals": {"numba"},
    "test_requests.py::test_request_errors_are_clear": {"numba"},
    "test_requests.py::test_float16_outputs_accumulate_through_the_conversion": {"numba"},
    # AOT gradients: sum_to_and_cast_like[like_shape1-aot]
    "test_grad.py::test_every_rule_matches_finite_differences": {"elementwise-numba"},
    "test_grad.py::test_wrong_cotangent_shape_is_a_clear_error": {"numba"},
    "test_grad.py::test_max_ties_split_the_adjoint_evenly": {"numba"},
    # float32 scans: test_scan_stage.py
    "test_scans.py::test_scans_match_numpy": {"int8"},
    "test_scans.py::test_running_extremes_on_empty_axes": {"shape0-numba", "shape1-numba", "shape2-numba"},
    "test_scans.py::test_1d_dtype_and_logcumsumexp": {"6"},
    # the AOT twins: test_perf_ops[adam_step-aot], test_vmath's C++ stage loops, the AOT complex row
    "test_activations.py::test_activation_ops_match_the_bench_references": {"numba"},
    "test_elementwise.py::test_integer_functions_match_numpy_without_a_trap": {"numba-int32-int64"},
    "test_elementwise.py::test_ranks_sizes_and_scalars": {"rank0-numba", "rank3-size0-numba"},
    "test_vectorize.py::test_emitted_hot_loops_are_vectorized": {"softmax"},
    "test_vmath.py::test_numba_loop_is_vectorized_without_libm_calls": {"tanh"},
    "test_vmath.py::test_cpp_stage_loops_are_vectorized_without_libm_calls": {"sigmoid"},
    "test_vmath.py::test_every_float16_value": {"numba-exp"},
    "test_numeric_cpu.py::test_division_by_a_row_value_keeps_numpys_special_values": {"float32"},
    # (the C++ twin of the sigmoid's one-ulp cases: test_vmath's C++ stage loops and ulp_table.py)
    "test_vmath.py::test_sigmoid_is_within_one_ulp_where_the_float32_formula_is_not": {"numba"},
    "test_vmath.py::test_sigmoid_is_its_float32_formula_with_a_correctly_rounded_exp": {"numba"},
    # (the Numba complex functions: test_complex's zero-rank, size-0 and broadcasting case)
    "test_complex.py::test_functions_match_numpy_and_the_standards_tables": {"aot-binary-complex128"},
    # MindSpore's flags: one library (add_reduce_sum's, shared with test_mindspore_flags_build_command)
    "test_aot_backend.py::test_mindspore_flags_match_numpy": {"add_reduce_sum-7+7-axis=0",
                                                             "add_reduce_sum-3x1+1x4-axis=1-keep_dims=True",
                                                             "add_reduce_sum-2x3x4x5+1x5-axis=-4-keep_dims=True",
                                                             "add_reduce_sum-0x4+0x4-axis=0",
                                                             "add_reduce_sum-400x400+400x400-axis=0"},
    "test_searching.py::test_searchsorted": {"float64"},
    # (every error code's message comes from the one generated table; these three build libraries
    # of their own, and run under -m extended)
    "test_aot_backend.py::test_error_code": {"nparam", "dtype-init", "dtype-output", "rank", "broadcast", "axis",
                                             "out-shape", "not-initialized", "null-extra", "attr-missing",
                                             "attr-wrong-type", "workspace", "unknown-dim", "unknown-rank",
                                             "empty-reduction"},
    "test_aot_backend.py::test_infer_shape_matches_python_rules": {"add_reduce_sum", "add_mul_div", "smooth_l1",
                                                                    "softmax", "layer_norm"},
    "test_engine.py::test_random_dags_keep_raw_war_waw_order": {"0", "3"},
    "test_engine.py::test_random_dags_skip_exactly_the_dependents_of_failures": {"0", "1"},
    "test_bad_input.py::test_unusual_but_valid_inputs_work": {"read-only-numba", "read-only-strided-aot", "rank0-numba",
                                                                "rank0-aot", "size0-both-numba", "size0-broadcast-aot",
                                                                "transposed-aot", "negative-stride-numba"},
    "test_aot_backend.py::test_non_contiguous_inputs": {"bias_gelu-strided", "add_reduce_sum-transposed",
                                                        "softmax-reversed", "layer_norm-strided"},
}

#: Whole tests the default run leaves to `pytest -m extended` (leak and stress cycles, and checks
#: whose substance another default test already runs: named after each).
EXTENDED_TESTS = {
    # 2026-11-29: the default run measured 257-334 s cold on 2 cores (the host's CPU-s varied
    # 483-628 for the same tests): these 5-11 s checks (Numba compiles, g++ builds, subprocesses)
    # run in CI's extended step only
    "test_layout_ops.py::test_more_than_thirty_two_dims_are_refused_by_name",
    "test_scans_emitted.py::test_infer_shape_with_unknown_dims",
    "test_gathers_fast_cpp.py::test_max_and_min_rows_fold_several_lane_groups",
    "test_lower_cpu.py::test_large_inputs_run_prange",
    "test_aot_backend.py::test_a_warm_start_loads_the_built_kernel_without_emitting",
    "test_methods.py::test_numpy_methods_match_numpy",
    "test_gathers.py::test_gathers_from_pieces_iotas_and_modular_views",
    "test_share_common.py::test_values_and_shapes_stay_numpys",
    "test_attr_bridges.py::test_attribute_names_the_generated_cpp_uses_or_reserves",
    # 2026-11-29 (session 37): the default run measured 249 s cold (490 CPU-s) with this session's
    # new checks; these two 5-7 s compiles keep it clear of the 5 minutes
    "test_gathers.py::test_a_list_of_ints_indexes_as_numpy_does",
    "test_scan_stage.py::test_logcumsumexp_gradient_through_leading_minus_infinities",
    # leak and stress runs (the issue lets them sit behind a marker)
    "test_reliability.py::test_aot_kernel_create_call_close_cycles",
    "test_reliability.py::test_numba_kernel_create_call_drop_cycles",
    "test_reliability.py::test_kernel_data_destructor_runs",
    "test_aot_backend.py::test_concurrent_compiles_of_one_emitted_op",     # test_build's concurrent builds
    # nvcc: test_compile_aot_cuda_builds_with_nvcc..., the layout, views and random .cu compiles
    "test_cuda_codegen.py::test_every_emitted_cu_compiles_with_nvcc",
    "test_cuda_codegen.py::test_aot_kernel_takes_its_device_from_the_library",
    # gradients: test_grad's every-rule and reference-op checks
    "test_grad.py::test_float32_gradients_keep_their_dtype_and_agree_with_float64",
    "test_elementwise.py::test_gradients_match_central_differences",
    # one substance each: the random fills (test_numba_cpu_equals_the_reference...), fusion decisions
    # (test_plan, test_numeric_cpu's softmax/layer_norm), empty axes (test_reductions_over_size_0_dims)
    "test_random_ops.py::test_buffers_shared_by_stages_hold_the_right_rows",
    "test_numeric_cpu.py::test_unfusable_and_fusable_centering_on_a_square_input",
    "test_numeric_cpu.py::test_reduction_with_empty_axes_list_is_the_identity_reduction",
    "test_searching.py::test_ranks",                                       # test_searching_fused
    "test_activations.py::test_gcc_vectorizes_the_float32_stage_loops",   # test_vmath's gcc check
    "test_reliability.py::test_aot_kernel_dropped_without_close_is_unloaded",
    # nvcc builds of the emitted .cu beyond test_cuda_codegen's and the layout/random ones
    "test_gathers_emitted.py::test_cuda_gathers_build_with_nvcc",
    # the C++ twins: test_philox::test_cpp_kat; vectorization: test_vmath's C++ stage-loop check
    "test_philox.py::test_cpp_and_numba_agree_on_a_large_array",
    "test_philox.py::test_cpp_block_loops_vectorize",
    "test_vmath.py::test_gcc_vectorizes_every_loop_and_contracts_nothing",
    "test_lower_cpu.py::test_machine_code_cached_under_other_jit_options_is_not_reused",  # ...numbas_disk_cache
    "test_dimflow.py::test_major_reshapes_on_a_simulated_mesh",          # the layer_norm mesh test
    "test_dimflow.py::test_gradient_through_unreduce_and_a_product_on_a_simulated_mesh",
    "test_complex.py::test_each_backend_calls_the_complex_helpers",      # the complex functions' tables
    "test_elementwise.py::test_each_backend_spells_the_special_cases_with_its_helpers",
    "test_numeric_cpu.py::test_large_softmax",                           # test_lower_cpu's prange run
    # the emitted gather loops' values: test_gathers_emitted's AOT calls run the same loops
    "test_gathers_fast_cpp.py::test_every_index_dtype_and_negative_indices",
    "test_gathers_fast_cpp.py::test_non_contiguous_inputs",
    "test_gathers_fast_cpp.py::test_out_of_range_in_each_mode",
    "test_gathers_fast_cpp.py::test_size_zero",
    # the one-pass norm statistics: test_numeric_cpu's twin (Numba); the C++ pair runs in every
    # default AOT layer_norm call (test_aot_backend, test_perf_ops)
    "test_aot_backend.py::test_layer_norm_one_pass_statistics_do_not_cancel",
    # blocked scans: test_blocked_lines_every_kind_at_the_block_edges (the same loops, float64)
    "test_scan_stage.py::test_blocked_lines_integer_sums_are_exact",
    # layout adjoints against finite differences: test_grad_views::test_grad_of_an_op_traced_per_shape
    "test_grad_views.py::test_layout_adjoints_match_finite_differences",
    # the split loops' values: test_layout_backends' quick causal-softmax case (every backend)
    "test_layout_schedules.py::test_where_on_iotas_splits_the_loop_and_matches_numpy",
    # dtypes built on a call's first use: every default AOT test compiled without dtypes=
    "test_aot_backend.py::test_dtypes_a_call_brings_are_built_on_first_use",
    # the bench's checker refusing a wrong method: test_tiny_run_writes_a_complete_json's checks
    "test_bench.py::test_a_wrong_method_fails_the_bench",
    # the O(n) scan adjoints on a long line: test_scan_stage's adjoint rules on Numba; the
    # emitted scan stage runs in test_scans_emitted's other AOT calls
    "test_scans_emitted.py::test_o_n_adjoints_match_finite_differences",
    # the fused chains' C++ bits against Numba's: test_activations' default AOT mish and
    # bias_gelu values, and test_fusedmath's emitted-text check
    "test_fusedmath.py::test_numba_and_cpp_give_the_same_bits",
    # (a g++ build of its own; the emitted division by a row value runs in the default softmax ulp test)
    "test_aot_backend.py::test_division_by_a_row_value_keeps_numpys_special_values",
    # nvcc builds of an emitted .cu (5-10 s each): the default run keeps test_cuda_codegen's
    # (fg.compile's .cu of add_mul_div, every elementwise function as device code, the failed
    # launch); the layout and scan kernels' .cu text is the same emitter's, built here
    "test_layout_backends.py::test_emitted_layout_cu_compiles_with_nvcc",
    "test_scans_emitted.py::test_cuda_sources_compile",
    # a compile per random chain: test_views' 250 random chains run the same view rules without
    # one, and test_layout_backends' quick table compiles views, pieces and reshapes per backend
    "test_layout_ops.py::test_random_view_chains_match_numpy",
    # --- moved for the newcomer's 5-minute budget (2026-11-26: 455 s idle before), each the
    # costliest of its kind in a --durations run; what the default run keeps of the same check:
    # the row boxes (rope a row at a time): test_layout_backends' layout cases and row groups' text
    # (test_emitted_layout_fast_paths), test_bench's tiny run through rope
    "test_layout_schedules.py::test_boxes_run_a_row_at_a_time_and_match_numpy",
    # elementwise compositions with every reduction: test_property's random fused graphs
    "test_elementwise.py::test_compositions_and_reductions",
    # random numbers through views on Numba: test_philox's bit-identity of every kind, the AOT twin
    "test_random_ops.py::test_numba_cpu_equals_the_reference_through_views_and_reductions",
    # the emitted gathers' many-case library: test_gathers_fast_cpp, test_gathers (Numba), goldens
    "test_gathers_emitted.py::test_many_against_numpy",
    # differential fuzzing across backends: test_property (Numba against NumPy)
    "test_differential.py::test_backends_agree_with_numpy",
    # the bench's compile-time, AOT/XLA and per-row reference runs: its tiny Numba run;
    # cross_entropy and accuracy against NumPy: test_examples_i17
    "test_bench.py::test_compile_times_cold_and_warm",
    "test_bench.py::test_aot_and_xla_through_the_bench",
    "test_bench.py::test_rows_match_their_reference",
    # row groups' fusion rules: test_emitted_layout_fast_paths (text) and the layout cases
    "test_layout_backends.py::test_row_groups_fuse_only_aligned_stages",
    # one-pass norm statistics of every spelling: test_numeric_cpu's layer norms, user_layer_norm
    # in test_perf_ops
    "test_lower_cpu.py::test_norm_statistics_are_one_pass_however_the_square_is_spelled",
    # a damaged AOT cache entry rebuilt: test_build's cache keys and test_aot_backend's warm start
    "test_bad_input.py::test_truncated_aot_cache_entry_is_rebuilt",
    # float attributes as float64 through fusegen's host: the every_attr golden source and
    # test_aot_backend's attribute tests
    "test_aot_backend.py::test_float_attributes_keep_float64_through_fusegens_host",
    # the reference cumsum rows: test_scan_stage and test_scans (every kind, both axes)
    "test_examples_i17.py::test_cumsums",
    # (a second pass, measured on the newcomer's path at 312 s: the costliest left)
    # the emitted gathers' library behind three checks: test_gathers_fast_cpp's AOT gathers (every
    # index dtype, out of range in each mode: the same error code and message), test_layout_backends'
    # InferShape against fg.infer
    "test_gathers_emitted.py::test_out_of_range_index_raises_the_numba_message",
    "test_gathers_emitted.py::test_infer_shape_with_unknown_dims",
    # an emitted scan with include_initial over a middle axis: test_scans_emitted's AOT lines and
    # test_scans' include_initial on Numba
    "test_scans_emitted.py::test_aot_include_initial_and_middle_axis",
    # np.diff on Numba: test_layout_backends' slices and test_linalg's products (the same lowering)
    "test_linalg.py::test_diff_matches_numpy",
    # every elementwise function as CUDA device code through nvcc: test_cuda_codegen's nvcc build of
    # fg.compile's .cu and the failed launch; the functions' CUDA text in the golden .cu files
    "test_cuda_codegen.py::test_every_elementwise_function_compiles_as_device_code",
    # (a third pass: 317 s on the newcomer's path after the second)
    # the bench's tiny run over three rows (one run shared by four tests): `fusegen demo` (the
    # newcomer's own step and test_cli's demo) runs the same harness, and test_bench's judging,
    # report and CLI tests run on synthetic documents
    "test_bench.py::test_tiny_run_writes_a_complete_json",
    "test_bench.py::test_tiny_run_prints_tables_and_progress",
    "test_bench.py::test_tiny_run_writes_markdown",
    "test_bench.py::test_tiny_run_writes_the_chart",
    # the small-call extension's error path: test_aot_backend's error codes through the same table
    "test_small_calls.py::test_small_call_path_reports_kernel_errors",
    # InferShape of random layout shapes: test_aot_backend's InferShape of every reference op
    "test_layout_backends.py::test_emitted_infer_shape_matches_infer",
    # O(n) long scans and block edges: test_scan_stage's every kind on both axes, test_scans
    "test_scan_stage.py::test_a_long_axis_is_o_n",
    "test_scan_stage.py::test_blocked_lines_every_kind_at_the_block_edges",
    # the emitted gathers' wrap and clip: test_gathers_fast_cpp's out of range in each mode
    "test_gathers_emitted.py::test_wrap_and_clip_modes",
}


@pytest.hookimpl(tryfirst=True)   # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    seen: dict[str, set] = {}
    seen_whole: set[str] = set()
    for item in items:
        base, _, case = item.nodeid.rpartition("/")[2].partition("[")
        keep = DEFAULT_CASES.get(base)
        if base in EXTENDED_TESTS:
            seen_whole.add(base)
            if item.get_closest_marker("slow") is None:
                item.add_marker(pytest.mark.extended)
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
    files = {item.nodeid.rpartition("/")[2].partition("::")[0] for item in items}
    stale = {t for t in EXTENDED_TESTS - seen_whole if t.partition("::")[0] in files}
    if stale and not subset:
        raise pytest.UsageError(f"tests/conftest.py EXTENDED_TESTS names tests that do not exist: {sorted(stale)}")
