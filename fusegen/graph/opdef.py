"""``OpDef``, what ``@fg.op`` returns: a Python function traced into a ``Graph``, with its
tensor inputs, typed attributes and in-place declarations.

Calling an op on traced tensors inlines it; calling it on arrays runs it eagerly through the
executor the runtime registers here (``set_eager_executor``): the IR never imports the runtime.
"""
from __future__ import annotations

import hashlib
import inspect
import re
import typing

from .. import dtypes as dt
from ..dtypes import AttrType
from ..errors import ArgumentError, AttrError, TraceError
from . import requests
from .nodes import AttrSpec, Graph, Op
from .text import op_text
from .trace import Attr, Tensor, make, tracing

#: What runs an op called on arrays: ``executor(op, *args, **kwargs)``; the runtime sets it.
_eager_executor = None


def set_eager_executor(executor) -> None:
    """Make ``executor(op, *arrays, **kwargs)`` what an op called on arrays does (the runtime
    registers its default kernel here when it is imported)."""
    global _eager_executor
    _eager_executor = executor


class OpDef:
    """A traced fused op: what ``@fg.op`` returns.

    Call it on arrays to run it with the default backend (Numba, CPU); call it on
    traced tensors inside another ``@fg.op`` to inline it.
    """

    def __init__(self, fn, name: str | None = None, inplace=None):
        self.fn = fn
        # The name becomes C symbols and file names: "<lambda>" -> "lambda"
        self.name = re.sub(r"\W", "", name or fn.__name__) or "fused_op"
        if self.name[0].isdigit():
            self.name = "op_" + self.name
        self.doc = fn.__doc__
        sig = inspect.signature(fn)
        try:
            hints = typing.get_type_hints(fn)
        except Exception:  # unresolvable string annotations: fall back to the raw text
            hints = {}
        self.inputs: list[str] = []
        self.attrs: dict[str, AttrSpec] = {}
        for p in sig.parameters.values():
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                if p.default is not p.empty:
                    raise TraceError(f"op {self.name}: tensor parameter {p.name!r} cannot have a default; "
                                     "make attributes keyword-only (after *)")
                self.inputs.append(p.name)
            elif p.kind is p.KEYWORD_ONLY:
                if p.name in requests.RESERVED:
                    raise TraceError(f"op {self.name}: an attribute cannot be named {p.name!r}: kernel calls "
                                     "take that keyword for themselves")
                self.attrs[p.name] = self._attr_spec(p, hints.get(p.name, p.annotation))
            else:
                raise TraceError(f"op {self.name}: *args/**kwargs are not supported ({p})")
        self.graph = self._trace()
        self.multi_output = self._multi
        self.inplace: dict[int, int] = requests.declared_inplace(self, inplace)  # output -> input it may overwrite
        self.key = hashlib.sha256(self.text(locations=False).encode()).hexdigest()[:16]

    def _attr_spec(self, p, ann) -> AttrSpec:
        t = None if ann is inspect.Parameter.empty else dt.attr_type_from_annotation(ann)
        if t is None and ann is inspect.Parameter.empty and p.default is not p.empty:
            t = {bool: AttrType.BOOL, int: AttrType.INT, float: AttrType.FLOAT, str: AttrType.STR}.get(
                type(p.default))
        if t is None:
            got = "no annotation" if ann is inspect.Parameter.empty else f"got {ann!r}"
            raise TraceError(f"op {self.name}: attribute {p.name!r} needs a type annotation among bool, int, "
                             f"float, str, list[int], list[float], list[list[int]], list[list[float]]; {got}")
        if p.default is p.empty:
            return AttrSpec(p.name, t, None, True)
        try:
            default = dt.coerce_attr(t, p.default)
        except TypeError as e:
            raise AttrError(f"op {self.name}: default of attribute {p.name!r}: {e}") from None
        return AttrSpec(p.name, t, default, False)

    def _trace(self) -> Graph:
        with tracing(self.name) as declared_checks:
            args = [Tensor(make(Op.INPUT, (), i)) for i in range(len(self.inputs))]
            kwargs = {n: Attr(make(Op.ATTR, (), n), s) for n, s in self.attrs.items()}
            out = self.fn(*args, **kwargs)
            checks = tuple(declared_checks)
        self._multi = isinstance(out, (tuple, list))
        outs = tuple(out) if self._multi else (out,)
        if not outs:
            raise TraceError(f"op {self.name} returns no outputs")
        nodes = []
        for i, o in enumerate(outs):
            if not isinstance(o, Tensor):
                raise TraceError(f"op {self.name}: output {i} is a {type(o).__name__}, not a traced tensor")
            nodes.append(o.node)
        g = Graph(tuple(nodes), checks)
        for i, o in enumerate(g.outputs):
            if not any(n.op is Op.INPUT for n in Graph((o,)).nodes):
                at = f" [at {o.loc}]" if o.loc else ""
                raise TraceError(f"op {self.name}: output {i} does not depend on any input; "
                                 f"its shape would be undefined{at}")
        return g

    # --- calling ------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if any(isinstance(a, Tensor) for a in args):
            return self._inline(*args, **kwargs)
        if _eager_executor is None:  # only when fusegen.graph is used without `import fusegen`
            raise ArgumentError(f"op {self.name}: no runtime is loaded to run it on arrays (import fusegen)")
        return _eager_executor(self, *args, **kwargs)  # the default kernel: Numba on the CPU

    def _inline(self, *args, **kwargs):
        if len(args) != len(self.inputs):
            raise ArgumentError(f"op {self.name} takes {len(self.inputs)} inputs, got {len(args)}")
        # Re-tracing the body on the caller's tensors inlines it (attributes pass through).
        return self.fn(*args, **kwargs)

    def signature_for(self, tensors: list[str]) -> inspect.Signature:
        """A signature with ``tensors`` as tensor parameters and this op's attributes: how
        ops derived from this one (gradients, write requests) are declared for tracing."""
        P = inspect.Parameter
        return inspect.Signature(
            [P(t, P.POSITIONAL_OR_KEYWORD) for t in tensors]
            + [P(s.name, P.KEYWORD_ONLY, annotation=s.type.value, default=P.empty if s.required else s.default)
               for s in self.attrs.values()])

    def with_requests(self, accumulate=(), skip=()) -> OpDef:
        """This op with the outputs in ``accumulate`` added to new inputs ``prev<k>`` and those
        in ``skip`` dropped (see ``fusegen.graph.requests``): what ``kernel(..., accumulate=...,
        skip=...)`` runs, and what ``fg.emit`` can ship as an add-to kernel."""
        return requests.derive(self, requests.output_indices(self, accumulate, "accumulate"),
                               requests.output_indices(self, skip, "skip"))

    # --- attributes ---------------------------------------------------------------------------
    def bind_attrs(self, given: dict) -> dict:
        """Validate attribute values; fill defaults. Returns canonical values by name."""
        out = {}
        for n in given:
            if n not in self.attrs:
                known = ", ".join(self.attrs) or "none"
                raise AttrError(f"op {self.name}: unknown attribute {n!r} (attributes: {known})")
        for n, spec in self.attrs.items():
            if n in given:
                try:
                    out[n] = dt.coerce_attr(spec.type, given[n])
                except TypeError as e:
                    raise AttrError(f"op {self.name}: attribute {n!r}: {e}") from None
            elif spec.required:
                raise AttrError(f"op {self.name}: missing required attribute {n!r} ({spec.type.value})")
            else:
                out[n] = spec.default
        return out

    # --- text form ----------------------------------------------------------------------------
    def text(self, locations: bool = True) -> str:
        return op_text(self, locations)

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return f"<fusegen op {self.name}({', '.join(self.inputs)}; {', '.join(self.attrs)})>"


def op(fn=None, *, name: str | None = None, inplace=None):
    """Decorator: trace a Python function into a fused op (an ``OpDef``).

    Positional parameters are tensor inputs; keyword-only parameters are attributes,
    typed by their annotation, with their default as default (none: required).
    ``inplace={output index: "input name"}`` (or just ``"input name"`` for output 0)
    declares outputs that may be written over an input's memory (``kernel(..., inplace=True)``).
    """
    if fn is None:
        return lambda f: OpDef(f, name, inplace)
    return OpDef(fn, name, inplace)
