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
* **Uneven shards** (a dim that does not divide by the devices splitting it: torch gives
  ``ceil(n/k)`` per device, the last ones fewer, some none): a factor split that way keeps its
  strategy only where the blocks' results are exact whatever their sizes (elementwise; partial
  sums and products; max/min when no device's block is empty). A mean over it would be averaged
  as if the blocks were equal (``Partial("avg")``): the rounds run instead (a sum of partial sums
  divided by the global count). Anything else is not a strategy, so DTensor gathers that dim.
"""
from __future__ import annotations

import functools
import itertools
import math

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
            # DTensor may put this strategy on every mesh dim at once: blocks are even only when
            # the size divides by all of them together
            even = not any(s % math.prod(sizes) for s in fac.sizes)
            if f in seen or fac.replicate or max(fac.sizes) == 1 or not (even or _exact_uneven(flow, f, sizes)):
                continue
            seen.add(f)
            in_axes = [[("m",) if g == f else () for g in d] for d in flow.inputs]
            sh = dimflow.assign(flow, in_axes, {"m": max(sizes)}, even=even)
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


def _pieces(n: int, counts) -> list[int]:
    """The block sizes of a dim of size ``n`` split over mesh dims of ``counts`` devices in turn
    (torch's ``Shard``: ``torch.chunk``, ``ceil(n/k)`` per device, the last ones short or empty)."""
    sizes = [n]
    for k in counts:
        sizes = [max(0, min(-(-s // k), s - j * -(-s // k))) for s in sizes for j in range(k)]
    return sizes


def _exact_uneven(flow, f: int, counts, rounds: bool = False) -> bool:
    """Whether factor ``f`` split into unequal blocks over any of the mesh dims ``counts`` gives
    the unsharded result: one size (a MAJOR link needs equal blocks), and every reduction over it
    a sum or a product, a max/min with no empty block, or (``rounds``: divided by the global
    count) a mean."""
    fac = flow.factors[f]
    if len(fac.sizes) > 1:
        return False
    kinds = {flow.reductions[i].kind for i in fac.reduced_by}
    if "mean" in kinds and not rounds:
        return False
    if kinds & {"max", "min"}:
        subsets = (c for r in range(1, len(counts) + 1) for c in itertools.combinations(counts, r))
        return all(min(_pieces(fac.sizes[0], c)) > 0 for c in subsets)
    return True


def _place(dims, f, Shard, Replicate):
    return Shard(dims.index(f)) if f in dims else Replicate()


class _Meta:
    """A DTensorSpec seen as a tensor (dtype and shape) by ``TorchFunction.signature``."""

    def __init__(self, spec):
        self.dtype, self.shape = spec.tensor_meta.dtype, tuple(spec.tensor_meta.shape)


# --- the rounds on DTensors -----------------------------------------------------------------------
def _plan(tf, tensors, attrs):
    """(mesh, sharding, program, whether a mean folds a factor split into unequal blocks)."""
    from torch.distributed.tensor import DTensor, Shard
    mesh = next(t.device_mesh for t in tensors if isinstance(t, DTensor))
    sizes = {str(m): n for m, n in enumerate(mesh.shape)}
    sig = tf.signature(tensors, attrs)
    flow = dimflow.analyze(sig.spec)
    in_axes, uneven_mean = [], False
    for t, fs in zip(tensors, flow.inputs):
        axes = [()] * t.ndim
        if isinstance(t, DTensor):
            for m, p in enumerate(t.placements):
                if isinstance(p, Shard):
                    axes[p.dim] += (str(m),)
        for d, a in enumerate(axes):   # unequal blocks: kept where exact, else gathered
            fac = flow.factors[fs[d]]
            if a and t.shape[d] % math.prod(sizes[x] for x in a):
                if not _exact_uneven(flow, fs[d], [sizes[x] for x in a], rounds=True):
                    axes[d] = ()
                elif any(flow.reductions[i].kind == "mean" for i in fac.reduced_by):
                    uneven_mean = True
        in_axes.append(axes)
    sh = dimflow.assign(flow, in_axes, sizes, even=False)
    return mesh, sh, dimflow.program(flow, sh), uneven_mean


def needs_rounds(tf, tensors, attrs) -> bool:
    """Whether DTensor arguments split a dim that only rounds handle exactly (reductions that
    read other split reductions; a mean over unequal blocks)."""
    _, _, prog, uneven_mean = _plan(tf, tensors, attrs)
    return not _single_level(prog) or (uneven_mean and prog is not None)


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
    mesh, sh, prog, _ = _plan(tf, tensors, attrs)
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

