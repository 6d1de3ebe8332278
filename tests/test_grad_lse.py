"""fg.grad of a logsumexp written with a shift (issue #17): the shift is a stop-gradient constant
(exact: the value does not depend on it), so the backward op is the softmax, with no max
tie-splitting adjoint, whatever the spelling; checked against finite differences and rows of
ties, where the tie-splitting adjoint and the softmax must agree."""
from __future__ import annotations

import numpy as np
import pytest

import fusegen as fg
from fusegen import examples as ex
from fusegen.ir import Op, nodes_of
from fusegen.plan import build_plan

from test_grad import finite_difference


@fg.op
def lse_kept(x):
    m = fg.max(x, axis=-1, keepdims=True)   # the shift first, dims kept throughout
    return m + fg.log(fg.sum(fg.exp(x - m), axis=-1, keepdims=True))


@fg.op
def lse_dropped(x):
    # cross_entropy's spelling: the shift kept for the subtraction, dropped for the sum
    return fg.log(fg.sum(fg.exp(x - fg.max(x, axis=-1, keepdims=True)), axis=-1)) + fg.max(x, axis=-1)


@fg.op
def lse_helper(x):
    return fg.logsumexp(x, axis=-1)   # where(isfinite(top), log(sum(exp(x - max))), 0) + top


@fg.op
def lse_and_exp(x):
    # exp(x - max) has a second consumer: its adjoint into the max is real, nothing is dropped
    m = fg.max(x, axis=-1, keepdims=True)
    e = fg.exp(x - m)
    return fg.log(fg.sum(e, axis=-1)) + fg.max(x, axis=-1), e


@fg.op
def lse_other_shift(x):
    # the shift added back is another value (min, not max): nothing cancels, nothing is dropped
    return fg.log(fg.sum(fg.exp(x - fg.max(x, axis=-1, keepdims=True)), axis=-1)) + fg.min(x, axis=-1)


def _ties(g) -> bool:
    """Whether the backward graph has a max/min's tie-splitting adjoint (x == max(x))."""
    return any(n.op is Op.EQ and any(s.op is Op.REDUCE and s.arg.kind in ("max", "min") for s in n.srcs)
               for n in nodes_of(g.graph.outputs))


@pytest.mark.parametrize("op", [lse_kept, lse_dropped, lse_helper, ex.cross_entropy], ids=lambda o: o.name)
def test_the_shift_carries_no_adjoint(op):
    assert not _ties(fg.grad(op, wrt=0))


def test_the_rule_stays_away_where_the_shift_matters():
    assert _ties(fg.grad(lse_and_exp)) and _ties(fg.grad(lse_other_shift))


def test_cross_entropy_grad_has_no_tie_passes():
    """15 stages before (the max's tie count and its adjoint), 11 now."""
    g = fg.grad(ex.cross_entropy, wrt="logits").specialize(("float32", "int64", "float32"), ((8, 10), (8,), ()), {})
    assert len(build_plan(g).stages) <= 11


def test_softmax_gradient_matches_finite_differences_and_ties():
    rng = np.random.default_rng(17)
    x = rng.standard_normal((5, 7))
    x[1, :] = 0.5               # a row of ties: the generic max adjoint splits, the softmax does not care
    x[2, [1, 4]] = x[2].max() + 1.0
    cot = rng.standard_normal(5)
    got, = fg.compile(fg.grad(lse_dropped))(x, cot)
    p = np.exp(x - x.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(got, cot[:, None] * p, rtol=1e-12, atol=1e-14)
    fwd = fg.compile(lse_dropped)
    want, = finite_difference(fwd, [x], [cot], {})
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
