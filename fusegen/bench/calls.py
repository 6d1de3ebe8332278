"""``fusegen bench --calls``: where the time of a small call goes, per backend, so a regression
shows where it is.

A call at the small shape is split into what a *signature* costs once (validation: the inputs
classified, checked and the attributes bound; shape inference: the IR's rules evaluated) and
what *every* call costs: the signature lookup (the key built from dtypes, shapes and attributes,
and the dict lookup), allocation (the fresh outputs; where the Numba runner has one, its C call
that checks the inputs and allocates), dispatch (the generated runner's checks and argument
passing: Numba's compiled entry points, the AOT argument block through ctypes) and the native
code itself (the compiled functions called directly on prepared arrays). Each figure
is the minimum over rounds of many calls (robust to a busy machine's interruptions), so the
parts add up to about the whole, not exactly.
"""
from __future__ import annotations

import timeit
from typing import Any, Callable

import numpy as np

from .. import runtime
from ..ir import infer
from ..rt.cpu import call_signature
from . import variants
from .cases import OpBench

PARTS = ("validation (once)", "shape inference (once)", "lookup", "allocation", "dispatch", "native", "call")


def best_us(fn: Callable[[], Any], number: int = 300, rounds: int = 30) -> float:
    """The minimum over ``rounds`` of the mean time of ``number`` calls of ``fn``, in microseconds."""
    return min(timeit.repeat(fn, number=number, repeat=rounds)) / number * 1e6


def _numba_native(call: Any, arrays: tuple) -> Callable[[], None]:
    """The signature's compiled functions on its own arrays, as the runner calls them."""
    outs = [np.empty(s, d) for s, d in zip(call.out_shapes, call.reg_out_dtypes)]
    ws = [np.empty(s, d) for s, d in call.ws]
    named = {"in": arrays, "out": outs, "buf": ws}
    steps = []
    for grp in call.groups:
        args = [named[k][i] for k, i in grp.sources] + [grp.meta] + [call.attr_values[a] for a in grp.attrs]
        args += list(grp.params)
        steps.append((grp.entry or grp.func, tuple(args)))

    def native() -> None:
        for fn, args in steps:
            fn(*args)
    return native


def _aot_native(call: Any, arrays: tuple) -> Callable[[], None]:
    """The library's main function on the signature's argument block, last filled by a call into
    outputs held here (so the pointers it reuses stay valid); where the runner takes the
    small-call path, that path's one C call (its checks and the outputs' allocation included:
    the breakdown's allocation is then the Python runner's estimate, not part of the call)."""
    if call.small is not None:
        fn, _, prepared, _ = call.small
        return lambda: fn(prepared, *arrays)
    held = call.kernel(*arrays)
    held = held if isinstance(held, tuple) else (held,)
    call.kernel.run_prepared(call.signature, list(arrays), held)
    return lambda: call.kernel.call_block(call.signature, held)


def breakdown(spec: OpBench, backend: str, shape: tuple[int, ...], dtype: str = "float32",
              number: int = 300, rounds: int = 30) -> dict[str, float]:
    """Microseconds per part (``PARTS``) of a call of ``spec``'s op on ``backend`` at ``shape``."""
    options = {"dtypes": dtype} if backend == "aot" else {}
    kernel = runtime.compile(spec.op, backend=backend, **options)
    arrays = spec.make_inputs(shape, dtype)
    attrs = spec.variants[-1]
    call = kernel.prepared(*arrays, **attrs)
    op = spec.op

    def validate() -> dict:
        arrs, _ = call_signature(kernel, arrays, attrs)
        kernel.executor.check(arrs)
        return op.bind_attrs(attrs)

    bound = validate()
    dtypes, shapes = [a.dtype for a in arrays], [a.shape for a in arrays]
    native = (_aot_native if backend == "aot" else _numba_native)(call, arrays)
    allocs = [(tuple(s), np.dtype(d)) for s, d in zip(call.out_shapes, call.out_dtypes)]
    fresh = getattr(call, "fresh", None)   # the Numba runner allocates in one C call where it can
    allocate = (lambda: fresh[0](fresh[1], *arrays)) if fresh is not None else \
        (lambda: [np.empty(s, d) for s, d in allocs])
    run = call.run
    t = {"validation (once)": best_us(validate, number, rounds),
         "shape inference (once)": best_us(lambda: infer(op, dtypes, shapes, bound), number, rounds),
         "allocation": best_us(allocate, number, rounds),
         "native": best_us(native, number, rounds),
         "runner": best_us(lambda: run(arrays, None), number, rounds),
         "call": best_us(lambda: kernel(*arrays, **attrs), number, rounds)}
    t["lookup"] = max(0.0, t["call"] - t["runner"])
    allocated = 0.0 if backend == "aot" and call.small is not None else t["allocation"]  # (in native)
    t["dispatch"] = max(0.0, t.pop("runner") - allocated - t["native"])
    return {p: t[p] for p in PARTS}


def small_shape(spec: OpBench, default: tuple[int, ...] = (4, 5)) -> tuple[int, ...]:
    """The shape ``spec``'s per-call case uses: its smallest own shape (a layout row's 3-D or 4-D
    tensor), else ``default``."""
    return tuple(spec.small_shapes[-1]) if spec.small_shapes else default


def calls_table(specs: list[OpBench], backends: list[str], shape: tuple[int, ...] = (4, 5),
                number: int = 300, rounds: int = 30) -> dict:
    """``{op: {backend: breakdown}}`` for every op and backend that works here (an error string
    where a backend fails), each op at its per-call shape (``small_shape``; ``shape`` for the
    2-D rows)."""
    out: dict[str, dict] = {}
    for spec in specs:
        row = out.setdefault(spec.name, {})
        for backend in backends:
            try:
                row[backend] = breakdown(spec, backend, small_shape(spec, shape), number=number, rounds=rounds)
            except Exception as e:  # noqa: BLE001 - a missing compiler is a row, not a crash
                row[backend] = f"{type(e).__name__}: {e}"
    return out


def format_calls(table: dict, shape: tuple[int, ...] = (4, 5)) -> str:
    """The breakdown as a text table (microseconds)."""
    head = ["op", "backend", *PARTS]
    rows = [head]
    for op, per in table.items():
        name = op if op not in variants.ALL_OPS else f"{op} {small_shape(variants.ALL_OPS[op], shape)}"
        for backend, parts in per.items():
            if isinstance(parts, str):
                rows.append([name, backend, parts] + [""] * (len(PARTS) - 1))
            else:
                rows.append([name, backend, *(f"{parts[p]:.2f}" for p in PARTS)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = [f"Per call at each op's smallest shape ({shape} for 2-D ops), microseconds (minimum over "
             "rounds; 'once': per input signature, not per call):"]
    lines += ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    return "\n".join(lines)
