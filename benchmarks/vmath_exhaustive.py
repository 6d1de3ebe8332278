"""fusegen's float32 exp and tanh (fusegen/vmath.py) on every one of the 2^32 float32 inputs.

Each backend's result is compared with the correctly rounded one (NumPy's float64 function
rounded to float32; float64's own error is 2^-29 of a float32 ulp) and with NumPy's float32
function, in ulps (steps between adjacent float32 values). tests/test_vmath.py checks a dense
sweep on every run; this is the full measurement its docstring quotes (about 10 minutes per
function on 2 cores).

    python benchmarks/vmath_exhaustive.py [--ops exp,tanh] [--backends numba,aot]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import fusegen as fg


@fg.op
def exp_op(x):
    return fg.exp(x)


@fg.op
def tanh_op(x):
    return fg.tanh(x)


OPS = {"exp": (exp_op, np.exp), "tanh": (tanh_op, np.tanh)}


def order_key(v: np.ndarray) -> np.ndarray:
    """float32 bit patterns -> integers in the order of their values (-0.0 == +0.0)."""
    i = v.view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


def measure(name: str, backends: list[str], chunk: int = 1 << 25) -> dict:
    """Per backend: max ulps from the correct result, how many inputs are off, max ulps from
    NumPy, NaN disagreements; and NumPy's own max ulps and count off."""
    op, f = OPS[name]
    kernels = {b: fg.compile(op, backend=b) for b in backends}
    res = {b: dict(max_ulp=0, off=0, max_ulp_vs_numpy=0, nan_mismatch=0) for b in backends}
    res["numpy"] = dict(max_ulp=0, off=0)
    for start in range(0, 1 << 32, chunk):
        x = np.arange(start, start + chunk, dtype=np.uint32).view(np.float32)
        with np.errstate(all="ignore"):
            correct = f(x.astype(np.float64)).astype(np.float32)
            npy = f(x)
        nan = np.isnan(correct)
        k_correct, k_npy = order_key(correct), order_key(npy)
        d = np.where(nan, 0, np.abs(k_npy - k_correct))
        res["numpy"]["max_ulp"] = max(res["numpy"]["max_ulp"], int(d.max()))
        res["numpy"]["off"] += int((d > 0).sum())
        for b, k in kernels.items():
            got = k(x)
            r = res[b]
            r["nan_mismatch"] += int((np.isnan(got) != nan).sum())
            k_got = order_key(got)
            d = np.where(nan, 0, np.abs(k_got - k_correct))
            r["max_ulp"] = max(r["max_ulp"], int(d.max()))
            r["off"] += int((d > 0).sum())
            r["max_ulp_vs_numpy"] = max(r["max_ulp_vs_numpy"], int(np.where(nan, 0, np.abs(k_got - k_npy)).max()))
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", default="exp,tanh")
    p.add_argument("--backends", default="numba,aot")
    args = p.parse_args()
    for name in args.ops.split(","):
        t = time.perf_counter()
        res = measure(name, args.backends.split(","))
        n = res.pop("numpy")
        print(f"{name}: NumPy float32 is up to {n['max_ulp']} ulp off, on {n['off']} inputs "
              f"({time.perf_counter() - t:.0f} s)")
        for b, r in res.items():
            print(f"  fusegen {b}: up to {r['max_ulp']} ulp off, on {r['off']} inputs; up to "
                  f"{r['max_ulp_vs_numpy']} ulp from NumPy; {r['nan_mismatch']} NaN disagreements")


if __name__ == "__main__":
    main()
