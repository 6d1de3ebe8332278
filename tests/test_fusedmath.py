"""Chains of transcendentals computed as one float32-lane function (fusegen/plan/fusedmath.py):
mish's tanh(softplus(x)) and softplus(x) itself in any of softplus's usual spellings, and the tanh
GELU's 1 + tanh(u) as 2 sigmoid(2u); their values, special cases and accuracy on the CPU backends."""
from __future__ import annotations

import numpy as np
import pytest

import fusegen as fg

_C = 0.7978845608028654


@fg.op
def spellings(x):
    """mish with softplus spelled five ways, and the tanh GELU's factor both ways round."""
    relu_form = x * fg.tanh(fg.maximum(x, 0.0) + fg.log1p(fg.exp(-abs(x))))
    swapped = x * fg.tanh(fg.log1p(fg.exp(-fg.abs(x))) + fg.maximum(0.0, x))
    naive = x * fg.tanh(fg.log1p(fg.exp(x)))
    logs = x * fg.tanh(fg.log(1.0 + fg.exp(x)))
    lae = x * fg.tanh(fg.logaddexp(x, 0.0))
    gelu = 0.5 * x * (1.0 + fg.tanh(_C * (x + 0.044715 * x ** 3)))
    gelu_swapped = 0.5 * x * (fg.tanh(_C * (x + 0.044715 * x * x * x)) + 1.0)
    return relu_form, swapped, naive, logs, lae, gelu, gelu_swapped


@fg.op
def softplus_spellings(x):
    """softplus spelled five ways, each on its own (not under a tanh)."""
    return (fg.maximum(x, 0.0) + fg.log1p(fg.exp(-abs(x))), fg.log1p(fg.exp(-fg.abs(x))) + fg.relu(x),
            fg.log1p(fg.exp(x)), fg.log(1.0 + fg.exp(x)), fg.logaddexp(x, 0.0))


@fg.op
def not_softplus(x):
    """Near misses the peephole must leave alone: exp(-|y|) of another y, log1p(exp(x)) + 1."""
    y = x + 1.0
    return fg.tanh(fg.maximum(x, 0.0) + fg.log1p(fg.exp(-abs(y)))), fg.tanh(fg.log1p(fg.exp(x)) + 1.0), \
        2.0 + fg.tanh(x)


def _inputs() -> np.ndarray:
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.uniform(-30.0, 12.0, 4000), rng.uniform(-3.0, 3.0, 4000), np.linspace(8.9, 9.2, 64),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, -87.5, -104.0, -200.0, 200.0]])
    return x.astype(np.float32)


def _references(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(all="ignore"):
        d = x.astype(np.float64)
        mish = d * np.tanh(np.logaddexp(d, 0.0))
        gelu = 0.5 * d * 2.0 / (1.0 + np.exp(-2.0 * _C * (d + 0.044715 * d ** 3)))
    return mish, gelu


def test_the_emitted_cpp_calls_one_function_per_chain():
    src = fg.emit(spellings, dtypes=["float32"]).source
    stages = src[src.index("namespace k_float32"):]
    assert stages.count("fg::tanh_softplus_f32(") == 5, "a spelling of softplus was not recognized"
    assert "fg::log1p_f32(" not in stages and "fg::tanh_f32(" not in stages
    assert stages.count("fg::sigmoid_f32(") == 2
    soft = fg.emit(softplus_spellings, dtypes=["float32"]).source
    soft = soft[soft.index("namespace k_float32"):]
    assert soft.count("fg::softplus_f32(") == 5, "a spelling of softplus was not recognized"
    assert "fg::log1p_f32(" not in soft and "fg::log_f32(" not in soft and "fg::exp_f32(" not in soft
    near = fg.emit(not_softplus, dtypes=["float32"]).source
    near = near[near.index("namespace k_float32"):]
    assert "tanh_softplus" not in near and "sigmoid" not in near and near.count("fg::tanh_f32(") == 3


@pytest.mark.parametrize("backend", ["numba", "aot"])
def test_values_special_cases_and_agreement(backend):
    x = _inputs()
    got = fg.compile(spellings, backend=backend)(x)
    mish, gelu = _references(x)
    fin = np.isfinite(mish)
    for out in got[:5]:
        o = np.asarray(out, np.float64)
        # x * t with t within 1 ulp: within 2 ulp of the float64 result (subnormal results aside)
        big = fin & (np.abs(mish) > 1e-37)
        assert np.all(np.abs(o[big] - mish[big]) <= 2.5 * np.spacing(np.abs(mish[big]).astype(np.float32))), backend
        assert np.array_equal(out[~fin], mish[~fin].astype(np.float32), equal_nan=True)   # +-inf, NaN
        assert np.array_equal(out.view(np.int32), got[0].view(np.int32))   # one function, whatever the spelling
    s = {float(v): i for i, v in enumerate(x) if not np.isnan(v)}
    assert got[0][s[np.inf]] == np.inf and np.isnan(got[0][s[-np.inf]]) and np.signbit(got[0][s[-0.0]])
    for out in got[5:]:   # 2 sigmoid(2u): no cancellation where 1 + tanh(u) had it
        fin_g = np.isfinite(gelu) & (np.abs(gelu) > 1e-30)
        rel = np.abs(np.asarray(out, np.float64)[fin_g] - gelu[fin_g]) / np.abs(gelu[fin_g])
        assert rel.max() < 3e-4, rel.max()   # the float32 polynomial inside tanh's argument, not the tanh
        assert out[s[np.inf]] == np.inf and np.isnan(out[s[-np.inf]]) and out[s[0.0]] == 0.0   # as the composition


def test_softplus_spellings_give_one_function_within_one_ulp():
    x = _inputs()
    got = fg.compile(softplus_spellings)(x)
    with np.errstate(all="ignore"):
        want = np.logaddexp(x.astype(np.float64), 0.0)
    w32 = want.astype(np.float32)
    for out in got:
        assert np.array_equal(out.view(np.int32), got[0].view(np.int32))   # one function, whatever the spelling
    ok = np.abs(got[0].view(np.int32).astype(np.int64) - w32.view(np.int32).astype(np.int64)) <= 1
    assert np.all(ok | (np.isnan(got[0]) & np.isnan(want)))
    s = {float(v): i for i, v in enumerate(x) if not np.isnan(v)}
    # +inf and overflowing exp(x): x (as the float64 composition; float32 log1p(exp(x)) says inf); -inf: +0
    assert got[0][s[np.inf]] == np.inf and got[0][s[200.0]] == 200.0 and got[0][s[-np.inf]] == 0.0
    assert not np.signbit(got[0][s[-np.inf]]) and got[0][s[-0.0]] == np.float32(np.log(2.0))


def test_numba_and_cpp_give_the_same_bits():
    x = _inputs()
    a, c = fg.compile(spellings)(x), fg.compile(spellings, backend="aot")(x)
    for i in range(5):   # (the GELU's own arithmetic may be contracted into fmas by g++: not compared)
        assert np.array_equal(a[i].view(np.int32), c[i].view(np.int32))
    a, c = fg.compile(softplus_spellings)(x), fg.compile(softplus_spellings, backend="aot")(x)
    for i in range(5):
        assert np.array_equal(a[i].view(np.int32), c[i].view(np.int32))


@pytest.mark.parametrize("name", ["tanh_softplus", "softplus"])
def test_fused_function_is_within_one_ulp(name):
    import numba

    from fusegen import vmath_lanes

    f = getattr(vmath_lanes, f"{name}_f32")

    @numba.njit
    def run(x, out):
        for i in range(x.size):
            out[i] = f(x[i])

    x = np.arange(0, 2 ** 32, 4099, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = x[np.isfinite(x)]
    out = np.empty_like(x)
    run(x, out)
    want = np.logaddexp(x.astype(np.float64), 0.0)
    want = np.tanh(want) if name == "tanh_softplus" else want
    w32 = want.astype(np.float32)
    lo, hi = np.nextafter(w32, np.float32(-1)), np.nextafter(w32, np.float32(np.inf))
    assert np.all((out >= np.minimum(lo, hi)) & (out <= np.maximum(lo, hi)))
