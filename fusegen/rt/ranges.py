"""The engine's memory bookkeeping: which bytes an array spans (``extent``), and per address
space a sorted map of disjoint byte ranges (``Ranges``), each with the last call that wrote it
and the calls that have read it since (MXNet's per-variable queues, kept per byte range).

A new read waits for the range's writer; a new write waits for the writer and the readers, and
then becomes the range's only entry. Ranges are split where accesses begin and end, so partially
overlapping views are exact. Calls are opaque here: the engine says which still matter.
"""
from __future__ import annotations

import math
from bisect import bisect_left, bisect_right

import numpy as np


def extent(a):
    """``(space, lo, hi)``: the address space ("host" or "cuda") and the byte range ``[lo, hi)``
    an array spans; None for what holds no memory the engine can track (an empty array, a
    Python scalar or list: those are read when the call runs)."""
    if type(a) is np.ndarray:  # the common case: no probing for a CUDA interface
        iface, space = a.__array_interface__, "host"
    else:
        iface, space = getattr(a, "__cuda_array_interface__", None), "cuda"
        if iface is None:
            iface, space = getattr(a, "__array_interface__", None), "host"
    if iface is None:
        try:  # a buffer-protocol object (bytearray, memoryview): np.asarray views it
            iface = np.asarray(memoryview(a)).__array_interface__
        except TypeError:
            return None
    data, shape = iface.get("data"), tuple(iface["shape"])
    if not isinstance(data, tuple) or 0 in shape:
        return None
    itemsize = np.dtype(iface["typestr"]).itemsize
    strides = iface.get("strides")
    if strides is None:  # C-contiguous
        return space, data[0], data[0] + itemsize * math.prod(shape)
    lo = hi = data[0]
    for n, s in zip(shape, strides):
        if s < 0:
            lo += (n - 1) * s
        else:
            hi += (n - 1) * s
    return space, lo, hi + itemsize



class Ranges:
    """One address space: disjoint byte ranges ``[lo, hi, writer, readers]`` sorted by ``lo``."""

    __slots__ = ("los", "segs", "matters", "live")

    def __init__(self, matters, live):
        self.los: list[int] = []   # each segment's lo, for bisect
        self.segs: list[list] = []
        # matters(call): does it still constrain a new call; live(call): has it not finished
        self.matters, self.live = matters, live

    def _cut(self, at: int) -> None:
        """Make ``at`` a boundary: split the range that straddles it, if any."""
        i = bisect_right(self.los, at) - 1
        if i >= 0:
            lo, hi, writer, readers = self.segs[i]
            if lo < at < hi:
                self.segs[i][1] = at
                self.segs.insert(i + 1, [at, hi, writer, list(readers)])
                self.los.insert(i + 1, at)

    def touch(self, lo: int, hi: int, task, write: bool, deps: set, anti: set | None = None) -> None:
        """Record ``task``'s access to ``[lo, hi)``; add the calls it must follow to ``deps`` (those
        that only read what it writes to ``anti`` when given: their failure does not reach it)."""
        self._cut(lo)
        self._cut(hi)
        i = bisect_left(self.los, lo)
        j = bisect_left(self.los, hi, i)   # segments i..j-1 lie inside [lo, hi)
        inside = self.segs[i:j]
        for seg in inside:
            if seg[2] is not None and self.matters(seg[2]):
                deps.add(seg[2])
            if write:
                (deps if anti is None else anti).update(r for r in seg[3] if self.matters(r))
        if write:  # everything before is now ordered before this call: it alone stands for the range
            new = [[lo, hi, task, []]]
        else:
            new, pos = [], lo
            for seg in inside:
                if seg[0] > pos:
                    new.append([pos, seg[0], None, [task]])
                readers = seg[3]
                if len(readers) >= 8 and not len(readers) & (len(readers) - 1):
                    # Compacted when the list reaches a power of two, not on every read: calls
                    # pushed faster than they run all stay live, and filtering the whole list per
                    # push made n readers of one array (shared weights) cost O(n^2). A finished
                    # reader left in between constrains nothing: every use checks matters().
                    readers[:] = [r for r in readers if self.matters(r)]
                readers.append(task)
                new.append(seg)
                pos = seg[1]
            if pos < hi:
                new.append([pos, hi, None, [task]])
        self.segs[i:j] = new
        self.los[i:j] = [s[0] for s in new]

    def scan(self, lo: int, hi: int, writers: list, readers: list) -> None:
        """The writers and live readers of every range overlapping ``[lo, hi)``."""
        segs = self.segs
        for k in range(max(bisect_right(self.los, lo) - 1, 0), len(segs)):
            seg = segs[k]
            if seg[0] >= hi:
                break
            if seg[1] > lo:
                if seg[2] is not None and self.matters(seg[2]):
                    writers.append(seg[2])
                readers.extend(r for r in seg[3] if self.live(r))

    def prune(self) -> None:
        """Drop ranges no live or unreported call touches (keeps push cost bounded)."""
        keep = [s for s in self.segs if (s[2] is not None and self.matters(s[2])) or any(map(self.matters, s[3]))]
        self.segs, self.los = keep, [s[0] for s in keep]
