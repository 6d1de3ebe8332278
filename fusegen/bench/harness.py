"""The measurement harness behind ``fusegen demo`` and ``fusegen bench``.

What it measures and why:

* **Read bandwidth**, in this process, with a parallel Numba sum over a float32
  array far larger than any cache, at the start and again at the end (the best
  sample is the machine's capability; slower ones measure the neighbours). A
  memory-bound op cannot beat ``bytes it reads and writes once / read bandwidth``,
  so that *bound* is the yardstick every result is compared with (1.00 = at it).
* **Steady-state time**: every method is checked against NumPy first (that first
  call, which includes any JIT or native compile for the signature, is reported
  separately); then all methods run **interleaved**, one call each per round, the
  starting method rotating (A B C, B C A, ...), so a noisy neighbour slows every
  method alike instead of skewing one. Medians of the rounds are reported, with
  ratios to the bound and to the best method; every raw sample goes to the JSON.
* **Per-call time** at a tiny shape: rounds of many calls, each round giving a mean.
* **Compile time** (``compile_times``): each (op, method) in a new process, first
  with an empty cache directory (cold), then with the one it filled (warm).

Outputs are allocated by every method on every call. By default the bench keeps
freed memory in the process (``reused_pages``), as a long-running program's heap
does, so that a 64 MiB output is not a fresh mmap whose page faults and zeroing
(one extra write of every output byte, for every method alike) dwarf the kernels;
``BenchConfig.fresh_pages`` measures with them.

Nothing here prints: results are plain dicts (the JSON schema), and a ``progress``
callback, when given, hears about each step. ``fusegen.bench.report`` formats them.
"""
from __future__ import annotations

import contextlib
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from statistics import median
from typing import Any, Callable

import numpy as np

from .cases import OPS, Method, OpBench, Thunk, check, competitor_methods, reference, tolerance  # noqa: F401
from .machine import (BANDWIDTH_BYTES, SPREAD_LIMIT, Bandwidth, copy_bandwidth, gbps, machine_info, noise_warnings,  # noqa: F401
                      read_bandwidth, read_pass, reused_pages, round_spread, time_interleaved, trim_heap)
from .methods import cuda_available, cuda_unavailable, discover, fg_jax_method, gxx_works, why  # noqa: F401
from .targets import CPU_TARGETS, Targets, judge
from .variants import ALL_OPS
from .report import case_bandwidth

SCHEMA = "fusegen-bench/2"

Progress = Callable[[int, int, str], None]


# --- one case -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One measurement: an op, the shape of its ``x``, one attribute set; ``small`` cases
    measure per-call time (many calls per round)."""

    spec: OpBench
    shape: tuple[int, ...]
    attrs: dict = field(hash=False)
    small: bool = False

    @property
    def label(self) -> str:
        axis = f" axis {self.attrs['axis']}" if len(self.spec.variants) > 1 and "axis" in self.attrs else ""
        return f"({','.join(map(str, self.shape))}){axis}"


#: Per-call rounds aim at this long per method: enough calls to average out the clock, few
#: enough that a method taking milliseconds per call (a thread pool waking for a tiny input)
#: does not hold the run for minutes.
ROUND_BUDGET_S = 2e-3


def calls_for(fn: Thunk, most: int) -> int:
    """How many calls of ``fn`` fill ``ROUND_BUDGET_S`` (1 to ``most``), from ten timed calls."""
    t0 = time.perf_counter()
    for _ in range(10):
        fn()
    per_call = (time.perf_counter() - t0) / 10
    return max(1, min(most, int(ROUND_BUDGET_S / max(per_call, 1e-9))))


def check_methods(methods: list[Method], case: Case, arrays: tuple, warmup: int = 2, placed: Any = None,
                  to_host: Callable[[Any], Any] | None = None, ref: tuple | None = None
                  ) -> tuple[dict, dict, tuple, float]:
    """Bind every method (to ``placed`` when given: what a device bench put on its device, else to
    ``arrays``), make its first call, check the result (``to_host`` brings it back first) against
    NumPy on float64 copies of ``arrays`` (``ref``, when the caller has it already), and warm up
    the ones that passed. Returns the results so far, the passing methods' calls, the reference
    outputs and the tolerance."""
    ref = reference(case.spec, arrays, case.attrs) if ref is None else ref
    rtol = tolerance(arrays[0].dtype, case.spec.reduced(case.shape, case.attrs))
    results: dict[str, dict] = {}
    calls: dict[str, Thunk] = {}
    for m in methods:
        entry: dict[str, Any] = {"setup_s": m.setup_s, "fusegen": m.fusegen}
        results[m.name] = entry
        try:
            fn = m.bind(arrays if placed is None else placed, case.attrs)
            t0 = time.perf_counter()
            out = fn()
            entry["first_call_s"] = time.perf_counter() - t0
            err, ok = check(out if to_host is None else to_host(out), ref, rtol)
            del out
            for _ in range(warmup if ok else 0):
                fn()
            # a compiler that quietly ran something else (torch.compile's eager fallback) says so
            fallback = getattr(fn, "fallback", lambda: None)()
        except Exception as e:  # noqa: BLE001 - a failing method is a FAIL row, not a crash
            entry.update(error=why(e), ok=False)
            continue
        entry.update(max_rel_err=err, checked=True, ok=ok)
        if fallback:
            entry["fallback"] = fallback
        if ok:
            calls[m.name] = fn
    return results, calls, ref, rtol


def case_doc(case: Case, arrays: tuple, ref: tuple, results: dict, rtol: float, rounds: int,
             calls_per_round: int, samples: dict[str, list[float]], counts: dict[str, int]) -> dict:
    """The JSON of one measured case: what ran, the medians of ``samples`` and whether every
    method passed. The bytes of the bound are the inputs' and the outputs' (``ref``) once."""
    for name, times in samples.items():
        results[name].update(median_s=median(times), min_s=min(times), times_s=times, calls_per_round=counts[name])
    return {"op": case.spec.name, "label": case.label, "size": "small" if case.small else "large",
            "shapes": [list(a.shape) for a in arrays], "attrs": dict(case.attrs),
            "dtype": str(arrays[0].dtype), "rounds": rounds, "calls_per_round": calls_per_round,
            "bytes": sum(a.nbytes for a in arrays) + sum(r.nbytes for r in ref), "rtol": rtol, "results": results,
            "ok": all(e["ok"] for e in results.values())}


def measure_case(methods: list[Method], case: Case, arrays: tuple, rounds: int, calls_per_round: int = 1,
                 warmup: int = 2, probe: np.ndarray | None = None, probe_each: bool = False) -> dict:
    """Check every method against NumPy, then time the ones that passed, interleaved: the JSON
    of one case (ratios to the bound are added by ``finish_case``). Small cases make up to
    ``calls_per_round`` calls per method and round (``calls_for``). With a ``probe`` array, a
    large case also reads it once per round, interleaved with the methods (``probe_each``:
    before and after every method): the read bandwidth of that case's own rounds, for its bound
    (the host's bandwidth drifts by tens of percent within minutes on shared machines, with
    other tenants' load)."""
    results, calls, ref, rtol = check_methods(methods, case, arrays, warmup)
    counts = {n: calls_for(fn, calls_per_round) if case.small else 1 for n, fn in calls.items()}
    if case.small:
        calls["(empty loop)"] = lambda: None  # the harness's own cost per call, for scale
        counts["(empty loop)"] = calls_per_round
    elif probe is not None:
        calls["(read probe)"] = lambda: read_pass(probe)
        counts["(read probe)"] = 1
    each = probe_each and "(read probe)" in calls
    samples = time_interleaved(calls, rounds, counts, between="(read probe)" if each else None,
                               settle=not case.small)
    extra: dict[str, Any] = {}
    if case.small:
        extra["loop_overhead_s"] = median(samples.pop("(empty loop)"))
    elif probe is not None:
        how = ("median of probe passes before and after every method in every round" if each
               else "median of one probe pass per round, interleaved with the methods")
        extra["read_bandwidth"] = probed_bandwidth(probe.nbytes, samples.pop("(read probe)"), how)
    return {**case_doc(case, arrays, ref, results, rtol, rounds, calls_per_round, samples, counts), **extra}


def probed_bandwidth(moved: int, seconds: list[float], how: str) -> dict:
    """A probe's passes in a case's rounds (``moved`` bytes each) as the case's bandwidth entry."""
    rates = sorted(moved / t for t in seconds)
    q1, q3 = rates[len(rates) // 4], rates[(3 * len(rates)) // 4]
    return {"bytes_per_s": median(rates), "samples_gbps": [moved / t / 1e9 for t in seconds], "method": how,
            "array_bytes": moved, "min_gbps": rates[0] / 1e9, "max_gbps": rates[-1] / 1e9,
            "spread": (q3 - q1) / median(rates)}  # interquartile range / median, as round_spread


def finish_case(doc: dict, bw: Bandwidth | None, targets: Targets = CPU_TARGETS) -> dict:
    """Add the bound, the ratios, the best methods and the targets to a measured case. The bound
    uses the bandwidth of the case's own rounds when it was probed, else ``bw``."""
    probed = case_bandwidth(doc)
    doc["bound_s"] = bound = doc["bytes"] / (probed["bytes_per_s"] if probed else bw.bytes_per_s)
    for e in doc["results"].values():
        if "median_s" in e:
            e.update(gbps=gbps(doc["bytes"], e["median_s"]), ratio_to_bound=e["median_s"] / bound,
                     bandwidth_fraction=bound / e["median_s"])
    return rank_case(doc, targets)


def rank_case(doc: dict, targets: Targets = CPU_TARGETS) -> dict:
    """The best methods of a case whose bound is known, and how it fares against ``targets``."""
    timed = {n: e for n, e in doc["results"].items() if "median_s" in e}

    def fastest(entries: dict) -> str | None:
        return min(entries, key=lambda n: entries[n]["median_s"]) if entries else None

    fg = {n: e for n, e in timed.items() if e["fusegen"]}
    # a method that fell back to something else (torch.compile running eager PyTorch) is shown, marked,
    # but is not the method its name says: it ranks against nothing
    others = {n: e for n, e in timed.items() if not e["fusegen"] and "fallback" not in e}
    best = fastest({**fg, **others})
    for e in timed.values() if best is not None else ():
        e["ratio_to_best"] = e["median_s"] / timed[best]["median_s"]
    doc.update(best=best, best_fusegen=fastest(fg), best_other=fastest(others))
    judge(doc, timed, fg, others, doc["bound_s"], targets)
    return doc


def rejudge(doc: dict) -> dict:
    """An earlier CPU run's document held to today's targets (``fusegen bench --report``): the
    measurements are kept, the verdicts recomputed."""
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"not a CPU bench document of schema {SCHEMA}: {doc.get('schema')!r}")
    for case in doc["cases"]:
        rank_case(case)
    doc["targets"] = CPU_TARGETS.as_json()
    return doc


# --- compile time, in new processes ---------------------------------------------------------------
# The child times its own import of fusegen (with numpy and numba), the first thing it does.
_CHILD = ("import time; t0 = time.perf_counter(); import json, sys; from fusegen.bench.harness import compile_child; "
          "print(json.dumps(compile_child(json.loads(sys.argv[1]), time.perf_counter() - t0)))")


def compile_child(request: dict, import_s: float = 0.0) -> dict:
    """Runs in a new process: set up ``request['method']`` for one op and make the first call of
    each of its cases (the JIT or native compile of that signature). Seconds per step."""
    spec = ALL_OPS[request["op"]]
    name, dtype = request["method"], request["dtype"]
    t1 = time.perf_counter()
    if name in ("numba-cpu", "aot-cpu"):
        methods, skipped = discover(spec.op, [name.split("-")[0]], ["cpu"], request.get("aot_flags"), dtype)
    elif name == "fg-jax-cpu":
        methods, skipped = fg_jax_method(spec, dtype)
    else:
        methods, skipped = competitor_methods(spec, dtype, [name.split("-")[0]])
    if not methods:
        return {"error": skipped.get(name, "not available")}
    t2 = time.perf_counter()
    first = []
    for shape, attrs in request["cases"]:
        arrays = spec.make_inputs(tuple(shape), dtype)
        fn = methods[0].bind(arrays, attrs)
        t = time.perf_counter()
        fn()
        first.append(time.perf_counter() - t)
    return {"import_s": import_s, "setup_s": t2 - t1, "first_calls_s": first, "total_s": t2 - t1 + sum(first)}


def measure_compile_times(cases: list[Case], method_names: list[str], dtype: str, aot_flags: Any = None,
                          progress: Callable[[str], None] | None = None, timeout: float = 900) -> dict:
    """Cold and warm compile time of each (op, method): two new processes each, the first with an
    empty ``FUSEGEN_CACHE_DIR`` and ``NUMBA_CACHE_DIR`` (cold), the second with what it left (warm).
    Returns ``{op: {method: {"cold": child result, "warm": child result}}}``."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this fusegen's parent, not another one
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    by_op: dict[str, list[Case]] = {}
    for c in cases:
        by_op.setdefault(c.spec.name, []).append(c)
    result: dict[str, dict] = {}
    for op_name, op_cases in by_op.items():
        request = {"op": op_name, "dtype": dtype, "aot_flags": aot_flags,
                   "cases": [[list(c.shape), dict(c.attrs)] for c in op_cases]}
        for method in method_names:
            if progress:
                progress(f"compile time: {op_name} {method}")
            runs: dict[str, Any] = {}
            with tempfile.TemporaryDirectory(prefix="fusegen-compile-") as tmp:
                child_env = {**env, "FUSEGEN_CACHE_DIR": tmp, "NUMBA_CACHE_DIR": os.path.join(tmp, "numba-user")}
                for state in ("cold", "warm"):
                    try:
                        proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps({**request, "method": method})],
                                              capture_output=True, text=True, env=child_env, timeout=timeout)
                        lines = proc.stdout.strip().splitlines()
                        runs[state] = (json.loads(lines[-1]) if proc.returncode == 0 and lines
                                       else {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]})
                    except subprocess.TimeoutExpired:
                        runs[state] = {"error": f"timed out after {timeout:.0f} s"}
            result.setdefault(op_name, {})[method] = runs
    return result


# --- the two commands -----------------------------------------------------------------------------
@dataclass
class BenchConfig:
    """What ``fusegen bench`` runs; ``quick()`` is the small variant the tests use."""

    ops: tuple[str, ...] = tuple(ALL_OPS)
    shapes: tuple[tuple[int, int], ...] = ((4096, 4096), (16384, 1024))   # large: memory-bound
    small_shape: tuple[int, int] = (4, 5)                                  # per-call cost
    dtype: str = "float32"
    rounds: int = 15
    per_call_rounds: int = 20
    per_call_calls: int = 1000
    bandwidth_reps: int = 10
    bandwidth_bytes: int = BANDWIDTH_BYTES
    backends: tuple[str, ...] = ("numba", "aot")
    devices: tuple[str, ...] = ("cpu",)
    aot_flags: list[str] | None = None
    jax: bool = True     # jax.jit and fusegen.jax.function, when jax is installed (CPU)
    torch: bool = True   # torch.compile (Inductor), when torch is installed; on the GPU: eager torch
    torch_compile: bool = False  # on the GPU: torch.compile too (Inductor compiles take minutes)
    compile_times: bool = False
    fresh_pages: bool = False
    small_rows: bool = False  # rows with own shapes take their small ones (`quick` is the classmethod)

    @classmethod
    def quick(cls, **kw: Any) -> BenchConfig:
        # Below FUSEGEN_PARALLEL_THRESHOLD: fusegen's serial kernels, quick to compile.
        small = dict(shapes=((256, 256),), rounds=3, per_call_rounds=3, per_call_calls=50, bandwidth_reps=3,
                     small_rows=True)
        return cls(**{**small, **kw})

    def plan(self) -> tuple[list[Case], list[str], int]:
        """The cases, their ops, and the progress steps of a run (a bandwidth probe before and
        after, each op's setup, each case)."""
        cases = self.cases()
        ops = list(dict.fromkeys(c.spec.name for c in cases))
        return cases, ops, 2 + len(ops) + len(cases)

    def cases(self) -> list[Case]:
        """Every case, op by op: each large shape with each attribute variant, then the small shape."""
        out = []
        for name in self.ops:
            spec = ALL_OPS[name]
            shapes = self.shapes if not spec.shapes else spec.small_shapes[:1] if self.small_rows else spec.shapes
            out += [Case(spec, s, a) for s in shapes for a in spec.variants]
            small = spec.small_shapes[-1] if spec.shapes else self.small_shape
            out.append(Case(spec, small, spec.variants[-1], small=True))
        return out


def _methods_for(spec: OpBench, cfg: BenchConfig) -> tuple[list[Method], dict[str, str]]:
    """NumPy and the other methods, then fusegen's backends, for one op."""
    kinds = ["numpy", "njit"] + (["jax"] if cfg.jax else []) + (["torch"] if cfg.torch else [])
    methods, skipped = competitor_methods(spec, cfg.dtype, kinds)
    fg, why = discover(spec.op, list(cfg.backends), list(cfg.devices), cfg.aot_flags, cfg.dtype)
    methods, skipped = methods + fg, {**skipped, **why}
    if cfg.jax and "cpu" in cfg.devices:
        fg, why = fg_jax_method(spec, cfg.dtype)
        methods, skipped = methods + fg, {**skipped, **why}
    return methods, skipped


def measure_ops(cfg: BenchConfig, cases: list[Case], methods_for: Callable[[OpBench, BenchConfig], tuple],
                measure: Callable[..., dict], say: Progress, step: int, total: int
                ) -> tuple[list[dict] | None, dict[str, bool], dict[str, str], int]:
    """Op by op: set up its methods (``methods_for(spec, cfg)``: methods and skipped ones), then
    measure each of its ``cases`` (``measure(methods, case, arrays, rounds, calls_per_round)``).
    Returns the case documents (None when an op has no fusegen method here), every method seen
    (is it fusegen's), the skipped ones with the reasons, and the progress step reached."""
    docs: list[dict] = []
    names: dict[str, bool] = {}
    skipped: dict[str, str] = {}
    for op_name in dict.fromkeys(c.spec.name for c in cases):
        step += 1
        say(step, total, f"{op_name}: setting up methods")
        spec = next(c.spec for c in cases if c.spec.name == op_name)
        methods, why = methods_for(spec, cfg)
        skipped.update(why)
        if not any(m.fusegen for m in methods):
            return None, names, skipped, step
        names.update((m.name, m.fusegen) for m in methods)
        arrays: tuple = ()
        for case in (c for c in cases if c.spec.name == op_name):
            step += 1
            say(step, total, f"{op_name} {case.label}")
            if not arrays or arrays[0].shape != case.shape:
                arrays = ()  # the next inputs should not have to share memory with these
                arrays = spec.make_inputs(case.shape, cfg.dtype)
            rounds, per_round = (cfg.per_call_rounds, cfg.per_call_calls) if case.small else (cfg.rounds, 1)
            docs.append(measure(methods, case, arrays, rounds, per_round))
        del arrays, methods
        gc.collect()
        trim_heap()
    return docs, names, skipped, step


def run_bench(cfg: BenchConfig, progress: Progress | None = None) -> dict:
    """Run every case (and the compile-time runs when asked); returns the JSON document."""
    say = progress or (lambda step, total, label: None)
    cases, ops, total = cfg.plan()
    step = 1
    say(step, total, "read bandwidth")
    bw_start = read_bandwidth(cfg.bandwidth_bytes, cfg.bandwidth_reps)
    copy = copy_bandwidth(cfg.bandwidth_bytes, cfg.bandwidth_reps)
    load_start = os.getloadavg() if hasattr(os, "getloadavg") else None
    probe = np.ones(cfg.bandwidth_bytes // 4, np.float32)  # read in every round of the large cases
    with contextlib.ExitStack() as stack:
        allocator = None if cfg.fresh_pages else stack.enter_context(reused_pages())
        docs, names, skipped, step = measure_ops(
            cfg, cases, _methods_for, lambda *a: measure_case(*a, probe=probe), say, step, total)
    if docs is None:
        return {"schema": SCHEMA, "methods": [], "skipped": skipped, "cases": [], "ok": False}
    probe = None  # 256 MiB, freed before the closing probe allocates its own
    step += 1
    say(step, total, "read bandwidth, again")
    bw = bw_start.merged(read_bandwidth(cfg.bandwidth_bytes, cfg.bandwidth_reps))
    for d in docs:
        finish_case(d, bw)
    machine = machine_info()  # before the compile-time processes: the load of the timed part
    machine["load_avg_start"] = list(load_start) if load_start else None
    spread = round_spread(docs)
    warnings = noise_warnings(machine, spread)
    compile_times = None
    if cfg.compile_times:
        chosen = [n for n in names if n != "numpy" and not n.endswith("-out")]  # (out=: the same compile)
        count = iter(range(1, 1 + len(ops) * len(chosen)))
        compile_times = measure_compile_times(
            cases, chosen, cfg.dtype, cfg.aot_flags,
            lambda label: say(next(count), len(ops) * len(chosen), label))
    return {"schema": SCHEMA, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": machine, "bandwidth": {"read": bw.as_json(), "read_start": bw_start.as_json(),
                                              "copy": copy.as_json()},
            "bound": "(bytes of every input and output, once) / read bandwidth of the case's own rounds",
            "allocator": allocator or "default (fresh pages for large outputs)",
            "targets": CPU_TARGETS.as_json(),
            "settings": {"ops": ops, "rounds": cfg.rounds, "shapes": [list(s) for s in cfg.shapes],
                         "small_shape": list(cfg.small_shape), "per_call_rounds": cfg.per_call_rounds,
                         "per_call_calls": cfg.per_call_calls, "dtype": cfg.dtype, "backends": list(cfg.backends),
                         "devices": list(cfg.devices), "aot_flags": cfg.aot_flags, "jax": cfg.jax,
                         "torch": cfg.torch, "interleaved": "rotating start", "warmup_calls": 2,
                         "settle": "an untimed call of the same method before each timed one (large shapes)"},
            "methods": list(names), "fusegen_methods": [n for n, f in names.items() if f],
            "skipped": {n: w for n, w in skipped.items() if n not in names},
            "round_spread": spread, "warnings": warnings,
            "cases": docs, "compile_times": compile_times, "ok": all(d["ok"] for d in docs)}


#: A method measured faster than this multiple of the bound moved its bytes faster than the probe
#: says memory can: the probe under-measured the bandwidth (it ran while a neighbour's burst took
#: the memory bus), so the bound is wrong, not the method fast.
PROBE_SUSPECT_RATIO = 0.9


#: ... for a case whose bytes are this many or more (far beyond the caches: smaller inputs can
#: really run faster than memory, from cache).
PROBE_SUSPECT_BYTES = 64 << 20


def probe_warnings(case: dict) -> list[str]:
    """One line per method of a finished case that ran faster than ``PROBE_SUSPECT_RATIO`` times
    its bound: a probe problem, reported as such rather than as a result."""
    if case["bytes"] < PROBE_SUSPECT_BYTES:
        return []
    return [f"{name} ran at {e['ratio_to_bound']:.2f}x the bound, faster than memory allows: the bandwidth "
            f"probe under-measured this machine (a probe problem, not a result); rerun on a quiet machine"
            for name, e in case["results"].items() if e.get("ratio_to_bound", 1.0) < PROBE_SUSPECT_RATIO]


def run_demo(shape: tuple[int, ...], axis: int, dtype: str, rounds: int, backends: list[str],
             devices: list[str], aot_flags: list[str] | None = None, progress: Progress | None = None) -> dict:
    """``add_reduce_sum`` once through every available backend, checked against NumPy, and timed
    against the read bandwidth of a probe run before and after every method in every round (the
    median of those passes, as methods are measured: a best-of-N probe catches bursts)."""
    from .cases import numpy_method
    say = progress or (lambda step, total, label: None)
    spec = OPS["add_reduce_sum"]
    say(1, 3, "compiling")
    methods, skipped = discover(spec.op, backends, devices, aot_flags)
    doc: dict[str, Any] = {"case": None, "skipped": skipped, "methods": [m.name for m in methods]}
    if not methods:
        return doc  # nothing to show; spare the caller the bandwidth probe and the big inputs
    say(2, 3, "read bandwidth")
    probe = np.ones(BANDWIDTH_BYTES // 4, np.float32)  # ones, not empty: every page must be really mapped
    read_pass(probe)  # compile / load from Numba's cache, wake the thread pool
    say(3, 3, "running")
    case = Case(spec, tuple(shape), {"axis": axis})
    arrays = spec.make_inputs(case.shape, dtype)
    load_start = os.getloadavg() if hasattr(os, "getloadavg") else None
    doc["case"] = finish_case(measure_case([numpy_method(spec)] + methods, case, arrays, rounds, probe=probe,
                                           probe_each=True), None)
    machine = machine_info()
    machine["load_avg_start"] = list(load_start) if load_start else None
    # a busy machine (the load average, rounds that disagree) and a bound beaten: said, not hidden
    doc.update(bandwidth=doc["case"]["read_bandwidth"], machine=machine,
               warnings=noise_warnings(machine, round_spread([doc["case"]])) + probe_warnings(doc["case"]))
    return doc
