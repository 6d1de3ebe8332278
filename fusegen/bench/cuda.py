"""``fusegen bench --device cuda`` (and ``fusegen demo``'s GPU table): the benchmark on a GPU.

What differs from the CPU bench (``fusegen.bench.harness``), and why:

* **Memory.** Inputs go to the device once per case; each fusegen method writes into output
  arrays of its own, allocated on the device when it is bound and passed as ``out=`` (filled
  with NaN first, so a kernel that writes nothing fails its check). torch, CuPy and JAX get
  their own device copies of the inputs and allocate their outputs the way their users' code
  does (their caching allocators, not ``cudaMalloc``, after the first call). Every method's
  first result is copied back and checked against NumPy, as on the CPU.
* **Device time.** A method's call returns once its kernels are queued. Each timed call is
  bracketed by two CUDA events on the stream every method here runs on (the legacy default
  stream), and is preceded by a *prelude*: a kernel writing a buffer twice the L2 size (the
  previous method read the same inputs: without it part of them would come from L2) and a
  one-thread spin kernel (``lead_s`` long, longer than the slowest method takes to queue its
  call), so that the GPU reaches the first event only after the host has queued the call and
  the second event: the bracket then holds the kernels and nothing of the host. A method whose
  call waits for its own result on streams of its own (``Method.synchronous``: jax.jit) is
  timed by the wall clock, synchronized before and after. Methods are interleaved per round
  with the start rotating, as on the CPU; medians are reported and every sample kept.
* **The bound.** A grid-stride copy kernel (Numba CUDA, float32) over two buffers of
  ``bandwidth_bytes`` runs once per round of every large case, with the same prelude and
  events: the copy bandwidth of the case's own rounds, counting bytes read plus written. The
  bound of a case is (bytes of its inputs and outputs, once) / that bandwidth; a method's
  ``bandwidth_fraction`` is bound / its median (1.0 = as fast as a copy of the same bytes).
  The copy bandwidth before and after the cases, and the driver's device-to-device memcpy,
  are in ``bandwidth``.
* **Per call**, at the small shape: rounds of many calls, wall clock, the stream synchronized
  at the end of each round: the host's cost per call (launch and Python overhead).
* **Simulator** (``NUMBA_ENABLE_CUDASIM=1``): no events and no real device; every timing falls
  back to the wall clock (synchronized), the prelude is skipped, and ``timer`` says so. This
  is how the whole path is tested without a GPU; its times mean nothing.

The targets (issue #4): on large cases *every* fusegen CUDA backend reaches
``TARGET_BANDWIDTH_FRACTION`` of the copy bandwidth and is faster than eager torch and CuPy.
"""
from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from statistics import median
from typing import Any, Callable

import numpy as np
from numba import cuda, float32

from ..lower_cuda import simulator
from . import harness as bench
from .cases import OPS, Method, OpBench, Thunk
from .cuda_methods import Placed, competitor_methods, fusegen_methods, gpu_info, to_host
from .harness import BenchConfig, Case, Progress, calls_for
from .targets import Targets
from .machine import BANDWIDTH_BYTES, SPREAD_LIMIT, Bandwidth, machine_info, round_spread
from .report import fmt_bytes

#: Issue #4: every fusegen CUDA backend at this fraction of the copy bandwidth or more.
TARGET_BANDWIDTH_FRACTION = 0.8
#: The methods fusegen must be faster than (issue #4: eager torch and CuPy, where installed).
RIVALS = ("torch-cuda", "cupy-cuda")
GPU_TARGETS = Targets(1.0 / TARGET_BANDWIDTH_FRACTION, None, every_fusegen=True, ahead_of=RIVALS,
                      ahead_label="slowest fusegen vs torch/cupy")
SCHEMA = "fusegen-bench-cuda/1"
#: Lead of the spin kernel: at least this, at most that (a method queueing slower than that
#: has host gaps in its device time, and a warning says so).
LEAD_MIN_S, LEAD_MAX_S = 50e-6, 5e-3
_THREADS = 256


# --- is there a GPU ---------------------------------------------------------------------------------
def unavailable() -> str | None:
    """Why the GPU bench cannot run here (no numba-cuda, no GPU or driver), or None."""
    from .methods import cuda_unavailable
    return cuda_unavailable()


# --- device kernels: the copy probe and the prelude ------------------------------------------------
# Module-level, so the simulator can swap in its own ``cuda`` for these functions' globals.
@cuda.jit
def _copy(dst, src):  # pragma: no cover - runs on the device
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < src.size:
        dst[i] = src[i]
        i += stride


@cuda.jit
def _fill(buf, value):  # pragma: no cover - runs on the device
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < buf.size:
        buf[i] = value
        i += stride


@cuda.jit
def _spin(iterations, out):  # pragma: no cover - runs on the device
    # a chain of dependent multiply-adds: its time grows with ``iterations``, nothing else
    x = float32(1.0)
    for _ in range(iterations):
        x = x * float32(0.999999) + float32(1e-7)
    out[0] = x


def _grid(n: int) -> int:
    return max(1, min(-(-n // _THREADS), 1 << 20))


class CopyProbe:
    """A device-to-device copy of ``nbytes`` (float32) by a grid-stride Numba CUDA kernel;
    ``moved`` counts the bytes read and written."""

    def __init__(self, nbytes: int, stream: Any):
        self.src = cuda.to_device(np.ones(max(1, nbytes // 4), np.float32), stream=stream)
        self.dst = cuda.device_array_like(self.src, stream=stream)
        self.stream, self.moved = stream, 2 * self.src.nbytes
        self.grid = 4 if simulator() else _grid(self.src.size)

    def __call__(self) -> None:
        _copy[self.grid, 16 if simulator() else _THREADS, self.stream](self.dst, self.src)

    def memcpy(self) -> None:
        """The driver's device-to-device copy of the same buffers, for comparison."""
        self.dst.copy_to_device(self.src, stream=self.stream)


class Prelude:
    """What runs before every timed call on a real GPU: flush L2 (write ``flush_bytes``, twice its
    size) and spin ``lead_s`` on one thread, so the host has queued the call before it starts."""

    #: The spins timed to calibrate: iterations of the short and the long one.
    CALIBRATION = (1 << 16, 1 << 18)

    def __init__(self, stream: Any, flush_bytes: int):
        self.stream = stream
        self.buf = cuda.device_array(max(1, flush_bytes // 4), np.float32, stream=stream)
        self.out = cuda.device_array(1, np.float32, stream=stream)
        self.per_iteration_s = self._calibrate()
        self.set_lead(LEAD_MIN_S)

    def spin(self, iterations: int) -> None:
        _spin[1, 1, self.stream](iterations, self.out)

    def _calibrate(self) -> float:
        """Seconds per spin iteration: the difference of the best of a few short and long spins."""
        self.spin(1)
        per = {}
        short, long = self.CALIBRATION
        for n in (short, long):
            best = []
            for _ in range(3):
                e0, e1 = cuda.event(), cuda.event()
                e0.record(self.stream)
                self.spin(n)
                e1.record(self.stream)
                e1.synchronize()
                best.append(e0.elapsed_time(e1) * 1e-3)
            per[n] = min(best)
        return max((per[long] - per[short]) / (long - short), 1e-10)

    def set_lead(self, seconds: float) -> None:
        self.lead_s = min(LEAD_MAX_S, max(LEAD_MIN_S, seconds))
        self.iterations = int(self.lead_s / self.per_iteration_s)

    def __call__(self) -> None:
        _fill[_grid(self.buf.size), _THREADS, self.stream](self.buf, np.float32(0))
        self.spin(self.iterations)


# --- clocks -------------------------------------------------------------------------------------------
class WallClock:
    """Wall time of the calls between ``start`` and ``stop``, the stream synchronized at both."""

    kind = "wall clock, the stream synchronized before and after"

    def __init__(self, stream: Any):
        self.stream = stream

    def start(self) -> Any:
        self.stream.synchronize()
        return time.perf_counter()

    def stop(self, token: Any) -> Any:
        self.stream.synchronize()
        return time.perf_counter() - token

    def seconds(self, token: Any) -> float:
        return token

    def no_frees(self) -> contextlib.AbstractContextManager:
        """A context in which timing is not disturbed by freeing device memory (nothing to do here)."""
        return contextlib.nullcontext()


class EventClock(WallClock):
    """Device time between two CUDA events recorded on the stream (read after it is synchronized)."""

    kind = "CUDA events on the stream (device time)"

    def start(self) -> Any:
        e = cuda.event()
        e.record(self.stream)
        return e

    def stop(self, token: Any) -> Any:
        e = cuda.event()
        e.record(self.stream)
        return token, e

    def seconds(self, token: Any) -> float:
        start, end = token
        return start.elapsed_time(end) * 1e-3

    def no_frees(self) -> contextlib.AbstractContextManager:
        # numba frees device memory in batches, and cuMemFree waits for the device: a batch freed
        # inside a bracket would put a host gap into it, so nothing is freed until the rounds end
        return cuda.defer_cleanup()


def time_on_device(calls: dict[str, Thunk], rounds: int, clock: WallClock, prelude: Callable[[], None] | None = None,
                   calls_per_round: dict[str, int] | None = None, synchronous: frozenset = frozenset()
                   ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """``bench.time_interleaved``'s rotation with device clocks: per round, each call (after the
    ``prelude``) between ``clock.start`` and ``clock.stop``; the names in ``synchronous`` by the
    wall clock instead. Returns seconds per call (one sample per round) and the host's seconds
    per call (until each call returned)."""
    wall = WallClock(clock.stream)
    counts = calls_per_round or dict.fromkeys(calls, 1)
    tokens: dict[str, list] = {n: [] for n in calls}
    host: dict[str, list[float]] = {n: [] for n in calls}

    def timed(name: str, fn: Thunk) -> Thunk:
        c, count = (wall if name in synchronous else clock), counts[name]

        def run() -> None:
            if prelude is not None:
                prelude()
            token = c.start()
            t0 = time.perf_counter_ns()
            for _ in range(count):
                fn()
            host[name].append((time.perf_counter_ns() - t0) * 1e-9 / count)
            tokens[name].append((c, c.stop(token)))
        return run

    with clock.no_frees():
        bench.time_interleaved({n: timed(n, fn) for n, fn in calls.items()}, rounds)
        clock.stream.synchronize()
    return {n: [c.seconds(t) / counts[n] for c, t in toks] for n, toks in tokens.items()}, host


def gpu_methods(spec: OpBench, cfg: BenchConfig) -> tuple[list[Method], dict[str, str]]:
    """fusegen's CUDA backends, then the competitors, for one op."""
    fg, skipped = fusegen_methods(spec, list(cfg.backends), cfg.dtype)
    others, why = competitor_methods(spec, cfg)
    return fg + others, {**skipped, **why}


# --- one case -------------------------------------------------------------------------------------------
@dataclass
class Device:
    """What a GPU run shares between its cases: the stream, the clock, the prelude, the probe."""

    stream: Any
    clock: WallClock
    prelude: Prelude | None
    probe: CopyProbe

    @classmethod
    def open(cls, probe_bytes: int) -> Device:
        stream = cuda.default_stream()
        if simulator():
            return cls(stream, WallClock(stream), None, CopyProbe(probe_bytes, stream))
        flush = max(2 * (gpu_info().get("l2_bytes") or 0), 64 << 20)
        return cls(stream, EventClock(stream), Prelude(stream, flush), CopyProbe(probe_bytes, stream))

    @property
    def timer(self) -> str:
        if self.prelude is None:
            return f"{self.clock.kind}: numba-cuda's simulator has no CUDA events (its times mean nothing)"
        return (f"{self.clock.kind}; before each timed call an L2 flush ({fmt_bytes(self.prelude.buf.nbytes)} "
                "written) and a spin kernel, so the call is queued before the GPU reaches it")

    def bandwidth(self, reps: int, memcpy: bool = False) -> Bandwidth:
        """The copy probe's (or the driver's memcpy's) bandwidth: ``reps`` timed passes."""
        run = self.probe.memcpy if memcpy else self.probe
        run()
        samples, _ = time_on_device({"probe": run}, reps, self.clock, self.prelude)
        how = ("cudaMemcpy device-to-device passes" if memcpy else
               "grid-stride Numba CUDA copy kernel passes (float32)") + \
            f" of {fmt_bytes(self.probe.src.nbytes)}, read + written"
        return Bandwidth("copy", self.probe.src.nbytes, tuple(self.probe.moved / t for t in samples["probe"]), how)


def _host_seconds(fn: Thunk, stream: Any, calls: int = 3) -> float:
    """How long ``fn`` takes to return (its kernels queued), the best of a few calls."""
    best = float("inf")
    for _ in range(calls):
        stream.synchronize()
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    stream.synchronize()
    return best


def measure_case(methods: list[Method], case: Case, arrays: tuple, rounds: int, dev: Device,
                 calls_per_round: int = 1, warmup: int = 2) -> dict:
    """``bench.measure_case`` on the GPU: place the inputs, check every method, then time the
    ones that passed, interleaved; large cases on the device's clock with the prelude and the
    copy probe in every round, small ones by the wall clock (the host's cost per call)."""
    ref = bench.reference(case.spec, arrays, case.attrs)
    placed = Placed(arrays, tuple(cuda.to_device(a) for a in arrays), ref)
    results, calls, ref, rtol = bench.check_methods(methods, case, arrays, warmup, placed, to_host, ref)
    synchronous = frozenset(m.name for m in methods if m.synchronous)
    extra: dict[str, Any] = {}
    if case.small:
        counts = {n: calls_for(fn, calls_per_round) for n, fn in calls.items()}
        samples, host = time_on_device(calls, rounds, WallClock(dev.stream), None, counts)
        extra["timer"] = WallClock.kind + ": rounds of many calls, the stream synchronized at the end"
    else:
        counts = dict.fromkeys(calls, 1)
        lead = max((_host_seconds(fn, dev.stream) for n, fn in calls.items() if n not in synchronous), default=0.0)
        if dev.prelude is not None:
            dev.prelude.set_lead(1.5 * lead + 20e-6)
            extra["lead_s"] = dev.prelude.lead_s
        calls["(copy probe)"], counts["(copy probe)"] = dev.probe, 1
        samples, host = time_on_device(calls, rounds, dev.clock, dev.prelude, counts, synchronous)
        extra["copy_bandwidth"] = bench.probed_bandwidth(dev.probe.moved, samples.pop("(copy probe)"),
                                                         "median of one copy-kernel pass per round, interleaved "
                                                         "with the methods")
        host.pop("(copy probe)")
        extra["timer"] = dev.timer
    for name in samples:
        results[name]["host_s"] = median(host[name])
        results[name]["timer"] = "wall clock" if name in synchronous or case.small else dev.clock.kind
    doc = bench.case_doc(case, arrays, ref, results, rtol, rounds, calls_per_round, samples, counts)
    return {**doc, **extra}


def host_gap_warnings(docs: list[dict]) -> list[str]:
    """Methods whose calls took longer to queue than the prelude's lead: their device time then
    includes time the GPU waited for the host."""
    out = []
    for d in docs:
        lead = d.get("lead_s")
        for name, e in d["results"].items():
            if lead and e.get("timer", "").startswith("CUDA events") and e.get("host_s", 0) > lead:
                out.append(f"{d['op']} {d['label']}: {name} took {e['host_s'] * 1e6:.0f} us to queue a call, more "
                           f"than the {lead * 1e6:.0f} us lead: its device time includes host gaps")
    return out


def issue_verdict(docs: list[dict], shape: tuple[int, int] = (4096, 4096)) -> dict | None:
    """Issue #4's question, answered from the cases: add_reduce_sum at ``shape``, both axes, both
    fusegen CUDA backends present and meeting the targets (>= 80% of the copy bandwidth, faster
    than torch and CuPy where they ran). None when those cases were not run."""
    rows = [d for d in docs if d["op"] == "add_reduce_sum" and d["size"] == "large" and d["shapes"][0] == list(shape)]
    if not rows:
        return None
    backends = ("numba-cuda", "aot-cuda")
    parts, met = [], True
    for d in rows:
        res = d["results"]
        cells = [f"{n} {100 * res[n]['bandwidth_fraction']:.0f}%" if "bandwidth_fraction" in res.get(n, {})
                 else f"{n} {'FAIL' if n in res else 'absent'}" for n in backends]
        ahead = d["targets"].get("ahead")
        if ahead:
            cells.append(f"{ahead['other']} at {ahead['value']:.2f}x the slower fusegen backend's time")
        met = met and all(n in res and res[n]["ok"] for n in backends) and all(t["met"] for t in d["targets"].values())
        parts.append(f"{d['label']}: " + ", ".join(cells))
    return {"met": met, "shape": list(shape), "text": f"issue #4 (add_reduce_sum {shape[0]}x{shape[1]}, both fusegen "
            f"CUDA backends >= {100 * TARGET_BANDWIDTH_FRACTION:.0f}% of the copy bandwidth and faster than torch / "
            f"cupy): {'MET' if met else 'NOT MET'}; " + "; ".join(parts)}


# --- the two commands ------------------------------------------------------------------------------------
def run_bench(cfg: BenchConfig, progress: Progress | None = None) -> dict:
    """``fusegen bench --device cuda``: every case of ``cfg`` on the GPU; the JSON document (the
    CPU bench's schema where it applies; ``machine.gpu`` describes the device)."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX would take 75% of the GPU
    say = progress or (lambda step, total, label: None)
    cases, ops, total = cfg.plan()
    step = 1
    say(step, total, "copy bandwidth")
    dev = Device.open(cfg.bandwidth_bytes)
    bw_start = dev.bandwidth(cfg.bandwidth_reps)
    memcpy = dev.bandwidth(cfg.bandwidth_reps, memcpy=True)
    docs, names, skipped, step = bench.measure_ops(
        cfg, cases, gpu_methods, lambda m, c, a, r, k: measure_case(m, c, a, r, dev, k), say, step, total)
    if docs is None:
        return {"schema": SCHEMA, "methods": [], "skipped": skipped, "cases": [], "ok": False}
    step += 1
    say(step, total, "copy bandwidth, again")
    bw = bw_start.merged(dev.bandwidth(cfg.bandwidth_reps))
    for d in docs:
        bench.finish_case(d, bw, GPU_TARGETS)
    machine = machine_info()
    machine["gpu"] = gpu_info()
    spread = round_spread(docs)
    warnings = host_gap_warnings(docs)
    if spread is not None and spread > SPREAD_LIMIT:
        warnings.append(f"the rounds of a method disagree by {100 * spread:.0f}% (median interquartile range / "
                        "median): something else used the GPU meanwhile; rerun")
    return {"schema": SCHEMA, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "device": "cuda", "machine": machine, "timer": dev.timer, "bound_probe": "copy",
            "bandwidth": {"copy": bw.as_json(), "copy_start": bw_start.as_json(), "memcpy": memcpy.as_json()},
            "bound": "(bytes of every input and output, once) / copy bandwidth of the case's own rounds "
                     "(bytes read + written by a copy kernel)",
            "allocator": "fusegen: out= arrays allocated once per case; torch, CuPy, JAX: their own pools",
            "targets": {**GPU_TARGETS.as_json(), "bandwidth_fraction": TARGET_BANDWIDTH_FRACTION},
            "settings": {"ops": ops, "rounds": cfg.rounds, "shapes": [list(s) for s in cfg.shapes],
                         "small_shape": list(cfg.small_shape), "per_call_rounds": cfg.per_call_rounds,
                         "per_call_calls": cfg.per_call_calls, "dtype": cfg.dtype, "backends": list(cfg.backends),
                         "devices": ["cuda"], "jax": cfg.jax, "torch": cfg.torch, "torch_compile": cfg.torch_compile,
                         "interleaved": "rotating start", "warmup_calls": 2, "bandwidth_bytes": cfg.bandwidth_bytes},
            "methods": list(names), "fusegen_methods": [n for n, f in names.items() if f],
            "skipped": {n: w for n, w in skipped.items() if n not in names},
            "round_spread": spread, "warnings": warnings, "cases": docs, "compile_times": None,
            "issue_4": issue_verdict(docs),
            "ok": all(d["ok"] for d in docs)}


def run_demo(shape: tuple[int, ...], axis: int, dtype: str, rounds: int, backends: list[str],
             probe_bytes: int = BANDWIDTH_BYTES) -> dict:
    """``fusegen demo``'s GPU table: add_reduce_sum through fusegen's CUDA backends (and eager
    torch / CuPy where installed), checked, timed against the copy bound."""
    spec = OPS["add_reduce_sum"]
    cfg = BenchConfig(backends=tuple(backends), dtype=dtype, jax=False, devices=("cuda",), bandwidth_bytes=probe_bytes)
    fg, skipped = fusegen_methods(spec, backends, dtype)
    doc: dict[str, Any] = {"case": None, "skipped": skipped, "methods": [m.name for m in fg]}
    if not fg:
        return doc
    others, why = competitor_methods(spec, cfg)
    doc["skipped"].update(why)
    dev = Device.open(cfg.bandwidth_bytes)
    bw = dev.bandwidth(cfg.bandwidth_reps)
    case = Case(spec, tuple(shape), {"axis": axis})
    doc["case"] = bench.finish_case(measure_case(fg + others, case, spec.make_inputs(case.shape, dtype), rounds, dev),
                                    bw, GPU_TARGETS)
    doc.update(bandwidth=bw.as_json(), machine={**machine_info(), "gpu": gpu_info()}, timer=dev.timer)
    return doc
