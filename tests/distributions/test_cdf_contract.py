"""cdf / logcdf of MultivariateNormal: relative accuracy of logcdf where the probability is
near 1, the stopping rule of logcdf (its cost), and the warning of a missed tolerance.
References: mpmath at high precision, scipy.special.log_ndtr."""

import math
import warnings

import numpy as np
import pytest
from scipy import special

import xpops
from xpops.distributions import IntegrationWarning, MultivariateNormal
from xpops.distributions._cdf import _numpy as numpy_engine
from xpops.distributions._cdf._bivariate import log_bvn_cdf, log_norm_cdf
from xpops.distributions._cdf._genz import LOG_RTOL, tolerance

mp = pytest.importorskip("mpmath")

inf = np.inf
ZS = [5.0, 7.0, 10.0, 20.0, 40.0]


def _mp_log_ncdf(z, dps=120):
    with mp.workdps(dps):
        return float(mp.log(mp.ncdf(mp.mpf(z))))


def _mp_log_bvn_orthant(z, r, dps=30):
    """log P(X <= z, Y <= z), correlation r: log1p(-(2 ndtr(-z) - P(X > z, Y > z)))."""
    with mp.workdps(dps):
        z, r = mp.mpf(z), mp.mpf(r)
        s = mp.sqrt(1 - r * r)
        pts = [z + k * s / 4 for k in range(80)] + [z + k for k in (1, 2, 4, 8, 30)] + [mp.inf]
        both = mp.quad(lambda x: mp.npdf(x) * mp.ncdf((r * x - z) / s), pts)
        return float(mp.log1p(-(2 * mp.ncdf(-z) - both)))


def _mp_log_equicorrelated(z, r, d, dps=30):
    """log P(X_i <= z for all i), d equicorrelated standard normals of correlation r > 0:
    log1p(-Q), Q the integral over the common factor of 1 - (1 - u)**d (by expm1/log1p: no
    cancellation)."""
    with mp.workdps(dps):
        z, r = mp.mpf(z), mp.mpf(r)
        sr, s = mp.sqrt(r), mp.sqrt(1 - r)
        out = mp.quad(
            lambda w: mp.npdf(w) * -mp.expm1(d * mp.log1p(-mp.ncdf((sr * w - z) / s))),
            # the mass sits near w = z sqrt(r) (where X_i exceeds z at least cost)
            [
                -mp.inf,
                *sorted({-10, -5, 0, 5, 10, z / sr + 5, *(z * sr + k / 2 for k in range(-24, 25))}),
                mp.inf,
            ],
        )
        return float(mp.log1p(-out))


def _equicorrelated(d, r, scale=1.0):
    cov = (np.full((d, d), r) + (1 - r) * np.eye(d)) * scale**2
    return MultivariateNormal(np.zeros(d), covariance_matrix=cov)


# ---- item: logcdf near 1 ---------------------------------------------------------------------


@pytest.mark.parametrize("z", ZS)
def test_logcdf_near_one_1d(z):
    ref = _mp_log_ncdf(z)
    assert log_norm_cdf(-inf, z) == pytest.approx(ref, rel=1e-13, abs=0)
    assert log_norm_cdf(-z, inf) == pytest.approx(ref, rel=1e-13, abs=0)
    assert log_norm_cdf(-inf, z) == pytest.approx(special.log_ndtr(z), rel=1e-13, abs=0)
    # through the distribution, with a mean and a scale, and an interval open on both sides
    d = MultivariateNormal(np.array([1.0]), covariance_matrix=np.array([[4.0]]))
    got = d.logcdf(np.array([1.0 + 2.0 * z]))
    assert float(got) == pytest.approx(ref, rel=1e-13, abs=0)
    with mp.workdps(120):
        both = float(mp.log(1 - 2 * mp.ncdf(-mp.mpf(z))))
    got = d.logcdf(np.array([1.0 + 2.0 * z]), lower_limit=np.array([1.0 - 2.0 * z]))
    assert float(got) == pytest.approx(both, rel=1e-13, abs=0)


def test_logcdf_near_one_1d_is_exact_where_it_was_not():
    d = MultivariateNormal(np.zeros(1), covariance_matrix=np.eye(1))
    assert float(d.logcdf(np.array([20.0]))) == pytest.approx(-2.7536241186061556e-89, rel=1e-14)
    assert float(d.logcdf(np.array([9.0]))) < 0.0
    x = np.linspace(-30.0, 30.0, 601)[:, None]
    np.testing.assert_allclose(d.logcdf(x), special.log_ndtr(x[:, 0]), rtol=1e-13, atol=0)


@pytest.mark.parametrize("z", ZS)
@pytest.mark.parametrize("r", [-0.9, 0.0, 0.5, 0.999])
def test_logcdf_near_one_2d(z, r):
    ref = _mp_log_bvn_orthant(z, r)
    assert log_bvn_cdf([-inf, -inf], [z, z], r) == pytest.approx(ref, rel=1e-11, abs=0)
    d = _equicorrelated(2, r, scale=3.0) if r >= 0 else None
    if d is not None:
        got = d.logcdf(np.full(2, 3.0 * z))
        assert float(got) == pytest.approx(ref, rel=1e-11, abs=0)


def test_logcdf_near_one_2d_rectangle():
    # both sides of each coordinate outside: the complement has 4 marginal tails
    r, z = 0.6, 6.0
    with mp.workdps(60):
        s = mp.sqrt(1 - mp.mpf(r) ** 2)
        zz = mp.mpf(z)

        def inside(x):
            return mp.ncdf((zz - r * x) / s) - mp.ncdf((-zz - r * x) / s)

        p = mp.quad(lambda x: mp.npdf(x) * inside(x), [-zz, 0, zz])
        ref = float(mp.log(p))
    got = log_bvn_cdf([-z, -z], [z, z], r)
    assert got == pytest.approx(ref, rel=1e-10, abs=0)


@pytest.mark.parametrize("z", ZS)
@pytest.mark.parametrize("d", [3, 5])
def test_logcdf_near_one_3d_and_up(z, d):
    r = 0.5
    ref = _mp_log_equicorrelated(z, r, d)
    got, err = _equicorrelated(d, r).logcdf(np.full(d, z), rng=0, return_error=True)
    # the complement to LOG_RTOL relative (its error estimate bounds it, with a margin)
    if ref == 0.0:
        assert float(got) == 0.0
    else:
        assert float(got) == pytest.approx(ref, rel=2 * LOG_RTOL, abs=0)
        assert abs(float(got) - ref) <= 2.0 * float(err) + 1e-13 * abs(ref)
    # independent coordinates: d log_ndtr(z)
    ind = MultivariateNormal(np.zeros(d), covariance_matrix=np.eye(d))
    assert float(ind.logcdf(np.full(d, z), rng=0)) == pytest.approx(
        d * special.log_ndtr(z), rel=1e-12, abs=0
    )


def test_logcdf_near_one_3d_tighter_releps():
    d, z, r = 3, 5.0, 0.5
    ref = _mp_log_equicorrelated(z, r, d)
    got = _equicorrelated(d, r).logcdf(np.full(d, z), abseps=0.0, releps=1e-6, rng=1)
    assert float(got) == pytest.approx(ref, rel=5e-6, abs=0)


def test_logcdf_near_one_with_lower_limit_and_batch():
    d, r = 3, 0.3
    dist = _equicorrelated(d, r)
    upper = np.array([[6.0, 7.0, 8.0], [1.0, 2.0, 3.0]])
    got = dist.logcdf(upper, lower_limit=-upper, rng=0, abseps=1e-8)
    cdf = dist.cdf(upper, lower_limit=-upper, rng=0, abseps=1e-8)
    # the complement (first row) and the direct value (second row) agree with the cdf
    np.testing.assert_allclose(got[1], np.log(cdf[1]), rtol=1e-6)
    with np.errstate(divide="ignore"):
        q = 2 * special.ndtr(-upper[0]).sum()  # the union bound, tight here
    assert float(got[0]) == pytest.approx(-q, rel=1e-3)


# ---- item: logcdf's stopping rule --------------------------------------------------------


def test_tolerance_rule():
    p = np.array([0.9, 0.5, 1e-2, 1e-3, 1e-9, 0.0])
    with np.errstate(divide="ignore"):
        lp = np.log(p)
    got = tolerance(np, lp, 1e-5, 0.0, True)
    with np.errstate(divide="ignore"):
        want = np.minimum(1e-5 / p, LOG_RTOL)
    np.testing.assert_allclose(got, want, rtol=1e-14)
    # releps loosens the relative bound and never tightens it below
    got = tolerance(np, lp, 0.0, 1e-2, True)
    np.testing.assert_array_equal(got, np.full(6, 1e-2))
    got = tolerance(np, lp, 0.0, 1e-7, True)
    np.testing.assert_array_equal(got, np.full(6, 1e-7))
    # the cdf's rule is unchanged
    v = np.array([0.5, np.nan, 1.0])
    np.testing.assert_array_equal(tolerance(np, v, 1e-5, 1e-3, False), [5e-4, 1e-5, 1e-3])


def _points_used(monkeypatch, call):
    used = []
    original = numpy_engine._shift_means

    def counting(a, b, c, deg, z, n, shifts, log):
        used.append(a.shape[0] * n * shifts.shape[0])
        return original(a, b, c, deg, z, n, shifts, log)

    monkeypatch.setattr(numpy_engine, "_shift_means", counting)
    out = call()
    monkeypatch.setattr(numpy_engine, "_shift_means", original)
    return out, sum(used)


def test_logcdf_defaults_cost_about_what_cdf_costs(monkeypatch):
    rng = np.random.default_rng(3)
    d = 6
    g = rng.normal(size=(d, d))
    cov = g @ g.T / d + 0.2 * np.eye(d)
    dist = MultivariateNormal(np.zeros(d), covariance_matrix=cov)
    x = rng.normal(size=(12, d)) + 1.5
    p, cdf_points = _points_used(monkeypatch, lambda: dist.cdf(x, rng=0))
    (lp, err), log_points = _points_used(
        monkeypatch, lambda: dist.logcdf(x, rng=0, return_error=True)
    )
    assert log_points <= 3 * cdf_points
    # the contract: the error of the log within max(releps, min(abseps / P, LOG_RTOL))
    np.testing.assert_array_less(err, np.minimum(1e-5 / np.exp(lp), LOG_RTOL) * (1 + 1e-9))
    np.testing.assert_allclose(np.exp(lp), p, atol=3e-5, rtol=2e-3)


def test_logcdf_small_probability_keeps_relative_accuracy():
    d = 4
    dist = _equicorrelated(d, 0.5)
    got, err = dist.logcdf(np.full(d, -4.0), rng=0, return_error=True)
    ref, _ = numpy_engine.mvn_cdf(
        np.full(d, -inf),
        np.full(d, -4.0),
        np.linalg.cholesky(dist.covariance_matrix),
        abseps=0.0,
        releps=1e-7,
        log=True,
        rng=5,
    )
    assert float(err) <= LOG_RTOL
    assert abs(float(got) - float(ref)) <= 1.5 * float(err) + 1e-6


# ---- item: a missed tolerance warns -------------------------------------------------------


def test_integration_warning_is_public():
    assert issubclass(IntegrationWarning, RuntimeWarning)
    assert xpops.distributions.IntegrationWarning is IntegrationWarning
    assert "IntegrationWarning" in xpops.distributions.__all__
    assert IntegrationWarning.__doc__


@pytest.mark.parametrize("method", ["cdf", "logcdf"])
def test_missed_tolerance_warns(method):
    dist = _equicorrelated(4, 0.5)
    f = getattr(dist, method)
    with pytest.warns(IntegrationWarning, match=r"maxpts=100 .*abseps=1e-12.*return_error"):
        f(np.zeros(4), maxpts=100, abseps=1e-12, rng=0)
    # batched: one warning, the count of the problems that missed
    with pytest.warns(IntegrationWarning, match=r"2 of the integrals"):
        f(np.zeros((2, 4)), maxpts=100, abseps=1e-12, rng=0)
    # return_error: no warning (warnings are errors in this suite), the error tells
    _, err = f(np.zeros(4), maxpts=100, abseps=1e-12, rng=0, return_error=True)
    assert float(err) > 1e-12
    # a met tolerance: no warning, the same value
    f(np.zeros(4), abseps=1e-3, rng=0)


def test_missed_tolerance_warning_points_at_the_caller():
    dist = _equicorrelated(3, 0.5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist.cdf(np.zeros(3), maxpts=100, abseps=1e-12, rng=0)
    assert len(caught) == 1
    assert caught[0].filename == __file__


def test_deterministic_dimensions_do_not_warn():
    # D = 1 and 2 are computed to their own accuracy, whatever the tolerance
    for d in (1, 2):
        dist = _equicorrelated(d, 0.5)
        dist.cdf(np.zeros(d), maxpts=1, abseps=1e-300)
        dist.logcdf(np.zeros(d), maxpts=1, abseps=1e-300)


def test_cdf_values_unchanged():
    """cdf's numbers for a seed: the stopping rule of the cdf is the one it was."""
    dist = _equicorrelated(5, 0.5)
    value, error = dist.cdf(np.zeros(5), rng=0, return_error=True)
    # to rounding: the last bits differ between NumPy builds
    assert math.isclose(float(value), 0.16667086100504208, rel_tol=1e-12)
    assert math.isclose(float(error), 8.611905260867376e-06, rel_tol=1e-9)
    assert math.isclose(float(value), 1 / 6, abs_tol=3 * float(error))


# ---- GPU (skipped without one): the CuPy engine's complement for 3 <= D <= 64 -------------


@pytest.mark.parametrize("d", [3, 5])
def test_gpu_logcdf_near_one(cupy_only, d):
    from xpops.distributions._cdf import mvn_cdf as entry_mvn_cdf

    cupy = cupy_only
    r = 0.5
    cov = np.full((d, d), r) + (1 - r) * np.eye(d)
    lf = np.linalg.cholesky(cov)
    # a batch of near-1 problems and ordinary ones: the same values as the NumPy engine
    upper = np.stack([np.full(d, z) for z in ZS] + [np.zeros(d), np.full(d, 1.5)])
    lower = np.full_like(upper, -inf)
    lower[-1] = -1.0
    want, want_err = numpy_engine.mvn_cdf(lower, upper, lf, log=True, rng=3)
    got, err = entry_mvn_cdf(
        cupy.asarray(lower), cupy.asarray(upper), cupy.asarray(lf), log=True, rng=3
    )
    assert isinstance(got, cupy.ndarray)
    got, err = got.get(), err.get()
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=0)
    np.testing.assert_allclose(err, want_err, rtol=1e-6, atol=1e-300)
    for i, z in enumerate(ZS):
        ref = _mp_log_equicorrelated(z, r, d)
        assert got[i] == pytest.approx(ref, rel=2 * LOG_RTOL, abs=0)
    # through the distribution, float32 parameters
    dist = MultivariateNormal(
        cupy.zeros(d, dtype=cupy.float32), covariance_matrix=cupy.asarray(cov, dtype=cupy.float32)
    )
    v = dist.logcdf(cupy.full(d, 7.0, dtype=cupy.float32), rng=0)
    assert v.dtype == cupy.float32
    assert float(v) == pytest.approx(_mp_log_equicorrelated(7.0, r, d), rel=1e-3)


def test_gpu_missed_tolerance_warns(cupy_only):
    cupy = cupy_only
    dist = MultivariateNormal(cupy.zeros(4), covariance_matrix=cupy.asarray(np.eye(4) + 0.5))
    for method in ("cdf", "logcdf"):
        with pytest.warns(IntegrationWarning, match="maxpts=100"):
            getattr(dist, method)(cupy.zeros(4), maxpts=100, abseps=1e-12, rng=0)
        _, err = getattr(dist, method)(
            cupy.zeros(4), maxpts=100, abseps=1e-12, rng=0, return_error=True
        )
        assert float(err) > 1e-12
