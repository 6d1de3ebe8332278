"""A Numba CPU group's module: its header (what Numba's disk cache is keyed by), the helpers its
body needs, the file written by content, and the ``njit`` wrapping of its functions."""
from __future__ import annotations

from dataclasses import dataclass

from .. import vmath
from ..plan.cexprs import spec_uses_complex
from ..version import __version__
from . import rng as rnglower
from .pyhelpers import COMPLEX_HELPER_NAMES, COMPLEX_HELPERS, vmath_imports
from .pysource import CPU_PRELUDE, INNER_HELPER, import_source

#: Options of every generated function. They are written into the source's header, so they
#: are part of its content hash and of Numba's disk-cache key.
JIT_OPTIONS = dict(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc"})


@dataclass
class GroupKernel:
    source: str
    path: str
    func: object           # the numba dispatcher
    attrs: tuple           # attribute names, in the order the function takes them
    params: tuple = ()     # static scalars (dims) the function takes after the attributes
    gathers: object = None  # fusegen.lower.gathers.GatherSlots: what the function's gathers take
    kept: frozenset = frozenset()   # workspace operands kept in locals: not arguments (lower/cpu_kept)


def build_module(plan, spec, body: str, sources: list, parallel: bool, boxes: int = 0):
    """Write, import and JIT the module of ``body`` (its functions built by the group sources
    ``sources``): ``kernel``, and with ``boxes`` the functions ``box0``... it calls (serial,
    inlined into it by LLVM). Returns (source text, module)."""
    import numba

    from .. import pyhelpers_numba   # (imports numba: on first compile, not at import fusegen)
    jit = dict(JIT_OPTIONS, parallel=parallel)
    shown = {k: sorted(v) if isinstance(v, (set, frozenset)) else v for k, v in jit.items()}  # stable text
    src = CPU_PRELUDE.format(op=plan.opdef.name, dtypes=", ".join(map(str, spec.dtypes)), version=__version__,
                         numba_version=numba.__version__, vmath=vmath.source_digest(),
                         helpers=pyhelpers_numba.DIGEST, helper_names=", ".join(pyhelpers_numba.NAMES),
                         vmath_imports=vmath_imports(body),
                         jit=", ".join(f"{k}={v!r}" for k, v in sorted(shown.items()))) + body
    used = sorted({u for gs in sources for u in gs.rng.used})
    if used:   # the digest names the RNG's implementation: Numba's cache key
        src += f"# fusegen.rng_numba {rnglower.digest()}: {', '.join(used)}\n"
    if spec_uses_complex(spec):
        src += COMPLEX_HELPERS
    modular = any(o.kind.endswith("modular") for gs in sources for o in gs.ops.values())
    if modular:
        src += INNER_HELPER

    rng_fns = rnglower.cpu_bindings(set(used))   # before import_source: it takes the same lock

    # The helpers are inlined by LLVM (forceinline: alwaysinline), before its loop vectorizer
    # runs, not by Numba's IR inliner (inline="always"), which types each helper again at every
    # call site: that made a group's compile several times slower, for the same machine code.
    helper = numba.njit(forceinline=True, error_model="numpy", nogil=True)
    box = numba.njit(forceinline=True, error_model="numpy", nogil=True, fastmath=JIT_OPTIONS["fastmath"])

    def setup(mod):
        for name in COMPLEX_HELPER_NAMES if hasattr(mod, "_fg_cmul") else ():
            setattr(mod, name, helper(getattr(mod, name)))
        if modular:
            mod._inner = helper(mod._inner)
        vars(mod).update(rng_fns)
        for b in range(boxes):
            setattr(mod, f"box{b}", box(getattr(mod, f"box{b}")))
        mod.kernel = numba.njit(**jit)(mod.kernel)

    return src, import_source(src, "numba", "fusegen_k", setup)
