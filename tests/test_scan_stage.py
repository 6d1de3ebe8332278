"""The O(n) scan (issue #17): a scan is one node (``scan sum %1, axis=1``), planned as a stage
whose scanned axis is the carried loop; Numba CPU runs it natively (a blocked two-pass scan when
one line is long), numba-cuda with a thread per line; the emitted C++/CUDA: test_scans_emitted.py.
Text, generated source, then NumPy on every axis, ranks 1-3, dtypes, size-0 axes, fused before
and after, one 200,000-long axis, and gradients against the composition's."""
from __future__ import annotations

import re

import numpy as np
import pytest

import fusegen as fg
from fusegen.graph.scans import composed
from fusegen.plan import build_plan

from _optional import needs_gxx


@fg.op
def around(x, y):
    """Scans fused after elementwise ops and before elementwise ops and reductions."""
    c = fg.cumulative_sum(x * 2, axis=1)
    return c + y, fg.sum(c + y, axis=1), fg.cummax(x, axis=-1) - x


@fg.op
def every(x):
    """Every kind along the first and the last axis (any rank >= 1)."""
    return (fg.cumulative_sum(x, axis=0), fg.cumulative_sum(x, axis=-1, include_initial=True),
            fg.cumulative_prod(x, axis=0), fg.cumulative_prod(x, axis=-1, include_initial=True),
            fg.cummax(x, axis=0), fg.cummax(x, axis=-1), fg.cummin(x, axis=0), fg.cummin(x, axis=-1))


@fg.op
def middle(x):
    """Rank 3: the middle axis (outer and inner kept dims around the carried loop)."""
    return fg.cumulative_sum(x, axis=1, dtype="float64"), fg.cummin(x, axis=1), fg.logcumsumexp(x, axis=1), \
        fg.cumulative_prod(x, axis=1, include_initial=True)


@fg.op
def longs(x):
    return fg.cumulative_sum(x), fg.logcumsumexp(x)


def _init(r, axis, value):
    shape = list(r.shape)
    shape[axis] = 1
    return np.concatenate([np.full(shape, value, r.dtype), r], axis)


def _every_ref(x):
    return (np.cumsum(x, 0), _init(np.cumsum(x, -1), -1, 0), np.cumprod(x, 0), _init(np.cumprod(x, -1), -1, 1),
            np.maximum.accumulate(x, 0), np.maximum.accumulate(x, -1), np.minimum.accumulate(x, 0),
            np.minimum.accumulate(x, -1))


def _close(got, want, what, rtol=1e-5):
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, f"{what}: output {k}: {g.shape} {g.dtype} != {w.shape} {w.dtype}"
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=1e-6,
                                   err_msg=f"{what}: output {k}")


# --- text --------------------------------------------------------------------------------------
def test_a_scan_is_one_node_and_a_stage_of_its_own():
    text = str(around)
    assert "scan sum" in text and "scan max" in text
    assert "iota" not in text and "broadcast_to" not in text      # no (n, n) mask, no broadcast view
    plan = str(build_plan(around))
    assert "scan sum" in plan and "through identity" in plan
    # the backends without scan stages get the masked composition, with its iota mask
    assert "iota" in str(composed(around).specialize(["float32"] * 2, [(2, 3)] * 2, {}))


def test_include_initial_puts_the_identity_in_front_without_a_copy():
    text = str(every)
    assert text.count("concat") == 2 and "copy" not in text


# --- generated source ----------------------------------------------------------------------------
AROUND = fg.compile(around)


def test_the_carried_loop_in_the_generated_source():
    x = np.ones((2, 5, 3), np.float32)
    AROUND(x, x)
    src = "\n".join(AROUND.sources().values())
    assert re.search(r"# stage \d+: scan sum", src)   # (its number: plan.stages' order within a level)
    assert "col mode" in src                           # along axis 1: vector accumulators over the inner dim
    assert "acc0[i] += " in src and "[i] = acc0[i]" in src
    assert "row mode" in src and "acc0 = _fmax(acc0," in src   # cummax along the last axis: scalar
    assert "iota" not in src


# --- numbers ------------------------------------------------------------------------------------
# (int8, float32 and size-0 axes run by default in test_scans.py, through this same scan stage)
@pytest.mark.parametrize("shape", [(3, 5)] + [pytest.param(s, marks=pytest.mark.extended)
                                              for s in [(7,), (2, 3, 4), (0, 3), (3, 0)]])
def test_every_kind_first_and_last_axis(shape):
    rng = np.random.default_rng(1)
    x = rng.integers(-3, 4, shape).astype(np.float64)
    if x.size:
        x.flat[x.size // 2] = np.nan                  # NaN propagates, as np.maximum.accumulate's
    _close(fg.compile(every)(x), _every_ref(x), f"float64 {shape}")


@pytest.mark.extended
@pytest.mark.parametrize("dtype", ["int8", "bool", "uint16", "float32"])
def test_every_kind_int_and_bool(dtype):
    x = np.random.default_rng(2).integers(0 if dtype in ("bool", "uint16") else -3, 4, (3, 5)).astype(dtype)
    got = fg.compile(every)(x)
    want = _every_ref(x)
    # the standard's accumulation dtype: int64 for signed ints and bool, uint64 for unsigned
    assert got[0].dtype == {"int8": np.int64, "bool": np.int64, "uint16": np.uint64}.get(dtype, got[0].dtype)
    _close(got, want, dtype)


def test_col_mode_rows_at_a_time():
    # along the first axis, SCAN_ROWS (4) rows per pass, each running value in a register across
    # them (fusegen.lower.cpu_scans.col_rows): row counts around multiples of 4 (the rows left go
    # one at a time), a NaN inside a group of rows; integer values, so every sum, product, max and
    # min is exact and a row skipped or taken twice shows (the kernels of the test above: shapes
    # of two dims, neither of extent 1, compile nothing new)
    k = fg.compile(every)
    rng = np.random.default_rng(13)
    for shape in [(4, 3), (5, 2), (8, 4), (11, 6)]:
        x = rng.integers(-2, 3, shape).astype(np.float64)
        x.flat[x.size // 2 + 1] = np.nan
        got, want = k(x), _every_ref(x)
        for j in (0, 2, 4, 6):   # the scans along axis 0
            np.testing.assert_array_equal(got[j], want[j], err_msg=f"{shape}: output {j}")
    src = "\n".join(k.sources().values())
    assert "4 rows per pass" in src and "r0 = acc0[i]" in src and "ri += 4" in src


@fg.op
def firsts(x, w):
    """Col-mode scans: two in one stage, one reading an operand constant across the tile (``w``:
    a value per row); and one alone in its stage (so a few long columns split across threads)."""
    return fg.cumulative_sum(x * w, axis=0), fg.cummax(x, axis=0), fg.logcumsumexp(x, axis=0)


@pytest.mark.extended   # (two kernels of their own, and a 60,000-row input)
def test_col_mode_rows_at_a_time_split_and_broadcast():
    k = fg.compile(firsts)
    alone = fg.compile(fg.op(lambda x: fg.cumulative_prod(x, axis=0), name="first_prod"))
    rng = np.random.default_rng(14)
    for shape in [(60_007, 3), (7, 5)]:   # a few long columns: the two-pass scan (totals, then
        x = rng.integers(-3, 4, shape).astype(np.float64)   # each chunk from its carry)
        w = rng.integers(-2, 3, (shape[0], 1)).astype(np.float64)
        got = k(x, w)
        np.testing.assert_array_equal(got[0], np.cumsum(x * w, 0), err_msg=f"{shape}")
        np.testing.assert_array_equal(got[1], np.maximum.accumulate(x, 0), err_msg=f"{shape}")
        np.testing.assert_allclose(got[2], np.logaddexp.accumulate(x, 0), rtol=1e-12, err_msg=f"{shape}")
        y = np.where(rng.random(shape) < 0.5, -1.0, 1.0)   # products of +-1: exact, sign flips anywhere
        np.testing.assert_array_equal(alone(y), np.cumprod(y, 0), err_msg=f"{shape}")
    src = "\n".join(k.sources().values())
    assert "4 rows per pass" in src and "x1_r3 = x1_[" in src
    src = "\n".join(alone.sources().values())
    assert "4 rows per pass" in src
    if fg.runtime.num_threads() > 1:
        assert "(totals pass)" in src
    for shape in [(8, 1), (9, 2, 3)]:   # (kernels of their own: one column; a rank-3 input)
        x = rng.integers(-2, 3, shape).astype(np.float64)
        got, want = fg.compile(every)(x), _every_ref(x)
        for j in (0, 2, 4, 6):
            np.testing.assert_array_equal(got[j], want[j], err_msg=f"{shape}: output {j}")


def test_fused_pipeline():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 3)).astype(np.float32)
    y = rng.standard_normal((2, 5, 3)).astype(np.float32)
    c = np.cumsum(x * 2, axis=1)
    _close(AROUND(x, y), (c + y, (c + y).sum(1), np.maximum.accumulate(x, -1) - x), "around")


@pytest.mark.extended
def test_middle_axis():
    x = np.random.default_rng(3).standard_normal((2, 5, 3)).astype(np.float32)
    x[1, :, 2] = np.linspace(-300, 400, 5)         # exp overflows: logaddexp's fold must not
    _close(fg.compile(middle)(x), (np.cumsum(x, 1, dtype=np.float64), np.minimum.accumulate(x, 1),
                                   np.logaddexp.accumulate(x, 1), _init(np.cumprod(x, 1), 1, 1)), "middle")


def test_a_long_axis_is_o_n():
    # 200,000 elements: 4e10 reads as the O(n^2) composition; a blocked two-pass scan here
    x = np.random.default_rng(4).standard_normal(200_000)
    k = fg.compile(longs)
    got = k(x)
    want = (np.cumsum(x), np.logaddexp.accumulate(x))
    _close(got, want, "long", rtol=1e-9)
    if fg.runtime.num_threads() > 1:   # one line: the blocked scan puts both cores to work
        src = "\n".join(k.sources().values())
        assert "(totals pass)" in src and "an exclusive scan of the chunk totals" in src and "(write pass)" in src


# --- the blocked scan of a contiguous line (fusegen.lower.cpu_scans.blocked_lines) ---------------
@fg.op
def lines(x):
    """A scan along the last (contiguous) axis (one per stage runs blocked: SCAN_FOLDS), a
    reduction fused after: the blocked path's shapes."""
    c = fg.cummax(x, axis=-1)
    return c, fg.sum(c * x, axis=-1)


@fg.op
def int_lines(x):
    return fg.cumulative_sum(x, axis=-1)


LINES = fg.compile(lines)
INT_LINES = fg.compile(int_lines)
#: around the blocked path's edges: SCAN_MIN (256) +-1, a block (32 at 256, 256 in a full piece)
#: +-1, a piece (2048) +-1, and primes across two and three pieces
EDGES = [1, 255, 256, 257, 263, 2047, 2048, 2049, 2311, 4099]


def _lines_ref(x):
    c = np.maximum.accumulate(x, -1)
    return c, (c * x).sum(-1)


def test_blocked_lines_every_kind_at_the_block_edges():
    rng = np.random.default_rng(7)
    for n in EDGES:
        x = rng.standard_normal((2, n))
        x[0, n // 2] = np.nan                          # NaN propagates from there on, not before
        got = LINES(x)
        with np.errstate(invalid="ignore"):
            want = _lines_ref(x)
        for k, (g, w) in enumerate(zip(got, want)):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=0, err_msg=f"n={n}: output {k}")
        assert np.isnan(got[0][0, n // 2:]).all() and not np.isnan(got[0][0, :n // 2]).any()
    src = "\n".join(LINES.sources().values())
    assert "8 independent chains" in src and "a0_7 = _fmax(a0_7, h0_7[u])" in src


@pytest.mark.parametrize("dtype", ["int8", pytest.param("int64", marks=pytest.mark.extended)])
def test_blocked_lines_integer_sums_are_exact(dtype):
    rng = np.random.default_rng(8)
    for n in EDGES[::3] + [4099]:
        x = rng.integers(-100, 100, (3, n)).astype(dtype)
        got, want = INT_LINES(x), np.cumsum(x, -1)
        assert got.dtype == want.dtype == np.int64   # the standard's accumulation dtype for signed ints
        np.testing.assert_array_equal(got, want, err_msg=f"n={n}")


@pytest.mark.extended   # (a kernel per kind)
@pytest.mark.parametrize("kind", ["prod", "min", "logaddexp"])
def test_blocked_lines_other_kinds(kind):
    scan = {"prod": lambda x: fg.cumulative_prod(x, axis=-1, include_initial=True),
            "min": lambda x: fg.cummin(x, axis=-1), "logaddexp": lambda x: fg.logcumsumexp(x, axis=-1)}[kind]
    k = fg.compile(fg.op(scan, name=f"blocked_{kind}"))
    rng = np.random.default_rng(10)
    for n in EDGES:
        x = 1 + rng.standard_normal((2, n)) / 1000    # products stay near 1
        want = {"prod": lambda: _init(np.cumprod(x, -1), -1, 1), "min": lambda: np.minimum.accumulate(x, -1),
                "logaddexp": lambda: np.logaddexp.accumulate(x, -1)}[kind]()
        np.testing.assert_allclose(k(x), want, rtol=1e-12, err_msg=f"n={n}")


@pytest.mark.extended   # (a kernel per dtype; the default run has float64's in the test above)
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_blocked_sum_error_bound(dtype):
    # a sum in blocks rounds differently from the sequential one, within the same bound:
    # |error| <= (k + 1) u sum_{i<=k} |x_i| for the k-th element (u: the unit roundoff)
    x = np.random.default_rng(9).standard_normal((2, 4099)).astype(dtype)
    got = fg.compile(fg.op(lambda x: fg.cumulative_sum(x, axis=-1), name=f"cs_{dtype}"))(x)
    assert got.dtype == x.dtype
    exact = np.cumsum(x.astype(np.float64), -1)
    u = np.finfo(np.float32 if dtype == "float16" else dtype).eps / 2   # float16 accumulates in float32
    bound = np.arange(1, x.shape[1] + 1) * u * np.cumsum(np.abs(x.astype(np.float64)), -1)
    if dtype == "float16":
        bound += np.abs(exact) * np.finfo(np.float16).eps   # and is rounded once, at the store
    assert (np.abs(got - exact) <= bound).all()


@fg.op
def running(x, w):
    return fg.sum(fg.cumulative_sum(x, axis=1) * w)


def test_grad_of_cumulative_sum_is_a_reverse_cumulative_sum():
    text = str(fg.grad(running, wrt=0))
    assert text.count("scan sum") == 2 and "flip" in text and "iota" not in text
    x, w = np.ones((2, 4)), np.arange(8.0).reshape(2, 4)
    (got,) = fg.compile(fg.grad(running, wrt=0))(x, w, np.float64(1.0))
    np.testing.assert_allclose(got, np.flip(np.cumsum(np.flip(w, 1), 1), 1))


@fg.op
def graded(x):
    return (fg.sum(fg.cumulative_sum(x, axis=1) * fg.cos(x)) + fg.sum(fg.cumulative_prod(x, axis=0) ** 2)
            + fg.sum(fg.cummax(x, axis=1) * x) + fg.sum(fg.cummin(x, axis=0) ** 3)
            + fg.sum(fg.logcumsumexp(x, axis=1) * x) + fg.sum(fg.cumulative_sum(x, axis=0, include_initial=True) ** 2))


@pytest.mark.extended
def test_grad_matches_the_composition():
    # the O(n) adjoints (reverse scans; for cummax/cummin two gathers) against the composition's
    x = np.random.default_rng(5).standard_normal((4, 5))
    one = np.float64(1.0)
    (got,) = fg.compile(fg.grad(graded))(x, one)
    (want,) = fg.compile(fg.grad(composed(graded)))(x, one)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    eps, i = 1e-6, (2, 3)
    xp, xm = x.copy(), x.copy()
    xp[i] += eps
    xm[i] -= eps
    run = fg.compile(graded)
    np.testing.assert_allclose(got[i], (run(xp) - run(xm)) / (2 * eps), rtol=1e-5)



def test_logcumsumexp_gradient_through_leading_minus_infinities():
    """A row left-padded with -inf (a masking idiom): each output still -inf is its own input,
    so the padding gets its own cotangent and no NaN (it was NaN at a leading -inf, which
    poisoned the row); elsewhere jax.lax.cumlogsumexp's values."""
    grad = fg.compile(fg.grad(fg.op(lambda x: fg.logcumsumexp(x, axis=-1), name="lcse")))
    inf = np.inf
    x = np.array([[-inf, 0.0, 1.0, 0.0], [0.0, -inf, 1.0, 0.0], [-inf, -inf, 2.0, 3.0], [-inf, -inf, -inf, -inf]])
    g = np.array([[1.0, -2.0, 0.5, 3.0]] * 4)
    (got,) = grad(x, g)
    want = np.zeros_like(x)
    for r in range(4):   # sum_{i >= j} g_i exp(x_j - out_i) where out_i is finite; g_i at j = i where not
        out = np.logaddexp.accumulate(x[r])
        for i in range(4):
            if np.isneginf(out[i]):
                want[r, i] += g[r, i]
            else:
                want[r, :i + 1] += g[r, i] * np.exp(x[r, :i + 1] - out[i])
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert np.isfinite(got).all()

def test_errors_unchanged():
    with pytest.raises(fg.ShapeError, match="out of range"):
        fg.compile(fg.op(lambda x: fg.cumulative_sum(x, axis=-3), name="badaxis2"))(np.zeros((2, 2)))
    with pytest.raises(fg.TraceError, match="axis is required"):
        fg.compile(fg.op(lambda x: fg.cummin(x), name="noaxis2"))(np.zeros((2, 2)))
    with pytest.raises(fg.ShapeError, match=r"out of range: the operand is a scalar \(rank 0\)"):
        fg.compile(fg.op(lambda x: fg.logcumsumexp(x, axis=0), name="scalar0d"))(np.float64(1.0))
    with pytest.raises(fg.DTypeError, match="not defined for complex"):
        fg.compile(fg.op(lambda x: fg.cummax(x, axis=0), name="cmax"))(np.ones(3, np.complex64))


@pytest.mark.extended
def test_cuda_scan_kernels_compile_to_ptx():
    from fusegen.lower_cuda import compile_ptx, numba_cuda_missing
    if numba_cuda_missing():
        pytest.skip(f"needs numba-cuda: {numba_cuda_missing()}")
    ptx = compile_ptx(around, ["float32", "float32"], [(2, 5, 3), (2, 5, 3)])
    assert ptx and all(".entry" in text for _, text in ptx)


# --- a running sum in vector registers (cpu_scans.vector_lines, _fg_scan_sum, fg::scan_sum) -------
#: around a vector (16 float32 or 8 float64 lanes), a piece (2048) and across pieces
VECTOR_EDGES = [1, 7, 8, 9, 15, 16, 17, 33, 2047, 2048, 2049, 4099]


@pytest.mark.extended   # (9 s of Numba compiles: the default run's 5 minutes lack it)
@pytest.mark.parametrize("backend", ["numba", pytest.param("aot", marks=[needs_gxx])])
def test_running_sums_in_vector_registers(backend):
    k = fg.compile(int_lines, backend=backend)
    rng = np.random.default_rng(11)
    for dtype in ("float32", "float64", "int32", "uint32", "int64"):
        for n in VECTOR_EDGES:
            if dtype.startswith("float"):
                x = rng.standard_normal((4, n)).astype(dtype)
                x[1, n // 2] = np.inf                        # inf from there on
                x[2, n // 3] = np.nan                        # NaN from there on, not before
                x[3] = -0.0
            else:
                x = rng.integers(0 if dtype[0] == "u" else -1000, 1000, (4, n)).astype(dtype)
            got, want = k(x), np.cumsum(x, -1, dtype=np.result_type(x.dtype, np.int64 if dtype[0] == "i" else x.dtype))
            if dtype == "uint32":
                want = np.cumsum(x, -1, dtype=np.uint64)
            assert got.dtype == want.dtype, (dtype, got.dtype)
            if dtype.startswith("float"):
                # a different order of additions than NumPy's, within the sequential bound
                exact = np.cumsum(x.astype(np.float64), -1)
                u = np.finfo(dtype).eps / 2
                with np.errstate(invalid="ignore"):
                    bound = np.arange(1, n + 1) * u * np.cumsum(np.abs(x.astype(np.float64)), -1)
                    fin = np.isfinite(exact)
                    assert (np.abs(got[fin] - exact[fin]) <= bound[fin]).all(), (dtype, n)
                np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{dtype} n={n}")
                np.testing.assert_array_equal(got[~fin], want[~fin], err_msg=f"{dtype} n={n}")
            else:
                np.testing.assert_array_equal(got, want, err_msg=f"{dtype} n={n}")
    src = "\n".join(k.sources().values())
    assert ("_fg_scan_sum(sv0, pb, acc0)" if backend == "numba" else "fg::scan_sum(sv, m, acc0)") in src
