"""``Op.RANDOM`` (fusegen/graph/rng.py) in the emitted C++ and CUDA: the MindSpore-AOT ``.cc`` and
``.cu`` and the XLA FFI handlers. The C++ twin of the per-element form of fusegen/lower/rng.py.

Every element computes its own Philox block and takes the word (or pair of words) its counter
selects: the ``fg::*_at`` functions of templates/_philox.inc.j2, which the templates include only
for an op with random nodes (``template_data``). No workspace: the counter is read like any iota
(the layout path, ``emitters.layout``, evaluates its view chain), the seed, offset and bounds
like any scalar. The values are the reference's (fusegen/philox.py) bit for bit, as the Numba
backends' are: the same formulas in the same IEEE and integer arithmetic (normal: the platform's
log/sqrt/cos/sin, within 2 ulp).
"""
from __future__ import annotations

from .. import dtypes as dt
from .. import philox
from ..errors import FusegenError
from ..ir import Node, Op, OpDef
from ..lower.rng import PER_ELEMENT, kind_key
from ..plan.exprs import reg_dtype

#: the partial's per-element functions: the Numba ones' names, but for bernoulli (its threshold
#: compare is in the partial; the Numba text compares the word itself)
_AT = {**PER_ELEMENT, ("bernoulli", "bool"): "bernoulli_at"}


def has_random(op: OpDef) -> bool:
    return any(n.op is Op.RANDOM for n in (op.graph.nodes if op.graph is not None else ()))


def template_data(op: OpDef) -> dict:
    """``random``: whether the templates include the Philox partial (rendered with ``philox``)."""
    return dict(random=has_random(op), philox=philox.template_data())


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
        p = node.srcs[3]
        pv = ew.value(p, None, ctx)
        # a float attribute or constant is a C++ float in the AOT ABI (rounded to float32 first,
        # as the Numba text does); a tensor p is used as it is
        weak = isinstance(ew.spec.of(p).dtype, str)
        args.append(f"fg::bernoulli_threshold(double({f'float({pv})' if weak else pv}))")
    elif kind == "randint":
        args += [_uint64(ew, s, ctx) for s in node.srcs[3:5]]
    text = f"fg::{fn}({', '.join(args)})"
    if kind == "randint":   # low + offset modulo 2^64 lies in [low, high): exact in the dtype
        reg = ew.d.type_name(reg_dtype(d))
        return f"{reg}(int64_t({text}))" if d.kind == "i" else f"{reg}({text})"
    return text
