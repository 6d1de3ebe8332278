"""The JAX bridge: call a fused op from JAX through an XLA typed-FFI handler.

``fg.jax.function(op)`` emits the op's XLA FFI source (``fg.emit(op, abi="xla-ffi")``), builds it
through fusegen's content-addressed build cache, registers one handler per dtype combination, and
returns ``f(*arrays, **attrs)``, which calls ``jax.ffi.ffi_call`` with result shapes and dtypes
from fusegen's own shape inference. It works eagerly, under ``jax.jit`` and under ``jax.vmap``.

* **Target names** carry a hash of the built library's bytes: a name is registered once per
  process (XLA refuses a second registration and keeps the first handler), and a changed source,
  compiler or flag set always gets a new name.
* **vmap**: ``vmap_method="broadcast_all"`` (one handler call on the whole batch) where adding a
  leading batch dim keeps the op's meaning: all inputs of equal rank, and every reduction over
  explicit axes that can be written from the end (attribute axes are passed to the handler
  normalized to negative values for that reason). Otherwise, e.g. ``rms_norm``'s ``(N, D)``
  input with a ``(D,)`` weight, or a reduction over all axes: ``"sequential"`` (one call per
  batch element). ``vmap_method=...`` overrides the choice.
* **Ops traced per input rank or shape** (``OpDef.specializes``: ``x.ndim``, a branch on a dim)
  have no graph to emit once: each specialization a call brings (``OpDef.specialize``, cached
  on the op) gets a JaxFunction of its own, emitted and built for the call's dtypes on first
  use, keyed by the specialization's content, so every later use (the vmap rule, the gradient,
  the partitioning rules of ``fusegen.jax_sharding``) reads the specialization's graph.
* **Errors**: arguments are validated with the IR's rules before XLA sees them (the same
  ``ShapeError``/``DTypeError``/``AttrError`` as every other backend). A handler's own error
  (it re-checks every buffer: XLA does not check what a handler writes) is an ``ffi::Error``
  carrying fusegen's message. When it surfaces inside an eager call it is re-raised as
  ``fusegen.KernelError``; under an outer ``jax.jit``, or when JAX's asynchronous dispatch
  reports it only where the result is used, it is JAX's ``JaxRuntimeError`` with the same text.
* **Legacy** ``api="legacy"``: the old ``custom_call_api_version=3`` entry points of the same
  library, for hosts without typed FFI (caveats in ``function``'s docstring).
* **64-bit types** follow JAX: without ``jax_enable_x64`` a float64 NumPy input is a float32 JAX
  array, and an op whose result would be 64-bit (``sum`` of int32 is int64) raises ``DTypeError``.

Needs ``pip install "fusegen[jax]"`` (jax and jaxlib) and a C++ compiler.
"""
from __future__ import annotations

import functools
import operator

import ctypes
import hashlib
import re
import threading
from pathlib import Path
from typing import Any

import jax
import numpy as np

import fusegen as fg
from .native.build import build_library, cache_dir, default_cpp_flags
from .dtypes import AttrType, exact_attr
from .rt.call import MAX_SIGNATURES, attrs_call_fn, key_fn, remember
from .abi_emit import XlaEmitted, legacy_opaque, parse_dtypes, scan_form, workspace_bytes
from .plan.noops import without_noops
from .jax_transforms import BatchRule, typed_as_input, vary, varying

__all__ = ["function", "JaxFunction", "build_flags", "VMAP_METHODS"]

VMAP_METHODS = ("sequential", "sequential_unrolled", "expand_dims", "broadcast_all")

# Target name -> the loaded library behind it (kept alive: XLA holds raw function pointers).
_registered: dict[str, ctypes.CDLL] = {}
_register_lock = threading.Lock()
_backward_lock = threading.Lock()  # builds of fg.grad(op)'s handlers


def build_flags() -> list[str]:
    """fusegen's C++ flags plus the FFI headers. No MindSpore string-ABI define (nothing here
    crosses a std::string boundary) and no ``-fvisibility=hidden`` (the handler macro adds no
    visibility attribute, so the symbols would vanish)."""
    flags = [f for f in default_cpp_flags() if not f.startswith("-D_GLIBCXX_USE_CXX11_ABI")]
    return flags + ["-I" + jax.ffi.include_dir()]


def _register(name: str, lib: ctypes.CDLL, symbol: str, api_version: int) -> None:
    with _register_lock:
        if name in _registered:
            return
        jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(lib, symbol)), platform="cpu",
                                    api_version=api_version)
        _registered[name] = lib


@functools.lru_cache(maxsize=None)
def _can_partition() -> bool:
    """Whether the installed JAX has what fusegen.jax_sharding uses (custom_partitioning with
    Shardy rules, typed shardings, custom_vmap: JAX 0.10 has them all)."""
    try:
        from . import jax_sharding  # noqa: F401
        return hasattr(jax, "typeof") and hasattr(jax.sharding, "reshard")
    except (ImportError, AttributeError):
        return False


def _ffi_attr(t: AttrType, value: Any) -> Any:
    """A bound attribute value as the FFI decodes it (see fusegen.emitters.xla.FFI_ATTRS)."""
    if t is AttrType.INTS:
        return np.asarray(value, np.int64)
    if t is AttrType.FLOATS:
        return np.asarray(value, np.float64)
    if t is AttrType.INT:
        return np.int64(value)
    if t is AttrType.FLOAT:
        return np.float64(value)
    return value


class _Static:
    """A static jit argument that compares equal only to the same value *of the same type*:
    1, 1.0 and True are equal in Python, but an int attribute given True must fail
    validation, not reuse the trace made for 1."""

    __slots__ = ("value", "_key")

    def __init__(self, value):
        self.value = value
        self._key = (type(value), exact_attr(value))   # (-0.0 is not 0.0 either)

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other) -> bool:
        return isinstance(other, _Static) and self._key == other._key


class JaxFunction:
    """A fused op callable from JAX: ``f(*arrays, **attrs)``; see ``fusegen.jax.function``."""

    def __init__(self, op: fg.OpDef, dtypes=None, vmap_method: str | None = None,
                 flags: list[str] | None = None, api: str = "ffi", partition: bool = True):
        if vmap_method is not None and vmap_method not in VMAP_METHODS:
            raise ValueError(f"vmap_method={vmap_method!r}: use None (fusegen chooses) or one of {VMAP_METHODS}")
        if api not in ("ffi", "legacy"):
            raise ValueError(f"api={api!r}: use 'ffi' (typed XLA FFI) or 'legacy' (custom_call_api_version=3)")
        # the op the XLA handlers run (its scans as scan stages, composed where they read
        # pieces): the one whose rules, plan and gradient they follow
        op = scan_form(op)
        self.op, self.vmap_method, self.api = op, vmap_method, api
        # Sharded arrays: partitioned by rules derived from the IR (fusegen.jax_sharding); the
        # legacy API's opaque string fixes the shapes, so it cannot run per shard.
        self.partition = partition and api == "ffi" and _can_partition()
        self.flags = list(flags) if flags is not None else build_flags()
        self.dtypes = dtypes
        # An op traced per input rank or shape has no graph of its own: each specialization the
        # calls bring gets a JaxFunction of its own (``specialized``), built on first use.
        self._children: dict[tuple, JaxFunction] = {}
        self._children_lock = threading.Lock()
        self._last: JaxFunction | None = None
        self.targets: dict[tuple[str, ...], str] = {}
        self.emitted: XlaEmitted | None = None
        self.lib_path = self.library = None
        if op.graph is not None:
            self._build(dtypes)
        self.batch_rule = BatchRule(op)

        def traced(*arrays, **attrs):
            values = {n: v.value for n, v in attrs.items()}
            if any(getattr(a, "dtype", None) == jax.numpy.bfloat16 for a in arrays):
                return self._through_float32(traced, arrays, attrs, values)
            # a child for a new combination or rank, if it must be; a partitioned call keeps the
            # gradient's sum_to/unreduce for its rules (they tie the dims that ``plan.noops``
            # drops: x's and y's of a sum's gradient), and each shard's call drops them
            jf = self.specialized(arrays, values, noops=not self.partition)
            if jf.partition:
                from . import jax_sharding
                return jax_sharding.call(jf, arrays, values)   # rules from the specialization's graph
            return jf.ffi_call(arrays, values)
        traced.__name__ = f"fusegen_{op.name}"  # how the call reads in a jaxpr
        # One jit: JAX's C++ dispatch caches the traced call per input shapes, dtypes and (static)
        # attribute values, so a repeated eager call costs what a jitted JAX function does; inside
        # an outer jit it is inlined.
        self._jit = jax.jit(traced, static_argnames=tuple(op.attrs))
        self._traced = traced
        self._by_attrs: dict = {}   # attribute values and types -> a jitted fn of the arrays only
        self._attr_sets = 0         # attribute value sets traced (``_for_attrs``)
        self._attrs_key = key_fn(op, inputs=False)   # the key ``_call`` looks a value set up under
        # (jax 0.10: INVALID_ARGUMENT is a ValueError)
        self._call = attrs_call_fn(op, self._by_attrs, self._for_attrs, "jax call",
                                   (jax.errors.JaxRuntimeError, ValueError, TypeError), self._translate)
        self._backward: JaxFunction | None = None

    def _build(self, dtypes) -> None:
        """Emit, build (through the content-addressed cache) and register the op's handlers."""
        op = self.op
        self.emitted = fg.emit(op, abi="xla-ffi", device="cpu", dtypes=dtypes)
        directory = Path(cache_dir()) / "xla-src" / f"{op.name}-{self.emitted.digest}"
        self.emitted.write(directory)
        self.lib_path = build_library(directory / self.emitted.main, flags=self.flags)
        self.library = ctypes.CDLL(str(self.lib_path))
        tag = hashlib.sha256(self.lib_path.read_bytes()).hexdigest()[:16]
        for combo, symbol in self.emitted.handlers.items():
            if self.api == "legacy":  # a distinct name: the same name under both APIs would clash
                symbol = symbol + "_legacy"
            self.targets[combo] = f"fusegen_{symbol}_{tag}"
            _register(self.targets[combo], self.library, symbol, 1 if self.api == "ffi" else 0)

    def specialized(self, arrays, attrs: dict, noops: bool = True) -> JaxFunction:
        """The JaxFunction that runs a call of these arrays (shapes and dtypes: JAX values or
        arrays) and attributes, built on first use: itself for a combination it has handlers for;
        a child for a combination the calls bring when no ``dtypes=`` was given (int labels,
        say, as the Numba and AOT backends build on demand); and for an op traced per input
        rank or shape, the child of that specialization (``OpDef.specialize``, cached on the op),
        emitted for the call's combination only. Specializations with the same graph (attribute
        values that do not change the trace) share one child, and their handlers one name.
        ``noops=False``: keep a gradient's sum_to/unreduce that move nothing at these shapes."""
        combo = self._dtype_names(arrays)
        if self.op.graph is not None and self.op.for_dtypes(combo) is self.op:   # (else: fg.grad's complex trace)
            # a gradient's sum_to/unreduce that move nothing at these shapes: the handlers
            # emitted without them serve the call (their stages fuse: ``plan.noops``)
            shapes, bound = [tuple(a.shape) for a in arrays], self.op.bind_attrs(attrs)
            op = without_noops(fg.infer(self.op, combo, shapes, bound), combo, shapes, bound)[0] if noops else self.op
            if op is not self.op:
                key = ("noops", op.key, combo)
            elif combo in self.targets or self.dtypes is not None:
                self._last = None
                return self   # (validate names a combination outside the dtypes= asked for)
            else:
                key = ("dtypes", combo)
        else:
            op = self.op.specialize(combo, [tuple(a.shape) for a in arrays], self.op.bind_attrs(attrs))
            key = (op.key, combo)
        with self._children_lock:
            jf = self._children.get(key)
        if jf is None:
            if self.dtypes is not None:   # (a specialization: only the combinations asked for)
                allowed = {tuple(d.name for d in c) for c in parse_dtypes(op, self.dtypes)}
                if combo not in allowed:
                    raise fg.DTypeError(f"op {self.op.name}: the XLA handlers are generated for dtype combinations "
                                        f"{sorted(allowed)}; got {combo}. Pass dtypes=... to fusegen.jax.function.")
            jf = JaxFunction(op, dtypes=[combo], vmap_method=self.vmap_method, flags=self.flags,
                             api=self.api, partition=self.partition)
            with self._children_lock:
                jf = self._children.setdefault(key, jf)
        self._last = jf
        return jf

    @property
    def specializations(self) -> list[JaxFunction]:
        """The children built so far (specializations of an op traced per input rank or shape,
        and combinations built on demand)."""
        with self._children_lock:
            return list(self._children.values())

    @property
    def source(self) -> str:
        """The emitted source (an op traced per rank or shape: its specializations' so far)."""
        if self.emitted is None:
            return "\n\n".join(c.source for c in self.specializations)
        return self.emitted.source

    def __repr__(self) -> str:
        if self.op.graph is None:
            return (f"<fusegen.jax.JaxFunction {self.op.name} traced per input {self.op.specializes}: "
                    f"{len(self.specializations)} specialization(s)>")
        return f"<fusegen.jax.JaxFunction {self.op.name} combos={list(self.targets)}>"

    # ``f(*arrays, **attrs)``: one jitted function of the arrays per attribute set (values *and*
    # types, see _Static), looked up by a function generated for the op (``rt.call``), so a
    # repeated call goes straight to JAX's C++ dispatch; a property, as Python looks ``__call__``
    # up on the type (see ``rt.kernel.Kernel``).
    __call__ = property(operator.attrgetter("_call"), doc="Call the op (see fusegen.jax.function).")

    def _translate(self, e: Exception) -> None:
        """A handler's error surfacing in an eager call, as fusegen's exception (else returns)."""
        text = str(e)
        if isinstance(e, TypeError) and "forward-mode autodiff" in text:
            raise fg.TraceError(f"op {self.op.name}: forward-mode differentiation (jax.jvp, jax.jacfwd, jax.hessian) "
                                "is not available: fusegen's JAX functions define reverse mode (a custom_vjp "
                                "running fg.grad's fused op); use jax.grad, jax.vjp or jax.jacrev, and for "
                                "second derivatives jax.jacrev(jax.jacrev(f))") from e
        if isinstance(e, TypeError) and "as an abstract array" in text:   # a str, an object: JAX's words
            where = re.search(r"path arrays\[(\d+)\]", text)
            k = int(where.group(1)) if where else None
            name = repr(self.op.inputs[k]) if k is not None and k < len(self.op.inputs) else "an input"
            kind = re.search(r"of type <class '([^']+)'>", text)
            raise fg.ArgumentError(f"op {self.op.name}: input {name} is a {kind.group(1) if kind else 'non-array'}; "
                                   "JAX functions take arrays (jnp.asarray it first), as jax.numpy's do") from e
        if isinstance(e, ValueError) and "dimension of all xs should be replicated" in text:
            raise fg.ArgumentError(
                f"op {self.op.name}: jax.vmap over a sharded batch dim: this op's inputs differ in rank, so "
                "its batch rule runs one element at a time (vmap_method='sequential', a scan), which JAX "
                "refuses over a sharded axis (an Explicit mesh); vmap inputs of equal rank, or shard_map the "
                "batch instead") from e
        if "fusegen FG_ERR_GATHER: " in text:   # a bad gathered index (issue #17): the Numba backends' text
            raise fg.BoundsError(text[text.index("FG_ERR_GATHER: ") + len("FG_ERR_GATHER: "):]) from e
        if "fusegen op " not in text:
            return
        raise fg.KernelError(text[text.index("fusegen op "):], library=str((self._last or self).lib_path),
                             function=self.op.name) from e

    def _for_attrs(self, attrs: dict):
        if not attrs.keys() <= self.op.attrs.keys():
            self.op.bind_attrs(attrs)  # raises AttrError naming the unknown attribute
        for n, v in attrs.items():
            if isinstance(v, jax.core.Tracer):
                raise fg.AttrError(f"op {self.op.name}: attribute {n!r} is a traced JAX value; attributes are "
                                   "static (they specialize the kernel): pass a Python value, e.g. close over it "
                                   "or mark it static in jax.jit (static_argnums / static_argnames)")
        # a concrete JAX value (jnp.int32(0)) or a NumPy array is its Python value, as a NumPy
        # scalar is (a 0-d array its scalar, as a call on arrays takes it)
        attrs = {n: (v.tolist() if isinstance(v, (jax.Array, np.ndarray)) else v) for n, v in attrs.items()}
        for n, v in attrs.items():
            if self.op.attrs[n].type is AttrType.INT and isinstance(v, (int, np.integer)) and \
                    not isinstance(v, (bool, np.bool_)) and not -2 ** 63 <= int(v) < 2 ** 63:
                raise fg.AttrError(f"op {self.op.name}: attribute {n!r}: {int(v)} does not fit in int64, the type "
                                   "of an XLA FFI integer attribute")
        self.op.bind_attrs(attrs)   # type errors name what the caller gave (a list, not the tuple below)
        static = {n: _Static(tuple(v) if isinstance(v, list) else v) for n, v in attrs.items()}
        self._attr_sets += 1
        if self._attr_sets % MAX_SIGNATURES == 0:
            # JAX keeps a compilation per static value set without a bound (1.5 MB a seed, seen):
            # every 256 new sets it is emptied, and the sets in use compile again once
            self._jit.clear_cache()
        fn = jax.jit(self._with_vjp(functools.partial(self._jit, **static), attrs))
        try:   # (bounded as a kernel's signatures are: an attribute set per call must not hold memory)
            key = self._attrs_key(**attrs)
            hash(key)
            remember(self._by_attrs, key, fn)
        except (TypeError, ValueError, OverflowError):  # a list value: not cacheable by value, rebuilt per call
            pass
        return fn

    def _through_float32(self, traced, arrays, attrs: dict, values: dict):
        """A call with bfloat16 inputs, as the PyTorch bridge runs one: fusegen has no bfloat16, so
        they are widened to float32 (exact), the op runs in float32, and the outputs that float16
        inputs would give as float16 are rounded to bfloat16 once; bfloat16 beside float16 is
        refused."""
        op, jnp = self.op, jax.numpy
        if any(getattr(a, "dtype", None) == jnp.float16 for a in arrays):
            raise fg.DTypeError(f"op {op.name}: bfloat16 and float16 inputs cannot be mixed (fusegen computes "
                                "bfloat16 in float32 and has no rule for the pair)")
        bf = [a.dtype == jnp.bfloat16 for a in arrays]
        wide = [a.astype(jnp.float32) if b else a for a, b in zip(arrays, bf)]
        names = self._dtype_names(wide)
        shapes, bound = [tuple(a.shape) for a in arrays], op.bind_attrs(values)
        proxy = fg.infer(op.specialize(names, shapes, bound), ["float16" if b else n for b, n in zip(bf, names)],
                         shapes, bound)
        outs = traced(*wide, **attrs)
        many = isinstance(outs, (tuple, list))
        outs = [o.astype(jnp.bfloat16) if p.name == "float16" and o.dtype == jnp.float32 else o
                for o, p in zip(outs if many else [outs], proxy.out_dtypes)]
        return tuple(outs) if many else outs[0]

    def _with_vjp(self, primal, attrs: dict):
        """``primal`` made differentiable by ``jax.grad``/``jax.vjp``: its backward pass is the
        fused op ``fg.grad(op)``, built (through the same cache) on the first differentiation.
        Residuals are the inputs the backward op declares it needs; the forward values it uses
        are recomputed inside the backward kernel."""
        f = jax.custom_vjp(primal)

        def fwd(*arrays):
            # f, not primal: differentiating this forward again (jax.hessian, grad of grad) meets
            # f's own rule, where the bare FFI call has none
            return f(*arrays), arrays

        def bwd(arrays, cot):
            back = self.backward()
            needed = [a for n, a in zip(self.op.inputs, arrays) if n in back.op.needs]
            cots = tuple(cot) if isinstance(cot, (tuple, list)) else (cot,)
            if any(c.dtype == jax.dtypes.float0 for c in cots):
                # an integer or bool output (argmax beside a max) has no tangent space: JAX hands
                # float0 zeros, fg.grad's cotangent input has the output's own dtype
                outs = jax.eval_shape(primal, *arrays)
                outs = tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
                cots = tuple(jax.numpy.zeros(o.shape, o.dtype) if c.dtype == jax.dtypes.float0 else c
                             for c, o in zip(cots, outs))
            grads = back(*needed, *cots, **attrs)
            grads = tuple(grads) if isinstance(grads, (tuple, list)) else (grads,)
            grads = tuple(map(typed_as_input, grads, arrays))   # (inside shard_map)
            if self.partition:  # a gradient is typed as its input is (Explicit mesh axes)
                from .jax_sharding import typed_like
                grads = tuple(map(typed_like, grads, arrays))
            return grads

        f.defvjp(fwd, bwd)
        return f

    def backward(self) -> JaxFunction:
        """The JAX function of ``fg.grad(op)`` (built once, on first use)."""
        with _backward_lock:
            if self._backward is None:
                self._backward = JaxFunction(fg.grad(self.op), flags=self.flags, api=self.api,
                                             partition=self.partition)
            return self._backward

    def _trace(self, *arrays, **attrs):
        """The op's FFI call on ``arrays`` (traced values), unpartitioned."""
        return self.ffi_call(arrays, attrs)

    def _dtype_names(self, arrays) -> tuple[str, ...]:
        op = self.op
        if len(arrays) != len(op.inputs):
            raise fg.ArgumentError(f"op {op.name} takes {len(op.inputs)} inputs ({', '.join(op.inputs)}), "
                                   f"got {len(arrays)}")
        names = []
        for i, a in enumerate(arrays):
            if not hasattr(a, "dtype"):   # (under jit a list is a pytree of tracers: no dtype)
                raise fg.ArgumentError(f"op {op.name}: input {op.inputs[i]!r} is a {type(a).__name__}; JAX "
                                       "functions take arrays (jnp.asarray it first), as jax.numpy's do")
            try:
                names.append(fg.as_dtype(a.dtype).name)
            except fg.DTypeError:
                raise fg.DTypeError(f"op {op.name}: input {op.inputs[i]!r} has dtype {a.dtype}, which "
                                    "fusegen does not support") from None
        return tuple(names)

    def validate(self, arrays, attrs: dict):
        """Check a call with the IR's rules: ``(dtype combination, bound attributes, Spec)``."""
        op = self.op
        combo = self._dtype_names(arrays)
        if combo not in self.targets:
            raise fg.DTypeError(f"op {op.name}: the XLA handlers were generated for dtype combinations "
                                f"{sorted(self.targets)}; got {combo}. Pass dtypes=... to fusegen.jax.function.")
        bound = op.bind_attrs(attrs)
        spec = fg.infer(op, combo, [tuple(a.shape) for a in arrays], bound)  # names the op and node
        return combo, bound, spec

    def ffi_call(self, arrays, attrs: dict, out_shardings=None):
        """Runs once per signature, while JAX traces: validate with the IR's rules, pick the
        handler and the vmap method, and emit the ffi_call (``out_shardings``: the results'
        shardings, stated on meshes with Explicit axes)."""
        op = self.op
        combo, bound, spec = self.validate(arrays, attrs)
        out_dtypes = self.emitted.out_dtypes[combo]
        for d in out_dtypes:
            if jax.dtypes.canonicalize_dtype(np.dtype(d)) != np.dtype(d):
                raise fg.DTypeError(f"op {op.name}: an output is {d}, which JAX represents only with "
                                    "jax.config.update('jax_enable_x64', True)")
        shardings = out_shardings or [None] * len(out_dtypes)
        results = [jax.ShapeDtypeStruct(s, np.dtype(d), sharding=sh)
                   for s, d, sh in zip(spec.out_shapes, out_dtypes, shardings)]
        results += [jax.ShapeDtypeStruct((n,), np.uint8) for n in workspace_bytes(self.emitted, combo, spec)]
        if self.api == "legacy":
            # Shapes and attributes travel in the opaque string, fixed per signature, so a batch
            # can only be run one element at a time.
            opaque = legacy_opaque(op, [a.shape for a in arrays] + [r.shape for r in results], bound)
            call = jax.ffi.ffi_call(self.targets[combo], results, vmap_method="sequential",
                                    custom_call_api_version=3, legacy_backend_config=opaque)
            ffi_attrs: dict = {}
        else:
            normalized = self.batch_rule.normalize(spec, bound)
            batchable = self.batch_rule.ok and normalized is not None and len({len(a.shape) for a in arrays}) <= 1
            method = self.vmap_method or ("broadcast_all" if batchable else "sequential")
            values = normalized if normalized is not None else bound
            ffi_attrs = {n: _ffi_attr(op.attrs[n].type, v) for n, v in values.items()}
            call = jax.ffi.ffi_call(self.targets[combo], results, vmap_method=method)
        outs = call(*arrays, **ffi_attrs)
        outs = outs[:len(spec.out_shapes)] if isinstance(outs, (list, tuple)) else [outs]  # scratch dropped
        # Inside shard_map, results vary between devices wherever an input does: typed so, JAX's
        # check refuses out_specs that would claim them replicated (the FFI call types them as
        # invariant otherwise)
        axes = frozenset().union(*map(varying, arrays)) if arrays else frozenset()
        if axes:
            outs = [vary(o, axes) for o in outs]
        return tuple(outs) if op.multi_output or len(outs) > 1 else outs[0]


def function(op: fg.OpDef, *, dtypes=None, vmap_method: str | None = None,
             flags: list[str] | None = None, api: str = "ffi", partition: bool = True) -> JaxFunction:
    """A JAX-callable ``f(*arrays, **attrs)`` running ``op`` through XLA FFI handlers.

    ``dtypes``: the dtype combinations to build (as ``fusegen.emit``; default every float dtype,
    and any other combination a call brings, built on its first call; given: exactly those).
    ``vmap_method``: None lets fusegen choose per call (see the module docstring).
    ``flags``: C++ flags replacing ``build_flags()``. Building happens here, once per content
    (the build cache); registration once per process.
    ``api="legacy"``: the old status-returning custom call (``custom_call_api_version=3``, the
    shapes and attributes in the opaque string) for hosts without typed FFI. Its caveats: vmap
    is sequential, and jaxlib exports no ``XlaCustomCallStatusSetFailure``, so a handler error
    cannot reach Python (it is printed to stderr and the results are zeroed); the arguments
    are still validated here first.
    ``partition``: on sharded arrays, run per shard with rules derived from the IR (see
    ``fusegen.jax_sharding``); False: one FFI call on whole arrays (XLA gathers its inputs).
    """
    if not isinstance(op, fg.OpDef):
        raise TypeError(f"fusegen.jax.function expects an @fusegen.op, got {type(op).__name__}")
    return JaxFunction(op, dtypes=dtypes, vmap_method=vmap_method, flags=flags, api=api, partition=partition)

