"""Plan -> MindSpore AOT C++ sources (and, later, CUDA and XLA FFI handlers).

Python computes plain data (lists and dicts) and jinja2 templates render it; no
template calls back into Python objects. The emitted kernel is rank-polymorphic
and reads attributes at run time: what is fixed at emit time is the op's structure
and the dtype combinations, each of which gets its own concretely-typed code.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from . import __version__, vmath
from . import dtypes as dt
from .dtypes import AttrType, DType
from .exprs import CPP, ExprWriter, reduce_identity, reg_dtype
from .ir import AttrRef, Node, Op, OpDef, ShapeOf, infer
from .plan import Plan, build_plan, leaves_of

TEMPLATES = Path(__file__).parent / "templates"
HEADER_NAME = "custom_aot_extra.h"

# The error table: every code an emitted kernel can return. The runtime reads the
# meanings back through the exported `<Name>ErrorString` symbol.
ERRORS: list[tuple[str, str]] = [
    ("FG_OK", "success"),
    ("FG_ERR_NPARAM", "wrong number of parameters (inputs + outputs + workspaces)"),
    ("FG_ERR_DTYPE", "input/output dtypes match none of the dtype combinations this file was generated for"),
    ("FG_ERR_RANK", "a tensor has more dims than the kernel supports (8) or a negative rank"),
    ("FG_ERR_BROADCAST", "input shapes cannot be broadcast together"),
    ("FG_ERR_AXIS", "a reduction axis is out of range or repeated"),
    ("FG_ERR_OUT_SHAPE", "an output's shape differs from the shape the op infers"),
    ("FG_ERR_NOT_INITIALIZED", "the main function ran before <Name>Init (no kernel data)"),
    ("FG_ERR_ATTR", "an attribute is missing or has the wrong type"),
    ("FG_ERR_DYNAMIC_WORKSPACE", "Init saw an unknown dim (-1) or rank (-2), but the workspace size depends on it"),
    ("FG_ERR_WORKSPACE", "the workspace given is smaller than the shapes now require (shapes grew after Init)"),
    ("FG_ERR_UNKNOWN_DIM", "the main function got an unknown (-1/-2) dim"),
    ("FG_ERR_EMPTY_REDUCTION", "max/min over an axis of size 0 has no identity"),
    ("FG_ERR_EXCEPTION", "a C++ exception was thrown inside the kernel"),
    # .cu files only; the error string then adds the CUDA error's name and text.
    ("FG_ERR_CUDA", "a CUDA kernel launch failed"),
]
ERROR_CODES = {name: i for i, (name, _) in enumerate(ERRORS)}


def error_table(name: str) -> dict[int, str]:
    return {i: f"{n}: {m.replace('<Name>', name)}" for i, (n, m) in enumerate(ERRORS)}


def c_name(op_name: str) -> str:
    """add_reduce_sum -> AddReduceSum (the exported symbol prefix)."""
    return "".join(p[:1].upper() + p[1:] for p in op_name.split("_") if p) or "FusedOp"


@dataclass
class Emitted:
    """Generated files: name -> text. ``write(dir)`` puts them on disk."""

    files: dict[str, str]
    main: str                      # the source file's name
    symbol: str                    # the main function's name
    error_table: dict[int, str] = field(default_factory=dict)
    dtypes: list = field(default_factory=list)

    def write(self, directory) -> list[Path]:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        paths = []
        for name, text in self.files.items():
            p = d / name
            tmp = p.with_suffix(p.suffix + f".{os.getpid()}.tmp")
            tmp.write_text(text)
            os.replace(tmp, p)
            paths.append(p)
        return paths

    @property
    def source(self) -> str:
        return self.files[self.main]

    def func(self, directory) -> str:
        """The ``path:Name`` string MindSpore and ``fg.AotKernel`` take."""
        return f"{Path(directory) / self.main}:{self.symbol}"


def default_dtypes(op: OpDef) -> list[tuple[DType, ...]]:
    """Every float dtype, the same for all inputs."""
    return [tuple([d] * len(op.inputs)) for d in dt.FLOAT_DTYPES]


def _parse_dtypes(op: OpDef, dtypes) -> list[tuple[DType, ...]]:
    """Dtype combinations from: None (every float dtype); a dtype (all inputs alike);
    a string "float32,int32" (one dtype per input); or a list of any of these."""
    if dtypes is None:
        return default_dtypes(op)
    if not isinstance(dtypes, (str, DType, list, tuple)):
        from .errors import DTypeError
        raise DTypeError(f"op {op.name}: dtypes= must be a dtype name, a 'float32,int32' string or a list "
                         f"of these, got {type(dtypes).__name__} {dtypes!r}")
    items = [dtypes] if isinstance(dtypes, (str, DType)) else list(dtypes)
    out = []
    for it in items:
        if isinstance(it, str) and "," in it:
            it = tuple(x.strip() for x in it.split(","))
        if isinstance(it, (str, DType)):
            it = (it,) * len(op.inputs)
        it = tuple(it)
        if len(it) != len(op.inputs):
            raise ValueError(f"op {op.name}: dtype combination {it} has {len(it)} entries, the op has "
                             f"{len(op.inputs)} inputs")
        out.append(tuple(dt.as_dtype(x) for x in it))
    return list(dict.fromkeys(out))


# ---------------------------------------------------------------------------------------------
# Plain data for the templates
# ---------------------------------------------------------------------------------------------
def _attr_data(op: OpDef) -> list[dict]:
    out = []
    for s in op.attrs.values():
        default = None if s.required else _cpp_attr_literal(s.type, s.default)
        out.append(dict(name=s.name, cpp=s.type.cpp, default=default, required=s.required,
                        py_type=s.type.value, py_default=None if s.required else repr(
                            list(s.default) if isinstance(s.default, tuple) else s.default)))
    return out


def _cpp_attr_literal(t: AttrType, v) -> str:
    if t is AttrType.BOOL:
        return "true" if v else "false"
    if t is AttrType.INT:
        return f"INT64_C({v})"
    if t is AttrType.FLOAT:
        return repr(float(v)) + "f"
    if t is AttrType.STR:
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if t in (AttrType.INTS, AttrType.FLOATS):
        conv = (lambda x: f"INT64_C({x})") if t is AttrType.INTS else (lambda x: repr(float(x)) + "f")
        return "{" + ", ".join(conv(x) for x in v) + "}"
    conv = (lambda x: f"INT64_C({x})") if t is AttrType.INTS2 else (lambda x: repr(float(x)) + "f")
    return "{" + ", ".join("{" + ", ".join(conv(x) for x in row) + "}" for row in v) + "}"


def _shape_rules(op: OpDef) -> list[dict]:
    """One entry per node: how its shape follows from its sources' (mirrors ir.infer)."""
    g = op.graph
    rules = []
    for i, n in enumerate(g.nodes):
        srcs = [g.idx(s) for s in n.srcs]
        text = f"%{i} = " + _node_text(op, n)
        if n.op is Op.INPUT:
            rules.append(dict(kind="input", index=n.arg, text=text))
        elif n.op in (Op.CONST, Op.ATTR):
            rules.append(dict(kind="scalar", text=text))
        elif n.op is Op.CAST:
            rules.append(dict(kind="same", src=srcs[0], text=text))
        elif n.op is Op.REDUCE and isinstance(n.arg.axes, ShapeOf):
            rule = "sum_to" if n.arg.axes.rule == "broadcast" else "unreduce"
            rules.append(dict(kind=rule, srcs=srcs, src=srcs[0], like=srcs[1], like_src=g.idx(n.srcs[1].srcs[0])
                              if rule == "unreduce" else None, text=text))
        elif n.op is Op.REDUCE:
            a = n.arg
            if a.axes is None:
                axes = dict(kind="all")
            elif isinstance(a.axes, AttrRef):
                vec = op.attrs[a.axes.name].type is AttrType.INTS
                axes = dict(kind="attr_vec" if vec else "attr_int", name=a.axes.name)
            else:
                axes = dict(kind="const", values=list(a.axes))
            keep = f"a.{a.keep_dims.name}" if isinstance(a.keep_dims, AttrRef) else \
                ("true" if a.keep_dims else "false")
            rules.append(dict(kind="reduce", src=srcs[0], axes=axes, keep=keep, text=text, idx=i,
                              nonempty=a.kind in ("max", "min")))
        else:
            rules.append(dict(kind="broadcast", srcs=srcs, text=text))
    return rules


def _node_text(op: OpDef, n: Node) -> str:
    from .ir import node_text
    return node_text(n, [f"%{op.graph.idx(s)}" for s in n.srcs], op)


def _operand_ids(op: OpDef, plan: Plan):
    nin, nout = len(op.inputs), len(op.graph.outputs)

    def of(key):
        kind, i = key
        return i if kind == "in" else (nin + i if kind == "out" else nin + nout + i)
    return of


def _stage_data(op: OpDef, plan: Plan) -> list[dict]:
    g = op.graph
    of = _operand_ids(op, plan)
    stages = []
    for st in plan.stages:
        from .plan import _reads
        reads = []
        for l in _reads(st):
            key = ("in", l.arg) if l.op is Op.INPUT else ("buf", plan.buffer_index(l))
            reads.append(dict(op=of(key), node=g.idx(l)))
        rwrites = []
        for r in st.reductions:
            for k in plan.reduce_outputs.get(id(r), ()):
                rwrites.append(dict(op=of(("out", k)), node=g.idx(r)))
            if any(r is b for b in plan.buffers):
                rwrites.append(dict(op=of(("buf", plan.buffer_index(r))), node=g.idx(r)))
        finals = [dict(op=of(("out", k)), node=g.idx(leaves_of(n)[0]), out=k) for k, n in st.finals]
        writes = [dict(op=of(("out", k)), out=k) for k, _ in st.writes]
        stages.append(dict(index=st.index, leaves=[g.idx(l) for l in st.leaves],
                           axes_node=g.idx(st.reductions[0]) if st.reductions else -1,
                           reads=reads, rwrites=rwrites, finals=finals, writes=writes,
                           n_reductions=len(st.reductions),
                           text=_stage_text(op, st)))
    return stages


def _stage_text(op: OpDef, st) -> str:
    g = op.graph
    parts = [f"{r.arg.kind} (%{g.idx(r)})" for r in st.reductions]
    parts += [f"output {k} (%{g.idx(n)})" for k, n in st.writes]
    parts += [f"output {k} (%{g.idx(n)}) from the results" for k, n in st.finals]
    return ", ".join(parts)


def _combo_data(op: OpDef, plan: Plan, combo: tuple[DType, ...]) -> dict:
    """Concrete types and expression code of one dtype combination."""
    g = op.graph
    spec = infer(op, combo, [None] * len(combo), {n: s.default for n, s in op.attrs.items()})
    of = _operand_ids(op, plan)
    out_dtypes = list(spec.out_dtypes)
    op_types = [d for d in combo] + out_dtypes + [reg_dtype(spec.of(b).acc) for b in plan.buffers]
    stages = []
    for st in plan.stages:
        from .plan import _reads
        reads = _reads(st)
        params = []
        for l in reads:
            key = ("in", l.arg) if l.op is Op.INPUT else ("buf", plan.buffer_index(l))
            # invariant: a reduction result, so often constant along the row a fused stage
            # walks (the template then hoists it: see _cpu_stages.inc.j2, row mode)
            params.append(dict(op=of(key), name=f"v{of(key)}", reg=CPP.type_name(
                reg_dtype(op_types[of(key)])), invariant=key[0] == "buf"))
        names = {id(l): p["name"] for l, p in zip(reads, params)}
        values = []
        for j, r in enumerate(st.reductions):
            info = spec.of(r)
            acc = reg_dtype(info.acc)
            values.append(dict(kind="reduce", fn=f"s{st.index}_r{j}", reduce=r.arg.kind, node=g.idx(r),
                               acc=CPP.type_name(acc), init=CPP.literal(reduce_identity(r.arg.kind, acc), acc),
                               body=_expr_fn(spec, r.srcs[0], acc, names),
                               out_type=CPP.type_name(reg_dtype(dt.materialize(info.dtype))),
                               targets=[of(("out", k)) for k in plan.reduce_outputs.get(id(r), ())] +
                               ([of(("buf", plan.buffer_index(r)))] if any(r is b for b in plan.buffers) else [])))
        for k, n in st.writes:
            out = reg_dtype(dt.materialize(spec.of(n).dtype))
            values.append(dict(kind="write", fn=f"s{st.index}_w{k}", op=of(("out", k)),
                               reg=CPP.type_name(out), body=_expr_fn(spec, n, out, names)))
        finals = []
        for k, n in st.finals:
            rs = st.reductions
            rnames = {id(r): f"r{j}" for j, r in enumerate(rs)}
            fparams = [dict(name=f"r{j}", reg=CPP.type_name(reg_dtype(spec.of(r).acc))) for j, r in enumerate(rs)]
            out = reg_dtype(dt.materialize(spec.of(n).dtype))
            finals.append(dict(fn=f"s{st.index}_f{k}", op=of(("out", k)), reg=CPP.type_name(out),
                               params=fparams, body=_expr_fn(spec, n, out, rnames)))
        stages.append(dict(index=st.index, params=params, values=values, finals=finals))
    suffix = "_".join(d.name for d in combo)
    return dict(suffix=suffix, inputs=[d.name for d in combo], outputs=[d.name for d in out_dtypes],
                types=[CPP.type_name(d) for d in op_types],
                regs=[CPP.type_name(reg_dtype(d)) for d in op_types],
                type_ids=[_TYPE_IDS[d.name] for d in out_dtypes],
                in_type_ids=[_TYPE_IDS[d.name] for d in combo],
                ws_itemsize=[reg_dtype(spec.of(b).acc).itemsize for b in plan.buffers],
                ws_nodes=[g.idx(b) for b in plan.buffers],
                stages=stages)


def _expr_fn(spec, node: Node, want: DType, names: dict) -> list[str]:
    """Body lines of an inline function computing ``node`` from its leaves."""
    # An attribute is stored as the ABI gives it (float, int64_t, bool); the expression table
    # expects the weak scalar's materialized dtype (double, int64_t, bool), so convert once.
    attr_text = {"float": "double({})", "int": "int64_t({})", "bool": "{}"}
    w = ExprWriter(spec, CPP, lambda n: names[id(n)] if n.op is not Op.ATTR else
                   attr_text[spec.of(n).dtype].format(f"a.{n.arg}"), prefix="t")
    v = w.value(node, want)
    lines = [f"const auto {name} = {expr};" for name, expr in w.lines]
    return lines + [f"return {v};"]


# MindSpore TypeId values (established against MindSpore 2.10; see the notes).
_TYPE_IDS = {"bool": 30, "int8": 32, "int16": 33, "int32": 34, "int64": 35, "uint8": 37, "uint16": 38,
             "uint32": 39, "uint64": 40, "float16": 42, "float32": 43, "float64": 44}


def template_data(op: OpDef, plan: Plan, combos: list[dict], errors=None, **extra) -> dict:
    """What every C++/CUDA template and the shared partials read: the op's tables, its
    plan's stages and one entry per dtype combination (``combos``: already rendered by the
    caller, as their stage code differs between CPU and CUDA). ``extra``: template-specific."""
    name = c_name(op.name)
    return dict(
        version=__version__, op=op.name, name=name, text=op.text(), inputs=op.inputs,
        n_in=len(op.inputs), n_out=len(op.graph.outputs), n_ws=len(plan.buffers),
        n_nodes=len(op.graph.nodes), attrs=_attr_data(op), rules=_shape_rules(op),
        checks=[dict(a=op.graph.idx(a), b=op.graph.idx(b), text=what) for a, b, what in op.graph.checks],
        outputs=[op.graph.idx(o) for o in op.graph.outputs], stages=_stage_data(op, plan),
        combos=combos, errors=[(n, m.replace("<Name>", name)) for n, m in (errors or ERRORS)],
        # the ABI picks the infer signature by output count (a 1-tuple is one output)
        multi=len(op.graph.outputs) > 1, vmath=vmath.template_data(), **extra)


def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)


def emit(op: OpDef, abi: str = "mindspore-aot", device: str = "cpu", dtypes=None,
         dynamic_workspace: str = "kernel") -> Emitted:
    """Generate the files a user ships for ``op``.

    ``dtypes``: the dtype combinations to support — a dtype name (all inputs), a list of
    names (one combination per name, all inputs alike), or a list of per-input tuples.
    Default: every float dtype.
    ``dynamic_workspace``: what ``NameInit`` does when a workspace size depends on a dim it
    sees as unknown (-1): ``"kernel"`` (default) asks for no workspace and lets the kernel
    own and grow its scratch, so the op runs under MindSpore's dynamic shapes;
    ``"error"`` returns ``FG_ERR_DYNAMIC_WORKSPACE`` instead.
    """
    if dynamic_workspace not in ("kernel", "error"):
        raise ValueError(f"dynamic_workspace must be 'kernel' or 'error', got {dynamic_workspace!r}")
    if not isinstance(op, OpDef):
        raise TypeError(f"fusegen.emit expects an @fusegen.op, got {type(op).__name__}")
    if abi == "xla-ffi":  # XLA typed-FFI handlers around the same loops (fusegen/xla_emit.py)
        from .xla_emit import emit_xla
        return emit_xla(op, device=device, dtypes=dtypes)
    if abi != "mindspore-aot":
        raise NotImplementedError(f"abi={abi!r} is not available: use 'mindspore-aot' or 'xla-ffi'")
    if device == "cuda":  # the .cu: same tables and entry points, CUDA kernels (fusegen/lower_cuda.py)
        from .lower_cuda import emit_cuda
        return emit_cuda(op, dtypes=dtypes)
    if device != "cpu":
        raise NotImplementedError(f"device={device!r} is not available: use 'cpu' or 'cuda'")
    plan = build_plan(op)
    combos = _parse_dtypes(op, dtypes)
    name = c_name(op.name)
    data = template_data(op, plan, [_combo_data(op, plan, c) for c in combos], dynamic_workspace=dynamic_workspace)
    src = _env().get_template("mindspore_aot_cpu.cc.j2").render(**data)
    header = (TEMPLATES / HEADER_NAME).read_text()
    main = f"{op.name}.cc"
    return Emitted({main: src, HEADER_NAME: header}, main, name, error_table(name),
                   [tuple(d.name for d in c) for c in combos])
