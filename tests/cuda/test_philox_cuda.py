"""numba-cuda's random numbers (``fusegen.philox_numba.cuda_functions()``) against the NumPy
reference, under the simulator or on a GPU: one element per thread through the ``*_at``
functions, and one block per thread (four 32-bit elements, two float64 ones) through ``block``
and the word mappings, as a fused kernel does. Bit identity for uniform, bernoulli and randint,
normal within 2 ulp. Small sizes: the simulator runs each thread as a Python thread.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import test_philox as T  # noqa: E402  (the reference fills and the comparison)

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore:.*Grid size.*",
                                        "ignore::numba.core.errors.NumbaPerformanceWarning")

THREADS = 32


KERNELS = '''
def per_element(seed, offset, i0, p, rng_n, u32, u64, n32, n64, bern, rint):
    k = cuda.grid(1)
    if k < u32.size:
        i = i0 + np.uint64(k)
        u32[k] = R.uniform_f32_at(seed, offset, i)
        u64[k] = R.uniform_f64_at(seed, offset, i)
        n32[k] = R.normal_f32_at(seed, offset, i)
        n64[k] = R.normal_f64_at(seed, offset, i)
        bern[k] = R.bernoulli_at(seed, offset, i, R.bernoulli_threshold(p))
        rint[k] = R.randint_offset_at(seed, offset, i, rng_n, R.randint_threshold(rng_n))


def per_block(seed, offset, q0, p, rng_n, u32, u64, n32, n64, bern, rint):
    # thread b: block q0 + b = 32-bit elements 4 b .. 4 b + 3 of the arrays (which start at
    # element 4 q0) and float64 elements 2 b, 2 b + 1 (which start at element 2 q0)
    b = cuda.grid(1)
    if 4 * b < u32.size:
        t = R.bernoulli_threshold(p)
        rt = R.randint_threshold(rng_n)
        w0, w1, w2, w3 = R.block(seed, offset, q0 + np.uint64(b))
        k0, k1 = seed & np.uint64(0xFFFFFFFF), seed >> np.uint64(32)
        store_block32(w0, w1, w2, w3, 4 * b, t, rt, k0, k1, rng_n, u32, n32, bern, rint)
        u64[2 * b], u64[2 * b + 1] = R.uniform_f64(w0, w1), R.uniform_f64(w2, w3)
        n64[2 * b], n64[2 * b + 1] = R.boxmuller_f64(w0, w1, w2, w3)
'''


@pytest.fixture(scope="module")
def kernels():
    """The two kernels, from source executed in a namespace with the module ``cuda`` as a
    global (the simulator swaps that global for its own ``cuda``) and the device functions as
    ``R.<name>``, the way a generated kernel module would import them."""
    import types
    from numba import cuda
    from fusegen.philox_numba import cuda_functions
    R = types.ModuleType("philox_device")  # numba resolves module attributes as globals
    vars(R).update(vars(cuda_functions()))
    ns = dict(cuda=cuda, np=np, R=R, store_block32=T.store_block32(R, cuda.jit(device=True, inline="always")))
    exec(compile(KERNELS, "<philox-cuda-test>", "exec"), ns)
    return cuda.jit(ns["per_element"]), cuda.jit(ns["per_block"])


def _outputs(n32: int, n64: int):
    return (np.empty(n32, np.float32), np.empty(n64, np.float64), np.empty(n32, np.float32), np.empty(n64, np.float64),
            np.empty(n32, np.bool_), np.empty(n32, np.uint64))


NAMES = ("uniform_f32", "uniform_f64", "normal_f32", "normal_f64", "bernoulli", "randint")


@pytest.mark.parametrize("seed,offset,start,rng_n", [
    (0, 0, 0, 6),
    ((1 << 64) - 1, (1 << 32) + 7, 4 * (1 << 32) - 9, (1 << 31) + 1),   # block index crosses 2^32
    ((1 << 32) + 5, (1 << 64) - 1, 2 * (1 << 32) - 5, (1 << 63) + 1),  # so does the float64 one
])
def test_per_element_kernel_equals_reference(kernels, seed, offset, start, rng_n):
    n = 24
    out = _outputs(n, n)
    kernels[0][1, THREADS](np.uint64(seed), np.uint64(offset), np.uint64(start), np.float64(np.float32(0.3)),
                           np.uint64(rng_n), *out)
    T.assert_same(dict(zip(NAMES, out)), T.reference_fill(seed, offset, start, n, 0.3, rng_n), "numba-cuda *_at")


@pytest.mark.parametrize("seed,offset,q0,rng_n", [
    (7, 3, 0, 1000),
    ((1 << 64) - 1, (1 << 32) + 1, (1 << 32) - 3, (1 << 31) + 1),
    (1 << 32, 0, (1 << 40) + 1, (1 << 64) - 1),
])
def test_block_per_thread_kernel_equals_reference(kernels, seed, offset, q0, rng_n):
    nb = 8
    out = _outputs(4 * nb, 2 * nb)
    kernels[1][1, THREADS](np.uint64(seed), np.uint64(offset), np.uint64(q0), np.float64(np.float32(0.7)),
                           np.uint64(rng_n), *out)
    got = dict(zip(NAMES, out))
    want32 = T.reference_fill(seed, offset, 4 * q0, 4 * nb, 0.7, rng_n)
    want64 = T.reference_fill(seed, offset, 2 * q0, 2 * nb, 0.7, rng_n)
    want = {k: (want64 if k.endswith("f64") else want32)[k] for k in NAMES}
    T.assert_same(got, want, "numba-cuda block per thread")
