"""Numeric checks of the numba-cuda backend against NumPy: the CPU backends' tables
(``tests/test_numeric_cpu.py``) run through ``fg.compile(op, device="cuda")``, on small shapes and
small blocks (the simulator runs every thread as a Python thread). Plus the CUDA-only paths:
block/thread modes, split reductions, device arrays, streams and the error paths.
"""
from __future__ import annotations

import re

import sys
from pathlib import Path

import numpy as np
import pytest

import fusegen as fg
import fusegen.examples as ex
from fusegen.errors import ArgumentError, ShapeError

from conftest import assert_all_close, assert_close, np_ref, sample

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import test_numeric_cpu as cpu  # noqa: E402  (the shared tables and NumPy references)

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore:.*Grid size.*",
                                        "ignore::numba.core.errors.NumbaPerformanceWarning")

_KERNELS: dict = {}


def cuda_kernel(op, **options):
    """One CudaKernel per (op, options): signatures are cached on it across tests."""
    key = (id(op), tuple(sorted(options.items())))
    if key not in _KERNELS:
        _KERNELS[key] = fg.compile(op, backend="numba", device="cuda", **options)
    return _KERNELS[key]


# --- elementwise --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int8", "uint8", "bool"])
def test_unary_ops(dtype):
    rows = cpu.unary_rows(dtype)
    with np.errstate(all="ignore"):
        x = np.array(cpu.UNARY_VALUES[np.dtype(dtype).kind]).astype(dtype).reshape(3, 5)
    got = cuda_kernel(cpu.unary_op(tuple(n for n, _, _ in rows)))(x)
    assert len(got) == len(rows)
    for (name, _, ref), g in zip(rows, got):
        assert_close(g, np_ref(ref, x), what=f"{name}({dtype})")


@pytest.mark.parametrize("da, db", [("float32", "float32"), ("float16", "float16"), ("int32", "int64"),
                                    ("uint8", "int8"), ("int16", "float32"), ("bool", "bool")])
def test_binary_ops_with_broadcasting(da, db):
    x, y = cpu._binary_operands(da, db)
    rows = [(n, f, r) for n, f, r in cpu.BINARY if cpu._numpy_defines(lambda a, r=r: r(a, np.ones(1, db)), da)]
    got = cuda_kernel(cpu.binary_op(rows))(x, y)
    for (name, _, ref), g in zip(rows, got):
        assert_close(g, np_ref(ref, x, y), what=f"{name}({da}, {db})")


def test_logical_ops_on_bool():
    x, y = cpu._binary_operands("bool", "bool")
    got = cuda_kernel(cpu.binary_op(cpu.LOGICAL))(x, y)
    assert_all_close(got, (np.logical_and(x, y), np.logical_or(x, y)))


@pytest.mark.parametrize("dtype", ["int8", "float16", "float32"])
def test_python_scalars_and_scalar_attributes(dtype, rng):
    x = sample(rng, (2, 3), dtype, lo=-4, hi=5)
    k = cuda_kernel(cpu.scalar_mix)
    for f, i in ((0.5, 3), (1.25, 2)):
        assert_all_close(k(x, f=f, i=i), np_ref(cpu.scalar_mix_ref, x, f, i), what=f"{dtype} f={f} i={i}")


@pytest.mark.parametrize("dc, dx, dy", [("bool", "float32", "float32"), ("int8", "int16", "float16")])
def test_where_and_astype(dc, dx, dy, rng):
    c, x, y = sample(rng, (3, 4), dc, lo=-1, hi=1), sample(rng, (3, 4), dx, lo=-5, hi=5), sample(rng, (4,), dy)
    assert_all_close(cuda_kernel(cpu.select_cast)(c, x, y), np_ref(cpu.select_cast_ref, c, x, y))


@pytest.mark.parametrize("sx, sy", [((), ()), ((5,), ()), ((2, 1, 3, 1), (5, 1, 1)), ((0, 3), (3,))])
def test_broadcasting_ranks_and_sizes(sx, sy, rng):
    x, y = sample(rng, sx, "float32"), sample(rng, sy, "float32")
    assert_all_close(cuda_kernel(cpu.bcast)(x, y), np_ref(cpu.bcast_ref, x, y), what=f"{sx} {sy}")


def test_non_contiguous_numpy_inputs_are_copied(rng):
    base = sample(rng, (6, 8), "float32")
    xt, ys = base[:4, :6].T, sample(rng, (12, 9), "float32")[::2, 1::2][:, :4]
    assert_all_close(cuda_kernel(cpu.bcast)(xt, ys), np_ref(cpu.bcast_ref, xt, ys))


# --- reductions ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "bool", "float64"])
@pytest.mark.parametrize("axes, keep", [([0, 2], False), ([0], True), ([2], False)])  # block, thread, block
def test_reductions(dtype, axes, keep, rng):
    x = sample(rng, (3, 4, 5), dtype, lo=-1.5, hi=1.5) if dtype[0] == "f" else sample(rng, (3, 4, 5), dtype)
    assert_all_close(cuda_kernel(cpu.reduce_attr)(x, axes=axes, keep=keep), cpu.reduce_ref(x, tuple(axes), keep),
                     what=f"{dtype} {axes}")


@pytest.mark.parametrize("axis, keep", [(None, False), ((-2, -1), True), ((0, 1, 2), False), (1, True)])
def test_reduction_axis_forms(axis, keep, rng):
    x = sample(rng, (2, 3, 4), "float32", lo=-1.5, hi=1.5)
    assert_all_close(cuda_kernel(cpu.reduce_const(axis, keep))(x), cpu.reduce_ref(x, axis, keep))


@pytest.mark.parametrize("shape, axis", [((3, 0), 1), ((0, 4), 0), ((2, 0, 3), None)])
def test_reductions_over_size_0_dims(shape, axis):
    x = np.ones(shape, np.float32)
    kinds = [r for r in cpu.REDUCTIONS if r[0] in cpu.SUM_MEAN_PROD]
    got = cuda_kernel(cpu.reduce_const(axis, False, cpu.SUM_MEAN_PROD))(x)
    assert_all_close(got, cpu.reduce_ref(x, axis, False, kinds), what=f"{shape} {axis}")


@pytest.mark.parametrize("axis", [1, 0])
def test_nan_propagates_through_max_and_min(axis):
    x = np.arange(20, dtype=np.float32).reshape(4, 5) - 7
    x[0, 0] = x[1, 2] = x[3, 4] = np.nan
    assert_all_close(cuda_kernel(cpu.reduce_const(axis, False))(x), cpu.reduce_ref(x, axis, False))


@pytest.mark.parametrize("shape, axis", [((3, 70), 1), ((70, 3), 0), ((200,), 0), ((2, 40, 3), (0, 1))])
@pytest.mark.parametrize("split", [None, 3, 7])
def test_split_reductions(shape, axis, split, rng):
    """Two-stage reductions: partial accumulators in a workspace, then a combine kernel."""
    x = sample(rng, shape, "float32", lo=-1.5, hi=1.5)
    got = cuda_kernel(cpu.reduce_const(axis, False), split=split)(x)
    assert_all_close(got, cpu.reduce_ref(x, axis, False), what=f"{shape} {axis} split={split}")


def test_long_rows_use_several_block_iterations(rng):
    """More rows than blocks and rows longer than a block: grid- and block-stride loops."""
    x = sample(rng, (9, 37), "float32")
    k = cuda_kernel(ex.softmax, threads=8, max_blocks=2)
    assert_close(k(x), np_ref(cpu._softmax, x, -1))
    # (8 threads under the simulator; a GPU's block is at least a warp, 32)
    assert re.search(r"one block of (8|32) threads per output row", k.source)


# --- the reference ops --------------------------------------------------------------------------
@pytest.mark.parametrize("shape, axis, keep", [((5,), 0, False), ((3, 4), 1, True), ((3, 4), 0, False),
                                               ((2, 3, 4), 1, False), ((2, 3, 2, 3), -1, True)])
def test_add_reduce_sum(shape, axis, keep, rng):
    x, y = sample(rng, shape, "float32"), sample(rng, shape, "float32")
    got = cuda_kernel(ex.add_reduce_sum)(x, y, axis=axis, keep_dims=keep)
    assert_close(got, np_ref(lambda a, b: np.sum(a + b, axis=axis, keepdims=keep), x, y))


@pytest.mark.parametrize("dx, dy, sy", [("float32", "float32", (3, 4)), ("int32", "int32", (4,)),
                                        ("float16", "float16", (1, 4))])
def test_add_mul_div(dx, dy, sy, rng):
    x, y = sample(rng, (3, 4), dx), sample(rng, sy, dy, lo=1, hi=4)
    assert_all_close(cuda_kernel(ex.add_mul_div)(x, y), np_ref(lambda a, b: (a + b, a * b, a / b), x, y))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_smooth_l1(dtype, rng):
    x, y = sample(rng, (4, 6), dtype), sample(rng, (4, 6), dtype)
    assert_close(cuda_kernel(ex.smooth_l1)(x, y, sigma=0.5), np_ref(cpu._smooth_l1, x, y, 0.5))


@pytest.mark.parametrize("shape, axis, dtype", [((2, 3, 4), a, "float32") for a in (0, 1, -1)]
                         + [((3, 5), -1, "float16"), ((3, 5), 0, "float16"), ((7,), 0, "float64")])
def test_softmax_every_axis(shape, axis, dtype, rng):
    x = sample(rng, shape, dtype, lo=-4, hi=4)
    assert_close(cuda_kernel(ex.softmax)(x, axis=axis), np_ref(cpu._softmax, x, axis))


@pytest.mark.parametrize("shape, axis, dtype", [((3, 4, 5), 1, "float32"), ((3, 4, 5), -1, "float32"),
                                                ((4, 8), -1, "float16"), ((4, 8), 0, "float64")])
def test_layer_norm(shape, axis, dtype, rng):
    x = sample(rng, shape, dtype, lo=-2, hi=3)
    k = cuda_kernel(ex.layer_norm)
    assert_all_close(k(x, axis=axis), np_ref(cpu._layer_norm, x, axis, 1e-5))
    assert_all_close(k(x, axis=axis, eps=0.5), np_ref(cpu._layer_norm, x, axis, 0.5))


@pytest.mark.parametrize("sx, dtype", [((4, 8), "float32"), ((2, 3, 8), "float16")])
def test_rms_norm(sx, dtype, rng):
    x, w = sample(rng, sx, dtype), sample(rng, (sx[-1],), dtype)
    assert_close(cuda_kernel(ex.rms_norm)(x, w), np_ref(cpu._rms_norm, x, w, 1e-6))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_bias_gelu(dtype, rng):
    x, b = sample(rng, (4, 8), dtype), sample(rng, (8,), dtype)
    assert_close(cuda_kernel(ex.bias_gelu)(x, b), np_ref(cpu._bias_gelu, x, b))


# --- device arrays, streams, out= ---------------------------------------------------------------
def test_device_arrays_in_device_arrays_out(rng):
    from numba import cuda
    x = sample(rng, (3, 5), "float32")
    stream = cuda.stream()
    dx = cuda.to_device(x, stream=stream)
    got = cuda_kernel(ex.softmax)(dx, stream=stream)
    assert hasattr(got, "copy_to_host") and got.shape == (3, 5)  # stayed on the device
    host = got.copy_to_host(stream=stream)
    stream.synchronize()
    assert_close(host, np_ref(cpu._softmax, x, -1))


def test_mixed_host_and_device_inputs_give_device_outputs(rng):
    from numba import cuda
    x, y = sample(rng, (3, 4), "float32"), sample(rng, (3, 4), "float32", lo=1, hi=3)
    outs = cuda_kernel(ex.add_mul_div)(cuda.to_device(x), y)
    assert all(hasattr(o, "copy_to_host") for o in outs)
    assert_all_close(tuple(o.copy_to_host() for o in outs), np_ref(lambda a, b: (a + b, a * b, a / b), x, y))


@pytest.mark.parametrize("shape", [(0,), (0, 1, 2), (3, 0)])
def test_empty_device_arrays_are_contiguous(shape, rng):
    """Regression (differential fuzzing): a size-0 device array was refused as non-contiguous
    (the simulator gives it all-zero strides; CuPy's x[:0, ::2] has any strides)."""
    from numba import cuda
    x, y = np.zeros(shape, np.float32), sample(rng, shape[-1:], "float32", lo=1, hi=3)
    outs = cuda_kernel(ex.add_mul_div)(cuda.to_device(x), y)
    assert_all_close(tuple(o.copy_to_host() for o in outs), np_ref(lambda a, b: (a + b, a * b, a / b), x, y))
    got = cuda_kernel(ex.add_reduce_sum)(cuda.to_device(x), cuda.to_device(x), axis=-1)
    assert_close(got.copy_to_host(), np.sum(x + x, axis=-1))


def test_out_arrays_host_and_device(rng):
    from numba import cuda
    x, y = sample(rng, (3, 4), "float32"), sample(rng, (3, 4), "float32")
    out = np.empty(3, np.float32)
    res = cuda_kernel(ex.add_reduce_sum)(x, y, out=out)
    assert res is out
    assert_close(out, np.sum(x + y, axis=1))
    dout = cuda.device_array(3, np.float32)
    res = cuda_kernel(ex.add_reduce_sum)(cuda.to_device(x), cuda.to_device(y), out=dout)
    assert_close(dout.copy_to_host(), np.sum(x + y, axis=1))


# --- error paths --------------------------------------------------------------------------------
def test_stream_of_the_wrong_type_is_refused(rng):
    x = sample(rng, (2, 3), "float32")
    with pytest.raises(ArgumentError, match="stream must be"):
        cuda_kernel(ex.softmax)(x, stream="default")
    with pytest.raises(ArgumentError, match="stream must be"):
        cuda_kernel(ex.softmax)(x, stream=1.5)


def test_non_contiguous_device_arrays_are_refused(rng):
    from numba import cuda
    d = cuda.to_device(sample(rng, (4, 6), "float32"))[:, ::2]
    with pytest.raises(ArgumentError, match="non-contiguous device array"):
        cuda_kernel(ex.softmax)(d)


def test_out_on_the_wrong_device_is_refused(rng):
    from numba import cuda
    x = sample(rng, (3, 4), "float32")
    with pytest.raises(ArgumentError, match="wrong device"):
        cuda_kernel(ex.add_reduce_sum)(x, x, out=cuda.device_array(3, np.float32))
    with pytest.raises(ArgumentError, match="wrong device"):
        cuda_kernel(ex.add_reduce_sum)(cuda.to_device(x), x, out=np.empty(3, np.float32))
    with pytest.raises(ShapeError):
        cuda_kernel(ex.add_reduce_sum)(x, x, out=np.empty(4, np.float32))


def test_wrong_device_name_and_bad_options():
    with pytest.raises(ValueError, match="unknown device"):
        fg.compile(ex.softmax, device="gpu")
    with pytest.raises(ValueError, match="power of two"):
        fg.compile(ex.softmax, device="cuda", threads=48)


def test_shape_errors_name_the_op(rng):
    with pytest.raises(ShapeError, match="add_reduce_sum"):
        cuda_kernel(ex.add_reduce_sum)(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32))


def test_reduction_beside_pieces_keeps_its_whole_domain():
    """The CUDA twin of test_layout_schedules' check (the one schedule both backends share)."""
    from test_layout_schedules import reduce_beside_pieces, reduce_beside_pieces_ref
    rng = np.random.default_rng(3)
    x, z = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((3, 3)).astype(np.float32)
    got = cuda_kernel(reduce_beside_pieces)(x, z)
    for g, want in zip(got, reduce_beside_pieces_ref(x, z)):
        np.testing.assert_allclose(np.asarray(g), want, rtol=1e-5, atol=1e-5)


@fg.op
def iota_reshapes(x):
    """Iotas read through a reshape's div/mod map (tril's mask, arange), then a reduction."""
    return fg.reshape(fg.tril(x), (6, 4)), fg.sum(fg.reshape(x + fg.arange(6.0), (6, 4)), axis=1)


def test_iotas_through_a_modular_reshape():
    x = sample(np.random.default_rng(9), (4, 6), "float64")
    got = fg.compile(iota_reshapes, device="cuda")(x)
    want = (np.tril(x).reshape(6, 4), (x + np.arange(6.0)).reshape(6, 4).sum(1))
    for g, w in zip(got, want):
        assert_close(np.asarray(g.copy_to_host() if hasattr(g, "copy_to_host") else g), w)


@fg.op
def constant_pieces(x):
    return fg.pad(fg.ones((2, 3), dtype="float64"), 1), x + 1


def test_pieces_of_constants_are_placed():
    got = fg.compile(constant_pieces, device="cuda")(np.zeros(3))
    for g, w in zip(got, (np.pad(np.ones((2, 3)), 1), np.ones(3))):
        np.testing.assert_array_equal(np.asarray(g.copy_to_host() if hasattr(g, "copy_to_host") else g), w)


def test_none_in_out_is_allocated_on_cuda():
    # NumPy's ufuncs' convention, as on the CPU backends: host and device out= alike
    from numba import cuda

    @fg.op
    def two(x, y):
        return x + y, y * 2

    k = fg.compile(two, device="cuda")
    x, y = np.ones(4, np.float32), np.full(4, 2, np.float32)
    a = np.empty(4, np.float32)
    s, d = k(x, y, out=(None, a))
    assert d is a and np.array_equal(s, x + y) and np.array_equal(a, y * 2)
    s, d = k(cuda.to_device(x), cuda.to_device(y), out=[None, cuda.device_array(4, np.float32)])
    assert np.array_equal(s.copy_to_host(), x + y) and np.array_equal(d.copy_to_host(), y * 2)
