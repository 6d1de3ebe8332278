"""exp(z - max z) summed over the max's slice (logsumexp, cross-entropy, log_softmax) computed by
exp_shifted_f32 (fusegen/plan/fusedmath.py, fusegen/vmath.py's EXP32_SUM_FLOOR): exp_f32's bits
where it is used, the same sums where it is not, recognized in the spellings that qualify and in
no other, on both CPU backends."""
from __future__ import annotations

import numba
import numpy as np
import pytest

import fusegen as fg
from fusegen import examples as ex
from _optional import backends_extended
from fusegen import vmath, vmath_lanes


@numba.njit
def _both(x, a, b):
    for i in range(x.size):
        a[i] = vmath_lanes.exp_f32(x[i])
        b[i] = vmath_lanes.exp_shifted_f32(x[i])


def test_the_bits_of_exp_f32_on_its_domain_and_its_floor_below():
    floor = np.float32(vmath.EXP32_SUM_FLOOR)
    # every 97th float32 from -0.0 down to the floor, the floor's neighbours, and below it
    top = np.float32(-0.0).view(np.uint32)
    bottom = floor.view(np.uint32)
    x = np.arange(top, bottom + 1, 97, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = np.concatenate([x, [0.0, -0.0, floor, np.nextafter(floor, np.float32(0)), -1e-45, -1e-30]]).astype(np.float32)
    a, b = np.empty_like(x), np.empty_like(x)
    _both(x, a, b)
    assert np.array_equal(a.view(np.int32), b.view(np.int32))
    below = np.array([np.nextafter(floor, np.float32(-np.inf)), -87.5, -100.0, -104.0, -1e30, -np.inf], np.float32)
    a, b = np.empty_like(below), np.empty_like(below)
    _both(below, a, b)
    f = np.empty(1, np.float32)
    _both(np.array([floor]), np.empty(1, np.float32), f)
    assert np.all(b == f[0]) and 1e-38 < f[0] < 2e-38   # exp(floor), not the subnormal or zero
    nan = np.array([np.nan], np.float32)
    _both(nan, a[:1], b[:1])
    assert np.isnan(b[0])


@fg.op
def lse_spellings(x):
    """Five spellings that qualify: the helper, log_softmax, keepdims throughout, [..., None],
    and a sum over more axes than the max."""
    m = fg.max(x, axis=-1, keepdims=True)
    kept = fg.log(fg.sum(fg.exp(x - m), axis=-1, keepdims=True)) + m
    m1 = fg.max(x, axis=-1)
    expanded = fg.log(fg.sum(fg.exp(x - m1[..., None]), axis=-1)) + m1
    total = fg.sum(fg.exp(x - m), axis=None)
    return fg.logsumexp(x, axis=-1), fg.log_softmax(x, axis=-1), kept, expanded, total


@fg.op
def near_misses(x):
    """exps that must stay exp_f32: stored as well (softmax), summed over another axis than the
    max's, shifted by a min, shifted by a max without keepdims along the first axis, shifted by
    another tensor's max."""
    m = fg.max(x, axis=-1, keepdims=True)
    other = fg.sum(fg.exp(x - m), axis=0)
    by_min = fg.sum(fg.exp(x - fg.min(x, axis=-1, keepdims=True)), axis=-1)
    first = fg.sum(fg.exp(x - fg.max(x, axis=0)), axis=0)
    y = x * 2.0
    foreign = fg.sum(fg.exp(x - fg.max(y, axis=-1, keepdims=True)), axis=-1)
    # (the softmax of another value: with x's, its exp would be ``other``'s node, which its own
    # sum pass may shift, as a gradient's below)
    return fg.softmax(x + 1.0, axis=-1), other, by_min, first, foreign


def _stage_text(op) -> str:
    src = fg.emit(op, dtypes=["float32"]).source
    return src[src.index("namespace k_float32"):]


def test_recognized_where_it_qualifies_and_nowhere_else():
    text = _stage_text(lse_spellings)
    assert "fg::exp_f32(" not in text and text.count("fg::exp_shifted_f32(") >= 5
    near = _stage_text(near_misses)
    assert "fg::exp_shifted_f32(" not in near
    # (a softmax's sum pass also stores its exp for the output pass: defined, never called)
    assert "fg::exp_shifted_f32(" not in _stage_text(ex.softmax)
    ce = _stage_text(ex.cross_entropy)
    assert "fg::exp_shifted_f32(" in ce and "fg::exp_f32(" not in ce


@pytest.mark.extended   # (a compile per op: the default run keeps its 5 minutes)
@pytest.mark.parametrize("op", [ex.cross_entropy_grad, fg.grad(ex.softmax)], ids=["cross_entropy_grad", "softmax_grad"])
def test_a_gradients_exp_sum_pass_is_shifted_and_its_output_pass_is_not(op):
    """The backward's sum pass and output pass each compute exp(z - max): only the sum's may be
    exp_shifted_f32 (the output needs exp's values below the floor), in both CPU backends."""
    dtypes = ["float32,int64,float32"] if op is ex.cross_entropy_grad else ["float32,float32"]
    src = fg.emit(op, dtypes=dtypes).source
    text = src[src.index("namespace k_float32"):]
    assert "fg::exp_shifted_f32(" in text and "fg::exp_f32(" in text
    z = np.zeros((4, 300), np.float32)
    y = np.zeros(4, np.int64)
    args = (z, y, np.float32(1.0)) if op is ex.cross_entropy_grad else (z, np.ones_like(z))
    k = fg.compile(op)
    k(*args)
    body = k.source.split("def kernel", 1)[1]
    assert "_exp_shifted_f32(" in body and "_exp_f32(" in body


@pytest.mark.extended   # (a compile per op: the default run keeps its 5 minutes)
@pytest.mark.parametrize("backend", backends_extended("numba", "aot"))
def test_cross_entropy_grad_matches_float64_on_the_special_rows(backend):
    x = _rows()[[3, 4, 5, 7]]   # the finite rows: half -inf, underflowing exps, a far max, subnormal exps
    y = np.array([200, 0, 3, 1])
    g, = fg.compile(ex.cross_entropy_grad, backend=backend)(x, y, np.float32(1.0))
    d = x.astype(np.float64)
    e = np.exp(d - d.max(-1, keepdims=True))
    ref = e / e.sum(-1, keepdims=True)
    ref[np.arange(4), y] -= 1.0
    ref = (ref / 4).astype(np.float32)
    np.testing.assert_allclose(g, ref, rtol=1e-5, atol=1e-44)
    assert np.array_equal(g == 0, ref == 0)   # (exp_f32's zeros and subnormals in the output pass)


def _rows() -> np.ndarray:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((12, 300)) * 30).astype(np.float32)
    x[0] = -np.inf                        # every element -inf
    x[1, 7] = np.inf                      # one +inf
    x[2, 9] = np.nan
    x[3, :150] = -np.inf                  # half -inf
    x[4] = 0.0
    x[4, 0] = 200.0                       # the rest far below the max (exp underflows to 0)
    x[5] = -1e30
    x[5, 3] = -1e30 + 1e24
    x[6] = np.float32(3.0e38)             # near the largest float32
    x[7, ::2] = x[7, 0] - 95.0            # half in exp's subnormal range of the max
    return x


@pytest.mark.parametrize("backend", ["numba", pytest.param("aot", marks=pytest.mark.extended)])
def test_values_match_float64_and_the_special_rows(backend):
    x = _rows()
    got = fg.compile(lse_spellings, backend=backend)(x)
    with np.errstate(all="ignore"):
        d = x.astype(np.float64)
        m = d.max(-1, keepdims=True)
        lse = np.log(np.exp(d - m).sum(-1, keepdims=True)) + m
        lse = np.where(np.isfinite(m), lse, m)   # SciPy's: an infinite max is the result
    fin = np.isfinite(lse[:, 0])
    for out in got[0], got[2][:, 0], got[3]:
        np.testing.assert_allclose(out[fin], lse[fin, 0], rtol=3e-7)
    assert got[0][0] == -np.inf and got[0][1] == np.inf and np.isnan(got[0][2])
    ls = got[1]
    with np.errstate(all="ignore"):
        want = (d - m) - np.log(np.exp(d - m).sum(-1, keepdims=True))
    np.testing.assert_allclose(ls[3:], want[3:], rtol=3e-6, atol=1e-5)
    assert np.all(np.isnan(ls[2]))


@pytest.mark.extended   # (8 s: a g++ build and Numba compiles)
def test_numba_and_cpp_give_the_same_bits_as_exp_f32_would():
    x = _rows()[3:]
    a = fg.compile(lse_spellings)(x)
    c = fg.compile(lse_spellings, backend="aot")(x)
    for p, q in zip(a, c):
        assert np.array_equal(np.asarray(p).view(np.int32), np.asarray(q).view(np.int32))

    @fg.op
    def stored_too(x):   # the same sum with the exp also an output: exp_f32 throughout
        e = fg.exp(x - fg.max(x, axis=-1, keepdims=True))
        return fg.sum(e, axis=-1), e
    plain = fg.compile(stored_too)(x)[0]
    shifted = fg.compile(fg.op(lambda x: fg.sum(fg.exp(x - fg.max(x, axis=-1, keepdims=True)), axis=-1)))(x)
    assert np.array_equal(plain.view(np.int32), shifted.view(np.int32))
