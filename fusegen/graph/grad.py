"""Reverse-mode gradients of a fused op, as another fused op: ``fg.grad(op)``.

The backward op takes the forward op's inputs (only those it needs) and one cotangent per
forward output, and returns the gradient of each input. It is an ordinary ``OpDef``:
traced, planned and fused like any op, so every backend and emitter takes it, and a
MindSpore ``bprop`` or a ``jax.custom_vjp`` can ship forward and backward kernels side by
side.

How it is built: the forward body is replayed inside the backward trace (fused kernels
recompute forward values instead of storing them: recomputation costs arithmetic, storing
costs memory traffic), then adjoints flow back through the nodes in reverse topological
order. Shapes are unknown while tracing, so the two shape-dependent steps are IR nodes that
run-time shapes resolve:

* **broadcasting**'s adjoint is ``fg.sum_to(g, like)``. It is applied late: an adjoint may
  stay broadcast-shaped through elementwise nodes (linearity makes that exact) and is summed
  only where a shape must be met: at a reduction's result, and at an input;
* **dropping reduced dims** (``keep_dims=False``)'s adjoint is ``unreduce(g, r)``, which puts
  the dims back as 1s so ``g`` broadcasts against the reduction's source.

Like MXNet's ``DeclareBackwardDependency``, the result says what it needs: ``.needs`` maps each forward
input to ``"value"`` (read), ``"shape"`` (only measured: any array of that shape will do) or is absent.
"""
from __future__ import annotations

import math

from ..errors import TraceError
from . import vocab as fg
from .grad_complex import complex_nodes, complex_rule, complex_variants, to_source
from .grad_views import view_adjoints
from .layout import broadcast_like, size_of
from .nodes import PIECEWISE, VIEWS, Graph, Node, Op, ReduceArg, ShapeOf, computed_nodes, shape_atoms, squeeze_items, value_srcs
from .opdef import OpDef
from .trace import Tensor, cast_like, expect_same_shape, make as _make, sum_to, unreduce, where

# Ops whose derivative is zero almost everywhere: adjoints stop there.
_ZERO_GRAD = {Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE, Op.AND, Op.OR, Op.NOT, Op.FLOOR, Op.CEIL,
              Op.INPUT, Op.ATTR, Op.CONST, Op.DIM, Op.IOTA, Op.FLOOR_DIVIDE, Op.RANDOM}  # RANDOM: recomputed
# Nodes with a shape of their own (not the broadcast of their sources'): an adjoint reaching
# one is summed to its shape exactly, like at an input.
_OWN_SHAPE = {Op.INPUT, Op.REDUCE, Op.IOTA, Op.GATHER} | VIEWS | PIECEWISE
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def grad(op: OpDef, wrt=None, *, name: str | None = None) -> OpDef:
    """The backward op of ``op``: ``(needed inputs..., cotangents...) -> d_inputs``.

    ``wrt``: the inputs to differentiate (names or positions; default all), returned in
    that order. Cotangents are named ``d_out`` (one output) or ``d_out0, d_out1, ...``,
    and must have their outputs' shapes (checked at run time). Attributes are the forward
    op's. Gradients have their inputs' dtypes; they are meaningful for float inputs.
    """
    if not isinstance(op, OpDef):
        raise TraceError(f"fg.grad takes an op made with @fg.op, got {type(op).__name__}")
    wrt_idx = _wrt_indices(op, wrt)
    n_out, multi = op.arity("fg.grad")
    cots = ["d_out"] if n_out == 1 and not multi else [f"d_out{k}" for k in range(n_out)]
    name = name or f"{op.name}_grad"
    everything = list(range(len(op.inputs)))
    # Pass 1 finds which forward inputs the gradients touch at all; pass 2 drops the others.
    probe = OpDef(_backward_fn(op, wrt_idx, everything, cots), name)
    if probe.graph is None:
        # traced per rank or shape (the forward is, or an adjoint needs the rank): which inputs
        # are read is only known per specialization, so the backward takes them all
        bwd, used = probe, everything
        bwd.needs = {op.inputs[i]: "value" for i in used}
    else:
        used = sorted({n.arg for n in probe.graph.nodes if n.op is Op.INPUT and n.arg < len(op.inputs)})
        bwd = OpDef(_backward_fn(op, wrt_idx, used, cots), name)
        computed = computed_nodes(bwd.graph)
        bwd.needs = {op.inputs[i]: ("value" if any(n.op is Op.INPUT and n.arg == j and id(n) in computed
                                                   for n in bwd.graph.nodes) else "shape")
                     for j, i in enumerate(used)}
    return complex_variants(bwd, op, wrt_idx, cots, used,   # complex inputs: a trace per set (grad_complex)
                            lambda c: OpDef(_backward_fn(op, wrt_idx, used, cots, c), name))


def _wrt_indices(op: OpDef, wrt) -> list[int]:
    if wrt is None:
        return list(range(len(op.inputs)))
    items = [wrt] if isinstance(wrt, (str, int)) else list(wrt)
    out = []
    for w in items:
        if isinstance(w, str) and w in op.inputs:
            out.append(op.inputs.index(w))
        elif isinstance(w, int) and not isinstance(w, bool) and -len(op.inputs) <= w < len(op.inputs):
            out.append(w % len(op.inputs))
        else:
            raise TraceError(f"fg.grad({op.name}): wrt={w!r} names no input (inputs: {', '.join(op.inputs)})")
    if len(set(out)) != len(out):
        raise TraceError(f"fg.grad({op.name}): wrt={wrt!r} repeats an input")
    return out


def _backward_fn(op: OpDef, wrt_idx: list[int], used: list[int], cots: list[str], cplx=frozenset()):
    """The backward op's Python function, for ``OpDef`` to trace (``cplx``: complex inputs)."""
    def backward(*args, **attrs):
        unused = Tensor(Node(Op.INPUT, (), -1))  # never reached: pass 1 proved it
        fwd_in = [unused] * len(op.inputs)
        for j, i in enumerate(used):
            fwd_in[i] = args[j]
        out = op.fn(*fwd_in, **attrs)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        return _reverse(op, fwd_in, outs, list(args[len(used):]), wrt_idx, {id(fwd_in[i].node) for i in cplx})

    backward.__signature__ = op.signature_for([op.inputs[i] for i in used] + cots)
    backward.__name__ = f"{op.name}_grad"
    return backward


def _reverse(op: OpDef, fwd_in: list[Tensor], outs: list[Tensor], cots: list[Tensor], wrt_idx: list[int], cplx):
    nodes = Graph(tuple(o.node for o in outs)).nodes
    wanted = {id(fwd_in[i].node) for i in wrt_idx}
    live: set[int] = set()          # nodes whose value depends on a wanted input, differentiably
    for n in nodes:
        if id(n) in wanted or (n.op not in _ZERO_GRAD and any(id(s) in live for s in value_srcs(n))):
            live.add(id(n))
    acc, stops, cx = _Adjoints(nodes), _shift_stops(nodes, outs), complex_nodes(nodes, cplx)   # (below; grad_complex)
    for k, (o, c) in enumerate(zip(outs, cots)):
        expect_same_shape(c, o, f"cotangent {k} must have the shape of output {k} of {op.name}")
        acc.alias[id(c.node)] = acc.extent(o.node)
        if id(o.node) in live:
            acc.add(o.node, c, ())
    for n in reversed(nodes):
        if id(n) not in live or n.op is Op.INPUT or not acc.parts.get(id(n)):
            continue
        g, spans = acc.total(n)
        if n.op in _OWN_SHAPE:   # the adjoint goes back to the source's shape, not the result's
            spans = ()
        if n.op in VIEWS or n.op in PIECEWISE or n.op is Op.GATHER:
            # a view moves elements: its cotangent must be exactly its shape first
            if acc.label(g, ()) != acc.extent(n):
                g = broadcast_like(g, Tensor(n))
            for src, contribution in (view_adjoints(n, g) if n.op is not Op.GATHER else _gather_adjoints(n, g)):
                if id(src) in live:
                    if contribution.node.op in _OWN_SHAPE:
                        acc.alias[id(contribution.node)] = acc.extent(src)
                    acc.add(src, to_source(n, src, contribution, cx), ())
            continue
        if n.op is Op.REDUCE and _unreduces(n) and acc.label(g, ()) != acc.extent(n):
            # (a sum's adjoint comes back with its axes as size-1 dims, so a sum of a sum gets
            # one smaller than its result: unreduce needs the result's very shape)
            g = broadcast_like(g, Tensor(n))
        for j, (src, contribution, extra) in enumerate(complex_rule(n, g, cx, _rules)):
            if id(src) in live and (id(n), j) not in stops:
                acc.add(src, to_source(n, src, contribution, cx), spans + extra)
    grads = []
    for i in wrt_idx:
        x = fwd_in[i]
        if not acc.parts.get(id(x.node)):   # no differentiable path: zeros (x == x keeps NaNs out)
            grads.append(cast_like(where(x == x, 0.0, 0.0), x))
            continue
        g, spans = acc.total(x.node)
        # exactly x's shape unless every part was smaller (a constant, a broadcast operand)
        grads.append(cast_like(g if _exactly(acc, acc.label(g, ()), acc.extent(x.node)) else sum_to(g, x, spans), x))
    return tuple(grads)


class _Adjoints:
    """Adjoint contributions per forward node, and the bookkeeping of their *extents*.

    A contribution to node ``n`` stands for itself broadcast over its extent, then summed
    down to ``n``'s shape. Shapes are unknown while tracing, so an extent is named by the
    set of leaves whose broadcast shape it is (forward INPUT/REDUCE nodes). A contribution
    whose extent's leaves are among ``n``'s own *fits* (it only needs broadcasting); one
    whose extent is larger must be summed. Contributions with one common larger extent are
    added first and summed once, as late as possible (where ``n``'s adjoint must take ``n``'s
    shape: at a reduction's result or an input); mixed extents are each summed at once, as
    adding them would count the smaller one repeatedly.
    """

    def __init__(self, nodes):
        self.forward = {id(n): n for n in nodes}
        self.alias: dict[int, frozenset] = {}   # extents of leaves fg.grad made (cotangents, sums)
        self.parts: dict[int, list[tuple[Tensor, tuple]]] = {}

    def extent(self, n: Node) -> frozenset:
        return frozenset({id(n)}) if n.op in _OWN_SHAPE else \
            frozenset().union(*(self._leaf(l) for l in shape_atoms(n)))

    def _leaf(self, l: Node) -> frozenset:
        if id(l) in self.alias:
            return self.alias[id(l)]
        # A reduction the reduce rule made (unreduce, counts, ties) lies within the reduction's
        # source, which the contribution carries as a span.
        return frozenset({id(l)}) if id(l) in self.forward else frozenset()

    def label(self, t: Tensor, spans: tuple) -> frozenset:
        return frozenset().union(*(self._leaf(l) for l in shape_atoms(t.node)),
                                 *(self.extent(s.node) for s in spans))

    def add(self, n: Node, t: Tensor, spans: tuple) -> None:
        self.parts.setdefault(id(n), []).append((t, spans))

    def total(self, n: Node) -> tuple[Tensor, tuple]:
        """``n``'s adjoint and its spans (the shapes it implicitly broadcasts over)."""
        mine = self.extent(n)
        groups: dict[frozenset, list[tuple[Tensor, tuple]]] = {}
        for t, spans in self.parts[id(n)]:
            lab = self.label(t, spans)
            groups.setdefault(frozenset() if _fits(self, lab, mine) else lab, []).append((t, spans))
        big = [k for k in groups if k]
        if len(groups) == 1 and big and n.op not in _OWN_SHAPE:
            return _add(groups[big[0]])   # one larger extent: keep it, sum later
        fitting = groups.pop(frozenset(), [])
        for parts in () if _folded(self, n, groups, fitting) else groups.values():
            g, spans = _add(parts)
            summed = sum_to(g, Tensor(n), spans)
            self.alias[id(summed.node)] = mine
            fitting.append((summed, ()))
        g, _ = _add(fitting)
        return g, (Tensor(n),)


def _add(parts: list[tuple[Tensor, tuple]]) -> tuple[Tensor, tuple]:
    total, spans = parts[0][0], list(parts[0][1])
    for t, sp in parts[1:]:
        total = total + t
        spans += [s for s in sp if all(s.node is not u.node for u in spans)]
    return total, tuple(spans)


def _rules(n: Node, g: Tensor) -> list[tuple[Node, Tensor, tuple]]:
    """(source, adjoint contribution, extra spans) for node ``n`` with adjoint ``g``."""
    T = Tensor
    v = T(n)
    a = T(n.srcs[0]) if n.srcs else None
    b = T(n.srcs[1]) if len(n.srcs) > 1 else None
    o = n.op
    if o is Op.REDUCE:   # the result broadcasts back to the source: the source spans it
        return [(n.srcs[0], _reduce_rule(n, g), (a,))] if not n.arg.scan else _scan_rules(n, g)
    if o is Op.CAST:
        return [(n.srcs[0], cast_like(g, a), ())]
    unary = {
        Op.NEG: lambda: -g,
        Op.ABS: lambda: where(a > 0, g, where(a < 0, -g, 0)),
        Op.EXP: lambda: g * v,
        Op.LOG: lambda: g / a,
        Op.SQRT: lambda: g * 0.5 / v,
        Op.RSQRT: lambda: -0.5 * g * v / a,
        Op.SIN: lambda: g * fg.cos(a),
        Op.COS: lambda: -g * fg.sin(a),
        Op.TANH: lambda: g * (1.0 - v * v),
        Op.SIGMOID: lambda: g * v * (1.0 - v),
        Op.RELU: lambda: where(a > 0, g, 0),
        Op.ERF: lambda: g * _TWO_OVER_SQRT_PI * fg.exp(-a * a),
    }
    if o in unary:
        return [(n.srcs[0], unary[o](), ())]
    binary = {
        Op.ADD: lambda: (g, g),
        Op.SUB: lambda: (g, -g),
        Op.MUL: lambda: (g * b, g * a),
        Op.DIV: lambda: (g / b, -g * v / b),
        Op.POW: lambda: (g * b * a ** (b - 1), g * v * fg.log(a)),
        # ties split the adjoint evenly, as JAX does
        Op.MAX: lambda: (where(a > b, g, where(a == b, 0.5 * g, 0)), where(b > a, g, where(a == b, 0.5 * g, 0))),
        # remainder(a, b) = a - b * floor(a / b), the floor piecewise constant
        Op.REMAINDER: lambda: (g, -g * fg.floor(a / b)),
        Op.MIN: lambda: (where(a < b, g, where(a == b, 0.5 * g, 0)), where(b < a, g, where(a == b, 0.5 * g, 0))),
    }
    if o in binary:
        ga, gb = binary[o]()
        return [(n.srcs[0], ga, ()), (n.srcs[1], gb, ())]
    if o is Op.WHERE:
        return [(n.srcs[1], where(T(n.srcs[0]), g, 0), ()), (n.srcs[2], where(T(n.srcs[0]), 0, g), ())]
    if o in _UNARY_18:
        return [(n.srcs[0], _UNARY_18[o](g, a, v), ())]
    if o in _BINARY_18:
        ga, gb = _BINARY_18[o](g, a, b, v)
        return [(n.srcs[0], ga, ()), (n.srcs[1], gb, ())]
    raise TraceError(f"fg.grad: no derivative rule for {o.value} (it is not differentiable here: "
                     "take it out of the path to the inputs, e.g. with a cast of a constant)")


def _unreduces(r: Node) -> bool:
    """Whether ``_reduce_rule`` puts ``r``'s reduced axes back with ``unreduce``."""
    return not isinstance(r.arg.axes, ShapeOf) and not r.arg.scan and r.arg.keep_dims is not True


def _reduce_rule(r: Node, g: Tensor) -> Tensor:
    """Adjoint of a reduction's source, given the adjoint ``g`` (shaped like the result)."""
    a, arg = Tensor(r.srcs[0]), r.arg
    if isinstance(arg.axes, ShapeOf):
        if arg.axes.rule == "broadcast":   # sum_to: the adjoint broadcasts back by itself
            return g
        inner = r.srcs[1]                  # unreduce: drop the size-1 dims again
        return Tensor(_make(Op.REDUCE, (g.node,), ReduceArg("sum", inner.arg.axes, inner.arg.keep_dims)))

    def like_r(x: Tensor) -> Tensor:
        """A reduction over r's axes, shaped like r (so it shares r's loop)."""
        return Tensor(_make(Op.REDUCE, (x.node,), ReduceArg("sum", arg.axes, arg.keep_dims)))

    def up(x: Tensor) -> Tensor:
        """``x`` (shaped like r) made to broadcast against r's source."""
        return x if arg.keep_dims is True else unreduce(x, Tensor(r))

    if arg.kind == "sum":
        return up(g)
    if arg.kind == "mean":
        # The element count: from the shapes where the source measures them (``_measures``), else a
        # reduction of ones sharing r's loop (compilers fold `x == x ? 1 : 1`: no load survives).
        count = size_of(a) / size_of(Tensor(r)) if _measures(a.node) else like_r(where(a == a, 1.0, 1.0))
        return up(cast_like(g / count, g))
    if arg.kind == "prod":   # the others' product: P / a without a zero in the slice (JAX's values)
        from .scans import others_product
        return up(g) * others_product(a, lambda t, kind: Tensor(_make(Op.REDUCE, (t.node,), ReduceArg(
            kind, arg.axes, True, arg.empty_ok))))
    kept = Tensor(_make(Op.REDUCE, (r.srcs[0],), ReduceArg(arg.kind, arg.axes, True, arg.empty_ok)))
    # max/min: the adjoint goes to the extremal elements, split evenly among ties
    hit = a == kept
    ties = Tensor(_make(Op.REDUCE, (where(hit, 1.0, 0.0).node,), ReduceArg("sum", arg.axes, True)))
    return where(hit, cast_like(up(g) / ties, g), 0)


# --- gathers (issue #17; at the end of the module, so the lines emitted sources cite stay put) ---
def _gather_adjoints(n: Node, g: Tensor) -> list[tuple[Node, Tensor]]:
    """A gather's adjoint: a scatter-add into its source, owner-computes (``fusegen.graph.gathers``)."""
    from .gathers import gather_adjoint
    return [(n.srcs[0], gather_adjoint(n, g))]


# --- the array API's elementwise functions (#18) ---------------------------------------------
# Piecewise-constant and boolean results: zero gradient (JAX's convention for floor_divide, sign,
# round and trunc too). nextafter has no rule (JAX defines none): fg.grad refuses it by name.
_ZERO_GRAD |= {Op.TRUNC, Op.ROUND, Op.SIGN, Op.SIGNBIT, Op.ISNAN, Op.ISINF, Op.ISFINITE, Op.INVERT, Op.BIT_AND,
               Op.BIT_OR, Op.BIT_XOR, Op.SHL, Op.SHR, Op.XOR, Op.FLOOR_DIVIDE}
_LN2, _LN10 = math.log(2.0), math.log(10.0)
_UNARY_18 = {
    Op.EXPM1: lambda g, a, v: g * (v + 1.0),
    Op.LOG1P: lambda g, a, v: g / (a + 1.0),
    Op.LOG2: lambda g, a, v: g / (a * _LN2),
    Op.LOG10: lambda g, a, v: g / (a * _LN10),
    Op.TAN: lambda g, a, v: g * (1.0 + v * v),
    Op.ASIN: lambda g, a, v: g * fg.rsqrt(1.0 - a * a),
    Op.ACOS: lambda g, a, v: -g * fg.rsqrt(1.0 - a * a),
    Op.ATAN: lambda g, a, v: g / (1.0 + a * a),
    Op.SINH: lambda g, a, v: g * fg.cosh(a),
    Op.COSH: lambda g, a, v: g * fg.sinh(a),
    Op.ASINH: lambda g, a, v: g * fg.rsqrt(a * a + 1.0),
    Op.ACOSH: lambda g, a, v: g * fg.rsqrt(a * a - 1.0),
    Op.ATANH: lambda g, a, v: g / (1.0 - a * a),
    Op.SQUARE: lambda g, a, v: g * 2.0 * a,
    Op.RECIPROCAL: lambda g, a, v: -g * v * v,
}
_BINARY_18 = {
    Op.ATAN2: lambda g, a, b, v: (g * b / (a * a + b * b), -g * a / (a * a + b * b)),
    Op.HYPOT: lambda g, a, b, v: (g * a / v, g * b / v),
    Op.LOGADDEXP: lambda g, a, b, v: (g * fg.exp(a - v), g * fg.exp(b - v)),
    # |x1| takes x2's sign: d/dx1 = sign(x1) * (+-1 by x2's sign bit); nothing flows to x2
    Op.COPYSIGN: lambda g, a, b, v: (g * fg.sign(a) * where(fg.signbit(b), -1.0, 1.0), g * 0.0),
}


# --- scans (issue #17; here at the end, so the lines emitted sources cite stay put) -------------
def _scan_rules(n: Node, g: Tensor) -> list[tuple[Node, Tensor, tuple]]:
    """A scan's result has its source's shape: no span."""
    from .scans import scan_adjoint
    return [(n.srcs[0], scan_adjoint(n, g), ())]


# --- logsumexp's shift (issue #17; at the end, so the lines emitted sources cite stay put) ------
def _shift_stops(nodes, outs) -> set[tuple[int, int]]:
    """The adjoint edges (node id, source position) that carry nothing, in every logsumexp
    written with a shift: ``log(sum(exp(x - a), axes)) + b`` where ``a`` is constant along
    ``axes`` (built from reductions over them) and ``b`` is the same value (its dims kept as
    the sum keeps them). The value does not depend on the shift, so the adjoints reaching ``a``
    (through ``x - a``) and ``b`` cancel exactly: dropping both edges treats the shift as a
    constant (a stop-gradient), and what is left is ``g * exp(x - a) / sum``: the softmax,
    without the max's tie-splitting adjoint and its extra passes. Only where the chain
    ``x - a -> exp -> sum -> log -> +`` has no other consumer: another one's adjoint into
    ``x - a`` would flow to ``a`` legitimately."""
    uses: dict[int, int] = {}
    for s in [o.node for o in outs] + [s for n in nodes for s in value_srcs(n)]:   # an output is a use too
        uses[id(s)] = uses.get(id(s), 0) + 1
    stops = set()
    for n in nodes:
        if n.op is not Op.ADD:
            continue
        for k in (0, 1):
            log, b = n.srcs[k], n.srcs[1 - k]
            if _finite_only(log, b) and uses.get(id(log)) == 1:
                log = log.srcs[1]   # fg.logsumexp's where(isfinite(b), log(s), 0) + b (below)
            if log.op is not Op.LOG or uses.get(id(log)) != 1:
                continue
            s = log.srcs[0]
            if s.op is not Op.REDUCE or s.arg.kind != "sum" or s.arg.scan or uses.get(id(s)) != 1:
                continue
            e = s.srcs[0]
            if e.op is not Op.EXP or uses.get(id(e)) != 1 or e.srcs[0].op is not Op.SUB or \
                    uses.get(id(e.srcs[0])) != 1:
                continue
            a = e.srcs[0].srcs[1]
            if _along(a, s.arg.axes) and _same_shift(a, b, s.arg.keep_dims):
                stops |= {(id(n), 1 - k), (id(e.srcs[0]), 1)}
                break
    return stops


def _finite_only(w: Node, b: Node) -> bool:
    """Whether ``w`` is ``where(isfinite(b), ..., 0)``. Where b is not finite, neither is the
    sum's argument x - a (a NaN in every element of the slice), so the gradient there is NaN
    whatever reaches ``b``: dropping ``b``'s edge stays exact."""
    return w.op is Op.WHERE and w.srcs[0].op is Op.ISFINITE and w.srcs[0].srcs[0] is b and \
        w.srcs[2].op is Op.CONST and w.srcs[2].arg[1] == 0


def _along(a: Node, axes) -> bool:
    """Whether ``a`` is constant along ``axes``: an elementwise function of reductions over
    them (dims kept) and constants."""
    if a.op is Op.REDUCE:
        return not a.arg.scan and a.arg.axes == axes and a.arg.keep_dims is True
    if a.op in (Op.CONST, Op.ATTR):
        return True
    if a.op in _OWN_SHAPE or a.op in (Op.CAST, Op.RANDOM) or not a.srcs:
        return False
    return all(_along(s, axes) for s in a.srcs)


def _same_shift(a: Node, b: Node, keep) -> bool:
    """Whether ``b`` computes ``a``'s value with its reductions' dims kept as ``keep`` says."""
    if a is b:   # one node: the same value, if no reduction in it drops dims
        from .nodes import nodes_of
        return keep is True or not any(m.op is Op.REDUCE for m in nodes_of((a,)))
    if keep is False and a.op is Op.REDUCE and b.op is Op.INDEX and b.srcs[0] is a and \
            b.arg == squeeze_items(a.arg.axes):   # (the twin fusegen.graph.canon reads b as)
        return True
    if a.op is not b.op or len(a.srcs) != len(b.srcs):
        return False
    if a.op is Op.REDUCE:
        return (a.srcs[0] is b.srcs[0] and b.arg.keep_dims == keep and
                (a.arg.kind, a.arg.axes, a.arg.scan) == (b.arg.kind, b.arg.axes, b.arg.scan))
    if a.op is Op.CONST:
        return a.arg == b.arg
    return a.arg == b.arg and all(_same_shift(x, y, keep) for x, y in zip(a.srcs, b.srcs))


def _fits(acc: _Adjoints, lab: frozenset, mine: frozenset) -> bool:
    """Whether a contribution with extent ``lab`` broadcasts into an extent ``mine``: each of its
    leaves is in ``mine``, or is a forward reduction with its dims kept whose source fits (its
    shape broadcasts into its source's: ``x - max(x, keepdims=True)`` has ``x``'s shape, so its
    adjoint needs no ``sum_to`` at ``x``)."""
    for a in lab - mine:
        n = acc.forward.get(a)
        if n is None or n.op is not Op.REDUCE or n.arg.scan or n.arg.keep_dims is not True or \
                isinstance(n.arg.axes, ShapeOf) or not _fits(acc, acc.extent(n.srcs[0]), mine):
            return False
    return True


def _exactly(acc: _Adjoints, lab: frozenset, mine: frozenset) -> bool:
    """Whether a contribution with extent ``lab`` has exactly the shape of extent ``mine``: it
    has all of ``mine``'s leaves, and the others broadcast into it (``_fits``)."""
    return mine <= lab and _fits(acc, lab, mine)


# --- summing an input's adjoint once (issue #17; at the end, so the lines emitted sources cite stay put)
# Nodes that measure shapes at run time: an emitted kernel with one takes its layout path anyway.
_MEASURES = VIEWS | PIECEWISE | {Op.IOTA, Op.DIM, Op.GATHER}


def _measures(n: Node) -> bool:
    """Whether ``n``'s expression measures shapes, so a count from dims costs it nothing more.

    A mean's count from the shapes (``size(source) / size(result)``) holds no data: the adjoint
    waits for no pass (a loss's mean over everything would otherwise wait for the whole loss: a
    global reduction between the forward's row passes and the gradient's). Elsewhere the dims
    would send the emitted C++ down its layout path, so the count stays a reduction of ones."""
    from .nodes import nodes_of
    return any(m.op in _MEASURES for m in nodes_of((n,)))


def _folded(acc: _Adjoints, n: Node, groups: dict, fitting: list) -> bool:
    """Sum input ``n``'s adjoint once, ``sum_to(larger + fitting / copies, n)``, into ``fitting``
    (in place: it then holds that one part); False, untouched, where this does not apply.

    ``copies`` is how many times the larger extent holds ``n``'s (``size(larger) / size(n)``):
    1 unless ``n`` itself was broadcast in the forward op (a take_along_axis whose x broadcasts
    against the indices), so ``fitting / 1.0`` is exact then; otherwise each fitting value is
    summed back from its ``copies`` shares. Summing the larger parts alone and adding the fitting
    ones after costs a pass that writes that sum to a workspace of ``n``'s size and one that reads
    it back (cross-entropy's one-hot: twice the logits' bytes); folded, the fitting parts (the
    softmax) ride in the loop that writes the gradient. Only for one larger extent, without spans,
    that already measures shapes (a gather's one-hot compares an iota: see ``_measures``)."""
    if n.op is not Op.INPUT or not fitting or len(groups) != 1:
        return False
    big, spans = _add(next(iter(groups.values())))
    if spans or not _measures(big.node):
        return False
    fit, _ = _add(fitting)
    total = sum_to(big + fit / (size_of(big) / size_of(Tensor(n))), Tensor(n))
    acc.alias[id(total.node)] = acc.extent(n)
    fitting[:] = [(total, ())]
    return True
