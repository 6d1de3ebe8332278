"""Tests of the ``fusegen`` command line (fusegen.cli) and the demo's use of the harness (fusegen.bench).

No timing assertions: the machines these run on are shared and noisy. Times are
only checked to be positive and finite; correctness is checked exactly.
"""
from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fusegen
import fusegen.native.build
from fusegen import cli
from fusegen.bench import harness as bench

from _optional import require


# --- formatting helpers ---------------------------------------------------------------------------
def test_format_table_aligns_columns():
    text = cli.format_table(["name", "time"], [["numpy", "1.00 ms"], ["numba-cpu", "12.5 us"]])
    lines = text.splitlines()
    assert lines[0].startswith("name     ")
    assert {len(line) for line in lines} == {len(lines[1])}  # right-aligned last column: equal widths
    assert lines[2].endswith("12.5 us") and lines[1].endswith("1.00 ms")


@pytest.mark.parametrize("seconds, text", [(2.5, "2.50 s"), (0.0153, "15.30 ms"), (4.5e-6, "4.50 us"),
                                           (3.69e-4, "369 us"), (3.6e-8, "36 ns"), (None, "-")])
def test_fmt_time(seconds, text):
    assert cli.fmt_time(seconds) == text


def test_parse_shape_and_bad_usage(capsys):
    assert cli.parse_shape("256,128") == (256, 128)
    assert cli.parse_shape("64x32") == (64, 32)
    with pytest.raises(SystemExit) as e:
        cli.main(["demo", "--shape", "0,3"])
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        cli.main(["bench", "--backends", "nosuch"])
    assert "unknown backend" in capsys.readouterr().err
    assert cli.main(["demo", "--shape", "8,8", "--axis", "2"]) == 2


def test_progress_is_quiet_unless_a_tty():
    quiet = io.StringIO()
    p = cli.Progress(quiet)
    p(1, 8, "read bandwidth")
    p.done()
    assert quiet.getvalue() == ""

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    loud = Tty()
    cli.Progress(loud)(3, 8, "(4096,4096) axis 0")
    assert "] 3/8 (4096,4096) axis 0" in loud.getvalue()


# --- the harness ----------------------------------------------------------------------------------
def test_discover_skips_what_is_missing():
    from fusegen.examples import add_reduce_sum
    methods, skipped = bench.discover(add_reduce_sum, ["numba"], ["cpu", "cuda"])
    assert [m.name for m in methods][:1] == ["numba-cpu"]
    if not bench.cuda_available():
        assert skipped["numba-cuda"] == bench.cuda_unavailable()


def test_a_wrong_backend_fails_the_demo(monkeypatch, capsys):
    def wrong(arrays, attrs):
        return lambda: np.sum(arrays[0], axis=attrs["axis"])  # forgot y

    monkeypatch.setattr(bench, "discover", lambda *a, **k: ([bench.Method("broken-cpu", wrong, fusegen=True)], {}))
    assert cli.main(["demo", "--shape", "64,32", "--rounds", "1"]) == 1
    assert re.search(r"^broken-cpu\s+\S+\s+FAIL", capsys.readouterr().out, re.MULTILINE)


# --- the commands, in process ---------------------------------------------------------------------
def test_demo_small(capsys, monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (40.0, 40.0, 40.0))  # a busy machine: said, not hidden
    assert cli.main(["demo", "--shape", "256,128", "--rounds", "3"]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^(\S+)\s+(\S+)\s+(PASS|FAIL)\s+\S+ \S+\s+(\S+)x$", out, re.MULTILINE)
    names = [r[0] for r in rows]
    assert names[0] == "numpy" and "numba-cpu" in names  # NumPy too is checked (on float64 copies)
    for name, err, check, ratio in rows:
        assert check == "PASS", name
        assert float(err) < 1e-3 and float(ratio) > 0
    assert "GB/s" in out and "numba threads" in out
    # the bound's probe: the median of passes around every method, with its spread
    probe = re.search(r"at (\d+\.\d) GB/s \(the median of (\d+) parallel reads of 256 MiB, one before and after every "
                      r"method in every round: (\d+\.\d)-(\d+\.\d) GB/s, interquartile spread \d+%\)", out)
    assert probe and int(probe[2]) == 3 * (len(rows) + 1), out  # 3 rounds of P m P m ... P
    assert float(probe[3]) <= float(probe[1]) <= float(probe[4])
    # which machine, threads and software the numbers come from
    assert re.search(r"^machine: .+, \d+ CPUs, \d+ numba threads.*; fusegen \S+, python \d+\.\d+\.\d+, numpy \S+, "
                     r"numba \S+, llvmlite ", out, re.MULTILINE), out
    assert re.search(r"^warning: load average 40.0 at the start, 40.0 at the end, on \d+ CPUs: .*rerun on a quiet "
                     r"machine$", out, re.MULTILINE), out
    assert "faster than memory allows" not in out  # 256x128: cache-resident inputs are not judged against DRAM


def test_the_probe_runs_around_every_method_and_flags_a_bound_beaten():
    log = []
    calls = {name: (lambda name=name: log.append(name)) for name in ("P", "a", "b", "c")}
    samples = bench.time_interleaved(calls, 2, between="P")
    assert log == ["P", "a", "P", "b", "P", "c", "P", "P", "b", "P", "c", "P", "a", "P"]
    assert len(samples["P"]) == 8 and all(len(samples[n]) == 2 for n in "abc")
    # settle: every timed call follows an untimed one of the same thunk (another's pool may spin)
    log.clear()
    settled = bench.time_interleaved(calls, 1, between="P", settle=True)
    assert log == ["P", "P", "a", "a", "P", "P", "b", "b", "P", "P", "c", "c", "P", "P"]
    assert len(settled["P"]) == 4 and all(len(settled[n]) == 1 for n in "abc")
    entry = bench.probed_bandwidth(100, [1.0, 2.0, 4.0, 1.0], "how")
    assert entry["bytes_per_s"] == 75.0 and entry["min_gbps"] == 25e-9 and entry["max_gbps"] == 100e-9
    assert entry["spread"] == pytest.approx((100 - 50) / 75)
    big = {"bytes": 128 << 20, "results": {"numpy": {"ratio_to_bound": 1.7}, "numba-cpu": {"ratio_to_bound": 0.73},
                                            "aot-cpu": {"ratio_to_bound": 0.95}, "broken": {"error": "x"}}}
    (warning,) = bench.probe_warnings(big)
    assert warning.startswith("numba-cpu ran at 0.73x the bound, faster than memory allows") and "probe" in warning
    assert bench.probe_warnings({**big, "bytes": 1 << 20}) == []  # fits in caches: it may beat DRAM


# The bench itself: tests/test_bench.py.


# --- emit / build ---------------------------------------------------------------------------------
def test_resolve_op_from_a_file(tmp_path):
    src = tmp_path / "my_ops.py"
    src.write_text("import fusegen as fg\n\n@fg.op\ndef twice(x):\n    return x + x\n\nNOT_AN_OP = 3\n")
    assert cli.resolve_op(f"{src}:twice").name == "twice"
    with pytest.raises(ValueError, match="not an @fusegen.op"):
        cli.resolve_op(f"{src}:NOT_AN_OP")
    with pytest.raises(ValueError, match="MODULE:OP"):
        cli.resolve_op("fusegen.examples")
    assert cli.resolve_op("fusegen.examples:add_reduce_sum").name == "add_reduce_sum"


def test_emit_and_build_report_missing_features(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "fusegen.abi_emit", None)  # makes `from .abi_emit import emit` fail
    assert cli.main(["emit", "fusegen.examples:add_reduce_sum", "-o", str(tmp_path)]) == 2
    assert "fusegen.emit is not available" in capsys.readouterr().err
    monkeypatch.delattr(fusegen.native.build, "build_library")
    assert cli.main(["build", str(tmp_path / "k.cc")]) == 2
    assert "build_library is not available" in capsys.readouterr().err


def test_emit_writes_sources(tmp_path, capsys):
    rc = cli.main(["emit", "fusegen.examples:add_reduce_sum", "--abi", "mindspore-aot", "--device", "cpu",
                   "--dtypes", "float32,float32", "-o", str(tmp_path)])
    assert rc == 0
    written = [Path(p) for p in capsys.readouterr().out.split()]
    assert written and all(p.is_file() and tmp_path in p.parents for p in written)


def test_emit_dtypes_are_one_combination_each(tmp_path, capsys):
    """--dtypes float32,int64 is one combination (a dtype per input), as fg.emit's string is;
    repeated, several; an unknown ABI or an empty --dtypes is a usage error."""
    rc = cli.main(["emit", "fusegen.examples:add_reduce_sum", "--dtypes", "float32,int64", "--dtypes", "float64",
                   "-o", str(tmp_path)])
    assert rc == 0
    text = (tmp_path / "add_reduce_sum.cc").read_text()
    assert "(float32, int64) -> (float64)" in text and "(float64, float64) -> (float64)" in text
    assert "(int64, int64)" not in text and "(float32, float32)" not in text
    assert cli.main(["emit", "fusegen.examples:add_reduce_sum", "--dtypes", "", "-o", str(tmp_path)]) == 2
    with pytest.raises(SystemExit):
        cli.main(["emit", "fusegen.examples:add_reduce_sum", "--abi", "bogus", "-o", str(tmp_path)])
    assert "invalid choice: 'bogus'" in capsys.readouterr().err


def test_emit_an_op_traced_per_rank_or_shape(tmp_path, capsys):
    # dropout_add_layer_norm draws over x.shape: traced per input rank, so emitted per rank
    op = "fusegen.examples:dropout_add_layer_norm"
    assert cli.main(["emit", op, "-o", str(tmp_path / "none")]) == 1
    assert "--ranks 2,1" in capsys.readouterr().err
    assert cli.main(["emit", op, "--ranks", "2,2,1,1", "--dtypes", "float32", "-o", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "dropout_add_layer_norm.cc").is_file()
    assert cli.main(["emit", op, "--shapes=-1x8,-1x8,8,8", "--dtypes", "float32", "-o", str(tmp_path / "s")]) == 0
    assert cli.main(["emit", op, "--ranks", "two", "-o", str(tmp_path / "x")]) == 2
    import fusegen.examples
    with pytest.raises(fusegen.DTypeError, match="names no dtype combination"):
        fusegen.emit(fusegen.examples.softmax, dtypes=[])


def test_build_prints_the_library(tmp_path, monkeypatch, capsys):
    # A source of our own: whether fusegen's *emitted* code compiles is test_build's and
    # the emitter's business; here only the command's plumbing is under test.
    require("g++")
    monkeypatch.setenv("FUSEGEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FUSEGEN_AOT_WHITELIST", raising=False)
    monkeypatch.delenv("MS_CUSTOM_AOT_WHITE_LIST", raising=False)
    src = tmp_path / "answer.cc"
    src.write_text('extern "C" int fg_answer() { return 42; }\n')
    assert cli.main(["build", str(src), "--flags", "-O1 -fPIC -shared"]) == 0
    assert Path(capsys.readouterr().out.strip()).is_file()
    src.write_text("this is not C++\n")
    assert cli.main(["build", str(src)]) == 1
    assert "fusegen build: error:" in capsys.readouterr().err


# --- the installed console script -----------------------------------------------------------------
def test_console_script_help():
    beside = Path(sys.executable).with_name("fusegen")
    exe = str(beside) if beside.is_file() else shutil.which("fusegen")
    if exe is None:
        pytest.skip('needs the fusegen console script: pip install -e ".[test]"')
    proc = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0, proc.stderr
    for command in ("demo", "bench", "emit", "build"):
        assert command in proc.stdout
