"""Issue #17's reference ops (fusegen.examples.GATHER_OPS) against NumPy on Numba CPU, and the
cross-entropy gradient (softmax minus one-hot, scaled) against its closed form."""
from __future__ import annotations

import numpy as np
import pytest

import fusegen as fg
import fusegen.examples as ex


def _lse(z):
    m = z.max(-1, keepdims=True)
    return (np.log(np.exp(z - m).sum(-1, keepdims=True)) + m)[:, 0]


def test_cross_entropy_and_accuracy():
    rng = np.random.default_rng(0)
    z = rng.standard_normal((16, 40)).astype(np.float32)
    y = rng.integers(0, 40, 16)
    y[3] = -1   # counts from the end, as NumPy's indexing
    z[5, y[5]] = 9.0
    loss = fg.compile(ex.cross_entropy)(z, y)
    z64 = z.astype(np.float64)
    want = (_lse(z64) - z64[np.arange(16), y]).mean()
    np.testing.assert_allclose(loss, want, rtol=1e-5)
    acc = fg.compile(ex.accuracy)(z, y % 40)
    assert acc == np.mean(z.argmax(-1) == y % 40) and acc > 0


def test_cross_entropy_grad_picks_with_a_one_hot():
    """The label's adjoint is the one-hot compare (iota == label) summed to the logits' shape, no
    scatter-add over the labels (the rest of the backward is the softmax, logsumexp's shift a
    stop-gradient, and mean's adjoint: 8 stages in all today, 11 before the one-hot and the
    softmax were summed in one loop, 15 before that, 16 before the one-hot)."""
    from test_gathers import _compare_reductions
    grad = fg.grad(ex.cross_entropy, wrt="logits")
    assert [sum_to for _, sum_to in _compare_reductions(grad, ("float32", "int64", "float32"),
                                                        ((8, 10), (8,), ()))] == [True]


@pytest.mark.slow   # the backward is 8 stages today: many compiles
def test_cross_entropy_grad():
    rng = np.random.default_rng(0)
    z64 = rng.standard_normal((16, 40))
    y = rng.integers(-40, 40, 16)
    d, = fg.compile(fg.grad(ex.cross_entropy, wrt="logits"))(z64, y, np.float64(2.0))
    p = np.exp(z64 - _lse(z64)[:, None])
    p[np.arange(16), y] -= 1
    np.testing.assert_allclose(d, 2.0 * p / 16, rtol=1e-9, atol=1e-12)


def test_embedding_layer_norm():
    rng = np.random.default_rng(1)
    table = rng.standard_normal((50, 8)).astype(np.float32)
    ids = rng.integers(-50, 50, (3, 5))
    gamma, beta = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    got = fg.compile(ex.embedding_layer_norm)(table, ids, gamma, beta)
    e = table[ids].astype(np.float64)
    want = (e - e.mean(-1, keepdims=True)) / np.sqrt(e.var(-1, keepdims=True) + 1e-5) * gamma + beta
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_cumsums():
    x = np.random.default_rng(2).standard_normal((5, 7)).astype(np.float32)
    np.testing.assert_allclose(fg.compile(ex.cumsum_last)(x), np.cumsum(x, -1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fg.compile(ex.cumsum_first)(x), np.cumsum(x, 0), rtol=1e-5, atol=1e-6)


def test_cross_entropy_reads_the_logits_once():
    """The exp-sum joins the max's group past the small stage that gathers the label's logit."""
    from fusegen import dtypes as dt
    from fusegen.ir import infer
    from fusegen.plan import build_plan
    from fusegen.plan.layout import schedule
    spec = infer(ex.cross_entropy, [dt.float32, dt.int64], [(64, 100), (64,)], {})
    groups = [run.stages for run in schedule(build_plan(ex.cross_entropy), spec)]
    assert sorted(s for g in groups for s in g) == [0, 1, 2, 3] and (0, 2) in groups


def test_cross_entropy_grad_writes_the_logits_gradient_once():
    """fg.grad(cross_entropy): the one-hot and the softmax parts are summed to the logits' shape
    in the one loop that writes the gradient (no workspace of the logits' size, which cost a write
    and a read of their bytes), and the mean's count comes from the shapes (the backward computes
    no loss: no gather, no pass over the rows' losses)."""
    from fusegen import dtypes as dt
    from fusegen.ir import Op, infer
    from fusegen.plan import build_plan, read_leaves
    from fusegen.plan.access import Gather
    g = ex.cross_entropy_grad
    plan = build_plan(g)
    spec = infer(g, [dt.float32, dt.int64, dt.float32], [(64, 100), (64,), ()], {})
    assert [spec.of(b).shape for b in plan.buffers if 100 in spec.of(b).shape] == []
    assert not any(isinstance(step, Gather) for st in plan.stages for a in st.reads for step in a.steps)
    # the logits are read by the max, the exp-sum and the stage that writes the gradient
    assert sum(any(l.op is Op.INPUT and l.arg == 0 for l in read_leaves(st)) for st in plan.stages) == 3
