"""Differential fuzzing: every backend present against NumPy on random fused graphs.

The graphs come from ``test_property.graphs`` (elementwise chains, broadcasts, 0-2 reductions over
int/tuple/negative/all axes with or without keep_dims, 1-3 outputs, a float and an int attribute).
Each graph is compiled once per backend -- Numba CPU, AOT C++ (emitted, built with g++, run through
``AotKernel``) and XLA via ``fg.jax.function`` when JAX is importable -- and then called on several
*input draws*: new dims for the graph's shape pattern (size-0 and size-1 dims included), another
dtype combination (float16/float32/float64/int32), non-contiguous views, other attribute values.
Every backend must agree with NumPy:

* same dtypes and shapes, values within ``conftest.TOL`` of the least precise float on the
  expression's path (the reference values are NumPy's on float64-widened inputs, rounded to
  NumPy's dtype, as ``conftest.np_ref``: fusegen computes float16 in float32 registers);
* where NumPy refuses a draw (a broadcast the new dims break, max/min over an empty axis) every
  backend must refuse it too, with a ``ShapeError``.

XLA runs only 32-bit combinations unless ``jax_enable_x64`` is on (JAX has no 64-bit arrays
without it, and fusegen then refuses a 64-bit *result* with ``DTypeError``; checked too).

AOT compiles cost seconds per graph, so the default run is small and derandomized;
``FUSEGEN_LONG_TESTS=1`` tries many more. The counts tried per backend are reported in the
terminal summary (conftest's ``PROPERTY_STATS``).
"""
from __future__ import annotations

import os
import shutil
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st

import fusegen as fg

from conftest import LONG_TESTS, PROPERTY_STATS, TOL
from test_property import ATTR_VALUES, evaluate, graphs, make_op, show

try:
    import jax
    import fusegen.jax as fgjax  # noqa: F401
    HAVE_JAX = True
except Exception:  # noqa: BLE001 - any import failure means "no XLA backend here"
    HAVE_JAX = False

HAVE_GXX = shutil.which("g++") is not None

N_GRAPHS = 120 if LONG_TESTS else 8
N_DRAWS = 8 if LONG_TESTS else 4
#: FUSEGEN_DIFF_TRACE=1: print every graph and draw *before* running it, so that a crash (a native
#: kernel corrupting the heap) leaves its reproducer on stderr.
TRACE = os.environ.get("FUSEGEN_DIFF_TRACE", "") not in ("", "0")

SETTINGS = settings(
    max_examples=N_GRAPHS, deadline=None, derandomize=True, database=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: every step compiles (seconds)
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

ALT_DTYPES = ["float16", "float32", "float64", "int32"]


def count(what: str, n: int = 1) -> None:
    PROPERTY_STATS[f"differential: {what}"] = PROPERTY_STATS.get(f"differential: {what}", 0) + n


def _pattern(shapes):
    """Per input, per dim (aligned from the right with input 0, which has full rank): "b" when the
    dim follows the base dim, "1" when it is a broadcast 1."""
    base = shapes[0]
    r = len(base)
    return [tuple("b" if d == base[r - len(s) + k] else "1" for k, d in enumerate(s)) for s in shapes]


@st.composite
def draws(draw, rank: int, pattern, combos):
    """One input draw: new base dims (0-5, size 0 and 1 often), a dtype combination, views, attributes, a seed."""
    base = [draw(st.sampled_from([3, 1, 4, 0, 2, 5, 1, 0])) for _ in range(rank)]
    shapes = [tuple(base[rank - len(p) + k] if c == "b" else 1 for k, c in enumerate(p)) for p in pattern]
    combo = draw(st.sampled_from(combos))
    views = [draw(st.sampled_from(["c", "c", "strided", "transposed"])) for _ in shapes]
    attrs = {n: draw(st.sampled_from(v)) for n, v in ATTR_VALUES.items()}
    return shapes, combo, views, attrs, draw(st.integers(0, 2**32 - 1))


def _make_input(rng, shape, dtype, view):
    dtype = np.dtype(dtype)
    def values(s):
        if dtype.kind == "i":
            return rng.integers(-3, 4, size=s).astype(dtype)
        return rng.uniform(-2, 2, size=s).astype(dtype)
    if view == "strided" and len(shape) >= 1:
        big = values(shape[:-1] + (2 * shape[-1],))
        return big[..., ::2]
    if view == "transposed" and len(shape) >= 2:
        return np.ascontiguousarray(values(shape[::-1])).T
    return values(shape)


def _reference(outs, arrays, attrs):
    """NumPy's outputs: dtypes from the arrays as they are, values from float64-widened inputs
    (the correctly rounded answer). Raises what NumPy raises."""
    with np.errstate(all="ignore"):
        typed = [np.asarray(evaluate(o, arrays, attrs, "np")) for o in outs]
        wide = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in arrays]
        vals = [np.asarray(evaluate(o, wide, attrs, "np")) for o in outs]
    return [v.astype(t.dtype) for t, v in zip(typed, vals)]


def _tolerance(want_dtype, in_dtypes):
    floats = [d for d in [want_dtype, *map(np.dtype, in_dtypes)] if d.kind == "f"]
    return TOL[min(floats, key=lambda d: d.itemsize)] if floats else None


def _check(name, got, want, outs, in_dtypes, draw_note):
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want), f"{name}: {len(got)} outputs, NumPy {len(want)}"
    for k, (a, b) in enumerate(zip(got, want)):
        a = np.asarray(a)
        msg = f"{name} output {k}: {show(outs[k])}; {draw_note}"
        assert a.dtype == b.dtype, f"{msg}: dtype {a.dtype}, NumPy {b.dtype}"
        assert a.shape == b.shape, f"{msg}: shape {a.shape}, NumPy {b.shape}"
        tol = _tolerance(b.dtype, in_dtypes)
        if tol is None:
            np.testing.assert_array_equal(a, b, err_msg=msg)
        else:
            np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), equal_nan=True,
                                       err_msg=msg, **tol)


@pytest.fixture(scope="module", autouse=True)
def _report():
    # AOT kernels run in guard mode: an out-of-bounds write becomes a KernelError naming the
    # output instead of silent heap corruption (which crashed an unguarded long run).
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FUSEGEN_GUARD", "1")
        yield
    print("\n" + "\n".join(f"{k}: {v}" for k, v in sorted(PROPERTY_STATS.items()) if k.startswith("differential")))


@SETTINGS
@given(g=graphs(), alt=st.sampled_from(ALT_DTYPES), data=st.data())
def test_backends_agree_with_numpy(g, alt, data):
    shapes, dtypes, outs, attrs = g
    nin = len(shapes)
    combos = [tuple(dtypes), (alt,) * nin]
    combos = list(dict.fromkeys(combos))
    note(f"graph inputs: {list(zip(shapes, dtypes))}; combos {combos}")
    for k, o in enumerate(outs):
        note(f"output {k}: {show(o)}")
    if TRACE:
        print(f"\n[graph] inputs {list(zip(shapes, dtypes))} combos {combos} outs {[show(o) for o in outs]}",
              file=sys.stderr, flush=True)
    op = make_op(nin, outs)
    backends = {"numba": fg.compile(op)}
    count("graphs (numba)")
    if HAVE_GXX:
        backends["aot"] = fg.compile(op, backend="aot", dtypes=combos)
        count("graphs (aot)")
    jax_combos = [c for c in combos if all(np.dtype(d).itemsize <= 4 or jax.config.jax_enable_x64 for d in c)] \
        if HAVE_JAX and HAVE_GXX else []
    jax_combos = [c for c in jax_combos if "float16" not in c]
    if jax_combos:
        backends["xla"] = fg.jax.function(op, dtypes=jax_combos)
        count("graphs (xla)")
    pattern = _pattern(shapes)
    for i in range(N_DRAWS):
        d_shapes, combo, views, d_attrs, seed = data.draw(draws(len(shapes[0]), pattern, combos), label=f"draw {i}")
        rng = np.random.default_rng(seed)
        arrays = [_make_input(rng, s, t, v) for s, t, v in zip(d_shapes, combo, views)]
        count("input draws")
        if any(0 in a.shape for a in arrays):
            count("input draws with a size-0 dim")
        if any(not a.flags.c_contiguous for a in arrays):
            count("input draws with a non-contiguous view")
        if any(a.ndim == 0 for a in arrays):
            count("input draws with a rank-0 input")
        draw_note = f"draw {i}: {[(a.shape, str(a.dtype), v) for a, v in zip(arrays, views)]} attrs {d_attrs}"
        if TRACE:
            print(f"[draw] {draw_note}", file=sys.stderr, flush=True)
        try:
            want = _reference(outs, arrays, d_attrs)
        except ValueError as exc:  # NumPy refuses (broadcast, empty max/min): fusegen must too
            count("refused draws (NumPy raises)")
            for name, kernel in backends.items():
                if name == "xla" and combo not in jax_combos:
                    continue
                with pytest.raises(fg.ShapeError):
                    kernel(*arrays, **d_attrs)
                count(f"input draws refused alike ({name})")
            note(f"{draw_note}: NumPy refuses ({exc})")
            continue
        for name, kernel in backends.items():
            if name == "xla":
                if combo not in jax_combos:
                    continue
                if not jax.config.jax_enable_x64 and any(w.dtype.itemsize > 4 for w in want):
                    with pytest.raises(fg.DTypeError, match="jax_enable_x64"):
                        kernel(*arrays, **d_attrs)  # a 64-bit result JAX cannot represent
                    count("input draws refused, 64-bit result (xla)")
                    continue
                got = kernel(*arrays, **d_attrs)
                got = tuple(np.asarray(x) for x in got) if isinstance(got, (tuple, list)) else np.asarray(got)
            else:
                got = kernel(*arrays, **d_attrs)
            _check(name, got, want, outs, combo, draw_note)
            count(f"input draws ({name})")


@fg.op
def max_defaulted_attr(x, *, alpha: float = 0.75):
    return fg.maximum(x, alpha)


@pytest.mark.skipif(not HAVE_GXX, reason="needs g++")
def test_aot_maximum_of_float64_and_defaulted_float_attr():
    k = fg.compile(max_defaulted_attr, backend="aot", dtypes=["float64"])
    x = np.array([0.5, 1.0, -3.0])
    np.testing.assert_array_equal(k(x, alpha=0.75), np.maximum(x, 0.75))


@pytest.mark.skipif(not HAVE_GXX, reason="needs g++")
@pytest.mark.parametrize("shape", [(0,), (0, 5), (5, 0)])
def test_aot_size0_output_is_not_written_out_of_bounds(shape):
    k = fg.compile(neg_op, backend="aot", dtypes=["float32"])
    assert k(np.zeros(shape, np.float32)).shape == shape


@fg.op
def neg_op(x):
    return -x
