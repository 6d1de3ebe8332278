"""Differential fuzzing: every backend present against NumPy on random fused graphs.

The graphs come from ``fuzz_graphs.graphs`` (elementwise chains, broadcasts, 0-2 reductions over
int/tuple/negative/all axes with or without keep_dims, 1-3 outputs, a float and an int attribute).
Each graph is compiled once per backend -- Numba CPU, AOT C++ (emitted, built with g++, run through
``AotKernel``) and XLA via ``fg.jax.function`` when JAX is importable -- and then called on several
*input draws*: new dims for the graph's shape pattern (size-0 and size-1 dims included), another
dtype combination (float16/float32/float64/int32), non-contiguous views, other attribute values.
Every backend must agree with NumPy:

* same dtypes and shapes, values within ``conftest.TOL`` of the least precise float on the
  expression's path (the reference values are NumPy's on float64-widened inputs, rounded to
  NumPy's dtype, as ``conftest.np_ref``: fusegen computes float16 in float32 registers;
  ``fuzz_graphs.check``);
* where NumPy refuses a draw (a broadcast the new dims break, max/min over an empty axis) every
  backend must refuse it too, with a ``ShapeError``.

XLA runs only 32-bit combinations unless ``jax_enable_x64`` is on (JAX has no 64-bit arrays
without it, and fusegen then refuses a 64-bit *result* with ``DTypeError``; checked too).

Compiles cost seconds per graph and backend, so the default run is small and derandomized (a few
graphs per backend); the ``slow`` run tries 30 new random graphs per backend, and
``FUSEGEN_LONG_TESTS=1`` 120 in the default test. The counts tried per backend are reported in the
terminal summary (conftest's ``PROPERTY_STATS``).
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st

import fusegen as fg

from conftest import LONG_TESTS
from fuzz_graphs import (ALT_DTYPES, check, count, count_draw, draws, graphs, make_input, make_op, pattern,
                         reference, report, show)

from _optional import backends, needs_gxx

N_GRAPHS = 120 if LONG_TESTS else 3
#: The slow step's run (``-m slow``): more graphs, a new random sample each run.
N_GRAPHS_SLOW = 30
N_DRAWS = 8 if LONG_TESTS else 4
#: FUSEGEN_DIFF_TRACE=1: print every graph and draw *before* running it, so that a crash (a native
#: kernel corrupting the heap) leaves its reproducer on stderr.
TRACE = os.environ.get("FUSEGEN_DIFF_TRACE", "") not in ("", "0")

SETTINGS = settings(
    max_examples=N_GRAPHS, deadline=None, derandomize=True, database=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: every step compiles (seconds)
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

@pytest.fixture(scope="module", autouse=True)
def _report():
    # AOT kernels run in guard mode: an out-of-bounds write becomes a KernelError naming the
    # output instead of silent heap corruption (which crashed an unguarded long run).
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FUSEGEN_GUARD", "1")
        yield
    print("\n" + report())


BACKENDS = backends("numba", "aot", "xla")
GIVEN = given(g=graphs(), alt=st.sampled_from(ALT_DTYPES), data=st.data())


@pytest.mark.parametrize("backend", BACKENDS)
@SETTINGS
@GIVEN
def test_backends_agree_with_numpy(backend, g, alt, data):
    agree(backend, g, alt, data)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@settings(SETTINGS, max_examples=N_GRAPHS_SLOW, derandomize=False)
@GIVEN
def test_backends_agree_with_numpy_on_many_graphs(backend, g, alt, data):
    agree(backend, g, alt, data)


def agree(backend, g, alt, data):
    """One random graph through ``backend``: NumPy's answer on every draw, or its refusal."""
    shapes, dtypes, outs, attrs = g
    nin = len(shapes)
    combos = [tuple(dtypes), (alt,) * nin]
    combos = list(dict.fromkeys(combos))
    note(f"graph inputs: {list(zip(shapes, dtypes))}; combos {combos}")
    for k, o in enumerate(outs):
        note(f"output {k}: {show(o)}")
    if TRACE:
        print(f"\n[graph] {backend}: inputs {list(zip(shapes, dtypes))} combos {combos} "
              f"outs {[show(o) for o in outs]}", file=sys.stderr, flush=True)
    op = make_op(nin, outs)
    if backend == "xla":
        import jax
        combos = [c for c in combos if "float16" not in c and
                  all(np.dtype(d).itemsize <= 4 or jax.config.jax_enable_x64 for d in c)]
        if not combos:
            count("graphs without a 32-bit combination (xla)")
            return
        kernel = fg.jax.function(op, dtypes=combos)
    else:
        kernel = fg.compile(op) if backend == "numba" else fg.compile(op, backend="aot", dtypes=combos)
    count(f"graphs ({backend})")
    pat = pattern(shapes)
    for i in range(N_DRAWS):
        d_shapes, combo, views, d_attrs, seed = data.draw(draws(len(shapes[0]), pat, combos), label=f"draw {i}")
        rng = np.random.default_rng(seed)
        arrays = [make_input(rng, s, t, v) for s, t, v in zip(d_shapes, combo, views)]
        count_draw(arrays)
        draw_note = f"draw {i}: {[(a.shape, str(a.dtype), v) for a, v in zip(arrays, views)]} attrs {d_attrs}"
        if TRACE:
            print(f"[draw] {draw_note}", file=sys.stderr, flush=True)
        try:
            want = reference(outs, arrays, d_attrs)
        except ValueError as exc:  # NumPy refuses (broadcast, empty max/min): fusegen must too
            count(f"refused draws (NumPy raises, {backend})")
            with pytest.raises(fg.ShapeError):
                kernel(*arrays, **d_attrs)
            count(f"input draws refused alike ({backend})")
            note(f"{draw_note}: NumPy refuses ({exc})")
            continue
        if backend == "xla":
            if not jax.config.jax_enable_x64 and any(w.dtype.itemsize > 4 for w in want):
                with pytest.raises(fg.DTypeError, match="jax_enable_x64"):
                    kernel(*arrays, **d_attrs)  # a 64-bit result JAX cannot represent
                count("input draws refused, 64-bit result (xla)")
                continue
            got = kernel(*arrays, **d_attrs)
            got = tuple(np.asarray(x) for x in got) if isinstance(got, (tuple, list)) else np.asarray(got)
        else:
            got = kernel(*arrays, **d_attrs)
        check(backend, got, want, outs, combo, draw_note)
        count(f"input draws ({backend})")


@fg.op
def max_defaulted_attr(x, *, alpha: float = 0.75):
    return fg.maximum(x, alpha)


@needs_gxx
def test_aot_maximum_of_float64_and_defaulted_float_attr():
    k = fg.compile(max_defaulted_attr, backend="aot", dtypes=["float64"])
    x = np.array([0.5, 1.0, -3.0])
    np.testing.assert_array_equal(k(x, alpha=0.75), np.maximum(x, 0.75))


@needs_gxx
@pytest.mark.parametrize("shape", [(0,), (0, 5), (5, 0)])
def test_aot_size0_output_is_not_written_out_of_bounds(shape):
    k = fg.compile(neg_op, backend="aot", dtypes=["float32"])
    assert k(np.zeros(shape, np.float32)).shape == shape


@fg.op
def neg_op(x):
    return -x
