"""Scans (issue #17) in the emitted sources: the MindSpore-AOT ``.cc`` (``backend="aot"``) and the
XLA FFI handlers (``fusegen.jax.function``) run a scan as a stage of its own that carries the
running value along the scanned axis (O(n)), not as the masked O(n^2) composition. One library
per op, many outputs: every kind along the first and the last axis, and a middle axis (the row and
col modes of the carried loop), include_initial (the layout path), size-0 dims, a 0-d result
after a scan, one 100,000-long line; the generated text (a carry loop, no composition); the
generated InferShape with unknown dims; the ``.cu`` built by nvcc."""
from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

import fusegen as fg
from _optional import needs
from test_aot_backend import dynamic_variants
from test_layout_backends import _infer_shape


@fg.op
def lines(x):
    """Every kind along the first and the last axis (any rank >= 1): the fast stage path."""
    return (fg.cumulative_sum(x, axis=0), fg.cumulative_sum(x, axis=-1), fg.cumulative_prod(x, axis=0),
            fg.cummax(x, axis=0), fg.cummax(x, axis=-1), fg.cummin(x, axis=-1), fg.logcumsumexp(x, axis=0),
            fg.logcumsumexp(x, axis=-1), fg.sum(fg.cumulative_sum(x, axis=-1) * 2, axis=None))


@np.errstate(invalid="ignore")   # (NaN inputs)
def _lines_ref(x):
    f = x.astype(np.float64)
    return (np.cumsum(x, 0), np.cumsum(x, -1), np.cumprod(x, 0), np.maximum.accumulate(x, 0),
            np.maximum.accumulate(x, -1), np.minimum.accumulate(x, -1), np.logaddexp.accumulate(f, 0),
            np.logaddexp.accumulate(f, -1), np.asarray((np.cumsum(x, -1) * 2).sum()))


@fg.op
def initial(x):
    """include_initial (a concat: the layout path), the middle axis of a rank-3 input, a dtype, a
    scan of concat pieces."""
    return (fg.cumulative_sum(x, axis=1, include_initial=True), fg.cumulative_prod(x, axis=-1, include_initial=True),
            fg.cummin(x, axis=1), fg.cumulative_sum(x, axis=0, dtype="float64"),
            fg.cummax(fg.concat([x, x * 2], axis=1), axis=1))


def _init(r, axis, value):
    shape = list(r.shape)
    shape[axis] = 1
    return np.concatenate([np.full(shape, value, r.dtype), r], axis)


def _initial_ref(x):
    return (_init(np.cumsum(x, 1), 1, 0), _init(np.cumprod(x, -1), -1, 1), np.minimum.accumulate(x, 1),
            np.cumsum(x, 0, dtype=np.float64), np.maximum.accumulate(np.concatenate([x, x * 2], 1), 1))


def _close(got, want, what):
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        if k in (6, 7) and what.startswith("lines"):   # logcumsumexp: a float result of the input's width
            w = w.astype(g.dtype)
        assert g.shape == w.shape and g.dtype == w.dtype, f"{what}: output {k}: {g.shape} {g.dtype} != {w.shape} {w.dtype}"
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-5, atol=1e-5,
                                   err_msg=f"{what}: output {k}")


SHAPES = [(7,), (3, 5), (2, 3, 4), (0, 3), (3, 0), (1, 1)]


@needs("g++")
def test_generated_source_carries_the_running_value():
    src = fg.emit(lines, abi="mindspore-aot", device="cpu", dtypes="float32").source
    assert "scan sum" in src and "scan logaddexp" in src
    # the row mode: one scalar carry per line, stored at every step
    assert re.search(r"acc0 \+= s0_r0\(v0\[i\], a\);\n\s+w\d+\[i\] = float\(acc0\);", src)
    # the col mode: a carry per element of the tile, advanced a row at a time
    assert "float acc0[fg::kTile];" in src and re.search(r"a0\[i\] \+= s\d+_r0\(v0\[i\], a\);", src)
    assert "fg::fg_logaddexp(acc" in src
    # along the contiguous axis, a stage of one scan in blocks scanned side by side: independent
    # chains a0_0 .. a0_7, four steps of each stored as one
    src = fg.emit(pair, abi="mindspore-aot", device="cpu", dtypes="float32").source
    assert "if (m >= fg::kScanMin) {" in src and "a0_7 = fg::fg_logaddexp(a0_7, sv0[7][i + 3]);" in src
    assert "std::memcpy(&sv0[7][i], run, sizeof run);" in src
    # no composition: the op's text has no masks or iotas
    assert " iota " not in src and "where" not in src.split("kStageInfo")[0].split("fusegen's kernel runtime")[0]


@needs("g++")
@pytest.mark.parametrize("dtype", ["float64", pytest.param("int32", marks=pytest.mark.extended),
                                   pytest.param("float32", marks=pytest.mark.extended)])
def test_aot_lines_match_numpy(dtype):
    k = fg.compile(lines, backend="aot", dtypes=dtype)   # (one combination: one library to build)
    rng = np.random.default_rng(3)
    for shape in SHAPES:
        x = rng.integers(-3, 4, shape).astype(dtype)
        if dtype != "int32" and x.size:
            x.flat[x.size // 2] = np.nan if dtype == "float64" else x.flat[x.size // 2]
        _close(k(x), _lines_ref(x), f"lines {dtype} {shape}")


@needs("g++")
def test_aot_a_long_line_is_o_n():
    # 100,000 along one line: the composition reads 5e9 elements for this (minutes); a carry 1e5
    k = fg.compile(lines, backend="aot", dtypes="float64")   # test_aot_lines_match_numpy's library
    x = np.random.default_rng(4).standard_normal(100_000)
    got = k(x)
    np.testing.assert_allclose(got[1], np.cumsum(x), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got[4], np.maximum.accumulate(x))
    np.testing.assert_allclose(got[7], np.logaddexp.accumulate(x), rtol=1e-9)


@needs("g++")
def test_aot_few_long_lines_split_across_threads():
    # fewer lines than threads, each long: the two-pass scan (fg::run_scan_split) cuts each into
    # chunks (8 here, 20481 or 7501 long: odd, not a multiple of a piece), their totals, then each
    # chunk from its carry; row mode (1-d) and col mode (3 lines side by side). Integer values:
    # every sum, product, max and min is exact in float64, so a wrong carry or chunk edge shows
    k = fg.compile(lines, backend="aot", dtypes="float64")   # test_aot_lines_match_numpy's library
    src = fg.emit(lines, abi="mindspore-aot", device="cpu", dtypes="float64").source
    assert "run_scan_split<NOPS>(fns[first]" in src and "void carry0(" in src and "kCombines[kStages] = {carry0," in src
    rng = np.random.default_rng(11)
    for shape in [(163_841,), (60_007, 3)]:
        x = rng.integers(-3, 4, shape).astype(np.float64)
        got = k(x)
        for j in (0, 2, 3):   # along axis 0: the split lines (products: zeros early on, exact)
            np.testing.assert_array_equal(got[j], _lines_ref(x)[j], err_msg=f"{shape}: output {j}")
        np.testing.assert_allclose(got[6], np.logaddexp.accumulate(x, 0), rtol=1e-12, err_msg=f"{shape}")
        if x.ndim == 1:   # (a 1-d line is also the last axis: cummin, and the sum's total)
            np.testing.assert_array_equal(got[5], np.minimum.accumulate(x), err_msg=f"{shape}")
            assert got[8] == 2 * np.cumsum(x).sum()


@needs("g++")
def test_aot_col_mode_rows_at_a_time():
    # along the first axis, kScanRows (4) rows per step with the running value in a register:
    # row counts around a multiple of 4 (the rows left over go one at a time), a tile wider than
    # a chunk (1500: 512 + 256 per task), one row, one column; integer values, so exact
    k = fg.compile(lines, backend="aot", dtypes="float64")   # test_aot_lines_match_numpy's library
    rng = np.random.default_rng(12)
    for shape in [(4, 3), (5, 1), (7, 2), (9, 1500), (1, 6)]:
        x = rng.integers(-3, 4, shape).astype(np.float64)
        got, want = k(x), _lines_ref(x)
        for j in (0, 2, 3):
            np.testing.assert_array_equal(got[j], want[j], err_msg=f"{shape}: output {j}")
        np.testing.assert_allclose(got[6], want[6], rtol=1e-12, err_msg=f"{shape}")


@fg.op
def pair(x):
    """A scan along the contiguous axis (a stage of one: the emitted C++ scans it in blocks), a
    reduction fused after."""
    c = fg.logcumsumexp(x, axis=-1)
    return c, fg.max(c, axis=-1)


@needs("g++")
@pytest.mark.extended   # (a library of its own)
def test_aot_blocked_scan_edges():
    # kScanMin (64) +-1, blocks of a multiple of 4 steps, chunks of 2048 +-1; NaN propagates from
    # the middle of a block on
    k = fg.compile(pair, backend="aot", dtypes="float64")
    rng = np.random.default_rng(7)
    for n in [63, 64, 65, 95, 96, 97, 2047, 2048, 2049, 4099]:
        x = rng.standard_normal((2, n))
        x[1, n // 2] = np.nan
        with np.errstate(invalid="ignore"):
            c = np.logaddexp.accumulate(x, -1)
            want = (c, c.max(-1))
        for g, w in zip(k(x), want):
            np.testing.assert_allclose(g, w, rtol=1e-12, err_msg=f"n={n}")


@needs("g++")
@pytest.mark.parametrize("dtype", ["float32", pytest.param("int64", marks=pytest.mark.extended)])
def test_aot_include_initial_and_middle_axis(dtype):
    k = fg.compile(initial, backend="aot", dtypes=dtype)   # float32: test_infer_shape's library
    rng = np.random.default_rng(5)
    for shape in [(2, 3, 4), (2, 0, 3), (0, 2, 2), (1, 5, 1)]:
        x = rng.integers(-2, 3, shape).astype(dtype)
        _close(k(x), _initial_ref(x), f"initial {dtype} {shape}")


@needs("g++")
def test_infer_shape_with_unknown_dims():
    k = fg.compile(initial, backend="aot", dtypes="float32")
    for variant in dynamic_variants([(2, 3, 4)]):
        spec = fg.infer(initial, ["float32"], [None if s == (-2,) else s for s in variant], {})
        want = [(-2,) if s is None else tuple(s) for s in spec.out_shapes]
        assert _infer_shape(k, variant) == want, variant
    with pytest.raises(fg.FusegenError):   # rank 1 has no axis 1: refused by the kernel's rules
        _infer_shape(k, [(4,)])


@needs("g++", "jax")
def test_xla_handlers_scan():
    import jax
    f = fg.jax.function(lines)
    assert "scan sum" in f.emitted.source and "acc0 +=" in f.emitted.source
    x = np.random.default_rng(6).standard_normal((3, 5)).astype(np.float32)
    got = [np.asarray(g) for g in jax.jit(f)(x)]
    _close(got, _lines_ref(x), "lines xla")


@needs("nvcc")
@pytest.mark.parametrize("abi", ["mindspore-aot", "xla-ffi"])
def test_cuda_sources_compile(abi, tmp_path):
    from fusegen.emitters.common import HEADER_PATH
    e = fg.emit(lines if abi == "mindspore-aot" else initial, abi=abi, device="cuda", dtypes="float32")
    assert "scan sum" in e.source
    e.write(tmp_path)
    if abi == "mindspore-aot":
        (tmp_path / HEADER_PATH.name).write_text(HEADER_PATH.read_text())
        inc = []
    else:
        jax_ffi = pytest.importorskip("jax.ffi", reason='needs jax: pip install -e ".[jax]"')
        inc = ["-I", jax_ffi.include_dir()]
    cmd = ["nvcc", "-std=c++17", "--shared", "-Xcompiler", "-fPIC", "-O1", "--expt-relaxed-constexpr",
           "-gencode", "arch=compute_90,code=sm_90", "-gencode", "arch=compute_75,code=sm_75",
           "-I", str(tmp_path), *inc, "-o", str(tmp_path / "k.so"), str(tmp_path / e.main)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]


@fg.op
def extremes(x, w):
    return (fg.sum(fg.cummax(x, axis=-1) * w) + fg.sum(fg.cummin(x, axis=0) * w ** 2)
            + fg.sum(fg.logcumsumexp(x, axis=-1) * w))


@needs("g++")
def test_o_n_adjoints_match_finite_differences():
    """cummax/cummin (the gradient flows to where the running extreme was attained) and
    logcumsumexp (reverse logcumsumexps): O(n), so one 100,000-long line runs (the masked form
    would read 1e10 elements); through the emitted C++ (their gathers included)."""
    text = str(fg.grad(extremes, wrt=0))
    assert "scan min" in text and "scan logaddexp" in text and "take_along_axis" in text
    back = fg.compile(fg.grad(extremes, wrt=0), backend="aot", dtypes="float64")
    fwd = fg.compile(extremes, backend="aot", dtypes="float64")
    rng = np.random.default_rng(7)
    x, w = rng.standard_normal((3, 6)), rng.standard_normal((3, 6))
    (got,) = back(x, w, np.float64(1.0))
    eps = 1e-6
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        np.testing.assert_allclose(got[i], (fwd(xp, w) - fwd(xm, w)) / (2 * eps), rtol=1e-5, atol=1e-7,
                                   err_msg=str(i))
    x, w = rng.standard_normal((1, 100_000)), rng.standard_normal((1, 100_000))
    (got,) = back(x, w, np.float64(1.0))
    cm = np.maximum.accumulate(x[0])
    p = np.maximum.accumulate(np.where(x[0] == cm, np.arange(x.size), 0))   # where each output's max sits
    want = np.bincount(p, weights=w[0], minlength=x.size)                  # cummax's part ...
    out = np.logaddexp.accumulate(x[0])                                    # ... logcumsumexp's ...
    want += np.exp(x[0]) * np.cumsum((w[0] * np.exp(-out))[::-1])[::-1]
    want += w[0] ** 2                                                      # ... cummin's (a size-1 axis)
    np.testing.assert_allclose(got[0], want, rtol=1e-7, atol=1e-9)



def test_scans_are_emitted_as_scan_stages():
    """A scan of concat pieces reads them through a workspace the planner copies them into, so
    ``scan_form`` keeps every op here as it is (no composition)."""
    from fusegen.abi_emit import scan_form
    assert scan_form(lines) is lines and scan_form(initial) is initial
