"""Tests of ``fg.compile(op, backend="aot")``: the emitted MindSpore-AOT sources, built and run.

* Numerics: every reference op, built with fusegen's flags (float16/32/64, plus int32 where NumPy
  defines the op) and with MindSpore's auto-compile flags (float32), compared with NumPy and with
  the Numba backend over ranks 0-4, positive and negative axes, keep_dims both ways, broadcasting,
  size-0/size-1 dims and non-contiguous inputs.
* The ABI: InferShape with unknown dims (-1) and unknown rank ([-2]) against ``fusegen.ir.infer``;
  InferType's MindSpore TypeIds; workspaces; every error code of ``abi_emit.ERRORS`` that a caller
  can provoke, driven through ``AotKernel`` or straight through the host shim (``Raw`` below).
* The backend's own checks: the same exceptions as the Numba backend for bad input.

Cost: each ``fg.compile(op, backend="aot", ...)`` runs g++ once per content (cached on disk), so the
kernels are built once per module (``kernels`` fixture) and a test only pays for signatures (an Init
call). Numba comparisons compile a Numba function per signature, so only a few are made.
"""
from __future__ import annotations

import ctypes
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fusegen as fg
import fusegen.examples as ex
from conftest import TOL, assert_all_close, assert_close, np_ref, strict_cpp_flags
from fusegen.native import host
from fusegen.native import build
from fusegen.abi_emit import ERROR_CODES, ERRORS, c_name, emit
from fusegen.native.aot_kernel import TYPE_IDS, AotKernel
from fusegen.errors import (ArgumentError, AttrError, DTypeError, FusegenError, KernelError, LibraryError,
                            ShapeError)
from fusegen.plan import build_plan

from _optional import needs_gxx
from row_quotient_cases import check_row_quotients, row_quotient_inputs, row_quotients, softmax_ulp_error

pytestmark = needs_gxx

REPO = Path(__file__).resolve().parents[1]
OPS = {op.name: op for op in ex.REFERENCE_OPS}
FLOATS = ("float16", "float32", "float64")
INT_OPS = ("add_reduce_sum", "add_mul_div")  # ops with an int32 combination (NumPy semantics defined)


@fg.op
def centered(x, *, axis: int, scale: float):
    """x - max(x): the max is no output but a later stage reads it, so it needs a workspace."""
    return (x - fg.max(x, axis=axis, keep_dims=True)) * scale


# --------------------------------------------------------------------------- NumPy references

def ref_add_reduce_sum(x, y, axis, keep_dims):
    return np.sum(x + y, axis=axis, keepdims=keep_dims)


def ref_add_mul_div(x, y):
    return x + y, x * y, x / y


def ref_smooth_l1(x, y, sigma):
    d = x - y
    s2 = sigma * sigma
    ad = np.abs(d)
    return np.where(ad < 1.0 / s2, 0.5 * s2 * d * d, ad - 0.5 / s2)


def ref_softmax(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def ref_layer_norm(x, axis, eps):
    mean = np.mean(x, axis=axis, keepdims=True)
    d = x - mean
    rstd = 1.0 / np.sqrt(np.mean(d * d, axis=axis, keepdims=True) + eps)
    return d * rstd, mean, rstd


def ref_rms_norm(x, w, eps):
    return x * (1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)) * w


def ref_bias_gelu(x, b):
    h = x + b
    return 0.5 * h * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h * h * h)))


REFS = {name: globals()[f"ref_{name}"] for name in OPS}

# (input shapes, attributes) per op: ranks 0-4 where the op allows them, positive and negative axes,
# keep_dims both ways, broadcasting, size-0 and size-1 dims, rows longer than a packed chunk (512)
# and columns wider than a tile (2048), and one case past the parallel threshold (2**17 elements).
CASES: dict[str, list[tuple[list[tuple], dict]]] = {
    "add_reduce_sum": [
        ([(7,), (7,)], dict(axis=0)), ([(7,), (7,)], dict(axis=-1, keep_dims=True)),
        ([(3, 4), (3, 4)], {}), ([(3, 4), (3, 4)], dict(axis=0, keep_dims=True)), ([(3, 4), (3, 4)], dict(axis=-2)),
        ([(3, 1), (1, 4)], dict(axis=1, keep_dims=True)), ([(3, 1), (1, 4)], dict(axis=0)),
        ([(2, 3, 5), (2, 3, 5)], dict(axis=-1)), ([(2, 3, 5), (3, 5)], dict(axis=1, keep_dims=True)),
        ([(2, 3, 4, 5), (2, 3, 4, 5)], dict(axis=2)), ([(2, 3, 4, 5), (1, 5)], dict(axis=-4, keep_dims=True)),
        ([(0, 4), (0, 4)], dict(axis=0)), ([(3, 0), (3, 0)], dict(axis=0, keep_dims=True)),
        ([(1, 1), (1, 1)], dict(axis=1)), ([(2, 1500), (2, 1500)], dict(axis=1)),
        ([(3, 2500), (3, 2500)], dict(axis=0)), ([(400, 400), (400, 400)], dict(axis=0)),
    ],
    "add_mul_div": [
        ([(), ()], {}), ([(), (2, 3)], {}), ([(5,), (5,)], {}), ([(3, 1), (1, 4)], {}), ([(2, 3, 4), (4,)], {}),
        ([(2, 1, 3, 4), (5, 1, 1)], {}), ([(0, 3), (1, 3)], {}), ([(1,), (1, 1)], {}),
    ],
    "smooth_l1": [
        ([(), ()], {}), ([(17,), (17,)], dict(sigma=0.5)), ([(3, 4), (3, 4)], dict(sigma=3)),
        ([(3, 1), (1, 4)], {}), ([(2, 3, 4, 5), (2, 3, 4, 5)], dict(sigma=2.0)),
    ],
    "softmax": [
        ([(7,)], {}), ([(3, 5)], {}), ([(3, 5)], dict(axis=0)), ([(2, 3, 4)], dict(axis=1)),
        ([(2, 3, 4, 5)], dict(axis=-3)), ([(4, 1)], dict(axis=1)), ([(1, 4)], dict(axis=0)), ([(0, 5)], {}),
        ([(2, 3000)], {}), ([(512, 300)], dict(axis=0)),
    ],
    "layer_norm": [
        ([(6,)], {}), ([(3, 8)], {}), ([(3, 8)], dict(axis=0, eps=1e-3)), ([(2, 3, 4)], dict(axis=1)),
        ([(2, 3, 4, 5)], dict(axis=-1)), ([(3, 1)], {}), ([(0, 4)], {}),
    ],
    "rms_norm": [
        ([(8,), (8,)], {}), ([(3, 8), (8,)], {}), ([(2, 3, 8), (1, 8)], dict(eps=1e-3)),
        ([(2, 2, 3, 4), (2, 1, 1, 4)], {}), ([(0, 8), (8,)], {}),
    ],
    "bias_gelu": [
        ([(), ()], {}), ([(4, 8), (8,)], {}), ([(3, 1), (1, 4)], {}), ([(2, 3), ()], {}),
        ([(2, 3, 4, 5), (5,)], {}),
    ],
}


def case_id(case) -> str:
    shapes, attrs = case
    text = "+".join("x".join(map(str, s)) or "scalar" for s in shapes)
    return text + "".join(f"-{k}={v}" for k, v in attrs.items())


ALL_CASES = [pytest.param(name, case, id=f"{name}-{case_id(case)}") for name in OPS for case in CASES[name]]


def dtypes_of(name: str) -> tuple:
    return FLOATS + ((("int32", "int32"),) if name in INT_OPS else ())


def make_inputs(name: str, shapes, dtype: str, rng: np.random.Generator) -> list[np.ndarray]:
    """Random inputs; divisors (add_mul_div's y) keep away from zero."""
    out = []
    for i, s in enumerate(shapes):
        divisor = name == "add_mul_div" and i == 1
        if dtype == "int32":
            a = rng.integers(1 if divisor else -5, 6, size=s)
        else:
            a = rng.uniform(0.5, 3.0, size=s) * rng.choice([-1.0, 1.0], size=s) if divisor else \
                rng.uniform(-3.0, 3.0, size=s)
        out.append(np.asarray(a).astype(dtype))
    return out


def reference(name: str, arrays, attrs: dict):
    """NumPy's result with the op's bound attributes (a float attribute reaches the kernel with
    its float64 value through fusegen's host; see test_float_attributes_keep_float64_through_fusegens_host)."""
    return np_ref(REFS[name], *arrays, **OPS[name].bind_attrs(attrs))


def summation_tol(name: str, arrays, attrs: dict) -> dict:
    """add_reduce_sum's absolute tolerance: float sums cancel, and the kernel adds in another order
    than NumPy's pairwise sum, so the error bound is eps * (terms) * max|term|, not relative."""
    if name != "add_reduce_sum" or arrays[0].dtype.kind != "f":
        return {}
    terms = np.broadcast(*arrays).shape
    n = terms[OPS[name].bind_attrs(attrs)["axis"]] if terms else 1
    top = max((float(np.abs(a).max()) for a in arrays if a.size), default=0.0) * 2
    eps = np.finfo(np.float32 if arrays[0].dtype == np.float16 else arrays[0].dtype).eps
    return dict(atol=max(TOL[arrays[0].dtype]["atol"], 2 * eps * n * top))


def check(got, want, what: str, **tol) -> None:
    if isinstance(want, tuple):
        assert_all_close(got, want, what=what, **tol)
    else:
        assert_close(got, want, what=what, **tol)


# --------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module", autouse=True)
def no_whitelist():
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("FUSEGEN_AOT_WHITELIST", raising=False)
        mp.delenv("MS_CUSTOM_AOT_WHITE_LIST", raising=False)
        yield


@pytest.fixture(scope="module")
def kernels():
    """``kernels(name, flags=None)``: the op compiled once per module, for every dtype combination
    of ``dtypes_of``, with fusegen's flags or MindSpore's (``"mindspore"``), warnings as errors
    (``conftest.strict_cpp_flags``: the same builds as test_abi_emit.py's warning checks, so the
    build cache compiles each source once)."""
    built: dict = {}

    def get(name: str, flags: str | None = None):
        if (name, flags) not in built:
            op = OPS[name] if name in OPS else centered
            dtypes = list(dtypes_of(name)) if name in OPS else "float32"
            built[(name, flags)] = fg.compile(op, backend="aot", dtypes=dtypes,
                                              flags=strict_cpp_flags(flags or "fusegen"))
        return built[(name, flags)]

    yield get
    for k in built.values():
        k.close()


def default_kernel(compiled, **attrs) -> AotKernel:
    """The ``AotKernel`` an AOT kernel uses for these attribute values."""
    return compiled.executor.kernel_for(tuple(compiled.op.bind_attrs(attrs).items()))


class Raw:
    """Drives a library's entry points straight through fusegen's host shim, with any arguments
    (wrong nparam, -1 dims, no Init...), and turns a non-zero code into the ``KernelError`` that
    ``AotKernel`` would raise (so its ``meaning`` comes from the library's ``<Name>ErrorString``)."""

    def __init__(self, kernel: AotKernel):
        self.k, self.shim = kernel, kernel._loaded.shim

    def extra(self, attrs: dict | None = None) -> int:
        """A new ``AotExtra`` holding ``attrs`` exactly as given (no binding to the op's types)."""
        extra = self.shim.fg_extra_new()
        self.k._loaded.extras.append(extra)  # destroyed (DestructKernelData) with the kernel
        host.set_attrs(self.shim, extra, host.canonical_attrs(attrs or {}))
        return extra

    @staticmethod
    def _dtypes(names):
        return (ctypes.c_char_p * max(len(names), 1))(*[n.encode() for n in names])

    def init(self, shapes, dtypes, attrs: dict | None = None) -> int:
        """Runs ``<Name>Init``; returns the extra holding its kernel data."""
        extra = self.extra(attrs)
        ndims, ptrs, _rows = host.shape_block(shapes)
        names = self._dtypes(dtypes)
        result, error = ctypes.c_int(0), ctypes.create_string_buffer(1024)
        status = self.shim.fg_call_init(self.k._init, ndims, ptrs, names, extra, ctypes.byref(result), error,
                                        len(error))
        if status or result.value:
            raise self.k._kernel_error(self.k.function + "Init", status, result.value, error.value)
        return extra

    def main(self, extra: int | None, arrays, shapes, dtypes, nparam: int | None = None) -> None:
        """Runs the main function on ``arrays`` (inputs, outputs, workspaces) described by
        ``shapes``/``dtypes`` (inputs and outputs only, as MindSpore passes them)."""
        ndims, ptrs, _rows = host.shape_block(shapes)
        names = self._dtypes(dtypes)
        params = (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
        block = host.FgCall(fn=self.k._main, nparam=len(arrays) if nparam is None else nparam,
                           params=ctypes.addressof(params), ndims=ctypes.addressof(ndims),
                           shapes=ctypes.addressof(ptrs), dtypes=ctypes.addressof(names), stream=None,
                           extra=extra)
        status = self.shim.fg_call_main(ctypes.addressof(block))
        if status or block.result:
            raise self.k._kernel_error(self.k.function, status, block.result, block.error)

    def infer_shape(self, shapes, attrs: dict | None = None) -> list[tuple]:
        return self.k._call_infer_shape([tuple(s) for s in shapes], self.extra(attrs))

    def infer_type(self, type_ids, attrs: dict | None = None) -> list[int]:
        ids = (ctypes.c_int * max(len(type_ids), 1))(*type_ids)
        out, n_out = (ctypes.c_int * 16)(), ctypes.c_size_t()
        error = ctypes.create_string_buffer(1024)
        status = self.shim.fg_call_infer_type(self.k._infer_type, int(self.k.n_outputs > 1), ids, len(type_ids),
                                              self.extra(attrs), out, 16, ctypes.byref(n_out), error, len(error))
        if status:
            raise self.k._kernel_error(self.k.function + "InferType", status, 0, error.value)
        return list(out[:n_out.value])


# =============================================================================================
# Numerics
# =============================================================================================

@pytest.mark.parametrize("name,case", ALL_CASES)
def test_matches_numpy(kernels, name, case, rng):
    shapes, attrs = case
    k = kernels(name)
    for combo in dtypes_of(name):
        dtype = combo if isinstance(combo, str) else combo[0]
        arrays = make_inputs(name, shapes, dtype, rng)
        before = [a.copy() for a in arrays]
        got = k(*arrays, **attrs)
        check(got, reference(name, arrays, attrs), f"{name} {dtype}", **summation_tol(name, arrays, attrs))
        for a, b in zip(arrays, before):
            np.testing.assert_array_equal(a, b)  # inputs untouched


# MindSpore's flags build each op again: the default run takes three ops, `-m extended` all.
_MS_DEFAULT = ("add_reduce_sum", "softmax", "layer_norm")


@pytest.mark.parametrize("name,case", [p if p.values[0] in _MS_DEFAULT else pytest.param(*p.values, id=p.id,
                                                                                           marks=pytest.mark.extended)
                                       for p in ALL_CASES])
def test_mindspore_flags_match_numpy(kernels, name, case, rng):
    """The float32 combination built exactly as MindSpore's auto-compile builds it (no -O flag)."""
    shapes, attrs = case
    k = kernels(name, "mindspore")
    arrays = make_inputs(name, shapes, "float32", rng)
    got = k(*arrays, **attrs)
    check(got, reference(name, arrays, attrs), f"{name} mindspore flags", **summation_tol(name, arrays, attrs))
    # Both builds run the same loops; a threaded build splits long reductions differently, so they
    # agree to rounding of the summation order, not bit for bit.
    check(got, kernels(name)(*arrays, **attrs), f"{name}: MindSpore's build against fusegen's",
          **summation_tol(name, arrays, attrs))


@pytest.mark.parametrize("name", [pytest.param(n, marks=[] if n in _MS_DEFAULT else [pytest.mark.extended])
                                  for n in OPS])
def test_mindspore_flags_build_command(kernels, name):
    k = kernels(name, "mindspore")
    meta = json.loads((Path(k.lib_path).parent / "build.json").read_text())
    command = meta["command"]
    assert command[1:1 + len(build.MINDSPORE_CPU_FLAGS)] == list(build.MINDSPORE_CPU_FLAGS)
    # the source's folder first, then fusegen's custom_aot_extra.h's (as MindSpore adds its own). (The
    # entry may come from test_abi_emit.py's copy of the same source, elsewhere: the cache is by content.)
    source = Path(command[-1])
    assert source.name == Path(k.func.rpartition(":")[0]).name
    assert command.index(f"-I{source.parent}") + 1 == command.index(f"-I{build.HEADER_PATH.parent}")
    assert not any(f.startswith("-O") or f.startswith("-march") for f in command)
    assert default_kernel(k).string_abi == 0
    assert k.lib_path != kernels(name).lib_path


# One Numba signature per entry (each compiles a Numba function, ~1-3 s): every op in float32 on a
# case with broadcasting or a non-trivial axis, plus float64 and float16 on two of them.
NUMBA_CASES = [
    ("add_reduce_sum", "float32", 5), ("add_reduce_sum", "float64", 10), ("add_mul_div", "float32", 5),
    ("smooth_l1", "float32", 2), ("softmax", "float32", 3), ("layer_norm", "float32", 3),
    ("rms_norm", "float32", 2), ("bias_gelu", "float32", 1), ("bias_gelu", "float16", 4),
]


@pytest.mark.parametrize("name,dtype,index", NUMBA_CASES, ids=[f"{n}-{d}-{i}" for n, d, i in NUMBA_CASES])
def test_matches_numba_backend(kernels, name, dtype, index, rng):
    shapes, attrs = CASES[name][index]
    arrays = make_inputs(name, shapes, dtype, rng)
    got = kernels(name)(*arrays, **attrs)
    want = fg.compile(OPS[name])(*arrays, **attrs)
    check(got, want, f"{name} {dtype}: AOT against Numba")


#: A 2-d case per op (the first input is 2-d and neither dim is 1, so a view of it can be non-contiguous).
PLAIN_2D = {
    "add_reduce_sum": ([(3, 4), (3, 4)], dict(axis=0)), "add_mul_div": ([(3, 4), (3, 4)], {}),
    "smooth_l1": ([(3, 4), (3, 4)], {}), "softmax": ([(3, 5)], {}), "layer_norm": ([(3, 8)], {}),
    "rms_norm": ([(3, 8), (8,)], {}), "bias_gelu": ([(4, 8), (8,)], {}),
}


def non_contiguous(a: np.ndarray, kind: str) -> np.ndarray:
    """A view of ``a``'s values that is not C-contiguous (0-d arrays are returned as they are)."""
    if a.ndim == 0:
        return a
    if kind == "strided":
        wide = np.full(a.shape[:-1] + (2 * a.shape[-1],), -7, a.dtype)
        wide[..., ::2] = a
        return wide[..., ::2]
    if kind == "transposed":
        return np.asfortranarray(a)
    return a[::-1].copy()[::-1]  # negative strides


@pytest.mark.parametrize("kind", ["strided", "transposed", "reversed"])
@pytest.mark.parametrize("name", list(OPS))
def test_non_contiguous_inputs(kernels, name, kind, rng):
    shapes, attrs = PLAIN_2D[name]
    for dtype in ("float32", "float64"):
        arrays = make_inputs(name, shapes, dtype, rng)
        views = [non_contiguous(a, kind) for a in arrays]
        assert not views[0].flags.c_contiguous and all(np.array_equal(a, v) for a, v in zip(arrays, views))
        check(kernels(name)(*views, **attrs), reference(name, arrays, attrs), f"{name} {dtype} {kind}")


def test_float_attributes_keep_float64_through_fusegens_host(kernels, monkeypatch):
    """``Attr<float>`` is the ABI's only float attribute type, but a Python float attribute's value
    is float64: fusegen's host passes its bits beside it (``eps:f64``) and the emitted Init reads
    them, so a float64 kernel sees eps=1e-5 itself, as NumPy and the Numba backend do. A host that
    gives only the float (MindSpore's) leaves the float32 nearest to it. On constant rows (var = 0)
    rstd is exactly 1/sqrt(eps) and shows which."""
    from fusegen.native import aot_kernel
    x = np.ones((2, 4), np.float64)
    k = kernels("layer_norm")
    _, _, rstd = k(x)
    np.testing.assert_allclose(rstd, 1.0 / math.sqrt(1e-5), rtol=1e-12)
    monkeypatch.setattr(aot_kernel, "set_float64_attrs", lambda *args: None)   # MindSpore's host
    only_float = aot_kernel.AotKernel(k.func, attrs={"axis": -1, "eps": 1e-5}, n_outputs=3)
    _, _, rstd = only_float(x)
    f32 = float(np.float32(1e-5))
    np.testing.assert_allclose(rstd, 1.0 / math.sqrt(f32), rtol=1e-12)
    assert abs(rstd[0, 0] - 1.0 / math.sqrt(1e-5)) > 1e-6
    only_float.close()


def test_layer_norm_one_pass_statistics_do_not_cancel(kernels, rng):
    """The emitted row loop sums the mean and the centered variance in one pass, shifted by a
    pivot from the row (pair<i>, fusegen.plan.moments): rows at 1e4 and 1e5 + N(0, 1) keep
    float32 accuracy; an inf first value and a NaN give NumPy's results; float64 and a column
    norm (axis 0: col mode, two passes) agree as well."""
    x = rng.standard_normal((6, 1000))
    x[:3] += 1e4
    x[3:] += 1e5
    x = x.astype(np.float32)
    x[4, 0], x[5, 500] = np.inf, np.nan
    k = kernels("layer_norm")
    assert "void pair0(" in k.emitted.source
    y, mean, rstd = k(x)
    with np.errstate(invalid="ignore"):
        ry, rmean, rrstd = ref_layer_norm(x.astype(np.float64), -1, 1e-5)
    np.testing.assert_allclose(mean[:4], rmean[:4], rtol=2e-7)
    np.testing.assert_allclose(rstd[:4], rrstd[:4], rtol=4e-6)
    assert np.isposinf(mean[4, 0]) and np.isnan(rstd[4, 0]) and np.isnan(y[4]).all()
    assert np.isnan(mean[5, 0]) and np.isnan(rstd[5, 0]) and np.isnan(y[5]).all()
    # (col mode still runs two passes, with sum(x) / n's rounding at 1e5: 1.1e-5 off)
    for arr, axis, rtol in ((x[:4].astype(np.float64), -1, 1e-12), (x[:4].T.copy(), 0, 2e-5)):
        got, want = k(arr, axis=axis), ref_layer_norm(arr.astype(np.float64), axis, 1e-5)
        np.testing.assert_allclose(got[2], want[2], rtol=rtol)


def test_softmax_float32_error_in_ulp(kernels, rng):
    """The emitted softmax divides by the row's sum as a multiply by its reciprocal: against
    float64's softmax its error stays within what exp, the sum and two roundings leave (see the
    Numba backend's twin in tests/test_numeric_cpu.py; measured 3.8 ulp on rows of 16, 5.3 on
    rows of 1000, 6.3 and 5.7 with the division)."""
    k = kernels("softmax")
    for n in (16, 1000):
        x = rng.uniform(-8, 8, (64, n)).astype(np.float32)
        assert softmax_ulp_error(k(x), x) <= 8.0


def test_division_by_a_row_value_keeps_numpys_special_values():
    """``x / sum(y)`` as ``x * (1 / sum(y))`` in the emitted C++ (row mode, col mode, an
    expression of the sum): NumPy's inf/NaN/signed-zero pattern and within 2 ulp (float32, float64)."""
    k = fg.compile(row_quotients, backend="aot", dtypes=["float32", "float64"], flags=strict_cpp_flags("fusegen"))
    try:
        for dtype in ("float32", "float64"):
            x, y = row_quotient_inputs(dtype)
            check_row_quotients(k(x, y), x, y)
    finally:
        k.close()


def test_repeated_compile_is_a_cache_hit_and_attrs_share_one_library(kernels, monkeypatch):
    k = kernels("add_reduce_sum")
    x = np.ones((3, 4), np.float32)
    k(x, x, axis=0)
    k(x, x, axis=1, keep_dims=True)
    assert len({kk.lib_path for kk in k.executor.by_attrs.values()}) == 1 and len(k.executor.by_attrs) >= 2

    def no_compiler(command, source):
        raise AssertionError(f"recompiled {source}")

    monkeypatch.setattr(build, "_run_compiler", no_compiler)
    again = fg.compile(ex.add_reduce_sum, backend="aot", dtypes=list(dtypes_of("add_reduce_sum")), flags=k.flags)
    try:
        assert again.lib_path == k.lib_path and again.func == k.func
        assert again.source == k.source == emit(ex.add_reduce_sum, dtypes=list(dtypes_of("add_reduce_sum"))).source
        np.testing.assert_array_equal(again(x, x), [8, 8, 8])
    finally:
        again.close()


def test_out_argument_and_multi_output(kernels, rng):
    k = kernels("add_mul_div")
    x, y = make_inputs("add_mul_div", [(3, 4), (3, 4)], "float32", rng)
    outs = tuple(np.empty((3, 4), np.float32) for _ in range(3))
    res = k(x, y, out=outs)
    assert all(r is o for r, o in zip(res, outs))
    check(res, ref_add_mul_div(x, y), "out=")
    assert isinstance(kernels("softmax")(x), np.ndarray)  # single output: an array, not a tuple


@pytest.mark.parametrize("combo,want", [
    ("float32", (np.float32,) * 3), ("float16", (np.float16,) * 3), ("int32", (np.int32, np.int32, np.float64))])
def test_output_dtypes_follow_numpy(kernels, combo, want):
    x = np.arange(1, 7).reshape(2, 3).astype(combo)
    assert tuple(r.dtype for r in kernels("add_mul_div")(x, x)) == tuple(np.dtype(w) for w in want)
    assert kernels("add_reduce_sum")(x, x).dtype == np.sum(x + x, axis=1).dtype


# =============================================================================================
# Workspaces
# =============================================================================================

@pytest.mark.parametrize("name", list(OPS))
def test_workspace_sizes(kernels, name, rng):
    shapes = PLAIN_2D[name][0]
    n_ws = len(build_plan(OPS[name]).buffers)
    for dtype, itemsize in (("float32", 4), ("float64", 8), ("float16", 4)):  # float16 accumulates in float32
        arrays = make_inputs(name, shapes, dtype, rng)
        sizes = default_kernel(kernels(name)).workspace_sizes(*arrays)
        rows = shapes[0][0]  # every workspace here holds one value per row (a reduction over the last axis)
        assert sizes == [rows * itemsize] * n_ws, (name, dtype, sizes)
    if name == "add_reduce_sum":
        assert sizes == []  # Init set an empty workspace list


def test_hidden_reduction_gets_a_workspace(kernels, rng):
    k = kernels("centered")
    x = rng.standard_normal((3, 5)).astype(np.float32)
    check(k(x, axis=1, scale=2.0), (x - x.max(axis=1, keepdims=True)) * 2.0, "centered")
    check(k(x, axis=-2, scale=0.5), (x - x.max(axis=0, keepdims=True)) * 0.5, "centered")
    assert default_kernel(k, axis=1, scale=2.0).workspace_sizes(x) == [3 * 4]
    assert default_kernel(k, axis=0, scale=2.0).workspace_sizes(x) == [5 * 4]


# =============================================================================================
# InferShape / InferType
# =============================================================================================

def dynamic_variants(shapes):
    """The case's shapes with each single dim unknown, every dim unknown, and each input of unknown rank."""
    yield shapes
    for i, s in enumerate(shapes):
        for d in range(len(s)):
            yield [tuple(-1 if (j == i and e == d) else v for e, v in enumerate(t)) for j, t in enumerate(shapes)]
        yield [(-2,) if j == i else t for j, t in enumerate(shapes)]
    yield [tuple(-1 for _ in t) for t in shapes]


def _py_shapes(op, shapes, attrs):
    spec = fg.infer(op, ["float32"] * len(shapes), [tuple(s) for s in shapes], op.bind_attrs(attrs))
    return [(-2,) if s is None else tuple(s) for s in spec.out_shapes]


def bound(name: str, attrs: dict) -> dict:
    """The op's attribute values as fusegen passes them to the kernel (types coerced, defaults filled)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in OPS[name].bind_attrs(attrs).items()}


@pytest.mark.parametrize("name", list(OPS))
def test_infer_shape_matches_python_rules(kernels, name):
    op = OPS[name]
    raw = Raw(default_kernel(kernels(name)))
    checked = 0
    for shapes, attrs in CASES[name]:
        for variant in dynamic_variants(shapes):
            assert raw.infer_shape(variant, bound(name, attrs)) == _py_shapes(op, variant, attrs), (variant, attrs)
            checked += 1
    assert checked > 20


@pytest.mark.parametrize("name,shapes,attrs,want", [
    ("add_reduce_sum", [(4, -1), (4, -1)], dict(axis=1), [(4,)]),
    ("add_reduce_sum", [(4, -1), (4, -1)], dict(axis=0, keep_dims=True), [(1, -1)]),
    ("add_reduce_sum", [(-1, -1), (-1, -1)], dict(axis=-1, keep_dims=True), [(-1, 1)]),
    ("add_reduce_sum", [(-2,), (3, 4)], dict(axis=0), [(-2,)]),
    ("add_reduce_sum", [(3, 1), (-1, 4)], dict(axis=0), [(4,)]),
    ("add_mul_div", [(-1, 1), (1, 5)], {}, [(-1, 5)] * 3),
    ("add_mul_div", [(-2,), (5,)], {}, [(-2,)] * 3),
    ("softmax", [(-2,)], dict(axis=-1), [(-2,)]),
    ("layer_norm", [(4, -1)], dict(axis=-1), [(4, -1), (4, 1), (4, 1)]),
    ("layer_norm", [(-1, 8)], dict(axis=0), [(-1, 8), (1, 8), (1, 8)]),
    ("rms_norm", [(-1, 8), (8,)], {}, [(-1, 8)]),
    ("bias_gelu", [(-1, -1), (8,)], {}, [(-1, 8)]),
])
def test_infer_shape_dynamic(kernels, name, shapes, attrs, want):
    assert Raw(default_kernel(kernels(name))).infer_shape(shapes, attrs) == want
    assert _py_shapes(OPS[name], shapes, attrs) == want


@pytest.mark.parametrize("name,shapes,attrs,code", [
    ("add_reduce_sum", [(3, 4), (3, 4)], dict(axis=2), "FG_ERR_AXIS"),
    ("add_reduce_sum", [(-1, -1), (-1, -1)], dict(axis=-3), "FG_ERR_AXIS"),
    ("add_mul_div", [(3,), (4,)], {}, "FG_ERR_BROADCAST"),
    ("add_mul_div", [(3, -1), (4, -1)], {}, "FG_ERR_BROADCAST"),
    ("softmax", [()], {}, "FG_ERR_AXIS"),
    ("add_mul_div", [(1,) * 33, (1,)], {}, "FG_ERR_RANK"),
])
def test_infer_shape_errors(kernels, name, shapes, attrs, code):
    """InferShape has no return code: it throws, naming the op and the error (MindSpore reports it)."""
    with pytest.raises(KernelError) as info:
        Raw(default_kernel(kernels(name))).infer_shape(shapes, attrs)
    assert info.value.function == f"{c_name(name)}InferShape"
    assert f"{name}: {code}: " in str(info.value)
    if code != "FG_ERR_RANK":  # fusegen's Python rules have no rank limit
        with pytest.raises(ShapeError):
            _py_shapes(OPS[name], shapes, attrs)


@pytest.mark.parametrize("name", list(OPS))
def test_infer_type_returns_mindspore_type_ids(kernels, name):
    op = OPS[name]
    raw = Raw(default_kernel(kernels(name)))
    for combo in dtypes_of(name):
        combo = (combo,) * len(op.inputs) if isinstance(combo, str) else combo
        want = [TYPE_IDS[d.name] for d in fg.infer(op, combo, [(2, 2)] * len(combo), op.bind_attrs({})).out_dtypes]
        assert raw.infer_type([TYPE_IDS[d] for d in combo]) == want
    # the ids it got and the combinations it has; a wrong count says so, not "no dtype combination"
    with pytest.raises(KernelError, match=r"input type ids \(32(, 32)*\) match none of the generated dtype "
                                          r"combinations: \(float16.*: 42.*\)"):
        raw.infer_type([TYPE_IDS["int8"]] * len(op.inputs))
    with pytest.raises(KernelError, match=rf"{name}: takes {len(op.inputs)} inputs? \(.*\), got {len(op.inputs) + 1}"):
        raw.infer_type([TYPE_IDS["float32"]] * (len(op.inputs) + 1))


def test_infer_type_literal_ids(kernels):
    """The TypeId values of MindSpore 2.x, spelled out (float16=42, float32=43, float64=44, int32=34, int64=35)."""
    ars, amd = Raw(default_kernel(kernels("add_reduce_sum"))), Raw(default_kernel(kernels("add_mul_div")))
    assert [ars.infer_type([t, t])[0] for t in (42, 43, 44, 34)] == [42, 43, 44, 35]  # int32 sums to int64
    assert amd.infer_type([34, 34]) == [34, 34, 44]  # int32 / int32 is float64
    assert amd.infer_type([43, 43]) == [43, 43, 43]


# =============================================================================================
# Error codes: each provoked, each reported with the code and <Name>ErrorString's text
# =============================================================================================

def _arrays_for(shapes, dtype="float32"):
    return [np.ones([max(d, 0) for d in s], dtype) for s in shapes]


def drive_nparam(kernels):
    raw = Raw(default_kernel(kernels("softmax")))
    extra = raw.init([(2, 3), (2, 3)], ["float32", "float32"])
    x, o = _arrays_for([(2, 3), (2, 3)])
    raw.main(extra, [x, o], [(2, 3), (2, 3)], ["float32", "float32"])  # the two workspaces are missing


def drive_dtype(kernels):
    # inputs match no generated combination: Init refuses them
    k = AotKernel(kernels("add_reduce_sum").func, {"axis": 1}, None, "int64")
    k(np.ones((2, 3), np.int64), np.ones((2, 3), np.int64))


def drive_dtype_output(kernels):
    # inputs match, the output dtype string does not: the main function refuses it
    raw = Raw(default_kernel(kernels("add_reduce_sum")))
    extra = raw.init([(2, 3), (2, 3), (2,)], ["float32", "float32", "float32"])
    raw.main(extra, _arrays_for([(2, 3), (2, 3), (2,)]), [(2, 3), (2, 3), (2,)], ["float32", "float32", "float64"])


def drive_rank(kernels):
    k = AotKernel(kernels("add_mul_div").func, None, [(1,) * 33] * 3, "float32")
    x = np.ones((1,) * 33, np.float32)
    k(x, x)


def drive_broadcast(kernels):
    k = AotKernel(kernels("add_mul_div").func, None, [(3,)] * 3, "float32")
    k(np.ones(3, np.float32), np.ones(4, np.float32))


def drive_axis(kernels):
    k = AotKernel(kernels("add_reduce_sum").func, {"axis": 2, "keep_dims": False}, (3,), "float32")
    k(np.ones((3, 4), np.float32), np.ones((3, 4), np.float32))


def drive_out_shape(kernels):
    k = AotKernel(kernels("add_reduce_sum").func, {"axis": 1, "keep_dims": False}, (4,), "float32")
    k(np.ones((3, 4), np.float32), np.ones((3, 4), np.float32))


def drive_not_initialized(kernels):
    raw = Raw(default_kernel(kernels("add_mul_div")))
    arrays = _arrays_for([(2,)] * 5)
    raw.main(raw.extra({}), arrays, [(2,)] * 5, ["float32"] * 5)  # an extra no Init has seen


def drive_not_initialized_null_extra(kernels):
    raw = Raw(default_kernel(kernels("add_mul_div")))
    raw.main(None, _arrays_for([(2,)] * 5), [(2,)] * 5, ["float32"] * 5)


def drive_attr_missing(kernels):
    # (AotKernel refuses it before Init, from the library's OpInfo: test_aot_kernel; MindSpore
    # calls Init as it is)
    k = AotKernel(kernels("centered").func, {"scale": 1.0, "axis": 0}, (2, 3), "float32")
    Raw(k).init([(2, 3)], ["float32"], {"scale": 1.0})


def drive_attr_wrong_type(kernels):
    # keep_dims given as an int: Attr<bool> throws in the host, Init turns that into FG_ERR_ATTR
    k = AotKernel(kernels("add_reduce_sum").func, {"axis": 1, "keep_dims": 1}, (2,), "float32")
    k(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))


def drive_attr_float_as_int(kernels):
    # eps given as an int (MindSpore keeps a Python int as int64): Attr<float> refuses it
    k = AotKernel(kernels("rms_norm").func, {"eps": 1}, (2, 3), "float32")
    k(np.ones((2, 3), np.float32), np.ones(3, np.float32))


def strict(name):
    """The op emitted with dynamic_workspace="error": Init refuses unknown workspace sizes."""
    return fg.compile(OPS[name], backend="aot", dtypes="float32", dynamic_workspace="error")


def drive_dynamic_workspace(kernels):
    raw = Raw(default_kernel(strict("softmax")))
    raw.init([(-1, 5), (-1, 5)], ["float32", "float32"], {"axis": -1})  # one max per row: unknown count


def drive_dynamic_workspace_rank(kernels):
    raw = Raw(default_kernel(strict("rms_norm")))
    raw.init([(-2,), (8,), (-2,)], ["float32"] * 3)


@pytest.mark.parametrize("init_shapes", [[(-1, 5), (-1, 5)], [(-2,), (-2,)]])
def test_dynamic_shapes_run_on_kernel_owned_scratch(kernels, init_shapes):
    """MindSpore calls Init once, with -1 dims (or rank -2), under dynamic shapes: by default the
    kernel then asks for no workspace and sizes its own scratch at each call."""
    k = default_kernel(kernels("softmax"), axis=-1)
    raw = Raw(k)
    extra = raw.init(init_shapes, ["float32", "float32"], {"axis": -1})
    assert k._loaded.shim.fg_extra_workspace(extra, None, 0) == 0
    for rows in (3, 7):
        x = np.arange(rows * 5, dtype=np.float32).reshape(rows, 5) / 7
        y = np.empty_like(x)
        raw.main(extra, [x, y], [x.shape, y.shape], ["float32", "float32"])
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        np.testing.assert_allclose(y, e / e.sum(axis=-1, keepdims=True), rtol=1e-6)


def drive_workspace(kernels):
    raw = Raw(default_kernel(kernels("softmax")))
    extra = raw.init([(2, 3), (2, 3)], ["float32", "float32"])  # workspaces for 2 rows
    arrays = _arrays_for([(4, 3), (4, 3)]) + [np.empty(64, np.uint8), np.empty(64, np.uint8)]
    raw.main(extra, arrays, [(4, 3), (4, 3)], ["float32", "float32"])  # 4 rows now


def drive_unknown_dim(kernels):
    raw = Raw(default_kernel(kernels("add_mul_div")))
    extra = raw.init([(-1, 3)] * 5, ["float32"] * 5)  # no workspace: Init accepts unknown dims
    raw.main(extra, _arrays_for([(2, 3)] * 5), [(-1, 3)] * 5, ["float32"] * 5)


def drive_unknown_rank(kernels):
    raw = Raw(default_kernel(kernels("add_mul_div")))
    extra = raw.init([(-2,)] * 5, ["float32"] * 5)
    raw.main(extra, _arrays_for([(2, 3)] * 5), [(-2,)] * 5, ["float32"] * 5)


def drive_overflowing_dims(kernels):
    """dims whose element count overflows int64 (the main function crashed on them)."""
    raw = Raw(default_kernel(kernels("add_mul_div")))
    extra = raw.init([(2, 3)] * 5, ["float32"] * 5)
    raw.main(extra, _arrays_for([(2, 3)] * 5), [(2**40, 2**40)] * 5, ["float32"] * 5)


def drive_empty_reduction(kernels):
    k = AotKernel(kernels("softmax").func, {"axis": 1}, None, None)
    k(np.ones((3, 0), np.float32))


DRIVERS = {
    "nparam": ("FG_ERR_NPARAM", drive_nparam, "Softmax"),
    "dtype-init": ("FG_ERR_DTYPE", drive_dtype, "AddReduceSumInit"),
    "dtype-output": ("FG_ERR_DTYPE", drive_dtype_output, "AddReduceSum"),
    "rank": ("FG_ERR_RANK", drive_rank, "AddMulDivInit"),
    "broadcast": ("FG_ERR_BROADCAST", drive_broadcast, "AddMulDivInit"),
    "axis": ("FG_ERR_AXIS", drive_axis, "AddReduceSumInit"),
    "out-shape": ("FG_ERR_OUT_SHAPE", drive_out_shape, "AddReduceSum"),
    "not-initialized": ("FG_ERR_NOT_INITIALIZED", drive_not_initialized, "AddMulDiv"),
    "null-extra": ("FG_ERR_NOT_INITIALIZED", drive_not_initialized_null_extra, "AddMulDiv"),
    "attr-missing": ("FG_ERR_ATTR", drive_attr_missing, "CenteredInit"),
    "attr-wrong-type": ("FG_ERR_ATTR", drive_attr_wrong_type, "AddReduceSumInit"),
    "attr-int-for-float": ("FG_ERR_ATTR", drive_attr_float_as_int, "RmsNormInit"),
    "dynamic-workspace": ("FG_ERR_DYNAMIC_WORKSPACE", drive_dynamic_workspace, "SoftmaxInit"),
    "dynamic-workspace-rank": ("FG_ERR_DYNAMIC_WORKSPACE", drive_dynamic_workspace_rank, "RmsNormInit"),
    "workspace": ("FG_ERR_WORKSPACE", drive_workspace, "Softmax"),
    "unknown-dim": ("FG_ERR_UNKNOWN_DIM", drive_unknown_dim, "AddMulDiv"),
    "unknown-rank": ("FG_ERR_UNKNOWN_DIM", drive_unknown_rank, "AddMulDiv"),
    "overflowing-dims": ("FG_ERR_RANK", drive_overflowing_dims, "AddMulDiv"),
    "empty-reduction": ("FG_ERR_EMPTY_REDUCTION", drive_empty_reduction, "Softmax"),
}


@pytest.mark.parametrize("case", list(DRIVERS))
def test_error_code(kernels, case):
    code_name, drive, function = DRIVERS[case]
    with pytest.raises(KernelError) as info:
        drive(kernels)
    err = info.value
    code = ERROR_CODES[code_name]
    meaning = dict(ERRORS)[code_name].replace("<Name>", function.removesuffix("Init"))
    assert (err.code, err.function) == (code, function), str(err)
    assert err.meaning == f"{code_name}: {meaning}"
    assert f"returned error code {code}: {code_name}: " in str(err)
    assert err.library.endswith(".so")


def test_every_error_code_is_provoked_or_unreachable():
    provoked = {code for code, _, _ in DRIVERS.values()}
    # FG_ERR_EXCEPTION guards the main function against a C++ exception, which no input can cause;
    # FG_ERR_CUDA is returned by .cu files only (tests/test_cuda_codegen.py, tests/cuda/test_aot_cuda.py)
    assert provoked | {"FG_OK", "FG_ERR_EXCEPTION", "FG_ERR_CUDA"} == set(ERROR_CODES)


def test_error_string_of_every_code(kernels):
    k = default_kernel(kernels("softmax"))
    for code, (n, meaning) in enumerate(ERRORS):
        assert k._error_string(code).decode() == f"{n}: {meaning.replace('<Name>', 'Softmax')}"
    assert k._error_string(len(ERRORS)).decode() == "unknown return code"
    assert k._error_string(-1).decode() == "unknown return code"


def test_init_accepts_what_needs_no_workspace(kernels):
    """Dynamic shapes reach Init as -1 dims / [-2]: fine when no workspace size depends on them."""
    Raw(default_kernel(kernels("add_reduce_sum"))).init([(-1, -1), (-1, -1), (-1,)], ["float32"] * 3)
    Raw(default_kernel(kernels("add_mul_div"))).init([(-2,)] * 5, ["float32"] * 5)
    Raw(default_kernel(kernels("softmax"))).init([(4, -1), (4, -1)], ["float32"] * 2)  # one max per row: 4 rows


def test_dtype_string_aliases(kernels, rng):
    """The guides' aliases: "float" is float32, "int" int32."""
    raw = Raw(default_kernel(kernels("add_mul_div")))
    x, y = make_inputs("add_mul_div", [(2, 3), (2, 3)], "float32", rng)
    outs = [np.empty((2, 3), np.float32) for _ in range(3)]
    extra = raw.init([(2, 3)] * 5, ["float"] * 5)
    raw.main(extra, [x, y, *outs], [(2, 3)] * 5, ["float"] * 5)
    check(tuple(outs), ref_add_mul_div(x, y), "float alias")
    xi = np.arange(6, dtype=np.int32).reshape(2, 3)
    outs = [np.empty((2, 3), np.int32), np.empty((2, 3), np.int32), np.empty((2, 3), np.float64)]
    extra = raw.init([(2, 3)] * 5, ["int", "int", "int", "int", "float64"])
    raw.main(extra, [xi, xi + 1, *outs], [(2, 3)] * 5, ["int", "int", "int", "int", "float64"])
    check(tuple(outs), ref_add_mul_div(xi, xi + 1), "int alias")


def test_zero_d_tensors_pass_null_shapes(kernels):
    """MindSpore passes ndims 0 and a null shape pointer for a 0-d tensor."""
    raw = Raw(default_kernel(kernels("bias_gelu")))
    x, b = np.array(0.5, np.float32), np.array(0.25, np.float32)
    out = np.empty((), np.float32)
    extra = raw.init([(), (), ()], ["float32"] * 3)
    raw.main(extra, [x, b, out], [(), (), ()], ["float32"] * 3)
    check(out, np_ref(ref_bias_gelu, x, b), "0-d")


# =============================================================================================
# Libraries, whitelist, concurrency
# =============================================================================================

def test_library_without_the_symbol(kernels):
    source = kernels("add_mul_div").func.rpartition(":")[0]
    with pytest.raises(LibraryError, match="'Softmax'"):
        AotKernel(f"{source}:Softmax")  # another op's symbol


def test_whitelist_refuses_the_emitted_source_outside_it(kernels, monkeypatch, tmp_path):
    kernels("add_mul_div")  # built before the whitelist is set
    monkeypatch.setenv("FUSEGEN_AOT_WHITELIST", str(tmp_path))
    with pytest.raises(LibraryError, match="whitelist"):
        fg.compile(ex.add_mul_div, backend="aot", dtypes=list(dtypes_of("add_mul_div")))
    monkeypatch.setenv("FUSEGEN_AOT_WHITELIST", str(build.cache_dir() / "aot-src"))
    k = fg.compile(ex.add_mul_div, backend="aot", dtypes=list(dtypes_of("add_mul_div")))
    try:
        x = np.ones(3, np.float32)
        check(k(x, x), ref_add_mul_div(x, x), "whitelisted")
    finally:
        k.close()


_CONCURRENT = """
import sys
import numpy as np
import fusegen as fg
import fusegen.examples as ex
k = fg.compile(ex.bias_gelu, backend="aot", dtypes="float32")
x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
b = np.float32(0.5) * np.ones(4, np.float32)
y = k(x, b)
assert y.shape == (3, 4) and np.isfinite(y).all()
print(k.lib_path)
"""


def test_concurrent_compiles_of_one_emitted_op(tmp_path):
    """Four processes compile the same emitted op into one empty cache: all succeed, one entry."""
    cache = tmp_path / "cache"
    env = {**os.environ, "FUSEGEN_CACHE_DIR": str(cache),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("FUSEGEN_AOT_WHITELIST", None)
    env.pop("MS_CUSTOM_AOT_WHITE_LIST", None)
    procs = [subprocess.Popen([sys.executable, "-c", _CONCURRENT], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    results = [p.communicate(timeout=300) + (p.returncode,) for p in procs]
    assert all(code == 0 for _, _, code in results), [err[-2000:] for _, err, _ in results]
    paths = {out.strip() for out, _, _ in results}
    assert len(paths) == 1
    root = cache / f"v{build.BUILD_FORMAT_VERSION}"
    entries = [p for p in root.iterdir() if not p.name.startswith(".") and (p / "libbias_gelu.so").exists()]
    assert len(entries) == 1 and Path(paths.pop()).parent == entries[0]
    assert not list(root.glob(".*"))  # no temporary or trash directories left
    sources = list((cache / "aot-src").iterdir())
    assert len(sources) == 1 and sorted(p.name for p in sources[0].iterdir()) == ["bias_gelu.cc", "custom_aot_extra.h"]


# =============================================================================================
# Bad input: the same exceptions as the Numba backend
# =============================================================================================

def _both(kernels, name, *arrays, expect=FusegenError, **attrs):
    """(AOT exception, Numba exception) for the same call."""
    errors = []
    for k in (kernels(name), fg.compile(OPS[name])):
        with pytest.raises(expect) as info:
            k(*arrays, **attrs)
        errors.append(info.value)
    return errors


def test_wrong_input_count(kernels):
    x = np.ones(3, np.float32)
    aot, numba = _both(kernels, "add_mul_div", x)
    assert type(aot) is type(numba) is ArgumentError and str(aot) == str(numba)
    assert "add_mul_div takes 2 inputs (x, y), got 1" in str(aot)


def test_dtypes_a_call_brings_are_built_on_first_use(monkeypatch):
    """Like the Numba backend: without ``dtypes=`` nothing is built until a call, and each dtype
    combination a call brings is emitted and built alone on its first call (content-keyed, so
    another process finds it in the build cache); with ``dtypes=`` those are built ahead and a new
    combination adds a library of its own. A combination already built costs a call no more than
    before."""
    k = fg.compile(ex.add_reduce_sum, backend="aot")
    assert k.lib_path is None and not k.executor.by_attrs and not k.executor.combos  # nothing built
    x8 = (np.arange(20, dtype=np.int8).reshape(4, 5) * 13)  # x8 + x8 wraps in int8, as NumPy's does
    got = k(x8, x8)
    assert_close(got, np.sum(x8 + x8, axis=1))  # NumPy's dtypes too: the int8 sum is int64
    assert k.executor.combos == {("int8", "int8")} and k.emitted.dtypes == [("int8", "int8")]
    first, source = k.lib_path, k.source        # the first call's library is the primary one
    assert source == k.emitted.source and "int8_t" in source and Path(first).is_file()
    x64 = np.arange(20, dtype=np.int64).reshape(4, 5) - 7
    assert_close(k(x64, x64, axis=0, keep_dims=True), np.sum(x64 + x64, axis=0, keepdims=True))
    assert k.source != source and "int64_t" in k.source  # .source: the latest call's library
    a, b = np.array([[True, False, True, False]]), np.array([[True, True, False, False]])
    assert_close(k(a, b), np.sum(a + b, axis=1))  # bool + bool is logical or; its sum is int64
    f32 = np.arange(20, dtype=np.float32).reshape(4, 5)
    assert_close(k(f32, f32), np.sum(f32 + f32, axis=1))
    assert k.lib_path == first
    assert k.executor.combos == {("int8", "int8"), ("int64", "int64"), ("bool", "bool"), ("float32", "float32")}
    libs = {kk.lib_path for kk in k.executor.by_attrs.values()}
    assert len(libs) == 4 and first in libs  # one library per combination
    # a combination seen before: no emit, no build, not even the lookup of its library
    monkeypatch.setattr(type(k.executor), "func_for", lambda self, names: pytest.fail(f"rebuilt {names}"))
    assert_close(k(x8, x8), np.sum(x8 + x8, axis=1))
    monkeypatch.undo()
    monkeypatch.setattr(build, "_run_compiler", lambda command, source: pytest.fail(f"recompiled {source}"))
    again = fg.compile(ex.add_reduce_sum, backend="aot")  # a new kernel object: the build cache serves both
    assert_close(again(x8, x8), np.sum(x8 + x8, axis=1))
    assert {kk.lib_path for kk in again.executor.by_attrs.values()} < libs
    with pytest.raises(DTypeError, match=r"input 'x' has dtype complex256"):
        k(np.ones(3, np.clongdouble), np.ones(3, np.clongdouble))
    monkeypatch.undo()
    # dtypes= builds ahead, at construction; a combination outside it still comes on demand
    ahead = fg.compile(ex.add_reduce_sum, backend="aot", dtypes="float64")
    built = ahead.lib_path
    assert built is not None and ahead.executor.combos == {("float64", "float64")}
    assert_close(ahead(x8, x8), np.sum(x8 + x8, axis=1))
    assert ahead.lib_path == built and ahead.executor.combos == {("float64", "float64"), ("int8", "int8")}
    # asking an unbuilt kernel for its files emits the default (every float) combinations, which
    # its calls then share
    files = fg.compile(ex.add_reduce_sum, backend="aot")
    assert ("float32", "float32") in files.emitted.dtypes and files.func.endswith(":AddReduceSum")
    assert files.lib_path is None
    assert_close(files(f32, f32), np.sum(f32 + f32, axis=1))
    assert files.executor.combos == set(map(tuple, files.emitted.dtypes)) and files.lib_path is not None
    # flags="mindspore" is MindSpore's command for every library, the first and those built on demand
    # (centered has required attributes: nothing is built until a call names them)
    assert fg.compile(centered, backend="aot", flags="mindspore").flags == list(build.MINDSPORE_CPU_FLAGS)


def test_unsupported_dtype(kernels):
    x = np.ones(3, np.clongdouble)   # (complex64/complex128 are fusegen dtypes: tests/test_complex.py)
    aot, numba = _both(kernels, "add_mul_div", x, x)
    assert type(aot) is type(numba) is DTypeError
    assert "input 'x' has dtype complex256" in str(aot) and "input 'x' has dtype complex256" in str(numba)


@pytest.mark.parametrize("name,shapes,attrs,text", [
    ("add_mul_div", [(3,), (4,)], {}, "cannot broadcast"),
    ("rms_norm", [(3, 8), (4,)], {}, "cannot broadcast"),
    ("add_reduce_sum", [(3, 4), (3, 4)], dict(axis=2), "axis 2 is out of range for rank 2"),
    ("softmax", [(3, 4)], dict(axis=-3), "axis -3 is out of range"),
    ("softmax", [()], {}, "the operand is a scalar"),
])
def test_shape_errors_name_the_op_and_node(kernels, name, shapes, attrs, text):
    arrays = [np.ones(s, np.float32) for s in shapes]
    aot, numba = _both(kernels, name, *arrays, **attrs)
    # (an axis out of range is NumPy's AxisError: a ShapeError and an IndexError)
    assert type(aot) is type(numba) is (fg.AxisError if "out of range" in text or "scalar" in text else ShapeError)
    assert str(aot) == str(numba)
    assert re.match(rf"op {name}: node %\d+ = ", str(aot)) and text in str(aot) and "examples.py:" in str(aot)


@pytest.mark.parametrize("name,attrs,text", [
    ("add_reduce_sum", dict(axis=1.5), "attribute 'axis': expected int"),
    ("add_reduce_sum", dict(keep_dims=1), "attribute 'keep_dims'"),
    ("softmax", dict(axis="1"), "attribute 'axis'"),
    ("layer_norm", dict(eps="small"), "attribute 'eps'"),
    ("smooth_l1", dict(sigma=1.0, beta=2.0), "unknown attribute 'beta'"),
])
def test_attribute_errors(kernels, name, attrs, text):
    arrays = [np.ones((2, 3), np.float32) for _ in OPS[name].inputs]
    aot, numba = _both(kernels, name, *arrays, **attrs)
    assert type(aot) is type(numba) is AttrError and str(aot) == str(numba) and text in str(aot)


def test_missing_required_attribute(kernels):
    x = np.ones((2, 3), np.float32)
    with pytest.raises(AttrError, match="missing required attribute 'axis'"):
        kernels("centered")(x, scale=1.0)


def test_max_over_an_empty_axis(kernels):
    aot, numba = _both(kernels, "softmax", np.ones((3, 0), np.float32), expect=ValueError)
    assert type(aot) is type(numba) and str(aot) == str(numba)
    assert re.match(r"op softmax: node %\d+ = max ", str(aot)) and "max over an axis of size 0" in str(aot)


def test_more_dims_than_the_kernel_supports(kernels):
    """The kernels stop at rank 32 (fusegen's Python rules do not): the runtime says so for every
    backend before the emitted InferShape would (its FG_ERR_RANK: the overflowing-dims driver)."""
    x = np.ones((1,) * 33, np.float32)
    with pytest.raises(fg.AxisError, match="op add_mul_div: input 'x' has 33 dims"):
        kernels("add_mul_div")(x, x)


WARM_SCRIPT = """
import sys, time
import numpy as np
import fusegen as fg
import fusegen.examples as ex
x = np.arange(20, dtype=np.float32).reshape(4, 5)
k = fg.compile(ex.add_reduce_sum, backend="aot")
got = k(x, x)
assert np.array_equal(got, np.sum(x + x, axis=1)), got
print("jinja2" in sys.modules, "numba" in sys.modules, k.source.count("AddReduceSum") > 0)
"""


def test_a_warm_start_loads_the_built_kernel_without_emitting(tmp_path):
    """A new process whose kernels were built before: the emission index names the files, so
    it neither imports jinja2 (nor Numba) nor emits; an edited or missing source is emitted again."""
    script = tmp_path / "warm.py"
    script.write_text(WARM_SCRIPT)
    env = dict(os.environ, FUSEGEN_CACHE_DIR=str(tmp_path / "cache"))

    def run():
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout.split()

    assert run() == ["True", "False", "True"]    # cold: emitted (jinja2), built
    assert run() == ["False", "False", "True"]   # warm: the index and the build cache
    (entry,) = (tmp_path / "cache" / "aot-src").iterdir()
    source = next(entry.glob("*.cc"))
    source.write_text(source.read_text()[:100])  # damaged: a miss, emitted and written again
    assert run() == ["True", "False", "True"]
    assert run() == ["False", "False", "True"]
    index = list((tmp_path / "cache" / "aot-index").glob("*.json"))
    assert len(index) == 1 and json.loads(index[0].read_text())["dtypes"] == [["float32", "float32"]]
