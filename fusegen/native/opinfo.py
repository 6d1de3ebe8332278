"""What a fusegen-generated AOT library says about itself: ``NameOpInfo()``, a JSON object of
the op's name, inputs, output count, attributes and, for a specialization, its input ranks.

Why: MindSpore's ABI leaves the output count to the caller, whose count picks the signature of
``NameInferShape`` (``vector<int64_t>`` for one output, ``vector<vector<int64_t>>`` for several).
A wrong count read a vector's pointers as dims (a multi-output kernel loaded without
``n_outputs``) or crashed the process (``n_outputs=2`` for one output). A misspelled attribute
ran with the default, and a rank-specialized kernel's refusal read "more dims than the kernel
supports". A library without the symbol (hand-written, or emitted before it existed) is taken
at the caller's word, as before.
"""
from __future__ import annotations

import ctypes
import json

from ..errors import ArgumentError, AttrError, ShapeError

_INFO = ctypes.CFUNCTYPE(ctypes.c_char_p)   # const char *NameOpInfo(void)


def read(address: int | None) -> dict | None:
    """The library's op info, or None where it has none (or none fusegen can read)."""
    if not address:
        return None
    try:
        info = json.loads(_INFO(address)().decode())
    except (ValueError, UnicodeDecodeError, AttributeError):
        return None
    return info if isinstance(info, dict) and isinstance(info.get("outputs"), int) else None


def settle(info: dict | None, name: str, given: dict, n_inputs: int | None, attrs: dict) -> tuple[int, int | None]:
    """(n_outputs, n_inputs) for an ``AotKernel``: the caller's counts (``given``: the output
    counts its arguments imply), checked against the library's where it says; attribute names
    checked likewise."""
    if info is None:
        return next(iter(given.values()), 1), n_inputs
    op, outs, ins = info.get("op", name), info["outputs"], len(info.get("inputs", ()))
    for what, n in given.items():
        if n != outs:
            raise ArgumentError(f"{name}: {what} says {n} output{'s' * (n != 1)}, but the library was generated for op "
                                f"{op!r} with {outs} output{'s' * (outs != 1)}")
    if n_inputs is not None and n_inputs != ins:
        raise ArgumentError(f"{name}: n_inputs={n_inputs}, but op {op!r} takes {ins} inputs "
                            f"({', '.join(info.get('inputs', ()))})")
    known = {a["name"]: a for a in info.get("attrs", ())}
    unknown = sorted(set(attrs) - set(known))
    if unknown:
        raise AttrError(f"{name}: op {op!r} has no attribute {unknown[0]!r} (attributes: "
                        f"{', '.join(known) or 'none'})")
    missing = [a for a, spec in known.items() if spec.get("required") and a not in attrs]
    if missing:
        raise AttrError(f"{name}: op {op!r} needs attribute {missing[0]!r} ({known[missing[0]]['type']})")
    return outs, ins


def check_ranks(info: dict | None, name: str, shapes: list[tuple[int, ...]]) -> None:
    """A specialization's input ranks, checked before its Init names the refusal a rank error."""
    ranks = (info or {}).get("ranks")
    if ranks and [len(s) for s in shapes] != list(ranks):
        raise ShapeError(f"{name}: the library was emitted for op {info.get('op', name)!r} specialized for input "
                         f"ranks {list(ranks)}; got inputs of ranks {[len(s) for s in shapes]} (emit another "
                         "specialization: fusegen.emit(op, ..., ranks=[...]))")
