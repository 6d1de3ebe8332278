"""``fusegen.jax.function`` without ``dtypes=`` builds the combination a call brings (integer
labels, say) on its first call, as the Numba and AOT backends do; with ``dtypes=`` it keeps to
those and names the combination it refuses."""
from __future__ import annotations

import numpy as np
import pytest

import fusegen as fg
from fusegen import examples as ex

from _optional import needs

pytestmark = needs("jax", "g++")


def test_int_labels_without_dtypes_are_built_on_first_call():
    import jax
    f = fg.jax.function(ex.accuracy)
    rng = np.random.default_rng(0)
    z = rng.standard_normal((6, 5)).astype(np.float32)
    labels = rng.integers(0, 5, 6).astype(np.int32)
    want = fg.compile(ex.accuracy)(z, labels)
    np.testing.assert_allclose(np.asarray(f(z, labels)), want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(jax.jit(f)(z, labels)), want, rtol=1e-6)
    assert [c.dtypes for c in f.specializations] == [[("float32", "int32")]]   # one library, built once


def test_given_dtypes_are_kept_and_others_refused_by_name():
    f = fg.jax.function(ex.accuracy, dtypes="float32")
    z = np.ones((2, 3), np.float32)
    with pytest.raises(fg.DTypeError, match=r"op accuracy: .*got \('float32', 'int32'\)"):
        f(z, np.zeros(2, np.int32))
