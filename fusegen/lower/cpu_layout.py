"""The Numba CPU group function's layout block and per-operand slots: the int64 ``meta`` array a
group function reads its extents and strides from, each operand's stride classes on the hot
loops (what is baked into the machine code), and the text of an operand's per-loop view."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..plan import GroupRun
from .pysource import layout_tail

# meta: nO, nRO, RI, I, ntiles, TILE, O_total, RO_total, count, nsplit, chunk; then extents, strides
HEADER = 11


def meta_array(run: GroupRun, tile: int, nsplit: int = 1):
    """The int64 ``meta`` block a group function reads its layout from."""
    L = run.layout
    ntiles = -(-L.inner // tile) if L.inner > 1 else 1
    head = [len(L.o_ext), len(L.ro_ext), L.ri, L.inner, ntiles, tile, L.o_total, L.ro_total,
            L.ro_total * L.ri, nsplit, -(-L.ri // nsplit)]
    body = list(L.o_ext) + list(L.ro_ext)
    for k in range(len(run.operands)):
        body += L.o_str[k] + L.ro_str[k] + [L.ri_str[k], L.i_str[k]]
    return np.array(head + body + layout_tail(run, len(head) + len(body)), dtype=np.int64)


def unravel_lines(pad: str, index: str, ndims: str, offset: str, target: str, ops) -> list[str]:
    """Kernel text adding the offsets of flat ``index`` over ``ndims`` dims (extents and strides
    at ``offset`` in meta) to each operand's ``<target>_<name>`` base (``ops``: ``.name``, ``.k``)."""
    ops = list(ops)
    if not ops:   # (nothing to offset: an empty block would not compile)
        return []
    lines = [f"{pad}if {ndims} == 1:   # (the common case, without a division)"]
    lines += [f"{pad}    {target}_{o.name} += {index} * meta[SB + {o.k} * W + {offset}0]" for o in ops]
    lines += [f"{pad}else:", f"{pad}    rem = {index}", f"{pad}    for d in range({ndims} - 1, -1, -1):",
              f"{pad}        e = meta[{HEADER} + {offset}d]", f"{pad}        q = rem // e",
              f"{pad}        ix = rem - q * e", f"{pad}        rem = q"]
    return lines + [f"{pad}        {target}_{o.name} += ix * meta[SB + {o.k} * W + {offset}d]" for o in ops]


def stride_pattern(run: GroupRun) -> tuple:
    """Per operand: (RI stride class, I stride class, invariant over reduced dims).
    A class is 0, 1 or 'n' (any other stride, read from meta)."""
    L = run.layout

    def cls(s):
        return s if s in (0, 1) else "n"

    return tuple((cls(L.ri_str[k]) if L.ri > 1 else 0, cls(L.i_str[k]) if L.inner > 1 else 0,
                  all(s == 0 for s in L.ro_str[k]) and (L.ri_str[k] == 0 or L.ri == 1))
                 for k in range(len(run.operands)))


@dataclass
class OperandSlot:
    name: str        # flat array variable
    key: tuple
    ri: object       # stride class on RI
    i: object        # stride class on I
    k: int           # operand index in meta
    kind: str = "array"   # "array"; "iota": the address is the value; "modular": the address is a
                          # linear index, unravelled per element over the map's digits;
                          # "iota_modular": both, the unravelled address is the value
    kept: bool = False    # a workspace the group keeps in a local, ``k_<name>`` (lower/cpu_kept)

    @property
    def is_array(self) -> bool:
        return not self.kind.startswith("iota")


def view_text(o: OperandSlot, cls, at: str, stride: str, prefix: str = "") -> str:
    """The per-loop view of operand ``o`` whose hot-loop stride class is ``cls``."""
    if cls == 0 and o.key[0] != "out" and not prefix:
        return f"s_{o.name} = {f'k_{o.name}' if o.kept else f'{o.name}_[{at}]'}"
    if cls == "n":
        return f"{prefix or 'v'}_{o.name} = {o.name}_[{at}::{stride}]"
    if cls == 0:
        return f"{prefix or 'v'}_{o.name} = {o.name}_[{at}:{at} + 1]"
    return f"{prefix or 'v'}_{o.name} = _fg_row({o.name}_, {at})"


def index_text(cls, var: str, stride: str) -> str:
    return "0" if cls == 0 else (var if cls == 1 else f"{var} * {stride}")
