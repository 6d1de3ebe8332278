"""Plan -> the MindSpore-AOT ``.cc`` (``mindspore_aot_cpu.cc.j2``): the CPU stage code of each
dtype combination (C++ expressions from the shared tables, ``plan.exprs.CPP``), and the file.

The XLA FFI CPU handlers (``emitters.xla``) include the same stage code, byte for byte.
"""
from __future__ import annotations

from .. import dtypes as dt
from ..dtypes import DType
from ..ir import Node, Op, OpDef
from ..plan import Plan, build_plan, centered_pairs
from ..plan.exprs import CPP, ExprWriter, reduce_identity, reg_dtype
from . import layout, specialize
from . import rng as R
from .common import (HEADER_NAME, TEMPLATES, TYPE_IDS, Emitted, c_name, env, error_table, member, operand_ids,
                     parse_dtypes, template_data, scan_form)


def combo_data(op: OpDef, plan: Plan, combo: tuple[DType, ...], ranks=None) -> dict:
    """Concrete types and expression code of one dtype combination (``ranks``: the input ranks
    of a specialization)."""
    g = op.graph
    spec = layout.generic_spec(op, ranks, combo)
    of = operand_ids(op)
    out_dtypes = list(spec.out_dtypes)
    op_types = [d for d in combo] + out_dtypes + [reg_dtype(spec.of(b).acc) for b in plan.buffers]
    counters = R.loop_counters(op, plan)
    views = layout.is_layout_op(op) and not counters
    nops = len(op_types)
    stages = []
    for st in [] if views else plan.stages:   # an op with layout ops: its view_stages instead
        params = []
        names = {}
        for a in st.reads:
            if a.slot[0] == "iota":   # a random counter: the fills read it (below)
                continue
            # invariant: a reduction result, so often constant along the row a fused stage
            # walks (the template then hoists it: see _cpu_stages.inc.j2, row mode)
            params.append(dict(op=of(a.slot), key=str(of(a.slot)), name=f"v{of(a.slot)}",
                               type=CPP.type_name(op_types[of(a.slot)]),
                               reg=CPP.type_name(reg_dtype(op_types[of(a.slot)])), invariant=a.slot[0] == "buf"))
            names[id(a.node)] = params[-1]["name"]
        # Random nodes: each a param of the loop bodies, filled per chunk from its counter. The
        # fills' scalars (seed, offset, bounds) are written once per row, before the chunks:
        # attributes, constants and scalar tensors (stride 0: read at the row's offset).
        pre = ExprWriter(spec, CPP, lambda n, ctx=(): attr_text[spec.of(n).dtype].format(f"a.{member(n.arg)}")
                         if n.op is Op.ATTR else f"{CPP.type_name(reg_dtype(op_types[of(_slot(st, n))]))}"
                         f"(p{of(_slot(st, n))}[c[{of(_slot(st, n))}]])", prefix=f"rs{st.index}_")
        for r in _randoms(g, st):
            p = R.fill_data(pre, r, (), nops + counters[g.idx(r.srcs[0])], f"r{len(names)}")
            params.append(p)
            names[id(r)] = p["name"]
        rng_lines = [f"const auto {name} = {expr};" for name, expr in pre.lines]
        values, kept = [], []
        for k, n in st.keeps:   # stored first; the reductions then take them as arguments (plan.shared)
            reg = reg_dtype(dt.materialize(spec.of(n).dtype))
            values.append(dict(kind="write", fn=f"s{st.index}_k{k}", op=of(("out", k)), reg=CPP.type_name(reg),
                               body=expr_fn(spec, n, reg, names, stage=st)))
            kept.append(dict(op=of(("out", k)), name=f"k{of(('out', k))}", reg=CPP.type_name(reg), node=n, dtype=reg))
        rnames = {**names, **{id(p["node"]): p["name"] for p in kept}}
        for j, r in enumerate(st.reductions):
            info = spec.of(r)
            acc = reg_dtype(info.acc)
            values.append(dict(kind="reduce", fn=f"s{st.index}_r{j}", reduce=r.arg.kind, node=g.idx(r),
                               acc=CPP.type_name(acc), init=CPP.literal(reduce_identity(r.arg.kind, acc), acc),
                               body=expr_fn(spec, r.srcs[0], acc, rnames, [(p["node"], p["dtype"]) for p in kept], st),
                               out_type=CPP.type_name(reg_dtype(dt.materialize(info.dtype))),
                               targets=[of(a.slot) for a in st.stores if a.node is r]))
        for k, n in st.writes:
            out = reg_dtype(dt.materialize(spec.of(n).dtype))
            # alias: the input this output may be written over (@fg.op(inplace=...)), read here
            src = op.inplace.get(k) if getattr(op, "inplace", None) else None
            alias = next((f"v{of(a.slot)}" for a in st.reads if a.slot == ("in", src)), None)
            values.append(dict(kind="write", fn=f"s{st.index}_w{k}", op=of(("out", k)), alias=alias,
                               reg=CPP.type_name(out), body=expr_fn(spec, n, out, names, ExprWriter.outputs_read(spec, st), st)))
        finals = []
        for k, n in st.finals:
            rs = st.reductions
            rnames = {id(r): f"r{j}" for j, r in enumerate(rs)}
            fparams = [dict(name=f"r{j}", reg=CPP.type_name(reg_dtype(spec.of(r).acc))) for j, r in enumerate(rs)]
            out = reg_dtype(dt.materialize(spec.of(n).dtype))
            finals.append(dict(fn=f"s{st.index}_f{k}", op=of(("out", k)), reg=CPP.type_name(out),
                               params=fparams, body=expr_fn(spec, n, out, rnames)))
        stages.append(dict(index=st.index, params=params, values=values, finals=finals, rng_lines=rng_lines,
                           randoms=any("fill" in p for p in params), pair=None,
                           kept=[dict(p, node=None, dtype=None) for p in kept]))
    for pair in [] if views else centered_pairs(plan).values():
        # the mean's stage also gets pair<i>: both sums in one row pass (_cpu_stages.inc.j2)
        if pair.var_stage == pair.mean_stage + 1:   # (fg::run_group runs the two as one there)
            stages[pair.mean_stage]["pair"] = dict(var_stage=pair.var_stage, kind=pair.var.arg.kind)
    caches = {p["cache"]: p["type"] for st in stages for p in st["params"] if "cache" in p}
    view_stages = layout.combo_stages(op, plan, spec, [CPP.type_name(d) for d in op_types], of) if views else []
    suffix = "_".join(d.name for d in combo)
    return dict(suffix=suffix, inputs=[d.name for d in combo], outputs=[d.name for d in out_dtypes],
                types=[CPP.type_name(d) for d in op_types],
                regs=[CPP.type_name(reg_dtype(d)) for d in op_types],
                type_ids=[TYPE_IDS[d.name] for d in out_dtypes],
                in_type_ids=[TYPE_IDS[d.name] for d in combo],
                ws_itemsize=[reg_dtype(spec.of(b).acc).itemsize for b in plan.buffers],
                ws_nodes=[g.idx(b) for b in plan.buffers],
                stages=stages, view_stages=view_stages, caches=sorted(caches.items()))


#: An attribute is stored as the ABI gives it (float, int64_t, bool); the expression table
#: expects the weak scalar's materialized dtype (double, int64_t, bool), so convert once.
attr_text = {"float": "double({})", "int": "int64_t({})", "bool": "{}"}


def _slot(st, node: Node) -> tuple:
    return next(a.slot for a in st.reads if a.node is node)


def _randoms(g, st) -> list[Node]:
    """The random nodes a stage's expressions compute, in a fixed order."""
    out, seen = [], set()
    stack = [r.srcs[0] for r in st.reductions] + [n for _, n in st.writes]
    while stack:
        n = stack.pop()
        if id(n) in seen or n.op in (Op.INPUT, Op.REDUCE, Op.ATTR, Op.CONST):
            continue
        seen.add(id(n))
        if n.op is Op.RANDOM:
            out.append(n)
        stack.extend(n.srcs)
    return sorted(out, key=g.idx)


def expr_fn(spec, node: Node, want: DType, names: dict, stored=(), stage=None) -> list[str]:
    """Body lines of an inline function computing ``node`` from its leaves (random nodes, whose
    values the stage's fills give: ``names``; the ``stored`` values, read back as arguments:
    ``plan.shared``) in ``stage``'s loop."""
    w = ExprWriter(spec, CPP, lambda n, ctx=(): names[id(n)] if n.op is not Op.ATTR else
                   attr_text[spec.of(n).dtype].format(f"a.{member(n.arg)}"), prefix="t", stored=stored, stage=stage,
                   random=lambda ew, n, ctx: R.buffered_text(ew, n, ctx, names[id(n)]))
    v = w.value(node, want)
    lines = [f"const auto {name} = {expr};" for name, expr in w.lines]
    return lines + [f"return {v};"]


def emit_cpu(op: OpDef, dtypes=None, dynamic_workspace: str = "kernel", ranks=None, shapes=None) -> Emitted:
    """``fg.emit(op, abi="mindspore-aot", device="cpu")``: the ``.cc`` and its header (``ranks``/
    ``shapes``: a specializing op's specialization to emit, see ``fusegen.abi_emit.emit``)."""
    op, ranks, shapes = specialize.specialization(op, ranks, shapes, dtypes)
    op = scan_form(op)   # scans as scan stages (or, where they read pieces, composed)
    plan = build_plan(op)   # expensive values shared between stages are stored once (plan.shared)
    combos = parse_dtypes(op, dtypes)
    name = c_name(op.name)
    data = template_data(op, plan, [combo_data(op, plan, c, ranks) for c in combos], dynamic_workspace=dynamic_workspace,
                         spec_ranks=ranks, spec_shapes=shapes, fills=True)
    src = env().get_template("mindspore_aot_cpu.cc.j2").render(**data)
    header = (TEMPLATES / HEADER_NAME).read_text()
    main = f"{op.name}.cc"
    return Emitted({main: src, HEADER_NAME: header}, main, name, error_table(name, data["general"], data["gathers"]),
                   [tuple(d.name for d in c) for c in combos])
