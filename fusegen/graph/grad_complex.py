"""Complex values in ``fg.grad``: JAX's convention, and the rules that differ from the real ones.

The convention (JAX's, checked against ``jax.grad``/``jax.vjp``): the cotangent of a complex
value ``z = x + iy`` is ``dL/dx - i dL/dy`` for a real loss ``L``; for a complex output, the
cotangent given is that of the loss ``Re(sum(cot * out))``. So ``jax.grad(lambda z: |z|^2)(z)``
is ``2 conj(z)``. With it, the adjoint through a holomorphic function is the real rule itself,
``g * f'(z)`` in complex arithmetic (``exp``, ``log``, ``sqrt``, the trigonometric and
hyperbolic functions, arithmetic, ``where``, ``sum``/``prod``/``mean``: ``grad``'s rules as they
are). What differs is here:

* the functions that are not holomorphic: ``conj`` (the adjoint is ``conj(g)``), ``real``
  (``g``), ``imag`` (``-i g``), ``abs`` (``g conj(z) / |z|``, 0 at 0);
* rules whose real form calls what complex values refuse (``rsqrt`` in the arc functions'
  derivatives: ``1 / sqrt`` on the same branch instead);
* a real value promoted into a complex one (``x * 1j``, a cast): its adjoint is the real part
  of the complex one.

Which values are complex is known only per input dtypes (the IR is dtype-polymorphic), so
``fg.grad`` traces its backward op once per set of complex inputs (``OpDef.for_dtypes``);
complex constants and casts inside the op are seen in every trace.
"""
from __future__ import annotations

import hashlib

from ..dtypes import DType
from . import vocab as fg
from .cplx import REAL_RESULT
from .nodes import Node, Op, value_srcs
from .trace import Tensor, cast_like, where

# results that are real (bool or a real part) whatever their operands
_REAL = REAL_RESULT | {Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE, Op.AND, Op.OR, Op.NOT, Op.XOR, Op.ISNAN,
                       Op.ISINF, Op.ISFINITE, Op.SIGNBIT}


def complex_nodes(nodes, seeds: set[int]) -> set[int]:
    """The ids of ``nodes`` (in topological order) whose values are complex, given the inputs
    that are (``seeds``): complex constants and casts to a complex dtype start one too, and a
    value is complex where one of its operands is, unless its result is real (``_REAL``)."""
    out = set(seeds)
    for n in nodes:
        if id(n) in out:
            continue
        if n.op is Op.CONST:
            c = n.arg[0] == "complex"
        elif n.op is Op.CAST:
            c = n.arg.is_complex if isinstance(n.arg, DType) else id(n.srcs[1]) in out
        elif n.op in _REAL:
            c = False
        else:
            c = any(id(s) in out for s in value_srcs(n))
        if c:
            out.add(id(n))
    return out


def complex_rule(n: Node, g: Tensor, cx: set[int], real_rule):
    """``[(source, contribution, extra spans)]`` of ``n``: the rule for complex values where they
    change it (and the parts of a number, on real values too), else ``real_rule(n, g)``'s."""
    a = Tensor(n.srcs[0]) if n.srcs else None
    if n.op is Op.CONJ:
        return [(n.srcs[0], fg.conj(g), ())]
    if n.op is Op.REAL:
        return [(n.srcs[0], g, ())]
    if n.op is Op.IMAG:   # the imaginary part of a real value is the constant 0
        return [(n.srcs[0], g * -1j, ())] if id(n.srcs[0]) in cx else []
    if n.op is Op.CAST and id(n) in cx and id(n.srcs[0]) not in cx:
        return [(n.srcs[0], cast_like(fg.real(g), a), ())]
    if not n.srcs or id(n.srcs[0]) not in cx:
        return real_rule(n, g)
    if n.op is Op.ABS:
        v = Tensor(n)
        return [(n.srcs[0], where(v == 0, 0, g * (fg.conj(a) / v)), ())]
    one_minus_sq = lambda: 1.0 - a * a   # noqa: E731
    arcs = {
        Op.ASIN: lambda: g / fg.sqrt(one_minus_sq()),
        Op.ACOS: lambda: -g / fg.sqrt(one_minus_sq()),
        Op.ASINH: lambda: g / fg.sqrt(a * a + 1.0),
        # acosh(z) = log(z + sqrt(z + 1) sqrt(z - 1)): its derivative on the same branch
        Op.ACOSH: lambda: g / (fg.sqrt(a + 1.0) * fg.sqrt(a - 1.0)),
    }
    if n.op in arcs:
        return [(n.srcs[0], arcs[n.op](), ())]
    return real_rule(n, g)


def to_source(n: Node, src: Node, contribution: Tensor, cx: set[int]) -> Tensor:
    """A contribution from complex ``n`` to a real source takes the real part (the adjoint of
    promoting a real value to complex)."""
    if id(n) in cx and id(src) not in cx and n.op is not Op.CAST:   # (a cast's rule takes it itself)
        return fg.real(contribution)
    return contribution


def complex_variants(bwd, op, wrt_idx: list[int], cots: list[str], used: list[int], trace):
    """Describe backward op ``bwd`` (traced for real inputs) and give it its traces for complex
    ones: ``bwd.for_dtypes(dtypes)`` is ``trace(set of complex forward inputs)``, made once per
    set, with ``bwd``'s signature and ``.needs``. Returns ``bwd``."""
    _describe(bwd, op, wrt_idx, cots, ())
    variants: dict = {}

    def for_complex(dtypes):
        cplx = frozenset(i for i, d in zip(used, dtypes) if d.is_complex)
        if not cplx:
            return bwd
        if cplx not in variants:
            v = trace(cplx)
            v.needs = bwd.needs
            _describe(v, op, wrt_idx, cots, tuple(op.inputs[i] for i in sorted(cplx)))
            variants[cplx] = v
        return variants[cplx]

    bwd.dtype_variant = for_complex
    return bwd


def _describe(bwd, op, wrt_idx: list[int], cots: list[str], complex_inputs: tuple) -> None:
    bwd.forward, bwd.wrt, bwd.cotangents = op, tuple(op.inputs[i] for i in wrt_idx), tuple(cots)
    bwd.complex_inputs = complex_inputs   # the forward inputs this trace takes as complex
    if complex_inputs:   # an op traced per rank or shape is keyed by name: tell the traces apart
        bwd.key = hashlib.sha256(f"{bwd.key}|complex {','.join(complex_inputs)}".encode()).hexdigest()[:16]
