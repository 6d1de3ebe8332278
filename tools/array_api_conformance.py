"""Run the Python array API conformance suite (data-apis/array-api-tests, checked out outside this
repository) against fusegen through ``tools/array_api_adapter.py``, and print (and write) a
per-function pass/fail table for the elementwise, statistical, utility, searching,
manipulation, indexing and main-namespace linear-algebra groups of the standard (2024.12).

    python tools/array_api_conformance.py --suite /work/array-api-tests --backend numba \\
        --max-examples 20 [--json out.json] [--markdown out.md] [-n 2] [--real-only] [--only exp,sum]

A function passes when every test of it that ran passed: its own tests in the group's test file
(function forms only: the ``__add__`` operator forms test the array type, NumPy's here), its
``*_with_scalars`` tests and its special-case tests. A function fusegen does not compute
(``array_api_adapter.FUSEGEN_FUNCTIONS``) is "missing" and not run. Nothing from the suite is
copied here: it is run as it is, with ``ARRAY_API_TESTS_MODULE=array_api_adapter``.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
GROUPS = {  # the spec's module -> the suite's test file
    "elementwise_functions": "test_operators_and_elementwise_functions.py",
    "statistical_functions": "test_statistical_functions.py",
    "utility_functions": "test_utility_functions.py",
    "searching_functions": "test_searching_functions.py",
    "manipulation_functions": "test_manipulation_functions.py",
    "indexing_functions": "test_indexing_functions.py",
    "linear_algebra_functions": "test_linalg.py",
}


#: functions whose tests the suite keeps in another group's file
TESTED_ELSEWHERE = {"broadcast_arrays": "test_data_type_functions.py", "broadcast_to": "test_data_type_functions.py"}


def spec_functions(suite: Path, version: str = "2024_12") -> dict[str, str]:
    """function -> group, from the standard's stubs (the suite's ``array-api`` checkout)."""
    out = {}
    for group in GROUPS:
        path = suite / "array-api" / "src" / "array_api_stubs" / f"_{version}" / f"{group}.py"
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__":
                out.update({ast.literal_eval(e): group for e in node.value.elts})
    return out


def owner(nodeid: str, functions) -> str | None:
    """The function a test belongs to (None: an operator form, or another function's test)."""
    name = nodeid.split("::")[-1]
    test, _, param = name.partition("[")
    if param:
        m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)", param)
        ident = m.group(1) if m else ""
        if ident.startswith("__"):
            return None
        if ident in functions:
            return ident
    base = test[len("test_"):] if test.startswith("test_") else test
    base = re.sub(r"_with_scalars$", "", base)
    return base if base in functions else None


def collect(suite: Path, env: dict, files: list[str]) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", *files], cwd=suite, env=env,
                          capture_output=True, text=True)
    return [line.strip() for line in proc.stdout.splitlines() if "::" in line]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default=os.environ.get("ARRAY_API_TESTS_DIR", "/work/array-api-tests"))
    ap.add_argument("--backend", default="numba", choices=["numba", "aot"])
    ap.add_argument("--max-examples", type=int, default=20)
    ap.add_argument("-n", default="0", help="pytest-xdist workers")
    ap.add_argument("--real-only", action="store_true", help="leave complex dtypes out of the namespace")
    ap.add_argument("--only", default="", help="comma-separated functions to run")
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    args = ap.parse_args(argv)
    suite = Path(args.suite)
    sys.path.insert(0, str(HERE))
    import array_api_adapter
    functions = spec_functions(suite)
    ours = [f for f in functions if f in array_api_adapter.FUSEGEN_FUNCTIONS]
    if args.only:
        ours = [f for f in ours if f in args.only.split(",")]
    env = dict(os.environ, ARRAY_API_TESTS_MODULE="array_api_adapter", FUSEGEN_ARRAY_API_BACKEND=args.backend,
               FUSEGEN_ARRAY_API_COMPLEX="0" if args.real_only else "1",
               PYTHONPATH=os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
    files = [f"array_api_tests/{GROUPS[g]}" for g in dict.fromkeys(functions[f] for f in ours)]
    files += [f"array_api_tests/{TESTED_ELSEWHERE[f]}" for f in ours if f in TESTED_ELSEWHERE]
    files = list(dict.fromkeys(files))
    files.append("array_api_tests/test_special_cases.py")
    ids = [i for i in collect(suite, env, files) if owner(i, functions) in ours]
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        idfile = Path(tmp) / "ids.txt"
        idfile.write_text("\n".join(ids) + "\n")
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--max-examples={args.max_examples}",
               "--disable-deadline", "--json-report", f"--json-report-file={report}",
               "-n", args.n] + ids
        run = subprocess.run(cmd, cwd=suite, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if not report.exists():  # pytest itself failed (a missing plugin, a collection error): say why
            sys.exit(f"array_api_conformance: the suite wrote no report (pytest exit {run.returncode}; it needs "
                     f"pytest-json-report and hypothesis):\n{run.stdout[-3000:]}")
        tests = json.loads(report.read_text())["tests"]
    results: dict[str, dict] = {f: dict(group=functions[f], passed=0, failed=0, status="missing", first_failure="")
                                for f in functions}
    for t in tests:
        f = owner(t["nodeid"], functions)
        if f is None or f not in ours:
            continue
        r = results[f]
        if t["outcome"] == "passed":
            r["passed"] += 1
        elif t["outcome"] in ("failed", "error"):
            r["failed"] += 1
            if not r["first_failure"]:
                crash = (t.get("call") or t.get("setup") or {}).get("crash") or {}
                r["first_failure"] = f"{t['nodeid'].split('::')[-1]}: {str(crash.get('message', ''))[:160]}"
    for f in ours:
        r = results[f]
        r["status"] = "pass" if r["passed"] and not r["failed"] else ("fail" if r["failed"] else "not run")
    n_pass = sum(r["status"] == "pass" for r in results.values())
    lines = [f"array API conformance through fusegen ({args.backend}, {args.max_examples} examples, "
             f"{'real dtypes only' if args.real_only else 'complex dtypes in the namespace'}): "
             f"{n_pass} of {len(functions)} functions pass", "",
             "| function | group | status | tests passed / failed | first failure |", "|---|---|---|---|---|"]
    for f, r in results.items():
        fail = r["first_failure"].replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {f} | {r['group'].replace('_functions', '')} | {r['status']} | {r['passed']} / {r['failed']} "
                     f"| {fail} |")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(backend=args.backend, max_examples=args.max_examples,
                                                   real_only=args.real_only, passed=n_pass, total=len(functions),
                                                   functions=results), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
