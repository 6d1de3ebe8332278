"""The Numba functions that fused kernels call for ``Op.RANDOM`` (fusegen/graph/rng.py), built on
fusegen/philox_numba.py's stream and word mappings (the specification: docs/random.md).

Two forms, chosen per random node by fusegen/lower/rng.py:

* **per element** (``*_at``, ``word_at``, ``randint_at``): element ``i`` computes its own block.
  Used where the counter is not contiguous in the loop (a transposed or strided view of a random
  tensor, a broadcast one) and in numba-cuda kernels (one thread per element). 4x (float64: 2x)
  the Philox work of the block form.
* **fills** (``fill_<kind>``): elements ``[i0, i0 + n)`` into a buffer, one Philox call per four
  elements (two for float64): the block loop vectorizes (tests/test_philox.py reads its LLVM IR;
  Philox's products become ``vpmuludq``); the partial blocks at either end use the ``*_at`` forms.
  A Numba CPU kernel fills a tile-sized buffer before the tile's loop when the counter runs
  contiguously along it, then reads the buffer there (fusegen/lower_cpu.py).

Integer typing as in philox_numba: everything is converted to ``np.uint64`` first.
"""
from __future__ import annotations

import functools
import hashlib
import types as _pytypes
from pathlib import Path

import numpy as np
from numba import njit

from . import philox
from .philox_numba import (block, normal_f32_at, normal_f64_at, randint_offset_at, randint_threshold, uniform_f32_at,
                           uniform_f64_at, word)

_JIT = dict(fastmath=False, forceinline=True, error_model="numpy", nogil=True, cache=True)  # disk-cached, as vmath_numba's
_FILL_JIT = dict(fastmath=False, error_model="numpy", nogil=True)
_MASK = np.uint64(0xFFFFFFFF)
_2, _3, _32 = np.uint64(2), np.uint64(3), np.uint64(32)
_TWO_32 = 4294967296.0


# --- per element ---------------------------------------------------------------------------------
@njit(**_JIT)
def word_at(seed, offset, i):
    """Word ``i % 4`` of block ``i // 4``: the 32-bit word bernoulli compares."""
    ii = np.uint64(i)
    w0, w1, w2, w3 = block(seed, offset, ii >> _2)
    return word(w0, w1, w2, w3, ii & _3)


@njit(**_JIT)
def bernoulli_p(w, p):
    """``w < p * 2^32``, exact in float64 (philox.bernoulli): branch-free, for any float p
    (a tensor's, per element; p <= 0 and NaN give False, p >= 1 True)."""
    return np.float64(np.uint64(w) & _MASK) < np.float64(p) * _TWO_32


@njit(**_JIT)
def randint_at(seed, offset, i, low, high):
    """``low +`` randint's offset of element ``i`` for ``[low, high)``, as uint64 (low and high
    taken modulo 2^64: the span is right whenever it is below 2^64, which the rules check)."""
    n = np.uint64(high) - np.uint64(low)
    return np.uint64(low) + randint_offset_at(seed, offset, i, n, randint_threshold(n))


# --- fills: four elements per Philox call --------------------------------------------------------
# One template per kind: ``{at}`` the per-element form (head and tail), ``{per}`` elements per
# block, ``{store}`` the block's stores at v[e..e+per-1] from words w0..w3. The block loop
# stores through ``v = buf[head:]`` at ``per * b``: an index LLVM knows is not negative (Numba's
# wrap-around check on ``head + per * b`` kept the loop scalar, 15x slower).
_FILL = '''
def fill(buf, n, seed, offset, i0{extra}):
    s, o, start = np.uint64(seed), np.uint64(offset), np.uint64(i0)
{setup}    head = min(n, np.int64((np.uint64({per}) - start % np.uint64({per})) % np.uint64({per})))
    nb = (n - head) // {per}
    q0 = (start + np.uint64(head)) // np.uint64({per})
    for k in range(head):
        buf[k] = {at}
    v = buf[head:]
    for b in range(nb):
        w0, w1, w2, w3 = block(s, o, q0 + np.uint64(b))
        e = {per} * b
{store}
    for k in range(head + {per} * nb, n):
        buf[k] = {at}
'''
_KINDS = {
    "uniform_f32": dict(per=4, at="uniform_f32_at(s, o, start + np.uint64(k))", store="""\
        v[e] = uniform_f32(w0)
        v[e + 1] = uniform_f32(w1)
        v[e + 2] = uniform_f32(w2)
        v[e + 3] = uniform_f32(w3)"""),
    "uniform_f64": dict(per=2, at="uniform_f64_at(s, o, start + np.uint64(k))", store="""\
        v[e] = uniform_f64(w0, w1)
        v[e + 1] = uniform_f64(w2, w3)"""),
    "normal_f32": dict(per=4, at="normal_f32_at(s, o, start + np.uint64(k))", store="""\
        c01, s01 = boxmuller_f32(w0, w1)
        c23, s23 = boxmuller_f32(w2, w3)
        v[e] = c01
        v[e + 1] = s01
        v[e + 2] = c23
        v[e + 3] = s23"""),
    "normal_f64": dict(per=2, at="normal_f64_at(s, o, start + np.uint64(k))", store="""\
        c, sn = boxmuller_f64(w0, w1, w2, w3)
        v[e] = c
        v[e + 1] = sn"""),
    "words": dict(per=4, at="word_at(s, o, start + np.uint64(k))", store="""\
        v[e] = w0
        v[e + 1] = w1
        v[e + 2] = w2
        v[e + 3] = w3"""),
    # randint: attempt 0 of all four lanes shares the block; a rejected lane walks its chain
    "randint": dict(per=4, extra=", low, high", setup="""\
    lo = np.uint64(low)
    span = np.uint64(high) - lo
    t = randint_threshold(span)
    k0, k1 = s & _MASK, s >> _32
""", at="lo + randint_offset_at(s, o, start + np.uint64(k), span, t)", store="""\
        for j in range(4):
            v[e + j] = lo + randint_offset(w0, w1, w2, w3, k0, k1, j, span, t)"""),
}


FILL_KINDS = tuple(_KINDS)
FILL_JIT = dict(_FILL_JIT, cache=True)


def fills_source() -> str:
    """A Python module of the fills, ``fill_<kind>`` (plain functions: the caller compiles them
    with ``FILL_JIT``). It is written to a file so that Numba's disk cache keeps their machine
    code (fusegen/lower/rng.py: ``fills()``); the digest in its header is part of that cache's key."""
    head = [f"# fusegen.rng_numba {source_digest()}: the fills, four elements per Philox call",
            "import numpy as np",
            "from fusegen.philox_numba import (block, boxmuller_f32, boxmuller_f64, normal_f32_at, normal_f64_at,",
            "                                  randint_offset, randint_offset_at, randint_threshold, uniform_f32,",
            "                                  uniform_f32_at, uniform_f64, uniform_f64_at)",
            "from fusegen.rng_numba import word_at",
            "_MASK, _32 = np.uint64(0xFFFFFFFF), np.uint64(32)", ""]
    body = [_FILL.format(**{"extra": "", "setup": "", **spec}).replace("def fill(", f"def fill_{kind}(")
            for kind, spec in _KINDS.items()]
    return "\n".join(head) + "\n".join(body)


# --- numba-cuda ----------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def cuda_functions() -> _pytypes.SimpleNamespace:
    """The per-element functions as numba-cuda device functions (philox_numba's device twins
    underneath; ``inline="always"`` for the same reason as there)."""
    from numba import cuda
    from .philox_numba import cuda_functions as philox_cuda
    base = vars(philox_cuda())
    ns = dict(globals(), **base)
    out = dict(base)
    for name in ("word_at", "bernoulli_p", "randint_at"):
        py = globals()[name].py_func
        fn = _pytypes.FunctionType(py.__code__, ns, name, py.__defaults__, py.__closure__)
        ns[name] = out[name] = cuda.jit(device=True, inline="always")(fn)
    return _pytypes.SimpleNamespace(**out)


@functools.lru_cache(maxsize=None)
def source_digest() -> str:
    """The stream's digest (philox.source_digest) and this module's: generated kernels that call
    these functions name it, so Numba's disk cache never serves machine code of an older version."""
    h = hashlib.sha256(philox.source_digest().encode())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()[:16]


__all__ = ["word_at", "bernoulli_p", "randint_at", "uniform_f32_at", "uniform_f64_at", "normal_f32_at",
           "normal_f64_at", "FILL_KINDS", "FILL_JIT", "fills_source", "cuda_functions", "source_digest"]
