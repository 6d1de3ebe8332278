"""Which op an emitter emits: an op whose body needs its inputs' ranks, shapes or dtypes has no
generic graph, so ``fusegen.emit`` takes the specialization that ``ranks=``, ``shapes=`` or one
``dtypes=`` combination picks (``OpDef.specialize``), and refuses, saying which to pass, where
none is picked."""
from __future__ import annotations

from .. import dtypes as dt
from ..dtypes import DType
from ..errors import TraceError
from ..ir import OpDef
from .common import parse_dtypes


def check_emittable(op: OpDef) -> None:
    """An op traced per input rank or shape has no generic graph: ``fg.emit`` needs ``ranks=`` or
    ``shapes=`` to pick its specialization (one traced per input dtype, one ``dtypes=`` combination)."""
    if getattr(op, "specializes", None):
        what = "dtypes='float32,int64' (one combination)" if op.specializes == "dtype" else \
            f"{op.specializes}s=[...one per input...]"
        cli = {"rank": "--ranks 2,1", "shape": "--shapes=8x1024,1024"}.get(op.specializes, "--dtypes float32,int64")
        raise TraceError(f"op {op.name} is traced per input {op.specializes} ({op.why}); emit one "
                         f"specialization: fusegen.emit(op, ..., {what}), or fusegen emit ... {cli}")


def _one_combo(op: OpDef, dtypes) -> tuple[DType, ...] | None:
    """The one dtype combination ``dtypes=`` names (None: none given, or several)."""
    combos = parse_dtypes(op, dtypes) if dtypes is not None else []
    return combos[0] if len(combos) == 1 else None


def specialization(op: OpDef, ranks=None, shapes=None, dtypes=None) -> tuple[OpDef, list | None, list | None]:
    """The op to emit for ``ranks=``/``shapes=`` (and, for an op whose trace reads its inputs'
    dtypes, the one combination of ``dtypes=``), and the ranks or shapes its kernel must check."""
    if ranks is not None and shapes is not None:
        raise ValueError("fusegen.emit: pass ranks= or shapes=, not both")
    mode = getattr(op, "specializes", None)
    combo = _one_combo(op, dtypes)
    attrs = {n: s.default for n, s in op.attrs.items() if not s.required}
    if mode == "dtype" and ranks is None and shapes is None and combo is not None:
        return op.specialize(combo, [None] * len(op.inputs), attrs), None, None
    if ranks is None and shapes is None:
        check_emittable(op)
        return op, None, None
    given = [tuple(s) for s in shapes] if shapes is not None else [(-1,) * int(r) for r in ranks]
    if len(given) != len(op.inputs):
        raise ValueError(f"op {op.name}: {len(given)} ranks/shapes for {len(op.inputs)} inputs")
    if not mode:
        return op, None, None
    child = op.specialize(combo or [dt.float32] * len(given), given, attrs)
    if child.reads_dtypes and combo is None:   # (its answers hold for the dtypes it was traced for only)
        raise TraceError(f"op {op.name}: its specialization reads its inputs' dtypes (x.dtype); emit one "
                         f"dtype combination at a time: fusegen.emit(op, ..., dtypes='float32,int64')")
    if op.specializes == "shape" and shapes is None:
        raise TraceError(f"op {op.name} is traced per input shape ({op.why}); pass shapes=, not ranks=")
    if op.specializes == "dtype":
        return child, None, None
    return child, [len(s) for s in given], ([list(s) for s in given] if op.specializes == "shape" else None)
