"""dtypes and attribute types, named as the MindSpore AOT ABI names them.

Type promotion is delegated to NumPy's own ufunc type resolution (NEP 50: Python
scalars and scalar attributes are *weak*), so fusegen's results have exactly the
dtype NumPy would give for the same expression.
"""
from __future__ import annotations

import collections.abc
import enum
import functools
import math
import re
import typing
from dataclasses import dataclass

import numpy as np

from .errors import DTypeError


@dataclass(frozen=True, slots=True)
class DType:
    """A tensor element type. ``name`` is the AOT ABI's dtype string."""

    name: str
    kind: str  # 'b' bool, 'i' signed int, 'u' unsigned int, 'f' float, 'c' complex
    itemsize: int

    @property
    def np(self) -> np.dtype:
        return np.dtype(self.name)

    # NumPy's protocol: ``np.dtype(fg.float32)``, ``np.zeros(3, fg.float32)`` and
    # ``a.dtype == fg.float32`` read the NumPy dtype from ``.dtype``
    dtype = np

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_complex(self) -> bool:
        return self.kind == "c"

    @property
    def is_int(self) -> bool:
        return self.kind in "iu"

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__


_ALL = [
    DType("bool", "b", 1),
    DType("int8", "i", 1), DType("int16", "i", 2), DType("int32", "i", 4), DType("int64", "i", 8),
    DType("uint8", "u", 1), DType("uint16", "u", 2), DType("uint32", "u", 4), DType("uint64", "u", 8),
    DType("float16", "f", 2), DType("float32", "f", 4), DType("float64", "f", 8),
    DType("complex64", "c", 8), DType("complex128", "c", 16),
]
DTYPES: dict[str, DType] = {d.name: d for d in _ALL}
bool_, int8, int16, int32, int64 = (DTYPES[n] for n in ("bool", "int8", "int16", "int32", "int64"))
uint8, uint16, uint32, uint64 = (DTYPES[n] for n in ("uint8", "uint16", "uint32", "uint64"))
float16, float32, float64 = (DTYPES[n] for n in ("float16", "float32", "float64"))
FLOAT_DTYPES = (float16, float32, float64)
complex64, complex128 = DTYPES["complex64"], DTYPES["complex128"]
COMPLEX_DTYPES = (complex64, complex128)
_BY_NP = {np.dtype(d.name): d for d in _ALL}


def as_dtype(x) -> DType:
    """Canonicalize a dtype given as a DType, a name, a NumPy dtype or a scalar type."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str) and x in DTYPES:
        return DTYPES[x]
    spec = getattr(x, "spec", None)
    if spec is not None and hasattr(spec, "type") and hasattr(spec, "name"):   # a traced attribute
        raise DTypeError(f"attribute {spec.name!r} cannot be a dtype: an attribute's value is known only when the "
                         "op is called, and a dtype decides the kernel; write the dtype in the op (a name such as "
                         "'float16', fg.float16, x.dtype), or make one op per dtype")
    try:
        d = _BY_NP.get(np.dtype(x))
    except (TypeError, ValueError):
        d = None
    if d is None:
        raise DTypeError(f"unsupported dtype {x!r}; fusegen supports {', '.join(DTYPES)}")
    return d


# --- weak scalars ---------------------------------------------------------------------------
# A Python scalar (or a scalar attribute) participates in promotion as NumPy's weak
# `int`/`float`/`complex`/`bool` does: it never widens a tensor's dtype (float32 + 1j is complex64).
WEAK_TYPES = {"bool": bool, "int": int, "float": float, "complex": complex}
WEAK_KIND = {"bool": "b", "int": "i", "float": "f", "complex": "c"}
WeakOrDType = typing.Union[DType, str]  # a DType, or "bool"/"int"/"float"/"complex" for a weak scalar


def _np_operand(t: WeakOrDType):
    # NumPy's resolve_dtypes takes Python int/float as weak scalars but not bool; a strong
    # bool promotes exactly like a weak one (it is the lowest kind), so it stands in.
    if t == "bool":
        return np.dtype(bool)
    return WEAK_TYPES[t] if isinstance(t, str) else t.np


@functools.lru_cache(maxsize=4096)
def resolve_ufunc(ufunc_name: str, operands: tuple) -> tuple[DType | str, DType | str]:
    """(compute dtype, result dtype) of NumPy's ``ufunc_name`` applied to ``operands``.

    The compute dtype is the one NumPy's inner loop runs in (operands are cast to
    it). Operands that are all weak give a weak result, as ``1 + 2.0`` does in Python.
    """
    if all(isinstance(t, str) for t in operands):
        comp, out = resolve_ufunc(ufunc_name, tuple(materialize(t) for t in operands))
        weak = {"b": "bool", "i": "int", "u": "int", "f": "float", "c": "complex"}
        return weak[comp.kind], weak[out.kind]
    uf = getattr(np, ufunc_name)
    try:
        res = uf.resolve_dtypes(tuple(_np_operand(t) for t in operands) + (None,) * uf.nout)
        return as_dtype(res[0]), as_dtype(res[uf.nin])
    except DTypeError:
        raise DTypeError(f"{ufunc_name} of {', '.join(map(str, operands))} gives a dtype "
                         "fusegen does not support") from None
    except TypeError as e:  # NumPy has no loop for these dtypes
        raise DTypeError(f"{ufunc_name} is not defined for {', '.join(map(str, operands))}: {e}") from None


def materialize(t: WeakOrDType) -> DType:
    """The dtype a weak scalar becomes when it is an op's output on its own."""
    if isinstance(t, DType):
        return t
    return {"bool": bool_, "int": int64, "float": float64, "complex": complex128}[t]


def literal_dtype(t: WeakOrDType, value) -> DType:
    """The dtype a constant of dtype ``t`` is written in: ``materialize(t)``, but a Python integer
    past int64 (``x * 2**64`` for a float x) as uint64 where it fits, else as a double, converted
    from there (an int64 literal would wrap)."""
    if t == "int" and not -2**63 <= value < 2**63:
        return uint64 if 0 <= value < 2**64 else float64
    return materialize(t)


def real_of(d: DType) -> DType:
    """The real dtype of a complex one (complex64 -> float32); other dtypes are their own."""
    return {complex64: float32, complex128: float64}.get(d, d)


# --- attribute types -----------------------------------------------------------------------
class AttrType(enum.Enum):
    """The eight attribute types the AOT ABI's ``AotExtra::Attr<T>`` can carry."""

    BOOL = "bool"
    INT = "int"
    FLOAT = "float"
    STR = "str"
    INTS = "list[int]"
    FLOATS = "list[float]"
    INTS2 = "list[list[int]]"
    FLOATS2 = "list[list[float]]"

    @property
    def is_scalar(self) -> bool:
        return self in (AttrType.BOOL, AttrType.INT, AttrType.FLOAT)

    @property
    def cpp(self) -> str:
        return _CPP_ATTR[self]


_CPP_ATTR = {
    AttrType.BOOL: "bool", AttrType.INT: "int64_t", AttrType.FLOAT: "float", AttrType.STR: "std::string",
    AttrType.INTS: "std::vector<int64_t>", AttrType.FLOATS: "std::vector<float>",
    AttrType.INTS2: "std::vector<std::vector<int64_t>>", AttrType.FLOATS2: "std::vector<std::vector<float>>",
}


def _element_of(ann):
    """X for ``list[X]``, ``tuple[X, ...]`` or ``Sequence[X]`` (the spellings of a list
    attribute: a tuple default is the usual immutable one); None for anything else."""
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin in (list, collections.abc.Sequence) and len(args) == 1:
        return args[0]
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return args[0]
    return None


def attr_type_from_annotation(ann) -> AttrType | None:
    """Map a keyword-only parameter's annotation to an AttrType (None if unsupported)."""
    if isinstance(ann, str):
        s = ann.replace(" ", "").replace("typing.", "").replace("collections.abc.", "")
        s = s.replace("List[", "list[").replace("Tuple[", "tuple[")
        while True:   # tuple[X, ...] and Sequence[X] as list[X], innermost first
            spelled = re.sub(r"(?:tuple|Sequence)\[(\w+|list\[\w+\])(?:,\.\.\.)?\]", r"list[\1]", s)
            if spelled == s:
                break
            s = spelled
        for t in AttrType:
            if t.value == s:
                return t
        return None
    simple = {bool: AttrType.BOOL, int: AttrType.INT, float: AttrType.FLOAT, str: AttrType.STR}
    if ann in simple:
        return simple[ann]
    inner = _element_of(ann)
    if inner is int:
        return AttrType.INTS
    if inner is float:
        return AttrType.FLOATS
    innermost = _element_of(inner) if inner is not None else None
    if innermost in (int, float):
        return AttrType.INTS2 if innermost is int else AttrType.FLOATS2
    return None


def exact_attr(value):
    """A bound attribute value as a dict key that equality cannot confuse with another's: -0.0
    and 0.0, (0.0,) and (0,), give different results (``rt.call.key_fn``'s rule, for bound
    values)."""
    if isinstance(value, (float, np.floating)):
        return (value, math.copysign(1.0, value))
    if type(value) is tuple:
        return repr(value)
    return value


def coerce_attr(t: AttrType, value):
    """Check ``value`` against attribute type ``t``; return its canonical (hashable) form.

    Raises ``TypeError`` with a short reason; callers add the op and attribute name.
    Ints are accepted where floats are expected (as Python does); bools are not ints here.
    """
    def is_int(v):
        return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))

    def is_float(v):
        return isinstance(v, (float, np.floating)) or is_int(v)

    if isinstance(value, np.ndarray) and value.ndim == 0 and t.is_scalar:
        value = value[()]   # a 0-d array is its scalar (np.array(7), rng.integers(9, size=()))
    if t is AttrType.BOOL:
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
    elif t is AttrType.INT:
        if is_int(value):
            if not -2 ** 63 <= int(value) < 2 ** 64:   # (kernels and the AOT ABI take 64 bits)
                raise TypeError(f"{int(value)} does not fit in 64 bits (int64 or uint64)")
            return int(value)
    elif t is AttrType.FLOAT:
        if is_float(value):
            try:
                return float(value)
            except OverflowError:   # (an int past a double's range)
                raise TypeError(f"{value} is too large for a float (a double)") from None
    elif t is AttrType.STR:
        if isinstance(value, str):
            return value
    elif t in (AttrType.INTS, AttrType.FLOATS):
        ok = is_int if t is AttrType.INTS else is_float
        conv = int if t is AttrType.INTS else float
        if isinstance(value, (list, tuple, np.ndarray)) and all(ok(v) for v in value):
            return tuple(conv(v) for v in value)
    else:
        ok = is_int if t is AttrType.INTS2 else is_float
        conv = int if t is AttrType.INTS2 else float
        if isinstance(value, (list, tuple)) and all(
                isinstance(r, (list, tuple, np.ndarray)) and all(ok(v) for v in r) for r in value):
            return tuple(tuple(conv(v) for v in r) for r in value)
    raise TypeError(f"expected {t.value}, got {type(value).__name__} {value!r}")
