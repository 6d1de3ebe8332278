"""fusegen.torch: fused ops as PyTorch custom operators, and their DTensor rules.

Layer (a): schemas, dtype maps and DTensor strategies, without compiling a kernel.
Layer (c): calls against NumPy/torch (zero-copy views, bfloat16 through float32, autograd that
saves only what ``.needs`` says, the in-place variant), ``torch.compile(fullgraph=True)``,
``torch.library.opcheck``, the CUDA path as far as it goes without a GPU, and DTensor on 2 CPU
processes (gloo, ``torch.distributed.run``). The representative cases run by default; the matrix
(every reference op through opcheck on both backends, inductor, DTensor on a 2x2 mesh) is slow.

Skips without torch (``pip install "fusegen[torch]"``).
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fusegen as fg
from fusegen import examples as ex

from _optional import needs

pytestmark = needs("torch")


class _Lazy:
    """A module imported on first use: collecting this file (every xdist worker does) must not
    pay for importing torch."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr):
        return getattr(importlib.import_module(self._name), attr)


torch = _Lazy("torch")
fgt = _Lazy("fusegen.torch")
torch_sharding = _Lazy("fusegen.torch_sharding")


def need_gloo():
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("needs torch.distributed with the gloo backend")


@fg.op(inplace="x")
def scale_shift(x, y, *, s: float = 2.0):
    """Output 0 may overwrite x (no other output reads x); output 1 is new."""
    return x * s + y, y * 2.0


@fg.op
def many_attrs(x, *, axes: list[int] = [0], w: list[float] = [1.0], tag: str = "t", flag: bool = True):  # noqa: B006
    return fg.mean(x, axis=axes, keep_dims=flag)


@fg.op
def row_prod(x):
    return fg.prod(x, axis=-1)


@fg.op
def row_max(x):
    return fg.max(x, axis=-1)


@fg.op
def nested(x, *, table: list[list[int]] = [[0]]):  # noqa: B006
    return x + 1


def t32(*shape, seed=0, lo=0.5, hi=1.5):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=g) * (hi - lo) + lo


# =============================================================================================
# (a) schemas, dtypes, strategies
# =============================================================================================

def test_schemas_follow_the_ops_inputs_and_typed_attributes():
    assert fgt.schema(ex.add_reduce_sum) == "(Tensor x, Tensor y, *, int axis=1, bool keep_dims=False) -> Tensor"
    assert fgt.schema(ex.layer_norm) == "(Tensor x, *, int axis=-1, float eps=1e-05) -> (Tensor, Tensor, Tensor)"
    assert fgt.schema(many_attrs) == \
        '(Tensor x, *, int[] axes=[0], float[] w=[1.0], str tag="t", bool flag=True) -> Tensor'
    assert fgt.schema(scale_shift, scale_shift.inplace) == "(Tensor(a!) x, Tensor y, *, float s=2.0) -> Tensor"
    with pytest.raises(NotImplementedError, match="attribute 'table' is list\\[list\\[int\\]\\].*no nested lists"):
        fgt.schema(nested)


def test_dtypes_map_both_ways_and_unsupported_ones_are_named():
    for name, t in fgt.TORCH_DTYPES.items():
        assert fgt.FROM_TORCH[t] == name and np.dtype(name) == torch.empty(0, dtype=t).numpy().dtype
    f = fgt.function(ex.add_reduce_sum)
    with pytest.raises(fg.DTypeError, match="input 'x' has dtype torch.float8_e5m2"):
        f(torch.zeros(2, 2, dtype=torch.float8_e5m2), torch.zeros(2, 2, dtype=torch.float8_e5m2))
    with pytest.raises(fg.DTypeError, match="bfloat16 and float16 inputs cannot be mixed"):
        f(torch.zeros(2, 2, dtype=torch.bfloat16), torch.zeros(2, 2, dtype=torch.float16))


class _Spec:
    """What a DTensor strategy function reads of a DTensorSpec."""

    def __init__(self, shape, mesh=(2,), dtype=None):
        self.tensor_meta = type("M", (), {"shape": shape, "dtype": dtype or torch.float32})()
        self.mesh = type("Mesh", (), {"shape": mesh})()


def _strategies(op, *shapes, mesh=(2,), **attrs):
    from torch.distributed.tensor import Partial, Replicate, Shard

    def name(p):
        return "R" if isinstance(p, Replicate) else f"S{p.dim}" if isinstance(p, Shard) else \
            f"P{p.reduce_op}" if isinstance(p, Partial) else "?"
    out = torch_sharding.strategies(fgt.function(op), *[_Spec(s, mesh) for s in shapes], **attrs)
    return [(" ".join(map(name, o)), " ".join(map(name, i))) for o, i in out]


def test_dtensor_strategies_come_from_the_ir():
    need_gloo()
    # rows pass through; a split reduced dim leaves partial sums (DTensor all-reduces them later)
    assert _strategies(ex.add_reduce_sum, (8, 12), (8, 12), axis=1) == [("R", "R R"), ("S0", "S0 S0"),
                                                                        ("Psum", "S1 S1")]
    # the weight follows its partner dim; the normalized dim feeds two levels of reductions: only
    # rows are a strategy (fg.torch.function runs the rounds itself for the other split)
    assert _strategies(ex.rms_norm, (8, 12), (12,)) == [("R", "R R"), ("S0", "S0 R")]
    assert _strategies(ex.layer_norm, (8, 12)) == [("R R R", "R"), ("S0 S0 S0", "S0")]
    assert _strategies(many_attrs, (8, 12), axes=[1], flag=False) == [("R", "R"), ("S0", "S0"), ("Pavg", "S1")]
    assert _strategies(row_prod, (8, 12)) == [("R", "R"), ("S0", "S0"), ("Pproduct", "S1")]


def test_dtensor_strategies_for_unequal_blocks():
    """A dim that does not divide by the devices (torch: 10 on 4 is 3, 3, 3, 1): elementwise dims,
    partial sums and products stay; a mean's Partial("avg") would weight the blocks equally and a
    max has no value on an empty block, so those are no strategy (DTensor gathers; fg.torch runs
    a mean's rounds itself, tested on processes)."""
    need_gloo()
    assert _strategies(ex.add_mul_div, (6, 10), (1, 10), mesh=(4,)) == [("R R R", "R R"), ("S0 S0 S0", "S0 R"),
                                                                        ("S1 S1 S1", "S1 S1")]
    assert _strategies(ex.add_reduce_sum, (8, 10), (8, 10), mesh=(4,), axis=1) == [("R", "R R"), ("S0", "S0 S0"),
                                                                                 ("Psum", "S1 S1")]
    assert _strategies(row_prod, (8, 10), mesh=(4,)) == [("R", "R"), ("S0", "S0"), ("Pproduct", "S1")]
    assert _strategies(many_attrs, (8, 10), mesh=(4,), axes=[1], flag=False) == [("R", "R"), ("S0", "S0")]
    assert _strategies(row_max, (8, 10), mesh=(4,)) == [("R", "R"), ("S0", "S0"), ("Pmax", "S1")]
    assert _strategies(row_max, (8, 3), mesh=(4,)) == [("R", "R"), ("S0", "S0")]   # one block is empty
    # DTensor may put one strategy on both dims of a 2x2 mesh: 6 columns split 2, 1, 2, 1
    assert _strategies(many_attrs, (8, 6), mesh=(2, 2), axes=[1], flag=False) == [("R", "R"), ("S0", "S0")]
    assert _strategies(many_attrs, (8, 8), mesh=(2, 2), axes=[1], flag=False)[-1] == ("Pavg", "S1")


# =============================================================================================
# (c) calls
# =============================================================================================

def test_cpu_calls_read_and_write_torch_memory_without_copies(monkeypatch):
    f = fgt.function(ex.add_reduce_sum)
    x, y = t32(4, 5), t32(4, 5, seed=1)
    seen = {}
    kernel = f.kernel("cpu")

    def spy(*arrays, out=None, **attrs):
        seen["in"], seen["out"] = [a.ctypes.data for a in arrays], out.ctypes.data
        return kernel(*arrays, out=out, **attrs)

    monkeypatch.setitem(f._kernels, "cpu", spy)
    got = f(x, y, axis=0)
    torch.testing.assert_close(got, (x + y).sum(0))
    assert seen["in"] == [x.data_ptr(), y.data_ptr()] and seen["out"] == got.data_ptr()


def test_float16_and_bfloat16_results():
    f = fgt.function(ex.add_reduce_sum)
    x, y = t32(3, 7, lo=-2, hi=2), t32(3, 7, seed=1)
    want = (x.double() + y.double()).sum(1)
    got16 = f(x.half(), y.half())
    assert got16.dtype == torch.float16
    torch.testing.assert_close(got16.double(), want, rtol=2e-3, atol=2e-3)
    xb, yb = x.bfloat16(), y.bfloat16()
    got = f(xb, yb)   # computed in float32 (exact widening), rounded once to bfloat16
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, (xb.float() + yb.float()).sum(1).bfloat16(), rtol=0, atol=0)
    mixed = fgt.function(ex.add_mul_div)(xb, y)   # bfloat16 with float32 is float32, as for float16
    assert [m.dtype for m in mixed] == [torch.float32] * 3
    torch.testing.assert_close(mixed[1], xb.float() * y)


@fg.op
def complex_mix(x, y):
    return fg.exp(x) * y + fg.conj(x), fg.abs(x), fg.sum(x * y, axis=-1)


def _complex_mix_ref(x, y):
    return np.exp(x) * y + np.conj(x), np.abs(x), np.sum(x * y, axis=-1)


@pytest.mark.parametrize("backend", ["numba", pytest.param("aot", marks=[pytest.mark.extended, needs("g++")])])
def test_complex64_and_complex128_tensors_against_numpy(backend):
    """Both complex dtypes (a real result for abs); ``x.conj()`` is a view whose memory holds x,
    with torch's conjugate bit: the bridge resolves it (and refuses it in place)."""
    f = fgt.function(complex_mix, backend=backend)
    g = torch.Generator().manual_seed(7)
    for dt, tol in ((torch.complex64, 2e-6), (torch.complex128, 1e-14)):
        x = torch.complex(torch.randn(3, 5, generator=g), torch.randn(3, 5, generator=g)).to(dt)
        y = x.conj()
        assert y.is_conj()
        got = f(x, y)
        want = _complex_mix_ref(x.numpy(), np.conj(x.numpy()))
        assert [o.dtype for o in got] == [dt, dt.to_real(), dt]
        for o, w in zip(got, want):
            np.testing.assert_allclose(o.numpy(), w, rtol=tol, atol=tol)
    with pytest.raises(fg.ArgumentError, match="scale_shift: in place on a view with torch's lazy conjugate"):
        x = torch.ones(2, dtype=torch.complex64)
        fgt.function(scale_shift)(x.conj(), x, inplace=True)


@pytest.mark.extended   # (~40 s cold: torch.compile, the forward and backward at two ranks)
def test_an_op_traced_per_rank_runs_at_two_ranks_and_under_torch_compile():
    """dropout_add_layer_norm reads x.shape (traced per rank): the schema counts its outputs on a
    small probe, each call's signature infers on its own specialization; the random mask equals
    the Numba kernel's bit for bit."""
    f = fgt.function(ex.dropout_add_layer_norm)
    assert fgt.schema(ex.dropout_add_layer_norm).endswith("-> (Tensor, Tensor)")
    numba = fg.compile(ex.dropout_add_layer_norm)
    for shape in ((4, 8), (2, 3, 8)):
        x, r = t32(*shape, seed=1), t32(*shape, seed=2)
        g, b = t32(shape[-1], seed=3), t32(shape[-1], seed=4)
        want = numba(x.numpy(), r.numpy(), g.numpy(), b.numpy(), p=0.25, seed=9)
        for got in (f(x, r, g, b, p=0.25, seed=9),
                    torch.compile(lambda *a: f(*a, p=0.25, seed=9), fullgraph=True, backend="eager")(x, r, g, b)):
            assert all(np.array_equal(o.numpy(), w) for o, w in zip(got, want))
    # autograd: fg.grad of it is traced per rank too; the mask is recomputed, not stored
    x.requires_grad_(True)
    f(x, r, g, b, p=0.25, seed=9)[1].sum().backward()
    assert torch.equal(x.grad, torch.where(torch.from_numpy(want[1]) != r, 1 / 0.75, 0.0))


def test_autograd_saves_only_what_the_gradient_reads():
    f = fgt.function(ex.add_reduce_sum)
    assert fg.grad(ex.add_reduce_sum).needs == {"x": "shape", "y": "shape"}
    x, y = t32(4, 5).requires_grad_(), t32(4, 5, seed=1).requires_grad_()
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = f(x, y, axis=1, keep_dims=True)
    (out * torch.arange(4.0)[:, None]).sum().backward()
    assert saved == []   # the inputs are only measured: nothing is kept alive for backward
    torch.testing.assert_close(x.grad, torch.arange(4.0)[:, None].expand(4, 5))
    torch.testing.assert_close(y.grad, x.grad)


def test_torch_compile_traces_through_without_running_the_kernel(monkeypatch):
    f = fgt.function(ex.add_reduce_sum)
    x, y = t32(4, 5), t32(4, 5, seed=1)
    calls = []
    real = fgt.TorchFunction._run
    monkeypatch.setattr(fgt.TorchFunction, "_run", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        assert not calls, "the kernel ran while tracing"
        return gm.forward

    torch._dynamo.reset()
    g = torch.compile(lambda a, b: f(a, b, axis=1) * 2 + 1, fullgraph=True, backend=backend)
    torch.testing.assert_close(g(x, y), (x + y).sum(1) * 2 + 1)
    assert len(graphs) == 1 and calls == [1]
    assert f"fusegen.{f.name}" in str(graphs[0].graph)


def test_dynamic_shapes_stay_symbolic():
    """One graph for two shapes: the fake's output dims are the inputs' symbolic dims (dimflow)."""
    f = fgt.function(ex.add_reduce_sum)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    g = torch.compile(lambda a, b: f(a, b, axis=1), fullgraph=True, dynamic=True, backend=backend)
    for shape in ((4, 5), (6, 7)):
        x = t32(*shape)
        torch.testing.assert_close(g(x, x), 2 * x.sum(1))
    assert len(graphs) == 1


def test_opcheck_passes_for_a_reference_op():
    f = fgt.function(ex.add_reduce_sum)
    args = [t32(4, 5).requires_grad_(), t32(4, 5, seed=1).requires_grad_()]
    result = torch.library.opcheck(f.custom_op, args, {"axis": 0})
    assert set(result.values()) == {"SUCCESS"} and len(result) == 4


def test_the_inplace_variant_writes_over_its_input():
    f = fgt.function(scale_shift)
    x, y = t32(3, 4), t32(3, 4, seed=1)
    x0, ptr = x.clone(), x.data_ptr()
    a, b = f(x, y, s=3.0, inplace=True)
    assert a is x and x.data_ptr() == ptr
    torch.testing.assert_close(x, x0 * 3 + y)
    torch.testing.assert_close(b, y * 2)
    mutated = [a.name for a in f.inplace_op._opoverload._schema.arguments if a.alias_info and a.alias_info.is_write]
    assert mutated == ["x"]
    assert set(torch.library.opcheck(f.inplace_op, (t32(3, 4), t32(3, 4)), {"s": 0.5},
                                     test_utils=("test_schema", "test_faketensor")).values()) == {"SUCCESS"}
    with pytest.raises(fg.ArgumentError, match="declares no output that may share"):
        fgt.function(ex.add_reduce_sum)(x, y, inplace=True)
    # no autograd through it: refused where grad mode would record the call (it cut the graph
    # silently: no grad_fn, the inputs' gradients gone), allowed under no_grad (an optimizer step)
    for leaf in (x, y):
        leaf.requires_grad_(True)
        with pytest.raises(fg.ArgumentError, match=r"op scale_shift: inplace=True has no autograd, and input "
                                                   rf"'{'x' if leaf is x else 'y'}' requires grad"):
            f(x, y, s=3.0, inplace=True)
        leaf.requires_grad_(False)
    x.requires_grad_(True)
    with torch.no_grad():
        before = x.detach().clone()
        f(x, y, s=2.0, inplace=True)
    torch.testing.assert_close(x.detach(), before * 2 + y)


@pytest.mark.extended   # (torch.compile and a kernel build each: the default run keeps its 5 minutes)
def test_the_inplace_variant_under_torch_compile():
    # (the lazy-bit check reads real tensors only: Dynamo cannot trace is_conj on a fake)
    f = fgt.function(scale_shift)
    x, y = t32(3, 4), t32(3, 4, seed=1)
    want = x * 3 + y
    a, b = torch.compile(lambda u, v: f(u, v, s=3.0, inplace=True), fullgraph=True)(x, y)
    torch.testing.assert_close(x, want)
    torch.testing.assert_close(b, y * 2)


@fg.op
def noise(*, n: int = 4, seed: int = 0):
    """No tensor input: the outputs are the host's."""
    return fg.random.uniform(seed, (n,)) * 2.0


@pytest.mark.extended
def test_an_op_without_tensor_inputs():
    f = fgt.function(noise)
    want = torch.from_numpy(np.asarray(noise(n=5, seed=3)))
    torch.testing.assert_close(f(n=5, seed=3), want)
    torch.testing.assert_close(torch.compile(lambda: f(n=5, seed=3), fullgraph=True)(), want)


@pytest.mark.extended
def test_autograd_through_a_gather_and_a_reduction():
    # the backward op of a gather is traced per input rank: its output count comes from the
    # gradients it returns, not from a probe call with float indices (which take refuses)
    f = fgt.function(ex.embedding_layer_norm)
    table, ids = t32(10, 8).requires_grad_(), torch.tensor([[1, 9, 1], [0, 2, 9]])
    gamma, beta = t32(8, seed=2).requires_grad_(), t32(8, seed=3).requires_grad_()
    (f(table, ids, gamma, beta) ** 2).sum().backward()
    t2, g2, b2 = (t.detach().clone().requires_grad_() for t in (table, gamma, beta))
    e = t2[ids]
    ln = torch.nn.functional.layer_norm(e, (8,), g2, b2, eps=1e-5)
    (ln ** 2).sum().backward()
    for got, want in ((table, t2), (gamma, g2), (beta, b2)):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-4, atol=1e-4)


def test_a_bool_for_an_int_attribute_is_refused_as_elsewhere():
    with pytest.raises(fg.AttrError, match="expected int, got bool"):
        fgt.function(ex.softmax)(t32(3, 4), axis=True)


def test_inputs_are_checked_and_named_as_elsewhere():
    """A missing input, a NumPy array or a scalar for a tensor, a tensor by keyword: fusegen's
    errors naming the op and the input (torch's schema error named the registered operator)."""
    f = fgt.function(ex.add_reduce_sum)
    with pytest.raises(fg.ArgumentError, match=r"op add_reduce_sum takes 2 inputs \(x, y\), got 1"):
        f(t32(3, 4))
    with pytest.raises(fg.ArgumentError, match=r"op add_reduce_sum: input 'y' is a ndarray, not a torch.Tensor"):
        f(t32(3, 4), np.ones((3, 4), np.float32))
    with pytest.raises(fg.ArgumentError, match=r"op add_reduce_sum: input 'y' is a int, not a torch.Tensor"):
        f(t32(3, 4), 2)
    with pytest.raises(fg.ArgumentError, match=r"op add_reduce_sum: 'y' is a tensor input, given by keyword"):
        f(t32(3, 4), y=t32(3, 4))


def test_cuda_tensors_go_to_the_cuda_kernel_on_the_current_stream(monkeypatch):
    """Without a GPU: the CUDA branch, with torch's stream and the numba-cuda kernel stubbed, gets
    the tensors themselves (read through __cuda_array_interface__) and torch-allocated outputs."""
    f = fgt.function(ex.add_reduce_sum)
    calls = []
    monkeypatch.setitem(f._kernels, "cpu", lambda *a, **k: calls.append((a, k)))   # the device type of x
    bridge = importlib.import_module("fusegen.torch")
    monkeypatch.setattr(bridge, "current_stream", lambda device: "the current stream")
    x, y = t32(4, 5), t32(4, 5).t().contiguous().t()
    out = [torch.empty(4)]
    f._run_cuda([x, y], out, {"axis": 1})
    (args, kw), = calls
    assert args[0] is x and args[1].is_contiguous() and kw == {"out": out[0], "stream": "the current stream", "axis": 1}


def test_cuda_tensors_on_a_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)")
    f = fgt.function(ex.layer_norm)
    x = t32(64, 96).cuda()
    for got, want in zip(f(x), f(x.cpu())):
        assert got.is_cuda
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)


# --- DTensor on CPU processes ----------------------------------------------------------------------
WORKER = Path(__file__).parent / "multidevice" / "dtensor_cases.py"


def run_dtensor(nproc: int, cases: str) -> str:
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
                        str(WORKER), cases], env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True,
                       text=True, timeout=1200)
    assert r.returncode == 0, f"{WORKER.name} {cases} failed:\n{r.stdout[-6000:]}\n{r.stderr[-6000:]}"
    return r.stdout


def test_dtensor_on_two_cpu_processes():
    need_gloo()
    out = run_dtensor(2, "default")
    assert "rank 0: 4 cases agree with the unsharded result" in out


@pytest.mark.extended
def test_dtensor_unequal_blocks_on_four_cpu_processes():
    need_gloo()
    out = run_dtensor(4, "uneven")
    assert "rank 0: 60 cases agree with the unsharded result" in out


# --- the matrix (slow) -----------------------------------------------------------------------------
def _reference_args(op, seed=0):
    shapes = {"rms_norm": [(4, 6), (6,)], "bias_gelu": [(4, 6), (6,)], "add_mul_div": [(4, 6), (1, 6)]}
    return [t32(*s, seed=seed + i) for i, s in enumerate(shapes.get(op.name, [(4, 6)] * len(op.inputs)))]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["numba", "aot"])
@pytest.mark.parametrize("op", ex.REFERENCE_OPS, ids=lambda o: o.name)
def test_opcheck_every_reference_op(op, backend):
    f = fgt.function(op, backend=backend)
    args = [a.requires_grad_() for a in _reference_args(op)]
    result = torch.library.opcheck(f.custom_op, args, {})
    assert set(result.values()) == {"SUCCESS"}, result
    want = fg.compile(op)(*[a.detach().numpy() for a in args])
    for g, w in zip(*(x if isinstance(x, tuple) else (x,) for x in (f(*args), want))):
        np.testing.assert_allclose(g.detach().numpy(), w, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_inductor_fullgraph_with_gradients():
    f = fgt.function(ex.layer_norm)
    x = t32(8, 16).requires_grad_()
    g = torch.compile(lambda a: f(a)[0].square().sum(), fullgraph=True)
    g(x).backward()
    want = x.detach().clone().requires_grad_()
    torch.nn.functional.layer_norm(want, (16,), eps=1e-5).square().sum().backward()
    torch.testing.assert_close(x.grad, want.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_dtensor_every_reference_op_on_a_2x2_mesh():
    need_gloo()
    out = run_dtensor(4, "matrix")
    assert "rank 0:" in out and "agree with the unsharded result" in out
