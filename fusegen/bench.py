"""The measurement harness behind ``fusegen demo`` and ``fusegen bench``.

What it measures and why:

* **Read bandwidth**, in this process, with a parallel Numba sum over a float32
  array far larger than any cache. Memory-bound kernels such as add+reduce cannot
  beat ``bytes read / read bandwidth``, so that *bound* is the yardstick every
  result is compared with (ratio 1.00 = at the bound).
* **Steady-state time**: every method is called once first (that first call, which
  includes any JIT or native compile for the signature, is reported separately),
  then all methods run **interleaved**, one call each per round (A B C A B C ...),
  so a noisy neighbour slows every method alike instead of skewing one of them.
  Medians of the rounds are reported; every raw sample goes to the JSON.
* **Per-call overhead** on a tiny input: rounds of many calls, each round giving a
  mean; the median of the round means is reported, the minimum beside it.

Nothing here prints: results are plain dicts (the JSON schema), and a ``progress``
callback, when given, hears about each step. ``fusegen.cli`` does the formatting.
"""
from __future__ import annotations

import gc
import math
import os
import platform
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from statistics import median
from typing import Any, Callable

import numpy as np

#: Size of the bandwidth probe: far beyond any L3, so it measures DRAM.
BANDWIDTH_BYTES = 256 << 20
#: Environment variables that change what the numbers mean (thread pools, spinning).
_ENV_RECORDED = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "NUMBA_NUM_THREADS",
                 "NUMBA_THREADING_LAYER", "FUSEGEN_PARALLEL_THRESHOLD", "FUSEGEN_CXX")
#: Chunks the probe is split into: enough for load balance on many threads,
#: large enough (1 MiB) that per-chunk overhead is noise.
_BW_CHUNKS = 256
SCHEMA = "fusegen-bench/1"

Progress = Callable[[int, int, str], None]
Thunk = Callable[[], Any]


# --- bandwidth ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Bandwidth:
    """A measured bandwidth: the best of ``samples`` (bytes/s) over an array of ``nbytes``."""

    kind: str                       # "read" or "copy"
    nbytes: int
    samples: tuple[float, ...]

    @property
    def bytes_per_s(self) -> float:
        # The best repetition: slower ones measure interference, not the memory system.
        return max(self.samples)

    @property
    def gbps(self) -> float:
        return self.bytes_per_s / 1e9

    def as_json(self) -> dict:
        return {"kind": self.kind, "bytes_per_s": self.bytes_per_s, "gbps": self.gbps,
                "array_bytes": self.nbytes, "reps": len(self.samples),
                "samples_gbps": [s / 1e9 for s in self.samples],
                "method": f"best of {len(self.samples)} parallel Numba passes over a float32 array "
                          f"in {_BW_CHUNKS} slice-view chunks"}


_kernels: dict[str, Callable] = {}
_probes: dict[str, bool] = {}
_bandwidth_cache: dict[tuple[str, int], Bandwidth] = {}


def _bw_kernels() -> dict[str, Callable]:
    """Compile (once) the probe kernels. Each prange chunk indexes a *slice view*
    from 0: a computed base index (``a[i]``, ``i in range(start, stop)``) keeps
    LLVM from vectorizing the loop and the probe then measures the core (~8 GB/s),
    not memory."""
    if _kernels:
        return _kernels
    from numba import njit, prange

    @njit(parallel=True, fastmath={"reassoc", "contract"}, cache=True)
    def chunked_sum(a, nchunks):  # pragma: no cover - compiled by Numba
        step = (a.size + nchunks - 1) // nchunks
        parts = np.zeros(nchunks, np.float32)
        for c in prange(nchunks):
            v = a[c * step:min(a.size, (c + 1) * step)]
            s = np.float32(0)
            for i in range(v.size):
                s += v[i]
            parts[c] = s
        return parts.sum()

    @njit(parallel=True, cache=True)
    def chunked_copy(dst, src, nchunks):  # pragma: no cover - compiled by Numba
        step = (src.size + nchunks - 1) // nchunks
        for c in prange(nchunks):
            d = dst[c * step:min(src.size, (c + 1) * step)]
            s = src[c * step:min(src.size, (c + 1) * step)]
            for i in range(s.size):
                d[i] = s[i]

    _kernels.update(sum=chunked_sum, copy=chunked_copy)
    return _kernels


def read_bandwidth(nbytes: int = BANDWIDTH_BYTES, reps: int = 10) -> Bandwidth:
    """Read bandwidth of this machine (bytes/s), measured once per process and size."""
    return _bandwidth("read", nbytes, reps)


def copy_bandwidth(nbytes: int = BANDWIDTH_BYTES, reps: int = 10) -> Bandwidth:
    """Copy bandwidth, counting ``2 * nbytes`` (read + write) per pass; for reporting."""
    return _bandwidth("copy", nbytes, reps)


def _bandwidth(kind: str, nbytes: int, reps: int) -> Bandwidth:
    key = (kind, nbytes)
    if key not in _bandwidth_cache:
        k = _bw_kernels()
        src = np.ones(nbytes // 4, np.float32)  # ones, not empty: every page must be really mapped
        dst = np.empty_like(src) if kind == "copy" else None
        run = (lambda: k["sum"](src, _BW_CHUNKS)) if dst is None else (lambda: k["copy"](dst, src, _BW_CHUNKS))
        moved = src.nbytes * (1 if dst is None else 2)
        run()  # compile / load from Numba's cache, wake the thread pool
        samples = [moved / t for t in time_interleaved({kind: run}, reps)[kind]]
        _bandwidth_cache[key] = Bandwidth(kind, src.nbytes, tuple(samples))
    return _bandwidth_cache[key]


def gbps(nbytes: float, seconds: float) -> float:
    """Effective bandwidth in GB/s (10^9 bytes/s) of moving ``nbytes`` in ``seconds``."""
    return nbytes / seconds / 1e9 if seconds > 0 else float("inf")


# --- the machine ----------------------------------------------------------------------------------
def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo (Linux), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def machine_info() -> dict:
    """What the numbers depend on: CPU, cores, threads, versions."""
    import numba

    import fusegen
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count() or 1
    try:
        layer = numba.threading_layer()
    except ValueError:  # no parallel function has run yet
        layer = None
    return {"cpu_model": cpu_model(), "logical_cpus": os.cpu_count(), "usable_cpus": usable,
            "numba_threads": numba.get_num_threads(), "numba_threading_layer": layer,
            "platform": platform.platform(), "python": platform.python_version(),
            "numpy": np.__version__, "numba": numba.__version__, "fusegen": fusegen.__version__,
            "load_avg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,  # others' load skews all
            "env": {k: os.environ[k] for k in _ENV_RECORDED if k in os.environ}}


# --- the methods being compared -------------------------------------------------------------------
@dataclass
class Method:
    """One way of computing ``sum(x + y, axis)``; ``bind`` returns a zero-argument call."""

    name: str                                          # "numpy", "numba-cpu", "aot-cpu"
    bind: Callable[[np.ndarray, np.ndarray, int], Thunk]
    setup_s: float = 0.0                               # fusegen.compile(...) itself


def numpy_method() -> Method:
    """NumPy's unfused ``np.sum(x + y, axis)``: the reference and the baseline."""
    return Method("numpy", lambda x, y, axis: (lambda: np.sum(x + y, axis=axis)))


def gxx_works() -> bool:
    """Whether the C++ compiler the AOT backend uses ($FUSEGEN_CXX, else g++) builds a shared library."""
    if "gxx" not in _probes:
        compiler = shutil.which(os.environ.get("FUSEGEN_CXX") or "g++")
        ok = False
        if compiler:
            with tempfile.TemporaryDirectory(prefix="fusegen-probe-") as tmp:
                cmd = [compiler, "-x", "c++", "-shared", "-fPIC", "-o", os.path.join(tmp, "p.so"), "-"]
                try:
                    ok = subprocess.run(cmd, input=b'extern "C" int fg_probe() { return 1; }\n',
                                        capture_output=True, timeout=120).returncode == 0
                except (OSError, subprocess.TimeoutExpired):
                    ok = False
        _probes["gxx"] = ok
    return _probes["gxx"]


def cuda_available() -> bool:
    """``numba.cuda.is_available()``, False when numba's CUDA support cannot even be imported."""
    try:
        from numba import cuda
        return bool(cuda.is_available())
    except Exception:  # noqa: BLE001 - any failure to reach a GPU means "no GPU"
        return False


def discover(op: Any, backends: list[str], devices: list[str],
             aot_flags: list[str] | None = None) -> tuple[list[Method], dict[str, str]]:
    """Compile ``op`` for every (backend, device) that works here.

    Returns the working methods and, for the others, ``{name: why it was skipped}``.
    A backend counts as present when its prerequisites are met and
    ``fusegen.runtime.compile`` returns a kernel; failures of the kernel itself are
    *not* skipped here: they surface as FAIL when the kernel is run.
    """
    from . import runtime
    methods: list[Method] = []
    skipped: dict[str, str] = {}
    for device in devices:
        for backend in backends:
            name = f"{backend}-{device}"
            if device == "cuda" and not cuda_available():
                skipped[name] = "no CUDA device"
                continue
            if backend == "aot" and not gxx_works():
                skipped[name] = "no working C++ compiler (g++ or $FUSEGEN_CXX)"
                continue
            options = {"flags": aot_flags} if backend == "aot" and aot_flags is not None else {}
            t0 = time.perf_counter()
            try:
                kernel = runtime.compile(op, backend=backend, device=device, **options)
            except Exception as e:  # noqa: BLE001 - an unavailable backend may fail in any way
                skipped[name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".rstrip(": ")
                continue
            setup = time.perf_counter() - t0
            methods.append(Method(name, lambda x, y, axis, k=kernel: (lambda: k(x, y, axis=axis)), setup))
    return methods, skipped


def jax_available() -> bool:
    """Whether jax imports (the optional ``fusegen[jax]`` extra)."""
    if "jax" not in _probes:
        try:
            import jax  # noqa: F401
            _probes["jax"] = True
        except Exception:  # noqa: BLE001 - a broken jax install is an absent one here
            _probes["jax"] = False
    return _probes["jax"]


_JAX_NAMES = ("jax-cpu", "fg-jax-cpu")


def jax_methods(op: Any, dtype: str) -> tuple[list[Method], dict[str, str]]:
    """JAX's own ``jax.jit(lambda x, y: jnp.sum(x + y, axis))`` ("jax-cpu") and ``op`` called
    through ``fusegen.jax.function`` ("fg-jax-cpu": the XLA FFI handler), in this process.

    Inputs are put on the device once per case, and every call waits for its result
    (``block_until_ready``): JAX dispatches asynchronously, and an unwaited call would time the
    dispatch only. Skipped, with the reason, without jax or a C++ compiler."""
    if not jax_available():
        return [], dict.fromkeys(_JAX_NAMES, "jax is not installed (pip install 'fusegen[jax]')")
    import jax
    import jax.numpy as jnp
    if jax.dtypes.canonicalize_dtype(np.dtype(dtype)) != np.dtype(dtype):
        return [], dict.fromkeys(_JAX_NAMES, f"{dtype} needs jax_enable_x64")
    placed: dict[str, Any] = {}

    def on_device(x: np.ndarray, y: np.ndarray) -> tuple:
        # Both JAX methods of a case share one device copy (the largest inputs are 2 x 64 MiB).
        if placed.get("key") != (id(x), id(y)):
            placed.update(key=(id(x), id(y)), arrays=(jax.device_put(x), jax.device_put(y)))
        return placed["arrays"]

    def bind_ref(x: np.ndarray, y: np.ndarray, axis: int) -> Thunk:
        f = jax.jit(lambda a, b: jnp.sum(a + b, axis=axis))
        xj, yj = on_device(x, y)
        return lambda: f(xj, yj).block_until_ready()

    methods = [Method("jax-cpu", bind_ref)]
    if not gxx_works():
        return methods, {"fg-jax-cpu": "no working C++ compiler (g++ or $FUSEGEN_CXX)"}
    from . import jax as fg_jax
    t0 = time.perf_counter()
    try:
        fn = fg_jax.function(op, dtypes=dtype)
    except Exception as e:  # noqa: BLE001 - reported as skipped, as discover() does
        return methods, {"fg-jax-cpu": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
    setup = time.perf_counter() - t0

    def bind_fg(x: np.ndarray, y: np.ndarray, axis: int) -> Thunk:
        xj, yj = on_device(x, y)
        return lambda: fn(xj, yj, axis=axis).block_until_ready()

    return methods + [Method("fg-jax-cpu", bind_fg, setup)], {}


# --- timing ---------------------------------------------------------------------------------------
def time_interleaved(calls: dict[str, Thunk], rounds: int, calls_per_round: int = 1) -> dict[str, list[float]]:
    """Per round, time each call in turn (A B C A B C ...); returns seconds per call,
    one sample per round (the round's mean when ``calls_per_round > 1``). The
    collector is off meanwhile: a collection landing in one sample is not its cost."""
    samples: dict[str, list[float]] = {name: [] for name in calls}
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(rounds):
            for name, fn in calls.items():
                t0 = time.perf_counter_ns()
                for _ in range(calls_per_round):
                    fn()
                samples[name].append((time.perf_counter_ns() - t0) * 1e-9 / calls_per_round)
    finally:
        if enabled:
            gc.enable()
    return samples


# --- correctness ----------------------------------------------------------------------------------
def tolerance(dtype: np.dtype, n_reduced: int, ref: np.ndarray) -> float:
    """Allowed max abs error of a sum of ``n_reduced`` terms against NumPy's.

    Two float sums in different orders differ by about ``eps * sqrt(n) * |sum|``
    (random rounding); twice that still catches a dropped or doubled element.
    Integer sums must agree exactly.
    """
    if not np.issubdtype(dtype, np.floating):
        return 0.0
    scale = float(np.max(np.abs(ref.astype(np.float64)))) if ref.size else 0.0
    return 2.0 * float(np.finfo(dtype).eps) * math.sqrt(max(1, n_reduced)) * max(scale, 1.0)


def max_abs_error(result: Any, ref: np.ndarray) -> float:
    """Max abs difference in float64; inf when the shape is wrong or a value is NaN."""
    got = np.asarray(result)
    if got.shape != ref.shape:
        return float("inf")
    if got.size == 0:
        return 0.0
    err = float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64))))
    return float("inf") if math.isnan(err) else err


def make_inputs(shape: tuple[int, ...], dtype: np.dtype, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two inputs in [0, 1): positive, so |sum| is the scale the tolerance needs."""
    rng = np.random.default_rng(seed)
    return tuple(rng.random(shape, dtype=np.float32).astype(dtype, copy=False) for _ in range(2))  # type: ignore


# --- one case -------------------------------------------------------------------------------------
def measure_case(methods: list[Method], x: np.ndarray, y: np.ndarray, axis: int, rounds: int,
                 bw: Bandwidth, warmup: int = 2) -> dict:
    """Check and time every method on ``sum(x + y, axis)``: the JSON of one case."""
    ax = axis % x.ndim
    ref = np.sum(x + y, axis=ax)
    tol = tolerance(x.dtype, x.shape[ax], ref)
    nbytes = x.nbytes + y.nbytes
    bound = nbytes / bw.bytes_per_s
    results: dict[str, dict] = {}
    calls: dict[str, Thunk] = {}
    for m in methods:
        fn = m.bind(x, y, axis)
        entry: dict[str, Any] = {"setup_s": m.setup_s}
        t0 = time.perf_counter()
        try:
            out = fn()
            entry["first_call_s"] = time.perf_counter() - t0
            for _ in range(warmup):
                fn()
        except Exception as e:  # noqa: BLE001 - a failing kernel is a FAIL row, not a crash
            entry.update(error=f"{type(e).__name__}: {e}", ok=False)
            results[m.name] = entry
            continue
        err = 0.0 if m.name == "numpy" else max_abs_error(out, ref)
        entry.update(max_abs_err=err, tol=tol, ok=err <= tol)
        results[m.name] = entry
        calls[m.name] = fn
    for name, times in time_interleaved(calls, rounds).items():
        med = median(times)
        results[name].update(median_s=med, min_s=min(times), times_s=times, gbps=gbps(nbytes, med),
                             ratio_to_bound=med / bound)
    base = results.get("numpy", {}).get("median_s")
    for entry in results.values():
        if base and "median_s" in entry:
            entry["speedup_vs_numpy"] = base / entry["median_s"]
    return {"shape": list(x.shape), "axis": axis, "dtype": str(x.dtype), "bytes": nbytes,
            "bound_s": bound, "tol": tol, "results": results,
            "ok": all(e.get("ok", False) for e in results.values())}


def measure_per_call(methods: list[Method], rounds: int, calls_per_round: int,
                     shape: tuple[int, ...] = (4, 5), axis: int = 1) -> dict:
    """Per-call time on a tiny input: dispatch and allocation, not arithmetic."""
    x, y = make_inputs(shape, np.dtype(np.float32), seed=1)
    calls = {}
    for m in methods:
        fn = m.bind(x, y, axis)
        try:
            for _ in range(10):
                fn()
        except Exception:  # noqa: BLE001 - reported by measure_case already
            continue
        calls[m.name] = fn
    calls["(empty loop)"] = lambda: None  # the harness's own cost per call, for scale
    samples = time_interleaved(calls, rounds, calls_per_round)
    overhead = median(samples.pop("(empty loop)"))
    return {"shape": list(shape), "axis": axis, "rounds": rounds, "calls_per_round": calls_per_round,
            "statistic": "median (and min) over rounds of each round's mean per call",
            "loop_overhead_s": overhead,
            "results": {k: {"median_s": median(v), "min_s": min(v), "round_means_s": v}
                        for k, v in samples.items()}}


# --- the two commands -----------------------------------------------------------------------------
@dataclass
class BenchConfig:
    """What ``fusegen bench`` runs; ``quick()`` is the small variant the tests use."""

    shapes: tuple[tuple[int, int], ...] = ((4096, 4096), (16384, 1024), (1024, 16384))
    axes: tuple[int, ...] = (0, 1)
    dtype: str = "float32"
    rounds: int = 15
    per_call_rounds: int = 20
    per_call_calls: int = 2000
    bandwidth_reps: int = 10
    backends: tuple[str, ...] = ("numba", "aot")
    devices: tuple[str, ...] = ("cpu",)
    aot_flags: list[str] | None = None
    jax: bool = True  # also JAX's jit and fusegen.jax.function, when jax is installed (CPU)

    @classmethod
    def quick(cls, **kw: Any) -> BenchConfig:
        small = dict(shapes=((512, 256), (2048, 64), (64, 2048)), rounds=3, per_call_rounds=5,
                     per_call_calls=200, bandwidth_reps=5)
        return cls(**{**small, **kw})


def run_bench(cfg: BenchConfig, progress: Progress | None = None) -> dict:
    """Run every case and the per-call test; returns the JSON document."""
    from .examples import add_reduce_sum
    say = progress or (lambda step, total, label: None)
    total = 2 + len(cfg.shapes) * len(cfg.axes)
    say(1, total, "compiling, read bandwidth")
    methods, skipped = discover(add_reduce_sum, list(cfg.backends), list(cfg.devices), cfg.aot_flags)
    if cfg.jax and "cpu" in cfg.devices:
        more, why = jax_methods(add_reduce_sum, cfg.dtype)
        methods, skipped = methods + more, {**skipped, **why}
    if all(m.name == "jax-cpu" for m in methods):  # nothing of fusegen's: say so now, not after minutes of NumPy
        return {"schema": SCHEMA, "methods": [], "skipped": skipped, "cases": [], "ok": False}
    methods = [numpy_method()] + methods
    bw = read_bandwidth(reps=cfg.bandwidth_reps)
    copy = copy_bandwidth(reps=cfg.bandwidth_reps)
    cases = []
    step = 1
    for shape in cfg.shapes:
        x, y = make_inputs(shape, np.dtype(cfg.dtype))
        for axis in cfg.axes:
            step += 1
            say(step, total, f"({shape[0]},{shape[1]}) axis {axis}")
            cases.append(measure_case(methods, x, y, axis, cfg.rounds, bw))
        del x, y  # the next shape's inputs should not have to share memory with these
    say(total, total, "per-call time (4,5)")
    per_call = measure_per_call(methods, cfg.per_call_rounds, cfg.per_call_calls)
    machine = machine_info()
    return {"schema": SCHEMA, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "op": "add_reduce_sum", "reference": "np.sum(x + y, axis)",
            "machine": machine, "numba_version": machine["numba"],
            "bandwidth": {"read": bw.as_json(), "copy": copy.as_json()},
            "bound": "2 * N * itemsize bytes / read bandwidth",
            "settings": {"rounds": cfg.rounds, "shapes": [list(s) for s in cfg.shapes], "axes": list(cfg.axes),
                         "dtype": cfg.dtype, "backends": list(cfg.backends), "devices": list(cfg.devices),
                         "aot_flags": cfg.aot_flags, "jax": cfg.jax, "interleaved": True, "warmup_calls": 2},
            "methods": [m.name for m in methods], "skipped": skipped,
            "cases": cases, "per_call": per_call, "ok": all(c["ok"] for c in cases)}


def run_demo(shape: tuple[int, ...], axis: int, dtype: str, rounds: int, backends: list[str],
             devices: list[str], aot_flags: list[str] | None = None, progress: Progress | None = None) -> dict:
    """``add_reduce_sum`` once through every available backend, checked against NumPy."""
    from .examples import add_reduce_sum
    say = progress or (lambda step, total, label: None)
    say(1, 3, "compiling")
    methods, skipped = discover(add_reduce_sum, backends, devices, aot_flags)
    doc: dict[str, Any] = {"case": None, "skipped": skipped, "methods": [m.name for m in methods]}
    if not methods:
        return doc  # nothing to show; spare the caller the bandwidth probe and the big inputs
    say(2, 3, "read bandwidth")
    bw = read_bandwidth()
    say(3, 3, "running")
    x, y = make_inputs(shape, np.dtype(dtype))
    doc["case"] = measure_case([numpy_method()] + methods, x, y, axis, rounds, bw)
    doc.update(bandwidth=bw.as_json(), machine=machine_info())
    return doc
