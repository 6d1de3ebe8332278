"""The layout ops' schedules (issue #16), on the Numba CPU backend: blocked loops for transposed
reads (``x + y.T`` runs in square blocks, ``fusegen.rt.policy.choose_block``; the emitted C++'s
twin, ``fg::blocks``, is checked against NumPy in test_layout_backends.py) and index-set splits
of ``where`` on a comparison of iotas (``fusegen.plan.splits``). Each kernel is compiled once."""
from __future__ import annotations

import numpy as np
import pytest

import fusegen as fg
from fusegen.lower import cpu_splits
from fusegen.plan.splits import true_range
from fusegen.rt import policy


@fg.op
def _tadd(x, y):
    return x + y.T


_K = fg.compile(_tadd)
_rng = np.random.default_rng(16)


def _r(*shape):
    return _rng.standard_normal(shape).astype(np.float32)


def test_transposed_read_runs_blocked_and_matches_numpy():
    for shape in [(130, 70), (64, 64), (65, 129), (1, 5), (5, 1), (0, 3), (3, 0), (1, 1)]:
        x, y = _r(*shape), _r(*shape[::-1])
        np.testing.assert_array_equal(_K(x, y), x + y.T, err_msg=str(shape))
    # non-contiguous and negative-step inputs (the runner copies them: the kernel sees the values)
    X, Y = _r(150, 90), _r(180, 150)
    x, y = X[::-1, ::2], Y[::4, ::-1]
    np.testing.assert_array_equal(_K(x, y), x + y.T)
    blocked = [s for s in _K.sources().values() if f"blocked: {policy.BLOCK} rows" in s]
    assert blocked, "x + y.T did not run in blocks"
    assert "for o in range(ob * rows + r0, ob * rows + min(rows, r0 + BLOCK)):" in blocked[0]
    # y is read once per block along its rows into a transposed copy, which the block's rows read
    # at unit stride (no gather of y with its row stride in the hot loop)
    assert "pt_x1[rr, ii + 7] = s7[rr]" in blocked[0] and "v_x1 = _fg_row(pk_x1, (o - o0) * TILE)" in blocked[0]
    assert "x1_[c_x1" not in blocked[0]



def test_transposed_block_tiles_move_in_registers():
    """Whole 16 x 16 tiles (float32; 8 x 8 for 8-byte dtypes) of the transposed operand's block
    are transposed in registers (``_fg_transpose``), the rows and columns after the last whole tile
    element by element; 1-, 2- and 16-byte dtypes keep the element copy. Blocks with partial tiles
    on both sides, and every dtype, are NumPy's bit for bit; the intrinsic alone moves a tile from
    and to any offsets and steps."""
    from numba import njit
    from fusegen.pyhelpers_numba import _fg_transpose

    @njit
    def move(dst, dst_at, dst_step, src, src_at, src_step):
        _fg_transpose(dst, dst_at, dst_step, src, src_at, src_step)
    for dt, lanes in [(np.float32, 16), (np.int64, 8), (np.complex64, 8), (np.int32, 16)]:
        src, dst = np.arange(40 * 50).astype(dt), np.zeros(60 * 70, dt)
        move(dst, 75, 70, src, 53, 50)
        want = np.zeros_like(dst)
        for c in range(lanes):
            want[75 + c * 70:75 + c * 70 + lanes] = src[53 + c:53 + c + 50 * lanes:50]
        np.testing.assert_array_equal(dst, want, err_msg=str(dt))
    for shape in [(100, 83), (64, 300), (17, 40)]:
        x, y = _r(*shape), _r(*shape[::-1])
        np.testing.assert_array_equal(_K(x, y), x + y.T, err_msg=str(shape))
    src = _K.sources()
    blocked = [s for s in src.values() if "_fg_transpose(pk_x1, rr * TILE + ii, TILE, x1_, p_x1 + ii * x1_si + rr, x1_si)" in s]
    assert blocked and "for rr in range(nr - nr % 16, nr):" in blocked[0]



@pytest.mark.extended
def test_transposed_block_tiles_every_dtype():
    """The blocked copy of test_transposed_block_tiles_move_in_registers for 8-, 2-, 16- and
    1-byte dtypes (tiles of 8, and the element copy), blocks with partial tiles on both sides."""
    rng = np.random.default_rng(5)
    for dt in (np.float64, np.int16, np.complex128, np.bool_):
        for shape in [(100, 83), (64, 300), (17, 40)]:
            x, y = (rng.standard_normal(shape) * 50).astype(dt), (rng.standard_normal(shape[::-1]) * 50).astype(dt)
            got = fg.compile(_tadd)(x, y)
            assert got.dtype == (x + y.T).dtype
            np.testing.assert_array_equal(got, x + y.T, err_msg=f"{np.dtype(dt)} {shape}")


def test_block_policy():
    from fusegen.plan.layout import Layout
    # y.T over a (4096, 4096) domain: unit stride on the outer dim, 4096 on the inner one
    lay = Layout([4096], [], 1, 4096, [[4096], [1], [4096]], [[], [], []], [0, 0, 0], [1, 4096, 1])
    assert policy.transposed(lay) and policy.choose_block(lay, 2) == (policy.BLOCK, policy.BLOCK_COLS)
    plain = Layout([4096], [], 1, 4096, [[4096], [4096]], [[], []], [0, 0], [1, 1])   # x + y
    assert not policy.transposed(plain) and policy.choose_block(plain, 2)[0] == 1
    reduced = Layout([4096], [], 4096, 1, [[1], [4096]], [[], []], [4096, 0], [0, 0])  # a reduction: never
    assert not policy.transposed(reduced)


# --- index-set splits ----------------------------------------------------------------------------
@fg.op
def _masked(x, y, z):
    """Three stages, each with one split: a row-mode sum (>), another (<=), a col-mode write (<)."""
    i, j = fg.arange(x.shape[-2])[:, None], fg.arange(x.shape[-1])[None, :]
    return (fg.sum(fg.where(i > j, x, 0.0), axis=-1), fg.sum(fg.where(i <= j, y, 0.5), axis=-1),
            fg.where(i < j, z, 5.0))


_M = fg.compile(_masked)


def _masked_ref(x, y, z):
    i, j = np.arange(x.shape[-2])[:, None], np.arange(x.shape[-1])[None, :]
    return (np.where(i > j, x, 0).sum(-1), np.where(i <= j, y, 0.5).sum(-1), np.where(i < j, z, 5.0))


def test_where_on_iotas_splits_the_loop_and_matches_numpy():
    text = str(_M.plan)
    assert text.count("split %") == 3 and "(where on %2 gt %5)" in text and "(where on %2 lt %5)" in text, text
    for shape in [(7, 9), (9, 7), (2, 65, 64), (1, 1), (1, 5), (5, 1), (0, 4), (4, 0)]:
        args = [_r(*shape), _r(*shape), _r(*shape)]
        # NaN in the masked places: no result may depend on them
        masked = [np.where(m, np.nan, a).astype(np.float32) for a, m in zip(args, _masks(shape))]
        for got, want in zip(_M(*masked), _masked_ref(*args)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=str(shape))
    src = "\n".join(_M.sources().values())
    assert src.count("# split %") >= 3 and "for ri in range(sp_lo, sp_hi):" in src and \
        "for i in range(sp_lo, sp_hi):" in src


def _masks(shape):
    """Where each output's mask is false (the operand is never read there)."""
    i, j = np.arange(shape[-2])[:, None], np.arange(shape[-1])[None, :]
    return [np.broadcast_to(~(i > j), shape), np.broadcast_to(~(i <= j), shape), np.broadcast_to(~(i < j), shape)]


def test_split_bounds_text_matches_its_oracle():
    """The lowering's bounds (``cpu_splits.BOUNDS``) against brute force and ``true_range``."""
    for n in (0, 1, 5):
        for d0 in range(-7, 8):
            for ds in range(-3, 4):
                env: dict = {}
                exec(cpu_splits.BOUNDS.format(count=n, d0=d0, ds=ds), env)
                want = [i for i in range(n) if d0 + i * ds >= 0]
                got = list(range(env["sp_lo"], env["sp_hi"]))
                assert got == want and true_range(d0, ds, n) == (env["sp_lo"], env["sp_hi"]), (n, d0, ds)


# --- boxes a row at a time, a stage over a reshaped domain, a masked value stored once ----------
@fg.op
def _rope_halves(x, cos, sin, w):
    """RoPE spelled on halves (its concat cuts the last dim), and a pad cutting two dims."""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    r = fg.concat([x1 * cos[:, :h] - x2 * sin[:, :h], x2 * cos[:, h:] + x1 * sin[:, h:]], axis=-1)
    return r, fg.pad(w, ((0, 0), (1, 2), (3, 1)), constant_values=5.0) * 2.0


@fg.op
def _group_norm_5d(x, gamma, beta, *, groups: int = 4):
    """Group norm spelled another way: statistics over (N, G, C/G, H*W), gamma broadcast as (C, 1)."""
    n, c = x.shape[0], x.shape[1]
    g = x.reshape(n, groups, c // groups, -1)
    m = fg.mean(fg.mean(g, axis=-1, keepdims=True), axis=-2, keepdims=True)
    d = g.reshape(n, groups, -1) - m.reshape(n, groups, 1)
    v = fg.mean(d * d, axis=-1, keepdims=True)
    y = (d / fg.sqrt(v + 1e-5)).reshape(n, c, -1)
    return y * gamma[:, None] + beta[:, None]


_ROPE = fg.compile(_rope_halves)


@pytest.mark.parametrize("many", [True, False], ids=["many-rows", "few-rows"])
def test_boxes_run_a_row_at_a_time_and_match_numpy(many):
    from fusegen.plan.boxrows import MIN_ROWS
    for rows in ((MIN_ROWS + 6,) if many else (3,)):   # enough rows: one task per row; fewer: box by box
        x, c, s, w = _r(2, rows // 2, 8), _r(rows // 2, 8), _r(rows // 2, 8), _r(rows, 3, 4)
        got = _ROPE(x, c, s, w)
        want_r = np.concatenate([x[..., :4] * c[:, :4] - x[..., 4:] * s[:, :4],
                                 x[..., 4:] * c[:, 4:] + x[..., :4] * s[:, 4:]], -1)
        np.testing.assert_allclose(got[0], want_r, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(got[1], np.pad(w, ((0, 0), (1, 2), (3, 1)), constant_values=5.0) * 2.0)
        # (each output's group is its own function: both run a row at a time, or neither)
        assert _ROPE.source.count("boxes a row at a time") == (2 if rows > MIN_ROWS else 0), _ROPE.source
        if rows > MIN_ROWS:   # rows stepped within a task: divisions only where the last row dim wraps
            assert "if il == e_last:" in _ROPE.source and "for t in range(tc * ROWS, min(R, tc * ROWS + ROWS)):" in _ROPE.source


def _np_group_norm(x, gamma, beta, groups):
    g = x.astype(np.float64).reshape(x.shape[0], groups, -1)
    y = (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)
    return y.reshape(x.shape[0], x.shape[1], -1) * gamma[:, None] + beta[:, None]


def test_group_norm_output_runs_with_its_statistics():
    """The output stage, over (N, C, H*W), runs over the statistics' domain (N, G, C/G*H*W): one
    function for every stage of the reference op (one pass of statistics, one of output)."""
    from fusegen import examples
    k = fg.compile(examples.group_norm)
    x, gamma, beta = _r(3, 8, 5, 3), _r(8), _r(8)
    np.testing.assert_allclose(k(x, gamma, beta, groups=4),
                               _np_group_norm(x, gamma, beta, 4).reshape(x.shape), rtol=2e-5, atol=2e-5)
    assert len(k._last.groups) == 1 and "stages 0, 1, 2 of op group_norm" in k.source, k.source
    k5 = fg.compile(_group_norm_5d)   # two statistics domains: the output joins the last one
    np.testing.assert_allclose(k5(x.reshape(3, 8, 15), gamma, beta), _np_group_norm(x, gamma, beta, 4),
                               rtol=2e-5, atol=2e-5)


def test_causal_mask_value_is_stored_once():
    from fusegen import examples
    from fusegen.plan import build_plan
    text = str(build_plan(examples.causal_softmax))
    assert "stored once: %12 (exp) in out0" in text, text
    assert "split" not in text.split("\n  stage ")[3], text   # the output stage reads it back: no where
    k = fg.compile(examples.causal_softmax)
    x = _r(2, 7, 9)
    keep = np.arange(7)[:, None] >= np.arange(9)[None, :]
    z = np.where(keep, x.astype(np.float64), -np.inf)
    e = np.exp(z - z.max(-1, keepdims=True))
    np.testing.assert_allclose(k(x), e / e.sum(-1, keepdims=True), rtol=2e-6, atol=1e-9)
    # the masked intervals fold their constants without a loop (lower/cpu_splits.constant_folds):
    # the max stage loops over the kept interval only; the sum stage adds its 0 only if nonzero
    src = k.source
    max_stage = src.split("# stage 0")[1].split("# stage 1")[0]
    assert max_stage.count("for ri in range(") == 1 and "folded once" in max_stage, src
    assert "its identity adds nothing" in src.split("# stage 1")[1].split("# stage 2")[0], src


@fg.op
def reduce_beside_pieces(x, z):
    # a reduction and a padded output over one (3, 3) domain, both at the first level
    return fg.sum(z, axis=0, keepdims=True), fg.pad(x, ((1, 0), (0, 0))) * 2


def reduce_beside_pieces_ref(x, z):
    return z.sum(0, keepdims=True), np.pad(x, ((1, 0), (0, 0))) * 2


def test_reduction_beside_pieces_keeps_its_whole_domain():
    """A reduction never shares a loop nest with a piecewise stage: the pieces cut the domain into
    boxes, one loop each, and a box-by-box reduction kept only its last box's rows (fg.grad of a
    strided slice beside a broadcast's sum gave a wrong gradient this way)."""
    x, z = _r(2, 3), _r(3, 3)
    got = fg.compile(reduce_beside_pieces)(x, z)
    for g, want in zip(got, reduce_beside_pieces_ref(x, z)):
        np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-6)


@fg.op
def max_beside_own_slice_padded(w):
    return fg.pad(w[1:2], ((1, 1),)), fg.max(w)


def test_full_reduction_beside_a_pad_of_its_own_slice():
    # test_layout_differential's find before the fix above: the max ran over the pad's three
    # boxes and kept the last one's element (w[2])
    w = np.array([3, 1, 2], np.float32)
    padded, top = fg.compile(max_beside_own_slice_padded)(w)
    np.testing.assert_array_equal(padded, [0, 1, 0])
    assert top == 3


@fg.op
def where_inside_tril_sliced(x):
    i, j = fg.arange(x.shape[-2])[:, None], fg.arange(x.shape[-1])[None, :]
    return fg.tril(fg.where(i >= j, x, -1.5), k=-2)[..., :1]


def test_split_where_read_through_another_iota_where_and_a_view():
    # the where's split looked its iotas up at a path no operand of the loop had (a KeyError in
    # the Numba lowering; test_layout_differential's find): the stage now runs whole
    x = _r(4, 2)
    i, j = np.arange(4)[:, None], np.arange(2)[None, :]
    np.testing.assert_array_equal(fg.compile(where_inside_tril_sliced)(x), np.tril(np.where(i >= j, x, -1.5), -2)[..., :1])
