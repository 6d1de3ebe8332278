"""fusegen/plan/views.py (run-time index maps) against NumPy.

Random chains of view steps (``views_chains.cases``) on arange arrays: where ``views`` evaluates a
chain, every element's address (by the ``address`` oracle and by walking the boxes' loops) is the
value NumPy's view holds there (-1 where a concat/pad piece is inactive); where it cannot, the
MapError names an error code, and a step with parameters that do not fit is FG_ERR_VIEW_PARAM.
Hand-written cases pin the shapes the design exists for (heads merge, modular reshape, rope-like
concat, two operands' common refinement) and every error code.
"""
from __future__ import annotations

import itertools
import math

import hypothesis
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis.control import current_build_context

from fusegen.plan import views as V
from fusegen.errors import FusegenError
from views_chains import (B, D, ERROR_CASES, H, S, SHAPE_CASES, Case, grouped_pairs, scrambled, cases, evaluate, expected_addresses,
                          make_case)


def event(text: str) -> None:
    """hypothesis.event inside a hypothesis test (the statistics), nothing in the others."""
    try:
        current_build_context()
    except Exception:
        return
    hypothesis.event(text)


def check_case(case: Case) -> None:
    res = evaluate(case)
    bad = case.operands[0].array is None
    if res.error is not None:
        code, i, j = res.error
        event(f"error {code}")
        if bad and (i, j) == (0, len(case.operands[0].steps) - 1):
            assert code == "FG_ERR_VIEW_PARAM"
        return
    assert not bad, "a step whose parameters do not fit was accepted"
    nest = res.nest
    event("modular" if any(i is not None for i in nest.inners) else "strided")
    event(f"refined dims +{len(nest.extents) - len(case.domain)}")
    event(f"boxes {len(res.boxes)}")
    np.testing.assert_array_equal(res.addresses, expected_addresses(case, res))
    for i, op in enumerate(case.operands):  # the oracle too, element by element
        for c in itertools.product(*[range(d) for d in case.domain]):
            got = V.address(nest, i, c)
            assert (got if got is not None else -1) == int(op.array[c]), (i, c)
    for ranges, act, _ in res.boxes:  # activity is constant in a box
        for c in itertools.product(*[range(lo, hi) for lo, hi in ranges]):
            assert [V.address(nest, i, c) is not None for i in range(len(case.operands))] == act


SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck))


@settings(max_examples=250, **SETTINGS)
@given(cases())
def test_views_match_numpy(case):
    check_case(case)


@pytest.mark.slow
@settings(max_examples=4000, **SETTINGS)
@given(cases())
def test_views_match_numpy_long(case):
    check_case(case)


def chain(shape, *steps) -> V.View:
    v = V.contiguous(shape)
    for kind, *args in steps:
        v = getattr(V, kind)(v, *args)
    return v


# --- the shapes the design exists for -------------------------------------------------------
@pytest.mark.parametrize("name", SHAPE_CASES)
def test_shape_cases(name):
    assert evaluate(SHAPE_CASES[name], walk=False).error is None
    check_case(SHAPE_CASES[name])


def test_refined_heads_merge():
    b, h, s, d = B, H, S, D
    res = evaluate(SHAPE_CASES["heads_merge"])
    assert res.views[0].inner is None and res.views[0].dims[2].grouped
    assert res.nest.extents == [b, s, h, d] and res.nest.origin == [0, 1, 2, 2]
    assert res.nest.strides == [[h * s * d, d, s * d, 1], [s * h * d, h * d, d, 1]]
    assert res.nest.inners == [None, None]


def test_modular_reshape():
    v = evaluate(SHAPE_CASES["modular_reshape"]).views[0]
    assert v.inner is not None and v.inner.digits == [(2, 1), (3, 2)]


def test_two_operands_common_refinement():
    res = evaluate(SHAPE_CASES["two_operands"])
    assert res.nest.extents == [2, 3, 4] and len(res.boxes) == 1


def test_concat_boxes_rope_like():
    res = evaluate(SHAPE_CASES["rope_concat"])
    assert [(r, a) for r, a, _ in res.boxes] == [([(0, 3), (0, 4)], [True, False, True]),
                                                 ([(0, 3), (4, 8)], [False, True, True])]
    assert [layout for _, _, layout in res.boxes] == [([3, 4], [4, -4, 0]), ([3, 4], [8, 0, 4])]


def test_pad_then_reshape_merges_across_a_merged_digit():
    # The reference looked up the merged digit's source dim, -1, i.e. the last dim (the piece),
    # and refused to merge: then (24, 5) could not be cut into 4 x 6 and the reshape failed.
    v = evaluate(SHAPE_CASES["pad_then_reshape"]).views[0]
    assert v.inner is None and (v.dims[2].lo, v.dims[2].hi) == (1, 6)


def test_size_one_piece_decides_activity_in_reshape():
    for name, active in [("size1_piece_inactive", False), ("size1_piece_active", True)]:
        v = evaluate(SHAPE_CASES[name]).views[0]
        assert v.active is active and all(a.hi is None for a in v.dims)


def test_slice_of_a_group_whole_blocks_and_not():
    assert [evaluate(SHAPE_CASES[f"group_slice_{n}"]).views[0].inner is None for n in range(4)] == \
        [True, False, False, True]


# --- every error code -----------------------------------------------------------------------
@pytest.mark.parametrize("want, case", ERROR_CASES)
def test_errors(want, case):
    res = evaluate(case, walk=False)
    assert res.error == want
    if want is None:  # a piece's boundary on a dim another operand's reshape splits
        assert [layout for _, _, layout in res.boxes] == ["FG_ERR_VIEW_BOX"] * 2


def test_error_messages_name_the_code():
    with pytest.raises(V.MapError, match=r"cannot reshape \(2, 3\) to \(7,\) \(FG_ERR_VIEW_PARAM\)") as info:
        chain((2, 3), ("reshape", (7,)))
    assert info.value.code == "FG_ERR_VIEW_PARAM" and isinstance(info.value, FusegenError)


def test_limits_are_reached_exactly():
    # 22 strided sub-dims fail (test_errors); 15 in one dim are fine
    v = chain((2 ** 22,), *scrambled(22, 2))
    assert len(v.dims[0].sub) == 15
    # three operands cutting each of 4 dims at 3 points: 16 loop dims, the most there may be
    views = [chain(shape, *steps) for shape, steps in (grouped_pairs(j) for j in (1, 2, 3))]
    nest = V.refine(views, (32,) * 4)
    assert nest.extents == [2, 2, 2, 4] * 4


def test_inner_address_is_divmod_over_the_digits():
    inner = V.Inner([(3, 1), (0, 5), (4, 10)], 7)
    assert inner.address(0) == 7
    assert inner.address(5) == 7 + 1 * 10 + 0 + 1 * 1   # 5 = 1*4 + 1; size-0 digit keeps the rest
