"""fusegen.dimflow: dims grouped into factors from the IR, the sharding policy, and the
multi-round rewrite behind the JAX and PyTorch sharding rules.

Layer (a): factors, assignments and the rounds' IR as text, without a compiler.
Layer (c): the rounds run on a simulated 2x2 mesh (one thread per "device", NumPy collectives,
Numba kernels) against NumPy: the rewrite is exact without JAX or torch in the loop.
"""
from __future__ import annotations

import itertools
import re
import threading

import numpy as np
import pytest

import fusegen as fg
from fusegen.plan import dimflow
from fusegen import examples as ex
from fusegen.ir import Op

from conftest import assert_close

SIZES = {"a": 2, "b": 2}


def flow_of(op, shapes, dtype="float32", **attrs):
    return dimflow.analyze(fg.infer(op, [dtype] * len(shapes), shapes, op.bind_attrs(attrs)))


@fg.op
def row_mean(x):
    """A mean whose dims are dropped: its gradient reads them back through ``unreduce``."""
    return fg.mean(x, axis=1)


@fg.op
def row_prod(x):
    return fg.prod(x, axis=-1)


@fg.op
def major_split(x):
    """(R, 3) -> (R/2, 2, 3): x's rows pair up; the -1 dim is the major part of x's rows."""
    y = fg.reshape(x, (-1, 2, 3))
    return y * 2.0, fg.mean(y, axis=0)


@fg.op
def major_merge(x):
    """(2, R, 3) -> (R, 2, 3) -> (2R, 3): x's dim 1, moved first, is the major part of the merge."""
    return fg.reshape(fg.permute_dims(x, (1, 0, 2)), (-1, 3)) + 1.0


# =============================================================================================
# (a) factors, assignments and rounds, as text
# =============================================================================================

def test_layer_norm_factors_name_the_reduced_dim_and_keep_dims_outputs():
    flow = flow_of(ex.layer_norm, [(8, 12)])
    assert flow.text().splitlines() == [
        "x: (f0, f1)", "out0: (f0, f1)", "out1: (f0, f2)", "out2: (f0, f3)",
        "%1 mean over f1 (12 each)", "%4 mean over f1 (12 each)"]
    f1 = flow.factors[1]
    assert f1.in_outputs and f1.reduced_by == (1, 4) and not f1.replicate
    assert flow.factors[2].sizes == (1,)   # the kept size-1 dim of `mean`: a factor of its own


def test_broadcast_dims_follow_their_partner_and_size_one_dims_do_not():
    flow = flow_of(ex.rms_norm, [(8, 12), (12,)])
    assert flow.inputs == ((0, 1), (1,))          # w's only dim walks with x's last
    flow = flow_of(ex.add_mul_div, [(8, 12), (1, 12)])
    assert flow.inputs[1][1] == flow.inputs[0][1] and flow.inputs[1][0] != flow.inputs[0][0]
    sh = dimflow.assign(flow, [[("a",), ("b",)], [(), ()]], SIZES)
    assert sh.inputs == ((("a",), ("b",)), ((), ("b",))) and sh.outputs == ((("a",), ("b",)),) * 3


def test_every_ir_op_kind_has_a_rule_and_a_missing_one_is_named():
    assert set(dimflow.DIM_RULES) == set(Op) - {Op.INPUT, Op.ATTR, Op.CONST}
    with pytest.raises(NotImplementedError, match="no rule for IR op 'input'.*DIM_RULES"):
        dimflow.rule_for(Op.INPUT)


def test_a_rule_that_needs_a_dim_whole_replicates_it(monkeypatch):
    """The extension point: a layout op that must see a dim whole (a slice along it) says so with
    REPLICATE loop dims; here exp pretends to be one."""
    def slice_like(n, info, srcs):
        return [dimflow.LoopDim(((0, d),), None, dimflow.REPLICATE) for d in range(len(info.shape))] + \
               [dimflow.LoopDim((), d) for d in range(len(info.shape))]
    monkeypatch.setitem(dimflow.DIM_RULES, Op.EXP, slice_like)
    flow = flow_of(ex.softmax, [(8, 12)])
    assert flow.factors[flow.inputs[0][1]].replicate
    sh = dimflow.assign(flow, [[("a",), ("b",)]], SIZES)
    assert sh.factor_axes == {}
    assert sh.dropped == ("input 'x' dim 0 over ('a',): the op needs this dim whole on each device",
                          "input 'x' dim 1 over ('b',): the op needs this dim whole on each device")


def test_assign_drops_what_cannot_be_split_and_says_why():
    flow = flow_of(ex.add_mul_div, [(6, 12), (6, 12)])
    sh = dimflow.assign(flow, [[("a", "b"), ()], [("a",), ("a",)]], SIZES)
    assert sh.factor_axes == {0: ("a",)}     # x's 6 rows do not split 4 ways; y's split 2 ways
    assert sh.dropped == ("input 'x' dim 0 over ('a', 'b'): size (6,) does not divide by 4 devices",
                          "input 'y' dim 1 over ('a',): a mesh axis is already used by another dim")
    assert sh.inputs == ((("a",), ()), (("a",), ()))
    sh = dimflow.assign(flow, [[("a",), ()], [("b",), ()]], SIZES)
    assert sh.dropped == ("input 'y' dim 0 over ('b',): another input splits this dim differently",)


def test_a_reshape_links_the_minus_one_dim_as_the_major_part_of_a_source_dim():
    """MAJOR: x's rows and the reshape's -1 dim are one factor of two sizes (16 and 8), split only
    when the devices divide both; the other dims a reshape touches stay whole."""
    flow = flow_of(major_split, [(16, 3)])
    assert flow.text().splitlines() == ["x: (f0, f1!)", "out0: (f0, f2!, f3!)", "out1: (f2!, f3!)",
                                        "%7 mean over f0 (8 each)"]   # a mean of 8 (the -1 dim), not 16
    assert flow.factors[0].sizes == (8, 16) and not flow.factors[0].replicate
    sh = dimflow.assign(flow, [[("a", "b"), ()]], SIZES)     # 16 rows -> 8 pairs, 4 devices
    assert sh.factor_axes == {0: ("a", "b")} and sh.outputs == ((("a", "b"), (), ()), ((), ()))
    assert dimflow.program(flow, sh).collectives[0].count == 8
    # 12 rows divide by 4 devices, their 6 pairs do not: no split (a device would hold 1.5 pairs)
    sh = dimflow.assign(flow_of(major_split, [(12, 3)]), [[("a", "b"), ()]], SIZES)
    assert sh.trivial and sh.dropped == ("input 'x' dim 0 over ('a', 'b'): size (6, 12) does not divide by 4 devices",)
    # a merge: the transpose moves x's dim 1 first, the -1 dim holds it as its major part
    flow = flow_of(major_merge, [(2, 8, 3)])
    assert flow.text().splitlines() == ["x: (f0!, f1, f2!)", "out0: (f1, f3!)"]
    assert flow.factors[1].sizes == (8, 16)
    # a stated size cannot split (each device would reshape its block to the whole size)
    @fg.op
    def stated(x):
        return fg.reshape(x, (8, 2, 3))
    assert flow_of(stated, [(16, 3)]).text().splitlines()[0] == "x: (f0!, f1!)"


def test_basic_indexing_keeps_whole_slices_and_replicates_the_sliced_dim():
    @fg.op
    def shifted_diff(x):
        return x[:, 1:] - x[:, :-1]

    @fg.op
    def picks(x):
        return x[2, :, None] * 2.0

    flow = flow_of(shifted_diff, [(8, 16)])
    assert flow.text().splitlines() == ["x: (f0, f1!)", "out0: (f0, f2!)"]   # rows pass, the slice needs dim 1
    sh = dimflow.assign(flow, [[("a",), ("b",)]], SIZES)
    assert sh.factor_axes == {0: ("a",)}
    assert sh.dropped == ("input 'x' dim 1 over ('b',): the op needs this dim whole on each device",)
    # an integer index needs its dim whole; `:` under it walks on; a new axis is a size-1 dim
    assert flow_of(picks, [(8, 16)]).text().splitlines() == ["x: (f0!, f1)", "out0: (f1, f2)"]


def test_broadcast_like_walks_with_its_like_and_stated_dims_stay_whole():
    """``broadcast_like`` (full_like, a gradient's no-op sum_to: plan.noops) ties each output dim
    to ``like``'s and to x's where that has the same size; ``broadcast_to`` with stated sizes
    keeps its dims whole (a device would make the whole stated shape from its block)."""
    @fg.op
    def spread(v, x):
        return fg.full_like(x, 2.0) * x + v

    @fg.op
    def stated(v):
        return fg.broadcast_to(v, (8, 16))

    lines = flow_of(spread, [(16,), (8, 16)]).text().splitlines()
    assert lines[:3] == ["v: (f1)", "x: (f0, f1)", "out0: (f0, f1)"], lines
    assert flow_of(stated, [(16,)]).text().splitlines() == ["v: (f0!)", "out0: (f1!, f2!)"]
    # the gradient of a sum over rows at shapes where its sum_to moves nothing: x's and y's rows
    # are still one factor through the op fg.grad traced (the sharded call keeps it for its rules)
    g = fg.grad(ex.add_reduce_sum)
    flow = flow_of(g, [(8, 16), (8, 16), (16,)], axis=0)
    assert flow.inputs[0] == flow.inputs[1] and flow.inputs[2] == (flow.inputs[0][1],)


def test_a_scan_keeps_its_axis_whole_and_lets_the_others_split():
    """A block of the scanned dim would start its running value from the identity (a partial
    cumulative sum): that dim must stay whole; the other dims are elementwise."""
    @fg.op
    def running(x):
        return fg.cumulative_sum(x, axis=1) * 2.0

    flow = flow_of(running, [(8, 16)])
    assert flow.text().splitlines()[0] == "x: (f0, f1!)"
    sh = dimflow.assign(flow, [[("a",), ("b",)]], SIZES)
    assert sh.factor_axes == {0: ("a",)}
    assert sh.dropped == ("input 'x' dim 1 over ('b',): the op needs this dim whole on each device",)


def test_no_rounds_when_no_reduction_folds_a_split_dim():
    flow = flow_of(ex.layer_norm, [(8, 12)])
    assert dimflow.program(flow, dimflow.assign(flow, [[("a",), ()]], SIZES)) is None


def test_layer_norm_split_along_the_normalized_dim_is_two_rounds_and_a_final_one():
    flow = flow_of(ex.layer_norm, [(8, 12)])
    prog = dimflow.program(flow, dimflow.assign(flow, [[(), ("a", "b")]], SIZES))
    r1, r2 = prog.rounds
    assert "%1 = sum %0, axis=@axis, keep_dims=True\n  return %1" in r1.op.text(locations=False)
    text2 = r2.op.text(locations=False)
    assert text2.startswith("op layer_norm_round2(x, mean1; axis: int = -1, eps: float = 1e-05)")
    assert "%2 = sub %0, %1" in text2 and "sum %3, axis=@axis, keep_dims=True" in text2
    assert r2.args == (("input", 0), ("combined", 1))
    assert [(p.combine, p.axes, p.count) for p in prog.collectives] == [("sum", ("a", "b"), 12)] * 2
    assert prog.final.op.inputs == ["x", "mean1", "mean4"]
    assert prog.outputs == (("final", 0), ("combined", 1), ("final", 1))   # mean is the combined value


def test_a_lone_sum_reuses_the_op_itself_and_float16_partials_accumulate_in_float32():
    flow = flow_of(ex.add_reduce_sum, [(8, 12), (8, 12)])
    prog = dimflow.program(flow, dimflow.assign(flow, [[(), ("b",)], [(), ("b",)]], SIZES))
    assert prog.rounds[0].op is ex.add_reduce_sum and prog.final is None
    flow = flow_of(ex.softmax, [(8, 12)], "float16")
    prog = dimflow.program(flow, dimflow.assign(flow, [[(), ("b",)]], SIZES))
    assert "cast %3 to float32" in prog.rounds[1].op.text(locations=False)
    assert [(p.combine, str(p.dtype)) for p in prog.collectives] == [("max", "float16"), ("sum", "float16")]


def test_prod_combines_by_product_and_gradients_split_like_any_op():
    flow = flow_of(row_prod, [(8, 12)])
    assert dimflow.program(flow, dimflow.assign(flow, [[(), ("a",)]], SIZES)).collectives[0].combine == "prod"
    gop = fg.grad(ex.rms_norm)
    flow = flow_of(gop, [(8, 12), (12,), (8, 12)])
    prog = dimflow.program(flow, dimflow.assign(flow, [[("a",), ()], [()], [("a",), ()]], SIZES))
    assert [p.combine for p in prog.collectives] == ["sum"]     # dw: a sum over the split rows
    assert "sum_to" in prog.rounds[0].op.text(locations=False)


def test_unreduce_keeps_the_reduction_it_reads_its_axes_from():
    flow = flow_of(fg.grad(row_mean), [(8, 12), (8,)])
    prog = dimflow.program(flow, dimflow.assign(flow, [[(), ("a",)], [()]], SIZES))
    text = prog.final.op.text(locations=False)
    assert re.search(r"%(\d+) = mean %\d+, axis=1, keep_dims=False\n  %\d+ = unreduce %\d+, axes of %\1", text)
    assert prog.final.args == (("input", 0), ("input", 1), ("combined", 5))  # the mean: measured, not computed


# =============================================================================================
# (c) the rounds on a simulated mesh
# =============================================================================================

def simulate(op, arrays, in_axes, attrs=None, sizes=SIZES):
    """Run ``op`` as a sharded program: one thread per device of a ``sizes`` mesh, each running
    ``Program.run`` on its block of every input; collectives through a barrier. Returns the
    outputs assembled from the blocks."""
    attrs = attrs or {}
    spec = fg.infer(op, [a.dtype for a in arrays], [a.shape for a in arrays], op.bind_attrs(attrs))
    flow = dimflow.analyze(spec)
    sh = dimflow.assign(flow, in_axes, sizes)
    prog = dimflow.program(flow, sh)
    names = list(sizes)
    devices = list(itertools.product(*(range(sizes[n]) for n in names)))
    kernels: dict = {}

    def block(a, dims_axes, dev):
        idx = []
        for d, axes in enumerate(dims_axes):
            parts, pos = 1, 0
            for ax in axes:
                pos = pos * sizes[ax] + dev[names.index(ax)]
                parts *= sizes[ax]
            n = a.shape[d] // parts
            idx.append(slice(pos * n, (pos + 1) * n))
        return a[tuple(idx)]

    shared, barrier, lock = {}, threading.Barrier(len(devices)), threading.Lock()
    results = {}

    def device(dev):
        local = [np.ascontiguousarray(block(a, ax, dev)) for a, ax in zip(arrays, sh.inputs)]

        def call(rnd, args):
            with lock:
                k = kernels.setdefault(id(rnd.op), fg.compile(rnd.op))
            out = k(*args, **attrs)
            return out if isinstance(out, tuple) else (out,)

        def combine(v, p):
            shared[(p.node, dev)] = v
            barrier.wait()
            group = [d for d in devices if all(d[i] == dev[i] for i, n in enumerate(names) if n not in p.axes)]
            vals = np.stack([shared[(p.node, d)] for d in group])
            barrier.wait()
            out = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}[p.combine](vals, axis=0)
            return (out / p.count if p.count else out).astype(p.dtype.np)

        if prog is None:
            outs = fg.compile(op)(*local, **attrs)
            results[dev] = outs if isinstance(outs, tuple) else (outs,)
        else:
            results[dev] = prog.run(local, call, combine)

    threads = [threading.Thread(target=device, args=(d,)) for d in devices]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    outs = []
    for k, (shape, axes) in enumerate(zip(spec.out_shapes, sh.outputs)):
        full = np.empty(shape, results[devices[0]][k].dtype)
        for dev in devices:
            block(full, axes, dev)[...] = results[dev][k]
        outs.append(full)
    return tuple(outs), prog


def _np_layer_norm(x, axis=-1, eps=1e-5):
    mean = x.mean(axis=axis, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axis, keepdims=True)
    return (x - mean) / np.sqrt(var + eps), mean, 1 / np.sqrt(var + eps)


def test_layer_norm_on_a_simulated_mesh_is_exact(rng):
    x = rng.standard_normal((8, 12))
    got, prog = simulate(ex.layer_norm, [x], [[("a",), ("b",)]])
    assert len(prog.rounds) == 2
    for g, w in zip(got, _np_layer_norm(x)):
        assert_close(g, w)


def test_gradient_through_unreduce_and_a_product_on_a_simulated_mesh(rng):
    x, d = rng.uniform(0.5, 1.5, (8, 12)), rng.standard_normal(8)
    (got,), prog = simulate(fg.grad(row_mean), [x, d], [[(), ("a", "b")], [()]])
    assert_close(got, np.broadcast_to(d[:, None] / 12, x.shape))
    (got,), prog = simulate(row_prod, [x], [[("a",), ("b",)]])
    assert prog.collectives[0].combine == "prod"
    assert_close(got, np.prod(x, axis=-1))


def test_major_reshapes_on_a_simulated_mesh(rng):
    x = rng.standard_normal((16, 3))
    (y, m), prog = simulate(major_split, [x], [[("a", "b"), ()]])
    assert prog.collectives[0].axes == ("a", "b")
    assert_close(y, 2 * x.reshape(8, 2, 3))
    assert_close(m, x.reshape(8, 2, 3).mean(axis=0))
    x = rng.standard_normal((2, 8, 3))
    (z,), prog = simulate(major_merge, [x], [[(), ("a", "b"), ()]])
    assert prog is None
    assert_close(z, x.transpose(1, 0, 2).reshape(16, 3) + 1)


CASES = [
    (ex.add_reduce_sum, [(8, 12), (8, 12)], dict(axis=0)),
    (ex.add_reduce_sum, [(8, 12), (12,)], dict(axis=1, keep_dims=True)),
    (ex.add_mul_div, [(8, 12), (1, 12)], {}),
    (ex.smooth_l1, [(8, 12), (8, 12)], dict(sigma=0.7)),
    (ex.softmax, [(8, 12)], {}),
    (ex.softmax, [(8, 12)], dict(axis=0)),
    (ex.layer_norm, [(8, 12)], dict(axis=0)),
    (ex.rms_norm, [(8, 12), (12,)], {}),
    (ex.bias_gelu, [(8, 12), (12,)], {}),
]


@pytest.mark.slow
@pytest.mark.parametrize("grad", [False, True], ids=["forward", "grad"])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0].name}-{i}" for i, c in enumerate(CASES)])
def test_every_reference_op_and_its_gradient_on_a_simulated_mesh(case, grad, rng):
    op, shapes, attrs = case
    xs = [rng.uniform(0.5, 1.5, s) for s in shapes]
    if grad:
        fwd = fg.compile(op)(*xs, **attrs)
        cots = [rng.standard_normal(np.shape(o)) for o in (fwd if isinstance(fwd, tuple) else (fwd,))]
        op = fg.grad(op)
        xs = [a for n, a in zip(case[0].inputs, xs) if n in op.needs] + cots
    want = fg.compile(op)(*xs, **attrs)
    want = want if isinstance(want, tuple) else (want,)
    for spec in ([("a", "b"), ()], [(), ("a", "b")], [("a",), ("b",)]):
        in_axes = [[spec[k] if (k := d + 2 - x.ndim) >= 0 and x.shape[d] > 1 else () for d in range(x.ndim)]
                   for x in xs]
        got, _ = simulate(op, xs, in_axes, attrs)
        for g, w in zip(got, want):
            assert_close(g, w, what=f"{op.name} {spec}")
