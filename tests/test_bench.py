"""Tests of ``fusegen bench``: the cases (fusegen.bench_cases), the harness (fusegen.bench) and the
report (fusegen.bench_report).

No timing assertions: the machines these run on are shared and noisy. Times are only checked
to be positive; correctness checks are checked to have happened, and to catch a wrong method.
One tiny run over every op (fusegen's Numba backend against NumPy and hand-written Numba, small
shapes, few rounds) is shared by most tests; the AOT and XLA paths get one op of their own.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import re

import numpy as np
import pytest

import fusegen as fg
from fusegen import cli

from fusegen.bench import cases as bench_cases, harness as bench, report as bench_report

from _optional import HAVE, gpu_present, needs, needs_gxx, no_simulator, require

HAS_MPL = HAVE["matplotlib"]
#: Tiny on purpose: compile time, not run time, is what these tests pay.
#: the tiny run's ops: the harness is what it tests (every row's numbers against its reference are
#: checked by the rows' own tests at small shapes: test_perf_ops, test_activations,
#: test_layout_backends, test_rows_match_their_reference below), so one row of each kind: a
#: reduction over either axis with a hand-written competitor, a softmax (the progress test's step),
#: a layout row with shapes of its own, a user-written spelling. Every row costs compiles (its
#: hand-written competitor's too), so the run stays small.
TINY_OPS = ["add_reduce_sum", "softmax", "rope", "user_layer_norm"]
TINY = ["--quick", "--backends", "numba", "--no-jax", "--no-torch", "--rounds", "2", "--ops", ",".join(TINY_OPS)]


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """``fusegen bench`` over every op, once: (exit code, stdout, stderr, JSON path, Markdown, PNG)."""
    out = tmp_path_factory.mktemp("bench")
    paths = {k: out / f"bench.{k}" for k in ("json", "md", "png")}
    stdout, stderr = io.StringIO(), io.StringIO()
    argv = ["bench", *TINY, "--progress", "plain", "--json", str(paths["json"]),
            "--markdown", str(paths["md"]),
            "--png", str(paths["png"]) if HAS_MPL else ""]
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = cli.main(argv)
    return code, stdout.getvalue(), stderr.getvalue(), paths


# --- the cases --------------------------------------------------------------------------------------
def test_every_reference_op_has_a_case():
    from fusegen.examples import ACTIVATION_OPS, GATHER_OPS, LAYOUT_OPS, RANDOM_OPS, REFERENCE_OPS, cross_entropy_grad
    assert list(bench_cases.OPS) == [op.name for op in REFERENCE_OPS + LAYOUT_OPS + ACTIVATION_OPS + RANDOM_OPS
                                     + GATHER_OPS + [cross_entropy_grad]]
    for spec in bench_cases.OPS.values():
        assert spec.op.name == spec.name and spec.variants


def test_tolerance_catches_a_dropped_term():
    spec = bench_cases.OPS["add_reduce_sum"]
    x, y = spec.make_inputs((64, 4096), "float32")
    ref = bench_cases.reference(spec, (x, y), {"axis": 1})
    rtol = bench_cases.tolerance(x.dtype, 4096)
    assert bench_cases.check(np.sum(x + y, axis=1), ref, rtol)[1]           # NumPy's float32 sum passes
    assert not bench_cases.check(np.sum(x[:, 1:] + y[:, 1:], axis=1), ref, rtol)[1]  # one term dropped
    assert bench_cases.check(ref[0][:-1], ref, rtol) == (math.inf, False)   # wrong shape
    assert bench_cases.check((ref[0], ref[0]), ref, rtol)[0] == math.inf    # wrong output count
    assert bench_cases.tolerance(np.dtype(np.int32), 10) == 0.0


# --- one tiny run over every op ---------------------------------------------------------------------
def test_tiny_run_writes_a_complete_json(tiny_run):
    code, out, _, paths = tiny_run
    assert code == 0, out
    doc = json.loads(paths["json"].read_text())
    assert doc["schema"] == bench.SCHEMA and doc["ok"] is True and doc["allocator"]
    assert {"created", "machine", "bandwidth", "bound", "allocator", "targets", "settings", "methods",
            "fusegen_methods", "skipped", "cases", "compile_times", "round_spread", "warnings"} <= doc.keys()
    assert {"cpu_model", "usable_cpus", "numba_threads", "numba", "numpy", "fusegen", "load_avg"} <= doc["machine"].keys()
    # the software the numbers come from (jax, torch, numba-cuda where installed; the C++ compiler where present)
    versions = doc["machine"]["versions"]
    assert {"python", "numpy", "numba", "llvmlite"} <= versions.keys()
    assert ("jax" in versions) is HAVE["jax"] and ("torch" in versions) is HAVE["torch"]
    assert any(k.startswith(("g++", "c++")) or "g++" in v for k, v in versions.items()) is HAVE["g++"]
    assert doc["bandwidth"]["read"]["gbps"] > 0 and doc["bandwidth"]["copy"]["gbps"] > 0
    assert doc["methods"][0] == "numpy" and {"njit-cpu", "numba-cpu"} <= set(doc["methods"])
    assert doc["fusegen_methods"] == ["numba-cpu", "numba-cpu-out"]  # fresh outputs, and out=
    assert "torch-cpu" not in doc["methods"]  # --no-torch
    ops = [c["op"] for c in doc["cases"]]
    assert list(dict.fromkeys(ops)) == TINY_OPS
    assert ops.count("add_reduce_sum") == 3  # axis 0 and 1 at the large shape, one small case
    for case in doc["cases"]:
        assert {"op", "label", "size", "shapes", "attrs", "dtype", "bytes", "bound_s", "rtol", "rounds",
                "calls_per_round", "results", "best", "best_fusegen", "best_other", "targets", "ok"} <= case.keys()
        # every method, but the hand-written Numba code where a row has none (user-written spellings)
        assert set(case["results"]) | {"njit-cpu"} == set(doc["methods"]) and case["bound_s"] > 0
        assert ("njit-cpu" in case["results"]) is (not case["op"].startswith("user_"))
        for name, r in case["results"].items():
            where = (case["op"], case["label"], name)
            # every method, NumPy included, was checked against the float64 reference first
            assert r["checked"] is True and r["ok"] is True and r["max_rel_err"] <= case["rtol"], where
            assert len(r["times_s"]) == case["rounds"] and all(t > 0 for t in r["times_s"]), where
            assert r["median_s"] > 0 and r["first_call_s"] > 0 and r["ratio_to_bound"] > 0, where
            assert r["ratio_to_best"] >= 1.0 and r["fusegen"] is name.startswith("numba-cpu"), where
            assert 1 <= r["calls_per_round"] <= case["calls_per_round"], where
        assert case["best_fusegen"] in ("numba-cpu", "numba-cpu-out")
        if case["size"] == "large":  # the bandwidth of the case's own rounds sets its bound
            assert len(case["read_bandwidth"]["samples_gbps"]) == case["rounds"]
            assert case["bound_s"] == pytest.approx(case["bytes"] / case["read_bandwidth"]["bytes_per_s"])
        target = "bound" if case["size"] == "large" else "per_call"
        assert {target, "ahead"} == set(case["targets"]) and isinstance(case["targets"][target]["met"], bool)
    small = [c for c in doc["cases"] if c["size"] == "small"]
    assert len(small) == len(TINY_OPS) and all(c["calls_per_round"] > 1 for c in small)


def _quick_shapes():
    """(op, shape label) of every case a quick run makes: the rows with shapes of their own (the
    layout ops') take their small ones."""
    return {(c.spec.name, "(" + ",".join(map(str, c.shape)) + ")")
            for c in bench.BenchConfig.quick(ops=tuple(TINY_OPS)).cases()}


def test_tiny_run_prints_tables_and_progress(tiny_run):
    _, out, err, _ = tiny_run
    assert re.search(r"^op\s+case\s+read GB/s\s+bound\s+fusegen numba\s+fusegen numba out=\s+numpy\s+numba @njit",
                     out, re.MULTILINE)
    for op, shape in _quick_shapes():
        assert re.search(rf"^{op}\s+{re.escape(shape)}", out, re.MULTILINE), (op, shape)
    assert "(256,256) axis 0" in out and "targets (" in out and "cases met" in out
    assert re.search(r"^software: fusegen \S+, python \d+\.\d+\.\d+, numpy \S+, numba \S+, llvmlite ", out, re.MULTILINE)
    # --progress plain: one line per step, numbered, ending with the closing bandwidth probe
    steps = re.findall(r"^\[(\d+)/(\d+)\] (.*) \(\d+s\)$", err, re.MULTILINE)
    assert steps and steps[0][2] == "read bandwidth" and steps[-1][2] == "read bandwidth, again"
    assert [int(s[0]) for s in steps] == list(range(1, int(steps[0][1]) + 1))
    assert any(s[2] == "softmax (256,256) axis -1" for s in steps)   # (and axis 0: col mode)


def test_tiny_run_writes_markdown(tiny_run):
    _, _, _, paths = tiny_run
    md = paths["md"].read_text()
    assert md.startswith("# fusegen bench") and "Made by `fusegen bench --quick --backends numba" in md
    for heading in ("## Large shapes", "## Per call at the small shape", "## Medians", "## Targets"):
        assert heading in md
    assert "| op | case | read GB/s | bound | fusegen numba | fusegen numba out= |" in md
    assert re.search(r"\| \*\*\d+\.\d\dx\*\* \|", md)  # the best method of a row in bold
    for op, shape in _quick_shapes():
        assert f"| {op} | {shape}" in md
    assert ("![" in md) is HAS_MPL


@needs("matplotlib")
def test_tiny_run_writes_the_chart(tiny_run):
    png = tiny_run[3]["png"]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) < 200_000


def test_explicit_png_needs_matplotlib(monkeypatch, capsys):
    monkeypatch.setattr(cli, "_matplotlib_missing", lambda: True)
    assert cli.main(["bench", *TINY, "--png", "x.png"]) == 2
    assert "matplotlib" in capsys.readouterr().err


# --- failures ---------------------------------------------------------------------------------------
def test_a_wrong_method_fails_the_bench(monkeypatch, tmp_path, capsys):
    real = bench.discover

    def with_a_broken_one(op, *args, **kw):
        methods, skipped = real(op, *args, **kw)
        swapped = bench_cases.Method("broken-cpu", lambda arrays, attrs: (lambda: op(*arrays[::-1], **attrs)),
                                     fusegen=True)  # x and y swapped: x / y is wrong
        return methods + [swapped], skipped

    monkeypatch.setattr(bench, "discover", with_a_broken_one)
    path = tmp_path / "bench.json"
    code = cli.main(["bench", *TINY, "--ops", "add_mul_div", "--fresh-pages", "--json", str(path), "--markdown", "",
                     "--png", ""])
    assert code == 1
    out = capsys.readouterr().out
    assert re.search(r"add_mul_div \(256,256\): broken-cpu FAIL \(max relative error", out)
    doc = json.loads(path.read_text())
    assert doc["ok"] is False and doc["allocator"].startswith("default")  # --fresh-pages
    for case in doc["cases"]:
        broken = case["results"]["broken-cpu"]
        assert broken["ok"] is False and "times_s" not in broken  # never timed
        assert case["results"]["numba-cpu"]["ok"] is True


def test_unknown_op_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["bench", "--ops", "softmax,nosuch"])
    assert e.value.code == 2 and "unknown op" in capsys.readouterr().err


# --- the other backends and methods, on one op ------------------------------------------------------
@needs_gxx
def test_aot_and_xla_through_the_bench():
    """smooth_l1 (a float attribute in the loop body) through the AOT and XLA backends and jax.jit
    (these two where jax is installed: test_xla_ffi.py and test_differential.py skip without it)."""
    cfg = bench.BenchConfig.quick(ops=("smooth_l1",), backends=("aot",), torch=False, rounds=2,
                                  bandwidth_bytes=16 << 20)
    doc = bench.run_bench(cfg)
    assert doc["ok"] is True
    want = {"aot-cpu"} | ({"fg-jax-cpu", "jax-cpu"} if bench_cases.jax_available() else set())
    assert want <= set(doc["methods"]) and want - {"jax-cpu"} <= set(doc["fusegen_methods"])
    for case in doc["cases"]:
        assert all(case["results"][m]["checked"] and case["results"][m]["median_s"] > 0 for m in want)


# --- torch.compile: a case that runs eager PyTorch is marked, not reported as torch.compile ----------
@pytest.fixture
def eager_dynamo(monkeypatch):
    """torch.compile with dynamo's "eager" backend: dynamo traces, guards and falls back exactly as
    with Inductor, without Inductor's compile (seconds per graph on a CPU)."""
    require("torch")
    import functools

    import torch
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    return torch


def test_torch_compiled_reports_what_dynamo_did(eager_dynamo):
    torch = eager_dynamo
    import torch._dynamo

    def twice_sum(x, axis):
        return torch.sum(x * 2, dim=axis)

    fn = bench_cases.torch_compiled(torch, twice_sum)
    assert "no graph" in fn.fallback()  # nothing has run yet
    fn(torch.ones(3, 4), 1)
    assert fn.fallback() is None  # one graph, captured whole
    fn(torch.ones(3, 4), 1)
    assert fn.fallback() is None  # the same guards: no recompile
    fn(torch.ones(5, 4), 1)
    assert "recompiled" in fn.fallback()

    def printing(x):
        print("a graph break")
        return x + 1
    fn = bench_cases.torch_compiled(torch, printing)
    fn(torch.ones(3))
    assert fn.fallback().startswith("graph break (")
    # the bench's old bug: one code object across cases until the recompile limit
    with torch._dynamo.config.patch(recompile_limit=1):
        fn = bench_cases.torch_compiled(torch, twice_sum)
        fn(torch.ones(2, 2), 0)
        fn(torch.ones(6, 2), 0)
        assert fn.fallback().startswith("dynamo gave up (Dynamo recompile limit exceeded)")


def test_torch_compile_fallback_is_marked_in_the_tables(eager_dynamo, monkeypatch):
    """Each case gets a fresh dynamo (so 3 cases under a recompile limit of 1 all compile); without
    that reset the later cases would run eager PyTorch, and the tables say so."""
    torch = eager_dynamo
    import torch._dynamo
    cfg = bench.BenchConfig.quick(ops=("add_reduce_sum",), backends=("numba",), jax=False, rounds=1,
                                  per_call_rounds=1, per_call_calls=2, bandwidth_bytes=1 << 20)
    with torch._dynamo.config.patch(recompile_limit=1):
        doc = bench.run_bench(cfg)
        assert doc["ok"] and "torch-cpu" in doc["methods"]
        assert not any("fallback" in c["results"]["torch-cpu"] for c in doc["cases"])
        torch._dynamo.reset()
        monkeypatch.setattr(torch._dynamo, "reset", lambda: None)  # the bench as it was: one cache for all cases
        doc = bench.run_bench(cfg)
    marked = [c for c in doc["cases"] if "fallback" in c["results"]["torch-cpu"]]
    assert marked and all(c["best"] != "torch-cpu" and c["best_other"] != "torch-cpu" for c in marked)
    why = [c["results"]["torch-cpu"]["fallback"] for c in marked]
    assert len(marked) == 2 and "recompile limit" in why[0] and all("eager PyTorch ran" in w for w in why)
    text = bench_report.terminal_report(doc)
    assert "(fallback)" in text and re.search(r"^add_reduce_sum \S+( axis \d)?: torch.compile fell back \(dynamo gave up",
                                              text, re.MULTILINE)
    assert "## Fallbacks" in bench_report.markdown_report(doc)


# --- compile time, in new processes -----------------------------------------------------------------
def test_compile_times_cold_and_warm():
    case = bench.Case(bench_cases.OPS["add_mul_div"], (64, 96), {})
    steps = []
    res = bench.measure_compile_times([case], ["numba-cpu"], "float32", progress=steps.append)
    runs = res["add_mul_div"]["numba-cpu"]
    assert set(runs) == {"cold", "warm"} and steps == ["compile time: add_mul_div numba-cpu"]
    for state in ("cold", "warm"):
        r = runs[state]
        assert "error" not in r, r
        assert r["import_s"] > 0 and r["setup_s"] >= 0 and len(r["first_calls_s"]) == 1
        assert r["total_s"] == pytest.approx(r["setup_s"] + sum(r["first_calls_s"]))
    doc = {"methods": ["numba-cpu"], "fusegen_methods": ["numba-cpu"], "compile_times": res}
    headers, rows = bench_report.compile_rows(doc)
    assert headers == ["op", "fusegen numba"] and re.fullmatch(r"\d+\.\d\d / \d+\.\d\d", rows[0][1])


# --- the report helpers -----------------------------------------------------------------------------
def test_progress_modes():
    quiet = io.StringIO()
    p = bench_report.Progress(quiet)  # auto, not a terminal: silent
    p(1, 8, "read bandwidth")
    p.done()
    assert quiet.getvalue() == ""
    tty = Tty()
    bar = bench_report.Progress(tty)  # auto on a terminal: the bar, redrawn in place
    bar(3, 8, "softmax (4096,4096)")
    assert re.fullmatch(r"\r\x1b\[K\[#{6}-{18}\] 3/8 softmax \(4096,4096\) \d+s", tty.getvalue())
    plain = io.StringIO()
    bench_report.Progress(plain, mode="plain")(2, 8, "rms_norm (4,5)")
    assert re.fullmatch(r"\[2/8\] rms_norm \(4,5\) \(\d+s\)\n", plain.getvalue())


def test_noise_is_detected():
    quiet = {"size": "large", "results": {"a": {"times_s": [1.0, 1.01, 0.99, 1.0, 1.02]}}}
    busy = {"size": "large", "results": {"a": {"times_s": [1.0, 1.5, 0.99, 2.0, 1.02, 1.7]}}}
    assert bench.round_spread([quiet]) < bench.SPREAD_LIMIT < bench.round_spread([busy])
    machine = {"usable_cpus": 2, "load_avg_start": [0.1], "load_avg": [1.0]}
    assert bench.noise_warnings(machine, 0.05) == []
    assert "disagree by" in bench.noise_warnings(machine, bench.round_spread([busy]))[0]
    assert "load average 3.0" in bench.noise_warnings({**machine, "load_avg_start": [3.0]}, None)[0]


def test_markdown_table_and_emphasis():
    table = bench_report.markdown_table(["op", "a", "b"], [["x", "1.00x**", "2.00x"]], "lrr")
    assert bench_report._embolden(table).splitlines() == ["| op | a | b |", "| --- | ---: | ---: |",
                                                          "| x | **1.00x** | 2.00x |"]


# --- the GPU bench, where there is no GPU (tests/cuda/test_bench_cuda.py runs it on the simulator) -----
@no_simulator
@pytest.mark.skipif(gpu_present(), reason="a GPU is present: tests/cuda/test_bench_cuda.py runs the GPU bench")
def test_gpu_bench_without_a_gpu_says_so_quickly(capsys):
    import time
    t0 = time.perf_counter()
    assert cli.main(["bench", "--device", "cuda", "--json", "", "--markdown", "", "--png", ""]) == 2
    assert time.perf_counter() - t0 < 5
    err = capsys.readouterr().err
    # without numba-cuda: what to install; with it: how to get a device (a GPU, or the simulator)
    why = "NUMBA_ENABLE_CUDASIM" if HAVE["numba-cuda"] else "pip install 'fusegen[cuda]'"
    assert err.startswith("fusegen bench: error: --device cuda cannot run here: ") and why in err
    assert cli.main(["demo", "--device", "cuda", "--shape", "8,8"]) == 2
    captured = capsys.readouterr()
    assert re.search(r"skipped: numba-cuda, aot-cuda \(.*" + re.escape(why), captured.out)
    assert "no fusegen backend" in captured.err


def test_device_timing_rotates_and_uses_the_wall_clock_for_synchronous_methods():
    """``bench_cuda.time_on_device`` with a stand-in device clock: the prelude runs before every
    timed call, the start rotates, a synchronous method is timed by the wall clock."""
    from fusegen.bench import cuda as bench_cuda

    class Stream:
        def synchronize(self) -> None:
            log.append("sync")

    class Ticks(bench_cuda.WallClock):  # every call "takes" 2 ms of device time
        def start(self):
            return None

        def stop(self, token):
            return 2e-3

    log: list[str] = []
    calls = {n: (lambda n=n: log.append(n)) for n in "abc"}
    samples, host = bench_cuda.time_on_device(calls, 2, Ticks(Stream()), lambda: log.append("prelude"),
                                              {"a": 1, "b": 2, "c": 1}, frozenset("c"))
    timed = [e for e in log if e != "sync"]
    assert timed == ["prelude", "a", "prelude", "b", "b", "prelude", "c",
                     "prelude", "b", "b", "prelude", "c", "prelude", "a"]
    assert samples["a"] == [2e-3, 2e-3] and samples["b"] == [1e-3, 1e-3]   # per call: 2 calls a round
    assert all(0 < t < 1 for t in samples["c"]) and all(len(h) == 2 for h in host.values())
    assert log.count("sync") == 2 * 2 + 1  # around each wall-clocked call, and once at the end


@no_simulator
@needs("numba-cuda")
def test_gpu_bench_kernels_compile_for_a_real_gpu():
    """The copy probe, the L2 flush and the spin kernel, compiled to PTX for sm_90 (no GPU needed)."""
    from numba import cuda
    from fusegen.bench import cuda as bench_cuda
    sigs = {bench_cuda._copy: "void(float32[::1], float32[::1])", bench_cuda._fill: "void(float32[::1], float32)",
            bench_cuda._spin: "void(int64, float32[::1])"}
    for kernel, sig in sigs.items():
        try:
            ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0))
        except Exception as e:  # noqa: BLE001 - no NVRTC here
            pytest.skip(f"needs NVRTC 13.0 for numba.cuda.compile_ptx (pip install -e \".[cuda]\" brings it): "
                        f"{type(e).__name__}: {str(e)[:200]}")
        assert ".entry" in ptx


def test_issue_verdict_needs_both_cuda_backends():
    from fusegen.bench import cuda as bench_cuda

    def case(axis, fractions, ahead=1.3):
        results = {n: {"ok": True, "bandwidth_fraction": f} for n, f in fractions.items()}
        return {"op": "add_reduce_sum", "size": "large", "shapes": [[4096, 4096]] * 2, "label": f"axis {axis}",
                "results": results, "targets": {"bound": {"met": min(fractions.values()) >= 0.8},
                                                "ahead": {"met": ahead > 1, "value": ahead, "other": "torch-cuda"}}}
    both = {"numba-cuda": 0.87, "aot-cuda": 0.91}
    verdict = bench_cuda.issue_verdict([case(0, both), case(1, both)])
    assert verdict["met"] is True and verdict["text"].count("numba-cuda 87%, aot-cuda 91%") == 2
    assert bench_cuda.issue_verdict([case(0, both), case(1, both, ahead=0.9)])["met"] is False
    lone = bench_cuda.issue_verdict([case(0, {"numba-cuda": 0.9})])
    assert lone["met"] is False and "aot-cuda absent" in lone["text"]
    assert bench_cuda.issue_verdict([]) is None


# The rows the tiny run leaves out and no other test checks against the bench's own reference code
# (the others: test_perf_ops, test_activations, test_layout_backends), at a small shape, on Numba.
@pytest.mark.parametrize("name", ["cross_entropy", "accuracy", "embedding_layer_norm", "dropout_add_layer_norm",
                                  "cumsum_last", "cumsum_first",
                                  pytest.param("cross_entropy_grad", marks=pytest.mark.extended)])
def test_rows_match_their_reference(name):
    spec = bench_cases.OPS[name]
    shape = spec.small_shapes[0] if spec.small_shapes else (6, 40)
    attrs = spec.variants[-1]
    arrays = spec.make_inputs(shape, "float32", seed=3)
    ref = bench_cases.reference(spec, arrays, attrs)
    err, ok = bench_cases.check(fg.compile(spec.op)(*arrays, **attrs), ref,
                                bench_cases.tolerance(np.dtype(np.float32), spec.reduced(shape, attrs)))
    assert ok, (name, err)


# --- the issues' targets (fusegen.bench.targets): judged on synthetic cases, no timing ----------
def _case(op, size, medians, fusegen=("numba-cpu", "aot-cpu", "fg-jax-cpu", "numba-cpu-out"), bound=1.0):
    results = {n: {"median_s": s, "fusegen": n in fusegen, "ok": True} for n, s in medians.items()}
    return {"op": op, "label": "x", "size": size, "bound_s": bound, "results": results}


def test_every_backend_is_held_to_its_issues_bound():
    from fusegen.bench import targets
    # softmax: issue #19, 1.3x. The best fusegen method meets it; the AOT backend does not: missed,
    # and named. out= runs faster still, but only fresh outputs are judged.
    case = bench.rank_case(_case("softmax", "large", {"numba-cpu": 1.2, "aot-cpu": 1.5, "fg-jax-cpu": 1.25,
                                                      "numba-cpu-out": 1.0, "numpy": 9.0}))
    bound = case["targets"]["bound"]
    assert (bound["method"], bound["limit"], bound["issue"], bound["met"]) == ("aot-cpu", 1.3, 19, False)
    assert case["targets"]["ahead"]["method"] == "numba-cpu-out" and case["targets"]["ahead"]["met"]
    assert "fusegen aot 1.50x the bound (target 1.3x, #19)" in bench_report._target_text(case)
    # the same medians for an op of issue #16 held to 1.5x: met; an unknown op: the default
    met = bench.rank_case(_case("causal_softmax", "large", {"numba-cpu": 1.2, "aot-cpu": 1.5, "fg-jax-cpu": 1.4}))
    assert met["targets"]["bound"]["met"] and bench_report._target_text(met) == "met"
    other = bench.rank_case(_case("someone_elses", "large", {"numba-cpu": 1.19, "aot-cpu": 1.21}))
    assert other["targets"]["bound"]["limit"] == targets.DEFAULT_BOUND and not other["targets"]["bound"]["met"]


def test_per_call_limits_per_backend_and_xla_against_jax():
    us = 1e-6
    within = _case("softmax", "small", {"numba-cpu": 1.4 * us, "aot-cpu": 1.9 * us, "fg-jax-cpu": 9 * us,
                                        "jax-cpu": 10 * us})
    assert bench.rank_case(within)["targets"]["per_call"]["met"]
    # the AOT backend over its 2 us is the worst relative to its limit, though XLA is slower in time
    slow = bench.rank_case(_case("softmax", "small", {"numba-cpu": 1.4 * us, "aot-cpu": 2.6 * us,
                                                      "fg-jax-cpu": 9 * us, "jax-cpu": 10 * us}))
    assert slow["targets"]["per_call"]["method"] == "aot-cpu" and not slow["targets"]["per_call"]["met"]
    behind_jax = bench.rank_case(_case("softmax", "small", {"numba-cpu": 1 * us, "aot-cpu": 1 * us,
                                                            "fg-jax-cpu": 12 * us, "jax-cpu": 10 * us}))
    p = behind_jax["targets"]["per_call"]
    assert (p["method"], p["limit_method"], p["met"]) == ("fg-jax-cpu", "jax-cpu", False)
    assert "jax.jit's 10.00 us" in bench_report._target_text(behind_jax)


def test_report_rejudges_an_earlier_run(tmp_path):
    doc = {"schema": bench.SCHEMA, "cases": [_case("rms_norm", "large", {"numba-cpu": 1.1, "aot-cpu": 1.2})],
           "targets": {"bound_ratio": 9.0}}
    again = bench.rejudge(json.loads(json.dumps(doc)))
    assert again["targets"]["per_op"]["rms_norm"] == {"issue": 19, "bound_ratio": 1.15}
    assert not again["cases"][0]["targets"]["bound"]["met"]
    with pytest.raises(ValueError, match="schema"):
        bench.rejudge({"schema": "fusegen-bench-cuda/1", "cases": []})
