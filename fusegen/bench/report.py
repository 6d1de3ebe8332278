"""Formatting ``fusegen bench`` results: the terminal tables, a progress bar, the Markdown report
and the PNG chart. Input is the JSON document ``fusegen.bench.run_bench`` returns; nothing
here measures.

The tables are matrices (one row per case, one column per method) of the numbers a reader
compares: each method's median as a multiple of the bandwidth bound (large shapes) or its
time per call (the small shape). The best method of a row is starred; the last columns say
whether fusegen's best backend meets the issue's targets.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Sequence, TextIO

#: Display names, fusegen's backends first; methods not listed keep their own names.
LABELS = {"numba-cpu": "fusegen numba", "aot-cpu": "fusegen aot", "fg-jax-cpu": "fusegen xla",
          "numba-cpu-out": "fusegen numba out=", "aot-cpu-out": "fusegen aot out=",
          "numba-cpu-inplace": "fusegen numba inplace", "aot-cpu-inplace": "fusegen aot inplace",
          "numpy": "numpy", "njit-cpu": "numba @njit", "jax-cpu": "jax.jit", "torch-cpu": "torch.compile",
          "numba-cuda": "fusegen numba-cuda", "aot-cuda": "fusegen aot-cuda", "torch-cuda": "torch",
          "torch-compile-cuda": "torch.compile", "cupy-cuda": "cupy", "jax-cuda": "jax.jit"}


# --- small formatting helpers ---------------------------------------------------------------------
def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: str | None = None) -> str:
    """A compact aligned text table. ``align`` has one letter per column, ``l`` or ``r``
    (default: the first column left, the rest right); cells are ``str()``-ed."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    ncol = max(len(r) for r in cells)
    cells = [r + [""] * (ncol - len(r)) for r in cells]
    align = (align or "l" + "r" * (ncol - 1)).ljust(ncol, "r")
    widths = [max(len(r[i]) for r in cells) for i in range(ncol)]
    lines = []
    for r in cells:
        parts = [c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(r, widths, align)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: str | None = None) -> str:
    """The same table in Markdown (``align`` as in ``format_table``)."""
    align = (align or "l" + "r" * (len(headers) - 1))[:len(headers)].ljust(len(headers), "r")
    rule = ["---:" if a == "r" else "---" for a in align]
    lines = [headers, rule] + [[str(c) for c in r] for r in rows]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines)


def fmt_time(seconds: float | None) -> str:
    """Seconds in the unit that keeps three significant digits readable (ASCII only)."""
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            value = seconds / scale
            return f"{value:.0f} {unit}" if value >= 100 else f"{value:.2f} {unit}"
    return f"{seconds * 1e9:.0f} ns"


def fmt_bytes(n: int) -> str:
    """``256 MiB``, ``4 KiB``, ``12 B``: binary units, whole numbers."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.0f} {unit}"
    return f"{n} B"


def fmt_ratio(value: float | None) -> str:
    """``1.23x``, or ``-`` where there is no value (a failed method)."""
    return "-" if value is None else f"{value:.2f}x"


def fmt_check(entry: dict) -> tuple[str, str]:
    """(error text, PASS/FAIL) for one method's result."""
    if "error" in entry:
        return "error", "FAIL"
    return f"{entry['max_rel_err']:.1e}", "PASS" if entry["ok"] else "FAIL"


def label(name: str) -> str:
    return LABELS.get(name, name)


class Progress:
    """Progress on stderr. ``mode``: ``"bar"`` redraws one line (``[#####-----] 5/24 label
    12s``), ``"plain"`` prints a line per step (logs), ``"off"``; ``"auto"`` is the bar on a
    terminal and nothing otherwise, so captured output stays clean."""

    WIDTH = 24

    def __init__(self, stream: TextIO | None = None, mode: str = "auto"):
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "bar" if getattr(self.stream, "isatty", lambda: False)() else "off"
        self.mode = mode
        self.t0 = time.monotonic()

    def __call__(self, step: int, total: int, text: str) -> None:
        elapsed = f"{time.monotonic() - self.t0:.0f}s"
        if self.mode == "bar":
            filled = self.WIDTH * max(0, step - 1) // max(1, total)  # steps done, not the one starting
            bar = "#" * filled + "-" * (self.WIDTH - filled)
            self.stream.write(f"\r\x1b[K[{bar}] {step}/{total} {text} {elapsed}")
        elif self.mode == "plain":
            self.stream.write(f"[{step}/{total}] {text} ({elapsed})\n")
        else:
            return
        self.stream.flush()

    def done(self) -> None:
        if self.mode == "bar":
            self.stream.write("\r\x1b[K")
            self.stream.flush()


# --- what the tables show -------------------------------------------------------------------------
def _align(headers: Sequence[str]) -> str:
    """Labels left, numbers right, the closing text column left."""
    return "ll" + "r" * (len(headers) - 3) + "l"


def _methods(doc: dict) -> list[str]:
    """fusegen's backends first, then the others, each in the order they ran."""
    fg = doc.get("fusegen_methods", [])
    return fg + [m for m in doc["methods"] if m not in fg]


def _cell(entry: dict | None, key: str, fmt) -> str:
    if entry is None:
        return ""
    if not entry.get("ok", False):
        return "FAIL"
    # not what the column's name says (torch.compile ran eager PyTorch): marked, explained below the table
    return fmt(entry.get(key)) + (" (fallback)" if "fallback" in entry else "")


#: Medians closer than this are a tie on these machines (run-to-run noise is a few percent).
NOISE = 0.05


def _target_text(case: dict) -> str:
    """``met``, or what was missed and by how much (naming the backend judged, and the issue
    that set the target, where known)."""
    t = case.get("targets", {})
    missed = []
    if "bound" in t and not t["bound"]["met"]:
        value, limit = t["bound"]["value"], t["bound"]["limit"]
        digits = 3 if value - limit < 0.005 else 2  # 1.204x, not a puzzling "1.20x (target 1.2x)"
        who = f"{label(t['bound']['method'])} " if t["bound"].get("each") else ""
        issue = f", #{t['bound']['issue']}" if t["bound"].get("issue") else ""
        missed.append(f"{who}{value:.{digits}f}x the bound (target {limit}x{issue})")
    if "per_call" in t and not t["per_call"]["met"]:
        p = t["per_call"]
        limit = (f"{label(p['limit_method'])}'s {fmt_time(p['limit_s'])}" if p.get("limit_method")
                 else fmt_time(p["limit_s"]))
        missed.append(f"{label(p['method'])} {fmt_time(p['value_s'])} per call (target {limit})")
    if "ahead" in t and not t["ahead"]["met"]:
        faster = 1 / t["ahead"]["value"] - 1
        by = f"{1 + faster:.1f}x" if faster >= 1 else f"{100 * faster:.0f}%"
        missed.append(f"{label(t['ahead']['other'])} {by} faster" + (" (a tie within noise)" if faster < NOISE else ""))
    return "met" if t and not missed else ("; ".join(missed) or "-")


def _judged(case: dict) -> str | None:
    """The fusegen method a case's targets were judged on (the best one, or on the GPU the slowest)."""
    t = case.get("targets", {})
    return next((v["method"] for v in t.values() if "method" in v), case.get("best_fusegen"))


def _ahead_label(doc: dict) -> str:
    return doc["targets"].get("ahead_label") or "best fusegen vs best other"


def steady_rows(doc: dict, star: str = "*") -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the large-shape matrix: each method's median / bound."""
    methods = _methods(doc)
    headers = (["op", "case", f"{doc.get('bound_probe', 'read')} GB/s", "bound"] + [label(m) for m in methods]
               + [_ahead_label(doc), "target"])
    rows = []
    for case in (c for c in doc["cases"] if c["size"] == "large"):
        cells = []
        for m in methods:
            text = _cell(case["results"].get(m), "ratio_to_bound", fmt_ratio)
            cells.append(text + (star if m == case.get("best") else ""))
        ahead = case.get("targets", {}).get("ahead")
        gb = _case_gbps(case)
        rows.append([case["op"], case["label"], f"{gb:.1f}" if gb else "-", fmt_time(case.get("bound_s"))] + cells
                    + [fmt_ratio(ahead["value"]) if ahead else "-", _target_text(case)])
    return headers, rows


def per_call_rows(doc: dict, star: str = "*") -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the small-shape matrix: each method's time per call."""
    methods = _methods(doc)
    headers = ["op", "case"] + [label(m) for m in methods] + ["target"]
    rows = []
    for case in (c for c in doc["cases"] if c["size"] == "small"):
        cells = [_cell(case["results"].get(m), "median_s", fmt_time) + (star if m == case.get("best") else "")
                 for m in methods]
        rows.append([case["op"], case["label"]] + cells + [_target_text(case)])
    return headers, rows


def compile_rows(doc: dict) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the compile-time table: cold / warm seconds per (op, method)."""
    ct = doc.get("compile_times") or {}
    methods = [m for m in _methods(doc) if any(m in per_op for per_op in ct.values())]
    rows = []
    for op, per_method in ct.items():
        cells = []
        for m in methods:
            runs = per_method.get(m, {})
            cold, warm = runs.get("cold", {}), runs.get("warm", {})
            if "total_s" in cold and "total_s" in warm:
                cells.append(f"{cold['total_s']:.2f} / {warm['total_s']:.2f}")
            else:
                cells.append("error" if cold or warm else "")
        rows.append([op] + cells)
    return ["op"] + [label(m) for m in methods], rows


def import_time(doc: dict) -> float | None:
    """Median time a compile-time process took to import fusegen (with NumPy and Numba)."""
    from statistics import median
    seen = [r["import_s"] for per_method in (doc.get("compile_times") or {}).values()
            for runs in per_method.values() for r in runs.values() if "import_s" in r]
    return median(seen) if seen else None


def failures(doc: dict) -> list[str]:
    """One line per method that failed a case."""
    out = []
    for case in doc["cases"]:
        for m, e in case["results"].items():
            if not e.get("ok", False):
                why = e.get("error") or f"max relative error {e['max_rel_err']:.2e} > tolerance {case['rtol']:.1e}"
                out.append(f"{case['op']} {case['label']}: {m} FAIL ({why})")
    return out


def fallbacks(doc: dict) -> list[str]:
    """One line per method that did not run as its name says (torch.compile falling back to eager
    PyTorch): its cells are marked "(fallback)" and rank against nothing."""
    return [f"{case['op']} {case['label']}: {label(m)} fell back ({e['fallback']}); its cell is not a "
            f"{label(m)} result" for case in doc["cases"] for m, e in case["results"].items() if "fallback" in e]


def case_bandwidth(case: dict) -> dict | None:
    """The bandwidth probed in a case's own rounds: read (CPU) or copy (GPU), or None."""
    return case.get("read_bandwidth") or case.get("copy_bandwidth")


def _case_gbps(case: dict) -> float | None:
    """The bandwidth measured in a case's rounds (GB/s), if it was probed."""
    rb = case_bandwidth(case)
    return rb["bytes_per_s"] / 1e9 if rb else None


def _in_cases(doc: dict) -> str:
    probed = [g for g in map(_case_gbps, doc["cases"]) if g]
    return f"{min(probed):.1f}-{max(probed):.1f} GB/s in the cases' rounds, " if probed else ""


def gpu_text(doc: dict) -> str:
    """The GPU, its software and its bandwidths, in one line (a ``fusegen bench --device cuda`` doc)."""
    g, bw = doc["machine"]["gpu"], doc["bandwidth"]
    mem = f", {fmt_bytes(g['memory_bytes'])}" if g.get("memory_bytes") else ""
    soft = ", ".join(f"{k} {g[k]}" for k in ("driver", "cuda_driver_api", "cuda_runtime") if g.get(k))
    peak = f", {g['peak_gbps']:.0f} GB/s peak (memory clock x bus width)" if g.get("peak_gbps") else ""
    return (f"{g['name']}{mem}{peak}; {soft or 'versions unknown'}; "
            f"copy bandwidth {_in_cases(doc)}{bw['copy']['gbps']:.1f} GB/s at best before and after (copy kernel, "
            f"{fmt_bytes(bw['copy']['array_bytes'])} read + written), cudaMemcpy {bw['memcpy']['gbps']:.1f} GB/s; "
            f"timer: {doc['timer']}")


def versions_text(machine: dict) -> str:
    """``fusegen 0.1.0, python 3.11.7, numpy 2.4.6, ..., g++ (Ubuntu 13.2.0) 13.2.0``: the software
    behind a report's numbers (``machine_info()["versions"]``; a compiler's line starts with its name)."""
    versions = {"fusegen": machine.get("fusegen", "?"), **machine.get("versions", {})}
    return ", ".join(v if v.startswith(k) else f"{k} {v}" for k, v in versions.items())


def machine_text(doc: dict) -> str:
    if "gpu" in doc["machine"]:
        return gpu_text(doc)
    m, bw = doc["machine"], doc["bandwidth"]
    in_cases = _in_cases(doc)
    return (f"{m['cpu_model']}, {m['usable_cpus']} CPUs, {m['numba_threads']} Numba threads; read bandwidth "
            f"{in_cases}{bw['read']['gbps']:.1f} GB/s at best before and after (passes over "
            f"{bw['read']['array_bytes'] >> 20} MiB), copy {bw['copy']['gbps']:.1f} GB/s; load average "
            f"{', '.join(f'{v:.2f}' for v in (m.get('load_avg') or []))} at the end"
            + (f"; rounds spread {100 * doc['round_spread']:.0f}%" if doc.get("round_spread") is not None else ""))


def summary(doc: dict) -> list[str]:
    """The closing note: how many cases meet the targets, and each miss."""
    cases = [c for c in doc["cases"] if c.get("targets")]
    met = [c for c in cases if _target_text(c) == "met"]
    lines = [f"targets ({targets_text(doc['targets'])}): {len(met)} of {len(cases)} cases met"]
    for c in cases:
        if c not in met:
            text = _target_text(c)
            who = "" if text.startswith(label(_judged(c))) else f" ({label(_judged(c))})"
            lines.append(f"  missed: {c['op']} {c['label']}{who}: {text}" + _symptom(c))
    return lines


def targets_text(t: dict) -> str:
    """The targets of a run, in words."""
    if t.get("judged"):
        who = f"every fusegen backend with fresh outputs ({', '.join(label(n) for n in t['judged'])})"
    else:
        who = "every fusegen backend" if t.get("every_fusegen") else "best fusegen backend"
    rivals = " / ".join(label(n) for n in t["ahead_of"]) if t.get("ahead_of") else "every other method"
    if t.get("per_op"):
        ratios = sorted({v["bound_ratio"] for v in t["per_op"].values()})
        text = f"{who} within its issue's multiple of the bound ({ratios[0]:.3g}-{ratios[-1]:.3g}x, per op)"
    else:
        text = f"{who} within {t['bound_ratio']:.3g}x of the bound"
    if t.get("bandwidth_fraction"):
        text += f" (>= {100 * t['bandwidth_fraction']:.0f}% of the copy bandwidth)"
    text += f"; the best fusegen method ahead of {rivals}" if t.get("judged") else f" and ahead of {rivals}"
    if t.get("per_call"):
        limits = [f"{label(n)} " + (f"{label(v)}'s time" if isinstance(v, str) else fmt_time(v))
                  for n, v in t["per_call"].items()]
        text += f"; per call at the small shape at most: {', '.join(limits)}"
    elif t.get("per_call_s"):
        text += f"; at most {fmt_time(t['per_call_s'])} per call at the small shape"
    return text


def _symptom(case: dict) -> str:
    """What the numbers themselves say about a missed bound: when even the best method is far
    from it, the op is limited by arithmetic (here: transcendental functions), not memory."""
    best = case["results"].get(case.get("best") or "", {})
    if "bound" in case.get("targets", {}) and best.get("ratio_to_bound", 0) >= 2:
        return f"; compute-bound: the best method, {label(case['best'])}, is {best['ratio_to_bound']:.1f}x the bound too"
    return ""


# --- the three outputs ----------------------------------------------------------------------------
def terminal_report(doc: dict) -> str:
    """Everything ``fusegen bench`` prints after a run."""
    s = doc["settings"]
    out = [f"fusegen bench: {len(s['ops'])} ops, {s['dtype']}; large shapes: median of {s['rounds']} interleaved "
           f"rounds, as a multiple of the bound (* = best)"]
    out += [f"warning: {w}" for w in doc.get("warnings", [])]
    out.append(format_table(*steady_rows(doc), _align(steady_rows(doc)[0])))
    out.append(f"\nper call at the small shape: median of {s['per_call_rounds']} round means, "
               f"up to {s['per_call_calls']} calls each (fewer for a slow method: about 2 ms a round)"
               + ("; wall clock, the stream synchronized at the end of each round" if "gpu" in doc["machine"] else ""))
    out.append(format_table(*per_call_rows(doc), _align(per_call_rows(doc)[0])))
    if doc.get("compile_times"):
        besides = f"; importing fusegen {import_time(doc):.2f} s besides" if import_time(doc) else ""
        out.append(f"\ncompile + first calls, new process, cold / warm cache (s){besides}")
        out.append(format_table(*compile_rows(doc)))
    out.append(f"\n{_ahead_label(doc)}: the fastest rival's median / the judged fusegen method's (> 1: fusegen "
               "is faster)")
    out.append(f"bound = (bytes of every input and output, once) / the {doc.get('bound_probe', 'read')} bandwidth "
               f"of a probe run in the case's own rounds, interleaved with the methods; {machine_text(doc)}")
    out.append(f"allocator: {doc['allocator']}")
    out.append(f"software: {versions_text(doc['machine'])}")
    out += summary(doc)
    if doc.get("issue_4"):
        out.append(doc["issue_4"]["text"])
    out += fallbacks(doc)
    out += failures(doc)
    return "\n".join(out)


def markdown_report(doc: dict, png: str | None = None) -> str:
    """The Markdown report: the machine, the chart (when ``png`` is its path), the tables, the
    medians behind them, and the closing note on the targets."""
    s = doc["settings"]
    out = ["# fusegen bench", "",
           f"{doc.get('created', '')}; {machine_text(doc)}; {s['dtype']}; allocator: {doc['allocator']}.", "",
           f"Made by `{doc.get('command', 'fusegen bench')}`; software: {versions_text(doc['machine'])}.", ""]
    out += [f"**Warning:** {w}.\n" for w in doc.get("warnings", [])]
    if png:
        out += [f"![each method's time as a multiple of the bound]({png})", ""]
    out += [f"## Large shapes: median / bound ({s['rounds']} interleaved rounds; **bold** = best)", "",
            _embolden(markdown_table(*steady_rows(doc, star="**"), _align(steady_rows(doc)[0]))), ""]
    out += [f"## Per call at the small shape (median of {s['per_call_rounds']} round means, up to "
            f"{s['per_call_calls']} calls a round)", "",
            _embolden(markdown_table(*per_call_rows(doc, star="**"), _align(per_call_rows(doc)[0]))), ""]
    if doc.get("compile_times"):
        out += ["## Compile time: setup + first call of every case, new process, cold / warm cache (s)", "",
                markdown_table(*compile_rows(doc)), ""]
        if import_time(doc):
            out += [f"Not included: importing fusegen with NumPy and Numba, {import_time(doc):.2f} s (jax's "
                    "import is in the jax methods' setup).", ""]
    out += ["## Medians", "", markdown_table(*median_rows(doc), "ll" + "r" * len(_methods(doc))), ""]
    out += ["## Targets", ""] + [line.strip() if i == 0 else "* " + line.strip()[len("missed: "):]
                                 for i, line in enumerate(summary(doc))]
    if doc.get("issue_4"):
        out += ["", doc["issue_4"]["text"]]
    if fallbacks(doc):
        out += ["", "## Fallbacks", ""] + [f"* {line}" for line in fallbacks(doc)]
    bad = failures(doc)
    if bad:
        out += ["", "## Failures", ""] + [f"* {line}" for line in bad]
    if doc.get("skipped"):
        out += ["", "Skipped: " + "; ".join(f"{label(n)} ({w})" for n, w in doc["skipped"].items()) + "."]
    return "\n".join(out) + "\n"


def _embolden(table: str) -> str:
    """``1.05x**`` (the star form) -> ``**1.05x**`` for Markdown."""
    import re
    return re.sub(r"(?<=\| )([^|*]+?)\*\*(?= \|)", r"**\1**", table)


def median_rows(doc: dict) -> tuple[list[str], list[list[str]]]:
    """Every case's medians (the numbers behind the ratios)."""
    methods = _methods(doc)
    rows = [[c["op"], c["label"]] + [_cell(c["results"].get(m), "median_s", fmt_time) for m in methods]
            for c in doc["cases"]]
    return ["op", "case"] + [label(m) for m in methods], rows


def write_png(doc: dict, path: str | Path) -> Path:
    """The chart: per large case, each method's median as a multiple of the bound (log scale,
    lines at 1x and at the target), and per op the time per call at the small shape. Needs
    matplotlib (``pip install 'fusegen[plot]'``)."""
    import matplotlib
    matplotlib.use("Agg")  # no display needed, and none is touched
    import matplotlib.pyplot as plt
    methods = _methods(doc)
    fg = set(doc.get("fusegen_methods", []))
    # fusegen's backends in blues, the others in warm colours / grey: who is who at a glance
    palette = iter(["#08519c", "#3182bd", "#6baed6", "#9ecae1"])
    others = iter(["#636363", "#e6550d", "#fdae6b", "#31a354", "#a1d99b"])
    colors = {m: next(palette if m in fg else others, "#bbbbbb") for m in methods}
    large = [c for c in doc["cases"] if c["size"] == "large"]
    small = [c for c in doc["cases"] if c["size"] == "small"]
    fig, axes = plt.subplots(2, 1, figsize=(15, 8.5), gridspec_kw={"height_ratios": [3, 2]})
    width = 0.8 / max(1, len(methods))
    for ax, cases, key, scale, ylabel in (
            (axes[0], large, "ratio_to_bound", 1.0, "median / bandwidth bound (log)"),
            (axes[1], small, "median_s", 1e6, "time per call, us (log)")):
        for k, m in enumerate(methods):
            xs, ys = [], []
            for i, c in enumerate(cases):
                e = c["results"].get(m)
                if e and e.get("ok") and key in e:
                    xs.append(i + (k - (len(methods) - 1) / 2) * width)
                    ys.append(e[key] * scale)
            ax.bar(xs, ys, width, label=label(m), color=colors[m])
        ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels([f"{c['op']}\n{c['label']}".replace(" axis", "\naxis") for c in cases], fontsize=6.5)
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[0].axhline(1.0, color="black", lw=1)
    axes[0].axhline(doc["targets"]["bound_ratio"], color="black", lw=1, ls="--")
    if doc["targets"].get("per_call_s"):
        axes[1].axhline(doc["targets"]["per_call_s"] * 1e6, color="black", lw=1, ls="--")
    axes[0].legend(ncol=len(methods), fontsize=8, loc="upper left")
    m, kind = doc["machine"], doc.get("bound_probe", "read")
    probed = [g for g in map(_case_gbps, large) if g] or [doc["bandwidth"][kind]["gbps"]]
    gb = f"{min(probed):.1f}-{max(probed):.1f}" if len(set(probed)) > 1 else f"{probed[0]:.1f}"
    where = m["gpu"]["name"] if "gpu" in m else f"{m['cpu_model']}, {m['usable_cpus']} CPUs"
    axes[0].set_title(f"fusegen bench, {doc['settings']['dtype']}: {where}, {kind} {gb} GB/s (solid: the bound; "
                      "dashed: the targets)", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
