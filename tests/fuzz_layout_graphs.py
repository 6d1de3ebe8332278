"""Random ops that mix layout ops with reductions and elementwise math, for the differential
tests of ``tests/test_layout_differential.py``.

``fuzz_graphs`` draws elementwise trees with reductions; ``views_chains`` draws view chains
alone. Neither draws the two together in one op with several outputs, where the plan's scheduler
groups a reduction stage with a stage whose pieces (pad, concat) cut the domain into boxes -- the
place of a silent wrong sum (``test_layout_schedules``'s
``test_reduction_beside_pieces_keeps_its_whole_domain``). Here an op is a short *program*: values
``v0..`` (the float inputs first, then int index inputs), each later value one step over earlier
ones, and 1-3 of them returned. Steps:

* elementwise: ``fuzz_graphs``' unary and binary functions, Python scalars, ``where(a < b, x, y)``;
* reductions: sum, mean, max, min over an int, a negative int, a tuple or every axis, with or
  without ``keepdims``; ``argmax`` (an output only, over exact values: no ties decided by rounding);
* layout: ``pad`` (constant, several widths), ``concat``, ``stack``, ``split`` (a part), basic
  indexing (slices with steps, negative too; ints; ``None``), ``reshape`` (also of permuted, hence
  non-contiguous, values), ``permute_dims``/``.T``/``swapaxes``/``moveaxis``, ``flip``, ``roll``,
  ``broadcast_to``, ``expand_dims``, ``squeeze``, ``tile``, ``repeat``, ``tril``/``triu`` and
  ``where`` on comparisons of ``arange`` iotas, ``take``/``take_along_axis`` with in-range
  indices (int64 inputs drawn with the program), ``cumulative_sum``.

Every value's shape comes from NumPy (the step applied to zeros): a step NumPy refuses is not
drawn. ``source(prog)`` is the program as the body of an ``@fg.op``: paste it to reproduce.
"""
from __future__ import annotations

import itertools
import math
import operator
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

import fusegen as fg

from fuzz_graphs import BINARY, REDUCE, UNARY, traced

MAX_RANK = 4
MAX_SIZE = 96
#: Elementwise steps whose result orders like its operands' exactly (argmax may read them).
EXACT_UNARY = {"neg", "abs", "relu"}
EXACT_BINARY = {"max", "min"}

# name: (fusegen, NumPy), called as fn(x, *args, **kwargs) (lists for concat and stack): the
# array API's names, which NumPy has too; reductions under "red_" + fuzz_graphs' names.
LAYOUT = {
    **{n: (getattr(fg, n), getattr(np, n)) for n in (
        "pad", "concat", "stack", "reshape", "permute_dims", "swapaxes", "moveaxis", "flip", "roll",
        "broadcast_to", "expand_dims", "squeeze", "tile", "repeat", "tril", "triu", "take",
        "take_along_axis", "cumulative_sum", "argmax")},
    **{f"red_{n}": fns for n, fns in REDUCE.items()},
}
COMPARE = {">=": operator.ge, ">": operator.gt, "<": operator.lt, "<=": operator.le}


@dataclass(frozen=True)
class Step:
    """``kind``: "un", "bin", "scalar", "where", "call" (a ``LAYOUT`` function), "index",
    "split", "T", "mask"; ``args``: value numbers; ``params``: the rest, hashable."""
    kind: str
    args: tuple[int, ...]
    params: tuple = ()


@dataclass
class Program:
    shapes: list[tuple[int, ...]]              # the float inputs'
    dtypes: list[str]
    indices: list[np.ndarray]                  # the int64 index inputs' values
    steps: list[Step] = field(default_factory=list)
    outs: list[int] = field(default_factory=list)

    @property
    def nin(self) -> int:
        return len(self.shapes) + len(self.indices)


def apply(step: Step, vals: list, lib: str):
    """One step over earlier values; ``lib`` is "fg" (traced tensors) or "np" (arrays)."""
    k = 0 if lib == "fg" else 1
    xs = [vals[a] for a in step.args]
    p = step.params
    if step.kind == "un":
        return UNARY[p[0]][k](xs[0])
    if step.kind == "bin":
        return BINARY[p[0]][k](xs[0], xs[1])
    if step.kind == "scalar":
        name, s, left = p
        return BINARY[name][k](s, xs[0]) if left else BINARY[name][k](xs[0], s)
    if step.kind == "where":
        return (fg.where if k == 0 else np.where)(xs[0] < xs[1], xs[2], xs[3])
    if step.kind == "call":
        name, args, kwargs = p
        fn = LAYOUT[name][k]
        if name in ("concat", "stack"):
            return fn(xs, *args, **dict(kwargs))
        return fn(*xs, *args, **dict(kwargs))
    if step.kind == "index":
        return xs[0][p[0]]
    if step.kind == "split":
        sections, axis, part = p
        return (fg.split if k == 0 else np.split)(xs[0], sections, axis=axis)[part]
    if step.kind == "T":
        return xs[0].T
    if step.kind == "mask":   # where(arange(rows)[:, None] + shift OP arange(cols)[None, :], x, c)
        op, shift, const = p
        x = xs[0]
        ar = fg.arange if k == 0 else np.arange
        rows, cols = ar(x.shape[-2])[:, None], ar(x.shape[-1])[None, :]
        cond = COMPARE[op](rows + shift if shift else rows, cols)
        return (fg.where if k == 0 else np.where)(cond, x, const)
    raise AssertionError(step)


def run(prog: Program, inputs: list, lib: str) -> list:
    """The program's outputs from its inputs (floats, then index arrays)."""
    vals = list(inputs)
    for step in prog.steps:
        vals.append(apply(step, vals, lib))
    return [vals[o] for o in prog.outs]


def make_op(prog: Program):
    """The program as an ``@fg.op`` of inputs v0..v{nin-1}."""
    def body(*xs):
        res = tuple(run(prog, list(xs), "fg"))
        return res if len(res) > 1 else res[0]
    return traced(prog.nin, body, "layout_graph", prefix="v")


def _expr(step: Step, n: int) -> str:
    a = [f"v{i}" for i in step.args]
    p = step.params
    if step.kind == "un":
        return {"sqrt_abs": f"fg.sqrt(fg.abs({a[0]}))"}.get(p[0], f"fg.{p[0]}({a[0]})")
    if step.kind == "bin":
        return _binary(p[0], a[0], a[1])
    if step.kind == "scalar":
        return _binary(p[0], repr(p[1]), a[0]) if p[2] else _binary(p[0], a[0], repr(p[1]))
    if step.kind == "where":
        return f"fg.where({a[0]} < {a[1]}, {a[2]}, {a[3]})"
    if step.kind == "call":
        name, args, kwargs = p
        first = f"[{', '.join(a)}]" if name in ("concat", "stack") else ", ".join(a)
        fn = name[4:] if name.startswith("red_") else name
        rest = [repr(x) for x in args] + [f"{kk}={v!r}" for kk, v in kwargs]
        return f"fg.{fn}({', '.join([first] + rest)})"
    if step.kind == "index":
        return f"{a[0]}[{_items(p[0])}]"
    if step.kind == "split":
        return f"fg.split({a[0]}, {p[0]!r}, axis={p[1]})[{p[2]}]"
    if step.kind == "T":
        return f"{a[0]}.T"
    op, shift, const = p
    row = f"fg.arange({a[0]}.shape[-2])[:, None]" + (f" + {shift}" if shift else "")
    return f"fg.where({row} {op} fg.arange({a[0]}.shape[-1])[None, :], {a[0]}, {const!r})"


def _binary(name: str, x: str, y: str) -> str:
    ops = {"add": "+", "sub": "-", "mul": "*"}
    if name in ops:
        return f"{x} {ops[name]} {y}"
    if name == "safe_div":
        return f"{x} / (1.0 + {y} * {y})"
    return f"fg.{'maximum' if name == 'max' else 'minimum'}({x}, {y})"


def _items(items) -> str:
    def one(it):
        if it is None:
            return "None"
        if isinstance(it, slice):
            s = lambda v: "" if v is None else str(v)   # noqa: E731
            return f"{s(it.start)}:{s(it.stop)}" + (f":{it.step}" if it.step not in (None, 1) else "")
        return str(it)
    return ", ".join(one(it) for it in items) + ("," if len(items) == 1 else "")


def source(prog: Program) -> str:
    """The program as Python: a reproducer to paste (inputs and index values in a comment)."""
    n = len(prog.shapes)
    names = [f"v{i}" for i in range(prog.nin)]
    lines = [f"# inputs: {list(zip(prog.shapes, prog.dtypes))}"]
    lines += [f"# v{n + j} = np.array({ix.tolist()})" for j, ix in enumerate(prog.indices)]
    lines += ["@fg.op", f"def op({', '.join(names)}):"]
    for j, step in enumerate(prog.steps):
        lines.append(f"    v{prog.nin + j} = {_expr(step, prog.nin + j)}")
    lines.append(f"    return {', '.join(f'v{o}' for o in prog.outs)}")
    return "\n".join(lines)


# --- drawing programs ------------------------------------------------------------------------
@dataclass
class _Val:
    shape: tuple[int, ...]
    exact: bool        # orders like the inputs exactly (argmax may read it)
    usable: bool = True  # a float value later steps may read (argmax results and indices: not)


_KINDS = ["pad", "red", "bin", "index", "repad", "repad", "red", "un", "bin", "scalar", "where", "red", "red", "pad", "concat",
          "stack", "split", "index", "reshape", "reshape", "permute", "permute", "flip", "roll", "broadcast",
          "expand", "squeeze", "tile", "repeat", "tri", "mask", "mask", "take", "take_along", "cumsum",
          "argmax", "argmax"]


@st.composite
def programs(draw, max_steps: int = 7):
    """A random ``Program``: 1-3 float inputs (dims 1-4, size-1 often), up to 2 index inputs,
    up to ``max_steps`` steps, 1-3 outputs (the last value and up to two others)."""
    rank = draw(st.integers(1, 3))
    base = tuple(draw(st.sampled_from([1, 2, 3, 4, 3])) for _ in range(rank))
    shapes = [base]
    for _ in range(draw(st.integers(0, 2))):
        how = draw(st.sampled_from(["same", "broadcast", "other"]))
        if how == "same":
            shapes.append(base)
        elif how == "broadcast":
            r = draw(st.integers(0, rank))
            shapes.append(tuple(1 if draw(st.integers(0, 2)) == 0 else d for d in base[rank - r:]))
        else:
            shapes.append(tuple(draw(st.integers(1, 4)) for _ in range(draw(st.integers(1, 3)))))
    dtypes = [draw(st.sampled_from(["float64", "float64", "float32"])) for _ in shapes]
    prog = Program(shapes, dtypes, [])
    vals = [_Val(s, True) for s in shapes]
    zeros = [np.zeros(s) for s in shapes]
    target = draw(st.integers(2, max_steps))
    for _ in range(40):
        if len(prog.steps) >= target:
            break
        got = _draw_step(draw, prog, vals)
        if got is not None:
            _add(prog, vals, zeros, *got)
    if not prog.steps:
        _add(prog, vals, zeros, [Step("un", (0,), ("neg",))], True, None)
    first = len(vals) - len(prog.steps)
    outs = [len(vals) - 1]
    for _ in range(draw(st.sampled_from([2, 1, 2, 0]))):   # several outputs most often: stages group
        o = draw(st.integers(first, len(vals) - 1))
        if o not in outs:
            outs.append(o)
    prog.outs = outs
    return prog


def _add(prog: Program, vals: list, zeros: list, steps: list, exact: bool, index) -> None:
    """Append ``steps`` (each may read the one before: value ``len(vals)``) where NumPy takes them
    and their results are small float values (or argmax's ints); ``index``: the values of a new
    index input the last step reads as value -1, numbered after the other inputs (the values
    above move up by one)."""
    steps = list(steps)
    trial_vals = list(zeros)
    pos = len(prog.shapes) + len(prog.indices)
    if index is not None:
        bump = lambda i: i + 1 if i >= pos else i   # noqa: E731
        steps = [Step(s.kind, tuple(pos if i == -1 else bump(i) for i in s.args), s.params) for s in steps]
        trial_vals.insert(pos, index)
    outs = []
    for step in steps:
        try:
            with np.errstate(all="ignore"):
                out = np.asarray(apply(step, trial_vals, "np"))
        except (ValueError, IndexError, TypeError):
            return
        argmax = step.kind == "call" and step.params[0] == "argmax"
        if out.ndim > MAX_RANK or out.size > MAX_SIZE or (out.dtype.kind != "f" and not argmax):
            return
        trial_vals.append(out)
        outs.append(_Val(out.shape, exact and not argmax, not argmax))
    if index is not None:
        prog.indices.append(index)
        prog.steps[:] = [Step(s.kind, tuple(bump(i) for i in s.args), s.params) for s in prog.steps]
        vals.insert(pos, _Val(index.shape, False, False))
    zeros[:] = trial_vals
    prog.steps.extend(steps)
    vals.extend(outs)


def _draw_step(draw, prog: Program, vals: list):
    """(step, exact, new index values or None), or None when the kind does not fit."""
    pool = [i for i, v in enumerate(vals) if v.usable]
    # prefer recent values: programs grow chains, and several outputs share subexpressions
    a = pool[-1] if draw(st.booleans()) else draw(st.sampled_from(pool))
    v = vals[a]
    shp, r = v.shape, len(v.shape)
    kind = draw(st.sampled_from(_KINDS))
    call = lambda name, *args, exact=v.exact, **kw: ([Step("call", (a,), (name, args, tuple(kw.items())))], exact, None)  # noqa: E731,E501
    axis = lambda: draw(st.integers(-r, r - 1))   # noqa: E731
    if kind == "un":
        name = draw(st.sampled_from(sorted(UNARY)))
        return [Step("un", (a,), (name,))], v.exact and name in EXACT_UNARY, None
    if kind == "bin":
        partners = [b for b in pool if _broadcast(shp, vals[b].shape) is not None]
        b = draw(st.sampled_from(partners))
        name = draw(st.sampled_from(sorted(BINARY)))
        args = (a, b) if draw(st.booleans()) else (b, a)
        return [Step("bin", args, (name,))], v.exact and vals[b].exact and name in EXACT_BINARY, None
    if kind == "scalar":
        name = draw(st.sampled_from(["add", "sub", "mul", "max", "min"]))
        s = draw(st.sampled_from([2, -1, 0.5, -1.5, 3.0]))
        return [Step("scalar", (a,), (name, s, draw(st.booleans())))], v.exact and name in EXACT_BINARY, None
    if kind == "where":
        picks = [a] + [draw(st.sampled_from(pool)) for _ in range(3)]
        if _broadcast(*[vals[i].shape for i in picks]) is None:
            return None
        return [Step("where", tuple(picks))], all(vals[i].exact for i in picks[2:]), None
    if kind == "red":
        name = draw(st.sampled_from(sorted(REDUCE)))
        ax = draw(st.sampled_from([None] + list(range(-r, r)) +
                                  [c for n in range(2, r + 1) for c in itertools.combinations(range(r), n)]))
        exact = v.exact and name in ("max", "min")
        return call(f"red_{name}", exact=exact, axis=ax, keepdims=draw(st.booleans()))
    if kind == "argmax":
        if not v.exact or not math.prod(shp):
            return None
        ax = None if r == 0 or draw(st.integers(0, 3)) == 0 else axis()
        return call("argmax", axis=ax, keepdims=draw(st.booleans()))
    if r == 0 and kind not in ("stack", "expand", "broadcast", "tile", "repeat"):
        return None
    if kind == "repad":   # a piece over the domain of another value: their stages may share a loop nest
        big = [d for d in range(r) if shp[d] >= 2]
        if not big:
            return None
        k = draw(st.sampled_from(big))
        lo = draw(st.integers(0, shp[k] - 1))
        hi = draw(st.integers(0 if lo else 1, shp[k] - 1 - lo))
        src = draw(st.sampled_from([b for b in pool if vals[b].shape == shp]))
        items = tuple([slice(None)] * k + [slice(lo, shp[k] - hi)])
        widths = tuple((lo, hi) if d == k else (0, 0) for d in range(r))
        steps = [Step("index", (src,), (items,)), Step("call", (len(vals),), ("pad", (widths,), ()))]
        return steps, vals[src].exact, None
    if kind == "pad":
        widths = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(r))
        if draw(st.integers(0, 3)) == 0:
            widths = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))   # NumPy's (before, after) form
        return call("pad", widths, constant_values=draw(st.sampled_from([0, 0.5, -2.0])))
    if kind in ("concat", "stack"):
        n = draw(st.integers(1, 3))
        ax = axis() if kind == "concat" and r else draw(st.integers(-r - 1, r))
        # partners of the same shape (concat: but along the axis); ``a`` itself fits
        fits = [b for b in pool if len(vals[b].shape) == r and all(
            d == e or (kind == "concat" and k == ax % r) for k, (d, e) in enumerate(zip(shp, vals[b].shape)))]
        args = (a, *[draw(st.sampled_from(fits)) for _ in range(n - 1)])
        return ([Step("call", args, (kind, (), (("axis", ax),)))],
                v.exact and all(vals[b].exact for b in args), None)
    if kind == "split":
        ax = axis()
        d = shp[ax]
        if not d:
            return None
        divs = [n for n in range(1, d + 1) if d % n == 0]
        if draw(st.booleans()) and d > 1:
            pts = sorted(set(draw(st.lists(st.integers(1, d - 1), min_size=1, max_size=2))))
            return [Step("split", (a,), (pts, ax, draw(st.integers(0, len(pts)))))], v.exact, None
        n = draw(st.sampled_from(divs))
        return [Step("split", (a,), (n, ax, draw(st.integers(0, n - 1))))], v.exact, None
    if kind == "index":
        return [Step("index", (a,), (_index_items(draw, shp),))], v.exact, None
    if kind == "reshape":
        src, steps = a, []
        if r >= 2 and draw(st.booleans()):   # a permuted value first: a non-contiguous merge
            perm = tuple(draw(st.permutations(range(r))))
            steps = [Step("call", (a,), ("permute_dims", (perm,), ()))]
            src = len(vals)
        size = math.prod(shp)
        shape = draw(st.sampled_from(_factorizations(size)))
        if draw(st.integers(0, 3)) == 0 and shape:
            shape = tuple(-1 if k == 0 else d for k, d in enumerate(shape))
        return steps + [Step("call", (src,), ("reshape", (shape,), ()))], v.exact, None
    if kind == "permute":
        how = draw(st.sampled_from(["permute", "T", "swap", "move"]))
        if how == "T" and r == 2:
            return [Step("T", (a,))], v.exact, None
        if how == "swap":
            return call("swapaxes", axis(), axis())
        if how == "move":
            return call("moveaxis", axis(), axis())
        return call("permute_dims", tuple(draw(st.permutations(range(r)))))
    if kind == "flip":
        ax = draw(st.sampled_from([None, axis(), tuple(sorted({axis() % r, axis() % r}))]))
        return call("flip", axis=ax)
    if kind == "roll":
        shift = draw(st.integers(-5, 5))
        ax = draw(st.sampled_from([None, axis()]))
        if draw(st.integers(0, 3)) == 0 and r >= 2:
            return call("roll", (shift, draw(st.integers(-3, 3))), axis=(0, r - 1))
        return call("roll", shift, axis=ax)
    if kind == "broadcast":
        new = tuple(draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 1))))
        shape = new + tuple(draw(st.sampled_from([2, 3])) if d == 1 else d for d in shp)
        return call("broadcast_to", shape)
    if kind == "expand":
        return call("expand_dims", axis=draw(st.integers(-r - 1, r)))
    if kind == "squeeze":
        ones = [k for k, d in enumerate(shp) if d == 1]
        if not ones:
            return None
        return call("squeeze", axis=draw(st.sampled_from(ones)) - (r if draw(st.booleans()) else 0))
    if kind == "tile":
        reps = tuple(draw(st.integers(1, 3)) for _ in range(draw(st.integers(1, max(r, 1) + 1))))
        return call("tile", reps)
    if kind == "repeat":
        ax = None if r == 0 or draw(st.integers(0, 3)) == 0 else axis()
        return call("repeat", draw(st.integers(1, 3)), axis=ax)
    if kind == "tri":
        if r < 2:
            return None
        return call(draw(st.sampled_from(["tril", "triu"])), k=draw(st.integers(-2, 2)))
    if kind == "mask":
        if r < 2:
            return None
        return ([Step("mask", (a,), (draw(st.sampled_from(sorted(COMPARE))), draw(st.sampled_from([0, 0, 1, -1])),
                                    draw(st.sampled_from([0.0, -1.5]))))], v.exact, None)
    if kind in ("take", "take_along"):
        if len(prog.indices) >= 2 or r == 0 or 0 in shp:
            return None
        ax = axis()
        d = shp[ax]
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        if kind == "take":
            ishape = tuple(draw(st.integers(1, 4)) for _ in range(draw(st.integers(0, 2))))
            name = "take"
        else:
            ishape = tuple(draw(st.integers(1, 4)) if k == ax % r else e for k, e in enumerate(shp))
            name = "take_along_axis"
        idx = rng.integers(-d if name == "take" else 0, d, size=ishape).astype(np.int64)
        return [Step("call", (a, -1), (name, (), (("axis", ax),)))], v.exact, idx
    if kind == "cumsum":
        if r > 1:
            return call("cumulative_sum", exact=False, axis=axis())
        return call("cumulative_sum", exact=False, include_initial=draw(st.booleans()))
    return None


def _index_items(draw, shp):
    items = []
    for d in shp:
        kind = draw(st.sampled_from(["all", "slice", "slice", "int", "new"] if d else ["all", "slice"]))
        if kind == "new":
            items.append(None)
        if kind == "all":
            items.append(slice(None))
        elif kind == "int":
            items.append(draw(st.integers(-d, d - 1)))
        else:
            step = draw(st.sampled_from([1, 1, 2, -1, -2, 3]))
            lo = draw(st.sampled_from([None, 0, 1, -1, -2]))
            hi = draw(st.sampled_from([None, d, 2, -1]))
            items.append(slice(lo, hi, step))
    if items and draw(st.booleans()):   # trailing full slices may go
        while items and items[-1] == slice(None):
            items.pop()
    return tuple(items)


def _factorizations(n: int) -> list[tuple[int, ...]]:
    out = [(n,)] if n else [(0,)]
    for a in range(2, n):
        if n % a == 0:
            out.append((a, n // a))
            for b in range(2, n // a):
                if (n // a) % b == 0:
                    out.append((a, b, n // a // b))
    out.append((1, n))
    out.append((n, 1))
    return out[:12]


def _broadcast(*shapes):
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        return None


# --- inputs and the reference ------------------------------------------------------------------
def reference(prog: Program, inputs: list) -> list:
    """NumPy's outputs: dtypes from the inputs as they are, values from float64-widened inputs."""
    with np.errstate(all="ignore"):
        typed = [np.asarray(o) for o in run(prog, inputs, "np")]
        wide = [x.astype(np.float64) if x.dtype.kind == "f" else x for x in inputs]
        vals = [np.asarray(o) for o in run(prog, wide, "np")]
    return [v.astype(t.dtype) for t, v in zip(typed, vals)]
