"""Gathers in the emitted C++ and CUDA (issue #17): plain data for the MindSpore-AOT ``.cc``/``.cu``
and the XLA FFI handlers (the C++ twin of ``fusegen.lower.gathers``, which serves the Numba backends).

A gather reads its source at an address with one data-dependent term: the checked index times
the stride of the gathered axis. An op with gathers takes the layout path (``emitters.layout``):

* its ``infer_shapes`` runs ``fg::gather_rule`` (``_fg_gathers.inc.j2``, the twin of
  ``fusegen.graph.shapes._gather``): the shape, and params (axis, extent of the source on it);
* each access through a gather gets the view step ``fg::views::gather`` (the twin of
  ``fusegen.plan.layout._gather``), and each gathered read's axis stride (*term*, the twin of
  ``plan.layout.gather_stride``) is computed per call in the stage's nest function (``gs[m]``);
* the loop body computes each gather's index once per element (``index_lines``: checked,
  wrapped or clipped; the address is always clamped inside the axis, so no read is ever out of
  bounds) and adds ``index * gs[m]`` to the address of every read through it (``address_terms``);
* a ``mode="raise"`` gather counts bad indices per outer iteration (vectorizable: a sum and a
  select, no branch in the inner loop); after the loops the first bad one is recorded with its
  value and the kernel returns ``FG_ERR_GATHER``, whose ``ErrorString`` text is the message the
  Numba backends raise (``fusegen.BoundsError``: op, node, axis, index value). The Python runtime
  (``fusegen.native``, ``fusegen.jax``) raises that exception with that text;
* the CUDA kernels (``_cuda_views.inc.j2``, ``_cuda_gathers.inc.j2``) compute the same index lines
  and send a bad one to a device record (``atomicMin`` on (stage, position, check); the value kept
  is the smallest key's); ``run`` waits for the stream once and turns it into that error.
"""
from __future__ import annotations

from ..graph.text import where_text
from ..ir import Node, Op, OpDef, nodes_of
from ..lower.gathers import address_terms
from ..plan.access import Gather

#: The gather error row, after the layout rows (only in the tables of ops with gathers).
GATHER_ERRORS: list[tuple[str, str]] = [
    ("FG_ERR_GATHER", "a gathered index is out of bounds (the message names the op, the node, the axis and the "
                      "index)"),
]

#: At most this many gathered reads (address terms) per stage.
MAX_TERMS = 16


def has_gathers(op: OpDef) -> bool:
    return op.graph is not None and any(n.op is Op.GATHER for n in op.graph.nodes)


def checks(op: OpDef) -> list[Node]:
    """The op's ``mode="raise"`` gathers, in graph order: check ``c`` is row ``c`` of the tables."""
    return [n for n in op.graph.nodes if n.op is Op.GATHER and n.arg.mode == "raise"]


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def template_data(op: OpDef) -> dict:
    """What the templates read: each check's message prefix (the Numba backend's, up to the
    index value) as a C string literal."""
    rows = []
    for n in checks(op):
        fn = "take" if n.arg.kind == "take" else "take_along_axis"
        rows.append(dict(node=op.graph.idx(n), where=_c_string(f"{where_text(op, n)}: {fn}")))
    return dict(gathers=has_gathers(op), gather_checks=rows)


def rule(op: OpDef, n: Node) -> dict:
    """``layout_rules``' entry of a gather node."""
    g = op.graph
    return dict(kind="gather", x=g.idx(n.srcs[0]), idx=g.idx(n.srcs[1]), take=n.arg.kind == "take",
                axis=int(n.arg.axis))


class StageTerms:
    """One stage's gathered reads: term ``m`` per (leaf, steps up to its gather) pair, in the
    order the stage's accesses list them."""

    def __init__(self, st):
        self.term_of: dict[tuple, int] = {}
        self.of_access: dict[tuple, int] = {}   # (access index, step index) -> term
        for k, a in enumerate(st.reads):
            for j, step in enumerate(a.steps):
                if isinstance(step, Gather) and step.index == 0:
                    key = (a.node, a.steps[:j + 1])
                    if key not in self.term_of:
                        self.term_of[key] = len(self.term_of)
                    self.of_access[(k, j)] = self.term_of[key]
        if len(self.term_of) > MAX_TERMS:
            raise NotImplementedError(f"stage {st.index} reads {len(self.term_of)} arrays through gathers; emitted "
                                      f"kernels support {MAX_TERMS}")

    def __len__(self) -> int:
        return len(self.term_of)

    def address_terms(self, n: Node, ctx: tuple, ew) -> str:
        """`` + j * gs[m]`` for every gather between leaf ``n`` and the stage root in ``ctx``."""
        return address_terms(self.term_of, n, ctx, ew, "gs[{}]")


class IndexWriter:
    """ExprWriter's ``gather`` hook for C++: the index arithmetic of one loop body; ``flags``
    lists (check, bad-flag name, raw-index name) for the body's bad-index bookkeeping."""

    def __init__(self, op: OpDef, graph_idx):
        self.checks = checks(op)
        self.idx = graph_idx
        self.flags: list[dict] = []

    def __call__(self, node: Node, ctx: tuple, raw: str, ew) -> str:
        mode = node.arg.mode
        name = f"{ew.prefix}g{self.idx(node)}_{len(ew.gathered)}"
        if mode == "wrap":      # Python's modulo (the divisor's sign); the extent is never 0 here
            ew.lines.append((name + "m", f"int64_t({raw}) % int64_t(gn{self.idx(node)})"))
            ew.lines.append((name, f"{name}m < 0 ? {name}m + gn{self.idx(node)} : {name}m"))
        elif mode == "clip":
            ew.lines.append((name, f"std::min(std::max(int64_t({raw}), int64_t(0)), gn{self.idx(node)} - 1)"))
        else:
            ew.lines.append((name + "r", f"int64_t({raw})"))
            ew.lines.append((name + "a", f"{name}r < 0 ? {name}r + gn{self.idx(node)} : {name}r"))
            ew.lines.append((name + "b", f"int64_t({name}a < 0) | int64_t({name}a >= gn{self.idx(node)})"))
            self.flags.append(dict(c=self.checks.index(node), bad=name + "b", raw=name + "r"))
            ew.lines.append((name, f"std::min(std::max({name}a, int64_t(0)), gn{self.idx(node)} - 1)"))
        return name


def stage_extents(op: OpDef, st) -> list[dict]:
    """The gathers a stage's bodies read (``gn<node>``: the source's extent on the axis, a
    loop-invariant local)."""
    roots = [r.srcs[0] for r in st.reductions] + [n for _, n in st.writes]
    return [dict(node=op.graph.idx(n)) for n in nodes_of(roots) if n.op is Op.GATHER]
