"""The Numba CPU backend's thread policy: when a group runs on several threads, how wide a task's
tile is, and when a lone reduction splits its reduced dim across threads. The emitted C++ runtime
copies it (``fg::choose_tile``, ``fg::split_count``); ``fusegen.runtime`` re-exports it.
"""
from __future__ import annotations

import os
from dataclasses import replace

from ..ir import Op, nodes_of
from ..lower.cpu_scans import SCAN_SPLIT_CHUNK
from ..plan import Plan


#: Below this many domain elements a group runs on the calling thread: waking a
#: thread pool costs more than it saves on small inputs.
PARALLEL_THRESHOLD = int(os.environ.get("FUSEGEN_PARALLEL_THRESHOLD", 1 << 17))


def num_threads() -> int:
    import numba
    return numba.get_num_threads()


def choose_tile(layout, nthreads: int) -> int:
    """Width of the inner-dim tile a task handles. Wide tiles stream memory well (a task
    reads rows, not 512-byte pieces of them), so cut only as many tiles as it takes to give
    every thread work, and keep col-mode accumulator tiles within L1/L2."""
    inner = layout.inner
    if inner <= 1:
        return 1
    cap = 2048 if layout.ri * layout.ro_total > 1 else 16384
    tiles = max(1, -(-nthreads // max(1, layout.o_total)))  # tiles per outer index
    per = -(-inner // tiles)
    per = -(-per // 64) * 64
    return max(min(256, inner), min(per, cap, inner))


#: The side of a square block of a transposed elementwise group (``choose_block``): 64 float32
#: rows of 64 elements are 16 KiB per operand, so a block of every operand stays in L1/L2 while
#: the transposed operand's cache lines, each shared by 16 rows of the block, are reused.
BLOCK = 64
#: A block's width along the inner dim: the operands read along the rows (x and the output in
#: ``x + y.T``) then stream 1 KiB (float32) per row and block, not 256 bytes; the transposed
#: operand's block is copied once, along its rows (``lower/cpu_blocks``). (The emitted C++:
#: ``fg::kBlock`` by ``fg::kBlockCols``.)
BLOCK_COLS = 256


def transposed(layout) -> bool:
    """Whether an elementwise group reads some operand across its own rows: a large stride along
    the inner dim and a smaller one along the last outer dim (``x + y.T``). A loop down the inner
    dim then touches one cache line per element of that operand and uses 4 bytes of it."""
    if layout.ri * layout.ro_total > 1 or layout.inner <= 1 or not layout.o_ext:
        return False
    return any(abs(si) > 16 and 0 < abs(so[-1]) < abs(si) for si, so in zip(layout.i_str, layout.o_str))


def choose_block(layout, nthreads: int) -> tuple[int, int]:
    """(rows, tile) of a task's block: ``BLOCK`` rows of the last outer dim by a ``BLOCK_COLS``-wide
    tile of the inner dim where the group reads an operand transposed (``transposed``), so neither
    side of the transpose is read with a large stride; (1, ``choose_tile``) otherwise."""
    if not transposed(layout):
        return 1, choose_tile(layout, nthreads)
    return min(BLOCK, layout.o_ext[-1]), min(BLOCK_COLS, layout.inner)


def split_count(plan: Plan, run, nthreads: int) -> int:
    """How many chunks to cut a group's reduced dim into (1: don't).

    Splitting pays when a lone reduction has too few outputs to keep every thread on
    contiguous memory (a column sum of a tall matrix, a full reduction): each task then
    streams whole rows into a private partial row, and the partials are folded at the end.
    """
    L = run.layout
    stages = [plan.stages[i] for i in run.stages]
    if len(stages) == 1 and stages[0].is_scan:
        return _scan_split(stages[0], L, nthreads)
    if len(stages) != 1 or not stages[0].reductions or stages[0].writes or stages[0].keeps:
        return 1
    if L.o_total >= 2 * nthreads or L.ri < 64 * nthreads:
        return 1
    per_outer = -(-4 * nthreads // L.o_total)
    return max(1, min(per_outer, L.ri // 32))


#: A scan's chunk: long enough that its second pass (which reads the chunk again) streams.
SCAN_CHUNK = SCAN_SPLIT_CHUNK


def _scan_split(stage, L, nthreads: int) -> int:
    """Chunks for a blocked scan: when too few lines run along the scanned axis to keep every
    thread busy (a 1-d cumulative sum), each chunk's total, then each chunk from its carry: two
    reads instead of one, on every thread. Not with gathers or random numbers in the loop body
    (whose per-task setup the second pass would repeat)."""
    if L.o_total >= nthreads or L.inner > 64 or L.ri < 2 * SCAN_CHUNK:
        return 1
    if any(n.op in (Op.GATHER, Op.RANDOM) for n in nodes_of(r.srcs[0] for r in stage.reductions)):
        return 1
    return max(1, min(-(-4 * nthreads // L.o_total), L.ri // SCAN_CHUNK))


#: Elements of a permuted copy from which its stores stream (``stream_order``): well beyond the
#: caches. (The emitted C++: ``fg::kStreamMin``.)
STREAM_MIN = 1 << 21


def stream_order(plan: Plan, run):
    """``run`` with its outer dims reordered, for a large elementwise group whose outputs are
    written at unit stride and whose inputs read rows that continue along an outer dim other than
    the last (a head split, ``out[b, h, s, :] = x[b, s, h * d + :]``: x's ``h`` steps one row of
    ``d``): that dim moves innermost of the outer ones, so the inputs stream whole spans instead of
    a row of ``d`` per page, and the outputs, now written one row per page, are stored around the
    cache (``lower/cpu_stream``). None: the order stays, with cached stores. Mirrors the emitted
    C++'s ``fg::stream_order``, where the same order with cached stores measured slower than the
    output's order."""
    L, n = run.layout, len(run.layout.o_ext)
    if n < 2 or not streamable(plan, run):
        return None
    stored = [key[0] == "out" for key in run.operands]
    if all(s or L.i_str[k] != 1 or L.o_str[k][n - 1] == L.inner for k, s in enumerate(stored)):
        return None   # every input already reads its rows one after another
    for d in range(n - 2, -1, -1):
        if all(s or L.o_str[k][d] == L.inner * L.i_str[k] for k, s in enumerate(stored)):
            order = [e for e in range(n) if e != d] + [d]
            layout = replace(L, o_ext=[L.o_ext[e] for e in order], o_str=[[st[e] for e in order] for st in L.o_str])
            return replace(run, layout=layout)
    return None


def streamable(plan: Plan, run) -> bool:
    """Whether a group's outputs may be stored around the cache (``lower/cpu_stream``): one large
    elementwise stage (no gathers or random numbers, whose per-task setup assumes a task per tile)
    writing only outputs, each at unit stride along the inner dim. (Not a blocked group's, ``x +
    y.T``: its output's rows are written in order, and streaming them measured no faster.)"""
    L = run.layout
    stages = [plan.stages[i] for i in run.stages]
    if len(stages) != 1 or stages[0].reductions or stages[0].is_scan or stages[0].keeps or L.ri != 1 or L.ro_ext:
        return False
    if any(n.op in (Op.GATHER, Op.RANDOM) for n in nodes_of([v for _, v in stages[0].writes])):
        return False
    if L.inner < 16 or L.o_total * L.inner < STREAM_MIN or any(i is not None for i in run.inners or ()):
        return False
    stored = [key[0] == "out" for key in run.operands]
    return any(stored) and not any(key[0] == "buf" for key in run.operands) and all(
        L.i_str[k] == 1 for k, s in enumerate(stored) if s)
