"""Layer (a): the Plan's loop model without a compiler. Every stage lists the arrays it reads and
stores as Accesses (slot, node, index-map steps); one function (``plan.layout.evaluate``)
evaluates a map into (offset, strides over the domain); the fused groups' operands and strides are
exactly those evaluations; ``print(plan)`` shows every access with its map; and the renderers
take their operands from the same list.
"""
from __future__ import annotations

import inspect

import pytest

import fusegen as fg
import fusegen.examples as ex
from fusegen.ir import Op
from fusegen.plan import (BROADCAST, REDUCED, STEP_RULES, Access, build_plan, c_strides, evaluate, read_strides,
                          schedule, strides_of, write_strides)
from fusegen.plan.views import contiguous


def _eval(steps, shape, dom, axes=()):
    """A map evaluated to (offset, strides) from a C-contiguous array of ``shape``."""
    offset, strides = strides_of(evaluate(steps, contiguous(shape), None, dom, axes))
    return offset, list(strides)
from fusegen.plan import access as access_module


def _slots(accesses):
    return [(a.slot, a.map_text()) for a in accesses]


def test_softmax_stages_read_and_store_through_their_maps():
    p = build_plan(ex.softmax, share=False)   # (recomputing exp(x - max): the CUDA plans)
    x, ws0, ws1, out = ("in", 0), ("buf", 0), ("buf", 1), ("out", 0)
    assert [_slots(s.reads) for s in p.stages] == [
        [(x, "broadcast")], [(x, "broadcast"), (ws0, "broadcast")],
        [(x, "broadcast"), (ws0, "broadcast"), (ws1, "broadcast")]]
    assert [_slots(s.stores) for s in p.stages] == [[(ws0, "reduced")], [(ws1, "reduced")], [(out, "identity")]]
    assert p.stages[1].reads[1].node is p.buffers[0] and p.stages[2].stores[0].node is ex.softmax.graph.outputs[0]
    # the CPU plan: the sum stage stores exp(x - max) in the output too, the output stage reads it
    # back there (fusegen.plan.shared)
    p = build_plan(ex.softmax)
    assert [_slots(s.reads) for s in p.stages] == [
        [(x, "broadcast")], [(x, "broadcast"), (ws0, "broadcast")], [(ws1, "broadcast"), (out, "broadcast")]]
    assert [_slots(s.stores) for s in p.stages] == [
        [(ws0, "reduced")], [(ws1, "reduced"), (out, "identity")], [(out, "identity")]]
    assert p.stages[1].stores[1].node is p.stages[2].reads[1].node is p.stages[1].reductions[0].srcs[0]


def test_stores_list_reductions_then_finals_then_writes():
    p = build_plan(ex.layer_norm)   # mean -> out1 and ws0; var -> ws1 with rstd (out2) as a final; y -> out0
    assert [_slots(s.stores) for s in p.stages] == [
        [(("out", 1), "reduced"), (("buf", 0), "reduced")],
        [(("buf", 1), "reduced"), (("out", 2), "reduced")],
        [(("out", 0), "identity")]]
    assert all(a.node.op in (Op.INPUT, Op.REDUCE) for s in p.stages for a in s.reads)


@pytest.mark.parametrize("shape,dom", [((5,), (4, 5)), ((4, 1), (4, 5)), ((1, 5), (3, 4, 5)), ((), (2, 3)),
                                       ((4, 5), (4, 5))])
def test_broadcast_evaluates_to_numpy_strides(shape, dom):
    import numpy as np
    offset, strides = _eval((BROADCAST,), shape, dom)
    a = np.empty(shape, np.int8)
    want = [0 if s == 0 else s for s in np.broadcast_to(a, dom).strides]
    assert offset == 0 and strides == [w if d != 1 else strides[k] for k, (w, d) in enumerate(zip(want, dom))]
    assert strides == read_strides(shape, dom)


@pytest.mark.parametrize("result,dom,axes,want", [
    ((4, 1), (4, 5), (1,), [1, 0]),      # keep_dims
    ((4,), (4, 5), (1,), [1, 0]),        # dropped
    ((5,), (4, 5), (0,), [0, 1]),        # leading axis
    ((1, 1, 5), (2, 3, 5), (0, 1), [0, 0, 1]),
    ((3, 1), (2, 3, 1), (0,), [0, 1, 0]),  # a size-1 dim in the domain
])
def test_reduced_evaluates_to_the_result_strides(result, dom, axes, want):
    assert _eval((REDUCED,), result, dom, axes) == (0, want)
    assert write_strides(result, dom, axes) == want


def test_identity_is_c_contiguous_over_the_domain():
    assert _eval((), (3, 4, 5), (3, 4, 5)) == (0, c_strides((3, 4, 5))) == (0, [20, 5, 1])


def test_every_step_kind_has_an_evaluation_rule():
    kinds = {c for _, c in inspect.getmembers(access_module, inspect.isclass)
             if c.__module__ == access_module.__name__ and c is not Access}
    assert kinds == set(STEP_RULES)


def test_group_operands_are_the_evaluated_accesses_in_order():
    op = ex.softmax
    p = build_plan(op)
    spec = fg.infer(op, ["float32"], [(4, 5)], op.bind_attrs({}))
    (run,) = schedule(p, spec)   # fused: each row read from memory once
    assert run.operands == [("in", 0), ("buf", 0), ("buf", 1), ("out", 0)]
    assert run.offsets == [0, 0, 0, 0]
    # the workspaces are read at the index where they were written: strides (1, 0) over (4, 5)
    assert run.layout.o_str == [[5], [1], [1], [5]] and run.layout.ri_str == [1, 0, 0, 1]


def test_misaligned_reads_split_the_group():
    @fg.op
    def centered(x, *, axis: int = 0):
        return x - fg.mean(x, axis=axis)    # without keep_dims the mean lines up only over axis 0

    p = build_plan(centered)
    for axis, groups in ((0, [(0, 1)]), (1, [(0,), (1,)])):
        spec = fg.infer(centered, ["float32"], [(4, 4)], centered.bind_attrs({"axis": axis}))
        assert [r.stages for r in schedule(p, spec)] == groups, axis


def test_plan_text_shows_every_access_and_its_map():
    text = str(build_plan(ex.layer_norm))
    assert text.startswith("plan layer_norm: 3 stage(s); workspaces: ws0 = %1 (mean), ws1 = %4 (mean)")
    assert "  stage 1 (level 2) over axes @axis: mean %4, output 2 = %7 from the results" in text
    for line in ("    read  x0     %0    through broadcast", "    store out1   %1    through reduced",
                 "    store out2   %7    through reduced", "    store out0   %8    through identity"):
        assert line in text.splitlines(), line
    assert text == build_plan(ex.layer_norm).text()


def test_numba_renderer_takes_its_operands_from_the_accesses():
    from fusegen import lower_cpu
    op = ex.rms_norm
    p = build_plan(op)
    spec = fg.infer(op, ["float32", "float32"], [(4, 6), (6,)], op.bind_attrs({}))
    for run in schedule(p, spec):
        src = lower_cpu.compile_group(p, spec, run, False).source
        names = [a.name for i in run.stages for a in p.stages[i].reads + p.stages[i].stores]
        header = next(line for line in src.splitlines() if line.startswith("def kernel("))
        assert all(n in header for n in names), (names, header)
