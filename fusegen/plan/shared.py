"""Shared subexpressions: an expensive elementwise value computed once per element.

A plan recomputes elementwise nodes wherever a stage needs them (``fusegen.plan.stages``). That
is free while they are cheap, but a softmax's ``exp(x - max)`` is computed by the sum stage and
again by the output stage, and two float32 exps per element are most of its time. Here a value
that a reduction stage computes and a later elementwise stage needs again is *stored* by the
reduction stage, at every index of the domain, and *read back* by the later stage instead of
recomputed.

Where it is stored: in the array of the output the later stage writes (``e / sum(e)`` is written
over ``e``): no workspace and no extra memory traffic, and when the two stages fuse (they do:
same domain) the row is still in cache when it is read back. The rules, each for a reason:

* the value is a maximal shared subtree of the later stage's expression that holds an expensive
  op (``EXPENSIVE``: exp, log, tanh, ...), a pure function of its leaves at the domain's index:
  no pieces, gathers or random numbers. Views and iotas may be among its leaves (a causal mask's
  ``where(i >= j, x, -inf)``): views sit right above the leaves once pushed down, and the value's
  shape atoms are both stages' leaves, so both evaluate the same element at the same index;
* both stages have the value's shape atoms as their own (the value has the domain's shape, and
  the store and the read are the same element);
* the output is reached from the value through float arithmetic only (``+ - * /``, negation),
  never a cast, so the output's dtype is at least as wide as the value's and the store is exact
  (a float16 output of the emitted C++ is the exception: its array holds float16, so the value
  read back is rounded once, well within float16's tolerance; Numba computes float16 outputs in
  float32 arrays, exactly);
* the output's expression reads no input other than through the value, so an output bound to
  an input's memory (``accumulate=``'s ``prev``, ``inplace=``) is never read after the store;
* the reduction stage is not a scan (its results have the domain's shape already).

Otherwise the value is recomputed, as before: slower, never wrong. ``print(plan)`` shows what is
stored (``stored once: %3 (exp) in out0``), the reduction stage's store and the later stage's
read of it.
"""
from __future__ import annotations

from ..ir import PIECEWISE, VIEWS, Node, Op, ShapeOf, shape_atoms, value_srcs

#: Elementwise ops worth a store and a load per element instead of a second evaluation.
EXPENSIVE = frozenset({
    Op.EXP, Op.LOG, Op.TANH, Op.SIGMOID, Op.ERF, Op.SIN, Op.COS, Op.TAN, Op.EXPM1, Op.LOG1P, Op.LOG2, Op.LOG10,
    Op.ASIN, Op.ACOS, Op.ATAN, Op.SINH, Op.COSH, Op.ASINH, Op.ACOSH, Op.ATANH, Op.ATAN2, Op.HYPOT, Op.POW,
})
#: Ops through which an output keeps its value's float dtype (or a wider one) and its index.
_ARITH = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.NEG})
#: Ops a stored value may not contain: not a pure function of its leaves' values at the domain's
#: index (a gather's index is data, a random stream's counter is the loop's), or a piece, whose
#: value changes from box to box with the variant. (Views and iotas are leaves of the domain:
#: the same access map in both stages.)
_OPAQUE = frozenset({Op.GATHER, Op.RANDOM}) | PIECEWISE


def _interior(n: Node) -> set[int]:
    """The ids of the elementwise nodes ``n`` computes (through to its INPUT/REDUCE leaves)."""
    out, stack = set(), [n]
    while stack:
        m = stack.pop()
        if id(m) in out or m.op in (Op.INPUT, Op.REDUCE):
            continue
        out.add(id(m))
        stack.extend(value_srcs(m))
    return out


def _storable(n: Node) -> bool:
    """Pure elementwise over the domain's index, and holding at least one expensive op."""
    costly, stack, seen = False, [n], set()
    while stack:
        m = stack.pop()
        if id(m) in seen or m.op in (Op.INPUT, Op.REDUCE, Op.CONST, Op.ATTR):
            continue
        seen.add(id(m))
        if m.op in _OPAQUE:
            return False
        costly = costly or m.op in EXPENSIVE
        stack.extend(value_srcs(m))
    return costly


def _only_through(root: Node, value: Node) -> bool:
    """``root`` reaches ``value`` through ``_ARITH`` ops, and reads no input except through it."""
    found, stack, seen = False, [root], set()
    while stack:
        m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        if m is value:
            found = True
        elif m.op is Op.INPUT:
            return False
        elif m.op in _ARITH:
            stack.extend(m.srcs)
        elif m.op not in (Op.REDUCE, Op.CONST, Op.ATTR) and not _reads_no_input(m):
            return False
    return found


def _reads_no_input(n: Node) -> bool:
    """A scalar or per-reduction expression (a constant, ``log(sum)``): no input read."""
    stack, seen = [n], set()
    while stack:
        m = stack.pop()
        if id(m) in seen or m.op in (Op.REDUCE, Op.CONST, Op.ATTR):
            continue
        seen.add(id(m))
        if m.op in (Op.INPUT, Op.IOTA, Op.RANDOM) or m.op in VIEWS or m.op in PIECEWISE or m.op is Op.GATHER:
            return False
        stack.extend(value_srcs(m))
    return True


def _fits(leaf: Node, dom: tuple) -> bool:
    """``leaf`` broadcasts into the shape of a value whose shape atoms are ``dom`` without
    growing it: one of those atoms, or a keep-dims reduction of an expression over them."""
    if any(id(leaf) == a for a in dom):
        return True
    a = leaf.arg
    return leaf.op is Op.REDUCE and a.keep_dims is True and not a.scan and not isinstance(a.axes, ShapeOf) \
        and _atoms(leaf.srcs[0]) == dom


def _atoms(n: Node) -> tuple:
    return tuple(sorted(id(a) for a in shape_atoms(n)))


def shared_values(stages: list[dict]) -> None:
    """Decide, for the planner's stage dicts (sorted, before their accesses), which values a
    reduction stage stores for a later elementwise stage: adds ``keeps`` ([(output k, node)]) to
    the storing stage and ``kept`` (the same pairs) to the reading one. A value qualifies
    when its shape is the domain of both stages (their leaves are its shape atoms, or
    reductions of it that keep their dims)."""
    for later in stages:
        if later["reductions"] or not later["writes"]:
            continue
        sources = [(s, _interior(r.srcs[0])) for s in stages if s["level"] < later["level"] and s["reductions"]
                   and not s["reductions"][0].arg.scan for r in s["reductions"]]
        taken: dict[int, None] = {}
        for _, root in later["writes"]:
            stack, seen = [root], set()
            while stack:   # top-down: the first (largest) shared storable subtree wins
                n = stack.pop()
                if id(n) in seen or n.op in (Op.INPUT, Op.REDUCE, Op.CONST, Op.ATTR):
                    continue
                seen.add(id(n))
                dom = _atoms(n)
                owner = next((s for s, inside in reversed(sources) if id(n) in inside
                              and tuple(sorted(id(a) for a in s["leaves"])) == dom), None)
                if owner is not None and _storable(n) and all(_fits(l, dom) for l in later["leaves"]):
                    k = next((k for k, o in later["writes"] if k not in taken and _only_through(o, n)), None)
                    if k is not None:
                        taken[k] = None
                        owner.setdefault("keeps", []).append((k, n))
                        later.setdefault("kept", []).append((k, n))
                        continue
                if n.op in VIEWS or n.op in PIECEWISE or n.op in (Op.GATHER, Op.IOTA):
                    continue
                stack.extend(value_srcs(n))
