"""out= arrays that share memory with inputs: every CPU backend gives NumPy's answer (as if the
inputs were read before any output is written), through the fast path's overlap check
(``fastcall.overlap``) and ``Kernel._aliased``; a declared in-place output whose input is read
through a view is refused."""
import numpy as np
import pytest

import fusegen as fg
import fusegen.examples as ex
from fusegen.native import fastcall
from _optional import backends, backends_extended

BACKENDS = backends("numba", "aot")              # (add_mul: the AOT backend had the bug)
WIDE = backends_extended("numba", "aot")         # (an AOT build per op: -m extended)


@fg.op
def add_mul(x, y):
    return x + y, x * y


@fg.op
def twice(x):
    return x * 2.0 + 1.0


@fg.op(inplace={0: "y"})
def add_transposed(x, y):
    return x + y.T


@fg.op(inplace={0: "x"})
def shift(x, *, c: float = 1.0):
    return x + c


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_output_over_an_input_another_output_reads(backend):
    k = fg.compile(add_mul, backend=backend)
    x0, y = np.arange(1, 6, dtype=np.float32), np.full(5, 2, np.float32)
    for _ in range(2):   # the first call prepares the signature; the second takes the fast path
        x = x0.copy()
        p = np.empty_like(x)
        s, q = k(x, y, out=(x, p))
        assert s is x and q is p
        np.testing.assert_array_equal(s, x0 + y)
        np.testing.assert_array_equal(q, x0 * y)


@pytest.mark.extended   # (a compile per op: the default run keeps its 5 minutes)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [8, 64, 300])
def test_an_output_over_an_input_read_transposed(backend, n):
    k = fg.compile(ex.transpose_add, backend=backend)
    x = np.ones((n, n), np.float32)
    y0 = np.arange(n * n, dtype=np.float32).reshape(n, n)
    for _ in range(2):
        y = y0.copy()
        r = k(x, y, out=y)
        assert r is y
        np.testing.assert_array_equal(r, x + y0.T)


@pytest.mark.extended   # (a compile per op: the default run keeps its 5 minutes)
@pytest.mark.parametrize("backend", BACKENDS)
def test_partly_overlapping_views(backend):
    k = fg.compile(twice, backend=backend)
    buf0 = np.arange(40, dtype=np.float32)
    for _ in range(2):
        buf = buf0.copy()
        r = k(buf[:-1], out=buf[1:])    # each element written where the next one is read
        np.testing.assert_array_equal(r, buf0[:-1] * 2 + 1)
        buf = buf0.copy()
        r = k(buf[::2], out=buf[1::2])   # interleaved: the bounds overlap, the elements do not
        np.testing.assert_array_equal(r, buf0[::2] * 2 + 1)


@pytest.mark.extended   # (a compile per op: the default run keeps its 5 minutes)
@pytest.mark.parametrize("backend", BACKENDS)
def test_reductions_with_their_input_as_output(backend):
    """softmax stores its exp in the output and reads x for the sum: written over x, it must not
    read its own exps back as x."""
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal((6, 33)).astype(np.float32)
    want = np.exp(x0 - x0.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    k = fg.compile(ex.softmax, backend=backend)
    for _ in range(2):
        x = x0.copy()
        np.testing.assert_allclose(k(x, out=x), want, rtol=1e-5)
    k = fg.compile(ex.layer_norm, backend=backend)
    x = x0.copy()
    y, mean, rstd = k(x, out=(x, np.empty((6, 1), np.float32), np.empty((6, 1), np.float32)))
    np.testing.assert_allclose(y, (x0 - x0.mean(-1, keepdims=True)) / np.sqrt(x0.var(-1, keepdims=True) + 1e-5),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("backend", WIDE)
def test_exact_aliases_the_plan_allows_are_written_in_place(backend):
    """An add-to request's output is its own prev input (the same memory): written there, no
    temporary, and so is a declared in-place output."""
    k = fg.compile(add_mul, backend=backend)
    x, y = np.arange(5, dtype=np.float32), np.full(5, 2, np.float32)
    a, b = np.ones(5, np.float32), np.ones(5, np.float32)
    ra, rb = k(x, y, out=(a, b), accumulate=True)
    assert ra is a and rb is b
    np.testing.assert_array_equal(a, 1 + x + y)
    np.testing.assert_array_equal(b, 1 + x * y)
    s = fg.compile(shift, backend=backend)
    z = np.arange(6, dtype=np.float64)
    assert s(z, c=2.0, out=z) is z
    np.testing.assert_array_equal(z, np.arange(6) + 2.0)
    assert s(z, inplace=True) is z
    np.testing.assert_array_equal(z, np.arange(6) + 3.0)


@pytest.mark.extended   # (a compile per op: the default run keeps its 5 minutes)
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_declared_in_place_output_is_refused_where_its_input_is_read_through_a_view(backend):
    k = fg.compile(add_transposed, backend=backend)
    x, y = np.ones((8, 8), np.float32), np.arange(64, dtype=np.float32).reshape(8, 8)
    with pytest.raises(fg.ArgumentError, match=r"add_transposed: cannot write output 0 in place of input 'y'"
                                               r".*permute_dims.*at other indices"):
        k(x, y, inplace=True)
    np.testing.assert_array_equal(y, np.arange(64, dtype=np.float32).reshape(8, 8))   # (untouched)


@pytest.mark.parametrize("overlap", [fastcall.overlap_fn(), fastcall.numpy_overlap], ids=["extension", "numpy"])
def test_the_overlap_check(overlap):
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    b = np.zeros_like(a)
    assert not overlap(b, a) and not overlap((b, None), a, 3.0)
    assert overlap(a, a) and overlap((b, a.T), a) and overlap([b[0], a[1:, ::-1]], b[3:], a[2:3])
    assert overlap(a[1::2], a[::2])          # bounds only, as np.may_share_memory
    assert not overlap(a[:2], a[2:]) and not overlap(a[:, :0], a)   # (an empty array spans nothing)
    assert not overlap("not an array", a) and not overlap(a)


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_contiguous_out_arrays(backend):
    """A transposed or strided out= view is written (through a temporary) on every backend, with
    the same checks and messages."""
    k = fg.compile(add_mul, backend=backend)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = np.full((3, 4), 2, np.float32)
    s, p = np.zeros((4, 3), np.float32).T, np.zeros((3, 8), np.float32)[:, ::2]
    rs, rp = k(x, y, out=(s, p))
    assert rs is s and rp is p
    np.testing.assert_array_equal(s, x + y)
    np.testing.assert_array_equal(p, x * y)
    with pytest.raises(fg.DTypeError, match=r"op add_mul: out\[0\] must have dtype float32, got float64"):
        k(x, y, out=(np.zeros((3, 4)), p))
