"""``OpDef``, what ``@fg.op`` returns: a Python function traced into a ``Graph``, with its
tensor inputs, typed attributes and in-place declarations.

Calling an op on traced tensors inlines it; calling it on arrays runs it eagerly through the
executor the runtime registers here (``set_eager_executor``): the IR never imports the runtime.
"""
from __future__ import annotations

import hashlib
import inspect
import re
import threading
import typing

from .. import dtypes as dt
from ..dtypes import AttrType
from ..errors import ArgumentError, AttrError, FusegenError, TraceError
from . import requests
from .canon import materialize_pieces, share_common
from .nodes import AttrSpec, Graph, Op, is_static
from .text import op_text
from .trace import Attr, NeedsDtype, NeedsRank, NeedsShape, Tensor, make, named, tracing

_FAMILY_LOCK = threading.Lock()   # (``specialize``: one list of specializations per signature)


def _exact(pairs) -> list:
    return [(a, dt.exact_attr(v)) for a, v in pairs]


#: specializations kept per input signature (the oldest go first; a later call traces it again)
MAX_SPECIALIZATIONS = 256

#: What runs an op called on arrays: ``executor(op, *args, **kwargs)``; the runtime sets it.
_eager_executor = None


def set_eager_executor(executor) -> None:
    """Make ``executor(op, *arrays, **kwargs)`` what an op called on arrays does (the runtime
    registers its default kernel here when it is imported)."""
    global _eager_executor
    _eager_executor = executor


#: What a trace that needs more than the generic one specializes on.
_MODES = {NeedsDtype: "dtype", NeedsRank: "rank", NeedsShape: "shape"}


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
        self._inplace_spec = inplace
        self._children: dict = {}
        # a trace that depends on the inputs' dtypes (``fg.grad``'s, on which are complex):
        # ``dtype_variant(dtypes)`` gives the OpDef to run (``for_dtypes``); None: this one
        self.dtype_variant = None
        self.parent: OpDef | None = None
        # a specialization whose body read an input's dtype (``x.dtype``): it serves those dtypes only
        self.reads_dtypes = False
        # "dtype"/"rank"/"shape": the body needs input dtypes/ranks/shapes, so the op is traced per
        # signature (``specialize``); ``why`` says which line asked for it.
        self.specializes: str | None = None
        self.why = ""
        try:
            self.graph = self._trace(None, self._generic_shape)
        except (NeedsDtype, NeedsRank, NeedsShape) as e:
            self.specializes, self.why, self.graph = _MODES[type(e)], str(e), None
            self.multi_output = None
            self.inplace = {}
            self.key = hashlib.sha256(f"{self.name}|{self.specializes}|{self.why}".encode()).hexdigest()[:16]
            return
        self._finish()

    def _generic_shape(self, node):
        """A node's shape with every input of unknown rank: known where the ops fix it (a
        reshape's rank). Best effort: what cannot be inferred without values is unknown."""
        from .rules import infer_nodes
        try:
            return infer_nodes(self, Graph((node,)), [dt.float64] * len(self.inputs), [None] * len(self.inputs),
                               {})[-1].shape
        except Exception:  # noqa: BLE001 - e.g. an attribute axis, whose value a generic trace lacks
            return None

    def _finish(self) -> None:
        self.multi_output = self._multi
        self.inplace: dict[int, int] = requests.declared_inplace(self, self._inplace_spec)  # output -> input
        self.key = hashlib.sha256(self.text(locations=False).encode()).hexdigest()[:16]

    # --- specialization -----------------------------------------------------------------------
    def for_dtypes(self, dtypes) -> OpDef:
        """The op whose trace serves these input dtypes: itself, unless its trace depends on them
        (``dtype_variant``: ``fg.grad``'s backward op is traced per set of complex inputs)."""
        if self.dtype_variant is None:
            return self
        try:
            dtypes = tuple(dt.as_dtype(d) for d in dtypes)
        except FusegenError:   # a dtype fusegen lacks: the op's own checks name it
            return self
        return self.dtype_variant(dtypes)

    def specialize(self, dtypes, shapes, attrs: dict) -> OpDef:
        """The op traced for these input dtypes and shapes (the shapes' ranks only, for an op that
        needs only ranks) and bound attributes: itself when the generic trace serves every
        signature; else a rank- or shape-fixed ``OpDef`` of the same name, traced once and cached."""
        variant = self.for_dtypes(dtypes)
        if variant is not self:
            return variant.specialize(dtypes, shapes, attrs)
        if self.specializes is None:
            return self
        from .rules import infer_nodes   # the rules need the IR's nodes, not the op: no circle
        dtypes = tuple(dt.as_dtype(d) for d in dtypes)
        given = tuple(None if s is None else tuple(int(d) for d in s) for s in shapes)
        mode = self.specializes
        if mode != "dtype" and (any(s is None for s in given) or (mode == "shape" and any(-1 in s for s in given))):
            raise TraceError(f"op {self.name} is traced per input {mode} ({self.why}): it needs "
                             f"known input {mode}s, got {given}")
        # per dtype: shapes stay generic (unknown ranks), as in the generic trace
        shapes = given if mode == "shape" else (None,) * len(given) if mode == "dtype" else \
            tuple((-1,) * len(s) for s in given)
        # A trace sees attributes as symbols; their values reach it only through the shapes it
        # asks for (``x[..., :n]``). So a specialization serves every attribute value set that
        # agrees on the attributes its shapes read (``consulted``): a seed changed per call does
        # not trace again (it did, 28 ms a call with dropout_add_layer_norm, and kept each trace).
        family = self._children.setdefault((mode, shapes, dtypes), [])
        for child in family:
            if _exact(child.consulted) == _exact((a, attrs.get(a)) for a, _ in child.consulted):
                return child
        child = OpDef.__new__(OpDef)
        child.__dict__.update({k: v for k, v in self.__dict__.items() if k not in ("graph", "_children")})
        child._children, child.parent, child.specializes, child.why = {}, self, None, ""
        child.dtype_variant = None   # its parent chose it for these dtypes
        consulted: set = set()

        def shape_fn(node):
            if mode == "dtype":
                return self._generic_shape(node)
            return infer_nodes(child, Graph((node,)), dtypes, shapes, attrs, consulted)[-1].shape

        def dtype_fn(node):
            child.reads_dtypes = True   # (then this trace serves these dtypes only)
            return infer_nodes(child, Graph((node,)), dtypes, shapes, attrs)[-1].dtype

        try:
            child.graph = child._trace(mode, shape_fn, dtype_fn)
        except (NeedsRank, NeedsShape) as e:
            wider = _MODES[type(e)]
            if mode == "shape" or mode == wider:
                raise
            # dtypes were not enough (a rank, a dim): trace per rank or shape, which fix the dtypes too
            self.specializes, self.why = wider, str(e)
            return self.specialize(dtypes, given, attrs)
        except FusegenError:
            raise
        except Exception as e:   # the body's own Python (``b, s, d = x.shape`` at rank 2): name the op
            raise TraceError(f"op {self.name} cannot be traced for input {mode}s "
                             f"{[len(s) for s in given] if mode == 'rank' else list(given)}: "
                             f"{type(e).__name__}: {e}") from e
        child._finish()
        child.consulted = tuple((a, attrs.get(a)) for a in sorted(consulted))
        with _FAMILY_LOCK:
            for other in family:   # (another thread traced the same one meanwhile)
                if _exact(other.consulted) == _exact(child.consulted):
                    return other
            family.append(child)
            if len(family) > MAX_SPECIALIZATIONS:   # (an attribute that decides shapes, new each call)
                del family[0]
        return child

    @property
    def specializations(self) -> list:
        """The ops traced so far for this one's signatures (``specialize``), oldest first."""
        return [c for family in list(self._children.values()) for c in list(family)]

    def arity(self, who: str = "") -> tuple[int, bool]:
        """How many outputs the op has, and whether it returns a tuple. An op traced per rank or
        shape is traced once at a small rank to count them (a count that depends on shapes, as
        unstack's does, is refused where a specialization disagrees). ``who``: the caller, for
        the error (``fg.grad``, ``fusegen.torch``)."""
        if self.graph is not None:
            return len(self.graph.outputs), bool(self.multi_output)
        wrt = getattr(self, "wrt", None)
        if wrt is not None:   # fg.grad's backward op: a tuple of one gradient per input it differentiates
            return len(wrt), True
        for rank in range(1, 5):
            try:
                child = self.specialize(("float32",) * len(self.inputs), ((4,) * rank,) * len(self.inputs),
                                        {a.name: a.default for a in self.attrs.values() if a.default is not None})
                return len(child.graph.outputs), bool(child.multi_output)
            except Exception:   # noqa: BLE001 - only probing: another rank may trace
                continue
        raise TraceError(f"{who + ': ' if who else ''}op {self.name} is traced per input {self.specializes} "
                         f"({self.why}), and no small probe shape traced it to count its outputs")

    def _attr_spec(self, p, ann) -> AttrSpec:
        t = None if ann is inspect.Parameter.empty else dt.attr_type_from_annotation(ann)
        if t is None and ann is inspect.Parameter.empty and p.default is not p.empty:
            t = {bool: AttrType.BOOL, int: AttrType.INT, float: AttrType.FLOAT, str: AttrType.STR}.get(
                type(p.default))
        if t is None:
            got = "no annotation" if ann is inspect.Parameter.empty else f"got {ann!r}"
            raise TraceError(f"op {self.name}: attribute {p.name!r} needs a type annotation among bool, int, "
                             f"float, str, list[int], list[float], list[list[int]], list[list[float]] (a list also as "
                             f"tuple[int, ...] or Sequence[int]); {got}")
        if p.default is p.empty:
            return AttrSpec(p.name, t, None, True)
        try:
            default = dt.coerce_attr(t, p.default)
        except TypeError as e:
            raise AttrError(f"op {self.name}: default of attribute {p.name!r}: {e}") from None
        return AttrSpec(p.name, t, default, False)

    def _trace(self, mode: str | None = None, shape_fn=None, dtype_fn=None) -> Graph:
        with tracing(self.name, mode, shape_fn, dtype_fn) as declared_checks:
            args = [Tensor(make(Op.INPUT, (), i)) for i in range(len(self.inputs))]
            kwargs = {n: Attr(make(Op.ATTR, (), n), s) for n, s in self.attrs.items()}
            try:
                out = self.fn(*args, **kwargs)
            except FusegenError as e:   # (raised by a helper: named for the op and the line)
                better = named(e, self.name)
                if better is None:
                    raise
                raise better from e
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
        roots = g.outputs + tuple(x for c in g.checks for x in c[:2])
        new = materialize_pieces(g.nodes, roots)
        new = share_common(Graph(new).nodes if new is not roots else g.nodes, new)
        if new is not roots:   # pieces read through a reshape or by a reduction are copied first; one node a value
            k = len(g.outputs)
            g = Graph(new[:k], tuple((new[k + 2 * i], new[k + 2 * i + 1], c[2]) for i, c in enumerate(g.checks)))
        for i, o in enumerate(g.outputs):
            # attributes, constants and dims alone: no loop computes them (arange, full, eye and
            # friends, which have a shape, are fine)
            if is_static(o):
                at = f" [at {o.loc}]" if o.loc else ""
                raise TraceError(f"op {self.name}: output {i} does not depend on any input or shape: it is a "
                                 f"scalar of attributes and constants; use fg.full((), value) for a 0-d "
                                 f"result{at}")
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
        # Re-tracing the body on the caller's tensors inlines it. Attributes given as Python
        # values are bound as a call on arrays binds them (``scale=2`` for a float attribute is
        # 2.0, not a weak int that would keep x's integer dtype; defaults likewise); traced ones
        # (the caller's attributes, dims, tensors) pass through.
        return self.fn(*args, **self.bind_attrs(kwargs, traced=True))

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
    def bind_attrs(self, given: dict, traced: bool = False) -> dict:
        """Validate attribute values; fill defaults. Returns canonical values by name.
        ``traced``: a traced value (inlining into another op's trace) is taken as it is."""
        out = {}
        for n in given:
            if n in self.inputs:   # (a tensor given by keyword: inputs are positional)
                raise ArgumentError(f"op {self.name}: {n!r} is a tensor input, given by keyword; pass the inputs "
                                    f"positionally, in order ({', '.join(self.inputs)})")
            if n not in self.attrs:
                known = ", ".join(self.attrs) or "none"
                raise AttrError(f"op {self.name}: unknown attribute {n!r} (attributes: {known})")
        for n, spec in self.attrs.items():
            if traced and isinstance(given.get(n), Tensor):
                out[n] = given[n]
            elif n in given:
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
        if self.graph is None:   # traced per rank or shape: say why, and show what was traced so far
            head = (f"op {self.name}({', '.join(self.inputs)}): traced per input {self.specializes} "
                    f"({self.why}); {len(self.specializations)} specialization(s) so far")
            return "\n".join([head] + [c.text(locations) for c in self.specializations])
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
