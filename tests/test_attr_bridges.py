"""Attribute values through the bridges (a hunt's findings): JAX's statics and PyTorch's
signatures tell -0.0 from 0.0, take 0-d arrays as their scalars, refuse what a call on arrays
refuses (with fusegen's AttrError, naming the op) and hold no memory per value; and attribute
names that are C++ keywords or the generated code's own names build (AOT, XLA)."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import fusegen as fg
from _optional import needs, needs_gxx, needs_jax


@fg.op
def scale(x, *, alpha: float = 1.0):
    return x * alpha


@fg.op
def pick(x, *, flag: bool = False, k: int = 0, axes: list[int] = (0,)):
    return fg.sum(fg.where(flag, x + k, -x), axis=axes)


@fg.op
def named(x, *, a: float = 1.0, o: int = 1, new: float = 2.0, default: int = 1, kDtypes: bool = False,
          errno: int = 0):
    return fg.where(kDtypes, x, x * a * new + o + default + errno)


@fg.op
def keyword_axis(x, *, auto: bool = False, int: int = 0):   # noqa: A002 - a user's names
    return fg.sum(x * int, axis=0, keepdims=auto)


X = np.ones(3, np.float32)


@needs_jax
def test_jax_statics_tell_minus_zero_and_take_0d_arrays():
    f = fg.jax.function(scale)
    for v in (np.float64(0.0), np.float64(-0.0), np.float32(-0.0), 0.0, -0.0, np.array(-0.0), np.array(0.5)):
        np.testing.assert_array_equal(np.asarray(f(X, alpha=v)), scale(X, alpha=v))
        assert np.signbit(np.asarray(f(X, alpha=v))[0]) == np.signbit(float(v))
    with pytest.raises(fg.AttrError, match="op scale: attribute 'alpha'"):
        f(X, alpha=np.array([3.0]))
    with pytest.raises(fg.AttrError, match="does not fit in int64"):
        fg.jax.function(pick)(X, k=2 ** 63)


@needs_jax
def test_jax_calls_that_omit_a_float_attribute_take_the_fast_path():
    # the fast path's key and the key the slow path files a value set under are one expression:
    # they once differed for an omitted float attribute, and every such call traced anew
    f = fg.jax.function(scale)
    for _ in range(5):
        np.testing.assert_array_equal(np.asarray(f(X)), X)
        np.testing.assert_array_equal(np.asarray(f(X, alpha=-0.0)), X * -0.0)
    assert f._attr_sets == 2


@needs("torch")
def test_torch_refuses_what_a_call_on_arrays_refuses_and_tells_minus_zero():
    torch = importlib.import_module("torch")
    f = fg.torch.function(scale)
    t = torch.ones(3)
    assert not torch.signbit(f(t, alpha=0.0)).any() and torch.signbit(f(t, alpha=-0.0)).all()
    assert torch.signbit(f(t, alpha=np.array(-0.0))).all()
    p = fg.torch.function(pick)
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    np.testing.assert_array_equal(p(x, flag=True, k=np.int64(2), axes=[1]).numpy(),
                                  pick(x.numpy(), flag=True, k=2, axes=[1]))
    for bad, why in ((dict(flag=1), "expected bool"), (dict(k=np.True_), "expected int"),
                     (dict(axes=[True]), "expected list"), (dict(k=2 ** 63), "does not fit"),
                     (dict(k=torch.tensor(3)), "expected int"), (dict(alpha=1.0), "unknown attribute")):
        with pytest.raises(fg.AttrError, match=f"op pick: .*{why}"):
            p(x, **bad)


@needs("torch")
def test_torch_signatures_are_bounded():
    torch = importlib.import_module("torch")
    f = fg.torch.function(scale)
    t = torch.ones(3)
    for v in range(300):
        assert f(t, alpha=float(v))[0] == v
    assert len(f._sigs) <= fg.rt.call.MAX_SIGNATURES


@needs_gxx
def test_attribute_names_the_generated_cpp_uses_or_reserves():
    want = named(X, a=2.0, new=3.0, o=4, default=5, errno=1)
    np.testing.assert_array_equal(fg.compile(named, backend="aot")(X, a=2.0, new=3.0, o=4, default=5, errno=1), want)
    m = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(fg.compile(keyword_axis, backend="aot")(m, auto=True, int=3),
                                  keyword_axis(m, auto=True, int=3))
    assert "kDtypes" in fg.emit(named, abi="mindspore-aot").source


@needs_jax
def test_attribute_names_in_the_xla_handlers():
    want = named(X, a=2.0, new=3.0, o=4, default=5)
    for api in ("ffi", "legacy"):
        got = fg.jax.function(named, api=api)(X, a=2.0, new=3.0, o=4, default=5)
        np.testing.assert_array_equal(np.asarray(got), want)
