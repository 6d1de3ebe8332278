"""Row-constant lines of an emitted CPU loop body (issue #17's embedding rows, #19's norms).

A body's lines (``const auto t3 = ...;``) run per element. In the *invariant* body of a stage
(``emitters.layout``: the row-constant reads, a gather's index or a reduction's result, loaded
once per row as ``rc<k>``) many of them depend on nothing that changes along the inner loop: a
gathered row's checked index, ``rsqrt(var + eps)``. Those are computed once per row, before the
chunk loop, and a gathered read whose index is among them is read through a unit-stride chunk
view like any other operand, so the loop vectorizes (g++ does not version a loop on a stride
known only at run time; a per-element gathered load stays scalar: 5x the bandwidth bound).

Which lines are row-constant is decided on their text, conservatively: every identifier must be
one known to be constant over a row (below), a C++ type or function name, or an earlier
row-constant line's name. An identifier it does not know keeps the line per element, which costs
speed, never correctness.
"""
from __future__ import annotations

import re

#: Identifiers constant over a row of the inner loop: the row's loads (``rc<k>``), the gathers'
#: extents and strides, attributes (``a.x``), parameters (``pv<n>``), the row's offsets ``c``, the
#: loops (``B``) and shapes (``s``).
_ROW_NAMES = re.compile(r"(rc|gn|pv)\d+|gs|a|c|B|s|R|true|false|nullptr")
_TYPES = {"float", "double", "bool", "auto", "const", "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t",
          "uint16_t", "uint32_t", "uint64_t", "size_t", "static_cast"}
# an identifier that is not a member (``a.eps``), a qualified name's tail (``fg::exp``) or a call
_IDENT = re.compile(r"(?<![\w.])(?<!::)(?<!->)([A-Za-z_]\w*)(?!\w|\s*(?:\(|::))")
_LINE = re.compile(r"const auto (\w+) = (.*);$")


def constant_text(expr: str, known: set[str]) -> bool:
    """Whether C++ expression ``expr`` is constant over a row, given the row-constant names
    ``known``."""
    expr = re.sub(r"\b\d[\w.]*", "0", expr)   # literals (1.0f, 0x7f, 1e-5)
    for name in _IDENT.findall(expr):
        if name not in known and name not in _TYPES and not _ROW_NAMES.fullmatch(name):
            return False
    return True


def row_constant_names(lines: list[tuple[str, str]]) -> set[str]:
    """The names of the (name, expression) lines that are constant over a row."""
    known: set[str] = set()
    for name, expr in lines:
        if constant_text(expr, known):
            known.add(name)
    return known


def split_lines(lines: list[str]) -> tuple[list[str], list[str], set[str]]:
    """A body's rendered lines as (row-constant, per element, the row-constant lines' names),
    each in its order."""
    pairs = [m.groups() if m else (None, None) for m in map(_LINE.match, lines)]
    names = row_constant_names([(n, e) for n, e in pairs if n is not None])
    hoisted = [line for line, (n, _) in zip(lines, pairs) if n in names]
    return hoisted, [line for line, (n, _) in zip(lines, pairs) if n not in names], names
