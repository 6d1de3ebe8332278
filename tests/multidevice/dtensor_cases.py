"""DTensor calls of fused ops, run on CPU processes by ``tests/test_torch.py``:
``python -m torch.distributed.run --standalone --nproc_per_node=N dtensor_cases.py default|matrix``.

``default`` (2 processes): a sum split along its reduced dim (DTensor strategy: partial sums,
all-reduced when read) and a layer norm split along the normalized dim (fusegen's rounds).
``matrix`` (4 processes, a 2x2 mesh): every reference op with its main input split along each
dim and along both mesh dims. Every result is compared with the unsharded call.
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


def main(which: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    cases = 0
    if which == "default":
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        x, y = rand(8, 12), rand(8, 12, seed=1)
        f = fg.torch.function(ex.add_reduce_sum)
        out = f(distribute_tensor(x, mesh, [Shard(1)]), distribute_tensor(y, mesh, [Shard(1)]), axis=1)
        assert out.placements[0].is_partial(), out.placements   # a partial sum per process
        torch.testing.assert_close(out.full_tensor(), f(x, y, axis=1))
        cases += 1
        ln = fg.torch.function(ex.layer_norm)
        outs = ln(distribute_tensor(x, mesh, [Shard(1)]))
        assert [o.placements[0].is_shard(1) for o in outs] == [True, False, False]
        for g, w in zip(outs, ln(x)):
            torch.testing.assert_close(g.full_tensor(), w, rtol=1e-5, atol=1e-5)
        cases += 1
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
