"""fg.grad through layout ops: each adjoint (inverse permutation, flip, reshape back, sum over
broadcast dims, slices of a concat or pad, zeros padded around a slice) against central finite
differences of a NumPy reference. One forward op with many outputs, so the backward compiles once."""
import numpy as np
import pytest

import fusegen as fg
from _optional import backends_extended


@fg.op
def layout_mix(x, y, z, w):
    h = z.shape[-1] // 2
    return ((x + y.T) ** 2,
            fg.moveaxis(z, 0, -1) * fg.arange(2.0),
            w[:, :3] * w[:, 3:],                                   # swiglu's split
            w[1:-1, ::-1] * 3 + w[2, None, 1:3].sum(),             # negative step, int, new axis
            fg.concat([x * 2, x[:, :2] ** 2], axis=-1),
            fg.pad(x, ((1, 2), (0, 1))) ** 2,
            fg.flip(z.reshape(6, 8), axis=1).reshape(2, 24) ** 2,  # reshape, flip, reshape back
            fg.broadcast_to(x[:, :1], (3, 5)) * fg.arange(5.0),
            fg.roll(w, 2, axis=-1) * w,
            fg.concat([-z[..., h:], z[..., :h]], axis=-1) * z,     # RoPE's rotate-half
            fg.max(fg.where(fg.arange(4)[:, None] >= fg.arange(4)[None, :],
                            fg.broadcast_to(x[:1, :4], (4, 4)), -1e9), axis=-1))


def _ref(x, y, z, w):
    causal = np.tril(np.ones((4, 4), bool))
    return ((x + y.T) ** 2,
            np.moveaxis(z, 0, -1) * np.arange(2.0),
            w[:, :3] * w[:, 3:],
            w[1:-1, ::-1] * 3 + w[2, None, 1:3].sum(),
            np.concatenate([x * 2, x[:, :2] ** 2], axis=-1),
            np.pad(x, ((1, 2), (0, 1))) ** 2,
            z.reshape(6, 8)[:, ::-1].reshape(2, 24) ** 2,
            np.broadcast_to(x[:, :1], (3, 5)) * np.arange(5.0),
            np.roll(w, 2, axis=-1) * w,
            np.concatenate([-z[..., 4:], z[..., :4]], axis=-1) * z,
            np.where(causal, np.broadcast_to(x[:1, :4], (4, 4)), -1e9).max(axis=-1))


def _numeric_grad(f, xs, k, eps=1e-4):
    g = np.zeros_like(xs[k])
    for i in np.ndindex(xs[k].shape):
        up = [a.copy() for a in xs]
        dn = [a.copy() for a in xs]
        up[k][i] += eps
        dn[k][i] -= eps
        g[i] = (f(*up) - f(*dn)) / (2 * eps)
    return g


def _check(op, ref, shapes, seed=0):
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal(s) for s in shapes]
    outs = ref(*xs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    cots = [rng.standard_normal(np.shape(r)) for r in outs]
    got = fg.compile(fg.grad(op))(*xs, *cots)

    def loss(*a):
        o = ref(*a)
        return sum(float((r * c).sum()) for r, c in zip(o if isinstance(o, tuple) else (o,), cots))

    for k in range(len(xs)):
        np.testing.assert_allclose(got[k], _numeric_grad(loss, xs, k), rtol=1e-5, atol=1e-6,
                                   err_msg=f"{op.name}: gradient of input {k}")


@fg.op
def layout_few(x, y, w):
    # one output reads through a permutation, basic indexing (a negative step, an integer, a new
    # axis), a reshape, a flip, a broadcast and a pad of a concat: every adjoint kind, few stages
    t = (x + y.T) * fg.broadcast_to(w[2, None, 1:4], (3, 3)).sum()
    s = fg.pad(fg.concat([t, t[:, :1]], axis=-1), ((1, 0), (0, 1)))
    # (and strided slices, of a transpose too: the cotangent spread back with zeros between)
    return (fg.flip(s.reshape(2, 10), axis=1) ** 2 + w[1:-1, ::-1][:2, :5].reshape(2, 5).sum()
            + (w[::2, ::-3] * x.T[::2, 1:]).sum())


def _ref_few(x, y, w):
    t = (x + y.T) * np.broadcast_to(w[2, None, 1:4], (3, 3)).sum()
    s = np.pad(np.concatenate([t, t[:, :1]], axis=-1), ((1, 0), (0, 1)))
    return (s.reshape(2, 10)[:, ::-1] ** 2 + w[1:-1, ::-1][:2, :5].reshape(2, 5).sum()
            + (w[::2, ::-3] * x.T[::2, 1:]).sum())


def test_layout_adjoints_match_finite_differences():
    _check(layout_few, _ref_few, [(3, 3), (3, 3), (4, 6)])


@pytest.mark.slow
def test_many_layout_adjoints_match_finite_differences():
    _check(layout_mix, _ref, [(3, 4), (4, 3), (2, 3, 8), (4, 6)])


@fg.op
def tiled(x):
    return fg.tile(x, (2, 2)) ** 2


def test_grad_of_an_op_traced_per_shape():
    x = np.random.default_rng(1).standard_normal((2, 3))
    cot = np.ones((4, 6))
    (got,) = fg.compile(fg.grad(tiled))(x, cot)
    np.testing.assert_allclose(got, 8 * x)   # four copies, each 2x


def _strided_body(m, x, w, s):
    """Strided slices (steps other than +-1, negative, on several axes, traced, empty) alone and
    under every other layout op; ``m`` is fusegen or NumPy, which spell them alike."""
    t = x.T[::2, 1:]                                   # a strided slice of a transpose
    a, b = m.split(x[:, ::-2], 2, axis=0)
    return (x[::2] * 2,
            x[::-3, 1::2] ** 2,
            x[5:0:-2, ::3] * x[:3, 4:7],
            t[:, :4] * w[1:, ::-1][:, ::2],
            m.flip(x[::2], axis=0) ** 2,
            m.roll(x[:, ::2], 1, axis=-1) ** 2,
            m.tile(x[::3, ::-2], (2, 1)) ** 2,
            m.repeat(x[::-2, 0], 2) ** 2,
            m.pad(x[1::2, ::3], ((1, 0), (0, 2))) ** 2,
            m.concat([x[::2, :2], w[::2, 1::3]], axis=1) ** 2,
            a * b,
            m.take(x[::2, ::-1], m.arange(4) % 3, axis=1) ** 2,
            x[::s, 1::s] ** 2 + x[::-s, :s:2],             # a step from an attribute
            x[4:2:2, ::2].sum() + x[-1:-9:-4].sum() + (w[::-2][::2, ::3] ** 2).sum())


@fg.op
def strided_mix(x, w, *, s: int = 3):
    return _strided_body(fg, x, w, s)


@pytest.mark.extended
def test_strided_slice_adjoints_match_finite_differences():
    _check(strided_mix, lambda x, w: _strided_body(np, x, w, 3), [(6, 7), (5, 8)])


@fg.op
def strided(x):
    return x[::2] * 2


def test_a_strided_slice_adjoint_is_a_masked_view_of_the_cotangent():
    # no scatter, no gather: each cotangent element repeated twice (a broadcast merged by a
    # reshape), masked where j % 2 != 0: an index map every backend fuses; values: layout_few
    text = fg.grad(strided).specialize(["float64"] * 2, [(6,), (3,)], {}).text()
    assert "= iota " in text and "= remainder " in text and "= reshape " in text
    assert "scatter" not in text and "take" not in text


@fg.op
def strided_times_arange(x):
    return x[:, ::2] * fg.arange(3.0) + x[::-1, 1::2] * fg.arange(2.0)[:, None]


@pytest.mark.parametrize("backend", backends_extended("numba", "aot"))
def test_a_strided_slice_adjoint_of_an_iota_factor(backend):
    # the adjoint's mask is an iota read through a reshape's div/mod map; the cotangent holds
    # another iota (arange): both read at their own coordinates, not the linear index
    g = fg.compile(fg.grad(strided_times_arange), backend=backend)(np.zeros((2, 6)), np.ones((2, 3)))[0]
    want = np.zeros((2, 6))
    want[:, ::2] += np.arange(3.0)
    want[::-1, 1::2] += np.arange(2.0)[:, None]
    np.testing.assert_allclose(g, want)
