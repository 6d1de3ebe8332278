"""Concurrency of the numba-cuda backend: threads calling one ``CudaKernel`` (its signature
cache and lazy preparation) and different kernels at once, on NumPy and device arrays.

Under the simulator every launch runs its CUDA threads as Python threads, so the shapes stay
tiny and the call counts small; and the simulator runs one kernel at a time ("concurrent
simulated kernel not supported") with the launch configuration stored on the kernel object,
so there the test gives each launch its own configured copy and serializes the launches
themselves (fixture ``one_launch_at_a_time``): everything fusegen does around them (signature
cache, preparation, meta uploads, transfers, workspaces) still runs concurrently. On a GPU
nothing is patched. Repeated create/call/drop cycles are not tested here: under the
simulator they measure the simulator, not fusegen (``tests/test_reliability.py`` covers the CPU
backends).
"""
from __future__ import annotations

import copy
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import fusegen as fg
import fusegen.examples as ex

from conftest import SIMULATOR, np_ref, sample

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import test_numeric_cpu as cpu  # noqa: E402  (the NumPy references)

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore:.*Grid size.*",
                                        "ignore::numba.core.errors.NumbaPerformanceWarning")

THREADS = 8
CALLS = 4


@pytest.fixture
def one_launch_at_a_time(monkeypatch):
    """Simulator only: ``kernel[grid, block, stream]`` returns a configured copy, and kernel
    launches (not device-function calls, which run inside a launch) take one lock."""
    if not SIMULATOR:
        return
    from numba.cuda.simulator.kernel import FakeCUDAKernel
    lock, getitem, call = threading.Lock(), FakeCUDAKernel.__getitem__, FakeCUDAKernel.__call__

    def launch(self, *args):
        if self._device:
            return call(self, *args)
        with lock:
            return call(self, *args)
    monkeypatch.setattr(FakeCUDAKernel, "__getitem__", lambda self, conf: getitem(copy.copy(self), conf))
    monkeypatch.setattr(FakeCUDAKernel, "__call__", launch)


def test_threads_on_one_kernel_and_on_different_kernels(rng, one_launch_at_a_time):
    """Four threads share one softmax kernel, each with its own shape (so they also prepare
    new signatures at once); four call one kernel each (elementwise, a thread-mode and a split
    reduction, device arrays in and out). Every result equals NumPy's."""
    from numba import cuda
    shared = fg.compile(ex.softmax, device="cuda")
    x, y = sample(rng, (3, 4), "float32"), sample(rng, (3, 4), "float32", lo=1, hi=2)
    jobs = [(shared, [sample(rng, (2 + t, 3), "float32", lo=-3, hi=3)], {}, lambda a: cpu._softmax(a, -1))
            for t in range(4)]
    jobs += [(fg.compile(ex.add_mul_div, device="cuda"), [x, y], {}, lambda a, b: (a + b, a * b, a / b)),
             (fg.compile(ex.add_reduce_sum, device="cuda"), [x, y], {"axis": 0}, lambda a, b: np.sum(a + b, 0)),
             (fg.compile(ex.add_reduce_sum, device="cuda", split=2), [x, y], {"axis": 1},
              lambda a, b: np.sum(a + b, 1)),
             (fg.compile(ex.bias_gelu, device="cuda"), [x, y[0]], {"device": True}, cpu._bias_gelu)]
    barrier = threading.Barrier(THREADS)

    def work(t):
        kernel, args, attrs, ref = jobs[t]
        on_device = attrs.pop("device", False)
        want = np_ref(ref, *args)
        want = want if isinstance(want, tuple) else (want,)
        barrier.wait()
        bad = 0
        for _ in range(CALLS):
            got = kernel(*([cuda.to_device(a) for a in args] if on_device else args), **attrs)
            got = [g.copy_to_host() if on_device else g for g in (got if isinstance(got, tuple) else (got,))]
            bad += not all(g.shape == w.shape and np.allclose(g, w, rtol=2e-5, atol=1e-6) for g, w in zip(got, want))
        return bad

    with ThreadPoolExecutor(THREADS) as pool:
        errors = list(pool.map(work, range(THREADS)))
    print(f"\n[concurrency] CUDA: {THREADS} threads x {CALLS} calls (4 on one kernel, 4 on four others): "
          f"wrong results {sum(errors)}")
    assert errors == [0] * THREADS
    assert len(shared._calls) == 4  # one prepared signature per shape, none lost to a race


# --- bad input: what tests/cuda/test_numeric_cuda.py's error-path tests leave out ---------------
def test_bad_input_is_refused_with_a_specific_error(rng):
    """Each bad input a specific fusegen error (or ValueError/TypeError for bad options) with a
    message naming the problem, before anything is launched; a given ``out=`` stays untouched."""
    from numba import cuda
    from fusegen.errors import ArgumentError, AttrError, DTypeError, ShapeError
    k = fg.compile(ex.add_reduce_sum, device="cuda")
    x = sample(rng, (2, 3), "float32")
    out = np.full(2, 7.0, np.float32)
    ro = np.frombuffer(bytes(8), np.float32)
    dev_out = cuda.to_device(np.zeros((2, 4), np.float32))[:, ::2][:, 0]  # stride 16 bytes, shape (2,)
    cases = [
        (ArgumentError, "takes 2 inputs", lambda: k(x)),
        (ArgumentError, "takes 2 inputs", lambda: k(x, x, x)),
        (DTypeError, "complex256, which fusegen does not support", lambda: k(x.astype(np.clongdouble), x)),
        (DTypeError, "dtype object", lambda: k(np.array([[1.0, None]], dtype=object), x)),
        (AttrError, "unknown attribute 'bogus'", lambda: k(x, x, bogus=1)),
        (AttrError, "'axis': expected int, got float", lambda: k(x, x, axis=1.5)),
        (AttrError, "'keep_dims': expected bool, got str", lambda: k(x, x, keep_dims="yes")),
        (ShapeError, "axis 5 is out of range", lambda: k(x, x, axis=5, out=out)),
        (ShapeError, "cannot broadcast", lambda: k(x, np.ones((3, 2), np.float32), out=out)),
        (ArgumentError, "out= needs 1 arrays, got 2", lambda: k(x, x, out=(out, out))),
        (ShapeError, "dtype float32, got \\(2,\\) float64", lambda: k(x, x, out=np.empty(2, np.float64))),
        (ArgumentError, "out\\[0\\] is read-only", lambda: k(x, x, out=ro)),
        (ArgumentError, "out\\[0\\] must be a numpy array, got list", lambda: k(x, x, out=[[0.0, 0.0]])),
        (ArgumentError, "out\\[0\\] is a non-contiguous device array",
         lambda: k(cuda.to_device(x), x, out=dev_out)),
        (ArgumentError, "stream must be", lambda: k(x, x, stream=True)),
        (ArgumentError, "stream must be", lambda: k(x, x, stream=object())),
        (TypeError, "expects an @fusegen.op", lambda: fg.compile(lambda a: a, device="cuda")),
        (ValueError, "power of two", lambda: fg.compile(ex.softmax, device="cuda", threads=2048)),
        (ValueError, "max_blocks must be a positive int", lambda: fg.compile(ex.softmax, device="cuda", max_blocks=0)),
        (ValueError, "split must be a positive int", lambda: fg.compile(ex.softmax, device="cuda", split=-1)),
    ]
    for exc, match, fn in cases:
        with pytest.raises(exc, match=match):
            fn()
        assert (out == 7.0).all() and not ro.any()
    print(f"\n[bad input] CUDA: {len(cases)} bad inputs refused")
