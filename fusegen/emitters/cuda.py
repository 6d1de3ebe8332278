"""Plan -> the MindSpore-AOT ``.cu`` (``mindspore_aot_cuda.cu.j2``): the same tables and entry
points as the ``.cc`` (``emitters.common``), with device code rendered in the CUDA C++ dialect
(``plan.exprs.CUDA_CPP``) and kernels launched on the stream MindSpore passes.

The XLA FFI CUDA handlers (``emitters.xla``) include the same device code. (The numba-cuda
lowering, which generates Python for ``numba.cuda.jit``, is ``fusegen.lower_cuda``.)
"""
from __future__ import annotations

from .. import dtypes as dt
from ..dtypes import DType
from ..ir import Node, Op, OpDef
from ..plan import Plan, build_plan
from ..plan.exprs import CUDA_CPP, ExprWriter, reduce_identity, reg_dtype
from . import layout, specialize
from .common import (CUDA_DEFAULT_ARCHS, HEADER_NAME, TEMPLATES, TYPE_IDS, Emitted, c_name, env, error_table, member,
                     operand_ids, parse_dtypes, template_data, scan_form)


def combo_data(op: OpDef, plan: Plan, combo, ranks=None) -> dict:
    """Concrete types and device code of one dtype combination (``ranks``: the input ranks of a
    specialization)."""
    g = op.graph
    spec = layout.generic_spec(op, ranks, combo)
    of = operand_ids(op)
    out_dtypes = list(spec.out_dtypes)
    op_types = list(combo) + out_dtypes + [reg_dtype(spec.of(b).acc) for b in plan.buffers]

    def body(node: Node, want: DType, names: dict) -> list[str]:
        w = ExprWriter(spec, CUDA_CPP, lambda n, ctx=(): names[id(n)] if n.op is not Op.ATTR else f"a.{member(n.arg)}",
                       prefix="t")
        v = w.value(node, want)
        return [f"const auto {name} = {expr};" for name, expr in w.lines] + [f"return {v};"]

    general = layout.is_layout_op(op)
    stages = []
    for st in [] if general else plan.stages:   # an op with layout ops: its view_stages instead
        params = [dict(op=of(a.slot), name=f"v{of(a.slot)}", reg=CUDA_CPP.type_name(reg_dtype(op_types[of(a.slot)])))
                  for a in st.reads]
        names = {id(a.node): p["name"] for a, p in zip(st.reads, params)}
        values, targets = [], []
        for j, r in enumerate(st.reductions):
            acc = reg_dtype(spec.of(r).acc)
            tg = [of(a.slot) for a in st.stores if a.node is r]
            targets += [t for t in tg if t not in targets]
            values.append(dict(kind="reduce", fn=f"s{st.index}_r{j}", reduce=r.arg.kind, acc=CUDA_CPP.type_name(acc),
                               init=CUDA_CPP.literal(reduce_identity(r.arg.kind, acc), acc),
                               body=body(r.srcs[0], acc, names), targets=tg))
        for k, n in st.writes:
            out = reg_dtype(dt.materialize(spec.of(n).dtype))
            values.append(dict(kind="write", fn=f"s{st.index}_w{k}", op=of(("out", k)),
                               reg=CUDA_CPP.type_name(out), body=body(n, out, names)))
            targets.append(of(("out", k)))
        finals = []
        for k, n in st.finals:
            rnames = {id(r): f"r{j}" for j, r in enumerate(st.reductions)}
            fparams = [dict(name=f"r{j}", reg=CUDA_CPP.type_name(reg_dtype(spec.of(r).acc)))
                       for j, r in enumerate(st.reductions)]
            out = reg_dtype(dt.materialize(spec.of(n).dtype))
            finals.append(dict(fn=f"s{st.index}_f{k}", op=of(("out", k)), reg=CUDA_CPP.type_name(out),
                               params=fparams, body=body(n, out, rnames)))
            if of(("out", k)) not in targets:
                targets.append(of(("out", k)))
        stages.append(dict(index=st.index, params=params, values=values, finals=finals, targets=targets))
    return dict(suffix="_".join(d.name for d in combo), inputs=[d.name for d in combo],
                outputs=[d.name for d in out_dtypes], types=[CUDA_CPP.type_name(d) for d in op_types],
                type_ids=[TYPE_IDS[d.name] for d in out_dtypes], in_type_ids=[TYPE_IDS[d.name] for d in combo],
                ws_itemsize=[reg_dtype(spec.of(b).acc).itemsize for b in plan.buffers],
                ws_nodes=[g.idx(b) for b in plan.buffers], stages=stages,
                view_stages=layout.combo_stages(op, plan, spec, [CUDA_CPP.type_name(d) for d in op_types], of,
                                                CUDA_CPP, device=True) if general else [])


def nvcc_command(op_name: str) -> str:
    """The build command for an emitted .cu that works with CUDA 11.8 to 13 (no compute_70)."""
    arch = " ".join(f"-gencode arch=compute_{a},code=sm_{a}" for a in CUDA_DEFAULT_ARCHS)
    last = CUDA_DEFAULT_ARCHS[-1]
    return (f"nvcc --shared -Xcompiler -fPIC -O3 --use_fast_math --expt-relaxed-constexpr "
            f"-D_GLIBCXX_USE_CXX11_ABI=0 {arch} -gencode arch=compute_{last},code=compute_{last} "
            f"-I. -o {op_name}.so {op_name}.cu")


def emit_cuda(op: OpDef, dtypes=None, dynamic_workspace: str = "kernel", ranks=None, shapes=None) -> Emitted:
    """``fg.emit(op, abi="mindspore-aot", device="cuda")``: the ``.cu`` and its header."""
    op, ranks, shapes = specialize.specialization(op, ranks, shapes, dtypes)
    op = scan_form(op)   # scans as scan stages (or, where they read pieces, composed)
    plan = build_plan(op, share=False)   # CUDA recomputes shared values (plan.shared)
    combos = parse_dtypes(op, dtypes)
    name = c_name(op.name)
    data = template_data(op, plan, [combo_data(op, plan, c, ranks) for c in combos], spec_ranks=ranks,
                         spec_shapes=shapes, nvcc_command=nvcc_command(op.name), dynamic_workspace=dynamic_workspace)
    src = env().get_template("mindspore_aot_cuda.cu.j2").render(**data)
    main = f"{op.name}.cu"
    return Emitted({main: src, HEADER_NAME: (TEMPLATES / HEADER_NAME).read_text()}, main, name,
                   error_table(name, data["general"], data["gathers"]), [tuple(d.name for d in c) for c in combos])
