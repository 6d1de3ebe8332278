"""Tests of fusegen.xla_emit (XLA typed-FFI handlers) and fusegen.jax (the JAX bridge).

Layer (a): the emitted source and its plain data, without a compiler or JAX.
Layer (b): targeted asserts on the generated text; one handler library built warning-free with
``-Wall -Wextra -Werror`` against ``jax.ffi.include_dir()``; the CUDA handlers built with nvcc.
Layer (c): every reference op through ``fusegen.jax.function`` on the CPU (eager, ``jax.jit``,
``jax.vmap``) against NumPy *and* the Numba backend (``fg.compile(op)``), and the error paths.

The JAX tests skip when jax is not installed (``pip install "fusegen[jax]"``). Compiling is the
cost here (~3 s per handler library), so there is one library per op, built once per module,
two at a time.
"""
from __future__ import annotations

import math
import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import fusegen as fg
import fusegen.examples as ex
from fusegen.native import build
from fusegen.abi_emit import emit
from fusegen.abi_emit import FFI_DTYPES, XlaEmitted, legacy_opaque, workspace_bytes

from conftest import assert_all_close, assert_close, np_ref, sample
from _optional import needs_nvcc, require

OPS = {op.name: op for op in ex.REFERENCE_OPS}
_GELU_C = math.sqrt(2.0 / math.pi)  # a Python float: weak, as in the op


@fg.op
def attr_mix(x, *, axes: list[int] = [0], keep_dims: bool = False, scale: float = 1.0,  # noqa: B006
             weights: list[float] = [1.0], tag: str = "t"):                              # noqa: B006
    """Every FFI attribute type; a workspace (the max, read by a later stage); two outputs."""
    m = fg.max(x, axis=axes, keep_dims=True)
    return (x - m) * scale, fg.sum(x, axis=axes, keep_dims=keep_dims)


@fg.op
def nested_attr(x, *, table: list[list[int]] = [[0]]):  # noqa: B006
    return x + 1


# --- NumPy references of the reference ops ----------------------------------------------------
def _softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _layer_norm(x, axis=-1, eps=1e-5):
    mean = np.mean(x, axis=axis, keepdims=True)
    d = x - mean
    rstd = 1 / np.sqrt(np.mean(d * d, axis=axis, keepdims=True) + eps)
    return d * rstd, mean, rstd


def _smooth_l1(x, y, sigma=1.0):
    d = x - y
    s2 = sigma * sigma
    ad = np.abs(d)
    return np.where(ad < 1.0 / s2, 0.5 * s2 * d * d, ad - 0.5 / s2)


def _bias_gelu(x, b):
    h = x + b
    return 0.5 * h * (1.0 + np.tanh(_GELU_C * (h + 0.044715 * h * h * h)))


def _attr_mix(x, axes=(0,), keep_dims=False, scale=1.0, weights=(1.0,), tag="t"):
    axes = tuple(axes)
    return (x - np.max(x, axis=axes, keepdims=True)) * scale, np.sum(x, axis=axes, keepdims=keep_dims)


REFS = {
    "add_reduce_sum": lambda x, y, axis=1, keep_dims=False: np.sum(x + y, axis=axis, keepdims=keep_dims),
    "add_mul_div": lambda x, y: (x + y, x * y, x / y),
    "smooth_l1": _smooth_l1,
    "softmax": _softmax,
    "layer_norm": _layer_norm,
    "rms_norm": lambda x, w, eps=1e-6: x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w,
    "bias_gelu": _bias_gelu,
    "attr_mix": _attr_mix,
}

#: (op, input shapes, attributes): broadcasting, row and column layouts, every attribute kind, and
#: two inputs big enough (>= 2**17 elements) for the handler's OpenMP path.
CASES = [
    ("add_reduce_sum", [(6, 7), (6, 7)], {}),
    ("add_reduce_sum", [(5, 6, 7), (7,)], dict(axis=1, keep_dims=True)),
    ("add_reduce_sum", [(512, 384), (512, 384)], dict(axis=0)),
    ("add_mul_div", [(6, 7), (1, 7)], {}),
    ("smooth_l1", [(6, 7), (6, 7)], dict(sigma=0.7)),
    ("softmax", [(5, 9)], {}),
    ("softmax", [(4, 5, 6)], dict(axis=1)),
    ("softmax", [(256, 1024)], {}),
    ("layer_norm", [(5, 16)], dict(eps=1e-3)),
    ("rms_norm", [(5, 16), (16,)], {}),
    ("bias_gelu", [(5, 16), (16,)], {}),
    ("attr_mix", [(3, 4, 5)], dict(axes=[0, -1], keep_dims=True, scale=0.5, weights=[2.0, 3.0], tag="x")),
]
#: Extra dtype combinations built (one library per op, every combination in it).
EXTRA_DTYPES = {"add_reduce_sum": ["float64", ("int32", "int32")], "softmax": ["float16"], "attr_mix": ["float16"]}
ALL_OPS = {**OPS, "attr_mix": attr_mix}


def inputs(name: str, shapes, dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    arrs = [sample(rng, s, dtype) for s in shapes]
    if name == "add_mul_div":  # keep the divisor away from 0
        arrs[1] = sample(rng, shapes[1], dtype, lo=0.5, hi=2.0)
    if name == "add_reduce_sum":  # no cancellation: a float32 sum of 512 terms stays within TOL
        arrs = [sample(rng, s, dtype, lo=0.0, hi=1.0) for s in shapes]
    return arrs


def as_numpy(result):
    return tuple(np.asarray(r) for r in result) if isinstance(result, tuple) else np.asarray(result)


# =============================================================================================
# (a) The emitted source, without a compiler
# =============================================================================================

def test_emit_returns_one_handler_per_dtype_combination():
    e = emit(ex.softmax, abi="xla-ffi", dtypes=["float32", "float16"])
    assert isinstance(e, XlaEmitted)
    assert list(e.files) == ["softmax_xla_ffi.cc"] and e.main == "softmax_xla_ffi.cc"
    assert e.handlers == {("float32",): "Softmax_float32", ("float16",): "Softmax_float16"}
    assert e.out_dtypes == {("float32",): ("float32",), ("float16",): ("float16",)}
    assert e.workspace_itemsize == {("float32",): (4, 4), ("float16",): (4, 4)}  # f16 accumulates in f32
    for symbol in e.handlers.values():
        assert re.search(rf"XLA_FFI_DEFINE_HANDLER_SYMBOL\({symbol}, {symbol}_impl,", e.source)
    assert emit(ex.softmax, abi="xla-ffi", dtypes="float32").digest == \
        emit(ex.softmax, abi="xla-ffi", dtypes="float32").digest  # deterministic: the names are stable


def test_header_comment_says_what_generated_it_and_how_to_use_it():
    src = emit(ex.add_reduce_sum, abi="xla-ffi").source
    head = "\n".join(line for line in src.splitlines() if line.startswith("//"))
    assert "generated by fusegen" in head and "`add_reduce_sum`" in head
    assert "jax.ffi.include_dir()" in head and "g++ -std=c++17" in head
    assert "register_ffi_target" in head and "ffi_call" in head
    assert "%3 = sum %2, axis=@axis, keep_dims=@keep_dims" in head  # the op's IR
    assert "axis: int as int64_t (default 1)" in head and "keep_dims: bool as bool" in head
    assert "FG_ERR_OUT_SHAPE" in head


def test_the_fused_loops_are_the_aot_emitters_own():
    """The stage functions of a dtype combination are byte-identical in both ABIs' files."""
    def loops(src):
        m = re.search(r"\nnamespace (k_float32\w*) \{\n.*?\n\}  // namespace \1\n", src, re.S)
        assert m
        return m.group(0)
    for op in (ex.layer_norm, ex.add_reduce_sum):
        xla, aot = emit(op, abi="xla-ffi", dtypes="float32").source, emit(op, dtypes="float32").source
        assert loops(xla) == loops(aot)
        assert "int run(int nparam, void **params" in xla and "return status_to_error(call_run(" in xla


def test_bindings_types_attributes_and_scratch_results():
    src = emit(attr_mix, abi="xla-ffi", dtypes="float16").source
    binding = src[src.index("XLA_FFI_DEFINE_HANDLER_SYMBOL(AttrMix_float16"):]
    assert ".Arg<ffi::Buffer<ffi::F16>>()" in binding
    assert binding.count(".Ret<ffi::Buffer<ffi::F16>>()") == 2  # two outputs
    assert binding.count(".Ret<ffi::Buffer<ffi::U8>>()") == 1   # one scratch result (the max)
    for attr, ffi_type in [("axes", "ffi::Span<const int64_t>"), ("keep_dims", "bool"), ("scale", "double"),
                           ("weights", "ffi::Span<const double>"), ("tag", "std::string_view")]:
        assert f'.Attr<{ffi_type}>("{attr}")' in binding
    assert "a.scale = attr_scale;" in src  # Python floats arrive as f64 and are kept as double (as NumPy has them)
    assert ".Ret<ffi::Buffer<ffi::U8>>()" not in emit(ex.add_reduce_sum, abi="xla-ffi").source  # no scratch
    assert set(FFI_DTYPES) == set(fg.DTYPES)


def test_emit_rejects_what_xla_cannot_express():
    with pytest.raises(NotImplementedError, match="nested"):
        emit(nested_attr, abi="xla-ffi")
    with pytest.raises(NotImplementedError, match="'cpu' or 'cuda'"):
        emit(ex.softmax, abi="xla-ffi", device="rocm")
    with pytest.raises(NotImplementedError, match="not available"):
        emit(ex.softmax, abi="tvm")


def test_cuda_handlers_wrap_the_aot_cuda_kernels():
    e = emit(ex.layer_norm, abi="xla-ffi", device="cuda", dtypes=["float32", "float16"])
    assert e.main == "layer_norm_xla_ffi.cu" and e.device == "cuda"
    src, aot = e.source, emit(ex.layer_norm, device="cuda", dtypes=["float32", "float16"]).source
    for suffix in ("float32", "float16"):  # the MindSpore .cu's kernels, byte for byte
        block = re.search(rf"\nnamespace k_{suffix} \{{\n.*?\n\}}  // namespace k_{suffix}\n", aot, re.S).group(0)
        assert block in src
    helpers = re.search(r"namespace fgd \{.*?\}  // namespace fgd", aot, re.S).group(0)
    assert helpers in src
    binding = src[src.index("XLA_FFI_DEFINE_HANDLER_SYMBOL(LayerNorm_float16"):]
    assert ".Ctx<ffi::PlatformStream<cudaStream_t>>()" in binding and ".Arg<ffi::Buffer<ffi::F16>>()" in binding
    assert binding.count(".Ret<ffi::Buffer<ffi::U8>>()") == 2  # mean and var workspaces
    assert "return run(o.n, o.params, o.ndims, o.shapes, dtypes, a, stream);" in src
    assert 'platform="CUDA"' in src and "nvcc -std=c++17" in src


def test_legacy_entry_points_and_their_opaque_string():
    src = emit(attr_mix, abi="xla-ffi", dtypes="float32").source
    assert re.search(r'extern "C" void AttrMix_float32_legacy\(void \*out, const void \*\*in, const char \*opaque,'
                     r'\s+size_t opaque_len, XlaCustomCallStatus \*status\)', src)
    assert "custom_call_api_version=3" in src and "XlaCustomCallStatusSetFailure" in src
    bound = attr_mix.bind_attrs(dict(axes=[0, -1], keep_dims=True, scale=0.5, weights=[2.0, 3.5], tag="a b"))
    text = legacy_opaque(attr_mix, [(3, 4, 5), (3, 4, 5), (1, 4, 1), (16,)], bound)
    assert text == "fg1 3 3 4 5 3 3 4 5 3 1 4 1 1 16 2 0 -1 1 0.5 2 2.0 3.5 3:a b"


def test_workspace_bytes_follow_the_ir_shapes():
    e = emit(ex.softmax, abi="xla-ffi", dtypes=["float32", "float64"])
    spec = fg.infer(ex.softmax, ["float64"], [(3, 5, 7)], ex.softmax.bind_attrs({"axis": 1}))
    assert workspace_bytes(e, ("float64",), spec) == [3 * 7 * 8, 3 * 7 * 8]  # max and sum, keep_dims


# =============================================================================================
# (b) + (c): built and run through JAX
# =============================================================================================

@pytest.fixture(scope="module")
def jax():
    require("jax", "g++")
    import jax
    return jax


@pytest.fixture(scope="module")
def fns(jax):
    """One handler library per op (float32, plus EXTRA_DTYPES), built two at a time."""
    import fusegen.jax as fgj

    # attr_mix (every attribute type, a workspace, two outputs, float16) is built warning-free;
    # -isystem: the FFI headers themselves are not -Wextra clean, our code must be.
    strict = [f for f in fgj.build_flags() if not f.startswith("-I")] + [
        "-isystem", jax.ffi.include_dir(), "-Wall", "-Wextra", "-Werror"]

    def make(name):
        return name, fgj.function(ALL_OPS[name], dtypes=["float32", *EXTRA_DTYPES.get(name, [])],
                                  flags=strict if name == "attr_mix" else None)
    with ThreadPoolExecutor(2) as pool:
        return dict(pool.map(make, ALL_OPS))


@pytest.fixture(scope="module")
def numba_kernels():
    return {}


def numba_result(kernels, name, arrs, attrs):
    if name not in kernels:
        kernels[name] = fg.compile(ALL_OPS[name])
    return kernels[name](*arrs, **attrs)


def test_handlers_compile_warning_free(fns):
    f = fns["attr_mix"]
    assert {"-Wall", "-Wextra", "-Werror"} <= set(f.flags)  # built by the fixture: it compiled
    symbols = set(build.dynamic_symbols(f.lib_path))
    assert {"AttrMix_float32", "AttrMix_float16", "AttrMix_float32_legacy", "AttrMix_float16_legacy"} <= symbols


@needs_nvcc
def test_cuda_handlers_compile_with_nvcc(jax):
    e = emit(attr_mix, abi="xla-ffi", device="cuda", dtypes=["float32", "float16"])
    directory = build.cache_dir() / "xla-test" / e.digest
    e.write(directory)
    # One architecture is enough to prove it compiles (each more costs ~10 s); -isystem: the FFI
    # headers' own warnings are not ours.
    flags = ["-std=c++17", "--shared", "-Xcompiler", "-fPIC", "-O3", "--expt-relaxed-constexpr",
             "-gencode", "arch=compute_80,code=sm_80", "-isystem", jax.ffi.include_dir()]
    lib = build.build_library(directory / e.main, flags=flags)
    assert {"AttrMix_float32", "AttrMix_float16"} <= set(build.dynamic_symbols(lib))


@pytest.mark.parametrize("name,shapes,attrs", CASES, ids=lambda v: str(v) if not isinstance(v, dict) else "")
def test_reference_ops_match_numpy_and_numba(fns, numba_kernels, jax, name, shapes, attrs):
    arrs = inputs(name, shapes)
    got = as_numpy(fns[name](*arrs, **attrs))
    want = np_ref(REFS[name], *arrs, **attrs)
    assert_all_close(got, want, what=f"{name} vs NumPy")
    assert_all_close(got, numba_result(numba_kernels, name, arrs, attrs), what=f"{name} vs Numba")
    jitted = jax.jit(lambda *xs: fns[name](*xs, **attrs))
    assert_all_close(as_numpy(jitted(*arrs)), want, what=f"{name} under jax.jit")


@pytest.mark.parametrize("name,dtypes,attrs", [
    ("add_reduce_sum", ("float64", "float64"), dict(axis=0)),
    ("add_reduce_sum", ("int32", "int32"), dict(axis=1, keep_dims=True)),
    ("softmax", ("float16",), {}),
])
def test_other_dtypes(fns, numba_kernels, jax, name, dtypes, attrs):
    shapes = [(6, 7)] * len(dtypes)
    arrs = [sample(np.random.default_rng(i), s, d) for i, (s, d) in enumerate(zip(shapes, dtypes))]
    enable_x64 = getattr(jax, "enable_x64", None)
    if enable_x64 is None:  # older jax: the experimental spelling
        from jax.experimental import enable_x64
    with enable_x64(True):
        got = as_numpy(fns[name](*arrs, **attrs))
    assert got.dtype == np_ref(REFS[name], *arrs, **attrs).dtype
    assert_close(got, np_ref(REFS[name], *arrs, **attrs), what=f"{name}{dtypes} vs NumPy")
    assert_close(got, numba_result(numba_kernels, name, arrs, attrs), what=f"{name}{dtypes} vs Numba")


def test_vmap_picks_a_method_the_op_allows(fns, jax):
    rng = np.random.default_rng(3)
    x, y, w = sample(rng, (3, 4, 5), "float32"), sample(rng, (3, 4, 5), "float32"), sample(rng, (5,), "float32")
    cases = [  # (name, args, in_axes, attrs, per-example reference, method fusegen must choose)
        ("add_reduce_sum", (x, y), 0, dict(axis=1), lambda a, b: np.sum(a + b, axis=1), "broadcast_all"),
        ("softmax", (x,), 0, dict(axis=0), lambda a: _softmax(a, axis=0), "broadcast_all"),
        ("layer_norm", (x,), 0, {}, _layer_norm, "broadcast_all"),
        ("rms_norm", (x, w), (0, None), {}, REFS["rms_norm"], "sequential"),  # w's rank differs
        ("attr_mix", (x,), 0, dict(axes=[0]), lambda a: _attr_mix(a, axes=(0,)), "broadcast_all"),
    ]
    for name, args, in_axes, attrs, ref, method in cases:
        f = fns[name]
        got = as_numpy(jax.vmap(lambda *xs: f(*xs, **attrs), in_axes=in_axes)(*args))
        per = [ref(*[a[i] if (in_axes == 0 or in_axes[k] == 0) else a for k, a in enumerate(args)])
               for i in range(3)]
        want = tuple(np.stack(p) for p in zip(*per)) if isinstance(per[0], tuple) else np.stack(per)
        assert_all_close(got, want, what=f"vmap {name}")
        jaxpr = str(jax.make_jaxpr(jax.vmap(lambda *xs: f(*xs, **attrs), in_axes=in_axes))(*args))
        assert f"vmap_method={method}" in jaxpr, name


@fg.op
def along_front(x, idx):
    return fg.take_along_axis(x, idx, axis=0) * 2.0


@fg.op
def along_back(x, idx):
    return fg.take_along_axis(x, idx, axis=-1) * 2.0


@fg.op
def rows_at(x, idx):
    return x[idx] + 1.0


@pytest.mark.extended   # (three handler libraries: the default run keeps its 5 minutes)
def test_vmap_of_gathers_keeps_each_examples_axis(jax):
    # a gather's axis counted from the front (and take's, whose indices' dims replace the
    # axis) would meet the batch dim in one broadcast call: those batch one example at a time
    rng = np.random.default_rng(5)
    x = rng.uniform(size=(3, 4, 5)).astype(np.float32)
    idx = rng.integers(0, 4, (3, 4, 5)).astype(np.int32)
    rows = rng.integers(-4, 4, (3, 6)).astype(np.int32)
    cases = [(along_front, (x, idx), lambda a, i: np.take_along_axis(a, i, 0) * 2, "sequential"),
             (along_back, (x, idx), lambda a, i: np.take_along_axis(a, i, -1) * 2, "broadcast_all"),
             (rows_at, (x, rows), lambda a, i: a[i] + 1, "sequential")]
    for op, args, ref, method in cases:
        f = fg.jax.function(op, dtypes="float32")
        got = as_numpy(jax.vmap(f)(*args))
        assert_all_close(got, np.stack([ref(*[a[b] for a in args]) for b in range(3)]), what=f"vmap {op.name}")
        assert f"vmap_method={method}" in str(jax.make_jaxpr(jax.vmap(f))(*args)), op.name


@fg.op
def max_and_where(x):
    return fg.max(x, axis=-1), fg.argmax(x, axis=-1).astype(fg.int32)


@pytest.mark.extended
def test_gradients_of_an_op_with_an_integer_output_and_of_second_order(jax):
    jnp = jax.numpy
    rng = np.random.default_rng(6)
    x = rng.uniform(size=(4, 6)).astype(np.float32)
    # an integer output's cotangent is JAX's float0: the backward op takes zeros of its dtype
    f = fg.jax.function(max_and_where, dtypes="float32")
    g = as_numpy(jax.grad(lambda a: (f(a)[0] ** 2).sum())(x))
    assert_close(g, as_numpy(jax.grad(lambda a: (jnp.max(a, axis=-1) ** 2).sum())(x)), what="grad of max")
    # reverse over reverse: the forward rule calls the differentiable function
    sm = fg.jax.function(ex.softmax, dtypes="float32")
    w = np.arange(6, dtype=np.float32)
    h = as_numpy(jax.jacrev(jax.jacrev(lambda a: (sm(a) * w).sum()))(x[0]))
    assert_close(h, as_numpy(jax.hessian(lambda a: (jax.nn.softmax(a) * w).sum())(x[0])), what="hessian",
                 rtol=1e-4, atol=1e-6)
    with pytest.raises(fg.TraceError, match="op softmax: forward-mode differentiation"):
        jax.jvp(sm, (x,), (x,))
    # a concrete JAX scalar for an attribute is its value, as a NumPy scalar is
    assert_close(as_numpy(sm(x, axis=jnp.int32(0))), as_numpy(sm(x, axis=0)), what="jnp attribute")


@fg.op
def noise(*, n: int = 4, seed: int = 0):
    return fg.random.uniform(seed, (n,)) * 2.0


@pytest.mark.extended
def test_an_op_without_inputs(jax):
    f = fg.jax.function(noise)
    want = np.asarray(noise(n=5, seed=3))
    assert_close(as_numpy(f(n=5, seed=3)), want, what="eager")
    assert_close(as_numpy(jax.jit(lambda: f(n=5, seed=3))()), want, what="jit")


def test_handler_errors_surface_with_fusegens_message(fns, jax):
    f = fns["add_reduce_sum"]
    x = np.ones((4, 5), np.float32)
    # Straight to the handler with a result shape the op does not infer: XLA does not check it,
    # the handler does.
    bad = jax.ffi.ffi_call(f.targets[("float32", "float32")], jax.ShapeDtypeStruct((5,), np.float32))
    with pytest.raises(Exception, match="fusegen op add_reduce_sum: FG_ERR_OUT_SHAPE"):
        np.asarray(bad(x, x, axis=np.int64(1), keep_dims=False))
    # Through the bridge: a forced vmap method that breaks broadcasting ((B,4,5) with (B,5)).
    forced = fg.jax.function(ex.rms_norm, dtypes="float32", vmap_method="broadcast_all")
    assert forced.targets == fns["rms_norm"].targets  # same library: same names, registered once
    xb, w = np.ones((3, 4, 5), np.float32), np.ones((5,), np.float32)
    # Eagerly the bridge re-raises it as KernelError; with asynchronous dispatch JAX may instead
    # report it where the result is first used, as JaxRuntimeError with the same text.
    with pytest.raises((fg.KernelError, jax.errors.JaxRuntimeError), match="fusegen op rms_norm: FG_ERR_BROADCAST"):
        np.asarray(jax.vmap(lambda a: forced(a, w))(xb))


@pytest.mark.parametrize("name", ["add_reduce_sum", "layer_norm", "attr_mix"])
def test_legacy_custom_call_matches_numpy(fns, jax, name):
    shapes, attrs = next((s, a) for n, s, a in CASES if n == name)
    legacy = fg.jax.function(ALL_OPS[name], dtypes=["float32", *EXTRA_DTYPES.get(name, [])], api="legacy",
                             flags=fns[name].flags)
    assert legacy.lib_path == fns[name].lib_path  # the same library: both APIs are always emitted
    arrs = inputs(name, shapes)
    want = np_ref(REFS[name], *arrs, **attrs)
    assert_all_close(as_numpy(legacy(*arrs, **attrs)), want, what=f"legacy {name}")
    assert_all_close(as_numpy(jax.jit(lambda *xs: legacy(*xs, **attrs))(*arrs)), want, what=f"legacy jit {name}")
    batched = [np.stack([a, a * 2]) for a in arrs]
    got = as_numpy(jax.vmap(lambda *xs: legacy(*xs, **attrs))(*batched))  # sequential
    want_b = [np_ref(REFS[name], *[a * k for a in arrs], **attrs) for k in (1, 2)]
    want_b = tuple(np.stack(p) for p in zip(*want_b)) if isinstance(want, tuple) else np.stack(want_b)
    assert_all_close(got, want_b, what=f"legacy vmap {name}")


def test_legacy_errors_cannot_reach_python_so_they_are_printed_and_zeroed(fns, jax, capfd):
    """The caveat, pinned: jaxlib exports no XlaCustomCallStatusSetFailure."""
    legacy = fg.jax.function(ex.add_reduce_sum, dtypes=["float32", *EXTRA_DTYPES["add_reduce_sum"]], api="legacy")
    x = np.ones((4, 5), np.float32)
    call = jax.ffi.ffi_call(legacy.targets[("float32", "float32")], jax.ShapeDtypeStruct((7,), np.float32),
                            custom_call_api_version=3, legacy_backend_config="fg1 2 4 5 2 4 5 1 7 1 0")
    assert not np.asarray(call(x, x)).any()
    assert "fusegen op add_reduce_sum: FG_ERR_OUT_SHAPE" in capfd.readouterr().err


def test_argument_errors_are_fusegens_before_xla_runs(fns):
    f = fns["add_reduce_sum"]
    x = np.ones((4, 5), np.float32)
    with pytest.raises(fg.ShapeError, match=r"op add_reduce_sum: node %3 = sum .* axis 2 is out of range"):
        f(x, x, axis=2)
    with pytest.raises(fg.ShapeError, match="cannot broadcast"):
        f(x, np.ones((3, 5), np.float32))
    with pytest.raises(fg.AttrError, match="unknown attribute 'axes'"):
        f(x, x, axes=1)
    with pytest.raises(fg.ArgumentError, match="takes 2 inputs"):
        f(x)
    with pytest.raises(fg.DTypeError, match="generated for dtype combinations"):
        f(x.astype(np.int16), x.astype(np.int16))
    with pytest.raises(fg.DTypeError, match="jax_enable_x64"):  # int32 sums to int64
        f(x.astype(np.int32), x.astype(np.int32))
    with pytest.raises(ValueError, match="vmap_method"):
        fg.jax.function(ex.add_reduce_sum, vmap_method="sideways")


def test_repeated_calls_reuse_the_prepared_call_and_registration(fns, jax):
    import fusegen.jax as fgj
    f = fns["bias_gelu"]
    x, b = np.ones((2, 3), np.float32), np.ones((3,), np.float32)
    f(x, b)
    fn = f._by_attrs[()]      # one jitted function per attribute set (here: none given)
    n = fn._cache_size()      # and one trace per input signature: shapes and dtypes
    f(x, b)
    assert f._by_attrs[()] is fn and fn._cache_size() == n
    f(x[:1], b)
    assert fn._cache_size() == n + 1
    for name in f.targets.values():
        assert re.fullmatch(r"fusegen_BiasGelu_float32_float32_[0-9a-f]{16}", name)
        assert name in fgj._registered
