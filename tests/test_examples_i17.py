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


@pytest.mark.slow   # two signatures: the one-group backward and the general 8-stage one
def test_cross_entropy_grad():
    rng = np.random.default_rng(0)
    z64 = rng.standard_normal((16, 40))
    y = rng.integers(-40, 40, 16)
    k = fg.compile(fg.grad(ex.cross_entropy, wrt="logits"))
    d, = k(z64, y, np.float64(2.0))
    p = np.exp(z64 - _lse(z64)[:, None])
    p[np.arange(16), y] -= 1
    np.testing.assert_allclose(d, 2.0 * p / 16, rtol=1e-9, atol=1e-12)
    assert len(k._last.groups) == 1   # one fused kernel: max and exp-sum pass, then the output pass
    # logits broadcast against the labels: the sum_to's sum for real (the general plan)
    d, = k(z64[:1], y, np.float64(2.0))
    p = np.exp(z64[:1] - _lse(z64[:1])[:, None]) * 16
    np.add.at(p, (0, y), -1.0)
    np.testing.assert_allclose(d, 2.0 * p / 16, rtol=1e-9, atol=1e-12)
    assert len(k._last.groups) > 1


def test_embedding_layer_norm():
    rng = np.random.default_rng(1)
    table = rng.standard_normal((50, 8)).astype(np.float32)
    ids = rng.integers(-50, 50, (3, 5))
    gamma, beta = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    k = fg.compile(ex.embedding_layer_norm)
    got = k(table, ids, gamma, beta)
    e = table[ids].astype(np.float64)
    want = (e - e.mean(-1, keepdims=True)) / np.sqrt(e.var(-1, keepdims=True) + 1e-5) * gamma + beta
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    ids[2, 3] = 50   # the id checked once per row still raises, naming the op, the node, the axis, the value
    with pytest.raises(fg.BoundsError, match=r"op embedding_layer_norm: node %2 = take.*index 50 is out of bounds "
                                             r"for axis 0 with size 50"):
        k(table, ids, gamma, beta)


def test_embedding_rows_check_their_id_once():
    """The Numba loops over a gathered row check its id once, before the loop (it is constant
    along it): no bad-index bookkeeping inside the loop, which kept it scalar."""
    from fusegen import dtypes as dt
    from fusegen.ir import infer
    from fusegen.lower_cpu import compile_group
    from fusegen.plan import build_plan, schedule
    op = ex.embedding_layer_norm
    spec = infer(op, [dt.float32, dt.int64, dt.float32, dt.float32], [(100, 64), (4, 8), (64,), (64,)], {"eps": 1e-5})
    plan = build_plan(op)
    run, = schedule(plan, spec, regroup=True, rows=True)
    lines = compile_group(plan, spec, run, False).source.splitlines()
    loops = [i for i, line in enumerate(lines) if line.lstrip().startswith("for ri in range(")]
    assert len(loops) == 3 and sum("gb0 = gb0 + " in line for line in lines) == 3
    for i in loops:
        depth = len(lines[i]) - len(lines[i].lstrip())
        body = lines[i + 1:next(j for j in range(i + 1, len(lines)) if len(lines[j]) - len(lines[j].lstrip()) <= depth)]
        assert body and not any("gb0" in line or "gv0" in line or " if " in line for line in body), body


def test_cross_entropy_grad_is_one_row_loop_nest():
    """Where fg.grad's sum_to/unreduce move nothing at the call's shapes (one label per row), the
    Numba backend plans the backward without them (fusegen.plan.noops): three stages, the max,
    the exp-sum and the output, in one fused group (one row loop nest: the max and exp-sum pass,
    then the output pass). Where the labels broadcast the logits, a sum_to sums for real and stays."""
    from fusegen import dtypes as dt
    from fusegen.ir import infer
    from fusegen.plan import build_plan, schedule
    from fusegen.plan.noops import without_noops
    g = ex.cross_entropy_grad
    args = ([dt.float32, dt.int64, dt.float32], [(64, 100), (64,), ()], {})
    op, spec = without_noops(infer(g, *args), *args)
    plan = build_plan(op)
    assert "sum_to" not in op.text() and "unreduce" not in op.text()
    assert [len(st.reductions) for st in plan.stages] == [1, 1, 0] and plan.stages[2].writes
    assert [run.stages for run in schedule(plan, spec, regroup=True, rows=True)] == [(0, 1, 2)]
    args = ([dt.float32, dt.int64, dt.float32], [(1, 100), (64,), ()], {})
    op, spec = without_noops(infer(g, *args), *args)
    assert "sum_to" in op.text() and len(build_plan(op).stages) > 3


def test_cumsums():
    x = np.random.default_rng(2).standard_normal((5, 7)).astype(np.float32)
    np.testing.assert_allclose(fg.compile(ex.cumsum_last)(x), np.cumsum(x, -1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fg.compile(ex.cumsum_first)(x), np.cumsum(x, 0), rtol=1e-5, atol=1e-6)


def test_cross_entropy_reads_the_logits_once():
    """The exp-sum runs in the max's group, not apart from it across the small stage that gathers
    the label's logit: the plan puts the max right before the exp-sum (so the emitted C++, whose
    row groups join consecutive stages, fuses them too), and the Numba schedule joins them."""
    from fusegen import dtypes as dt
    from fusegen.ir import infer
    from fusegen.plan import build_plan
    from fusegen.plan.layout import schedule
    spec = infer(ex.cross_entropy, [dt.float32, dt.int64], [(64, 100), (64,)], {})
    plan = build_plan(ex.cross_entropy)
    kinds = [[r.arg.kind for r in st.reductions] for st in plan.stages]
    assert kinds == [["sum"], ["max"], ["sum"], ["mean"]]   # (max with and without keepdims: one, fusegen.graph.canon)
    groups = [run.stages for run in schedule(plan, spec)]
    assert sorted(s for g in groups for s in g) == [0, 1, 2, 3] and (1, 2) in groups


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
