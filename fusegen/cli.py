"""The ``fusegen`` command line.

    fusegen demo   add_reduce_sum through every backend present, checked against NumPy
    fusegen bench  the interleaved benchmark of every reference op; writes JSON, Markdown, a chart
    fusegen emit   MODULE:OP -> MindSpore-AOT (or other ABI) sources in a directory
    fusegen build  FILE.cc -> a cached shared library

Exit codes: 0 success; 1 a result is wrong or a tool failed; 2 bad usage or a
feature missing from this installation (no backend, no ``fusegen.emit``).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any, Sequence

# The table and time formats are shared with the bench report (re-exported here for callers).
from .bench.report import Progress, fmt_check, fmt_ratio, fmt_time, format_table, versions_text  # noqa: F401

KNOWN_BACKENDS = ("numba", "aot")
DEVICES = ("cpu", "cuda")
FLOAT_DTYPES = ("float16", "float32", "float64")


# --- formatting ------------------------------------------------------------------------------------
def print_skipped(skipped: dict[str, str]) -> None:
    """One line for all skipped backends, grouped by reason (the CUDA ones share theirs)."""
    by_reason: dict[str, list[str]] = {}
    for name, why in skipped.items():
        by_reason.setdefault(why, []).append(name)
    if by_reason:
        print("skipped: " + "; ".join(f"{', '.join(names)} ({why})" for why, names in by_reason.items()))


def machine_line(machine: dict) -> str:
    """The machine in a few words, for the line under a table."""
    layer = f" ({machine['numba_threading_layer']})" if machine.get("numba_threading_layer") else ""
    return f"{machine['cpu_model']}, {machine['usable_cpus']} CPUs, {machine['numba_threads']} numba threads{layer}"




# --- argument parsing helpers ---------------------------------------------------------------------
def parse_shape(text: str) -> tuple[int, ...]:
    """``4096,4096`` (or ``4096x4096``) -> ``(4096, 4096)``."""
    try:
        shape = tuple(int(p) for p in text.replace("x", ",").split(",") if p.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad shape {text!r}: use e.g. 4096,4096") from None
    if not shape or any(d <= 0 for d in shape):
        raise argparse.ArgumentTypeError(f"bad shape {text!r}: dimensions must be positive")
    return shape


def parse_names(text: str, known: Sequence[str], what: str) -> list[str]:
    """``a,b`` -> ``["a", "b"]``, each one of ``known``; anything else is a usage error."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown {what}(s) {', '.join(unknown) or text!r}: "
                                         f"choose from {', '.join(known)}")
    return names


def parse_backends(text: str) -> list[str]:
    """``numba,aot`` -> ``["numba", "aot"]``."""
    return parse_names(text, KNOWN_BACKENDS, "backend")


def devices_for(choice: str) -> list[str]:
    """``--device all`` means every device kind; absent ones are skipped, not errors."""
    return list(DEVICES) if choice == "all" else [choice]


def _flags(text: str | None) -> list[str] | str | None:
    """Compiler flags from one string; the word ``mindspore`` (MindSpore's own build
    command) is passed through as a name for the aot backend to expand."""
    if text is None or text.strip() == "mindspore":
        return text.strip() if text else None
    return shlex.split(text)


def _fail(command: str, message: str, code: int) -> int:
    print(f"fusegen {command}: error: {message}", file=sys.stderr)
    return code


# --- demo -----------------------------------------------------------------------------------------
def cmd_demo(args: argparse.Namespace) -> int:
    """``fusegen demo``: one checked, timed run per backend (a table per device); 1 if any is wrong."""
    from .bench import harness as bench
    if not -len(args.shape) <= args.axis < len(args.shape):
        return _fail("demo", f"axis {args.axis} is out of range for shape {args.shape}", 2)
    devices = devices_for(args.device)
    runs, skipped = [], {}
    progress = Progress()
    try:
        if "cpu" in devices:
            runs.append(bench.run_demo(args.shape, args.axis, args.dtype, args.rounds, args.backends, ["cpu"],
                                       _flags(args.aot_flags), progress))
        if "cuda" in devices:
            runs.append(_demo_cuda(args))
    finally:
        progress.done()
    for res in runs:
        skipped.update(res["skipped"])
    runs = [r for r in runs if r["case"] is not None]
    if not runs:
        print_skipped(skipped)
        return _fail("demo", "no fusegen backend is available on this machine", 2)
    for res in runs:
        _print_demo(res, args)
    print_skipped(skipped)
    return 0 if all(r["case"]["ok"] for r in runs) else 1


def _demo_cuda(args: argparse.Namespace) -> dict:
    """The demo's GPU run, or the reason there is none."""
    from .bench import cuda as bench_cuda
    why = bench_cuda.unavailable()
    if why is not None:
        return {"case": None, "skipped": {f"{b}-cuda": why for b in args.backends}}
    return bench_cuda.run_demo(args.shape, args.axis, args.dtype, args.rounds, args.backends)


def _print_demo(res: dict, args: argparse.Namespace) -> None:
    """One device's demo table and what its bound means."""
    case, gpu = res["case"], res["machine"].get("gpu")
    shape = ", ".join(map(str, case["shapes"][0]))
    where = f" on {gpu['name']}" if gpu else ""
    print(f"fusegen demo{where}: add_reduce_sum = sum(x + y, axis={args.axis}), x and y ({shape}) {args.dtype}, "
          f"median of {args.rounds} interleaved rounds")
    rows = []
    for name, e in case["results"].items():
        err, check = fmt_check(e)
        rows.append([name, err, check, fmt_time(e.get("median_s")), fmt_ratio(e.get("ratio_to_bound"))]
                    + ([f"{100 * e['bandwidth_fraction']:.0f}%" if "bandwidth_fraction" in e else "-"] if gpu else []))
    print(format_table(["backend", "max rel err", f"check (tol {case['rtol']:.1e})", "median", "vs bound"]
                       + (["of copy bandwidth"] if gpu else []), rows, "lrlrr" + ("r" if gpu else "")))
    bw = res["bandwidth"]
    if gpu:
        how = f"{bw['method']}, measured now); timer: {res['timer']}"
    else:
        how = (f"the median of {len(bw['samples_gbps'])} parallel reads of {bw['array_bytes'] >> 20} MiB, one "
               f"before and after every method in every round: {bw['min_gbps']:.1f}-{bw['max_gbps']:.1f} GB/s, "
               f"interquartile spread {100 * bw['spread']:.0f}%)")
    print(f"checked against NumPy on float64 copies; vs bound: median / {fmt_time(case['bound_s'])}, the time "
          f"to move the inputs and the output once at {bw['bytes_per_s'] / 1e9:.1f} GB/s ({how}")
    print(f"machine: {machine_line(res['machine'])}; {versions_text(res['machine'])}"
          + (f"; {gpu['name']}" if gpu else ""))
    for warning in res.get("warnings", []):
        print(f"warning: {warning}")
    for name, e in case["results"].items():
        if "error" in e:
            print(f"{name} failed: {e['error']}")


# --- bench ----------------------------------------------------------------------------------------
def parse_ops(text: str) -> list[str]:
    """``softmax,rms_norm`` -> the names, each a row the bench knows (``bench.variants.ALL_OPS``)."""
    from .bench.variants import ALL_OPS
    return parse_names(text, list(ALL_OPS), "op")


def _matplotlib_missing() -> bool:
    return importlib.util.find_spec("matplotlib") is None


def _write(path: str, text: str) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return out


def cmd_bench(args: argparse.Namespace) -> int:
    """``fusegen bench``: print the tables, write JSON, Markdown and the chart; 1 if any result
    is wrong."""
    if args.bridges:  # the JAX and PyTorch bridges (fusegen.bench.bridges)
        from .bench import bridges
        return bridges.main(args, _write)
    if args.calls:  # where a small call's time goes (fusegen.bench.calls)
        from .bench import calls, variants
        specs = [variants.ALL_OPS[n] for n in (args.ops or list(variants.ALL_OPS))]
        rounds = 5 if args.quick else 30
        table = calls.calls_table(specs, [b for b in args.backends if b in ("numba", "aot")], rounds=rounds)
        print(calls.format_calls(table))
        if args.json:
            print(f"wrote {_write(args.json, json.dumps(table, indent=1) + chr(10))}")
        return 0
    from .bench import harness as bench, report as bench_report
    if args.report:  # an earlier run's measurements, judged and tabulated again
        try:
            doc = bench.rejudge(json.loads(Path(args.report).read_text()))
        except (OSError, ValueError, KeyError) as e:
            return _fail("bench", f"--report {args.report}: {e}", 2)
        print(bench_report.terminal_report(doc))
        if args.markdown:
            print(f"wrote {_write(args.markdown, bench_report.markdown_report(doc, None))}")
        return 0 if doc["ok"] else 1
    cuda = args.device == "cuda"
    stem = "bench-results/bench" + ("-cuda" if cuda else "")  # the GPU's files beside the CPU's
    png = args.png
    if png is None:  # the default: a chart beside the JSON when matplotlib is there
        png = "" if _matplotlib_missing() else f"{stem}.png"
    elif png and _matplotlib_missing():
        return _fail("bench", "--png needs matplotlib (pip install 'fusegen[plot]')", 2)
    json_path = f"{stem}.json" if args.json is None else args.json
    markdown = f"{stem}.md" if args.markdown is None else args.markdown
    if cuda:
        from .bench import cuda as bench_cuda
        why = bench_cuda.unavailable()
        if why is not None:
            return _fail("bench", f"--device cuda cannot run here: {why}", 2)
        if args.compile_times or args.fresh_pages:
            return _fail("bench", "--compile-times and --fresh-pages are CPU-bench options", 2)
    kw = dict(backends=tuple(args.backends), devices=(args.device,),
              aot_flags=_flags(args.aot_flags), jax=not args.no_jax, torch=not args.no_torch,
              torch_compile=args.torch_compile, compile_times=args.compile_times, fresh_pages=args.fresh_pages)
    if args.ops:
        kw["ops"] = tuple(args.ops)
    cfg = bench.BenchConfig.quick(**kw) if args.quick else bench.BenchConfig(**kw)
    if args.rounds is not None:
        cfg.rounds = args.rounds
    progress = Progress(mode=args.progress)
    try:
        doc = bench_cuda.run_bench(cfg, progress) if cuda else bench.run_bench(cfg, progress)
    finally:
        progress.done()
    if not doc["methods"]:
        print_skipped(doc["skipped"])
        return _fail("bench", "no fusegen backend is available on this machine", 2)
    doc["command"] = shlex.join(["fusegen", *getattr(args, "argv", ["bench"])])
    print(bench_report.terminal_report(doc))
    print_skipped(doc["skipped"])
    if json_path:
        print(f"wrote {_write(json_path, json.dumps(doc, indent=1) + chr(10))}")
    if png:
        print(f"wrote {bench_report.write_png(doc, png)}")
    if markdown:
        # the chart is linked relative to the report, so the two can move together
        rel = os.path.relpath(Path(png).resolve(), Path(markdown).resolve().parent) if png else None
        print(f"wrote {_write(markdown, bench_report.markdown_report(doc, rel))}")
    return 0 if doc["ok"] else 1


# --- emit / build ---------------------------------------------------------------------------------
def resolve_op(spec: str) -> Any:
    """``MODULE:OP`` -> the OpDef. MODULE is a dotted module name (found from the current
    directory too, as ``python -m`` would) or a path to a ``.py`` file."""
    from .ir import OpDef
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{spec!r}: expected MODULE:OP, e.g. fusegen.examples:add_reduce_sum")
    if module_name.endswith(".py") or os.sep in module_name or os.path.isfile(module_name):
        path = Path(module_name).resolve()
        if not path.is_file():
            raise ValueError(f"{module_name}: no such file")
        name = f"_fusegen_cli_{path.stem}_{abs(hash(str(path)))}"
        loader_spec = importlib.util.spec_from_file_location(name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise ValueError(f"{module_name}: cannot be imported as a Python module")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[name] = module  # dataclasses and pickling look the module up by name
        loader_spec.loader.exec_module(module)
    else:
        if os.getcwd() not in sys.path:  # a console script's sys.path lacks the cwd
            sys.path.insert(0, os.getcwd())
        module = importlib.import_module(module_name)
    try:
        op = getattr(module, attr)
    except AttributeError:
        raise ValueError(f"module {module_name!r} has no attribute {attr!r}") from None
    if not isinstance(op, OpDef):
        raise ValueError(f"{spec} is a {type(op).__name__}, not an @fusegen.op")
    return op


def _written_paths(result: Any, out_dir: str) -> list[str]:
    """Whatever ``.write`` returned (paths, a mapping of paths, or nothing) as strings."""
    if result is None:
        return [out_dir]
    if isinstance(result, (str, os.PathLike)):
        return [os.fspath(result)]
    if isinstance(result, dict):
        return [os.fspath(p) for p in result.values()]
    return [os.fspath(p) for p in result]


def cmd_emit(args: argparse.Namespace) -> int:
    """``fusegen emit``: write an op's sources for an ABI and print the paths written."""
    from .errors import FusegenError
    try:
        import fusegen
        emit = fusegen.emit
    except (ImportError, AttributeError) as e:
        return _fail("emit", f"fusegen.emit is not available in this installation ({e})", 2)
    try:
        op = resolve_op(args.op)
    except Exception as e:  # noqa: BLE001 - any import failure is the user's module, report it
        return _fail("emit", f"cannot load {args.op}: {type(e).__name__}: {e}", 2)
    # each --dtypes is one combination, as emit(dtypes="float32,int64") takes it (one per input,
    # or one name for every input); repeated, several
    dtypes = args.dtypes
    if dtypes is not None and not all(d.strip() for d in dtypes):
        return _fail("emit", "--dtypes needs dtype names, e.g. float32 or float32,int64", 2)
    try:
        ranks = [int(r) for r in args.ranks.split(",")] if args.ranks else None
        shapes = [_shape_arg(s) for s in args.shapes.split(",")] if args.shapes else None
    except ValueError:
        return _fail("emit", "--ranks takes integers (2,1,1); --shapes shapes like 8x1024,-1x512,()", 2)
    try:
        emitted = emit(op, abi=args.abi, device=args.device, dtypes=dtypes, ranks=ranks, shapes=shapes)
        written = emitted.write(args.out_dir)
    except (FusegenError, ValueError, TypeError, OSError, NotImplementedError) as e:
        return _fail("emit", f"{type(e).__name__}: {e}", 1)
    for path in _written_paths(written, args.out_dir):
        print(path)
    return 0


def _shape_arg(text: str) -> tuple[int, ...]:
    """``8x1024`` -> (8, 1024); ``()`` -> () (a scalar)."""
    text = text.strip()
    return () if text in ("()", "") else tuple(int(d) for d in text.split("x"))


def cmd_build(args: argparse.Namespace) -> int:
    """``fusegen build``: compile a source through the build cache and print the library."""
    from .errors import FusegenError
    try:
        from .native.build import MINDSPORE_CPU_FLAGS, build_library
    except ImportError as e:
        return _fail("build", f"fusegen.native.build.build_library is not available in this installation ({e})", 2)
    flags = _flags(args.flags)
    if flags == "mindspore":
        flags = list(MINDSPORE_CPU_FLAGS)
    try:
        lib = build_library(args.source, flags=flags, compiler=args.compiler)
    except FusegenError as e:
        return _fail("build", str(e), 1)
    print(lib)
    return 0


# --- the parser -----------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand (each sets ``func``, its handler)."""
    from .version import __version__
    p = argparse.ArgumentParser(prog="fusegen", description="JIT code generation for fused tensor kernels.")
    p.add_argument("--version", action="version", version=f"fusegen {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def timing_options(sp: argparse.ArgumentParser, device_default: str, devices: tuple[str, ...], help: str) -> None:
        sp.add_argument("--backends", type=parse_backends, default=list(KNOWN_BACKENDS),
                        help="comma-separated fusegen backends to try (default: numba,aot; absent ones are skipped)")
        sp.add_argument("--device", choices=devices, default=device_default, help=f"{help} (default: {device_default})")
        sp.add_argument("--aot-flags", metavar="FLAGS",
                        help="compiler flags for the aot backend, one string ('mindspore': MindSpore's own)")

    d = sub.add_parser("demo", help="run add_reduce_sum through every backend and check it against NumPy",
                       description="Run add_reduce_sum through every available backend, check each against "
                                   "np.sum(x + y, axis) and compare its time with the memory-bandwidth bound.")
    d.add_argument("--shape", type=parse_shape, default=(4096, 4096), help="input shape (default: 4096,4096)")
    d.add_argument("--axis", type=int, default=1, help="reduction axis (default: 1)")
    d.add_argument("--dtype", choices=FLOAT_DTYPES, default="float32", help="input dtype (default: float32)")
    d.add_argument("--rounds", type=int, default=5, help="timed rounds per method (default: 5)")
    timing_options(d, "all", DEVICES + ("all",), "device(s) to run on, a table each")
    d.set_defaults(func=cmd_demo)

    b = sub.add_parser("bench", help="interleaved benchmark of every reference op vs NumPy, Numba, JAX, torch "
                                     "and the bandwidth bound; writes JSON, Markdown and a chart",
                       description="Benchmark every reference op on large (memory-bound) shapes and a small one "
                                   "(per-call cost), through every fusegen backend present, against NumPy, "
                                   "hand-written Numba, jax.jit and torch.compile (when installed) and the "
                                   "read-bandwidth bound, all methods interleaved in one process. With "
                                   "--device cuda: on the GPU, against eager torch, CuPy and jax.jit there, timed "
                                   "with CUDA events, bounded by a copy kernel's bandwidth.")
    b.add_argument("--ops", type=parse_ops, default=None, help="comma-separated reference ops (default: all)")
    b.add_argument("--rounds", type=int, default=None, help="timed rounds per large case (default: 15; --quick: 3)")
    b.add_argument("--quick", action="store_true", help="small shapes and few rounds (for tests and smoke checks)")
    b.add_argument("--no-jax", action="store_true",
                   help="leave out jax.jit and fusegen.jax (their thread pools can linger between methods)")
    b.add_argument("--no-torch", action="store_true",
                   help="leave out torch even when it is installed (CPU: torch.compile; GPU: eager torch)")
    b.add_argument("--torch-compile", action="store_true",
                   help="GPU: also torch.compile (Inductor; its compiles take minutes)")
    b.add_argument("--bridges", action="store_true",
                   help="fused ops inside jax.jit and torch.compile vs jnp/torch code, and a sharded row "
                        "(4 host devices): bench-results/bridges.json")
    b.add_argument("--calls", action="store_true",
                   help="instead: a table of where a call at (4, 5) spends its time, per backend (validation, "
                        "shape inference, lookup, allocation, dispatch, native)")
    b.add_argument("--report", default=None, metavar="JSON",
                   help="instead of measuring: an earlier run's JSON, judged against today's targets; prints "
                        "its tables (and writes --markdown PATH)")
    b.add_argument("--compile-times", action="store_true",
                   help="also measure compile time, cold and warm cache, in new processes (minutes)")
    b.add_argument("--fresh-pages", action="store_true",
                   help="let large outputs come from fresh pages (page faults) instead of reused memory")
    b.add_argument("--json", default=None, metavar="PATH",
                   help="where to write the results (default: bench-results/bench.json, with --device cuda "
                        "bench-results/bench-cuda.json; '' to skip)")
    b.add_argument("--markdown", default=None, metavar="PATH",
                   help="where to write the Markdown report (default: bench-results/bench.md or bench-cuda.md; "
                        "'' to skip)")
    b.add_argument("--png", default=None, metavar="PATH",
                   help="where to write the chart (default: bench-results/bench.png or bench-cuda.png when "
                        "matplotlib is installed; '' to skip)")
    b.add_argument("--progress", choices=("auto", "bar", "plain", "off"), default="auto",
                   help="progress on stderr: a bar on a terminal (auto), one line per step (plain), or none")
    timing_options(b, "cpu", DEVICES, "cpu: the CPU bench; cuda: the GPU bench (inputs on the device, CUDA events, "
                                      "the copy-kernel bound, vs torch / CuPy / jax.jit on the GPU)")
    b.set_defaults(func=cmd_bench)

    e = sub.add_parser("emit", help="write an op's sources for an ABI (e.g. MindSpore AOT)")
    e.add_argument("op", metavar="MODULE:OP", help="dotted module or path to a .py file, and the op's name")
    e.add_argument("--abi", default="mindspore-aot", choices=("mindspore-aot", "xla-ffi"),
                   help="target ABI (default: mindspore-aot)")
    e.add_argument("--device", choices=DEVICES, default="cpu", help="target device (default: cpu)")
    e.add_argument("--dtypes", action="append", metavar="DTYPES",
                   help="one input dtype combination: a name per input, comma-separated (float32,int64), or "
                        "one for every input (float32); repeat for several (default: every float dtype)")
    e.add_argument("--ranks", metavar="R,R,...",
                   help="for an op traced per input rank (x.ndim, fg.random over x.shape): the rank of each "
                        "input, comma-separated (2,1,1), as fusegen.emit(ranks=...)")
    e.add_argument("--shapes", metavar="S,S,...",
                   help="for an op traced per input shape: each input's shape, comma-separated, dims joined "
                        "by x, -1 for one known only at run time, () for a scalar (--shapes=8x1024,1024 or "
                        "--shapes=-1x512,(): with '=' where a shape starts with -)")
    e.add_argument("-o", "--out-dir", required=True, metavar="DIR", help="directory to write into")
    e.set_defaults(func=cmd_emit)

    bl = sub.add_parser("build", help="compile a kernel source (.cc/.cpp/.cu) into a cached shared library")
    bl.add_argument("source", metavar="FILE", help="a .cc/.cpp/.cu source, or a library to check")
    bl.add_argument("--flags", help="compiler flags, one string (default: fusegen's fast flags; "
                                    "'mindspore': MindSpore's own)")
    bl.add_argument("--compiler", help="compiler to use (default: $FUSEGEN_CXX / $FUSEGEN_NVCC, else g++ / nvcc)")
    bl.set_defaults(func=cmd_build)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fusegen`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # the bench report quotes the command that made it
    if getattr(args, "rounds", None) is not None and args.rounds < 1:
        return _fail(args.command, "--rounds must be at least 1", 2)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
