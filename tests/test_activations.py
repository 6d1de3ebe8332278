"""The #18 reference ops (fusegen.examples.ACTIVATION_OPS: quantize_int8, dequantize, softplus,
silu, mish, gelu) against the bench's NumPy references (evaluated in float64, the bench's own
check and tolerance), and their float32 hot loops as vector code without libm calls in both CPU
backends, in float32 lanes (exp, sigmoid, tanh, log1p and erf are fusegen.vmath_lanes' functions:
nothing is widened to double): Numba's LLVM IR, and g++'s vectorization report and machine code
on the emitted C++."""
from __future__ import annotations

import re
import shutil
import subprocess

import numba
import numpy as np
import pytest

import fusegen as fg
import fusegen.examples as ex
from fusegen.bench import cases as bench_cases
from fusegen.lower_cpu import JIT_OPTIONS

ACTIVATIONS = [op.name for op in ex.ACTIVATION_OPS]


def _inputs(name: str, shape=(16, 40)):
    spec = bench_cases.OPS[name]
    return spec, spec.make_inputs(shape, "float32", seed=3)


@pytest.mark.parametrize("backend", ["numba", "aot"])
def test_activation_ops_match_the_bench_references(backend):
    for name in ACTIVATIONS:
        spec, arrays = _inputs(name)
        if backend == "aot":
            k = fg.compile(spec.op, backend="aot")  # (dtypes on demand: dequantize's int8 codes too)
        else:
            k = fg.compile(spec.op)
        got = k(*arrays)
        ref = bench_cases.reference(spec, arrays, {})
        err, ok = bench_cases.check(got, ref, bench_cases.tolerance(np.dtype(np.float32), 1) * 4)
        assert ok, f"{name} ({backend}): max relative error {err}"
        assert np.asarray(got).dtype == ref[0].dtype


def test_quantize_rounds_halves_to_even_and_saturates():
    k = fg.compile(ex.quantize_int8)
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 1000.0, -1000.0, np.nan, 127.4, -128.6], np.float32)
    got = k(x, np.float32(1.0).reshape(()))
    assert got.dtype == np.int8
    assert got[:7].tolist() == [0, 2, 2, 0, -2, 127, -128] and got[8:].tolist() == [127, -128]


@pytest.mark.parametrize("name", ["softplus", "silu", "mish", "gelu"])
def test_numba_hot_loop_is_vector_code_without_libm_calls(name):
    k = fg.compile(getattr(ex, name))
    k(np.ones(4096, np.float32))
    cached = k._last.groups[0].func
    func = numba.njit(**dict(JIT_OPTIONS, cache=False))(cached.py_func)
    func.compile(cached.signatures[0])
    llvm = func.inspect_llvm(cached.signatures[0])
    assert re.search(r"<\d+ x float>", llvm), "no vector float32 arithmetic"
    assert not re.search(r"fpext|<\d+ x double>", llvm), "float32 lanes widened to double"
    assert not re.search(r"call [^\n]*@(llvm\.)?(exp|log1p|erf|tanh|expm1)f?(\.|\()", llvm), "a libm call remains"


def test_gcc_vectorizes_the_float32_stage_loops(tmp_path):
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed")
    from fusegen.native import build
    for name in ("softplus", "silu", "mish", "gelu"):
        e = fg.emit(getattr(ex, name), dtypes=["float32"])
        e.write(tmp_path / name)
        src = tmp_path / name / e.main
        flags = [f for f in build.default_cpp_flags() if f not in ("-shared", "-fopenmp")]
        proc = subprocess.run(["g++", *flags, "-fopt-info-vec-optimized", "-c", str(src), "-o", str(tmp_path / "k.o")],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-2000:]
        lines = src.read_text().splitlines()
        start = next(i for i, line in enumerate(lines, 1) if "namespace k_float32" in line)
        vectorized = [int(m) for m in re.findall(rf"{re.escape(e.main)}:(\d+):\d+: optimized: loop vectorized",
                                                 proc.stderr)]
        assert any(v > start for v in vectorized), f"{name}: no loop of the float32 stages vectorized"
        if shutil.which("objdump"):  # and its machine code: float32 lanes, nothing in double
            dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", str(tmp_path / "k.o")],
                                 capture_output=True, text=True, check=True).stdout
            stages = re.findall(r"k_float32::stage\w*\([^\n]*\)>:\n(.*?)(?=\n\n|\Z)", dis, re.S)
            assert stages, f"{name}: no float32 stage function in the object"
            for body in stages:
                assert re.search(r"\bv(fmadd\w*|mul|add)ps\s.*%[yz]mm", body), f"{name}: no packed float arithmetic"
                # (v[^p]: integer instructions such as vpminsd are not double arithmetic)
                assert not re.search(r"\bv[^p\s]\w*(pd|sd)\b", body), f"{name}: double arithmetic or conversions"
