"""The methods a bench case times: fusegen's backends as they are present here (``discover``:
each (backend, device) that compiles, and why the others were skipped) and fusegen's JAX bridge.
The competitors (NumPy, hand-written Numba, jax.jit, torch) are ``bench.cases``'.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from typing import Any

from .cases import Method, Thunk, jax_available, jax_input_dtypes, jax_on_device

_probes: dict[str, bool] = {}


def gxx_works() -> bool:
    """Whether the C++ compiler the AOT backend uses ($FUSEGEN_CXX, else g++) builds a shared library."""
    if "gxx" not in _probes:
        compiler = shutil.which(os.environ.get("FUSEGEN_CXX") or "g++")
        ok = False
        if compiler:
            with tempfile.TemporaryDirectory(prefix="fusegen-probe-") as tmp:
                cmd = [compiler, "-x", "c++", "-shared", "-fPIC", "-o", os.path.join(tmp, "p.so"), "-"]
                try:
                    ok = subprocess.run(cmd, input=b'extern "C" int fg_probe() { return 1; }\n',
                                        capture_output=True, timeout=120).returncode == 0
                except (OSError, subprocess.TimeoutExpired):
                    ok = False
        _probes["gxx"] = ok
    return _probes["gxx"]


def cuda_unavailable() -> str | None:
    """Why fusegen's CUDA backends cannot run here (numba-cuda missing: what to install; no GPU or
    driver), or None: the runtime's own rule (``native.device.require_gpu``)."""
    from ..native.device import CudaUnavailableError, require_gpu
    try:
        require_gpu()
    except CudaUnavailableError as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 - any failure to reach a GPU means "no GPU"
        return why(e)
    return None


def cuda_available() -> bool:
    """Whether fusegen's CUDA backends can run here (``cuda_unavailable()`` has no reason)."""
    return cuda_unavailable() is None


def why(e: Exception) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".rstrip(": ")


def _kernel_method(name: str, kernel: Any, setup_s: float) -> Method:
    """The kernel called as a user calls it: fresh outputs from the allocator on every call."""
    return Method(name, lambda arrays, attrs, k=kernel: (lambda: k(*arrays, **attrs)), setup_s, fusegen=True)


def _kernel_out_method(name: str, kernel: Any) -> Method:
    """The kernel writing into outputs the caller allocated once (``out=``): no allocation, no
    fresh pages, the steady state of a training loop."""
    def bind(arrays: tuple, attrs: dict) -> Thunk:
        outs = kernel(*arrays, **attrs)
        return lambda: kernel(*arrays, out=outs, **attrs)
    return Method(name + "-out", bind, 0.0, fusegen=True)


def _kernel_inplace_method(name: str, kernel: Any) -> Method:
    """The kernel writing its declared in-place outputs over their inputs (``inplace=True``: an
    optimizer step updating its state), on copies of the inputs made once when it is bound. The
    first call's results are checked; later calls keep updating the same arrays, which changes
    their values, not the work. No allocation, and no write to a line the call did not read."""
    def bind(arrays: tuple, attrs: dict) -> Thunk:
        own = tuple(a.copy() for a in arrays)
        return lambda: kernel(*own, inplace=True, **attrs)
    return Method(name + "-inplace", bind, 0.0, fusegen=True)


def discover(op: Any, backends: list[str], devices: list[str], aot_flags: list[str] | None = None,
             dtype: str | None = None) -> tuple[list[Method], dict[str, str]]:
    """Compile ``op`` for every (backend, device) that works here.

    Returns the working methods and, for the others, ``{name: why it was skipped}``.
    A backend counts as present when its prerequisites are met and
    ``fusegen.runtime.compile`` returns a kernel; failures of the kernel itself are
    *not* skipped here: they surface as FAIL when the kernel is run. ``dtype`` limits
    the AOT build to that dtype (default: every float dtype).
    """
    from .. import runtime
    methods: list[Method] = []
    skipped: dict[str, str] = {}
    for device in devices:
        for backend in backends:
            name = f"{backend}-{device}"
            reason = cuda_unavailable() if device == "cuda" else None
            if reason:
                skipped[name] = reason
                continue
            if backend == "aot" and not gxx_works():
                skipped[name] = "no working C++ compiler (g++ or $FUSEGEN_CXX)"
                continue
            options: dict[str, Any] = {}
            if backend == "aot":
                options = {"flags": aot_flags} if aot_flags is not None else {}
                if dtype is not None:
                    options["dtypes"] = dtype
            t0 = time.perf_counter()
            try:
                kernel = runtime.compile(op, backend=backend, device=device, **options)
            except Exception as e:  # noqa: BLE001 - an unavailable backend may fail in any way
                skipped[name] = why(e)
                continue
            methods.append(_kernel_method(name, kernel, time.perf_counter() - t0))
            if device == "cpu":
                methods.append(_kernel_out_method(name, kernel))
                if getattr(op, "inplace", None):
                    methods.append(_kernel_inplace_method(name, kernel))
    return methods, skipped


def fg_jax_method(spec: Any, dtype: str) -> tuple[list[Method], dict[str, str]]:
    """``spec.op`` through ``fusegen.jax.function`` (the XLA FFI handler, "fg-jax-cpu"), built for
    the dtypes of the case's inputs (``dtype`` data; int labels, ids, codes); skipped, with
    the reason, without jax or a C++ compiler. Inputs go to the device once per case and every
    call waits for its result (JAX dispatches asynchronously)."""
    if not jax_available():
        return [], {"fg-jax-cpu": "jax is not installed (pip install 'fusegen[jax]')"}
    if not gxx_works():
        return [], {"fg-jax-cpu": "no working C++ compiler (g++ or $FUSEGEN_CXX)"}
    import jax

    from .. import jax as fg_jax
    t0 = time.perf_counter()
    try:
        fn = fg_jax.function(spec.op, dtypes=jax_input_dtypes(spec, dtype))
    except Exception as e:  # noqa: BLE001 - reported as skipped, as discover() does
        return [], {"fg-jax-cpu": why(e)}

    def bind(arrays: tuple, attrs: dict) -> Thunk:
        dev = jax_on_device(arrays)
        return lambda: jax.block_until_ready(fn(*dev, **attrs))

    return [Method("fg-jax-cpu", bind, time.perf_counter() - t0, fusegen=True)], {}
