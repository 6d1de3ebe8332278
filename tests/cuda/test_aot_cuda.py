"""``backend="aot", device="cuda"`` and ``AotKernel``'s device-memory path, against NumPy.

On a GPU (``FUSEGEN_CUDA_TESTS=1``) every test runs the emitted ``.cu``, built with nvcc. Under
the simulator, whose "device" arrays are host memory, the same tests run the op's emitted C++
source through the same device path (``fg.compile(op, backend="aot", device="cuda", emit_device="cpu")``): what is tested
there is everything but the device code itself (memory placement, copies, ``out=``, streams,
workspaces, write requests, guard fences, errors); the ``.cu`` is compiled by nvcc in the default
run (tests/test_cuda_codegen.py) and its PTX assembled by ptxas.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import fusegen as fg
import fusegen.examples as ex
from fusegen.errors import ArgumentError, KernelError, ShapeError

from conftest import SIMULATOR

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import test_aot_backend as aot  # noqa: E402  (cases, inputs and NumPy references of the C++ backend)

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

_KERNELS: dict = {}


def compiled(op):
    """The op's AOT CUDA kernel: the emitted .cu on a GPU, its C++ twin on simulated device memory."""
    if op not in _KERNELS:
        dtypes = list(aot.dtypes_of(op.name)) if op.name in aot.OPS else None
        _KERNELS[op] = fg.compile(op, backend="aot", device="cuda", dtypes=dtypes,
                                  emit_device="cpu" if SIMULATOR else "cuda")
    return _KERNELS[op]


def on_device(*arrays):
    from numba import cuda
    return [cuda.to_device(a) for a in arrays]


def host(a):
    return a.copy_to_host() if hasattr(a, "copy_to_host") else a


# --- numerics: the C++ backend's case table, host and device arrays --------------------------------
CASES = [pytest.param(n, c, id=f"{n}-{aot.case_id(c)}") for n in aot.OPS for c in aot.CASES[n]
         if max((int(np.prod(s)) for s in c[0]), default=1) <= 20_000]  # the big ones test CPU threading


@pytest.mark.parametrize("name,case", CASES)
def test_matches_numpy_from_host_arrays(name, case, rng):
    shapes, attrs = case
    k = compiled(aot.OPS[name])
    for combo in aot.dtypes_of(name):
        dtype = combo if isinstance(combo, str) else combo[0]
        arrays = aot.make_inputs(name, shapes, dtype, rng)
        got = k(*arrays, **attrs)
        assert all(isinstance(g, np.ndarray) for g in (got if isinstance(got, tuple) else (got,)))
        aot.check(got, aot.reference(name, arrays, attrs), f"{name} {dtype}",
                  **aot.summation_tol(name, arrays, attrs))


@pytest.mark.parametrize("name", list(aot.OPS))
def test_device_arrays_in_device_arrays_out(name, rng):
    from fusegen.native.device import is_device_array
    shapes, attrs = aot.CASES[name][min(1, len(aot.CASES[name]) - 1)]
    arrays = aot.make_inputs(name, shapes, "float32", rng)
    got = compiled(aot.OPS[name])(*on_device(*arrays), **attrs)
    outs = got if isinstance(got, tuple) else (got,)
    assert all(is_device_array(o) for o in outs)
    want = aot.reference(name, arrays, attrs)
    aot.check(tuple(map(host, outs)) if isinstance(got, tuple) else host(got), want, name,
              **aot.summation_tol(name, arrays, attrs))


def test_mixed_host_and_device_inputs_give_device_outputs(rng):
    x, y = rng.standard_normal((2, 5, 6)).astype(np.float32)
    got = compiled(ex.add_mul_div)(on_device(x)[0], y)
    assert all(hasattr(g, "copy_to_host") for g in got)
    aot.check(tuple(g.copy_to_host() for g in got), aot.reference("add_mul_div", [x, y], {}), "add_mul_div")


# --- out=, streams, write requests ------------------------------------------------------------------
def test_out_host_and_device(rng):
    x = rng.standard_normal((4, 9)).astype(np.float32)
    want = aot.reference("softmax", [x], {})
    k = compiled(ex.softmax)
    o = np.full((4, 9), np.nan, np.float32)
    assert k(x, out=o) is o
    np.testing.assert_allclose(o, want, rtol=1e-6)
    (dx,), (do,) = on_device(x), on_device(np.zeros((4, 9), np.float32))
    assert k(dx, out=do) is do
    np.testing.assert_allclose(do.copy_to_host(), want, rtol=1e-6)
    ln = compiled(ex.layer_norm)
    outs = on_device(np.zeros((4, 9), np.float32), np.zeros((4, 1), np.float32), np.zeros((4, 1), np.float32))
    got = ln(dx, out=tuple(outs))
    assert all(g is o for g, o in zip(got, outs))
    aot.check(tuple(o.copy_to_host() for o in outs), aot.reference("layer_norm", [x], {}), "layer_norm")


def test_out_errors_are_refused_before_the_launch(rng):
    x = rng.standard_normal((4, 9)).astype(np.float32)
    k = compiled(ex.softmax)
    (dx,) = on_device(x)
    with pytest.raises(ArgumentError, match="wrong device"):
        k(dx, out=np.zeros((4, 9), np.float32))
    with pytest.raises(ArgumentError, match="wrong device"):
        k(x, out=on_device(np.zeros((4, 9), np.float32))[0])
    with pytest.raises(ShapeError, match=r"out\[0\] must have shape \(4, 9\)"):
        k(x, out=np.zeros((4, 8), np.float32))
    with pytest.raises(ShapeError, match="dtype float32"):
        k(x, out=np.zeros((4, 9), np.float64))
    ro = np.zeros((4, 9), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ArgumentError, match="read-only"):
        k(x, out=ro)
    assert not ro.any()


def test_streams(rng):
    from numba import cuda
    x, y = rng.standard_normal((2, 3, 7)).astype(np.float32)
    want = aot.reference("add_reduce_sum", [x, y], dict(axis=1))
    k = compiled(ex.add_reduce_sum)
    dx, dy = on_device(x, y)

    class CupyLikeStream:
        ptr = 0

    # (the simulator has no external streams: int handles and foreign stream objects need a GPU)
    for stream in (cuda.stream(), cuda.default_stream()) + (() if SIMULATOR else (0, CupyLikeStream())):
        got = k(dx, dy, axis=1, stream=stream)
        cuda.synchronize()
        np.testing.assert_allclose(got.copy_to_host(), want, rtol=1e-5)
    np.testing.assert_allclose(k(x, y, axis=1, stream=cuda.stream()), want, rtol=1e-5)
    for bad in ("stream", 1.5, True):
        with pytest.raises(ArgumentError, match="stream must be"):
            k(dx, dy, axis=1, stream=bad)


def test_write_requests_on_device(rng):
    x = rng.standard_normal((5, 6)).astype(np.float32)
    want = aot.reference("softmax", [x], {})
    k = compiled(ex.softmax)
    (dx,), (acc,) = on_device(x), on_device(np.ones((5, 6), np.float32))
    k(dx, out=acc, accumulate=True)
    np.testing.assert_allclose(acc.copy_to_host(), 1 + want, rtol=1e-6)
    y, mean, rstd = compiled(ex.layer_norm)(*on_device(x), skip=[0, 2])
    assert y is None and rstd is None
    # (float32's tolerance, tests/conftest.py: a GPU sums in another order than NumPy; 1.1e-5 seen on an H200)
    np.testing.assert_allclose(mean.copy_to_host(), x.mean(-1, keepdims=True), rtol=2e-5, atol=1e-6)


def test_attributes_and_workspaces(rng):
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    k = compiled(ex.softmax)
    for axis in (0, 1, -1):
        np.testing.assert_allclose(k(*on_device(x), axis=axis).copy_to_host(),
                                   aot.reference("softmax", [x], dict(axis=axis)), rtol=1e-5)
    from fusegen.native.buffers import DeviceBuffer
    call = next(v for v in k._calls.values())
    kernel, signature = call.kernel, call.signature
    held = [w for w, _ in signature.keep[4]]
    assert held and all(isinstance(w, DeviceBuffer) for w in held)
    assert [w.nbytes for w in held] == signature.workspace_sizes


# --- bad input ----------------------------------------------------------------------------------------
def test_non_contiguous_device_input_is_refused(rng):
    x = rng.standard_normal((6, 8)).astype(np.float32)
    (dx,) = on_device(x)
    with pytest.raises(ArgumentError, match="non-contiguous device array"):
        compiled(ex.softmax)(dx[:, ::2])


def test_wrong_dtype_rank_and_attribute_name_the_op(rng):
    k = compiled(ex.add_reduce_sum)
    x = on_device(np.ones((3, 4), np.float32))[0]
    with pytest.raises(fg.DTypeError, match="add_reduce_sum"):
        k(x, on_device(np.zeros((3, 4), "m8[s]"))[0])   # (complex64 is a fusegen dtype: tests/test_complex.py)
    with pytest.raises(fg.ShapeError, match="add_reduce_sum"):
        k(x, on_device(np.ones((3, 5), np.float32))[0])
    with pytest.raises(fg.ShapeError, match="axis"):
        k(x, x, axis=2)
    with pytest.raises(fg.AttrError, match="axis"):
        k(x, x, axis="0")


# --- hand-written kernels through AotKernel -----------------------------------------------------------
# On a GPU these are .cu kernels; under the simulator the same bodies are built as C++ (device
# pointers are host pointers there). The body writes out[i] = 2 * in[i] (+ one past the end when
# asked) and uses a workspace the Init asks for.
_BODY = r"""
#include <cstdint>
#include <cstring>
#include <vector>
#include "custom_aot_extra.h"
{cuda_head}
extern "C" int TwiceInit(int *, int64_t **shapes, const char **, AotExtra *extra) {{
  extra->SetWorkSpace(std::vector<size_t>{{16}});
  return 0;
}}
extern "C" const char *TwiceErrorString(int code) {{ return code == 7 ? "negative overrun" : nullptr; }}
extern "C" int Twice(int nparam, void **params, int *ndims, int64_t **shapes, const char **, void *stream,
                     void *extra) {{
  if (nparam != 3) return 1;
  const int64_t n = shapes[0][0];
  const int64_t overrun = static_cast<AotExtra *>(extra)->Attr<int64_t>("overrun");
  if (overrun < 0) return 7;
  {launch}
  return 0;
}}
"""
_CPU = dict(cuda_head="", launch="float *in = (float *)params[0], *out = (float *)params[1];\n"
            "  for (int64_t i = 0; i < n + overrun; ++i) out[i] = 2 * in[i % n];")
_CUDA = dict(cuda_head="__global__ void twice(const float *in, float *out, int64_t n, int64_t m) {\n"
             "  for (int64_t i = threadIdx.x; i < m; i += blockDim.x) out[i] = 2 * in[i % n];\n}",
             launch="twice<<<1, 128, 0, (cudaStream_t)stream>>>((const float *)params[0], (float *)params[1],"
             " n, n + overrun);\n  if (cudaGetLastError() != cudaSuccess) return 2;")


@pytest.fixture(scope="module")
def twice_source(tmp_path_factory):
    from fusegen.native.build import HEADER_PATH
    d = tmp_path_factory.mktemp("twice")
    (d / "custom_aot_extra.h").write_text(HEADER_PATH.read_text())
    path = d / ("twice.cc" if SIMULATOR else "twice.cu")
    path.write_text(_BODY.format(**(_CPU if SIMULATOR else _CUDA)))
    return path


def test_aot_kernel_on_device_memory(twice_source):
    k = fg.AotKernel(f"{twice_source}:Twice", attrs=dict(overrun=0), out_shape=lambda s: s,
                     device="cuda" if SIMULATOR else None)
    assert k.device == "cuda" and k.cuda_code is not SIMULATOR
    x = np.arange(300, dtype=np.float32)
    np.testing.assert_array_equal(k(x), 2 * x)
    np.testing.assert_array_equal(k(*on_device(x)).copy_to_host(), 2 * x)
    assert k.workspace_sizes(x) == [16]


def test_aot_kernel_error_code_and_guard_on_device(twice_source):
    x = np.arange(64, dtype=np.float32)
    bad = fg.AotKernel(f"{twice_source}:Twice", attrs=dict(overrun=-1), out_shape=lambda s: s,
                       device="cuda" if SIMULATOR else None)
    with pytest.raises(KernelError, match="returned error code 7: negative overrun"):
        bad(*on_device(x))
    over = fg.AotKernel(f"{twice_source}:Twice", attrs=dict(overrun=3), out_shape=lambda s: s,
                        device="cuda" if SIMULATOR else None, guard=True)
    with pytest.raises(KernelError, match=r"output 0: wrote 12 byte\(s\) past its end"):
        over(*on_device(x))
    (dx,), (o,) = on_device(x), on_device(np.zeros(64, np.float32))
    with pytest.raises(KernelError, match="out of bounds"):
        over(dx, out=o)
    assert not o.copy_to_host().any()  # the caller's arrays are only written by a good call
    ok = fg.AotKernel(f"{twice_source}:Twice", attrs=dict(overrun=0), out_shape=lambda s: s,
                      device="cuda" if SIMULATOR else None, guard=True)
    assert ok(dx, out=o) is o
    np.testing.assert_array_equal(o.copy_to_host(), 2 * x)
    np.testing.assert_array_equal(ok(x), 2 * x)


@pytest.mark.skipif(not SIMULATOR, reason="the simulator's refusal of native CUDA code")
def test_native_cuda_library_under_the_simulator_is_a_clear_error():
    from fusegen.native.device import CudaUnavailableError
    k = fg.compile(ex.add_mul_div, backend="aot", device="cuda", dtypes="float32")
    with pytest.raises(CudaUnavailableError, match="needs a real GPU"):
        k(np.ones(3, np.float32), np.ones(3, np.float32))


def test_engine_runs_aot_cuda_kernels_on_streams(rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    dx, d1, d2 = on_device(x, np.zeros_like(x), np.zeros((1, 6), np.float32))
    with fg.Engine(workers=2) as engine:
        engine.push(compiled(ex.softmax), [dx], [d1])
        engine.push(compiled(ex.add_reduce_sum), [d1, dx], [d2], axis=0, keep_dims=True)  # ordered after
        engine.wait_all()
    soft = aot.reference("softmax", [x], {})
    want = aot.reference("add_reduce_sum", [soft, x], dict(axis=0, keep_dims=True))
    np.testing.assert_allclose(d2.copy_to_host(), want, rtol=1e-5, atol=1e-6)


# --- layout ops (views, pieces, iotas) ------------------------------------------------------------
@pytest.mark.skipif(not SIMULATOR, reason="runs the C++ twin on simulated device memory: needs NUMBA_ENABLE_CUDASIM=1 "
                    "(the emitted .cu layout path is compiled by nvcc in tests/test_layout_backends.py)")
def test_layout_ops_on_simulated_device_memory():
    """x + y.T, a concat of slices (RoPE's rotation) and a causal mask: the C++ twin on device arrays."""
    op = fg.op(lambda x, y: (x + y.T, fg.concat([-x[..., 2:], x[..., :2]], axis=-1),
                             fg.where(fg.arange(4)[None, :] <= fg.arange(5)[:, None], x, 0.0)), name="layout_sim")
    k = fg.compile(op, backend="aot", device="cuda", dtypes="float32", emit_device="cpu")
    x, y = np.arange(20, dtype=np.float32).reshape(5, 4), np.ones((4, 5), np.float32)
    got = [host(a) for a in k(*on_device(x, y))]
    np.testing.assert_array_equal(got[0], x + y.T)
    np.testing.assert_array_equal(got[1], np.concatenate([-x[:, 2:], x[:, :2]], axis=-1))
    np.testing.assert_array_equal(got[2], np.where(np.tril(np.ones((5, 4), bool)), x, 0))
