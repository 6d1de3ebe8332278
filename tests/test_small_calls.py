"""The per-call fast paths (issue #19): the kernel call generated per op (``rt.call.call_fn``),
and the AOT backend's small-call extension (``fusegen.native.fastcall``) against its ctypes
fallback: same results, same errors, the cache keyed as before. Cheap: two small AOT builds
(cached) and one Numba kernel."""
from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

import fusegen as fg
import fusegen.examples as ex
from fusegen.native import fastcall

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
X = np.arange(20, dtype=np.float32).reshape(4, 5) / 7
Y = np.linspace(1, 2, 20, dtype=np.float32).reshape(4, 5)


def test_generated_call_keys_attributes_by_name_value_and_type():
    k = fg.compile(ex.add_reduce_sum)
    a = k(X, Y, axis=1, keep_dims=False)
    b = k(X, Y, keep_dims=False, axis=1)          # another keyword order: the same entry
    assert len(k._calls) == 1 and np.array_equal(a, b)
    np.testing.assert_allclose(a, (X + Y).sum(1), rtol=1e-6)
    for _ in range(2):   # 0 == False, but another type: not the cached entry, refused every time
        with pytest.raises(fg.AttrError, match="expected bool, got int"):
            k(X, Y, axis=1, keep_dims=0)
    with pytest.raises(fg.ArgumentError, match="takes 2 inputs"):
        k(X)
    with pytest.raises(fg.ArgumentError, match="takes 2 inputs"):
        k(x=X, y=Y)                               # inputs are positional, as before
    with pytest.raises(fg.AttrError, match="unknown attribute 'bogus'"):
        k(X, Y, bogus=1)
    assert np.array_equal(k(list(X), Y, axis=1, keep_dims=False), a)   # a list of rows: converted
    assert len(k._calls) == 1


@needs_gxx
def test_small_call_path_matches_the_ctypes_path(monkeypatch):
    assert fastcall.module() is not None        # built here, so the path below is the one tested
    fast = fg.compile(ex.add_mul_div, backend="aot", dtypes="float32")
    want = fast(X, Y)
    call = fast._calls[fast.key(X, Y)]
    assert "_small(" in call.run.source
    monkeypatch.setattr(fastcall, "_state", [None])    # no extension: the ctypes path
    slow = fg.compile(ex.add_mul_div, backend="aot", dtypes="float32")
    got = slow(X, Y)
    assert "_small(" not in slow._calls[slow.key(X, Y)].run.source
    for w, g in zip(want, got):
        assert np.array_equal(w, g)
    # what the extension does not run goes the ctypes way, with the same results and errors
    fx = np.asfortranarray(X)
    for w, g in zip(want, fast(fx, Y)):
        assert np.array_equal(w, g)
    ro = X.copy()
    ro.flags.writeable = False
    for w, g in zip(want, fast(ro, Y)):
        assert np.array_equal(w, g)
    outs = tuple(np.empty_like(X) for _ in range(3))
    assert fast(X, Y, out=outs) is not None and all(np.array_equal(w, o) for w, o in zip(want, outs))
    outs[0].flags.writeable = False
    with pytest.raises(fg.ArgumentError, match=r"op add_mul_div: out\[0\] is read-only"):   # (the Numba runner's)
        fast(X, Y, out=outs)


@needs_gxx
def test_small_call_path_reports_kernel_errors():
    k = fg.compile(ex.cross_entropy, backend="aot", dtypes="float32,int64")
    logits = np.zeros((3, 9), np.float32)
    good = np.array([0, 8, 3])
    assert "_small(" in (k(logits, good), k._calls[k.key(logits, good)].run.source)[1]
    np.testing.assert_allclose(k(logits, good), np.log(9), rtol=1e-6)
    with pytest.raises(fg.BoundsError, match="index 9 is out of bounds for axis 1 with size 9"):
        k(logits, np.array([0, 9, 3]))


@needs_gxx
def test_small_call_path_writes_into_out(monkeypatch):
    """``out=`` of a small signature: the extension checks the arrays and writes into them (one C
    call); arrays it does not take go the ctypes way, which says what is wrong."""
    from fusegen.native.aot_kernel import AotKernel
    ctypes_calls = []
    run_prepared = AotKernel.run_prepared
    monkeypatch.setattr(AotKernel, "run_prepared", lambda *a, **kw: ctypes_calls.append(1) or run_prepared(*a, **kw))
    k = fg.compile(ex.add_mul_div, backend="aot", dtypes="float32")
    want = k(X, Y)
    assert "_small_out(" in k._calls[k.key(X, Y)].run.source
    for kind in (tuple, list):
        outs = kind(np.full_like(X, np.nan) for _ in range(3))
        got = k(X, Y, out=outs)
        assert type(got) is tuple and all(g is o for g, o in zip(got, outs))
        assert all(np.array_equal(w, o) for w, o in zip(want, outs))
    assert not ctypes_calls   # (the extension's calls)
    outs = [np.empty_like(X) for _ in range(3)]
    for bad, error, match in [(outs[:2], fg.ArgumentError, "out= needs 3 arrays, got 2"),
                              ([np.empty((4, 5)), *outs[1:]], fg.DTypeError, "float64"),
                              ([np.empty((4, 6), np.float32), *outs[1:]], fg.ShapeError, r"\(4, 6\)"),
                              (np.empty_like(X), fg.ArgumentError, "out= needs 3 arrays, got 1")]:
        with pytest.raises(error, match=match):
            k(X, Y, out=bad)
    t = np.empty((5, 4), np.float32).T   # (not C-contiguous: the C path declines, a temporary is written)
    assert k(X, Y, out=[t, *outs[1:]])[0] is t and np.array_equal(t, want[0])


@needs_gxx
@pytest.mark.extended   # (cross_entropy's build: about 7 CPU-seconds)
def test_small_call_path_writes_one_output_and_reports_a_kernel_error():
    """One output: ``out=`` takes the array or a list of it, and returns the array, as the
    ctypes path does; a kernel's error says the output may hold partial results."""
    ce = fg.compile(ex.cross_entropy, backend="aot", dtypes="float32,int64")
    logits, labels, out = np.zeros((3, 9), np.float32), np.array([0, 8, 3]), np.empty((), np.float32)
    assert ce(logits, labels, out=out) is out and np.isclose(out, np.log(9))
    assert ce(logits, labels, out=[out]) is out   # one output: the array, as the ctypes path gives
    with pytest.raises(fg.BoundsError, match="out of bounds.*partial results"):
        ce(logits, np.array([0, 9, 3]), out=out)


@needs_gxx
def test_small_calls_from_threads_beside_ctypes_path_calls():
    """Threads on one signature: the small-call path (its own block, the GIL held; fresh outputs
    and ``out=``) beside calls that take the ctypes path (a Fortran-order input) with the GIL
    released."""
    k = fg.compile(ex.add_mul_div, backend="aot", dtypes="float32")
    assert not _three_ways_from_threads(k, X, Y, 150)


def _three_ways_from_threads(k, x, y, calls: int) -> list:
    """Six threads, each making ``calls`` calls of ``k`` one way: ``out=``, a Fortran-order input
    (the ctypes path), fresh outputs; the threads whose results differed from one call's."""
    import threading
    want, bad = k(x, y), []

    def work(i):
        for _ in range(calls):
            if i % 3 == 0:
                got = k(x, y, out=tuple(np.empty_like(x) for _ in range(3)))
            else:
                got = k(np.asfortranarray(x) if i % 3 == 1 else x, y)
            if not all(np.array_equal(w, g) for w, g in zip(want, got)):
                bad.append(i)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return bad


@needs_gxx
@pytest.mark.extended   # (6 s: a build and threads timed against each other)
def test_large_calls_release_the_gil_without_the_ctypes_path(monkeypatch):
    """Above ``SMALL_CALL_BYTES`` the extension runs the kernel with the GIL released (no ctypes
    path): threads on one signature (fresh outputs, ``out=``, and a Fortran-order input that takes
    the ctypes path) all get NumPy's results; while one call has the extension's block, another
    thread's takes the ctypes path. A kernel error leaves the block usable, and ``close()`` waits
    for running calls."""
    import threading
    import time
    from fusegen.native.aot_kernel import AotKernel
    ctypes_calls = []
    run_prepared = AotKernel.run_prepared
    monkeypatch.setattr(AotKernel, "run_prepared", lambda *a, **kw: ctypes_calls.append(1) or run_prepared(*a, **kw))
    big_x = np.random.default_rng(0).standard_normal((256, 512)).astype(np.float32)   # 512 KiB an array
    big_y = np.linspace(1, 2, big_x.size, dtype=np.float32).reshape(big_x.shape)
    k = fg.compile(ex.add_mul_div, backend="aot", dtypes="float32")
    want = k(big_x, big_y)
    assert "_small(" in k._calls[k.key(big_x, big_y)].run.source and not ctypes_calls
    outs = tuple(np.empty_like(big_x) for _ in range(3))
    assert all(g is o for g, o in zip(k(big_x, big_y, out=outs), outs)) and not ctypes_calls
    assert all(np.array_equal(w, o) for w, o in zip(want, outs))
    assert not _three_ways_from_threads(k, big_x, big_y, 40)
    # a kernel's error on the large path, then the same signature again: the block was released
    ce = fg.compile(ex.cross_entropy, backend="aot", dtypes="float32,int64")
    logits = np.zeros((4096, 9), np.float32)
    labels = np.arange(4096) % 9
    np.testing.assert_allclose(ce(logits, labels), np.log(9), rtol=1e-5)
    calls = len(ctypes_calls)
    for _ in range(2):
        with pytest.raises(fg.BoundsError, match="index 9 is out of bounds for axis 1 with size 9"):
            ce(logits, np.where(labels == 8, 9, labels))
        np.testing.assert_allclose(ce(logits, labels), np.log(9), rtol=1e-5)
    assert len(ctypes_calls) == calls
    # close() while threads call: each call finishes or is refused as closed, never crashes
    k2 = fg.compile(ex.add_mul_div, backend="aot", dtypes="float32")
    k2(big_x, big_y)
    errors, stop = [], threading.Event()

    def hammer():
        while not stop.is_set():
            try:
                k2(big_x, big_y)
            except Exception as e:  # noqa: BLE001 - checked below: only "closed" may come back
                errors.append(e)
                return
    runners = [threading.Thread(target=hammer) for _ in range(3)]
    for t in runners:
        t.start()
    time.sleep(0.05)
    k2.close()
    stop.set()
    for t in runners:
        t.join()
    assert all(isinstance(e, fg.FusegenError) and "closed" in str(e) for e in errors), errors
    # (a compiled kernel loads its library again on its next call)
    assert all(np.array_equal(w, g) for w, g in zip(want, k2(big_x, big_y)))


def test_no_small_call_extension_without_a_compiler(monkeypatch):
    """A failed build (no compiler, no headers) leaves the ctypes path, once per process."""
    from fusegen.errors import CompileError
    from fusegen.native import build

    def no_compiler(*args, **kwargs):
        raise CompileError("compiler 'g++' not found", ["g++"])
    monkeypatch.setattr(build, "compile_cached", no_compiler)
    monkeypatch.setattr(fastcall, "_state", [])
    assert fastcall.module() is None and fastcall._state == [None]
    monkeypatch.undo()   # the real compiler back: FUSEGEN_FASTCALL=0 alone must refuse
    monkeypatch.setattr(fastcall, "_state", [])
    monkeypatch.setenv("FUSEGEN_FASTCALL", "0")
    assert fastcall.module() is None


@needs_gxx
def test_numpy_scalars_where_a_0d_tensor_is_expected():
    """A NumPy scalar has the dtype and shape of a 0-d array, so a call with one matches the 0-d
    array's cached signature; every backend converts it as np.asarray does (the AOT runner's
    ctypes path once failed on the second call: 'numpy.float32' object has no attribute 'ctypes')."""
    want = (X + 2, X * 2, X / 2)
    for backend, options in (("numba", {}), ("aot", {"dtypes": "float32"})):
        k = fg.compile(ex.add_mul_div, backend=backend, **options)
        for y in (np.array(2.0, np.float32), np.float32(2.0), np.float32(2.0), np.array(2.0, np.float32)):
            got = k(X, y)
            assert len(k._calls) == 1, backend
            for w, g in zip(want, got):
                assert g.dtype == np.float32 and np.array_equal(w, g), (backend, type(y))
        got = k(np.float32(3.0), np.float32(2.0))      # every input a scalar: 0-d results
        assert [g.shape for g in got] == [()] * 3 and float(got[2]) == 1.5


@pytest.mark.extended
def test_python_scalars_where_a_0d_tensor_is_expected():
    """A Python scalar input is a 0-d tensor of np.asarray's dtype (a float is float64, an int
    int64), on every backend alike (an input is not a weak scalar: only op-level constants and
    attributes are)."""
    for backend in ("numba", "aot"):
        k = fg.compile(ex.add_mul_div, backend=backend)
        for y, dtype in ((2.0, np.float64), (2, np.float64), (True, np.float32)):
            for _ in range(2):
                got = k(X, y)
                want = (X + np.asarray(y), X * np.asarray(y), X / np.asarray(y))
                for w, g in zip(want, got):
                    assert g.dtype == dtype and np.array_equal(w, g), (backend, y)


def test_numba_runner_fresh_outputs_and_the_general_path_agree(monkeypatch):
    """The Numba runner allocates fresh outputs in one C call (``fastcall.fresh_outputs``) where
    every input is a C-contiguous, aligned ndarray; other inputs (Fortran order, misaligned, an
    ndarray subclass) and ``out=`` take the general path, with the same results."""
    k = fg.compile(ex.add_mul_div)
    want = k(X, Y)
    run = k._calls[k.key(X, Y)].run
    if fastcall.module() is not None:
        assert "_fresh(" in run.source
    buf = np.empty(X.nbytes + 1, np.uint8)[1:].view(np.float32).reshape(X.shape)   # misaligned
    buf[...] = X
    assert not buf.flags.aligned
    for x in (X, np.asfortranarray(X), buf, X.view(np.matrix)):
        for w, g in zip(want, k(x, Y)):
            assert type(g) is np.ndarray and g.flags.c_contiguous and np.array_equal(w, g)
    outs = tuple(np.empty_like(X) for _ in range(3))
    assert all(o is g for o, g in zip(outs, k(X, Y, out=outs)))
    assert all(np.array_equal(w, o) for w, o in zip(want, outs))
    a, b = k(X, Y), k(X, Y)
    assert all(p is not q and not np.shares_memory(p, q) for p, q in zip(a, b))   # fresh every call
    monkeypatch.setattr(fastcall, "_state", [None])    # no extension: np.empty in the runner
    slow = fg.compile(ex.add_mul_div)
    for w, g in zip(want, slow(X, Y)):
        assert np.array_equal(w, g)
    assert "_fresh(" not in slow._calls[slow.key(X, Y)].run.source


def test_large_fresh_outputs_are_cache_line_aligned(monkeypatch):
    """Fresh outputs of 64 KiB and more own 64-byte aligned data (NumPy's allocator aligns to 16:
    a kernel's vector stores then straddle two cache lines), allocated and freed through the
    extension's NumPy allocator (NEP 49), on every path that makes them: the Numba runner's C call
    and its general path, the AOT backend's ctypes path, ``fastcall.empty`` itself (0-d, size 0,
    several dtypes). Smaller ones, and everything without the extension, are ``np.empty``'s."""
    if fastcall.module() is None:
        pytest.skip("no small-call extension here (no compiler or Python headers)")
    from numpy._core.multiarray import get_handler_name
    big = np.random.default_rng(1).standard_normal((256, 130)).astype(np.float32)   # 130 KiB
    backends = ["numba"] + (["aot"] if shutil.which("g++") else [])
    for backend in backends:
        k = fg.compile(ex.add_mul_div, backend=backend)
        for x in (big, np.asfortranarray(big)):   # the fresh-output C call, the general path
            got = k(x, big)
            for g, w in zip(got, (big + big, big * big, big / big)):
                assert g.ctypes.data % 64 == 0 and g.flags.owndata and get_handler_name(g) == "fusegen_aligned64", backend
                np.testing.assert_array_equal(g, w)
        assert all(get_handler_name(g) != "fusegen_aligned64" for g in k(X, Y))
    for shape, dtype in [((1 << 14,), np.float32), ((3, 5000), np.complex128), ((70000,), np.bool_)]:
        a = fastcall.empty(shape, dtype)
        assert (a.shape, a.dtype, a.ctypes.data % 64, a.flags.owndata) == (shape, np.dtype(dtype), 0, True)
        a[...] = 1
        a.resize((7,), refcheck=False)   # realloc through the same allocator
        assert a.sum() == 7
    for shape in [(), (0, 5), (3,)]:
        a = fastcall.empty(shape, np.float64)
        assert a.shape == shape and get_handler_name(a) != "fusegen_aligned64"
    monkeypatch.setattr(fastcall, "_state", [None])
    assert get_handler_name(fastcall.empty((1 << 16,), np.float64)) != "fusegen_aligned64"



def _vm_flags(address: int) -> list[str]:
    """The VmFlags of the mapping of this process that holds ``address`` (/proc/self/smaps)."""
    inside = False
    for line in open("/proc/self/smaps"):
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(v, 16) for v in head.split("-"))
            inside = lo <= address < hi
        elif inside and head == "VmFlags:":
            return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled"),
                    reason="no transparent huge pages on this system")
def test_large_fresh_outputs_are_advised_onto_huge_pages():
    """Fresh outputs of 4 MiB and more are advised onto transparent huge pages (``hg``), as NumPy
    advises its own: malloc maps such a block afresh on every call, and faulting 64 MiB in 4 KiB
    pages cost a fresh-output call 5-10x the kernel. Smaller ones are not."""
    if fastcall.module() is None:
        pytest.skip("no small-call extension here (no compiler or Python headers)")
    big = np.ones((1024, 1100), np.float32)   # 4.3 MiB
    k = fg.compile(ex.add_mul_div)
    for out in k(big, big):
        middle = out.ctypes.data + out.nbytes // 2
        assert "hg" in _vm_flags(middle)
        np.testing.assert_array_equal(out[-1], out[0])
    a = fastcall.empty((5 << 20,), np.uint8)
    assert "hg" in _vm_flags(a.ctypes.data + (4 << 20))


_HEAP_CHECK = """
import ctypes, numpy as np
libc = ctypes.CDLL("libc.so.6")
libc.mallopt(-4, 0); libc.mallopt(-1, 2 ** 31 - 1)   # a heap that keeps freed memory (fusegen bench)
from fusegen.native import fastcall
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
sizes = []
for i in range(8):
    a = fastcall.empty((1 << 24,), np.float32); a[:] = 1
    b = np.empty((1 << 24,), np.float32); b[:] = 1
    del a
    c = fastcall.empty((1 << 24,), np.float32); c[:] = 1
    del b, c
    sizes.append(rss())
print(sizes[-1] - sizes[1])
"""


def test_aligned_outputs_reuse_a_kept_heap():
    """Aligned blocks and NumPy's own, of one size, allocated and freed in turn in a process whose
    heap keeps freed memory (glibc with M_MMAP_MAX=0, as ``fusegen bench`` runs): the heap stops
    growing after the first round (posix_memalign's split-off fragments grew it every round)."""
    import subprocess
    import sys
    if fastcall.module() is None or not sys.platform.startswith("linux"):
        pytest.skip("needs the small-call extension and glibc")
    grown = int(subprocess.run([sys.executable, "-c", _HEAP_CHECK], capture_output=True, text=True,
                               check=True, timeout=120).stdout.strip())
    assert grown < 64 << 20, f"the heap grew by {grown / 2 ** 20:.0f} MiB over six rounds of 64 MiB blocks"
