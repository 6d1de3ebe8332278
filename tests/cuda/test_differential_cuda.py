"""Differential fuzzing of the numba-cuda backend: the random fused graphs of
``tests/test_differential.py`` (``fuzz_graphs.graphs``) through ``fg.compile(op, device="cuda")``
against NumPy, within the same per-dtype tolerances (``fuzz_graphs.check``, ``conftest.TOL``).

Each graph is compiled once, with drawn launch options (a forced two-stage ``split`` of the
reduced range, blocks of 2 or 4 threads, a grid of 1 or 2 blocks: block- and grid-stride loops
on tiny shapes) or the defaults, and called on several input draws: new tiny dims for the graph's shape pattern (0, 1, 2 or 3:
the simulator runs every CUDA thread as a Python thread, and block reductions synchronize
them), another dtype combination (float16/float32/float64/int32), non-contiguous NumPy views
(copied to the device), and device arrays (the outputs then stay on the device). Where NumPy
refuses a draw (a broadcast the new dims break, max/min over an empty axis) the kernel must
refuse it too, with a ``ShapeError``.

Bounded and derandomized (the same graphs every run); ``FUSEGEN_LONG_TESTS=1`` tries more. The
counts are printed at the end of the module (``-s``) and in the terminal summary (``-n 0``).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st

import fusegen as fg

from conftest import LONG_TESTS

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fuzz_graphs import (ALT_DTYPES, check, count, count_draw, draws, graphs, make_input, make_op,  # noqa: E402
                         pattern, reference, report, show)

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore:.*Grid size.*",
                                        "ignore::numba.core.errors.NumbaPerformanceWarning")

N_GRAPHS = 400 if LONG_TESTS else 80
N_DRAWS = 8 if LONG_TESTS else 4
#: Base dims of a draw: tiny, size 0 and 1 often (a row of 3 still takes a block of 4 threads);
#: the long mode adds a few longer ones.
DIMS = (2, 1, 3, 0, 1, 2) + ((5, 7) if LONG_TESTS else ())
#: "device": the input goes in as a (contiguous) device array.
VIEWS = ("c", "strided", "transposed", "device")

SETTINGS = settings(
    max_examples=N_GRAPHS, deadline=None, derandomize=True, database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    print("\n" + report())


def _host(results, on_device: bool):
    results = results if isinstance(results, tuple) else (results,)
    assert all(hasattr(r, "copy_to_host") == on_device for r in results), \
        f"outputs {[type(r).__name__ for r in results]}: device outputs expected only for device inputs"
    return tuple(r.copy_to_host() for r in results) if on_device else results


@SETTINGS
@given(g=graphs(), alt=st.sampled_from(ALT_DTYPES), data=st.data(),
       options=st.fixed_dictionaries({"split": st.sampled_from([None, None, 2, 3]),
                                      "threads": st.sampled_from([None, None, 2, 4]),
                                      "max_blocks": st.sampled_from([None, 1, 2])}))
def test_cuda_agrees_with_numpy(g, alt, data, options):
    from numba import cuda
    shapes, dtypes, outs, _ = g
    nin = len(shapes)
    combos = list(dict.fromkeys([tuple(dtypes), (alt,) * nin]))
    note(f"graph inputs: {list(zip(shapes, dtypes))}; combos {combos}; options {options}")
    for k, o in enumerate(outs):
        note(f"output {k}: {show(o)}")
    kernel = fg.compile(make_op(nin, outs), device="cuda", **options)
    count("graphs (cuda)")
    pat = pattern(shapes)
    for i in range(N_DRAWS):
        d_shapes, combo, views, d_attrs, seed = data.draw(draws(len(shapes[0]), pat, combos, DIMS, VIEWS),
                                                          label=f"draw {i}")
        rng = np.random.default_rng(seed)
        arrays = [make_input(rng, s, t, v) for s, t, v in zip(d_shapes, combo, views)]
        count_draw(arrays)
        args = [cuda.to_device(a) if v == "device" else a for a, v in zip(arrays, views)]
        on_device = "device" in views
        if on_device:
            count("input draws with a device array (cuda)")
        draw_note = f"draw {i}: {[(a.shape, str(a.dtype), v) for a, v in zip(arrays, views)]} attrs {d_attrs}"
        try:
            want = reference(outs, arrays, d_attrs)
        except ValueError as exc:  # NumPy refuses (broadcast, empty max/min): so must the kernel
            with pytest.raises(fg.ShapeError):
                kernel(*args, **d_attrs)
            count("input draws refused alike (cuda)")
            note(f"{draw_note}: NumPy refuses ({exc})")
            continue
        got = _host(kernel(*args, **d_attrs), on_device)
        check("cuda", got, want, outs, combo, draw_note)
        count("input draws (cuda)")
