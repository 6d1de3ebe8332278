"""DTensor calls of fused ops, run on CPU processes by ``tests/test_torch.py``:
``python -m torch.distributed.run --standalone --nproc_per_node=N dtensor_cases.py default|matrix``.

``default`` (2 processes): a layer norm split along its rows (a DTensor strategy: the op on each
block) and unevenly along the normalized dim (5 columns on 2 processes: fusegen's rounds, the
means divided by the global count). Partial placements (a sum split along its reduced dim) are
in ``uneven`` and the strategies' own test.
``matrix`` (4 processes, a 2x2 mesh): every reference op with its main input split along each
dim and along both mesh dims.
``uneven`` (4 processes): every reference op and a mean, a max and a product split along each
dim in unequal blocks (10 on 4 devices: 3, 3, 3, 1; 3 on 4: a device holds none), on a mesh of 4
and along both dims of a 2x2 mesh (6 on 2x2: 2, 1, 2, 1). Every result is compared with the
unsharded call; where the split is kept, the placements say so.
"""
from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

import fusegen as fg
import fusegen.examples as ex


def rand(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g) + 0.5


def check(f, args, placements, mesh, **attrs) -> None:
    """``f`` on DTensors (the main input placed by ``placements``, broadcast partners replicated)
    equals ``f`` on the whole tensors."""
    want = f(*args, **attrs)
    dts = [distribute_tensor(a, mesh, placements if a.shape == args[0].shape else [Replicate()] * mesh.ndim)
           for a in args]
    got = f(*dts, **attrs)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        assert isinstance(g, DTensor), type(g)
        torch.testing.assert_close(g.full_tensor(), w, rtol=1e-5, atol=1e-5)
    return got if isinstance(got, tuple) else (got,)


@fg.op
def col_mean(x):
    return fg.mean(x, axis=1)


@fg.op
def col_max(x):
    return fg.max(x, axis=1)


@fg.op
def col_prod(x):
    return fg.prod(x, axis=1)


def uneven(rank: int) -> int:
    """Unequal blocks: each op's main input split along each dim; returns the number of cases."""
    cases = 0
    ops = [*ex.REFERENCE_OPS, col_mean, col_max, col_prod]
    for mesh_shape, sizes in (((4,), (10, 3)), ((2, 2), (6,))):
        mesh = init_device_mesh("cpu", mesh_shape)
        for n, op, dim in ((n, op, dim) for n in sizes for op in ops for dim in (0, 1)):
            main = (n, 7) if dim == 0 else (7, n)
            partner = {"rms_norm": (main[1],), "bias_gelu": (main[1],), "add_mul_div": (1, main[1])}.get(op.name, main)
            args = [rand(*main), rand(*partner, seed=1)][:len(op.inputs)]
            got = check(fg.torch.function(op), args, [Shard(dim)] * len(mesh_shape), mesh)
            if op is col_mean and dim == 1 and n == 10:   # the mean's rounds, not a gather
                assert got[0].placements == (Replicate(),), got[0].placements
            if op is ex.add_mul_div and n == 10:         # elementwise: the blocks pass through
                assert got[0].placements == (Shard(dim),), got[0].placements
            cases += 1
    if rank == 0:
        print(f"uneven: {cases} cases", flush=True)
    return cases


def main(which: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    cases = 0
    if which == "default":   # one op (its kernels compile once): a strategy, then the rounds
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        ln = fg.torch.function(ex.layer_norm)
        x = rand(8, 5)
        want = ln(x)
        outs = ln(distribute_tensor(x, mesh, [Shard(0)]))   # rows: the strategy, the op per block
        assert [o.placements[0].is_shard(0) for o in outs] == [True] * 3
        for g, w in zip(outs, want):
            torch.testing.assert_close(g.full_tensor(), w, rtol=1e-5, atol=1e-5)
        cases += 1
        # unequal blocks (3 and 2 columns): the rounds, each mean divided by 5
        outs = ln(distribute_tensor(x, mesh, [Shard(1)]))
        assert [o.placements[0].is_shard(1) for o in outs] == [True, False, False]
        for g, w in zip(outs, want):
            torch.testing.assert_close(g.full_tensor(), w, rtol=1e-5, atol=1e-5)
        cases += 1
        # gradients through a split normalized dim: the rounds are forward only, so a call that
        # wants gradients takes the strategies' path (a redistribution autograd differentiates)
        a = distribute_tensor(x, mesh, [Shard(1)]).requires_grad_()
        (ln(a)[0] ** 3).sum().backward()
        b = x.clone().requires_grad_()
        (ln(b)[0] ** 3).sum().backward()
        torch.testing.assert_close(a.grad.full_tensor(), b.grad, rtol=1e-4, atol=1e-5)
        cases += 1
        # a backward that reads only an input's shape (a sum's) gets a DTensor stand-in for it
        ars = fg.torch.function(ex.add_reduce_sum)
        a, b = (distribute_tensor(t, mesh, [Shard(0)]).requires_grad_() for t in (x, x * 2))
        (ars(a, b, axis=1) * 3).sum().backward()
        for t in (a, b):
            torch.testing.assert_close(t.grad.full_tensor(), torch.full_like(x, 3.0))
        cases += 1
    elif which == "uneven":
        cases += uneven(rank)
    else:
        mesh = init_device_mesh("cpu", (2, 2))
        shapes = {"rms_norm": [(8, 12), (12,)], "bias_gelu": [(8, 12), (12,)], "add_mul_div": [(8, 12), (1, 12)]}
        for op in ex.REFERENCE_OPS:
            f = fg.torch.function(op)
            args = [rand(*s, seed=i) for i, s in enumerate(shapes.get(op.name, [(8, 12)] * len(op.inputs)))]
            for placements in ([Shard(0), Shard(0)], [Shard(1), Shard(1)], [Shard(0), Shard(1)], [Shard(1), Shard(0)]):
                check(f, args, placements, mesh)
                cases += 1
    dist.barrier()
    print(f"rank {rank}: {cases} cases agree with the unsharded result", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
