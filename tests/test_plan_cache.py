"""The emitted layout path's per-shape plans (``fg::PlanCache``, templates/_fg_plans.inc.j2): a
call reuses the plan an earlier call with the same input shapes, attribute values and shared
memory built, and a call with another key builds (or finds) its own, so every result is NumPy's
whatever order the keys come in. Through ``backend="aot"`` (one kernel instance per signature);
through one MindSpore kernel instance that sees many shapes (Init at unknown dims, as MindSpore
calls it under dynamic shapes: more shapes than the cache holds); from several threads; and
through the XLA FFI handlers, whose plans one library keeps for every call. A layout op (a
reshape and a permutation whose shapes an attribute decides), a multi-stage op (row groups), a
gather whose slice bound is an attribute, and an output written over an input (shared memory)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import fusegen as fg
from fusegen import examples
from test_aot_backend import Raw

_rng = np.random.default_rng(19)


@fg.op
def pick(x, i, *, start: int = 0):
    return fg.take(x[:, start:], i, axis=0) * 2 + 1


def _heads_split_ref(x, heads, scale):
    b, s, e = x.shape
    return (x.reshape(b, s, heads, e // heads).transpose(0, 2, 1, 3) * np.float32(scale)).astype(np.float32)


def _group_norm_ref(x, gamma, beta, groups, eps):
    n, c = x.shape[:2]
    g = x.reshape(n, groups, -1).astype(np.float64)
    y = (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + eps)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return y.reshape(x.shape) * gamma.reshape(shape) + beta.reshape(shape)


def _pick_ref(x, i, start):
    return np.take(x[:, start:], i, axis=0) * 2 + 1


def _f32(*shape):
    return _rng.standard_normal(shape).astype(np.float32)


# (op, dtypes, [(inputs, attrs, NumPy result)], in key order A, B, A, A with another attribute, B)
def _heads_split_cases():
    a, b = _f32(2, 3, 16), _f32(1, 5, 24)
    keys = [(a, 4, 0.5), (b, 4, 0.5), (a, 4, 0.5), (a, 2, 0.5), (b, 4, 0.25), (a, 4, 0.5)]
    return [((x,), dict(heads=h, scale=s), (_heads_split_ref(x, h, s),)) for x, h, s in keys]


def _group_norm_cases():
    a, b = (_f32(2, 8, 3, 2), _f32(8), _f32(8)), (_f32(1, 4, 5, 1), _f32(4), _f32(4))
    keys = [(a, 4), (b, 2), (a, 4), (a, 2), (b, 4), (a, 4)]
    return [(arrays, dict(groups=g, eps=1e-5), (_group_norm_ref(*arrays, g, 1e-5),)) for arrays, g in keys]


def _pick_cases():
    a = (_f32(5, 6), np.array([4, 0, 2], np.int32))
    b = (_f32(3, 9), np.array([[1, 2], [0, 0]], np.int32))
    keys = [(a, 1), (b, 1), (a, 1), (a, 3), (b, 0), (a, 1)]
    return [(arrays, dict(start=s), (_pick_ref(*arrays, s),)) for arrays, s in keys]


CASES = {"heads_split": (examples.heads_split, "float32", _heads_split_cases),
         "group_norm": (examples.group_norm, "float32", _group_norm_cases),
         "pick": (pick, "float32,int32", _pick_cases)}


#: the default run takes the layout op and the gather; the multi-stage op's build (g++, about 15
#: CPU-seconds) is in the extended checks, with every case
NAMES = [pytest.param(n, marks=pytest.mark.extended) if n == "group_norm" else n for n in CASES]


def _check(got, want):
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name", NAMES)
def test_aot_backend_alternating_keys(name):
    op, dtypes, cases = CASES[name]
    k = fg.compile(op, backend="aot", dtypes=dtypes)
    for arrays, attrs, want in cases() + cases():   # every key again, each plan found this time
        _check(k(*arrays, **attrs), want)
        out = tuple(np.empty(w.shape, np.float32) for w in want)
        k(*arrays, out=out if len(out) > 1 else out[0], **attrs)
        _check(out, want)


@pytest.mark.parametrize("name", NAMES)
def test_one_kernel_instance_many_shapes(name):
    """MindSpore calls Init once, at unknown dims, and then the main function at every shape:
    one kernel instance's cache sees every key, more of them than it holds (kPlanSlots = 8)."""
    op, dtypes, cases = CASES[name]
    k = fg.compile(op, backend="aot", dtypes=dtypes)
    first = cases()[0]
    raw = Raw(k.prepared(*first[0], **first[1]).kernel)
    names = dtypes.split(",") if "," in dtypes else [dtypes] * len(first[0])
    names = names + ["float32"]
    by_attrs: dict = {}
    runs = []
    for scale in range(6):   # each case's inputs scaled: 6 x the cases' shapes, distinct data
        runs += [([a * np.float32(1 + scale) if a.dtype.kind == "f" else a for a in arrays], attrs)
                 for arrays, attrs, _ in cases()]
    grow = [([np.concatenate([arrays[0]] * 2), *arrays[1:]], attrs) for arrays, attrs, _ in cases()]
    for arrays, attrs in runs[:4] + grow + runs + grow:
        key = tuple(sorted(attrs.items()))
        if key not in by_attrs:   # one instance per attribute set (Init reads them)
            by_attrs[key] = raw.init([(-1,) * a.ndim for a in arrays], names[:len(arrays)],
                                     {n: v for n, v in op.bind_attrs(attrs).items()})
        want = _reference(name, arrays, attrs)
        out = np.full(want.shape, np.nan, np.float32)
        raw.main(by_attrs[key], [*arrays, out], [a.shape for a in arrays] + [out.shape], names[:len(arrays)] + ["float32"])
        np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)


def _reference(name, arrays, attrs):
    if name == "heads_split":
        return _heads_split_ref(arrays[0], attrs["heads"], attrs["scale"])
    if name == "group_norm":
        return _group_norm_ref(*arrays, attrs["groups"], attrs["eps"])
    return _pick_ref(*arrays, attrs["start"])


@fg.op
def minus_flipped_max(x):
    return x - fg.max(x[::-1], axis=-1, keepdims=True)


def test_output_over_an_input_gets_its_own_plan():
    """Which operands share memory is part of the key: with a fresh output the max (stage 0)
    and the subtraction (stage 1) run as one row group, each task a chunk of rows; written over
    x, they must not (fg::joins: the max reads x's rows in reverse, so a later task would read
    rows an earlier one overwrote). The plan for a fresh output must not serve an output over x."""
    k = fg.compile(minus_flipped_max, backend="aot", dtypes="float32")
    for _ in range(2):
        x = _f32(256, 64)   # 4 tasks of 64 rows (fg::rows_per_task)
        want = x - x[::-1].max(axis=-1, keepdims=True)
        _check(k(x), (want,))
        k(x, out=x)
        _check(x, (want,))


def test_calls_from_several_threads():
    """Calls bigger than the small-call path (they release the GIL and run at once), of two
    shapes on one kernel: each thread's results are NumPy's."""
    k = fg.compile(examples.heads_split, backend="aot", dtypes="float32")
    shapes = [(2, 64, 256), (1, 96, 192)]
    inputs = [_f32(*s) for s in shapes]
    wants = [_heads_split_ref(x, 8, 0.5) for x in inputs]

    def work(t: int) -> None:
        for j in range(40):
            w = (t + j) % 2
            np.testing.assert_array_equal(k(inputs[w], heads=8, scale=0.5), wants[w])
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(work, range(4)))   # (a thread's failure is raised here)


@pytest.mark.parametrize("name", list(CASES))
def test_xla_handlers_alternating_keys(name):
    pytest.importorskip("jax", reason='needs jax: pip install -e ".[jax]"')
    import fusegen.jax as fgj
    op, dtypes, cases = CASES[name]
    f = fgj.function(op, dtypes=dtypes, partition=False)
    for arrays, attrs, want in cases() + cases():
        _check(f(*arrays, **attrs), want)
