"""Counter-based random numbers: Philox4x32-10, the mapping of its words to values, and the
NumPy reference every backend must reproduce (``fg.random.reference``).

The specification is docs/random.md; this module is its executable form. In short:

* **The stream.** Philox4x32-10 (Salmon, Moraes, Dror, Shaw, SC'11): a 4 x 32-bit counter and
  a 2 x 32-bit key go through 10 rounds; the Random123 known-answer vectors pass
  (tests/test_philox.py). Element ``i`` (row-major) of a 32-bit kind takes word ``i % 4`` of
  the *block* ``q = i // 4``: Philox4x32-10 of counter ``(q mod 2^32, q >> 32, offset mod
  2^32, offset >> 32)`` and key ``(seed mod 2^32, seed >> 32)``. The float64 kinds use two
  words per element, so their block is ``q = i // 2`` and element ``i`` takes words
  ``2 (i % 2)`` and ``2 (i % 2) + 1`` (normal float64: the whole block makes one pair).
* **Words to values** (all exact integer or IEEE operations, so every backend agrees):

  ========================  =============================================================
  uniform float32           ``(w >> 8) * 2^-24``                          in [0, 1)
  uniform float64           ``(x >> 11) * 2^-53``, ``x = lo + hi * 2^32`` in [0, 1)
  normal float32 (pair)     ``u1 = (w_a + 1) * 2^-32`` in (0, 1], ``u2 = w_b * 2^-32``;
                            ``r = sqrt(-2 log u1)``, ``t = TWO_PI * u2``; ``r cos t`` and
                            ``r sin t`` in float64, each rounded once to float32
  normal float64 (pair)     the same with ``u1 = ((x_a >> 11) + 1) * 2^-53``,
                            ``u2 = (x_b >> 11) * 2^-53`` (53-bit uniforms)
  bernoulli(p)              ``w < p * 2^32`` (exact: ``w < ceil(p 2^32)`` in integers)
  randint(low, high)        Lemire's multiply-shift with rejection; see ``randint_offsets``
  ========================  =============================================================

* **Seeds and offsets** are uint64: an int in [-2^63, 2^64) is taken modulo 2^64 (an int64
  attribute of -1 is the seed 2^64 - 1).

The functions here are vectorized over NumPy arrays of words (uint32) and serve as the
reference; fusegen/philox_numba.py (Numba CPU and numba-cuda) and emitters/templates/_philox.inc.j2 (C++
and CUDA) are the backends' twins of the same formulas.
"""
from __future__ import annotations

import functools
import hashlib
import math
from pathlib import Path

import numpy as np

from . import dtypes as dt
from .errors import AttrError, DTypeError, ShapeError

__all__ = ["M0", "M1", "W0", "W1", "ROUNDS", "TWO_PI", "RANDINT_MAX_ATTEMPTS", "KINDS", "DEFAULT_DTYPES",
           "philox4x32_10", "key_words", "counters", "blocks", "uniform_f32", "uniform_f64", "boxmuller_f32",
           "boxmuller_f64", "bernoulli", "bernoulli_threshold", "bernoulli_p", "lemire32", "lemire64",
           "randint_threshold", "randint_offsets", "reference", "template_data", "source_digest"]

#: Philox4x32's round multipliers and its key schedule's Weyl increments (Salmon et al.).
M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
ROUNDS = 10

#: 2 pi rounded to float64 (== 2 * math.pi): the Box-Muller angle is TWO_PI * u2, one rounding.
TWO_PI = 6.283185307179586

#: randint's draws per element before it gives up rejecting (see ``randint_offsets``): the
#: chance of getting there is below 2^-64 for every range.
RANDINT_MAX_ATTEMPTS = 64

KINDS = ("uniform", "normal", "bernoulli", "randint")
DEFAULT_DTYPES = {"uniform": "float32", "normal": "float32", "bernoulli": "bool", "randint": "int64"}

_U64 = np.uint64
_MASK32 = _U64(0xFFFFFFFF)
_S32, _S11 = _U64(32), _U64(11)
_TWO_M24 = np.float32(2.0 ** -24)
_TWO_M32 = 2.0 ** -32
_TWO_M53 = 2.0 ** -53


# --- the stream ----------------------------------------------------------------------------------
def philox4x32_10(counter, key, rounds: int = ROUNDS) -> np.ndarray:
    """Philox4x32 of ``counter`` (``(..., 4)`` words) under ``key`` (``(..., 2)`` words),
    broadcast against each other; returns the ``(..., 4)`` output words as uint32.

    Each round: ``(hi0, lo0) = M0 * c0``, ``(hi1, lo1) = M1 * c2`` (64-bit products split into
    32-bit halves), then ``c = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)``; the key is bumped by
    ``(W0, W1)`` (mod 2^32) before every round but the first. ``rounds`` is for the Random123
    known-answer vectors of Philox4x32-7; fusegen's stream always uses 10."""
    c = np.asarray(counter, dtype=_U64)
    k = np.asarray(key, dtype=_U64)
    if c.shape[-1:] != (4,) or k.shape[-1:] != (2,):
        raise ShapeError(f"philox4x32_10: counter must have 4 words and key 2 in the last axis, "
                         f"got shapes {c.shape} and {k.shape}")
    if (c > _MASK32).any() or (k > _MASK32).any():
        raise AttrError("philox4x32_10: counter and key words must be 32-bit unsigned integers")
    c0, c1, c2, c3 = np.broadcast_arrays(*(c[..., j] for j in range(4)), k[..., 0])[:4]
    k0, k1 = np.broadcast_arrays(k[..., 0], k[..., 1], c0)[:2]
    for r in range(rounds):
        if r:
            k0, k1 = (k0 + _U64(W0)) & _MASK32, (k1 + _U64(W1)) & _MASK32
        p0, p1 = c0 * _U64(M0), c2 * _U64(M1)  # < 2^64: exact in uint64
        c0, c1, c2, c3 = (p1 >> _S32) ^ c1 ^ k0, p1 & _MASK32, (p0 >> _S32) ^ c3 ^ k1, p0 & _MASK32
    return np.stack([c0, c1, c2, c3], axis=-1).astype(np.uint32)


def _u64(name: str, value) -> int:
    """A seed or offset as the uint64 it stands for (ints in [-2^63, 2^64), modulo 2^64)."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise AttrError(f"fg.random: {name} must be an integer (uint64), got {type(value).__name__} {value!r}")
    v = int(value)
    if not -(1 << 63) <= v < (1 << 64):
        raise AttrError(f"fg.random: {name}={v} does not fit in 64 bits (uint64, or int64 taken modulo 2^64)")
    return v % (1 << 64)


def key_words(seed) -> tuple[int, int]:
    """The Philox key of a seed: ``(seed mod 2^32, seed >> 32)`` of its uint64 value."""
    s = _u64("seed", seed)
    return s & 0xFFFFFFFF, s >> 32


def counters(q, offset=0) -> np.ndarray:
    """The ``(len(q), 4)`` counters of blocks ``q`` (uint64 array-like) under ``offset``."""
    q = np.asarray(q, dtype=_U64).reshape(-1)
    o = _u64("offset", offset)
    out = np.empty((q.size, 4), dtype=_U64)
    out[:, 0], out[:, 1] = q & _MASK32, q >> _S32
    out[:, 2], out[:, 3] = o & 0xFFFFFFFF, o >> 32
    return out


def blocks(seed, offset, q) -> np.ndarray:
    """The ``(len(q), 4)`` output words of blocks ``q`` of the stream (seed, offset)."""
    return philox4x32_10(counters(q, offset), np.array(key_words(seed), dtype=_U64))


# --- words to values -----------------------------------------------------------------------------
def uniform_f32(w) -> np.ndarray:
    """float32 in [0, 1): the word's top 24 bits times 2^-24 (exact; 1 - 2^-24 at most)."""
    return (np.asarray(w, np.uint32) >> np.uint32(8)).astype(np.float32) * _TWO_M24


def _pair64(lo, hi) -> np.ndarray:
    """Two words as one 64-bit value: the first word in stream order is the low half."""
    return np.asarray(lo, np.uint32).astype(_U64) | (np.asarray(hi, np.uint32).astype(_U64) << _S32)


def uniform_f64(lo, hi) -> np.ndarray:
    """float64 in [0, 1): the top 53 bits of ``lo + hi * 2^32`` times 2^-53 (exact)."""
    return (_pair64(lo, hi) >> _S11).astype(np.float64) * _TWO_M53


def boxmuller_f32(wa, wb) -> tuple[np.ndarray, np.ndarray]:
    """Two float32 normals from two words: ``u1 = (wa + 1) 2^-32`` in (0, 1] (so log(0)
    never happens), ``u2 = wb 2^-32`` in [0, 1); ``r = sqrt(-2 log u1)``, ``t = TWO_PI u2``;
    returns ``(r cos t, r sin t)``, computed in float64 and each rounded once to float32.
    |value| <= sqrt(64 ln 2) ~= 6.66."""
    u1 = (np.asarray(wa, np.uint32).astype(np.float64) + 1.0) * _TWO_M32
    u2 = np.asarray(wb, np.uint32).astype(np.float64) * _TWO_M32
    r = np.sqrt(-2.0 * np.log(u1))
    t = TWO_PI * u2
    return (r * np.cos(t)).astype(np.float32), (r * np.sin(t)).astype(np.float32)


def boxmuller_f64(a_lo, a_hi, b_lo, b_hi) -> tuple[np.ndarray, np.ndarray]:
    """Two float64 normals from four words (one whole block): ``u1 = ((x_a >> 11) + 1) 2^-53``
    in (0, 1], ``u2 = (x_b >> 11) 2^-53`` in [0, 1) with ``x_a = a_lo + a_hi 2^32`` and
    ``x_b = b_lo + b_hi 2^32``; then as ``boxmuller_f32``, without the final rounding.
    |value| <= sqrt(106 ln 2) ~= 8.57."""
    u1 = ((_pair64(a_lo, a_hi) >> _S11) + _U64(1)).astype(np.float64) * _TWO_M53
    u2 = (_pair64(b_lo, b_hi) >> _S11).astype(np.float64) * _TWO_M53
    r = np.sqrt(-2.0 * np.log(u1))
    t = TWO_PI * u2
    return r * np.cos(t), r * np.sin(t)


def bernoulli_p(p, shape=()) -> np.ndarray:
    """The probability as the kernels see it, widened (exactly) to float64: a Python float or
    int is a float *attribute*, which the AOT ABI carries as a C++ ``float``, so it is rounded
    to float32 first in every backend; a NumPy array or scalar (a tensor) keeps its dtype."""
    if isinstance(p, (bool, np.bool_)):
        raise AttrError(f"fg.random.bernoulli: p must be a float, got bool {p!r}")
    if type(p) in (int, float):  # not np.float64, a float subclass: a NumPy scalar is a tensor
        return np.full(shape, np.float32(p), np.float64)
    a = np.asarray(p)
    if a.dtype.kind != "f":
        raise DTypeError(f"fg.random.bernoulli: p must be a float (attribute or tensor), got dtype {a.dtype}")
    try:
        return np.broadcast_to(a.astype(np.float64), shape)
    except ValueError:
        raise ShapeError(f"fg.random.bernoulli: p of shape {a.shape} does not broadcast to {shape}") from None


def bernoulli(w, p) -> np.ndarray:
    """True with probability p: ``w < p * 2^32``, compared exactly (``w`` converts to float64
    exactly and multiplying by 2^32 is exact), so p <= 0 and NaN give False, p >= 1 True.
    ``p`` is float64 here (see ``bernoulli_p`` for how a float32 or attribute p widens)."""
    return np.asarray(w, np.uint32).astype(np.float64) < np.asarray(p, np.float64) * 4294967296.0


def bernoulli_threshold(p: float) -> int:
    """``bernoulli``'s integer form: ``w < T`` with ``T = ceil(p 2^32)`` clamped to [0, 2^32]
    (0 for NaN). For an integer w, ``w < p 2^32`` exactly when ``w < ceil(p 2^32)``: kernels
    with a constant p compare words against T (a vectorizable int64 compare)."""
    p = float(p)
    if not p > 0.0:
        return 0
    return 1 << 32 if p >= 1.0 else math.ceil(p * 4294967296.0)


# --- randint -------------------------------------------------------------------------------------
def randint_threshold(n: int) -> int:
    """Lemire's rejection threshold for a range of ``n`` values: ``2^32 mod n`` when the range
    is drawn from single words (n <= 2^32), else ``2^64 mod n``."""
    return (1 << 32) % n if n <= (1 << 32) else (1 << 64) % n


def lemire32(w, n: int) -> tuple[np.ndarray, np.ndarray]:
    """One 32-bit draw for a range of n <= 2^32 values: ``m = w * n`` (64-bit, exact); the
    candidate is ``m >> 32`` in [0, n), accepted when ``m mod 2^32 >= 2^32 mod n`` (then every
    candidate has exactly floor(2^32 / n) accepted words). Returns (candidate, accepted)."""
    m = np.asarray(w, np.uint32).astype(_U64) * _U64(n)
    return m >> _S32, (m & _MASK32) >= _U64(randint_threshold(n))


def _mul64(x, n):
    """(high, low) 64-bit halves of the 128-bit product of uint64 arrays, through 32-bit halves
    (the way the Numba and portable C++ versions compute it)."""
    xl, xh = x & _MASK32, x >> _S32
    nl, nh = n & _MASK32, n >> _S32
    ll, lh, hl, hh = xl * nl, xl * nh, xh * nl, xh * nh
    mid = (ll >> _S32) + (lh & _MASK32) + (hl & _MASK32)  # < 3 * 2^32
    return hh + (lh >> _S32) + (hl >> _S32) + (mid >> _S32), ((mid & _MASK32) << _S32) | (ll & _MASK32)


def lemire64(lo, hi, n: int) -> tuple[np.ndarray, np.ndarray]:
    """One 64-bit draw ``x = lo + hi 2^32`` for a range of 2^32 < n < 2^64 values: the
    candidate is the high half of ``x * n``, accepted when its low half is ``>= 2^64 mod n``."""
    h, low = _mul64(_pair64(lo, hi), np.full(np.shape(lo), n, _U64))
    return h, low >= _U64(randint_threshold(n))


def randint_offsets(seed, offset, i, n: int) -> np.ndarray:
    """``randint``'s value minus ``low`` (uint64 in [0, n)) for the elements ``i`` (flat
    indices) of a range of ``n = high - low`` values, 1 <= n < 2^64.

    The draws of element i come from its lane ``j = i % 4`` of a chain of blocks: ``B_0`` is its
    block (counter ``(q, offset)``, q = i // 4, as every 32-bit kind) and ``B_k`` is Philox4x32-10
    of ``B_{k-1}``'s four words (as the counter), under the same key; ``d_k`` = word j of B_k.
    Attempt ``a`` (a = 0, 1, ...) draws ``d_a`` (``lemire32``) when n <= 2^32, else
    ``x = d_{2a} + d_{2a+1} 2^32`` (``lemire64``). The first accepted candidate is the value;
    attempt 0 needs only the element's own block, so kernels compute it four per block and
    vectorized, and walk the chain only where it was rejected (probability ``threshold / 2^32``,
    below 2^-28 for n <= 16). An attempt is rejected with probability below 1/2 for every n, so
    RANDINT_MAX_ATTEMPTS = 64 attempts (at most 64 Philox calls, 128 when n > 2^32) all fail
    with probability below 2^-64; then the last candidate is the value (the only bias, of that
    probability)."""
    if not 1 <= n < (1 << 64):
        raise AttrError(f"fg.random.randint: high - low = {n} must be in [1, 2^64)")
    i = np.asarray(i, _U64).reshape(-1)
    lane = (i & _U64(3)).astype(np.intp)
    key = np.array(key_words(seed), _U64)
    block = blocks(seed, offset, i >> _U64(2)).astype(_U64)
    out = np.zeros(i.size, _U64)
    todo = np.arange(i.size)
    wide = n > (1 << 32)
    for attempt in range(RANDINT_MAX_ATTEMPTS):
        rows = np.arange(todo.size)
        if wide:
            lo = block[rows, lane[todo]]
            block = philox4x32_10(block, key).astype(_U64)
            cand, ok = lemire64(lo, block[rows, lane[todo]], n)
        else:
            cand, ok = lemire32(block[rows, lane[todo]], n)
        if attempt == RANDINT_MAX_ATTEMPTS - 1:
            ok[:] = True
        out[todo[ok]] = cand[ok]
        todo, block = todo[~ok], block[~ok]
        if todo.size == 0:
            break
        block = philox4x32_10(block, key).astype(_U64)
    return out


# --- the whole array -----------------------------------------------------------------------------
def _shape(shape) -> tuple[int, ...]:
    def is_int(d):
        return isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_))
    dims = (shape,) if is_int(shape) else shape
    if isinstance(dims, (tuple, list)) and all(is_int(d) and d >= 0 for d in dims):
        return tuple(int(d) for d in dims)
    raise ShapeError(f"fg.random: shape must be a tuple of non-negative ints, got {shape!r}")


def _values(kind: str, seed, offset, start: int, count: int, name: str, p, n: int) -> np.ndarray:
    """Elements [start, start + count) of the stream as a flat array (before the final dtype
    conversion of randint): the blocks covering them, each mapped to its 4 (or 2) values."""
    if kind == "randint":
        return randint_offsets(seed, offset, np.arange(count, dtype=_U64) + _U64(start), n)
    per = 2 if name == "float64" else 4
    q0 = start // per
    w = blocks(seed, offset, np.arange(-(-(start + count) // per) - q0, dtype=_U64) + _U64(q0))
    if kind == "uniform" and per == 4:
        vals = uniform_f32(w)
    elif kind == "uniform":
        vals = uniform_f64(w[:, 0::2], w[:, 1::2])
    elif kind == "normal" and per == 4:
        c01, s01 = boxmuller_f32(w[:, 0], w[:, 1])
        c23, s23 = boxmuller_f32(w[:, 2], w[:, 3])
        vals = np.stack([c01, s01, c23, s23], axis=1)
    elif kind == "normal":
        vals = np.stack(boxmuller_f64(w[:, 0], w[:, 1], w[:, 2], w[:, 3]), axis=1)
    else:
        vals = w
    first = start - q0 * per
    flat = vals.reshape(-1)[first:first + count]
    return bernoulli(flat, p) if kind == "bernoulli" else flat


def _check_params(kind: str, name: str, p, low, high, shape) -> tuple[object, int]:
    """Validates the kind's parameters and dtype; returns (p as float64 array, n = high - low)."""
    if kind in ("uniform", "normal"):
        if name not in ("float32", "float64"):
            raise DTypeError(f"fg.random.{kind}: dtype must be float32 or float64, got {name}")
        return None, 0
    if kind == "bernoulli":
        if name != "bool":
            raise DTypeError(f"fg.random.bernoulli: the result is bool, got dtype={name}")
        return bernoulli_p(p, shape).reshape(-1), 0
    d = np.dtype(name)
    if d.kind not in "iu":
        raise DTypeError(f"fg.random.randint: dtype must be an integer dtype, got {name}")
    for label, v in (("low", low), ("high", high)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise AttrError(f"fg.random.randint: {label} must be an int, got {type(v).__name__} {v!r}")
    info = np.iinfo(d)
    if not info.min <= int(low) < int(high) <= int(info.max) + 1:
        raise AttrError(f"fg.random.randint: need {info.min} <= low < high <= {int(info.max) + 1} for {name}, "
                        f"got low={low}, high={high}")
    if int(high) - int(low) >= 1 << 64:
        raise AttrError(f"fg.random.randint: high - low = {int(high) - int(low)} must be below 2^64")
    return None, int(high) - int(low)


def reference(kind: str, seed, shape, *, offset=0, dtype=None, p=None, low=None, high=None,
              start: int = 0) -> np.ndarray:
    """fusegen's random numbers as a whole array, computed with NumPy: the result every backend
    must reproduce (uniform, bernoulli and randint bit for bit; normal within 2 ulp).

    ``kind``: "uniform" (in [0, 1); float32 or float64), "normal" (mean 0, variance 1; float32
    or float64), "bernoulli" (bool, True with probability ``p``: see ``bernoulli_p`` for how p
    is rounded; p may be an array broadcast to ``shape``), "randint" (integers in [``low``,
    ``high``), NumPy's integer dtypes, default int64). ``seed`` and ``offset``: uint64 (ints in
    [-2^63, 2^64), modulo 2^64). Element k of the row-major result is element index
    ``start + k`` of the stream (``start`` > 0 shows a part of a larger array)."""
    if kind not in KINDS:
        raise ValueError(f"fg.random.reference: unknown kind {kind!r}; use one of {', '.join(KINDS)}")
    given = {k for k, v in {"p": p, "low": low, "high": high}.items() if v is not None}
    wanted = {"bernoulli": {"p"}, "randint": {"low", "high"}}.get(kind, set())
    if given != wanted:
        order = ("p", "low", "high")
        need = ", ".join(k for k in order if k in wanted) or "no parameters"
        got = ", ".join(k for k in order if k in given) or "none"
        raise AttrError(f"fg.random.{kind}: takes {need}; got {got}")
    shape = _shape(shape)
    size = math.prod(shape)
    _u64("seed", seed), _u64("offset", offset)
    if isinstance(start, (bool, np.bool_)) or not isinstance(start, (int, np.integer)) \
            or not 0 <= int(start) <= (1 << 64) - size:
        raise AttrError(f"fg.random.reference: start={start!r} must be an int with start + size <= 2^64")
    name = DEFAULT_DTYPES[kind] if dtype is None else dt.as_dtype(dtype).name
    pf, n = _check_params(kind, name, p, low, high, shape)
    flat = _values(kind, seed, offset, int(start), size, name, pf, n)
    if kind == "randint":
        # low + v wraps in uint64 exactly as in the kernels; the sum lies in [low, high), so
        # the conversion to the result dtype is exact.
        flat = flat + _U64(int(low) % (1 << 64))
        flat = flat.view(np.int64) if np.dtype(name).kind == "i" else flat
    return flat.astype(name).reshape(shape)


# --- for the backends ----------------------------------------------------------------------------
def template_data() -> dict:
    """The constants as C++ literals, for emitters/templates/_philox.inc.j2 (rendered as ``philox``)."""
    return dict(m0=f"0x{M0:08X}u", m1=f"0x{M1:08X}u", w0=f"0x{W0:08X}u", w1=f"0x{W1:08X}u", rounds=ROUNDS,
                two_pi=repr(TWO_PI), max_attempts=RANDINT_MAX_ATTEMPTS)


@functools.lru_cache(maxsize=None)
def source_digest() -> str:
    """Hash of this implementation and its Numba twin: a generated Numba source that inlines
    the Numba functions names it, so Numba's disk cache never serves an older version."""
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for name in ("philox.py", "philox_numba.py", "emitters/templates/_philox.inc.j2"):
        h.update((here / name).read_bytes())
    return h.hexdigest()[:16]
