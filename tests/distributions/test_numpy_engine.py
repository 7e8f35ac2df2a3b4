"""The NumPy engine of log_prob for one distribution at many points (`_numpy`): chunk edges,
event sizes on both sides of the engine's limit, non-finite and huge values, against SciPy's
logpdf in float64."""

import numpy as np
import pytest
import scipy.stats

from xpops.distributions import MultivariateNormal
from xpops.distributions import _numpy as engine


def _case(rng, d, n, dtype="float64"):
    g = rng.standard_normal((d, d))
    cov = g @ g.T / d + np.eye(d)
    loc = rng.standard_normal(d)
    value = rng.standard_normal((n, d)) * 1.5 + loc
    return loc, cov, value.astype(dtype)


def _rtol(dtype):
    return 2e-4 if dtype == "float32" else 1e-10


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("n", [1, 7, 8, 9, 64, 100])
def test_chunk_edges(monkeypatch, dtype, n):
    """Chunks of 8 points (D = 4): one partial chunk, exactly one, one and a bit, many."""
    monkeypatch.setattr(engine, "CHUNK", 8 * 4)
    rng = np.random.default_rng(n)
    loc, cov, value = _case(rng, 4, n, dtype)
    dist = MultivariateNormal(loc.astype(dtype), covariance_matrix=cov.astype(dtype))
    got = dist.log_prob(value)
    assert got.dtype == np.dtype(dtype)
    assert got.shape == (n,)
    want = scipy.stats.multivariate_normal(loc, cov).logpdf(value.astype(np.float64))
    np.testing.assert_allclose(got, np.atleast_1d(want), rtol=_rtol(dtype), atol=_rtol(dtype))


@pytest.mark.parametrize("d", [1, 2, 16, engine.MAX_D, engine.MAX_D + 1])
def test_event_sizes_and_value_shapes(d):
    """Several chunks at every D the engine takes (and the general code just above), values
    of any leading shape, a single point giving a 0-d array."""
    rng = np.random.default_rng(d)
    n = 3 * max(1, engine.CHUNK // d) + 5
    loc, cov, value = _case(rng, d, n)
    dist = MultivariateNormal(loc, covariance_matrix=cov)
    ref = scipy.stats.multivariate_normal(loc, cov)
    assert (engine.points_engine((), d) is not None) == (d <= engine.MAX_D)
    np.testing.assert_allclose(dist.log_prob(value), ref.logpdf(value), rtol=1e-10)
    # the points in a (5, n // 5, D) block, and one point
    m = n - n % 5
    block = value[:m].reshape(5, m // 5, d)
    got = dist.log_prob(block)
    assert got.shape == (5, m // 5)
    np.testing.assert_allclose(got.ravel(), ref.logpdf(value[:m]), rtol=1e-10)
    one = dist.log_prob(value[0])
    assert type(one) is np.ndarray
    assert one.shape == ()
    np.testing.assert_allclose(one, ref.logpdf(value[0]), rtol=1e-10)


def test_batched_distributions_take_the_general_code():
    assert engine.points_engine((3,), 4) is None
    assert engine.points_engine((), 0) is None


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("where", [(0, 0), (17, 3), (-1, -1)])
def test_non_finite_values(monkeypatch, bad, where):
    """A NaN or an infinity anywhere (first chunk, middle, last entry) is refused with
    validate_args, and without gives NaN or -inf at its point only."""
    monkeypatch.setattr(engine, "CHUNK", 8 * 4)
    rng = np.random.default_rng(3)
    loc, cov, value = _case(rng, 4, 40)
    value[where] = bad
    with pytest.raises(ValueError, match=r"^`value` must be finite, got shape \(40, 4\) with "):
        MultivariateNormal(loc, covariance_matrix=cov).log_prob(value)
    lax = MultivariateNormal(loc, covariance_matrix=cov, validate_args=False)
    with np.errstate(invalid="ignore"):  # an infinity times L^-T's zeros, as NumPy warns
        got = lax.log_prob(value)
    row = where[0] % 40
    assert np.isnan(got[row]) or got[row] == -np.inf  # inf * 0 in the product is NaN
    keep = np.arange(40) != row
    want = scipy.stats.multivariate_normal(loc, cov).logpdf(value[keep])
    np.testing.assert_allclose(got[keep], want, rtol=1e-10)


def test_huge_finite_values_are_not_refused():
    """Finite values whose distance overflows are valid: their log density is -inf (the
    check reads the values again when a distance is not finite)."""
    loc, cov = np.zeros(3), np.eye(3) * 1e-300
    value = np.array([[1e300, 0.0, 0.0], [0.0, 0.0, 0.0]])
    got = MultivariateNormal(loc, covariance_matrix=cov).log_prob(value)
    assert got[0] == -np.inf
    assert np.isfinite(got[1])


def test_value_is_not_modified():
    rng = np.random.default_rng(9)
    loc, cov, value = _case(rng, 5, 3000)
    before = value.copy()
    MultivariateNormal(loc, covariance_matrix=cov).log_prob(value)
    np.testing.assert_array_equal(value, before)
