"""Layer (b): the generated Numba source, checked with targeted regex/substring asserts (no golden
files). Most tests generate the source of each fused group with ``lower_cpu.compile_group``,
which writes and imports it but does not JIT it (Numba compiles lazily, on the first call), so
they cost no compilation. The tests that need the runtime's own choices (``prange`` above
``runtime.PARALLEL_THRESHOLD``) and Numba's on-disk cache run real kernels.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import fusegen as fg
import fusegen.examples as ex
from fusegen import lower_cpu, runtime
from fusegen.plan import build_plan, schedule

from conftest import assert_close, np_ref, sample

ALLOC = re.compile(r"np\.(empty|zeros|ones|full)(_like)?\(")


def group_kernels(op, dtypes, shapes, *, parallel=False, split=False, **attrs):
    """One ``lower_cpu.GroupKernel`` (source, path, lazy dispatcher) per fused group."""
    plan = build_plan(op)
    spec = fg.infer(op, dtypes, shapes, op.bind_attrs(attrs))
    return [lower_cpu.compile_group(plan, spec, run, parallel, split) for run in schedule(plan, spec)]


def source(op, dtypes, shapes, **attrs) -> str:
    (gk,) = group_kernels(op, dtypes, shapes, **attrs)
    return gk.source


def allocations(src: str) -> list[str]:
    return [line.strip() for line in src.splitlines() if ALLOC.search(line)]


def kernel_args(src: str) -> list[str]:
    m = re.search(r"^def kernel\((.*)\):$", src, re.M)
    assert m, src
    return [a.strip() for a in m.group(1).split(",")]


# =============================================================================================
# No temporaries; row mode vs col mode
# =============================================================================================
def test_add_reduce_sum_row_mode_never_materializes_x_plus_y():
    src = source(ex.add_reduce_sum, ["float32"] * 2, [(3, 4)] * 2, axis=1)
    assert "of op add_reduce_sum, row mode" in src
    assert kernel_args(src) == ["x0", "x1", "out0", "meta"]   # no workspace operand
    assert allocations(src) == []                            # no array at all: scalar accumulator
    assert re.search(r"^\s+acc0 = np\.float32\(0\.0\)$", src, re.M)
    m = re.search(r"^\s+(s0_\d+) = \(v_x0\[ri\] \+ v_x1\[ri\]\)$", src, re.M)
    assert m, src                                            # x + y is a register value...
    assert re.search(rf"^\s+acc0 \+= {m.group(1)}$", src, re.M)  # ...summed at once
    assert re.search(r"out0_\[b_out0\] = r0", src)


def test_add_reduce_sum_col_mode_allocates_only_the_accumulator_tile():
    src = source(ex.add_reduce_sum, ["float32"] * 2, [(3, 4)] * 2, axis=0)
    assert "of op add_reduce_sum, col mode" in src
    assert kernel_args(src) == ["x0", "x1", "out0", "meta"]
    assert allocations(src) == ["acc0 = np.full(n, np.float32(0.0), dtype=np.float32)"]
    m = re.search(r"^\s+(s0_\d+) = \(v_x0\[i\] \+ v_x1\[i\]\)$", src, re.M)
    assert m, src
    assert re.search(rf"^\s+acc0\[i\] \+= {m.group(1)}$", src, re.M)
    assert "for i in range(n):" in src


@pytest.mark.parametrize("shape, axis", [((5,), 0), ((3, 4), 0), ((3, 4), 1), ((2, 3, 4), 0), ((2, 3, 4), 1),
                                         ((2, 3, 4), 2), ((2, 3, 4), -1), ((2, 3, 2, 3), 2), ((2, 3, 2, 3), 3)])
def test_mode_is_chosen_per_axis(shape, axis):
    src = source(ex.add_reduce_sum, ["float32"] * 2, [shape] * 2, axis=axis)
    mode = "row" if axis % len(shape) == len(shape) - 1 else "col"
    assert f"of op add_reduce_sum, {mode} mode" in src
    if mode == "row":
        assert "for ri in range(" in src and allocations(src) == []
        assert "acc0[i]" not in src
    else:
        assert allocations(src) == ["acc0 = np.full(n, np.float32(0.0), dtype=np.float32)"]
        assert "acc0[i] +=" in src


@pytest.mark.parametrize("axis, mode", [(-1, "row"), (0, "col"), (1, "col")])
def test_softmax_is_one_function_and_computes_exp_once(axis, mode):
    src = source(ex.softmax, ["float32"], [(3, 4, 5)], axis=axis)
    assert f"# stages 0, 1, 2 of op softmax, {mode} mode" in src
    assert src.count("def kernel(") == 1
    assert sorted(kernel_args(src)) == ["meta", "out0", "ws0", "ws1", "x0"]  # max and sum: workspaces
    # exp(x - max) feeds the sum and the output: the sum's loop stores it in the output, and the
    # output stage scales what it stored (plan.shared), so one exp per element in every mode
    assert src.count("_exp_f32(") == 1  # float32: fusegen.vmath's exp
    # ... by the sum's reciprocal (plan.exprs.ExprWriter._quotient): once per row in row mode
    # (hoisted before the loop), per element in col mode (the sum changes along the loop)
    recip = re.search(r"^( *)(s2_\d+) = \(np\.float32\(1\.0\) / (s_ws1|v_ws1\[i\])\)$", src, re.M)
    assert recip and (recip.group(3) == "s_ws1") == (mode == "row"), src
    if mode == "row":   # before the row's loop, at its depth
        assert re.match(rf"{recip.group(1)}for ri in range", src[recip.end() + 1:]), "hoisted in row mode"
    assert re.search(rf"s2_\d+ = \(v_out0\[r?i\] \* {recip.group(2)}\)", src), \
        "the output stage reads the stored exp back"
    # the max: row mode folds with llvm.maximum, which LLVM vectorizes as a reduction (NaN
    # still wins); col mode's loop across the tile is elementwise and vectorizes with _fmax
    assert ("_fg_maximum(acc0" if mode == "row" else "_fmax(acc0") in src
    assert "acc0 +=" in src or "acc0[i] +=" in src
    expected = [] if mode == "row" else [
        "acc0 = np.full(n, np.float32(float('-inf')), dtype=np.float32)",
        "acc0 = np.full(n, np.float32(0.0), dtype=np.float32)"]
    assert allocations(src) == expected


def test_layer_norm_finishes_rstd_in_the_reduction_epilogue():
    src = source(ex.layer_norm, ["float32"], [(4, 8)], axis=-1)
    assert "stages 0, 1, 2 of op layer_norm, row mode" in src
    # output 2 (rstd) is computed once per row, right after the variance loop (task level, 8
    # spaces), not in an elementwise pass of its own; output 1 (mean) is written with its workspace
    m = re.search(r"^        (f1_\d+) = \(np\.float32\(1\.0\) / np\.sqrt\(f1_\d+\)\)\n"
                  r"        out2_\[b_out2\] = \1$", src, re.M)
    assert m, src
    assert re.search(r"^        out1_\[b_out1\] = r0\n        ws0_\[b_ws0\] = r0$", src, re.M)
    assert sum(a.startswith("ws") for a in kernel_args(src)) == 2
    assert allocations(src) == []
    assert "a_eps" in kernel_args(src)


def test_norm_statistics_are_one_pass_however_the_square_is_spelled():
    """A variance centered on a mean of the same row (d * d, d ** 2; layer_norm, the user-written
    layer norm, group_norm through its reshape) is summed in the mean's pass, shifted by a pivot
    (fusegen.plan.moments): two loops over the row (statistics, output), not three."""
    from fusegen.bench.variants import user_layer_norm
    for op, args, shapes in ((ex.layer_norm, ["float32"], [(4, 8)]),
                             (user_layer_norm, ["float32"] * 3, [(4, 8), (8,), (8,)]),
                             (ex.group_norm, ["float32"] * 3, [(2, 4, 2, 2), (4,), (4,)])):
        src = "\n".join(gk.source for gk in group_kernels(op, args, shapes, **({"groups": 2} if op is ex.group_norm
                                                                                else {})))
        assert "and stage 1, its centered mean of squares, in the same pass" in src, op.name
        assert src.count("for ri in range(") == 2, src
        assert re.search(r"^ +dv0 = .* - piv0\n +acc0 \+= dv0\n +acc1 \+= dv0 \* dv0$", src, re.M), src
        assert "_fmax(acc1 / np.float32(count) - mq0 * mq0, np.float32(0.0))" in src
    # dropout then layer norm: the stage writing h between the mean and the variance does not
    # keep them apart, and the pivot is h at the row's first element, from the same random numbers
    k = fg.compile(ex.dropout_add_layer_norm)
    k(*(np.ones(s, np.float32) for s in [(4, 8), (4, 8), (8,), (8,)]))
    src = k.source
    assert "and stage 2, its centered mean of squares, in the same pass" in src
    assert src.count("for ri in range(r_hi - r_lo):") == 3 and "for ri in range(min(1, r_hi - r_lo)):" in src, src
    # a variance of another mean (not of the same values) keeps its own pass
    @fg.op
    def other(x, y):
        return fg.mean((x - fg.mean(y, axis=-1, keep_dims=True)) ** 2, axis=-1)

    src = "\n".join(gk.source for gk in group_kernels(other, ["float32"] * 2, [(4, 8)] * 2))
    assert "piv" not in src and src.count("for ri in range(") == 2


def test_center_without_keep_dims_on_square_input_is_two_functions():
    @fg.op
    def center(x):
        return x - fg.mean(x, axis=1)

    gks = group_kernels(center, ["float64"], [(4, 4)])
    assert len(gks) == 2
    assert "mean reduction" in gks[0].source and "output 0" not in gks[0].source
    assert "output 0" in gks[1].source and "reduction" not in gks[1].source.split("def kernel")[1]
    assert gks[0].path != gks[1].path


# =============================================================================================
# Operand specialization: unit, broadcast (0) and general strides; attributes; float16
# =============================================================================================
@fg.op
def scale_rows(x, y):
    return x * y


def test_broadcast_operand_is_a_scalar_load_and_unit_stride_a_view():
    src = source(scale_rows, ["float32"] * 2, [(4, 8), (4, 1)])
    assert "col mode" in src
    assert re.search(r"^\s+s_x1 = x1_\[", src, re.M)          # stride 0 on the hot loop: one load
    assert "v_x1" not in src
    assert re.search(r"^\s+v_x0 = _fg_row\(x0_, [^\n]*\)$", src, re.M)  # unit stride: a row view
    assert re.search(r"\(v_x0\[i\] \* s_x1\)", src)


def test_non_unit_reduction_stride_is_read_from_meta():
    src = source(ex.add_reduce_sum, ["float32"] * 2, [(3, 4)] * 2, axis=0)
    assert re.search(r"x0_sri = meta\[", src)
    assert re.search(r"_fg_row\(x0_, c_x0 \+ ri \* x0_sri\)", src)


def test_attributes_are_arguments_not_constants():
    a = group_kernels(ex.smooth_l1, ["float32"] * 2, [(4, 6)] * 2, sigma=1.0)
    b = group_kernels(ex.smooth_l1, ["float32"] * 2, [(4, 6)] * 2, sigma=2.5)
    assert kernel_args(a[0].source) == ["x0", "x1", "out0", "meta", "a_sigma"]
    assert "2.5" not in b[0].source and "a_sigma * a_sigma" in b[0].source.replace("(", "").replace(")", "")
    assert a[0].source == b[0].source and a[0].path == b[0].path and a[0].func is b[0].func


def test_float16_is_computed_in_float32_registers():
    src = source(ex.add_reduce_sum, ["float16"] * 2, [(3, 4)] * 2, axis=1)
    assert src.splitlines()[0] == (f"# Generated by fusegen {fg.__version__} from op 'add_reduce_sum' "
                                   "(float16, float16). Do not edit: regenerate instead.")
    body = src.split("\ndef kernel", 1)[1]
    assert "float16" not in body and "np.float32(0.0)" in body


def test_integer_sum_accumulates_in_int64():
    src = source(ex.add_reduce_sum, ["int8"] * 2, [(3, 4)] * 2, axis=1)
    assert re.search(r"^\s+acc0 = 0$", src, re.M)           # an int64 literal
    # NumPy semantics: x + y wraps in int8, then the sum widens to int64
    m = re.search(r"^\s+(s0_\d+) = np\.int8\(\(v_x0\[ri\] \+ v_x1\[ri\]\)\)$", src, re.M)
    assert m, src
    assert re.search(rf"^\s+acc0 \+= np\.int64\({m.group(1)}\)$", src, re.M)


def test_source_names_what_generated_it():
    src = source(ex.softmax, ["float64"], [(2, 3)])
    lines = src.splitlines()
    assert lines[0] == (f"# Generated by fusegen {fg.__version__} from op 'softmax' (float64). "
                        "Do not edit: regenerate instead.")
    assert "from numba import prange" in src and "import numpy as np" in src
    assert re.search(r"# stage 0: max reduction", src) and re.search(r"# stage 2: output 0", src)


# =============================================================================================
# The source file: a real .py under the cache dir, content-addressed
# =============================================================================================
def test_source_is_written_to_a_content_addressed_file_under_the_cache_dir():
    (gk,) = group_kernels(ex.bias_gelu, ["float32"] * 2, [(4, 8), (8,)])
    path = Path(gk.path)
    root = Path(os.environ["FUSEGEN_CACHE_DIR"]).resolve()
    assert path.resolve().is_relative_to(root / "numba")
    assert re.fullmatch(r"fusegen_k_[0-9a-f]{20}\.py", path.name)
    assert path.read_text() == gk.source
    assert gk.func.py_func.__code__.co_filename == str(path)   # Numba sees a real file: cacheable
    again = group_kernels(ex.bias_gelu, ["float32"] * 2, [(4, 8), (8,)])[0]
    assert again.path == gk.path and again.func is gk.func
    other = group_kernels(ex.bias_gelu, ["float64"] * 2, [(4, 8), (8,)])[0]
    assert other.path != gk.path


def test_dispatcher_options():
    (gk,) = group_kernels(ex.add_reduce_sum, ["float32"] * 2, [(3, 4)] * 2)
    from numba.core.caching import FunctionCache
    assert isinstance(gk.func._cache, FunctionCache)      # cache=True: an on-disk cache
    opts = gk.func.targetoptions
    assert opts["nogil"] is True and opts["error_model"] == "numpy"
    fastmath = set(opts["fastmath"])
    assert "reassoc" in fastmath                 # several accumulators in float reductions
    # never 'nnan'/'ninf' (NaN semantics) nor 'contract' (recomputed values must be bit-identical)
    assert not fastmath & {"nnan", "ninf", "contract", "fast"}
    assert not opts.get("parallel")
    (par,) = group_kernels(ex.add_reduce_sum, ["float32"] * 2, [(3, 4)] * 2, parallel=True)
    assert par.func.targetoptions["parallel"] is True
    assert "for t in prange(ntasks):" in par.source and par.path != gk.path


# =============================================================================================
# The runtime's choices, on real kernels: range vs prange, split reductions, kernel.source
# =============================================================================================
LARGE = (runtime.PARALLEL_THRESHOLD // 256 + 8, 256)
needs_threads = pytest.mark.skipif(runtime._num_threads() < 2, reason="needs 2 or more threads: a machine with 2+ cores, NUMBA_NUM_THREADS unset or >= 2")


def test_small_inputs_run_plain_range_and_kernel_keeps_the_source(rng):
    k = fg.compile(ex.add_reduce_sum)
    assert k.source.startswith("# no call yet")
    x = sample(rng, (6, 5), "float32")
    assert_close(k(x, x, axis=1), np.sum(x + x, axis=1))
    src = k.source
    assert "for t in range(ntasks):" in src and "prange(" not in src
    (grp,) = k._last.groups
    path = Path(grp.func.py_func.__code__.co_filename)
    assert path.read_text() == src and path.suffix == ".py"
    assert not grp.func.targetoptions.get("parallel")
    if not os.environ.get("NUMBA_CACHE_DIR"):  # Numba's index and object files sit beside it
        stem = path.stem
        cached = {p.suffix for p in (path.parent / "__pycache__").glob(f"{stem}.*")}
        assert {".nbi", ".nbc"} <= cached


@needs_threads
def test_large_inputs_run_prange(rng):
    k = fg.compile(ex.add_reduce_sum)
    x, y = sample(rng, LARGE, "float32"), sample(rng, LARGE, "float32")
    assert x.size >= runtime.PARALLEL_THRESHOLD
    # reduce the last axis: many rows, one task per row block
    assert_close(k(x, y, axis=1), np_ref(lambda a, b: np.sum(a + b, axis=1), x, y), rtol=1e-4, atol=1e-4)
    assert "for t in prange(ntasks):" in k.source and "row mode" in k.source
    assert k._last.groups[0].func.targetoptions["parallel"] is True
    assert allocations(k.source) == []
    # reduce the leading axis: few outputs, the reduced dim is split into per-task partial rows
    assert_close(k(x, y, axis=0), np_ref(lambda a, b: np.sum(a + b, axis=0), x, y), rtol=1e-4, atol=1e-4)
    src = k.source
    assert "for t in prange(ntasks):" in src and "col mode" in src
    for line in allocations(src):  # accumulators only: never an array over the (RI x I) domain
        assert re.fullmatch(r"part0 = np\.empty\(\(ntasks, max\(I, 1\)\), dtype=np\.float32\)|"
                            r"acc0 = np\.full\(n, .*\)", line), line


# =============================================================================================
# Numba's on-disk cache works across processes
# =============================================================================================
CACHE_PROBE = """
import json, sys, time
import numpy as np
import fusegen as fg

@fg.op
def cache_probe_op(x, y, *, k: float = 3.0):
    return fg.sum(x * k - y, axis=-1)

t0 = time.perf_counter()
kern = fg.compile(cache_probe_op)
r = kern(np.ones((3, 4), np.float32), np.ones((3, 4), np.float32))
first = time.perf_counter() - t0
(grp,) = kern._last.groups
st = grp.func.stats
print(json.dumps(dict(hits=sum(st.cache_hits.values()), misses=sum(st.cache_misses.values()),
                      result=r.tolist(), first=first, file=grp.func.py_func.__code__.co_filename)))
"""


# Run first in the probe process: compile with other Numba options than fusegen passes (as an
# older or newer fusegen would), by rewriting njit's fastmath argument.
# (patched where the module builder reads them: fusegen.lower.cpu_module, which lower_cpu re-exports)
OTHER_JIT_OPTIONS = """
import fusegen.lower.cpu_module as _M
_M.JIT_OPTIONS = dict(_M.JIT_OPTIONS, fastmath={"reassoc", "contract", "arcp"})
"""


def _run_probe(cache: Path, prefix: str = "") -> dict:
    env = dict(os.environ, FUSEGEN_CACHE_DIR=str(cache))
    env.pop("NUMBA_DISABLE_JIT", None)
    out = subprocess.run([sys.executable, "-c", prefix + textwrap.dedent(CACHE_PROBE)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_new_process_loads_kernels_from_numbas_disk_cache(tmp_path):
    cache = tmp_path / "cache"
    first = _run_probe(cache)    # compiles and writes the source, .nbi and .nbc
    second = _run_probe(cache)   # a new process: same source file, loads the machine code
    assert first["result"] == second["result"] == [8.0, 8.0, 8.0]
    assert first["file"] == second["file"] and Path(first["file"]).is_relative_to(cache)
    assert first["misses"] >= 1 and first["hits"] == 0
    assert second["hits"] >= 1 and second["misses"] == 0
    if not os.environ.get("NUMBA_CACHE_DIR"):
        stem = Path(first["file"]).stem
        assert list((cache / "numba" / "__pycache__").glob(f"{stem}*.nbi"))
        assert list((cache / "numba" / "__pycache__").glob(f"{stem}*.nbc"))


def test_machine_code_cached_under_other_jit_options_is_not_reused(tmp_path):
    cache = tmp_path / "cache"
    other = _run_probe(cache, OTHER_JIT_OPTIONS)   # e.g. what a previous fusegen version cached
    assert other["misses"] >= 1
    now = _run_probe(cache)
    assert now["hits"] == 0, "loaded machine code compiled with other fastmath flags"


@fg.op
def row_max_min(x):
    return fg.max(x, axis=-1), fg.min(x, axis=-1)


@pytest.mark.parametrize("backend", ["numba", pytest.param("aot", marks=pytest.mark.extended)])
def test_vectorized_row_max_keeps_numpys_nans(backend):
    """Row-mode max and min fold in vector lanes (llvm.maximum in Numba; in C++ a kept lane loop
    g++ vectorizes): a NaN anywhere in the row (first, in the vector part, in the tail) still
    wins, and infinities order as in NumPy."""
    x = np.random.default_rng(7).standard_normal((9, 70)).astype(np.float32)
    x[0, 0] = x[1, 20] = x[2, 69] = np.nan
    x[3] = -np.inf
    x[4, 5], x[4, 50] = np.inf, -np.inf
    x[5, :] = np.nan
    x[6, 33] = np.nan
    x[6, 34] = np.inf
    x[7, :] = -np.inf
    x[7, 66] = np.nan
    k = fg.compile(row_max_min, backend=backend)
    for a in (x, x.astype(np.float64)):
        got_max, got_min = k(a)
        np.testing.assert_array_equal(got_max, a.max(axis=-1))
        np.testing.assert_array_equal(got_min, a.min(axis=-1))
