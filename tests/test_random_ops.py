"""fg.random inside fused ops (fusegen/graph/rng.py, fusegen/lower/rng.py, fusegen/rng_numba.py):
the IR and its rules, the refusals, the generated Numba and C++ sources, and the numbers, bit for
bit against ``fg.random.reference`` (normal within 2 ulp), through views, broadcasting,
reductions and ``fg.grad``, on Numba CPU, the AOT C++ (fusegen/emitters/rng.py) and the JAX
bridge; the emitted ``.cu`` compiles with nvcc. One op with many outputs per concern, so each compiles once."""
from __future__ import annotations

import re

import numpy as np
import pytest

import fusegen as fg
import fusegen.examples as ex
from _optional import backends_extended, needs_gxx, needs_jax, needs_nvcc
from fusegen import lower_cpu
from fusegen.native import host
from fusegen.plan import build_plan, schedule

R = fg.random.reference
U64 = 1 << 64


def ulps(a, b) -> np.ndarray:
    """Distance in units in the last place (same-sign finite floats of one dtype)."""
    it = np.int32 if a.dtype == np.float32 else np.int64
    return np.abs(a.view(it).astype(np.int64) - b.view(it).astype(np.int64))


# --- one op for the numbers: every kind, views, broadcasting, tensor seed and p -------------------
@fg.op
def many(x, pt, st, *, seed: int = 0, offset: int = 0, p: float = 0.5, lo: int = -300, hi: int = 300):
    a, b = x.shape[0], x.shape[1]
    u = fg.random.uniform(seed, (a, b), offset=offset)
    return (
        u,                                                                        # 0 contiguous: fills
        fg.random.uniform(seed, (a, b), offset=offset, dtype="float64"),          # 1
        fg.random.normal(seed, (a, b), offset=offset),                            # 2
        fg.random.normal(seed, (a, b), offset=offset, dtype="float64"),           # 3
        fg.random.bernoulli(seed, p, (a, b), offset=offset),                      # 4 attribute p
        fg.random.bernoulli(seed, pt, (a, b), offset=offset),                     # 5 tensor p, broadcast
        fg.random.randint(seed, -3, 11, (a, b), offset=offset, dtype="int8"),     # 6
        fg.random.randint(seed, 0, U64 - 1, (a, b), offset=offset, dtype="uint64"),  # 7 wide: 64-bit draws
        fg.permute_dims(u, (1, 0)),                                               # 8 views of a random tensor
        u[::-1, 1::2],                                                            # 9
        fg.flip(fg.random.normal(seed, (a, b), offset=offset), axis=1),           # 10
        fg.broadcast_to(fg.random.uniform(seed, (1, b), offset=offset), (a, b)),  # 11 broadcast
        x * fg.random.uniform(st, (a, b)),                                        # 12 seed: a scalar tensor
        fg.sum(u, axis=1),                                                        # 13 reductions over random
        fg.sum(u, axis=0),                                                        # 14
        fg.random.randint(seed, lo, hi, (a, b), offset=offset, dtype="int16"),    # 15 attribute bounds
    )


def _expect(shape, seed, offset, p, pt, st):
    kw = dict(offset=offset)
    u = R("uniform", seed, shape, **kw)
    n32 = R("normal", seed, shape, **kw)
    return [
        u, R("uniform", seed, shape, dtype="float64", **kw), n32, R("normal", seed, shape, dtype="float64", **kw),
        R("bernoulli", seed, shape, p=p, **kw), R("bernoulli", seed, shape, p=np.broadcast_to(pt, shape), **kw),
        R("randint", seed, shape, low=-3, high=11, dtype="int8", **kw),
        R("randint", seed, shape, low=0, high=U64 - 1, dtype="uint64", **kw),
        u.T, u[::-1, 1::2], n32[:, ::-1], np.broadcast_to(R("uniform", seed, (1, shape[1]), **kw), shape),
        np.ones(shape, np.float32) * R("uniform", int(st), shape),
        None, None, R("randint", seed, shape, low=-300, high=300, dtype="int16", **kw),
    ]


CASES = [((3, 5), 0, 0, 0.5), ((1, 7), 123456789, 5, 0.25), ((4, 33), U64 - 1, U64 - 2, 0.9), ((0, 3), 1, 0, 0.5)]


def check_many(got, shape, seed, offset, p, pt, st, what: str) -> None:
    want = _expect(shape, seed, offset, np.float32(p), pt, st)
    for k, (g, w) in enumerate(zip(got, want)):
        if w is None:
            continue
        assert g.dtype == w.dtype and g.shape == w.shape, (what, k, g.dtype, w.dtype, g.shape, w.shape)
        if k in (2, 3, 10):
            assert g.size == 0 or ulps(g, w).max() <= 2, (what, k)
        else:
            bad = np.flatnonzero(g != w)
            assert bad.size == 0, f"{what}: output {k} differs at {bad[:5]}"
    u = want[0].astype(np.float64)
    np.testing.assert_allclose(got[13], u.sum(axis=1), rtol=1e-5, err_msg=what)
    np.testing.assert_allclose(got[14], u.sum(axis=0), rtol=1e-5, err_msg=what)


def case_inputs(shape, seed: int, offset: int, p: float):
    """The (x, p tensor, seed tensor) inputs and the attributes of one random-op case."""
    x = np.ones(shape, np.float32)
    pt = np.linspace(0, 1, shape[1], dtype=np.float32)
    st = np.array(seed ^ 0x5555, np.uint64)
    # seeds and offsets >= 2^63 travel as int64 attributes (taken modulo 2^64)
    attrs = dict(seed=seed - U64 if seed >= 1 << 63 else seed,
                 offset=offset - U64 if offset >= 1 << 63 else offset, p=p)
    return x, pt, st, attrs


def run_many(kernel, what: str, cases=CASES) -> None:
    for shape, seed, offset, p in cases:
        x, pt, st, attrs = case_inputs(shape, seed, offset, p)
        got = kernel(x, pt, st, **attrs)
        check_many(got, shape, seed, offset, p, pt, st, f"{what} {shape} seed={seed} offset={offset}")


# Each case's shape makes a new stride pattern, hence new compiles of a kernel that inlines sixteen
# Philox streams (seconds of LLVM each): the default run takes the first case.
@pytest.mark.parametrize("cases", [pytest.param(CASES[:1], id="first"),
                                   pytest.param(CASES, id="all", marks=pytest.mark.extended)])
def test_numba_cpu_equals_the_reference_through_views_and_reductions(cases):
    run_many(fg.compile(many), "numba-cpu", cases)


@fg.op
def centered(x, *, seed: int = 0):
    """Stages that reuse one filled buffer, with outer reduced dims (ROT > 1: refilled)."""
    u = fg.random.uniform(seed, (x.shape[0], x.shape[1], x.shape[2]))
    return u - fg.mean(u, axis=(0, 2), keep_dims=True), u - fg.mean(u, axis=-1, keep_dims=True)


def test_buffers_shared_by_stages_hold_the_right_rows():
    k = fg.compile(centered)
    for shape in ((3, 4, 9), (2, 5, 1)):
        a, b = k(np.zeros(shape, np.float32), seed=9)
        u = R("uniform", 9, shape).astype(np.float64)
        np.testing.assert_allclose(a, u - u.mean(axis=(0, 2), keepdims=True), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b, u - u.mean(axis=-1, keepdims=True), rtol=1e-5, atol=1e-6)


# --- the IR and its rules --------------------------------------------------------------------------
def test_text_form_and_rules():
    @fg.op
    def f(x, *, seed: int = 1):
        return fg.random.bernoulli(seed, 0.3, (x.shape[0], 4), offset=2), fg.random.normal(seed, x.shape[-1])

    text = str(f)
    assert re.search(r"= random bernoulli bool at %\d+, seed %\d+, offset %\d+, p %\d+", text)
    assert re.search(r"= iota %\d+", text) and re.search(r"= reshape %\d+", text)
    assert "random normal float32" in text
    spec = fg.infer(f, ["float32"], [(6, 9)], {"seed": 1})
    assert spec.out_shapes == ((6, 4), (9,)) and [d.name for d in spec.out_dtypes] == ["bool", "float32"]


def test_bad_arguments_are_fusegen_errors_naming_the_function():
    bad = [
        (lambda x: fg.random.uniform(0, (2,), dtype="int32"), fg.DTypeError, "float32 or float64"),
        (lambda x: fg.random.normal(0, (2,), dtype="float16"), fg.DTypeError, "float32 or float64"),
        (lambda x: fg.random.bernoulli(0, 1.5, (2,)), fg.AttrError, "must be in [0, 1]"),
        (lambda x: fg.random.bernoulli(0, -0.1, (2,)), fg.AttrError, "must be in [0, 1]"),
        (lambda x: fg.random.bernoulli(0, True, (2,)), fg.AttrError, "got bool"),
        (lambda x: fg.random.uniform(1.5, (2,)), fg.AttrError, "seed must be an int"),
        (lambda x: fg.random.uniform(1 << 64, (2,)), fg.AttrError, "does not fit in 64 bits"),
        (lambda x: fg.random.uniform(0, (2, -1)), fg.TraceError, "negative dim"),
        (lambda x: fg.random.randint(0, 0, 5, (2,), dtype="float32"), fg.DTypeError, "integer dtype"),
        (lambda x: fg.random.randint(0, 0.5, 5, (2,)), fg.AttrError, "low must be an int"),
    ]
    for body, exc, text in bad:
        with pytest.raises(exc, match=re.escape(text)) as e:
            fg.op(body)
        assert "fg.random." in str(e.value)

    @fg.op
    def g(x, s, *, lo: int = 0, hi: int = 4, p: float = 0.5):
        return fg.random.uniform(s, (3,)), fg.random.randint(0, lo, hi, (3,), dtype="int8"), \
            fg.random.bernoulli(0, p, (3,))

    ok = dict(lo=0, hi=4, p=0.5)
    fg.infer(g, ["float32", "uint64"], [(3,), ()], ok)
    for dtypes, shapes, attrs, exc, text in [
        (["float32", "float32"], [(3,), ()], ok, fg.DTypeError, "seed must be an integer"),
        (["float32", "int64"], [(3,), (2,)], ok, fg.ShapeError, "seed must be a scalar"),
        (["float32", "int64"], [(3,), ()], dict(ok, lo=5), fg.AttrError, "low < high"),
        (["float32", "int64"], [(3,), ()], dict(ok, hi=200), fg.AttrError, "low < high"),
        (["float32", "int64"], [(3,), ()], dict(ok, p=2.0), fg.AttrError, "must be in [0, 1]"),
    ]:
        with pytest.raises(exc, match=re.escape(text)):
            fg.infer(g, dtypes, shapes, attrs)


# --- the emitted C++ and CUDA (fusegen/emitters/rng.py): one Philox block per element ------------
@fg.op
def small(x, *, seed: int = 0, offset: int = 0, p: float = 0.25):
    """Every kind through a view and a reduction, attribute seeds only (the JAX bridge's inputs
    are float32 without x64)."""
    a, b = x.shape[0], x.shape[1]
    u = fg.random.uniform(seed, (b, a), offset=offset)
    return (fg.permute_dims(u, (1, 0)) + x, fg.random.normal(seed, (a, b), offset=offset),
            fg.random.bernoulli(seed, p, (a, b), offset=offset),
            fg.random.randint(seed, -5, 9, (a, b), offset=offset, dtype="int32"),
            fg.sum(fg.random.uniform(seed, (a, b), offset=offset, dtype="float64"), axis=1))


def small_expected(shape, seed, offset, p):
    kw = dict(offset=offset)
    return [R("uniform", seed, shape[::-1], **kw).T + np.float32(1), R("normal", seed, shape, **kw),
            R("bernoulli", seed, shape, p=np.float32(p), **kw),
            R("randint", seed, shape, low=-5, high=9, dtype="int32", **kw),
            R("uniform", seed, shape, dtype="float64", **kw).sum(axis=1)]


def check_small(got, shape, seed, offset, p, what):
    for k, (g, w) in enumerate(zip(got, small_expected(shape, seed, offset, p))):
        g = np.asarray(g)
        assert g.shape == w.shape and g.dtype == w.dtype, (what, k, g.shape, w.shape, g.dtype, w.dtype)
        if k == 1:
            assert g.size == 0 or ulps(g, w).max() <= 2, (what, k)
        elif k == 4:
            np.testing.assert_allclose(g, w, rtol=1e-13, err_msg=what)
        else:
            assert np.array_equal(g, w), (what, k, np.flatnonzero(g != w)[:5])


def test_emitted_sources_call_philox_per_element_and_only_where_used():
    srcs = {(abi, dev): fg.emit(small, abi, dev, dtypes="float32").source
            for abi in ("mindspore-aot", "xla-ffi") for dev in ("cpu", "cuda")}
    for where, src in srcs.items():
        assert src.count("FG_HD FG_RNG_INLINE Block philox4x32_10(") == 1, where
        seed = r"uint64_t\(int64_t\(int64_t\(a\.seed\)\)\), uint64_t\(int64_t\(int64_t\(a\.offset\)\)\)"
        # (the counter is an iota read through a reshape: its address, unravelled where the
        # reshape's map is div/mod: fg::address)
        counter = r"uint64_t\((?:int64_t|fg::address)\((?:[^()]*, )?c\[\d+\] \+ i \* B\.istr\[\d+\]\)\)"
        for call in (rf"fg::uniform_f32_at\({seed}, {counter}\)", rf"fg::normal_f32_at\({seed}, {counter}\)",
                     rf"fg::uniform_f64_at\({seed}, {counter}\)",
                     rf"fg::bernoulli_at\({seed}, {counter}, fg::bernoulli_threshold\(double\(float\(double\(a\.p\)\)\)\)\)",
                     rf"int32_t\(int64_t\(fg::randint_at\({seed}, {counter}, UINT64_C\(18446744073709551611\), "
                     rf"UINT64_C\(9\)\)\)\)"):
            assert re.search(call, src), (where, call)
    # an op without random numbers gets no Philox code (the golden sources stay as they were)
    for dev in ("cpu", "cuda"):
        assert "philox" not in fg.emit(ex.layer_norm, "mindspore-aot", dev, dtypes="float32").source


def _infer_shape(ak, op, dtypes, shapes, attrs):
    """The library's own InferShape (``NameInferShape``) for ``shapes`` (dims may be -1)."""
    extra = ak._loaded.shim.fg_extra_new()
    ak._loaded.extras.append(extra)   # destroyed with the kernel
    host.set_attrs(ak._loaded.shim, extra, host.canonical_attrs(op.bind_attrs(attrs)))
    return ak._call_infer_shape(shapes, extra)


@needs_gxx
def test_aot_cpu_equals_the_reference_with_no_workspace_for_random_nodes():
    """Bit for bit against the reference (normal 2 ulp), negative seeds and offsets >= 2^63 (int64
    attributes taken modulo 2^64); InferShape with unknown dims agrees with ``fg.infer``."""
    k = fg.compile(small, backend="aot", dtypes="float32")
    for shape, seed, offset, p in (((4, 6), 7, 0, 0.3), ((3, 33), -3, 2**63 + 5, 0.9), ((0, 2), 1, 1, 0.5)):
        x = np.ones(shape, np.float32)
        attrs = dict(seed=seed, offset=offset - U64 if offset >= 1 << 63 else offset, p=p)
        check_small(k(x, **attrs), shape, seed % U64, offset, p, f"aot {shape} seed={seed}")
    ak = k.executor.kernel_for(tuple(small.bind_attrs({}).items()))
    for shapes in ([(3, 5)], [(-1, 5)], [(3, -1)], [(-1, -1)]):
        want = fg.infer(small, ["float32"], shapes, small.bind_attrs({})).out_shapes
        assert _infer_shape(ak, small, ["float32"], shapes, {}) == [tuple(s) for s in want], shapes
    # random nodes take no workspace (per element: no fill buffers)
    assert build_plan(small).buffers == () and ak.workspace_sizes(np.ones((3, 5), np.float32)) == []


@pytest.mark.extended
@needs_gxx
def test_aot_cpu_equals_the_reference_through_views_and_reductions():
    """``many`` (sixteen outputs: tensor seed and p, 64-bit randint, broadcasts) on one library."""
    run_many(fg.compile(many, backend="aot", dtypes=[("float32", "float32", "uint64")]), "aot-cpu")


@needs_jax
def test_jax_bridge_on_the_cpu_equals_the_reference():
    import jax
    import fusegen.jax as fgj
    f = fgj.function(small, dtypes=["float32"])
    x = np.ones((3, 10), np.float32)
    enable_x64 = getattr(jax, "enable_x64", None)
    if enable_x64 is None:  # older jax: the experimental spelling
        from jax.experimental import enable_x64
    with enable_x64(True):   # an output is float64
        check_small(f(x, seed=-2, offset=9, p=0.7), x.shape, U64 - 2, 9, 0.7, "jax")
        check_small(jax.jit(lambda a: f(a, seed=5, offset=0, p=0.1))(x), x.shape, 5, 0, 0.1, "jax.jit")


@pytest.mark.extended
@needs_gxx
def test_dropout_add_layer_norm_aot_equals_numba():
    rng = np.random.default_rng(1)
    x, r = rng.standard_normal((5, 37), np.float32), rng.standard_normal((5, 37), np.float32)
    gamma, beta = rng.random(37, np.float32) + 0.5, rng.standard_normal(37, np.float32)
    k = fg.compile(ex.dropout_add_layer_norm, backend="aot", dtypes="float32")
    assert "no call yet" in k.source    # traced per rank: emitted per specialization, on its call
    y, h = k(x, r, gamma, beta, p=0.3, seed=-11)
    assert "philox4x32_10" in k.source and "int DropoutAddLayerNorm(" in k.source
    y_n, h_n = fg.compile(ex.dropout_add_layer_norm)(x, r, gamma, beta, p=0.3, seed=-11)
    assert np.array_equal(h, h_n)                     # the random mask: bit for bit
    np.testing.assert_allclose(y, y_n, rtol=2e-6, atol=2e-6)   # the layer norm: the summation order differs


@pytest.mark.slow
@needs_nvcc
def test_emitted_cu_with_random_nodes_compiles_with_nvcc(tmp_path):
    import subprocess
    e = fg.emit(small, abi="mindspore-aot", device="cuda", dtypes="float32")
    e.write(tmp_path)
    cmd = ["nvcc", "--shared", "-std=c++17", "-Xcompiler", "-fPIC", "-O3", "--use_fast_math", "--expt-relaxed-constexpr",
           "-gencode", "arch=compute_90,code=sm_90", f"-I{tmp_path}", "-o", str(tmp_path / "small.so"),
           str(tmp_path / e.main)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]


# --- the generated Numba source --------------------------------------------------------------------
@fg.op
def views(x, *, seed: int = 0):
    u = fg.random.uniform(seed, (x.shape[0], x.shape[1]))
    return x + u, x + fg.permute_dims(fg.random.uniform(seed, (x.shape[1], x.shape[0])), (1, 0))


def test_contiguous_counters_fill_four_per_philox_call_and_strided_ones_go_per_element():
    plan = build_plan(views)
    spec = fg.infer(views, ["float32"], [(8, 16)], {"seed": 0})
    src = "\n".join(lower_cpu.compile_group(plan, spec, run, False).source for run in schedule(plan, spec))
    fills = re.findall(r"_rng_fill_uniform_f32\((rb\d+), n, np\.uint64\(np\.int64\(a_seed\)\), np\.uint64\(0\), q_iota\w+\)", src)
    assert len(fills) == 1, src
    assert re.search(rf"= {fills[0]}\[i\]", src)
    assert re.search(r"_rng_uniform_f32_at\(np\.uint64\(np\.int64\(a_seed\)\), np\.uint64\(0\), \(q_iota\w+ \+ i \* iota\w+_si\)\)",
                     src)
    assert re.search(r"rb\d+ = np\.empty\(max\(TILE, chunk, 1\), dtype=np\.float32\)", src)
    assert "# fusegen.rng_numba " in src


# --- dropout: the example, its gradient ------------------------------------------------------------
def dropout_add_layer_norm_ref(x, residual, gamma, beta, p, seed, eps=1e-5):
    keep = R("uniform", seed, x.shape) >= np.float32(p)
    h = np.where(keep, x / np.float32(1.0 - p), np.float32(0)) + residual
    h64 = h.astype(np.float64)
    d = h64 - h64.mean(-1, keepdims=True)
    y = d / np.sqrt((d * d).mean(-1, keepdims=True) + eps) * gamma + beta
    return y.astype(np.float32), h


def test_dropout_add_layer_norm_and_its_gradient_reads_no_mask():
    rng = np.random.default_rng(0)
    x, r = rng.standard_normal((5, 37), np.float32), rng.standard_normal((5, 37), np.float32)
    gamma, beta = rng.random(37, np.float32) + 0.5, rng.standard_normal(37, np.float32)
    y, h = fg.compile(ex.dropout_add_layer_norm)(x, r, gamma, beta, p=0.3, seed=11)
    y_ref, h_ref = dropout_add_layer_norm_ref(x, r, gamma, beta, 0.3, 11)
    assert np.array_equal(h, h_ref)
    np.testing.assert_allclose(y, y_ref, rtol=2e-5, atol=2e-5)

    @fg.op
    def dropout(x, *, p: float = 0.5, seed: int = 0):
        keep = fg.random.uniform(seed, (x.shape[0], x.shape[1])) >= p
        return fg.where(keep, x / (1.0 - p), 0.0)

    back = fg.grad(dropout)
    assert list(back.inputs) == ["x", "d_out"], back.inputs   # no mask: x only for its shape
    assert back.needs["x"] == "shape", back.needs
    assert re.search(r"= random uniform float32 at %\d+, seed %\d+, offset %\d+", str(back))
    g = rng.standard_normal((6, 13)).astype(np.float32)
    (dx,) = fg.compile(back)(np.full_like(g, np.nan), g, p=0.3, seed=11)   # x's values are never read
    keep = R("uniform", 11, g.shape) >= np.float32(0.3)
    assert np.array_equal(dx, np.where(keep, g / np.float32(0.7), np.float32(0)))


# --- machine code (slow: compiles without the disk cache) -----------------------------------------
@pytest.mark.slow
def test_fills_are_vector_code():
    """The fills' block loops vectorize (Philox's products become vector multiplies), as
    tests/test_philox.py checks for the primitives: RNG must not make dropout compute-bound."""
    from numba import njit

    from fusegen import rng_numba
    ns: dict = {}
    exec(compile(rng_numba.fills_source(), "<fills>", "exec"), ns)
    for kind in ("uniform_f32", "words", "uniform_f64"):
        fn = njit(**dict(rng_numba.FILL_JIT, cache=False))(ns[f"fill_{kind}"])
        buf = np.empty(40, {"uniform_f32": np.float32, "words": np.uint32, "uniform_f64": np.float64}[kind])
        fn(buf, 37, np.uint64(3), np.uint64(4), 5)
        llvm = fn.inspect_llvm(fn.signatures[0])
        assert re.search(r"mul (nuw )?(nsw )?<\d+ x i64>", llvm), f"fill_{kind}: Philox's products are scalar"


@pytest.mark.slow
def test_numba_cuda_random_kernels_assemble_for_sm_90(tmp_path):
    import os
    import shutil
    import subprocess
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "") not in ("", "0") or shutil.which("ptxas") is None:
        pytest.skip("needs ptxas and no simulator")
    from fusegen.lower_cuda import compile_ptx

    @fg.op
    def dropout(x, *, p: float = 0.5, seed: int = 0):
        u = fg.random.uniform(seed, (x.shape[0], x.shape[1]))
        return fg.where(u >= p, x / (1.0 - p), 0.0), fg.random.normal(seed, (x.shape[1],), dtype="float64")

    for name, ptx in compile_ptx(dropout, ["float32"], [(8, 64)], {"p": 0.1, "seed": 3}):
        path = tmp_path / f"{name}.ptx"
        path.write_text(ptx)
        r = subprocess.run(["ptxas", "-arch=sm_90", str(path), "-o", str(tmp_path / f"{name}.cubin")],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


def test_dtype_of_a_traced_value():
    """``dtype=x.dtype`` in a random function: the op is traced per input dtype (as for a
    creation function's), and an integer dtype where a float is needed is refused by name."""
    @fg.op
    def noisy(x, *, seed: int = 0):
        return x + fg.random.normal(seed, x.shape, dtype=x.dtype)

    @fg.op
    def jitter(x, *, seed: int = 0):
        return x + fg.random.randint(seed, 0, 10, x.shape, dtype=x.dtype)

    for d in (np.float32, np.float64):
        x = np.zeros((3, 5), d)
        got = fg.compile(noisy)(x, seed=7)
        assert got.dtype == d
        want = fg.compile(noisy_fixed(d))(x, seed=7)
        np.testing.assert_array_equal(got, want)
    with pytest.raises(fg.DTypeError, match=r"op noisy: fg.random.normal: dtype must be float32 or float64, got int32"):
        noisy(np.zeros(3, np.int32))
    got = jitter(np.zeros(4, np.int8))
    assert got.dtype == np.int8 and ((got >= 0) & (got < 10)).all()


def noisy_fixed(d):
    @fg.op
    def noisy(x, *, seed: int = 0):
        return x + fg.random.normal(seed, x.shape, dtype=np.dtype(d).name)
    return noisy


@fg.op
def draws_only(*, n: int = 4, seed: int = 0):
    """No input at all: the op's outputs come from its attributes."""
    return fg.random.uniform(seed, (n,)), fg.arange(n) * 2.0


@pytest.mark.parametrize("backend", backends_extended("numba", "aot"))
def test_an_op_without_inputs(backend):
    # (its generated call and key functions take attributes only; its C++ InferType has one
    # dtype combination, the empty one)
    k = fg.compile(draws_only, backend=backend)
    u, r = k(n=5, seed=3)
    np.testing.assert_array_equal(u, R("uniform", 3, (5,)))
    np.testing.assert_array_equal(r, np.arange(5) * 2.0)
    assert k(n=2)[0].shape == (2,)
