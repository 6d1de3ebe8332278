"""Write requests (MXNet's OpReqType): accumulate into out= (kAddTo, fused), skip outputs
(kNullOp, not computed), and in-place outputs (kWriteInplace), on the Numba and AOT
backends, against NumPy; plus the rewrite itself and every refusal."""
from __future__ import annotations

import numpy as np
import pytest

import fusegen as fg
from fusegen import examples as ex
from fusegen.plan import build_plan
from fusegen.rt.requests import inplace_hazard

from conftest import compile_for
from _optional import backends

BACKENDS = backends("numba", "aot")
BIG = (512, 384)   # above the parallel threshold: threads and tiles take part


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request):
    return request.param


def _data(shape, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape).astype(np.float32), (rng.standard_normal(shape) + 4).astype(np.float32)


@pytest.mark.parametrize("shape", [(5, 7), BIG])
def test_accumulate_adds_every_output_in_one_pass(backend, shape):
    x, y = _data(shape)
    k = compile_for(ex.add_mul_div, backend)
    outs = [np.full(shape, v, np.float32) for v in (1.0, 2.0, 3.0)]
    res = k(x, y, out=tuple(outs), accumulate=True)
    assert all(r is o for r, o in zip(res, outs))
    for o, v, want in zip(outs, (1.0, 2.0, 3.0), (x + y, x * y, x / y)):
        np.testing.assert_allclose(o, v + want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axis, keep", [(0, False), (1, True), (-1, False)])
def test_accumulate_into_a_reduction(backend, axis, keep):
    x, y = _data(BIG, 1)
    prev = np.linspace(-1, 1, (x + y).sum(axis=axis, keepdims=keep).size, dtype=np.float32)
    prev = prev.reshape((x + y).sum(axis=axis, keepdims=keep).shape)
    want = prev + (x + y).sum(axis=axis, keepdims=keep)
    k = compile_for(ex.add_reduce_sum, backend)
    k(x, y, axis=axis, keep_dims=keep, out=prev, accumulate=True)
    np.testing.assert_allclose(prev, want, rtol=1e-4, atol=1e-3)


def test_accumulate_some_outputs_and_skip_others(backend):
    x, y = _data((6, 5), 2)
    k = compile_for(ex.layer_norm, backend)
    y0, mean, rstd = fg.compile(ex.layer_norm)(x)
    acc = np.ones_like(y0)
    res = k(x, out=(acc, None, None), accumulate=[0], skip=(1, 2))
    assert res[0] is acc and res[1] is None and res[2] is None
    np.testing.assert_allclose(acc, 1 + y0, rtol=1e-5, atol=1e-5)
    res = k(x, skip=-1)
    assert res[2] is None
    # a mean near zero of O(1) values: summation order moves it by ~eps, so the bound is absolute there
    np.testing.assert_allclose(res[1], mean, rtol=1e-6, atol=1e-6)


def test_skipped_outputs_are_not_computed():
    derived = ex.layer_norm.with_requests(skip=(0, 2))
    assert len(derived.graph.outputs) == 1
    plan = build_plan(derived)
    assert [r.arg.kind for s in plan.stages for r in s.reductions] == ["mean"]   # no variance pass
    assert derived.name == "layer_norm_sws" and derived.base is ex.layer_norm


def test_the_rewrite_reads_as_out_plus_y_and_emits():
    derived = ex.add_reduce_sum.with_requests(accumulate=True)
    assert derived.inputs == ["x", "y", "prev0"]
    assert "add %0, %" in derived.text(locations=False)
    files = fg.emit(derived, dtypes="float32")
    assert "AddReduceSumA(" in files.source and "AddReduceSumAInit" in files.source


def test_float16_outputs_accumulate_through_the_conversion(backend):
    x, y = (a.astype(np.float16) for a in _data((8, 8), 3))
    out = np.full((8,), 0.5, np.float16)
    compile_for(ex.add_reduce_sum, backend, "float16")(x, y, out=out, accumulate=True)
    want = 0.5 + (x.astype(np.float32) + y.astype(np.float32)).sum(axis=1)
    np.testing.assert_allclose(out.astype(np.float32), want, rtol=2e-3, atol=2e-2)


def test_request_errors_are_clear(backend):
    x, y = _data((4, 3))
    k = compile_for(ex.add_mul_div, backend)
    with pytest.raises(fg.ArgumentError, match="accumulate needs the arrays to add to"):
        k(x, y, accumulate=True)
    with pytest.raises(fg.ArgumentError, match="outputs are numbered 0..2"):
        k(x, y, skip=3)
    with pytest.raises(fg.ArgumentError, match="every output is skipped"):
        k(x, y, skip=True)
    with pytest.raises(fg.ArgumentError, match="both skipped and accumulated"):
        k(x, y, out=(x.copy(), None, None), skip=[1, 2, 0], accumulate=[0])
    with pytest.raises(fg.ArgumentError, match="must be None"):
        k(x, y, out=(x.copy(), x.copy(), x.copy()), skip=1)
    with pytest.raises(fg.ShapeError, match="out\\[0\\]"):
        k(x, y, out=(np.zeros(3, np.float32), None, None), skip=(1, 2), accumulate=0)


def test_attributes_cannot_shadow_call_keywords():
    with pytest.raises(fg.TraceError, match="cannot be named 'accumulate'"):
        @fg.op
        def bad(x, *, accumulate: bool = False):
            return x


# --- in place -------------------------------------------------------------------------------------
@fg.op(inplace="x")
def scaled_softmax(x, *, scale: float = 1.0):
    m = fg.max(x, axis=-1, keep_dims=True)
    e = fg.exp((x - m) * scale)
    return e / fg.sum(e, axis=-1, keep_dims=True)


@fg.op(inplace={0: "x"})
def shift_then_center(x):
    # output 0 written by the first pass, x read again by the second: unsafe in place
    return x + 1.0, x - fg.mean(x, axis=-1, keep_dims=True)


@fg.op(inplace={0: "x"})
def add(x, y):
    return x + y


@pytest.mark.parametrize("shape", [(3, 5), BIG])
def test_inplace_softmax_overwrites_its_input(backend, shape):
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    want = np.exp(2 * (x - x.max(-1, keepdims=True)))
    want /= want.sum(-1, keepdims=True)
    res = compile_for(scaled_softmax, backend)(x, scale=2.0, inplace=True)
    assert res is x
    np.testing.assert_allclose(x, want, rtol=1e-5, atol=1e-6)


def test_inplace_hazards_are_found_in_the_plan():
    assert inplace_hazard(build_plan(scaled_softmax), 0, 0) is None
    assert "later pass reads input 'x'" in inplace_hazard(build_plan(shift_then_center), 0, 0)
    assert "reduction's result" in inplace_hazard(build_plan(ex.add_reduce_sum), 0, 0)
    both = fg.op(lambda x: (x * 2.0, x + 1.0), inplace={0: "x"})
    assert "same loop, also reads" in inplace_hazard(build_plan(both), 0, 0)


def test_inplace_refusals(backend):
    x, y = _data((4, 3))
    with pytest.raises(fg.ArgumentError, match="later pass reads input 'x'"):
        compile_for(shift_then_center, backend)(x, inplace=True)
    with pytest.raises(fg.ArgumentError, match="declares no output"):
        compile_for(ex.add_mul_div, backend)(x, y, inplace=True)
    k = compile_for(add, backend)
    with pytest.raises(fg.ShapeError, match="cannot write in place"):
        k(np.ones(3, np.float32), y, inplace=True)               # x is broadcast: too small
    with pytest.raises(fg.ArgumentError, match="not a writeable C-contiguous"):
        k(np.ones((3, 4), np.float32).T, y, inplace=True)
    with pytest.raises(fg.ArgumentError, match="shares memory with another input"):
        k(x, x, inplace=True)
    with pytest.raises(fg.ArgumentError, match="out\\[0\\] is given as well"):
        k(x, y, out=x.copy(), inplace=True)
    before = x.copy()
    with pytest.raises(fg.DTypeError):
        k(x, y.astype(np.float64), inplace=True)                  # the sum is float64
    np.testing.assert_array_equal(x, before)                      # refused before anything ran
    assert k(x, y, inplace=True) is x
    np.testing.assert_allclose(x, before + y)


@fg.op(inplace={0: "x"})
def sum_and_double(x, y):
    return x + y, y * 2.0


@pytest.mark.parametrize("shape", [(3, 5), BIG])
def test_inplace_for_some_outputs_and_none_in_out(backend, shape):
    # the outputs not declared in place are allocated; None in out= is too, as in NumPy's ufuncs
    k = compile_for(sum_and_double, backend)
    x, y = _data(shape)
    before = x.copy()
    s, d = k(x, y, inplace=True)
    assert s is x and isinstance(d, np.ndarray)
    np.testing.assert_allclose(x, before + y)
    np.testing.assert_allclose(d, y * 2)
    a = np.empty_like(x)
    s, d = k(before, y, out=(None, a))
    assert d is a
    np.testing.assert_allclose(s, before + y)
    np.testing.assert_allclose(a, y * 2)
    s, d = k(before, y, out=[None, None])
    np.testing.assert_allclose(d, y * 2)


def test_inplace_declarations_are_checked():
    with pytest.raises(fg.TraceError, match="not an input"):
        fg.op(lambda x: x * 2.0, inplace="y")
    with pytest.raises(fg.TraceError, match="not an output index"):
        fg.op(lambda x: x * 2.0, inplace={1: "x"})
    with pytest.raises(fg.TraceError, match="given to two outputs"):
        fg.op(lambda x: (x * 2.0, x + 1.0), inplace={0: "x", 1: "x"})
