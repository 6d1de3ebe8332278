"""The emitted C++'s fast gather loops (issue #17), on rows long enough for the lane loops
(kLanes = 16 elements a step, then a tail): an index constant along the row (an embedding's id,
read once per row) and one per element, in elementwise and reduction bodies; negative indices,
every integer index dtype (one build, several dtype combinations), out-of-range indices in each
mode, size-0 inputs, non-contiguous inputs and a permuted source. One AOT build for the module."""
from __future__ import annotations

import numpy as np
import pytest

import fusegen as fg
from fusegen.graph.text import where_text
from fusegen.ir import Op

from _optional import needs_gxx

pytestmark = needs_gxx

C = 37   # two lane steps and a tail of 5


@fg.op
def fast_rows(t, ids, j, k):
    e = fg.take(t, ids, axis=0)                    # (2, 3, C): one id per row of the result
    a = fg.take_along_axis(t, j, axis=1)           # (R, C): an index per element
    return (e * 2 + 1, fg.sum(e, axis=-1), a, fg.max(a, axis=-1), fg.take(t, k, axis=0, mode="wrap"),
            fg.sum(fg.take(t, k, axis=0, mode="clip"), axis=-1), fg.take(fg.permute_dims(t, (1, 0)), ids, axis=1))


def _ref(t, ids, j, k):
    e = np.take(t, ids, axis=0)
    a = np.take_along_axis(t, j.astype(np.int64) % C, axis=1)
    return (e * 2 + 1, e.sum(-1), a, a.max(-1), np.take(t, k, axis=0, mode="wrap"),
            np.take(t, np.clip(k.astype(np.int64), 0, t.shape[0] - 1), axis=0).sum(-1), np.take(t.T, ids, axis=1))


# index dtypes per combination: (ids, j, k); the default run builds one (g++ time grows with
# each: about 6 CPU-seconds a combination), `-m extended` the others
COMBOS = [("int32", "int8", "uint8")]
MORE_COMBOS = [("int64", "int64", "int64"), ("int16", "int16", "uint16"), ("int8", "int32", "uint32"),
               ("int64", "int64", "uint64")]


@pytest.fixture(scope="module")
def aot():
    return fg.compile(fast_rows, backend="aot", dtypes=[("float32",) + c for c in COMBOS])


def _inputs(combo, rows=6, rng=None):
    rng = rng or np.random.default_rng(5)
    t = rng.standard_normal((rows, C)).astype(np.float32)
    ids = rng.integers(-rows, rows, (2, 3)).astype(combo[0])
    j = rng.integers(-C, C, (rows, C)) if np.dtype(combo[1]).kind == "i" else rng.integers(0, C, (rows, C))
    lo = 0 if np.dtype(combo[2]).kind == "u" else -4 * rows
    k = rng.integers(lo, 4 * rows, (3, 2))
    return t, ids, j.astype(combo[1]), k.astype(combo[2])


def _check(got, want):
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape, (g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_every_index_dtype_and_negative_indices(aot):
    for combo in COMBOS:
        args = _inputs(combo)
        _check(aot(*args), _ref(*args))


@pytest.mark.extended
def test_the_other_index_dtypes():
    k = fg.compile(fast_rows, backend="aot", dtypes=[("float32",) + c for c in MORE_COMBOS])
    for combo in MORE_COMBOS:
        args = _inputs(combo)
        _check(k(*args), _ref(*args))


def test_non_contiguous_inputs(aot):
    t, ids, j, k = _inputs(COMBOS[0], rows=12)
    wide = np.zeros((12, 2 * C), np.float32)
    wide[:, ::2] = t
    args = (wide[:, ::2], ids[:, ::-1], j, k[::-1])
    _check(aot(*args), _ref(*args))


def _message(fn: str, kind: str, value: int, axis: int, size: int) -> str:
    node = next(n for n in fast_rows.graph.nodes if n.op is Op.GATHER and n.arg.kind == kind and n.arg.mode == "raise")
    return f"{where_text(fast_rows, node)}: {fn}: index {value} is out of bounds for axis {axis} with size {size}"


def test_out_of_range_in_each_mode(aot):
    t, ids, j, k = _inputs(COMBOS[0])
    bad_ids = ids.copy()
    bad_ids[1, 2] = 6                                      # one past the end: raise
    with pytest.raises(fg.BoundsError) as err:
        aot(t, bad_ids, j, k)
    assert isinstance(err.value, IndexError) and str(err.value) == _message("take", "take", 6, 0, 6)
    bad_j = j.copy()
    bad_j[4, 20] = -C - 1                                  # in a lane step, not the tail
    with pytest.raises(fg.BoundsError) as err:
        aot(t, ids, bad_j, k)
    assert str(err.value) == _message("take_along_axis", "along", -C - 1, 1, C)
    far = np.array([[-100, 100], [6, -7], [5, 0]])         # wrap and clip take any value
    _check(aot(t, ids, j, far), _ref(t, ids, j, far))


def test_size_zero(aot):
    t, ids, j, k = _inputs(COMBOS[0])
    none = np.zeros((0, 3), np.int64)
    got = aot(t, none, j, k)                               # no ids
    assert [g.shape for g in got] == [(0, 3, C), (0, 3), (6, C), (6,), (3, 2, C), (3, 2), (C, 0, 3)]
    _check(got, _ref(t, none, j, k))


@fg.op
def _extrema_rows(x):
    """Max, min, argmax and argmin of rows read through a slice (the views path, where a row of
    max/min reductions alone keeps fg::kUnroll lane groups), beside a sum, which keeps one."""
    v = x[:, 1:]
    return fg.max(v, axis=-1), fg.min(v, axis=-1), fg.argmax(v, axis=-1), fg.argmin(v, axis=-1), fg.sum(v, axis=-1)


def test_max_and_min_rows_fold_several_lane_groups():
    """A row whose reductions are all max or min folds into fg::kUnroll groups of fg::kLanes
    accumulators (independent chains for g++), then halves into halves; a sum keeps one group.
    Rows of 64 * 3 + 16 + 5 elements run every part (the grouped steps, a 16-lane step, the
    tail): NaN in each part wins, ties give the first index, -inf and +inf rows, and NumPy's
    values otherwise."""
    src = fg.emit(_extrema_rows, dtypes="float32").source
    assert "float lane0[fg::kUnroll * fg::kLanes];" in src and "for (int w = fg::kUnroll * fg::kLanes / 2; w >= 1; w /= 2) {" in src
    assert "float lane0[fg::kLanes];" in src   # (the sum's)
    n = 64 * 3 + 16 + 5
    rng = np.random.default_rng(3)
    x = rng.standard_normal((12, n + 1)).astype(np.float32)
    for r, at in enumerate((1, 70, 150, 200, 210, n)):   # NaN in a group step, the 16-lane step, the tail
        x[r, at] = np.nan
    x[6, 5] = x[6, 180] = x[6, 100] = 50.0            # ties: the first wins
    x[7, 40] = x[7, 190] = -50.0
    x[8, 1:] = -np.inf
    x[9, 1:] = np.inf
    x[10, 1:] = 0.0
    x[10, 77] = -0.0
    got = fg.compile(_extrema_rows, backend="aot")(x)
    v = x[:, 1:]
    want = (v.max(-1), v.min(-1), v.argmax(-1), v.argmin(-1), v.sum(-1, dtype=np.float64).astype(np.float32))
    for g, w, name in zip(got, want, ("max", "min", "argmax", "argmin")):
        np.testing.assert_array_equal(g, w, err_msg=name)
    np.testing.assert_allclose(got[4][np.isfinite(want[4])], want[4][np.isfinite(want[4])], rtol=1e-5, atol=1e-4)


@fg.op
def _plain_extrema(x):
    return fg.max(x, axis=-1), fg.min(x, axis=-1)


def test_plain_max_and_min_rows_fold_several_lane_groups():
    """The same lane groups in the kernels of ops without layout ops (_cpu_stages' row loops: a
    softmax's max pass): fg::kUnroll groups, halves folded into halves; NaN in every part of the
    loop wins, +-inf rows, zeros, and NumPy's values otherwise. (A stage with a sum keeps one
    group: softmax's exp-and-sum stage, the emitted text's golden files.)"""
    src = fg.emit(_plain_extrema, dtypes="float32").source
    assert "float acc1[fg::kUnroll * fg::kLanes];" in src and "for (int w = fg::kUnroll * fg::kLanes / 2; w >= 1; w /= 2) {" in src
    k = fg.compile(_plain_extrema, backend="aot")
    for n in (5, 16, 64 * 3 + 16 + 5, 1024 + 7):
        rng = np.random.default_rng(n)
        x = rng.standard_normal((9, n)).astype(np.float32)
        for r, at in enumerate((0, n // 3, n - 1, min(n - 1, 200))):   # NaN at the start, a group, the tail
            x[r, at] = np.nan
        x[4] = -np.inf
        x[5] = np.inf
        x[6] = 0.0
        x[6, n // 2] = -0.0
        x[7, n // 4] = 99.0
        x[8, n - 1] = -99.0
        got = k(x)
        np.testing.assert_array_equal(got[0], x.max(-1), err_msg=f"max n={n}")
        np.testing.assert_array_equal(got[1], x.min(-1), err_msg=f"min n={n}")
