"""``fusegen bench --device cuda`` end to end (fusegen.bench_cuda), on tiny shapes.

Under the simulator everything but the GPU timing runs: inputs placed on the (simulated) device,
out= arrays, the checks against NumPy, the interleaved rounds with the copy probe, the bound, the
targets, the JSON / Markdown / chart. Times are wall clock there (no CUDA events) and mean
nothing, so nothing here asserts on them beyond being positive. aot-cuda is refused by the
simulator (its library holds native CUDA code) and must be reported as skipped with that reason.
On a GPU (``FUSEGEN_CUDA_TESTS=1``) the same tests run with CUDA events and the prelude.
"""
from __future__ import annotations

import contextlib
import io
import json
import re

import numpy as np
import pytest

from fusegen import cli

from fusegen.bench import cases as bench_cases, cuda as bench_cuda, harness as bench

from conftest import SIMULATOR

from _optional import HAVE

HAS_MPL = HAVE["matplotlib"]
#: Tiny: the simulator runs every thread in Python (and is slow with syncthreads).
TINY = dict(shapes=((8, 16),), small_shape=(4, 5), per_call_rounds=2, per_call_calls=3, bandwidth_reps=2,
            bandwidth_bytes=4096)


@contextlib.contextmanager
def tiny_quick():
    """``--quick`` made tiny enough for the simulator."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bench.BenchConfig, "quick", classmethod(lambda cls, **kw: cls(**{**TINY, **kw})))
        yield mp


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory):
    """``fusegen bench --device cuda --quick --ops add_reduce_sum`` with the default output paths,
    run in a temporary directory: (exit code, stdout, stderr, directory)."""
    where = tmp_path_factory.mktemp("gpu-bench")
    with tiny_quick() as mp:
        mp.chdir(where)
        code, out, err = run_cli(["bench", "--device", "cuda", "--quick", "--ops", "add_reduce_sum", "--rounds", "2",
                                  "--progress", "plain"] + ([] if HAS_MPL else ["--png", ""]))
    return code, out, err, where


def test_gpu_bench_runs_end_to_end(gpu_run):
    code, out, err, where = gpu_run
    assert code == 0, out + err
    files = sorted(p.name for p in (where / "bench-results").iterdir())
    assert files == ["bench-cuda.json", "bench-cuda.md"] + (["bench-cuda.png"] if HAS_MPL else [])
    doc = json.loads((where / "bench-results" / "bench-cuda.json").read_text())
    assert doc["schema"] == bench_cuda.SCHEMA and doc["device"] == "cuda" and doc["ok"] is True
    assert {"created", "machine", "timer", "bound_probe", "bandwidth", "bound", "allocator", "targets", "settings",
            "methods", "fusegen_methods", "skipped", "round_spread", "warnings", "cases", "command"} <= doc.keys()
    gpu = doc["machine"]["gpu"]
    assert {"name", "compute_capability", "memory_bytes", "driver", "cuda_driver_api", "cuda_runtime", "sm_count",
            "l2_bytes", "versions", "simulator"} <= gpu.keys()
    if SIMULATOR:
        assert gpu["simulator"] is True and "simulator has no CUDA events" in doc["timer"]
    else:
        assert doc["timer"].startswith("CUDA events") and gpu["memory_bytes"] > 0
    assert {"copy", "copy_start", "memcpy"} == set(doc["bandwidth"])
    assert doc["bandwidth"]["copy"]["reps"] == 4 and doc["bandwidth"]["copy"]["gbps"] > 0  # before and after
    assert doc["targets"]["bandwidth_fraction"] == bench_cuda.TARGET_BANDWIDTH_FRACTION
    assert doc["targets"]["ahead_of"] == list(bench_cuda.RIVALS) and doc["targets"]["every_fusegen"] is True
    assert doc["issue_4"] is None  # no 4096x4096 case in this tiny run
    assert "numba-cuda" in doc["fusegen_methods"]
    if SIMULATOR:  # refused by the simulator: skipped with the reason, not a crash (or a FAIL row)
        assert doc["methods"] == ["numba-cuda"]
        for name in ("torch-cuda", "cupy-cuda", "jax-cuda"):
            assert "simulator" in doc["skipped"][name]
        why = doc["skipped"]["aot-cuda"]
        assert why.startswith("CudaUnavailableError") or "nvcc" in why.lower(), why


def test_gpu_bench_cases_are_checked_and_timed(gpu_run):
    doc = json.loads((gpu_run[3] / "bench-results" / "bench-cuda.json").read_text())
    labels = [c["label"] for c in doc["cases"]]
    assert labels == ["(8,16) axis 0", "(8,16) axis 1", "(4,5) axis 1"]
    for case in doc["cases"]:
        assert {"op", "label", "size", "shapes", "attrs", "dtype", "bytes", "bound_s", "rtol", "rounds", "results",
                "best", "best_fusegen", "targets", "timer", "ok"} <= case.keys()
        assert set(case["results"]) == set(doc["methods"])
        for name, r in case["results"].items():
            assert r["checked"] is True and r["ok"] is True and r["max_rel_err"] <= case["rtol"], name
            assert len(r["times_s"]) == case["rounds"] and all(t > 0 for t in r["times_s"]), name
            assert r["host_s"] > 0 and r["timer"] and r["first_call_s"] > 0, name
            assert r["bandwidth_fraction"] == pytest.approx(1 / r["ratio_to_bound"])
        if case["size"] == "large":
            probe = case["copy_bandwidth"]
            assert len(probe["samples_gbps"]) == case["rounds"] == 2
            assert case["bound_s"] == pytest.approx(case["bytes"] / probe["bytes_per_s"])
            assert case["bytes"] == 2 * 8 * 16 * 4 + case["shapes"][0][1 - case["attrs"]["axis"]] * 4
            bound = case["targets"]["bound"]
            assert bound["limit"] == pytest.approx(1.25) and bound["method"] in doc["fusegen_methods"]
        else:
            assert "bound" not in case["targets"] and "per_call" not in case["targets"]  # no per-call target


def test_gpu_bench_reports(gpu_run):
    _, out, err, where = gpu_run
    assert re.search(r"^op\s+case\s+copy GB/s\s+bound\s+fusegen numba-cuda", out, re.MULTILINE)
    assert re.search(r"^add_reduce_sum\s+\(8,16\) axis 0\s", out, re.MULTILINE)
    assert "ahead of torch / cupy" in out and "cases met" in out and "copy bandwidth" in out
    # (the simulator cannot run native code: aot-cuda is skipped there, and measured on a GPU)
    assert re.search(r"^skipped: .*aot-cuda", out, re.MULTILINE) if SIMULATOR else "fusegen aot-cuda" in out
    steps = re.findall(r"^\[(\d+)/(\d+)\] (.*) \(\d+s\)$", err, re.MULTILINE)
    assert steps[0][2] == "copy bandwidth" and steps[-1][2] == "copy bandwidth, again"
    md = (where / "bench-results" / "bench-cuda.md").read_text()
    assert md.startswith("# fusegen bench") and "| op | case | copy GB/s | bound | fusegen numba-cuda |" in md
    assert "Made by `fusegen bench --device cuda --quick" in md and "## Targets" in md
    if HAS_MPL:
        assert (where / "bench-results" / "bench-cuda.png").read_bytes()[:4] == b"\x89PNG"


def test_a_wrong_gpu_method_fails_the_bench(tmp_path):
    """A method computing the wrong thing, and one that writes nothing into its out= arrays (they
    start as NaN), are FAIL rows, never timed; the bench exits 1."""
    real = bench_cuda.fusegen_methods

    def with_broken_ones(spec, backends, dtype):
        methods, skipped = real(spec, backends, dtype)
        k = methods[0]

        def swapped(placed, attrs):  # x and y swapped: x / y is wrong
            flipped = bench_cuda.Placed(placed.host[::-1], placed.inputs[::-1], placed.ref)
            return k.bind(flipped, attrs)

        def lazy(placed, attrs):  # returns its out= arrays untouched
            outs = placed.new_outputs()
            return lambda: outs
        extra = [bench_cases.Method("swapped-cuda", swapped, fusegen=True),
                 bench_cases.Method("lazy-cuda", lazy, fusegen=True)]
        return methods + extra, skipped

    path = tmp_path / "bench.json"
    with tiny_quick() as mp:
        mp.setattr(bench_cuda, "fusegen_methods", with_broken_ones)
        code, out, _ = run_cli(["bench", "--device", "cuda", "--quick", "--backends", "numba", "--ops", "add_mul_div",
                                "--rounds", "1", "--json", str(path), "--markdown", "", "--png", ""])
    assert code == 1
    assert re.search(r"add_mul_div \(8,16\): swapped-cuda FAIL \(max relative error", out)
    assert re.search(r"add_mul_div \(8,16\): lazy-cuda FAIL", out)
    doc = json.loads(path.read_text())
    assert doc["ok"] is False
    for case in doc["cases"]:
        for name in ("swapped-cuda", "lazy-cuda"):
            assert case["results"][name]["ok"] is False and "times_s" not in case["results"][name]
        assert case["results"]["numba-cuda"]["ok"] is True


def test_multi_output_op_through_out_arrays():
    """layer_norm's three outputs (one of them (n, 1)) land in the preallocated out= arrays."""
    cfg = bench.BenchConfig(**TINY, backends=("numba",), devices=("cuda",), rounds=1)
    spec = bench_cases.OPS["layer_norm"]
    methods, _ = bench_cuda.fusegen_methods(spec, ["numba"], "float32")
    dev = bench_cuda.Device.open(cfg.bandwidth_bytes)
    case = bench.Case(spec, (8, 16), spec.variants[0])
    doc = bench_cuda.measure_case(methods, case, spec.make_inputs(case.shape, "float32"), 1, dev)
    r = doc["results"]["numba-cuda"]
    assert doc["ok"] is True and r["checked"] and len(r["times_s"]) == 1
    assert doc["bytes"] == 2 * 8 * 16 * 4 + 2 * 8 * 4  # x and y (8, 16), mean and rstd (8, 1)


def test_to_host_and_placed_outputs():
    from numba import cuda
    placed = bench_cuda.Placed((np.ones(3, np.float32),), (cuda.to_device(np.ones(3, np.float32)),),
                               (np.zeros((2, 2), np.float32), np.zeros(4, np.float16)))
    outs = placed.new_outputs()
    host = bench_cuda.to_host(outs)
    assert [h.shape for h in host] == [(2, 2), (4,)] and [h.dtype for h in host] == [np.float32, np.float16]
    assert all(np.isnan(h).all() for h in host)
    assert bench_cuda.to_host(np.arange(3))[0].tolist() == [0, 1, 2]


def test_demo_on_the_device(monkeypatch):
    """``fusegen demo --device cuda``: add_reduce_sum checked and timed against the copy bound."""
    import functools
    monkeypatch.setattr(bench_cuda, "run_demo", functools.partial(bench_cuda.run_demo, probe_bytes=4096))
    code, out, err = run_cli(["demo", "--device", "cuda", "--shape", "8,16", "--rounds", "1", "--backends", "numba"])
    assert code == 0, out + err
    assert re.search(r"^fusegen demo on .+: add_reduce_sum = sum\(x \+ y, axis=1\), x and y \(8, 16\)", out, re.M)
    assert re.search(r"^numba-cuda\s+\S+\s+PASS\s+\S+ \S+\s+\S+x\s+\d+%$", out, re.MULTILINE)
    assert "of copy bandwidth" in out and "copy kernel" in out


def test_the_event_timing_path_runs(monkeypatch):
    """A real GPU's timing path (CUDA events; the L2 flush and the spin before each call; no
    frees meanwhile): on the simulator, whose events say -1 ms, the plumbing; on a GPU (an H200,
    2026-11-28) positive times as well."""
    from numba import cuda
    st = cuda.default_stream()
    monkeypatch.setattr(bench_cuda.Prelude, "CALIBRATION", (2, 4))  # long spins are slow here
    prelude = bench_cuda.Prelude(st, flush_bytes=1024)
    if SIMULATOR:
        assert prelude.per_iteration_s == 1e-10  # the simulator's events: -1 ms, whatever ran between
    else:   # a GPU's spin iteration: nanoseconds
        assert 1e-12 < prelude.per_iteration_s < 1e-3
    prelude.per_iteration_s = 1e-6
    prelude.set_lead(1e-4)
    assert prelude.iterations == 100 and prelude.lead_s == 1e-4
    prelude.set_lead(1.0)
    assert prelude.lead_s == bench_cuda.LEAD_MAX_S
    prelude.set_lead(1e-4)
    probe = bench_cuda.CopyProbe(1024, st)
    probe.dst.copy_to_device(np.zeros(256, np.float32))
    samples, host = bench_cuda.time_on_device({"probe": probe}, 2, bench_cuda.EventClock(st), prelude)
    if SIMULATOR:   # (its events say -1 ms)
        assert samples["probe"] == [-1e-3, -1e-3] and len(host["probe"]) == 2
    else:
        assert len(samples["probe"]) == 2 and all(t > 0 for t in samples["probe"]) and len(host["probe"]) == 2
    assert (probe.dst.copy_to_host() == 1).all() and (prelude.buf.copy_to_host() == 0).all()
    dev = bench_cuda.Device(st, bench_cuda.EventClock(st), prelude, probe)
    assert dev.timer.startswith("CUDA events") and "L2 flush (1 KiB written)" in dev.timer
