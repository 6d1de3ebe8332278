"""The Numba CPU backend's executor: for a signature, schedule the plan, compile one Numba
function per fused group (``fusegen.lower_cpu``) with the thread, tile and split policy below,
and generate the *runner*: a small function specialized to that signature (the thread policy is
``rt.policy``).

The runner is generated because a generic loop over inputs, outputs and groups costs more than
the native call itself at small sizes (the per-call target is a few microseconds). Workspaces
(reduction results later stages read) are allocated once per signature and reused from a pool.
"""
from __future__ import annotations

import builtins
import dataclasses
import functools
import types
from dataclasses import dataclass, field

import numba
import numpy as np

from ..lower.cpu_kept import shared_counts
from ..lower.cpu_rows import rows_meta
from ..lower_cpu import compile_group, compile_rows, meta_array
from ..plan import build_plan, schedule
from ..plan.boxrows import BoxRows
from ..plan.exprs import reg_dtype
from ..plan.noops import without_noops
from ..native import fastcall
from .cpu import finish, host_outputs
from .policy import PARALLEL_THRESHOLD, choose_block, num_threads, split_count, stream_order
from .call import Call, Executor

@dataclass
class Group:
    func: object
    meta: np.ndarray
    sources: tuple      # per array operand: (kind, index)
    attrs: tuple        # attribute names passed as scalars
    source: str
    params: tuple = ()  # static scalars (dims) passed after the attributes: their values
    on_error: object = None  # gathers that check their indices: (code, value) -> raises BoundsError
    entry: object = None    # the compiled function for the signature (``entry_point``)


@dataclass
class NumbaCpuCall(Call):
    reg_out_dtypes: tuple = ()     # what the kernel writes (float16 -> float32)
    in_reg: tuple = ()             # per input: the dtype to convert to (None: as is)
    ws: list = field(default_factory=list)       # workspace (shape, dtype) per plan buffer
    groups: list = field(default_factory=list)
    pool: list = field(default_factory=list)     # workspace sets, reused between calls
    fresh: tuple | None = None     # (fresh, prepared): the runner's output allocation (fastcall.fresh_outputs)


class NumbaCpuExecutor(Executor):
    """``backend="numba", device="cpu"``. It takes no options (any given are ignored, as before)."""

    def __init__(self, kernel, **_ignored):
        super().__init__(kernel)

    def prepare(self, spec, bound: dict, arrs, key) -> NumbaCpuCall:
        plan, named = self.kernel.plan, spec.opdef
        # planned per signature: a gradient's sum_to/unreduce that move nothing at these shapes
        # are views, so the stages around them fuse (``plan.noops``)
        op, spec = without_noops(spec, [a.dtype for a in arrs], [tuple(a.shape) for a in arrs], bound)
        if op is not plan.opdef:
            plan = build_plan(op)
        nthreads = num_threads()
        groups = []
        runs = list(schedule(plan, spec, regroup=True, rows=True))
        single = frozenset(k for k, n in shared_counts(runs).items() if n == 1)
        for run in runs:
            if isinstance(run, BoxRows):   # boxes a row at a time: one function, a task per row
                big = run.rows * sum(int(np.prod(b.dom)) for b in run.boxes) >= PARALLEL_THRESHOLD
                gk = compile_rows(plan, spec, run, big and nthreads > 1)
                groups.append(Group(gk.func, rows_meta(run), tuple(k[:2] for k in run.operands if k[0] != "iota"),
                                    gk.attrs, gk.source, tuple(spec.of(n).value for n in gk.params)))
                continue
            numel = int(np.prod(run.dom)) if run.dom else 1
            big = numel >= PARALLEL_THRESHOLD and nthreads > 1
            nsplit = split_count(plan, run, nthreads) if big else 1
            block, tile = (1, run.layout.inner) if nsplit > 1 else choose_block(run.layout, nthreads)
            streamed = stream_order(plan, run) if nsplit == 1 and block == 1 else None
            run = streamed or run
            meta = meta_array(run, tile, nsplit)
            ntasks = int(meta[6] * meta[4] * nsplit)
            if block > 1:
                rows = run.layout.o_ext[-1]
                ntasks = ntasks // rows * -(-rows // block)
            parallel = big and ntasks > 1
            gk = compile_group(plan, spec, run, parallel, nsplit > 1, block, single, streamed is not None)
            groups.append(Group(gk.func, meta, tuple(k[:2] for k in run.operands if k[0] != "iota" and k not in gk.kept),
                                gk.attrs,
                                gk.source, tuple(spec.of(n).value for n in gk.params) + gather_args(gk, spec),
                                gather_error(named, spec, tuple(gk.gathers.checks))))
        # the workspaces a group still takes as arrays (the others it keeps in locals), renumbered
        used = sorted({i for grp in groups for k, i in grp.sources if k == "buf"})
        ws = [(spec.of(plan.buffers[i]).shape, reg_dtype(spec.of(plan.buffers[i]).acc).np) for i in used]
        for grp in groups:
            grp.sources = tuple(("buf", used.index(i)) if k == "buf" else (k, i) for k, i in grp.sources)
        call = NumbaCpuCall(spec.out_shapes, tuple(d.np for d in spec.out_dtypes), bound,
                            reg_out_dtypes=tuple(reg_dtype(d).np for d in spec.out_dtypes),
                            in_reg=tuple(np.dtype(np.float32) if a.dtype == np.float16 else None for a in arrs),
                            ws=ws, groups=groups)
        in_types = [_array_type(conv or a.dtype, np.ndim(a)) for a, conv in zip(arrs, call.in_reg)]
        for grp in groups:
            grp.entry = entry_point(grp, call, in_types)
        call.run = make_runner(self.kernel.op, call)
        return call

    def rebind(self, template: NumbaCpuCall, spec, bound: dict, arrs) -> NumbaCpuCall:
        # the same compiled functions, entry points, workspace pool and output allocation; the
        # runner's code too, run with the new values where it names the attributes
        call = dataclasses.replace(template, attr_values=bound)
        run = template.run
        g = dict(run.__globals__, _call=call)
        for j, grp in enumerate(call.groups):
            g.update((f"_A{j}_{a}", bound[a]) for a in grp.attrs)
        call.run = types.FunctionType(run.__code__, g, run.__name__)
        call.run.source = run.source
        return call


def _array_type(dtype, ndim: int):
    return numba.types.Array(numba.from_dtype(np.dtype(dtype)), ndim, "C")


def entry_point(grp: Group, call: NumbaCpuCall, in_types: list):
    """The compiled function of ``grp`` for this signature, called without Numba's dispatcher.

    The dispatcher types every argument on every call to pick an overload (a third of a small
    call's cost); the runner knows the types already: its arrays are C-contiguous and aligned
    (it copies any other input), outputs and workspaces are its own or checked ``out=`` arrays,
    and the scalars are this signature's attribute values. Falls back to the dispatcher where
    Numba will not compile the signature ahead of the call."""
    types = {"in": in_types,
             "out": [_array_type(d, len(s)) for s, d in zip(call.out_shapes, call.reg_out_dtypes)],
             "buf": [_array_type(d, len(s)) for s, d in call.ws]}
    sig = [types[k][i] for k, i in grp.sources] + [_array_type(grp.meta.dtype, grp.meta.ndim)]
    sig += [numba.typeof(call.attr_values[a]) for a in grp.attrs] + [numba.typeof(v) for v in grp.params]
    try:
        return grp.func.compile(tuple(sig))
    except Exception:  # noqa: BLE001 - e.g. a type Numba infers differently from a value: the dispatcher decides
        return grp.func


def _behaved(a: np.ndarray) -> np.ndarray:
    """A C-contiguous, aligned copy (what the compiled functions are typed for)."""
    return np.require(a, requirements="CA")


def make_runner(op, call: NumbaCpuCall):
    """A small function specialized to one signature: no loops or lookups on the hot path."""
    nin, nout = len(op.inputs), len(call.out_shapes)
    g = {"np": np, "_empty": fastcall.empty, "_behaved": _behaved, "_nd": np.ndarray, "_pool": call.pool, "_call": call,
         "_outputs": functools.partial(host_outputs, op.name, shapes=call.out_shapes, dtypes=call.out_dtypes,
                                       reg_dtypes=call.reg_out_dtypes),
         "_finish": functools.partial(finish, dtypes=call.out_dtypes, multi=op.multi_output)}
    ins = ", ".join(f"a{i}" for i in range(nin)) + ("," if nin == 1 else "")
    outs = ", ".join(f"o{k}" for k in range(nout)) + ("," if nout == 1 else "")
    lines = ["def run(arrays, out):"] + ([f"    {ins} = arrays"] if nin else [])
    # Fresh outputs for inputs the entry points take as they are: one C call checks the inputs
    # and allocates (``native.fastcall.fresh_outputs``); anything else takes the general path.
    fresh = None
    if call.reg_out_dtypes == call.out_dtypes and all(conv is None for conv in call.in_reg):
        fresh = fastcall.fresh_outputs(nin, list(zip(call.out_shapes, call.out_dtypes)))
    call.fresh = fresh
    if fresh is not None:   # the common call: every output fresh, returned as the C call made them
        g["_fresh"], g["_F"] = fresh
        lines += ["    if out is None:",
                  f"        r = _fresh(_F{''.join(f', a{i}' for i in range(nin))})",
                  "        if r is not False:",
                  f"            {'o0' if nout == 1 else outs} = r"]
        lines += _kernel_calls(call, g, "            ")
        lines.append(f"            return {'(r,)' if op.multi_output and nout == 1 else 'r'}")
    for i, conv in enumerate(call.in_reg):
        lines.append(f"    if type(a{i}) is not _nd:")
        lines.append(f"        a{i} = np.asarray(a{i})")
        if conv is not None:  # float16: Numba has no CPU float16, the kernel reads float32
            g[f"_c{i}"] = conv
            lines.append(f"    a{i} = a{i}.astype(_c{i}, order=\"C\")  # what the entry point is typed for")
        else:
            lines.append(f"    f{i} = a{i}.flags")
            lines.append(f"    if not (f{i}.c_contiguous and f{i}.aligned):")
            lines.append(f"        a{i} = _behaved(a{i})")
    lines.append("    if out is None:")
    for k, (shp, d) in enumerate(zip(call.out_shapes, call.reg_out_dtypes)):
        g[f"_S{k}"], g[f"_D{k}"] = tuple(shp), d
        lines.append(f"        o{k} = _empty(_S{k}, _D{k})")
    direct = call.reg_out_dtypes == call.out_dtypes
    if direct:
        lines += ["    else:"] + _direct_outputs(nout, "        ")
    else:
        lines += ["    else:", f"        {outs} = _outputs(out)"]
    lines += _kernel_calls(call, g, "    ")
    result = "(" + outs + ")" if op.multi_output else "o0"
    if not direct:
        lines.append(f"    return _finish([{outs}], out)")
    else:
        lines.append("    if out is not None and not _direct:")
        lines.append(f"        return _finish([{outs}], out)")
        lines.append(f"    return {result}")
    src = "\n".join(lines) + "\n"
    exec(builtins.compile(src, f"<fusegen runner {op.name}>", "exec"), g)
    run = g["run"]
    run.source = src
    return run


def _direct_outputs(nout: int, pad: str) -> list[str]:
    """The runner's lines taking the caller's ``out=`` arrays as they are when each is a
    writable, C-contiguous, aligned array of the signature's shape and dtype (``_direct``):
    checked inline, as ``host_outputs`` would find them, without its per-output Python calls
    (a call with ``out=`` cost 2-4x one with fresh outputs at small sizes). Anything else, and
    every error message, is ``host_outputs``'s."""
    outs = ", ".join(f"o{k}" for k in range(nout)) + ("," if nout == 1 else "")
    checks = " and ".join(f"type(o{k}) is _nd and o{k}.shape == _S{k} and o{k}.dtype == _D{k}" for k in range(nout))
    lines = [f"{pad}_o = (out,) if type(out) is _nd else out",
             f"{pad}_direct = (type(_o) is tuple or type(_o) is list) and len(_o) == {nout}",
             f"{pad}if _direct:",
             f"{pad}    {outs} = _o",
             f"{pad}    _direct = {checks}"]
    for k in range(nout):
        lines += [f"{pad}if _direct:",
                  f"{pad}    _fl = o{k}.flags",
                  f"{pad}    _direct = _fl.c_contiguous and _fl.aligned and _fl.writeable"]
    lines += [f"{pad}if not _direct:", f"{pad}    {outs} = _outputs(out)"]
    return lines


def _kernel_calls(call: NumbaCpuCall, g: dict, pad: str) -> list[str]:
    """The runner's calls of its groups' entry points at indent ``pad`` (the names they use set
    in ``g``), with the workspaces from the pool around them."""
    lines = []
    if call.ws:
        lines.append(f"{pad}try:")  # pop, not check-then-pop: another thread may empty the pool between
        lines.append(f"{pad}    ws = _pool.pop()")
        lines.append(f"{pad}except IndexError:")
        lines.append(f"{pad}    ws = [np.empty(s, d) for s, d in _call.ws]")
    names = {"in": "a", "out": "o"}
    for j, grp in enumerate(call.groups):
        g[f"_f{j}"], g[f"_m{j}"] = grp.entry or grp.func, grp.meta
        args = [f"ws[{i}]" if k == "buf" else f"{names[k]}{i}" for k, i in grp.sources]
        args.append(f"_m{j}")
        for a in grp.attrs:
            g[f"_A{j}_{a}"] = call.attr_values[a]
            args.append(f"_A{j}_{a}")
        for i, v in enumerate(grp.params):
            g[f"_P{j}_{i}"] = v
            args.append(f"_P{j}_{i}")
        if grp.on_error is None:
            lines.append(f"{pad}_f{j}({', '.join(args)})")
        else:
            g[f"_E{j}"] = grp.on_error
            lines.append(f"{pad}_r{j} = _f{j}({', '.join(args)})")
            lines.append(f"{pad}if _r{j}[0]:")
            lines.append(f"{pad}    _E{j}(_r{j})")
    if call.ws:
        lines.append(f"{pad}_pool.append(ws)")
    return lines


# --- gathers (issue #17) -------------------------------------------------------------------------
def gather_args(gk, spec) -> tuple:
    """The values a group function with gathers takes after its params: each gather's axis extent,
    then each gathered read's axis stride."""
    from ..plan.layout import gather_stride
    return tuple(int(spec.of(n).params[1]) for n in gk.gathers.nodes) + \
        tuple(int(gather_stride(a, k, spec, None, ())) for a, k in gk.gathers.terms)


def gather_error(opdef, spec, checks):
    """The function that turns a group's (which checked gather + 1, bad index) into a BoundsError
    naming the op, the node, the axis and the value; None without checked gathers."""
    if not checks:
        return None
    from ..errors import BoundsError
    from ..graph.text import where_text

    def raise_bounds(code):
        n = checks[int(code[0]) - 1]
        axis, extent = spec.of(n).params
        fn = "take" if n.arg.kind == "take" else "take_along_axis"
        named = opdef if id(n) in opdef.graph.index else spec.opdef   # (a node plan.noops rebuilt)
        raise BoundsError(f"{where_text(named, n)}: {fn}: index {int(code[1])} is out of bounds for axis {axis} "
                          f"with size {extent}")
    return raise_bounds
