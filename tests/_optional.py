"""The optional packages and tools some tests need: detected one way, for every test file.

``needs("jax", "g++")`` is a skip marker: the test is skipped where any of them is missing, with a
reason that says what to install (``pytest -rs`` lists them). ``backends("numba", "aot", "xla")``
gives the usual backend parameters, each carrying what it needs, so a missing backend is a
visible skip, never a silently shorter parameter list. Nothing is remembered between runs:
installing an extra later (``pip install -e ".[jax]"``) enables its tests with no other change.

The rules:

* a Python package counts when its *distribution* is installed (``importlib.metadata``; nothing is
  imported here, so collection stays cheap). For numba-cuda that is the only correct test: Numba
  still ships its own deprecated ``numba.cuda``, which imports without numba-cuda and fails only
  later (``CudaSupportError`` in ``compile_ptx``). fusegen's runtime applies the same rule
  (``fusegen.lower_cuda.numba_cuda_missing``; ``test_numba_cuda_detection_agrees`` checks both);
* a tool counts when it is on ``PATH`` (the C++ compiler: ``$FUSEGEN_CXX``, else ``g++``, as
  fusegen's build does);
* a GPU counts when ``nvidia-smi`` or ``/dev/nvidia0`` exists (no driver probe: it costs time in
  every CPU-only run).
"""
from __future__ import annotations

import importlib.metadata
import os
import shutil

import pytest

SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM", "") not in ("", "0")


def installed(*dists: str) -> bool:
    """Whether every one of these distributions is installed (by metadata; nothing is imported)."""
    for dist in dists:
        try:
            importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return False
    return True


def on_path(tool: str) -> bool:
    return shutil.which(tool) is not None


def gpu_present() -> bool:
    """A GPU here, judged without probing the driver."""
    return on_path("nvidia-smi") or os.path.exists("/dev/nvidia0")


#: piece -> (is it here?, what to install). Checked when this module is imported (each run).
PIECES: dict[str, tuple[bool, str]] = {
    "g++": (on_path(os.environ.get("FUSEGEN_CXX") or "g++"),
            "a C++17 compiler: g++ on PATH or $FUSEGEN_CXX (e.g. apt install g++)"),
    "jax": (installed("jax", "jaxlib"), 'jax: pip install -e ".[jax]"'),
    "numba-cuda": (installed("numba-cuda"),
                   'numba-cuda (Numba\'s own numba.cuda is not enough): pip install -e ".[cuda]"'),
    "nvcc": (on_path("nvcc"), "nvcc on PATH (the CUDA toolkit, 12 or 13)"),
    "ptxas": (on_path("ptxas"), "ptxas on PATH (the CUDA toolkit, 12 or 13)"),
    "torch": (installed("torch"), 'torch: pip install -e ".[torch]"'),
    "matplotlib": (installed("matplotlib"), 'matplotlib: pip install -e ".[plot]"'),
    "mpmath": (installed("mpmath"), "mpmath: pip install mpmath"),
    "objdump": (on_path("objdump"), "objdump on PATH (binutils: e.g. apt install binutils)"),
    "gpu": (gpu_present(), "a CUDA GPU and its driver"),
}

HAVE = {name: here for name, (here, _) in PIECES.items()}


def missing(*pieces: str) -> list[str]:
    """What to install for each of ``pieces`` that is not here."""
    return [PIECES[p][1] for p in pieces if not PIECES[p][0]]


def needs(*pieces: str) -> pytest.MarkDecorator:
    """Skip where any of ``pieces`` (keys of ``PIECES``) is missing; the reason names what to install."""
    lack = missing(*pieces)
    return pytest.mark.skipif(bool(lack), reason="needs " + "; ".join(lack))


def require(*pieces: str) -> None:
    """``needs`` inside a test or fixture: skip now, naming what to install."""
    lack = missing(*pieces)
    if lack:
        pytest.skip("needs " + "; ".join(lack))


#: What each fusegen backend needs besides fusegen's own dependencies.
BACKEND_NEEDS = {"numba": (), "aot": ("g++",), "xla": ("jax", "g++")}


def backends(*names: str) -> list:
    """``pytest.param(name)`` per backend, marked with what it needs (``BACKEND_NEEDS``)."""
    return [pytest.param(n, marks=needs(*BACKEND_NEEDS[n])) if BACKEND_NEEDS[n] else pytest.param(n)
            for n in names]


def backends_extended(first: str, *rest: str) -> list:
    """``backends(first)`` in the default run and ``rest`` in ``pytest -m extended`` only: each
    of those builds a library per op (g++, seconds), which the default run's 5 minutes lack."""
    return backends(first) + [pytest.param(p.values[0], marks=[*p.marks, pytest.mark.extended])
                              for p in backends(*rest)]


needs_gxx = needs("g++")
needs_jax = needs("jax", "g++")  # the XLA backend builds its handlers with the C++ compiler
needs_numba_cuda = needs("numba-cuda")
needs_nvcc = needs("nvcc")
no_simulator = pytest.mark.skipif(SIMULATOR, reason="runs without NUMBA_ENABLE_CUDASIM (tests/cuda's own "
                                                    "process covers the simulator)")
