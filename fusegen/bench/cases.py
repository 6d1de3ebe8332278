"""What ``fusegen bench`` measures: one row per reference op, and the methods it is compared with.

Each op has one row in ``OPS`` (an ``OpBench``): how to make its inputs from the shape of
``x``, the attribute variants to run (``axis`` 0 and 1 for add_reduce_sum), and its
reference code. The reference is written *once*, against an array namespace ``xp``, the
obvious way a NumPy user writes it (``np.exp(x - x.max(axis, keepdims=True))`` ...), and
serves three methods: NumPy itself, ``jax.jit`` (with ``xp = jax.numpy``) and
``torch.compile`` (with a thin namespace mapping ``axis``/``keepdims`` onto torch's
``dim``/``keepdim``). The hand-written Numba versions are separate functions below: fused,
``prange`` over rows (or over chunks of rows, with per-thread partial rows for a column
sum), the code a competent Numba user writes for these 2-D shapes, not a strawman.

The bench checks every method against NumPy evaluated on float64 copies of the inputs
(``reference``), with a tolerance that grows with the number of terms reduced into each
output (``tolerance``), before it times anything.
"""
from __future__ import annotations

import functools
import math
import types
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from numba import get_num_threads

from . import layout_cases as lc

Arrays = tuple  # of np.ndarray
Thunk = Callable[[], Any]


@dataclass
class Method:
    """One way of computing an op; ``bind(arrays, attrs)`` returns a zero-argument call."""

    name: str                                   # "numpy", "njit-cpu", "numba-cpu", "aot-cpu", ...
    bind: Callable[[Arrays, dict], Thunk]
    setup_s: float = 0.0                        # fusegen.compile(...) and the like, once per op
    fusegen: bool = False                       # one of fusegen's backends (vs a method it competes with)
    synchronous: bool = False                   # the call waits for its result itself (GPU bench: wall-clock timed)


# --- the reference code, once per op, for NumPy / jax.numpy / torch -------------------------------
_GELU_C = math.sqrt(2.0 / math.pi)


def xp_add_reduce_sum(xp, x, y, *, axis):
    return xp.sum(x + y, axis=axis)


def xp_add_mul_div(xp, x, y):
    return x + y, x * y, x / y


def xp_smooth_l1(xp, x, y, *, sigma):
    d = x - y
    s2 = sigma * sigma
    ad = xp.abs(d)
    return xp.where(ad < 1.0 / s2, 0.5 * s2 * d * d, ad - 0.5 / s2)


def xp_softmax(xp, x, *, axis):
    e = xp.exp(x - xp.max(x, axis=axis, keepdims=True))
    return e / xp.sum(e, axis=axis, keepdims=True)


def xp_layer_norm(xp, x, *, axis, eps):
    mean = xp.mean(x, axis=axis, keepdims=True)
    d = x - mean
    rstd = 1.0 / xp.sqrt(xp.mean(d * d, axis=axis, keepdims=True) + eps)
    return d * rstd, mean, rstd


def xp_rms_norm(xp, x, w, *, eps):
    return x / xp.sqrt(xp.mean(x * x, axis=-1, keepdims=True) + eps) * w


def xp_bias_gelu(xp, x, b):
    h = x + b
    return 0.5 * h * (1.0 + xp.tanh(_GELU_C * (h + 0.044715 * h * h * h)))


# --- random numbers: the competitors read the keep mask fusegen computes (fusegen/philox.py's
# reference, made once per case), as they have no Philox4x32-10 stream of fusegen's layout.
# They are spared the RNG's cost; fusegen computes it in the kernel. ----------------------------
@functools.lru_cache(maxsize=2)
def keep_mask(shape: tuple, p: float, seed: int) -> np.ndarray:
    from ..philox import reference as rng_reference
    return rng_reference("uniform", seed, shape) >= np.float32(p)


def xp_dropout_add_layer_norm(xp, x, residual, gamma, beta, *, p, seed, eps):
    keep = xp.asarray(keep_mask(tuple(x.shape), p, seed))
    h = xp.where(keep, x / (1.0 - p), 0.0) + residual
    d = h - xp.mean(h, axis=-1, keepdims=True)
    rstd = 1.0 / xp.sqrt(xp.mean(d * d, axis=-1, keepdims=True) + eps)
    return d * rstd * gamma + beta, h
# --- end of random numbers ----------------------------------------------------------------------


def torch_namespace(torch: Any) -> Any:
    """torch under NumPy's names for what the references use: its reductions say ``dim`` and
    ``keepdim``, and its ``max`` with a dim returns (values, indices)."""
    return types.SimpleNamespace(
        sum=lambda a, axis=None, keepdims=False: torch.sum(a) if axis is None else torch.sum(a, dim=axis, keepdim=keepdims),
        mean=lambda a, axis=None, keepdims=False: torch.mean(a) if axis is None else torch.mean(a, dim=axis,
                                                                                                  keepdim=keepdims),
        max=lambda a, axis, keepdims=False: torch.amax(a, dim=axis, keepdim=keepdims),
        exp=torch.exp, abs=torch.abs, sqrt=torch.sqrt, tanh=torch.tanh, where=torch.where, erf=torch.erf, log=torch.log,
        asarray=torch.as_tensor,
        maximum=lambda a, b: torch.clamp(a, min=b) if isinstance(b, (int, float)) else torch.maximum(a, b),
        concat=lambda arrays, axis=0: torch.cat(arrays, dim=axis), arange=torch.arange,
        permute_dims=lambda a, axes: a.permute(axes),
        log1p=torch.log1p, round=torch.round, clip=torch.clamp,
        int8=torch.int8, astype=lambda a, d: a.to(d),
        take_along_axis=lambda a, i, axis: torch.take_along_dim(a, i, dim=axis),
        argmax=lambda a, axis: torch.argmax(a, dim=axis),
        cumulative_sum=lambda a, axis: torch.cumsum(a, dim=axis))


# the hand-written Numba versions (the njit peers)
from .handwritten import (nb_add_mul_div, nb_dropout_add_layer_norm, nb_bias_gelu, nb_layer_norm, nb_rms_norm,  # noqa: E402
                          nb_smooth_l1, nb_softmax, nb_softmax_cols, nb_sum_cols, nb_sum_rows)


from .activations import (  # noqa: E402  (#18: quantization and activations)
    int8_codes as _int8_codes, nb_dequantize, nb_gelu, nb_mish, nb_quantize_int8, nb_silu, nb_softplus,
    pow2_scales as _pow2_scales, xp_dequantize, xp_gelu, xp_mish, xp_quantize_int8, xp_silu, xp_softplus,
)


def _nb_dropout_args(a: Arrays, at: dict) -> tuple:
    keep = keep_mask(a[0].shape, at["p"], at["seed"])
    return (*a, keep, np.float32(1.0 / (1.0 - at["p"])), at["eps"])


# --- one row per op -------------------------------------------------------------------------------
def uniform(lo: float, hi: float) -> Callable:
    return lambda rng, shape, dtype: (lo + (hi - lo) * rng.random(shape, dtype=np.float32)).astype(dtype)


@dataclass(frozen=True)
class OpBench:
    """How to benchmark one reference op (see the module docstring)."""

    name: str
    xp_ref: Callable                  # fn(xp, *arrays, **attrs): the obvious NumPy code
    njit: Callable | None             # fn(arrays, attrs) -> (hand-written @njit function, its args)
    inputs: tuple[tuple[str, Callable], ...]  # per input: ("x" = x's shape, "row" = x's last dim, other), values
    variants: tuple[dict, ...]        # attribute sets, each a case per shape
    reduced: Callable = field(default=lambda shape, attrs: 1)  # terms summed into each output value
    # An op with shapes of its own (the layout rows' 3-D and 4-D tensors): its large shapes, and
    # the small ones quick runs and the per-call case use. Empty: the config's 2-D shapes.
    shapes: tuple = ()
    small_shapes: tuple = ()
    op_def: Any = None                # the op, when it is not the reference op of this name (bench.variants)
    emitted: bool = True              # the emitted C++/XLA backends run it (the fg.jax bridge rows)

    @property
    def op(self) -> Any:
        if self.op_def is not None:
            return self.op_def
        from .. import examples
        return getattr(examples, self.name)

    def make_inputs(self, shape: tuple[int, ...], dtype: str, seed: int = 0) -> Arrays:
        rng = np.random.default_rng(seed)
        return tuple(values(rng, shape if kind == "x" else shape[-1:] if kind == "row" else kind(shape),
                            np.dtype(dtype))
                     for kind, values in self.inputs)


def _smooth_l1_consts(sigma: float) -> tuple:
    """The branch limit and the two branches' constants, folded once per call, in float32."""
    s2 = sigma * sigma
    return np.float32(1.0 / s2), np.float32(0.5 * s2), np.float32(0.5 / s2)


def _axis_len(shape: tuple[int, ...], attrs: dict) -> int:
    return shape[attrs.get("axis", -1)]


# Value ranges: positive summands (the sum's magnitude is then its tolerance's scale), y away
# from 0 for x / y, both branches of smooth L1, softmax inputs whose exp spans many octaves.
_X01 = ("x", uniform(0.0, 1.0))
OPS: dict[str, OpBench] = {b.name: b for b in (
    OpBench("add_reduce_sum", xp_add_reduce_sum,
            lambda a, at: (nb_sum_rows, a) if at["axis"] % 2 else (nb_sum_cols, (*a, 4 * get_num_threads())),
            (_X01, _X01), ({"axis": 0}, {"axis": 1}), reduced=_axis_len),
    OpBench("add_mul_div", xp_add_mul_div, lambda a, at: (nb_add_mul_div, a),
            (("x", uniform(-1.0, 1.0)), ("x", uniform(1.0, 2.0))), ({},)),
    OpBench("smooth_l1", xp_smooth_l1, lambda a, at: (nb_smooth_l1, (*a, *_smooth_l1_consts(at["sigma"]))),
            (("x", uniform(-2.0, 2.0)), ("x", uniform(-2.0, 2.0))), ({"sigma": 1.0},)),
    OpBench("softmax", xp_softmax,
            lambda a, at: (nb_softmax, a) if at["axis"] % 2 else (nb_softmax_cols, (*a, 4 * get_num_threads())),
            (("x", uniform(-8.0, 8.0)),), ({"axis": 0}, {"axis": -1}), reduced=_axis_len),   # (per call: the last)
    OpBench("layer_norm", xp_layer_norm, lambda a, at: (nb_layer_norm, (*a, at["eps"])),
            (_X01,), ({"axis": -1, "eps": 1e-5},), reduced=_axis_len),
    OpBench("rms_norm", xp_rms_norm, lambda a, at: (nb_rms_norm, (*a, at["eps"])),
            (_X01, ("row", uniform(0.5, 1.5))), ({"eps": 1e-6},), reduced=_axis_len),
    OpBench("bias_gelu", xp_bias_gelu, lambda a, at: (nb_bias_gelu, a),
            (("x", uniform(-3.0, 3.0)), ("row", uniform(-0.5, 0.5))), ({},)),
    # --- layout ops (issue #16), with the shapes ---
    OpBench("transpose_add", lc.xp_transpose_add, lambda a, at: (lc.nb_transpose_add, a),
            (("x", uniform(-1.0, 1.0)), (lc.transposed, uniform(-1.0, 1.0))), ({},),
            shapes=((4096, 4096),), small_shapes=((256, 256), (4, 5))),
    OpBench("rope", lc.xp_rope, lambda a, at: (lc.nb_rope, a),
            (("x", uniform(-1.0, 1.0)), (lc.last_two, uniform(-1.0, 1.0)), (lc.last_two, uniform(-1.0, 1.0))),
            ({},), shapes=((8, 16, 1024, 128),), small_shapes=((2, 4, 32, 16), (1, 1, 2, 4))),
    OpBench("heads_split", lc.xp_heads_split, lambda a, at: (lc.nb_heads_split, (*a, at["heads"], at["scale"])),
            (("x", uniform(-1.0, 1.0)),), ({"heads": 16, "scale": 0.125},),
            shapes=((8, 1024, 2048),), small_shapes=((2, 32, 256), (1, 2, 16))),
    OpBench("causal_softmax", lc.xp_causal_softmax, lambda a, at: (lc.nb_causal_softmax, a),
            (("x", uniform(-8.0, 8.0)),), ({},), reduced=lambda shape, at: shape[-1],
            shapes=((8, 16, 512, 512),), small_shapes=((2, 2, 64, 64), (1, 1, 4, 4))),
    OpBench("swiglu", lc.xp_swiglu, lambda a, at: (lc.nb_swiglu, a), (("x", uniform(-3.0, 3.0)),), ({},),
            shapes=((8192, 8192),), small_shapes=((256, 256), (4, 6))),
    OpBench("group_norm", lc.xp_group_norm, lambda a, at: (lc.nb_group_norm, (*a, at["groups"], at["eps"])),
            (_X01, (lc.channels, uniform(0.5, 1.5)), (lc.channels, uniform(-0.5, 0.5))),
            ({"groups": 32, "eps": 1e-5},), reduced=lambda shape, at: math.prod(shape[1:]) // at["groups"],
            shapes=((32, 256, 32, 32),), small_shapes=((2, 64, 8, 8), (1, 32, 1, 2))),
    # (#18) quantization and activations
    OpBench("quantize_int8", xp_quantize_int8, lambda a, at: (nb_quantize_int8, a),
            (("x", uniform(-4.0, 4.0)), ("row", _pow2_scales)), ({},)),
    OpBench("dequantize", xp_dequantize, lambda a, at: (nb_dequantize, a), (("x", _int8_codes), ("row", _pow2_scales)),
            ({},)),
    OpBench("softplus", xp_softplus, lambda a, at: (nb_softplus, a), (("x", uniform(-20.0, 20.0)),), ({},)),
    OpBench("silu", xp_silu, lambda a, at: (nb_silu, a), (("x", uniform(-20.0, 20.0)),), ({},)),
    OpBench("mish", xp_mish, lambda a, at: (nb_mish, a), (("x", uniform(-20.0, 20.0)),), ({},)),
    OpBench("gelu", xp_gelu, lambda a, at: (nb_gelu, a), (("x", uniform(-6.0, 6.0)),), ({},)),
    # random numbers in the kernel: dropout fused with the residual add and the norm
    OpBench("dropout_add_layer_norm", xp_dropout_add_layer_norm,
            lambda a, at: (nb_dropout_add_layer_norm, _nb_dropout_args(a, at)),
            (("x", uniform(-1.0, 1.0)), ("x", uniform(-1.0, 1.0)), ("row", uniform(0.5, 1.5)),
             ("row", uniform(-0.5, 0.5))), ({"p": 0.1, "seed": 0, "eps": 1e-5},), reduced=_axis_len,
            shapes=((8192, 4096),), small_shapes=((256, 256), (4, 5))),   # issue #18's shape
)}


from .cases_i17 import I17_ROWS  # noqa: E402  (issue #17's rows: gathers, arg-reductions)
OPS.update({row["name"]: OpBench(**row) for row in I17_ROWS})


# --- correctness ----------------------------------------------------------------------------------
def as_outputs(result: Any) -> tuple[np.ndarray, ...]:
    """Any method's result (an array, a tuple, JAX or torch arrays) as a tuple of NumPy arrays."""
    items = result if isinstance(result, (tuple, list)) else (result,)
    return tuple(np.asarray(r) for r in items)


def reference(spec: OpBench, arrays: Arrays, attrs: dict) -> tuple[np.ndarray, ...]:
    """NumPy's result on float64 copies of the inputs, rounded to the input dtype: the correctly
    rounded answer every method (NumPy's own float32 code included) is compared with."""
    wide = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in arrays]   # int indices stay
    with np.errstate(all="ignore"):
        outs = as_outputs(spec.xp_ref(np, *wide, **attrs))
    # (integer results, such as quantize_int8's codes, stay integers; floats take the float inputs' dtype)
    dtype = next((a.dtype for a in arrays if a.dtype.kind == "f"), arrays[0].dtype)
    return tuple(o if o.dtype.kind in "iub" else o.astype(dtype) for o in outs)


def tolerance(dtype: np.dtype, n_reduced: int) -> float:
    """Allowed error relative to each output's largest magnitude.

    Float sums in different orders differ by about ``eps * sqrt(n)`` relative (random
    rounding); transcendental functions from different libraries by a few ulp; ``8 eps``
    covers those, and twice the sum's spread still catches one dropped term of a positive
    sum. Integers must agree exactly."""
    if not np.issubdtype(dtype, np.floating):
        return 0.0
    return float(np.finfo(dtype).eps) * (8.0 + 2.0 * math.sqrt(max(1, n_reduced)))


def check(result: Any, ref: tuple[np.ndarray, ...], rtol: float) -> tuple[float, bool]:
    """(worst error relative to its output's scale, within ``rtol``). A wrong count, shape or
    dtype, or a NaN, is an infinite error."""
    got = as_outputs(result)
    if len(got) != len(ref):
        return math.inf, False
    worst = 0.0
    for g, r in zip(got, ref):
        if g.shape != r.shape or g.dtype != r.dtype:
            return math.inf, False
        if r.size == 0:
            continue
        r64 = r.astype(np.float64)
        scale = max(float(np.max(np.abs(r64))), np.finfo(np.float64).tiny)
        err = float(np.max(np.abs(g.astype(np.float64) - r64))) / scale
        if math.isnan(err):
            return math.inf, False
        worst = max(worst, err)
    return worst, worst <= rtol


# --- the competing methods ------------------------------------------------------------------------
_probes: dict[str, bool] = {}


def importable(module: str) -> bool:
    """Whether ``module`` imports (optional extras: a broken install counts as an absent one)."""
    if module not in _probes:
        try:
            __import__(module)
            _probes[module] = True
        except Exception:  # noqa: BLE001 - any failure to import means "not installed"
            _probes[module] = False
    return _probes[module]


def jax_available() -> bool:
    """Whether jax imports (the optional ``fusegen[jax]`` extra)."""
    return importable("jax")


def jax_input_dtypes(spec: OpBench, dtype: str = "float32") -> list[tuple[str, ...]]:
    """The one dtype combination a case calls ``fg.jax.function`` with: ``dtype`` data, and the
    integer inputs (int8 codes, labels, ids) as JAX holds them (int32 without ``jax_enable_x64``)."""
    import jax
    return [tuple(jax.dtypes.canonicalize_dtype(a.dtype).name for a in spec.make_inputs((4, 5), dtype))]


_placed: dict[str, Any] = {}


def jax_on_device(arrays: Arrays) -> tuple:
    """``arrays`` put on JAX's device once, shared by every JAX method of a case (the largest
    inputs are 2 x 64 MiB). The host arrays are held with their copies, so their ids, the
    cache key, cannot be reused by new arrays meanwhile."""
    import jax
    key = tuple(id(a) for a in arrays)
    if _placed.get("key") != key:
        _placed.clear()
        _placed.update(key=key, host=arrays, dev=tuple(jax.device_put(a) for a in arrays))
    return _placed["dev"]


def numpy_method(spec: OpBench) -> Method:
    """NumPy, the obvious code: the baseline (and, on float64 copies, the reference)."""
    return Method("numpy", lambda arrays, attrs: functools.partial(spec.xp_ref, np, *arrays, **attrs))


def _njit_method(spec: OpBench) -> Method:
    def bind(arrays: Arrays, attrs: dict) -> Thunk:
        fn, args = spec.njit(arrays, attrs)
        return lambda: fn(*args)
    return Method("njit-cpu", bind)


def _jax_method(spec: OpBench) -> Method:
    import jax
    import jax.numpy as jnp

    def bind(arrays: Arrays, attrs: dict) -> Thunk:
        fn = jax.jit(functools.partial(spec.xp_ref, jnp, **attrs))
        dev = jax_on_device(arrays)
        return lambda: jax.block_until_ready(fn(*dev))  # JAX dispatches asynchronously: wait
    return Method("jax-cpu", bind)


def torch_compiled(torch: Any, fn: Callable, **options: Any) -> Callable:
    """``torch.compile(fn, dynamic=False, **options)`` for one bench case (one specialization per
    shape, as the other methods get), returned as a function whose ``fallback()`` says whether
    torch.compile really ran it: None, or why the case ran (partly) as eager PyTorch.

    Dynamo keeps compiled code per Python code object, and every case of an op calls the same
    code: after ``recompile_limit`` (8) shapes and axes it stops compiling and silently runs eager
    PyTorch under the torch.compile label. So dynamo is reset first (each case starts with an
    empty cache), and ``fallback()`` reads dynamo's counters since then: anything but exactly one
    graph, captured whole, is reported (a graph break, the recompile limit, nothing compiled, a
    recompile)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    graphs0 = counters["stats"]["unique_graphs"]
    breaks0, gave_up0 = dict(counters["graph_break"]), dict(counters["unimplemented"])
    compiled = torch.compile(fn, dynamic=False, **options)

    def new(now: dict, before: dict) -> list[str]:
        return [reason.splitlines()[0] for reason, n in now.items() if n > before.get(reason, 0)]

    def fallback() -> str | None:
        breaks, gave_up = new(counters["graph_break"], breaks0), new(counters["unimplemented"], gave_up0)
        graphs = counters["stats"]["unique_graphs"] - graphs0
        if breaks:
            return f"graph break ({breaks[0]}): {graphs} graph(s) with eager PyTorch between them"
        if gave_up:
            return f"dynamo gave up ({gave_up[0]}): eager PyTorch ran"
        if graphs == 0:
            return "dynamo compiled no graph: eager PyTorch ran"
        if graphs > 1:
            return f"dynamo recompiled ({graphs} graphs for one case)"
        return None

    def call(*args: Any) -> Any:
        return compiled(*args)
    call.fallback = fallback
    return call


def _torch_method(spec: OpBench) -> Method:
    import torch
    ns = torch_namespace(torch)

    def bind(arrays: Arrays, attrs: dict) -> Thunk:
        fn = torch_compiled(torch, functools.partial(spec.xp_ref, ns, **attrs))
        tensors = [torch.from_numpy(a) for a in arrays]  # shares the memory: no copy
        thunk = functools.partial(fn, *tensors)
        thunk.fallback = fn.fallback
        return thunk
    return Method("torch-cpu", bind)


def competitor_methods(spec: OpBench, dtype: str, kinds: list[str]) -> tuple[list[Method], dict[str, str]]:
    """The methods fusegen is compared with, among ``kinds`` ("numpy", "njit", "jax", "torch"),
    and ``{name: why it was skipped}`` for those not available here."""
    methods: list[Method] = []
    skipped: dict[str, str] = {}
    for kind in kinds:
        if kind == "numpy":
            methods.append(numpy_method(spec))
        elif kind == "njit":
            if spec.njit is None:
                skipped["njit-cpu"] = "no hand-written Numba version of this row"
            elif np.dtype(dtype) == np.float32:
                methods.append(_njit_method(spec))
            else:
                skipped["njit-cpu"] = "the hand-written Numba code is float32 code"
        elif kind == "jax":
            if not jax_available():
                skipped["jax-cpu"] = "jax is not installed (pip install 'fusegen[jax]')"
            else:
                import jax
                if jax.dtypes.canonicalize_dtype(np.dtype(dtype)) != np.dtype(dtype):
                    skipped["jax-cpu"] = f"{dtype} needs jax_enable_x64"
                else:
                    methods.append(_jax_method(spec))
        elif kind == "torch":
            if importable("torch"):
                methods.append(_torch_method(spec))
            else:
                skipped["torch-cpu"] = "torch is not installed"
        else:
            raise ValueError(f"unknown method kind {kind!r}")
    return methods, skipped
