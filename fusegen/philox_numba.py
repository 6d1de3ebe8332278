"""The Numba versions of fusegen/philox.py's stream and word-to-value mappings, for the Numba
CPU backend (``@njit``) and, compiled from the same Python functions, numba-cuda
(``cuda_functions()``). The algorithm, formulas and layouts are described in fusegen/philox.py
and docs/random.md; templates/_philox.inc.j2 holds the C++/CUDA twins.

How a kernel uses them: per block ``q`` (four consecutive elements of a 32-bit kind, two of a
float64 kind), one ``block(seed, offset, q)`` call, then a mapping per lane:

    for q in range(q0, q1):
        w0, w1, w2, w3 = block(seed, offset, q)
        out[4 * q] = uniform_f32(w0)
        ...

Written so such a loop vectorizes (tests/test_philox.py reads the LLVM IR): all word arithmetic
is in uint64 registers holding 32-bit values, so Philox's 32 x 32 -> 64-bit products are one
``vpmuludq`` per 4 lanes (AVX2) and the 10 rounds unroll into straight-line code; the key
schedule depends only on the seed and is hoisted by LLVM. ``forceinline=True`` and
``fastmath=False``: the same reasons as in fusegen/vmath_numba.py (a call keeps a loop scalar;
a kernel's ``reassoc`` must not reach the Box-Muller arithmetic).

The ``*_at(seed, offset, i)`` functions compute one element on its own (its whole block, so 4x
or 2x the Philox work of the block loop): for code where an element cannot share its block,
e.g. one CUDA thread per element, and for tests.

Integer typing note: Numba turns a mix of uint64 and int64 into float64, so every constant
here is a ``np.uint64`` and every input is converted with ``np.uint64(...)`` first.
"""
from __future__ import annotations

import functools
import math
import types as _pytypes

import numpy as np
from numba import njit

from .philox import M0, M1, RANDINT_MAX_ATTEMPTS, TWO_PI, W0, W1

__all__ = ["philox4", "block", "word", "uniform_f32", "uniform_f64", "boxmuller_f32", "boxmuller_f64",
           "bernoulli_threshold", "bernoulli", "randint_threshold", "lemire32", "lemire64", "randint_offset",
           "uniform_f32_at", "uniform_f64_at", "normal_f32_at", "normal_f64_at", "bernoulli_at",
           "randint_offset_at", "cuda_functions"]

_JIT = dict(fastmath=False, forceinline=True, error_model="numpy", nogil=True, cache=True)  # disk-cached, as vmath_numba's

_M0, _M1, _W0, _W1 = np.uint64(M0), np.uint64(M1), np.uint64(W0), np.uint64(W1)
_MASK = np.uint64(0xFFFFFFFF)
_ALL_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)
_0, _1, _2, _3, _8, _11, _32 = (np.uint64(v) for v in (0, 1, 2, 3, 8, 11, 32))
_TWO_M24 = np.float32(2.0 ** -24)
_TWO_M32 = 2.0 ** -32
_TWO_M53 = 2.0 ** -53
_TWO_32 = 4294967296.0
_MAX_ATTEMPTS = RANDINT_MAX_ATTEMPTS


# --- the stream ----------------------------------------------------------------------------------
@njit(**_JIT)
def _round(c0, c1, c2, c3, k0, k1):
    """One Philox4x32 round on uint64 registers holding 32-bit words."""
    p0 = c0 * _M0
    p1 = c2 * _M1
    return (p1 >> _32) ^ c1 ^ k0, p1 & _MASK, (p0 >> _32) ^ c3 ^ k1, p0 & _MASK


@njit(**_JIT)
def philox4(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 of counter (c0, c1, c2, c3) under key (k0, k1): four uint32 words. The
    arguments are 32-bit values in any integer type."""
    x0, x1, x2, x3 = np.uint64(c0) & _MASK, np.uint64(c1) & _MASK, np.uint64(c2) & _MASK, np.uint64(c3) & _MASK
    a, b = np.uint64(k0) & _MASK, np.uint64(k1) & _MASK
    x0, x1, x2, x3 = _round(x0, x1, x2, x3, a, b)
    for _ in range(9):
        a = (a + _W0) & _MASK
        b = (b + _W1) & _MASK
        x0, x1, x2, x3 = _round(x0, x1, x2, x3, a, b)
    return np.uint32(x0), np.uint32(x1), np.uint32(x2), np.uint32(x3)


@njit(**_JIT)
def block(seed, offset, q):
    """The four words of block ``q`` of the stream (seed, offset): all uint64 values."""
    s, o, qq = np.uint64(seed), np.uint64(offset), np.uint64(q)
    return philox4(qq & _MASK, qq >> _32, o & _MASK, o >> _32, s & _MASK, s >> _32)


@njit(**_JIT)
def word(w0, w1, w2, w3, lane):
    """Word ``lane`` (0..3) of a block (uint64). Selected with masks, not with conditional
    expressions: Numba turns those into branches, which keep a per-element loop scalar."""
    k = np.uint64(lane)
    m0, m1 = _0 - np.uint64(k == _0), _0 - np.uint64(k == _1)
    m2, m3 = _0 - np.uint64(k == _2), _0 - np.uint64(k == _3)
    return ((np.uint64(w0) & m0) | (np.uint64(w1) & m1)) | ((np.uint64(w2) & m2) | (np.uint64(w3) & m3))


# --- words to values -----------------------------------------------------------------------------
@njit(**_JIT)
def uniform_f32(w):
    """float32 in [0, 1): ``(w >> 8) * 2^-24``."""
    return np.float32((np.uint64(w) & _MASK) >> _8) * _TWO_M24


@njit(**_JIT)
def uniform_f64(lo, hi):
    """float64 in [0, 1): ``((lo + hi 2^32) >> 11) * 2^-53``."""
    x = (np.uint64(lo) & _MASK) | ((np.uint64(hi) & _MASK) << _32)
    return np.float64(x >> _11) * _TWO_M53


@njit(**_JIT)
def boxmuller_f32(wa, wb):
    """Two float32 normals (r cos t, r sin t) from two words (see philox.boxmuller_f32)."""
    u1 = (np.float64(np.uint64(wa) & _MASK) + 1.0) * _TWO_M32
    u2 = np.float64(np.uint64(wb) & _MASK) * _TWO_M32
    r = math.sqrt(-2.0 * math.log(u1))
    t = TWO_PI * u2
    return np.float32(r * math.cos(t)), np.float32(r * math.sin(t))


@njit(**_JIT)
def boxmuller_f64(a_lo, a_hi, b_lo, b_hi):
    """Two float64 normals from a whole block (see philox.boxmuller_f64)."""
    xa = (np.uint64(a_lo) & _MASK) | ((np.uint64(a_hi) & _MASK) << _32)
    xb = (np.uint64(b_lo) & _MASK) | ((np.uint64(b_hi) & _MASK) << _32)
    u1 = np.float64((xa >> _11) + _1) * _TWO_M53
    u2 = np.float64(xb >> _11) * _TWO_M53
    r = math.sqrt(-2.0 * math.log(u1))
    t = TWO_PI * u2
    return r * math.cos(t), r * math.sin(t)


@njit(**_JIT)
def bernoulli_threshold(p):
    """``T = ceil(p 2^32)`` clamped to [0, 2^32] (0 for NaN), as int64: ``w < T`` exactly when
    ``w < p 2^32``. ``p`` is the float64 (or float32) probability; compute T once per p."""
    pd = np.float64(p)
    if not pd > 0.0:
        return np.int64(0)
    if pd >= 1.0:
        return np.int64(4294967296)
    return np.int64(math.ceil(pd * _TWO_32))


@njit(**_JIT)
def bernoulli(w, threshold):
    """True with probability T / 2^32 (``threshold`` from ``bernoulli_threshold``)."""
    return np.int64(np.uint64(w) & _MASK) < threshold


# --- randint -------------------------------------------------------------------------------------
@njit(**_JIT)
def randint_threshold(n):
    """Lemire's threshold for ``n = high - low`` values (uint64, >= 1): 2^32 mod n when
    n <= 2^32, else 2^64 mod n, computed as ((2^64 - 1) mod n + 1) mod n (no wrap-around)."""
    nn = np.uint64(n)
    if nn <= np.uint64(4294967296):
        return np.uint64(4294967296) % nn
    return (_ALL_ONES % nn + _1) % nn


@njit(**_JIT)
def lemire32(w, n, t):
    """(candidate, accepted) of one 32-bit draw for n <= 2^32 values, threshold t."""
    m = (np.uint64(w) & _MASK) * np.uint64(n)
    return m >> _32, (m & _MASK) >= t


@njit(**_JIT)
def _mul64(x, n):
    """(high, low) 64-bit halves of x * n, through 32 x 32-bit products."""
    xl, xh, nl, nh = x & _MASK, x >> _32, n & _MASK, n >> _32
    ll, lh, hl, hh = xl * nl, xl * nh, xh * nl, xh * nh
    mid = (ll >> _32) + (lh & _MASK) + (hl & _MASK)
    return hh + (lh >> _32) + (hl >> _32) + (mid >> _32), ((mid & _MASK) << _32) | (ll & _MASK)


@njit(**_JIT)
def lemire64(lo, hi, n, t):
    """(candidate, accepted) of one 64-bit draw ``lo + hi 2^32`` for n > 2^32 values."""
    x = (np.uint64(lo) & _MASK) | ((np.uint64(hi) & _MASK) << _32)
    h, low = _mul64(x, np.uint64(n))
    return h, low >= t


@njit(**_JIT)
def randint_offset(w0, w1, w2, w3, k0, k1, lane, n, t):
    """randint's value minus low (uint64 in [0, n)) for lane ``lane`` of the block (w0..w3)
    under key (k0, k1): attempt 0 on the block itself, rejected attempts walk the chain of
    blocks (philox.randint_offsets has the definition). ``t = randint_threshold(n)``."""
    nn, tt = np.uint64(n), np.uint64(t)
    b0, b1, b2, b3 = np.uint64(w0), np.uint64(w1), np.uint64(w2), np.uint64(w3)
    cand = _0
    for attempt in range(_MAX_ATTEMPTS):
        if nn <= np.uint64(4294967296):
            cand, ok = lemire32(word(b0, b1, b2, b3, lane), nn, tt)
        else:
            lo = word(b0, b1, b2, b3, lane)
            c0, c1, c2, c3 = philox4(b0, b1, b2, b3, k0, k1)
            b0, b1, b2, b3 = np.uint64(c0), np.uint64(c1), np.uint64(c2), np.uint64(c3)
            cand, ok = lemire64(lo, word(b0, b1, b2, b3, lane), nn, tt)
        if ok:
            break
        c0, c1, c2, c3 = philox4(b0, b1, b2, b3, k0, k1)
        b0, b1, b2, b3 = np.uint64(c0), np.uint64(c1), np.uint64(c2), np.uint64(c3)
    return cand


# --- one element on its own ----------------------------------------------------------------------
@njit(**_JIT)
def uniform_f32_at(seed, offset, i):
    ii = np.uint64(i)
    w0, w1, w2, w3 = block(seed, offset, ii >> _2)
    return uniform_f32(word(w0, w1, w2, w3, ii & _3))


@njit(**_JIT)
def uniform_f64_at(seed, offset, i):
    ii = np.uint64(i)
    w0, w1, w2, w3 = block(seed, offset, ii >> _1)
    j = (ii & _1) << _1
    return uniform_f64(word(w0, w1, w2, w3, j), word(w0, w1, w2, w3, j + _1))


@njit(**_JIT)
def normal_f32_at(seed, offset, i):
    ii = np.uint64(i)
    w0, w1, w2, w3 = block(seed, offset, ii >> _2)
    lane = ii & _3
    c, s = boxmuller_f32(w0, w1) if lane < _2 else boxmuller_f32(w2, w3)
    return c if (lane & _1) == _0 else s


@njit(**_JIT)
def normal_f64_at(seed, offset, i):
    ii = np.uint64(i)
    w0, w1, w2, w3 = block(seed, offset, ii >> _1)
    c, s = boxmuller_f64(w0, w1, w2, w3)
    return c if (ii & _1) == _0 else s


@njit(**_JIT)
def bernoulli_at(seed, offset, i, threshold):
    ii = np.uint64(i)
    w0, w1, w2, w3 = block(seed, offset, ii >> _2)
    return bernoulli(word(w0, w1, w2, w3, ii & _3), threshold)


@njit(**_JIT)
def randint_offset_at(seed, offset, i, n, t):
    ii, s = np.uint64(i), np.uint64(seed)
    w0, w1, w2, w3 = block(seed, offset, ii >> _2)
    return randint_offset(w0, w1, w2, w3, s & _MASK, s >> _32, ii & _3, n, t)


# --- numba-cuda ----------------------------------------------------------------------------------
_ORDER = ("_round", "philox4", "block", "word", "uniform_f32", "uniform_f64", "boxmuller_f32", "boxmuller_f64",
          "bernoulli_threshold", "bernoulli", "randint_threshold", "lemire32", "_mul64", "lemire64",
          "randint_offset", "uniform_f32_at", "uniform_f64_at", "normal_f32_at", "normal_f64_at", "bernoulli_at",
          "randint_offset_at")


@functools.lru_cache(maxsize=None)
def cuda_functions() -> _pytypes.SimpleNamespace:
    """The same functions as numba-cuda device functions, built from their Python source with a
    namespace in which each refers to the others' device versions. Works under the simulator
    too. ``inline="always"`` (Numba-IR inlining, as lower_cuda's helpers): a device function
    compiled on its own asks the driver for the current GPU's compute capability, which
    ``compile_ptx`` without a GPU cannot answer. Philox's products compile to ``mul.wide.u32``
    (on sm_90 one ``IMAD.WIDE.U32``: both halves at once)."""
    from numba import cuda
    ns = dict(globals())
    out = {}
    for name in _ORDER:
        py = globals()[name].py_func
        fn = _pytypes.FunctionType(py.__code__, ns, name, py.__defaults__, py.__closure__)
        fn.__doc__ = py.__doc__
        ns[name] = out[name] = cuda.jit(device=True, inline="always")(fn)
    return _pytypes.SimpleNamespace(**out)
