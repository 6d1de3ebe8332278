"""``Op.RANDOM`` (fusegen/graph/rng.py) in the emitted C++ and CUDA: the MindSpore-AOT ``.cc`` and
``.cu`` and the XLA FFI handlers. The C++ twin of fusegen/lower/rng.py, in two forms:

* **fills** (the CPU ``.cc`` and XLA CPU handlers, ``loop_counters``): where every random
  node's counter is the plain ``reshape(iota(prod(S)), S)`` fg.random makes, the op keeps the
  fast loop nests of ``_cpu_stages.inc.j2`` (fusion, tiles, row chunks): each counter is a
  *virtual operand* after the ABI's, a C-contiguous array of shape ``S`` whose "address" is the
  element's counter, so the runtime gives it strides like any input (``fg::read_strides``). Before
  each chunk of a loop the stage gets the chunk's values from ``fg::shared_fill``: where the
  counter has unit stride along the loop it fills the rest of the row four elements per Philox
  call (``fg::fill_<kind>``, vectorized) into a per-thread cache the group's later stages read
  (one cache per random node: ``fill_data``'s ``cache``), else each element's own block; the loop
  body reads the values (``buffered_text``);
* **per element** (``random_text``; the layout path of ``emitters.layout``, which evaluates any
  view chain of the counter, and the CUDA sources): every element computes its own Philox block
  and takes the word (or pair of words) its counter selects, the ``fg::*_at`` functions.

Both from templates/_philox.inc.j2, which the templates include only for an op with random nodes
(``template_data``). No workspace; the seed, offset and bounds are read like any scalar. The
values are the reference's (fusegen/philox.py) bit for bit, as the Numba backends' are: the same
formulas in the same IEEE and integer arithmetic (normal: the platform's log/sqrt/cos/sin,
within 2 ulp).
"""
from __future__ import annotations

from .. import dtypes as dt
from .. import philox
from ..errors import FusegenError
from ..ir import PIECEWISE, VIEWS, Node, Op, OpDef
from ..lower.rng import PER_ELEMENT, kind_key
from ..plan.access import Broadcast, View
from ..plan.exprs import reg_dtype

#: the partial's per-element functions: the Numba ones' names, but for bernoulli (its threshold
#: compare is in the partial; the Numba text compares the word itself)
_AT = {**PER_ELEMENT, ("bernoulli", "bool"): "bernoulli_at"}


def has_random(op: OpDef) -> bool:
    return any(n.op is Op.RANDOM for n in (op.graph.nodes if op.graph is not None else ()))


def template_data(op: OpDef) -> dict:
    """``random``: whether the templates include the Philox partial (rendered with ``philox``)."""
    return dict(random=has_random(op), philox=philox.template_data())


#: per ``kind_key``: the fill of templates/_philox.inc.j2 and its buffer's C++ element type
_FILLS = {("uniform", "float32"): ("fill_uniform_f32", "float"), ("uniform", "float64"): ("fill_uniform_f64", "double"),
          ("normal", "float32"): ("fill_normal_f32", "float"), ("normal", "float64"): ("fill_normal_f64", "double"),
          ("bernoulli", "bool"): ("fill_words", "uint32_t"), ("randint", "int"): ("fill_randint", "uint64_t")}


def _is_counter(n: Node) -> bool:
    """``reshape(iota(k), S)`` or a bare ``iota(k)``: a C-contiguous array of element numbers."""
    return n.op is Op.IOTA or (n.op is Op.RESHAPE and n.arg != "like" and n.srcs[0].op is Op.IOTA)


def loop_counters(op: OpDef, plan) -> dict[int, int]:
    """The CPU fills' virtual operands: counter node index -> its number among them (operand id
    ``kOperands + number``), when the op's only layout nodes are its random nodes' counters (and
    the dims and scalars their shapes are made of); otherwise (no random node, a view of a random
    tensor, other layout ops) ``{}``: the op keeps its path. The counters' accesses must be the
    plain ones (the counter broadcast into the domain), and no stage may read a dim as a value."""
    g = op.graph
    randoms = [n for n in g.nodes if n.op is Op.RANDOM]
    if not randoms or any(not _is_counter(r.srcs[0]) or kind_key(r) not in _FILLS for r in randoms):
        return {}
    counters = {id(r.srcs[0]) for r in randoms}
    parts = counters | {id(c.srcs[0]) for r in randoms for c in [r.srcs[0]] if c.op is Op.RESHAPE}
    for n in g.nodes:
        # (emitters.layout.LAYOUT_OPS but dims: those the layout rules evaluate before the loops)
        if (n.op in VIEWS or n.op in PIECEWISE or n.op in (Op.IOTA, Op.GATHER)) and id(n) not in parts:
            return {}
        for k, s in enumerate(n.srcs):   # an iota or counter read as anything but a counter
            if id(s) in parts and not ((n.op is Op.RANDOM and k == 0) or (n.op is Op.RESHAPE and id(n) in counters)):
                return {}
    out: dict[int, int] = {}
    for st in plan.stages:
        if st.params or st.instances:
            return {}
        for a in st.reads:
            if a.slot[0] != "iota":
                continue
            *view, last = a.steps
            node = view[0].node if len(view) == 1 and isinstance(view[0], View) else a.node
            if len(view) > 1 or last != Broadcast() or id(node) not in counters:
                return {}
            out.setdefault(g.idx(node), len(out))
    return out


def counter_of(g, access, counters: dict[int, int]) -> int:
    """The counter node (index) an iota access of ``loop_counters``' op reads."""
    node = access.steps[0].node if isinstance(access.steps[0], View) else access.node
    return g.idx(node)


def fill_data(ew, node: Node, ctx: tuple, counter_op: int, key: str) -> dict:
    """A stage's fill of random node ``node`` (its counter: operand ``counter_op``): the param's
    fields for _cpu_stages.inc.j2. ``ew`` writes the scalars (seed, offset, randint's bounds)
    before the loop; ``key`` names the buffer (``pk<key>``) and the chunk's values (``v<key>``)."""
    fn, ctype = _FILLS[kind_key(node)]
    extra = [_uint64(ew, s, ctx) for s in node.srcs[3:5]] if node.arg.kind == "randint" else []
    args = [_uint64(ew, node.srcs[1], ctx), _uint64(ew, node.srcs[2], ctx)]
    return dict(key=key, op=counter_op, name=f"v{key}", type=ctype, reg=ctype, fill=f"fg::{fn}",
                args=", ".join(args), extra="".join(f", {e}" for e in extra), invariant=False,
                cache=f"rc{ew.spec.opdef.graph.idx(node)}")


def buffered_text(ew, node: Node, ctx: tuple, raw: str) -> str:
    """The value of random node ``node`` from its fill's value ``raw`` (a word for bernoulli,
    low + offset for randint)."""
    kind, d = node.arg.kind, node.arg.dtype
    if kind == "bernoulli":
        return f"fg::bernoulli_p({raw}, {_p_text(ew, node, ctx)})"
    if kind == "randint":
        return _randint_cast(ew, d, raw)
    return raw


def _p_text(ew, node: Node, ctx: tuple) -> str:
    """bernoulli's p as a double: a float attribute or constant is a C++ float in the AOT ABI
    (rounded to float32 first, as the Numba text does); a tensor p is used as it is."""
    p = node.srcs[3]
    pv = ew.value(p, None, ctx)
    weak = isinstance(ew.spec.of(p).dtype, str)
    return f"double({f'float({pv})' if weak else pv})"


def _randint_cast(ew, d, text: str) -> str:
    """low + offset modulo 2^64 lies in [low, high): exact in the dtype."""
    reg = ew.d.type_name(reg_dtype(d))
    return f"{reg}(int64_t({text}))" if d.kind == "i" else f"{reg}({text})"


def _uint64(ew, src: Node, ctx: tuple) -> str:
    """A seed, offset or randint bound as uint64_t: an int modulo 2^64 (a negative attribute
    wraps), as fusegen/lower/rng.py's ``uint64_text``."""
    if src.op is Op.CONST:
        return f"UINT64_C({int(src.arg[1]) % (1 << 64)})"
    text = ew.value(src, None, ctx)
    return f"uint64_t({text})" if ew.spec.of(src).dtype is dt.uint64 else f"uint64_t(int64_t({text}))"


def random_text(ew, node: Node, ctx: tuple) -> str:
    """``plan.exprs.ExprWriter``'s ``random`` hook for the C++ dialects: the node's value at the
    current element, in its register type."""
    kind, d = node.arg.kind, node.arg.dtype
    fn = _AT.get(kind_key(node))
    if fn is None:
        raise FusegenError(f"{ew.spec.opdef.name}: fg.random.{kind}: no kernel for dtype {d}")
    args = [_uint64(ew, node.srcs[1], ctx), _uint64(ew, node.srcs[2], ctx),
            f"uint64_t({ew.value(node.srcs[0], dt.int64, ctx)})"]
    if kind == "bernoulli":
        args.append(f"fg::bernoulli_threshold({_p_text(ew, node, ctx)})")
    elif kind == "randint":
        args += [_uint64(ew, s, ctx) for s in node.srcs[3:5]]
    text = f"fg::{fn}({', '.join(args)})"
    return _randint_cast(ew, d, text) if kind == "randint" else text
