"""Property-based tests: random fused graphs against NumPy.

A graph is a random expression tree over 1-3 inputs of broadcast-compatible shapes: elementwise
unary/binary ops, ``fg.where``, Python scalar constants and scalar attributes, at most two
reductions (chained or not, keep_dims or not, over an int, a tuple or all axes), and 1-3
outputs. The same tree is evaluated by fusegen (traced into an ``@fg.op`` and run by the Numba
backend) and by NumPy; dtypes must be equal and values close.

Every new graph compiles Numba kernels (~1-2 s each), so the default run is small, seeded and
derandomized (the same graphs every run, which also lets Numba's disk cache serve a warm run);
``FUSEGEN_LONG_TESTS=1`` tries a few hundred graphs. The number tried is printed at the end of
the pytest run.
"""
from __future__ import annotations

import inspect
import itertools

import numpy as np
from hypothesis import HealthCheck, Phase, event, given, note, settings
from hypothesis import strategies as st

import fusegen as fg

from conftest import ALL_DTYPES, LONG_TESTS, PROPERTY_STATS

GRAPH_SETTINGS = settings(
    max_examples=300 if LONG_TESTS else 15,
    deadline=None,
    derandomize=True,
    database=None,
    # no shrinking: each step re-compiles kernels (minutes); the failing tree is printed instead
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# name: (fusegen, NumPy). Values stay bounded and functions continuous: no exp/log/pow/plain
# division/floor in random chains (the table tests cover them), so differences are rounding only.
UNARY = {
    "neg": (fg.neg, np.negative),
    "abs": (fg.abs, np.abs),
    "tanh": (fg.tanh, np.tanh),
    "sin": (fg.sin, np.sin),
    "cos": (fg.cos, np.cos),
    "sigmoid": (fg.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "relu": (fg.relu, lambda x: np.maximum(x, 0)),
    "sqrt_abs": (lambda x: fg.sqrt(fg.abs(x)), lambda x: np.sqrt(np.abs(x))),
}
BINARY = {
    "add": (lambda a, b: a + b, np.add),
    "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply),
    "max": (fg.maximum, np.maximum),
    "min": (fg.minimum, np.minimum),
    "safe_div": (lambda a, b: a / (1.0 + b * b), lambda a, b: a / (1.0 + b * b)),
}
REDUCE = {
    "sum": (fg.sum, np.sum),
    "mean": (fg.mean, np.mean),
    "max": (fg.max, np.max),
    "min": (fg.min, np.min),
}
SCALARS = [2, -1, 0.5, -1.5, 3.0]
ATTR_VALUES = {"alpha": [0.75, -1.25, 2.0], "n": [2, -3, 1]}


# --- the expression tree -------------------------------------------------------------------
# ("in", i) | ("un", name, e) | ("bin", name, a, b) | ("scalar", name, e, value, left)
# | ("attr", name, e, attr, left) | ("where", a, b, x, y) | ("red", kind, e, axis, keep)
def evaluate(e, inputs, attrs, lib):
    """Evaluate tree ``e``; ``lib`` is "fg" (traced tensors) or "np" (arrays)."""
    k = 0 if lib == "fg" else 1
    tag = e[0]
    if tag == "in":
        return inputs[e[1]]
    if tag == "un":
        return UNARY[e[1]][k](evaluate(e[2], inputs, attrs, lib))
    if tag == "bin":
        return BINARY[e[1]][k](evaluate(e[2], inputs, attrs, lib), evaluate(e[3], inputs, attrs, lib))
    if tag in ("scalar", "attr"):
        x = evaluate(e[2], inputs, attrs, lib)
        s = e[3] if tag == "scalar" else attrs[e[3]]
        fn = BINARY[e[1]][k]
        return fn(s, x) if e[4] else fn(x, s)
    if tag == "where":
        a, b, x, y = (evaluate(s, inputs, attrs, lib) for s in e[1:])
        return fg.where(a < b, x, y) if lib == "fg" else np.where(a < b, x, y)
    if tag == "red":
        x = evaluate(e[2], inputs, attrs, lib)
        if lib == "fg":
            return REDUCE[e[1]][0](x, axis=e[3], keep_dims=e[4])
        return REDUCE[e[1]][1](x, axis=e[3], keepdims=e[4])
    raise AssertionError(e)


def show(e) -> str:
    tag = e[0]
    if tag == "in":
        return f"x{e[1]}"
    if tag == "un":
        return f"{e[1]}({show(e[2])})"
    if tag == "bin":
        return f"{e[1]}({show(e[2])}, {show(e[3])})"
    if tag in ("scalar", "attr"):
        s = repr(e[3]) if tag == "scalar" else e[3]
        return f"{e[1]}({s}, {show(e[2])})" if e[4] else f"{e[1]}({show(e[2])}, {s})"
    if tag == "where":
        return f"where({show(e[1])} < {show(e[2])}, {show(e[3])}, {show(e[4])})"
    return f"{e[1]}({show(e[2])}, axis={e[3]}, keep_dims={e[4]})"


def _broadcast(*shapes):
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        return None


def _reduce_shape(shp, axis, keep):
    r = len(shp)
    axes = set(range(r)) if axis is None else {a % r for a in ((axis,) if isinstance(axis, int) else axis)}
    if keep:
        return tuple(1 if k in axes else d for k, d in enumerate(shp))
    return tuple(d for k, d in enumerate(shp) if k not in axes)


def count_reductions(e) -> int:
    """Distinct reduction nodes in tree ``e`` (a shared subtree counts once, as in the traced DAG)."""
    found = set()

    def walk(n):
        if n[0] == "red":
            found.add(n)
        for s in n[1:]:
            if isinstance(s, tuple) and s and s[0] in ("in", "un", "bin", "scalar", "attr", "where", "red"):
                walk(s)
    walk(e)
    return len(found)


@st.composite
def graphs(draw):
    """(input shapes, input dtypes, output trees, attribute values)."""
    rank = draw(st.integers(1, 3))
    base = tuple(draw(st.integers(1, 4)) for _ in range(rank))
    nin = draw(st.integers(1, 3))
    shapes = []
    for i in range(nin):
        r = rank if i == 0 else draw(st.integers(0, rank))  # later inputs: lower rank, size-1 dims
        shp = [1 if (i and draw(st.integers(0, 3)) == 0) else d for d in base[rank - r:]]
        shapes.append(tuple(shp))
    dtypes = [draw(st.sampled_from(["float32", "float64"])) for _ in range(nin)]
    pool = [(("in", i), shapes[i]) for i in range(nin)]

    def pick(prefer_last=False):
        if prefer_last and draw(st.booleans()):
            return pool[-1]
        return pool[draw(st.integers(0, len(pool) - 1))]

    def elementwise_step():
        e, shp = pick(prefer_last=True)
        kind = draw(st.sampled_from(["un", "bin", "bin", "scalar", "attr", "where"]))
        if kind == "un":
            pool.append((("un", draw(st.sampled_from(sorted(UNARY))), e), shp))
        elif kind == "bin":
            partners = [(f, s) for f, s in pool if _broadcast(shp, s) is not None]
            f, s = partners[draw(st.integers(0, len(partners) - 1))]
            pool.append((("bin", draw(st.sampled_from(sorted(BINARY))), e, f), _broadcast(shp, s)))
        elif kind == "scalar":
            name = draw(st.sampled_from(["add", "sub", "mul", "max", "min"]))
            pool.append((("scalar", name, e, draw(st.sampled_from(SCALARS)), draw(st.booleans())), shp))
        elif kind == "attr":
            name = draw(st.sampled_from(["add", "sub", "mul", "max"]))
            pool.append((("attr", name, e, draw(st.sampled_from(sorted(ATTR_VALUES))), draw(st.booleans())), shp))
        else:
            picks = [pick() for _ in range(3)]
            out = _broadcast(shp, *[s for _, s in picks])
            if out is not None:
                pool.append((("where", e, picks[0][0], picks[1][0], picks[2][0]), out))

    def reduction_step():
        e, shp = pick(prefer_last=True)
        r = len(shp)
        axis = draw(st.sampled_from(
            [None] + list(range(-r, r)) + [c for n in range(2, r + 1) for c in itertools.combinations(range(r), n)]))
        keep = draw(st.booleans())
        red = ("red", draw(st.sampled_from(sorted(REDUCE))), e, axis, keep)
        rshp = _reduce_shape(shp, axis, keep)
        pool.append((red, rshp))
        if draw(st.booleans()):  # use the result elementwise with its operand: x - max(x), ...
            out = _broadcast(shp, rshp)
            if out is not None:
                name = draw(st.sampled_from(sorted(BINARY)))
                pool.append((("bin", name, e, red) if draw(st.booleans()) else ("bin", name, red, e), out))

    # 0-2 reductions (chained when the second reads the first), elementwise steps around them
    nred = draw(st.integers(0, 2))
    for j in range(nred + 1):
        for _ in range(draw(st.integers(0 if j else 1, 3))):
            elementwise_step()
        if j < nred:
            reduction_step()
    # outputs: the last expression built, plus up to two others (an input itself is allowed)
    outs = [pool[-1][0]]
    for _ in range(draw(st.integers(0, 2))):
        cand = pick()[0]
        if cand not in outs:
            outs.append(cand)
    attrs = {n: draw(st.sampled_from(v)) for n, v in ATTR_VALUES.items()}
    return shapes, dtypes, outs, attrs


def make_op(nin: int, outs: list):
    """An ``@fg.op`` with inputs x0..x{nin-1} and attributes alpha (float) and n (int)."""
    def body(*xs, alpha, n):
        res = tuple(evaluate(o, xs, {"alpha": alpha, "n": n}, "fg") for o in outs)
        return res if len(res) > 1 else res[0]

    P = inspect.Parameter
    params = [P(f"x{i}", P.POSITIONAL_OR_KEYWORD) for i in range(nin)]
    params += [P("alpha", P.KEYWORD_ONLY, default=0.75, annotation=float),
               P("n", P.KEYWORD_ONLY, default=2, annotation=int)]
    body.__signature__ = inspect.Signature(params)
    body.__annotations__ = {"alpha": float, "n": int}
    return fg.op(body, name="random_graph")


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
