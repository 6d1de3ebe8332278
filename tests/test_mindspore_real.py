"""Opt-in: the emitted sources run by the real MindSpore (``FUSEGEN_TEST_MINDSPORE=1``).

Needs ``pip install mindspore==2.10.0`` (CPU wheel, ~800 MB; a venv works:
``python -m venv /tmp/msvenv && /tmp/msvenv/bin/pip install mindspore==2.10.0 numpy jinja2 numba pytest &&
/tmp/msvenv/bin/pip install -e . --no-deps``), then
``FUSEGEN_TEST_MINDSPORE=1 /tmp/msvenv/bin/python -m pytest tests/test_mindspore_real.py``.

Each op is emitted into its own directory and loaded with the exact ``CustomRegOp(...)`` and
``ops.Custom("./<op>.cc:<Name>", out_shape=None, out_dtype=None, func_type="aot", reg_info=reg)``
lines its header comment gives (only the attribute values are changed), from that directory as the
working directory, so MindSpore's auto-compile (``g++ -std=c++17 --shared -fPIC
-D_GLIBCXX_USE_CXX11_ABI=0``, no -O) builds it into ./custom_kernel_meta/ there, and the C++
InferShape/InferType decide the outputs. Both PyNative and graph mode (a ``Cell``) are run.
"""
from __future__ import annotations

import math
import os
import re

import numpy as np
import pytest

if os.environ.get("FUSEGEN_TEST_MINDSPORE") != "1":
    pytest.skip("real MindSpore tests are opt-in: pip install mindspore, then set FUSEGEN_TEST_MINDSPORE=1",
                allow_module_level=True)

ms = pytest.importorskip("mindspore", reason="needs mindspore: pip install mindspore")

import fusegen as fg  # noqa: E402
import fusegen.examples as ex  # noqa: E402
from conftest import assert_all_close, assert_close  # noqa: E402
from mindspore import Tensor, nn, ops  # noqa: E402
from mindspore.ops import CustomRegOp, DataType  # noqa: E402

pytestmark = pytest.mark.mindspore
MODES = ["pynative", "graph"]


def header_lines(source: str) -> str:
    lines = []
    for line in source.splitlines():
        if not line.startswith("//"):
            break
        lines.append(line[3:] if line.startswith("// ") else line[2:])
    return "\n".join(lines)


@pytest.fixture(scope="module")
def emitted(tmp_path_factory):
    """Every reference op emitted (all float dtypes, plus int32 for two) into its own directory.
    One emission per op: MindSpore compiles a "./<op>.cc" once per process and later looks for the
    library under the current directory, so two variants of one file name cannot share a process."""
    root = tmp_path_factory.mktemp("mindspore")
    out = {}
    for op in ex.REFERENCE_OPS:
        ints = [("int32", "int32")] if op.name in ("add_reduce_sum", "add_mul_div") else []
        e = fg.emit(op, dtypes=["float16", "float32", "float64", *ints])
        e.write(root / op.name)
        out[op.name] = (e, root / op.name)
    return out


@pytest.fixture(autouse=True)
def cpu(monkeypatch):
    ms.set_device("CPU")
    yield


class Net(nn.Cell):
    def __init__(self, op):
        super().__init__()
        self.op = op

    def construct(self, *inputs):
        return self.op(*inputs)


def custom(emitted, monkeypatch, name: str, attrs: dict | None = None):
    """The op as the header comment tells a user to create it, with ``attrs`` as the values."""
    e, directory = emitted[name]
    header = header_lines(e.source)
    reg_text = re.search(r"^  (reg = \(CustomRegOp\(.*?\.get_op_info\(\)\))$", header, re.S | re.M).group(1)
    for key, value in (attrs or {}).items():
        reg_text, count = re.subn(rf'(\.attr\("{key}", "required", "all", value=)[^)]*\)', rf"\g<1>{value!r})",
                                  reg_text)
        assert count == 1, f"no .attr line for {key!r} in the header"
    call_text = re.search(rf"^  {name} = (ops\.Custom\(.*?reg_info=reg\))$", header, re.S | re.M).group(1)
    namespace = {"CustomRegOp": CustomRegOp, "DataType": DataType, "ops": ops}
    exec(reg_text, namespace)  # noqa: S102 - the generated file's own instructions
    monkeypatch.chdir(directory)  # "./<op>.cc" and ./custom_kernel_meta/ are relative to the CWD
    return eval(call_text, namespace)  # noqa: S307


def run(op, mode: str, *arrays):
    ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)
    tensors = [Tensor(a) for a in arrays]
    result = Net(op)(*tensors) if mode == "graph" else op(*tensors)
    return tuple(r.asnumpy() for r in result) if isinstance(result, (tuple, list)) else result.asnumpy()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("axis,keep_dims", [(0, False), (0, True), (1, False), (1, True)])
def test_add_reduce_sum(emitted, monkeypatch, mode, axis, keep_dims, rng):
    x, y = rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32)
    op = custom(emitted, monkeypatch, "add_reduce_sum", dict(axis=axis, keep_dims=keep_dims))
    assert_close(run(op, mode, x, y), np.sum(x + y, axis=axis, keepdims=keep_dims), what=f"{mode}")


@pytest.mark.parametrize("mode", MODES)
def test_add_mul_div_multi_output(emitted, monkeypatch, mode, rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    y = (rng.uniform(0.5, 2.0, (3, 4)) * rng.choice([-1, 1], (3, 4))).astype(np.float32)
    got = run(custom(emitted, monkeypatch, "add_mul_div"), mode, x, y)
    assert_all_close(got, (x + y, x * y, x / y), what=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax(emitted, monkeypatch, mode, axis, rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    assert_close(run(custom(emitted, monkeypatch, "softmax", dict(axis=axis)), mode, x),
                 e / e.sum(axis=axis, keepdims=True), what=mode)


@pytest.mark.parametrize("mode", MODES)
def test_layer_norm(emitted, monkeypatch, mode, rng):
    x = rng.standard_normal((3, 8)).astype(np.float32)
    eps = 1e-3
    mean = x.mean(axis=-1, keepdims=True)
    d = x - mean
    rstd = 1.0 / np.sqrt((d * d).mean(axis=-1, keepdims=True) + eps)
    got = run(custom(emitted, monkeypatch, "layer_norm", dict(axis=-1, eps=eps)), mode, x)
    assert_all_close(got, (d * rstd, mean, rstd), what=mode)


@pytest.mark.parametrize("mode", MODES)
def test_other_dtypes_through_infer_type(emitted, monkeypatch, mode, rng):
    x16 = rng.standard_normal((2, 5)).astype(np.float16)
    e = np.exp(x16.astype(np.float32) - x16.astype(np.float32).max(axis=-1, keepdims=True))
    got = run(custom(emitted, monkeypatch, "softmax", dict(axis=-1)), mode, x16)
    assert_close(got, (e / e.sum(axis=-1, keepdims=True)).astype(np.float16), what="float16")
    x64, y64 = rng.standard_normal((2, 3)), rng.uniform(1.0, 2.0, (2, 3))
    got = run(custom(emitted, monkeypatch, "add_mul_div"), mode, x64, y64)
    assert_all_close(got, (x64 + y64, x64 * y64, x64 / y64), what="float64")


@pytest.mark.parametrize("mode", MODES)
def test_rms_norm_and_bias_gelu_broadcast_weights(emitted, monkeypatch, mode, rng):
    x, w = rng.standard_normal((3, 8)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    eps = 1e-6
    want = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + np.float32(eps)) * w
    assert_close(run(custom(emitted, monkeypatch, "rms_norm", dict(eps=eps)), mode, x, w), want, what="rms_norm")
    h = x + w
    gelu = 0.5 * h * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h ** 3)))
    assert_close(run(custom(emitted, monkeypatch, "bias_gelu"), mode, x, w), gelu, what="bias_gelu")


@pytest.mark.parametrize("mode", MODES)
def test_int32_combination(emitted, monkeypatch, mode):
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    got = run(custom(emitted, monkeypatch, "add_reduce_sum", dict(axis=1, keep_dims=False)), mode, x, x)
    assert_close(got, np.sum(x + x, axis=1))  # int64, as NumPy sums int32
    got = run(custom(emitted, monkeypatch, "add_mul_div"), mode, x, x + 1)
    assert_all_close(got, (x + x + 1, x * (x + 1), x / (x + 1)))


def _dynamic_net(emitted, monkeypatch, name, attrs, columns):
    ms.set_context(mode=ms.GRAPH_MODE)
    net = Net(custom(emitted, monkeypatch, name, attrs))
    dynamic = Tensor(shape=[None, columns], dtype=ms.float32)
    return net, dynamic


def test_dynamic_shape_without_workspace(emitted, monkeypatch):
    """Graph mode with a dynamic first dim: Init sees -1, InferShape propagates it, the kernel runs
    for each concrete shape."""
    net, dynamic = _dynamic_net(emitted, monkeypatch, "add_reduce_sum", dict(axis=1, keep_dims=False), 4)
    net.set_inputs(dynamic, dynamic)
    for rows in (3, 5):
        x = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)
        assert_close(net(Tensor(x), Tensor(x)).asnumpy(), np.sum(x + x, axis=1))


def test_dynamic_rank(emitted, monkeypatch):
    """Graph mode with inputs of unknown rank: InferShape returns [-2], Init sees [-2]."""
    ms.set_context(mode=ms.GRAPH_MODE)
    net = Net(custom(emitted, monkeypatch, "add_reduce_sum", dict(axis=1, keep_dims=False)))
    dynamic = Tensor(shape=None, dtype=ms.float32)
    net.set_inputs(dynamic, dynamic)
    for shape in ((3, 4), (2, 3, 4)):
        x = np.ones(shape, np.float32)
        assert_close(net(Tensor(x), Tensor(x)).asnumpy(), np.sum(x + x, axis=1))


def test_dynamic_shape_with_workspace(emitted, monkeypatch):
    net, dynamic = _dynamic_net(emitted, monkeypatch, "softmax", dict(axis=-1), 4)
    net.set_inputs(dynamic)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    assert_close(net(Tensor(x)).asnumpy(), e / e.sum(axis=-1, keepdims=True))


def test_float_attribute_given_as_int_is_refused(emitted, monkeypatch):
    """MindSpore keeps value=2 as an int64 attribute and refuses Attr<float> on it ("Cast failed"):
    float attributes must be written as floats (the header comment's defaults are)."""
    x = np.ones((2, 3), np.float32)
    with pytest.raises(RuntimeError, match="Cast failed"):
        run(custom(emitted, monkeypatch, "smooth_l1", dict(sigma=2)), "pynative", x, x)
    got = run(custom(emitted, monkeypatch, "smooth_l1", dict(sigma=2.0)), "pynative", x, 0 * x)
    assert_close(got, np.full((2, 3), 1.0 - 0.5 / 4.0, np.float32))
