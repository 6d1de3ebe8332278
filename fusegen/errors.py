"""fusegen's exception types.

Every failure a user can cause (bad input, a compiler error, a kernel's non-zero
return) maps to one of these, so callers can catch precisely what they expect.
All derive from ``FusegenError``; the input-validation ones also derive from the
builtin a Python user would reach for first (``TypeError``/``ValueError``).
"""
from __future__ import annotations


class FusegenError(Exception):
    """Base class of every error fusegen raises on purpose."""


class TraceError(FusegenError, TypeError):
    """The op's Python body cannot be traced (control flow on a traced value, bad operand)."""


class ShapeError(FusegenError, ValueError):
    """Shapes do not fit the op: broadcast failure, axis out of range, wrong rank."""


class AxisError(ShapeError, IndexError):
    """An axis outside the tensor's rank, more indices than it has dims, or more dims than
    kernels take: a ``ShapeError`` and, as NumPy's ``AxisError`` and ``IndexError`` for too many
    indices, an ``IndexError``."""


class BoundsError(FusegenError, IndexError):
    """An index is outside the axis it indexes (an integer index at trace or infer time, or a
    gathered index a kernel checked): the message names the op, the node, the axis and the value."""


class DTypeError(FusegenError, TypeError):
    """An input or attribute has a dtype the op or the kernel does not accept."""


class ScalarRangeError(DTypeError, OverflowError):
    """A Python integer (a literal, an integer attribute or a dim used as a value) outside the
    range of the integer dtype it is computed in: ``uint8_x + 300``. NumPy 2 raises its
    ``OverflowError`` there (weak scalars, NEP 50); so is this."""


class AttrError(FusegenError, TypeError):
    """An op attribute is missing, unknown, or of the wrong type.

    (Not named AttributeError: that builtin means something else in Python.)
    """


class ArgumentError(FusegenError, TypeError):
    """Wrong number or kind of arguments to a kernel call."""


class CompileError(FusegenError, RuntimeError):
    """A native compiler (g++, nvcc) failed. Carries the command and its output."""

    def __init__(self, message: str, command: list[str] | None = None, output: str = ""):
        self.command = list(command or [])
        self.output = output
        text = message
        if self.command:
            text += "\n  command: " + " ".join(self.command)
        if output:
            text += "\n  compiler output:\n" + "\n".join("    " + line for line in output.rstrip().splitlines())
        super().__init__(text)


class LibraryError(FusegenError, RuntimeError):
    """A native library cannot be used: not found, outside the whitelist, not a
    shared library, or missing a required symbol."""


class KernelError(FusegenError, RuntimeError):
    """A native kernel returned a non-zero code (or threw)."""

    def __init__(self, message: str, *, library: str = "", function: str = "", code: int | None = None,
                 meaning: str | None = None):
        self.library = library
        self.function = function
        self.code = code
        self.meaning = meaning
        super().__init__(message)



class UnsupportedError(FusegenError, NotImplementedError):
    """A backend cannot run an op that another backend can (e.g. the emitted C++ and random
    numbers): the message names the op, the node and the backend to use instead."""


class ShardingWarning(UserWarning):
    """A sharding the inputs asked for that a partitioned call cannot keep (a dim the op needs
    whole on each device, a size that does not divide): the message names the op, the input, the
    dim and why; XLA gathers that dim."""
