"""fg.grad's backward ops through the numba-cuda backend (simulator in CI): the same
gradients as the Numba CPU backend, which tests/test_grad.py checks against finite
differences."""
from __future__ import annotations

import numpy as np
import pytest

import fusegen as fg
import fusegen.examples as ex

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore:.*Grid size.*",
                                        "ignore::numba.core.errors.NumbaPerformanceWarning")

CASES = [
    (ex.add_reduce_sum, [(3, 4), (4,)], dict(axis=0)),
    (ex.softmax, [(3, 5)], {}),
    (ex.layer_norm, [(2, 6)], {}),
    (ex.rms_norm, [(3, 4), (4,)], {}),
    (ex.bias_gelu, [(2, 5), (5,)], {}),
]


@pytest.mark.parametrize("op, shapes, attrs", CASES, ids=[c[0].name for c in CASES])
def test_backward_ops_on_cuda_match_the_cpu(op, shapes, attrs):
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    outs = fg.compile(op)(*args, **attrs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    cots = [rng.standard_normal(np.shape(o)).astype(np.float32) for o in outs]
    gop = fg.grad(op)
    ins = [a for n, a in zip(op.inputs, args) if n in gop.needs]
    want = fg.compile(gop)(*ins, *cots, **attrs)
    got = fg.compile(gop, device="cuda", threads=8, max_blocks=2)(*ins, *cots, **attrs)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_cross_entropy_gradient_is_one_kernel_on_cuda():
    """Planned per signature as on the CPU (``plan.noops``): the gradient's sum_to/unreduce that
    move nothing at these shapes are views, so the whole backward is one fused group (it was 4
    kernels: the d_out scalar's and the rows' small values each had a pass of their own)."""
    rng = np.random.default_rng(1)
    z = rng.standard_normal((5, 7)).astype(np.float32)
    labels = rng.integers(-7, 7, 5)
    d = np.float32(0.5)
    k = fg.compile(fg.grad(ex.cross_entropy, wrt="logits"), device="cuda", threads=8, max_blocks=2)
    got, = k(z, labels, d)
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    p[np.arange(5), labels % 7] -= 1
    np.testing.assert_allclose(np.asarray(got), p * d / 5, rtol=1e-5, atol=1e-6)
    assert len(k.prepared(z, labels, d).groups) == 1
