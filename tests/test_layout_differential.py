"""Differential fuzzing of layout ops beside reductions: random multi-output ops
(``fuzz_layout_graphs.programs``: pad, concat, stack, split, slices, reshapes, transposes, flip,
roll, broadcast, tile, repeat, iota masks, gathers, cumulative sums, mixed with elementwise math
and sum/mean/max/min/argmax) on every backend present, against NumPy.

Several outputs of different shapes that share subexpressions make the plan's scheduler group
stages of different kinds (a reduction beside a piecewise stage, a scan beside a gather): the
place of silent wrong answers the elementwise fuzzer (``test_differential.py``) and the view
chains (``test_views.py``) do not reach. Each op is compiled once per backend and called on a
few input draws (contiguous, strided and transposed views); every output must have NumPy's dtype
and shape and values within ``conftest.TOL`` (``fuzz_graphs.check``). An op fusegen refuses on its
first call with an ``UnsupportedError`` or a ``FusegenError`` saying what is "not supported" yet
(the emitted kernels' limit on piece combinations) is counted, not failed; any other error fails.

The default run compiles two small derandomized ops on Numba (seconds); ``-m extended`` runs
more on Numba, the AOT backend (g++) and XLA. ``FUSEGEN_LAYOUT_FUZZ=N`` sets the extended run's
number of ops per backend (a hunt: N in the hundreds, random each run).
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st

import fusegen as fg

from fuzz_graphs import check, count, make_input, report, tolerance  # noqa: F401 (tolerance: check's)
from fuzz_layout_graphs import make_op, programs, reference, source

from _optional import backends

HUNT = int(os.environ.get("FUSEGEN_LAYOUT_FUZZ", "0"))
N_DRAWS = 3
SETTINGS = settings(
    deadline=None, database=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: every step compiles
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


@pytest.fixture(scope="module", autouse=True)
def _report():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FUSEGEN_GUARD", "1")   # an AOT kernel's stray write is an error, not heap damage
        yield
    print("\n" + report())


def agree(backend: str, prog, data) -> None:
    """One random op through ``backend``: NumPy's answer on every draw."""
    text = source(prog)
    note(text)
    op = make_op(prog)
    dtypes, index_dtype = list(prog.dtypes), np.int64
    try:
        if backend == "xla":
            import jax
            if not jax.config.jax_enable_x64:   # JAX has no 64-bit arrays: 32-bit inputs, the same program
                dtypes, index_dtype = ["float32"] * len(dtypes), np.int32
            kernel = jax.jit(fg.jax.function(op))
        elif backend == "aot":
            kernel = fg.compile(op, backend="aot", dtypes=[tuple(dtypes) + ("int64",) * len(prog.indices)])
        else:
            kernel = fg.compile(op)
    except fg.FusegenError as e:
        _refused(e, backend)
        return
    count(f"layout ops ({backend})")
    for i in range(N_DRAWS):
        seed = data.draw(st.integers(0, 2**32 - 1), label=f"seed {i}")
        views = [data.draw(st.sampled_from(["c", "c", "strided", "transposed"])) for _ in prog.shapes]
        rng = np.random.default_rng(seed)
        arrays = [make_input(rng, s, t, v) for s, t, v in zip(prog.shapes, dtypes, views)]
        arrays += [ix.astype(index_dtype) for ix in prog.indices]
        want = reference(prog, arrays)
        try:
            got = kernel(*arrays)
        except fg.FusegenError as e:
            if i:
                raise
            _refused(e, backend)
            return
        if backend == "xla":
            got = tuple(np.asarray(x) for x in got) if isinstance(got, (tuple, list)) else np.asarray(got)
        outs = list(range(len(prog.outs)))
        check(backend, got, want, outs, dtypes, f"draw {i}: views {views}\n{text}",
              describe=lambda k: f"v{prog.outs[k]}")
        count(f"input draws ({backend})")


def _refused(e: Exception, backend: str) -> None:
    """A documented limitation (an ``UnsupportedError``, or a message saying what is "not
    supported" yet) is counted; any other error is re-raised."""
    if not isinstance(e, fg.UnsupportedError) and "not supported" not in str(e):
        raise e
    count(f"layout ops refused as unsupported ({backend})")


@settings(SETTINGS, max_examples=2, derandomize=True)
@given(prog=programs(max_steps=5), data=st.data())
def test_layout_ops_agree_with_numpy_on_numba(prog, data):
    agree("numba", prog, data)


@pytest.mark.extended
@pytest.mark.parametrize("backend", backends("numba", "aot", "xla"))
@settings(SETTINGS, max_examples=HUNT or 8, derandomize=not HUNT)
@given(prog=programs(), data=st.data())
def test_layout_ops_agree_with_numpy(backend, prog, data):
    agree(backend, prog, data)
