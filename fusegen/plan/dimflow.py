"""Dim flow: how every dim of an op relates to its inputs' dims, and the rewrite that runs an op
with some of those dims split across devices. The IR-level analysis behind fusegen's sharding
rules (``fusegen.jax`` partitions XLA calls with it, ``fusegen.torch`` DTensor strategies); it
knows nothing of JAX or PyTorch.

**Factors.** ``analyze(spec)`` groups every dim of every node of an op specialized to shapes (an
``ir.Spec``) into *factors*: the dims that walk one index space together (an elementwise node's
output dim and the input dims it reads one for one). Per node kind a rule in ``DIM_RULES`` lists
the node's *loop dims*: which source dims each one reads and which output dim it becomes, and
its role:

* ``KEEP``: source dims and the output dim are one index space (elementwise, broadcast partner,
  a reduction's kept dims). A size-1 dim broadcast against a larger one is not linked: it is
  its own (size-1) factor, so it never carries a sharding;
* ``REDUCE``: the node folds its source dims away (``kind`` says how: sum, mean, prod, max, min);
* ``REPLICATE``: the node must see the whole of these source dims on one device (a slice or a
  gather along them, a dim merged *under* another by a reshape);
* ``MAJOR``: the output dim is the major part of the source dim, or the reverse (a reshape that
  splits or merges dims): a sharding carries over when it divides both sizes.

A new IR op kind costs one entry in ``DIM_RULES`` (a transpose: ``KEEP`` loop dims with permuted
members; a slice: ``REPLICATE`` for the source dim and a fresh ``KEEP`` output dim).

**Sharding.** ``assign`` decides, from the mesh axes that shard each input dim, which factors are
split (one mesh-axis set per factor, sizes that divide, nothing marked ``REPLICATE``): every
input and output dim then follows its factor, so an elementwise dim keeps its sharding and a
broadcast dim follows its partner.

**Rounds.** ``program`` rewrites the op for that sharding. A reduction over a split factor gives a
partial result per shard, which a collective combines (sum and mean: a sum of partial sums, mean
then divided by the global count; max/min: the max/min of partial ones; prod: an all-gather of
partial products, multiplied (a psum of logs would not be exact)). Reductions that read other
split reductions (softmax: the sum of ``exp(x - max)``; layer norm's variance around the mean)
need the combined value first, so the op is cut at those *levels*: round ``k`` is an ordinary
fused op computing the level-``k`` partials from the inputs and the combined results of earlier
rounds, and a last round computes the outputs. Every round is planned, fused and emitted like
any op, so the code that runs per shard comes from the same Plan as the unsharded kernel.
"""
from __future__ import annotations

from .factors import (  # noqa: F401  (the face: analysis in factors, the rewrite in rounds)
    DIM_RULES, KEEP, MAJOR, REDUCE, REPLICATE, Axes, DimFlow, Factor, LoopDim, Reduction, Sharding, analyze, assign,
    elementwise_rule, reduce_rule, rule_for,
)
from .rounds import Partial, Program, Round, program, split_reductions  # noqa: F401
