"""Fused ops on sharded JAX arrays: each ``fg.jax.function`` call is partitioned by rules derived
from the op's IR (``fusegen.plan.dimflow``), so XLA runs it shard by shard instead of gathering its
inputs onto every device.

A call is wrapped in ``jax.experimental.custom_partitioning`` with

* a **Shardy rule** (``sharding_rule``): one factor per dimflow factor; factors that only inputs
  have and a reduction folds are *reduction* factors, factors some node needs whole are
  *need-replication* factors; everything else passes through, so Shardy propagates shardings
  through the call like through an elementwise op;
* a **partition callback**: given the operands' shardings, ``dimflow.assign`` picks the split
  dims and ``dimflow.program`` the rounds; each round is the XLA FFI call of an ordinary fused op
  on the shard's data, and the collectives between rounds are ``psum``, ``pmax``, ``pmin`` or an
  ``all_gather`` of partial products (a ``psum`` of logs would not be exact);
* ``infer_sharding_from_operands``, the same policy, for the GSPMD partitioner
  (``jax_use_shardy_partitioner=False``).

Meshes with **Explicit** axes (``jax.make_mesh``'s default in JAX 0.10) carry shardings in the
types: the result shardings are stated at trace time, from the input types with the same policy,
so the types and the partitioned code agree (a result typed replicated would be gathered).
**Auto** axes and ``jax.jit(in_shardings=...)`` are left to propagation.

``custom_partitioning`` has no batching rule, so the call is also a ``custom_vmap``: a batch dim
becomes one more elementwise dim of the same partitioned call where the op allows it (as
``vmap_method="broadcast_all"``); otherwise the batch runs through the plain FFI call's own
``vmap`` method. Inside ``shard_map`` every axis is manual and the FFI call runs as it is.
"""
from __future__ import annotations

import functools
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap
from jax.experimental.custom_partitioning import ArrayMapping, CompoundFactor, SdyShardingRule, custom_partitioning
from jax.sharding import AxisType, NamedSharding, PartitionSpec

from .plan import dimflow
from .dtypes import as_dtype as fg_dtype
from .errors import ShardingWarning

__all__ = ["call", "sharding_rule", "mesh_axes", "round_function", "typed_like", "combine"]

# (round op, dtypes, flags, api) -> the JaxFunction running it; round ops are cached on their op
_ROUNDS: dict = {}
_ROUNDS_LOCK = threading.Lock()


def call(jf, arrays, attrs: dict):
    """``jf``'s op on ``arrays`` (JAX values, traced) as one partitionable call."""
    _, _, spec = jf.validate(arrays, attrs)
    flow = dimflow.analyze(spec)
    cp = custom_partitioning(functools.partial(_body, jf, flow, attrs))
    # the caller's 64-bit setting, for the partition callback (another thread: see _partition)
    x64 = bool(jax.config.jax_enable_x64)
    cp.def_partition(functools.partial(_partition, jf, flow, attrs, x64),
                     infer_sharding_from_operands=functools.partial(_infer, flow, jf.op.multi_output),
                     sharding_rule=sharding_rule(flow))
    cv = custom_vmap(lambda *a: cp(*a))
    cv.def_vmap(functools.partial(_vmap_rule, jf, spec, attrs))
    return cv(*arrays)


def _body(jf, flow, attrs, *arrays):
    """The call on whole arrays: what XLA lowers on one device, and what the types come from
    (``specialized``: the handlers for these shapes, a gradient's no-op sum_to dropped)."""
    return jf.specialized(arrays, attrs).ffi_call(arrays, attrs, _explicit_out(flow, arrays))


def _explicit_out(flow, arrays):
    """Result shardings over the Explicit mesh axes of the inputs' types, or None."""
    shardings = [getattr(jax.typeof(a), "sharding", None) for a in arrays]
    mesh = next((s.mesh for s in shardings if isinstance(s, NamedSharding) and not s.mesh.empty), None)
    if mesh is None:
        return None
    explicit = {n for n, t in zip(mesh.axis_names, mesh.axis_types) if t == AxisType.Explicit}
    if not explicit:
        return None
    in_axes = [[tuple(x for x in d if x in explicit) for d in mesh_axes(s, len(a.shape))]
               for s, a in zip(shardings, arrays)]
    sh = dimflow.assign(flow, in_axes, dict(mesh.shape))
    return [NamedSharding(mesh, PartitionSpec(*dims)) for dims in sh.outputs]


def typed_like(value, like):
    """``value`` resharded to ``like``'s sharding type where that differs on Explicit axes (a
    gradient must have its input's type: a replicated weight's gradient, a sum over split rows,
    comes out split along the weight's dim and is gathered here)."""
    want, have = getattr(jax.typeof(like), "sharding", None), getattr(jax.typeof(value), "sharding", None)
    if not isinstance(want, NamedSharding) or want.mesh.empty or not isinstance(have, NamedSharding):
        return value
    if AxisType.Explicit not in want.mesh.axis_types or tuple(want.spec) == tuple(have.spec):
        return value
    return jax.sharding.reshard(value, want.spec)


def mesh_axes(sharding, rank: int) -> list[tuple[str, ...]]:
    """Per dim, the mesh axes splitting it (``()`` for none) of a NamedSharding (anything else:
    unsplit)."""
    out: list[tuple[str, ...]] = [()] * rank
    if isinstance(sharding, NamedSharding):
        for d, e in enumerate(tuple(sharding.spec)[:rank]):
            if isinstance(e, str):
                out[d] = (e,)
            elif isinstance(e, tuple):
                out[d] = tuple(e)
    return out


def _assign(flow, mesh, arg_shapes):
    in_axes = [mesh_axes(s.sharding, len(s.shape)) for s in arg_shapes]
    return dimflow.assign(flow, in_axes, dict(mesh.shape))


def _pack(values, multi: bool):
    return tuple(values) if multi or len(values) > 1 else values[0]


def _infer(flow, multi, mesh, arg_shapes, result_shape):
    sh = _assign(flow, mesh, arg_shapes)
    return _pack([NamedSharding(mesh, PartitionSpec(*d)) for d in sh.outputs], multi)


def _partition(jf, flow, attrs, x64, mesh, arg_shapes, result_shape):
    """The partition callback. XLA runs it on a thread of its own, where a ``with
    jax.enable_x64(True)`` of the caller is not in effect: the caller's setting (``x64``) is
    entered for the callback (the dtypes rounds exchange) and for the trace of ``lower`` that
    custom_partitioning makes right after it returns, and left when ``lower`` has been traced."""
    if bool(jax.config.jax_enable_x64) == x64:
        return _partition_program(jf, flow, attrs, mesh, arg_shapes)
    scope = jax.enable_x64(x64)
    scope.__enter__()
    try:
        mesh, lower, out_shardings, arg_shardings = _partition_program(jf, flow, attrs, mesh, arg_shapes)
    except BaseException:
        scope.__exit__(None, None, None)
        raise

    def lower_x64(*local):
        try:
            return lower(*local)
        finally:
            scope.__exit__(None, None, None)
    return mesh, lower_x64, out_shardings, arg_shardings


def _partition_program(jf, flow, attrs, mesh, arg_shapes):
    sh = _assign(flow, mesh, arg_shapes)
    if sh.dropped:   # a slice or gather along a split dim, sizes that do not divide: say so
        warnings.warn(f"fusegen.jax: op {jf.op.name}: " + "; ".join(sh.dropped) + " (XLA gathers that dim)",
                      ShardingWarning, stacklevel=2)
    prog = dimflow.program(flow, sh, exchange=_wire)
    multi = jf.op.multi_output
    if prog is None:
        def lower(*local):   # each shard's call, on the handlers for its shapes (as _body)
            return jf.specialized(local, attrs).ffi_call(local, attrs)
    else:
        rounds = list(prog.rounds) + ([prog.final] if prog.final is not None else [])
        with ThreadPoolExecutor(max(1, min(len(rounds), 4))) as pool:   # builds run in parallel
            fns = dict(zip((id(r) for r in rounds), pool.map(lambda r: round_function(jf, r), rounds)))

        def run_round(rnd, args):
            outs = fns[id(rnd)].ffi_call(args, attrs)
            return outs if isinstance(outs, tuple) else (outs,)

        def lower(*local):
            return _pack(prog.run(local, run_round, combine), multi)
    arg_shardings = tuple(NamedSharding(mesh, PartitionSpec(*d)) for d in sh.inputs)
    out_shardings = _pack([NamedSharding(mesh, PartitionSpec(*d)) for d in sh.outputs], multi)
    return mesh, lower, out_shardings, arg_shardings


def _wire(d):
    """The dtype JAX carries ``d`` in between rounds (no 64-bit arrays without jax_enable_x64)."""
    return fg_dtype(jax.dtypes.canonicalize_dtype(d.np))


def round_function(jf, rnd):
    """The JaxFunction of a round's op for its dtypes (built once per process, cached)."""
    if rnd.op is jf.op and rnd.dtypes in jf.targets:
        return jf
    key = (rnd.op, rnd.dtypes, tuple(jf.flags), jf.api)
    with _ROUNDS_LOCK:
        fn = _ROUNDS.get(key)
    if fn is None:
        fn = type(jf)(rnd.op, dtypes=",".join(rnd.dtypes), flags=jf.flags, partition=False)
        with _ROUNDS_LOCK:
            fn = _ROUNDS.setdefault(key, fn)
    return fn


def combine(value, p: dimflow.Partial):
    """The collective that turns per-shard partials into the reduction's value."""
    axes = p.axes if len(p.axes) > 1 else p.axes[0]
    if p.combine == "sum":
        value = jax.lax.psum(value, axes)
    elif p.combine in ("max", "min"):
        fold = jax.lax.pmax if p.combine == "max" else jax.lax.pmin
        value = fold(value.astype(jnp.uint8), axes).astype(value.dtype) if value.dtype == bool else fold(value, axes)
    else:  # prod: every shard's partial product, multiplied (exact, unlike a psum of logs)
        value = jnp.prod(jax.lax.all_gather(value, axes, axis=0), axis=0, dtype=value.dtype)
    if p.count:
        value = value / p.count
    return value.astype(p.dtype.np)


def sharding_rule(flow) -> SdyShardingRule:
    """The Shardy rule of a call, from its dim flow (factor names ``f<k>``). A ``MAJOR`` link
    joins two sizes into one factor (a reshape's -1 dim and x's rows): Shardy takes the larger dim
    as the compound of the smaller one (major) and a minor factor ``m<k>``, so a sharding of one
    propagates to the other."""
    fresh = iter(range(10 ** 9))
    used: set[int] = set()
    whole: set[str] = set()
    sizes: dict[str, int] = {}

    def mapping(dims, shape) -> ArrayMapping:
        names, seen = [], set()
        for f, size in zip(dims, shape):
            fac = flow.factors[f]
            small, big = min(fac.sizes), max(fac.sizes)
            linked = len(fac.sizes) == 2
            if f in seen or len(fac.sizes) > 2 or (linked and (small == 0 or big % small)):   # once per tensor
                names.append(f"u{next(fresh)}")
            elif linked and size == big:
                names.append(CompoundFactor(f"f{f}", f"m{f}"))
                sizes[f"f{f}"], sizes[f"m{f}"] = small, big // small
                used.add(f)
            else:
                names.append(f"f{f}")
                whole.add(f"f{f}")
                used.add(f)
            seen.add(f)
        return ArrayMapping(*names)

    g = flow.spec.opdef.graph
    ins = {n.arg: g.idx(n) for n in g.nodes if n.op.value == "input"}
    in_shapes = [flow.spec.info[ins[i]].shape if i in ins else () for i in range(len(flow.inputs))]
    operands = tuple(mapping(d, s) for d, s in zip(flow.inputs, in_shapes))
    results = tuple(mapping(d, flow.spec.of(o).shape) for d, o in zip(flow.outputs, g.outputs))
    # Shardy wants special factors in the order the rule first names them (operands, results)
    order = list(dict.fromkeys(int(n[1:]) for m in (*operands, *results) for d in m
                               for n in (d if isinstance(d, CompoundFactor) else (d,)) if n[0] == "f"))
    reduction = tuple(f"f{f}" for f in order if flow.factors[f].reduced_by
                      and not flow.factors[f].in_outputs and not flow.factors[f].replicate)
    replicate = tuple(f"f{f}" for f in order if flow.factors[f].replicate)
    sizes = {k: v for k, v in sizes.items() if k not in whole}   # a whole dim states its own size
    return SdyShardingRule(operands, results, reduction_factors=reduction, need_replication_factors=replicate,
                           **sizes)


def _vmap_rule(jf, spec, attrs, axis_size, in_batched, *args):
    """A batch of calls: one partitioned call on the batch where a leading batch dim keeps the
    op's meaning (the rule ``vmap_method="broadcast_all"`` follows), else the plain FFI call's
    vmap (sequential)."""
    bound = jf.op.bind_attrs(attrs)
    normalized = jf.batch_rule.normalize(spec, bound)
    same_rank = len({a.ndim - b for a, b in zip(args, in_batched)}) <= 1
    if jf.vmap_method is None and jf.batch_rule.ok and normalized is not None and same_rank:
        full = [a if b else jnp.broadcast_to(a, (axis_size, *a.shape)) for a, b in zip(args, in_batched)]
        outs = call(jf, full, normalized)
    else:
        outs = jax.vmap(lambda *a: jf.ffi_call(a, attrs), in_axes=[0 if b else None for b in in_batched])(*args)
    return outs, jax.tree.map(lambda _: True, outs)
