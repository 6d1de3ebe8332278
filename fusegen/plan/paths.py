"""Paths: how a stage's expressions reach their leaves through views and pieces.

A value in a stage's loop body is a node read in a *view context*: the views and pieces between
it and the stage's root, as (node, source index) pairs from the root down. Elementwise ops keep
the context (a view commutes with them); a view or a piece deepens it. A leaf (an input, a
buffered reduction, an iota) in a context is an *access*: the leaf and the steps of its index
map (``path_steps``). ``stage_reads`` lists a stage's accesses, the piecewise nodes it reads in
each context (with a *probe* per piece: the steps that say where that piece is active), and the
dims it uses as values (kernel parameters: shape arithmetic is never a kernel's job).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import PIECEWISE, VIEWS, Node, Op, is_static, leaves_of, reads_a_dim, value_srcs
from .access import BROADCAST, Broadcast, Gather, Piece, View


def path_steps(ctx: tuple, start: Node) -> tuple:
    """The steps reading ``start`` (a leaf, or a piece's source for a probe) in view context
    ``ctx``: the (node, source index) pairs from the stage root down to it."""
    steps, prev = [], start
    for node, p in reversed(ctx):
        src = node.srcs[p]
        if src is not prev:
            steps.append(Broadcast(src))
        steps.append(View(node) if node.op in VIEWS else (Gather(node, p) if node.op is Op.GATHER else Piece(node, p)))
        prev = node
    steps.append(BROADCAST)
    return tuple(steps)


@dataclass
class StageReads:
    """What a stage's expressions read: ``accesses`` (leaf, steps) in first-use order, the
    piecewise *instances* (node, context) with their pieces' probe steps, and the static scalar
    nodes passed as parameters (dims and arithmetic on them: shape inference knows their values)."""

    accesses: list            # (leaf node, steps)
    instances: list           # ((node, ctx), [probe steps per piece])
    params: list              # static nodes read as scalars


def is_param(n: Node) -> bool:
    """A static scalar made of dims: its value comes from shape inference, and a kernel gets it
    as a parameter (no kernel computes shape arithmetic)."""
    return n.op not in (Op.CONST, Op.ATTR) and is_static(n) and reads_a_dim(n)


def stage_reads(roots, stop=()) -> StageReads:
    """Walk ``roots`` through elementwise ops (same context), views and pieces (deeper context),
    down to the leaves: inputs, buffered reductions and iotas. Accesses come root by root, each
    root's in ``leaves_of`` order (inputs by index, then the rest), as generated code has always
    listed its operands. ``stop``: ids of values read back from an array (``plan.shared``),
    leaves here like the others."""
    out = StageReads([], [], [])
    seen_acc = set()
    for root in roots:
        found = _walk(root, out, stop)
        rank = {id(l): i for i, l in enumerate(leaves_of(root))}
        for key in sorted(found, key=lambda k: rank.get(id(k[0]), len(rank))):
            if key not in seen_acc:
                seen_acc.add(key)
                out.accesses.append(key)
    return out


def _walk(root: Node, out: StageReads, stop=()) -> list:
    found, seen = [], set()
    stack = [(root, ())]
    while stack:
        n, ctx = stack.pop()
        if (id(n), ctx) in seen:
            continue
        seen.add((id(n), ctx))
        if n.op in (Op.CONST, Op.ATTR):
            continue
        if is_param(n):
            if all(p is not n for p in out.params):
                out.params.append(n)
            continue
        if n.op in (Op.INPUT, Op.REDUCE, Op.IOTA) or id(n) in stop:
            key = (n, path_steps(ctx, n))
            if key not in found:
                found.append(key)
            continue
        if n.op in VIEWS:
            stack.append((n.srcs[0], ctx + ((n, 0),)))
        elif n.op is Op.GATHER:   # the indices, then the gathered array, each in its own context
            stack.append((n.srcs[1], ctx + ((n, 1),)))
            stack.append((n.srcs[0], ctx + ((n, 0),)))
        elif n.op in PIECEWISE:
            inst = (n, ctx)
            pieces = range(len(n.srcs)) if n.op is Op.CONCAT else (0,)
            if all(i != inst for i, _ in out.instances):
                out.instances.append((inst, [path_steps(ctx + ((n, p),), n.srcs[p]) for p in pieces]))
            if n.op is Op.PAD:
                stack.append((n.srcs[1], ctx))   # the constant: a scalar
            for p in reversed(pieces):
                stack.append((n.srcs[p], ctx + ((n, p),)))
        else:
            stack.extend((s, ctx) for s in reversed(value_srcs(n)))
    return found


def reads_reduction(n: Node) -> bool:
    """Whether ``n`` depends on a reduction's result (through elementwise ops only)."""
    stack, seen = [n], set()
    while stack:
        m = stack.pop()
        if m.op is Op.REDUCE:
            return True
        if id(m) not in seen and m.op not in (Op.CONST, Op.ATTR, Op.INPUT, Op.IOTA, Op.RANDOM, Op.GATHER):
            seen.add(id(m))
            stack.extend(m.srcs)
    return False


def row_level(n: Node) -> bool:
    """An expression of reduction results, attributes, constants and dims only: it reads no array
    element, so it is constant along a reduction's row (or over the whole domain)."""
    stack, seen = [n], set()
    while stack:
        m = stack.pop()
        if id(m) in seen or m.op in (Op.REDUCE, Op.CONST, Op.ATTR) or is_param(m):
            continue
        seen.add(id(m))
        if m.op in (Op.INPUT, Op.IOTA, Op.RANDOM, Op.GATHER) or m.op in VIEWS or m.op in PIECEWISE:
            return False
        stack.extend(m.srcs)
    return True

