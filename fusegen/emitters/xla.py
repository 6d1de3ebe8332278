"""Plan -> XLA typed-FFI handlers: one ``XLA_FFI_DEFINE_HANDLER_SYMBOL`` per dtype combination.

The handlers are a thin ABI layer over the very code the MindSpore-AOT emitter generates: the
template includes the shared partials (``_fg_runtime``, ``_op_tables``, ``_cpu_stages``)
unchanged and calls their ``run(...)``, after turning the FFI buffers into the AOT ABI's
``params``/``ndims``/``shapes``/dtype-string arrays. What is XLA-specific lives here as plain data:
the FFI type of every buffer and attribute, the handler symbols, and where scratch memory goes.

Facts this relies on (established with jax 0.10.2, see the project notes):

* attributes: Python int -> ``int64_t``, bool -> ``bool``, str -> ``std::string_view``, float ->
  ``double`` (``Attr<float>`` fails for a Python float), int64/float64 arrays -> ``Span<const T>``;
* ``ffi::ScratchAllocator`` does not work on the CPU, so every workspace the plan declares is an
  extra ``u8`` result of ``workspace_bytes`` bytes that the caller allocates and ignores;
* XLA never checks what a handler writes against the declared result shapes, so the handler
  checks every shape with the IR's rules (``run`` does) and reports ``ffi::Error``.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from ..dtypes import DTYPES, AttrType
from ..ir import OpDef
from ..plan import build_plan
from . import cuda, mindspore_cpu, specialize
from .common import CUDA_DEFAULT_ARCHS, ERRORS, Emitted, c_name, env, member, parse_dtypes, scan_form, template_data

#: fusegen dtype -> XLA FFI ``ffi::DataType`` (the element type a typed buffer binds to).
FFI_DTYPES: dict[str, str] = {
    "bool": "PRED", "int8": "S8", "int16": "S16", "int32": "S32", "int64": "S64", "uint8": "U8",
    "uint16": "U16", "uint32": "U32", "uint64": "U64", "float16": "F16", "float32": "F32", "float64": "F64",
    "complex64": "C64", "complex128": "C128",
}

#: Attribute type -> (the C++ type the FFI decodes it as, how it becomes the Data struct's member).
#: ``{v}`` is the decoded value. Floats come as double: a Python float is an f64 attribute.
FFI_ATTRS: dict[AttrType, tuple[str, str]] = {
    AttrType.BOOL: ("bool", "{v}"),
    AttrType.INT: ("int64_t", "{v}"),
    AttrType.FLOAT: ("double", "{v}"),   # stored as double (common._attr_data)
    AttrType.STR: ("std::string_view", "std::string({v})"),
    AttrType.INTS: ("ffi::Span<const int64_t>", "std::vector<int64_t>({v}.begin(), {v}.end())"),
    AttrType.FLOATS: ("ffi::Span<const double>", "std::vector<float>({v}.begin(), {v}.end())"),
}

#: What some codes mean behind an XLA handler (the rest mean what abi_emit.ERRORS says; the
#: Init-only codes cannot occur: a handler has no Init).
XLA_MEANINGS: dict[str, str] = {
    "FG_ERR_NPARAM": "wrong number of buffers (inputs + outputs + scratch results)",
    "FG_ERR_OUT_SHAPE": "a result's declared shape differs from the shape the op infers",
    "FG_ERR_ATTR": "an attribute (for a legacy call: the opaque string) cannot be read",
    "FG_ERR_WORKSPACE": "a scratch result is smaller than the shapes require (numel * itemsize bytes)",
    "FG_ERR_NOT_INITIALIZED": "no kernel data (not returned by an XLA handler, which has no Init)",
}
ERRORS_XLA: list[tuple[str, str]] = [(n, XLA_MEANINGS.get(n, m)) for n, m in ERRORS]

SUPPORTED_DEVICES = ("cpu", "cuda")
_TEMPLATES = {"cpu": ("xla_ffi_cpu.cc.j2", ".cc"), "cuda": ("xla_ffi_cuda.cu.j2", ".cu")}


@dataclass
class XlaEmitted(Emitted):
    """An emitted XLA FFI source. ``handlers`` maps an input dtype combination to its symbol."""

    device: str = "cpu"
    handlers: dict[tuple[str, ...], str] = field(default_factory=dict)
    out_dtypes: dict[tuple[str, ...], tuple[str, ...]] = field(default_factory=dict)
    #: Per workspace: the IR node whose shape sizes it, and its item size per dtype combination.
    workspace_nodes: list[int] = field(default_factory=list)
    workspace_itemsize: dict[tuple[str, ...], tuple[int, ...]] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        """Content hash of the source (fusegen.jax names its source directory with it; target
        names hash the built library, which also covers compiler and flags)."""
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]


def _check_attrs(op: OpDef) -> None:
    for s in op.attrs.values():
        if s.type not in FFI_ATTRS:
            raise NotImplementedError(
                f"op {op.name}: attribute {s.name!r} is {s.type.value}; XLA FFI attributes have no nested "
                "lists (supported: bool, int, float, str, list[int], list[float])")


def _ffi_attr_data(op: OpDef) -> list[dict]:
    out = []
    for s in op.attrs.values():
        ffi_type, conv = FFI_ATTRS[s.type]
        # (the handler's parameter is attr_<name>: a name of its own, as `a` or `o`, would hide the
        # handler's locals)
        out.append(dict(name=s.name, member=member(s.name), param=f"attr_{s.name}", ffi=ffi_type,
                        assign=conv.format(v=f"attr_{s.name}"), py_type=s.type.value,
                        required=s.required, py_default=None if s.required else repr(
                            list(s.default) if isinstance(s.default, tuple) else s.default)))
    return out


def _handler_data(name: str, combo: dict, n_ws: int) -> dict:
    """One handler's binding: typed arguments, typed results, then the u8 scratch results."""
    return dict(symbol=f"{name}_{combo['suffix']}",
                args=[FFI_DTYPES[d] for d in combo["inputs"]],
                rets=[FFI_DTYPES[d] for d in combo["outputs"]] + ["U8"] * n_ws,
                dtypes=combo["inputs"] + combo["outputs"],
                out_itemsize=[DTYPES[d].itemsize for d in combo["outputs"]])


def nvcc_command(op_name: str) -> str:
    """How to build an emitted ``.cu`` handler by hand (``$JAX_FFI``: ``jax.ffi.include_dir()``):
    without ``--use_fast_math``, as fusegen's own CUDA builds, so results agree with NumPy's
    (MindSpore's GPU flags have it; a JAX handler has no such convention to follow)."""
    arch = " ".join(f"-gencode arch=compute_{a},code=sm_{a}" for a in CUDA_DEFAULT_ARCHS)
    return (f"nvcc -std=c++17 --shared -Xcompiler -fPIC -O3 --expt-relaxed-constexpr {arch} "
            f'-I"$JAX_FFI" -o {op_name}_xla_ffi.so {op_name}_xla_ffi.cu')


def emit_xla(op: OpDef, device: str = "cpu", dtypes=None, ranks=None, shapes=None) -> XlaEmitted:
    """The XLA FFI source for ``op``: one handler per dtype combination (see ``fusegen.abi_emit.emit``).

    ``device="cuda"`` renders the CUDA kernels of fusegen's MindSpore-AOT ``.cu`` (its stage code,
    ``_cuda_stages.inc.j2``, and its plain data, ``emitters.cuda.combo_data``) behind handlers
    that take XLA:GPU's stream."""
    if device not in SUPPORTED_DEVICES:
        raise NotImplementedError(f"abi='xla-ffi' device={device!r} is not available: use 'cpu' or 'cuda'")
    op, ranks, shapes = specialize.specialization(op, ranks, shapes, dtypes)
    op = scan_form(op)   # scans as scan stages (or, where they read pieces, composed)
    _check_attrs(op)
    # (values shared between stages: stored by the CPU handlers, plan.shared; CUDA recomputes)
    plan = build_plan(op, share=device == "cpu")
    combos = parse_dtypes(op, dtypes)
    name = c_name(op.name)
    n_ws = len(plan.buffers)
    extra: dict = {}
    if device == "cuda":
        combo_data = [cuda.combo_data(op, plan, c, ranks) for c in combos]
        extra = dict(nvcc_command=nvcc_command(op.name))
    else:
        combo_data = [mindspore_cpu.combo_data(op, plan, c, ranks) for c in combos]
    # The keys the shared partials read are exactly abi_emit.emit's; the rest is XLA's.
    data = template_data(op, plan, combo_data, errors=ERRORS_XLA, spec_ranks=ranks, spec_shapes=shapes,
                         ffi_attrs=_ffi_attr_data(op),
                         handlers=[_handler_data(name, c, n_ws) for c in combo_data], fills=device == "cpu", **extra)
    template, suffix = _TEMPLATES[device]
    src = env().get_template(template).render(**data)
    keys = [tuple(d.name for d in c) for c in combos]
    main = f"{op.name}_xla_ffi{suffix}"
    return XlaEmitted(
        {main: src}, main, name, {**{i: f"{n}: {m}" for i, (n, m) in enumerate(data["errors"])},
                                  **{c: f"{n}: {m}" for c, n, m in data["view_errors"]}}, keys,
        device=device,
        handlers={k: h["symbol"] for k, h in zip(keys, data["handlers"])},
        out_dtypes={k: tuple(c["outputs"]) for k, c in zip(keys, combo_data)},
        workspace_nodes=[op.graph.idx(b) for b in plan.buffers],
        workspace_itemsize={k: tuple(c["ws_itemsize"]) for k, c in zip(keys, combo_data)})


def legacy_opaque(op: OpDef, shapes, attrs: dict) -> str:
    """The opaque string a ``<handler>_legacy`` entry point reads (format: see the template):
    every operand's shape (inputs, outputs, scratch), then the bound attribute values."""
    parts = ["fg1"]
    for s in shapes:
        parts += [str(len(s)), *(str(int(d)) for d in s)]
    for name, spec in op.attrs.items():
        v, t = attrs[name], spec.type
        if t in (AttrType.BOOL, AttrType.INT):
            parts.append(str(int(v)))
        elif t is AttrType.FLOAT:
            parts.append(repr(float(v)))
        elif t is AttrType.STR:
            parts.append(f"{len(v.encode())}:{v}")
        else:
            conv = (lambda x: str(int(x))) if t is AttrType.INTS else (lambda x: repr(float(x)))
            parts += [str(len(v)), *(conv(x) for x in v)]
    return " ".join(parts)


def workspace_bytes(emitted: XlaEmitted, combo: tuple[str, ...], spec) -> list[int]:
    """Bytes of each scratch result for one call (``spec``: ``fusegen.infer``'s result)."""
    out = []
    for node, itemsize in zip(emitted.workspace_nodes, emitted.workspace_itemsize[combo]):
        n = 1
        for d in spec.info[node].shape:
            n *= d
        out.append(n * itemsize)
    return out


__all__ = ["FFI_DTYPES", "FFI_ATTRS", "XlaEmitted", "emit_xla", "legacy_opaque", "workspace_bytes"]
