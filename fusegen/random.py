"""``fg.random``: fusegen's counter-based random numbers (specification: docs/random.md).

Today: ``reference``, the NumPy implementation every backend reproduces. The traced functions
(``uniform``, ``normal``, ``bernoulli``, ``randint`` usable inside ``@fg.op``) come with the IR
integration; their kernels use fusegen/philox_numba.py and templates/_philox.inc.j2.
"""
from __future__ import annotations

from .philox import DEFAULT_DTYPES, KINDS, reference

__all__ = ["reference", "KINDS", "DEFAULT_DTYPES"]
