"""complex64 and complex128: which elementwise functions and reductions take them.

The Python array API standard (2024.12) defines arithmetic, ``equal``/``not_equal``, ``abs`` (a
real result), ``sign`` (``z / |z|``), the exponential, logarithmic, trigonometric and hyperbolic
functions with C99's branch cuts, ``conj``/``real``/``imag``, ``isnan``/``isinf``/``isfinite``,
``round`` (each part, ties to even),
``sum``/``prod``/``mean`` on complex operands; orderings, rounding, ``floor_divide``,
``remainder``, ``atan2`` and the like are not defined there (NumPy orders complex numbers
lexicographically; fusegen follows the standard and refuses). The type promotion itself is
NumPy's (``dtypes.resolve_ufunc``: a Python ``complex`` is a weak scalar, float32 + 1j is
complex64).
"""
from __future__ import annotations

from .. import dtypes as dt
from ..errors import DTypeError
from .nodes import Node, Op

#: ops whose operands may not be complex (the standard leaves them undefined there)
REFUSED = frozenset({
    Op.LT, Op.LE, Op.GT, Op.GE, Op.MAX, Op.MIN, Op.RELU, Op.SIGMOID, Op.ERF, Op.FLOOR, Op.CEIL, Op.TRUNC,
    Op.SIGNBIT, Op.ATAN2, Op.HYPOT, Op.COPYSIGN, Op.NEXTAFTER, Op.LOGADDEXP, Op.FLOOR_DIVIDE,
    Op.REMAINDER, Op.AND, Op.OR, Op.NOT, Op.XOR, Op.RSQRT})
#: reductions with no order to follow on complex values
REFUSED_REDUCE = frozenset({"max", "min"})
#: complex ops whose result is real (the result of the rest is the compute dtype)
REAL_RESULT = frozenset({Op.ABS, Op.REAL, Op.IMAG})


def is_complex(d) -> bool:
    """Whether ``d`` (a DType or a weak scalar kind) is complex."""
    return d == "complex" or (isinstance(d, dt.DType) and d.is_complex)


def check_elementwise(n: Node, operands, comp, fail) -> None:
    """Refuse ``n`` (an elementwise op of compute dtype ``comp``) where the standard does."""
    if n.op is Op.WHERE and is_complex(operands[0]):
        fail("where's condition must be bool, not complex", exc=DTypeError)
    if n.op in REFUSED and (is_complex(comp) or any(is_complex(o) for o in operands)):
        fail(f"{n.op.value} is not defined for complex operands (the array API standard leaves it "
             "undefined; compare real parts, or abs, explicitly)", exc=DTypeError)


def check_reduce(kind: str, x, fail) -> None:
    if kind in REFUSED_REDUCE and is_complex(x):
        fail(f"{kind} is not defined for complex operands (no order); reduce abs or the real part",
             exc=DTypeError)


def check_cast(src, to, fail) -> None:
    """astype from complex to a real dtype is implementation-defined in the standard: fusegen
    refuses it (NumPy drops the imaginary part with a ComplexWarning) rather than lose data."""
    if is_complex(src) and not is_complex(to):
        fail(f"casting {src} to {to} would drop the imaginary part: take fg.real(x) (or fg.abs(x)) "
             "first", exc=DTypeError)


def check_grad(opdef, in_dtypes, error: DTypeError | None = None) -> None:
    """fg.grad's backward ops take complex values with JAX's convention (``graph/grad_complex``),
    each set of complex inputs with a trace of its own (``OpDef.for_dtypes``, which kernels call):
    refuse a trace used for complex inputs it was not made for (silently wrong rules otherwise),
    and say which rule refused a complex value. ``error``: a rule's complaint, raised instead."""
    if getattr(opdef, "forward", None) is None:
        return
    cots = set(opdef.cotangents)   # complex outputs take complex cotangents
    bad = [f"{n}: {d}" for n, d in zip(opdef.inputs, in_dtypes)
           if d.is_complex and n not in cots and n not in opdef.complex_inputs]
    if bad:
        raise DTypeError(f"op {opdef.name} (fg.grad of {opdef.forward.name}) was traced for real "
                         f"{', '.join(n.split(':')[0] for n in bad)}, called with {', '.join(bad)}: take "
                         f"the trace for these dtypes, op.for_dtypes(dtypes) (fg.compile's kernels do)")
    if error is not None and "complex" in str(error):
        raise DTypeError(f"op {opdef.name} (fg.grad of {opdef.forward.name}): a complex value reaches a "
                         f"function fusegen cannot differentiate on complex values: {error}") from error
