"""Gathers (issue #17): take, take_along_axis and x[idx] in the IR (text, shape rules, errors)
and fused on Numba CPU, against NumPy: every dtype family, ranks 0-4, size-0 arrays, negative
indices, out-of-range indices (BoundsError from the kernel), wrap/clip modes, threads."""
from __future__ import annotations

import numpy as np
import pytest

import fusegen as fg
from fusegen.plan import build_plan
from _optional import backends_extended


@fg.op
def takes(x, i):
    # many results from one kernel: take along the first and last axes, x[idx] with slices
    # around, fused with elementwise ops and a reduction
    return (fg.take(x, i, axis=0), fg.take(x, i, axis=-1) * 2, x[..., i], x[:, i] + 1,
            fg.sum(fg.take(x, i, axis=0)))


@fg.op
def take0(x, i):
    return fg.take(x, i, axis=0), fg.sum(fg.take(x, i, axis=0))


@fg.op
def along(x, i):
    return fg.take_along_axis(x, i, axis=-1), fg.take_along_axis(x, i, axis=0)


@fg.op
def flat(x, i):
    return fg.take(x, i), x.T[i]


@fg.op
def modes(x, i):
    return fg.take(x, i, axis=0, mode="wrap"), fg.take(x, i, axis=0, mode="clip")


def _cast(a, d):
    return a.astype(d) if np.dtype(d).kind != "b" else a % 2 == 0


X_DTYPES = ["bool", "int8", "uint16", "int32", "int64", "float16", "float32", "float64"]
I_DTYPES = ["int8", "uint8", "int16", "int32", "int64", "uint64", "uint32", "int64"]


@pytest.mark.parametrize("xd,idt", [pytest.param(*p, marks=[] if k in (1, 6) else [pytest.mark.slow])
                                    for k, p in enumerate(zip(X_DTYPES, I_DTYPES))])
def test_take_dtypes(xd, idt):
    rng = np.random.default_rng(0)
    x = _cast(rng.integers(-50, 50, (4, 3, 5)), xd)
    lo = 0 if np.dtype(idt).kind == "u" else -3
    i = rng.integers(lo, 3, (2, 3)).astype(idt)
    got = fg.compile(takes)(x, i)
    ii = i.astype(np.int64)
    want = (np.take(x, ii, axis=0), np.take(x, ii, axis=-1) * 2, x[..., ii], x[:, ii] + 1,
            np.sum(np.take(x, ii, axis=0)))
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-3)


@pytest.mark.parametrize("xshape,ishape", [((5,), ()), ((5,), (0,)), ((5,), (2, 1, 2, 1)), ((3, 0), (2,)),
                                           ((1, 2, 3, 4), (3,)), ((2, 3, 1, 4), (2, 2))])
def test_take_ranks_and_size0(xshape, ishape):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(xshape).astype(np.float32)
    i = rng.integers(-xshape[0], xshape[0], ishape) if xshape[0] else np.zeros(ishape, np.int64)
    g0, s = fg.compile(take0)(x, i)
    np.testing.assert_allclose(g0, np.take(x, i, axis=0), rtol=1e-6)
    np.testing.assert_allclose(s, np.take(x, i, axis=0).sum(), rtol=1e-5, atol=1e-5)


def test_take_flat_and_rank0():
    x = np.arange(12.0).reshape(3, 4)
    i = np.array([[0, -1], [3, 2]])
    a, b = fg.compile(flat)(x, i)
    np.testing.assert_array_equal(a, np.take(x, i))
    np.testing.assert_array_equal(b, x.T[i])
    a, _ = fg.compile(flat)(x, np.array([[0, -12], [5, 11]]) % 4)
    np.testing.assert_array_equal(a, np.take(x, np.array([[0, -12], [5, 11]]) % 4))
    a = fg.compile(fg.op(lambda x, i: fg.take(x, i), name="flat0"))(np.array(7.0), np.array([0, 0, -1]))
    np.testing.assert_array_equal(a, np.take(np.array(7.0), [0, 0, -1]))   # a 0-d x, flattened (NumPy)


def test_take_along_axis():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 6)).astype(np.float64)
    i = rng.integers(-4, 4, (4, 6))
    a, b = fg.compile(along)(x, i)
    np.testing.assert_array_equal(a, np.take_along_axis(x, np.where(i < 0, i + 6, i), -1))
    np.testing.assert_array_equal(b, np.take_along_axis(x, np.where(i < 0, i + 4, i), 0))
    a, b = fg.compile(along)(x, np.array([[1], [2], [-1], [0]]))   # broadcast (NumPy)
    np.testing.assert_array_equal(a, np.take_along_axis(x, np.array([[1], [2], [5], [0]]), -1))


def test_modes():
    x = np.arange(10.0).reshape(5, 2)
    i = np.array([-7, -1, 0, 4, 5, 12], np.int16)
    w, c = fg.compile(modes)(x, i)
    np.testing.assert_array_equal(w, np.take(x, i, axis=0, mode="wrap"))
    np.testing.assert_array_equal(c, np.take(x, i, axis=0, mode="clip"))


@pytest.mark.parametrize("bad", [5, -6, 127])
def test_out_of_range_raises(bad):
    x = np.arange(10.0).reshape(5, 2)
    k = fg.compile(takes)
    i = np.array([0, bad, 1], np.int8)
    with pytest.raises(fg.BoundsError) as e:
        k(x, i)
    msg = str(e.value)
    assert "op takes" in msg and "take" in msg and f"index {bad} is out of bounds for axis" in msg
    assert isinstance(e.value, IndexError) and isinstance(e.value, fg.FusegenError)
    with pytest.raises(IndexError, match="take_along_axis: index 9 is out of bounds for axis 1 with size 2"):
        fg.compile(along)(x, np.array([[0, 9]]))


def test_empty_axis():
    with pytest.raises(fg.BoundsError, match="size 0"):
        fg.compile(modes)(np.zeros((0, 2)), np.array([0]))
    w, c = fg.compile(modes)(np.zeros((0, 2)), np.zeros((0,), np.int64))
    assert w.shape == c.shape == (0, 2)


def test_threads():
    # big enough for the parallel path: every task checks its own indices
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1000, 300)).astype(np.float32)
    i = rng.integers(-1000, 1000, 700)
    got = fg.compile(take0)(x, i)
    np.testing.assert_array_equal(got[0], np.take(x, i, axis=0))
    np.testing.assert_allclose(got[1], np.take(x, i, axis=0).sum(dtype=np.float64), rtol=1e-4)
    i[650] = 1000
    with pytest.raises(fg.BoundsError, match="index 1000 is out of bounds for axis 0 with size 1000"):
        fg.compile(take0)(x, i)


def test_ir_text_plan_and_infer():
    text = str(takes)
    assert "take %0, %1, axis=0" in text and "take %0, %1, axis=-1" in text
    assert "take_along_axis %0, %1, axis=-1" in str(along) and "mode=wrap" in str(modes)
    spec = fg.infer(takes, ["float32", "int32"], [(4, -1, 5), (2, 3)], {})
    assert spec.out_shapes[0] == (2, 3, -1, 5) and spec.out_shapes[1] == (4, -1, 2, 3)
    assert spec.out_shapes[3] == (4, 2, 3, 5)
    plan = str(build_plan(takes))
    assert "gathered from gather" in plan and "indices of gather" in plan


@pytest.mark.parametrize("dtypes,shapes,exc,match", [
    (["float32", "float32"], [(3, 4), (2,)], fg.DTypeError, "indices must have an integer dtype"),
    (["float32", "bool"], [(3, 4), (2,)], fg.DTypeError, "indices must have an integer dtype"),
    (["float32", "int32"], [(3,), (2,)], fg.ShapeError, "axis -1|out of range"),
])
def test_errors(dtypes, shapes, exc, match):
    op = takes if shapes[0] != (3,) else along
    if op is along:
        shapes = [(3,), (2, 2)]
        match = "indices must have the rank of x"
    with pytest.raises(exc, match=match):
        fg.infer(op, dtypes, shapes, {})


def test_trace_errors():
    def two(x, i):
        return x[i, i]

    def mixed(x, i):
        return x[0, i]

    def badmode(x, i):
        return fg.take(x, i, axis=0, mode="fill")

    for fn, m in ((two, "2 integer arrays"), (mixed, "only be combined with slices"), (badmode, "mode must be")):
        with pytest.raises(fg.TraceError, match=m):
            fg.op(fn).graph


def test_emit_cuda():
    # (the emitted C++ and CUDA in detail: tests/test_gathers_emitted.py)
    for abi in ("mindspore-aot", "xla-ffi"):
        e = fg.emit(takes, abi=abi, device="cuda", dtypes=[("float32", "int64")])
        assert "gather_fail(R, " in e.source and "FG_ERR_GATHER" in " ".join(e.error_table.values())


def test_numba_cuda_ptx_assembles(tmp_path):
    import subprocess
    from test_cuda_codegen import _nvrtc_ok, needs_ptx
    if needs_ptx.args[0]:
        pytest.skip(needs_ptx.kwargs["reason"])
    _nvrtc_ok()
    from fusegen.lower_cuda import compile_ptx
    ptxs = compile_ptx(takes, ["float32", "int32"], [(64, 50), (30,)])
    assert any("atom.global" in p for _, p in ptxs)   # a bad index is recorded with atomics
    for name, ptx in ptxs:
        path = tmp_path / f"{name}.ptx"
        path.write_text(ptx)
        proc = subprocess.run(["ptxas", "-arch=sm_90", str(path), "-o", str(tmp_path / f"{name}.cubin")],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr


# --- gradients: the scatter-add adjoint (owner-computes) ----------------------------------------
@fg.op
def picked(x, i):
    return fg.take_along_axis(x, i, axis=-1) * 2


picked_grad = fg.grad(picked, wrt="x")


@pytest.mark.parametrize("rows", [3, pytest.param(3000, marks=pytest.mark.extended)])   # 3000: the threads' path
def test_take_along_axis_grad_accumulates_repeats(rows):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((rows, 50))
    i = rng.integers(-50, 50, (rows, 7))
    i[:, 1] = i[:, 0]                     # repeated indices accumulate
    g = rng.standard_normal((rows, 7))
    d, = fg.compile(picked_grad)(x, i, g)
    want = np.zeros_like(x)
    for r in range(rows):
        np.add.at(want[r], i[r] % 50, 2 * g[r])
    np.testing.assert_allclose(d, want, rtol=1e-12, atol=1e-12)


@fg.op
def take1(x, i):
    return fg.take(x, i, axis=1) * 3


def test_take_grad_scatter_adds():
    # repeated and negative indices accumulate; the backward op is traced per index rank
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 5))
    i = np.array([[0, 1, 1], [4, -1, 0]])
    g = rng.standard_normal((3, 2, 3))
    d, = fg.compile(fg.grad(take1, wrt="x"))(x, i, g)
    want = np.zeros_like(x)
    for r in range(3):
        np.add.at(want[r], i.reshape(-1) % 5, 3 * g[r].reshape(-1))
    np.testing.assert_allclose(d, want, rtol=1e-12)


@fg.op
def picked_one(x, i):
    # one index per row along the middle axis: x (R, C, S), i (R, S)
    return fg.take_along_axis(x, i[..., None, :] + 7, axis=-2, mode="wrap") * 2


def _compare_reductions(op, dtypes, shapes):
    """The specialized backward graph's reductions that read the one-hot compare (iota == index),
    as (axes, is a sum_to)."""
    from fusegen.ir import Op, ShapeOf, nodes_of
    g = op.specialize(dtypes, shapes, {}).graph
    out = []
    for r in (n for n in g.nodes if n.op is Op.REDUCE):
        if any(n.op is Op.EQ and any(m.op is Op.IOTA for m in nodes_of(n.srcs)) for n in nodes_of(r.srcs[:1])):
            out.append((r.arg.axes, isinstance(r.arg.axes, ShapeOf)))
    return out


def test_one_index_per_row_grad_is_a_fused_one_hot():
    """take_along_axis with one index per row (cross-entropy's label): the adjoint is a one-hot
    compare fused into the one stage that sums it to x's shape; no reduction over the indices."""
    grad = fg.grad(picked_one, wrt="x")
    dtypes, shapes = ("float64", "int64", "float64"), ((3, 5, 2), (3, 2), (3, 1, 2))
    assert len(build_plan(grad.specialize(dtypes, shapes, {})).stages) == 1
    assert [sum_to for _, sum_to in _compare_reductions(grad, dtypes, shapes)] == [True]
    # several indices per row keep the scatter-add: a reduction over them, then the sum to x
    many = _compare_reductions(picked_grad, dtypes, ((3, 5), (3, 7), (3, 7)))
    assert [sum_to for _, sum_to in many] == [False, True]
    rng = np.random.default_rng(6)
    k = fg.compile(grad)
    for xs in ((3, 5, 2), (1, 5, 2)):       # x broadcast against the indices: the rows sum
        x = rng.standard_normal(xs)
        i = rng.integers(-9, 9, (3, 2))
        g = rng.standard_normal((3, 1, 2))
        d, = k(x, i, g)
        want = np.zeros((3, 5, 2))
        for r in range(3):
            for s in range(2):
                want[r, (i[r, s] + 7) % 5, s] += 2 * g[r, 0, s]
        np.testing.assert_allclose(d, want.sum(0, keepdims=True) if xs[0] == 1 else want, rtol=1e-12)


# --- gathers from sources no gathered address can index: copied first (graph/canon) -----------
@fg.op
def gathered_layouts(x, i, j):
    # a pad, a concat, an iota expression and a reshape of a transposed view, each gathered:
    # the first two were refused on Numba and failed with FG_ERR_VIEW_PARAM in the emitted C++,
    # the iota read the wrong elements there (silently), the reshape was refused on both
    return (fg.take_along_axis(fg.pad(x, ((0, 0), (1, 0))), j, axis=-1),
            fg.take(fg.concat([x, -x], axis=0), i, axis=0),
            fg.take(fg.arange(x.shape[0] * 2) * 1.5 + x[0, 0], i),
            fg.take(fg.reshape(x.T, (-1,)), i) + fg.sum(x, axis=0)[0])


def _gathered_layouts_ref(x, i, j):
    return (np.take_along_axis(np.pad(x, ((0, 0), (1, 0))), j, axis=-1), np.take(np.concatenate([x, -x]), i, axis=0),
            np.take(np.arange(x.shape[0] * 2) * 1.5 + x[0, 0], i), np.take(x.T.reshape(-1), i) + x.sum(0)[0])


@pytest.mark.parametrize("backend", ["numba", pytest.param("aot", marks=pytest.mark.extended)])
def test_gathers_from_pieces_iotas_and_modular_views(backend):
    from conftest import assert_all_close, compile_for
    x = np.arange(12, dtype=np.float64).reshape(3, 4) * 0.5 - 1
    i, j = np.array([5, 0, 2, 3, 1]), np.array([[4, 0, 1, 2, 3, 0]] * 3)
    k = compile_for(gathered_layouts, backend, dtypes=[("float64", "int64", "int64")])
    assert_all_close(k(x, i, j), _gathered_layouts_ref(x, i, j))
    assert str(gathered_layouts).count("copy %") == 4


@pytest.mark.extended   # (a compile per op: the default run keeps its 5 minutes)
@pytest.mark.parametrize("backend", backends_extended("numba", "aot"))
def test_a_gradient_checks_the_indices_its_forward_checks(backend):
    """The backward runs on its own: a bad id raises there as in the forward (the scatter-add
    matched no position and dropped it silently), and a bad label of the fused one-hot backward
    (cross-entropy's, one pass over the logits) makes its row NaN, as JAX's gathers fill."""
    import fusegen.examples as ex

    @fg.op
    def emb_sum(table, ids):
        return fg.sum(fg.take(table, ids, axis=0) * 3.0)

    z = np.zeros((4, 5), np.float32)
    ce = fg.compile(ex.cross_entropy_grad, backend=backend)
    (d,) = ce(z, np.array([0, 1, -1, 4]), np.float32(1.0))
    assert d[2, 4] < 0 and d[3, 4] < 0          # (-1 counts from the end, as in the forward)
    for bad in (5, -6):
        (d,) = ce(z, np.array([0, 1, 2, bad]), np.float32(1.0))
        assert np.isnan(d[3]).all() and not np.isnan(d[:3]).any()
    emb = fg.compile(fg.grad(emb_sum, wrt="table"), backend=backend)
    with pytest.raises(fg.BoundsError, match=r"op emb_sum_grad: .*index 7 is out of bounds"):
        emb(np.ones((4, 3), np.float32), np.array([0, 7]), np.float32(1.0))


@fg.op
def per_row_xent(logits, labels):
    """Cross-entropy per row: the label's logit is a row constant (read once before the row's loop)."""
    m = fg.max(logits, axis=-1, keepdims=True)
    lse = fg.log(fg.sum(fg.exp(logits - m), axis=-1)) + m[..., 0]
    return lse - fg.take_along_axis(logits, labels[:, None], axis=-1)[:, 0]


@pytest.mark.parametrize("backend", ["numba", "aot"])
def test_an_empty_batch_reads_no_row_constant(backend):
    # the emitted C++ read a row's gathered label before its (empty) loop: past the end of an
    # empty labels buffer, a garbage index and a BoundsError (or a crash on a null pointer)
    k = fg.compile(per_row_xent, backend=backend)
    for _ in range(3):
        assert k(np.zeros((0, 5), np.float32), np.zeros(0, np.int64)).shape == (0,)
    z = np.array([[0.0, 1.0, 2.0], [1.0, 1.0, 1.0]], np.float32)
    want = np.log(np.exp(z).sum(-1)) - z[[0, 1], [2, 0]]
    np.testing.assert_allclose(k(z, np.array([2, 0])), want, rtol=1e-6)


@fg.op
def gathers_of_views(x, i):
    """Gathers from a tile, a meshgrid, a broadcast and a gather's result, each flattened: copied
    first (a gathered address cannot index a div/mod map)."""
    return (fg.take(fg.tile(x, (1, 2)), i % 8, axis=1), fg.take(fg.broadcast_to(x[0], (3, 4)), i),
            fg.take(fg.meshgrid(fg.arange(4), fg.arange(3))[0], i) + x[0], fg.take(fg.take(x, i % 4, axis=1), i))


@pytest.mark.parametrize("backend", backends_extended("numba", "aot"))
def test_gathers_from_broadcasts_and_gathers(backend):
    x, i = np.arange(12.0).reshape(3, 4), np.array([0, 5, 11, 7])
    got = fg.compile(gathers_of_views, backend=backend)(x, i)
    want = (np.take(np.tile(x, (1, 2)), i % 8, axis=1), np.take(np.broadcast_to(x[0], (3, 4)), i),
            np.take(np.meshgrid(np.arange(4), np.arange(3))[0], i) + x[0], np.take(np.take(x, i % 4, axis=1), i))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_a_list_of_ints_indexes_as_numpy_does():
    """``x[:, [0, 2]]`` is NumPy's integer-array indexing with that array (it was refused: "cannot
    index with list"): negative entries wrap, an empty list selects nothing, out-of-range is a
    BoundsError, and a list of bools or of lists is refused by name."""
    x = np.arange(24.0).reshape(2, 3, 4)
    cases = [lambda t: t[:, [0, 2]], lambda t: t[..., [3, -1, 0]], lambda t: t[[1, 0]], lambda t: t[:, []],
             lambda t: t[:, [2, 0], 1:3] * 2]
    op = fg.op(lambda t: tuple(c(t) for c in cases), name="listed")
    for got, c in zip(fg.compile(op)(x), cases):
        np.testing.assert_array_equal(got, c(x))
        assert got.shape == c(x).shape
    with pytest.raises(fg.BoundsError, match=r"index 5 is out of bounds for axis 1 with size 3"):
        fg.compile(fg.op(lambda t: t[:, [0, 5]], name="listed_oob"))(x)
    with pytest.raises(fg.TraceError, match=r"boolean indexing has a data-dependent shape"):
        fg.op(lambda t: t[:, [True, False, True]], name="listed_mask")
    with pytest.raises(fg.TraceError, match=r"cannot index with list \[\[0\], \[1\]\]: a list index holds Python ints"):
        fg.op(lambda t: t[:, [[0], [1]]], name="listed_nested")
