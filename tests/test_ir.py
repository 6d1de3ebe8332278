"""Layer (a): the IR without a compiler. Tracing, the text form, dtype promotion against NumPy's
own result dtypes (NEP 50 weak scalars included), shape inference with unknown dims/rank in the
AOT ABI's conventions, and every tracing/inference error (naming the op, the node and the line).

Nothing here compiles a kernel, except the few error tests that go through ``fg.compile(...)(...)``
and fail before any code is generated.
"""
from __future__ import annotations

import dataclasses
import itertools
import subprocess
import sys

import numpy as np
import pytest

import fusegen as fg
import fusegen.examples as ex
from fusegen import dtypes as fdt
from fusegen.dtypes import AttrType
from fusegen.errors import (ArgumentError, AttrError, DTypeError, FusegenError, ShapeError,
                            TraceError)
from fusegen.ir import UNKNOWN_DIM, UNKNOWN_RANK, Node, Op

from conftest import ALL_DTYPES, loc_of

HERE = __file__


def spec_of(op, dtypes, shapes, **attrs):
    """``fg.infer`` with attributes bound as a kernel call binds them."""
    return fg.infer(op, dtypes, shapes, op.bind_attrs(attrs))


def np_dtype_of(fn, *operands):
    """The dtype NumPy gives ``fn`` applied to ``operands`` (dtype names, or Python scalars)."""
    args = [np.ones(2, np.dtype(o)) if isinstance(o, str) else o for o in operands]
    with np.errstate(all="ignore"):
        return np.asarray(fn(*args)).dtype


# =============================================================================================
# Tracing
# =============================================================================================
@fg.op
def text_op(x, y, *, axis: int = 1, scale: float = 2.0):
    s = x + y  # MARK-text-add
    m = fg.sum(s * scale, axis=axis, keep_dims=True)  # MARK-text-sum
    return s - m, fg.max(x, axis=(0, -1)), fg.mean(y), (x + y).astype("float16")  # MARK-text-ret


def test_signature_inputs_and_attribute_specs():
    @fg.op
    def f(a, b, c, *, n: int, k: float = 2, flag: bool = False, axes: list[int] = (0, 1),
          mode: str = "x", ws: list[float] = (1.5,), m: list[list[int]] = ((1, 2),), z=3):
        return a + b + c

    assert f.inputs == ["a", "b", "c"]
    assert list(f.attrs) == ["n", "k", "flag", "axes", "mode", "ws", "m", "z"]
    spec = f.attrs
    assert spec["n"].type is AttrType.INT and spec["n"].required
    assert spec["k"].type is AttrType.FLOAT and spec["k"].default == 2.0 and isinstance(spec["k"].default, float)
    assert spec["flag"].type is AttrType.BOOL and spec["flag"].default is False
    assert spec["axes"].type is AttrType.INTS and spec["axes"].default == (0, 1)
    assert spec["mode"].type is AttrType.STR
    assert spec["ws"].type is AttrType.FLOATS and spec["ws"].default == (1.5,)
    assert spec["m"].type is AttrType.INTS2 and spec["m"].default == ((1, 2),)
    assert spec["z"].type is AttrType.INT  # no annotation: typed by its default
    assert f.name == "f" and not f.multi_output
    assert repr(f) == "<fusegen op f(a, b, c; n, k, flag, axes, mode, ws, m, z)>"



def test_list_attributes_may_be_annotated_as_tuples_and_sequences():
    """``tuple[int, ...]`` (the immutable default's type) and ``Sequence[int]`` are list
    attributes too, as annotations and as the strings ``from __future__ import annotations``
    leaves; a fixed-length tuple is not one."""
    import collections.abc
    import typing
    from fusegen.dtypes import attr_type_from_annotation as ann
    for a in (tuple[int, ...], typing.Tuple[int, ...], collections.abc.Sequence[int], "tuple[int, ...]",
              "typing.Sequence[int]"):
        assert ann(a) is AttrType.INTS, a
    for a in (tuple[float, ...], "Tuple[float, ...]"):
        assert ann(a) is AttrType.FLOATS, a
    for a in (tuple[tuple[int, ...], ...], list[tuple[int, ...]], "tuple[list[int], ...]"):
        assert ann(a) is AttrType.INTS2, a
    assert ann("list[tuple[float,...]]") is AttrType.FLOATS2
    for a in (tuple[int, int], tuple[int], "tuple[int, int]", list[str], typing.Sequence[str]):
        assert ann(a) is None, a

    @fg.op
    def summed(x, *, axes: tuple[int, ...] = (0,)):
        return fg.sum(x, axis=axes)
    assert summed.attrs["axes"].type is AttrType.INTS
    x = np.arange(12.0).reshape(3, 4)
    k = fg.compile(summed)
    np.testing.assert_array_equal(k(x), x.sum(0))
    np.testing.assert_array_equal(k(x, axes=(1,)), x.sum(1))
    np.testing.assert_array_equal(k(x, axes=[0, 1]), x.sum((0, 1)))

def test_examples_are_reachable_as_fg_examples():
    # in a fresh process: here `import fusegen.examples` already set the attribute
    out = subprocess.run([sys.executable, "-c", "import fusegen; print(fusegen.examples.softmax.name)"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "softmax", out.stderr[-300:]


def test_reference_ops_trace_with_documented_attributes():
    assert ex.add_reduce_sum.inputs == ["x", "y"]
    assert {n: (s.type, s.default) for n, s in ex.add_reduce_sum.attrs.items()} == {
        "axis": (AttrType.INT, 1), "keep_dims": (AttrType.BOOL, False)}
    assert ex.add_mul_div.multi_output and len(ex.add_mul_div.graph.outputs) == 3
    assert ex.layer_norm.multi_output and len(ex.layer_norm.graph.outputs) == 3
    assert ex.smooth_l1.attrs["sigma"].type is AttrType.FLOAT
    assert [o.name for o in ex.REFERENCE_OPS] == ["add_reduce_sum", "add_mul_div", "smooth_l1", "softmax",
                                                  "layer_norm", "rms_norm", "bias_gelu"]


def test_text_form_exact():
    assert text_op.text(locations=False) == "\n".join([
        "op text_op(x, y; axis: int = 1, scale: float = 2.0) {",
        "  %0 = input x",
        "  %1 = input y",
        "  %2 = add %0, %1",
        "  %3 = attr @scale",
        "  %4 = mul %2, %3",
        "  %5 = sum %4, axis=@axis, keep_dims=True",
        "  %6 = sub %2, %5",
        "  %7 = max %0, axis=0,-1, keep_dims=False",
        "  %8 = mean %1, axis=all, keep_dims=False",
        "  %9 = cast %2 to float16",
        "  return %6, %7, %8, %9",
        "}",
    ])


def test_print_op_shows_user_source_lines(capsys):
    print(text_op)
    out = capsys.readouterr().out
    assert out == str(text_op) + "\n"
    lines = out.splitlines()
    add, sum_, ret = (loc_of(HERE, m) for m in ("MARK-text-add", "MARK-text-sum", "MARK-text-ret"))
    assert lines[3].startswith("  %2 = add %0, %1") and lines[3].endswith("# " + add)
    assert lines[5].startswith("  %4 = mul %2, %3") and lines[5].endswith("# " + sum_)
    assert lines[6].endswith("# " + sum_) and "sum %4" in lines[6]
    for k in (7, 8, 9, 10):
        assert lines[k].endswith("# " + ret), lines[k]
    # inputs and attributes have no location
    assert "#" not in lines[1] and "#" not in lines[2] and "#" not in lines[4]


def test_common_subexpressions_become_one_node():
    # (x + y) written twice in text_op is one node: %9 casts %2
    adds = [n for n in text_op.graph.nodes if n.op is Op.ADD]
    assert len(adds) == 1

    @fg.op
    def cse(x):
        return fg.exp(x * 2.0) + fg.exp(x * 2.0)

    assert [n.op for n in cse.graph.nodes] == [Op.INPUT, Op.CONST, Op.MUL, Op.EXP, Op.ADD]
    add = cse.graph.outputs[0]
    assert add.srcs[0] is add.srcs[1]


def test_graph_is_topologically_ordered():
    for op in ex.REFERENCE_OPS + [text_op]:
        g = op.graph
        pos = {id(n): i for i, n in enumerate(g.nodes)}
        assert len(pos) == len(g.nodes)
        for n in g.nodes:
            assert all(pos[id(s)] < pos[id(n)] for s in n.srcs), op.name
        assert all(id(o) in pos for o in g.outputs)


def test_nodes_are_frozen_hashable_and_compare_by_structure():
    a = Node(Op.INPUT, (), 0, loc="a.py:1")
    b = Node(Op.INPUT, (), 0, loc="b.py:9")
    assert a == b and hash(a) == hash(b)  # the location is not part of identity
    assert Node(Op.EXP, (a,)) == Node(Op.EXP, (b,))
    assert Node(Op.EXP, (a,)) != Node(Op.LOG, (a,))
    assert len({Node(Op.EXP, (a,)), Node(Op.EXP, (b,))}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.op = Op.CONST  # type: ignore[misc]


def test_op_key_is_structural():
    def make(name, k):
        def body(x, y, *, axis: int = 1):
            return fg.sum(x * y + k, axis=axis)
        return fg.op(body, name=name)

    a, b, c, d = make("k", 1.0), make("k", 1.0), make("k", 2.0), make("other", 1.0)
    assert a.key == b.key        # same structure traced twice (the lines do not matter)
    assert a.key != c.key        # a different constant
    assert a.key != d.key        # the op name is part of it
    assert len(a.key) == 16 and int(a.key, 16) >= 0


def test_ops_inline_into_other_ops():
    @fg.op
    def outer(x, *, axis: int = -1):
        return ex.softmax(x * 2.0, axis=axis)

    kinds = [n.op for n in outer.graph.nodes]
    assert kinds.count(Op.REDUCE) == 2 and Op.EXP in kinds
    s = spec_of(outer, ["float32"], [(3, 4)], axis=0)
    assert s.out_shapes == ((3, 4),) and s.out_dtypes == (fdt.float32,)


def test_tensor_methods_and_operators_trace():
    @fg.op
    def methods(x, y):
        return (x.sum(axis=0), x.mean(), x.prod(axis=(0, 1), keep_dims=True), x.max(axis=-1), x.min(),
                +x, -x, abs(x), ~(x > y), (x > 0) & (y > 0), (x > 0) | (y > 0), x ** 2, 2 ** x, 1 - x,
                1 / x, x >= y, x <= y, x == y, x != y, x < y)

    ops = [o.op for o in methods.graph.outputs]
    assert ops[:5] == [Op.REDUCE] * 5 and [o.arg.kind for o in methods.graph.outputs[:5]] == [
        "sum", "mean", "prod", "max", "min"]
    assert methods.graph.outputs[5].op is Op.INPUT  # unary plus is the identity
    assert ops[6:] == [Op.NEG, Op.ABS, Op.INVERT, Op.BIT_AND, Op.BIT_OR, Op.POW, Op.POW, Op.SUB, Op.DIV, Op.GE, Op.LE,
                       Op.EQ, Op.NE, Op.LT]
    # reflected operators keep the operand order
    rsub = methods.graph.outputs[13]
    assert rsub.srcs[0].op is Op.CONST and rsub.srcs[0].arg == ("int", 1) and rsub.srcs[1].op is Op.INPUT


def test_numpy_scalars_are_constants():
    @fg.op
    def npconst(x):
        return x * np.float32(2.0) + np.int64(3)

    consts = [n.arg for n in npconst.graph.nodes if n.op is Op.CONST]
    assert consts == [("float", 2.0), ("int", 3)]


# =============================================================================================
# dtype promotion: fusegen gives exactly NumPy's result dtype
# =============================================================================================
UNARY = {
    "neg": (fg.neg, np.negative), "abs": (fg.abs, np.absolute), "exp": (fg.exp, np.exp),
    "log": (fg.log, np.log), "sqrt": (fg.sqrt, np.sqrt), "rsqrt": (fg.rsqrt, np.sqrt),
    "sin": (fg.sin, np.sin), "cos": (fg.cos, np.cos), "tanh": (fg.tanh, np.tanh),
    "sigmoid": (fg.sigmoid, np.exp), "relu": (fg.relu, np.absolute), "erf": (fg.erf, np.exp),
    "floor": (fg.floor, np.floor), "ceil": (fg.ceil, np.ceil), "logical_not": (fg.logical_not, np.logical_not),
}
BINARY = {
    "add": (lambda a, b: a + b, np.add), "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply), "div": (lambda a, b: a / b, np.true_divide),
    "pow": (lambda a, b: a ** b, np.power), "maximum": (fg.maximum, np.maximum),
    "minimum": (fg.minimum, np.minimum), "lt": (lambda a, b: a < b, np.less),
    "le": (lambda a, b: a <= b, np.less_equal), "gt": (lambda a, b: a > b, np.greater),
    "ge": (lambda a, b: a >= b, np.greater_equal), "eq": (lambda a, b: a == b, np.equal),
    "ne": (lambda a, b: a != b, np.not_equal), "and": (fg.logical_and, np.logical_and),
    "or": (fg.logical_or, np.logical_or),
}


def _numpy_supports(fn, *dtypes) -> bool:
    try:
        np_dtype_of(fn, *dtypes)
        return True
    except TypeError:
        return False


@pytest.mark.parametrize("name", list(UNARY))
def test_unary_result_dtypes_match_numpy(name):
    fg_fn, np_fn = UNARY[name]
    op = fg.op(lambda x: fg_fn(x), name=f"u_{name}")
    bad = []
    for d in ALL_DTYPES:
        if name == "relu" and d == "bool" or not _numpy_supports(np_fn, d):
            continue  # the error cases are tested below
        got = spec_of(op, [d], [(2,)]).out_dtypes[0]
        want = np_dtype_of(np_fn, d)
        if got.np != want:
            bad.append(f"{name}({d}): fusegen {got}, NumPy {want}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("name", list(BINARY))
def test_binary_result_dtypes_match_numpy(name):
    fg_fn, np_fn = BINARY[name]
    op = fg.op(lambda x, y: fg_fn(x, y), name=f"b_{name}")
    bad, checked = [], 0
    for a, b in itertools.product(ALL_DTYPES, repeat=2):
        if not _numpy_supports(np_fn, a, b):
            continue
        got = spec_of(op, [a, b], [(2,), (2,)]).out_dtypes[0]
        want = np_dtype_of(np_fn, a, b)
        checked += 1
        if got.np != want:
            bad.append(f"{name}({a}, {b}): fusegen {got}, NumPy {want}")
    assert checked > 50 and not bad, "\n".join(bad)


# NEP 50: a Python int/float is *weak*: it takes the array's dtype when its kind fits
# (int8 + 1 -> int8, float16 * 2.5 -> float16) and the default of its kind otherwise
# (int8 * 2.5 -> float64). Scalar attributes are weak in exactly the same way.
WEAK_OPS = ["add", "sub", "mul", "div", "pow", "maximum", "lt", "eq"]
WEAK_SCALARS = [2, 2.5]


@pytest.mark.parametrize("name", WEAK_OPS)
def test_python_scalars_are_weak_as_in_numpy(name):
    fg_fn, np_fn = BINARY[name]
    bad = []
    for scalar in WEAK_SCALARS:
        right = fg.op(lambda x: fg_fn(x, scalar), name="scalar_right")
        left = fg.op(lambda x: fg_fn(scalar, x), name="scalar_left")
        for d in ALL_DTYPES:
            for op, args in ((right, (d, scalar)), (left, (scalar, d))):
                if not _numpy_supports(np_fn, *args):
                    continue
                got = spec_of(op, [d], [(2,)]).out_dtypes[0]
                want = np_dtype_of(np_fn, *args)
                if got.np != want:
                    bad.append(f"{name}{args}: fusegen {got}, NumPy {want}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("name", WEAK_OPS)
def test_scalar_attributes_are_weak_operands(name):
    fg_fn, np_fn = BINARY[name]

    @fg.op(name="int_attr_operand")
    def int_right(x, *, i: int = 2):
        return fg_fn(x, i)

    @fg.op(name="float_attr_operand")
    def float_left(x, *, f: float = 2.5):
        return fg_fn(f, x)

    bad = []
    for d in ALL_DTYPES:
        for op, args in ((int_right, (d, 2)), (float_left, (2.5, d))):
            if not _numpy_supports(np_fn, *args):
                continue
            got = spec_of(op, [d], [(2,)]).out_dtypes[0]
            want = np_dtype_of(np_fn, *args)
            if got.np != want:
                bad.append(f"{name}{args} with an attribute: fusegen {got}, NumPy {want}")
    assert not bad, "\n".join(bad)


def test_weak_only_expression_materializes_like_numpy():
    @fg.op
    def weak(x, *, f: float = 1.5, i: int = 2):
        return x + (f * i), x * (i + 3)

    for d in ALL_DTYPES:
        if d == "bool":
            continue
        s = spec_of(weak, [d], [(3,)])
        assert s.out_dtypes[0].np == np_dtype_of(np.add, d, 3.0), d
        assert s.out_dtypes[1].np == np_dtype_of(np.multiply, d, 5), d


def test_python_bool_scalar_operand_promotes_like_numpy():
    @fg.op
    def boolconst(x, *, flag: bool = True):
        return x + True, (x > 0) & flag

    s = spec_of(boolconst, ["int8"], [(2,)])
    assert [d.name for d in s.out_dtypes] == ["int8", "bool"]


def test_where_result_dtype_matches_numpy():
    @fg.op
    def wh(c, a, b):
        return fg.where(c, a, b), fg.where(c, a, 1.5), fg.where(c, 2, b), fg.where(c, a, a)

    bad = []
    for a, b in itertools.product(ALL_DTYPES, repeat=2):
        s = spec_of(wh, ["bool", a, b], [(2,)] * 3)
        c = np.array([True, False])
        want = [np.where(c, np.ones(2, a), np.ones(2, b)).dtype, np.where(c, np.ones(2, a), 1.5).dtype,
                np.where(c, 2, np.ones(2, b)).dtype, np.where(c, np.ones(2, a), np.ones(2, a)).dtype]
        got = [d.np for d in s.out_dtypes]
        if got != want:
            bad.append(f"where(c, {a}, {b}): fusegen {got}, NumPy {want}")
    assert not bad, "\n".join(bad[:20])


def test_where_of_two_python_scalars_materializes():
    @fg.op
    def wh2(c):
        return fg.where(c, 1, 2.5), fg.where(c, 1, 2)

    s = spec_of(wh2, ["bool"], [(2,)])
    c = np.array([True, False])
    assert [d.np for d in s.out_dtypes] == [np.where(c, 1, 2.5).dtype, np.where(c, 1, 2).dtype]


def test_cast_gives_the_named_dtype():
    @fg.op
    def casts(x):
        return x.astype("int8"), fg.cast(x, np.float16), x.astype(np.dtype("uint32")), fg.cast(x, fdt.bool_)

    for d in ALL_DTYPES:
        s = spec_of(casts, [d], [(2, 3)])
        assert [o.name for o in s.out_dtypes] == ["int8", "float16", "uint32", "bool"]
        assert s.out_shapes == ((2, 3),) * 4


@pytest.mark.parametrize("kind", ["sum", "mean", "prod", "max", "min"])
def test_reduction_result_dtypes_match_numpy(kind):
    op = fg.op(lambda x: getattr(fg, kind)(x, axis=1), name=f"r_{kind}")
    for d in ALL_DTYPES:
        want = getattr(np, kind)(np.ones((2, 3), d), axis=1).dtype
        assert spec_of(op, [d], [(2, 3)]).out_dtypes[0].np == want, (kind, d)


def test_reduction_accumulates_float16_in_float32():
    s = spec_of(ex.add_reduce_sum, ["float16", "float16"], [(2, 3), (2, 3)])
    info = s.of(ex.add_reduce_sum.graph.outputs[0])
    assert info.dtype == fdt.float16 and info.acc == fdt.float32
    s = spec_of(ex.add_reduce_sum, ["int8", "int8"], [(2, 3), (2, 3)])
    info = s.of(ex.add_reduce_sum.graph.outputs[0])
    assert info.dtype == fdt.int64 and info.acc == fdt.int64


def test_as_dtype_canonicalizes_and_rejects_the_rest():
    assert fg.as_dtype("float32") is fdt.float32
    assert fg.as_dtype(np.float32) is fdt.float32
    assert fg.as_dtype(np.dtype("int16")) is fdt.int16
    assert fg.as_dtype(bool) is fdt.bool_
    assert fg.as_dtype(fdt.uint8) is fdt.uint8
    assert fg.as_dtype(np.complex128) is fdt.complex128 and fg.as_dtype("complex64") is fdt.complex64
    for bad in ("complex256", np.longdouble, "U3", object):
        with pytest.raises(DTypeError, match="unsupported dtype"):
            fg.as_dtype(bad)
    assert sorted(fg.DTYPES) == sorted(ALL_DTYPES + ("complex64", "complex128"))


# =============================================================================================
# Shape inference (the AOT ABI's unknowns: -1 dims, (-2,) or None for an unknown rank)
# =============================================================================================
@fg.op
def mul_op(x, y):
    return x * y  # MARK-mul


@pytest.mark.parametrize("sx, sy, want", [
    ((), (), ()),
    ((3,), (), (3,)),
    ((3, 1), (1, 4), (3, 4)),
    ((2, 3, 4), (4,), (2, 3, 4)),
    ((2, 1, 4), (3, 1), (2, 3, 4)),
    ((0, 3), (1, 3), (0, 3)),
    ((1, 1), (1,), (1, 1)),
    ((3, UNKNOWN_DIM), (3, 4), (3, 4)),
    ((-1, 4), (1, 4), (-1, 4)),
    ((-1,), (1,), (-1,)),
    ((3, -1), (-1,), (3, -1)),
    ((-1, 1), (1, -1), (-1, -1)),
    ((-1,), (0,), (0,)),
    ((-1, 5), (2, -1, 1), (2, -1, 5)),
    (None, (3, 4), None),
    ((-2,), (3, 4), None),
    ((3, 4), (UNKNOWN_RANK,), None),
])
def test_broadcast_shape_inference(sx, sy, want):
    s = spec_of(mul_op, ["float32", "float32"], [sx, sy])
    assert s.out_shapes == (want,)


@pytest.mark.parametrize("shape, axis, keep, want", [
    ((2, 3, 4), 1, False, (2, 4)),
    ((2, 3, 4), 1, True, (2, 1, 4)),
    ((2, 3, 4), -1, False, (2, 3)),
    ((2, 3, 4), (0, 2), False, (3,)),
    ((2, 3, 4), (2, 0), True, (1, 3, 1)),
    ((2, 3, 4), None, False, ()),
    ((2, 3, 4), None, True, (1, 1, 1)),
    ((), None, False, ()),
    ((5,), 0, True, (1,)),
    ((0, 3), 1, False, (0,)),
    ((2, -1, 4), 1, False, (2, 4)),
    ((2, -1, 4), -1, True, (2, -1, 1)),
    ((-1, -1), None, False, ()),
    (None, 1, False, None),
    ((-2,), 7, True, None),  # rank unknown: the axis is checked at run time
])
def test_reduction_shape_inference(shape, axis, keep, want):
    @fg.op
    def red(x, *, keep: bool = False):
        return fg.sum(x, axis=axis, keep_dims=keep)

    s = spec_of(red, ["float32"], [shape], keep=keep)
    assert s.out_shapes == (want,)
    info = s.of(red.graph.outputs[0])
    if want is not None:
        rank = len(shape)
        expect = tuple(range(rank)) if axis is None else tuple(sorted(
            a % rank for a in ((axis,) if isinstance(axis, int) else axis)))
        assert info.axes == expect
    else:
        assert info.axes is None


def test_reduction_axes_and_keep_dims_from_attributes():
    s = spec_of(ex.add_reduce_sum, ["float32"] * 2, [(2, 3, 4)] * 2, axis=-2, keep_dims=True)
    assert s.out_shapes == ((2, 1, 4),)

    @fg.op
    def lsum(x, *, axes: list[int] = (0,), keep: bool = False):
        return fg.sum(x, axis=axes, keep_dims=keep)

    assert spec_of(lsum, ["float64"], [(2, 3, 4)], axes=[2, 0]).out_shapes == ((3,),)
    assert spec_of(lsum, ["float64"], [(2, 3, 4)], axes=(-1,), keep=True).out_shapes == ((2, 3, 1),)
    assert spec_of(lsum, ["float64"], [(2, 3, 4)], axes=[]).out_shapes == ((2, 3, 4),)


def test_layer_norm_and_softmax_shapes_with_unknowns():
    s = spec_of(ex.layer_norm, ["float32"], [(-1, 8)], axis=-1)
    assert s.out_shapes == ((-1, 8), (-1, 1), (-1, 1))
    assert s.out_dtypes == (fdt.float32,) * 3
    s = spec_of(ex.softmax, ["float16"], [None])
    assert s.out_shapes == (None,) and s.out_dtypes == (fdt.float16,)
    s = spec_of(ex.rms_norm, ["float32", "float32"], [(4, -1), (-1,)])
    assert s.out_shapes == ((4, -1),)


def test_infer_accepts_dtype_spellings_and_checks_arity():
    s = fg.infer(mul_op, [np.float32, np.dtype("float64")], [(2,), (2,)], {})
    assert s.dtypes == (fdt.float32, fdt.float64) and s.out_dtypes == (fdt.float64,)
    with pytest.raises(ArgumentError, match=r"op mul_op takes 2 inputs \(x, y\), got 1"):
        fg.infer(mul_op, ["float32"], [(2,)], {})
    with pytest.raises(DTypeError, match="float128"):
        fg.infer(mul_op, ["float128", "float32"], [(2,), (2,)], {})


# =============================================================================================
# Errors: each names the op and, where there is one, the node and the user's source line
# =============================================================================================
def test_error_classes_are_fusegen_errors_and_builtins():
    assert issubclass(TraceError, TypeError) and issubclass(AttrError, TypeError)
    assert issubclass(DTypeError, TypeError) and issubclass(ArgumentError, TypeError)
    assert issubclass(ShapeError, ValueError)
    for e in (TraceError, AttrError, DTypeError, ArgumentError, ShapeError):
        assert issubclass(e, FusegenError)


def test_error_wrong_number_of_inputs():
    k = fg.compile(mul_op)
    with pytest.raises(ArgumentError, match=r"op mul_op takes 2 inputs \(x, y\), got 3"):
        k(np.ones(2), np.ones(2), np.ones(2))
    with pytest.raises(ArgumentError, match=r"op mul_op takes 2 inputs \(x, y\), got 1"):
        mul_op(np.ones(2))

    # calling an op on traced tensors inlines it; the arity is checked there too
    with pytest.raises(ArgumentError, match="op mul_op takes 2 inputs, got 1"):
        @fg.op
        def inlines_badly(x):
            return mul_op(x)


def test_error_incompatible_broadcast_names_op_node_and_line():
    with pytest.raises(ShapeError) as e:
        spec_of(mul_op, ["float32"] * 2, [(3, 4), (3, 5)])
    msg = str(e.value)
    assert "op mul_op" in msg and "%2 = mul %0, %1" in msg and loc_of(HERE, "MARK-mul") in msg
    assert "(3, 4)" in msg and "(3, 5)" in msg
    # the same error through a kernel call (it fails before anything is compiled)
    with pytest.raises(ShapeError, match=loc_of(HERE, "MARK-mul")):
        fg.compile(mul_op)(np.ones((3, 4), np.float32), np.ones(5, np.float32))


@fg.op
def axis_op(x, *, axis: int = 0):
    y = fg.exp(x)
    return fg.max(y, axis=axis)  # MARK-axis


@fg.op
def const_axis_op(x):
    return fg.sum(x, axis=(0, 3))  # MARK-const-axis


@pytest.mark.parametrize("axis", [2, -3, 100])
def test_error_axis_out_of_range_names_op_node_and_line(axis):
    with pytest.raises(ShapeError) as e:
        fg.compile(axis_op)(np.ones((2, 3), np.float32), axis=axis)
    msg = str(e.value)
    assert "op axis_op" in msg and "node %2 = max %1, axis=@axis" in msg
    assert loc_of(HERE, "MARK-axis") in msg and f"axis {axis} is out of range for rank 2" in msg


def test_error_constant_axis_out_of_range_and_repeated_axis():
    with pytest.raises(ShapeError) as e:
        spec_of(const_axis_op, ["float32"], [(2, 3)])
    assert "op const_axis_op" in str(e.value) and loc_of(HERE, "MARK-const-axis") in str(e.value)
    assert "sum %0, axis=0,3" in str(e.value)
    with pytest.raises(ShapeError, match=r"repeated axis in \(1, -1\)"):
        spec_of(fg.op(lambda x: fg.sum(x, axis=(1, -1)), name="rep"), ["float32"], [(3, 4)])
    with pytest.raises(ShapeError, match="scalar"):
        spec_of(axis_op, ["float32"], [()], axis=0)


@pytest.mark.parametrize("attr, value, expected", [
    ("axis", 1.0, "expected int, got float 1.0"),          # int given a float
    ("axis", True, "expected int, got bool True"),         # int given a bool
    ("axis", "1", "expected int, got str '1'"),
    ("keep_dims", 1, "expected bool, got int 1"),          # bool given an int
    ("keep_dims", "yes", "expected bool, got str"),
])
def test_error_attribute_of_wrong_type(attr, value, expected):
    with pytest.raises(AttrError) as e:
        ex.add_reduce_sum.bind_attrs({attr: value})
    assert str(e.value).startswith(f"op add_reduce_sum: attribute {attr!r}: ") and expected in str(e.value)
    # the kernel call path rejects it before compiling anything
    with pytest.raises(AttrError, match=f"attribute {attr!r}"):
        fg.compile(ex.add_reduce_sum)(np.ones((2, 2)), np.ones((2, 2)), **{attr: value})


@fg.op
def typed_attrs(x, *, n: int, f: float = 1.0, axes: list[int] = (0,), fs: list[float] = (1.0,),
                s: str = "a", m: list[list[int]] = ((0,),), mf: list[list[float]] = ((0.5,),)):
    return x * n * f


@pytest.mark.parametrize("attr, value, expected", [
    ("axes", "01", "expected list[int], got str '01'"),     # list[int] given a str
    ("axes", [0, 1.5], "expected list[int]"),
    ("axes", 3, "expected list[int], got int 3"),
    ("axes", [True], "expected list[int]"),
    ("fs", ["a"], "expected list[float]"),
    ("f", "1.0", "expected float, got str"),
    ("f", None, "expected float, got NoneType"),
    ("s", 1, "expected str, got int 1"),
    ("m", [1, 2], "expected list[list[int]]"),
    ("mf", [[0.5], "x"], "expected list[list[float]]"),
])
def test_error_list_and_other_attributes_of_wrong_type(attr, value, expected):
    with pytest.raises(AttrError) as e:
        typed_attrs.bind_attrs({"n": 1, attr: value})
    assert str(e.value).startswith(f"op typed_attrs: attribute {attr!r}: ") and expected in str(e.value)


def test_attribute_values_are_canonicalized():
    b = typed_attrs.bind_attrs({"n": np.int32(3), "f": 2, "axes": np.array([1, 0]), "fs": [1, 2],
                                "m": [[1], [2, 3]], "mf": [(1, 2.5)]})
    assert b == {"n": 3, "f": 2.0, "axes": (1, 0), "fs": (1.0, 2.0), "s": "a", "m": ((1,), (2, 3)),
                 "mf": ((1.0, 2.5),)}
    assert type(b["n"]) is int and type(b["f"]) is float
    hash(tuple(b.items()))  # canonical values are hashable (they key caches)


def test_error_missing_required_attribute():
    with pytest.raises(AttrError, match=r"op typed_attrs: missing required attribute 'n' \(int\)"):
        typed_attrs.bind_attrs({})
    with pytest.raises(AttrError, match="missing required attribute 'n'"):
        fg.compile(typed_attrs)(np.ones(3))


def test_error_unknown_attribute():
    with pytest.raises(AttrError, match=r"op add_reduce_sum: unknown attribute 'axes' \(attributes: axis, keep_dims\)"):
        fg.compile(ex.add_reduce_sum)(np.ones(2), np.ones(2), axes=0)
    with pytest.raises(AttrError, match=r"op mul_op: unknown attribute 'alpha' \(attributes: none\)"):
        mul_op.bind_attrs({"alpha": 1.0})


@pytest.mark.parametrize("dtype", ["float128", "complex256"])
def test_error_unsupported_dtype(dtype):
    x = np.ones((2, 3), dtype)
    with pytest.raises(DTypeError) as e:
        fg.compile(mul_op)(np.ones((2, 3), np.float32), x)
    msg = str(e.value)
    assert f"op mul_op: input 'y' has dtype {dtype}" in msg and "float32" in msg
    with pytest.raises(DTypeError, match="unsupported dtype"):
        @fg.op
        def to_wide(x):
            return x.astype(np.longdouble)


def test_error_dtype_combination_numpy_rejects_is_a_dtype_error_naming_node():
    # bool - bool and relu(bool) are TypeErrors in NumPy: fusegen must reject them at inference
    @fg.op
    def bool_sub(x, y):
        return x - y  # MARK-bool-sub

    with pytest.raises(DTypeError) as e:
        spec_of(bool_sub, ["bool", "bool"], [(2,), (2,)])
    msg = str(e.value)
    assert "op bool_sub" in msg and "%2 = sub %0, %1" in msg and loc_of(HERE, "MARK-bool-sub") in msg
    assert "subtract is not defined for bool, bool" in msg


def test_infer_dtype_error_is_not_a_key_error():
    @fg.op
    def neg_bool(x):
        return -x

    with pytest.raises(DTypeError, match="op neg_bool"):
        spec_of(neg_bool, ["bool"], [(2,)])


def test_max_over_empty_axis_is_a_value_error():
    with pytest.raises(ValueError, match="no identity"):
        spec_of(axis_op, ["float32"], [(0, 3)], axis=0)


def test_error_control_flow_on_a_tensor_mentions_where_and_line():
    with pytest.raises(TraceError) as e:
        @fg.op
        def branchy(x):
            if x > 0:  # MARK-if-tensor
                return x
            return -x
    msg = str(e.value)
    assert msg.startswith("op branchy: a traced tensor") and "fg.where" in msg
    assert loc_of(HERE, "MARK-if-tensor") in msg


@pytest.mark.parametrize("how, what", [
    (lambda x: x if x else x, "if/while/and/or/not"),
    (lambda x: x and x, "if/while/and/or/not"),
    (lambda x: int(x), "int()"),
    (lambda x: float(x), "float()"),
    (lambda x: [v for v in x][0], "iteration"),
    (lambda x: range(10)[x], "indexing"),
])
def test_error_other_python_control_flow_on_tensors(how, what):
    with pytest.raises(TraceError, match="fg.where") as e:
        fg.op(how, name="pyflow")
    assert "op pyflow" in str(e.value) and what in str(e.value) and "test_ir.py:" in str(e.value)


def test_error_control_flow_on_an_attribute_mentions_where_and_line():
    with pytest.raises(TraceError) as e:
        @fg.op
        def flagged(x, *, flag: bool = True):
            while flag:  # MARK-if-attr
                return x
            return -x
    msg = str(e.value)
    assert msg.startswith("op flagged: a traced attribute") and "fg.where" in msg
    assert "attribute 'flag'" in msg and loc_of(HERE, "MARK-if-attr") in msg


@pytest.mark.parametrize("ann", ["list[float]", "list[int]", "str", "list[list[int]]"])
def test_error_non_scalar_attribute_used_as_operand(ann):
    src = (f"def listy(x, *, v: {ann}):\n"
           f"    return x * v\n")
    ns: dict = {}
    exec(compile(src, "user_op.py", "exec"), {"fg": fg}, ns)
    with pytest.raises(TraceError) as e:
        fg.op(ns["listy"])
    msg = str(e.value)
    if ann == "str":   # (what a string cannot do in a trace, and what to do instead)
        assert "op listy: attribute 'v' is a str, which the kernel receives" in msg and "fg.where" in msg
    else:
        assert f"op listy: attribute 'v' of type {ann} cannot be an operand" in msg
    assert "user_op.py:2" in msg


def test_error_str_attribute_choosing_a_computation():
    with pytest.raises(TraceError, match=r"op reduced: attribute 'reduction' is a str.*cannot choose what to compute"):
        @fg.op
        def reduced(x, *, reduction: str = "mean"):
            return fg.sum(x) if reduction == "sum" else fg.mean(x)


def test_error_list_attribute_operand_line_in_this_file():
    with pytest.raises(TraceError) as e:
        @fg.op
        def scale_list(x, *, ws: list[float] = (1.0,)):
            return x + ws  # MARK-list-operand
    assert "op scale_list" in str(e.value) and loc_of(HERE, "MARK-list-operand") in str(e.value)


def test_error_output_not_depending_on_any_input():
    with pytest.raises(TraceError) as e:
        @fg.op
        def constant_out(x, *, a: float = 1.0):
            return x + 1, a * 2.0  # MARK-no-input
    msg = str(e.value)
    assert "op constant_out" in msg and "output 1 does not depend on any input" in msg


def test_error_output_not_depending_on_any_input_names_line():
    with pytest.raises(TraceError) as e:
        @fg.op
        def constant_out2(x, *, a: float = 1.0):
            return x + 1, a * 3.0  # MARK-no-input-2
    assert loc_of(HERE, "MARK-no-input-2") in str(e.value)


def test_error_outputs_must_be_traced_tensors():
    with pytest.raises(TraceError, match="op returns_float: output 1 is a float"):
        @fg.op
        def returns_float(x):
            return x, 1.0
    with pytest.raises(TraceError, match="op returns_nothing returns no outputs"):
        @fg.op
        def returns_nothing(x):
            return ()


def test_error_no_annotation_on_an_attribute():
    with pytest.raises(TraceError) as e:
        @fg.op
        def untyped(x, *, scale):
            return x * scale
    msg = str(e.value)
    assert "op untyped: attribute 'scale' needs a type annotation" in msg and "list[int]" in msg



def test_errors_raised_by_helpers_while_tracing_name_the_op_and_line():
    """A helper's error (the dtype table's, here) names the op and the user's line, as the
    shape rules' do; a str attribute given as a dtype says why it cannot be one (it was
    NumPy's "Could not convert <fusegen traced attr>", a ValueError)."""
    with pytest.raises(DTypeError, match=r"^op bad_cast: unsupported dtype 'bogus'.* \[at test_ir\.py:\d+\]$"):
        @fg.op
        def bad_cast(x):
            return x.astype("bogus")
    with pytest.raises(DTypeError, match=r"^op attr_cast: attribute 'to' cannot be a dtype: an attribute's value is "
                                         r"known only when the op is called"):
        @fg.op
        def attr_cast(x, *, to: str = "float16"):
            return x.astype(to)

def test_error_unsupported_annotation_and_bad_default():
    with pytest.raises(TraceError, match="attribute 'd' needs a type annotation"):
        @fg.op
        def dict_attr(x, *, d: dict = None):
            return x
    with pytest.raises(AttrError, match=r"op bad_default: default of attribute 'n': expected int, got float 1.5"):
        @fg.op
        def bad_default(x, *, n: int = 1.5):
            return x


def test_error_signature_shapes():
    with pytest.raises(TraceError, match="tensor parameter 'y' cannot have a default"):
        @fg.op
        def defaulted(x, y=1.0):
            return x + y
    with pytest.raises(TraceError, match=r"\*args/\*\*kwargs are not supported"):
        @fg.op
        def star(*xs):
            return xs[0]


def test_error_bad_operands_and_reduction_arguments():
    with pytest.raises(TraceError) as e:
        @fg.op
        def list_operand(x):
            return x + [1, 2]  # MARK-list-const
    assert "op list_operand: cannot use list" in str(e.value) and loc_of(HERE, "MARK-list-const") in str(e.value)
    with pytest.raises(TraceError, match="axis must be None, an int, a tuple of ints"):
        fg.op(lambda x: fg.sum(x, axis=1.5), name="float_axis")
    with pytest.raises(TraceError, match="attribute 'f' \\(float\\) cannot be an axis"):
        @fg.op
        def float_attr_axis(x, *, f: float = 1.0):
            return fg.sum(x, axis=f)
    with pytest.raises(TraceError, match="keep_dims attribute 'n' must be a bool attribute"):
        @fg.op
        def int_keep(x, *, n: int = 1):
            return fg.sum(x, axis=0, keep_dims=n)
    with pytest.raises(TraceError, match="keep_dims must be a bool"):
        fg.op(lambda x: fg.sum(x, axis=0, keep_dims=1), name="int_keep_const")
    with pytest.raises(TraceError, match="unknown reduction 'median'"):
        fg.op(lambda x: fg.ir.reduce("median", x), name="median")
