"""Every backend vectorizes what the other does (issue #19): the element loops of each reference
op's emitted C++ must be vectorized by g++ at ``-O3 -march=x86-64-v3``, as LLVM vectorizes the
Numba backend's (the Numba side: tests/test_vmath.py). Before this test, the emitted bias_gelu
loop stayed scalar: g++ threaded tanh_f32's constant clamp into a path of its own.

A *hot loop* is one whose body calls a stage's element function (``s0_w0(...)``,
``acc0[l] += s1_r0(...)``): the chunk loops ``for (int64_t i = 0; i < m; ++i)`` and the lane
loops ``for (int l = 0; l < fg::kLanes; ++l)`` (which g++ unrolls and vectorizes as straight-line
code: they are then not reported at all). Tails (``for (; i < m; ++i)``, fewer than kLanes
elements) are not hot. The test fails if g++'s ``-fopt-info-vec-missed`` names a hot loop.
"""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

import fusegen as fg
import fusegen.examples as ex
from fusegen.bench import variants

GXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(GXX is None, reason="needs g++ (apt install g++)")
FLAGS = ["-std=c++17", "-O3", "-march=x86-64-v3", "-fno-math-errno", "-fopenmp", "-fPIC", "-c",
         "-fopt-info-vec-optimized", "-fopt-info-vec-missed"]
HOT_LOOP = re.compile(r"^\s*for \((int64_t i = 0; i < m; \+\+i|int l = 0; l < fg::kLanes; \+\+l)\) \{$")
ELEMENT_CALL = re.compile(r"\bs\d+_[wr]\d+\(")


def hot_loops(source: str) -> list[int]:
    """1-based line numbers of the loops whose body calls a stage's element function."""
    lines = source.splitlines()
    return [n + 1 for n, line in enumerate(lines[:-1]) if HOT_LOOP.match(line) and ELEMENT_CALL.search(lines[n + 1])]


def vector_report(op, tmp_path) -> tuple[list[int], dict[int, str]]:
    """(hot loop lines, {line: "vectorized" | "missed"}) for ``op``'s float32 C++ source."""
    files = fg.emit(op, abi="mindspore-aot", device="cpu", dtypes="float32")
    files.write(tmp_path)
    src = tmp_path / files.main
    proc = subprocess.run([GXX, *FLAGS, "-I", str(tmp_path), str(src), "-o", str(tmp_path / "k.o")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    verdicts: dict[int, str] = {}
    for m in re.finditer(rf"(?:^|/){re.escape(src.name)}:(\d+):\d+: "
                         r"(optimized: loop vectorized|missed: couldn't vectorize loop)", proc.stderr, re.M):
        line = int(m.group(1))
        verdicts[line] = "vectorized" if m.group(2).startswith("optimized") or verdicts.get(line) == "vectorized" \
            else "missed"
    return hot_loops(src.read_text()), verdicts


# Ops whose float32 math is not vectorizable yet (op name -> why); strict: once they vectorize,
# the mark must go.
SCALAR_MATH: dict[str, str] = {}
QUICK = {"bias_gelu", "softmax", "silu", "user_bias_gelu_tanh"}


def _cases():
    ops = [*ex.REFERENCE_OPS, *ex.PERF_OPS, *(o for o in ex.ACTIVATION_OPS if o.name in ("gelu", "silu", "softplus", "mish")),
           *(v.op for v in variants.VARIANTS.values())]
    for op in ops:
        marks = [] if op.name in QUICK else [pytest.mark.slow]
        if op.name in SCALAR_MATH:
            marks.append(pytest.mark.xfail(reason=SCALAR_MATH[op.name], strict=True))
        yield pytest.param(op, id=op.name, marks=marks)


@pytest.mark.parametrize("op", list(_cases()))
def test_emitted_hot_loops_are_vectorized(op, tmp_path):
    hot, verdicts = vector_report(op, tmp_path)
    assert hot, "no element loop found: has the emitted loop shape changed? (update HOT_LOOP)"
    missed = [n for n in hot if verdicts.get(n) == "missed"]
    assert not missed, f"{op.name}: g++ did not vectorize the hot loop(s) at line(s) {missed}"
    # the report was read: at least one hot loop is reported vectorized (the others unrolled)
    assert any(verdicts.get(n) == "vectorized" for n in hot)


def test_hot_loop_finder_sees_chunk_and_lane_loops():
    src = ("        for (int64_t i = 0; i < m; ++i) {\n          w2[i] = s0_w0(v0[i], v1[i], a);\n        }\n"
           "          for (int l = 0; l < fg::kLanes; ++l) {\n            acc0[l] += s1_r0(v0[i + l], a);\n"
           "        for (; i < m; ++i) {\n          acc0[0] += s1_r0(v0[i], a);\n"
           "        for (int64_t i = 0; i < n; ++i) {\n          out[i] = 0;\n")
    assert hot_loops(src) == [1, 4]
