"""fg.random inside fused ops on numba-cuda (one Philox block per element): the op of
tests/test_random_ops.py with every kind, views, broadcasting, a tensor seed and reductions,
bit for bit against ``fg.random.reference`` (normal within 2 ulp), and the dropout example.
Under the simulator (``NUMBA_ENABLE_CUDASIM=1``) or on a GPU."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import fusegen as fg
import fusegen.examples as ex

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import test_random_ops as T  # noqa: E402  (the op, its cases and the comparison)

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore:.*Grid size.*",
                                        "ignore::numba.core.errors.NumbaPerformanceWarning")


def test_numba_cuda_equals_the_reference_through_views_and_reductions():
    T.run_many(fg.compile(T.many, device="cuda"), "numba-cuda")


def test_dropout_add_layer_norm_on_cuda():
    rng = np.random.default_rng(1)
    x, r = rng.standard_normal((3, 20), np.float32), rng.standard_normal((3, 20), np.float32)
    gamma, beta = rng.random(20, np.float32) + 0.5, rng.standard_normal(20, np.float32)
    y, h = fg.compile(ex.dropout_add_layer_norm, device="cuda")(x, r, gamma, beta, p=0.2, seed=5)
    y_ref, h_ref = T.dropout_add_layer_norm_ref(x, r, gamma, beta, 0.2, 5)
    assert np.array_equal(h, h_ref)
    np.testing.assert_allclose(y, y_ref, rtol=2e-5, atol=2e-5)


def test_a_seed_changed_per_call_on_cuda():
    # (a new seed reuses the signature's launches: rt.kernel's rebind, with the new values)
    rng = np.random.default_rng(2)
    x, r = rng.standard_normal((3, 20), np.float32), rng.standard_normal((3, 20), np.float32)
    gamma, beta = np.ones(20, np.float32), np.zeros(20, np.float32)
    k = fg.compile(ex.dropout_add_layer_norm, device="cuda")
    for seed in (5, 6, 7, 5):
        _, h = k(x, r, gamma, beta, p=0.2, seed=seed)
        assert np.array_equal(h, T.dropout_add_layer_norm_ref(x, r, gamma, beta, 0.2, seed)[1])
