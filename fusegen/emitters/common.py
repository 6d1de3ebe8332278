"""What every C++ emitter shares: the plain data the templates read (the op's shape rules, its
plan's stages, attributes, errors), the jinja2 environment, the dtype-combination parsing, the
ABI's tables (MindSpore TypeIds, the error codes, operand ids) and the ``Emitted`` result.

Python computes plain data (lists and dicts) and jinja2 templates render it; no template calls
back into Python objects. The emitted kernel is rank-polymorphic and reads attributes at run
time: what is fixed at emit time is the op's structure and the dtype combinations, each of
which gets its own concretely-typed code (``mindspore_cpu.combo_data``, ``cuda.combo_data``).
"""
from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .. import dtypes as dt
from .. import vmath
from ..cache import cache_dir
from ..dtypes import AttrType, DType
from ..errors import DTypeError, ShapeError
from ..ir import AttrRef, Node, Op, OpDef, ShapeOf, infer, is_scan, leaves_of, node_text
from ..lower.cpu_scans import (SCAN_BLOCKS, SCAN_FOLDS, SCAN_MIN, SCAN_PIECE, SCAN_ROWS, SCAN_SPLIT_CHUNK, SCAN_STEPS,
                                SCAN_STRIDE, SCAN_SUM_DTYPES)
from ..plan import Plan, scan_form  # noqa: F401  (scan_form: the emitters import it from here)
from ..plan.exprs import CPP, CPP_HELPER_OPS, vmath_functions
from ..plan.cexprs import uses_complex
from ..version import __version__
from . import gathers as G
from . import rng as R
from . import layout
from .cnames import member

TEMPLATES = Path(__file__).resolve().parent / "templates"
HEADER_NAME = "custom_aot_extra.h"
#: fusegen's ``custom_aot_extra.h``; copy it beside a kernel source that includes it.
HEADER_PATH = TEMPLATES / HEADER_NAME

#: GPU architectures a .cu source is built for when no GPU can be queried
#: (all supported by CUDA 12/13), plus PTX for the newest so later GPUs can JIT it.
CUDA_DEFAULT_ARCHS: tuple[str, ...] = ("75", "80", "86", "89", "90")

#: dtype names of the ABI's ``dtypes`` strings, mapped to MindSpore TypeId values (established
#: against MindSpore 2.10; see the notes). The emitters use the twelve fusegen dtypes; a hosted
#: kernel (``fusegen.native``) may also name the others.
TYPE_IDS: dict[str, int] = {
    "bool": 30, "int8": 32, "int16": 33, "int32": 34, "int64": 35, "uint8": 37, "uint16": 38,
    "uint32": 39, "uint64": 40, "float16": 42, "float32": 43, "float64": 44, "bfloat16": 45,
    "complex64": 48, "complex128": 49,
}

# The error table: every code an emitted kernel can return. The runtime reads the
# meanings back through the exported `<Name>ErrorString` symbol.
ERRORS: list[tuple[str, str]] = [
    ("FG_OK", "success"),
    ("FG_ERR_NPARAM", "wrong number of parameters (inputs + outputs + workspaces)"),
    ("FG_ERR_DTYPE", "input/output dtypes match none of the dtype combinations this file was generated for"),
    ("FG_ERR_RANK", "a tensor has more dims than the kernel supports (32), a negative rank, a dim below -1, or more "
                    "elements than int64 indexing counts"),
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


def error_table(name: str, general: bool = False, gathers: bool = False) -> dict[int, str]:
    """Code -> text of a kernel's return codes (``general``: an op with layout ops, whose table
    adds the layout rules' and the view evaluator's codes; ``gathers``: and the gather row)."""
    rows = ERRORS + (layout.LAYOUT_ERRORS if general else []) + (G.GATHER_ERRORS if gathers else [])
    table = {i: f"{n}: {m.replace('<Name>', name)}" for i, (n, m) in enumerate(rows)}
    if general:
        table.update({c: f"{n}: {m}" for c, n, m in layout.VIEW_ERRORS})
    return table


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
    """Every float dtype the op's rules accept, the same for all inputs (an op of integer-only
    functions, such as shifts: every integer dtype and bool it accepts)."""
    def accepted(candidates):
        out = []
        for d in candidates:
            try:
                infer(op, [d] * len(op.inputs), [None] * len(op.inputs), {n: s.default for n, s in op.attrs.items()})
            except DTypeError:
                continue
            except (ValueError, TypeError, KeyError):  # (a required attribute: decided per call)
                pass
            out.append(tuple([d] * len(op.inputs)))
        return out
    if G.has_gathers(op) and not accepted(dt.FLOAT_DTYPES):   # float data, integer indices
        return _with_int_inputs(op)
    combos = (accepted(dt.FLOAT_DTYPES) or accepted([d for d in dt.DTYPES.values() if not d.is_float])
              or [tuple([d] * len(op.inputs)) for d in dt.FLOAT_DTYPES])
    return list(dict.fromkeys(combos))   # (an op without inputs: one combination, the empty one)


def _with_int_inputs(op: OpDef) -> list[tuple[DType, ...]]:
    """An op that takes floats and integer indices (a gather's, issue #17): per float dtype, the
    first combination of it and int64 (the default index dtype) the op's rules accept, and the
    same with int32 (JAX's default)."""
    import itertools
    attrs = {n: s.default for n, s in op.attrs.items()}
    out = []
    for d in dt.FLOAT_DTYPES:
        for combo in itertools.product((d, dt.int64), repeat=len(op.inputs)):
            try:
                infer(op, list(combo), [None] * len(op.inputs), attrs)
            except DTypeError:
                continue
            except (ValueError, TypeError, KeyError):
                pass
            out.append(combo)
            out.append(tuple(dt.int32 if c is dt.int64 else c for c in combo))
            break
    return list(dict.fromkeys(out))


def parse_dtypes(op: OpDef, dtypes) -> list[tuple[DType, ...]]:
    """Dtype combinations from: None (every float dtype); a dtype (all inputs alike; for an op
    with gathers, a float dtype is the data's, and its indices are int64 or int32);
    a string "float32,int32" (one dtype per input); or a list of any of these."""
    if dtypes is None:
        return default_dtypes(op)
    if not isinstance(dtypes, (str, DType, list, tuple)):
        raise DTypeError(f"op {op.name}: dtypes= must be a dtype name, a 'float32,int32' string or a list "
                         f"of these, got {type(dtypes).__name__} {dtypes!r}")
    items = [dtypes] if isinstance(dtypes, (str, DType)) else list(dtypes)
    if not items:   # (a kernel with an empty dtype table would refuse every call at run time)
        raise DTypeError(f"op {op.name}: dtypes= names no dtype combination; give at least one, or None for "
                         "every float dtype")
    out = []
    for it in items:
        if isinstance(it, str) and "," in it:
            it = tuple(x.strip() for x in it.split(","))
        if isinstance(it, (str, DType)) and G.has_gathers(op) and dt.as_dtype(it).is_float:
            # one float dtype for an op with gathers: the data's; the indices int64 and int32
            out += [c for c in _with_int_inputs(op) if dt.as_dtype(it) in c]
            continue
        if isinstance(it, (str, DType)):
            it = (it,) * len(op.inputs)
        it = tuple(it)
        if len(it) != len(op.inputs):
            raise ValueError(f"op {op.name}: dtype combination {it} has {len(it)} entries, the op has "
                             f"{len(op.inputs)} inputs")
        out.append(tuple(dt.as_dtype(x) for x in it))
    return list(dict.fromkeys(out))


@functools.cache
def env():
    """The templates' environment (one per process; jinja2 is imported here, on the first emit, so
    a process that only loads built kernels never imports it). Undefined variables fail loudly.

    Compiled templates are kept on disk, in fusegen's cache (``templates/``): compiling them is
    most of a process's first emit (about 0.4 s, against 10 ms to load them). Jinja keys each
    entry by the template's name and checks the source's checksum and the Python version on load,
    so an edited template or another interpreter compiles afresh; an unwritable cache only costs
    the speed."""
    import jinja2

    class TemplateCodeCache(jinja2.FileSystemBytecodeCache):
        def dump_bytecode(self, bucket) -> None:
            try:
                os.makedirs(self.directory, exist_ok=True)
                super().dump_bytecode(bucket)
            except OSError:
                pass

    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                              bytecode_cache=TemplateCodeCache(str(cache_dir() / "templates")))


def operand_ids(op: OpDef):
    """The ABI's operand numbering of an access slot: inputs, then outputs, then workspaces."""
    nin, nout = len(op.inputs), len(op.graph.outputs)

    def of(key):
        kind, i = key
        return i if kind == "in" else (nin + i if kind == "out" else nin + nout + i)
    return of


# ---------------------------------------------------------------------------------------------
# Plain data for the templates
# ---------------------------------------------------------------------------------------------
def _attr_data(op: OpDef) -> list[dict]:
    out = []
    for s in op.attrs.values():
        default = None if s.required else _cpp_attr_literal(s.type, s.default)
        # ``cpp``: the ABI's type (``Attr<cpp>``); ``store``: the kernel data's. A float attribute
        # is a Python float, so its value is float64 (NumPy computes ``1.0 - beta2`` in float64
        # before it meets a float32 tensor); the ABI's ``Attr<float>`` rounds it to float32, and
        # Init then reads the exact value where the host gives it (``name:f64``, see
        # native/host.set_float64_attrs; MindSpore gives only the float).
        store = "double" if s.type is AttrType.FLOAT else s.type.cpp
        out.append(dict(name=s.name, member=member(s.name), cpp=s.type.cpp, store=store, default=default,
                        required=s.required,
                        py_type=s.type.value, py_default=None if s.required else repr(
                            list(s.default) if isinstance(s.default, tuple) else s.default)))
    return out


def _cpp_attr_literal(t: AttrType, v) -> str:
    if t is AttrType.BOOL:
        return "true" if v else "false"
    if t is AttrType.INT:
        return f"INT64_C({v})"
    if t is AttrType.FLOAT:
        return repr(float(v))   # stored as double (_attr_data)
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
        elif n.op is Op.REDUCE and n.arg.scan:   # the running value: the source's shape, one axis
            rules.append(dict(kind="scan", src=srcs[0], axis=n.arg.axes[0], text=text))
        elif n.op is Op.REDUCE:
            a = n.arg
            if a.axes is None:
                axes = dict(kind="all")
            elif isinstance(a.axes, AttrRef):
                vec = op.attrs[a.axes.name].type is AttrType.INTS
                axes = dict(kind="attr_vec" if vec else "attr_int", name=a.axes.name)
            else:
                axes = dict(kind="const", values=list(a.axes))
            keep = f"a.{member(a.keep_dims.name)}" if isinstance(a.keep_dims, AttrRef) else \
                ("true" if a.keep_dims else "false")
            rules.append(dict(kind="reduce", src=srcs[0], axes=axes, keep=keep, text=text, idx=i,
                              nonempty=a.kind in ("max", "min") and not a.empty_ok))
        else:
            rules.append(dict(kind="broadcast", srcs=srcs, text=text))
    return rules


def _node_text(op: OpDef, n: Node) -> str:
    return node_text(n, [f"%{op.graph.idx(s)}" for s in n.srcs], op)


#: the length of the emitted StageInfo's lists (_fg_runtime.inc.j2: leaves[16], read_op[16], ...)
MAX_STAGE_OPERANDS = 16


def _stage_data(op: OpDef, plan: Plan, counters: dict[int, int]) -> list[dict]:
    """The plan's stages as the templates' stage table: each access's operand id and node (the
    emitted runtime evaluates their maps: reads broadcast, reduction results ``reduced``; a
    random counter, ``counters``, is read as a C-contiguous array of its node's shape)."""
    g = op.graph
    of = operand_ids(op)
    nops = len(op.inputs) + len(g.outputs) + len(plan.buffers)
    stages = []
    for st in plan.stages:
        reads = []
        for a in st.reads:
            if a.slot[0] == "iota":
                node = R.counter_of(g, a, counters)
                reads.append(dict(op=nops + counters[node], node=node))
            else:
                reads.append(dict(op=of(a.slot), node=g.idx(a.node)))
        rwrites = [dict(op=of(a.slot), node=g.idx(a.node)) for a in st.stores if a.node.op is Op.REDUCE]
        finals = [dict(op=of(("out", k)), node=g.idx(_final_leaf(n)), out=k) for k, n in st.finals]
        writes = [dict(op=of(("out", k)), out=k) for k, _ in st.writes + st.keeps]   # (keeps: plan.shared)
        widest = max(len(st.leaves), len(reads), len(rwrites), len(finals), len(writes))
        if widest > MAX_STAGE_OPERANDS:  # the emitted runtime's StageInfo holds fixed-size lists
            raise ShapeError(f"op {op.name}: stage {st.index} has {widest} operands of one kind; the emitted "
                             f"C++ allows at most {MAX_STAGE_OPERANDS} (split the op, or fewer outputs)")
        stages.append(dict(index=st.index, leaves=[g.idx(l) for l in st.leaves],
                           axes_node=g.idx(st.reductions[0]) if st.reductions else -1,
                           reads=reads, rwrites=rwrites, finals=finals, writes=writes,
                           n_reductions=len(st.reductions), scan=st.is_scan,
                           text=_stage_text(op, st)))
    return stages


def _final_leaf(n: Node) -> Node:
    """The reduction whose shape a final output has (every leaf of a final has it)."""
    return leaves_of(n)[0]


def _stage_text(op: OpDef, st) -> str:
    g = op.graph
    parts = [f"{'scan ' if r.arg.scan else ''}{r.arg.kind} (%{g.idx(r)})" for r in st.reductions]
    parts += [f"output {k} (%{g.idx(n)})" for k, n in st.writes]
    parts += [f"output {k} (%{g.idx(n)}) from the results" for k, n in st.finals]
    return ", ".join(parts)


def _op_info(op: OpDef, ranks) -> str:
    """``NameOpInfo``'s JSON (``fusegen.native.opinfo``), as a C++ string literal."""
    info = dict(fusegen=__version__, op=op.name, inputs=list(op.inputs), outputs=len(op.graph.outputs),
                attrs=[dict(name=a.name, type=a.type.value, required=a.required) for a in op.attrs.values()],
                ranks=list(ranks) if ranks is not None else None)
    return json.dumps(json.dumps(info, separators=(",", ":")))   # (JSON's escapes are C++'s for this text)


def _regen_args(combos: list[dict], ranks, shapes) -> str:
    """The ``fusegen emit`` options that give this file again: its dtype combinations and, for a
    specialization, its input ranks or shapes."""
    args = "".join(f" --dtypes {','.join(c['inputs'])}" for c in combos)
    if shapes is not None:
        text = ",".join("x".join(str(d) for d in s) if len(s) else "()" for s in shapes)
        return args + f" --shapes={text}"
    return args + (f" --ranks {','.join(str(r) for r in ranks)}" if ranks is not None else "")


def template_data(op: OpDef, plan: Plan, combos: list[dict], errors=None, spec_ranks=None, spec_shapes=None,
                  fills: bool = False, **extra) -> dict:
    """What every C++/CUDA template and the shared partials read: the op's tables, its
    plan's stages and one entry per dtype combination (``combos``: already rendered by the
    caller, as their stage code differs between CPU and CUDA). An op with layout ops adds its
    layout rules, error codes and view stages (``emitters.layout``); ``spec_ranks``/``spec_shapes``:
    the input ranks/shapes a specialization's kernel checks; ``fills``: CPU stage code, which
    fills random numbers four per Philox call where it can (``rng.loop_counters``; ``views``
    then says whether the stages still take the layout path). ``extra``: template-specific."""
    name = c_name(op.name)
    rules = _shape_rules(op)
    errors = list(errors or ERRORS)
    general = layout.is_layout_op(op)
    # the CPU loop nests' random fills: an op whose only layout nodes are its random counters
    # (and their dims) keeps the fast stages; its layout rules still give the shapes
    counters = R.loop_counters(op, plan) if fills else {}
    views = general and not counters
    view_errors, view_stages = [], []
    if general:
        # (the first combination's dtypes: a gather's indices must be integers)
        spec = layout.generic_spec(op, spec_ranks, [dt.as_dtype(x) for x in combos[0]["inputs"]] if combos else None)
        for i, rule in layout.layout_rules(op, spec).items():
            rules[i] = dict(rule, text=rules[i]["text"])
        errors += layout.LAYOUT_ERRORS + (G.GATHER_ERRORS if G.has_gathers(op) else [])
        view_errors = [(c, n, m.replace("<Name>", name)) for c, n, m in layout.VIEW_ERRORS]
        view_stages = layout.view_stages(op, plan, operand_ids(op)) if views else []
    return dict(
        general=general, views=views, n_ctr=len(counters), layout_kinds=layout.RULE_KINDS, view_errors=view_errors,
        plan_cache=views and fills,   # the CPU layout path keeps its per-shape plans (_fg_plans.inc.j2)
        view_stages=view_stages,
        spec_ranks=spec_ranks, spec_shapes=spec_shapes,
        version=__version__, op=op.name, name=name, text=op.text(), inputs=op.inputs, op_info=_op_info(op, spec_ranks),
        regen_args=_regen_args(combos, spec_ranks, spec_shapes),
        n_in=len(op.inputs), n_out=len(op.graph.outputs), n_ws=len(plan.buffers),
        n_nodes=len(op.graph.nodes), attrs=_attr_data(op), rules=rules,
        checks=[dict(a=op.graph.idx(a), b=op.graph.idx(b), text=what) for a, b, what in op.graph.checks],
        outputs=[op.graph.idx(o) for o in op.graph.outputs],
        stages=_stage_data(op, plan, counters) if not views else [dict(text=_stage_text(op, st)) for st in plan.stages],
        combos=combos, errors=[(n, m.replace("<Name>", name)) for n, m in (errors or ERRORS)],
        # the ABI picks the infer signature by output count (a 1-tuple is one output)
        multi=len(op.graph.outputs) > 1, vmath=vmath.template_data(vmath_functions(op.graph.nodes)),
        # (fg_logaddexp: also a logcumsumexp scan's fold)
        elementwise_helpers=any(n.op in CPP_HELPER_OPS or (is_scan(n) and n.arg.kind == "logaddexp")
                                for n in op.graph.nodes),
        scans=any(is_scan(n) for n in op.graph.nodes), scan_blocks=SCAN_BLOCKS, scan_steps=SCAN_STEPS,
        scan_piece=SCAN_PIECE, scan_min=SCAN_MIN, scan_stride=SCAN_STRIDE, scan_folds=SCAN_FOLDS,
        scan_split_chunk=SCAN_SPLIT_CHUNK, scan_rows=SCAN_ROWS,
        scan_sum_types=[CPP.type_name(dt.as_dtype(d)) for d in SCAN_SUM_DTYPES],
        complex_types=uses_complex(op, [c["inputs"] + c["outputs"] for c in combos]), **G.template_data(op),
        **R.template_data(op), **extra)
