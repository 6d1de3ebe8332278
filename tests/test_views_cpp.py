"""The C++ view evaluator (``emitters/templates/_fg_views.inc.j2``) against ``fusegen/plan/views.py``.

A test driver (``tests/views_driver.cc``) includes the rendered ``_fg_runtime`` and ``_fg_views``
partials, as an emitted kernel does, and is built once per session (content-cached by
``fusegen.build``). Through ctypes it runs the same cases as ``tests/test_views.py`` (the shared
hypothesis strategy ``views_chains.cases``, the hand-written shapes and every error case), and
its whole result must equal the Python one: each view, the refined nest, every box with its
layout, the error code with the operand and step that raised it; and walking each box's loop in
C++ must give every element's address NumPy gives. The partial also compiles warning-free with
-Wall -Wextra -Werror at -O1 and at MindSpore's -O0, and as CUDA host and device code with nvcc.
"""
from __future__ import annotations

import ctypes
import re
import shutil
from pathlib import Path

import jinja2
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from fusegen import abi_emit, vmath
from fusegen.native import build
from fusegen.plan import views as V

from _optional import needs_gxx, require
from views_chains import (ERROR_CASES, SHAPE_CASES, Case, cases, encode, evaluate, expected_addresses, grouped_pairs,
                          make_case, program)

TESTS = Path(__file__).resolve().parent
STRICT = ["-Wall", "-Wextra", "-Werror"]
CXX_FLAGS = ["-std=c++17", "-O1", *STRICT, "-fPIC", "-shared"]
OVERFLOW, TWICE = -1000, -1001  # tests/views_driver.cc
MAX_WALK = 1 << 16              # domains larger than this are not walked element by element


def _env() -> jinja2.Environment:
    # the emitters' settings (fusegen/abi_emit.py), so the partials render as in a kernel
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(abi_emit.TEMPLATES)), undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)


def header() -> str:
    """fg_views_under_test.h: what a kernel includes before its own code, up to the views."""
    env = _env()
    runtime = env.get_template("_fg_runtime.inc.j2").render(errors=abi_emit.ERRORS, vmath=vmath.template_data())
    views = env.get_template("_fg_views.inc.j2").render()
    std = "".join(f"#include <{h}>\n" for h in ("algorithm", "cmath", "cstdint", "cstring", "limits", "stdexcept", "string",
                                                  "vector"))
    return "#pragma once\n" + std + runtime + views


def build_driver(directory: Path, flags: list[str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "fg_views_under_test.h").write_text(header())
    shutil.copy(TESTS / "views_driver.cc", directory / "views_driver.cc")
    return build.build_library(directory / "views_driver.cc", flags=flags)


class Driver:
    """fgv_run and friends through ctypes."""

    def __init__(self, path: Path):
        lib = ctypes.CDLL(str(path))
        i64, p64 = ctypes.c_int64, ctypes.POINTER(ctypes.c_int64)
        lib.fgv_run.argtypes = [p64, i64, p64, i64, p64]
        lib.fgv_run.restype = i64
        lib.fgv_error_name.argtypes = [i64]
        lib.fgv_error_name.restype = ctypes.c_char_p
        lib.fgv_limits.argtypes = [p64]
        lib.fgv_inner_address.argtypes = [p64, i64, i64, i64]
        lib.fgv_inner_address.restype = i64
        self.lib = lib
        limits = np.zeros(5, np.int64)
        lib.fgv_limits(_ptr(limits))
        self.limits = [int(x) for x in limits]
        self.base = self.limits[3]

    def run(self, case: Case, walk: bool) -> tuple[list[int], np.ndarray | None]:
        prog = np.array(program(case), np.int64)
        size = int(np.prod(case.domain)) if case.domain else 1
        addr = np.full((len(case.operands), size), -2, np.int64) if walk else None
        cap = 1 << 12
        while True:
            out = np.zeros(cap, np.int64)
            n = self.lib.fgv_run(_ptr(prog), len(prog), _ptr(out), cap, _ptr(addr) if walk else None)
            if n != OVERFLOW or cap > 1 << 22:
                break
            cap *= 16
            if walk:
                addr[...] = -2
        assert n >= 0, f"fgv_run returned {n}"
        return [int(x) for x in out[:n]], addr


def _ptr(a: np.ndarray):
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))


@pytest.fixture(scope="session")
def driver(tmp_path_factory) -> Driver:
    require("g++")
    return Driver(build_driver(tmp_path_factory.mktemp("views-O1"), CXX_FLAGS))


def compare(driver: Driver, case: Case) -> None:
    """The C++ result equals the Python one, whole; the C++ walk gives NumPy's addresses."""
    size = int(np.prod(case.domain)) if case.domain else 1
    walk = size <= MAX_WALK
    res = evaluate(case, walk=walk)
    got, addr = driver.run(case, walk=walk and res.error is None)
    assert got == encode(res, driver.base)
    if res.error is None and walk:
        np.testing.assert_array_equal(addr, res.addresses)
        if all(op.array is not None for op in case.operands):
            np.testing.assert_array_equal(addr, expected_addresses(case, res))


SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck))


@settings(max_examples=300, **SETTINGS)
@given(case=cases())
def test_cpp_matches_python(driver, case):
    compare(driver, case)


@pytest.mark.slow
@settings(max_examples=5000, **SETTINGS)
@given(case=cases())
def test_cpp_matches_python_long(driver, case):
    compare(driver, case)


@pytest.mark.parametrize("name", SHAPE_CASES)
def test_shape_cases(driver, name):
    compare(driver, SHAPE_CASES[name])


@pytest.mark.parametrize("want, case", ERROR_CASES)
def test_error_cases(driver, want, case):
    compare(driver, case)
    got, _ = driver.run(case, walk=False)
    if want is not None:
        assert driver.lib.fgv_error_name(got[0]).decode() == want[0] and tuple(got[1:3]) == want[1:]


def test_limits_and_error_names(driver):
    assert driver.limits[:3] == [V.MAX_RANK, V.MAX_SUBDIMS, V.MAX_LOOP_DIMS]
    assert driver.limits[4] == len(V.ERRORS)
    names = [driver.lib.fgv_error_name(driver.base + i).decode() for i in range(len(V.ERRORS))]
    assert names == V.ERROR_NAMES
    # outside the emitted table's codes, so a code that is not wired yet cannot be misread
    assert driver.base >= len(abi_emit.ERRORS)


def test_sixteen_loop_dims(driver):
    compare(driver, make_case(*[grouped_pairs(j) for j in (1, 2, 3)], domain=(32,) * 4, numpy=False))


def test_thirty_two_loop_dims(driver):
    compare(driver, make_case(*[grouped_pairs(j, 8) for j in (1, 2, 3)], domain=(32,) * 8, numpy=False))


def test_inner_address(driver):
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(0, 5))
        digits = [(int(rng.integers(0, 5)), int(rng.integers(-50, 50))) for _ in range(n)]
        inner = V.Inner(digits, int(rng.integers(-100, 100)))
        flat = np.array([x for d in digits for x in d] or [0], np.int64)
        for linear in rng.integers(-200, 200, size=5):
            assert driver.lib.fgv_inner_address(_ptr(flat), n, inner.offset, int(linear)) == inner.address(int(linear))


def test_partial_is_plain_cpp():
    """No jinja syntax: the partial renders to itself, so it reads (and greps) as shipped."""
    text = (abi_emit.TEMPLATES / "_fg_views.inc.j2").read_text()
    assert _env().get_template("_fg_views.inc.j2").render() == text
    code = re.sub(r"//[^\n]*", "", text)  # no allocation, no exceptions: kernels return error codes
    assert not re.search(r"\b(new|delete|malloc|free|throw|try|std::vector|std::string)\b", code)


@needs_gxx
def test_mindspore_flags_build(tmp_path):
    """MindSpore compiles a kernel with no -O flag: the partial is warning-free there too."""
    d = Driver(build_driver(tmp_path, [*build.MINDSPORE_CPU_FLAGS, *STRICT]))
    for name in ("heads_merge", "rope_concat", "modular_reshape"):
        compare(d, SHAPE_CASES[name])
    for _, case in ERROR_CASES:
        compare(d, case)


CUDA_SOURCE = """\
// The views partial as nvcc compiles it in a .cu kernel: host code (refine, boxes) and
// Inner::address in device code.
#include "fg_views_under_test.h"

__global__ void unravel(fg::views::Inner inner, const int64_t *linear, int64_t *address, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) address[i] = inner.address(linear[i]);
}

extern "C" int fgv_cuda_host(int64_t *boxes) {
  fg::Shape s;
  s.rank = 2;
  s.d[0] = 3;
  s.d[1] = 8;
  fg::views::View a, b;
  FG_TRY(fg::views::contiguous(s, &a));
  FG_TRY(fg::views::contiguous(s, &b));
  FG_TRY(fg::views::place(&a, 1, 4, 12));
  fg::Shape dom = s;
  dom.d[1] = 12;
  FG_TRY(fg::views::broadcast(&b, s));
  FG_TRY(fg::views::place(&b, 1, 0, 12));
  const fg::views::View *ops[2] = {&a, &b};
  fg::views::Nest<2> nest;
  FG_TRY(fg::views::refine<2>(ops, dom, &nest));
  *boxes = 0;
  return fg::views::for_each_box(nest, [&](const fg::views::Box<2> &, const fg::views::BoxLayout<2> &) {
    ++*boxes;
    return int(fg::FG_OK);
  });
}
"""


def test_nvcc_compiles_the_partial(tmp_path):
    require("nvcc")
    tmp_path.joinpath("fg_views_under_test.h").write_text("#include <cuda_runtime.h>\n" + header())
    src = tmp_path / "views_cuda.cu"
    src.write_text(CUDA_SOURCE)
    flags = ["-std=c++17", "--shared", "-Xcompiler", "-fPIC,-Wall,-Wextra,-Werror", "-gencode", "arch=compute_80,code=sm_80"]
    lib = ctypes.CDLL(str(build.build_library(src, flags=flags)))
    boxes = np.zeros(1, np.int64)
    assert lib.fgv_cuda_host(_ptr(boxes)) == 0 and boxes[0] == 3  # [0, 4), [4, 8), [8, 12)
