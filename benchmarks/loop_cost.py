"""Instructions per element of an op's hot loop in the machine code of both CPU backends, and its
time per element in cache: the deterministic and the quick measure of a compute-bound elementwise
op (issue #19), where ``fusegen bench`` needs an idle machine.

Instructions: the innermost loops (a backward branch with no other loop inside) that hold a
packed store, in Numba's assembly of the kernel (``inspect_asm``) and in ``objdump -d`` of the
emitted C++ library's float32 stage functions; for each, its instructions divided by the
elements it stores (a zmm store of float32 is 16 of them). The hot loop is the one that stores the
most elements per iteration (the vector body, not its remainder). Time: one call on an in-cache
shape with ``out=`` (one thread: below the kernels' threading threshold), the minimum over
``--calls`` calls, in ns per element.

    python benchmarks/loop_cost.py --ops silu,sigmoid,softplus,mish,gelu,bias_gelu
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time

import numba

import fusegen as fg
from fusegen.bench.variants import ALL_OPS

_LANE_BYTES = {"zmm": 64, "ymm": 32, "xmm": 16}
# a packed store to memory other than the stack (spills and struct copies go to (%rsp))
_STORE = re.compile(r"^v?mov(?:up|ap|dqu|dqa)\w*\s+%([xyz]mm)\d+,\s*[^%]*\((?!%rsp)")
_BRANCH = re.compile(r"^j\w+\s+(\S+)")


def _loops(instrs: list[tuple[str, str]]) -> list[list[str]]:
    """The innermost loops of a function: [(label, instruction)] -> the loops' instructions."""
    where = {label: i for i, (label, _) in enumerate(instrs) if label}
    spans = []
    for j, (_, text) in enumerate(instrs):
        m = _BRANCH.match(text)
        i = where.get(m.group(1)) if m else None
        if i is not None and i <= j:
            spans.append((i, j))
    inner = [s for s in spans if not any(o != s and s[0] <= o[0] and o[1] <= s[1] for o in spans)]
    return [[t for _, t in instrs[i:j + 1]] for i, j in inner]


def hot_loop(instrs: list[tuple[str, str]], itemsize: int = 4) -> dict | None:
    """{instructions, elements, per_element, width} of the loop storing the most elements per
    iteration, or None if no innermost loop stores a vector."""
    best = None
    for body in _loops(instrs):
        stores = [_STORE.match(t) for t in body]
        elements = sum(_LANE_BYTES[m.group(1)] // itemsize for m in stores if m)
        if not elements:
            continue
        widths = sorted({m.group(1) for m in stores if m})
        row = dict(instructions=len(body), elements=elements, per_element=round(len(body) / elements, 2),
                   width="/".join(widths))
        if best is None or (elements, len(body)) > (best["elements"], best["instructions"]):
            best = row
    return best


def _llvm_asm(text: str) -> list[tuple[str, str]]:
    out, label = [], ""
    for line in text.splitlines():
        s = line.split("#")[0].strip()
        if not s:
            continue
        if s.endswith(":"):
            label = s[:-1]
        elif not s.startswith("."):
            out.append((label, s))
            label = ""
    return out


def _objdump(path: str, symbol: re.Pattern) -> list[list[tuple[str, str]]]:
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", path], capture_output=True, text=True,
                         check=True).stdout
    funcs = []
    for m in re.finditer(r"^[0-9a-f]+ <([^\n]*)>:\n(.*?)(?=\n\n|\Z)", dis, re.S | re.M):
        if not symbol.search(m.group(1)):
            continue
        body = []
        for line in m.group(2).splitlines():
            parts = line.split("\t")
            if len(parts) >= 2:
                addr = parts[0].strip().rstrip(":")
                text = re.sub(r"\s+<[^>]*>$", "", parts[1].strip())
                body.append((addr, text))
        funcs.append(body)
    return funcs


def numba_loop(kernel) -> dict | None:
    """(Numba shows no assembly for a function it loaded from its cache: compiled again, uncached.)"""
    cached = kernel._last.groups[0].func
    options = {k: v for k, v in cached.targetoptions.items() if k != "nopython"}
    func = numba.njit(**dict(options, cache=False))(cached.py_func)
    sig = cached.signatures[0]
    func.compile(sig)
    return hot_loop(_llvm_asm(func.inspect_asm(sig)))


def aot_loop(kernel) -> dict | None:
    rows = [hot_loop(f) for f in _objdump(str(kernel.lib_path), re.compile(r"k_float32\w*::stage"))]
    rows = [r for r in rows if r]
    return max(rows, key=lambda r: (r["elements"], r["instructions"])) if rows else None


def ns_per_element(kernel, arrays, calls: int) -> float:
    out = kernel(*arrays)
    outs = out if isinstance(out, tuple) else (out,)
    best = float("inf")
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        kernel(*arrays, out=outs)
        best = min(best, time.perf_counter_ns() - t0)
    return best / outs[0].size


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", default="silu,sigmoid,softplus,mish,gelu,bias_gelu,user_bias_gelu_tanh")
    p.add_argument("--shape", default="64,1024")
    p.add_argument("--calls", type=int, default=300)
    args = p.parse_args(argv)
    shape = tuple(int(s) for s in args.shape.split(","))
    print("| op | Numba instr/elem | AOT instr/elem | Numba ns/elem | AOT ns/elem |\n|---|---:|---:|---:|---:|")
    for name in args.ops.split(","):
        spec = ALL_OPS[name]
        arrays = spec.make_inputs(shape, "float32", seed=3)
        kn, ka = fg.compile(spec.op), fg.compile(spec.op, backend="aot")
        tn, ta = ns_per_element(kn, arrays, args.calls), ns_per_element(ka, arrays, args.calls)
        ln, la = numba_loop(kn), aot_loop(ka)

        def cell(r):
            return f"{r['per_element']} ({r['instructions']}/{r['elements']} {r['width']})" if r else "-"
        print(f"| {name} | {cell(ln)} | {cell(la)} | {tn:.3f} | {ta:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
