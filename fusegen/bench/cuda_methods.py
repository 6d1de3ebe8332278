"""What a GPU bench case runs, and on what: the device's description (``gpu_info``), how a case's
inputs are placed on it (``Placed``) and results brought back (``to_host``), and the methods:
fusegen's CUDA backends (``fusegen_methods``) and the competitors (eager torch, torch.compile,
CuPy, jax.jit on the GPU), each skipped with the reason where it cannot run.
"""
from __future__ import annotations

import functools
import importlib.metadata
import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from numba import cuda

from ..lower_cuda import simulator
from .cases import Method, OpBench, Thunk, importable, jax_available, torch_compiled, torch_namespace
from .harness import BenchConfig, why


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def gpu_info() -> dict:
    """The device and the software the numbers depend on (fields a simulator lacks are None)."""
    dev = cuda.get_current_device()
    sim = simulator()
    info: dict[str, Any] = {"simulator": sim, "name": _text(getattr(dev, "name", None) or
                                                           ("numba-cuda simulator" if sim else "unknown GPU")),
                            "compute_capability": list(getattr(dev, "compute_capability", ()) or ())}
    for key, attr in (("sm_count", "MULTIPROCESSOR_COUNT"), ("l2_bytes", "L2_CACHE_SIZE"),
                      ("memory_clock_khz", "MEMORY_CLOCK_RATE"), ("bus_width_bits", "GLOBAL_MEMORY_BUS_WIDTH")):
        try:
            info[key] = int(getattr(dev, attr))
        except Exception:  # noqa: BLE001 - an attribute this driver or the simulator lacks
            info[key] = None
    if info["memory_clock_khz"] and info["bus_width_bits"]:  # double data rate
        info["peak_gbps"] = 2 * info["memory_clock_khz"] * 1e3 * info["bus_width_bits"] / 8 / 1e9
    try:
        info["memory_bytes"] = int(cuda.current_context().get_memory_info()[1])
    except Exception:  # noqa: BLE001
        info["memory_bytes"] = None
    for key, get in (("cuda_driver_api", lambda: cuda.cudadrv.driver.driver.get_version()),
                     ("cuda_runtime", lambda: cuda.runtime.get_version())):
        try:
            version = tuple(get())
            info[key] = ".".join(map(str, version)) if min(version) >= 0 else None  # the simulator: -1
        except Exception:  # noqa: BLE001
            info[key] = None
    info["driver"] = _nvidia_smi("driver_version")
    info["versions"] = {m: _version(m) for m in ("numba-cuda", "torch", "cupy-cuda13x", "cupy-cuda12x", "jax",
                                                  "jaxlib") if _version(m)}
    return info


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _nvidia_smi(field: str) -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, f"--query-gpu={field}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


@dataclass
class Placed:
    """A case's inputs as the GPU methods get them (``Method.bind``'s first argument on the GPU):
    the NumPy ``host`` arrays, their device copies, and the reference outputs (for the shapes and
    dtypes of the ``out=`` arrays)."""

    host: tuple
    inputs: tuple
    ref: tuple

    def new_outputs(self) -> tuple:
        return tuple(cuda.to_device(np.full(r.shape, np.nan, r.dtype)) for r in self.ref)


def to_host(result: Any) -> tuple[np.ndarray, ...]:
    """Any GPU method's result (Numba device arrays, torch tensors, CuPy or JAX arrays) in NumPy."""
    items = result if isinstance(result, (tuple, list)) else (result,)
    out = []
    for r in items:
        if hasattr(r, "copy_to_host"):           # Numba
            out.append(r.copy_to_host())
        elif type(r).__module__.startswith("cupy"):
            out.append(r.get())
        elif hasattr(r, "detach"):               # torch
            out.append(r.detach().cpu().numpy())
        else:                                    # JAX (and NumPy)
            out.append(np.asarray(r))
    return tuple(out)


def _fusegen_method(name: str, kernel: Any, setup_s: float) -> Method:
    def bind(placed: Placed, attrs: dict) -> Thunk:
        outs = placed.new_outputs()
        return lambda: kernel(*placed.inputs, out=outs, **attrs)
    return Method(name, bind, setup_s, fusegen=True)


def fusegen_methods(spec: OpBench, backends: list[str], dtype: str) -> tuple[list[Method], dict[str, str]]:
    """fusegen's CUDA backends for ``spec``'s op: ``numba-cuda`` and ``aot-cuda`` (the emitted .cu,
    built with nvcc for ``dtype``), each skipped with the reason where it cannot run. An AOT
    library is tried on a tiny input first (shapes are runtime arguments: nothing is rebuilt):
    under the simulator it refuses its native code with ``CudaUnavailableError``."""

    from .. import runtime
    methods: list[Method] = []
    skipped: dict[str, str] = {}
    for backend in backends:
        name = f"{backend}-cuda"
        options = {"dtypes": dtype} if backend == "aot" else {}
        t0 = time.perf_counter()
        try:
            kernel = runtime.compile(spec.op, backend=backend, device="cuda", **options)
            if backend == "aot":
                tiny = spec.make_inputs((2, 3), dtype)
                kernel(*(cuda.to_device(a) for a in tiny), **spec.variants[0])
                cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - CudaUnavailableError, or no nvcc, ...: any failure means skipped
            skipped[name] = why(e)
            continue
        methods.append(_fusegen_method(name, kernel, time.perf_counter() - t0))
    return methods, skipped


def _xp_method(name: str, spec: OpBench, xp: Any, put: Callable[[np.ndarray], Any],
               wrap: Callable[[Callable], Callable] | None = None, synchronous: bool = False) -> Method:
    """A competitor: ``spec``'s reference code with ``xp`` (torch / CuPy / jax.numpy) on device
    copies made by ``put``; ``wrap`` compiles it (torch.compile, jax.jit)."""
    def bind(placed: Placed, attrs: dict) -> Thunk:
        args = [put(a) for a in placed.host]
        fn = functools.partial(spec.xp_ref, xp, **attrs)
        fn = wrap(fn) if wrap is not None else fn
        if synchronous:
            import jax
            return lambda: jax.block_until_ready(fn(*args))
        thunk = functools.partial(fn, *args)
        if hasattr(fn, "fallback"):  # torch.compile's check (cases.torch_compiled)
            thunk.fallback = fn.fallback
        return thunk
    return Method(name, bind, synchronous=synchronous)


def competitor_methods(spec: OpBench, cfg: BenchConfig) -> tuple[list[Method], dict[str, str]]:
    """torch (eager; torch.compile with ``cfg.torch_compile``), CuPy and jax.jit on the GPU, each
    where it is installed and sees a GPU, otherwise skipped with the reason."""
    methods: list[Method] = []
    skipped: dict[str, str] = {}
    if cfg.torch:
        torch_names = ["torch-cuda"] + (["torch-compile-cuda"] if cfg.torch_compile else [])
        why = _torch_unusable()
        if why:
            skipped.update(dict.fromkeys(torch_names, why))
        else:
            import torch
            ns = torch_namespace(torch)
            put = functools.partial(_torch_put, torch)
            methods.append(_xp_method("torch-cuda", spec, ns, put))
            if cfg.torch_compile:
                methods.append(_xp_method("torch-compile-cuda", spec, ns, put,
                                          functools.partial(torch_compiled, torch)))
    why = _cupy_unusable()
    if why:
        skipped["cupy-cuda"] = why
    else:
        import cupy
        methods.append(_xp_method("cupy-cuda", spec, cupy, cupy.asarray))
    if cfg.jax:
        why = _jax_unusable(cfg.dtype)
        if why:
            skipped["jax-cuda"] = why
        else:
            import jax
            import jax.numpy as jnp
            gpu = jax.devices("gpu")[0]
            methods.append(_xp_method("jax-cuda", spec, jnp, lambda a: jax.device_put(a, gpu), jax.jit,
                                      synchronous=True))
    return methods, skipped


def _torch_put(torch: Any, a: np.ndarray) -> Any:
    return torch.from_numpy(a).to("cuda")


def _torch_unusable() -> str | None:
    if simulator():
        return "the simulator has no device for torch"
    if not importable("torch"):
        return "torch is not installed"
    import torch
    if not torch.cuda.is_available():
        return "torch sees no CUDA device (a CPU-only build?)"
    if torch.cuda.current_stream().cuda_stream != 0:
        return "torch's current stream is not the legacy default stream the events are recorded on"
    return None


def _cupy_unusable() -> str | None:
    if simulator():
        return "the simulator has no device for CuPy"
    if not importable("cupy"):
        return "cupy is not installed"
    import cupy
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001 - CuPy without a usable driver
        return f"cupy sees no CUDA device ({why(e)})"
    if cupy.cuda.get_current_stream().ptr != 0:
        return "CuPy's current stream is not the legacy default stream the events are recorded on"
    return None


def _jax_unusable(dtype: str) -> str | None:
    if simulator():
        return "the simulator has no device for JAX"
    if not jax_available():
        return "jax is not installed"
    import jax
    try:
        jax.devices("gpu")
    except RuntimeError as e:
        return f"jax sees no GPU (a CPU-only jaxlib, or no CUDA plugin: {why(e)})"
    if jax.dtypes.canonicalize_dtype(np.dtype(dtype)) != np.dtype(dtype):
        return f"{dtype} needs jax_enable_x64"
    return None
