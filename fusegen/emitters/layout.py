"""Plain data for the C++ kernels of ops with layout ops (views, pieces, iotas, dims as values).

Such an op's kernel evaluates, at each call, the same things ``fusegen.plan.layout.schedule``
evaluates in Python for the Numba backends: its ``NameInferShape``/``infer_shapes`` runs the
layout rules (``_fg_layout.inc.j2``, the twin of ``fusegen.graph.shapes``) and the values of
static scalars; each stage builds one view per access (and per piece probe) with the view
evaluator (``_fg_views.inc.j2``, the twin of ``fusegen.plan.views``), refines the domain, cuts
it into boxes, and runs the stage body of each box's *variant* (which piece each piecewise node
takes there): one loop body per variant, no branch in the hot loop.

This module turns the op and its plan into the lists and dicts those templates read
(``rules``: ``layout_rules``; stages: ``view_stages``); expression text comes from the shared
tables through ``plan.exprs.ExprWriter``, as for every other kernel. Ops without layout ops keep
the original kernels (``is_layout_op``), byte for byte.
"""
from __future__ import annotations

import itertools

from .. import dtypes as dt
from ..dtypes import AttrType, DType
from ..errors import UnsupportedError
from ..ir import PIECEWISE, VIEWS, Node, Op, OpDef, Spec, infer, is_static, nodes_of
from ..plan import Plan, centered_pairs
from ..plan import views as V
from ..plan.access import Broadcast, Gather, Piece, Reduced, View
from ..plan.boxrows import MIN_ROWS, may_run_rows
from ..plan.exprs import CPP, ExprWriter, reduce_identity, reg_dtype
from ..plan.paths import is_param, path_steps
from ..plan.splits import COMPARISONS, stage_splits
from . import gathers as G, hoist
from .cnames import member
from .rng import random_text

#: Ops whose kernels take the layout path (a gather's read is a view step plus an index term).
LAYOUT_OPS = VIEWS | PIECEWISE | {Op.IOTA, Op.DIM, Op.GATHER}

#: Error codes of the layout rules, after the common table's rows (only in layout ops' tables).
#: ``fusegen.native`` raises the exception each names (``EXCEPTIONS``).
LAYOUT_ERRORS: list[tuple[str, str]] = [
    ("FG_ERR_LAYOUT", "a layout op's parameters do not fit its operand (a permutation, axis, concat shape, "
                      "negative pad width or dim)"),
    ("FG_ERR_INDEX", "an integer index is out of bounds"),
    ("FG_ERR_INDEX_COUNT", "too many indices for the tensor's rank"),
    ("FG_ERR_SQUEEZE", "cannot squeeze a dim whose size is not 1"),
    ("FG_ERR_SLICE_STEP", "slice step cannot be zero"),
    ("FG_ERR_RESHAPE", "cannot reshape: the sizes differ, a dim is below -1, or more than one dim is -1"),
    ("FG_ERR_VARIANT", "a loop box whose pieces match none of the generated stage bodies (a fusegen bug)"),
]

#: The exception ``fusegen.native`` raises for a layout error code (by name); others: KernelError.
EXCEPTIONS = {"FG_ERR_INDEX": "BoundsError", **{n: "ShapeError" for n in (
    "FG_ERR_LAYOUT", "FG_ERR_INDEX_COUNT", "FG_ERR_SQUEEZE", "FG_ERR_SLICE_STEP", "FG_ERR_RESHAPE",
    "FG_ERR_BROADCAST", "FG_ERR_AXIS", "FG_ERR_OUT_SHAPE")}}

#: The view evaluator's codes (``enum fg::ViewError``, from 64), as (code, name, message).
VIEW_ERRORS = [(64 + i, n, m) for i, (n, m) in enumerate(V.ERRORS)]

#: The rule kinds ``layout_rules`` gives (rendered by ``_layout_rules.inc.j2``).
RULE_KINDS = ("static", "dim", "permute", "index", "reshape", "reshape_like", "broadcast_dims", "broadcast_like",
              "flip", "concat", "pad", "iota", "gather")

#: At most this many stage bodies per stage (the product of its pieces' counts).
MAX_VARIANTS = 64


def is_layout_op(op: OpDef) -> bool:
    """Whether ``op``'s kernel needs the layout path (any view, piece, iota or dim)."""
    return any(n.op in LAYOUT_OPS for n in op.graph.nodes)


def generic_spec(op: OpDef, ranks=None, dtypes=None) -> Spec:
    """The op inferred with unknown dims (of ``ranks`` where a specialization fixes them) and
    default attributes: what its static scalars' kinds and its expressions' dtypes need."""
    dtypes = dtypes or [dt.float32] * len(op.inputs)
    shapes = [None] * len(op.inputs) if ranks is None else [(-1,) * r for r in ranks]
    return infer(op, dtypes, shapes, {n: s.default for n, s in op.attrs.items()})


# ---------------------------------------------------------------------------------------------
# Shape rules and static values
# ---------------------------------------------------------------------------------------------
def _kind(d) -> str:
    """A static scalar's C++ kind: 'f' (double, Scalar::f) or 'i' (int64/bool, Scalar::i)."""
    if isinstance(d, DType):
        return "f" if d.kind in "fc" else "i"
    return "f" if d == "float" else "i"


_STATIC_TEXT = {
    Op.ADD: "({0} + {1})", Op.SUB: "({0} - {1})", Op.MUL: "({0} * {1})", Op.LT: "({0} < {1})",
    Op.LE: "({0} <= {1})", Op.GT: "({0} > {1})", Op.GE: "({0} >= {1})", Op.EQ: "({0} == {1})",
    Op.NE: "({0} != {1})", Op.AND: "(bool({0}) && bool({1}))", Op.OR: "(bool({0}) || bool({1}))",
    Op.NEG: "(-{0})", Op.NOT: "(!{0})", Op.WHERE: "({0} ? {1} : {2})", Op.MAX: "std::max({0}, {1})",
    Op.MIN: "std::min({0}, {1})", Op.ABS: "std::abs({0})", Op.CEIL: "std::ceil(double({0}))",
    Op.FLOOR: "std::floor(double({0}))", Op.DIV: "(double({0}) / double({1}))",
}
_STATIC_INT = {Op.FLOOR_DIVIDE: "fg::static_floordiv({0}, {1})", Op.REMAINDER: "fg::static_mod({0}, {1})",
               Op.POW: "fg::fg_pow({0}, {1})"}
_STATIC_FLOAT = {Op.FLOOR_DIVIDE: "std::floor({0} / {1})", Op.REMAINDER: "({0} - std::floor({0} / {1}) * {1})",
                 Op.POW: "std::pow({0}, {1})"}


def _static_expr(op: OpDef, spec: Spec, n: Node) -> str | None:
    """C++ giving the ``fg::Scalar`` value of static scalar ``n`` (None: not evaluated, unknown)."""
    g = op.graph
    if any(dt.materialize(spec.of(x).dtype).is_complex for x in (n, *n.srcs)):
        return None   # (a complex scalar is never a shape, bound or count: nothing to evaluate)
    out = _kind(spec.of(n).dtype)
    make = "fg::float_value" if out == "f" else "fg::int_value"
    if n.op is Op.CONST:
        v = n.arg[1]
        return f"{make}(true, {CPP.literal(float(v), dt.float64)})" if out == "f" else \
            f"{make}(true, INT64_C({int(v)}))"
    if n.op is Op.ATTR:
        if op.attrs[n.arg].type not in (AttrType.INT, AttrType.BOOL, AttrType.FLOAT):
            return None
        return f"{make}(true, {'double' if out == 'f' else 'int64_t'}(a.{member(n.arg)}))"
    srcs = [g.idx(s) for s in n.srcs]
    known = " && ".join(f"s->val[{j}].known" for j in srcs) or "true"
    kinds = [_kind(spec.of(s).dtype) for s in n.srcs]
    if n.op is Op.CAST:
        v = f"s->val[{srcs[0]}].{kinds[0]}"
        if out == "i" and spec.of(n).dtype in (dt.bool_, "bool"):
            v = f"({v} != 0)"
        return f"{make}({known}, {v})"
    floating = "f" in kinds
    args = [f"s->val[{j}].{'f' if floating and n.op is not Op.WHERE else k}" for j, k in zip(srcs, kinds)]
    if n.op is Op.WHERE:
        args = [f"s->val[{srcs[0]}].{kinds[0]}"] + [f"s->val[{j}].{'f' if 'f' in kinds[1:] else k}"
                                                     for j, k in zip(srcs[1:], kinds[1:])]
    table = {**_STATIC_TEXT, **(_STATIC_FLOAT if floating else _STATIC_INT)}
    if n.op not in table:
        return None
    return f"{make}({known}, {table[n.op].format(*args)})"


_PERM_KIND = {"explicit": 0, "reverse": 1, "swap": 2, "move": 3}
_ITEM_KIND = {"slice": 0, "int": 1, "new": 2, "ellipsis": 3, "squeeze": 4}


def layout_rules(op: OpDef, spec: Spec) -> dict[int, dict]:
    """Per node index: the layout rule or static value the templates render in ``infer_shapes``
    (other nodes keep the common rules)."""
    g = op.graph
    out: dict[int, dict] = {}
    for i, n in enumerate(g.nodes):
        s = [g.idx(x) for x in n.srcs]
        if n.op is Op.DIM:
            out[i] = dict(kind="dim", src=s[0], axis=0 if n.arg is None else n.arg, all=n.arg is None)
        elif n.op is Op.PERMUTE:
            p = n.arg
            out[i] = dict(kind="permute", src=s[0], pkind=_PERM_KIND[p.kind], a=list(p.a) or [0], na=len(p.a),
                          b=list(p.b) or [0], nb=len(p.b))
        elif n.op is Op.INDEX:
            items = [dict(kind=_ITEM_KIND[it.kind], given=["true" if x else "false" for x in it.given])
                     for it in n.arg]
            out[i] = dict(kind="index", src=s[0], index_items=items, vals=s[1:])
        elif n.op is Op.RESHAPE:
            out[i] = dict(kind="reshape_like", src=s[0], like=s[1]) if n.arg == "like" else \
                dict(kind="reshape", src=s[0], dims=s[1:])
        elif n.op is Op.BROADCAST_TO:
            out[i] = dict(kind="broadcast_like", src=s[0], like=s[1]) if n.arg[0] == "like" else \
                dict(kind="broadcast_dims", src=s[0], dims=s[1:])
        elif n.op is Op.FLIP:
            axes = list(n.arg) if n.arg is not None else []
            out[i] = dict(kind="flip", src=s[0], axes=axes or [0], n=len(axes), all=n.arg is None)
        elif n.op is Op.CONCAT:
            out[i] = dict(kind="concat", srcs=s, axis=n.arg)
        elif n.op is Op.PAD:
            out[i] = dict(kind="pad", src=s[0], value=s[1], widths=s[2:], npairs=n.arg[1], all=n.arg[0] == "all")
        elif n.op is Op.IOTA:
            out[i] = dict(kind="iota", n=s[0])
        elif n.op is Op.GATHER:   # issue #17
            out[i] = G.rule(op, n)
        elif spec.of(n).shape == () and is_static(n) and n.op is not Op.INPUT:
            expr = _static_expr(op, spec, n)
            if expr is not None:
                out[i] = dict(kind="static", expr=expr)
    return out


# ---------------------------------------------------------------------------------------------
# Stages: each access's view chain, the pieces' probes and one body per variant
# ---------------------------------------------------------------------------------------------
def _steps_data(g, steps: tuple, terms: dict | None = None) -> list[dict]:
    out = []
    for j, st in enumerate(steps):
        if isinstance(st, Gather):   # issue #17; ``terms``: step index -> its address term
            n = st.node
            out.append(dict(kind="gather", node=g.idx(n), index=st.index, take=n.arg.kind == "take",
                            idx=g.idx(n.srcs[1]), term=(terms or {}).get(j), text=f"{st} %{g.idx(n)}"))
        elif isinstance(st, Broadcast):
            out.append(dict(kind="broadcast", shape="dom" if st.to is None else f"s.node[{g.idx(st.to)}]",
                            text=str(st)))
        elif isinstance(st, Reduced):
            out.append(dict(kind="reduced", text=str(st)))
        elif isinstance(st, Piece):
            kind = "concat" if st.node.op is Op.CONCAT else "pad"
            out.append(dict(kind=kind, node=g.idx(st.node), piece=st.index, text=f"{st} %{g.idx(st.node)}"))
        else:
            assert isinstance(st, View)
            kind = {Op.PERMUTE: "permute", Op.INDEX: "index", Op.RESHAPE: "reshape", Op.BROADCAST_TO: "broadcast_to",
                    Op.FLIP: "flip"}[st.node.op]
            out.append(dict(kind=kind, node=g.idx(st.node), text=f"{st} %{g.idx(st.node)}"))
    return out


def view_stages(op: OpDef, plan: Plan, operand_id) -> list[dict]:
    """Per stage: its domain, reduced axes, and operands: every access (reads, then stores) and
    every piece probe, each with the start of its view chain and the chain's steps."""
    g = op.graph
    stages = []
    for st in plan.stages:
        operands = []
        terms = G.StageTerms(st)
        for k, a in enumerate(st.reads):
            iota = a.slot[0] == "iota"
            mine = {j: m for (kk, j), m in terms.of_access.items() if kk == k}
            operands.append(dict(kind="iota" if iota else "array", id=None if iota else operand_id(a.slot),
                                 start=f"s.node[{g.idx(a.node)}]", steps=_steps_data(g, a.steps, mine), store=False,
                                 text=f"{'iota' if iota else a.name} (%{g.idx(a.node)}) through {a.map_text()}"))
        for a in st.stores:
            start = "dom" if a.steps == () else f"s.node[{g.idx(a.node)}]"
            operands.append(dict(kind="array", id=operand_id(a.slot), start=start, steps=_steps_data(g, a.steps),
                                 store=True, text=f"{a.name} (%{g.idx(a.node)}) through {a.map_text()}"))
        instances = []
        for (node, ctx), probes in st.instances:
            first = len(operands)
            for p, steps in enumerate(probes):
                src = node.srcs[p]
                operands.append(dict(kind="probe", id=None, start=f"s.node[{g.idx(src)}]",
                                     steps=_steps_data(g, steps), store=False,
                                     text=f"where piece {p} of %{g.idx(node)} lies"))
            instances.append(dict(node=g.idx(node), first=first, count=len(probes), pad=node.op is Op.PAD))
        # boxes a row at a time (plan.boxrows; fg::row_boxes decides at run time): the fewest rows
        box_rows = MIN_ROWS if st.instances and may_run_rows([st]) else 0
        stages.append(dict(index=st.index, leaves=[g.idx(l) for l in st.leaves], box_rows=box_rows,
                           axes_node=g.idx(st.reductions[0]) if st.reductions else -1,
                           reduction=bool(st.reductions), scan=st.is_scan, operands=operands, instances=instances,
                           nops=len(operands), nterms=len(terms)))
    return stages


def _body(st, spec: Spec, dialect, leaf, variant: dict, stores: list[dict], op: OpDef, cur: dict) -> dict:
    """One stage body: the lines computing the reductions' values and the written outputs'
    values in ``dialect`` (``leaf`` gives the reads' text; ``cur['w']`` is set to the writer)."""
    gw = G.IndexWriter(op, op.graph.idx)
    # values an earlier stage stored (``Stage.kept``, plan.shared) are read back, not recomputed
    w = cur["w"] = ExprWriter(spec, dialect, leaf, prefix="t", variant=variant, gather=gw, random=random_text,
                              stored=ExprWriter.outputs_read(spec, st), stage=st)
    writes = []
    for k, n in st.keeps:   # stored for a later stage; the reductions below reuse its lines
        want = reg_dtype(dt.materialize(spec.of(n).dtype))
        target = next(s["k"] for s, a in zip(stores, st.stores) if a.slot == ("out", k) and a.node is n)
        writes.append(dict(k=target, value=w.value(n, want)))
    reds = []
    for j, r in enumerate(st.reductions):
        acc = reg_dtype(spec.of(r).acc)
        v = w.value(r.srcs[0], acc)
        targets = [s["k"] for s, a in zip(stores, st.stores) if a.node is r]
        reds.append(dict(j=j, kind=r.arg.kind, acc=dialect.type_name(acc),
                         init=dialect.literal(reduce_identity(r.arg.kind, acc), acc), value=v, targets=targets))
    for k, n in st.writes:
        want = reg_dtype(dt.materialize(spec.of(n).dtype))
        target = next(s["k"] for s, a in zip(stores, st.stores) if a.slot == ("out", k))
        writes.append(dict(k=target, value=w.value(n, want)))
    lines = [f"const auto {name} = {expr};" for name, expr in w.lines]
    return dict(lines=lines, reds=reds, writes=writes, flags=gw.flags, invariant=None)


def may_be_modular(st) -> bool:
    """Whether an operand of stage ``st`` can have a modular (div/mod) map at run time: only a
    reshape makes one (``fg::views::to_modular``)."""
    chains = [a.steps for a in st.reads] + [a.steps for a in st.stores] + [s for _, p in st.instances for s in p]
    return any(isinstance(step, View) and step.node.op is Op.RESHAPE for steps in chains for step in steps)


#: Reductions whose row loops keep ``fg::kLanes`` independent accumulators (reassociated, as in
#: the fused kernels' row mode): the adds (or max/min) do not wait on each other and vectorize.
LANE_KINDS = ("sum", "mean", "prod", "max", "min")


def lanes_ok(st) -> bool:
    """Whether stage ``st``'s row loops may split its reductions across lanes (not a scan,
    whose running value is sequential)."""
    return not st.is_scan and all(r.arg.kind in LANE_KINDS for r in st.reductions)


def variants(st, op_name: str = "") -> list[dict]:
    """Every combination of pieces a box can take (mixed radix, the first instance slowest; a
    pad's second choice is its constant), as ExprWriter's ``variant`` dicts. More than
    ``MAX_VARIANTS`` is an ``UnsupportedError`` naming op ``op_name`` (a FusegenError: a stack of
    stacks of a stack reached 1152, which had raised a bare NotImplementedError)."""
    choices = [range(len(probes) + (inst[0].op is Op.PAD)) for inst, probes in st.instances]
    n = 1
    for c in choices:
        n *= len(c)
    if n > MAX_VARIANTS:
        raise UnsupportedError(f"op {op_name}: stage {st.index} has {n} combinations of concat/pad/stack pieces; "
                               f"the emitted kernels (backend='aot', fusegen.jax) support {MAX_VARIANTS}: "
                               f"use the Numba backend")
    combos = list(itertools.product(*choices))
    out = []
    for combo in combos:
        out.append({inst: (None if p == len(probes) else p) for ((inst, probes), p) in zip(st.instances, combo)})
    return out


def combo_stages(op: OpDef, plan: Plan, spec: Spec, types: list[str], operand_id, dialect=CPP,
                 device: bool = False) -> list[dict]:
    """Per stage, for one dtype combination: the typed operand pointers and one body per variant
    (lines computing the reductions' values, the written outputs' values) in ``dialect``;
    ``device``: CUDA kernels, which read the modular maps from their ``M`` argument."""
    g = op.graph
    attr_text = {"float": "double({})", "int": "int64_t({})", "bool": "{}"}
    out = []
    for st in plan.stages:
        index_of = {}
        for k, a in enumerate(st.reads):
            index_of[(a.slot, a.steps)] = k
        reads = []
        for k, a in enumerate(st.reads):
            kind = "iota" if a.slot[0] == "iota" else "array"
            t = None if kind == "iota" else types[operand_id(a.slot)]
            reg = dialect.type_name(reg_dtype(spec.of(a.node).acc if a.node.op is Op.REDUCE and spec.of(a.node).acc
                                          else dt.materialize(spec.of(a.node).dtype)))
            reads.append(dict(k=k, kind=kind, type=t, reg=reg, id=None if kind == "iota" else operand_id(a.slot)))
        slot_of = {id(a.node): a.slot for a in st.reads}
        # gathers (issue #17): address terms; the body's writer, the reads of gather indices
        # and those read at the row's start (``fixed``)
        terms, cur = G.StageTerms(st), dict(index_reads=set(), fixed=set(), consts={}, packed=False, views=set())
        # Only a reshape makes a view modular (a div/mod map; slicing or placing a reshaped dim
        # keeps it so): a stage with none reads every operand at its strided address, with no
        # per-element test, so the loops vectorize (CUDA kernels keep the one generic body)
        modular = device or may_be_modular(st)

        def leaf(n, ctx=(), reads=reads, slot_of=slot_of, index_of=index_of, terms=terms, cur=cur):
            if n.op is Op.ATTR:
                return attr_text[spec.of(n).dtype].format(f"a.{member(n.arg)}")
            if is_param(n):
                return f"pv{g.idx(n)}"
            k = index_of[(slot_of[id(n)], path_steps(ctx, n))]
            if any(i == 1 for _, i in ctx):   # read for a gather's index
                cur["index_reads"].add(k)
            at = f"c[{k}]" if k in cur["fixed"] else f"c[{k}] + i * B.istr[{k}]"
            r = reads[k]
            mod, inner = (f"M.mod[{k}]", f"M.inner[{k}]") if device else (f"modular && mod{k}", f"inner{k}")
            if r["kind"] == "iota":
                # the address is the value; a reshape's div/mod map unravels it first
                return f"fg::address({mod}, {inner}, {at})" if modular else f"int64_t({at})"
            term = terms.address_terms(n, ctx, cur['w']) if len(terms) else ""
            if cur["packed"] and not term and k not in cur["fixed"]:
                cur["views"].add(k)   # read from its chunk's unit-stride view (``_cpu_views``)
                return f"{r['reg']}(v{k}[ii])"
            if (cur["packed"] and term and cur["fixed"] and not modular and cur["view_terms"].get(k, term) == term
                    and hoist.constant_text(term, hoist.row_constant_names(cur["w"].lines))):
                # a gathered read whose index is constant over the row (an embedding's row): a
                # chunk view at the gathered row's address (``emitters.hoist``)
                cur["views"].add(k)
                cur["view_terms"][k] = term
                return f"{r['reg']}(v{k}[ii])"
            ptr = f"(p{k}{term})" if term else f"p{k}"
            if not modular:
                load = f"{ptr}[{at}]"
            else:
                # a modular map (a reshape whose radices do not nest) unravels the linear index:
                # the slow path; the test is loop-invariant (`modular`: a std::true_type or
                # std::false_type, so a CPU loop without any modular operand has no test at all)
                load = f"fg::at({ptr}, {mod}, {inner}, {at})"
            if k in cur["fixed"] and not term:
                # loaded once before the loop (`rc<k>`): a store in the loop could alias it, so
                # the compiler would not hoist the load, nor what is computed from it
                cur["consts"][k] = load
                return f"{r['reg']}(rc{k})"
            return f"{r['reg']}({load})"

        nreads = len(st.reads)
        stores = []
        for j, a in enumerate(st.stores):
            stores.append(dict(k=nreads + j, type=types[operand_id(a.slot)], id=operand_id(a.slot),
                               node=g.idx(a.node), kind=a.slot[0]))
        split = None if device or len(terms) else _split(st, index_of, slot_of, reads, g)
        # Reads of reduction results (a row's max, mean, variance) are usually constant along
        # the inner loop: a second body reads them at the row's start (``fixed``, like a
        # gather's row-constant index), so what depends on them alone (``rsqrt(var + eps)``,
        # a masked interval's whole value) is computed once per row; the loops take it where
        # every such read has stride 0 there, as the plain kernels' row mode does (row_const).
        row_results = {k for k, a in enumerate(st.reads) if a.node.op is Op.REDUCE}

        def one(variant, st=st, cur=cur):
            cur["views"], cur["view_terms"] = set(), {}
            body = _body(st, spec, dialect, leaf, variant, stores, op, cur)
            return dict(body, packed=cur["packed"], views=sorted(cur["views"]), view_terms=dict(cur["view_terms"]),
                        hoisted=[], row_names=[])

        def make(variant, split=split):
            body = one(variant)
            if split is not None:   # an index-set split's loop bodies: the mask false, true
                body["seg"] = [one({**variant, split["key"]: v}) for v in (False, True)]
            return body

        def build(variant, packed, cur=cur, row_results=row_results):
            cur["fixed"], cur["packed"] = set(), packed
            body = make(variant)
            # The gathers' indices are read from operands cur["index_reads"]; where all of them
            # are constant along the inner loop (an embedding's id per row), the invariant body
            # reads them at the row's start: the index is loop-invariant, and the gathered read
            # becomes a strided one that vectorizes.
            fixed = set(cur["index_reads"]) | row_results
            if fixed and not device:
                cur["fixed"], cur["consts"] = fixed, {}
                body["invariant"] = make(variant)
                body["invariant"]["reads"] = sorted(fixed)
                body["invariant"]["consts"] = sorted(cur["consts"].items())
                if "seg" not in body["invariant"]:   # (a split's bodies keep their lines)
                    inv = body["invariant"]
                    inv["hoisted"], inv["lines"], names = hoist.split_lines(inv["lines"])
                    inv["row_names"] = sorted(names)
                cur["fixed"] = set()
            # chunk-viewed reads through a permutation (only then can fg::transposed hold): a block's
            # task copies such a read transposed first (ew_unit; a kBlock x kBlockCols stack buffer)
            gathered = set(body.get("view_terms", ())) | set((body["invariant"] or {}).get("view_terms", ()))
            body["block_views"] = sorted(k for k in _chunk_views(body) - gathered
                                         if _permuted(st.reads[k])) if packed else []
            return body

        # The CPU loops read and write unit-stride chunks (``packed``): an operand strided along
        # the inner loop is copied through a small buffer (fg::view, fg::scatter), so the loop
        # body always vectorizes (g++ does not version a loop for a unit stride known only at
        # run time; it loads such an operand element by element). A stage that may read through
        # a modular map keeps the per-element body for that case (``direct``).
        pack = not device and not st.is_scan
        bodies = []
        for variant in variants(st, op.name):
            body = build(variant, pack)
            body["direct"] = build(variant, False) if pack and modular else None
            bodies.append(dict(body, text=", ".join(f"%{g.idx(n)} {'constant' if p is None else f'piece {p}'}"
                                                    for (n, _), p in variant.items())))
        finals = []
        if st.finals:
            results = {id(r): f"r{j}" for j, r in enumerate(st.reductions)}
            fw = ExprWriter(spec, dialect, lambda n, ctx=(): results[id(n)] if n.op is Op.REDUCE else
                            attr_text[spec.of(n).dtype].format(f"a.{member(n.arg)}"), prefix="f")
            for k, n in st.finals:
                want = reg_dtype(dt.materialize(spec.of(n).dtype))
                target = next(s["k"] for s, a in zip(stores, st.stores) if a.slot == ("out", k) and a.node is n)
                finals.append(dict(k=target, value=fw.value(n, want)))
            final_lines = [f"const auto {name} = {expr};" for name, expr in fw.lines]
        else:
            final_lines = []
        params = [dict(node=g.idx(n), cpp="double" if _kind(spec.of(n).dtype) == "f" else "int64_t",
                       field=_kind(spec.of(n).dtype)) for n in st.params]
        out.append(dict(index=st.index, reads=reads, stores=stores, bodies=bodies, finals=finals, split=split, packed=pack,
                        block_views=sorted({k for b in bodies for k in b["block_views"]}),
                        nterms=len(terms), modular=modular, lanes=lanes_ok(st), gathers=G.stage_extents(op, st),
                        final_lines=final_lines, params=params, pair=None, nops=len(st.reads) + len(st.stores) + sum(
                            len(p) for _, p in st.instances)))
    for pair in [] if device else centered_pairs(plan).values():
        # a mean and the variance centered on it in one row pass (plan.moments): the mean's
        # stage gets pair<i>, which a row group runs instead of both stages (_cpu_views)
        if pair.var_stage == pair.mean_stage + 1:
            out[pair.mean_stage]["pair"] = dict(var_stage=pair.var_stage, kind=pair.var.arg.kind)
    return out



def _permuted(access) -> bool:
    """Whether an access's view chain permutes dims."""
    return any(isinstance(st, View) and st.node.op is Op.PERMUTE for st in access.steps)


def _chunk_views(body: dict | None) -> set[int]:
    """The reads a body's loops take through chunk views: its own, its invariant body's, its segments'."""
    if not body:
        return set()
    return set(body.get("views", ())).union(_chunk_views(body.get("invariant")), *map(_chunk_views, body.get("seg", ())))


def _split(st, index_of: dict, slot_of: dict, reads: list[dict], g) -> dict | None:
    """A stage's first index-set split (``fusegen.plan.splits``) as the C++ loop needs it: the
    two iotas' operand numbers, ordered so that the mask holds where ``a - b - bias >= 0``;
    None where the stage has none (or is a scan, or has random numbers: kept whole)."""
    sps = stage_splits(st)
    roots = [r.srcs[0] for r in st.reductions] + [n for _, n in st.writes]
    if not sps or st.is_scan or any(n.op is Op.RANDOM for n in nodes_of(roots)):
        return None
    sp = sps[0]
    k = [index_of[(slot_of[id(ref[0])], path_steps(ref[1], ref[0]))] for ref in (sp.a, sp.b)]
    if any(reads[j]["kind"] != "iota" for j in k):
        return None
    if any(isinstance(s, View) and s.node.op is Op.RESHAPE for j in k for s in st.reads[j].steps):
        return None   # (an iota read through a reshape's div/mod map is not affine along the loop)
    flip, bias = COMPARISONS[sp.cmp]
    a, b = (k[1], k[0]) if flip else (k[0], k[1])
    return dict(key=(sp.where, sp.ctx), a=a, b=b, bias=bias, node=g.idx(sp.where))
