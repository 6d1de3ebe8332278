"""fusegen's architecture, kept true: imports flow one way, in the layer order that
``fusegen/layers.py`` declares; no import circle; no private name crosses a module boundary;
every module is short enough to read in one sitting and says what it owns.

The checker reads every module's imports with ``ast`` (imports inside functions included:
``import fusegen.x``, ``from . import x``, ``from .x import y``) and the attribute accesses
made through an imported module (``build._compile_cached``). It is shown to fail on a synthetic
package with a circle, an upward import and private imports on purpose.

``python tests/test_architecture.py`` prints the import graph's statistics.
"""
from __future__ import annotations

import ast
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from fusegen.layers import LAYERS

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "fusegen"

#: A module's most lines. Larger ones, each with the reason it is one module.
MAX_LINES = 500
LONG_MODULES: dict[str, str] = {}


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    tree: ast.Module
    imports: set[str] = field(default_factory=set)        # dotted names of the package's modules
    problems: list[str] = field(default_factory=list)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def read_package(root: Path, package: str) -> dict[str, Module]:
    """Every module under ``root`` (the package's directory), with its imports resolved."""
    mods: dict[str, Module] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("").parts
        is_pkg = rel[-1] == "__init__"
        name = ".".join((package,) + (rel[:-1] if is_pkg else rel))
        mods[name] = Module(name, path, is_pkg, ast.parse(path.read_text(), str(path)))
    for m in mods.values():
        _resolve(m, mods, package)
    return mods


def _resolve(m: Module, mods: dict[str, Module], package: str) -> None:
    home = m.name if m.is_package else m.name.rpartition(".")[0]
    bound: dict[str, str] = {}   # local name -> module it is bound to

    def add(target: str, line: int) -> str | None:
        while target and target not in mods:   # `import a.b.c` where c is not a module
            target = target.rpartition(".")[0]
        if target.split(".")[0] == package and target in mods:
            if target != m.name:
                m.imports.add(target)
            return target
        return None

    for node in ast.walk(m.tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                t = add(a.name, node.lineno)
                if t is not None:
                    bound[a.asname or a.name.split(".")[0]] = t if a.asname else package
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = home.split(".")
                base = base[:len(base) - node.level + 1]
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base.split(".")[0] != package:
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                if sub in mods:
                    add(sub, node.lineno)
                    bound[a.asname or a.name] = sub
                else:
                    add(base, node.lineno)
                    if _private(a.name):
                        m.problems.append(f"{m.name}:{node.lineno}: imports private name {a.name!r} from {base}")
    # attribute access through an imported module: `mod._private`, `fusegen.mod._private`
    for node in ast.walk(m.tree):
        if not isinstance(node, ast.Attribute) or not _private(node.attr):
            continue
        chain, v = [], node.value
        while isinstance(v, ast.Attribute):
            chain.append(v.attr)
            v = v.value
        if not isinstance(v, ast.Name) or v.id not in bound:
            continue
        target = bound[v.id]
        for part in reversed(chain):
            if f"{target}.{part}" not in mods:
                target = None
                break
            target = f"{target}.{part}"
        if target is not None and target != m.name:
            m.problems.append(f"{m.name}:{node.lineno}: reads private name {node.attr!r} of module {target}")


def layer_index(name: str, layers, package: str) -> int | None:
    for i, (_, _, names) in enumerate(layers):
        for n in names:
            if name == n or (n != package and name.startswith(n + ".")):
                return i
    return None


def circles(mods: dict[str, Module]) -> list[list[str]]:
    """Strongly connected components of more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:   # Tarjan; the graph is small, recursion is fine
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(mods[v].imports):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(mods):
        if v not in index:
            visit(v)
    return out


def check(root: Path, package: str, layers) -> list[str]:
    """Every violation of the rules in the module docstring, as readable lines."""
    mods = read_package(root, package)
    problems = [p for m in mods.values() for p in m.problems]
    for m in mods.values():
        mine = layer_index(m.name, layers, package)
        if mine is None:
            problems.append(f"{m.name}: no layer claims this module (add it to the layer table)")
            continue
        for t in sorted(m.imports):
            theirs = layer_index(t, layers, package)
            if theirs is not None and theirs > mine:
                problems.append(f"{m.name} (layer {layers[mine][0]}) imports {t} (layer {layers[theirs][0]}): "
                                "an import against the layer order")
    for comp in circles(mods):
        problems.append("import circle: " + " -> ".join(comp))
    return problems


def levels(mods: dict[str, Module]) -> dict[str, int]:
    """Each module's level: 1 + the highest level of what it imports (0 for none)."""
    memo: dict[str, int] = {}

    def level(v: str) -> int:
        if v not in memo:
            memo[v] = 0
            memo[v] = 1 + max((level(w) for w in mods[v].imports), default=-1)
        return memo[v]

    return {v: level(v) for v in mods}


# --- fusegen itself -----------------------------------------------------------------------------
def test_imports_follow_the_layers_without_circles_or_private_names():
    problems = check(PACKAGE_DIR, "fusegen", LAYERS)
    assert not problems, "\n".join(problems)


def test_modules_are_readable_in_one_sitting_and_say_what_they_own():
    too_long, undocumented = [], []
    for m in read_package(PACKAGE_DIR, "fusegen").values():
        n = len(m.path.read_text().splitlines())
        if n > MAX_LINES and m.name not in LONG_MODULES:
            too_long.append(f"{m.name}: {n} lines")
        if not (ast.get_docstring(m.tree) or "").strip():
            undocumented.append(m.name)
    assert not too_long, f"modules over {MAX_LINES} lines: {too_long}"
    assert not undocumented, f"modules without a docstring saying what they own: {undocumented}"
    assert set(LONG_MODULES) <= set(read_package(PACKAGE_DIR, "fusegen")), "allow-list names a missing module"


def test_importing_fusegen_imports_no_code_generator():
    """``import fusegen`` stays cheap (issue #19's warm start): Numba, jinja2 and the emitters are
    imported by the first compile or emit that needs them, not by the import."""
    import subprocess
    code = ("import sys, fusegen; print(sorted(m for m in ('numba', 'jinja2', 'fusegen.abi_emit', "
            "'fusegen.lower_cpu', 'fusegen.lower_cuda', 'llvmlite') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_every_layer_is_in_the_readme_diagram():
    readme = (PACKAGE_DIR.parent / "README.md").read_text()
    section = readme.split("## Architecture", 1)[1].split("\n## ", 1)[0]
    for name, _, modules in LAYERS:
        assert name in section, name
        for mod in modules:
            shown = mod.removeprefix("fusegen.").replace(".", "/")
            assert shown in section or mod == "fusegen", f"README's architecture section does not show {mod}"


# --- the checker fails when it should ----------------------------------------------------------
def _synthetic(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return root


SYNTHETIC_LAYERS = (
    ("low", "", ("pkg.low", "pkg.ring")),
    ("high", "", ("pkg.high",)),
    ("api", "", ("pkg",)),
)


def test_checker_passes_a_clean_package(tmp_path):
    root = _synthetic(tmp_path, {
        "__init__.py": "from .high import f\n",
        "low.py": "X = 1\n",
        "high.py": "from . import low\nfrom .low import X\n\ndef f():\n    import pkg.low\n    return low.X\n",
        "ring/__init__.py": "",
        "ring/a.py": "from .b import Y\n",
        "ring/b.py": "Y = 2\n",
    })
    assert check(root, "pkg", SYNTHETIC_LAYERS) == []


def test_checker_finds_a_circle_an_upward_import_and_private_names(tmp_path):
    root = _synthetic(tmp_path, {
        "__init__.py": "",
        "low.py": "_hidden = 1\n\ndef g():\n    from .high import f  # lazy, and upward\n    return f\n",
        "high.py": "from . import low\nfrom .low import _hidden\n\ndef f():\n    return low._hidden\n",
        "ring/__init__.py": "",
        "ring/a.py": "def h():\n    from . import b\n    return b\n",
        "ring/b.py": "import pkg.ring.a\n",
    })
    problems = check(root, "pkg", SYNTHETIC_LAYERS)
    text = "\n".join(problems)
    assert "pkg.low (layer low) imports pkg.high (layer high)" in text
    assert "import circle: pkg.high -> pkg.low" in text
    assert "import circle: pkg.ring.a -> pkg.ring.b" in text
    assert "imports private name '_hidden' from pkg.low" in text
    assert "reads private name '_hidden' of module pkg.low" in text
    assert len(problems) == 5, text


def test_checker_refuses_a_module_no_layer_claims(tmp_path):
    root = _synthetic(tmp_path, {"__init__.py": "", "low.py": "", "stray.py": "from . import low\n"})
    assert check(root, "pkg", SYNTHETIC_LAYERS) == [
        "pkg.stray: no layer claims this module (add it to the layer table)"]


def main() -> None:
    mods = read_package(PACKAGE_DIR, "fusegen")
    lv = levels(mods)
    edges = sum(len(m.imports) for m in mods.values())
    sizes = sorted(((len(m.path.read_text().splitlines()), n) for n, m in mods.items()), reverse=True)
    print(f"{len(mods)} modules, {edges} imports between them, {1 + max(lv.values())} levels, "
          f"{len(circles(mods))} circles; largest: {sizes[:5]}")
    for i, (name, _, _) in enumerate(LAYERS):
        members = sorted(n for n in mods if layer_index(n, LAYERS, "fusegen") == i)
        print(f"{i + 1}. {name}: {', '.join(members)}")
    for p in check(PACKAGE_DIR, "fusegen", LAYERS):
        print("PROBLEM", p, file=sys.stderr)


if __name__ == "__main__":
    main()
