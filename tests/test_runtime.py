"""The runtime (``fg.compile(op)`` -> ``Kernel``): the per-signature cache, attribute types in the
cache key, workspace reuse, ``out=``, argument handling and thread safety. Numbers are checked
against NumPy; the kernels used here are small and shared between tests.
"""
from __future__ import annotations

import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import fusegen as fg
import fusegen.examples as ex
from fusegen import runtime
from fusegen.errors import ArgumentError, AttrError, DTypeError, FusegenError, ShapeError

from conftest import assert_all_close, assert_close, np_ref, sample


def _softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _smooth_l1(x, y, sigma):
    d = x - y
    s2 = sigma * sigma
    return np.where(np.abs(d) < 1.0 / s2, 0.5 * s2 * d * d, np.abs(d) - 0.5 / s2)


# =============================================================================================
# fg.compile and the Kernel object
# =============================================================================================
def test_compile_returns_a_kernel():
    k = fg.compile(ex.softmax)
    assert isinstance(k, fg.Kernel) and k.op is ex.softmax
    assert repr(k) == "<fusegen.Kernel softmax backend=numba device=cpu>"
    assert k.source.startswith("# no call yet")
    assert k.sources() == {}


def test_compile_rejects_bad_arguments():
    with pytest.raises(TypeError, match="expects an @fusegen.op"):
        fg.compile(lambda x: x)
    with pytest.raises(ValueError, match="unknown backend 'llvm'"):
        fg.compile(ex.softmax, backend="llvm")
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        fg.compile(ex.softmax, device="tpu")


def test_calling_the_op_uses_one_default_kernel(rng):
    x = sample(rng, (3, 5), "float32")
    assert_close(ex.softmax(x), np_ref(_softmax, x))
    k = runtime.default_kernel(ex.softmax)
    assert k is runtime.default_kernel(ex.softmax)
    assert k.backend == "numba" and k.device == "cpu" and len(k._calls) >= 1


# =============================================================================================
# The per-signature cache
# =============================================================================================
def test_same_signature_is_prepared_once(rng, monkeypatch):
    k = fg.compile(ex.softmax)
    prepares = []
    real = k._prepare
    monkeypatch.setattr(k, "_prepare", lambda *a: prepares.append(1) or real(*a))
    x1, x2 = sample(rng, (4, 6), "float32"), sample(rng, (4, 6), "float32")
    assert_close(k(x1), np_ref(_softmax, x1))
    assert_close(k(x2), np_ref(_softmax, x2))   # other data, same signature
    assert_close(k(x1, axis=-1), np_ref(_softmax, x1))
    assert_close(k(x2, axis=-1), np_ref(_softmax, x2))
    assert len(prepares) == 2 and len(k._calls) == 2  # () and (axis=-1): two keys, each prepared once
    first, second = k._calls.values()
    (grp,) = first.groups
    assert second.groups[0].func is grp.func          # the same code: -1 is the default axis
    compiled = len(grp.func.signatures)               # (other tests may share this dispatcher)
    # another shape with the same rank and dtypes: a new signature, the same machine code
    x3 = sample(rng, (7, 6), "float32")
    assert_close(k(x3), np_ref(_softmax, x3))
    assert len(prepares) == 3 and len(k._calls) == 3
    assert k._last.groups[0].func is grp.func and len(grp.func.signatures) == compiled


def test_other_attribute_value_of_the_same_type_reuses_compiled_code(rng):
    k = fg.compile(ex.smooth_l1)
    x, y = sample(rng, (4, 6), "float32"), sample(rng, (4, 6), "float32")
    assert_close(k(x, y, sigma=1.0), np_ref(_smooth_l1, x, y, 1.0))
    (g1,) = k._last.groups
    compiled = len(g1.func.signatures)
    assert_close(k(x, y, sigma=0.5), np_ref(_smooth_l1, x, y, 0.5))
    (g2,) = k._last.groups
    assert len(k._calls) == 2
    assert g1.func is g2.func and len(g1.func.signatures) == compiled and g1.source == g2.source
    # a reduction axis is an attribute too: axis 0 and 1 of a rank-3 input are both col mode
    k = fg.compile(ex.add_reduce_sum)
    x = sample(rng, (2, 3, 4), "float32")
    assert_close(k(x, x, axis=0), np.sum(x + x, axis=0))
    f0 = k._last.groups[0].func
    compiled = len(f0.signatures)
    assert_close(k(x, x, axis=1), np.sum(x + x, axis=1))
    assert k._last.groups[0].func is f0 and len(f0.signatures) == compiled


@pytest.mark.parametrize("first, second", [
    (dict(axis=1), dict(axis=True)),           # True == 1 and hash(True) == hash(1)
    (dict(keep_dims=True), dict(keep_dims=1)),
    (dict(axis=1), dict(axis=1.0)),
])
def test_attribute_type_is_part_of_the_cache_key(first, second):
    k = fg.compile(ex.add_reduce_sum)
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    want = np.sum(x + x, axis=first.get("axis", 1), keepdims=first.get("keep_dims", False))
    assert_close(k(x, x, **first), want)
    assert_close(k(x, x, **first), want)  # a hit
    with pytest.raises(AttrError, match=f"attribute {next(iter(second))!r}"):
        k(x, x, **second)
    assert len(k._calls) == 1


def test_list_attributes_are_accepted_uncached(rng):
    @fg.op
    def sum_axes(x, *, axes: list[int] = (0,)):
        return fg.sum(x, axis=axes)

    k = fg.compile(sum_axes)
    x = sample(rng, (2, 3, 4), "float64")
    assert_close(k(x, axes=[0, 2]), np.sum(x, axis=(0, 2)))
    assert_close(k(x, axes=(0, 2)), np.sum(x, axis=(0, 2)))
    assert_close(k(x, axes=np.array([2, 0])), np.sum(x, axis=(0, 2)))


def test_workspaces_are_reused_between_calls(rng):
    # along axis 0 (col mode) the max and the sum are arrays the later loops read by column
    k = fg.compile(ex.softmax)
    x = sample(rng, (5, 6), "float32")
    k(x, axis=0)
    (call,) = k._calls.values()
    assert len(call.ws) == 2                        # max and sum: declared by the plan
    assert len(call.pool) == 1
    ws = call.pool[0]
    assert [w.shape for w in ws] == [(1, 6), (1, 6)] and all(w.dtype == np.float32 for w in ws)
    ids = [id(w) for w in ws]
    for _ in range(3):
        assert_close(k(x, axis=0), np_ref(_softmax, x, axis=0))
    assert len(call.pool) == 1 and [id(w) for w in call.pool[0]] == ids  # the same arrays


def test_row_statistics_read_back_in_the_same_task_are_locals(rng):
    """A row-mode group that writes a reduction and reads it back in the same task (softmax's max
    and sum, a layer norm's mean and variance) keeps it in a local: no workspace array, no pool;
    one read by another group stays an array (``lower/cpu_kept``)."""
    for op, shape in ((ex.softmax, (5, 6)), (ex.layer_norm, (3, 7)), (ex.rms_norm, (4, 5))):
        k = fg.compile(op)
        args = [sample(rng, shape, "float32")] + ([sample(rng, shape[-1:], "float32")] if op is ex.rms_norm else [])
        k(*args)
        (call,) = k._calls.values()
        assert call.ws == [] and call.pool == [], op.name
        assert all("ws" not in name for g in call.groups for name in g.source.split("def kernel(")[1].split(")")[0].split(", "))
    assert_close(k(*args), np_ref(lambda x, w: x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w, *args))


def test_outputs_are_fresh_arrays_each_call(rng):
    k = fg.compile(ex.add_mul_div)
    x, y = sample(rng, (3, 4), "float64"), sample(rng, (3, 4), "float64", lo=1, hi=2)
    a = k(x, y)
    saved = [o.copy() for o in a]
    b = k(y, x)
    assert all(p is not q for p, q in zip(a, b))
    for o, s in zip(a, saved):
        np.testing.assert_array_equal(o, s)  # the first results were not overwritten


def test_inputs_may_be_lists_scalars_and_numpy_scalars():
    got = ex.add_mul_div([1.0, 2.0, 4.0], 2.0)      # a Python float is a 0-d float64 array here
    assert_all_close(got, (np.array([3.0, 4.0, 6.0]), np.array([2.0, 4.0, 8.0]), np.array([0.5, 1.0, 2.0])))
    got = ex.add_mul_div(np.array([1.0, 2.0, 4.0]), np.float64(2.0))   # a NumPy scalar: the same signature
    assert_all_close(got, (np.array([3.0, 4.0, 6.0]), np.array([2.0, 4.0, 8.0]), np.array([0.5, 1.0, 2.0])))


def test_op_returning_a_one_tuple_returns_a_one_tuple():
    one = fg.op(lambda x: (x * 2.0,), name="one_tuple")
    assert one.multi_output
    got = one(np.ones(3))
    assert isinstance(got, tuple) and len(got) == 1


# =============================================================================================
# out=
# =============================================================================================
def test_out_receives_the_results(rng):
    k = fg.compile(ex.layer_norm)
    x = sample(rng, (4, 8), "float32")
    outs = (np.empty((4, 8), np.float32), np.empty((4, 1), np.float32), np.empty((4, 1), np.float32))
    got = k(x, out=outs)
    assert isinstance(got, tuple) and all(g is o for g, o in zip(got, outs))
    want = np_ref(lambda a: _layer_norm(a), x)
    assert_all_close(outs, want)
    # out as a list works as well, and a single-output op takes a bare array
    k2 = fg.compile(ex.softmax)
    o = np.full((4, 8), np.nan, np.float32)
    assert k2(x, out=o) is o
    assert_close(o, np_ref(_softmax, x))
    o[:] = np.nan
    assert k2(x, out=[o]) is o                   # a one-element list is accepted too
    assert_close(o, np_ref(_softmax, x))


def _layer_norm(x, axis=-1, eps=1e-5):
    m = np.mean(x, axis=axis, keepdims=True)
    d = x - m
    rstd = 1.0 / np.sqrt(np.mean(d * d, axis=axis, keepdims=True) + eps)
    return d * rstd, m, rstd


def test_out_float16_and_non_contiguous(rng):
    k = fg.compile(ex.bias_gelu)
    x, b = sample(rng, (4, 8), "float16"), sample(rng, (8,), "float16")
    o = np.empty((4, 8), np.float16)
    assert k(x, b, out=o) is o                  # the kernel writes float32; the result is copied
    assert_close(o, k(x, b))
    big = np.zeros((8, 4), np.float16)
    view = big.T                                # (4, 8), not contiguous
    assert k(x, b, out=view) is view
    assert_close(view, k(x, b))
    assert_close(big, k(x, b).T)


@pytest.mark.parametrize("bad, exc, match", [
    (lambda: np.empty((4, 7), np.float32), ShapeError, r"out\[0\] must have shape \(4, 8\), got \(4, 7\)"),
    (lambda: np.empty((4, 8), np.float64), DTypeError, r"out\[0\] must have dtype float32, got float64"),
    (lambda: [np.empty((4, 8), np.float32)] * 2, ArgumentError, r"out= needs 1 arrays, got 2"),
    (lambda: ([[0.0] * 8] * 4,), ArgumentError, r"out\[0\] must be a numpy array, got list"),
])
def test_out_is_validated(bad, exc, match, rng):
    k = fg.compile(ex.softmax)
    x = sample(rng, (4, 8), "float32")
    with pytest.raises(exc, match=match) as e:
        k(x, out=bad())
    assert "op softmax" in str(e.value)


def test_read_only_out_is_rejected(rng):
    k = fg.compile(ex.softmax)
    x = sample(rng, (4, 8), "float32")
    ro = np.zeros((4, 8), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ArgumentError, match=r"op softmax: out\[0\] is read-only"):
        k(x, out=ro)
    assert not ro.any()


# =============================================================================================
# Thread safety
# =============================================================================================
def test_eight_threads_on_one_kernel_get_their_own_results(rng):
    k = fg.compile(ex.softmax)      # workspaces: the pool must not be shared between live calls
    datas = [sample(rng, (16, 33), "float32", lo=-4, hi=4) for _ in range(8)]
    wants = [np_ref(_softmax, d) for d in datas]
    k(datas[0])                     # prepared once; the threads then race on the hot path
    barrier = threading.Barrier(8)

    def work(i):
        barrier.wait()
        bad = 0
        for _ in range(200):
            got = k(datas[i])
            bad += not np.allclose(got, wants[i], rtol=2e-5, atol=1e-6)
        return bad

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)     # switch threads often: more interleavings on the hot path
    try:
        with ThreadPoolExecutor(8) as pool:
            errors = list(pool.map(work, range(8)))
    finally:
        sys.setswitchinterval(old)
    assert errors == [0] * 8


def test_threads_preparing_new_signatures_concurrently(rng):
    k = fg.compile(ex.layer_norm)
    shapes = [(2 + i, 8) for i in range(8)]
    datas = [sample(rng, s, "float32") for s in shapes]
    barrier = threading.Barrier(8)

    def work(i):
        barrier.wait()
        return k(datas[i])

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(work, range(8)))
    for d, r in zip(datas, results):
        assert_all_close(r, np_ref(_layer_norm, d))
    assert len(k._calls) == 8
