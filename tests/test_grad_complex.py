"""fg.grad of ops with complex values (``fusegen.graph.grad_complex``): JAX's convention, the
cotangent of ``z = x + iy`` being ``dL/dx - i dL/dy`` for the loss ``L = sum(Re(cot * out))``.

Checked against central finite differences on the real and imaginary parts of each input (the
convention itself, not a formula), and against ``jax.vjp`` (skipped without jax). One forward op
with many functions, so each backward compiles once."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import fusegen as fg

sys.path.insert(0, str(Path(__file__).parent))
from _optional import needs_jax  # noqa: E402


def _small(m, z, x):
    """A few of everything: holomorphic functions, conj/real/imag/abs, a real input promoted
    (``x * 1j``), a complex output (its cotangent complex), the parts of a real value (``real(x)``
    is x, ``imag(x)`` 0); ``m`` is fusegen or NumPy."""
    a = m.exp(z) * x + m.conj(z) ** 2 + m.sqrt(z) / (x * 1j + 2.0)
    return (m.sum(m.abs(a) + m.real(z) * m.imag(a)) + m.sum(m.real(x) * 3 + m.imag(x) * x + m.conj(x) ** 2),
            a * m.log(z))


def _wide(m, z, w, x):
    """Every complex function fg.grad has a rule for, in both complex dtypes and a real one."""
    a = (m.exp(z) * w + m.log(z) / w - m.sqrt(z) + m.sin(z) * m.cos(w) + m.tanh(z) + m.tan(z) * m.sinh(w)
         + m.cosh(z) + m.expm1(w) - m.log1p(z) + m.log2(w) * m.log10(z) + m.square(z) + m.reciprocal(w)
         + m.asin(z) + m.acos(w) + m.atan(z) + m.asinh(w) + m.acosh(z + 2.0) + m.atanh(w) + z ** w)
    b = (m.real(z) * m.imag(w) + m.abs(w) + m.where(x - 0.5 > 0, z, w) * (x * 1j) + m.conj(z) * x
         + x.astype("complex128"))
    return (m.sum(m.real(a * m.conj(b))) + m.mean(m.abs(z * x)) + m.imag(m.prod(z)), a * b,
            m.sum(b, axis=0), m.mean(a, axis=1))


fg_small = fg.op(lambda z, x: _small(fg, z, x), name="fg_small")
fg_wide = fg.op(lambda z, w, x: _wide(fg, z, w, x), name="fg_wide")
SMALL_GRAD, WIDE_GRAD = fg.grad(fg_small), fg.grad(fg_wide)   # (their kernels cached on them, as any op's)


def _loss(ref, xs, cots):
    outs = ref(*xs)
    return sum(float(np.real(np.sum(c * o))) for c, o in zip(cots, outs))


def _finite_differences(ref, xs, cots, eps=1e-6):
    """JAX's convention from the definition: dL/dx - i dL/dy per element of each input."""
    grads = []
    for k, a in enumerate(xs):
        g = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            parts = [1.0] + ([1j] if np.iscomplexobj(a) else [])
            for p in parts:
                up = [v.copy() for v in xs]
                dn = [v.copy() for v in xs]
                up[k][i] += p * eps
                dn[k][i] -= p * eps
                d = (_loss(ref, up, cots) - _loss(ref, dn, cots)) / (2 * eps)
                g[i] += d if p == 1.0 else -1j * d
        grads.append(g)
    return grads


def _inputs(shapes, dtypes, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for s, d in zip(shapes, dtypes):
        v = rng.uniform(0.2, 0.8, s) + (1j * rng.uniform(0.2, 0.8, s) if np.dtype(d).kind == "c" else 0)
        out.append(v.astype(d))
    return out


def _cotangents(ref, xs, seed=1):
    rng = np.random.default_rng(seed)
    outs = ref(*xs)
    return [(rng.standard_normal(np.shape(o)) + (1j * rng.standard_normal(np.shape(o)) if np.iscomplexobj(o) else 0))
            .astype(np.asarray(o).dtype) for o in outs]


def _fd_check(op_grad, ref, shapes, dtypes, tol, what):
    xs = _inputs(shapes, dtypes)
    cots = _cotangents(ref, xs)
    got = op_grad(*xs, *cots)
    for k, (g, want) in enumerate(zip(got, _finite_differences(ref, xs, cots))):
        assert g.dtype == xs[k].dtype
        np.testing.assert_allclose(g, want, rtol=tol, atol=tol, err_msg=f"{what}: input {k}")


def test_complex_gradients_match_finite_differences():
    _fd_check(SMALL_GRAD, lambda z, x: _small(np, z, x), [(2, 3), (3,)], [np.complex128, np.float64], 1e-6, "numba")


@pytest.mark.extended
def test_complex_gradients_on_the_aot_backend():
    _fd_check(fg.compile(SMALL_GRAD, backend="aot"), lambda z, x: _small(np, z, x), [(2, 3), (3,)],
              [np.complex128, np.float64], 1e-6, "aot")


#: the wide op's inputs: one compile serves both tests (its Numba compile is the slow part)
WIDE = ([(2, 3), (2, 3), (3,)], [np.complex128, np.complex128, np.float64])


@pytest.mark.extended
def test_every_complex_rule_matches_finite_differences():
    _fd_check(WIDE_GRAD, lambda z, w, x: _wide(np, z, w, x), *WIDE, 1e-6, "numba")


@needs_jax
@pytest.mark.extended
def test_complex_gradients_are_jaxs():
    import jax
    import jax.numpy as jnp

    for grad_op, body, (shapes, dtypes), tol in ((WIDE_GRAD, _wide, WIDE, 1e-10),
                                                 (SMALL_GRAD, _small, ([(2, 3), (3,)], [np.complex64, np.float32]), 2e-4)):
        xs = _inputs(shapes, dtypes)
        cots = _cotangents(lambda *a: body(np, *a), xs)
        with jax.enable_x64(True):
            _, vjp = jax.vjp(lambda *a: body(jnp, *a), *map(jnp.asarray, xs))
            want = vjp(tuple(map(jnp.asarray, cots)))
        got = grad_op(*xs, *cots)
        for k, (g, w) in enumerate(zip(got, want)):
            assert g.dtype == w.dtype == xs[k].dtype
            np.testing.assert_allclose(g, np.asarray(w), rtol=tol, atol=tol, err_msg=f"{dtypes}: input {k}")


@needs_jax
@pytest.mark.extended
def test_jax_grad_through_the_bridge_takes_complex_inputs():
    # fg.jax.function's custom_vjp runs fg.grad's complex trace (its XLA handler) for jax.grad
    import jax
    import jax.numpy as jnp

    import fusegen.jax as fgj

    f = fgj.function(fg_small)
    xs = [jnp.asarray(a) for a in _inputs([(2, 3), (3,)], [np.complex64, np.float32])]

    def loss(fn):
        return lambda z, x: fn(z, x)[0] + jnp.real(jnp.sum(fn(z, x)[1] * (1 - 2j)))

    got = jax.grad(loss(f), argnums=(0, 1))(*xs)
    want = jax.grad(loss(lambda z, x: _small(jnp, z, x)), argnums=(0, 1))(*xs)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-4, atol=2e-4, err_msg=f"input {k}")
