"""Accuracy of fusegen's float32 math library against the correctly rounded result, beside NumPy's
and glibc's: the table issue #18 asks the README to publish.

For each function of fusegen.vmath.VMATH_F32 and each implementation, the largest distance in
ulp from the correctly rounded result, and how many inputs are not correctly rounded, over a
sweep (fusegen.vmath_eval.sweep: every 2^k-th float32 bit pattern, random bit patterns, a dense
grid of the function's interesting range, the specials, and float32 neighbours of every edge:
domain boundaries, reduction and saturation points). The reference is fusegen.vmath_eval.reference:
glibc's float64 function rounded once, and mpmath (120 bits, rounded straight to float32) wherever
that float64 value lies near a float32 rounding midpoint.

Implementations: float32 -- NumPy's ufunc, glibc's float32 function (``std::exp(float)`` =
``expf``, in a C++ loop), fusegen's Numba version and its C++ twin (fusegen.vmath_eval); float64
-- NumPy's ufunc against mpmath rounded to float64, on a smaller sample (mpmath for every input).
``sigmoid`` is 1 / (1 + exp(-x)) written in float32 for NumPy and glibc (fusegen's current
expression-table formula, with fusegen's exp it is off by up to 2 ulp and flushes below -88.7).

    python benchmarks/ulp_table.py --quick            # a few seconds per function (CI)
    python benchmarks/ulp_table.py                    # ~2^24 inputs per function
    python benchmarks/ulp_table.py --json out.json --markdown out.md --functions sin,cos
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time

import numpy as np

from fusegen import vmath, vmath_eval

F32_IMPLS = ("numpy", "libm", "numba", "cpp")
NO_NUMPY = {"erf"}  # NumPy has no erf
MODES = {  # sweep parameters, float64 sample size
    "quick": dict(sweep=dict(stride_log2=16, random=1 << 15, dense=1 << 15, k=16), f64=400),
    "full": dict(sweep=dict(stride_log2=9, random=1 << 22, dense=1 << 22, k=256), f64=20_000),
}


def float64_sample(name: str, n: int, seed: int = 7) -> tuple[np.ndarray, ...]:
    """float64 inputs: random bit patterns, the function's range, edges (as float64)."""
    ref = vmath_eval.REFS[name]
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(ref.arity):
        bits = rng.integers(0, 1 << 64, n // 2, dtype=np.uint64).view(np.float64)
        span = rng.uniform(*ref.span, n - n // 2)
        edges = np.array(ref.edges + tuple(-e for e in ref.edges), np.float64)
        out.append(rng.permutation(np.concatenate([bits, span, edges])))
    return tuple(out)


def errors(got: np.ndarray, want: np.ndarray) -> dict:
    """Max ulp and inputs off where both or neither are NaN; NaN disagreements apart (glibc's
    float32 hypot gives NaN for (inf, signalling NaN), the standard +inf)."""
    nan = np.isnan(got) != np.isnan(want)
    err = np.where(nan, 0, vmath_eval.ulps(got, want))
    return dict(max_ulp=int(err.max()), off=int((err > 0).sum()), nan_mismatch=int(nan.sum()))


def measure(name: str, mode: str) -> dict:
    """One function's row: per implementation, max ulp and inputs off; Numba/C++ identity."""
    t0 = time.perf_counter()
    args = vmath_eval.sweep(name, **MODES[mode]["sweep"])
    want = vmath_eval.reference(name, *args)
    row = dict(inputs=int(args[0].size), float32={})
    got = {}
    for impl in F32_IMPLS:
        got[impl] = vmath_eval.IMPLS[impl](name)(*args)
        row["float32"][impl] = errors(got[impl], want)
    if name in NO_NUMPY:  # (vmath_eval's "NumPy" erf is math.erf in float64: not a float32 function)
        row["float32"]["numpy"] = None
    row["numba_cpp_identical"] = bool(vmath_eval.bits_equal(got["numba"], got["cpp"]).all())
    x64 = float64_sample(name, MODES[mode]["f64"])
    want64 = vmath_eval.reference64(name, *x64)
    row["float64"] = dict(numpy=errors(vmath_eval.numpy_impl(name, np.float64)(*x64), want64), inputs=int(x64[0].size))
    row["seconds"] = round(time.perf_counter() - t0, 1)
    return row


def cell(r: dict | None) -> str:
    if r is None:
        return "-"
    text = f"{r['max_ulp']} ({r['off']:,})" if r["off"] else "0"
    return text + (f", NaN≠ {r['nan_mismatch']}" if r["nan_mismatch"] else "")


def markdown(rows: dict, mode: str) -> str:
    head = ("| function | inputs | NumPy f32 | glibc f32 | fusegen Numba | fusegen C++ | Numba = C++ | "
            "NumPy f64 |\n|---|---:|---:|---:|---:|---:|:---:|---:|")
    lines = [f"Max error in ulp against the correctly rounded result (in parentheses: inputs not correctly "
             f"rounded), `benchmarks/ulp_table.py{' --quick' if mode == 'quick' else ''}`.", "", head]
    for name, r in rows.items():
        f = r["float32"]
        lines.append(f"| {name} | {r['inputs']:,} | {cell(f['numpy'])} | {cell(f['libm'])} | {cell(f['numba'])} | "
                     f"{cell(f['cpp'])} | {'yes' if r['numba_cpp_identical'] else '**no**'} | "
                     f"{cell(r['float64']['numpy'])} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a small sweep (CI)")
    p.add_argument("--functions", default=",".join(vmath.VMATH_F32))
    p.add_argument("--json", help="write the measurements here")
    p.add_argument("--markdown", help="write the table here")
    args = p.parse_args(argv)
    mode = "quick" if args.quick else "full"
    rows = {}
    for name in args.functions.split(","):
        rows[name] = measure(name, mode)
        f = rows[name]["float32"]
        print(f"{name}: fusegen {f['numba']['max_ulp']}/{f['cpp']['max_ulp']} ulp, NumPy {cell(f['numpy'])}, "
              f"glibc {cell(f['libm'])} ({rows[name]['seconds']} s)", file=sys.stderr)
    table = markdown(rows, mode)
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(table)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(mode=mode, numpy=np.__version__, machine=platform.machine(), functions=rows), fh, indent=1)
    bound = {n: vmath.VMATH_F32[n]["max_ulp"] for n in rows}
    bad = [n for n, r in rows.items() if not r["numba_cpp_identical"]
           or any(r["float32"][i]["max_ulp"] > bound[n] or r["float32"][i]["nan_mismatch"] for i in ("numba", "cpp"))]
    if bad:
        print(f"above vmath.VMATH_F32's bound, or Numba and C++ differ: {bad}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
