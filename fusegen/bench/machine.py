"""The machine and how it is measured: the memory-bandwidth probes (the bound every result is
compared with), interleaved timing, what the machine is (CPU, threads, versions, load), keeping
freed pages mapped, and whether the run was quiet enough to trust.
"""
from __future__ import annotations

import contextlib
import functools
import ctypes
import ctypes.util
import gc
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from statistics import median
from typing import Iterator

import numpy as np
from numba import njit, prange

from .cases import Thunk

#: Size of the bandwidth probe: far beyond any L3, so it measures DRAM.
BANDWIDTH_BYTES = 256 << 20
#: Environment variables that change what the numbers mean (thread pools, spinning).
_ENV_RECORDED = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "NUMBA_NUM_THREADS",
                 "NUMBA_THREADING_LAYER", "FUSEGEN_PARALLEL_THRESHOLD", "FUSEGEN_CXX")
#: Chunks the probe is split into: enough for load balance on many threads,
#: large enough (1 MiB) that per-chunk overhead is noise.
_BW_CHUNKS = 256


# --- bandwidth ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Bandwidth:
    """A measured bandwidth: the best of ``samples`` (bytes/s) over an array of ``nbytes``."""

    kind: str                       # "read" or "copy"
    nbytes: int
    samples: tuple[float, ...]
    how: str = ""                   # how it was measured, when not by this module's CPU probes

    @property
    def bytes_per_s(self) -> float:
        # The best repetition: slower ones measure interference, not the memory system.
        return max(self.samples)

    @property
    def gbps(self) -> float:
        return self.bytes_per_s / 1e9

    def merged(self, other: Bandwidth) -> Bandwidth:
        """Both probes' samples (the start's and the end's of a run)."""
        return Bandwidth(self.kind, self.nbytes, self.samples + other.samples, self.how)

    def as_json(self) -> dict:
        return {"kind": self.kind, "bytes_per_s": self.bytes_per_s, "gbps": self.gbps,
                "array_bytes": self.nbytes, "reps": len(self.samples),
                "samples_gbps": [s / 1e9 for s in self.samples],
                "method": f"best of {len(self.samples)} " + (self.how or f"parallel Numba passes over a float32 "
                                                                 f"array in {_BW_CHUNKS} slice-view chunks")}


# The probe kernels. Each prange chunk indexes a *slice view* from 0: a computed base index
# (``a[i]``, ``i in range(start, stop)``) keeps LLVM from vectorizing the loop and the probe then
# measures the core (~8 GB/s), not memory. Module-level, so that Numba's disk cache keeps them.
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


def read_pass(a: np.ndarray):
    """One parallel read of all of ``a`` (float32): the probe a large case interleaves with its methods."""
    return chunked_sum(a, _BW_CHUNKS)


def read_bandwidth(nbytes: int = BANDWIDTH_BYTES, reps: int = 10) -> Bandwidth:
    """Read bandwidth of this machine (bytes/s): the best of ``reps`` passes."""
    return _bandwidth("read", nbytes, reps)


def copy_bandwidth(nbytes: int = BANDWIDTH_BYTES, reps: int = 10) -> Bandwidth:
    """Copy bandwidth, counting ``2 * nbytes`` (read + write) per pass; for reporting."""
    return _bandwidth("copy", nbytes, reps)


def _bandwidth(kind: str, nbytes: int, reps: int) -> Bandwidth:
    src = np.ones(nbytes // 4, np.float32)  # ones, not empty: every page must be really mapped
    dst = np.ones_like(src) if kind == "copy" else None
    run = (lambda: chunked_sum(src, _BW_CHUNKS)) if dst is None else (lambda: chunked_copy(dst, src, _BW_CHUNKS))
    moved = src.nbytes * (1 if dst is None else 2)
    run()  # compile / load from Numba's cache, wake the thread pool
    samples = [moved / t for t in time_interleaved({kind: run}, reps)[kind]]
    return Bandwidth(kind, src.nbytes, tuple(samples))


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


#: Distributions whose versions a report names, where installed (read from their metadata).
_VERSIONED = ("numpy", "numba", "llvmlite", "jax", "jaxlib", "torch", "numba-cuda")


def library_versions() -> dict[str, str]:
    """Python's version, every installed one of ``_VERSIONED`` (nothing is imported for it), and
    the C++ compiler the AOT backend uses (the first line of its ``--version``)."""
    import importlib.metadata
    out = {"python": platform.python_version()}
    for dist in _VERSIONED:
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    compiler = shutil.which(os.environ.get("FUSEGEN_CXX") or "g++")
    if compiler:
        try:
            proc = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60)
            out[os.path.basename(compiler)] = (proc.stdout.splitlines() or ["?"])[0].strip()
        except (OSError, subprocess.TimeoutExpired):
            pass
    return out


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
            "versions": library_versions(),
            "env": {k: os.environ[k] for k in _ENV_RECORDED if k in os.environ}}


@contextlib.contextmanager
def reused_pages() -> Iterator[str | None]:
    """Keep freed memory in this process for the duration (glibc: no mmap for large blocks, no
    trimming), so a method's output comes from pages already mapped instead of fresh ones; the
    defaults are restored and the heap trimmed afterwards. Yields what was done, None where it
    cannot be done (not glibc)."""
    libc = _glibc()
    if libc is None or not hasattr(libc, "mallopt"):
        yield None
        return
    m_trim_threshold, m_mmap_max = -1, -4          # mallopt's parameter numbers (malloc.h)
    libc.mallopt(m_mmap_max, 0)
    libc.mallopt(m_trim_threshold, 2 ** 31 - 1)
    try:
        yield "glibc mallopt(M_MMAP_MAX=0, M_TRIM_THRESHOLD=2 GiB): freed pages are reused"
    finally:
        libc.mallopt(m_mmap_max, 65536)             # glibc's defaults
        libc.mallopt(m_trim_threshold, 128 * 1024)
        if hasattr(libc, "malloc_trim"):
            libc.malloc_trim(0)


def trim_heap() -> None:
    """Give the heap's free pages back to the system (glibc's malloc_trim), between ops: inside
    ``reused_pages`` nothing else does, and the holes that ops of other sizes left behind (one
    op's 1 GiB blocks beside another's 64 MiB ones, each method's allocator beside NumPy's) added
    up to an out-of-memory kill at 24 GB in a full run on a 23 GB host. Within an op's cases the
    heap stays as it is: its first calls, the correctness check, map its pages again."""
    libc = _glibc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


@functools.lru_cache(maxsize=1)
def _glibc():
    """The C library (Linux), for its allocator's knobs; None elsewhere."""
    libc_name = ctypes.util.find_library("c") if sys.platform.startswith("linux") else None
    return ctypes.CDLL(libc_name) if libc_name else None


# --- timing ---------------------------------------------------------------------------------------
def time_interleaved(calls: dict[str, Thunk], rounds: int, calls_per_round: int | dict[str, int] = 1,
                     between: str | None = None, settle: bool = False) -> dict[str, list[float]]:
    """Per round, time each call in turn, starting one method later each round (A B C, B C A,
    ...: no method always follows the same one); returns seconds per call, one sample per round
    (the round's mean when a method makes several calls per round: ``calls_per_round``, one
    count for all or one per name). ``between`` names a call (a bandwidth probe) timed before
    every other call and once more at the end of each round (P A P B P C P), so it samples the
    machine right around each method: it gets ``len(calls)`` samples a round. The collector is
    off meanwhile: a collection landing in one sample is not its cost.

    ``settle``: each timed call follows an untimed call of the same thunk. Thread pools keep
    spinning after their work ends (XLA's for about 10 ms, OpenMP's, Numba's), and on 2 cores a
    pool still spinning from the method before slows the next one: a 2-thread Numba scan took
    14.7 ms (median) right after ``jax.jit``, 7.5 ms after itself. The untimed call takes that
    hit and wakes the method's own threads, so a sample is the method's steady state, as in a
    loop of its own calls (seven methods' medians interleaved, against each alone: 0.96-1.87x
    without it, 1.01-1.42x with it; sleeping 20 ms instead left silu 1.55x and an AOT scan 1.43x,
    as a core left idle that long wakes slowly on this shared host)."""
    names = [n for n in calls if n != between]
    counts = calls_per_round if isinstance(calls_per_round, dict) else dict.fromkeys(calls, calls_per_round)
    samples: dict[str, list[float]] = {name: [] for name in calls}

    def timed(name: str) -> None:
        fn, count = calls[name], counts[name]
        if settle:
            fn()
        t0 = time.perf_counter_ns()
        for _ in range(count):
            fn()
        samples[name].append((time.perf_counter_ns() - t0) * 1e-9 / count)

    enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(rounds):
            for k in range(len(names)):
                if between is not None:
                    timed(between)
                timed(names[(r + k) % len(names)])
            if between is not None:
                timed(between)
    finally:
        if enabled:
            gc.enable()
    return samples


# --- was the machine quiet? -----------------------------------------------------------------------
#: Rounds of a quiet run agree within a few percent (median interquartile range / median: ~0.07
#: on this project's 2-core CI machines when nothing else runs, 0.15-0.2 while tests run beside).
SPREAD_LIMIT = 0.1


def round_spread(docs: list[dict]) -> float | None:
    """The median, over every method of every large case, of its rounds' interquartile range
    relative to their median: how much the rounds of a method disagree."""
    spreads = []
    for d in docs:
        for e in d["results"].values():
            t = sorted(e.get("times_s", ()))
            if d["size"] == "large" and len(t) >= 4:
                spreads.append((t[(3 * len(t)) // 4] - t[len(t) // 4]) / median(t))
    return median(spreads) if spreads else None


def noise_warnings(machine: dict, spread: float | None) -> list[str]:
    """Why these numbers may not be the machine's own. A parallel kernel waits for its slowest
    thread: with other runnable processes, one thread waits a scheduler time slice
    (milliseconds) whatever the kernel. The load at the end includes this run's own threads."""
    cpus = machine["usable_cpus"]
    start, end = (machine.get("load_avg_start") or [0.0])[0], (machine["load_avg"] or [0.0])[0]
    out = []
    if start > 0.5 * cpus or end > 1.5 * cpus:
        out.append(f"load average {start:.1f} at the start, {end:.1f} at the end, on {cpus} CPUs: other "
                   "processes compete for the cores, so multi-threaded timings are unreliable")
    if spread is not None and spread > SPREAD_LIMIT:
        out.append(f"the rounds of a method disagree by {100 * spread:.0f}% (median interquartile range / "
                   f"median; a quiet run: under {100 * SPREAD_LIMIT:.0f}%): something else ran meanwhile")
    return [w + "; rerun on a quiet machine" for w in out]
