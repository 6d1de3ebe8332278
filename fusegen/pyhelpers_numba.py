"""The CPU kernels' special-case helpers (``fusegen/lower/pyhelpers.py``'s text over NumPy, and
NumPy's NaN-propagating ``_fmax``/``_fmin``), compiled once per process and shared by every
generated kernel, which imports them from here.

Why shared: a helper defined inside each generated module is a new dispatcher there, typed and
compiled again for every kernel that calls it (0.1-0.2 s each; a test run compiles a few hundred
kernels). From one module each (helper, signature) compiles once per process; the kernel that
calls it links the machine code in and LLVM inlines it (``forceinline``: ``alwaysinline``), as
before, so the kernels' loops are unchanged.

The flags are explicit (no ``fastmath``): a dispatcher shared by callers compiled with different
flags must not depend on which caller typed it first. The generated sources carry ``DIGEST`` (of
this text) in their header, so Numba's disk cache never serves a kernel that inlined an older
helper.
"""
from __future__ import annotations

import hashlib

import numpy as np  # noqa: F401  (the helpers' text calls np.fmod, np.copysign, ...)
from numba import njit

from .lower.pyhelpers import HELPER_NAMES, python_helpers
from .lower.pysource import NAN_HELPERS

_TEXT = NAN_HELPERS + python_helpers("np")
#: what a generated source names, so a change here is a change of its content (and cache key)
DIGEST = hashlib.sha256(_TEXT.encode()).hexdigest()[:16]
#: every name a generated CPU kernel imports from here
NAMES = ("_fmax", "_fmin") + HELPER_NAMES

exec(compile(_TEXT, __file__ + " (fusegen.lower.pyhelpers text)", "exec"), globals())
for _name in NAMES:
    globals()[_name] = njit(forceinline=True, error_model="numpy", nogil=True)(globals()[_name])
del _name
