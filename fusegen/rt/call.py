"""The contract between the one ``Kernel`` (``rt.kernel``) and a backend: ``Call``, what a kernel
keeps per input signature (the kernel fills the part every backend shares; each executor extends
it with what its runner needs), and ``Executor``, what a backend implements."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..dtypes import AttrType
from ..errors import ArgumentError


@dataclass
class Call:
    """What every call with one input signature needs; executors add their own fields."""

    out_shapes: tuple
    out_dtypes: tuple          # what the caller gets (NumPy dtypes)
    attr_values: dict
    run: object = None         # the runner: run(arrays, out), CUDA run(arrays, out, stream=None)


class Executor:
    """A backend, for one kernel. ``prepare(spec, bound_attrs, arrays, key)`` returns the ``Call``
    of a new signature, its ``run`` set; the rest have defaults a backend overrides as needed."""

    def __init__(self, kernel):
        self.kernel = kernel

    def describe(self) -> str:
        """Extra words for the kernel's repr."""
        return ""

    def source(self, last: Call | None) -> str:
        """The generated source; by default that of ``last``'s groups (the latest signature)."""
        if last is None:
            return "# no call yet: the source is generated per input signature on the first call\n"
        return "\n\n".join(g.source for g in last.groups)

    def check(self, arrays) -> None:
        """Refuse inputs this backend cannot take, before the IR's rules run."""

    def variant_options(self, op) -> dict:
        """The options of the kernel of a write-request variant ``op`` of this kernel's op."""
        return {}

    def close(self) -> None:
        """Release what the backend holds."""

    def prepare(self, spec, bound: dict, arrays, key) -> Call:
        raise NotImplementedError

    def rebind(self, template: Call, spec, bound: dict, arrays) -> Call | None:
        """The ``Call`` of a signature that differs from ``template``'s only in the values of
        attributes its code takes as run-time scalars (``rt.kernel``), or None: prepare it."""
        return None


def check_count(op, arrays) -> None:
    if len(arrays) != len(op.inputs):
        raise ArgumentError(f"op {op.name} takes {len(op.inputs)} inputs ({', '.join(op.inputs)}), "
                            f"got {len(arrays)}")


#: Signatures a kernel keeps prepared (the oldest go first): a call with an attribute value set
#: of its own each time must not hold memory per call. A signature dropped is prepared again.
MAX_SIGNATURES = 256


def remember(cache: dict, key, value) -> None:
    """``cache[key] = value``, dropping the oldest entries past ``MAX_SIGNATURES`` (call under the
    kernel's lock; a reader meanwhile finds an entry or prepares it again)."""
    cache[key] = value
    while len(cache) > MAX_SIGNATURES:
        try:
            del cache[next(iter(cache))]
        except (StopIteration, KeyError, RuntimeError):
            break


#: the keywords every kernel call takes besides the op's attributes
CALL_KEYWORDS = ("out", "accumulate", "skip", "inplace")
_MISSING = object()   # an input or attribute the call did not give


def _attr_params(op) -> list:
    """The attributes the generated functions name as keyword parameters: every one but those a
    call keyword would shadow or that could clash with the generated code's own ``_fg_`` names
    (such an attribute still works; its calls take the slow path)."""
    return [n for n in op.attrs if n not in CALL_KEYWORDS and not n.startswith("_fg_")]


def _params(n: int, defaults: bool) -> str:
    ins = [f"_fg_a{i}" + ("=_fg_M" if defaults else "") for i in range(n)]
    return ", ".join(ins) + (", /" if ins else "")


def _keywords(attrs: list) -> str:
    return "".join(f", {a}=_fg_M" for a in attrs)


def _given(attrs: list) -> str:
    """The attributes a generated call was given, as the dict the slow path takes."""
    pairs = "(" + "".join(f"({a!r}, {a}), " for a in attrs) + ")"
    return f"{{**{{k: v for k, v in {pairs} if v is not _fg_M}}, **_fg_kw}}"


def _generate(src: str, what: str, **names):
    """The function ``src`` defines (its text kept as ``.source``), run with ``names``."""
    g: dict = {"_fg_M": _MISSING, "_fg_type": type, "_fg_copysign": math.copysign, "_fg_repr": repr, **names}
    exec(compile(src, f"<fusegen {what}>", "exec"), g)
    fn = g[src[4:src.index("(")]]
    fn.source = src
    return fn


def _key_expr(n: int, attrs: list, op) -> str:
    parts = [f"_fg_a{i}.dtype, _fg_a{i}.shape" for i in range(n)] + [f"{a}, {_kind_expr(a, op)}" for a in attrs]
    return "(" + "".join(p + ", " for p in parts) + ")"


def _kind_expr(a: str, op) -> str:
    """What tells an attribute's value from those equal to it as a dict key: its type (1, 1.0
    and True); for a float attribute its sign too (-0.0 == 0.0), for a list one its text
    ((0.0,) == (0,), a refused value the cache must not serve). A wrong type raises TypeError
    in the key, which sends the call to the slow path and its error."""
    kind = op.attrs[a].type
    if kind is AttrType.FLOAT:
        return f"_fg_type({a}), ({a} is _fg_M or _fg_copysign(1.0, {a}))"
    if not kind.is_scalar:
        return f"_fg_type({a}), ({a} is _fg_M or _fg_repr({a}))"
    return f"_fg_type({a})"


def key_fn(op, inputs: bool = True):
    """``key(*arrays, **attrs)``: the signature key a call is cached under, generated for the op:
    each input's dtype and shape, then each attribute's value *and type* (1, 1.0 and True are
    equal as dict keys but must not share an entry), in the op's order whatever order the call
    gives them in (an attribute not given is a sentinel). A flat tuple: it hashes faster than a
    nested one. TypeError for a wrong input count or an attribute the op does not name.
    ``inputs=False``: ``key(**attrs)``, the key ``attrs_call_fn``'s call looks attributes up under
    (the same expression: the two cannot drift)."""
    attrs = _attr_params(op)
    n = len(op.inputs) if inputs else 0
    head = ", ".join(p for p in (_params(n, False), "*" if attrs else "") if p)
    src = f"def key({head}{_keywords(attrs)}):\n    return {_key_expr(n, attrs, op)}\n"
    return _generate(src, f"signature key of {op.name}")


def attrs_call_fn(op, by_attrs: dict, slow, name: str, errors=(), translate=None):
    """``call(*arrays, **attrs)`` -> ``by_attrs[key](*arrays)``, the key built inline from the
    attributes as ``key_fn`` does (without the inputs); ``slow(attrs)`` gives the function for a
    key not there (or unhashable, or with an attribute the op does not name). An exception of
    the types ``errors`` goes to ``translate(e)``, which raises what the caller should see or
    returns (``e`` is raised). For callers that cache one function per attribute set
    (``fusegen.jax``; its entries are keyed by ``key_fn(op, inputs=False)``)."""
    attrs = _attr_params(op)
    src = (f"def call(*_fg_arrays{_keywords(attrs)}, **_fg_kw):\n"
           f"    try:\n"
           f"        if _fg_kw:\n"
           f"            raise KeyError\n"
           f"        _fg_fn = _fg_by_attrs[{_key_expr(0, attrs, op)}]\n"
           f"    except (KeyError, TypeError, ValueError, OverflowError):\n"
           f"        _fg_fn = _fg_slow({_given(attrs)})\n"
           f"    try:\n"
           f"        return _fg_fn(*_fg_arrays)\n"
           f"    except _fg_errors as _fg_e:\n"
           f"        _fg_translate(_fg_e)\n"
           f"        raise\n")
    return _generate(src, f"{name} of {op.name}", _fg_by_attrs=by_attrs, _fg_slow=slow, _fg_errors=tuple(errors),
                     _fg_translate=translate)


def call_fn(op, calls: dict, generic, overlap=None):
    """The kernel's call, generated for its op: builds the signature key inline (``key_fn``'s),
    looks the runner up in ``calls`` and runs it; anything else (a first call with a signature,
    a write request, a wrong input count, an unknown attribute, a non-array input, an unhashable
    attribute, a ``stream=``; with ``overlap``, ``fastcall.overlap_fn()``'s, an ``out=`` array
    sharing memory with an input) goes to ``generic(arrays, out, accumulate, skip, inplace, attrs)``.

    Generated because a generic ``__call__(self, *arrays, **attrs)`` spends more than the native
    call itself at small sizes: the keyword dict, the key's nested tuples and unpacking, a helper
    call per step (~1 us of a 2.5 us call)."""
    attrs = _attr_params(op)
    n = len(op.inputs)
    ins = "(" + "".join(f"_fg_a{i}, " for i in range(n)) + ")"
    src = (f"def call({_params(n, True)}{', ' if n else ''}*_fg_more, out=None, accumulate=False, skip=None, "
           f"inplace=False{_keywords(attrs)}, **_fg_kw):\n"
           f"    try:\n"
           f"        if _fg_more or _fg_kw or accumulate is not False or skip is not None or inplace:\n"
           f"            raise KeyError\n"
           f"        _fg_run = _fg_calls[{_key_expr(n, attrs, op)}].run\n"
           + (f"        if out is not None and _fg_overlap(out{''.join(f', _fg_a{i}' for i in range(n))}):\n"
              f"            raise KeyError\n" if overlap is not None else "")
           + f"    except (KeyError, AttributeError, TypeError, ValueError, OverflowError):\n"
           f"        return _fg_generic(tuple(a for a in {ins} if a is not _fg_M) + _fg_more, out, "
           f"accumulate, skip, inplace,\n"
           f"                           {_given(attrs)})\n"
           f"    return _fg_run({ins}, out)\n")
    return _generate(src, f"call of {op.name}", _fg_calls=calls, _fg_generic=generic, _fg_overlap=overlap)


def signature_key(kernel, arrays, attrs: dict):
    """The key a call's signature is cached under (``key_fn``; the kernel's generated call
    builds the same key inline). None when an attribute value is unhashable (a list) or the op
    does not name an attribute given: such calls are prepared every time, not cached."""
    try:
        key = kernel.key(*arrays, **attrs)
        hash(key)
    except (TypeError, ValueError, OverflowError):   # (copysign of a huge int: the binding's error)
        return None
    return key
