"""NumPy's names and small NumPy functions (``fusegen.graph.numpy_names``) against NumPy itself:
values, dtypes and shapes, NaN and integer inputs, Python scalars on either side."""
from __future__ import annotations

import numpy as np
import pytest

import fusegen as fg
from table_ops import RUNS, check_table

rng = np.random.default_rng(0)
x = rng.standard_normal((3, 4)).astype(np.float32); x[0, 1] = np.nan; x[1, 1] = 0.0
xa = np.array([[np.nan, np.nan], [1.0, np.nan]], np.float32)
i8 = rng.integers(-5, 5, (3, 4)).astype(np.int8)
v = rng.standard_normal(4); w = rng.standard_normal(5)
sq = rng.standard_normal((4, 4))
cases = [
 ("concatenate", lambda m, a, b: m.concatenate([a, b], axis=1), [x, x]),
 ("concatenate None", lambda m, a, b: m.concatenate([a, b], axis=None), [x, i8]),
 ("transpose", lambda m, a: m.transpose(a), [rng.standard_normal((2, 3, 4))]),
 ("transpose axes", lambda m, a: m.transpose(a, (1, 0, 2)), [rng.standard_normal((2, 3, 4))]),
 ("ravel F", lambda m, a: m.ravel(a, order="F"), [sq]),
 ("cumsum", lambda m, a: m.cumsum(a), [i8]), ("cumsum ax", lambda m, a: m.cumsum(a, axis=1, dtype=np.float64), [i8]),
 ("cumprod", lambda m, a: m.cumprod(a, 0), [sq]),
 ("amax", lambda m, a: m.amax(a, axis=0, keepdims=True), [sq]), ("amin", lambda m, a: m.amin(a), [i8]),
 ("ptp", lambda m, a: m.ptp(a, axis=1), [i8]),
 ("nansum", lambda m, a: m.nansum(a, axis=1), [x]), ("nanmax", lambda m, a: m.nanmax(a, axis=1), [xa]),
 ("nanmin", lambda m, a: m.nanmin(a), [x]), ("nanmax int", lambda m, a: m.nanmax(a, axis=0), [i8]),
 ("nanmean", lambda m, a: m.nanmean(a, axis=1), [x]), ("nanmean int", lambda m, a: m.nanmean(a), [i8]),
 ("nanmean allnan", lambda m, a: m.nanmean(a, axis=1), [xa]),
 ("trace", lambda m, a: m.trace(a), [sq]), ("trace off", lambda m, a: m.trace(a, offset=1), [sq]),
 ("trace int", lambda m, a: m.trace(a, offset=-1), [i8]),
 ("dot 2d", lambda m, a, b: m.dot(a, b), [sq, sq]), ("dot 1d", lambda m, a, b: m.dot(a, b), [v, v]),
 ("dot nd1", lambda m, a, b: m.dot(a, b), [rng.standard_normal((2, 3, 4)), v]),
 ("dot ndmd", lambda m, a, b: m.dot(a, b), [rng.standard_normal((2, 3, 4)), rng.standard_normal((5, 4, 2))]),
 ("inner", lambda m, a, b: m.inner(a, b), [sq, rng.standard_normal((3, 4))]), ("vdot", lambda m, a, b: m.vdot(a, b), [sq, sq]),
 ("outer", lambda m, a, b: m.outer(a, b), [v, w]),
 ("isclose", lambda m, a, b: m.isclose(a, b), [x, x + 1e-6]), ("isclose s", lambda m, a: m.isclose(a, 0.1), [x]),
 ("isclose nan", lambda m, a, b: m.isclose(a, b, equal_nan=True), [x, x]),
 ("allclose", lambda m, a, b: m.allclose(a, b, atol=1e-3), [sq, sq + 1e-4]),
 ("fmax", lambda m, a, b: m.fmax(a, b), [x, x.T[:3, :4] if False else np.flip(x)]), ("fmin", lambda m, a: m.fmin(a, 0.5), [x]),
 ("heaviside", lambda m, a: m.heaviside(a, 0.5), [x]), ("heaviside int", lambda m, a, b: m.heaviside(a, b), [i8, i8]),
 ("deg2rad", lambda m, a: m.deg2rad(a), [x]), ("deg2rad int", lambda m, a: m.deg2rad(a), [i8]),
 ("rad2deg", lambda m, a: m.degrees(a), [sq]), ("exp2", lambda m, a: m.exp2(a), [x]), ("exp2 int", lambda m, a: m.exp2(a), [i8]),
 ("float_power", lambda m, a: m.float_power(a, 2), [x]), ("sinc", lambda m, a: m.sinc(a), [x]), ("sinc int", lambda m, a: m.sinc(a), [i8]),
 ("fix", lambda m, a: m.fix(a), [x * 3]), ("fix int", lambda m, a: m.fix(a), [i8]),
 ("select", lambda m, a: m.select([a < 0, a > 1], [a, a * 2], 7.0), [x]),
 ("hstack", lambda m, a, b: m.hstack([a, b]), [v, w]), ("hstack2", lambda m, a, b: m.hstack([a, b]), [sq, sq]),
 ("vstack", lambda m, a, b: m.vstack([a, b]), [v, v]), ("fliplr", lambda m, a: m.fliplr(a), [sq]), ("flipud", lambda m, a: m.flipud(a), [v]),
 ("identity", lambda m, a: m.identity(4) + a, [sq]), ("logspace", lambda m, a: m.logspace(0, 2, 4) + a, [v]),
 ("absolute/mod/true_divide", lambda m, a, b: m.absolute(a) + m.mod(a, 3) + m.true_divide(a, b), [i8, i8 + 7]),
]


#: The default run's share (the whole table: ``-m extended``, on Numba and the emitted C++).
QUICK = {"concatenate None", "cumsum", "nanmax", "trace off", "dot ndmd", "isclose s", "fmax", "heaviside int",
         "select", "hstack"}


@pytest.mark.parametrize("backend, quick", RUNS)
def test_numpy_names_against_numpy(backend, quick):
    check_table(cases, QUICK, backend, quick, 'numpy_names', np, rtol=2e-6, atol=1e-6)


def test_numpy_names_refuse_what_has_no_meaning_in_an_op():
    with pytest.raises(fg.TraceError, match=r"op amax_initial: amax\(initial=...\) has no meaning inside a traced op"):
        fg.op(lambda a: fg.amax(a, initial=0.0), name="amax_initial")
    with pytest.raises(fg.TraceError, match=r"select: list of cases must be same length"):
        fg.op(lambda a: fg.select([a > 0], [a, a]), name="select_lengths")
    with pytest.raises(fg.TraceError, match=r"fliplr: the input must be at least 2-D"):
        fg.compile(fg.op(lambda a: fg.fliplr(a), name="fliplr_1d"))(np.ones(3))
