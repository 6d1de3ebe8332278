"""Bad input at every public entry point: each gets a specific exception type and message, and the
process never crashes.

Entry points: ``fg.compile(op)`` (Numba), ``fg.compile(op, backend="aot")``, ``fg.AotKernel``,
``fg.emit``, ``fg.jax.function`` (and ``fg.infer``, which all of them share). This file adds what
the other test files leave out (grep them before adding here):

* covered elsewhere: wrong input counts, unsupported/ungenerated dtypes, broadcast and axis errors,
  attribute errors for numba/aot (test_aot_backend.py ``_both``), AotKernel's attribute, symbol,
  non-zero-return and exception paths (test_aot_kernel.py), ``build_library``'s cache, ELF and
  whitelist checks (test_build.py), read-only ``out=`` of the Numba kernel (test_runtime.py), the
  XLA bridge's argument errors (test_xla_ffi.py);
* here: shapes whose element count overflows int64 (run in a subprocess: one of them aborts the
  process), rank-0 / size-0 / non-contiguous / read-only inputs on every backend, read-only and
  partly invalid ``out=`` on the AOT paths, ``out=`` left untouched by a failed call, the XLA
  bridge's attribute and whitelist errors, AotKernel given a symlink escaping the whitelist, a
  non-library, a truncated library or a source that does not compile, ``fg.emit``'s argument
  errors, and a truncated cache entry under ``fg.compile(backend="aot")`` (rebuilt, in a fresh
  process).

Bugs this file found were fixed; their reproducers stay as plain tests. The number of bad inputs
tried is printed at the end (``-s``) and in the terminal summary.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import fusegen as fg
import fusegen.examples as ex
from fusegen.native import build
from fusegen.errors import (ArgumentError, AttrError, CompileError, DTypeError, KernelError, LibraryError,
                            ShapeError)

from conftest import PROPERTY_STATS

from _optional import HAVE, backends, needs_gxx, needs_jax

BAD = {"n": 0}


def bad(exc, match, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` raises exactly ``exc`` (or a subclass) with ``match`` in its message."""
    BAD["n"] += 1
    with pytest.raises(exc, match=match) as info:
        fn(*args, **kwargs)
    return info.value


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    PROPERTY_STATS["bad inputs tried (test_bad_input)"] = BAD["n"]
    print(f"\nbad inputs tried (test_bad_input): {BAD['n']}")


@pytest.fixture(scope="module", autouse=True)
def _guard():
    """AOT kernels in guard mode: an out-of-bounds write is a KernelError, not heap corruption."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FUSEGEN_GUARD", "1")
        yield


@pytest.fixture(autouse=True)
def _no_whitelist(monkeypatch):
    monkeypatch.delenv("FUSEGEN_AOT_WHITELIST", raising=False)
    monkeypatch.delenv("MS_CUSTOM_AOT_WHITE_LIST", raising=False)


# --- ops (module level: every backend compiles them once) -------------------------------------
@fg.op
def ew(x, y):
    return x * 2.0 + y


@fg.op
def two(x):
    return x + 1.0, x * 2.0


@fg.op
def scaled(x, *, alpha: float):
    return x * alpha


_KERNELS: dict = {}


def kernel(backend: str, op=ew):
    key = (backend, op.name)
    if key not in _KERNELS:
        if backend == "numba":
            _KERNELS[key] = fg.compile(op)
        elif backend == "aot":
            _KERNELS[key] = fg.compile(op, backend="aot", dtypes=["float32"])
        else:
            _KERNELS[key] = fg.jax.function(op, dtypes=["float32"])
    return _KERNELS[key]


BACKENDS = backends("numba", "aot", "xla")


def as_numpy(r):
    return tuple(np.asarray(v) for v in r) if isinstance(r, tuple) else np.asarray(r)


# --- shapes whose element count overflows int64 (a subprocess: must not crash) ----------------
OVERFLOW_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import fusegen as fg

    @fg.op
    def ew(x, y):
        return x * 2.0 + y

    S = np.lib.stride_tricks.as_strided
    z = np.zeros(1, np.float32)
    # each input is a legal (stride-0) view of 2**40 elements; their broadcast has 2**80
    col, row = S(z, shape=(2**40, 1), strides=(0, 0)), S(z, shape=(1, 2**40), strides=(0, 0))

    def case(name, fn):
        try:
            r = fn()
            res = {"ok": True, "shape": list(getattr(r, "shape", ()))}
        except BaseException as e:  # noqa: BLE001
            res = {"ok": False, "type": type(e).__name__, "fusegen": isinstance(e, fg.FusegenError),
                   "msg": str(e)[:400]}
        print(json.dumps({name: res}), flush=True)

    for name in sys.argv[1:]:
        if name == "infer":
            case(name, lambda: fg.infer(ew, ["float32"] * 2, [(2**40, 1), (1, 2**40)], {}))
        elif name == "numba":
            case(name, lambda: fg.compile(ew)(col, row))
        elif name == "aot":
            case(name, lambda: fg.compile(ew, backend="aot", dtypes=["float32"])(col, row))
        elif name == "aotkernel":
            em = fg.emit(ew, dtypes=["float32"])
            import tempfile
            d = tempfile.mkdtemp()
            em.write(d)
            k = fg.AotKernel(em.func(d), n_inputs=2, out_shape=lambda a, b: [2**40, 2**40], out_dtype="float32")
            case(name, lambda: k(np.ones(1, np.float32), np.ones(1, np.float32)))
        elif name == "xla":
            case(name, lambda: fg.jax.function(ew, dtypes=["float32"])(col, row))
""")


@pytest.fixture(scope="module")
def overflow_results(tmp_path_factory):
    """Run every overflow case in one child process, the XLA one last (it may abort the process)."""
    script = tmp_path_factory.mktemp("overflow") / "overflow.py"
    script.write_text(OVERFLOW_SCRIPT)
    names = ["infer", "numba"]
    if HAVE["g++"]:  # (the cases of a missing backend are skipped by their parameters' marks)
        names += ["aot", "aotkernel"]
        if HAVE["jax"]:
            names += ["xla"]
    env = {k: v for k, v in os.environ.items() if k not in ("FUSEGEN_AOT_WHITELIST", "MS_CUSTOM_AOT_WHITE_LIST")}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(fg.__file__).parents[1]), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, str(script), *names], capture_output=True, text=True, timeout=300,
                          env=env)
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            results.update(json.loads(line))
    return results, proc.returncode, proc.stderr[-2000:]


OVERFLOW_BUG = ("BUG: no int64-overflow check of the element count: an op over inputs of shape (2**40, 1) and "
                "(1, 2**40) (legal stride-0 views) is not refused with a ShapeError; ")


@pytest.mark.parametrize("entry", [
    pytest.param("infer"),
    pytest.param("numba"),
    pytest.param("aot", marks=needs_gxx),
    pytest.param("aotkernel", marks=needs_gxx),
    pytest.param("xla", marks=needs_jax),
])
def test_element_count_overflowing_int64_is_a_shape_error(overflow_results, entry):
    results, rc, stderr = overflow_results
    BAD["n"] += 1
    assert entry in results, f"the process died before/while running {entry!r} (exit {rc}): {stderr}"
    res = results[entry]
    assert not res["ok"], f"{entry}: accepted, returned shape {res.get('shape')}"
    assert res["type"] == "ShapeError" and res["fusegen"], f"{entry}: {res['type']}: {res['msg']}"
    assert "overflow" in res["msg"] or "too large" in res["msg"] or "too big" in res["msg"], res["msg"]


# --- inputs that must work: rank 0, size 0, non-contiguous, read-only --------------------------
def _inputs(kind):
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    if kind == "rank0":
        return np.float32(1.5), np.array(2.5, np.float32)
    if kind == "size0":
        return np.ones((0, 6), np.float32), np.ones((1, 6), np.float32)
    if kind == "size0-both":
        return np.ones((0, 6), np.float32), np.ones((0, 6), np.float32)
    if kind == "size0-broadcast":
        return np.ones((3, 0), np.float32), np.ones((1, 1), np.float32)
    if kind == "strided":
        return base[::2, 1::2], base[1::2, ::2]
    if kind == "transposed":
        return base.T, np.ascontiguousarray(base.T)
    if kind == "negative-stride":
        return base[::-1, ::-1], base
    if kind == "read-only":
        x, y = base.copy(), base.copy() + 1
        x.setflags(write=False)
        y.setflags(write=False)
        return x, y
    if kind == "read-only-strided":
        x = base[:, ::2]
        x.setflags(write=False)
        return x, x
    raise AssertionError(kind)


GOOD_KINDS = ["rank0", "size0", pytest.param("size0-both", id="size0-both"),
              pytest.param("size0-broadcast", id="size0-broadcast"), "strided", "transposed", "negative-stride", "read-only",
              "read-only-strided"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", GOOD_KINDS)
def test_unusual_but_valid_inputs_work(backend, kind, request):
    x, y = _inputs(kind)
    want = np.asarray(x) * np.float32(2.0) + np.asarray(y)
    got = as_numpy(kernel(backend)(x, y))
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6)
    if kind.startswith("read-only"):
        assert not x.flags.writeable  # not made writeable behind the caller's back


# --- out= ---------------------------------------------------------------------------------------
@needs_gxx
def test_read_only_out_is_refused_by_the_aot_kernel():
    x = np.ones((2, 3), np.float32)
    ro = np.zeros((2, 3), np.float32)
    ro.setflags(write=False)
    # (the Numba runner's checks and messages; a non-contiguous out= is written through a temporary)
    bad(ArgumentError, r"op two: out\[1\] is read-only", kernel("aot", two), x,
        out=(np.empty((2, 3), np.float32), ro))
    bad(ArgumentError, r"op ew: out\[0\] is read-only", kernel("aot"), x, x, out=ro)
    assert (ro == 0).all()


@pytest.mark.parametrize("backend", backends("numba", "aot"))
def test_failed_call_leaves_out_untouched(backend):
    """Any out= array is validated (and inputs checked) before anything is written."""
    x = np.ones((2, 3), np.float32)
    o0 = np.full((2, 3), 7, np.float32)
    k2, k1 = kernel(backend, two), kernel(backend)
    prefix = "op two: " if backend == "numba" else "two: "
    # out[1] is wrong: out[0] must not have been written first
    bad(ShapeError, r"out\[1\]", k2, x, out=(o0, np.empty((3, 2), np.float32)))
    bad(DTypeError, r"out\[1\]", k2, x, out=(o0, np.empty((2, 3), np.float64)))
    bad(ArgumentError, r"out= (needs 2 arrays, got 1|has 1 arrays)", k2, x, out=(o0,))
    assert (o0 == 7).all(), f"{prefix}a refused out= tuple was partly written"
    # inputs that fail the shape check
    o = np.full((2, 3), 7, np.float32)
    bad(ShapeError, "cannot broadcast", k1, x, np.ones((4,), np.float32), out=o)
    bad(ArgumentError, "takes 2 inputs", k1, x, out=o)
    bad(DTypeError, "dtype", k1, x.astype(np.complex64), x.astype(np.complex64), out=o)
    assert (o == 7).all()


HALF_FAIL_CC = r"""
#include <cstdint>
// Writes the first half of its output, then reports failure.
extern "C" int HalfFail(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                        void *stream, void *extra) {
  float *out = static_cast<float *>(params[1]);
  int64_t n = 1;
  for (int i = 0; i < ndims[1]; i++) n *= shapes[1][i];
  for (int64_t i = 0; i < n / 2; i++) out[i] = -1.0f;
  return 5;
}
extern "C" int Ok(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                  void *stream, void *extra) {
  return 0;
}
"""


@pytest.fixture(scope="module")
def cc_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("cc")
    (root / "half.cc").write_text(HALF_FAIL_CC)
    (root / "broken.cc").write_text('extern "C" int Broken( { return 0; }\n')
    (root / "not_a_lib.so").write_text("this is text, not ELF\n")
    return root


@needs_gxx
@pytest.mark.parametrize("guard", [
    True,
    pytest.param(False),
])
def test_kernel_failure_never_half_writes_out_silently(cc_dir, guard):
    k = fg.AotKernel(f"{cc_dir / 'half.cc'}:HalfFail", out_shape=(8,), out_dtype="float32", guard=guard)
    o = np.zeros(8, np.float32)
    err = bad(KernelError, r"HalfFail: HalfFail in .* returned error code 5", k, np.ones(8, np.float32), out=o)
    assert err.code == 5 and err.function == "HalfFail"
    assert (o == 0).all() or "out" in str(err), "out= half-written and the error does not say so"
    k.close()


@needs_gxx
def test_aot_kernel_read_only_out(cc_dir):
    k = fg.AotKernel(f"{cc_dir / 'half.cc'}:Ok", out_shape=(4,), out_dtype="float32", n_inputs=1)
    ro = np.zeros(4, np.float32)
    ro.setflags(write=False)
    bad(ArgumentError, r"Ok: out\[0\] must be C-contiguous and writeable", k, np.ones(4, np.float32), out=ro)
    bad(ArgumentError, r"Ok: expected 1 inputs, got 2", k, np.ones(4, np.float32), np.ones(4, np.float32))
    assert k(np.ones(0, np.float32)).shape == (4,)  # size-0 input with a fixed out_shape
    k.close()


# --- libraries given to AotKernel -------------------------------------------------------------
@needs_gxx
def test_aot_kernel_library_errors(cc_dir, tmp_path, monkeypatch):
    bad(CompileError, r"compiling .*broken\.cc failed \(exit code \d+\)", fg.AotKernel,
        f"{cc_dir / 'broken.cc'}:Broken", out_shape=(1,))
    bad(LibraryError, r"not_a_lib\.so' is not an ELF shared library", fg.AotKernel,
        f"{cc_dir / 'not_a_lib.so'}:Ok", out_shape=(1,))
    bad(LibraryError, r"no such file", fg.AotKernel, f"{tmp_path / 'nope.so'}:Ok", out_shape=(1,))
    lib = build.build_library(cc_dir / "half.cc")
    bad(LibraryError, r"has no symbol 'Missing'", fg.AotKernel, f"{lib}:Missing", out_shape=(1,))
    # a truncated copy of a real library
    cut = tmp_path / "libcut.so"
    data = lib.read_bytes()
    cut.write_bytes(data[: len(data) // 3])
    bad(LibraryError, r"truncated or malformed ELF", fg.AotKernel, f"{cut}:Ok", out_shape=(1,))
    # whitelist: outside, and a symlink inside the whitelisted dir that escapes it
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "link.so").symlink_to(lib)
    (allowed / "dotdot").mkdir()
    monkeypatch.setenv("FUSEGEN_AOT_WHITELIST", str(allowed))
    bad(LibraryError, r"outside the AOT whitelist FUSEGEN_AOT_WHITELIST=.*refusing to load it", fg.AotKernel,
        f"{lib}:Ok", out_shape=(1,))
    bad(LibraryError, r"link\.so' \(resolves to .*\) is outside the AOT whitelist", fg.AotKernel,
        f"{allowed / 'link.so'}:Ok", out_shape=(1,))
    bad(LibraryError, r"is outside the AOT whitelist", fg.AotKernel,
        f"{allowed / 'dotdot' / '..' / '..' / 'libcut.so'}:Ok", out_shape=(1,))
    monkeypatch.setenv("FUSEGEN_AOT_WHITELIST", str(lib.parent))
    k = fg.AotKernel(f"{lib}:Ok", out_shape=(1,))  # inside: loads
    k.close()


@needs_jax
def test_jax_function_honours_the_whitelist(tmp_path, monkeypatch):
    @fg.op
    def ew_whitelisted(x, y):
        return x * 3.0 - y
    monkeypatch.setenv("FUSEGEN_AOT_WHITELIST", str(tmp_path))
    bad(LibraryError, r"ew_whitelisted_xla_ffi\.cc' \(resolves to .*\) is outside the AOT whitelist",
        fg.jax.function, ew_whitelisted, dtypes=["float32"])


# --- attributes and arguments of the XLA bridge, fg.emit, fg.compile ----------------------------
@needs_jax
def test_jax_attribute_errors():
    f = kernel("xla", scaled)
    x = np.ones((2, 3), np.float32)
    bad(AttrError, r"op scaled: missing required attribute 'alpha' \(float\)", f, x)
    bad(AttrError, r"op scaled: attribute 'alpha': expected float, got str 'a'", f, x, alpha="a")
    bad(AttrError, r"op scaled: attribute 'alpha': expected float, got list \[1.0\]", f, x, alpha=[1.0])
    bad(AttrError, r"unknown attribute 'beta'", f, x, alpha=1.0, beta=2.0)
    bad(ArgumentError, r"op scaled takes 1 inputs \(x\), got 2", f, x, x, alpha=1.0)
    bad(ArgumentError, r"op scaled: input 'x' is a list; JAX functions take arrays", f, [[1.0, 2.0]], alpha=1.0)
    bad(ArgumentError, r"op scaled: input 'x' is a str; JAX functions take arrays", f, "abc", alpha=1.0)
    bad(ArgumentError, r"op scaled: 'x' is a tensor input, given by keyword; pass the inputs positionally", f,
        x=x, alpha=1.0)
    import jax
    bad(AttrError, r"op scaled: attribute 'alpha' is a traced JAX value; attributes are static",
        jax.jit(lambda a, s: f(a, alpha=s)), x, 2.0)
    np.testing.assert_allclose(np.asarray(f(x, alpha=2.0)), 2 * x)


def test_entry_points_refuse_what_is_not_an_op():
    bad(TypeError, r"fusegen.compile expects an @fusegen.op, got function", fg.compile, lambda x: x)
    bad(ValueError, r"unknown backend 'tvm'", fg.compile, ew, backend="tvm")
    bad(ValueError, r"unknown device 'tpu'", fg.compile, ew, device="tpu")
    bad(NotImplementedError, r"abi=None is not available", fg.emit, ew, abi=None)
    bad(DTypeError, r"unsupported dtype 'float31'", fg.emit, ew, dtypes="float31")
    bad(DTypeError, r"unsupported dtype 'float31'", fg.compile, ew, backend="aot", dtypes="float31")
    bad(ValueError, r"dynamic_workspace must be 'kernel' or 'error'", fg.emit, ew, dynamic_workspace="maybe")


def test_aot_compile_of_a_non_op_names_compile():
    bad(TypeError, r"fusegen.compile expects an @fusegen.op", fg.compile, lambda x: x, backend="aot")


def test_emit_with_dtypes_of_the_wrong_type():
    bad(DTypeError, r"dtypes", fg.emit, ew, dtypes=42)


@needs_jax
def test_jax_function_refuses_what_is_not_an_op():
    bad(TypeError, r"fusegen.jax.function expects an @fusegen.op, got function", fg.jax.function, lambda x: x)
    bad(DTypeError, r"unsupported dtype 'float31'", fg.jax.function, ew, dtypes="float31")


# --- a truncated cache entry under fg.compile(backend="aot"): rebuilt, in fresh processes -------
CACHE_SCRIPT = textwrap.dedent("""
    import numpy as np, fusegen as fg
    @fg.op
    def cache_probe(x, y):
        return x * 2.0 + y
    k = fg.compile(cache_probe, backend="aot", dtypes=["float32"])
    x = np.arange(6, dtype=np.float32)
    assert np.array_equal(k(x, x), 3 * x)
    print(k.lib_path)
""")


@needs_gxx
def test_truncated_aot_cache_entry_is_rebuilt(tmp_path):
    BAD["n"] += 1
    script = tmp_path / "probe.py"
    script.write_text(CACHE_SCRIPT)
    env = dict(os.environ, FUSEGEN_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("FUSEGEN_AOT_WHITELIST", None)
    env.pop("MS_CUSTOM_AOT_WHITE_LIST", None)
    first = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert first.returncode == 0, first.stderr[-2000:]
    lib = Path(first.stdout.strip().splitlines()[-1])
    size = lib.stat().st_size
    with open(lib, "r+b") as f:
        f.truncate(size // 2)
    second = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert second.returncode == 0, f"exit {second.returncode}: {second.stderr[-2000:]}"
    rebuilt = Path(second.stdout.strip().splitlines()[-1])
    assert rebuilt.stat().st_size == size


def test_inputs_in_the_other_byte_order_are_read_by_value():
    # ('>f4' on this machine): copied to native order, as a non-contiguous input is
    k = fg.compile(ex.add_mul_div)
    x, y = np.arange(6, dtype=">f4").reshape(2, 3) + 1, np.full((2, 3), 2, ">f4")
    np.testing.assert_allclose(k(x, y), k(x.astype("=f4"), y.astype("=f4")))


@fg.op
def masked_rows(x, m):
    return x[m] * 2


def test_a_boolean_mask_index_says_why_it_cannot_be_fused():
    with pytest.raises(fg.DTypeError, match="got bool: a boolean mask .* use fg.where"):
        fg.compile(masked_rows)(np.ones(3, np.float32), np.array([True, False, True]))
