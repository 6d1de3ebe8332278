"""Accesses: how a stage's loop nest reads and writes arrays, each through an *index map* from
the stage's domain to the array.

An ``Access`` is one operand slot of a loop nest: the array (an input ``("in", i)``, an output
``("out", k)``, a workspace ``("buf", b)``), the IR node it carries, and the map's *steps*,
frozen and hashable, decided at plan time without shapes. ``fusegen.plan.layout.evaluate`` turns
the steps into ``(offset, strides over the domain)`` once shapes are known; every renderer
consumes that result (the emitted C++ has the twin evaluators, ``fg::read_strides`` and
``fg::write_strides``). Today's steps:

* ``()``, the identity: the array has the domain's shape (an elementwise output);
* ``(Broadcast(),)``: the array broadcast into the domain, NumPy's rule (reads);
* ``(Reduced(),)``: a reduction result over the domain (its writes, and reads of it at the
  index where it was written).

Layout ops add three more, so a read is the array's C-contiguous view carried up to the
domain through a *path*: ``Broadcast(to=node)`` (to an intermediate node's shape),
``View(node)`` (a permute, index, reshape, broadcast_to or flip node, with the parameters its
``NodeInfo`` resolved), ``Piece(node, p)`` (source ``p`` of a concat, the interior of a pad),
then ``Broadcast()`` to the domain. An iota is read the same way from a virtual array whose
"address" is the index (slot ``("iota", k)``). ``fusegen.plan.layout`` evaluates them with
``fusegen.plan.views``.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import Node


@dataclass(frozen=True, slots=True)
class Broadcast:
    """Read the array broadcast into the domain (``to=None``), or into an intermediate node's
    shape: its dims align with the target's last dims; a missing leading dim or a size-1 dim
    repeats (stride 0)."""

    to: Node | None = None

    def __str__(self) -> str:
        return "broadcast" if self.to is None else f"broadcast to {self.to.op.value}"


@dataclass(frozen=True, slots=True)
class View:
    """Read through a view node (its resolved parameters are in the signature's NodeInfo)."""

    node: Node

    def __str__(self) -> str:
        return self.node.op.value


@dataclass(frozen=True, slots=True)
class Piece:
    """Source ``index`` of a piecewise node: the operand is active only where that piece is."""

    node: Node
    index: int

    def __str__(self) -> str:
        return f"{self.node.op.value} piece {self.index}"


@dataclass(frozen=True, slots=True)
class Gather:
    """Source ``index`` of a gather node (issue #17): 0 is the gathered array, read with the
    gathered axis replaced by the indices' dims at stride 0 (the data-dependent term
    ``index * stride`` is added per element by the renderer); 1 is the indices, read with the
    array's other dims at stride 0 (``take``) or broadcast to the result (``take_along_axis``)."""

    node: Node
    index: int

    def __str__(self) -> str:
        return f"{'gathered from' if self.index == 0 else 'indices of'} {self.node.op.value}"


@dataclass(frozen=True, slots=True)
class Reduced:
    """The array is a reduction result over the domain: its dims other than 1 are the domain's
    kept (not reduced) dims other than 1, in order, however its size-1 dims sit (kept, dropped,
    missing in front as for ``sum_to``, or put back as for ``unreduce``). Reduced dims get
    stride 0: every reduced index lands on the same element."""

    def __str__(self) -> str:
        return "reduced"


BROADCAST = Broadcast()
REDUCED = Reduced()


@dataclass(frozen=True, slots=True)
class Access:
    """One array a stage's loop nest touches, and the map from the domain to its elements."""

    slot: tuple          # ("in", i) | ("out", k) | ("buf", b): which array
    node: Node           # the leaf read (INPUT/REDUCE), or the node whose value is stored
    steps: tuple = ()    # the index map, domain -> array; () is the identity

    @property
    def name(self) -> str:
        """The operand's name in generated code: x<i>, out<k>, ws<b>."""
        return slot_name(self.slot)

    def map_text(self, name=None) -> str:
        """The map as text; ``name(node)`` names the nodes a step refers to (``%3``)."""
        parts = []
        for s in self.steps:
            text = str(s)
            node = getattr(s, "to", None) or getattr(s, "node", None)
            if name is not None and node is not None:
                text += f" {name(node)}"
            parts.append(text)
        return " then ".join(parts) or "identity"


def slot_name(slot: tuple) -> str:
    return {"in": "x", "out": "out", "buf": "ws", "iota": "iota", "probe": "probe"}[slot[0]] + str(slot[1])
