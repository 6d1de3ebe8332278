"""Peepholes of the expression writer: a chain of transcendentals that one float32-lane function
computes with fewer operations and no less accuracy, recognized however the user spelled it.

Why: an activation written the obvious way composes two or three transcendentals, each a
polynomial, a division or both. Where the composition has a closed form with one exp and one
division, the loop runs about half the instructions per element (issue #18/#19: mish was 3.1x the
memory bound, the tanh GELU 4x), and the result is more accurate, not less: the closed form has
no intermediate rounding to amplify.

* ``tanh(softplus(x))`` (mish's) = ``n / (n + 2)`` with ``n = e (e + 2)``, ``e = exp(x)``:
  ``vmath_lanes.tanh_softplus_f32``. softplus may be spelled ``max(x, 0) + log1p(exp(-|x|))`` (in
  either order, ``relu(x)`` for the max), ``log1p(exp(x))``, ``log(1 + exp(x))`` or
  ``logaddexp(x, 0)``.
* ``softplus(x)`` itself, in the same spellings (softplus, mish's outside the tanh):
  ``vmath_lanes.softplus_f32``, ``max(x, 0) + log1p(e)`` with ``e = exp(-|x|)`` in (0, 1], where
  log1p needs no argument reduction (``e - e^2/2 + e^3 G(e)``): one exp and one polynomial where the
  composition takes exp, then log1p's reduction, polynomial and special cases. The spellings that
  overflow in float32 (``log1p(exp(x))``, ``log(1 + exp(x))``: inf from x = 88.7 on) give x there,
  as the float64 composition does.
* ``1 + tanh(u)`` (the tanh GELU's) = ``2 sigmoid(2u)``: the scalings by 2 are exact, so the
  result is sigmoid's (within 1 ulp), where adding 1 to a rounded tanh loses the digits 1 + tanh
  cancels for negative u; and sigmoid costs less than tanh.

* ``exp(z - max(z))`` whose every user in the loop computing it sums over the max's axes
  (logsumexp's, cross-entropy's, log_softmax's; the exp-sum pass of a gradient whose output pass
  recomputes the exp; not a softmax's, whose sum pass also stores the exp for its output pass):
  ``vmath_lanes.exp_shifted_f32``, exp
  for an argument at most 0 in a sum that holds a 1, with 15 operations instead of 22 and the
  same bits (fusegen/vmath.py, EXP32_SUM_FLOOR). cross_entropy at (8192, 32000) is exp-bound on
  two cores: the exps alone took longer than reading the logits.

Only where the backend has the float32-lane functions (``typed[float32]`` rows; the CPU dialects):
CUDA's float functions are not these, and its rows stay the composition. The peephole reads
its operands' values through the writer, so the skipped nodes cost nothing unless something else
uses them.
"""
from __future__ import annotations

from ..ir import Node, Op

#: the row keys of tanh(softplus(x)), softplus(x) and a summed exp(z - max z) in a dialect's
#: float32 rows
TANH_SOFTPLUS = "tanh_softplus"
SOFTPLUS = "softplus"
EXP_SHIFTED = "exp_shifted"
FUSED_ROWS = (TANH_SOFTPLUS, SOFTPLUS, EXP_SHIFTED)


def _const(n: Node, value: float) -> bool:
    return n.op is Op.CONST and not isinstance(n.arg[1], bool) and n.arg[1] == value


def _other(n: Node, test) -> Node | None:
    """For a commutative binary node with one operand passing ``test``: the other one."""
    a, b = n.srcs
    return b if test(a) else a if test(b) else None


def _relu_of(n: Node) -> Node | None:
    """x for ``max(x, 0)``, ``max(0, x)`` or ``relu(x)``."""
    if n.op is Op.RELU:
        return n.srcs[0]
    if n.op is Op.MAX:
        return _other(n, lambda s: _const(s, 0))
    return None


def softplus_of(n: Node) -> Node | None:
    """x where ``n`` computes softplus(x) = log(1 + exp(x)) in one of its usual spellings, else None."""
    if n.op is Op.LOG1P and n.srcs[0].op is Op.EXP:                       # log1p(exp(x))
        return n.srcs[0].srcs[0]
    if n.op is Op.LOG and n.srcs[0].op is Op.ADD:                         # log(1 + exp(x))
        e = _other(n.srcs[0], lambda s: _const(s, 1))
        return e.srcs[0] if e is not None and e.op is Op.EXP else None
    if n.op is Op.LOGADDEXP:                                              # logaddexp(x, 0)
        return _other(n, lambda s: _const(s, 0))
    if n.op is Op.ADD:                                                    # max(x, 0) + log1p(exp(-|x|))
        for a, b in (n.srcs, n.srcs[::-1]):
            x = _relu_of(a)
            if x is None or b.op is not Op.LOG1P:
                continue
            e = b.srcs[0]
            if e.op is Op.EXP and e.srcs[0].op is Op.NEG and e.srcs[0].srcs[0].op is Op.ABS \
                    and e.srcs[0].srcs[0].srcs[0] == x:
                return x
    return None


def _items(n: Node, kinds: list[str]) -> bool:
    return n.op is Op.INDEX and len(n.srcs) == 1 and [i.kind for i in n.arg] == kinds


def _row_max(m: Node, z: Node) -> tuple[Node, bool] | None:
    """(the ``max`` reduction of ``z`` that ``m`` reads, whether ``m`` puts its dropped last axis
    back by ``[..., None]``), else None. ``max(z, keepdims=True)[..., squeeze][..., None]`` (a
    max without keepdims re-expanded, as fusegen.graph.canon writes it) is the kept max itself."""
    expanded = _items(m, ["ellipsis", "new"])
    r = m.srcs[0] if expanded else m
    if expanded and _items(r, ["ellipsis", "squeeze"]) and r.srcs[0].op is Op.REDUCE and r.srcs[0].arg.keep_dims is True:
        r, expanded = r.srcs[0], False
    if r.op is Op.REDUCE and r.arg.kind == "max" and not r.arg.scan and (r.srcs[0] is z or r.srcs[0] == z):
        return r, expanded
    return None


def shifted_exps(spec, stage=None) -> frozenset[int]:
    """The ids of the ``exp`` nodes whose argument is ``z - max(z)`` over some axes and whose
    every user is a ``sum`` over those axes or more: the argument is at most 0 (or NaN: z - max is
    exact in sign) and each sum holds the max's exp(0) = 1, which is all ``exp_shifted_f32``
    needs (fusegen/vmath.py). The axes are compared as written where the rank is not known (the
    emitted C++ serves every rank): the same ``axis`` (a number or an attribute) is the same axes.

    ``stage`` (a ``plan.Stage``): only its loop's users count, for the values that loop computes.
    Why: a gradient's exp-sum pass and its output pass each compute the exp (nothing stores it
    between them), and only the output pass needs exp's value below the sum's floor. A value the
    stage stores (a softmax's exp, kept for its output pass) is a user of its own."""
    graph = spec.opdef.graph
    nodes, roots = (graph.nodes, graph.outputs) if stage is None else _stage_nodes(stage)
    users: dict[int, list[Node]] = {}
    for n in nodes:
        for s in n.srcs:
            users.setdefault(id(s), []).append(n)
    outputs = {id(o) for o in roots}
    found = set()
    for n in nodes:
        if n.op is not Op.EXP or id(n) in outputs or n.srcs[0].op is not Op.SUB:
            continue
        z, m = n.srcs[0].srcs
        found_max = _row_max(m, z)
        if found_max is None:
            continue
        r, expanded = found_max
        info, shape = spec.of(r), spec.of(z).shape
        kept = info.keep_dims or r.arg.keep_dims is True
        if not expanded and not kept:
            continue   # (without keepdims the max would broadcast against other axes)
        if expanded and (kept or not (r.arg.axes == (-1,) or shape is not None and info.axes == (len(shape) - 1,))):
            continue   # ([..., None] puts back the last axis only)
        us = users.get(id(n), ())
        if us and all(u.op is Op.REDUCE and u.arg.kind == "sum" and not u.arg.scan and _covers(spec, u, r) for u in us):
            found.add(id(n))
    return frozenset(found)


def _stage_nodes(stage) -> tuple[list[Node], list[Node]]:
    """(the nodes a stage's loop computes: its reductions and what their sources, its writes and
    its kept values are made of, down to the earlier stages' results; the values it stores)"""
    roots = [n for _, n in stage.writes + stage.keeps + stage.finals]
    seen: dict[int, Node] = {}
    stack = list(stage.reductions) + roots
    while stack:
        n = stack.pop()
        if id(n) in seen or n.op is Op.REDUCE and all(n is not r for r in stage.reductions):
            continue   # (an earlier stage's result is read here, not computed: neither it nor its sources count)
        seen[id(n)] = n
        stack.extend(n.srcs)
    return list(seen.values()), roots


def _covers(spec, u: Node, r: Node) -> bool:
    """Whether reduction ``u`` reduces every axis that ``r`` does."""
    if u.arg.axes is None or u.arg.axes == r.arg.axes:
        return True
    a, b = spec.of(r).axes, spec.of(u).axes
    return a is not None and b is not None and set(a) <= set(b)


def fused_functions(nodes) -> list[str]:
    """The functions above that an op of ``nodes`` may call: its C++ partial's blocks are chosen
    per op, before any signature, so an exp counts here when it has ``shifted_exps``' form and
    a sum among its users (a stage may have no other), whatever its axes turn out to be."""
    used = [TANH_SOFTPLUS for n in nodes if n.op is Op.TANH and softplus_of(n.srcs[0]) is not None]
    used += [SOFTPLUS for n in nodes if softplus_of(n) is not None]
    summed = {id(n.srcs[0]) for n in nodes if n.op is Op.REDUCE and n.arg.kind == "sum"}
    used += [EXP_SHIFTED for n in nodes if n.op is Op.EXP and id(n) in summed
             and n.srcs[0].op is Op.SUB and _row_max(n.srcs[0].srcs[1], n.srcs[0].srcs[0]) is not None]
    return used


def fused_row(node: Node, f32_rows: dict, shifted=frozenset()) -> tuple[str, Node, float] | None:
    """(row text, operand, scale) where ``node`` is one of the chains above and the backend has its
    float32 row (for ``exp_shifted``: ``node`` is in ``shifted``, from ``shifted_exps``): the
    node's value is ``scale * row(scale * operand)``; else None."""
    if node.op is Op.EXP and id(node) in shifted and EXP_SHIFTED in f32_rows:
        return f32_rows[EXP_SHIFTED], node.srcs[0], 1.0
    if node.op is Op.TANH and TANH_SOFTPLUS in f32_rows:
        x = softplus_of(node.srcs[0])
        if x is not None:
            return f32_rows[TANH_SOFTPLUS], x, 1.0
    if SOFTPLUS in f32_rows:
        x = softplus_of(node)
        if x is not None:
            return f32_rows[SOFTPLUS], x, 1.0
    if node.op is Op.ADD and Op.SIGMOID in f32_rows:
        t = _other(node, lambda s: _const(s, 1))
        if t is not None and t.op is Op.TANH:
            return f32_rows[Op.SIGMOID], t.srcs[0], 2.0
    return None


def bound_select(node: Node) -> tuple[Op, Node, Node, Node, Node] | None:
    """For ``maximum``/``minimum`` of a float value ``v`` and a constant ``c`` that is not NaN (a
    clip's bound, a relu): (comparison, its two operands, c, v) such that the node's value is
    ``where(comparison, c, v)``, else None.

    Why: NumPy's maximum lets a NaN win from either side, ``(a > b or a != a) ? a : b``, which the
    compilers cannot turn into one max instruction; with a constant side only v can be NaN, and a
    comparison that is false for NaN keeps v. ``c > v ? c : v`` is then exact for c first, and for
    c second unless c is zero (the rule returns c for v = c, which matters only for the zeros'
    signs): there ``v <= c ? c : v``. The first is x86's maxps (minps for minimum) operand for
    operand; quantize's clip was 1.8 instructions per element in the emitted C++ for it."""
    if node.op not in (Op.MAX, Op.MIN):
        return None
    a, b = node.srcs
    first = _const_bound(a)
    if not first and not _const_bound(b):
        return None
    c, v = (a, b) if first else (b, a)
    wins, ties = (Op.GT, Op.LE) if node.op is Op.MAX else (Op.LT, Op.GE)
    if first or c.arg[1] != 0:
        return wins, c, v, c, v
    return ties, v, c, c, v


def _const_bound(n: Node) -> bool:
    v = n.arg[1] if n.op is Op.CONST else None
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v
