"""``fg.random``: fusegen's counter-based random numbers (specification: docs/random.md).

``uniform``, ``normal``, ``bernoulli`` and ``randint`` are used inside ``@fg.op`` bodies: each
builds an ``Op.RANDOM`` node over an element counter (fusegen/graph/rng.py), so random tensors
fuse, take views and broadcast like any elementwise value, and ``fg.grad`` recomputes them.
``reference`` is the NumPy implementation every backend reproduces (fusegen/philox.py).
"""
from __future__ import annotations

from .graph.rng import bernoulli, normal, randint, uniform
from .philox import DEFAULT_DTYPES, KINDS, reference

__all__ = ["uniform", "normal", "bernoulli", "randint", "reference", "KINDS", "DEFAULT_DTYPES"]
