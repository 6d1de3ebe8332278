"""fusegen's layers, in import order: the one place the package's architecture is declared.

A module may import modules of its own layer and of the layers before it, never of a later one
(lazy imports inside functions included), and no import may close a circle.
``tests/test_architecture.py`` reads every module's imports and keeps this true; the README's
"Architecture" section draws the same picture.

What flows between the layers::

    @fg.op ─trace─▶ Graph ─build_plan─▶ Plan ─render─▶ source / library ─run─▶ results
      ir              ir                 plan     lowerings, emitters,       runtime
                                                  native build and host

A module belongs to the first layer listing its dotted name or a package above it. A new module
goes into the layer of what it does; a new layer is a change to this table (and to the README).
"""
from __future__ import annotations

#: (layer, what it owns, modules and packages) in import order.
LAYERS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("base", "exception types, dtypes and promotion, the cache location, the version, this table",
     ("fusegen.errors", "fusegen.dtypes", "fusegen.cache", "fusegen.version", "fusegen.layers")),
    ("ir", "nodes, tracing, shape and dtype rules, text form, grad, write-request rewrites, the fg. "
     "functions (ir.py is the face), the reference ops, the random streams' definition (philox, fg.random), "
     "fg.linalg",
     ("fusegen.ir", "fusegen.graph", "fusegen.examples", "fusegen.philox", "fusegen.random", "fusegen.linalg")),
    ("plan", "grouping into stages, accesses and their index maps, run-time layouts, the expression tables",
     ("fusegen.plan",)),
    ("lowering", "Plan -> Numba CPU / numba-cuda Python sources, MindSpore-AOT and XLA FFI C++/CUDA sources "
     "(abi_emit.py is the emitters' face), the vectorizable float32 math they inline",
     ("fusegen.lower", "fusegen.lower_cpu", "fusegen.lower_cuda", "fusegen.emitters", "fusegen.abi_emit",
      "fusegen.vmath", "fusegen.vmath_lanes", "fusegen.vmath_numba", "fusegen.vmath_fit", "fusegen.philox_numba",
      "fusegen.rng_numba", "fusegen.pyhelpers_numba")),
    ("native", "the compiler cache, libraries and the AOT-ABI host, device memory, AotKernel",
     ("fusegen.native",)),
    ("runtime", "the one Kernel (validate, infer, allocate, dispatch; devices and backends), write requests, "
     "the Engine (runtime.py is the face)",
     ("fusegen.rt", "fusegen.runtime")),
    ("api", "the public API: fusegen/__init__.py", ("fusegen",)),
    ("bridges", "calling fused ops from other frameworks: JAX (XLA FFI, partitioning) and PyTorch (custom ops, DTensor)",
     ("fusegen.jax", "fusegen.jax_transforms", "fusegen.jax_sharding", "fusegen.torch", "fusegen.torch_sharding")),
    ("tools", "the command line, the benchmark and the float32 math library's accuracy harness",
     ("fusegen.cli", "fusegen.bench", "fusegen.vmath_eval")),
)


def layer_of(module: str) -> int | None:
    """The index in ``LAYERS`` of a dotted module name, or None when no layer claims it.

    The package itself (``fusegen``) is claimed only by its exact name: its modules are not in
    the API layer because their names start with it."""
    for i, (_, _, names) in enumerate(LAYERS):
        for n in names:
            if module == n or (n != "fusegen" and module.startswith(n + ".")):
                return i
    return None
