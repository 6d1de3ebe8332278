"""DTensor support for fusegen.torch: sharding strategies and multi-round calls derived from the
op's IR (``fusegen.plan.dimflow``), the same rules the JAX bridge partitions XLA calls with.

* **Strategies** (``torch.distributed.tensor.experimental.register_sharding``): besides "all
  replicated", one per factor (a dim walking through the op, ``dimflow``) that can be split by one
  mesh dim: inputs ``Shard`` along that factor's dims (``Replicate`` where an input lacks it: a
  broadcast partner), outputs ``Shard`` where they have it, and ``Partial`` where they are a
  reduction over it whose per-shard value combines in one collective (sum -> ``Partial("sum")``,
  mean -> ``"avg"`` (equal shards), max, min, prod -> ``"product"``). DTensor then runs the op on
  local shards and redistributes as usual.
* **Rounds**: a factor whose reductions feed other reductions (softmax, layer norm along the
  normalized dim) has no such strategy; ``fg.torch.function(op)`` called on DTensors split that
  way runs ``dimflow.program``'s rounds itself: each round a registered fused op on the local
  shards, ``all_reduce`` on the mesh dim's process group between them, the outputs wrapped back
  as DTensors. Forward only (no autograd through the rounds).
"""
from __future__ import annotations

import functools

import torch

from .plan import dimflow

__all__ = ["register", "strategies", "needs_rounds", "run_rounds", "REDUCE_OPS"]

#: dimflow's combine (and mean) -> DTensor Partial's reduce_op / torch.distributed.ReduceOp name
REDUCE_OPS = {"sum": "sum", "mean": "avg", "max": "max", "min": "min", "prod": "product"}


def register(tf) -> None:
    """Register ``tf``'s DTensor strategy (nothing when torch has no distributed support)."""
    if not torch.distributed.is_available():
        return
    from torch.distributed.tensor.experimental import register_sharding
    register_sharding(tf.opoverload)(functools.partial(strategies, tf))


def _single_level(prog) -> bool:
    """One round of partials that are all outputs: the op run per shard gives them as is."""
    return prog is None or (len(prog.rounds) == 1 and
                            (prog.final is None or all(a[0] == "input" for a in prog.final.args)))


def strategies(tf, *args, **attrs):
    """Acceptable (output placements, input placements) per mesh dim, from the IR."""
    from torch.distributed.tensor import Partial, Replicate, Shard
    specs = [a for a in args if hasattr(a, "tensor_meta")]
    sig = tf.signature([_Meta(s) for s in specs], attrs)
    flow = dimflow.analyze(sig.spec)
    n_in, n_out = len(specs), len(flow.outputs)
    sizes = tuple(specs[0].mesh.shape) if specs else (1,)
    out = [([Replicate()] * n_out, [Replicate()] * n_in)]
    seen = set()
    for dims in flow.inputs:
        for f in dims:
            fac = flow.factors[f]
            if f in seen or fac.replicate or any(s % m for s in fac.sizes for m in sizes) or max(fac.sizes) == 1:
                continue
            seen.add(f)
            in_axes = [[("m",) if g == f else () for g in d] for d in flow.inputs]
            sh = dimflow.assign(flow, in_axes, {"m": max(sizes)})
            prog = dimflow.program(flow, sh)
            if not _single_level(prog):
                continue
            ins = [_place(d, f, Shard, Replicate) for d in flow.inputs]
            combined = {} if prog is None else {p.node: flow.reductions[p.node].kind for p in prog.collectives}
            outs = []
            for k, dims_k in enumerate(flow.outputs):
                src = prog.outputs[k] if prog is not None else ("final", k)
                outs.append(Partial(REDUCE_OPS[combined[src[1]]]) if src[0] == "combined"
                            else _place(dims_k, f, Shard, Replicate))
            out.append((outs, ins))
    return out


def _place(dims, f, Shard, Replicate):
    return Shard(dims.index(f)) if f in dims else Replicate()


class _Meta:
    """A DTensorSpec seen as a tensor (dtype and shape) by ``TorchFunction.signature``."""

    def __init__(self, spec):
        self.dtype, self.shape = spec.tensor_meta.dtype, tuple(spec.tensor_meta.shape)


# --- the rounds on DTensors -----------------------------------------------------------------------
def _plan(tf, tensors, attrs):
    from torch.distributed.tensor import DTensor, Shard
    mesh = next(t.device_mesh for t in tensors if isinstance(t, DTensor))
    in_axes = []
    for t in tensors:
        axes = [()] * t.ndim
        if isinstance(t, DTensor):
            for m, p in enumerate(t.placements):
                if isinstance(p, Shard):
                    axes[p.dim] += (str(m),)
        in_axes.append(axes)
    sig = tf.signature(tensors, attrs)
    flow = dimflow.analyze(sig.spec)
    sh = dimflow.assign(flow, in_axes, {str(m): n for m, n in enumerate(mesh.shape)})
    return mesh, sh, dimflow.program(flow, sh)


def needs_rounds(tf, tensors, attrs) -> bool:
    """Whether DTensor arguments split a dim that only rounds handle exactly."""
    return not _single_level(_plan(tf, tensors, attrs)[2])


def _placements(dims, ndim_mesh):
    from torch.distributed.tensor import Replicate, Shard
    out = [Replicate()] * ndim_mesh
    for d, axes in enumerate(dims):
        for a in axes:
            out[int(a)] = Shard(d)
    return out


def run_rounds(tf, tensors, attrs):
    """The op on DTensors as ``dimflow.program``'s rounds with collectives between them."""
    from torch.distributed.tensor import DTensor, distribute_tensor
    mesh, sh, prog = _plan(tf, tensors, attrs)
    local = []
    for t, dims in zip(tensors, sh.inputs):
        if not isinstance(t, DTensor):
            t = distribute_tensor(t, mesh, _placements([()] * t.ndim, mesh.ndim))
        local.append(t.redistribute(mesh, _placements(dims, mesh.ndim)).to_local())

    def call(rnd, args):
        res = tf.for_op(rnd.op)(*args, **attrs)
        return res if isinstance(res, tuple) else (res,)

    def combine(value, p):
        op = getattr(torch.distributed.ReduceOp, {"sum": "SUM", "max": "MAX", "min": "MIN", "prod": "PRODUCT"}[p.combine])
        value = value.clone()
        for a in p.axes:
            torch.distributed.all_reduce(value, op=op, group=mesh.get_group(int(a)))
        if p.count:
            value = value / p.count
        return value.to(tf.torch_dtype(p.dtype.name))

    outs = prog.run(local, call, combine)
    res = [DTensor.from_local(o, mesh, _placements(dims, mesh.ndim), run_check=False,
                              shape=torch.Size(shape), stride=_strides(shape))
           for o, dims, shape in zip(outs, sh.outputs, prog_shapes(tf, tensors, attrs))]
    return tuple(res) if tf.multi else res[0]


def prog_shapes(tf, tensors, attrs):
    return tf.signature(tensors, attrs).out_shapes


def _strides(shape):
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(st))

