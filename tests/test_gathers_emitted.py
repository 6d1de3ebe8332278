"""Gathers, arg-reductions and scans (issue #17) through the emitted C++: ``backend="aot"`` (the
MindSpore-AOT ``.cc``) and ``fusegen.jax.function`` (XLA FFI CPU handlers), against NumPy and
the Numba backend. Many results per op, so each backend compiles once: take / take_along_axis /
``x[idx]`` (fused with elementwise ops and reductions), argmax/argmin, count_nonzero,
searchsorted, cumulative_sum; the #17 reference ops; out-of-range indices (the same
``BoundsError``, derived from ``IndexError``, as on Numba: never a crash or a silent read);
wrap/clip modes; the generated ``InferShape`` with unknown dims and ranks; the generated text.
The CUDA sources (MindSpore-AOT ``.cu``, XLA FFI CUDA): their text, and nvcc builds them (no GPU
here: a GPU run is tests/cuda's)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import fusegen as fg
from fusegen.examples import GATHER_OPS
from fusegen.ir import Op
from test_aot_backend import dynamic_variants
from test_layout_backends import _infer_shape

from _optional import SIMULATOR, gpu_present, needs_nvcc

_rng = np.random.default_rng(17)


@fg.op
def many(x, i, j, k, s):
    # x (4, 3, 5) float, i (2, 3) and j (4, 3, 2) and k (2, 3, 5) indices, s (6,) sorted
    return (fg.take(x, i, axis=0), fg.take(x, i, axis=-1) * 2, x[..., i], x[:, i] + 1,
            fg.sum(fg.take(x, i, axis=0), axis=(0, 1)),
            fg.take_along_axis(x, j, axis=-1), fg.max(fg.take_along_axis(x, k, axis=0), axis=-1),
            fg.argmax(x, axis=-1), fg.argmin(x, axis=0), fg.argmax(x),
            fg.count_nonzero(x > 0, axis=1), fg.searchsorted(s, x[0]),
            fg.cumulative_sum(x, axis=1), fg.cumulative_sum(fg.take(x, i, axis=0), axis=-1, include_initial=True),
            fg.take(x, -1, axis=1), fg.take(x[0], k[0, 0]), fg.permute_dims(x, (2, 0, 1))[i[0]])


def _many_ref(x, i, j, k, s):
    return (np.take(x, i, axis=0), np.take(x, i, axis=-1) * 2, x[..., i], x[:, i] + 1,
            np.take(x, i, axis=0).sum(axis=(0, 1)),
            np.take_along_axis(x, j, axis=-1), np.take_along_axis(x, k, axis=0).max(axis=-1),
            np.argmax(x, axis=-1), np.argmin(x, axis=0), np.argmax(x),
            np.count_nonzero(x > 0, axis=1), np.searchsorted(s, x[0]),
            np.cumsum(x, axis=1),
            np.concatenate([np.zeros((2, 3, 3, 1), np.float32), np.cumsum(np.take(x, i, axis=0), axis=-1)], axis=-1),
            np.take(x, -1, axis=1), np.take(x[0], k[0, 0]), np.transpose(x, (2, 0, 1))[i[0]])


@fg.op
def modes(x, i):
    return fg.take(x, i, axis=0, mode="wrap"), fg.take(x, i, axis=1, mode="clip") + 0


DT = "float32,int64,int64,int64,float32"


def _inputs():
    x = _rng.standard_normal((4, 3, 5)).astype(np.float32)
    x[1, 2, :2] = x[1, 2, 3]           # ties: the first occurrence wins
    x[2, 0, 4] = np.nan                # NaN wins argmax/argmin
    i = _rng.integers(-3, 3, (2, 3))
    j = _rng.integers(-5, 5, (4, 3, 2))
    k = _rng.integers(0, 4, (2, 3, 5))
    s = np.sort(_rng.standard_normal(6)).astype(np.float32)
    return x, i, j, k, s


@pytest.fixture(scope="module")
def aot():
    return fg.compile(many, backend="aot", dtypes=DT)


def _check(got, want):
    for g, w in zip(got, want, strict=True):
        assert g.shape == np.shape(w) and g.dtype == np.asarray(w).dtype, (g.shape, np.shape(w), g.dtype)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_many_against_numpy(aot):
    args = _inputs()
    _check(aot(*args), _many_ref(*args))


def _message(op, fn: str, nth: int, value: int, axis: int, size: int) -> str:
    """The Numba backends' BoundsError text (fusegen.rt.numba_cpu.gather_error) for the nth
    gather node of ``fn``'s kind."""
    from fusegen.graph.text import where_text
    kind = "take" if fn == "take" else "along"
    node = [n for n in op.graph.nodes if n.op is Op.GATHER and n.arg.kind == kind][nth]
    return f"{where_text(op, node)}: {fn}: index {value} is out of bounds for axis {axis} with size {size}"


def test_out_of_range_index_raises_the_numba_message(aot):
    x, i, j, k, s = _inputs()
    cases = [(np.array([[0, 4, 1], [0, 0, 0]]), j, _message(many, "take", 0, 4, 0, 4)),
             (i, np.where(j == j.max(), -6, j), _message(many, "take_along_axis", 0, -6, 2, 5))]
    for bad_i, bad_j, text in cases:
        with pytest.raises(fg.BoundsError) as aot_err:
            aot(x, bad_i, bad_j, k, s)
        assert isinstance(aot_err.value, IndexError)
        assert str(aot_err.value) == text
    args = _inputs()                     # the kernel still works after an error
    _check(aot(*args), _many_ref(*args))


def test_wrap_and_clip_modes():
    x = _rng.standard_normal((4, 3)).astype(np.float32)
    i = np.array([[-9, -1], [3, 7]])
    got = fg.compile(modes, backend="aot", dtypes="float32,int64")(x, i)
    _check(got, (np.take(x, i, axis=0, mode="wrap"), np.take(x, np.maximum(i, 0), axis=1, mode="clip")))


@pytest.mark.slow
@pytest.mark.parametrize("op", GATHER_OPS, ids=lambda o: o.name)
def test_reference_ops(op):
    # (by default: take, take_along_axis, argmax, cumulative_sum fused with reductions in
    # ``many``, cross_entropy through XLA in test_jax_bridge)
    if op.name in ("cross_entropy", "accuracy"):
        args = (_rng.standard_normal((6, 9)).astype(np.float32), _rng.integers(0, 9, 6))
    elif op.name == "embedding_layer_norm":
        args = (_rng.standard_normal((10, 8)).astype(np.float32), _rng.integers(-10, 10, (2, 3)),
                _rng.standard_normal(8).astype(np.float32), _rng.standard_normal(8).astype(np.float32))
    else:
        args = (_rng.standard_normal((5, 7)).astype(np.float32),)
    dtypes = ",".join(np.dtype(a.dtype).name for a in args)
    k = fg.compile(op, backend="aot", dtypes=dtypes)
    got = k(*args)
    want = fg.compile(op)(*args)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    if op.name == "cross_entropy":       # the check inside a reduction's loop: Numba's exception and text
        bad = np.where(args[1] == args[1][0], 9, args[1])
        with pytest.raises(fg.BoundsError, match=r"take_along_axis: index 9 is out of bounds for axis 1 with size 9") as e:
            k(args[0], bad)
        with pytest.raises(fg.BoundsError) as numba_err:
            fg.compile(op)(args[0], bad)
        assert str(e.value) == str(numba_err.value)


def test_infer_shape_with_unknown_dims(aot):
    shapes = [(4, 3, 5), (2, 3), (4, 3, 2), (2, 3, 5), (6,)]
    for variant in dynamic_variants(shapes):
        try:
            spec = fg.infer(many, DT.split(","), [None if s == (-2,) else s for s in variant], {})
        except fg.FusegenError:
            with pytest.raises(fg.KernelError):
                _infer_shape(aot, variant)
            continue
        want = [(-2,) if s is None else tuple(s) for s in spec.out_shapes]
        assert _infer_shape(aot, variant) == want, variant


def test_generated_text():
    """The gathered read: the checked index times the axis's stride added to the address, the
    bad-index count in the loop, the error record after it."""
    src = fg.emit(modes, dtypes="float32,int64").source + fg.emit(GATHER_OPS[0], dtypes="float32,int64").source
    # (no reshape: a plain strided read, no per-element modular test)
    assert re.search(r"\(p\d+ \+ tg\d+_\d+ \* gs\[0\]\)\[c\[\d+\] \+ i \* B\.istr\[\d+\]\]", src)
    assert "fg::at(" not in src.split("namespace k_")[1]
    assert "fg::gather_rule(" in src and "fg::views::gather_stride(" in src
    # the flag OR-accumulated per lane (no branch in the loop), one bad value kept per lane
    assert re.search(r"gb0\[l\] \|= tg\d+_\d+b;", src) and "gfail.fail(0, o, gv0[l]);" in src
    assert "return fg::gather_error(kGatherWhere[g.which - 1]" in src
    assert any(v.startswith("FG_ERR_GATHER: ") for v in fg.emit(modes, dtypes="float32,int64").error_table.values())


@fg.op
def on_gpu(x, i, j):
    # x (R, C), i (n,) indices on either axis, j (R, 1): a checked gather in an elementwise and in a
    # reduction kernel, and both unchecked modes
    return (x[:, i] * 2, fg.sum(fg.take_along_axis(x, j, axis=1), axis=-1), fg.take(x, i, axis=1, mode="wrap"),
            fg.take(x, i, axis=0, mode="clip"))


GPU_DT = "float32,int64,int32"


@pytest.mark.parametrize("abi", ["mindspore-aot", "xla-ffi"])
def test_cuda_source_checks_indices_on_the_device(abi):
    """The emitted .cu: the C++'s index arithmetic in the kernels; a bad index goes to a device
    record (atomicMin on its position: no second pass), read back after the one stream sync that
    a call of an op with mode="raise" gathers makes; the error text is the C++'s."""
    e = fg.emit(on_gpu, abi=abi, device="cuda", dtypes=GPU_DT)
    src = e.source
    assert len(re.findall(r"__global__ void stage\d+_v0\(.*, const Gathers\d+ G, GatherRecord \*R, int64_t pos0\)",
                          src)) >= 2
    # the address is the clamped index times the axis stride; the flag and raw value feed the record
    assert re.search(r"const auto (tg\d+_\d+) = std::min\(std::max\(tg\d+_\d+a, int64_t\(0\)\), gn\d+ - 1\);", src)
    assert re.search(r"fg::at\(\(p\d+ \+ tg\d+_\d+ \* gs\[0\]\)", src)
    assert re.search(r"if \((tg\d+_\d+)b\) gather_fail\(R, \d+, pos0 \+ t, \d, \1r\);", src)      # elementwise
    assert re.search(r"gb0 \+= tg\d+_\d+b;\n\s+gv0 = .*\n(.*\n){2}\s+if \(gb0 != 0\) gather_fail\(R, \d+, pos0 \+ o, 1, gv0\);",
                     src)                                                                             # reduction
    assert "std::min(std::max(int64_t(" in src and re.search(r"% int64_t\(gn\d+\)", src)          # clip, wrap
    assert "if (atomicMin(&r->key, key) <= key) return;" in src
    assert src.count("cudaStreamSynchronize(stream)") == 1 and "return with_gather_record(s, stream, [&]" in src
    assert "return fg::gather_error(kGatherWhere[check], static_cast<int64_t>(got.value), s.prm[node].v[0]" in src
    assert "if (code == fg::FG_ERR_GATHER && !fg::gather_message().empty()) return fg::gather_message().c_str();" in src
    assert any(v.startswith("FG_ERR_GATHER: ") for v in e.error_table.values())
    # clip and wrap alone: no record, no sync (the CUDA stream stays asynchronous)
    quiet = fg.emit(modes, abi=abi, device="cuda", dtypes="float32,int64").source
    assert "with_gather_record" not in quiet and "cudaStreamSynchronize" not in quiet and "gather_fail(" not in quiet
    assert "struct GatherRecord;" in quiet and ", nullptr));" in quiet


#: The emitted .cu for the architectures at both ends of the supported range.
GPU_FLAGS = ["--shared", "-Xcompiler", "-fPIC", "-O3", "--expt-relaxed-constexpr", "-D_GLIBCXX_USE_CXX11_ABI=0",
             "-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_90,code=sm_90"]


@needs_nvcc
def test_cuda_gathers_build_with_nvcc(monkeypatch):
    """The MindSpore-AOT .cu builds for sm_75 and sm_90. Without a GPU, the call's host glue runs
    up to its first CUDA call (the record's allocation), which fails for real: FG_ERR_CUDA naming
    the CUDA error."""
    k = fg.compile(on_gpu, backend="aot", device="cuda", dtypes=GPU_DT, flags=GPU_FLAGS)
    assert k.lib_path.is_file()
    if SIMULATOR or gpu_present():
        return
    import fusegen.native.aot_cuda as aot_cuda
    from fusegen.abi_emit import ERROR_CODES
    aot = fg.AotKernel(k.func, flags=GPU_FLAGS, n_outputs=4)
    monkeypatch.setattr(aot_cuda, "require_device", lambda kernel: None)  # no GPU: drive the host code only
    signature, arrays = aot.prepare(np.ones((3, 4), np.float32), np.array([0, 9]), np.zeros((3, 1), np.int32))
    for n, a in enumerate([*arrays, *(np.empty(s, d) for s, d in signature.outputs)]):
        signature.params[n] = a.ctypes.data
    status = aot._call_main(signature.block_address)
    error = aot._kernel_error(aot.function, status, signature.block.result, signature.block.error)
    assert error.code == ERROR_CODES["FG_ERR_CUDA"], str(error)
    assert re.search(r"FG_ERR_CUDA: .*: cudaError\w+ \(", str(error)), str(error)


@needs_nvcc
@pytest.mark.extended
def test_cuda_gathers_xla_handler_builds_with_nvcc(tmp_path):
    from fusegen.native import build
    jax = pytest.importorskip("jax", reason='needs jax: pip install -e ".[jax]"')
    e = fg.emit(on_gpu, abi="xla-ffi", device="cuda", dtypes=GPU_DT)
    e.write(tmp_path)
    flags = ["-std=c++17", *GPU_FLAGS[:5], "-gencode", "arch=compute_90,code=sm_90", "-isystem", jax.ffi.include_dir()]
    assert "OnGpu_float32_int64_int32" in build.dynamic_symbols(build.build_library(tmp_path / e.main, flags=flags))


def test_jax_bridge():
    jax = pytest.importorskip("jax", reason='needs jax: pip install -e ".[jax]"')
    import fusegen.jax as fj
    z = _rng.standard_normal((6, 9)).astype(np.float32)
    labels = _rng.integers(0, 9, 6).astype(np.int32)
    f = fj.function(GATHER_OPS[0], dtypes="float32,int32")
    got = f(jax.numpy.asarray(z), jax.numpy.asarray(labels))
    lse = np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1)) + z.max(-1)
    np.testing.assert_allclose(np.asarray(got), np.mean(lse - z[np.arange(6), labels]), rtol=1e-5)
    bad = labels.copy()
    bad[2] = -10                         # the check inside the reduction's loop
    with pytest.raises(fg.BoundsError) as err:
        f(jax.numpy.asarray(z), jax.numpy.asarray(bad))
    assert str(err.value) == _message(GATHER_OPS[0], "take_along_axis", 0, -10, 1, 9)
    assert isinstance(err.value, IndexError)
