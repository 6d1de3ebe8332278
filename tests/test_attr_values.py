"""Attribute values that change from call to call (a seed, a step, a scale): a signature that
differs from a prepared one only in attributes its code takes as run-time scalars reuses that
code (``rt.kernel``) and the op's trace (``OpDef.specialize``), with the new values; one whose
shapes, axes or compute dtypes depend on an attribute's value is prepared for it. Each case
checks the results against NumPy or a kernel compiled afresh, in both orders of values."""
from __future__ import annotations

import numpy as np
import pytest

import fusegen as fg
import fusegen.examples as ex
from _optional import backends, backends_extended
from fusegen.graph.rules import infer
from fusegen.rt.call import MAX_SIGNATURES


def _ln_inputs(rows=8, cols=32):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    return x, rng.standard_normal((rows, cols)).astype(np.float32), np.ones(cols, np.float32), \
        np.zeros(cols, np.float32)


@pytest.mark.parametrize("backend", backends_extended("numba", "aot"))
def test_a_seed_changed_per_call_gives_the_fresh_kernels_results_without_tracing_again(backend):
    args = _ln_inputs()
    k = fg.compile(ex.dropout_add_layer_norm, backend=backend)
    got = {s: k(*args, seed=s) for s in (3, 4, 5, 3, 9)}
    for s in (3, 9):
        want = fg.compile(ex.dropout_add_layer_norm, backend=backend)(*args, seed=s)
        for a, b in zip(got[s], want):
            np.testing.assert_array_equal(a, b)
    assert not np.array_equal(got[3][1], got[4][1])   # (the seed reached the kernel)
    # the op is traced per shape (x.shape): one trace serves every seed
    assert len(ex.dropout_add_layer_norm.specializations) >= 1
    n = len(ex.dropout_add_layer_norm.specializations)
    for s in range(20, 40):
        k(*args, seed=s, p=0.25)
    assert len(ex.dropout_add_layer_norm.specializations) == n


def test_prepared_signatures_are_bounded():
    @fg.op
    def scaled(x, *, step: int = 0):
        return x * step + 1

    k = fg.compile(scaled)
    x = np.arange(6, dtype=np.float32)
    for s in range(MAX_SIGNATURES + 40):
        np.testing.assert_array_equal(k(x, step=s), x * s + 1)
    assert len(k.sources()) <= MAX_SIGNATURES


@pytest.mark.parametrize("backend", backends_extended("numba", "aot"))
def test_a_slice_bound_attribute_is_prepared_per_value(backend):
    @fg.op
    def head(x, *, n: int = 1):
        return x[..., :n] * 2.0

    k = fg.compile(head, backend=backend)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for n in (10, 20, 2, 3, 10, 1):   # 10 and 20 clip to the same shape; 2 must not reuse it
        np.testing.assert_array_equal(k(x, n=n), x[..., :n] * 2.0)


@pytest.mark.parametrize("backend", backends_extended("numba", "aot"))
def test_a_comparison_widened_by_an_attributes_value(backend):
    @fg.op
    def below(x, *, n: int = 0):
        return x < n

    k = fg.compile(below, backend=backend)
    x = np.array([-128, -5, 0, 5, 127], dtype=np.int8)
    for n in (3, 1000, -1000, 3, 127):   # int8 at 3, int64 (exactly) at +-1000
        np.testing.assert_array_equal(k(x, n=n), x.astype(np.int64) < n)


@pytest.mark.parametrize("backend", backends("numba", "aot"))
def test_a_narrow_int_compared_with_a_dim_or_an_attribute_past_its_range(backend):
    # the emitted source serves every value (AOT, XLA): it compares in int64, as NumPy 2 does
    @fg.op
    def inside(x, *, lo: int = 0):
        return (x < x.shape[-1]) & (x >= lo)

    k = fg.compile(inside, backend=backend)
    x = np.arange(-128, 172, dtype=np.int16).astype(np.int8)   # 300 elements: the dim is past int8
    for lo in (-1000, 5, 200):
        np.testing.assert_array_equal(k(x, lo=lo), (x.astype(np.int64) < 300) & (x >= lo))


@pytest.mark.parametrize("backend", backends_extended("numba", "aot"))
def test_an_attribute_mixed_with_a_dim(backend):
    # x.shape[-1] * scale is worked out before the call and handed to the kernel as one value
    @fg.op
    def per_rank(x, *, scale: float = 1.0, k: int = 0):
        return x * (x.shape[-1] * scale) + (x.shape[0] - k)

    kern = fg.compile(per_rank, backend=backend)
    x = np.ones((2, 3), np.float32)
    for scale, k in ((1.0, 0), (2.0, 0), (2.0, 5), (0.5, 1)):
        np.testing.assert_array_equal(kern(x, scale=scale, k=k), x * (3 * scale) + (2 - k))


def test_an_attribute_axis_and_a_bool_attribute():
    @fg.op
    def total(x, *, axis: int = 0, neg: bool = False):
        return fg.where(neg, -x, x).sum(axis=axis)

    k = fg.compile(total)
    x = np.arange(12, dtype=np.float64).reshape(3, 4)
    for axis, neg in ((0, False), (1, False), (0, True), (1, True), (0, False)):
        np.testing.assert_array_equal(k(x, axis=axis, neg=neg), (-x if neg else x).sum(axis=axis))


@fg.op
def bump(x, *, n: int = 0):
    return x + n


def test_an_int_attribute_past_int64_on_a_uint64_tensor():
    k = fg.compile(bump)
    x = np.array([0, 1, 7], dtype=np.uint64)
    for n in (1, 2 ** 63 + 5, 2, 2 ** 64 - 8):
        np.testing.assert_array_equal(k(x, n=n), x + np.uint64(n))


def test_a_value_check_still_runs_for_a_reused_signature():
    k = fg.compile(bump)
    x = np.array([1, 2, 250], dtype=np.uint8)
    np.testing.assert_array_equal(k(x, n=5), x + np.uint8(5))
    with pytest.raises(fg.ScalarRangeError, match="300"):
        k(x, n=300)

    @fg.op
    def coin(x, *, p: float = 0.5, seed: int = 0):
        return fg.where(fg.random.bernoulli(seed, p, x.shape), x, 0.0)

    c = fg.compile(coin)
    y = np.ones((4, 4), np.float32)
    c(y, p=0.25, seed=1)
    with pytest.raises(fg.AttrError, match="p=1.5"):
        c(y, p=1.5, seed=2)


def test_the_rules_say_which_attributes_decide_shapes():
    @fg.op
    def f(x, *, n: int = 1, axis: int = 0, scale: float = 1.0, seed: int = 0):
        noise = fg.random.uniform(seed, x.shape)
        return (x[:n] * scale + noise[:n]).sum(axis=axis)

    consulted: set = set()
    op = f.specialize(["float32"], [(4, 3)], f.bind_attrs({}))
    infer(op, ["float32"], [(4, 3)], f.bind_attrs({}), consulted)
    assert consulted == {"n", "axis"}   # scale and seed reach the kernel as run-time scalars


def test_an_inlined_op_binds_its_attributes_as_a_call_does():
    @fg.op
    def inner(x, *, scale: float = 1):
        return x * scale

    @fg.op
    def given(x):
        return inner(x, scale=2)     # a float attribute: 2.0, as inner(x_array, scale=2) takes it

    @fg.op
    def defaulted(x, *, s: float = 3.0):
        return inner(x, scale=s) + inner(x)

    x = np.arange(4, dtype=np.int32)
    assert given(x).dtype == inner(x, scale=2).dtype == np.float64
    np.testing.assert_array_equal(defaulted(x), x * 3.0 + x * 1.0)
    assert defaulted(x).dtype == np.float64
    with pytest.raises(fg.AttrError, match="op inner: attribute 'scale': expected float"):
        fg.op(lambda x: inner(x, scale="a"))
    with pytest.raises(fg.AttrError, match="unknown attribute 'scal'"):
        fg.op(lambda x: inner(x, scal=2.0))


def test_a_0d_array_is_its_scalar_as_an_attribute():
    args = _ln_inputs(4, 8)
    k = fg.compile(ex.dropout_add_layer_norm)
    for a, b in zip(k(*args, seed=np.array(7), p=np.array(0.5)), k(*args, seed=7, p=0.5)):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(fg.AttrError, match="expected int"):
        k(*args, seed=np.array([7]))


@fg.op
def recip(x, *, a: float = 1.0):
    return x / a


@fg.op
def per_dim(x, *, s: float = 1.0):
    return x / (x.shape[-1] * s)


@pytest.mark.filterwarnings("ignore:divide by zero")
@pytest.mark.parametrize("backend", backends_extended("numba", "aot"))
def test_minus_zero_is_not_zero(backend):
    # -0.0 == 0.0 as Python dict keys; every cache by attribute values tells them apart
    x = np.array([1.0, -2.0], np.float32)
    for op, name in ((recip, "a"), (per_dim, "s")):
        k = fg.compile(op, backend=backend)
        for v in (0.0, -0.0, np.float64(-0.0), np.array(-0.0), 0.0):
            np.testing.assert_array_equal(k(x, **{name: v}), x / float(v) if op is recip else x / (2 * float(v)))


def test_a_refused_list_value_is_not_served_from_the_cache():
    @fg.op
    def total(x, *, axes: list[int] = (0,)):
        return fg.sum(x, axis=axes)

    k = fg.compile(total)
    m = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(k(m, axes=(0,)), m.sum(0))
    for bad in ((0.0,), (np.float64(0),)):
        with pytest.raises(fg.AttrError, match="expected list\\[int\\]"):
            k(m, axes=bad)


def test_attribute_arithmetic_past_int64_and_ints_past_64_bits_are_refused():
    @fg.op
    def sq(x, *, n: int = 1):
        return x + n * n

    k = fg.compile(sq)
    y = np.array([1.0, 2.0])
    np.testing.assert_array_equal(k(y, n=3), y + 9)
    with pytest.raises(fg.ScalarRangeError, match="18446744073709551616"):
        k(y, n=2 ** 32)              # n * n: Python's exact value would wrap in the kernel's int64
    with pytest.raises(fg.AttrError, match="does not fit in 64 bits"):
        fg.compile(bump)(np.array([1.0]), n=2 ** 64)


@pytest.mark.parametrize("backend", backends_extended("numba", "aot"))
def test_write_requests_on_an_op_traced_per_shape(backend):
    @fg.op
    def two(x):
        r, c = x.shape
        return x * c, x + r

    k = fg.compile(two, backend=backend)
    x = np.ones((2, 3), np.float32)
    s, none = k(x, skip=[1])
    assert none is None
    np.testing.assert_array_equal(s, x * 3)
    acc = np.ones((2, 3), np.float32)
    k(x, accumulate=[0], out=(acc, None), skip=[1])
    np.testing.assert_array_equal(acc, 1 + x * 3)


@pytest.mark.parametrize("backend", backends_extended("numba", "aot"))
def test_slice_steps_near_int64s_ends(backend):
    @fg.op
    def every(x, *, s: int = 1):
        return x[:, 0:6:s] * 1.0

    @fg.op
    def back(x, *, s: int = -1):
        return x[:, ::s] * 1.0

    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    k, kb = fg.compile(every, backend=backend), fg.compile(back, backend=backend)
    for s in (4, 2 ** 63 - 1, 2 ** 63 - 6):
        np.testing.assert_array_equal(k(x, s=s), x[:, 0:6:s])
    for s in (-4, -(2 ** 63 - 1), -2 ** 63):
        np.testing.assert_array_equal(kb(x, s=s), x[:, ::s])
