"""Independent fused-op calls through ``fg.Engine`` versus the same calls one after another.

Every call works on its own inputs and preallocated outputs, so the engine may run them all at
once; each array is below the runtime's ``PARALLEL_THRESHOLD``, so every kernel is
single-threaded and any speedup comes from the engine running calls side by side. For
comparison, a third method deals the calls out round-robin to as many plain threads (a static
split, no bookkeeping: the engine's workers instead take the next ready call as they free up,
which balances calls of unequal cost). The methods take turns within each round (the one going first
rotating), so a noisy neighbour slows them alike; medians are reported, every sample goes to
the JSON.

    python benchmarks/bench_engine.py [--rounds 101] [--calls 12] [--backends numba,aot] [--json PATH]
    python -m benchmarks.bench_engine ...

``run()`` returns the results as a dict (for ``fusegen bench`` to include); ``main()`` prints them.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from statistics import median

import numpy as np

import fusegen as fg
import fusegen.examples as ex
from fusegen.rt.engine import Engine
from fusegen.runtime import PARALLEL_THRESHOLD

#: (op, inputs by kind, attributes): "x"/"y" are (rows, cols) arrays, "w" a (cols,) row.
CALLS = [(ex.smooth_l1, "xy", {"sigma": 0.5}), (ex.bias_gelu, "xw", {}), (ex.softmax, "x", {"axis": -1}),
         (ex.rms_norm, "xw", {}), (ex.layer_norm, "x", {}), (ex.add_reduce_sum, "xy", {"axis": 1})]


def _slots(calls: int, shape, backend: str, rng) -> list:
    """One (kernel, inputs, outputs, attrs) per call, cycling through ``CALLS``; calls of one op
    share its kernel (both backends' kernels run concurrent calls: ``backend="aot"`` ones are
    reentrant, each call taking an argument block of its own)."""
    kernels: dict = {}
    slots = []
    for i in range(calls):
        op, kinds, attrs = CALLS[i % len(CALLS)]
        if op not in kernels:
            kernels[op] = fg.compile(op, backend=backend)
        arrays = {"x": rng.standard_normal(shape, np.float32), "y": rng.standard_normal(shape, np.float32),
                  "w": rng.standard_normal(shape[-1:], np.float32)}
        inputs = tuple(arrays[k] for k in kinds)
        first = kernels[op](*inputs, **attrs)  # compiles; its results give the outputs' shapes
        out = tuple(map(np.empty_like, first)) if isinstance(first, tuple) else np.empty_like(first)
        slots.append((kernels[op], inputs, out, attrs))
    return slots


def _sequential(slots, engine, pool) -> None:
    for kernel, inputs, out, attrs in slots:
        kernel(*inputs, out=out, **attrs)


def _pushed(slots, engine, pool) -> None:
    for kernel, inputs, out, attrs in slots:
        engine.push(kernel, inputs, out, **attrs)
    engine.wait_all()


def _hand_split(slots, engine, pool) -> None:
    """The calls dealt out round-robin by hand, one share per thread, no dependency tracking."""
    n = pool._max_workers
    list(pool.map(_sequential, [slots[i::n] for i in range(n)], [None] * n, [None] * n))


METHODS = {"sequential": _sequential, "engine": _pushed, "threads": _hand_split}


def _outputs(slots) -> list:
    return [o for _, _, out, _ in slots for o in (out if isinstance(out, tuple) else (out,))]


def bench_backend(backend: str, calls: int, shape, rounds: int, workers: int | None, rng) -> dict:
    """Median seconds per batch of ``calls`` calls: one after another, through the engine, and
    dealt out round-robin to as many plain threads."""
    slots = _slots(calls, shape, backend, rng)
    with Engine(workers) as engine, ThreadPoolExecutor(engine.workers) as pool:
        _sequential(slots, engine, pool)          # the reference results
        want = [o.copy() for o in _outputs(slots)]
        for name in ("engine", "threads"):        # compute the same thing
            for o in _outputs(slots):
                o.fill(np.nan)
            METHODS[name](slots, engine, pool)
            for w, g in zip(want, _outputs(slots)):
                np.testing.assert_array_equal(g, w)
        samples: dict = {m: [] for m in METHODS}
        order = list(METHODS)
        for r in range(rounds):
            for name in order[r % 3:] + order[:r % 3]:  # rotate which method goes first
                t0 = time.perf_counter()
                METHODS[name](slots, engine, pool)
                samples[name].append(time.perf_counter() - t0)
        workers = engine.workers
    med = {m: median(s) for m, s in samples.items()}
    return {"backend": backend, "calls": calls, "workers": workers, "median_s": med,
            "speedup": med["sequential"] / med["engine"], "threads_speedup": med["sequential"] / med["threads"],
            "samples_s": samples}


def run(calls: int = 12, shape=(256, 448), rounds: int = 101, backends=("numba", "aot"),
        workers: int | None = None, seed: int = 0) -> dict:
    """The benchmark's results as a plain dict (the JSON written by ``main``)."""
    if int(np.prod(shape)) >= PARALLEL_THRESHOLD:
        raise ValueError(f"shape {shape} has {int(np.prod(shape))} elements, not below PARALLEL_THRESHOLD "
                         f"({PARALLEL_THRESHOLD}): the kernels would be multi-threaded themselves")
    rng = np.random.default_rng(seed)
    load_before = os.getloadavg()
    results = [bench_backend(b, calls, tuple(shape), rounds, workers, rng) for b in backends]
    return {"schema": "fusegen-bench-engine/1", "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "usable_cpus": len(os.sched_getaffinity(0))
                        if hasattr(os, "sched_getaffinity") else os.cpu_count(),
                        "processor": platform.processor() or platform.machine(),
                        "loadavg_before": load_before, "loadavg_after": os.getloadavg()},
            "shape": list(shape), "dtype": "float32", "rounds": rounds,
            "ops": [op.name for op, _, _ in CALLS], "results": results}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=12, help="independent calls per batch (default 12)")
    p.add_argument("--shape", default="256,448", help="rows,cols of every input (default 256,448)")
    p.add_argument("--rounds", type=int, default=101)
    p.add_argument("--workers", type=int, default=None, help="engine threads (default: usable cores)")
    p.add_argument("--backends", default="numba,aot")
    p.add_argument("--json", default="bench-results/engine.json", help="where to write the results")
    a = p.parse_args(argv)
    res = run(a.calls, tuple(int(n) for n in a.shape.split(",")), a.rounds, a.backends.split(","), a.workers)
    m = res["machine"]
    print(f"{a.calls} independent calls of {', '.join(res['ops'])} on {res['shape']} float32, median of "
          f"{a.rounds} interleaved rounds; {m['usable_cpus']} cores, load average "
          f"{m['loadavg_before'][0]:.2f} before, {m['loadavg_after'][0]:.2f} after")
    print(f"{'backend':8} {'workers':>7} {'sequential':>12} {'engine':>12} {'speedup':>8}   "
          f"{'round-robin threads':>19} {'speedup':>8}")
    for r in res["results"]:
        med = r["median_s"]
        print(f"{r['backend']:8} {r['workers']:>7} {med['sequential'] * 1e3:>9.2f} ms {med['engine'] * 1e3:>9.2f} ms "
              f"{r['speedup']:>7.2f}x   {med['threads'] * 1e3:>16.2f} ms {r['threads_speedup']:>7.2f}x")
    if all(r["threads_speedup"] < 1.1 for r in res["results"]):
        print("note: plain threads gained nothing either, so no core was idle (see the load average): "
              "run again on a quieter machine")
    path = Path(a.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
