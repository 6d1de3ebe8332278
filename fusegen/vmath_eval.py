"""fusegen's float32 math library (fusegen/vmath.py) evaluated over arrays, and the correctly
rounded reference it is measured against: the machinery that tests/test_vmath.py,
benchmarks/ulp_table.py and benchmarks/vmath_exhaustive.py share. Kernels never import this.

Implementations, each a function of float32 arrays returning a float32 array:

* ``numba_impl(name)``: a Numba loop over fusegen.vmath_numba's function;
* ``cpp_impl(name)``: the same loop in C++ over _vmath.inc.j2's twin, in one harness library
  built with fusegen's own C++ flags (``cpp_library``), which also holds
* ``libm_impl(name)``: glibc's float32 function (``std::exp(float)`` is ``expf``);
* ``numpy_impl(name)``: NumPy's float32 ufunc (its own SIMD code or libm).

``reference(name, x, y)`` is the correctly rounded float32 result: glibc's float64 function
rounded to float32 wherever that rounding is unambiguous, and mpmath at 120 bits, rounded
directly to 24 bits, where the float64 value lies within ``MARGIN`` float64 ulps of a float32
rounding midpoint (so float64's own error, a few ulps at most, cannot flip it). Special values
(NaN, infinities, zeros) are C99 Annex F's, which the Python array API standard repeats.
``reference64`` is mpmath rounded to 53 bits, for measuring NumPy's float64 functions.
"""
from __future__ import annotations

import ctypes
import functools
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import vmath

F32 = np.float32
MARGIN = 1024        # float64 ulps around a float32 midpoint that send an input to mpmath
MP_BITS = 120


def _sigmoid64(x):
    return 1.0 / (1.0 + np.exp(-x))


@dataclass(frozen=True)
class Ref:
    """How one function is computed by NumPy (``np_name``, float32 and float64), by glibc's
    float32 version (``libm``, C++ with ``{0}``/``{1}`` for the arguments) and by mpmath; where
    its inputs are interesting (``span``: a range worth sampling densely) and its thresholds
    (``edges``: domain boundaries, reduction and saturation points, switches between paths)."""
    np_name: str | Callable
    libm: str
    mp: Callable            # (mpmath module, *mpf args) -> mpf
    span: tuple[float, float]
    edges: tuple[float, ...] = ()
    arity: int = 1


_FLT = (1.0, -1.0, 2.0 ** -126, 2.0 ** -149, float(np.finfo(F32).max))
_EXP_EDGES = (88.72283935546875, 88.72284, -87.33654, -103.97208, -103.2789, 104.0, -104.0,
              0.34657359, -0.34657359, 1e-8, -1e-8) + _FLT
_LOG_EDGES = (0.70710678, 1.4142135, 0.5, 2.0, 10.0, 0.1, 1e10) + _FLT

# float32 closest to multiples of pi/2 (vmath_fit.reduction_worst_case and its runners-up), pi/4
# and its odd multiples (where the quadrant switches), and large magnitudes
_TRIG_EDGES = (16367173 * 2.0 ** 72, 10741887 * 2.0 ** 11, 16573937 * 2.0 ** -16, 10057457 * 2.0 ** 62,
               11617958 * 2.0 ** 17, 1.5707964, 3.1415927, 4.712389, 0.7853982, 2.3561945, 3.9269907,
               1e5, 1e10, 1e20, 1e30) + _FLT

_ATAN_EDGES = (0.41421356, 2.4142137, 1.0, 1e8, 1e30) + _FLT
_UNIT_EDGES = (1.0, 0.99999994, 0.5, 0.41421356, 0.70710678, 1e-4) + _FLT
_HYP_EDGES = (89.415985, 89.41599, 88.72284, 104.0, 0.34657359, 1e-4) + _FLT
_AHYP_EDGES = (268435456.0, 1.0000001, 1.5, 2.0, 1e-4, 1e20) + _FLT

REFS: dict[str, Ref] = {
    "exp": Ref("exp", "std::exp({0})", lambda mp, x: mp.exp(x), (-110.0, 110.0), _EXP_EDGES),
    "expm1": Ref("expm1", "std::expm1({0})", lambda mp, x: mp.expm1(x), (-20.0, 90.0), _EXP_EDGES),
    "tanh": Ref("tanh", "std::tanh({0})", lambda mp, x: mp.tanh(x), (-10.0, 10.0),
                (9.010913, -9.010913, 10.0, -10.0, 0.03125, -0.03125, 2.0 ** -12) + _FLT),
    "sigmoid": Ref(_sigmoid64, "1.0f / (1.0f + std::exp(-{0}))", lambda mp, x: 1 / (1 + mp.exp(-x)),
                   (-110.0, 30.0), (0.03125, -0.03125, 2.0 ** -23, -2.0 ** -24, 16.635532, -88.72284,
                                    -103.97208, -104.0) + _FLT),
    "log": Ref("log", "std::log({0})", lambda mp, x: mp.log(x), (0.0, 10.0), _LOG_EDGES),
    "log1p": Ref("log1p", "std::log1p({0})", lambda mp, x: mp.log1p(x), (-1.0, 10.0),
                 (-0.29289322, 0.41421357, 2.0 ** -29, -2.0 ** -29, 2.0 ** -24, -2.0 ** -25, 2.0 ** 24, 2.0 ** 53,
                  0.5, 1.8284271, 2.0 ** 126, 1.2e38, -0.99999994) + _FLT),
    "log2": Ref("log2", "std::log2({0})", lambda mp, x: mp.log(x, 2), (0.0, 10.0), _LOG_EDGES),
    "log10": Ref("log10", "std::log10({0})", lambda mp, x: mp.log10(x), (0.0, 10.0), _LOG_EDGES),
    "erf": Ref(np.frompyfunc(math.erf, 1, 1), "std::erf({0})", lambda mp, x: mp.erf(x), (-5.0, 5.0),
               (1.0, 3.9192059, 3.92, 0.5, 2.46, 1e-4) + _FLT),
    "sin": Ref("sin", "std::sin({0})", lambda mp, x: mp.sin(x), (-10.0, 10.0), _TRIG_EDGES),
    "cos": Ref("cos", "std::cos({0})", lambda mp, x: mp.cos(x), (-10.0, 10.0), _TRIG_EDGES),
    "tan": Ref("tan", "std::tan({0})", lambda mp, x: mp.tan(x), (-10.0, 10.0), _TRIG_EDGES),
    "atan": Ref("arctan", "std::atan({0})", lambda mp, x: mp.atan(x), (-10.0, 10.0), _ATAN_EDGES),
    "atan2": Ref("arctan2", "std::atan2({0}, {1})", lambda mp, y, x: mp.atan2(y, x), (-10.0, 10.0),
                 _ATAN_EDGES, arity=2),
    "asin": Ref("arcsin", "std::asin({0})", lambda mp, x: mp.asin(x), (-1.0, 1.0), _UNIT_EDGES),
    "acos": Ref("arccos", "std::acos({0})", lambda mp, x: mp.acos(x), (-1.0, 1.0), _UNIT_EDGES),
    "sinh": Ref("sinh", "std::sinh({0})", lambda mp, x: mp.sinh(x), (-95.0, 95.0), _HYP_EDGES),
    "cosh": Ref("cosh", "std::cosh({0})", lambda mp, x: mp.cosh(x), (-95.0, 95.0), _HYP_EDGES),
    "asinh": Ref("arcsinh", "std::asinh({0})", lambda mp, x: mp.asinh(x), (-10.0, 10.0), _AHYP_EDGES),
    "acosh": Ref("arccosh", "std::acosh({0})", lambda mp, x: mp.acosh(x), (1.0, 10.0), _AHYP_EDGES),
    "atanh": Ref("arctanh", "std::atanh({0})", lambda mp, x: mp.atanh(x), (-1.0, 1.0), _UNIT_EDGES),
    "hypot": Ref("hypot", "std::hypot({0}, {1})", lambda mp, x, y: mp.hypot(x, y), (-10.0, 10.0), _FLT,
                 arity=2),
    "cbrt": Ref("cbrt", "std::cbrt({0})", lambda mp, x: mp.sign(x) * mp.cbrt(abs(x)), (-10.0, 10.0),
                (8.0, 27.0, 0.125) + _FLT),
}


def ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Steps between float16, float32 or float64 values a and b, as int64 (0 where both are NaN,
    a huge value where only one is)."""
    a, b = np.asarray(a), np.asarray(b)
    ity = {2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]

    def key(v):  # bit patterns -> integers in the order of the values (-0.0 == +0.0)
        i = v.view(ity).astype(np.int64)
        return np.where(i < 0, -(i & np.iinfo(ity).max), i)
    with np.errstate(over="ignore"):
        d = np.abs(key(a) - key(b))
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    return np.where(nan_a & nan_b, 0, np.where(nan_a | nan_b, np.iinfo(np.int64).max, d))


def bits_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise: the same bits (so -0.0 != +0.0), or both NaN (any payload)."""
    a, b = np.asarray(a), np.asarray(b)
    ity = {2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    return (np.isnan(a) & np.isnan(b)) | (a.view(ity) == b.view(ity))


# --- implementations ------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def numba_loop(name: str):
    """A serial Numba loop over fusegen.vmath_numba's ``name``: loop(x[, y], out)."""
    import numba
    from . import vmath_numba
    f = getattr(vmath_numba, vmath.VMATH_F32[name]["numba"])
    opts = dict(error_model="numpy", nogil=True)
    if vmath.VMATH_F32[name]["arity"] == 2:
        @numba.njit(**opts)
        def loop2(x, y, out):
            for i in range(x.size):
                out[i] = f(x[i], y[i])
        return loop2

    @numba.njit(**opts)
    def loop(x, out):
        for i in range(x.size):
            out[i] = f(x[i])
    return loop


def numba_impl(name: str):
    """fusegen.vmath_numba's ``name`` over arrays: (x[, y]) -> float32 array."""
    loop = numba_loop(name)

    def call(*args):
        args = [np.ascontiguousarray(a, F32) for a in args]
        out = np.empty_like(args[0])
        loop(*args, out)
        return out
    return call


def harness_source() -> str:
    """C++: every function of VMATH_F32 and its glibc float32 counterpart in an exported loop."""
    lines = [vmath.render_cpp(), "extern \"C\" {"]
    for name, e in vmath.VMATH_F32.items():
        args = "x[i]" if e["arity"] == 1 else "x[i], y[i]"
        libm = REFS[name].libm.format("x[i]", "y[i]")
        y = "y" if e["arity"] == 2 else "/* unused */"
        for prefix, expr in (("fgvm", f"{e['cpp']}({args})"), ("libm", libm)):
            lines.append(f"void {prefix}_{name}(const float *x, const float *{y}, float *out, int64_t n) {{\n"
                         f"  for (int64_t i = 0; i < n; ++i) out[i] = {expr};\n}}")
    lines.append("}  // extern \"C\"\n")
    return "\n".join(lines)


def cuda_source() -> str:
    """CUDA: every function of VMATH_F32 in a __global__ kernel (device code compiles, nothing more)."""
    kernels = []
    for name, e in vmath.VMATH_F32.items():
        args = "x[i]" if e["arity"] == 1 else "x[i], y[i]"
        y = "y" if e["arity"] == 2 else "/* unused */"
        kernels.append(f"__global__ void vm_{name}(const float *x, const float *{y}, float *out, int n) {{\n"
                       f"  const int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                       f"  if (i < n) out[i] = {e['cpp']}({args});\n}}")
    return vmath.render_cpp() + "\n".join(kernels) + "\n"


@functools.lru_cache(maxsize=None)
def cpp_library() -> ctypes.CDLL:
    """The harness, built (and cached by content) with fusegen's default C++ flags."""
    from .native import build
    path = build.cache_dir() / "vmath" / "vmath_harness.cc"
    path.parent.mkdir(parents=True, exist_ok=True)
    src = harness_source()
    if not path.is_file() or path.read_text() != src:
        path.write_text(src)
    flags = [f for f in build.default_cpp_flags() if f != "-fopenmp"]
    return ctypes.CDLL(str(build.build_library(path, flags=flags)))


def _cpp_caller(symbol: str):
    fn = getattr(cpp_library(), symbol)
    ptr = ctypes.POINTER(ctypes.c_float)
    fn.argtypes = [ptr, ptr, ptr, ctypes.c_int64]
    fn.restype = None

    def call(x, y=None):
        x = np.ascontiguousarray(x, F32)
        y = x if y is None else np.ascontiguousarray(y, F32)
        out = np.empty_like(x)
        fn(x.ctypes.data_as(ptr), y.ctypes.data_as(ptr), out.ctypes.data_as(ptr), x.size)
        return out
    return call


def cpp_impl(name: str):
    """_vmath.inc.j2's ``fg::<name>_f32`` in a C++ loop."""
    return _cpp_caller(f"fgvm_{name}")


def libm_impl(name: str):
    """glibc's float32 function (std:: on float) in a C++ loop."""
    return _cpp_caller(f"libm_{name}")


def numpy_impl(name: str, dtype=F32):
    """NumPy's ufunc on float32 (or ``dtype``) arrays."""
    f = REFS[name].np_name
    f = getattr(np, f) if isinstance(f, str) else f

    def call(*args):
        with np.errstate(all="ignore"):  # (NumPy has no erf: math.erf, element by element)
            return np.asarray(f(*(np.asarray(a, dtype) for a in args))).astype(np.float64).astype(dtype)
    return call


IMPLS = {"numba": numba_impl, "cpp": cpp_impl, "libm": libm_impl, "numpy": numpy_impl}


# --- the correctly rounded reference --------------------------------------------------------------
def round_mpf(v, bits: int = 24, emin: int = -149, emax: int = 127) -> float:
    """An mpmath number rounded to nearest-even with ``bits`` significant bits, no quantum
    below 2^emin (subnormals) and inf from 2^(emax + 1): float32 by default, float64 with
    (53, -1074, 1023). Exact integer arithmetic on the mantissa."""
    import mpmath as mp
    if mp.isnan(v):
        return math.nan
    if mp.isinf(v):
        return math.copysign(math.inf, v)
    sign, man, exp, bc = v._mpf_
    if man == 0:
        return -0.0 if sign else 0.0
    quantum = max(exp + bc - bits, emin)
    shift = quantum - exp
    if shift > 0:
        rem = man & ((1 << shift) - 1)
        man >>= shift
        half = 1 << (shift - 1)
        if rem > half or (rem == half and man & 1):
            man += 1
        exp = quantum
    if man.bit_length() + exp > emax + 1:
        return -math.inf if sign else math.inf
    value = math.ldexp(float(man), exp)
    return -value if sign else value


def mp_value(name: str, *args: float, bits: int = MP_BITS):
    import mpmath as mp
    with mp.workprec(bits):
        return REFS[name].mp(mp, *(mp.mpf(float(a)) for a in args))


def reference64(name: str, *args) -> np.ndarray:
    """The correctly rounded float64 result, by mpmath for every element (slow: ~50 us each)."""
    args = [np.asarray(a, np.float64) for a in args]
    with np.errstate(all="ignore"):
        special = numpy_impl(name, np.float64)(*args)
    out = special.copy()
    finite = np.isfinite(special) & (special != 0)
    for i in np.flatnonzero(finite):
        out[i] = round_mpf(mp_value(name, *(a[i] for a in args)), 53, -1074, 1023)
    return out


def _near_midpoint(r64: np.ndarray, r32: np.ndarray) -> np.ndarray:
    """Where the float64 value r64 is within MARGIN float64 ulps of a float32 rounding midpoint
    (r32 is r64 rounded to float32)."""
    a = r32.astype(np.float64)
    fmax = float(np.finfo(F32).max)
    top = fmax + 2.0 ** 103                                  # the midpoint between FLT_MAX and 2^128
    with np.errstate(all="ignore"):
        towards = np.where(r64 > a, np.inf, -np.inf).astype(F32)
        b = np.nextafter(r32, towards).astype(np.float64)
        mid = np.where(np.isinf(b) & np.isfinite(a), np.copysign(top, a), (a + b) / 2)
        mid = np.where(np.isinf(a), np.copysign(top, a), mid)  # overflowed: the boundary below inf
        return np.isfinite(r64) & (np.abs(r64 - mid) <= MARGIN * np.spacing(np.abs(r64)))


def reference(name: str, x: np.ndarray, y: np.ndarray | None = None, exact: bool = False) -> np.ndarray:
    """The correctly rounded float32 result of ``name`` at float32 x (and y). ``exact``: by mpmath
    for every finite nonzero result, not only near midpoints (slow: ~50 us each)."""
    args = [np.asarray(x, F32)] + ([] if y is None else [np.asarray(y, F32)])
    r64 = numpy_impl(name, np.float64)(*args)
    with np.errstate(over="ignore"):
        r32 = r64.astype(F32)
    todo = (np.isfinite(r64) & (r64 != 0)) if exact else _near_midpoint(r64, r32)
    for a in args:  # mpmath has no -0.0: a zero argument's result is a special case (atan2's +-pi)
        todo &= a != 0
    for i in np.flatnonzero(todo):
        r32[i] = round_mpf(mp_value(name, *(a[i] for a in args)))
    return r32


def neighbours(values, k: int = 4) -> np.ndarray:
    """Each value (and its negation) and the k float32 values on either side of them."""
    v = np.asarray(values, F32)
    v = np.concatenate([v, -v])
    out = [v]
    up, down = v.copy(), v.copy()
    with np.errstate(over="ignore"):  # FLT_MAX's neighbour is inf
        for _ in range(k):
            up, down = np.nextafter(up, F32(np.inf)), np.nextafter(down, F32(-np.inf))
            out += [up, down]
    return np.concatenate(out)


SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0],
                    F32)


def sweep(name: str, stride_log2: int = 16, random: int = 1 << 16, dense: int = 1 << 16, k: int = 16,
          seed: int = 20261121) -> tuple[np.ndarray, ...]:
    """Inputs for measuring ``name``: every 2^stride_log2-th float32 bit pattern (every binade,
    evenly), ``random`` random bit patterns, ``dense`` evenly spaced points of the function's
    span, the specials and k float32 neighbours of each edge. For a two-argument function, pairs:
    the same values against a shuffled copy of themselves, plus every pair of specials and edges."""
    ref = REFS[name]
    rng = np.random.default_rng(seed)
    strided = np.arange(0, 1 << 32, 1 << stride_log2, dtype=np.uint64).astype(np.uint32).view(F32)
    rand = rng.integers(0, 1 << 32, random, dtype=np.uint64).astype(np.uint32).view(F32)
    span = np.linspace(*ref.span, dense, dtype=F32)
    edges = neighbours(ref.edges, k) if ref.edges else np.zeros(0, F32)
    x = np.concatenate([strided, rand, span, SPECIALS, edges])
    if ref.arity == 1:
        return (x,)
    grid = np.concatenate([SPECIALS, neighbours(ref.edges, 1)])
    gx, gy = np.meshgrid(grid, grid)
    return (np.concatenate([x, gx.ravel()]), np.concatenate([rng.permutation(x), gy.ravel()]))
