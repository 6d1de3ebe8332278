"""Random numbers in the emitted CPU C++ (MindSpore ``.cc``, XLA CPU handlers) four elements per
Philox call (fusegen/emitters/rng.py ``loop_counters``, ``fg::fill_*`` of _philox.inc.j2): an op
whose only layout nodes are its random counters keeps the fast loop nests, each counter a
virtual operand, and each stage fills a chunk's values before its loop. Bit for bit against
``fg.random.reference`` (normal within 2 ulp): every kind, shapes that are not a multiple of 4,
several chunks and tiles (and threads), a row reduction and a column one, a broadcast counter
(stride 0), a tensor seed and p, offsets and seeds up to 2^64 - 1, rank 0 and size 0. One op with
many outputs, so one library."""
from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

import fusegen as fg
import fusegen.examples as ex
from _optional import needs_gxx, needs_jax
from test_random_ops import case_inputs
from fusegen.native import build

R = fg.random.reference
U64 = 1 << 64


@fg.op
def filled(x, pt, st, *, seed: int = 0, offset: int = 0, p: float = 0.5):
    a, b = x.shape[0], x.shape[1]
    u = fg.random.uniform(seed, (a, b), offset=offset)
    return (
        u + x,                                                                    # 0
        fg.random.uniform(seed, (a, b), offset=offset, dtype="float64"),          # 1
        fg.random.normal(seed, (a, b), offset=offset),                            # 2
        fg.random.normal(seed, (a, b), offset=offset, dtype="float64"),           # 3
        fg.random.bernoulli(seed, p, (a, b), offset=offset),                      # 4 attribute p
        fg.random.bernoulli(seed, pt, (a, b), offset=offset),                     # 5 tensor p, broadcast
        fg.random.randint(seed, -3, 11, (a, b), offset=offset, dtype="int8"),     # 6
        fg.random.randint(seed, 0, U64 - 1, (a, b), offset=offset, dtype="uint64"),  # 7 wide: 64-bit draws
        x * fg.random.uniform(st, (a, b)),                                        # 8 seed: a scalar tensor
        fg.sum(u, axis=1),                                                        # 9 row mode
        fg.sum(u, axis=0),                                                        # 10 column mode
        x + fg.random.uniform(seed, (b,), offset=offset + 1),                     # 11 counter broadcast
        fg.random.normal(seed, (), offset=offset),                                # 12 rank 0
    )


def expected(shape, seed, offset, p, pt, st):
    kw = dict(offset=offset)
    u = R("uniform", seed, shape, **kw)
    return [u + np.float32(1), R("uniform", seed, shape, dtype="float64", **kw), R("normal", seed, shape, **kw),
            R("normal", seed, shape, dtype="float64", **kw), R("bernoulli", seed, shape, p=np.float32(p), **kw),
            R("bernoulli", seed, shape, p=np.broadcast_to(pt, shape), **kw),
            R("randint", seed, shape, low=-3, high=11, dtype="int8", **kw),
            R("randint", seed, shape, low=0, high=U64 - 1, dtype="uint64", **kw),
            R("uniform", int(st), shape), u.astype(np.float64).sum(axis=1), u.astype(np.float64).sum(axis=0),
            np.float32(1) + np.broadcast_to(R("uniform", seed, (shape[1],), offset=(offset + 1) % U64), shape),
            R("normal", seed, (), **kw)]


def ulps(a, b) -> np.ndarray:
    it = np.int32 if a.dtype == np.float32 else np.int64
    return np.abs(a.view(it).astype(np.int64) - b.view(it).astype(np.int64))


# (37, 1301) and (1301, 37): several 512-element chunks per row and several tiles, above the
# parallel threshold (blocks straddle chunk, tile and row ends); the rest are small odd shapes.
CASES = [((3, 5), 0, 0, 0.5), ((1, 7), 123456789, 5, 0.25), ((4, 33), U64 - 1, U64 - 2, 0.9),
         ((0, 3), 1, 0, 0.5), ((37, 1301), 99, 7, 0.1), ((1301, 37), 5, 2**40 + 3, 0.6)]


def run_cases(kernel, what: str, cases=CASES) -> None:
    for shape, seed, offset, p in cases:
        x, pt, st, attrs = case_inputs(shape, seed, offset, p)
        got = kernel(x, pt, st, **attrs)
        for k, (g, w) in enumerate(zip(got, expected(shape, seed, offset, p, pt, st))):
            g = np.asarray(g)
            w = w.astype(np.float32) if k in (9, 10) else w
            where = f"{what} {shape} seed={seed} offset={offset}: output {k}"
            assert g.shape == w.shape and g.dtype == w.dtype, (where, g.shape, w.shape, g.dtype, w.dtype)
            if k in (2, 3, 12):
                assert g.size == 0 or ulps(g, w).max() <= 2, where
            elif k in (9, 10):
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=where)
            else:
                bad = np.flatnonzero(g != w)
                assert bad.size == 0, f"{where} differs at {bad[:5]}"


DTYPES = [("float32", "float32", "uint64")]


def test_cpu_sources_fill_four_per_philox_call_and_the_cu_stays_per_element():
    stage_calls = {}
    for abi, dev in (("mindspore-aot", "cpu"), ("xla-ffi", "cpu"), ("mindspore-aot", "cuda")):
        src = fg.emit(filled, abi, dev, dtypes=DTYPES).source
        body = src[src.index("namespace k_"):]   # the stage code (the partial defines every form)
        stage_calls[(abi, dev)] = {a or b for a, b in re.findall(r"fg::(fill_\w+)\b|fg::(\w+_at)\(", body)}
    fills = {"fill_uniform_f32", "fill_uniform_f64", "fill_normal_f32", "fill_normal_f64", "fill_words", "fill_randint"}
    assert stage_calls[("mindspore-aot", "cpu")] == stage_calls[("xla-ffi", "cpu")] == fills
    assert not stage_calls[("mindspore-aot", "cuda")] & fills
    # each counter (shapes (a, b), (b,) and ()) is a virtual operand of the fast nests; bernoulli
    # compares its words per element
    src = fg.emit(filled, "mindspore-aot", "cpu", dtypes=DTYPES).source
    assert "constexpr int kLoopOperands = kOperands + 3;" in src and "kStageInfo" in src
    assert re.search(r"fg::bernoulli_p\(vr\d+, double\(float\(double\(a\.p\)\)\)\)", src)
    # row mode: the rest of the row at once, kept for the group's later stages
    assert re.search(r"fg::shared_fill\((rc\d+), pkr\d+, m, r_hi - r0, c\[\d+\] \+ r0 \* L\.ri_str\[\d+\], "
                     r"L\.ri_str\[\d+\], fg::fill_uniform_f32, uint64_t\(int64_t\(int64_t\(a\.seed\)\)\), "
                     r"uint64_t\(int64_t\(int64_t\(a\.offset\)\)\)\)", src)
    assert re.search(r"thread_local fg::FillCache<float> rc\d+;", src)
    # the reference op too (a view of a random tensor keeps the layout path, per element:
    # tests/test_random_ops.py, ``small``)
    src = fg.emit(ex.dropout_add_layer_norm, "mindspore-aot", "cpu", dtypes="float32", ranks=[2, 2, 1, 1]).source
    assert "fg::fill_uniform_f32, " in src and "uniform_f32_at(uint64_t(" not in src[src.index("namespace k_"):]


@fg.op
def filled_few(x, pt, st, *, seed: int = 0, offset: int = 0, p: float = 0.5):
    """``filled``'s outputs 0, 5, 8 and 9 (a library a quarter the size, for the default run)."""
    a, b = x.shape[0], x.shape[1]
    u = fg.random.uniform(seed, (a, b), offset=offset)
    return u + x, fg.random.bernoulli(seed, pt, (a, b), offset=offset), x * fg.random.uniform(st, (a, b)), \
        fg.sum(u, axis=1)


@pytest.mark.extended   # (one g++ build, ~10 CPU-s: over the default run's budget)
@needs_gxx
def test_aot_cpu_fills_equal_the_reference_in_brief():
    k = fg.compile(filled_few, backend="aot", dtypes=DTYPES)
    few = [0, 5, 8, 9]
    for shape, seed, offset, p in CASES:
        x = np.ones(shape, np.float32)
        pt = np.linspace(0, 1, shape[1], dtype=np.float32)
        st = np.array(seed ^ 0x5555, np.uint64)
        got = k(x, pt, st, seed=seed - U64 if seed >= 1 << 63 else seed, offset=offset - U64 if offset >= 1 << 63 else offset)
        want = expected(shape, seed, offset, p, pt, st)
        for g, j in zip(got[:3], few):
            assert np.array_equal(g, want[j]), (shape, j)
        np.testing.assert_allclose(got[3], want[9].astype(np.float32), rtol=1e-5, atol=1e-5)


@pytest.mark.extended
@needs_gxx
def test_aot_cpu_fills_equal_the_reference():
    run_cases(fg.compile(filled, backend="aot", dtypes=DTYPES), "aot-cpu")


@pytest.mark.extended
@needs_jax
def test_xla_cpu_handler_fills_equal_the_reference():
    import jax
    import fusegen.jax as fgj
    f = fgj.function(filled, dtypes=[DTYPES[0]])
    enable_x64 = getattr(jax, "enable_x64", None)
    if enable_x64 is None:  # older jax: the experimental spelling
        from jax.experimental import enable_x64
    with enable_x64(True):   # uint64 and float64 operands
        run_cases(f, "xla-cpu", CASES[:3] + CASES[4:5])


@pytest.mark.slow
@needs_gxx
def test_emitted_fill_loops_vectorize(tmp_path):
    """g++ -O3 -march=native reports the fills' block loops vectorized in the emitted .cc
    (issue #18: RNG must not make dropout compute-bound)."""
    e = fg.emit(ex.dropout_add_layer_norm, "mindspore-aot", "cpu", dtypes="float32", ranks=[2, 2, 1, 1])
    e.write(tmp_path)
    flags = [f for f in build.default_cpp_flags() if f not in ("-shared", "-fPIC")]
    proc = subprocess.run(["g++", *flags, "-fopt-info-vec-optimized", "-c", "-o", "/dev/null", e.main],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = e.source.splitlines()
    start = next(i for i, line in enumerate(lines) if "const float *fill_uniform_f32(" in line)
    loop = next(i for i in range(start, len(lines)) if "for (int64_t b = 0; b < nb; ++b)" in lines[i]) + 1
    assert re.search(rf"{re.escape(e.main)}:{loop}:\d+: optimized: loop vectorized", proc.stderr), proc.stderr[-3000:]
