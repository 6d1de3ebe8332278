"""The PyTorch bridge: fused ops as first-class PyTorch custom operators.

``fg.torch.function(op)`` registers ``op`` with ``torch.library.custom_op`` as
``fusegen::<op>_<backend>_<hash>`` and returns a callable ``f(*tensors, **attrs)``:

* **Schema** from the op: its tensor inputs, then its attributes as keyword-only arguments with
  their types and defaults (``bool int float str int[] float[]``; nested lists have no schema
  type and are refused). An op that declares in-place outputs (``@fg.op(inplace=...)``) gets a
  second, mutating operator (``mutates_args`` = those inputs), called by ``f(..., inplace=True)``.
* **Fake tensors** from fusegen's shape and dtype rules (``fg.infer``), so ``torch.compile``
  (``fullgraph=True``) traces through the call without running it. Under dynamic shapes each
  output dim is the input dim it walks with (``fusegen.plan.dimflow``), so it stays symbolic.
* **Autograd** from ``fg.grad``: the backward is another registered fused op; only the inputs the
  gradient op reads (``.needs == "value"``) are saved, those it only measures are remembered
  as shapes.
* **CPU** tensors run through the Numba (default) or AOT backend with no copies: inputs are
  ``tensor.numpy()`` views, outputs are allocated by torch and passed as ``out=`` (a
  non-contiguous input is copied by fusegen's runtime, as for NumPy arrays). **CUDA** tensors go
  to the numba-cuda kernel through ``__cuda_array_interface__``, on the current torch stream.
* **dtypes** map both ways (bool, int8..int64, uint8..uint64, float16, float32, float64,
  complex64, complex128; a complex view with torch's lazy conjugate or negative bit, as
  ``x.conj()`` gives, is resolved into a tensor of its values first).
  fusegen has no bfloat16: bfloat16 inputs are widened to float32 at the bridge (exact), the op
  runs in float32, and the outputs that would be float16 for float16 inputs (NumPy's rules,
  which fusegen follows) are rounded to bfloat16. Mixing bfloat16 with float16 is refused.
  Promotion is NumPy's, not torch's (``float16 + int32`` is float64).
* **DTensor**: a sharding strategy per op, derived from the same IR rules as the JAX
  partitioning (``fusegen.torch_sharding``).

Needs ``pip install "fusegen[torch]"``.
"""
from __future__ import annotations

import hashlib
import json
import threading

import torch

import fusegen as fg
from .plan import dimflow
from .dtypes import AttrType, exact_attr
from .rt.call import remember

__all__ = ["function", "TorchFunction", "TORCH_DTYPES", "schema"]

#: fusegen dtype name -> torch dtype (and back, below); bfloat16 is handled apart.
TORCH_DTYPES: dict[str, torch.dtype] = {
    "bool": torch.bool, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64,
    "uint8": torch.uint8, "uint16": torch.uint16, "uint32": torch.uint32, "uint64": torch.uint64,
    "float16": torch.float16, "float32": torch.float32, "float64": torch.float64,
    "complex64": torch.complex64, "complex128": torch.complex128,
}
FROM_TORCH: dict[torch.dtype, str] = {v: k for k, v in TORCH_DTYPES.items()}

_SCHEMA_TYPES = {AttrType.BOOL: "bool", AttrType.INT: "int", AttrType.FLOAT: "float", AttrType.STR: "str",
                 AttrType.INTS: "int[]", AttrType.FLOATS: "float[]"}

_FUNCTIONS: dict = {}    # (op key, backend) -> TorchFunction: torch registers a name once per process
_LOCK = threading.RLock()


def schema(op: fg.OpDef, inplace: dict | None = None) -> str:
    """The op's torch schema: ``(Tensor x, ..., *, int axis=1, ...) -> Tensor``. ``inplace``
    ({output: input}) gives the mutating variant: those inputs are ``Tensor(a!)`` and those
    outputs are not returned."""
    inplace = inplace or {}
    args = []
    for i, name in enumerate(op.inputs):
        alias = f"({chr(ord('a') + list(inplace.values()).index(i))}!)" if i in inplace.values() else ""
        args.append(f"Tensor{alias} {name}")
    if op.attrs:
        args.append("*")
    for s in op.attrs.values():
        if s.type not in _SCHEMA_TYPES:
            raise NotImplementedError(f"fusegen.torch: op {op.name}: attribute {s.name!r} is {s.type.value}, which a "
                                      "torch schema cannot carry (no nested lists); pass it flattened")
        default = "" if s.required else "=" + _default(s.type, s.default)
        args.append(f"{_SCHEMA_TYPES[s.type]} {s.name}{default}")
    n = op.arity("fusegen.torch")[0] - len(inplace)
    ret = "()" if n == 0 else "Tensor" if n == 1 else "(" + ", ".join(["Tensor"] * n) + ")"
    return f"({', '.join(args)}) -> {ret}"


def _default(t: AttrType, v) -> str:
    if t is AttrType.BOOL:
        return "True" if v else "False"
    if t is AttrType.STR:
        return json.dumps(v)
    if t in (AttrType.INTS, AttrType.FLOATS):
        return "[" + ", ".join(map(repr, v)) + "]"
    return repr(v)


class _Signature:
    """What a call with given dtypes, shapes and attributes needs (cached per signature)."""

    __slots__ = ("names", "widen", "out_shapes", "kernel_dtypes", "dtypes", "spec", "attrs", "kernel_attrs",
                 "converts", "lazy")

    def __init__(self, op: fg.OpDef, dtypes, shapes, attrs: dict):
        bf16 = [d == torch.bfloat16 for d in dtypes]
        names = []
        for i, d in enumerate(dtypes):
            if d == torch.bfloat16:
                names.append("float32")
            elif d in FROM_TORCH:
                names.append(FROM_TORCH[d])
            else:
                raise fg.DTypeError(f"op {op.name}: input {op.inputs[i]!r} has dtype {d}, which fusegen does not "
                                    f"support ({', '.join(TORCH_DTYPES)}, and bfloat16 through float32)")
        if any(bf16) and torch.float16 in dtypes:
            raise fg.DTypeError(f"op {op.name}: bfloat16 and float16 inputs cannot be mixed (fusegen computes "
                                "bfloat16 in float32 and has no rule for the pair)")
        self.attrs = op.bind_attrs(attrs)
        op = op.specialize(names, shapes, self.attrs)   # an op traced per rank or shape: this call's trace
        self.spec = fg.infer(op, names, shapes, self.attrs)
        kernel = [d.name for d in self.spec.out_dtypes]
        if any(bf16):   # outputs float16 inputs would give as float16 are bfloat16
            proxy = fg.infer(op, ["float16" if b else n for b, n in zip(bf16, names)], shapes, self.attrs)
            out = [torch.bfloat16 if p.name == "float16" and k == "float32" else TORCH_DTYPES[k]
                   for p, k in zip(proxy.out_dtypes, kernel)]
        else:
            out = [TORCH_DTYPES[k] for k in kernel]
        self.names, self.widen = names, bf16
        self.out_shapes = self.spec.out_shapes
        self.kernel_dtypes = [TORCH_DTYPES[k] for k in kernel]
        self.dtypes = out
        self.kernel_attrs = _attrs_for_kernel(attrs)
        self.converts = any(bf16) or out != self.kernel_dtypes
        self.lazy = any(d.is_complex for d in dtypes)   # may carry torch's conjugate/negative bits


def _hint(d) -> int:
    if isinstance(d, int):
        return d
    from torch.fx.experimental.symbolic_shapes import optimization_hint
    return int(optimization_hint(d))


def _key(tensors, attrs: dict):
    key = tuple([(t.dtype, t.shape) for t in tensors])
    if attrs:   # values and their types: 1, 1.0 and True are equal as keys but not as attributes
        key += tuple((k, exact_attr(tuple(v) if isinstance(v, list) else v), type(v))
                     for k, v in sorted(attrs.items()))
    return key


def _attrs_for_kernel(attrs: dict) -> dict:
    """List attributes as tuples: the kernel caches its signature by hashing them."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in attrs.items()}


class TorchFunction:
    """A fused op registered with PyTorch; see ``fusegen.torch.function``."""

    def __init__(self, op: fg.OpDef, backend: str = "numba"):
        if backend not in ("numba", "aot"):
            raise ValueError(f"backend={backend!r}: use 'numba' or 'aot' (CUDA tensors use the numba-cuda kernel)")
        self.op, self.backend = op, backend
        self.name = f"{op.name}_{backend}_{op.key[:12]}"
        if op.inplace:   # the same computation with other in-place declarations is another operator
            self.name += "_" + hashlib.sha256(repr(sorted(op.inplace.items())).encode()).hexdigest()[:6]
        n_out, self.returns_tuple = op.arity("fusegen.torch")   # (an op traced per rank: probed)
        self.multi = n_out > 1
        self._kernels: dict = {}
        self._sigs: dict = {}
        self._grad: TorchFunction | None = None
        self._lock = threading.Lock()
        self.custom_op = torch.library.custom_op(f"fusegen::{self.name}", self._impl, mutates_args=(),
                                                 schema=schema(op))
        self.custom_op.register_fake(self._fake)
        if op.attrs:
            setup = self._setup_context
        else:   # torch passes keyword-only inputs only to ops that have some
            def setup(ctx, inputs, output):
                self._setup_context(ctx, inputs, {}, output)
        self.custom_op.register_autograd(self._backward, setup_context=setup)
        self.inplace_op = None
        if op.inplace:
            mutated = tuple(op.inputs[i] for i in op.inplace.values())
            self.inplace_op = torch.library.custom_op(f"fusegen::{self.name}_inplace", self._impl_inplace,
                                                      mutates_args=mutated, schema=schema(op, op.inplace))
            self.inplace_op.register_fake(self._fake_inplace)
        from . import torch_sharding
        torch_sharding.register(self)

    def __repr__(self) -> str:
        return f"<fusegen.torch.TorchFunction fusegen::{self.name}>"

    def for_op(self, op: fg.OpDef) -> TorchFunction:
        """Another op (a round of a sharded call) through the same backend."""
        return function(op, backend=self.backend)

    @staticmethod
    def torch_dtype(name: str) -> torch.dtype:
        """The torch dtype of a fusegen dtype name."""
        return TORCH_DTYPES[name]

    @property
    def opoverload(self):
        """The registered ``torch.ops.fusegen.<name>.default``."""
        return self.custom_op._opoverload

    def __call__(self, *tensors, inplace: bool = False, **attrs):
        if not torch.compiler.is_compiling():   # (compiling, ints may be symbolic: the kernel checks them)
            if attrs:   # (first: a tensor given by keyword is named as such, not as a missing input)
                attrs = self._bound(attrs)
            self._check_inputs(tensors)
        if inplace:
            return self._call_inplace(tensors, attrs)
        if not torch.compiler.is_compiling() and any(type(t).__name__ == "DTensor" for t in tensors):
            from . import torch_sharding
            # exact, not expressible as a strategy; forward only: with gradients wanted, the
            # strategies' path (DTensor redistributes the split reduced dim, and differentiates that)
            wants_grad = torch.is_grad_enabled() and any(getattr(t, "requires_grad", False) for t in tensors)
            if not wants_grad and torch_sharding.needs_rounds(self, tensors, attrs):
                return torch_sharding.run_rounds(self, tensors, attrs)
        return self.custom_op(*tensors, **attrs)

    def _check_inputs(self, tensors) -> None:
        """The op's input count and tensors, named as fusegen names them (torch's schema error names
        the registered operator, ``fusegen::<op>_<backend>_<hash>``)."""
        names = self.op.inputs
        if len(tensors) != len(names):
            raise fg.ArgumentError(f"op {self.op.name} takes {len(names)} inputs ({', '.join(names)}), "
                                   f"got {len(tensors)}")
        for n, t in zip(names, tensors):
            if not isinstance(t, torch.Tensor):
                raise fg.ArgumentError(f"op {self.op.name}: input {n!r} is a {type(t).__name__}, not a torch.Tensor "
                                       "(torch.as_tensor it first)")

    def _bound(self, attrs: dict) -> dict:
        """The attributes given, checked and converted as a call on arrays does (torch's schema
        would take 1 for a bool, np.True_ for an int, [True] for a list[int], a 0-d tensor for a
        scalar), as values its schema takes: list attributes as lists, ints in int64."""
        bound = self.op.bind_attrs(attrs)
        out = {}
        for k in attrs:
            v = bound[k]
            if type(v) is int and not -2 ** 63 <= v < 2 ** 63:
                raise fg.AttrError(f"op {self.op.name}: attribute {k!r}: {v} does not fit in a torch int (int64)")
            out[k] = list(v) if isinstance(v, tuple) else v
        return out

    # --- running ----------------------------------------------------------------------------
    def signature(self, tensors, attrs: dict) -> _Signature:
        key = _key(tensors, attrs)
        sig = self._sigs.get(key)
        if sig is None:
            sig = _Signature(self.op, [t.dtype for t in tensors], [tuple(t.shape) for t in tensors], attrs)
            with _LOCK:   # (bounded as a kernel's signatures are: a seed per step holds no memory per step)
                remember(self._sigs, key, sig)
        return sig

    def kernel(self, device: str):
        """The fusegen kernel for a device type (built once)."""
        k = self._kernels.get(device)
        if k is None:
            if device == "cpu":
                k = fg.compile(self.op, backend=self.backend)
            elif device == "cuda":
                k = fg.compile(self.op, device="cuda")
            else:
                raise fg.ArgumentError(f"op {self.op.name}: fusegen runs CPU and CUDA tensors, got {device} tensors")
            self._kernels[device] = k
        return k

    def _impl(self, *tensors, **attrs):
        return self._run(tensors, attrs)

    def _run(self, tensors, attrs: dict):
        """The call on real tensors: allocate outputs with torch, run the kernel on views."""
        try:
            sig = self._sigs[_key(tensors, attrs)]
        except (KeyError, TypeError):
            sig = self.signature(tensors, attrs)
        device = tensors[0].device if tensors else torch.device("cpu")   # (an op without inputs: the host)
        for t in tensors:
            if t.device != device:
                raise fg.ArgumentError(f"op {self.op.name}: inputs are on several devices ({device}, {t.device})")
        ins = [t.detach().float() if w else t.detach() for t, w in zip(tensors, sig.widen)] if sig.converts \
            else [t.detach() for t in tensors]
        if sig.lazy:   # x.conj() is a view with a conjugate bit: .numpy() and CUDA kernels want values
            ins = [t.resolve_conj().resolve_neg() for t in ins]
        out = [torch.empty(s, dtype=d, device=device) for s, d in zip(sig.out_shapes, sig.kernel_dtypes)]
        if device.type == "cpu":
            views = [o.numpy() for o in out]
            self.kernel("cpu")(*[t.numpy() for t in ins], out=tuple(views) if self.returns_tuple else views[0],
                               **sig.kernel_attrs)
        else:
            self._run_cuda(ins, out, sig.kernel_attrs)
        if sig.converts:
            out = [o if o.dtype == d else o.to(d) for o, d in zip(out, sig.dtypes)]
        return tuple(out) if self.multi else out[0]

    def _run_cuda(self, ins, out, attrs: dict) -> None:
        """CUDA tensors: the numba-cuda kernel reads and writes them in place through
        ``__cuda_array_interface__``, launched on torch's current stream."""
        kernel = self.kernel(ins[0].device.type)
        stream = current_stream(ins[0].device)
        ins = [t.contiguous() for t in ins]
        kernel(*ins, out=tuple(out) if self.returns_tuple else out[0], stream=stream, **attrs)

    def _fake(self, *tensors, **attrs):
        shapes = [tuple(map(_hint, t.shape)) for t in tensors]
        sig = _Signature(self.op, [t.dtype for t in tensors], shapes, attrs)
        out_shapes = sig.out_shapes
        if any(not isinstance(d, int) for t in tensors for d in t.shape):
            out_shapes = _symbolic_shapes(sig.spec, tensors)
        res = [tensors[0].new_empty(s, dtype=d) if tensors else torch.empty(s, dtype=d)
               for s, d in zip(out_shapes, sig.dtypes)]
        return tuple(res) if self.multi else res[0]

    # --- in place ------------------------------------------------------------------------------
    def _call_inplace(self, tensors, attrs):
        if self.inplace_op is None:
            raise fg.ArgumentError(f"op {self.op.name}: inplace=True, but the op declares no output that may share an "
                                   "input's memory (@fg.op(inplace={output: 'input'}))")
        # before dispatch: torch's math-bits fallback would resolve the bit into a copy, and the
        # in-place write would miss the caller's tensor (under torch.compile the tensors are fakes,
        # whose bits Dynamo cannot read)
        if not torch.compiler.is_compiling() and any(t.is_conj() or t.is_neg() for t in tensors):
            raise fg.ArgumentError(f"op {self.op.name}: in place on a view with torch's lazy conjugate or negative "
                                   "bit (x.conj()): its memory does not hold its values; resolve_conj() it first")
        # No autograd through an in-place call: where grad mode would record it, refuse (as torch's
        # own in-place ops refuse a leaf that requires grad) rather than cut the graph silently
        # (the result had no grad_fn and the inputs' gradients vanished)
        wants = [n for n, t in zip(self.op.inputs, tensors) if isinstance(t, torch.Tensor) and t.requires_grad]
        if wants and torch.is_grad_enabled():
            raise fg.ArgumentError(f"op {self.op.name}: inplace=True has no autograd, and input {wants[0]!r} requires "
                                   "grad; call it under torch.no_grad() (an optimizer step), or without inplace=True")
        rest = self.inplace_op(*tensors, **attrs)
        rest = list(rest) if isinstance(rest, (tuple, list)) else ([] if rest is None else [rest])
        outs = [tensors[self.op.inplace[k]] if k in self.op.inplace else rest.pop(0)
                for k in range(len(self.op.graph.outputs))]
        return tuple(outs) if self.multi else outs[0]

    def _impl_inplace(self, *tensors, **attrs):
        sig = self.signature(tensors, attrs)
        if any(sig.widen) or any(t.device.type != "cpu" for t in tensors):
            raise fg.ArgumentError(f"op {self.op.name}: in place runs on CPU tensors of fusegen dtypes (not bfloat16)")
        arrays = [t.detach().numpy() for t in tensors]
        rest = {k: torch.empty(s, dtype=d) for k, (s, d) in enumerate(zip(sig.out_shapes, sig.kernel_dtypes))
                if k not in self.op.inplace}
        out = [None if k in self.op.inplace else rest[k].numpy() for k in range(len(sig.out_shapes))]
        # the runtime checks the plan and the arrays, then writes the declared outputs over their inputs
        self.kernel("cpu")(*arrays, inplace=True, out=tuple(out) if self.returns_tuple else out[0],
                           **_attrs_for_kernel(attrs))
        rest = list(rest.values())
        return None if not rest else tuple(rest) if len(rest) > 1 else rest[0]

    def _fake_inplace(self, *tensors, **attrs):
        res = self._fake(*tensors, **attrs)
        res = res if isinstance(res, tuple) else (res,)
        rest = [r for k, r in enumerate(res) if k not in self.op.inplace]
        return None if not rest else tuple(rest) if len(rest) > 1 else rest[0]

    # --- autograd -------------------------------------------------------------------------------
    def backward_function(self) -> TorchFunction:
        """The registered ``fg.grad(op)`` (built on first use)."""
        with self._lock:
            if self._grad is None:
                self._grad = function(fg.grad(self.op), backend=self.backend)
            return self._grad

    def _setup_context(self, ctx, inputs, keyword_only_inputs, output):
        back = self.backward_function()
        needs = back.op.needs
        ctx.attrs = dict(keyword_only_inputs)
        ctx.measured = {n: _measure(t) for n, t in zip(self.op.inputs, inputs) if needs.get(n) == "shape"}
        ctx.save_for_backward(*[t for n, t in zip(self.op.inputs, inputs) if needs.get(n) == "value"])

    def _backward(self, ctx, *grads):
        back = self.backward_function()
        saved = iter(ctx.saved_tensors)
        args = []
        for name in back.op.inputs[:len(back.op.needs)]:
            if back.op.needs[name] == "value":
                args.append(next(saved))
            else:   # only its shape is read: an unwritten buffer of that shape will do
                args.append(_stand_in(ctx.measured[name]))
        res = back(*args, *grads, **ctx.attrs)
        res = res if isinstance(res, tuple) else (res,)
        return tuple(r if need else None for r, need in zip(res, ctx.needs_input_grad))


def _measure(t) -> tuple:
    """What a stand-in for ``t`` needs (an input whose gradient reads only its shape): its
    shape, dtype and device, and for a DTensor its local shape, mesh and placements (the backward
    runs on DTensors, which take no plain tensor beside them)."""
    if type(t).__name__ == "DTensor":
        return t.shape, t.dtype, t.device, (t.to_local().shape, t.device_mesh, t.placements, t.stride())
    return t.shape, t.dtype, t.device, None


def _stand_in(measured):
    """An unwritten tensor of a measured input's shape (``_measure``)."""
    shape, dtype, device, dist = measured
    if dist is None:
        return torch.empty(shape, dtype=dtype, device=device)
    from torch.distributed.tensor import DTensor
    local_shape, mesh, placements, stride = dist
    local = torch.empty(local_shape, dtype=dtype, device=device)
    return DTensor.from_local(local, mesh, placements, run_check=False, shape=shape, stride=stride)


def current_stream(device):
    """torch's current CUDA stream on ``device`` (what a CUDA kernel launches on)."""
    return torch.cuda.current_stream(device)


def _symbolic_shapes(spec, tensors) -> list[tuple]:
    """Output shapes in terms of the inputs' (symbolic) dims: each output dim is an input dim of
    the same factor (``fusegen.plan.dimflow``), or a constant (a kept size-1 dim)."""
    flow = dimflow.analyze(spec)
    where: dict[int, object] = {}
    for i, dims in enumerate(flow.inputs):
        for d, f in enumerate(dims):
            where.setdefault(f, tensors[i].shape[d])
    out = []
    for dims, shape in zip(flow.outputs, spec.out_shapes):
        out.append(tuple(where[f] if f in where and _hint(where[f]) == n else n for f, n in zip(dims, shape)))
    return out


def function(op: fg.OpDef, *, backend: str = "numba") -> TorchFunction:
    """Register ``op`` as a PyTorch custom operator (once per process per op content and backend)
    and return its callable ``f(*tensors, inplace=False, **attrs)``. ``backend`` runs CPU tensors:
    ``"numba"`` or ``"aot"`` (emitted C++); CUDA tensors use the numba-cuda kernel."""
    if not isinstance(op, fg.OpDef):
        raise TypeError(f"fusegen.torch.function expects an @fusegen.op, got {type(op).__name__}")
    key = (op.key, tuple(sorted(op.inplace.items())), backend)
    with _LOCK:
        fn = _FUNCTIONS.get(key)
        if fn is None:
            fn = _FUNCTIONS[key] = TorchFunction(op, backend)
        return fn

