"""``fg.Engine``: numeric results of fused-op chains against NumPy, the ordering rule under
randomized scheduling (random DAGs over overlapping views, random sleeps, random worker counts,
checked against a sequential replay and against the calls' own start/end timestamps), memory
extents, error propagation, shutdown and concurrent pushers.

No assertion depends on how fast anything runs: ordering is checked from timestamps the calls
record themselves (an order the engine guarantees), and concurrency with barriers that only pass
when two calls run at the same time.
"""
from __future__ import annotations

import gc
import itertools
import math
import re
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import fusegen as fg
import fusegen.examples as ex
from fusegen.rt.engine import Engine, EngineError, extent
from fusegen.errors import ArgumentError, ShapeError

from conftest import assert_all_close, assert_close, np_ref, sample
from _optional import needs_gxx

_byte_bounds = getattr(getattr(np.lib, "array_utils", np), "byte_bounds")  # moved in NumPy 2


def _softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _gelu(h):
    return 0.5 * h * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h ** 3)))


def _smooth_l1(x, y, sigma):
    d = x - y
    s2 = sigma * sigma
    return np.where(np.abs(d) < 1.0 / s2, 0.5 * s2 * d * d, np.abs(d) - 0.5 / s2)


def _layer_norm(x, eps=1e-5):
    m = np.mean(x, axis=-1, keepdims=True)
    v = np.mean((x - m) ** 2, axis=-1, keepdims=True)
    r = 1.0 / np.sqrt(v + eps)
    return (x - m) * r, m, r


_KERNELS: dict = {}


def kernel(op):
    if op not in _KERNELS:
        _KERNELS[op] = fg.compile(op)
    return _KERNELS[op]


def _engine_threads() -> list:
    return [t for t in threading.enumerate() if t.name.startswith("fusegen-engine-")]


@pytest.fixture(autouse=True)
def no_leaked_threads():
    before = set(_engine_threads())
    yield
    gc.collect()
    for t in set(_engine_threads()) - before:
        t.join(5)
    assert not set(_engine_threads()) - before, "an engine's worker threads outlived the test"


# =============================================================================================
# numeric: chains of fused ops through the engine
# =============================================================================================
def _push_chain(eng, x, b, o):
    """Push one chain's calls, pausing after each so that several chains interleave."""
    eng.push(kernel(ex.bias_gelu), (x, b), o["h"])
    yield
    eng.push(kernel(ex.bias_gelu), (o["h"], b), o["h"])  # in place
    yield
    eng.push(kernel(ex.softmax), o["h"], o["s"], axis=-1)
    yield
    eng.push(kernel(ex.layer_norm), (o["s"],), (o["ln"], o["mean"], o["rstd"]))
    yield
    eng.push(kernel(ex.add_reduce_sum), (o["ln"], x), o["r"], axis=0)


def test_chains_of_fused_ops_match_numpy(rng):
    """Four independent chains, pushed interleaved: bias_gelu -> in-place bias_gelu -> softmax ->
    layer_norm (3 outputs) -> add_reduce_sum (reading the chain's input again)."""
    shape = (24, 40)
    chains = []
    for _ in range(4):
        x, b = sample(rng, shape, "float32"), sample(rng, shape[-1:], "float32")
        bufs = {name: np.empty(shape, np.float32) for name in ("h", "s", "ln")}
        bufs["mean"] = np.empty(shape[:-1] + (1,), np.float32)
        bufs["rstd"] = np.empty(shape[:-1] + (1,), np.float32)
        bufs["r"] = np.empty(shape[-1:], np.float32)
        chains.append(((x, b), bufs))
    with Engine(workers=3) as eng:
        for _ in itertools.zip_longest(*[_push_chain(eng, *ins, o) for ins, o in chains]):
            pass
    for (x, b), o in chains:
        h = np_ref(lambda x, b: _gelu(_gelu(x + b) + b), x, b)
        assert_close(o["h"], h, rtol=1e-4, atol=1e-5, what="bias_gelu twice")
        assert_close(o["s"], np_ref(_softmax, o["h"]), what="softmax")
        assert_all_close((o["ln"], o["mean"], o["rstd"]), np_ref(_layer_norm, o["s"]), what="layer_norm",
                         rtol=1e-4, atol=1e-5)
        assert_close(o["r"], np_ref(lambda a, b: np.sum(a + b, axis=0), o["ln"], x), rtol=1e-4, atol=1e-4)


def test_result_returns_what_the_kernel_returned(rng):
    x = sample(rng, (6, 7), "float32")
    with Engine(2) as eng:
        allocated = eng.push(kernel(ex.softmax), x)           # no outputs: the kernel allocates
        out = np.empty_like(x)
        given = eng.push(kernel(ex.softmax), x, out)
        multi = eng.push(kernel(ex.layer_norm), x)
    assert_close(allocated.result(), np_ref(_softmax, x))
    assert given.result() is out
    assert_all_close(multi.result(), np_ref(_layer_norm, x), rtol=1e-4, atol=1e-5)


@needs_gxx
def test_aot_kernels_run_through_the_engine(rng):
    aot = fg.compile(ex.smooth_l1, backend="aot", dtypes="float32")
    xs = [sample(rng, (16, 33), "float32") for _ in range(4)]
    outs = [np.empty_like(x) for x in xs]
    with Engine(2) as eng:
        for x, o in zip(xs, outs):
            eng.push(aot, (x, xs[0]), o, sigma=1.5)
        eng.push(aot, (outs[1], outs[2]), outs[3], sigma=1.5)  # reads two results, overwrites a third
    ref = [np_ref(_smooth_l1, x, xs[0], 1.5) for x in xs]
    ref[3] = np_ref(_smooth_l1, ref[1], ref[2], 1.5)
    for o, r in zip(outs, ref):
        assert_close(o, r)


# =============================================================================================
# memory extents
# =============================================================================================
def test_extent_is_the_byte_range_of_any_view():
    buf = np.arange(96, dtype=np.float64).reshape(8, 12)
    views = [buf, buf[2:5], buf[:, 3:7], buf[::-1], buf[::2, ::-3], buf.T, buf[3, 4], buf[1:2, 5:6],
             buf.reshape(-1)[7:40:5], np.broadcast_to(buf[0], (4, 12))]
    for v in views:
        space, lo, hi = extent(v)
        assert space == "host" and (lo, hi) == _byte_bounds(v), v.strides
    assert extent(buf[3:3]) is None and extent(np.empty((0, 5))) is None
    assert extent(1.5) is None and extent([1, 2]) is None
    raw = bytearray(16)
    space, lo, hi = extent(raw)
    assert space == "host" and hi - lo == 16
    assert extent(np.frombuffer(raw, np.uint8)[4:8])[1:] == (lo + 4, lo + 8)


def test_extent_reads_the_cuda_array_interface():
    class Dev:  # what CuPy, PyTorch and numba device arrays expose
        __cuda_array_interface__ = {"data": (4096, False), "shape": (3, 4), "strides": (-32, 8),
                                    "typestr": "<f8", "version": 3}
    assert extent(Dev()) == ("cuda", 4096 - 64, 4096 + 32)
    Dev.__cuda_array_interface__ = {**Dev.__cuda_array_interface__, "strides": None}
    assert extent(Dev()) == ("cuda", 4096, 4096 + 96)


# =============================================================================================
# the ordering rule
# =============================================================================================
def _record(log, key, sleep=0.0):
    """A call that logs when it ran (its own start/end timestamps) after sleeping ``sleep``."""
    def call(*arrays, out=None):
        t0 = time.perf_counter_ns()
        time.sleep(sleep)
        if out is not None:
            out[...] = out + 1
        log[key] = (t0, time.perf_counter_ns())
    return call


def test_overlapping_views_are_ordered_disjoint_views_run_together():
    buf = np.zeros(100)
    log: dict = {}
    barrier = threading.Barrier(2, timeout=20)  # passes only if "a" and "d" run at the same time

    def a(out):
        barrier.wait()
        _record(log, "a", 0.02)(out=out)

    with Engine(4) as eng:
        eng.push(a, (), buf[10:60])
        eng.push(_record(log, "b"), buf[55:90])            # reads bytes "a" writes: after it
        eng.push(_record(log, "c"), (), buf[59:60][::-1])  # writes them: after it too
        eng.push(lambda x: barrier.wait(), buf[60:100])    # "d": disjoint from "a" and "c"
    assert log["a"][1] <= log["b"][0] and log["a"][1] <= log["c"][0]
    np.testing.assert_array_equal(buf[10:59], 1)
    assert buf[59] == 2  # "a", then "c"


def _random_views(rng, bufs, n):
    """``n`` random views (1-D slices with steps, 2-D blocks, flips) of a few small buffers."""
    views = []
    for _ in range(n):
        buf = bufs[int(rng.integers(len(bufs)))]
        if rng.random() < 0.5:
            flat = buf.reshape(-1)
            lo = int(rng.integers(flat.size - 1))
            hi = int(rng.integers(lo + 1, min(flat.size, lo + 24) + 1))
            v = flat[lo:hi:int(rng.choice([1, 1, 2, 3]))]
        else:
            r0, c0 = int(rng.integers(buf.shape[0])), int(rng.integers(buf.shape[1]))
            v = buf[r0:r0 + int(rng.integers(1, 4)), c0:c0 + int(rng.integers(1, 6))]
        views.append(v[::-1] if rng.random() < 0.2 else v)
    return views


def _program(rng, n_ops, fail_rate=0.0):
    """A random DAG: each call reads 0-2 views, writes 1-2 views (possibly ones it reads, possibly
    overlapping others anywhere), sleeps a random while between reading and writing (to widen
    every race), may fail; writes depend on the values read and on the call's index."""
    ops = []
    for i in range(n_ops):
        ops.append(dict(ins=list(rng.integers(0, 12, int(rng.integers(0, 3)))),
                        outs=list(rng.integers(0, 12, int(rng.integers(1, 3)))),
                        sleep=float(rng.choice([0, 0, 1e-4, 5e-4, 1.5e-3])),
                        fail=bool(rng.random() < fail_rate)))
    return ops


def _op_fn(i, spec, log):
    def call(*ins, out):
        t0 = time.perf_counter_ns()
        s = sum(int(a.sum()) for a in ins)
        time.sleep(spec["sleep"])
        if spec["fail"]:
            log[i] = (t0, time.perf_counter_ns())
            raise ValueError(f"call {i} fails on purpose")
        for k, o in enumerate(out if isinstance(out, tuple) else (out,)):
            o[...] = (s + 1000 * i + 100 * k + np.arange(o.size).reshape(o.shape)) % 1000003
        log[i] = (t0, time.perf_counter_ns())
    return call


def _meet(u, v) -> bool:
    (ul, uh), (vl, vh) = _byte_bounds(u), _byte_bounds(v)
    return ul < vh and vl < uh


def _conflict(a_ins, a_outs, b_ins, b_outs) -> bool:
    """The engine's rule: byte extents overlap and at least one side writes."""
    return (any(_meet(u, v) for u in a_outs for v in b_ins + b_outs) or
            any(_meet(u, v) for u in a_ins for v in b_outs))


def _flows(a_ins, a_outs, b_ins, b_outs) -> bool:
    """A failure's reach: ``a`` wrote (or would have written) memory ``b`` touches. Overwriting what
    a failed call only read is an order, not a data flow: that call runs."""
    return any(_meet(u, v) for u in a_outs for v in b_ins + b_outs)


def _make_bufs(seed):
    r = np.random.default_rng(seed)
    return [r.integers(0, 100, (6, 10)).astype(np.int64), r.integers(0, 100, (4, 8)).astype(np.int64)]


def _random_run(rng, seed, n_ops, fail_rate=0.0):
    """A random program (with at least one failing call when ``fail_rate``), the engine's buffers
    and views, and an identical copy of both for the sequential replay."""
    program = _program(rng, n_ops, fail_rate)
    if fail_rate:
        program[int(rng.integers(n_ops))]["fail"] = True
    bufs, expect = _make_bufs(seed), _make_bufs(seed)
    view_seed = int(rng.integers(1 << 30))
    views = _random_views(np.random.default_rng(view_seed), bufs, 12)
    ref_views = _random_views(np.random.default_rng(view_seed), expect, 12)
    return program, bufs, expect, views, ref_views


def _io(views, spec):
    """A call's inputs and outputs among ``views``."""
    return [views[k] for k in spec["ins"]], [views[k] for k in spec["outs"]]


def _replay(i, spec, ref_views):
    ins, outs = _io(ref_views, spec)
    _op_fn(i, spec, {})(*ins, out=tuple(outs))


@pytest.mark.parametrize("seed", range(6))
def test_random_dags_keep_raw_war_waw_order(seed):
    """60 random programs over overlapping views with random sleeps and 1-6 workers (10 per seed):
    the memory ends up exactly as a sequential run leaves it, every conflicting pair ran in push
    order by its own timestamps, and after ``wait_for(v)`` every earlier call touching ``v`` has
    ended. Independent calls overlapped in time somewhere (they may: the sum over all programs)."""
    rng = np.random.default_rng(1000 + seed)
    overlapped = 0
    for _ in range(10):
        n_ops = int(rng.integers(10, 30))
        program, bufs, expect, views, ref_views = _random_run(rng, seed, n_ops)
        log: dict = {}
        with Engine(workers=int(rng.integers(1, 7))) as eng:
            for i, spec in enumerate(program):
                eng.push(_op_fn(i, spec, log), *_io(views, spec))
                if rng.random() < 0.1:  # wait_for in mid-program: every earlier toucher has ended
                    v = views[int(rng.integers(12))]
                    eng.wait_for(v)
                    for j in range(i + 1):
                        if any(_meet(v, u) for u in sum(_io(views, program[j]), [])):
                            assert j in log, f"wait_for returned before call {j}, which touches the view"
        for i, spec in enumerate(program):
            _replay(i, spec, ref_views)
        for b, e in zip(bufs, expect):
            np.testing.assert_array_equal(b, e)
        for i in range(n_ops):
            for j in range(i + 1, n_ops):
                if _conflict(*_io(views, program[i]), *_io(views, program[j])):
                    assert log[i][1] <= log[j][0], f"calls {i} and {j} conflict but overlapped in time"
                elif log[i][0] < log[j][1] and log[j][0] < log[i][1]:
                    overlapped += 1
    assert overlapped > 0, "no two independent calls ever ran at the same time"


@pytest.mark.parametrize("seed", range(4))
def test_random_dags_skip_exactly_the_dependents_of_failures(seed):
    """Random programs where some calls fail: exactly the calls that (transitively) touch memory an
    earlier failed or skipped call wrote are skipped; all others ran (those overwriting what a
    failed call only read too); the memory equals a sequential replay that runs the same set;
    wait_all raises the earliest failure, once."""
    rng = np.random.default_rng(2000 + seed)
    for _ in range(6):
        n_ops = int(rng.integers(8, 25))
        program, bufs, expect, views, ref_views = _random_run(rng, seed, n_ops, fail_rate=0.15)
        log: dict = {}
        with Engine(workers=int(rng.integers(1, 5))) as eng:
            tasks = [eng.push(_op_fn(i, s, log), *_io(views, s)) for i, s in enumerate(program)]
            with pytest.raises(EngineError) as info:
                eng.wait_all()
            eng.wait_all()  # raised once: the failures are reported now
        first = min(i for i, s in enumerate(program) if s["fail"])
        assert info.value is tasks[first].exception()
        assert isinstance(info.value.__cause__, ValueError)
        assert f"call #{first} (" in str(info.value) and "_op_fn.<locals>.call" in str(info.value)
        bad: set = set()
        for j, s in enumerate(program):
            if any(_flows(*_io(views, program[i]), *_io(views, s)) for i in bad):
                assert j not in log and "was not run" in str(tasks[j].exception())
                bad.add(j)
            elif s["fail"]:
                assert j in log and tasks[j].exception().__cause__.args == (f"call {j} fails on purpose",)
                bad.add(j)
            else:
                assert j in log and tasks[j].exception() is None, f"call {j} depends on no failure but did not run"
                _replay(j, s, ref_views)
        for b, e in zip(bufs, expect):
            np.testing.assert_array_equal(b, e)


# =============================================================================================
# pushing: arguments, attributes, reads=/writes=, accumulate
# =============================================================================================
def test_push_forwards_attributes_out_and_accumulate():
    def call(*ins, out=None, **kw):
        return len(ins), out, kw

    a, b, c = np.zeros(3), np.zeros(4), np.zeros(5)
    with Engine(1) as eng:
        seen = [eng.push(call, (a,), b, axis=1), eng.push(call, (a, b), (b, c)),
                eng.push(call, a, c, accumulate=True), eng.push(call)]
    seen = [t.result() for t in seen]
    assert seen[0][0] == 1 and seen[0][1] is b and seen[0][2] == {"axis": 1}
    assert seen[1][0] == 2 and seen[1][1][0] is b and seen[1][1][1] is c and seen[1][2] == {}
    assert seen[2][2] == {"accumulate": True}
    assert seen[3] == (0, None, {})


def test_accumulate_orders_read_modify_writes():
    def add(x, out, accumulate=False):
        assert accumulate
        v = out.copy()
        time.sleep(1e-4)
        out[...] = v + x

    acc = np.zeros(8)
    ones = np.ones(8)
    with Engine(4) as eng:
        for _ in range(40):
            eng.push(add, ones, acc, accumulate=True)
    np.testing.assert_array_equal(acc, 40)


@fg.op(inplace="x")
def _affine(x, *, a: float = 1.5):
    return x * a + 1.0


def test_kernel_write_requests_through_the_engine(rng):
    """``accumulate`` (read-modify-write of the outputs) and ``inplace=True`` (an output written
    over an input) are ordered like writes: twelve of each on one array, four workers."""
    x, b = sample(rng, (8, 16), "float64"), sample(rng, (16,), "float64")
    acc = np.zeros_like(x)
    y = x.copy()
    kernel(_affine)(x.copy(), inplace=True)            # compiled now: the timeout below measures waiting only
    gate = threading.Event()
    with Engine(4) as eng:
        eng.push(lambda y: gate.wait(20), y)           # a reader of y, held back
        first = eng.push(kernel(_affine), y, inplace=True)
        with pytest.raises(TimeoutError):               # it writes y: it waits for that reader
            first.result(timeout=0.2)
        gate.set()
        for i in range(12):
            eng.push(kernel(ex.bias_gelu), (x, b), acc, accumulate=True)
            if i:
                eng.push(kernel(_affine), y, inplace=True)  # y = 1.5 y + 1, in y's memory
    assert_close(acc, 12 * np_ref(lambda x, b: _gelu(x + b), x, b))
    want = x.copy()
    for _ in range(12):
        want = want * 1.5 + 1.0
    assert_close(y, want)


def test_reads_and_writes_declare_memory_a_call_touches_without_receiving_it():
    hidden = np.zeros(4)
    seen = []
    with Engine(4) as eng:
        eng.push(lambda: (time.sleep(0.03), hidden.fill(7)), writes=[hidden])
        eng.push(lambda: seen.append(hidden.copy()), reads=hidden)
    np.testing.assert_array_equal(seen[0], 7)


def test_push_rejects_bad_arguments():
    with Engine(1) as eng:
        with pytest.raises(ArgumentError, match="must be callable"):
            eng.push(42, ())
        with pytest.raises(ArgumentError, match="outputs must be an array or a sequence"):
            eng.push(print, (), 3.0)
        ro = np.zeros(3)
        ro.flags.writeable = False
        with pytest.raises(ArgumentError, match="read-only"):
            eng.push(print, (), ro)
        with pytest.raises(ArgumentError, match="accumulate needs outputs"):
            eng.push(print, (ro,), accumulate=True)
    with pytest.raises(ArgumentError, match="positive int"):
        Engine(workers=0)


# =============================================================================================
# errors
# =============================================================================================
def test_a_failure_reaches_the_next_wait_skips_dependents_and_the_engine_goes_on(rng):
    x = sample(rng, (5, 6), "float32")
    y, z, w = np.zeros_like(x), np.zeros_like(x), np.zeros_like(x)
    k = kernel(ex.softmax)
    with Engine(2) as eng:
        bad = eng.push(k, x, np.zeros((2, 2), np.float32))  # wrong out= shape: fails in the worker
        fail = eng.push(lambda a, out: 1 / 0, x, y)
        dep = eng.push(k, y, z)                              # reads y: skipped
        free = eng.push(k, x, w)                             # independent: runs
        with pytest.raises(EngineError, match=r"call #1 \(.*<lambda>, pushed at test_engine.py:\d+\) "
                                              r"failed: ZeroDivisionError") as info:
            eng.wait_for(z)                                   # z's writer was skipped for call #1
        assert isinstance(info.value.__cause__, ZeroDivisionError)
        assert dep.cancelled() is False and dep.done()
        with pytest.raises(EngineError, match=r"call #2 \(op softmax.*was not run: it depends on call #1"):
            dep.result()
        assert_close(free.result(), np_ref(_softmax, x))
        with pytest.raises(EngineError, match=r"call #0 \(op softmax.*failed: ShapeError") as info:
            eng.wait_all()                                    # the one failure not reported yet
        assert isinstance(info.value.__cause__, ShapeError)
        assert bad.exception() is info.value and fail.exception().__cause__.__class__ is ZeroDivisionError
        eng.wait_all()                                        # each failure is raised once
        eng.push(k, x, z)                                     # usable, and z is no longer poisoned
        eng.wait_for(z)
        assert_close(z, np_ref(_softmax, x))


def test_a_failure_poisons_its_memory_until_reported():
    a, b = np.zeros(3), np.zeros(3)
    with Engine(2) as eng:
        failed = eng.push(lambda out: 1 / 0, (), a)
        while not failed.done():
            time.sleep(1e-3)
        later = eng.push(lambda x, out: out.fill(1), a, b)   # pushed after the failure, not yet reported
        assert later.exception() is not None and b[0] == 0   # skipped, whatever the timing
        with pytest.raises(EngineError, match="ZeroDivisionError"):
            eng.wait_for(a)
        eng.push(lambda x, out: out.fill(1), a, b).result()  # reported: runs
        assert b[0] == 1


def test_overwriting_what_a_failed_call_only_read_runs():
    a, b, c = np.ones(3), np.zeros(3), np.zeros(3)
    with Engine(2) as eng:
        eng.push(lambda x, out: 1 / 0, a, b)                   # reads a, fails
        over = eng.push(lambda out: out.fill(7), (), a)         # overwrites a: waits for it, then runs
        after = eng.push(lambda x, out: out.fill(1), b, c)      # reads what the failure left unwritten
        assert over.exception() is None and np.all(a == 7)
        assert "was not run" in str(after.exception()) and c[0] == 0
        with pytest.raises(EngineError, match="ZeroDivisionError"):
            eng.wait_all()


def test_wait_for_raises_only_for_writers_and_waits_for_readers():
    x, y = np.zeros(3), np.zeros(3)
    log: dict = {}
    with Engine(2) as eng:
        eng.push(_record(log, "slow reader", 0.05), x)
        eng.wait_for(x)                    # a reader of x: waited for, so x may be overwritten now
        assert "slow reader" in log
        eng.push(lambda a, out: [][0], x, y)
        eng.wait_for(x)                    # the failing call only reads x
        with pytest.raises(EngineError, match="IndexError"):
            eng.wait_for(y)


def _fail(*arrays, out=None):
    raise KeyError("on purpose")


def test_several_failures_raise_the_earliest_and_name_the_others():
    with Engine(2) as eng:
        for _ in range(3):
            eng.push(_fail, (), np.zeros(2))
        with pytest.raises(EngineError, match="call #0") as info:
            eng.wait_all()
        if hasattr(info.value, "__notes__"):
            assert "call #1" in info.value.__notes__[0] and "call #2" in info.value.__notes__[0]
        eng.wait_all()


def test_waiting_inside_a_pushed_call_is_an_error():
    with Engine(2) as eng:
        t = eng.push(lambda: eng.wait_all())
        with pytest.raises(EngineError, match="cannot wait on its engine") as info:
            t.result()
        assert isinstance(info.value.__cause__, EngineError)
        eng.wait_all()


def test_timeouts():
    gate = threading.Event()
    with Engine(1) as eng:
        t = eng.push(lambda out: gate.wait(20), (), np.zeros(1))
        with pytest.raises(TimeoutError, match="call #0"):
            t.result(timeout=0.01)
        with pytest.raises(TimeoutError):
            eng.wait_all(timeout=0.01)
        gate.set()
        assert t.result(timeout=20) is True


# =============================================================================================
# shutdown
# =============================================================================================
def test_close_finishes_pending_work_and_joins_the_workers():
    out = np.zeros(10)
    eng = Engine(3)
    threads = list(eng._threads)
    for i in range(10):
        eng.push(lambda out, i=i: (time.sleep(1e-3), out.__setitem__(i, i)), (), out)
    eng.close()
    assert not any(t.is_alive() for t in threads) and eng.closed
    np.testing.assert_array_equal(out, np.arange(10))
    eng.close()  # idempotent
    with pytest.raises(EngineError, match="closed"):
        eng.push(print)
    eng.wait_all()


def _until(condition, limit=20.0):
    end = time.monotonic() + limit
    while not condition() and time.monotonic() < end:
        time.sleep(1e-3)
    return condition()


def test_close_cancel_cancels_what_has_not_started():
    eng = Engine(1)
    running = threading.Event()
    # The one worker is busy until the engine is closed, so the queued calls cannot have started.
    started = eng.push(lambda: (running.set(), _until(lambda: eng.closed))[1])
    queued = [eng.push(lambda out: out.fill(1), (), np.zeros(2)) for _ in range(5)]
    assert running.wait(20)
    eng.close(cancel=True)
    assert started.result() is True
    for t in queued:
        assert t.cancelled()
        with pytest.raises(EngineError, match="cancelled by Engine.close"):
            t.result()


def test_context_manager_raises_failures_on_exit_and_cancels_on_error():
    with pytest.raises(EngineError, match="ZeroDivisionError"):
        with Engine(2) as eng:
            eng.push(lambda: 1 / 0)
    assert eng.closed
    with pytest.raises(KeyError, match="mine"):  # the block's own error, not masked
        with Engine(1) as eng:
            eng.push(lambda: _until(lambda: eng.closed))
            never = eng.push(lambda: 1 / 0)
            raise KeyError("mine")
    assert never.cancelled()


def test_an_engine_nobody_closed_stops_its_threads_when_collected():
    eng = Engine(2)
    out = np.zeros(4)
    eng.push(lambda out: (time.sleep(0.01), out.fill(3)), (), out)
    threads = list(eng._threads)
    del eng
    gc.collect()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)
    np.testing.assert_array_equal(out, 3)  # the pending call was finished, not dropped


# =============================================================================================
# concurrent pushers, bookkeeping
# =============================================================================================
def test_concurrent_pushers_each_keep_their_own_order():
    """Four threads push read-modify-write increments of one counter and append to one log: no
    increment is lost, and each thread's calls ran in the order it pushed them."""
    counter, log = np.zeros(1, np.int64), []

    def bump(c, tag):
        v = int(c[0])
        time.sleep(0)  # let another worker in if the engine failed to order us
        c[0] = v + 1
        log.append(tag)

    def pusher(eng, t):
        for i in range(50):
            eng.push(lambda out, tag=(t, i): bump(out, tag), (), counter)

    with Engine(4) as eng:
        threads = [threading.Thread(target=pusher, args=(eng, t)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    assert counter[0] == 200
    for t in range(4):
        assert [i for tt, i in log if tt == t] == list(range(50))


def test_bookkeeping_stays_small():
    """Ranges of finished calls are pruned while the engine is busy and forgotten when it is idle."""
    gate = threading.Event()
    buf = np.zeros(12000)
    with Engine(2) as eng:
        blocker = eng.push(lambda: gate.wait(20), writes=buf[:1])  # keeps the engine from going idle
        most = 0
        for i in range(1, 3000):
            eng.push(lambda out: None, (), buf[4 * i:4 * i + 4]).result()
            most = max(most, sum(len(r.segs) for r in eng._state.spaces.values()))
        assert most <= 1026, most
        gate.set()
        blocker.result()
        eng.wait_all()
        assert eng._state.spaces == {} and eng.pending == 0


def test_the_readme_example_runs_as_written():
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    example = re.search(r"## Asynchronous engine\n.*?```python\n(.*?)```", text, re.S).group(1)
    scope: dict = {}
    exec(compile(example, "README.md (Asynchronous engine)", "exec"), scope)
    x, x2, b = scope["x"], scope["x2"], scope["b"]
    h = np_ref(lambda x, b: _gelu(x + b), x, b)
    assert_close(scope["h"], h, rtol=1e-4, atol=1e-5)
    assert_close(scope["s"], np_ref(_softmax, scope["h"]))
    assert_close(scope["h2"], np_ref(lambda x, b: _gelu(x + b), x2, b), rtol=1e-4, atol=1e-5)


def test_numba_kernels_take_turns_under_the_workqueue_layer(monkeypatch):
    import numba
    from fusegen.rt import engine
    from fusegen.examples import softmax
    monkeypatch.setattr(engine, "_layer_safe", None)
    monkeypatch.setattr(numba, "threading_layer", lambda: "workqueue")
    k = fg.compile(softmax)
    assert engine._needs_layer_lock(k) is True          # two parallel launches at once would abort
    assert engine._needs_layer_lock(lambda *a, **kw: None) is False
    monkeypatch.setattr(engine, "_layer_safe", None)
    monkeypatch.setattr(numba, "threading_layer", lambda: "omp")
    assert engine._needs_layer_lock(k) is False


def test_many_readers_of_one_array_cost_linear_bookkeeping(monkeypatch):
    """n calls reading one array (shared weights), pushed while none can run: the engine checks
    each earlier reader O(1) times on average, not once per later push (that was O(n^2))."""
    import fusegen.rt.engine as engine_module
    checks = [0]
    real = engine_module._matters

    def counting(t):
        checks[0] += 1
        return real(t)

    monkeypatch.setattr(engine_module, "_matters", counting)
    gate = threading.Event()
    w = np.ones(16, np.float32)
    outs = [np.empty(1, np.float32) for _ in range(1000)]

    def reader(w, out):
        gate.wait(10)
        out[0] = w.sum()

    with Engine(workers=1) as eng:
        for o in outs:
            eng.push(reader, (w,), o)
        assert checks[0] < 10 * len(outs), checks[0]
        gate.set()
    assert all(o[0] == 16 for o in outs)
