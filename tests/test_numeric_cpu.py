"""Layer (c): numeric checks of the Numba CPU backend against NumPy, driven by tables of
(op, NumPy reference, dtypes, shapes). Result dtypes must equal NumPy's exactly; values agree
within the tolerance of the dtype (``conftest.TOL``).

Each distinct (dtypes, op structure, row/col mode, stride pattern, ranks) compiles a Numba
function, so the tables group many ops into one multi-output op per dtype and use small shapes;
a few large inputs exercise the parallel (``prange``) kernels.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import fusegen as fg
import fusegen.examples as ex
from fusegen import runtime

from conftest import assert_all_close, assert_close, np_erf, np_ref, sample
from row_quotient_cases import check_row_quotients, row_quotient_inputs, row_quotients, softmax_ulp_error

# exp(40) in float16 overflows to inf, as in NumPy (which warns the same way)
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning",
                                        "ignore:Mean of empty slice:RuntimeWarning")


def _in_float64(f):
    """Reference for a float function of any input dtype: computed in float64, then given the
    dtype NumPy's transcendental functions give that input (``np.exp(x).dtype``)."""
    def ref(x):
        out = np.exp(np.zeros((), x.dtype)).dtype
        with np.errstate(all="ignore"):
            return f(x.astype(np.float64)).astype(out)
    return ref


# =============================================================================================
# Elementwise unary: one op returning every unary result that NumPy defines for the dtype
# =============================================================================================
UNARY = [  # name, fusegen, NumPy reference
    ("neg", fg.neg, np.negative),
    ("abs", fg.abs, np.absolute),
    ("exp", fg.exp, np.exp),
    ("log", fg.log, np.log),
    ("sqrt", fg.sqrt, np.sqrt),
    ("rsqrt", fg.rsqrt, _in_float64(lambda x: 1.0 / np.sqrt(x))),
    ("sin", fg.sin, np.sin),
    ("cos", fg.cos, np.cos),
    ("tanh", fg.tanh, np.tanh),
    ("sigmoid", fg.sigmoid, _in_float64(lambda x: 1.0 / (1.0 + np.exp(-x)))),
    ("relu", fg.relu, lambda x: np.maximum(x, 0)),
    ("erf", fg.erf, np_erf),
    ("floor", fg.floor, np.floor),
    ("ceil", fg.ceil, np.ceil),
    ("logical_not", fg.logical_not, np.logical_not),
]

UNARY_VALUES = {
    "f": [-2.5, -1.0, -0.5, -0.0, 0.0, 0.3, 1.0, 2.0, 7.5, -40.0, 40.0, np.nan, np.inf, -np.inf, 0.7],
    "i": [-3, -2, -1, 0, 1, 2, 3, 100, -100, 127, -128, 5, 7, 11, 13],
    "u": [0, 1, 2, 3, 4, 9, 100, 200, 255, 17, 5, 7, 11, 13, 128],
    "b": [True, False] * 7 + [True],
}


def _numpy_defines(np_fn, dtype) -> bool:
    try:
        with np.errstate(all="ignore"):
            np_fn(np.ones(1, dtype))
        return True
    except TypeError:
        return False


def unary_rows(dtype):
    return [(n, f, r) for n, f, r in UNARY if _numpy_defines(r, dtype) and not (n == "relu" and dtype == "bool")]


_UNARY_OPS: dict = {}


def unary_op(names: tuple):
    if names not in _UNARY_OPS:
        fns = [f for n, f, _ in UNARY if n in names]
        _UNARY_OPS[names] = fg.op(lambda x: tuple(f(x) for f in fns), name="unary_table")
    return _UNARY_OPS[names]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int8", "uint8", "bool"])
def test_unary_ops(dtype):
    rows = unary_rows(dtype)
    vals = UNARY_VALUES[np.dtype(dtype).kind]
    with np.errstate(all="ignore"):
        x = np.array(vals).astype(dtype).reshape(3, 5)
    got = unary_op(tuple(n for n, _, _ in rows))(x)
    assert len(got) == len(rows)
    for (name, _, ref), g in zip(rows, got):
        assert_close(g, np_ref(ref, x), what=f"{name}({dtype})")


def test_unary_table_covers_every_unary_op():
    names = {n for n, _, _ in UNARY}
    # (the array API's functions of #18 have their own table: tests/elementwise_cases.py)
    elsewhere = {"expm1", "log1p", "log2", "log10", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh",
                 "atanh", "trunc", "round", "sign", "signbit", "isnan", "isinf", "isfinite", "square", "reciprocal",
                 "bitwise_invert", "real", "imag", "conj"}   # (complex: tests/complex_cases.py)
    assert names == {op.value for op in fg.ir.UNARY_UFUNC} - elsewhere
    # float dtypes get all of them
    assert len(unary_rows("float32")) == len(UNARY)


# =============================================================================================
# Elementwise binary: broadcast (4, 1) with (1, 5), every op NumPy defines for the dtype pair
# =============================================================================================
BINARY = [
    ("add", lambda a, b: a + b, np.add),
    ("sub", lambda a, b: a - b, np.subtract),
    ("mul", lambda a, b: a * b, np.multiply),
    ("div", lambda a, b: a / b, np.true_divide),
    ("pow", lambda a, b: a ** b, np.power),
    ("maximum", fg.maximum, np.maximum),
    ("minimum", fg.minimum, np.minimum),
    ("lt", lambda a, b: a < b, np.less),
    ("le", lambda a, b: a <= b, np.less_equal),
    ("gt", lambda a, b: a > b, np.greater),
    ("ge", lambda a, b: a >= b, np.greater_equal),
    ("eq", lambda a, b: a == b, np.equal),
    ("ne", lambda a, b: a != b, np.not_equal),
]
LOGICAL = [("logical_and", fg.logical_and, np.logical_and), ("logical_or", fg.logical_or, np.logical_or)]

BINARY_VALUES = {  # x is (4, 1), y is (1, 5); NaN on both sides for NaN propagation
    "f": ([-2.5, 0.0, 1.5, np.nan], [-1.0, 0.0, 0.5, 2.0, np.nan]),
    "i": ([-128, 0, 2, 127], [0, 1, 2, 3, 4]),  # int pow: no negative exponents (NumPy raises)
    "u": ([0, 2, 5, 200], [0, 1, 2, 3, 4]),
    "b": ([False, True, True, False], [False, True, False, True, True]),
}


def _binary_operands(da, db):
    with np.errstate(all="ignore"):
        x = np.array(BINARY_VALUES[np.dtype(da).kind][0]).astype(da).reshape(4, 1)
        y = np.array(BINARY_VALUES[np.dtype(db).kind][1]).astype(db).reshape(1, 5)
    return x, y


_BINARY_OPS: dict = {}


def binary_op(rows):
    names = tuple(n for n, _, _ in rows)
    if names not in _BINARY_OPS:
        fns = [f for _, f, _ in rows]
        _BINARY_OPS[names] = fg.op(lambda a, b: tuple(f(a, b) for f in fns), name="binary_table")
    return _BINARY_OPS[names]


@pytest.mark.parametrize("da, db", [("float32", "float32"), ("float16", "float16"), ("int8", "int8"),
                                    ("uint8", "int8"), ("int32", "float64"), ("bool", "bool")])
def test_binary_ops_with_broadcasting(da, db):
    x, y = _binary_operands(da, db)
    rows = [(n, f, r) for n, f, r in BINARY
            if _numpy_defines(lambda a, r=r: r(a, np.ones(1, db)), da)]
    got = binary_op(rows)(x, y)
    assert len(got) == len(rows)
    for (name, _, ref), g in zip(rows, got):
        assert_close(g, np_ref(ref, x, y), what=f"{name}({da}, {db})")


def test_integer_arithmetic_wraps_like_numpy():
    x = np.array([100, -128, 127, 50], np.int8)
    y = np.array([100, -1, 1, 3], np.int8)
    got = binary_op([r for r in BINARY if r[0] in ("add", "sub", "mul")])(x, y)
    with np.errstate(all="ignore"):
        assert_all_close(got, (x + y, x - y, x * y))


@fg.op
def bool_arith_reduced(x, y):
    return fg.sum(x + y, axis=1), fg.sum(x * y + x, axis=1), x + y


def test_bool_add_and_mul_stay_bool_inside_a_fused_reduction():
    # bool + bool is logical or (True + True is True, not 2), bool * bool logical and, as NumPy's
    x, y = _binary_operands("bool", "bool")
    x, y = np.broadcast_arrays(x, y)
    ref = (np.sum(x + y, axis=1), np.sum(x * y + x, axis=1), x + y)
    assert_all_close(bool_arith_reduced(x, y), ref)


def test_logical_ops_on_bool():
    x, y = _binary_operands("bool", "bool")
    got = binary_op(LOGICAL)(x, y)
    assert_all_close(got, (np.logical_and(x, y), np.logical_or(x, y)))


def test_logical_ops_on_ints():
    x = np.array([1, 2, 0, 3], np.int8)
    y = np.array([2, 1, 0, 0], np.int8)
    got = binary_op(LOGICAL)(x, y)
    assert_all_close(got, (np.logical_and(x, y), np.logical_or(x, y)))


def test_logical_ops_on_floats():
    x = np.array([0.0, 0.5, 2.0, np.nan], np.float32)
    y = np.array([1.0, 0.0, 3.0, 0.0], np.float32)
    got = binary_op(LOGICAL)(x, y)
    assert_all_close(got, (np.logical_and(x, y), np.logical_or(x, y)))


# =============================================================================================
# Python scalars and scalar attributes (weak operands), fg.where, astype
# =============================================================================================
@fg.op
def scalar_mix(x, *, f: float = 0.5, i: int = 3):
    return (x + 1, 2.5 * x, x - i, x * f, f - x, x / 2, x > f, i * x, x ** 2, fg.maximum(x, 1),
            fg.where(x > 1, x, 0))


def scalar_mix_ref(x, f, i):
    return (x + 1, 2.5 * x, x - i, x * f, f - x, x / 2, x > f, i * x, x ** 2, np.maximum(x, 1),
            np.where(x > 1, x, 0))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "float16", "float32"])
def test_python_scalars_and_scalar_attributes(dtype, rng):
    x = sample(rng, (2, 3), dtype, lo=-4, hi=5)
    for f, i in ((0.5, 3), (1.25, 2)):  # defaults, then other values (same compiled code)
        got = scalar_mix(x, f=f, i=i) if (f, i) != (0.5, 3) else scalar_mix(x)
        assert_all_close(got, np_ref(scalar_mix_ref, x, f, i), what=f"{dtype} f={f} i={i}")


@fg.op
def select_cast(c, x, y):
    return (fg.where(c, x, y), fg.where(x > y, x, 0.5), x.astype("int32"), fg.cast(y, "float16"),
            fg.where(c, 1, y), (x + y).astype(bool), fg.where(c, x, x))


def select_cast_ref(c, x, y):
    return (np.where(c, x, y), np.where(x > y, x, 0.5), x.astype("int32"), y.astype("float16"),
            np.where(c, 1, y), (x + y).astype(bool), np.where(c, x, x))


@pytest.mark.parametrize("dc, dx, dy", [("bool", "float32", "float32"), ("float32", "int16", "float16")])
def test_where_and_astype(dc, dx, dy, rng):
    c = sample(rng, (3, 4), dc, lo=-1, hi=1)
    x = sample(rng, (3, 4), dx, lo=-5, hi=5)
    y = sample(rng, (4,), dy, lo=-5, hi=5)
    assert_all_close(select_cast(c, x, y), np_ref(select_cast_ref, c, x, y), what=f"{dc},{dx},{dy}")


# =============================================================================================
# Reductions
# =============================================================================================
REDUCTIONS = [("sum", np.sum), ("mean", np.mean), ("prod", np.prod), ("max", np.max), ("min", np.min)]


@fg.op
def reduce_attr(x, *, axes: list[int] = (0,), keep: bool = False):
    """All five reductions over an attribute list of axes, keep_dims an attribute."""
    return tuple(getattr(fg, k)(x, axis=axes, keep_dims=keep) for k, _ in REDUCTIONS)


def reduce_ref(x, axis, keep, kinds=REDUCTIONS):
    ax = tuple(axis) if isinstance(axis, (list, tuple)) else axis
    return np_ref(lambda a: tuple(f(a, axis=ax, keepdims=keep) for _, f in kinds), x)


_REDUCE_OPS: dict = {}


def reduce_const(axis, keep, kinds=tuple(k for k, _ in REDUCTIONS)):
    """The five reductions with the axis and keep_dims written as constants in the op. The ops
    share one name, so ones that generate the same code share the compiled function."""
    key = (axis, keep, kinds)
    if key not in _REDUCE_OPS:
        _REDUCE_OPS[key] = fg.op(lambda x: tuple(getattr(fg, k)(x, axis=axis, keep_dims=keep) for k in kinds),
                                 name="reduce_table")
    return _REDUCE_OPS[key]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int8", "uint8", "bool"])
def test_reductions_dtypes_row_mode(dtype, rng):
    # axes (0, 2) of (3, 4, 5): an outer reduced dim (RO), the inner one in registers (row mode)
    x = sample(rng, (3, 4, 5), dtype, lo=-1.5, hi=1.5) if dtype[0] == "f" else sample(rng, (3, 4, 5), dtype)
    got = reduce_attr(x, axes=[0, 2])
    assert_all_close(got, reduce_ref(x, (0, 2), False), what=dtype)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
def test_reductions_dtypes_col_mode(dtype, rng):
    x = sample(rng, (3, 4, 5), dtype, lo=-1.5, hi=1.5) if dtype[0] == "f" else sample(rng, (3, 4, 5), dtype)
    assert_all_close(reduce_attr(x, axes=[0], keep=True), reduce_ref(x, (0,), True), what=dtype)


@pytest.mark.parametrize("axis, keep", [
    (1, False),                     # an int
    (-1, False), (-3, True),        # negative, keep_dims both ways
    ((2, 0), True), ((0, 1), False),  # tuples (any order); more as attributes below
    (None, False), (None, True),    # all axes
])
def test_reduction_axis_forms(axis, keep, rng):
    x = sample(rng, (2, 3, 4), "float32", lo=-1.5, hi=1.5)
    assert_all_close(reduce_const(axis, keep)(x), reduce_ref(x, axis, keep), what=f"axis={axis} keep={keep}")


@pytest.mark.parametrize("axes, keep", [([1], False), ([-1], True), ([0, 2], True), ([2, 1, 0], False)])
def test_reduction_axes_and_keep_dims_as_attributes(axes, keep, rng):
    x = sample(rng, (2, 3, 4), "float32", lo=-1.5, hi=1.5)
    assert_all_close(reduce_attr(x, axes=axes, keep=keep), reduce_ref(x, axes, keep), what=f"{axes} {keep}")


@pytest.mark.parametrize("shape, axis", [((), None), ((5,), 0), ((2, 3, 2, 3), (1, 3)), ((2, 3, 2, 3), None)])
def test_reductions_ranks_0_to_4(shape, axis, rng):
    x = sample(rng, shape, "float32", lo=-1.5, hi=1.5)
    assert_all_close(reduce_const(axis, False)(x), reduce_ref(x, axis, False), what=f"{shape} {axis}")


def test_reductions_over_size_1_dims(rng):
    x = sample(rng, (1, 4, 1), "float32", lo=-1.5, hi=1.5)
    for axis, keep in (((0, 2), False), ((0, 2), True), (1, False), (None, True)):
        assert_all_close(reduce_const(axis, keep)(x), reduce_ref(x, axis, keep), what=f"{axis} {keep}")


SUM_MEAN_PROD = ("sum", "mean", "prod")


@pytest.mark.parametrize("shape, axis, keep", [((3, 0), 1, False), ((0, 4), 1, True), ((2, 0, 3), None, False)])
def test_reductions_over_size_0_dims(shape, axis, keep):
    x = np.ones(shape, np.float32)
    got = reduce_const(axis, keep, SUM_MEAN_PROD)(x)
    kinds = [r for r in REDUCTIONS if r[0] in SUM_MEAN_PROD]
    assert_all_close(got, reduce_ref(x, axis, keep, kinds), what=f"{shape} {axis}")


@pytest.mark.parametrize("axis", [-1, 1])  # row mode, col mode (the kernels of test_reduction_axis_forms)
def test_nan_propagates_through_max_and_min(axis):
    x = np.arange(40, dtype=np.float32).reshape(2, 4, 5) - 7
    x[0, 0, 0] = np.nan   # first element
    x[1, 1, 2] = np.nan   # middle
    x[1, 3, 4] = np.nan   # last
    got = reduce_const(axis, False)(x)
    want = reduce_ref(x, axis, False)
    assert_all_close(got, want)
    assert np.isnan(got[3]).sum() == np.isnan(want[3]).sum() >= 3  # really NaN, not skipped


def test_nan_propagates_through_maximum_minimum_and_relu():
    x = np.array([np.nan, 1.0, -1.0, np.nan], np.float32).reshape(4, 1)
    y = np.array([0.0, np.nan, 2.0, -3.0, np.nan], np.float32).reshape(1, 5)
    got = binary_op([r for r in BINARY if r[0] in ("maximum", "minimum")])(x, y)
    assert_all_close(got, (np.maximum(x, y), np.minimum(x, y)))
    assert np.isnan(got[0]).sum() == np.isnan(got[1]).sum() == 14  # rows 0 and 3, columns 1 and 4
    relu = fg.op(lambda x: fg.relu(x), name="relu_only")(np.array([np.nan, -1.0, 2.0], np.float32))
    assert np.isnan(relu[0]) and relu[1] == 0.0 and relu[2] == 2.0


def test_value_compared_with_its_own_reduction():
    @fg.op
    def at_max(x):
        a = x + x * 0.3
        return fg.where(fg.max(a, axis=-1, keep_dims=True) <= a, 1.0, 0.0), x * 0.3

    x = np.random.default_rng(0).uniform(-2, 2, (3000, 5))
    mask, _ = at_max(x)
    a = x + x * 0.3
    assert int((mask.sum(axis=1) == 0).sum()) == 0   # every row has an element equal to its max
    assert_close(mask, np.where(np.max(a, axis=-1, keepdims=True) <= a, 1.0, 0.0))


def test_reduction_with_empty_axes_list_is_the_identity_reduction(rng):
    x = sample(rng, (2, 3), "float32", lo=-1.5, hi=1.5)
    assert_all_close(reduce_attr(x, axes=[]), reduce_ref(x, (), False))


# =============================================================================================
# Shapes: ranks 0-4, broadcasting, size-0/size-1 dims, non-contiguous inputs
# =============================================================================================
@fg.op
def bcast(x, y):
    return x * y - x, fg.maximum(x, y)


def bcast_ref(x, y):
    return x * y - x, np.maximum(x, y)


@pytest.mark.parametrize("sx, sy", [
    ((), ()),
    ((5,), ()),
    ((3, 1), (1, 4)),
    ((2, 3, 4), (4,)),          # rank-mismatched
    ((2, 1, 3, 1), (5, 1, 1)),  # rank 4 with 3, both broadcast
    ((2, 3, 4, 5), (2, 3, 4, 5)),
    ((0, 3), (3,)),             # size 0
    ((1, 1), (1,)),             # size 1
])
def test_broadcasting_ranks_and_sizes(sx, sy, rng):
    x, y = sample(rng, sx, "float32"), sample(rng, sy, "float32")
    got = bcast(x, y)
    assert_all_close(got, np_ref(bcast_ref, x, y), what=f"{sx} {sy}")
    assert got[0].shape == np.broadcast_shapes(sx, sy)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int16"])
def test_non_contiguous_inputs(dtype, rng):
    base = sample(rng, (6, 8), dtype)
    xt = base[:4, :6].T                      # transposed view (6, 4)
    ys = sample(rng, (12, 9), dtype)[::2, 1::2][:, :4]  # strided slice (6, 4)
    assert not xt.flags.c_contiguous and not ys.flags.c_contiguous
    x_before, y_before = xt.copy(), ys.copy()
    assert_all_close(bcast(xt, ys), np_ref(bcast_ref, xt, ys), what=dtype)
    np.testing.assert_array_equal(xt, x_before)  # inputs untouched
    np.testing.assert_array_equal(ys, y_before)


def test_non_contiguous_inputs_to_reductions(rng):
    x = sample(rng, (5, 3, 4), "float32")
    xt = np.transpose(x, (2, 0, 1))          # (4, 5, 3), not contiguous
    for axis in (0, 1, -1):
        assert_close(ex.softmax(xt, axis=axis), _softmax(xt, axis))
    neg = x[:, ::-1, :]                      # negative strides
    assert_close(ex.add_reduce_sum(neg, neg, axis=1), np.sum(neg + neg, axis=1))


@fg.op
def center_rows(x):
    return x - fg.mean(x, axis=1)      # no keep_dims: mean[j] is subtracted at (i, j)


@fg.op
def center_cols(x):
    return x - fg.mean(x, axis=0)


def test_unfusable_and_fusable_centering_on_a_square_input(rng):
    # the planner must not fuse the first (test_plan); both must equal NumPy's broadcasting
    x = sample(rng, (5, 5), "float64")
    assert_close(center_rows(x), x - np.mean(x, axis=1))
    assert_close(center_cols(x), x - np.mean(x, axis=0))


def test_several_outputs_including_an_input_and_a_repeated_node():
    @fg.op
    def passthrough(x, y):
        s = x + y
        return x, s, s, fg.sum(s, axis=0)

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.ones(3, np.float32)
    got = passthrough(x, y)
    assert_all_close(got, (x, x + y, x + y, np.sum(x + y, axis=0)))
    assert got[1] is not got[2] and got[0] is not x  # fresh arrays, never the caller's


# =============================================================================================
# The reference ops
# =============================================================================================
ARS_CASES = [(shape, axis, keep)
             for shape in [(5,), (3, 4), (2, 3, 4), (2, 3, 2, 3)]
             for axis in list(range(len(shape))) + [-1]
             for keep in (False, True)]


@pytest.mark.parametrize("shape, axis, keep", ARS_CASES)
def test_add_reduce_sum(shape, axis, keep, rng):
    x, y = sample(rng, shape, "float32"), sample(rng, shape, "float32")
    assert_close(ex.add_reduce_sum(x, y, axis=axis, keep_dims=keep),
                 np_ref(lambda a, b: np.sum(a + b, axis=axis, keepdims=keep), x, y))


@pytest.mark.parametrize("dtype", ["float16", "int8", "float64"])
def test_add_reduce_sum_dtypes(dtype, rng):
    # int8: x + y wraps around in int8 (as NumPy's does) before the int64 sum
    lo, hi = (-120, 120) if dtype == "int8" else (-3, 3)
    x, y = sample(rng, (3, 4), dtype, lo=lo, hi=hi), sample(rng, (3, 4), dtype, lo=lo, hi=hi)
    want = np_ref(lambda a, b: np.sum(a + b, axis=1), x, y)
    if dtype == "int8":
        assert (np.abs(x.astype(int) + y) > 127).any()  # the data really overflows
    assert_close(ex.add_reduce_sum(x, y), want)


@pytest.mark.parametrize("dx, dy, sy", [("float32", "float32", (3, 4)), ("int32", "int32", (4,)),
                                        ("float16", "float16", (1, 4)), ("int8", "float32", (3, 4))])
def test_add_mul_div(dx, dy, sy, rng):
    x = sample(rng, (3, 4), dx)
    y = sample(rng, sy, dy, lo=1, hi=4)
    assert_all_close(ex.add_mul_div(x, y), np_ref(lambda a, b: (a + b, a * b, a / b), x, y), what=f"{dx},{dy}")


def _smooth_l1(x, y, sigma):
    d = x - y
    s2 = sigma * sigma
    ad = np.abs(d)
    return np.where(ad < 1.0 / s2, 0.5 * s2 * d * d, ad - 0.5 / s2)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("sigma", [None, 0.5, 3])  # None: the default 1.0; 3: an int for a float attribute
def test_smooth_l1(dtype, sigma, rng):
    x, y = sample(rng, (4, 6), dtype), sample(rng, (4, 6), dtype)
    got = ex.smooth_l1(x, y) if sigma is None else ex.smooth_l1(x, y, sigma=sigma)
    assert_close(got, np_ref(_smooth_l1, x, y, float(sigma or 1.0)))


def _softmax(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_division_by_a_row_value_keeps_numpys_special_values(dtype):
    """``x / sum(y)`` runs as ``x * (1 / sum(y))`` (row and col mode, and an expression of the
    sum): NumPy's inf/NaN/signed-zero pattern for x/0, 0/0, inf/inf, x/inf, and within 2 ulp."""
    x, y = row_quotient_inputs(dtype)
    check_row_quotients(row_quotients(x, y), x, y)


def test_softmax_float32_error_in_ulp(rng):
    """Rows of 16 and 1000 float32 inputs against float64's softmax: the error is exp's (1 ulp),
    the float32 sum's (relative, common to the row: a few u on these rows, more on longer ones)
    and the multiply by the reciprocal's (2 ulp at most: the row-quotient test above). Measured
    2.6 and 4.2 ulp, the same as with the division, whose one rounding less hides under the sum's."""
    for n in (16, 1000):
        x = sample(rng, (64, n), "float32", lo=-8, hi=8)
        assert softmax_ulp_error(ex.softmax(x), x) <= 8.0


@pytest.mark.parametrize("shape, axis, dtype", [((2, 3, 4), a, "float32") for a in (0, 1, 2, -1, -3)]
                         + [((7,), 0, "float64"), ((3, 5), 0, "float16")])
def test_softmax_every_axis(shape, axis, dtype, rng):
    x = sample(rng, shape, dtype, lo=-4, hi=4)
    got = ex.softmax(x, axis=axis)
    assert_close(got, np_ref(_softmax, x, axis))
    np.testing.assert_allclose(got.astype(np.float64).sum(axis=axis), 1.0, rtol=5e-3)


def _layer_norm(x, axis, eps):
    mean = np.mean(x, axis=axis, keepdims=True)
    d = x - mean
    var = np.mean(d * d, axis=axis, keepdims=True)
    rstd = 1.0 / np.sqrt(var + eps)
    return d * rstd, mean, rstd


@pytest.mark.parametrize("shape, axis, dtype", [((3, 4, 5), a, "float32") for a in (0, 1, 2, -2)]
                         + [((6, 8), -1, "float64"), ((4, 8), -1, "float16")])
def test_layer_norm_every_axis(shape, axis, dtype, rng):
    x = sample(rng, shape, dtype, lo=-2, hi=3)
    assert_all_close(ex.layer_norm(x, axis=axis), np_ref(_layer_norm, x, axis, 1e-5), what=f"axis={axis}")
    got = ex.layer_norm(x, axis=axis, eps=0.5)  # another eps: same compiled code, other values
    assert_all_close(got, np_ref(_layer_norm, x, axis, 0.5), what=f"axis={axis} eps=0.5")


def test_layer_norm_one_pass_statistics_do_not_cancel(rng):
    """Row mode computes the mean and variance in one pass of sums shifted by a pivot from the
    row (fusegen.plan.moments). Rows whose mean is large next to their spread (1e4 + N(0, 1),
    1e5 + N(0, 1)) keep float32 accuracy, where E[x^2] - E[x]^2 would lose every digit (and the
    two-pass form lost 7e-5 of rstd at 1e5); an inf pivot and a NaN give NumPy's results."""
    x = rng.standard_normal((6, 1000))
    x[:3] += 1e4
    x[3:] += 1e5
    x = x.astype(np.float32)
    x[4, 0] = np.inf
    x[5, 500] = np.nan
    y, mean, rstd = ex.layer_norm(x, axis=-1)
    ry, rmean, rrstd = np_ref(_layer_norm, x, -1, 1e-5)
    np.testing.assert_allclose(rmean[:4], mean[:4], rtol=2e-7)
    np.testing.assert_allclose(rrstd[:4], rstd[:4], rtol=2e-6)
    np.testing.assert_allclose(ry[:4], y[:4], atol=2e-2)   # (x - mean) itself rounds to x's ulp
    assert np.isposinf(mean[4, 0]) and np.isnan(rstd[4, 0]) and np.isnan(y[4]).all()
    assert np.isnan(mean[5, 0]) and np.isnan(rstd[5, 0]) and np.isnan(y[5]).all()


def _rms_norm(x, w, eps):
    ms = np.mean(x * x, axis=-1, keepdims=True)
    return x * (1.0 / np.sqrt(ms + eps)) * w


@pytest.mark.parametrize("sx, dtype", [((4, 8), "float32"), ((2, 3, 8), "float32"), ((4, 8), "float64")])
def test_rms_norm(sx, dtype, rng):
    x, w = sample(rng, sx, dtype), sample(rng, (sx[-1],), dtype)
    assert_close(ex.rms_norm(x, w), np_ref(_rms_norm, x, w, 1e-6))
    assert_close(ex.rms_norm(x, w, eps=0.25), np_ref(_rms_norm, x, w, 0.25))


def _bias_gelu(x, b):
    h = x + b
    return 0.5 * h * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h * h * h)))


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_bias_gelu(dtype, rng):
    x, b = sample(rng, (4, 8), dtype), sample(rng, (8,), dtype)
    assert_close(ex.bias_gelu(x, b), np_ref(_bias_gelu, x, b))


# =============================================================================================
# Large inputs: the parallel (prange) kernels
# =============================================================================================
LARGE = (runtime.PARALLEL_THRESHOLD // 256 + 8, 256)  # just above the threshold


def test_large_add_reduce_sum_row_and_col_mode(rng):
    x, y = sample(rng, LARGE, "float32"), sample(rng, LARGE, "float32")
    for axis in (1, 0):
        assert_close(ex.add_reduce_sum(x, y, axis=axis), np_ref(lambda a, b: np.sum(a + b, axis=axis), x, y),
                     rtol=1e-4, atol=1e-4)


def test_large_softmax(rng):
    x = sample(rng, LARGE, "float32")
    assert_close(ex.softmax(x), np_ref(_softmax, x, -1))
