"""Property-based tests: random fused graphs against NumPy.

A graph is a random expression tree over 1-3 inputs of broadcast-compatible shapes
(``fuzz_graphs.graphs``: elementwise unary/binary ops, ``fg.where``, Python scalar constants and
scalar attributes, at most two reductions, 1-3 outputs). The same tree is evaluated by fusegen
(traced into an ``@fg.op`` and run by the Numba backend) and by NumPy; dtypes must be equal and
values close.

Every new graph compiles Numba kernels (~1-2 s each), so the default run is small, seeded and
derandomized (the same graphs every run, which also lets Numba's disk cache serve a warm run);
``FUSEGEN_LONG_TESTS=1`` tries a few hundred graphs. The number tried is printed at the end of
the pytest run.
"""
from __future__ import annotations

import inspect

import numpy as np
from hypothesis import HealthCheck, Phase, event, given, note, settings
from hypothesis import strategies as st

import fusegen as fg

from conftest import ALL_DTYPES, LONG_TESTS, PROPERTY_STATS
from fuzz_graphs import count_reductions, evaluate, graphs, make_op, show

GRAPH_SETTINGS = settings(
    max_examples=300 if LONG_TESTS else 6,
    deadline=None,
    derandomize=True,
    database=None,
    # no shrinking: each step re-compiles kernels (minutes); the failing tree is printed instead
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def tried(what: str) -> None:
    """Count an example (reported at the end of the run by conftest's terminal summary)."""
    PROPERTY_STATS[what] = PROPERTY_STATS.get(what, 0) + 1


TOL = {np.dtype(np.float32): dict(rtol=1e-4, atol=1e-4), np.dtype(np.float64): dict(rtol=1e-9, atol=1e-9)}


@GRAPH_SETTINGS
@given(g=graphs(), seed=st.integers(0, 2**32 - 1))
def test_random_fused_graphs_match_numpy(g, seed):
    shapes, dtypes, outs, attrs = g
    tried("random fused graphs (test_random_fused_graphs_match_numpy)")
    note(f"inputs: {list(zip(shapes, dtypes))}; attrs: {attrs}")
    for k, o in enumerate(outs):
        note(f"output {k}: {show(o)}")
    event(f"{max(count_reductions(o) for o in outs)} reductions in an output; {len(outs)} outputs")
    rng = np.random.default_rng(seed)
    arrays = [rng.uniform(-2, 2, size=s).astype(d) for s, d in zip(shapes, dtypes)]
    op = make_op(len(shapes), outs)
    note(str(op))
    got = op(*arrays, **attrs)
    got = got if isinstance(got, tuple) else (got,)
    with np.errstate(all="ignore"):
        want = [np.asarray(evaluate(o, arrays, attrs, "np")) for o in outs]
    assert len(got) == len(want)
    for k, (a, b) in enumerate(zip(got, want)):
        assert a.dtype == b.dtype, f"output {k}: dtype {a.dtype}, NumPy {b.dtype}"
        assert a.shape == b.shape, f"output {k}: shape {a.shape}, NumPy {b.shape}"
        # A float64 output can carry a float32 intermediate (cos of a float32 mean): NumPy's and
        # Numba's float32 libm differ by an ulp there, so the least precise float on the path sets
        # the tolerance, not the output's dtype alone.
        floats = [d for d in [b.dtype, *map(np.dtype, dtypes)] if d.kind == "f"]
        tol = TOL[min(floats, key=lambda d: d.itemsize)] if floats else TOL[b.dtype]
        np.testing.assert_allclose(a, b, equal_nan=True, err_msg=f"output {k}: {show(outs[k])}", **tol)


# --- dtype promotion of random expressions (no compiler: many examples are cheap) -----------
PROMO_BINARY = [("add", lambda a, b: a + b), ("mul", lambda a, b: a * b), ("div", lambda a, b: a / b),
                ("max", np.maximum), ("lt", lambda a, b: a < b), ("sub", lambda a, b: a - b)]
PROMO_FG = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
            "max": fg.maximum, "lt": lambda a, b: a < b, "sub": lambda a, b: a - b}


@st.composite
def promo_exprs(draw):
    """A chain ``((x0 op a) op b) ...`` over random dtypes, where each operand is another input
    ("in", i) or a weak Python scalar ("scalar", v), on either side."""
    n = draw(st.integers(1, 3))
    dtypes = [draw(st.sampled_from(ALL_DTYPES)) for _ in range(n)]
    operand = st.one_of(st.tuples(st.just("in"), st.integers(0, n - 1)),
                        st.tuples(st.just("scalar"), st.sampled_from([2, 1.5, -1, 0.25])))
    steps = [(draw(st.sampled_from(sorted(PROMO))), draw(operand), draw(st.booleans()))
             for _ in range(draw(st.integers(1, 4)))]
    return dtypes, steps


PROMO = {  # name: (fusegen, NumPy)
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "sub": (lambda a, b: a - b, lambda a, b: a - b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "div": (lambda a, b: a / b, lambda a, b: a / b),
    "max": (fg.maximum, np.maximum),
    "lt": (lambda a, b: a < b, lambda a, b: a < b),
    "where": (lambda a, b: fg.where(a > 0, a, b), lambda a, b: np.where(a > 0, a, b)),
}


def run_chain(steps, xs, k):
    acc = xs[0]
    for name, (kind, v), left in steps:
        other = xs[v] if kind == "in" else v
        fn = PROMO[name][k]
        acc = fn(other, acc) if left else fn(acc, other)
    return acc


def with_inputs(n: int, fn, name: str):
    """An ``@fg.op`` with n positional inputs calling ``fn(*xs)``."""
    def body(*xs):
        return fn(*xs)
    P = inspect.Parameter
    body.__signature__ = inspect.Signature([P(f"x{i}", P.POSITIONAL_OR_KEYWORD) for i in range(n)])
    return fg.op(body, name=name)


@settings(max_examples=1000 if LONG_TESTS else 200, deadline=None, derandomize=True, database=None)
@given(promo_exprs())
def test_random_expression_dtypes_match_numpy(chain):
    dtypes, steps = chain
    tried("random dtype chains (test_random_expression_dtypes_match_numpy)")
    try:
        with np.errstate(all="ignore"):
            want = np.asarray(run_chain(steps, [np.ones(2, d) for d in dtypes], 1)).dtype
    except (TypeError, OverflowError):
        event("NumPy rejects it")
        return  # e.g. bool - bool, uint8 + (-1): the error tests cover rejections
    op = with_inputs(len(dtypes), lambda *xs: run_chain(steps, xs, 0), "promo")
    got = fg.infer(op, dtypes, [(2,)] * len(dtypes), {}).out_dtypes[0]
    assert got.np == want, f"{dtypes} {steps}: fusegen {got}, NumPy {want}"
