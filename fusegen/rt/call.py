"""The contract between the one ``Kernel`` (``rt.kernel``) and a backend: ``Call``, what a kernel
keeps per input signature (the kernel fills the part every backend shares; each executor extends
it with what its runner needs), and ``Executor``, what a backend implements."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Call:
    """What every call with one input signature needs; executors add their own fields."""

    out_shapes: tuple
    out_dtypes: tuple          # what the caller gets (NumPy dtypes)
    attr_values: dict
    run: object = None         # the runner the executor made: run(arrays, out, stream=None)


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
