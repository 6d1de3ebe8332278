"""Tests of fusegen's counter-based random numbers (fusegen/philox.py, fusegen/philox_numba.py,
templates/_philox.inc.j2; the specification is docs/random.md).

(a) The reference: Random123's known-answer vectors, the element -> counter layout, the word
    -> value formulas on hand-made words, parameter rounding and errors, randint's acceptance
    rule (exact counts), statistics on 10^6 samples.
(b) Generated code: the Numba block loop and the C++ block loops are vector code
    (vpmuludq on ymm registers, g++'s -fopt-info-vec); numba-cuda and nvcc compile the device
    versions for sm_90 (PTX through ptxas).
(c) Bit identity with the reference: Numba CPU (block loops and one element at a time) and the
    C++ harness (tests/philox_harness.cc), over seeds up to 2^64 - 1, offsets, starts whose
    block index crosses 2^32, partial blocks at both ends; normal within 2 ulp. The CUDA
    simulator's checks are in tests/cuda/test_philox_cuda.py.
"""
from __future__ import annotations

import ctypes
import math
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fusegen import philox as P
from fusegen.errors import AttrError, DTypeError, ShapeError

from _optional import require

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE.parent / "fusegen" / "emitters" / "templates"

# Random123's tests/kat_vectors (DEShawResearch/random123, lines 24-29): counter, key, result.
KAT = [
    (7, [0, 0, 0, 0], [0, 0], [0x5F6FB709, 0x0D893F64, 0x4F121F81, 0x4F730A48]),
    (7, [0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2, [0x5207DDC2, 0x45165E59, 0x4D8EE751, 0x8C52F662]),
    (7, [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0],
     [0x4DFCCABA, 0x190A87F0, 0xC47362BA, 0xB6B5242A]),
    (10, [0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    (10, [0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    (10, [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0],
     [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]),
]
KAT10 = [k for k in KAT if k[0] == 10]

SEEDS = [0, 1, 0xFFFFFFFF, 1 << 32, (1 << 32) + 12345, 0x0123456789ABCDEF, (1 << 63), (1 << 64) - 1]
OFFSETS = [0, 1, (1 << 32) - 1, (1 << 32) + 7, (1 << 64) - 1]
# (start, count): partial blocks at both ends, and block indices crossing 2^32 (32-bit kinds:
# element 4 * 2^32; float64 kinds: element 2 * 2^32).
SPANS = [(0, 37), (3, 61), (4 * (1 << 32) - 9, 22), (2 * (1 << 32) - 5, 13), ((1 << 62) + 1, 10)]
RANGES = [1, 6, 1000, 3 << 30, (1 << 31) + 1, 1 << 32, (1 << 32) + 1, (1 << 63) + 1, (1 << 64) - 1]


def ulps(a, b) -> np.ndarray:
    """Steps between float arrays of one dtype (+0.0 and -0.0 are 0 apart)."""
    a, b = np.asarray(a), np.asarray(b)
    ity = {4: np.int32, 8: np.int64}[a.dtype.itemsize]

    def key(v):
        i = v.view(ity).astype(object if ity is np.int64 else np.int64)
        return np.where(i < 0, -(i & np.iinfo(ity).max), i)
    return np.abs(key(a) - key(b)).astype(np.float64)


def render_partial() -> str:
    import jinja2
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    return env.get_template("_philox.inc.j2").render(philox=P.template_data())


# --- (a) the reference ---------------------------------------------------------------------------
@pytest.mark.parametrize("rounds,ctr,key,want", KAT)
def test_reference_passes_random123_known_answers(rounds, ctr, key, want):
    got = P.philox4x32_10(np.array(ctr, np.uint32), np.array(key, np.uint32), rounds=rounds)
    assert got.dtype == np.uint32 and got.tolist() == want


def test_reference_is_vectorized_over_counters_and_keys():
    ctr = np.array([k[1] for k in KAT10], np.uint32)
    key = np.array([k[2] for k in KAT10], np.uint32)
    assert P.philox4x32_10(ctr, key).tolist() == [k[3] for k in KAT10]
    # one key broadcast against many counters
    assert P.philox4x32_10(ctr[:2], np.uint32([0, 0])).tolist()[0] == KAT10[0][3]
    with pytest.raises(ShapeError):
        P.philox4x32_10([1, 2, 3], [0, 0])
    with pytest.raises(AttrError):
        P.philox4x32_10([1 << 32, 0, 0, 0], [0, 0])


def test_element_layout_counter_and_key():
    seed, offset = 0x0123456789ABCDEF, (5 << 32) | 9
    q = np.array([0, 1, (1 << 32) + 3], np.uint64)
    ctr = P.counters(q, offset)
    assert ctr.tolist() == [[0, 0, 9, 5], [1, 0, 9, 5], [3, 1, 9, 5]]
    assert P.key_words(seed) == (0x89ABCDEF, 0x01234567)
    words = P.philox4x32_10(ctr.astype(np.uint32), np.uint32([0x89ABCDEF, 0x01234567]))
    assert (P.blocks(seed, offset, q) == words).all()
    # 32-bit kinds: element i is word i % 4 of block i // 4
    u = P.reference("uniform", seed, 12, offset=offset)
    w = P.blocks(seed, offset, np.arange(3, dtype=np.uint64)).reshape(-1)
    assert (u == (w >> 8).astype(np.float32) * np.float32(2.0 ** -24)).all()
    # float64: element i takes words 2 (i % 2) (low half) and 2 (i % 2) + 1 of block i // 2
    d = P.reference("uniform", seed, 6, offset=offset, dtype="float64")
    x = w[0::2].astype(np.uint64) | (w[1::2].astype(np.uint64) << np.uint64(32))
    assert (d == (x >> np.uint64(11)).astype(np.float64) * 2.0 ** -53).all()
    # a negative seed or offset is its uint64 value
    assert (P.reference("uniform", -1, 8, offset=-2) == P.reference("uniform", (1 << 64) - 1, 8,
                                                                     offset=(1 << 64) - 2)).all()
    # start shows the same elements as a larger array
    big = P.reference("normal", 3, (5, 7))
    assert (P.reference("normal", 3, (30,), start=5) == big.reshape(-1)[5:]).all()


def test_word_to_value_formulas_at_their_extremes():
    w = np.array([0, 0xFF, 0x100, 0xFFFFFFFF], np.uint32)
    assert P.uniform_f32(w).tolist() == [0.0, 0.0, 2.0 ** -24, 1 - 2.0 ** -24]
    z = np.uint32([0, 0xFFFFFFFF])
    assert P.uniform_f64(z, z).tolist() == [0.0, 1 - 2.0 ** -53]
    assert P.uniform_f64(np.uint32([0x800]), np.uint32([0])).tolist() == [2.0 ** -53]
    # Box-Muller: u1 = 1 (the largest word) gives r = 0; the smallest u1 the largest radius
    c, s = P.boxmuller_f32(np.uint32([0xFFFFFFFF, 0, 0]), np.uint32([0, 0, 1 << 30]))
    assert c[0] == 0 and s[0] == 0
    rmax = math.sqrt(-2 * math.log(2.0 ** -32))
    assert c[1] == np.float32(rmax) and s[1] == 0
    assert abs(c[2]) < 1e-6 and s[2] == np.float32(rmax)  # t = pi / 2
    c, s = P.boxmuller_f64(*(np.uint32([0]),) * 4)
    assert c[0] == math.sqrt(-2 * math.log(2.0 ** -53)) and s[0] == 0


def test_bernoulli_is_an_exact_threshold_and_p_is_rounded_like_an_attribute():
    rng = np.random.default_rng(1)
    w = rng.integers(0, 1 << 32, 4096, dtype=np.uint64).astype(np.uint32)
    ks = rng.integers(0, 1 << 32, 200, dtype=np.uint64)
    exact = ks.astype(np.float64) * 2.0 ** -32  # p = k / 2^32 exactly, and its neighbours
    ps = np.concatenate([exact, np.nextafter(exact, 2), np.nextafter(exact, -1), rng.random(200),
                         [0.0, -0.0, -1.0, 1.0, 1.5, np.inf, -np.inf, np.nan, 5e-324, 2.0 ** -33]])
    for p in ps:
        t = P.bernoulli_threshold(p)
        assert 0 <= t <= 1 << 32
        assert (P.bernoulli(w, p) == (w.astype(np.int64) < t)).all(), p
        # the threshold is the exact ceiling
        if 0 < p < 1:
            assert t - 1 < p * 2 ** 32 <= t
    assert not P.bernoulli(np.uint32([0]), 0.0)[0] and P.bernoulli(np.uint32([0xFFFFFFFF]), 1.0)[0]
    assert not P.bernoulli(np.uint32([0]), np.nan)[0]
    # a Python float is a float attribute (float32 in the AOT ABI); a NumPy float64 a tensor
    assert P.bernoulli_p(0.1)[()] == float(np.float32(0.1))
    assert P.bernoulli_p(np.float64(0.1))[()] == 0.1
    a = P.reference("bernoulli", 9, 4000, p=0.1)
    assert (a == P.reference("bernoulli", 9, 4000, p=np.float32(0.1))).all()
    # p as a tensor, broadcast
    pt = np.array([0.0, 1.0, 0.5, np.nan], np.float64)
    b = P.reference("bernoulli", 9, (3, 4), p=pt)
    assert not b[:, 0].any() and b[:, 1].all() and not b[:, 3].any()


def test_reference_rejects_bad_arguments():
    with pytest.raises(ValueError, match="unknown kind"):
        P.reference("poisson", 0, 3)
    with pytest.raises(AttrError, match="takes p"):
        P.reference("bernoulli", 0, 3)
    with pytest.raises(AttrError, match="takes no parameters"):
        P.reference("uniform", 0, 3, p=0.5)
    with pytest.raises(AttrError, match="low, high"):
        P.reference("randint", 0, 3, low=1)
    with pytest.raises(DTypeError):
        P.reference("uniform", 0, 3, dtype="int32")
    with pytest.raises(DTypeError):
        P.reference("randint", 0, 3, low=0, high=3, dtype="float32")
    with pytest.raises(DTypeError):
        P.reference("bernoulli", 0, 3, p=np.array([1, 0]))
    with pytest.raises(AttrError, match="low < high"):
        P.reference("randint", 0, 3, low=5, high=5)
    with pytest.raises(AttrError, match="low < high"):
        P.reference("randint", 0, 3, low=0, high=300, dtype="uint8")
    with pytest.raises(AttrError, match="below 2\\^64"):
        P.reference("randint", 0, 3, low=0, high=1 << 64, dtype="uint64")
    for bad in (1 << 64, -(1 << 63) - 1, 1.5, True, "1"):
        with pytest.raises(AttrError):
            P.reference("uniform", bad, 3)
        with pytest.raises(AttrError):
            P.reference("uniform", 0, 3, offset=bad)
    for shape in ((-1,), (2.5,), "ab", (True,)):
        with pytest.raises(ShapeError):
            P.reference("uniform", 0, shape)
    with pytest.raises(ShapeError):
        P.reference("bernoulli", 0, (2, 3), p=np.ones(4))
    assert P.reference("normal", 0, (2, 0)).shape == (2, 0)
    assert P.reference("randint", 0, (), low=3, high=4).tolist() == 3


def _accepted_counts(n: int, values) -> set[int]:
    """How many 32- or 64-bit words Lemire's rule accepts for each candidate in ``values``
    (exact integer arithmetic): multiples of n in [v 2^b + t, (v + 1) 2^b)."""
    bits = 32 if n <= 1 << 32 else 64
    t = P.randint_threshold(n)
    return {-(-((v + 1) << bits) // n) - -(-((v << bits) + t) // n) for v in values}


@pytest.mark.parametrize("n", [1, 2, 3, 6, 7, 10, 255, 1000, 3 << 30, (1 << 31) + 1, (1 << 32) - 1, 1 << 32,
                               (1 << 32) + 1, 10 ** 15 + 37, (1 << 63) + 1, (1 << 64) - 1])
def test_randint_rule_accepts_the_same_number_of_words_for_every_value(n):
    bits = 32 if n <= 1 << 32 else 64
    rng = np.random.default_rng(n % 1000)
    values = range(n) if n <= 1000 else [0, 1, n // 2, n - 2, n - 1] + [int(v) for v in rng.integers(0, n, 300,
                                                                                                        dtype=np.uint64)]
    assert _accepted_counts(n, values) == {(1 << bits) // n}
    # and the rejection probability is below 1/2, whatever n (the bound behind RANDINT_MAX_ATTEMPTS)
    assert P.randint_threshold(n) < 1 << (bits - 1)


def test_randint_walks_the_chain_and_gives_up_after_the_last_attempt(monkeypatch):
    n = (1 << 31) + 1  # about half of the first draws are rejected
    i = np.arange(64, dtype=np.uint64)
    w = P.blocks(7, 0, i // np.uint64(4))[np.arange(64), (i % np.uint64(4)).astype(int)]
    first, ok = P.lemire32(w, n)
    assert 10 < (~ok).sum() < 54
    v = P.randint_offsets(7, 0, i, n)
    assert (v[ok] == first[ok]).all() and (v < n).all()
    # a rejected element's second draw is its lane of Philox4x32-10(first block, key)
    j = int(np.flatnonzero(~ok)[0])
    b1 = P.philox4x32_10(P.blocks(7, 0, [j // 4]), np.uint32(P.key_words(7)))[0, j % 4]
    cand, acc = P.lemire32(np.uint32([b1]), n)
    if acc[0]:
        assert v[j] == cand[0]
    monkeypatch.setattr(P, "RANDINT_MAX_ATTEMPTS", 1)
    assert (P.randint_offsets(7, 0, i, n) == first).all()


# --- statistics (10^6 samples of the reference; the backends equal it bit for bit) ---------------
N_STAT = 1_000_000
KS_CRIT = 1.95 / math.sqrt(N_STAT)  # Kolmogorov-Smirnov at alpha = 0.001


def _ks(sorted_x, cdf) -> float:
    n = sorted_x.size
    f = cdf(sorted_x)
    return float(max((np.arange(1, n + 1) / n - f).max(), (f - np.arange(n) / n).max()))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_uniform_statistics(dtype):
    u = P.reference("uniform", 2024, N_STAT, offset=1, dtype=dtype).astype(np.float64)
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 5 * math.sqrt(1 / 12 / N_STAT)
    assert abs(u.var() - 1 / 12) < 5 * math.sqrt(1 / 180 / N_STAT)
    assert _ks(np.sort(u), lambda x: x) < KS_CRIT
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 5 / math.sqrt(N_STAT)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_normal_statistics(dtype):
    z = P.reference("normal", 2024, N_STAT, dtype=dtype).astype(np.float64)
    assert abs(z.mean()) < 5 / math.sqrt(N_STAT)
    assert abs(z.var() - 1) < 5 * math.sqrt(2 / N_STAT)
    assert abs((z ** 4).mean() - 3) < 5 * math.sqrt(96 / N_STAT)  # kurtosis of a normal
    assert np.abs(z).max() <= (6.67 if dtype == "float32" else 8.58)
    erf = np.vectorize(math.erf, otypes=[np.float64])
    assert _ks(np.sort(z), lambda x: 0.5 * (1 + erf(x / math.sqrt(2)))) < KS_CRIT
    # the two values of a Box-Muller pair (cos, sin), and neighbouring pairs, are uncorrelated
    assert abs(np.corrcoef(z[0::2], z[1::2])[0, 1]) < 5 / math.sqrt(N_STAT / 2)
    assert abs(np.corrcoef(z[1:-1:2], z[2::2])[0, 1]) < 5 / math.sqrt(N_STAT / 2)


def test_bernoulli_and_randint_statistics():
    b = P.reference("bernoulli", 5, N_STAT, p=0.3)
    p = float(np.float32(0.3))
    assert abs(b.mean() - p) < 5 * math.sqrt(p * (1 - p) / N_STAT)
    r = P.reference("randint", 5, N_STAT, low=-2, high=4)
    counts = np.bincount(r + 2, minlength=6)
    assert counts.sum() == N_STAT and len(counts) == 6
    assert ((counts - N_STAT / 6) ** 2 / (N_STAT / 6)).sum() < 20.5  # chi-square, 5 dof, alpha 0.001


def test_randint_unbiased_where_plain_multiply_shift_is_not():
    """n = 3 * 2^30: without rejection, (w n) >> 32 = floor(3 w / 4) is 0 mod 3 half of the
    time; with it, a third of the time. The chi-square test sees the difference at once."""
    n, m = 3 << 30, 300_000
    r = P.reference("randint", 11, m, low=0, high=n, dtype="uint32").astype(np.int64)
    w = P.reference("randint", 11, m, low=0, high=1 << 32, dtype="uint32")  # the raw words
    plain = (w.astype(np.uint64) * np.uint64(n)) >> np.uint64(32)

    def chi2(x):
        c = np.bincount(np.asarray(x, np.int64) % 3, minlength=3)
        return ((c - m / 3) ** 2 / (m / 3)).sum()
    assert chi2(r) < 16.3  # 2 dof, alpha ~ 0.0003
    assert chi2(plain) > 1000


# --- the backends' sources -----------------------------------------------------------------------
def test_partial_renders_the_reference_constants():
    src = render_partial()
    for c in (P.M0, P.M1, P.W0, P.W1):
        assert f"0x{c:08X}u" in src
    assert repr(P.TWO_PI) in src and f"r < {P.ROUNDS}" in src
    assert f"attempt < {P.RANDINT_MAX_ATTEMPTS}" in src
    assert "__umulhi(a, b)" in src and "__umul64hi(x, n)" in src
    assert re.search(r"#define FG_HD __host__ __device__", src)
    assert "namespace fg {" in src
    # 2^-24, 2^-32, 2^-53 are written exactly
    for lit, v in (("5.9604644775390625e-08f", 2.0 ** -24), ("2.3283064365386963e-10", 2.0 ** -32),
                   ("1.1102230246251565e-16", 2.0 ** -53)):
        assert lit in src and float(lit.rstrip("f")) == v


def test_public_name():
    import fusegen as fg
    assert fg.random.reference is P.reference
    assert fg.random.reference("uniform", 1, (2, 2)).dtype == np.float32


def test_source_digest_covers_the_three_implementations():
    import hashlib
    pkg = HERE.parent / "fusegen"
    h = hashlib.sha256()
    for name in ("philox.py", "philox_numba.py", "emitters/templates/_philox.inc.j2"):
        h.update((pkg / name).read_bytes())
    assert P.source_digest() == h.hexdigest()[:16]


# --- (b, c) Numba CPU ----------------------------------------------------------------------------
import numba  # noqa: E402  (a dependency of fusegen: always here)

from fusegen import philox_numba as N  # noqa: E402


# One block's four 32-bit elements of every kind, written at out[e .. e + 3]: the body of a
# block loop, shared by the Numba CPU fill below and the numba-cuda kernel of
# tests/cuda/test_philox_cuda.py (F: the module of functions, philox_numba or its device twins).
STORE_BLOCK32 = '''
def store_block32(w0, w1, w2, w3, e, t, rt, k0, k1, rng_n, u32, n32, bern, rint):
    u32[e], u32[e + 1] = F.uniform_f32(w0), F.uniform_f32(w1)
    u32[e + 2], u32[e + 3] = F.uniform_f32(w2), F.uniform_f32(w3)
    n32[e], n32[e + 1] = F.boxmuller_f32(w0, w1)
    n32[e + 2], n32[e + 3] = F.boxmuller_f32(w2, w3)
    bern[e], bern[e + 1] = F.bernoulli(w0, t), F.bernoulli(w1, t)
    bern[e + 2], bern[e + 3] = F.bernoulli(w2, t), F.bernoulli(w3, t)
    for j in range(4):
        rint[e + j] = F.randint_offset(w0, w1, w2, w3, k0, k1, j, rng_n, rt)
'''


def store_block32(functions, jit):
    """``STORE_BLOCK32`` compiled with ``jit`` against ``functions`` (a module)."""
    ns = dict(F=functions, np=np)
    exec(compile(STORE_BLOCK32, "<store_block32>", "exec"), ns)
    return jit(ns["store_block32"])


_store_block32 = store_block32(N, numba.njit(inline="always"))


@numba.njit(nogil=True, error_model="numpy", fastmath={"reassoc"})
def _nb_fill(seed, offset, i0, n, per_element, p, rng_n, u32, u64, n32, n64, bern, rint):
    """Every kind at once (one compilation) for elements [i0, i0 + n), as tests/philox_harness.cc
    does: whole blocks in block loops, partial ones at either end through *_at; per_element:
    every element through *_at."""
    t = N.bernoulli_threshold(p)
    rt = N.randint_threshold(rng_n)
    k0, k1 = seed & np.uint64(0xFFFFFFFF), seed >> np.uint64(32)
    # 32-bit kinds: four elements per block
    head = n if per_element else min(n, np.int64((np.uint64(4) - i0 % np.uint64(4)) % np.uint64(4)))
    nb = (n - head) // 4
    q0 = (i0 + np.uint64(head)) >> np.uint64(2)
    for k in range(n):
        if head <= k < head + 4 * nb:
            continue
        i = i0 + np.uint64(k)
        u32[k] = N.uniform_f32_at(seed, offset, i)
        n32[k] = N.normal_f32_at(seed, offset, i)
        bern[k] = N.bernoulli_at(seed, offset, i, t)
        rint[k] = N.randint_offset_at(seed, offset, i, rng_n, rt)
    for b in range(nb):
        w0, w1, w2, w3 = N.block(seed, offset, q0 + np.uint64(b))
        _store_block32(w0, w1, w2, w3, head + 4 * b, t, rt, k0, k1, rng_n, u32, n32, bern, rint)
    # float64 kinds: two elements per block
    head = n if per_element else min(n, np.int64(i0 % np.uint64(2)))
    nb = (n - head) // 2
    q0 = (i0 + np.uint64(head)) >> np.uint64(1)
    for k in range(n):
        if head <= k < head + 2 * nb:
            continue
        u64[k] = N.uniform_f64_at(seed, offset, i0 + np.uint64(k))
        n64[k] = N.normal_f64_at(seed, offset, i0 + np.uint64(k))
    for b in range(nb):
        w0, w1, w2, w3 = N.block(seed, offset, q0 + np.uint64(b))
        e = head + 2 * b
        u64[e], u64[e + 1] = N.uniform_f64(w0, w1), N.uniform_f64(w2, w3)
        n64[e], n64[e + 1] = N.boxmuller_f64(w0, w1, w2, w3)


def numba_fill(seed, offset, start, n, p, rng_n, per_element):
    out = (np.empty(n, np.float32), np.empty(n, np.float64), np.empty(n, np.float32), np.empty(n, np.float64),
           np.empty(n, np.bool_), np.empty(n, np.uint64))
    _nb_fill(np.uint64(seed), np.uint64(offset), np.uint64(start), n, per_element, np.float64(np.float32(p)),
             np.uint64(rng_n), *out)
    return dict(zip(("uniform_f32", "uniform_f64", "normal_f32", "normal_f64", "bernoulli", "randint"), out))


def reference_fill(seed, offset, start, n, p, rng_n):
    kw = dict(offset=offset, start=start)
    return dict(uniform_f32=P.reference("uniform", seed, n, **kw),
                uniform_f64=P.reference("uniform", seed, n, dtype="float64", **kw),
                normal_f32=P.reference("normal", seed, n, **kw),
                normal_f64=P.reference("normal", seed, n, dtype="float64", **kw),
                bernoulli=P.reference("bernoulli", seed, n, p=p, **kw),
                randint=P.randint_offsets(seed, offset, np.arange(n, dtype=np.uint64) + np.uint64(start), rng_n))


def assert_same(got: dict, want: dict, what: str) -> dict:
    """Bit identity except normal (within 2 ulp); returns the largest normal errors in ulp."""
    errs = {}
    for name, w in want.items():
        g = got[name]
        assert g.dtype == w.dtype, (what, name)
        if name.startswith("normal"):
            errs[name] = float(ulps(g, w).max()) if w.size else 0.0
            assert errs[name] <= 2, f"{what}: {name} {errs[name]} ulp from the reference"
        else:
            bad = np.flatnonzero(g != w)
            assert bad.size == 0, f"{what}: {name} differs at {bad[:5]}: {g[bad[:5]]} vs {w[bad[:5]]}"
    return errs


@pytest.mark.parametrize("seed", SEEDS)
def test_numba_equals_reference(seed):
    worst = {}
    for (start, n), offset, rng_n in zip(SPANS, OFFSETS, RANGES[seed % 3::2]):
        want = reference_fill(seed, offset, start, n, 0.3, rng_n)
        for per_element in (False, True):
            got = numba_fill(seed, offset, start, n, 0.3, rng_n, per_element)
            for k, v in assert_same(got, want, f"numba seed={seed} start={start} {per_element=}").items():
                worst[k] = max(worst.get(k, 0.0), v)
    assert set(worst) == {"normal_f32", "normal_f64"}


def test_numba_kat_and_thresholds():
    for _, ctr, key, want in KAT10:
        assert list(N.philox4(*ctr, *key)) == want
    for n in RANGES:
        assert N.randint_threshold(np.uint64(n)) == P.randint_threshold(n)
    for p in (0.0, 0.3, 1.0, 2.0, -1.0, np.nan, 2.0 ** -32, 1 - 2.0 ** -53, 0.5 + 2.0 ** -40):
        assert N.bernoulli_threshold(p) == P.bernoulli_threshold(p)


@pytest.mark.parametrize("n", RANGES)
def test_numba_randint_ranges(n):
    for seed in (3, (1 << 64) - 1):
        want = P.randint_offsets(seed, 2, np.arange(0, 64, dtype=np.uint64), n)
        got = numba_fill(seed, 2, 0, 64, 0.5, n, False)["randint"]
        assert (got == want).all()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, (1 << 64) - 1), offset=st.integers(0, (1 << 64) - 1),
       start=st.integers(0, (1 << 64) - 100), n=st.integers(0, 23), p=st.floats(0, 1),
       rng_n=st.integers(1, (1 << 64) - 1))
def test_numba_equals_reference_hypothesis(seed, offset, start, n, p, rng_n):
    want = reference_fill(seed, offset, start, n, p, rng_n)
    assert_same(numba_fill(seed, offset, start, n, p, rng_n, False), want, "numba")


def _numba_block_loop_asm():
    @numba.njit(nogil=True, error_model="numpy", fastmath={"reassoc"})
    def uniform_and_bernoulli(seed, offset, nq, t, out, bern):
        for b in range(nq):
            w0, w1, w2, w3 = N.block(seed, offset, b)
            out[4 * b], out[4 * b + 1] = N.uniform_f32(w0), N.uniform_f32(w1)
            out[4 * b + 2], out[4 * b + 3] = N.uniform_f32(w2), N.uniform_f32(w3)
            bern[4 * b], bern[4 * b + 1] = N.bernoulli(w0, t), N.bernoulli(w1, t)
            bern[4 * b + 2], bern[4 * b + 3] = N.bernoulli(w2, t), N.bernoulli(w3, t)

    @numba.njit(nogil=True, error_model="numpy", fastmath={"reassoc"})
    def uniform_per_element(seed, offset, n, out):  # each element its own Philox call (4x the work)
        for i in range(n):
            out[i] = N.uniform_f32_at(seed, offset, i)

    out, bern = np.empty(64, np.float32), np.empty(64, np.bool_)
    uniform_and_bernoulli(np.uint64(5), np.uint64(6), 16, np.int64(1 << 31), out, bern)
    assert (out == P.reference("uniform", 5, 64, offset=6)).all()
    assert (bern == P.reference("bernoulli", 5, 64, offset=6, p=0.5)).all()
    uniform_per_element(np.uint64(5), np.uint64(6), 64, out)
    assert (out == P.reference("uniform", 5, 64, offset=6)).all()
    return [(f.inspect_llvm(f.signatures[0]), f.inspect_asm(f.signatures[0]))
            for f in (uniform_and_bernoulli, uniform_per_element)]


def test_numba_loops_are_vector_code():
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    for llvm, asm in _numba_block_loop_asm():
        assert re.search(r"mul (nuw )?(nsw )?<\d+ x i64>", llvm), "Philox's products are not vector multiplies"
        assert not re.search(r"call[^\n]*philox_numba", llvm), "a helper was not inlined"
        if " avx2" in flags:  # 256- or 512-bit lanes: LLVM picks zmm on some AVX-512 hosts (Intel Xeon)
            # 2 per round, 10 rounds; the first round's product of the offset words is the same for
            # every block, and LLVM hoists it out of the loop on some hosts (19 on an AVX-512 Xeon)
            assert len(re.findall(r"vpmuludq\s+[^\n]*%[yz]mm", asm)) >= 19


# --- (b, c) the C++ harness ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    require("g++")
    from fusegen.native import build
    d = tmp_path_factory.mktemp("philox")
    (d / "philox.inc").write_text(render_partial())
    shutil.copy(HERE / "philox_harness.cc", d / "philox_harness.cc")
    lib = ctypes.CDLL(str(build.build_library(d / "philox_harness.cc", flags=build.default_cpp_flags())))
    u64, i64, ptr = ctypes.c_uint64, ctypes.c_int64, ctypes.c_void_p
    for name in ("fill_uniform_f32", "fill_uniform_f64", "fill_normal_f32", "fill_normal_f64"):
        getattr(lib, name).argtypes = [u64, u64, u64, i64, ctypes.c_int, ptr]
    lib.fill_bernoulli.argtypes = [u64, u64, u64, i64, ctypes.c_int, ctypes.c_double, ctypes.c_int, ptr]
    lib.fill_randint.argtypes = [u64, u64, u64, i64, ctypes.c_int, u64, ptr]
    lib.kat.argtypes = [ptr, ptr, i64, ptr]
    lib.thresholds.argtypes = [ptr, ptr, i64, ptr, ptr]
    lib.randint_threshold.argtypes, lib.randint_threshold.restype = [u64], u64
    lib.dir = d
    return lib


def cpp_fill(lib, seed, offset, start, n, p, rng_n, per_element, float_p=True):
    out = dict(uniform_f32=np.empty(n, np.float32), uniform_f64=np.empty(n, np.float64),
               normal_f32=np.empty(n, np.float32), normal_f64=np.empty(n, np.float64),
               bernoulli=np.empty(n, np.bool_), randint=np.empty(n, np.uint64))
    args = (seed, offset, start, n, int(per_element))
    for name in ("uniform_f32", "uniform_f64", "normal_f32", "normal_f64"):
        getattr(lib, "fill_" + name)(*args, out[name].ctypes.data)
    lib.fill_bernoulli(*args, p, int(float_p), out["bernoulli"].ctypes.data)
    lib.fill_randint(*args, rng_n, out["randint"].ctypes.data)
    return out


def test_cpp_kat(harness):
    ctr = np.array([k[1] for k in KAT10], np.uint32)
    key = np.array([k[2] for k in KAT10], np.uint32)
    out = np.empty((3, 4), np.uint32)
    harness.kat(ctr.ctypes.data, key.ctypes.data, 3, out.ctypes.data)
    assert out.tolist() == [k[3] for k in KAT10]


def test_cpp_thresholds(harness):
    p = np.array([0.0, 0.3, 1.0, 2.0, -1.0, np.nan, 2.0 ** -32, 1 - 2.0 ** -53, 0.5 + 2.0 ** -40, 0.1])
    pf = p.astype(np.float32)
    t, tf = np.empty(p.size, np.int64), np.empty(p.size, np.int64)
    harness.thresholds(p.ctypes.data, pf.ctypes.data, p.size, t.ctypes.data, tf.ctypes.data)
    assert t.tolist() == [P.bernoulli_threshold(x) for x in p]
    assert tf.tolist() == [P.bernoulli_threshold(float(x)) for x in pf]
    assert [harness.randint_threshold(n) for n in RANGES] == [P.randint_threshold(n) for n in RANGES]


@pytest.mark.parametrize("seed", SEEDS)
def test_cpp_equals_reference(harness, seed):
    for (start, n), offset, rng_n in zip(SPANS, OFFSETS, RANGES[seed % 3::2]):
        want = reference_fill(seed, offset, start, n, 0.3, rng_n)
        for per_element in (False, True):
            got = cpp_fill(harness, seed, offset, start, n, 0.3, rng_n, per_element)
            assert_same(got, want, f"C++ seed={seed} start={start} {per_element=}")


@pytest.mark.parametrize("n", RANGES)
def test_cpp_randint_ranges(harness, n):
    for seed in (3, (1 << 64) - 1):
        want = P.randint_offsets(seed, 2, np.arange(1, 1001, dtype=np.uint64), n)
        assert (cpp_fill(harness, seed, 2, 1, 1000, 0.5, n, False)["randint"] == want).all()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, (1 << 64) - 1), offset=st.integers(0, (1 << 64) - 1),
       start=st.integers(0, (1 << 64) - 100), n=st.integers(0, 23), p=st.floats(0, 1),
       rng_n=st.integers(1, (1 << 64) - 1))
def test_cpp_equals_reference_hypothesis(harness, seed, offset, start, n, p, rng_n):
    want = reference_fill(seed, offset, start, n, p, rng_n)
    assert_same(cpp_fill(harness, seed, offset, start, n, p, rng_n, False), want, "C++")


def test_cpp_and_numba_agree_on_a_large_array(harness):
    """A bigger sample (2^16 elements of each kind) through both backends' block loops."""
    n = 1 << 16
    want = reference_fill(77, 5, 2, n, 0.7, (1 << 31) + 1)
    errs = assert_same(cpp_fill(harness, 77, 5, 2, n, 0.7, (1 << 31) + 1, False), want, "C++")
    errs_nb = assert_same(numba_fill(77, 5, 2, n, 0.7, (1 << 31) + 1, False), want, "numba")
    # normal is specified within 2 ulp (README "Random numbers"): its log/sin/cos are libm's, whose
    # float64 results differ by an ulp between hosts (glibc picks FMA variants by CPU)
    assert max(errs.values()) <= 2 and max(errs_nb.values()) <= 2


def test_cpp_block_loops_vectorize(harness):
    src = (HERE / "philox_harness.cc").read_text()
    marked = {m.group(1): src[:m.start()].count("\n") + 1 for m in re.finditer(r"// VEC (\w+)", src)}
    assert set(marked) == {"uniform_f32", "uniform_f64", "bernoulli", "randint"}
    proc = subprocess.run(["g++", "-std=c++17", "-O3", "-march=x86-64-v3", "-fno-math-errno",
                           "-fopt-info-vec-optimized", "-c", "-o", "/dev/null", "philox_harness.cc"],
                          cwd=harness.dir, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    vectorized = {int(m.group(1)) for m in re.finditer(r"philox_harness\.cc:(\d+):\d+: optimized: loop vectorized",
                                                       proc.stderr)}
    missing = {k: line for k, line in marked.items() if line not in vectorized}
    assert not missing, f"g++ did not vectorize the block loops {missing}:\n{proc.stderr}"


# --- (b) CUDA: compiles for sm_90 ----------------------------------------------------------------
def _ptxas(ptx: str, tmp_path) -> str:
    require("ptxas")
    (tmp_path / "k.ptx").write_text(ptx)
    proc = subprocess.run(["ptxas", "-arch=sm_90", "-v", "k.ptx", "-o", "k.cubin"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def test_numba_cuda_device_functions_compile_to_ptx(tmp_path):
    # numba-cuda, not Numba's own deprecated numba.cuda (which imports without it, then fails)
    require("numba-cuda")
    if numba.config.ENABLE_CUDASIM:
        pytest.skip("compile_ptx is not available under the CUDA simulator")
    from numba import cuda
    from numba import types
    R = N.cuda_functions()
    ns = dict(np=np, cuda=cuda, block=R.block, uniform_f32=R.uniform_f32, bernoulli=R.bernoulli,
              boxmuller_f32=R.boxmuller_f32, randint_offset=R.randint_offset, normal_f64_at=R.normal_f64_at,
              uniform_f64_at=R.uniform_f64_at)
    src = '''
def kernel(seed, offset, t, n, rt, u, b, z, r, d):
    q = cuda.grid(1)
    if q < u.size // 4:
        w0, w1, w2, w3 = block(seed, offset, q)
        u[4 * q] = uniform_f32(w0)
        u[4 * q + 1] = uniform_f32(w1)
        b[4 * q] = bernoulli(w2, t)
        c, s = boxmuller_f32(w2, w3)
        z[4 * q] = c
        z[4 * q + 1] = s
        r[4 * q] = randint_offset(w0, w1, w2, w3, seed & np.uint64(0xFFFFFFFF), seed >> np.uint64(32), 0, n, rt)
        d[q] = normal_f64_at(seed, offset, q) + uniform_f64_at(seed, offset, q)
'''
    exec(compile(src, "<philox-ptx-test>", "exec"), ns)
    u64 = types.uint64
    sig = (u64, u64, types.int64, u64, u64, types.float32[::1], types.boolean[::1], types.float32[::1],
           types.uint64[::1], types.float64[::1])
    ptx, _ = cuda.compile_ptx(ns["kernel"], sig, cc=(9, 0))
    assert re.search(r"mul\.(wide|hi)\.u32", ptx), "no 32 x 32 -> 64-bit multiply in the PTX"
    assert not re.search(r"call[^;]*(philox4|_round|randint_offset)", ptx), "a helper was not inlined"
    _ptxas(ptx, tmp_path)


def test_nvcc_compiles_the_partial_for_device_and_host(tmp_path):
    require("nvcc")
    (tmp_path / "philox.inc").write_text(render_partial())
    (tmp_path / "k.cu").write_text('''#include <cmath>
#include <cstdint>
#include "philox.inc"
__global__ void rng(uint64_t seed, uint64_t offset, int64_t nq, double p, uint64_t range, float *u, double *d,
                    float *z, double *zd, bool *b, uint64_t *r) {
  const int64_t q = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (q >= nq) return;
  const fg::Block w = fg::philox_block(seed, offset, q);
  const int64_t t = fg::bernoulli_threshold(p);
  const uint64_t rt = fg::randint_threshold(range);
  for (int j = 0; j < 4; ++j) {
    u[4 * q + j] = fg::uniform_f32(w.w[j]);
    b[4 * q + j] = fg::bernoulli(w.w[j], t);
    r[4 * q + j] = fg::randint_offset(w, uint32_t(seed), uint32_t(seed >> 32), j, range, rt);
  }
  const fg::CosSin<float> z01 = fg::boxmuller_f32(w.w[0], w.w[1]);
  z[4 * q] = z01.c;
  z[4 * q + 1] = z01.s;
  const fg::CosSin<double> zz = fg::boxmuller_f64(w);
  zd[2 * q] = zz.c;
  d[2 * q] = fg::uniform_f64(w.w[0], w.w[1]) + fg::normal_f32_at(seed, offset, q) + fg::uniform_f64_at(seed, offset, q);
}
// the same functions on the host side of a .cu
extern "C" float host_uniform(uint64_t seed, uint64_t offset, uint64_t i) { return fg::uniform_f32_at(seed, offset, i); }
''')
    proc = subprocess.run(["nvcc", "-std=c++17", "-O3", "-arch=sm_90", "-ptx", "k.cu", "-o", "k.ptx"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    ptx = (tmp_path / "k.ptx").read_text()
    assert "mul.hi.u32" in ptx, "__umulhi is not used on the device"
    assert "mul.hi.u64" in ptx, "__umul64hi is not used on the device"
    info = _ptxas(ptx, tmp_path)
    assert "0 bytes stack frame" in info, info


# --- slow: larger samples ------------------------------------------------------------------------
# The default run does not deselect the slow marker: these run under `-m slow` or with
# FUSEGEN_LONG_TESTS=1 and skip otherwise, so the default run stays short.
@pytest.fixture
def long_run(request):  # stateless: safe to share between hypothesis examples
    from conftest import LONG_TESTS
    if not (LONG_TESTS or "slow" in (request.config.getoption("-m") or "")):
        pytest.skip("long check: run with -m slow or FUSEGEN_LONG_TESTS=1")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, (1 << 64) - 1, 0xDEADBEEF12345678])
def test_backends_equal_reference_on_2_20_elements(long_run, harness, seed):
    n, rng_n = 1 << 20, (3 << 30) if seed % 2 else (1 << 63) + 1
    want = reference_fill(seed, seed >> 7, 3, n, 0.25, rng_n)
    assert_same(cpp_fill(harness, seed, seed >> 7, 3, n, 0.25, rng_n, False), want, "C++")
    assert_same(numba_fill(seed, seed >> 7, 3, n, 0.25, rng_n, False), want, "numba")


@pytest.mark.slow
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, (1 << 64) - 1), offset=st.integers(0, (1 << 64) - 1),
       start=st.integers(0, (1 << 64) - 300), n=st.integers(0, 200), p=st.floats(0, 1),
       rng_n=st.integers(1, (1 << 64) - 1), per_element=st.booleans())
def test_backends_equal_reference_hypothesis_long(long_run, harness, seed, offset, start, n, p, rng_n, per_element):
    want = reference_fill(seed, offset, start, n, p, rng_n)
    assert_same(cpp_fill(harness, seed, offset, start, n, p, rng_n, per_element), want, "C++")
    assert_same(numba_fill(seed, offset, start, n, p, rng_n, per_element), want, "numba")
