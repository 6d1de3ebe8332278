"""Per-call cost at (4, 5), per backend, recorded by pytest-benchmark in its ``per-call`` group
(``pytest tests/test_percall_benchmark.py --benchmark-only``; a record, not a timed assertion:
the figures are compared with ``--benchmark-compare``). ``fusegen bench --calls`` breaks the same
call into its parts. Skipped in an ordinary run (``--benchmark-skip`` is implied by xdist)."""
from __future__ import annotations

import shutil

import pytest

import fusegen as fg
from fusegen.bench import variants

pytest.importorskip("pytest_benchmark", reason="needs pytest-benchmark (pip install 'fusegen[test]')")
BACKENDS = ["numba", pytest.param("aot", marks=pytest.mark.skipif(shutil.which("g++") is None,
                                                                    reason="needs g++ (apt install g++)"))]


@pytest.mark.benchmark(group="per-call")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["add_reduce_sum", "layer_norm", "bias_gelu", "adam_step"])
def test_call_at_4x5(benchmark, name, backend):
    spec = variants.ALL_OPS[name]
    kernel = fg.compile(spec.op, backend=backend, **({"dtypes": "float32"} if backend == "aot" else {}))
    arrays, attrs = spec.make_inputs((4, 5), "float32"), spec.variants[-1]
    kernel(*arrays, **attrs)
    benchmark(lambda: kernel(*arrays, **attrs))


@pytest.mark.benchmark(group="per-call, a new seed each call")
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_new_attribute_value_each_call(benchmark, backend):
    # dropout_add_layer_norm at (64, 256) with seed=step: the signature's code is reused with the
    # new value (rt.kernel's rebind); before it, each new seed was traced, planned and lowered
    import itertools

    import numpy as np
    import fusegen.examples as ex
    rng = np.random.default_rng(0)
    x, r = rng.standard_normal((2, 64, 256), dtype=np.float32)
    g, b = np.ones(256, np.float32), np.zeros(256, np.float32)
    if benchmark.disabled:   # (an ordinary run: nothing to record, and the build costs seconds)
        pytest.skip("records only with --benchmark-only")
    kernel = fg.compile(ex.dropout_add_layer_norm, backend=backend)
    steps = itertools.count(1)
    kernel(x, r, g, b, seed=0)
    benchmark(lambda: kernel(x, r, g, b, seed=next(steps)))
