"""The JAX engine of logcumsumexp (`xpops._cumulative._jax`): both of its inclusive scans (the
one the CPU runs and the one other devices run, called directly here), its exclusive shift and
its real pull-back, against the float64 references (`_reference`) and the brute-force double
sum of the gradient (`_gradients`), special values included. The public function on JAX
arrays, under jit, grad and vmap, is tested in ``tests/test_jax.py`` and by the contract tests.
"""

import functools
import itertools

import numpy as np
import pytest
from hypothesis import given, settings

from .._support import to_numpy
from ._gradients import brute_force_vjp
from ._reference import assert_scan_close, assert_single_terms_exact, reference, scan_cases

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from xpops._cumulative import _jax as engine  # noqa: E402  (after JAX is known to exist)

pytestmark = pytest.mark.usefixtures("jax_only")  # skipped when XPOPS_BACKEND names another

nan, inf = np.nan, np.inf
FLAGS = list(itertools.product([False, True], repeat=2))  # (exclusive, reverse)
INCLUSIVE = [engine.tree_scan, engine.native_scan]
POOL = [-inf, inf, nan, 0.0, 1.0, -3.0, 700.0, -700.0, 5.0, 1e-20]


@pytest.fixture(autouse=True, scope="module")
def _x64():
    jax.config.update("jax_enable_x64", True)


# Compiled as one program each (JAX otherwise compiles every operation for every new shape)
_STATIC = ("axis", "exclusive", "reverse", "inclusive")
_compiled_scan = jax.jit(engine.scan, static_argnames=_STATIC)


def _scan(x, axis, exclusive, reverse, inclusive):
    return to_numpy(_compiled_scan(jnp.asarray(x), axis, exclusive, reverse, inclusive=inclusive))


@pytest.mark.parametrize("inclusive", INCLUSIVE)
@pytest.mark.parametrize(("exclusive", "reverse"), FLAGS)
def test_forward_scans_special_values(inclusive, exclusive, reverse):
    rng = np.random.default_rng(1)
    for n in range(1, 8):
        for _ in range(12):
            x = rng.choice(POOL, n)
            got = _scan(x, 0, exclusive, reverse, inclusive)
            assert_scan_close(got, reference(x, 0, exclusive, reverse), 1e-12)


@pytest.mark.parametrize("inclusive", INCLUSIVE)
@pytest.mark.parametrize(("exclusive", "reverse"), FLAGS)
def test_forward_scans_every_axis_and_single_terms(inclusive, exclusive, reverse):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 6, 7)) * 10
    x[rng.random(x.shape) < 0.5] = -inf  # lanes of single finite terms among -inf
    for axis in range(3):
        got = _scan(x, axis, exclusive, reverse, inclusive)
        assert_scan_close(got, reference(x, axis, exclusive, reverse), 1e-12)
        assert_single_terms_exact(got, x, axis, exclusive, reverse)
    x32 = x.astype(np.float32)
    got = _scan(x32, 1, exclusive, reverse, inclusive)
    assert got.dtype == np.float32
    assert_scan_close(got, reference(x32, 1, exclusive, reverse), 2e-5)


@pytest.mark.parametrize("inclusive", INCLUSIVE)
def test_forward_scans_long_float32(inclusive):
    x = np.random.default_rng(3).normal(0, 10, 2**16).astype(np.float32)
    got = _scan(x, 0, False, False, inclusive).astype(np.float64)
    np.testing.assert_allclose(got, reference(x.astype(np.float64)), rtol=0, atol=2e-4)


@functools.partial(jax.jit, static_argnames=_STATIC[:3])
def _compiled_pullback(x, g, axis, exclusive, reverse):
    y = engine.scan(x, axis, exclusive, reverse, inclusive=engine.tree_scan)
    return engine.real_pullback(x, y, g, axis, exclusive, not reverse)


def _pullback(x, g, axis, exclusive, reverse):
    """The engine's pull-back at `x`, `g` (its scan's result as the rule saves it)."""
    return to_numpy(_compiled_pullback(jnp.asarray(x), jnp.asarray(g), axis, exclusive, reverse))


def _assert_brute_force(x, g, axis, exclusive, reverse, rel=1e-12):
    got = _pullback(x, g, axis, exclusive, reverse)
    want, scale = brute_force_vjp(x, g, axis, exclusive, reverse)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert (np.abs(got - want)[ok] <= rel * scale[ok] + 1e-300).all()


@pytest.mark.parametrize(("exclusive", "reverse"), FLAGS)
def test_pullback_special_values(exclusive, reverse):
    """Outputs of -inf take no part, +inf outputs weigh 0, NaN outputs spread NaN unless
    their cotangent is 0, inputs of NaN and +inf get NaN; cotangents of both signs, zeros and
    NaN."""
    rng = np.random.default_rng(4)
    for n in range(1, 8):
        for trial in range(30):
            x = rng.choice(POOL, n)
            g = rng.standard_normal(n)
            g[rng.random(n) < 0.3] = 0.0
            if trial % 5 == 0:
                g[rng.integers(n)] = nan
            _assert_brute_force(x, g, 0, exclusive, reverse)


@pytest.mark.parametrize(("exclusive", "reverse"), FLAGS)
def test_pullback_every_axis_and_large_magnitudes(exclusive, reverse):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 5, 6)) * 300  # terms near +-700 and beyond, no overflow
    g = rng.standard_normal((4, 5, 6))
    for axis in range(3):
        got = _pullback(x, g, axis, exclusive, reverse)
        assert np.isfinite(got).all()
        _assert_brute_force(x, g, axis, exclusive, reverse)


@pytest.mark.slow  # compiling the scans of 2^11 terms: seconds
def test_pullback_long_float32_against_float64():
    """2^11 float32 terms: the recurrence's products of links stay within float32 rounding
    of the sum of the terms' magnitudes."""
    rng = np.random.default_rng(6)
    x = rng.normal(0, 3, 2**11)
    g = rng.standard_normal(2**11)
    for exclusive, reverse in [(True, True)]:  # each flag compiles anew
        x32, g32 = x.astype(np.float32), g.astype(np.float32)
        got = _pullback(x32, g32, 0, exclusive, reverse).astype(np.float64)
        want, scale = brute_force_vjp(x32.astype(np.float64), g32, None, exclusive, reverse)
        assert (np.abs(got - want) <= 1e-4 * scale + 1e-30).all()


@settings(max_examples=25, deadline=None)
@given(scan_cases(max_size=6))
def test_pullback_property(case):
    x, axis, exclusive, reverse = case
    if x.ndim == 0 or x.size == 0:
        return
    axis = 0 if axis is None else axis % x.ndim
    g = np.random.default_rng(x.size).standard_normal(x.shape)
    _assert_brute_force(x, g, axis, exclusive, reverse, rel=1e-11)


def test_zero_size_and_complex():
    empty = jnp.zeros((3, 0))
    assert engine.logcumsumexp(empty, 1, True, False).shape == (3, 0)
    assert engine.real_pullback(empty, empty, empty, 1, False, False).shape == (3, 0)
    # complex inputs take the log-depth scan: -inf real parts are the identity
    z = np.array([complex(-inf, 5.0), 1 + 1j, 2 - 1j])
    got = to_numpy(engine.logcumsumexp(jnp.asarray(z), 0, False, False))
    assert_scan_close(got, reference(z), 1e-12)
