"""fg.einsum against np.einsum: explicit and implicit outputs, ellipses, diagonals and traces,
broadcasting, dtypes, gradients, the emitted C++, and the errors NumPy raises."""
from __future__ import annotations

import numpy as np
import pytest

import fusegen as fg
from fusegen.errors import ShapeError, TraceError

from _optional import needs_gxx

_rng = np.random.default_rng(7)

#: (subscripts, operand shapes)
CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("ij,jk", [(3, 4), (4, 5)]), ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("ij->ji", [(3, 4)]), ("ji", [(3, 4)]), ("ij->", [(3, 4)]), ("ij->j", [(3, 4)]), ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]), ("iij->ij", [(3, 3, 2)]), ("i,i", [(5,), (5,)]), ("i,j->ij", [(3,), (4,)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]), ("...ij,...jk", [(2, 3, 4), (4, 5)]),
    ("ij...,jk...->ik...", [(3, 4, 2), (4, 5, 2)]), ("i,i,i->", [(4,), (4,), (4,)]), ("ijk->kji", [(2, 3, 4)]),
    ("b i j , b j -> b i", [(2, 3, 4), (2, 4)]), (",ij->ij", [(), (2, 3)]), ("ij,ij->ij", [(2, 3), (1, 3)]),
    ("bsd,hd->bsh", [(2, 5, 4), (3, 4)]), ("...", [(2, 3)]),
]


def _op(subscripts: str, n: int, **kw):
    names = ", ".join(f"a{i}" for i in range(n))
    ns = {"fg": fg}
    extra = "".join(f", {k}={v!r}" for k, v in kw.items())
    exec(f"def einsum_case({names}):\n    return fg.einsum({subscripts!r}, {names}{extra})\n", ns)
    return fg.op(ns["einsum_case"])


#: The default run's share (the whole table: ``-m extended``).
QUICK = {"bhqd,bhkd->bhqk", "ji", "ii", "iij->ij", "...ij,...jk", "ij...,jk...->ik...", "ij,ij->ij", ",ij->ij"}


def _batched(cases):
    """Every case in one op (one compilation): inputs a0, a1, ... case by case."""
    names, calls, j = [], [], 0
    for s, shapes in cases:
        args = [f"a{j + i}" for i in range(len(shapes))]
        names += args
        j += len(shapes)
        calls.append(f"fg.einsum({s!r}, {', '.join(args)})")
    ns = {"fg": fg}
    exec(f"def einsum_table({', '.join(names)}):\n    return ({', '.join(calls)},)\n", ns)
    return fg.op(ns["einsum_table"])


def _check(backend: str, quick: bool) -> None:
    cases = [c for c in CASES if c[0] in QUICK or not quick]
    inputs = [[_rng.standard_normal(sh).astype(np.float32) for sh in shapes] for _, shapes in cases]
    got = fg.compile(_batched(cases), backend=backend)(*[x for xs in inputs for x in xs])
    for (s, _), xs, g in zip(cases, inputs, got):
        want = np.einsum(s, *[x.astype(np.float64) for x in xs])
        assert np.shape(g) == want.shape, s
        np.testing.assert_allclose(g, want, rtol=2e-5, atol=2e-5, err_msg=s)


@pytest.mark.parametrize("quick", [True, pytest.param(False, marks=pytest.mark.extended)], ids=["quick", "all"])
def test_einsum_cases_against_numpy(quick):
    _check("numba", quick)


@needs_gxx
@pytest.mark.extended   # (a g++ build of its own: the default run keeps its 5 minutes)
def test_einsum_cases_against_numpy_emitted():
    _check("aot", False)


def test_einsum_dtypes_as_numpy():
    """int8 stays int8 (wrapping as NumPy's does), bool contracts as any, dtype= casts first,
    and a diagonal whose off-diagonal elements are inf or NaN is still exact."""
    @fg.op
    def typed(a, b, f):
        return (fg.einsum("ij,jk->ik", a, b), fg.einsum("ii", a > 0), fg.einsum("ij,jk->ik", a, b, dtype="float64"),
                fg.einsum("ii->i", f), fg.einsum("ij,jk->ik", a > 0, b > 0))
    a = _rng.integers(-100, 100, (3, 3)).astype(np.int8)
    b = _rng.integers(-100, 100, (3, 3)).astype(np.int8)
    f = np.array([[1.0, np.inf, np.nan], [np.nan, 2.0, -np.inf], [np.inf, 0.0, 3.0]])
    got = fg.compile(typed)(a, b, f)
    with np.errstate(over="ignore"):
        want = (np.einsum("ij,jk->ik", a, b), np.einsum("ii", a > 0), np.einsum("ij,jk->ik", a, b, dtype="float64"),
                np.einsum("ii->i", f), np.einsum("ij,jk->ik", a > 0, b > 0))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_einsum_gradient():
    @fg.op
    def score(q, k):
        return fg.sum(fg.einsum("ij,kj->ik", q, k) ** 2)
    q, k = _rng.standard_normal((3, 4)), _rng.standard_normal((5, 4))
    gq, gk = fg.compile(fg.grad(score))(q, k, np.ones(()))
    m = q @ k.T
    np.testing.assert_allclose(gq, 2 * m @ k, rtol=1e-12)
    np.testing.assert_allclose(gk, 2 * m.T @ q, rtol=1e-12)


@pytest.mark.parametrize("subscripts, shapes, error, match", [
    ("ij,jk->il", [(2, 3), (3, 3)], TraceError, r"output subscript 'l' names no axis of any operand"),
    ("ij->i", [(2, 3), (3, 3)], TraceError, r"subscripts 'ij->i' name 1 operand, got 2"),
    ("i.j", [(2, 3)], TraceError, r"a term holds letters and at most one '...', got 'i.j'"),
    ("...i->i", [(2, 3)], TraceError, r"drop the '...' axes the operands have"),
    ("ijk", [(2, 3)], TraceError, r"operand 0 has 2 dims but subscripts 'ijk' name 3"),
    ("ij->ii", [(2, 3)], TraceError, r"output subscripts 'ii' repeat a letter"),
    ("ij,jk", [(2, 3), (2, 3)], ShapeError, r"cannot broadcast"),
    ("ii->i", [(2, 3)], ShapeError, r"the two axes labelled 'i' differ in size"),
])
def test_einsum_errors_as_numpy(subscripts, shapes, error, match):
    with pytest.raises(error, match=r"op einsum_case: .*" + match):
        fg.compile(_op(subscripts, len(shapes)))(*[np.ones(s) for s in shapes])
    with pytest.raises(Exception):   # NumPy refuses each as well
        np.einsum(subscripts, *[np.ones(s) for s in shapes])


def test_einsum_keywords():
    with pytest.raises(TraceError, match=r"unsupported keyword 'out'"):
        _op("ij", 1, out=None)
    x = _rng.standard_normal((2, 3))
    np.testing.assert_allclose(fg.compile(_op("ij->j", 1, optimize=True))(x), x.sum(0))
