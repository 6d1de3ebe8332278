"""Generated Python source -> an imported module, through a content-addressed file.

Both Numba backends generate Python. Writing it to a real file (named by the hash of its
text) keeps it readable and lets Numba's ``cache=True`` work: Numba cannot cache
functions defined in ``<string>`` (numba/numba#3501) and keys its cache by the file.
Whatever must invalidate that cache (fusegen and Numba versions, JIT options) therefore
belongs in the source text itself.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading

from ..cache import cache_dir

_lock = threading.Lock()
_modules: dict[str, object] = {}

# Python spellings shared by the generated sources: NumPy's NaN-propagating maximum/minimum
# and the accumulator update of each reduction kind.
NAN_HELPERS = '''\


def _fmax(a, b):  # NumPy's maximum: NaN wins
    return a if (a > b or a != a) else b


def _fmin(a, b):
    return a if (a < b or a != a) else b

'''


def combine(kind: str, acc: str, v: str, ieee: bool = False) -> str:
    """The statement that folds value ``v`` into accumulator ``acc`` for a reduction kind;
    ``ieee``: a float max or min as ``llvm.maximum``/``minimum`` (``pyhelpers_numba``), which LLVM
    vectorizes as a reduction (the CPU row loops)."""
    if ieee and kind in ("max", "min"):
        return f"{acc} = _fg_{kind}imum({acc}, {v})"
    if kind in ("sum", "mean"):
        return f"{acc} += {v}"
    if kind == "prod":
        return f"{acc} *= {v}"
    if kind == "logaddexp":   # a logcumsumexp scan's fold
        return f"{acc} = _fg_logaddexp({acc}, {v})"
    return f"{acc} = _fmax({acc}, {v})" if kind in ("max", "copy") else f"{acc} = _fmin({acc}, {v})"


def source_dir(sub: str) -> str:
    d = os.path.join(cache_dir(), sub)
    os.makedirs(d, exist_ok=True)
    return d


def import_source(src: str, sub: str, prefix: str, setup=None, key_extra: str = ""):
    """Write ``src`` to ``<cache>/<sub>/<prefix>_<hash>.py`` (atomically: concurrent processes
    write identical bytes) and import it once per process. ``setup(module)`` runs right
    after the import, under the lock (e.g. to wrap functions in ``njit``); ``key_extra``
    distinguishes in-process variants of one file (the file itself is keyed by ``src``)."""
    file_digest = hashlib.sha256(src.encode()).hexdigest()[:20]
    modname = f"{prefix}_{hashlib.sha256((src + key_extra).encode()).hexdigest()[:20]}"
    with _lock:
        mod = _modules.get(modname)
        if mod is None:
            path = os.path.join(source_dir(sub), f"{prefix}_{file_digest}.py")
            if not os.path.exists(path):
                tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
                with open(tmp, "w") as f:
                    f.write(src)
                os.replace(tmp, path)
            spec = importlib.util.spec_from_file_location(modname, path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[modname] = mod
            spec.loader.exec_module(mod)
            if setup is not None:
                setup(mod)
            _modules[modname] = mod
    return mod


# --- what index maps add to a group's meta block (both Numba backends) --------------------------
#: A modular map's address, from its linear index and the digits ``meta[pos:]`` holds (see
#: ``layout_tail``): only in the sources of groups that read through one.
INNER_HELPER = '''

def _inner(meta, pos, lin):
    a = meta[pos + 1]
    for j in range(meta[pos] - 1, -1, -1):
        e = meta[pos + 2 + 2 * j]
        q = lin // e
        a += (lin - q * e) * meta[pos + 3 + 2 * j]
        lin = q
    return a
'''


def layout_tail(run, start: int) -> list[int]:
    """The part of a group's int64 meta block after its strides (which end at ``start``): each
    operand's offset at the box's start, then where its modular map's digits are (0: none), then
    those digits: count, base offset, (extent, stride) pairs."""
    tail = list(run.offsets)
    inners = run.inners or [None] * len(run.operands)
    pos, digits = [], []
    first = start + 2 * len(run.operands)
    for inner in inners:
        if inner is None:
            pos.append(0)
            continue
        pos.append(first + len(digits))
        digits += [len(inner.digits), inner.offset] + [x for d in inner.digits for x in d]
    return tail + pos + digits


def hoist_invariant(lines: list, var: str) -> tuple[list, list]:
    """Split a loop body's ``(name, expression)`` lines into those that do not depend on the loop
    counter ``var`` (computed once, before the loop) and the rest, each list in order. A masked
    branch's ``exp(-inf - max)`` or a norm's ``rsqrt(var + eps)`` is then one evaluation per
    loop, not one per element, whether or not LLVM would have hoisted it (it cannot always tell
    that an inlined math function is pure)."""
    import re
    before, inside, varying = [], [], {var}
    for name, expr in lines:
        if varying & set(re.findall(r"[A-Za-z_]\w*", expr)):
            inside.append((name, expr))
            varying.add(name)
        else:
            before.append((name, expr))
    return before, inside


def operand_kind(key: tuple, inner) -> str:
    """An operand's ``OperandSlot.kind`` from its key (an iota's is ``("iota", ...)``) and its
    modular map (None: strided)."""
    if key[0] == "iota":
        return "iota" if inner is None else "iota_modular"
    return "array" if inner is None else "modular"


def operand_name(key: tuple) -> str:
    """The variable of a group operand: its slot's name (x0, out1, ws0, iota5), suffixed when one
    array is read through several maps (x0_1)."""
    from ..plan import slot_name
    return slot_name(key[:2]) + (f"_{key[2]}" if len(key) > 2 else "")


def group_params(stages) -> list:
    """The static scalars (dims) a fused group's function takes: each once, however many of its
    stages read it."""
    out: list = []
    for st in stages:
        out += [n for n in st.params if all(n is not m for m in out)]
    return out


def general_maps(stages, inners) -> bool:
    """Whether a group's code must read offsets and digits from meta: some access goes through a
    view, a piece or an iota (plans without layout ops keep the shorter code they always had). A
    stage with pieces counts though none of its accesses is a view: a concat of constants writes
    each piece's box at its own offset in the output."""
    from ..plan.access import BROADCAST, REDUCED
    plain = ((BROADCAST,), (REDUCED,), ())
    return any(a.steps not in plain for st in stages for a in st.reads + st.stores) or any(inners or ()) \
        or any(st.instances for st in stages)


#: The head of a generated Numba CPU module (``lower_cpu.compile_group`` fills it in).
CPU_PRELUDE = '''\
# Generated by fusegen {version} from op {op!r} ({dtypes}). Do not edit: regenerate instead.
# numba {numba_version}, @njit({jit}) -- part of the file's content hash, so Numba's disk
# cache (keyed by this file) never serves machine code compiled under other options.
# fusegen.vmath {vmath} -- likewise for the float32 exp/tanh inlined from there.
# fusegen.pyhelpers_numba {helpers} -- likewise for the special-case helpers.
import math
import numpy as np
from numba import prange
from fusegen.pyhelpers_numba import {helper_names}
{vmath_imports}'''
