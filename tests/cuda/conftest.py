"""CUDA tests (numba-cuda backend) run where kernels can run: under the simulator
(``NUMBA_ENABLE_CUDASIM=1``, set before Python starts, so in a pytest process of their own:
``NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/cuda``) or on a real GPU. Elsewhere every test
here is skipped (the default ``pytest`` run), and numba.cuda is not even imported.

The parent ``tests/conftest.py`` helpers (``assert_close``, ``np_ref``, ...) are re-exported
here: both files are imported under the module name ``conftest``, so whichever one a test
module's ``from conftest import ...`` finds must offer the same names.
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

_parent = importlib.util.spec_from_file_location("fusegen_test_helpers", Path(__file__).parent.parent / "conftest.py")
_helpers = importlib.util.module_from_spec(_parent)
_parent.loader.exec_module(_helpers)
# Every helper, whatever the parent adds later; not its hooks (they are registered already) and
# not its fixtures (``rng`` is redefined below).
globals().update({k: v for k, v in vars(_helpers).items()
                  if not k.startswith(("__", "pytest_")) and k != "rng"})



def pytest_configure(config):
    """Count into the parent conftest's ``PROPERTY_STATS`` (the dict its terminal summary
    prints), not into this module's copy of it. Called when this conftest is registered, before
    any test module imports ``conftest``."""
    parent = str(Path(__file__).parent.parent / "conftest.py")
    for plugin in config.pluginmanager.get_plugins():
        if getattr(plugin, "__file__", None) == parent and isinstance(getattr(plugin, "PROPERTY_STATS", None), dict):
            globals()["PROPERTY_STATS"] = _helpers.PROPERTY_STATS = plugin.PROPERTY_STATS


from _optional import HAVE, PIECES, SIMULATOR  # noqa: E402  (tests/ is on sys.path: its conftest is loaded first)


def _real_gpu() -> bool:
    if os.environ.get("FUSEGEN_CUDA_TESTS", "") in ("", "0"):
        return False  # probing the driver costs time in every CPU-only run: opt in on GPU machines
    try:
        from numba import cuda
        return cuda.is_available()
    except Exception:
        return False


# numba-cuda first: without it numba.cuda is Numba's own deprecated target (its simulator too)
CUDA_TESTS = HAVE["numba-cuda"] and (SIMULATOR or _real_gpu())
REASON = ("CUDA kernel tests need NUMBA_ENABLE_CUDASIM=1 (own pytest process: "
          "NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/cuda) or a GPU with FUSEGEN_CUDA_TESTS=1"
          + ("" if HAVE["numba-cuda"] else f", and {PIECES['numba-cuda'][1]}"))


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    skip = pytest.mark.skip(reason=REASON)
    for item in items:
        if not CUDA_TESTS and here in Path(str(item.fspath)).parents:
            item.add_marker(skip)


@pytest.fixture
def rng():
    import numpy as np
    return np.random.default_rng(20240607)
