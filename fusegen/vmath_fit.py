"""Where fusegen/vmath.py's polynomial coefficients come from: the fits, and their error bounds.

Each polynomial of the float32 math library is a near-minimax fit made here, in 40-digit
arithmetic (mpmath), and stored in vmath.py as float64 literals. A fit is one row of ``FITS``:
the function it approximates (``target``), its basis, the weight that turns the difference into
the error that matters (usually relative to the final function's value) and the interval. The
method is Lawson's iteratively reweighted least squares on Chebyshev points (C. L. Lawson,
"Contributions to the theory of linear least maximum approximation", 1961): each round solves a
weighted least-squares problem and multiplies every point's weight by its error, which drives the
solution towards the equioscillating minimax one. It converges more slowly than Remez's exchange
but needs no root finding, and a few percent from the minimax error is far below what matters
(the float64 evaluation adds about 1e-16 anyway).

    python -m fusegen.vmath_fit            # re-derive every fit, print the tuples and errors
    python -m fusegen.vmath_fit LOG_POLY   # one of them

``fit_error(name, coeffs)`` measures stored coefficients exactly (tests use it), and
``reduction_worst_case()`` derives how close a float32 can come to a multiple of pi/2, which sets
how many bits of 2/pi the sin/cos argument reduction carries (vmath.TRIG_CHUNKS).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np

DPS = 40


@dataclass(frozen=True)
class Fit:
    """sum_j c_j basis(t)[j] ~= target(t) on [lo, hi]; the error is |weight(t) * (sum - target)|."""
    target: Callable
    basis: Callable
    weight: Callable
    lo: float
    hi: float
    doc: str
    float32: bool = False   # stored as float32 values: rounded one at a time (see ``lawson``)
    pair_first: bool = False  # (float32) the first as an unevaluated sum of two float32 values


def _mp():
    import mpmath as mp
    mp.mp.dps = DPS
    return mp


def _powers(first: int, count: int, centre: float = 0.0):
    return lambda t: [(t - centre) ** (first + j) for j in range(count)]


def _fits() -> dict[str, Fit]:
    mp = _mp()
    pio4 = float(mp.pi / 4 * (1 + mp.mpf(2) ** -10))      # |r| after the sin/cos reduction, with slack
    tan_pi8 = float(mp.tan(mp.pi / 8) * (1 + mp.mpf(2) ** -20))
    s_max = (mp.sqrt(2) - 1) / (mp.sqrt(2) + 1)           # log: |f / (2 + f)| for 1 + f in [sqrt(1/2), sqrt(2)]
    f_lo, f_hi = (float((mp.sqrt(v) - 1) * (1 + mp.mpf(2) ** -20)) for v in (0.5, 2))  # log1p32: 1 + f's range

    def sqrt_or(t, f, at0):
        return f(mp.sqrt(t)) if t != 0 else mp.mpf(at0)

    return {
        "EXP_POLY": Fit(lambda r: mp.exp(r) - 1 - r, _powers(2, 9), lambda r: 1 / mp.exp(r), -0.3466, 0.3466,
                        "exp(r) = 1 + r + r^2 s(r): relative error of exp"),
        "EXP32_POLY": Fit(lambda r: mp.exp(r) - 1 - r, _powers(2, 5), lambda r: 1 / mp.exp(r), -0.3466, 0.3466,
                          "exp(r) = 1 + r + r^2 s(r) in float32 lanes: relative error of exp (stored "
                          "rounded to float32)"),
        "EXPM1_POLY": Fit(lambda r: mp.expm1(r) - r, _powers(2, 10), lambda r: 1 / mp.expm1(r) if r else 0,
                          -0.3466, 0.3466, "expm1(r) = r + r^2 s(r): relative error of expm1"),
        "LOG_POLY": Fit(lambda z: sqrt_or(z, lambda s: 2 * mp.atanh(s) / s - 2, 0), _powers(1, 7),
                        lambda z: mp.mpf(0.5), 0.0, float(s_max ** 2 * (1 + mp.mpf(2) ** -20)),
                        "log1p(f) = 2s + s R(s^2), s = f / (2 + f): relative error of log1p(f)"),
        "LOG1P32_POLY": Fit(lambda f: (mp.log1p(f) - f + f * f / 2) / (f ** 3 / 2) if f else mp.mpf(2) / 3,
                            _powers(0, 8), lambda f: f ** 3 / 2 / mp.log1p(f) if f else 0, f_lo, f_hi,
                            "log1p(f) = f - f^2/2 + (f^3/2) Q(f), 1 + f in [sqrt(1/2), sqrt(2)] (float32 lanes): "
                            "relative error of log1p", float32=True),
        "ERF32_SMALL": Fit(lambda z: sqrt_or(z, lambda x: mp.erf(x) / x - 1, 2 / mp.sqrt(mp.pi) - 1), _powers(0, 7),
                           lambda z: sqrt_or(z, lambda x: x / mp.erf(x), mp.sqrt(mp.pi) / 2), 0.0, 1.0,
                           "erf(x) = x + x P(x^2), |x| < 1 (float32 lanes): relative error of erf", float32=True),
        "ERF32_BIG": Fit(lambda t: mp.log(mp.erfc(t)), _powers(0, 7, 1.0), lambda t: mp.erfc(t) / mp.erf(t), 1.0, 3.92,
                         "erf(t) = 1 - exp(L(t - 1)), L ~= log(erfc), 1 <= t <= 3.92 (float32 lanes): relative "
                         "error of erf", float32=True, pair_first=True),
        "SOFTPLUS32_POLY": Fit(lambda e: (mp.log1p(e) - e + e * e / 2) / e ** 3 if e else mp.mpf(1) / 3,
                               _powers(0, 9), lambda e: e ** 3 / mp.log1p(e) if e else 0, 0.0, 1.0,
                               "log1p(e) = e - e^2/2 + e^3 G(e), 0 <= e <= 1 (softplus's e = exp(-|x|), float32 "
                               "lanes): relative error of log1p(e)", float32=True),
        "SIN_POLY": Fit(lambda z: sqrt_or(z, lambda r: (mp.sin(r) - r) / r ** 3, -mp.mpf(1) / 6), _powers(0, 6),
                        lambda z: sqrt_or(z, lambda r: r ** 3 / mp.sin(r), 0), 0.0, pio4 ** 2,
                        "sin(r) = r + r^3 S(r^2), |r| <= pi/4: relative error of sin"),
        "COS_POLY": Fit(lambda z: (mp.cos(mp.sqrt(z)) - 1 + z / 2) / z ** 2 if z else mp.mpf(1) / 24,
                        _powers(0, 6), lambda z: z ** 2 / mp.cos(mp.sqrt(z)), 0.0, pio4 ** 2,
                        "cos(r) = 1 - r^2/2 + r^4 C(r^2), |r| <= pi/4: relative error of cos"),
        "ATAN_POLY": Fit(lambda z: sqrt_or(z, lambda t: (mp.atan(t) - t) / t ** 3, -mp.mpf(1) / 3),
                         _powers(0, 11), lambda z: sqrt_or(z, lambda t: t ** 3 / mp.atan(t), 0), 0.0,
                         tan_pi8 ** 2, "atan(t) = t + t^3 A(t^2), |t| <= tan(pi/8): relative error of atan"),
        "CBRT_POLY": Fit(lambda m: mp.cbrt(m), _powers(0, 6), lambda m: 1 / mp.cbrt(m), 1.0, 2.0,
                         "cbrt(m) ~= P(m), 1 <= m <= 2, before one Halley step: relative error"),
    }


def lawson(fit: Fit, terms: int | None = None, points: int = 160, iterations: int = 30):
    """Near-minimax coefficients of ``fit`` (as float64, or float32 values for a ``float32`` fit),
    and their max error on the fit's nodes.

    A float32 fit is rounded one coefficient at a time, lowest order first, each time refitting
    the higher ones to what the rounded ones leave: rounding all of them at once costs up to 2^-25
    of the largest (ERF32_BIG: 2.6e-8 instead of 1e-10), refitting recovers nearly all of it. With
    ``pair_first`` the first is kept to 48 bits (a float32 pair, returned as their float64 sum):
    where the weight is largest it alone is the value, and its rounding would set the error."""
    if fit.float32:
        return _lawson_float32(fit, points, iterations)
    mp = _mp()
    a, b = mp.mpf(fit.lo), mp.mpf(fit.hi)
    nodes = [(a + b) / 2 + (b - a) / 2 * mp.cos(mp.pi * (k + mp.mpf(0.5)) / points) for k in range(points)]
    rows, rhs = [], []
    for t in nodes:
        w = fit.weight(t)
        basis = fit.basis(t)
        rows.append([w * v for v in (basis if terms is None else basis[:terms])])
        rhs.append(w * fit.target(t))
    m = len(rows[0])
    lw = [mp.mpf(1) / points] * points
    for _ in range(iterations):
        normal, right = mp.matrix(m, m), mp.matrix(m, 1)
        for row, y, wi in zip(rows, rhs, lw):
            for j in range(m):
                wr = wi * row[j]
                right[j] += wr * y
                for k in range(j, m):
                    normal[j, k] += wr * row[k]
        for j in range(m):
            for k in range(j):
                normal[j, k] = normal[k, j]
        c = mp.lu_solve(normal, right)
        err = [abs(mp.fsum(row[j] * c[j] for j in range(m)) - y) for row, y in zip(rows, rhs)]
        total = mp.fsum(wi * e for wi, e in zip(lw, err))
        lw = [wi * e / total for wi, e in zip(lw, err)]
    coeffs = tuple(float(c[j]) for j in range(m))
    return coeffs, fit_error(None, coeffs, fit=fit)


def _lawson_float32(fit: Fit, points: int, iterations: int):
    mp = _mp()
    fixed: list[float] = []
    count = len(fit.basis(mp.mpf(fit.lo)))
    while len(fixed) < count:
        done = tuple(fixed)

        def rest(t, done=done):
            return fit.target(t) - mp.fsum(c * v for c, v in zip(done, fit.basis(t)))
        sub = Fit(rest, lambda t, k=len(done): fit.basis(t)[k:], fit.weight, fit.lo, fit.hi, fit.doc)
        coeffs, _ = lawson(sub, points=points, iterations=iterations)
        hi = float(np.float32(coeffs[0]))
        fixed.append(hi + float(np.float32(coeffs[0] - hi)) if fit.pair_first and not done else hi)
    return tuple(fixed), fit_error(None, tuple(fixed), fit=fit)


def fit_error(name: str | None, coeffs, n: int = 2000, fit: Fit | None = None) -> float:
    """Max error (as the fit defines it) of the float64 ``coeffs``, in exact arithmetic, on an
    evenly spaced grid of 2n + 1 points."""
    mp = _mp()
    fit = fit or _fits()[name]
    worst = mp.mpf(0)
    for k in range(2 * n + 1):
        t = mp.mpf(fit.lo) + (mp.mpf(fit.hi) - mp.mpf(fit.lo)) * k / (2 * n)
        approx = mp.fsum(mp.mpf(c) * v for c, v in zip(coeffs, fit.basis(t)))
        worst = max(worst, abs(fit.weight(t) * (approx - fit.target(t))))
    return float(worst)


def two_over_pi_chunks(count: int, bits: int) -> tuple[float, ...]:
    """2/pi as ``count`` float64s of ``bits`` bits each: chunk i holds the bits bits * i + 1 to
    bits * (i + 1) after the binary point, so x * chunk is exact for a float32 x if bits <= 29."""
    mp = _mp()
    mp.mp.dps = 200
    v = 2 / mp.pi
    out = []
    for i in range(count):
        scaled = mp.floor(v * mp.mpf(2) ** (bits * (i + 1)))
        out.append(float(int(scaled) % (1 << bits)) * 2.0 ** (-bits * (i + 1)))
    mp.mp.dps = DPS
    return tuple(out)


def reduction_worst_case(lo: int = -24, hi: int = 104):
    """min over float32 x >= 2^-1 of |x * 2/pi - nearest integer|, as (log2 of a lower bound, e, m):
    for each exponent e of x = m 2^e (m < 2^24), the continued fraction of frac(2^e 2/pi) gives the
    best approximation denominator q_k < 2^24 <= q_{k+1}, and no m < q_{k+1} comes closer to an
    integer than q_k does (the best-approximation property)."""
    mp = _mp()
    mp.mp.dps = 200
    worst = None
    for e in range(lo, hi + 1):
        alpha = (2 / mp.pi * mp.mpf(2) ** e) % 1
        p0, q0, p1, q1, x, qk = 0, 1, 1, 0, alpha, 1
        while True:
            a = int(mp.floor(x))
            p0, q0, p1, q1 = p1, q1, a * p1 + p0, a * q1 + q0
            if q1 >= 1 << 24:
                break
            qk = q1
            x = 1 / (x - a)
        d = float(mp.log(abs(qk * alpha - mp.nint(qk * alpha)), 2))
        if worst is None or d < worst[0]:
            worst = (d, e, qk)
    mp.mp.dps = DPS
    return worst


def main(names: list[str]) -> None:
    fits = _fits()
    for name in names or list(fits):
        coeffs, err = lawson(fits[name])
        print(f"{name} = {coeffs!r}\n    # {fits[name].doc}; max error {err:.3g}")
    if not names:
        d, e, m = reduction_worst_case()
        print(f"closest float32 to a multiple of pi/2 (x >= 0.5): {m} * 2^{e}, 2^{d:.2f} of pi/2 away")


if __name__ == "__main__":
    main(sys.argv[1:])
