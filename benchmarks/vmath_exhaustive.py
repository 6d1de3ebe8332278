"""fusegen's float32 math library (fusegen/vmath.py) on every one of the 2^32 float32 inputs.

For each one-argument function of vmath.VMATH_F32 and each backend (fusegen.vmath_eval's Numba
loop and C++ harness: the code generated kernels inline), the result is compared with the correctly
rounded one (fusegen.vmath_eval.reference: glibc's float64 function rounded once, mpmath near
float32 rounding midpoints) and with NumPy's float32 function, in ulps (steps between adjacent
float32 values); the backends are also compared with each other bit for bit. tests/test_vmath.py
and benchmarks/ulp_table.py check dense sweeps; this is the full measurement vmath.VMATH_F32's
``max_ulp`` quotes where ``measured="exhaustive"``. Two-argument functions (atan2, hypot) have
2^64 inputs: not here.

    nice -n 19 python benchmarks/vmath_exhaustive.py [--ops exp,log] [--backends numba,cpp] [--stride 7]

``--stride N`` measures every N-th bit pattern only (N odd reaches every binade and both signs).
One thread; a few minutes per function on this machine kind.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from fusegen import vmath, vmath_eval


def measure(name: str, backends: list[str], stride: int = 1, chunk: int = 1 << 22) -> dict:
    """Per backend: max ulps from the correct result, inputs off, NaN disagreements, bit-identity
    with the first backend; NumPy's own max ulps and inputs off (``-`` where NumPy has no
    float32 version)."""
    impls = {b: vmath_eval.IMPLS[b](name) for b in backends}
    res = {b: dict(max_ulp=0, off=0, nan_mismatch=0, differs_from_first=0) for b in backends}
    numpy = dict(max_ulp=0, off=0) if name not in ("erf",) else None
    count = 0
    step = chunk * stride
    for start in range(0, 1 << 32, step):
        bits = np.arange(start, min(start + step, 1 << 32), stride, dtype=np.uint64).astype(np.uint32)
        x = bits.view(np.float32)
        count += x.size
        want = vmath_eval.reference(name, x)
        nan = np.isnan(want)
        first = None
        for b, f in impls.items():
            got = f(x)
            err = vmath_eval.ulps(got, want)
            r = res[b]
            r["nan_mismatch"] += int((np.isnan(got) != nan).sum())
            r["max_ulp"] = max(r["max_ulp"], int(np.where(nan, 0, err).max()))
            r["off"] += int((err > 0).sum())
            if first is None:
                first = got
            else:
                r["differs_from_first"] += int((~vmath_eval.bits_equal(got, first)).sum())
        if numpy is not None:
            err = vmath_eval.ulps(vmath_eval.numpy_impl(name)(x), want)
            numpy["max_ulp"] = max(numpy["max_ulp"], int(err.max()))
            numpy["off"] += int((err > 0).sum())
    return dict(inputs=count, stride=stride, backends=res, numpy=numpy)


def main() -> None:
    unary = [n for n, e in vmath.VMATH_F32.items() if e["arity"] == 1]
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", default=",".join(unary))
    p.add_argument("--backends", default="numba,cpp")
    p.add_argument("--stride", type=int, default=1, help="measure every N-th float32 bit pattern")
    p.add_argument("--json", help="append one JSON line per function here")
    args = p.parse_args()
    for name in args.ops.split(","):
        if vmath.VMATH_F32[name]["arity"] != 1:
            print(f"{name}: two arguments (2^64 inputs), skipped")
            continue
        t = time.perf_counter()
        res = measure(name, args.backends.split(","), args.stride)
        res["seconds"] = round(time.perf_counter() - t)
        n = res["numpy"]
        numpy = f"NumPy float32 is up to {n['max_ulp']} ulp off, on {n['off']} inputs" if n else "NumPy has none"
        print(f"{name}: {res['inputs']} inputs (every {args.stride}th); {numpy} ({res['seconds']} s)")
        for b, r in res["backends"].items():
            print(f"  fusegen {b}: up to {r['max_ulp']} ulp off, on {r['off']} inputs; {r['nan_mismatch']} NaN "
                  f"disagreements; {r['differs_from_first']} results differing from {args.backends.split(',')[0]}")
        if args.json:
            with open(args.json, "a") as fh:
                fh.write(json.dumps(dict(function=name, **res)) + "\n")


if __name__ == "__main__":
    main()
