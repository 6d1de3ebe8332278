"""Random fused graphs and input draws, shared by the property, differential and sanitizer tests.

Imported by ``tests/test_property.py``, ``tests/test_differential.py`` and
``tests/test_reliability.py`` (the CPU pytest process) and by
``tests/cuda/test_differential_cuda.py`` (the simulator's own process: it puts ``tests/`` on
``sys.path``). ``from conftest import ...`` finds either ``tests/conftest.py`` or
``tests/cuda/conftest.py``; both offer the names used here.

* ``graphs()``: a hypothesis strategy of random expression trees over 1-3 inputs of
  broadcast-compatible shapes: elementwise unary/binary ops, ``fg.where``, Python scalar constants
  and scalar attributes, at most two reductions (chained or not, keep_dims or not, over an int, a
  negative int, a tuple or all axes), 1-3 outputs. ``make_op`` traces one into an ``@fg.op``;
  ``evaluate`` runs it with fusegen or NumPy.
* ``draws()``: new inputs for a graph's shape pattern (size-0 and size-1 dims, other dtypes,
  non-contiguous views, other attribute values); ``reference`` gives NumPy's answer and
  ``check`` compares a backend's within ``conftest.TOL`` (see ``tolerance``).
"""
from __future__ import annotations

import inspect
import itertools

import numpy as np
from hypothesis import strategies as st

import fusegen as fg

from conftest import PROPERTY_STATS, TOL

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


def subtrees(e):
    """Every node of tree ``e``, ``e`` first (a shared subtree once per occurrence)."""
    yield e
    for s in e[1:]:
        if isinstance(s, tuple) and s and s[0] in ("in", "un", "bin", "scalar", "attr", "where", "red"):
            yield from subtrees(s)


def count_reductions(e) -> int:
    """Distinct reduction nodes in tree ``e`` (a shared subtree counts once, as in the traced DAG)."""
    return len({n for n in subtrees(e) if n[0] == "red"})


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
    return traced(nin, body, "random_graph", attrs={"alpha": (float, 0.75), "n": (int, 2)})


def traced(nin: int, body, name: str, attrs: dict | None = None, prefix: str = "x"):
    """``fg.op(body)`` with ``nin`` positional inputs {prefix}0.. and keyword-only scalar
    attributes ``attrs`` (name: (type, default)): ``body(*inputs, **attrs)`` builds the graph."""
    P = inspect.Parameter
    attrs = attrs or {}
    params = [P(f"{prefix}{i}", P.POSITIONAL_OR_KEYWORD) for i in range(nin)]
    params += [P(a, P.KEYWORD_ONLY, default=d, annotation=t) for a, (t, d) in attrs.items()]
    body.__signature__ = inspect.Signature(params)
    body.__annotations__ = {a: t for a, (t, _) in attrs.items()}
    return fg.op(body, name=name)


# --- input draws for a graph (the differential tests) ------------------------------------------
#: The dtype every input of a draw may take instead of the graph's own float32/float64 mix.
ALT_DTYPES = ["float16", "float32", "float64", "int32"]


def count(what: str, n: int = 1) -> None:
    """Count a differential example (conftest's terminal summary and the modules' reports)."""
    key = f"differential: {what}"
    PROPERTY_STATS[key] = PROPERTY_STATS.get(key, 0) + n


def report() -> str:
    """The differential counts so far, one per line (printed at the end of a module: ``-s``)."""
    return "\n".join(f"{k}: {v}" for k, v in sorted(PROPERTY_STATS.items()) if k.startswith("differential"))


def pattern(shapes):
    """Per input, per dim (aligned from the right with input 0, which has full rank): "b" when the
    dim follows the base dim, "1" when it is a broadcast 1."""
    base = shapes[0]
    r = len(base)
    return [tuple("b" if d == base[r - len(s) + k] else "1" for k, d in enumerate(s)) for s in shapes]


DIMS = (3, 1, 4, 0, 2, 5, 1, 0)
VIEWS = ("c", "c", "strided", "transposed")


@st.composite
def draws(draw, rank: int, pat, combos, dims=DIMS, views=VIEWS):
    """One input draw for a graph of input 0's ``rank`` and shape pattern ``pat`` (``pattern``):
    new base dims (from ``dims``: size 0 and 1 often), a dtype combination from ``combos``, a view
    per input (from ``views``), attribute values, a seed."""
    base = [draw(st.sampled_from(dims)) for _ in range(rank)]
    shapes = [tuple(base[rank - len(p) + k] if c == "b" else 1 for k, c in enumerate(p)) for p in pat]
    combo = draw(st.sampled_from(combos))
    kinds = [draw(st.sampled_from(views)) for _ in shapes]
    attrs = {n: draw(st.sampled_from(v)) for n, v in ATTR_VALUES.items()}
    return shapes, combo, kinds, attrs, draw(st.integers(0, 2**32 - 1))


def make_input(rng, shape, dtype, view):
    """Values in [-2, 2) (ints in -3..3) of ``shape``; "strided" and "transposed" give views."""
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


def count_draw(arrays) -> None:
    count("input draws")
    if any(0 in a.shape for a in arrays):
        count("input draws with a size-0 dim")
    if any(not a.flags.c_contiguous for a in arrays):
        count("input draws with a non-contiguous view")
    if any(a.ndim == 0 for a in arrays):
        count("input draws with a rank-0 input")


def reference(outs, arrays, attrs):
    """NumPy's outputs: dtypes from the arrays as they are, values from float64-widened inputs
    (the correctly rounded answer). Raises what NumPy raises."""
    with np.errstate(all="ignore"):
        typed = [np.asarray(evaluate(o, arrays, attrs, "np")) for o in outs]
        wide = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in arrays]
        vals = [np.asarray(evaluate(o, wide, attrs, "np")) for o in outs]
    return [v.astype(t.dtype) for t, v in zip(typed, vals)]


def tolerance(want_dtype, in_dtypes):
    """``conftest.TOL`` of the least precise float on the path (the result's dtype or an
    input's: a float64 result can carry a float32 intermediate); None: exact."""
    floats = [d for d in [np.dtype(want_dtype), *map(np.dtype, in_dtypes)] if d.kind == "f"]
    return TOL[min(floats, key=lambda d: d.itemsize)] if floats else None


def check(name, got, want, outs, in_dtypes, draw_note, describe=None):
    """Backend ``name``'s outputs equal NumPy's: count, dtypes, shapes, values within ``tolerance``;
    ``describe(outs[k])`` names output k in a failure (default ``show``)."""
    got = got if isinstance(got, (tuple, list)) else (got,)
    assert len(got) == len(want), f"{name}: {len(got)} outputs, NumPy {len(want)}"
    for k, (a, b) in enumerate(zip(got, want)):
        a = np.asarray(a)
        msg = f"{name} output {k}: {(describe or show)(outs[k])}; {draw_note}"
        assert a.dtype == b.dtype, f"{msg}: dtype {a.dtype}, NumPy {b.dtype}"
        assert a.shape == b.shape, f"{msg}: shape {a.shape}, NumPy {b.shape}"
        tol = tolerance(b.dtype, in_dtypes)
        if tol is None:
            np.testing.assert_array_equal(a, b, err_msg=msg)
        else:
            np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), equal_nan=True,
                                       err_msg=msg, **tol)
