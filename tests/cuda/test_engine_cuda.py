"""``fg.Engine`` with CUDA kernels: each worker runs them on its own stream and synchronizes it
before the call counts as done; device arrays are ordered by their memory. Small shapes: under
the simulator every CUDA thread is a Python thread.
"""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import fusegen as fg
import fusegen.examples as ex
from fusegen.rt.engine import Engine, extent

from conftest import assert_close, np_ref, sample

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore:.*Grid size.*",
                                        "ignore::numba.core.errors.NumbaPerformanceWarning")


def _softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


@pytest.fixture(scope="module")
def kernels():
    return {op: fg.compile(op, device="cuda") for op in (ex.bias_gelu, ex.softmax, ex.smooth_l1)}


def test_cuda_kernels_on_host_and_device_arrays(kernels, rng):
    from numba import cuda
    x, b, y = sample(rng, (4, 8), "float32"), sample(rng, (8,), "float32"), sample(rng, (4, 8), "float32")
    d_x, d_b = cuda.to_device(x), cuda.to_device(b)
    d_h, d_s = cuda.device_array((4, 8), np.float32), cuda.device_array((4, 8), np.float32)
    host_out = np.empty_like(x)
    with Engine(2) as eng:
        eng.push(kernels[ex.bias_gelu], (d_x, d_b), d_h)          # device chain: h -> s
        eng.push(kernels[ex.softmax], d_h, d_s, axis=-1)
        eng.push(kernels[ex.smooth_l1], (x, y), host_out, sigma=1.0)  # NumPy in, NumPy out
        eng.wait_for(d_s)
        s = d_s.copy_to_host()
    h = x + b
    h = 0.5 * h * (1.0 + np.tanh(0.7978845608028654 * (h + 0.044715 * h ** 3)))
    assert_close(s, np_ref(_softmax, h.astype(np.float32)), rtol=1e-4, atol=1e-5)
    d = x - y
    assert_close(host_out, np.where(np.abs(d) < 1, 0.5 * d * d, np.abs(d) - 0.5).astype(np.float32))


def test_each_worker_runs_cuda_calls_on_its_own_stream(kernels, rng):
    from numba import cuda
    seen = []
    k = kernels[ex.softmax]

    def probe(*arrays, out=None, stream=None):  # a plain callable with a stream parameter
        seen.append((threading.current_thread().name, stream))
        return k(*arrays, out=out, stream=stream)

    xs = [cuda.to_device(sample(rng, (2, 4), "float32")) for _ in range(6)]
    mine = cuda.stream()
    with Engine(2) as eng:
        tasks = [eng.push(probe, x) for x in xs]
        given = eng.push(probe, xs[0], stream=mine)
    for t, x in zip(tasks, xs):
        assert_close(t.result().copy_to_host(), np_ref(_softmax, x.copy_to_host()))
    assert given.result() is not None and [st is mine for _, st in seen].count(True) == 1
    streams = {}
    for name, st in seen:  # the calls pushed without a stream (in whatever order they ran)
        if st is not mine:
            assert st is not None and streams.setdefault(name, st) is st, "a worker switched streams"
    assert len({id(s) for s in streams.values()}) == len(streams), "two workers shared a stream"


def test_overlapping_device_views_are_ordered():
    """Host callables on device memory (no stream parameter: not CUDA calls, so they are not
    serialized by the simulator's lock), ordered by the device arrays' extents."""
    from numba import cuda
    buf = cuda.to_device(np.zeros(64, np.float32))
    a, b, c = buf[0:40], buf[30:64], buf[40:64]
    assert extent(a)[2] > extent(b)[1] and extent(a)[2] <= extent(c)[1]
    log = {}

    def record(key, sleep):
        def call(*arrays, out=None):
            t0 = time.perf_counter_ns()
            time.sleep(sleep)
            log[key] = (t0, time.perf_counter_ns())
        return call

    barrier = threading.Barrier(2, timeout=20)
    with Engine(3) as eng:
        eng.push(record("a", 0.05), (), a)
        eng.push(record("b", 0), b)                      # reads what "a" writes: after it
        eng.push(lambda out: barrier.wait(), (), c[:5])   # disjoint from "a":
        eng.push(lambda out: barrier.wait(), (), c[10:])  # these two meet at the barrier
    assert log["a"][1] <= log["b"][0]
