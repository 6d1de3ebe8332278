"""``fusegen bench --bridges``: fused ops through the JAX and PyTorch bridges, against the same
computation written for those frameworks.

Per reference op, two cases: the per-call cost at a small shape (4, 5) and the ratio to the
memory-bandwidth bound at a large one. The methods:

* ``jax.jit(fg)``: the fusegen op called inside ``jax.jit`` (``fg.jax.function``: an XLA FFI call,
  partitionable); ``jax.jit(jnp)``: the reference code in ``jax.numpy`` under ``jax.jit``;
* ``torch.compile(fg)``: the fusegen op (``fg.torch.function``, a custom operator) inside a
  ``torch.compile(fullgraph=True)`` function; ``torch.compile(torch)``: the reference code in torch.

A **sharded row** runs in a child process with 4 host CPU devices (the device count is fixed when
JAX is imported): the large case's rows split over a 4-device mesh, ``jax.jit(fg)`` and
``jax.jit(jnp)`` sharded against the same on one device. On a machine with fewer cores than
devices this measures the partitioning's overhead, not a speedup.

Every method is checked against NumPy first (a wrong one is reported, not timed); timings are
interleaved rounds (``fusegen.bench.time_interleaved``). JSON goes to
``bench-results/bridges.json``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from statistics import median
from typing import Any, Callable

import numpy as np

from .machine import read_bandwidth, time_interleaved
from .cases import OPS, OpBench, as_outputs, check, jax_input_dtypes, reference, tolerance, torch_namespace

__all__ = ["BridgeConfig", "run", "report", "sharded_child", "main"]


@dataclass
class BridgeConfig:
    # fg.jax needs the emitted handler; rows with shapes of their own (the 3-D and 4-D layout
    # rows) are left out: these cases are the config's 2-D shapes, rows split along dim 0
    ops: tuple[str, ...] = tuple(n for n, s in OPS.items() if s.emitted and not s.shapes)
    large: tuple[int, int] = (4096, 4096)
    small: tuple[int, int] = (4, 5)
    rounds: int = 15
    per_call_rounds: int = 20
    per_call_calls: int = 1000
    sharded_devices: int = 4
    bandwidth_bytes: int = 1 << 28
    bandwidth_reps: int = 10
    jax: bool = True
    torch: bool = True
    sharded: bool = True

    @classmethod
    def quick(cls, **kw: Any) -> BridgeConfig:
        return cls(**{**dict(large=(256, 256), rounds=3, per_call_rounds=3, per_call_calls=50,
                             bandwidth_bytes=1 << 24, bandwidth_reps=3), **kw})


def _importable(name: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(name) is not None


def methods(spec: OpBench, attrs: dict, cfg: BridgeConfig) -> tuple[dict[str, Callable], dict[str, str]]:
    """name -> bind(arrays) -> a call that waits for its result; and the skipped ones, with why."""
    out: dict[str, Callable] = {}
    skipped: dict[str, str] = {}
    if cfg.jax and _importable("jax"):
        import jax
        import jax.numpy as jnp

        import fusegen as fg
        f = fg.jax.function(spec.op, dtypes=jax_input_dtypes(spec))
        fg_jit = jax.jit(lambda *a: f(*a, **attrs))
        ref_jit = jax.jit(lambda *a: spec.xp_ref(jnp, *a, **attrs))

        def on_jax(fn):
            def bind(arrays):
                dev = tuple(jax.device_put(a) for a in arrays)
                return lambda: jax.block_until_ready(fn(*dev))
            return bind
        out["jax.jit(fg)"], out["jax.jit(jnp)"] = on_jax(fg_jit), on_jax(ref_jit)
    elif cfg.jax:
        skipped["jax"] = "jax is not installed (pip install 'fusegen[jax]')"
    if cfg.torch and _importable("torch"):
        import torch

        import fusegen as fg
        tf = fg.torch.function(spec.op)
        ns = torch_namespace(torch)
        # Dynamo caches by code object: every op's lambdas share theirs, and would hit the
        # recompile limit; the previous op's compiled functions are not called again.
        torch._dynamo.reset()
        fg_c = torch.compile(lambda *t: tf(*t, **attrs), fullgraph=True, dynamic=False)
        ref_c = torch.compile(lambda *t: spec.xp_ref(ns, *t, **attrs), fullgraph=True, dynamic=False)

        def on_torch(fn):
            def bind(arrays):
                tensors = [torch.from_numpy(a) for a in arrays]
                return lambda: fn(*tensors)
            return bind
        out["torch.compile(fg)"], out["torch.compile(torch)"] = on_torch(fg_c), on_torch(ref_c)
    elif cfg.torch:
        skipped["torch"] = "torch is not installed (pip install 'fusegen[torch]')"
    return out, skipped


def _calls_per_round(fn: Callable, most: int, budget_s: float = 2e-3) -> int:
    t0 = time.perf_counter()
    for _ in range(10):
        fn()
    per = (time.perf_counter() - t0) / 10
    return max(1, min(most, int(budget_s / max(per, 1e-9))))


def measure(spec: OpBench, shape: tuple[int, int], attrs: dict, binds: dict, rounds: int, calls: int,
            small: bool) -> dict:
    """Check every method against NumPy, then time the good ones, interleaved."""
    arrays = spec.make_inputs(shape, "float32")
    ref = reference(spec, arrays, attrs)
    rtol = tolerance(arrays[0].dtype, spec.reduced(shape, attrs))
    results, thunks = {}, {}
    for name, bind in binds.items():
        try:
            fn = bind(arrays)
            err, ok = check(as_outputs(fn()), ref, rtol)
            results[name] = {"ok": ok, "max_rel_err": err}
            if ok:
                thunks[name] = fn
        except Exception as e:  # noqa: BLE001 - a failing method is a FAIL row, not a crash
            results[name] = {"ok": False, "error": f"{type(e).__name__}: {e}"[:300]}
    counts = {n: _calls_per_round(fn, calls) if small else 1 for n, fn in thunks.items()}
    for name, times in time_interleaved(thunks, rounds, counts).items():
        results[name].update(median_s=median(times), min_s=min(times))
    nbytes = sum(a.nbytes for a in arrays) + sum(r.nbytes for r in ref)
    return {"op": spec.name, "shape": list(shape), "attrs": attrs, "size": "small" if small else "large",
            "bytes": nbytes, "results": results, "ok": all(r["ok"] for r in results.values())}


def sharded_child(cfg: BridgeConfig) -> dict:
    """Runs in a process with ``cfg.sharded_devices`` host devices: per op, the large case with
    its rows split over a mesh, against the same on one device. The mesh axis is Auto: jnp's
    gathers on an Explicit axis ask for their output sharding by hand."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec

    import fusegen as fg
    n = cfg.sharded_devices
    mesh = jax.make_mesh((n,), ("rows",), axis_types=(AxisType.Auto,))
    rows = []
    for name in cfg.ops:
        spec = OPS[name]
        attrs = spec.variants[-1]
        arrays = spec.make_inputs(cfg.large, "float32")
        f = fg.jax.function(spec.op, dtypes=jax_input_dtypes(spec))
        ref = reference(spec, arrays, attrs)
        rtol = tolerance(arrays[0].dtype, spec.reduced(cfg.large, attrs))
        one = tuple(jax.device_put(a, jax.devices()[0]) for a in arrays)
        split = tuple(jax.device_put(a, NamedSharding(mesh, PartitionSpec("rows") if a.ndim == 2 else PartitionSpec()))
                      for a in arrays)
        thunks, ok = {}, {}
        for label, fn in (("jax.jit(fg)", jax.jit(lambda *a, f=f, at=attrs: f(*a, **at))),
                          ("jax.jit(jnp)", jax.jit(lambda *a, s=spec, at=attrs: s.xp_ref(jnp, *a, **at)))):
            for where, args in (("1 device", one), (f"{n} devices", split)):
                key = f"{label} {where}"
                call = (lambda fn=fn, args=args: jax.block_until_ready(fn(*args)))
                try:
                    ok[key] = check(as_outputs(call()), ref, rtol)[1]
                except Exception:  # noqa: BLE001 - a method that cannot run is a FAIL cell, not a lost row
                    ok[key] = False
                thunks[key] = call
        times = time_interleaved({k: v for k, v in thunks.items() if ok[k]}, cfg.rounds)
        rows.append({"op": name, "shape": list(cfg.large), "ok": all(ok.values()),
                     "results": {k: {"ok": ok[k], **({"median_s": median(times[k])} if k in times else {})}
                                 for k in thunks}})
    return {"devices": n, "cases": rows}


def run(cfg: BridgeConfig, say: Callable[[str], None] = lambda s: None) -> dict:
    bw = read_bandwidth(cfg.bandwidth_bytes, cfg.bandwidth_reps)
    cases, skipped = [], {}
    for name in cfg.ops:
        spec = OPS[name]
        attrs = spec.variants[-1]
        say(f"{name}: setting up")
        binds, why = methods(spec, attrs, cfg)
        skipped.update(why)
        for shape, small in ((cfg.large, False), (cfg.small, True)):
            say(f"{name} {shape}")
            rounds, calls = (cfg.per_call_rounds, cfg.per_call_calls) if small else (cfg.rounds, 1)
            doc = measure(spec, shape, attrs, binds, rounds, calls, small)
            if not small:
                for r in doc["results"].values():
                    if "median_s" in r:
                        r["x_bound"] = r["median_s"] / (doc["bytes"] / bw.bytes_per_s)
            cases.append(doc)
    sharded = None
    if cfg.sharded and cfg.jax and _importable("jax"):
        say(f"sharded: {cfg.sharded_devices} host devices (a child process)")
        env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={cfg.sharded_devices}"}
        r = subprocess.run([sys.executable, "-m", "fusegen.bench.bridges", json.dumps(asdict(cfg))],
                           env=env, capture_output=True, text=True)
        sharded = json.loads(r.stdout.splitlines()[-1]) if r.returncode == 0 else {"error": r.stderr[-2000:]}
    ok = all(c["ok"] for c in cases) and (sharded is None or all(c["ok"] for c in sharded.get("cases", [{"ok": False}])))
    return {"bandwidth_gbps": bw.gbps, "config": asdict(cfg), "cases": cases, "sharded": sharded,
            "skipped": skipped, "ok": ok}


def _cell(r: dict, small: bool) -> str:
    if not r.get("ok"):
        return "FAIL"
    if "median_s" not in r:
        return "-"
    return f"{r['median_s'] * 1e6:.2f} us" if small else f"{r['x_bound']:.2f}x"


def report(doc: dict) -> str:
    names = list(dict.fromkeys(n for c in doc["cases"] for n in c["results"]))
    lines = [f"read bandwidth {doc['bandwidth_gbps']:.1f} GB/s; large cases: median / bound, small: time per call",
             "| op | case | " + " | ".join(names) + " |", "|---|---|" + "---:|" * len(names)]
    for c in doc["cases"]:
        small = c["size"] == "small"
        lines.append(f"| {c['op']} | ({','.join(map(str, c['shape']))}) | "
                     + " | ".join(_cell(c["results"].get(n, {}), small) for n in names) + " |")
    sh = doc.get("sharded")
    if sh and "cases" in sh:
        cols = list(dict.fromkeys(k for c in sh["cases"] for k in c["results"]))
        lines += ["", f"sharded over {sh['devices']} host devices (rows split), median per call:",
                  "| op | shape | " + " | ".join(cols) + " |", "|---|---|" + "---:|" * len(cols)]
        for c in sh["cases"]:
            cells = [f"{c['results'][k]['median_s'] * 1e3:.3f} ms" if "median_s" in c["results"][k] else "FAIL"
                     for k in cols]
            lines.append(f"| {c['op']} | ({','.join(map(str, c['shape']))}) | " + " | ".join(cells) + " |")
    elif sh:
        lines.append(f"sharded row failed: {sh.get('error', '')[-500:]}")
    for k, why in doc["skipped"].items():
        lines.append(f"skipped {k}: {why}")
    return "\n".join(lines)


def main(args, write: Callable[[str, str], Any]) -> int:
    """The ``fusegen bench --bridges`` command (``args`` from the bench parser)."""
    kw: dict[str, Any] = dict(jax=not args.no_jax, torch=not args.no_torch)
    if args.ops:
        kw["ops"] = tuple(args.ops)
    cfg = BridgeConfig.quick(**kw) if args.quick else BridgeConfig(**kw)
    if args.rounds is not None:
        cfg.rounds = args.rounds
    doc = run(cfg, say=lambda s: print(s, file=sys.stderr, flush=True) if args.progress != "off" else None)
    print(report(doc))
    path = args.json or "bench-results/bridges.json"
    print(f"wrote {write(path, json.dumps(doc, indent=1) + chr(10))}")
    return 0 if doc["ok"] else 1


if __name__ == "__main__":   # the sharded child: a config in, one JSON line out
    print(json.dumps(sharded_child(BridgeConfig(**{k: tuple(v) if isinstance(v, list) else v
                                                   for k, v in json.loads(sys.argv[1]).items()}))))
