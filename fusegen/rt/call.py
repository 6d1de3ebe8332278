"""The contract between the one ``Kernel`` (``rt.kernel``) and a backend: ``Call``, what a kernel
keeps per input signature (the kernel fills the part every backend shares; each executor extends
it with what its runner needs), and ``Executor``, what a backend implements."""
from __future__ import annotations

from dataclasses import dataclass

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


def check_count(op, arrays) -> None:
    if len(arrays) != len(op.inputs):
        raise ArgumentError(f"op {op.name} takes {len(op.inputs)} inputs ({', '.join(op.inputs)}), "
                            f"got {len(arrays)}")


def signature_fn(n: int):
    """``f(a0, ..., a{n-1})`` -> ``((a0.dtype, a0.shape), ...)``: the arrays' part of the signature
    key, as ``signature_key`` builds it, generated for ``n`` inputs (a comprehension costs a frame
    and a list per call: 1-2 us of a 3 us call). A wrong count raises TypeError."""
    names = [f"a{i}" for i in range(n)]
    src = f"def shapes({', '.join(names)}):\n    return ({''.join(f'({a}.dtype, {a}.shape), ' for a in names)})\n"
    g: dict = {}
    exec(compile(src, f"<fusegen signature of {n} inputs>", "exec"), g)
    return g["shapes"]


def signature_key(arrays, attrs: dict):
    """The key a call's signature is cached under: dtypes and shapes, then attribute values *and
    types* (1, 1.0 and True are equal as dict keys but must not share an entry). The kernel's fast
    path builds the same key inline. None when an attribute value is unhashable (a list): such
    calls are prepared every time, not cached."""
    key = tuple([(a.dtype, tuple(a.shape)) for a in arrays])
    if attrs:
        key = (key, *attrs.items(), *map(type, attrs.values()))
    try:
        hash(key)
    except TypeError:
        return None
    return key
