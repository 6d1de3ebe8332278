"""``Op.RANDOM`` (fusegen/graph/rng.py) as Python kernel text for Numba CPU and numba-cuda: the
functions of fusegen/rng_numba.py, bound in a generated module as ``_rng_<name>``.

``RandomText`` is the ``random`` hook of ``plan.exprs.ExprWriter``. A node is computed either
*per element* (its own Philox block: any access, any backend) or read from a *buffer* that the
loop nest filled four elements per Philox call before the loop (``buffered``: the Numba CPU
lowering offers one where the counter runs contiguously along the loop). Either way the value is
the reference's bit for bit: the fills and the per-element forms are the same formulas.
"""
from __future__ import annotations

from .. import dtypes as dt
from ..errors import FusegenError
from ..ir import VIEWS, Node, Op
from ..plan.exprs import PYTHON, ExprWriter

#: per (kind, dtype name or "int", as ``kind_key`` gives it): the per-element function (the C++
#: emitters' table, fusegen/emitters/rng.py, overrides only bernoulli's)
PER_ELEMENT = {("uniform", "float32"): "uniform_f32_at", ("uniform", "float64"): "uniform_f64_at",
       ("normal", "float32"): "normal_f32_at", ("normal", "float64"): "normal_f64_at",
       ("bernoulli", "bool"): "word_at", ("randint", "int"): "randint_at"}
#: per the same key: the fill (the buffer's values)
_FILL = {("uniform", "float32"): ("fill_uniform_f32", "float32"), ("uniform", "float64"): ("fill_uniform_f64", "float64"),
         ("normal", "float32"): ("fill_normal_f32", "float32"), ("normal", "float64"): ("fill_normal_f64", "float64"),
         ("bernoulli", "bool"): ("fill_words", "uint32"), ("randint", "int"): ("fill_randint", "uint64")}

PREFIX = "_rng_"


def kind_key(node: Node) -> tuple[str, str]:
    """A random node's key in ``PER_ELEMENT``: its kind and dtype name ("int" for every int)."""
    d = node.arg.dtype
    return node.arg.kind, ("int" if d.is_int else d.name)


def counter_leaf(node: Node, ctx: tuple) -> tuple[Node, tuple] | None:
    """The IOTA under a random node's counter and its view context (as ``ExprWriter`` reads it),
    or None when the counter is not a view of an iota."""
    n = node.srcs[0]
    while n.op in VIEWS:
        ctx = ctx + ((n, 0),)
        n = n.srcs[0]
    return (n, ctx) if n.op is Op.IOTA else None


def uint64_text(ew, src: Node, ctx: tuple) -> str:
    """A seed, offset or randint bound as uint64 (ints modulo 2^64, as the rules allow)."""
    if src.op is Op.CONST:
        return f"np.uint64({int(src.arg[1]) % (1 << 64)})"
    if ew.spec.of(src).dtype is dt.uint64:
        return f"np.uint64({ew.value(src, None, ctx)})"
    # through int64: a negative attribute wraps modulo 2^64 (a no-op in compiled code; under the
    # CUDA simulator a Python int would not convert)
    return f"np.uint64(np.int64({ew.value(src, None, ctx)}))"


def scalars(ew, node: Node, ctx: tuple) -> list[str]:
    """The fill's and per-element form's scalar arguments after the counter: seed, offset and,
    for randint, low and high."""
    extra = node.srcs[3:5] if node.arg.kind == "randint" else ()
    return [uint64_text(ew, s, ctx) for s in (node.srcs[1], node.srcs[2], *extra)]


def fill_of(node: Node) -> tuple[str, str]:
    """(function, buffer dtype name) of the node's fill."""
    name, buf = _FILL[kind_key(node)]
    return PREFIX + name, buf


class RandomText:
    """Renders random nodes; ``used`` collects the rng_numba names the module must bind.
    ``buffered(ew, node, ctx)``: the text of the node's buffered raw value at the current loop
    index, or None to compute it per element."""

    def __init__(self, buffered=None):
        self.buffered = buffered
        self.used: set[str] = set()

    def __call__(self, ew, node: Node, ctx: tuple) -> str:
        kind, d = node.arg.kind, node.arg.dtype
        if kind_key(node) not in PER_ELEMENT:
            raise FusegenError(f"fg.random.{kind}: no kernel for dtype {d}")
        raw = self.buffered(ew, node, ctx) if self.buffered else None
        if raw is None:
            at = PER_ELEMENT[kind_key(node)]
            self.used.add(at)
            seed, offset, *bounds = scalars(ew, node, ctx)
            raw = f"{PREFIX}{at}({', '.join([seed, offset, ew.value(node.srcs[0], dt.int64, ctx), *bounds])})"
        else:
            self.used.add(fill_of(node)[0][len(PREFIX):])
        if kind == "bernoulli":
            self.used.add("bernoulli_p")
            p = node.srcs[3]
            pv = ew.value(p, None, ctx)
            # a float attribute or constant (or arithmetic on them) is a C++ float in the AOT ABI:
            # rounded to float32 first; a tensor p is used as it is
            weak = isinstance(ew.spec.of(p).dtype, str)
            return f"{PREFIX}bernoulli_p({raw}, np.float64({f'np.float32({pv})' if weak else pv}))"
        if kind == "randint":   # low + offset modulo 2^64 lies in [low, high): exact in the dtype
            return f"np.{d.name}(np.int64({raw}))" if d.kind == "i" else f"np.{d.name}({raw})"
        return raw

class LoopFills:
    """Numba CPU: which random nodes a group function reads from buffers, and the fills that
    compute them, four elements per Philox call, before each loop along which the node's
    counter is contiguous. ``counter_operand(iota, ctx, mode)``: the iota's (operand name, key)
    when it has unit stride along the loop of ``mode`` ("row": the reduced dim, "col": the
    inner kept dim), else None. Buffers are allocated once per task (``allocations``)."""

    def __init__(self, spec, variant, counter_operand):
        self.spec, self.variant, self.counter_operand = spec, variant, counter_operand
        self.text = RandomText(buffered=self.buffered)
        self.buffers: dict[str, str] = {}      # name -> dtype
        self.filled: dict[tuple, str] = {}     # (node, context, operand) -> its buffer, group-wide
        self.loop = None                       # (mode, index variable, count, pre-loop writer, fills, names)

    def begin(self, leaf, prefix: str, mode: str, var: str, count: str) -> None:
        """A loop starts: ``leaf`` loads the scalars the fills read (seeds, offsets) before it."""
        pre = ExprWriter(self.spec, PYTHON, leaf, prefix=prefix, variant=self.variant)
        self.loop = (mode, var, count, pre, [], {})

    def buffered(self, ew, node: Node, ctx: tuple):
        leaf = counter_leaf(node, ctx)
        if leaf is None or self.loop is None:
            return None
        mode, var, count, pre, fills, names = self.loop
        operand = self.counter_operand(*leaf, mode)
        if operand is None:
            return None
        key = (id(node), ctx)
        if key not in names:
            fn, dtype = fill_of(node)
            seed, offset, *extra = scalars(pre, node, ctx)
            group_key = (id(node), ctx, operand[1])
            earlier = self.filled.get(group_key)
            name = names[key] = earlier or f"rb{len(self.buffers)}"
            self.buffers[name] = dtype
            self.filled[group_key] = name
            call = f"{fn}({', '.join([name, count, seed, offset, f'q_{operand[0]}', *extra])})"
            # An earlier stage of this task filled the buffer for the same elements when its loop
            # ran once (one outer reduced index; in col mode one row too): then it is still valid.
            same = "ROT != 1" if mode == "row" else "ROT != 1 or r_hi - r_lo != 1"
            fills.append(f"if {same}:\n    {call}" if earlier else call)
        return f"{names[key]}[{var}]"

    def end(self, pad: str) -> list[str]:
        """The lines before the loop: the scalars the fills read, then the fills."""
        _, _, _, pre, fills, _ = self.loop
        self.loop = None
        head = [f"{pad}# random numbers of this loop, four per Philox call (fusegen/rng_numba.py)"] if fills else []
        return head + [f"{pad}{name} = {expr}" for name, expr in pre.lines] + \
            [f"{pad}{line}" for f in fills for line in f.split("\n")]

    def allocations(self, pad: str) -> list[str]:
        """One buffer per filled node, per task: a tile (col mode) or a chunk of a row (row mode)."""
        return [f"{pad}{b} = np.empty(max(TILE, chunk, 1), dtype=np.{d})" for b, d in self.buffers.items()]


def fills():
    """The module of fills (rng_numba.fills_source), written to the cache and imported once;
    its functions compiled with Numba's disk cache."""
    from numba import njit

    from .. import rng_numba
    from .pysource import import_source

    def setup(mod):
        for kind in rng_numba.FILL_KINDS:
            setattr(mod, f"fill_{kind}", njit(**rng_numba.FILL_JIT)(getattr(mod, f"fill_{kind}")))
    return import_source(rng_numba.fills_source(), "numba", "fusegen_rng", setup)


def cpu_bindings(names) -> dict:
    """``{_rng_<name>: function}`` for a generated Numba CPU module (per-element functions and
    fills). Call it before importing that module: the fills' own import takes the import lock."""
    if not names:   # (a kernel without random numbers never imports the RNG's Numba functions)
        return {}
    from .. import rng_numba
    return {PREFIX + n: getattr(fills(), n) if n.startswith("fill_") else getattr(rng_numba, n) for n in names}


def bind_cuda(mod, names) -> None:
    """Bind the numba-cuda device twins of ``names`` in a generated module."""
    from ..rng_numba import cuda_functions
    fns = cuda_functions()
    for n in names:
        setattr(mod, PREFIX + n, getattr(fns, n))


def digest() -> str:
    from ..rng_numba import source_digest
    return source_digest()
