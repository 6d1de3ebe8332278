"""Layout ops (views, pieces, iotas, dims as values) through every CPU backend, against NumPy.

One table of cases (``CASES``: a traced function, its inputs, a NumPy reference) runs through
``backend="numba"``, ``backend="aot"`` (the emitted MindSpore C++) and ``fusegen.jax.function``
(the XLA FFI handlers). To compile once per backend, the cases are batched into one op with
many inputs and outputs (``_batched``): the ops traced generically in one, those traced per
input rank (``x.shape`` unpacked, ``x.ndim``) in another.
"""
from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

import fusegen as fg
from fusegen.native import host
from test_aot_backend import dynamic_variants

_rng = np.random.default_rng(16)


def _r(*shape):
    return _rng.standard_normal(shape).astype(np.float32)


def _heads(x):
    b, s, e = x.shape
    return x.reshape(b, s, 4, e // 4).transpose(0, 2, 1, 3) * 0.5


def _merge(x):
    b, h, s, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, s, h * d) + 1


def _causal(x):
    m = fg.arange(x.shape[-1])[None, :] <= fg.arange(x.shape[-2])[:, None]
    s = fg.where(m, x, -np.inf)
    e = fg.exp(s - fg.max(s, axis=-1, keepdims=True))
    return e / fg.sum(e, axis=-1, keepdims=True)


def _causal_ref(x):
    s = np.where(np.tril(np.ones(x.shape[-2:], bool)), x, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _gnorm(x):
    b, c, h, w = x.shape
    g = x.reshape(b, 2, c // 2 * h * w)
    mu = fg.mean(g, axis=-1, keepdims=True)
    var = fg.mean((g - mu) ** 2, axis=-1, keepdims=True)
    return ((g - mu) / fg.sqrt(var + 1e-5)).reshape(b, c, h, w)


def _gnorm_ref(x):
    g = x.reshape(x.shape[0], 2, -1).astype(np.float64)
    mu = g.mean(-1, keepdims=True)
    return ((g - mu) / np.sqrt(((g - mu) ** 2).mean(-1, keepdims=True) + 1e-5)).reshape(x.shape)


def _rope(x, c, s):
    h = x.shape[-1] // 2
    return x * c + fg.concat([-x[..., h:], x[..., :h]], axis=-1) * s


def _swiglu(x):
    a, b = fg.split(x, 2, axis=-1)
    return a * fg.sigmoid(a) * b


#: (name, traced function, inputs, NumPy reference, traced per rank)
CASES = [
    ("x+y.T", lambda x, y: x + y.T, [_r(5, 7), _r(7, 5)], lambda x, y: x + y.T, False),
    # read transposed: run in square blocks (fusegen.rt.policy.choose_block, fg::blocks), sizes
    # not a multiple of the block, through a negative step and a strided slice
    ("x+y.T blocked", lambda x, y: x + y.T, [_r(70, 131), _r(131, 70)], lambda x, y: x + y.T, False),
    ("x+y.mT blocked", lambda x, y: x[:, ::-1] + fg.matrix_transpose(y[..., ::2, :]), [_r(2, 67, 65), _r(2, 130, 67)],
     lambda x, y: x[:, ::-1] + np.swapaxes(y[..., ::2, :], -1, -2), False),
    ("swiglu", _swiglu, [_r(4, 10)], lambda x: (lambda a, b: a / (1 + np.exp(-a)) * b)(*np.split(x, 2, -1)), False),
    ("heads", _heads, [_r(2, 3, 8)], lambda x: x.reshape(2, 3, 4, 2).transpose(0, 2, 1, 3) * 0.5, True),
    ("merge", _merge, [_r(2, 3, 4, 5)], lambda x: x.transpose(0, 2, 1, 3).reshape(2, 4, 15) + 1, True),
    ("causal softmax", _causal, [_r(2, 3, 6, 6)], _causal_ref, False),
    ("group norm", _gnorm, [_r(2, 4, 3, 3)], _gnorm_ref, True),
    ("pad stencil", lambda x: (lambda p: p[2:] + p[:-2] - 2 * p[1:-1])(fg.pad(x, 1)), [_r(9)],
     lambda x: (lambda p: p[2:] + p[:-2] - 2 * p[1:-1])(np.pad(x, 1)), False),
    ("pad 2d", lambda x: fg.pad(x, ((1, 2), (0, 3)), constant_values=7.0), [_r(3, 4)],
     lambda x: np.pad(x, ((1, 2), (0, 3)), constant_values=7), False),
    ("roll", lambda x: fg.roll(x, 2, axis=1), [_r(3, 5)], lambda x: np.roll(x, 2, 1), False),
    ("roll flat", lambda x: fg.roll(x, -3), [_r(3, 5)], lambda x: np.roll(x, -3), False),
    ("tile", lambda x: fg.tile(x, (2, 3)), [_r(3, 4)], lambda x: np.tile(x, (2, 3)), True),
    ("repeat", lambda x: fg.repeat(x, 3, axis=0), [_r(3, 4)], lambda x: np.repeat(x, 3, 0), True),
    ("repeat flat", lambda x: fg.repeat(x, 2), [_r(3, 4)], lambda x: np.repeat(x, 2), False),
    ("repeat each", lambda x: fg.repeat(x, (2, 0, 1, 3), axis=1), [_r(3, 4)],
     lambda x: np.repeat(x, (2, 0, 1, 3), 1), False),
    ("flip", lambda x: fg.flip(x, axis=(0, 2)), [_r(2, 3, 4)], lambda x: np.flip(x, (0, 2)), False),
    ("eye", lambda x: x + fg.eye(4, 5, k=1, dtype="float32"), [_r(4, 5)],
     lambda x: x + np.eye(4, 5, k=1, dtype=np.float32), False),
    ("tril", lambda x: fg.tril(x, k=-1), [_r(2, 4, 4)], lambda x: np.tril(x, -1), False),
    ("triu", lambda x: fg.triu(x), [_r(4, 6)], np.triu, False),
    ("arange", lambda x: x * fg.arange(x.shape[-1]), [_r(3, 5)], lambda x: x * np.arange(5), False),
    ("arange float", lambda x: x + fg.arange(0.5, 3.0, 0.5, dtype="float32"), [_r(5)],
     lambda x: x + np.arange(0.5, 3.0, 0.5, dtype=np.float32), False),
    ("stack", lambda x, y: fg.stack([x, y], axis=1), [_r(3, 4), _r(3, 4)], lambda x, y: np.stack([x, y], 1), False),
    ("unstack", lambda x: fg.unstack(x, axis=1)[1] * 2, [_r(3, 4)], lambda x: x[:, 1] * 2, True),
    ("concat3", lambda x, y, z: fg.concat([x, y, z], axis=0), [_r(2, 3), _r(1, 3), _r(4, 3)],
     lambda x, y, z: np.concatenate([x, y, z], 0), False),
    ("modular reshape", lambda x: x.T.reshape(3, 2) + 0, [_r(3, 2)], lambda x: x.T.reshape(3, 2), False),
    # an iota read through a reshape's div/mod map: its value is the unravelled address (it was
    # the linear index: tril's mask, arange and random counters were wrong after such a reshape)
    ("modular iota", lambda x: fg.reshape(fg.tril(x), (6, 4)) + fg.reshape(x + fg.arange(6.0), (6, 4)),
     [_r(4, 6)], lambda x: np.tril(x).reshape(6, 4) + (x + np.arange(6.0)).reshape(6, 4), False),
    ("modular iota sum", lambda x: fg.sum(fg.reshape(x + fg.arange(3.0), (3, 2)), axis=1), [_r(2, 3)],
     lambda x: (x + np.arange(3.0)).reshape(3, 2).sum(1), False),
    ("roll of tril", lambda x: fg.roll(fg.tril(x), 5), [_r(4, 6)], lambda x: np.roll(np.tril(x), 5), False),
    # an iota read before an operand whose map is modular: the stage still takes the modular path
    ("iota then modular", lambda x: fg.arange(6.0) + x.T.reshape(6), [_r(3, 2)],
     lambda x: np.arange(6.0) + x.T.reshape(6), False),
    # two reshapes group one loop dim as (3, 2) and (2, 3): the second reads through div/mod
    ("groupings not nesting", lambda x, y: x.T.reshape(6) + y.T.reshape(6) * 2, [_r(2, 3), _r(3, 2)],
     lambda x, y: x.T.reshape(6) + y.T.reshape(6) * 2, False),
    # a causal mask (an index-set split of the loop) beside an operand read through a div/mod map
    ("split beside modular", lambda x: fg.where(fg.arange(4)[:, None] >= fg.arange(6)[None, :], x.T.reshape(4, 6), 0.5),
     [_r(6, 4)], lambda x: np.where(np.tril(np.ones((4, 6), bool)), x.T.reshape(4, 6), 0.5), False),
    ("broadcast_to", lambda x: fg.broadcast_to(x, (3, 4)) * 1, [_r(4)], lambda x: np.broadcast_to(x, (3, 4)), False),
    ("expand/squeeze", lambda x: fg.squeeze(fg.expand_dims(x, axis=1), axis=1) + fg.expand_dims(x, axis=-1)[..., 0],
     [_r(3, 4)], lambda x: 2 * x, False),
    ("moveaxis", lambda x: fg.moveaxis(x, 0, -1) + 0, [_r(2, 3, 4)], lambda x: np.moveaxis(x, 0, -1), False),
    ("neg slices", lambda x: x[::-2, 1:-1] * 1, [_r(7, 5)], lambda x: x[::-2, 1:-1], False),
    ("int index", lambda x: x[1] + x[-1, ::2].sum(), [_r(3, 8)], lambda x: x[1] + x[-1, ::2].sum(), False),
    ("x/x.shape", lambda x: x / x.shape[-1], [_r(3, 4)], lambda x: x / 4, False),
    # a reduction's result with a dim's value (a mean by hand): an elementwise stage of its own
    # reads the result back (a stage's epilogue named the dim as an attribute: no such name)
    ("sum/x.shape", lambda x: fg.sum(x, axis=-1, keepdims=True) / x.shape[-1] + (fg.max(x, axis=0) - x.shape[0]),
     [_r(3, 4)], lambda x: x.sum(-1, keepdims=True) / 4 + (x.max(0) - 3), False),
    ("sum of slice", lambda x: fg.sum(x[:, 1:3], axis=1), [_r(4, 5)], lambda x: x[:, 1:3].sum(1), False),
    ("mean over T", lambda x: fg.mean(x.T, axis=0), [_r(4, 5)], lambda x: x.T.mean(0), False),
    ("zeros_like+full", lambda x: fg.zeros_like(x) + fg.full((3, 4), 2.0, dtype="float32") + x, [_r(3, 4)],
     lambda x: x + 2, False),
    ("linspace", lambda x: x + fg.linspace(0.0, 1.0, 5), [_r(5)], lambda x: x + np.linspace(0, 1, 5), False),
    ("meshgrid", lambda x: (lambda a, b: a * 10 + b)(*fg.meshgrid(fg.arange(3), fg.arange(4))) + x, [_r(4, 3)],
     lambda x: (lambda a, b: a * 10 + b)(*np.meshgrid(np.arange(3), np.arange(4))) + x, False),
    # a concat of concats (roll is one): each box reads one inner piece, the other inner concat
    # none (the emitted variant chooser returned FG_ERR_VARIANT there; test_layout_differential)
    ("nested concats", lambda x, y: fg.concat([fg.roll(x, 1, axis=-1), fg.concat([y[:, :2], y[:, 2:]], axis=1)]),
     [_r(3, 4), _r(2, 4)], lambda x, y: np.concatenate([np.roll(x, 1, axis=-1), y]), False),
    ("rope", _rope, [_r(2, 3, 4, 8), _r(4, 8), _r(4, 8)],
     lambda x, c, s: x * c + np.concatenate([-x[..., 4:], x[..., :4]], -1) * s, False),
]


def _batched(cases, name: str):
    """One op computing every case: inputs a0, a1, ... (each case's in turn), one output per case."""
    counts = [len(args) for _, _, args, _, _ in cases]
    params = [f"a{i}" for i in range(sum(counts))]
    ns = {"fns": [fn for _, fn, _, _, _ in cases]}
    calls, j = [], 0
    for k, n in enumerate(counts):
        calls.append(f"fns[{k}]({', '.join(params[j:j + n])})")
        j += n
    exec(f"def {name}({', '.join(params)}):\n    return ({', '.join(calls)},)\n", ns)
    return fg.op(ns[name])


#: The default run's share of the table (the whole table is slow: ``-m slow``).
QUICK = {"x+y.T", "x+y.T blocked", "x+y.mT blocked", "rope", "causal softmax", "pad 2d", "modular reshape", "int index",
         "modular iota", "iota then modular", "x/x.shape", "sum/x.shape", "stack", "repeat each", "nested concats",
         "heads", "group norm"}


def _table(quick: bool, per_rank: bool) -> list:
    return [c for c in CASES if c[4] == per_rank and (not quick or c[0] in QUICK)]


_OPS: dict = {}


def _op(quick: bool, per_rank: bool):
    key = (quick, per_rank)
    if key not in _OPS:
        _OPS[key] = _batched(_table(quick, per_rank), f"layout_{'quick' if quick else 'all'}_{int(per_rank)}")
    return _OPS[key]


def _check(cases, results):
    assert len(results) == len(cases)
    for (name, _, args, ref, _), got in zip(cases, results):
        want = ref(*[a.astype(np.float64) for a in args])
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5, err_msg=name)


def _inputs(cases):
    return [a for _, _, args, _, _ in cases for a in args]


def _run(backend: str, quick: bool, per_rank: bool) -> None:
    cases, op = _table(quick, per_rank), _op(quick, per_rank)
    if backend == "xla":
        pytest.importorskip("jax", reason='needs jax: pip install -e ".[jax]"')
        import fusegen.jax as fgj
        # partition=False: fusegen.plan.dimflow has no rules for layout ops yet
        import jax
        f = fgj.function(op, dtypes="float32", partition=False)
        # the full table has float64 outputs (arange's default dtype), which JAX carries only
        # with x64 enabled: enabled for this call alone
        with jax.enable_x64(True):
            _check(cases, f(*_inputs(cases)))
        return
    else:
        f = fg.compile(op, backend=backend, **(dict(dtypes="float32") if backend == "aot" else {}))
    _check(cases, f(*_inputs(cases)))


@pytest.mark.parametrize("quick", [True, pytest.param(False, marks=pytest.mark.slow)], ids=["quick", "all"])
@pytest.mark.parametrize("backend", ["numba", "aot", "xla"])
@pytest.mark.parametrize("per_rank", [False, True], ids=["generic", "per_rank"])
def test_layout_cases_against_numpy(backend, per_rank, quick):
    _run(backend, quick, per_rank)


# --- the emitted source ----------------------------------------------------------------------
def test_emitted_layout_source_reads_through_views():
    src = fg.emit(fg.op(lambda x, y: x + y.T, name="x_plus_yt"), dtypes="float32").source
    assert "fg::permute_rule(" in src                      # the shape rule of .T
    assert re.search(r"fg::views::permute\(&v\[1\], s\.prm\[\d+\]\.v", src)  # y read through it
    assert "FG_ERR_VIEW_PARAM" in src and "case 64:" in src  # the view errors are in the table
    assert "X.K = fg::blocks<kOps0>(X.B);" in src   # its tasks (planned once per shape): blocks where y is read transposed
    # no test per element: no reshape can make a map modular here, so y is read at its strided
    # address (emitters/layout.may_be_modular), a unit-stride chunk at a time (fg::chunk_view);
    # where one can, the loops are compiled twice and the call without a modular operand takes
    # the copy without the test (units<i>(..., false_type))
    assert "fg::at(" not in src and "fg::chunk_view(p1 + c[1] + j0 * B.istr[1], B.istr[1], nc, pk1, &pf1)" in src
    src = fg.emit(fg.op(lambda x: x.reshape((-1,)) + 1.0, name="flat_plus"), dtypes="float32").source
    assert "std::false_type{}, s, ptr, a, lo, hi" in src and "fg::at(p0, modular && mod0," in src
    # a concat's pieces: one body per piece, chosen per box
    src = fg.emit(_op(True, False), dtypes="float32").source
    assert "// %" in src and "piece 1" in src
    assert "fg::views::place(" in src and "fg::views::pad_piece(" in src
    # the causal softmax's mask splits its loops (the max and sum stages; the output stage reads
    # the exp the sum stored: plan.shared), each into three intervals, the masked one without a
    # read of x; the reductions' intervals keep lane accumulators over unit-stride chunks
    assert src.count("fg::true_range(") == 2 and "for (int64_t j0 = sp.lo; j0 < sp.hi; j0 += fg::kChunk)" in src


def _units(src: str, i: int) -> str:
    """The text of stage ``i``'s units function in an emitted layout-path source."""
    return src.split(f"void units{i}(")[1].split(f"int stage{i}(")[0]


def test_emitted_layout_fast_paths():
    """The emitted C++ layout path's mechanisms, in its text (no compiler): an expensive value
    stored once and read back, a mean and its centered variance in one pass inside a row group,
    a concat's boxes a row at a time, inner loops over unit-stride chunks."""
    from fusegen import examples
    src = fg.emit(examples.causal_softmax, dtypes="float32").source
    assert "fg::exp_f32(" in _units(src, 1) and "fg::exp_f32(" not in _units(src, 2)   # stage 2 reads it back
    assert re.search(r"w\d+\[ii\] = float\(t\d+\);", _units(src, 1))                 # stage 1 stores it
    src = fg.emit(examples.group_norm, dtypes="float32").source
    assert "pair0(R0, R1, s, ptr, a, lo * per, hi * per);" in src and "acc1[l] += d * d;" in src
    src = fg.emit(examples.rope, dtypes="float32").source
    assert "fg::row_boxes<kOps0>(R->nest, R->any_modular, 64, variant0, &R->RB)" in src   # (planned per shape)
    # (the loop over a chunk reads and writes it at unit stride: no stride in its body)
    assert "B.istr" not in _units(src, 0).split("for (int64_t ii")[1].split("fg::scatter")[0]
    # whole-row tasks run as one stretch of rows whose offsets step (no division per row)
    assert "fg::next_row<kOps0>(B.n_o, B.o_ext, B.o_str, ix, c)" in _units(src, 0)
    assert "fg::unravel<kOps0>(o," not in _units(src, 0)
    # a row's boxes in turn (RoPE's two halves of a row of x while it is in L1, its output row
    # written in order), each box's offsets kept by the driver, units inlined there
    assert "if (RB.one) {" in src and "s, ptr, a, r, r + 1, &gf, cur[b]);  // (inlined)" in src
    assert "FG_INLINE void units0(" in src


@fg.op
def _across(x, y, z):
    """Three transposed reads: a contiguous one (the tile path), one with a step along its rows
    (so == 2: the element path) and one of a batch (a 3-d permutation)."""
    return x + y.T * 2 + z[:, ::2].T - fg.permute_dims(fg.broadcast_to(y[None], (2, y.shape[0], y.shape[1])), (0, 2, 1))


@pytest.mark.extended   # (a g++ build of its own: the default run keeps its 5 minutes)
def test_emitted_transposed_reads_run_as_block_transposes(tmp_path):
    """An operand read across the rows (`x + y.T`) is read once per 64 x 64 block along its rows
    and transposed in registers (fg::transpose_block: W x W tiles of vector shuffles) into a
    buffer the chunk loop reads at unit stride, not gathered element by element with a large
    stride (fg::chunk_view). Pinned in the text and in g++'s machine code; the values at the
    blocks' and tiles' edges, other lane widths and a strided source are NumPy's, bit for bit."""
    from fusegen import examples
    src = fg.emit(examples.transpose_add, dtypes="float32").source
    unit = _units(src, 0)
    assert "if (tb1) fg::transpose_block(p1 + c[1] + i0 * B.istr[1], B.o_str[1][B.n_o - 1], B.istr[1]" in unit
    assert "const float *v1 = tb1 ? bk1 + (o - o0) * fg::kBlockCols + (j0 - i0) : fg::chunk_view(" in unit
    assert "const float *v0 = fg::chunk_view(" in unit   # (x: never read across the rows, no block buffer)
    assert "tile_transpose(p + i * si + r, si, buf + r * kBlockCols + i, kBlockCols)" in src
    # only reads through a permutation get a block buffer: RoPE's stages have none
    assert "bk0" not in _units(fg.emit(examples.rope, dtypes="float32").source, 0)
    gxx, objdump = shutil.which("g++"), shutil.which("objdump")
    if gxx and objdump:   # the tile transpose is shuffles: no scalar gather of y in units0
        files = fg.emit(examples.transpose_add, abi="mindspore-aot", device="cpu", dtypes="float32")
        files.write(tmp_path)
        obj = tmp_path / "k.o"
        subprocess.run([gxx, "-std=c++17", "-O3", "-march=x86-64-v3", "-fopenmp", "-fPIC", "-c", "-I", str(tmp_path),
                        str(tmp_path / files.main), "-o", str(obj)], check=True, capture_output=True, timeout=600)
        dis = subprocess.run([objdump, "-d", "--no-show-raw-insn", "-C", str(obj)], capture_output=True, text=True,
                             check=True).stdout
        code = "".join(re.findall(r"<[^\n]*(?:transpose_block<float>|k_float32\w*::units0)[^\n]*>:\n(.*?)(?:\n\n|\Z)",
                                  dis, re.S))
        assert len(re.findall(r"\bv(?:perm\w*|shuf\w*|unpck\w*|perm2f128|insertf128)\b", code)) >= 12, \
            "the 8 x 8 tile transpose is no longer built from vector shuffles"
    rng = np.random.default_rng(5)
    for n, m in [(1, 1), (5, 3), (64, 64), (65, 130), (130, 71), (8, 200)]:
        for dt in ("float32", "float64", "int16"):
            x = rng.integers(-50, 50, (n, m)).astype(dt)
            y = rng.integers(-50, 50, (m, n)).astype(dt)
            z = rng.integers(-50, 50, (m, 2 * n)).astype(dt)
            want = x + y.T * 2 + z[:, ::2].T - np.broadcast_to(y[None], (2, m, n)).transpose(0, 2, 1)
            got = fg.compile(_across, backend="aot", dtypes=dt)(x, y, z)
            np.testing.assert_array_equal(got, want, err_msg=f"{dt} {(n, m)}")


@pytest.mark.extended   # (a g++ build of its own: the default run keeps its 5 minutes)
def test_emitted_head_split_reads_in_its_source_order_and_streams_its_stores():
    """A large elementwise stage whose read continues its rows along another outer dim than the
    last (a head split: x's h steps one row of d) runs that dim innermost (fg::stream_order), so
    x streams whole rows, and its stores go around the cache (fg::stream_out, non-temporal; in
    the output's order x was read a row of d per page and the stage ran 1.7x the read order's
    CPU time). Pinned in the text; the values (above fg::kStreamMin elements), with rows that are
    not whole cache lines and 2- and 8-byte elements, are NumPy's, bit for bit."""
    from fusegen import examples
    src = fg.emit(examples.heads_split, dtypes="float32").source
    stage = src[src.index("int stage0("):]
    # (its loops planned once per shape, in prep0; the stage runs them)
    assert "fg::stream_order<kOps0>(kStoredOps, &X.B);" in src and "if (B.stream) fg::stream_fence();" in stage
    unit = _units(src, 0)
    assert "float *w1 = fg::out_view(q1 + c[1] + j0 * B.istr[1], B.stream ? 0 : B.istr[1], wk1);" in unit
    assert "fg::stream_out(q1 + c[1] + j0, nc, wk1);" in unit
    assert "_mm_sfence()" in src and "kStreamMin = int64_t(1) << 21" in src
    rng = np.random.default_rng(6)
    for dt, (b, s, h, d) in [("float32", (2, 1030, 16, 128)), ("float32", (1, 700, 20, 150)),
                             ("float64", (1, 4000, 8, 72)), ("float16", (3, 2000, 4, 200))]:
        x = rng.integers(-50, 50, (b, s, h * d)).astype(dt)
        want = np.ascontiguousarray(x.reshape(b, s, h, d).transpose(0, 2, 1, 3)) * np.asarray(2, dt)
        got = fg.compile(examples.heads_split, backend="aot", dtypes=dt)(x, heads=h, scale=2)
        np.testing.assert_array_equal(got, want, err_msg=f"{dt} {(b, s, h, d)}")



def test_numba_head_split_reads_in_its_source_order_and_streams_its_stores():
    """The Numba backend's twin of the test above (rt.policy.stream_order, lower/cpu_stream): the
    head split's outer dims are reordered so x streams whole rows, each task's row is computed
    into a buffer and written with non-temporal stores (_fg_stream), blocks of tasks end with a
    fence. Pinned in the text; the values (above STREAM_MIN elements), with rows that are not
    whole cache lines, 1-, 2- and 8-byte elements and out=, are NumPy's bit for bit; an
    elementwise op already read in order, a small one and a broadcast read keep cached stores."""
    from fusegen import dtypes, examples
    from fusegen.ir import infer
    from fusegen.plan import build_plan, schedule
    from fusegen.rt.policy import stream_order
    rng = np.random.default_rng(8)
    k = _numba_head_splits([("float32", (2, 1030, 16, 128)), ("float32", (1, 700, 20, 150))])
    src = k.source
    assert "sb_out0 = np.empty(TILE, dtype=out0_.dtype)" in src and "_fg_stream(out0_, c_out0 + 0, sb_out0, n)" in src
    assert src.index("_fg_stream(") < src.index("_fg_fence()") < src.index("return 0")

    @fg.op
    def swap_bool(x):   # a permuted copy of 1-byte elements, d = 24: rows of 24 bytes
        return fg.permute_dims(x.reshape(x.shape[0], x.shape[1], 4, 24), (0, 2, 1, 3))
    x = rng.random((4, 6000, 96)) < 0.5
    np.testing.assert_array_equal(fg.compile(swap_bool, backend="numba")(x), x.reshape(4, 6000, 4, 24).transpose(0, 2, 1, 3))

    def decided(op, *shapes, **attrs):
        plan = build_plan(op)
        spec = infer(op, [dtypes.float32] * len(shapes), list(shapes), attrs)
        return [stream_order(plan, run) is not None for run in schedule(plan, spec, regroup=True, rows=True)]
    assert decided(examples.heads_split, (2, 1024, 2048), heads=16, scale=1.0) == [True]
    assert decided(examples.heads_split, (2, 16, 2048), heads=16, scale=1.0) == [False]   # below STREAM_MIN
    assert decided(examples.add_mul_div, (2048, 2048), (2048, 2048)) == [False]   # already in order
    assert decided(_bcast_add_t, (2048, 2048), (2048,)) == [False]


def _numba_head_splits(cases):
    from fusegen import examples
    from fusegen.rt.policy import STREAM_MIN
    rng = np.random.default_rng(7)
    k = fg.compile(examples.heads_split, backend="numba")
    for dt, (b, s, h, d) in cases:
        x = rng.integers(-50, 50, (b, s, h * d)).astype(dt)
        assert x.size >= STREAM_MIN
        want = np.ascontiguousarray(x.reshape(b, s, h, d).transpose(0, 2, 1, 3)) * np.asarray(2, dt)
        np.testing.assert_array_equal(k(x, heads=h, scale=2), want, err_msg=f"{dt} {(b, s, h, d)}")
        out = np.full_like(want, 7)
        assert k(x, heads=h, scale=2, out=out) is out
        np.testing.assert_array_equal(out, want, err_msg=f"out= {dt} {(b, s, h, d)}")
    return k


@pytest.mark.extended
def test_numba_head_split_streams_every_width():
    """test_numba_head_split_reads_in_its_source_order_and_streams_its_stores with 8- and 2-byte
    elements (float16 is computed in float32 and streamed as such)."""
    _numba_head_splits([("float64", (1, 4000, 8, 72)), ("float16", (3, 2000, 4, 200))])


def test_emitted_broadcast_chunks_are_filled_once_per_value():
    """A read broadcast along the inner loop (group norm's gamma and beta: one value per row of
    H * W) fills its chunk buffer only where its value changes (fg::chunk_view's `filled`, compared
    bit for bit), not for every chunk. Pinned in the text; rows longer than a chunk, equal and
    different neighbours, NaN, -0.0 beside 0.0, and a column read through a slice give NumPy's
    values bit for bit."""
    from fusegen import examples
    unit = _units(fg.emit(examples.group_norm, dtypes="float32").source, 2)
    assert "int64_t pf1 = 0;" in unit and "fg::chunk_view(p1 + c[1] + j0 * B.istr[1], B.istr[1], nc, pk1, &pf1)" in unit
    x = np.arange(8 * 1300, dtype=np.float32).reshape(8, 1300)
    y = np.array([1, 1, 2, np.nan, np.nan, -0.0, 0.0, 2], np.float32)
    z = np.array([[3, 4], [3, 4], [5, 6], [5, 6], [5, 6], [7, 8], [7, 8], [9, 9]], np.float32)
    got = fg.compile(_bcast, backend="aot")(x, y, z)
    want = x * y[:, None] + z[:, 1:][:, :1]
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))


@fg.op
def _bcast(x, y, z):
    return x * y[:, None] + z[:, 1:]


def test_emit_of_a_rank_specializing_op():
    with pytest.raises(fg.TraceError, match=r"ranks=.*|traced per input rank"):
        fg.emit(_op(True, True), dtypes="float32")
    ranks = [a.ndim for a in _inputs(_table(True, True))]
    src = fg.emit(_op(True, True), dtypes="float32", ranks=ranks).source
    assert f"in[0].rank != {ranks[0]}) return fg::FG_ERR_RANK" in src
    with pytest.raises(ValueError):
        fg.emit(_op(True, True), ranks=ranks[:1])


def test_aot_layout_errors():
    k = fg.compile(fg.op(lambda x: x[3] * 1, name="int_index_oob"), backend="aot", dtypes="float32")
    np.testing.assert_array_equal(k(np.arange(8, dtype=np.float32).reshape(4, 2)), [6, 7])
    with pytest.raises(fg.BoundsError):
        k(np.zeros((3, 2), np.float32))
    r = fg.compile(fg.op(lambda x: x.reshape(2, -1) * 1, name="reshape_bad"), backend="aot", dtypes="float32")
    with pytest.raises(fg.ShapeError):
        r(np.zeros(5, np.float32))



@pytest.mark.extended   # (g++ builds of its own: the default run keeps its 5 minutes)
def test_emitted_layout_errors_say_which_rule_and_why(tmp_path):
    """FG_ERR_LAYOUT covers several rules; the emitted NameErrorString says which failed and why,
    as the Python rules do (it was one text for all: "a permutation, axis, concat shape, ...")."""
    @fg.op
    def laid_out(x, y, i):
        return fg.concat([x, y], axis=0), fg.take_along_axis(x, i, axis=-1), fg.permute_dims(x, (1, 0)) * 2
    fg.emit(laid_out, dtypes=["float32,float32,int64"]).write(tmp_path)
    k = fg.AotKernel(f"{tmp_path / 'laid_out.cc'}:LaidOut")
    x, i = np.ones((2, 3), np.float32), np.zeros((2, 1), np.int64)
    assert [a.shape for a in k(x, x, i)] == [(4, 3), (2, 1), (3, 2)]
    for args, why in [((x, np.ones((2, 4), np.float32), i), "concat: the arrays' shapes differ off the concatenation axis"),
                      ((x, x, np.zeros(2, np.int64)), "take_along_axis: the indices' rank differs from the source's"),
                      ((x[..., None], x[..., None], i[..., None]), "permute_dims: the permutation's length differs")]:
        with pytest.raises(fg.KernelError, match=re.escape(f"laid_out: FG_ERR_LAYOUT: {why}")):
            k(*args)

def _infer_shape(compiled, shapes) -> list[tuple]:
    """The emitted NameInferShape on ``shapes`` (-1: unknown dim, (-2,): unknown rank)."""
    k = compiled.executor.kernel_for(())
    shim = k._loaded.shim
    extra = shim.fg_extra_new()
    k._loaded.extras.append(extra)  # destroyed with the kernel
    host.set_attrs(shim, extra, {})
    return k._call_infer_shape([tuple(s) for s in shapes], extra)


def _twin(x, y):
    h = x.shape[-1] // 2
    return (x[1:, ::-2] + y.T[:, :1], fg.concat([x, x[:1]], axis=0), fg.pad(x, ((1, 2), (0, 1))),
            x.T.reshape(-1), fg.flip(x, axis=0)[..., :h], fg.stack([x, x], axis=-1), fg.moveaxis(y, 0, 1)[None],
            fg.expand_dims(x, axis=0)[0, :, -1], fg.broadcast_to(y[:, :1], (3, y.shape[0], 2)),
            fg.arange(x.shape[0]) * 1, fg.reshape(x, (y.shape[1], -1)), fg.squeeze(y[:1], axis=0))


TWIN = fg.op(_twin, name="infer_twin")


@pytest.mark.parametrize("shapes", [[(6, 4), (4, 2)], [(3, 8), (2, 4)], [(5, 2), (2, 1)]])
def test_emitted_infer_shape_matches_infer(shapes):
    """NameInferShape of the emitted library against fusegen.infer, with unknown dims and ranks."""
    k = fg.compile(TWIN, backend="aot", dtypes="float32")
    for variant in dynamic_variants(shapes):
        try:
            spec = fg.infer(TWIN, ["float32"] * 2, [None if s == (-2,) else s for s in variant], {})
        except fg.FusegenError:
            with pytest.raises(fg.KernelError):
                _infer_shape(k, variant)
            continue
        want = [(-2,) if s is None else tuple(s) for s in spec.out_shapes]
        assert _infer_shape(k, variant) == want, variant


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit)")
@pytest.mark.parametrize("abi", ["mindspore-aot", pytest.param("xla-ffi", marks=pytest.mark.slow)])
def test_emitted_layout_cu_compiles_with_nvcc(abi, tmp_path):
    """The .cu of views, pieces, an iota mask, a modular reshape under a reduction and a dim as a
    value (the device code cannot run here: no GPU; the simulator runs the C++ twin)."""
    op = fg.op(lambda x, y: (x + y.T, fg.concat([-x[..., 2:], x[..., :2]], axis=-1),
                             fg.where(fg.arange(4)[None, :] <= fg.arange(5)[:, None], x, 0.0),
                             fg.sum(x.T.reshape(2, -1), axis=1), fg.pad(x, 1) * x.shape[-1],
                             fg.max(x, axis=0) - x.shape[0]), name="layout_cu")
    e = fg.emit(op, abi=abi, device="cuda", dtypes="float32")
    e.write(tmp_path)
    assert "<<<unsigned(blocks), kBlock, 0, stream>>>" in e.source and "fg::views::refine<" in e.source
    cmd = ["nvcc", "-std=c++17", "--shared", "-Xcompiler", "-fPIC", "-O1", "--expt-relaxed-constexpr",
           "-gencode", "arch=compute_80,code=sm_80", f"-I{tmp_path}", "-o", str(tmp_path / "k.so"), str(tmp_path / e.main)]
    if abi == "xla-ffi":
        jax = pytest.importorskip("jax", reason='needs jax: pip install -e ".[jax]"')
        cmd[1:1] = ["-isystem", jax.ffi.include_dir()]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # warning-free as the C++ is (a runtime constant this kernel does not use was nvcc's #177)
    ours = [ln for ln in proc.stderr.splitlines() if e.main in ln and "warning" in ln]
    assert not ours, "\n".join(ours[:10])


# --- row groups: fused stages of the emitted layout path -------------------------------------
@fg.op
def masked_rows(x):
    """A causal-masked softmax (max, sum and output stages: one row group, its loops split at the
    mask) and a row result read transposed (a stage that must not join the group: the row it
    reads is another task's)."""
    z = fg.where(fg.arange(x.shape[-2])[:, None] >= fg.arange(x.shape[-1])[None, :], x, -np.inf)
    m = fg.max(z, axis=-1, keepdims=True)
    e = fg.exp(z - m)
    return e / fg.sum(e, axis=-1, keepdims=True), x - fg.permute_dims(m[0], (1, 0))


def test_row_groups_fuse_only_aligned_stages():
    rng = np.random.default_rng(3)
    k = fg.compile(masked_rows, backend="aot")
    for shape in [(1, 7, 7), (2, 300, 300)]:   # serial, then parallel with several rows per task
        x = rng.standard_normal(shape).astype(np.float32)
        z = np.where(np.tril(np.ones(shape[1:], bool)), x, -np.inf)
        m = z.max(-1, keepdims=True)
        e = np.exp(z - m)
        got = k(x)
        np.testing.assert_allclose(got[0], e / e.sum(-1, keepdims=True), rtol=2e-6, atol=1e-7)
        np.testing.assert_allclose(got[1], x - m[0].T, rtol=1e-6)


@pytest.mark.extended
@pytest.mark.parametrize("name", ["causal_softmax", "group_norm"])
def test_reference_row_groups_emitted(name):
    """The reference ops whose stages run as row groups in the emitted C++, against NumPy."""
    from test_layout_ops import REFERENCE
    op, ref, shapes, attrs = next(r for r in REFERENCE if r[0].name == name)
    rng = np.random.default_rng(0)
    big = {"causal_softmax": [(2, 3, 70, 70)], "group_norm": [(3, 8, 20, 20), (8,), (8,)]}[name]
    for sh in (shapes, big):
        if name == "causal_softmax":
            ref = lambda x: (lambda z: np.exp(z - z.max(-1, keepdims=True)) / np.exp(
                z - z.max(-1, keepdims=True)).sum(-1, keepdims=True))(np.where(np.tril(np.ones(x.shape[-2:], bool)), x, -np.inf))
        xs = [rng.standard_normal(s).astype(np.float32) for s in sh]
        got = fg.compile(op, backend="aot")(*xs, **attrs)
        np.testing.assert_allclose(got, ref(*[a.astype(np.float64) for a in xs], **attrs), rtol=2e-5, atol=2e-6)


@fg.op
def stacks_of_a_padded_scan(x):
    s = fg.stack([fg.cumulative_sum(x, include_initial=True)] * 3, axis=1)
    return fg.stack([s[None]] * 2, axis=-2)


def test_too_many_piece_combinations_are_a_clear_error():
    # Each stack is a concat, the include_initial scan a pad: a box's stage body per combination
    # is 1152 bodies; the emitter raised a bare NotImplementedError (test_layout_differential on XLA)
    with pytest.raises(fg.UnsupportedError, match=r"op stacks_of_a_padded_scan: stage \d+ has \d+ combinations of "
                                                  r"concat/pad/stack pieces; .* support 64: use the Numba backend"):
        fg.emit(stacks_of_a_padded_scan, dtypes=["float32"], ranks=[1])


@fg.op
def _bcast_add_t(x, y):
    """x's transpose plus a row broadcast along it: no read continues its rows along an outer dim."""
    return x.T + y
