"""Random numbers inside a traced op (``fg.random.uniform``, ``normal``, ``bernoulli``,
``randint``): the ``Op.RANDOM`` node and its shape and dtype rule.

A random tensor of shape ``S`` is one elementwise node over an *element counter*::

    counter = reshape(iota(prod(S)), S)              # element i's row-major index
    value   = RANDOM(counter, seed, offset[, p | low, high])   arg: RandomArg(kind, dtype)

Element ``i`` is a pure function of ``(seed, offset, counter[i])`` (docs/random.md, the
specification; fusegen/philox.py, the reference). Because the node is elementwise in its counter
and the counter is an iota, everything the plan does with elementwise ops and iotas applies: a
view of a random tensor is the same view of its counter (an iota access, map kind 5 of
docs/DESIGN-indexmaps), broadcasting and fusion need nothing new, and ``fg.grad`` recomputes the
numbers instead of storing them (the backward graph holds the same node). The lowerings compute
four elements per Philox call where the counter is contiguous in the loop (fusegen/lower/rng.py).

``seed`` and ``offset``: an int (checked to fit uint64; int64 values are taken modulo 2^64), an
int attribute, or a scalar integer tensor (uint64 or int64). ``p``: a float (or int) or float
attribute, rounded to float32 as the AOT ABI carries a float attribute, or a float tensor that
broadcasts to the shape. ``low``/``high``: ints or int attributes (values known to shape inference).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import dtypes as dt
from ..dtypes import DType
from ..errors import AttrError, DTypeError, TraceError
from .layout import iota, is_int, reshape, scalar
from .nodes import Node, Op
from .shapes import NodeInfo
from .trace import Attr, Tensor, TracedDType, make, op_prefix, operand, user_loc

KINDS = ("uniform", "normal", "bernoulli", "randint")
_FLOATS = ("float32", "float64")


@dataclass(frozen=True, slots=True)
class RandomArg:
    """What an ``Op.RANDOM`` node draws: ``kind`` (one of KINDS) and the result dtype."""

    kind: str
    dtype: DType

    def __repr__(self) -> str:
        return f"{self.kind} {self.dtype}"


#: the sources of each kind after (counter, seed, offset)
PARAMS = {"uniform": (), "normal": (), "bernoulli": ("p",), "randint": ("low", "high")}


def _where() -> str:
    return f" [at {user_loc()}]"


def _fail(kind: str, msg: str, exc=AttrError):
    raise exc(f"{op_prefix()}fg.random.{kind}: {msg}{_where()}")


def _u64_operand(kind: str, name: str, v) -> Node:
    """A seed or offset: an int (uint64, or int64 modulo 2^64), an int attribute or a tensor."""
    if is_int(v):
        v = int(v)
        if not -(1 << 63) <= v < (1 << 64):
            _fail(kind, f"{name}={v} does not fit in 64 bits (uint64, or int64 taken modulo 2^64)")
        return make(Op.CONST, (), ("int", v % (1 << 64)))
    if isinstance(v, Attr):
        if v.spec.type.value != "int":
            _fail(kind, f"{name} must be an int attribute; {v.spec.name!r} is {v.spec.type.value}")
        return v.node
    if isinstance(v, Tensor):
        return v.node
    _fail(kind, f"{name} must be an int, an int attribute or a scalar integer tensor, got {type(v).__name__} {v!r}")


def _counter(kind: str, shape) -> Node:
    """``reshape(iota(prod(shape)), shape)``: each element's row-major index."""
    if is_int(shape) or (isinstance(shape, Tensor) and not isinstance(shape, (tuple, list))):
        shape = (shape,)
    try:
        dims = tuple(shape)   # x.shape of unknown rank asks for a rank-specialized trace here
    except TraceError:
        raise
    except TypeError:
        _fail(kind, f"shape must be a tuple of ints, int attributes or dims (x.shape), got {shape!r}", TraceError)
    for d in dims:
        if is_int(d) and d < 0:
            _fail(kind, f"shape {tuple(dims)} has a negative dim", TraceError)
    nodes = [scalar(d, "a random shape's dim") for d in dims]
    size = Tensor(make(Op.CONST, (), ("int", 1)))
    for d in nodes:
        size = size * Tensor(d)
    return reshape(iota(size), tuple(Tensor(d) for d in nodes)).node


def _random(kind: str, dtype, seed, shape, offset, params=()) -> Tensor:
    d = dt.as_dtype(dtype)
    counter = _counter(kind, shape)
    srcs = (counter, _u64_operand(kind, "seed", seed), _u64_operand(kind, "offset", offset), *params)
    return Tensor(make(Op.RANDOM, srcs, RandomArg(kind, d)))


def _known(kind: str, dtype):
    """``dtype``, once it is one: a traced value's ``x.dtype`` in the op's generic trace makes the
    op trace again per input dtype, where it is (``trace.TracedDType``)."""
    if isinstance(dtype, TracedDType):
        dtype.unknown(f"fg.random.{kind}'s dtype=")
    return dtype


def _float_dtype(kind: str, dtype) -> DType:
    try:
        d = dt.as_dtype(_known(kind, dtype))
    except DTypeError:
        d = None
    if d is None or d.name not in _FLOATS:
        _fail(kind, f"dtype must be float32 or float64, got {dtype!r}", DTypeError)
    return d


def uniform(seed, shape, *, offset=0, dtype="float32") -> Tensor:
    """Uniform in [0, 1): float32 ``(w >> 8) * 2^-24`` from word ``i % 4`` of block ``i // 4``;
    float64 the top 53 bits of two words (docs/random.md)."""
    return _random("uniform", _float_dtype("uniform", dtype), seed, shape, offset)


def normal(seed, shape, *, offset=0, dtype="float32") -> Tensor:
    """Standard normal: Box-Muller on word pairs, float32 words (0, 1) -> elements 4q, 4q+1 and
    (2, 3) -> 4q+2, 4q+3 (cos, sin); float64 one pair of 53-bit uniforms per block (docs/random.md)."""
    return _random("normal", _float_dtype("normal", dtype), seed, shape, offset)


def bernoulli(seed, p, shape, *, offset=0) -> Tensor:
    """bool, True with probability ``p``: word ``i % 4`` of block ``i // 4`` is below ``p * 2^32``
    (compared exactly). A float (or float attribute) ``p`` must be in [0, 1] and is rounded to
    float32; a float tensor ``p`` broadcasts to ``shape`` (p <= 0 or NaN gives False, p >= 1 True)."""
    if isinstance(p, (bool, np.bool_)):
        _fail("bernoulli", f"p must be a float, got bool {p!r}")
    if isinstance(p, (int, float, np.integer, np.floating)) and not isinstance(p, Tensor):
        if not 0.0 <= float(p) <= 1.0:
            _fail("bernoulli", f"p={p!r} must be in [0, 1]")
        pn = make(Op.CONST, (), ("float", float(np.float32(p))))
    elif isinstance(p, Attr):
        if p.spec.type.value not in ("float", "int"):
            _fail("bernoulli", f"p must be a float attribute; {p.spec.name!r} is {p.spec.type.value}")
        pn = p.node
    elif isinstance(p, Tensor):
        pn = p.node
    else:
        _fail("bernoulli", f"p must be a float, a float attribute or a float tensor, got {type(p).__name__} {p!r}")
    return _random("bernoulli", dt.bool_, seed, shape, offset, (pn,))


def randint(seed, low, high, shape, *, offset=0, dtype="int64") -> Tensor:
    """Integers in [low, high), exactly uniform (Lemire's multiply-shift with rejection, redrawing
    from a deterministic chain of blocks: docs/random.md). ``low``/``high``: ints or int attributes."""
    try:
        d = dt.as_dtype(_known("randint", dtype))
    except DTypeError:
        d = None
    if d is None or not d.is_int:
        _fail("randint", f"dtype must be an integer dtype, got {dtype!r}", DTypeError)
    bounds = []
    for label, v in (("low", low), ("high", high)):
        if isinstance(v, Attr) and v.spec.type.value == "int" or is_int(v):
            bounds.append(operand(v))
        else:
            _fail("randint", f"{label} must be an int or an int attribute, got {type(v).__name__} {v!r}")
    return _random("randint", d, seed, shape, offset, tuple(bounds))


# --- the shape and dtype rule ------------------------------------------------------------------
def _is_int_kind(d) -> bool:
    return d == "int" or (isinstance(d, DType) and d.kind in "iu")


def infer_random(n: Node, srcs, fail) -> NodeInfo:
    """``Op.RANDOM``: the counter's shape, the arg's dtype; checks the parameters whose values
    are known (attributes, constants) and the dtypes and shapes of the others."""
    kind, out = n.arg.kind, n.arg.dtype
    counter, seed, offset = srcs[:3]
    for name, s in (("seed", seed), ("offset", offset)):
        if not _is_int_kind(s.dtype):
            fail(f"fg.random.{kind}: {name} must be an integer (uint64), got {s.dtype}", exc=DTypeError)
        if s.shape is not None and s.shape != ():
            fail(f"fg.random.{kind}: {name} must be a scalar, got shape {s.shape}")
        if isinstance(s.value, (int, np.integer)) and not -(1 << 63) <= int(s.value) < (1 << 64):
            fail(f"fg.random.{kind}: {name}={s.value} does not fit in 64 bits", exc=AttrError)
    if kind == "bernoulli":
        p = srcs[3]
        if not (p.dtype in ("float", "int") or (isinstance(p.dtype, DType) and p.dtype.is_float)):
            fail(f"fg.random.bernoulli: p must be a float, got {p.dtype}", exc=DTypeError)
        if p.value is not None and not (isinstance(p.value, (int, float)) and 0.0 <= float(p.value) <= 1.0):
            fail(f"fg.random.bernoulli: p={p.value!r} must be in [0, 1]", exc=AttrError)
        if p.shape is not None and counter.shape is not None:
            rank = len(counter.shape)
            ok = len(p.shape) <= rank and all(
                a in (1, b) or -1 in (a, b) for a, b in zip(p.shape, counter.shape[rank - len(p.shape):]))
            if not ok:
                fail(f"fg.random.bernoulli: p of shape {p.shape} does not broadcast to the shape {counter.shape}")
    if kind == "randint":
        low, high = srcs[3].value, srcs[4].value
        if low is not None and high is not None:
            info = np.iinfo(out.np)
            if not info.min <= int(low) < int(high) <= int(info.max) + 1:
                fail(f"fg.random.randint: need {info.min} <= low < high <= {int(info.max) + 1} for {out}, "
                     f"got low={low}, high={high}", exc=AttrError)
            if int(high) - int(low) >= 1 << 64:
                fail(f"fg.random.randint: high - low = {int(high) - int(low)} must be below 2^64", exc=AttrError)
    return NodeInfo(out, counter.shape, out)


__all__ = ["KINDS", "PARAMS", "RandomArg", "uniform", "normal", "bernoulli", "randint", "infer_random"]
