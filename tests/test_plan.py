"""Layer (a): the planner without a compiler. Stage partition (``build_plan``), workspaces, the
run-time layout (``collapse`` to ``[O, RO, RI, I]``) and the fusion decisions of ``schedule``.
"""
from __future__ import annotations

import pytest

import fusegen as fg
import fusegen.examples as ex
from fusegen.errors import ShapeError
from fusegen.ir import AttrRef, Op
from fusegen.plan import (build_plan, c_strides, collapse, leaves_of, read_strides, schedule,
                          write_strides)


def groups_of(op, shapes, dtypes=None, **attrs):
    """The fused groups ``schedule`` makes for concrete shapes (stage indices per group)."""
    plan = build_plan(op)
    spec = fg.infer(op, dtypes or ["float32"] * len(shapes), shapes, op.bind_attrs(attrs))
    return plan, schedule(plan, spec)


def kinds(stage):
    return [r.arg.kind for r in stage.reductions]


# =============================================================================================
# Stage partition
# =============================================================================================
def test_add_reduce_sum_is_one_reduction_stage_without_workspace():
    p = build_plan(ex.add_reduce_sum)
    assert len(p.stages) == 1
    st = p.stages[0]
    assert kinds(st) == ["sum"] and st.axes == AttrRef("axis") and st.is_reduction
    assert [l.op for l in st.leaves] == [Op.INPUT, Op.INPUT]  # x + y is inlined, not a leaf
    assert p.buffers == ()  # the reduction is an output: written directly
    assert p.reduce_outputs == {id(ex.add_reduce_sum.graph.outputs[0]): (0,)}


def test_elementwise_outputs_with_the_same_leaves_share_one_stage():
    for op, n in ((ex.add_mul_div, 3), (ex.smooth_l1, 1), (ex.bias_gelu, 1)):
        p = build_plan(op)
        assert len(p.stages) == 1 and not p.stages[0].is_reduction, op.name
        assert p.stages[0].axes == "elementwise"
        assert [k for k, _ in p.stages[0].writes] == list(range(n))
        assert p.buffers == ()


def test_softmax_stages_and_workspaces():
    p = build_plan(ex.softmax)
    assert [kinds(s) for s in p.stages] == [["max"], ["sum"], []]
    assert [s.level for s in p.stages] == [1, 2, 3]
    assert [k for k, _ in p.stages[2].writes] == [0]
    # the two reductions are read by later stages: declared workspaces; exp(x - m) is recomputed
    assert [b.arg.kind for b in p.buffers] == ["max", "sum"]
    assert all(b.op is Op.REDUCE for b in p.buffers)


def test_layer_norm_stages_finals_and_outputs():
    p = build_plan(ex.layer_norm)
    assert [kinds(s) for s in p.stages] == [["mean"], ["mean"], []]
    mean_stage, var_stage, y_stage = p.stages
    # rstd = rsqrt(var + eps) depends only on the var reduction: finished in that stage's epilogue
    assert [k for k, _ in var_stage.finals] == [2] and var_stage.writes == ()
    assert [k for k, _ in y_stage.writes] == [0]
    # the mean is both output 1 and a workspace read by later stages
    mean = mean_stage.reductions[0]
    assert p.reduce_outputs[id(mean)] == (1,)
    assert any(b is mean for b in p.buffers) and len(p.buffers) == 2


def test_reductions_sharing_leaves_and_axes_share_a_stage():
    @fg.op
    def stats(x, y):
        return fg.max(x, axis=1), fg.min(x, axis=1), fg.sum(x, axis=0), fg.sum(x * y, axis=1)

    p = build_plan(stats)
    assert sorted(kinds(s) for s in p.stages) == [["max", "min"], ["sum"], ["sum"]]
    assert p.buffers == ()


def test_reduction_of_a_reduction_is_a_later_level():
    @fg.op
    def twice(x):
        return fg.sum(fg.max(x, axis=1), axis=0)

    p = build_plan(twice)
    assert [(kinds(s), s.level) for s in p.stages] == [(["max"], 1), (["sum"], 2)]
    assert [b.arg.kind for b in p.buffers] == ["max"]
    assert [l.op for l in p.stages[1].leaves] == [Op.REDUCE]


def test_leaves_of_stops_at_reductions():
    x_out = ex.softmax.graph.outputs[0]  # e / sum(e)
    assert sorted(l.op.value for l in leaves_of(x_out)) == ["input", "reduce", "reduce"]
    assert [l.op for l in leaves_of(ex.add_mul_div.graph.outputs[0])] == [Op.INPUT, Op.INPUT]


# =============================================================================================
# Fusion decisions (schedule)
# =============================================================================================
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_softmax_fuses_into_one_group_on_every_axis(axis):
    p, runs = groups_of(ex.softmax, [(3, 4, 5)], axis=axis)
    assert [r.stages for r in runs] == [(0, 1, 2)]
    assert runs[0].axes == (axis % 3,)
    assert sorted(runs[0].operands) == [("buf", 0), ("buf", 1), ("in", 0), ("out", 0)]


@pytest.mark.parametrize("axis", [0, 1, 2, -2])
def test_layer_norm_fuses_into_one_group_on_every_axis(axis):
    _, runs = groups_of(ex.layer_norm, [(3, 4, 5)], axis=axis)
    assert [r.stages for r in runs] == [(0, 1, 2)]


@pytest.mark.parametrize("shape", [(6, 8), (2, 3, 8), (8,)])
def test_rms_norm_fuses(shape):
    _, runs = groups_of(ex.rms_norm, [shape, (shape[-1],)])
    assert [r.stages for r in runs] == [(0, 1)]


@fg.op
def center_rows(x):
    return x - fg.mean(x, axis=1)  # no keep_dims: broadcasts along the LAST axis, not axis 1


@fg.op
def center_rows_keep(x):
    return x - fg.mean(x, axis=1, keep_dims=True)


@fg.op
def center_cols(x):
    return x - fg.mean(x, axis=0)


def test_mean_without_keep_dims_on_a_square_input_does_not_fuse():
    # mean(x, 1)[j] is subtracted at (i, j): it is read at an index other than where it was
    # written, so the elementwise stage must wait for the whole reduction.
    _, runs = groups_of(center_rows, [(4, 4)])
    assert [r.stages for r in runs] == [(0,), (1,)]
    assert ("buf", 0) in runs[0].operands and ("buf", 0) in runs[1].operands


def test_mean_with_keep_dims_fuses():
    _, runs = groups_of(center_rows_keep, [(4, 4)])
    assert [r.stages for r in runs] == [(0, 1)]


def test_mean_over_the_leading_axis_without_keep_dims_is_aligned_and_fuses():
    # mean(x, 0)[j] is read at (i, j) and was written for column j: the same index
    _, runs = groups_of(center_cols, [(4, 4)])
    assert [r.stages for r in runs] == [(0, 1)]


def test_reductions_of_reductions_are_separate_groups():
    @fg.op
    def chained(x):
        s = fg.sum(x, axis=1)
        return fg.max(s, axis=0), fg.sum(fg.mean(x, axis=-1, keep_dims=True), axis=0, keep_dims=True)

    p, runs = groups_of(chained, [(4, 5)])
    # (within a level, the stage the next level's first stage reads comes last: the max reads the sum)
    assert [(kinds(s), s.level) for s in p.stages] == [(["mean"], 1), (["sum"], 1), (["max"], 2), (["sum"], 2)]
    # the level-1 reductions share the domain and the (normalized) axis 1 == -1: one loop nest;
    # each level-2 reduction reads a finished level-1 result over another domain: its own group
    assert [(r.stages, r.dom, r.axes) for r in runs] == [((0, 1), (4, 5), (1,)), ((2,), (4,), (0,)),
                                                         ((3,), (4, 1), (0,))]


def test_different_axes_are_different_groups():
    @fg.op
    def two_axes(x):
        return fg.max(x, axis=1), fg.sum(x, axis=0)

    _, runs = groups_of(two_axes, [(4, 5)])
    assert [r.axes for r in runs] == [(1,), (0,)]


def test_elementwise_output_over_another_domain_is_another_group():
    @fg.op
    def two_domains(x, y):
        return fg.sum(x, axis=1), y * 2.0

    _, runs = groups_of(two_domains, [(4, 5), (3,)])
    assert sorted(r.dom for r in runs) == [(3,), (4, 5)]


def test_schedule_needs_known_shapes():
    plan = build_plan(ex.softmax)
    spec = fg.infer(ex.softmax, ["float32"], [(-1, 4)], ex.softmax.bind_attrs({}))
    with pytest.raises(ShapeError, match="op softmax: shapes must be known to run"):
        schedule(plan, spec)


# =============================================================================================
# Layout: [O, RO, RI, I]
# =============================================================================================
def test_c_read_write_strides():
    assert c_strides((2, 3, 4)) == [12, 4, 1]
    assert c_strides(()) == []
    assert c_strides((2, 0, 3)) == [3, 3, 1]  # a size-0 dim does not zero the strides before it
    assert read_strides((3, 1), (2, 3, 4)) == [0, 1, 0]
    assert read_strides((4,), (2, 3, 4)) == [0, 0, 1]
    assert read_strides((2, 3, 4), (2, 3, 4)) == [12, 4, 1]
    assert write_strides((2, 4), (2, 3, 4), (1,)) == [4, 0, 1]
    assert write_strides((2, 1, 4), (2, 3, 4), (1,)) == [4, 0, 1]
    assert write_strides((3,), (2, 3, 4), (0, 2)) == [0, 1, 0]
    assert write_strides((4,), (2, 3, 4), (0, 1)) == [0, 0, 1]             # sum_to: leading axes gone
    assert write_strides((1, 3, 1), (3,), ()) == [1]                       # unreduce: 1s put back


@pytest.mark.parametrize("dom, reduced, strides, want", [
    # elementwise, contiguous: everything merges into one inner dim
    ((2, 3, 4), (), [[12, 4, 1]], ([], [], 1, 24)),
    # reduce the middle axis: O=2, RI=3, I=4 (col mode)
    ((2, 3, 4), (1,), [[12, 4, 1], [4, 0, 1]], ([2], [], 3, 4)),
    # reduce the last axis: outer dims merge, RI=4, no inner dim (row mode)
    ((2, 3, 4), (2,), [[12, 4, 1], [3, 1, 0]], ([6], [], 4, 1)),
    # adjacent reduced leading axes merge into RI
    ((2, 3, 4), (0, 1), [[12, 4, 1], [0, 0, 1]], ([], [], 6, 4)),
    # non-adjacent reduced axes: the outer one becomes RO
    ((2, 3, 4), (0, 2), [[12, 4, 1], [0, 1, 0]], ([3], [2], 4, 1)),
    # size-1 dims are dropped
    ((2, 1, 3), (), [[3, 3, 1]], ([], [], 1, 6)),
    # a broadcast operand (stride 0 on the last dim) blocks the merge
    ((2, 3), (), [[3, 1], [1, 0]], ([2], [], 1, 3)),
    # a scalar domain
    ((), (), [[]], ([], [], 1, 1)),
])
def test_collapse(dom, reduced, strides, want):
    lay = collapse(dom, reduced, strides)
    assert (lay.o_ext, lay.ro_ext, lay.ri, lay.inner) == want
    assert lay.o_total * lay.ro_total * lay.ri * lay.inner == max(1, _prod(dom)) or 0 in dom


def _prod(xs):
    p = 1
    for x in xs:
        p *= x
    return p


def test_collapse_keeps_operand_strides():
    lay = collapse((2, 3, 4), (1,), [[12, 4, 1], [4, 0, 1], [0, 0, 1]])
    assert lay.o_str == [[12], [4], [0]]
    assert lay.ri_str == [4, 0, 0]
    assert lay.i_str == [1, 1, 1]


@pytest.mark.parametrize("axis, mode", [(0, "col"), (1, "col"), (2, "row"), (-1, "row")])
def test_group_layout_mode_per_axis(axis, mode):
    _, runs = groups_of(ex.add_reduce_sum, [(2, 3, 4)] * 2, axis=axis)
    (run,) = runs
    assert ("row" if run.layout.inner == 1 else "col") == mode
    lay = run.layout
    assert lay.ri == (2, 3, 4)[axis]
    assert lay.o_total * lay.ri * lay.inner == 24


def test_group_layout_for_broadcast_operand():
    _, runs = groups_of(ex.rms_norm, [(3, 4, 8), (8,)])
    (run,) = runs
    k_w = run.operands.index(("in", 1))
    assert run.layout.o_ext == [12] and run.layout.ri == 8 and run.layout.inner == 1
    assert run.layout.o_str[k_w] == [0] and run.layout.ri_str[k_w] == 1


def test_plans_are_the_same_in_every_process():
    # The leaf order decides the generated source, which keys Numba's and the build's disk
    # caches: it must not depend on the per-process string-hash seed.
    import subprocess
    import sys
    code = ("import fusegen as fg; from fusegen import examples as ex; from fusegen.plan import build_plan; "
            "print([[str(l.op.value) + repr(l.arg) for l in s.leaves] for op in ex.REFERENCE_OPS + "
            "[fg.grad(ex.softmax), fg.grad(ex.layer_norm)] for s in build_plan(op).stages])")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**__import__("os").environ, "PYTHONHASHSEED": seed}).stdout
            for seed in ("1", "2", "3")}
    assert len(outs) == 1
