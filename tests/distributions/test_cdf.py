"""Numerics of the multivariate normal CDF: the NumPy engine (xpops.distributions._cdf._numpy,
with _bivariate for D = 1 and 2) and, through the cdf entry (xpops.distributions._cdf), the CuPy
engine (skipped without a GPU)."""

import functools
import math

import numpy as np
import pytest
from scipy import special

from xpops.distributions._cdf._bivariate import bvn_cdf, log_bvn_cdf, log_norm_cdf, norm_cdf
from xpops.distributions._cdf._numpy import mvn_cdf

from .._support import scipy_mvn_cdf

mp = pytest.importorskip("mpmath")  # in the test extra; the GPU machine may lack it

inf = np.inf


def _mp_interval(a, b, dps=60):
    with mp.workdps(dps):
        a = -mp.inf if a == -inf else (mp.inf if a == inf else mp.mpf(a))
        b = -mp.inf if b == -inf else (mp.inf if b == inf else mp.mpf(b))
        if a + b > 0:
            return mp.ncdf(-a) - mp.ncdf(-b)
        return mp.ncdf(b) - mp.ncdf(a)


def _gpu(cupy, *arrays):
    return tuple(cupy.asarray(np.asarray(a, dtype=np.float64)) for a in arrays)


def _gpu_cdf(cupy, lo, up, lf, **kw):
    from xpops.distributions._cdf import mvn_cdf as gpu_mvn_cdf

    v, e = gpu_mvn_cdf(*_gpu(cupy, lo, up, lf), **kw)
    assert isinstance(v, cupy.ndarray)
    assert v.dtype == e.dtype == np.float64
    return v.get(), e.get()


@pytest.fixture(params=["numpy", "cupy"])
def engine(request):
    """``mvn_cdf`` of the NumPy engine, or of the cdf entry with CuPy arrays (NumPy in and out;
    the CuPy case skips without a GPU)."""
    if request.param == "numpy":
        return mvn_cdf
    return functools.partial(_gpu_cdf, request.getfixturevalue("cupy_only"))


# ---------------------------------------------------------------------------- 1-D


def test_norm_cdf_against_mpmath():
    pts = [-inf, -40.0, -38.0, -10.0, -3.0, -1.0, -1e-10, 0.0, 1e-10, 0.5, 2.0, 9.0, 39.0, inf]
    a, b = np.meshgrid(pts, pts, indexing="ij")
    got = norm_cdf(a, b)
    lgot = log_norm_cdf(a, b)
    for i, j in np.ndindex(a.shape):
        if a[i, j] >= b[i, j]:
            assert got[i, j] == 0.0
            assert lgot[i, j] == -inf
            continue
        ref = _mp_interval(a[i, j], b[i, j])
        assert got[i, j] == pytest.approx(float(ref), rel=1e-13, abs=1e-300)
        assert lgot[i, j] == pytest.approx(float(mp.log(ref)), rel=1e-13, abs=1e-13)


def test_log_norm_cdf_far_tail():
    assert log_norm_cdf(-inf, -40.0) == pytest.approx(-804.6084420137538, rel=1e-14)
    assert log_norm_cdf(40.0, inf) == pytest.approx(-804.6084420137538, rel=1e-14)
    assert log_norm_cdf(30.0, 31.0) == pytest.approx(
        float(mp.log(_mp_interval(30, 31, 500))), rel=1e-13
    )
    assert log_norm_cdf(1.0, 1.0) == -inf
    assert norm_cdf(2.0, 1.0) == 0.0
    np.testing.assert_allclose(
        norm_cdf([-inf, -1.0], [inf, 1.0]), [1.0, special.erf(_s := 1 / math.sqrt(2))]
    )
    assert np.isnan(norm_cdf(np.nan, 1.0))


def test_norm_cdf_broadcast():
    assert norm_cdf(np.zeros((3, 1)), np.ones(4)).shape == (3, 4)
    assert log_norm_cdf(np.zeros((3, 1)), np.ones(4)).shape == (3, 4)


# ---------------------------------------------------------------------------- 2-D


def test_bvn_closed_forms():
    rho = np.linspace(-0.999, 0.999, 41)
    got = bvn_cdf(np.full((41, 2), -inf), np.zeros((41, 2)), rho)
    np.testing.assert_allclose(got, 0.25 + np.arcsin(rho) / (2 * np.pi), rtol=0, atol=2e-15)
    # rho = 0: product; rho = +-1 exact
    rng = np.random.default_rng(0)
    lo = rng.normal(size=(50, 2)) * 2
    up = lo + rng.exponential(2, size=(50, 2))
    np.testing.assert_allclose(
        bvn_cdf(lo, up, 0.0),
        norm_cdf(lo[:, 0], up[:, 0]) * norm_cdf(lo[:, 1], up[:, 1]),
        rtol=1e-14,
    )
    np.testing.assert_allclose(
        bvn_cdf(lo, up, 1.0), norm_cdf(lo.max(1), up.min(1)), rtol=1e-14, atol=1e-300
    )
    np.testing.assert_allclose(
        bvn_cdf(lo, up, -1.0),
        norm_cdf(np.maximum(lo[:, 0], -up[:, 1]), np.minimum(up[:, 0], -lo[:, 1])),
        rtol=1e-14,
        atol=1e-300,
    )
    # infinite bounds reduce to 1-D
    assert bvn_cdf([-inf, -inf], [0.3, inf], 0.7) == pytest.approx(special.ndtr(0.3), rel=1e-15)
    assert bvn_cdf([-inf, -inf], [inf, inf], -0.7) == 1.0
    assert bvn_cdf([1.0, 0.0], [1.0, 2.0], 0.3) == 0.0
    assert log_bvn_cdf([1.0, 0.0], [1.0, 2.0], 0.3) == -inf


def _mp_bvn_rect(lo, up, r, dps=30):
    with mp.workdps(dps):
        r = mp.mpf(r)
        s = mp.sqrt(1 - r * r)

        def f(x):
            return mp.npdf(x) * _mp_interval((lo[1] - r * x) / s, (up[1] - r * x) / s, dps)

        rf = float(r)
        cuts = (up[1] / rf, lo[1] / rf, 0.0) if rf else (0.0,)
        pts = [lo[0], *sorted(c for c in cuts if np.isfinite(c) and lo[0] < c < up[0]), up[0]]
        return mp.quad(f, [mp.mpf(p) for p in pts])


def test_bvn_against_mpmath_and_scipy():
    rng = np.random.default_rng(1)
    n = 24
    lo = rng.normal(size=(n, 2)) * 2
    up = lo + rng.exponential(2, size=(n, 2))
    lo[:6, 0] = -inf
    up[6:12, 1] = inf
    r = rng.uniform(-1, 1, n)
    r[:4] = [0.93, -0.95, 0.999, -0.9999]
    got = bvn_cdf(lo, up, r)
    ref = np.array([float(_mp_bvn_rect(lo[i], up[i], r[i])) for i in range(n)])
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-14)
    # SciPy (seeded, tight tolerance) on lower orthants
    for i in range(4):
        cov = [[1, r[i]], [r[i], 1]]
        sp = scipy_mvn_cdf(up[i], [0, 0], cov, abseps=1e-10, releps=0, seed=i)
        assert bvn_cdf([-inf, -inf], up[i], r[i]) == pytest.approx(sp, abs=1e-9)


def test_bvn_broadcast():
    lo = np.full((3, 1, 2), -1.0)
    up = np.ones((4, 2))
    rho = np.linspace(-0.5, 0.5, 4)
    assert bvn_cdf(lo, up, rho).shape == (3, 4)
    assert log_bvn_cdf(lo, up, rho).shape == (3, 4)


@pytest.mark.parametrize(
    ("lo", "up", "r", "ref"),
    [
        # references: mpmath quadrature at 40 digits over 1200 and 2400 equal pieces of
        # [max(l1, -60), min(u1, 60)] (the two agree to 2e-14 relative or better)
        ((-inf, -inf), (-10, -10), -0.999, -100017.1510186987868),
        ((5, 5), (inf, inf), -0.9, -258.8376198071036755),
        ((-inf, -inf), (-10, -10), -0.5, -207.69375345373264133),
        ((-inf, -inf), (-10, -10), 0.5, -72.197267171540266273),
        ((-inf, -inf), (-10, -10), 0.999, -53.428135793309038829),
        ((-inf, -inf), (-30, -20), 0.3, -524.04674915278755918),
        ((5, 5), (inf, inf), 0.9999, -15.094690744721290516),
        ((-inf, 3), (-8, inf), -0.95, -35.013437159914549896),
        ((-12, -inf), (-11.9, -9), 0.7, -76.254547318826955343),
        ((-inf, -inf), (-37, -37), 0.2, -1149.5099592691303601),
        ((-1, -1), (-0.999999, -0.9999999), 0.6, -32.173339380765552985),
        ((-inf, -inf), (-3, 3), -0.99999, -11.747772875286901349),
        ((2, -3), (inf, -2.5), -0.99, -5.3268111687412038783),
    ],
)
def test_log_bvn_far_tails(lo, up, r, ref):
    got = log_bvn_cdf(np.array(lo, float), np.array(up, float), r)
    assert got == pytest.approx(ref, rel=1e-11)


def test_log_bvn_rho_zero_product():
    assert log_bvn_cdf([-inf, -inf], [-40.0, -38.0], 0.0) == pytest.approx(
        special.log_ndtr(-40.0) + special.log_ndtr(-38.0), rel=1e-14
    )


def test_log_bvn_matches_direct_across_threshold():
    # where both are valid (1e-9 < p < 1e-3) the log-space integral and log(bvn) agree
    rng = np.random.default_rng(2)
    n = 200
    up = -rng.uniform(1.5, 4.0, size=(n, 2))
    lo = np.full((n, 2), -inf)
    r = rng.uniform(-0.99, 0.99, n)
    p = bvn_cdf(lo, up, r)
    keep = (p > 1e-9) & (p < 1e-3)
    assert keep.sum() > 50
    np.testing.assert_allclose(log_bvn_cdf(lo, up, r)[keep], np.log(p[keep]), rtol=0, atol=1e-7)


# ---------------------------------------------------------------------------- D dimensions


@pytest.mark.parametrize("d", [3, 4, 5, 6])
def test_mvn_equicorrelated_orthant(d):
    cov = np.full((d, d), 0.5) + 0.5 * np.eye(d)
    v, e = mvn_cdf(np.full(d, -inf), np.zeros(d), np.linalg.cholesky(cov), abseps=1e-5, rng=0)
    assert abs(v - 1 / (d + 1)) <= max(e, 1e-5) * 1.5
    assert e <= 1e-5


def test_mvn_diagonal_is_product(engine):
    rng = np.random.default_rng(3)
    d = 6
    sd = rng.uniform(0.5, 2, d)
    lo = rng.normal(size=(4, d))
    up = lo + rng.exponential(1, size=(4, d))
    lo[0, :3] = -inf
    up[1, 2:] = inf
    v, e = engine(lo, up, np.diag(sd), rng=1)
    np.testing.assert_allclose(v, np.prod(norm_cdf(lo / sd, up / sd), -1), rtol=1e-13)
    np.testing.assert_array_less(e, 1e-12)
    lv, _ = engine(lo, up, np.diag(sd), rng=1, log=True)
    np.testing.assert_allclose(lv, np.sum(log_norm_cdf(lo / sd, up / sd), -1), rtol=1e-13)


def test_mvn_log_far_tail():
    v, _ = mvn_cdf(np.full(5, -inf), np.full(5, -10.0), np.eye(5), log=True, rng=0)
    assert np.isfinite(v)
    assert v == pytest.approx(5 * special.log_ndtr(-10.0), rel=1e-8)
    # correlated far tail: finite, and agrees with the bivariate log (D = 3, third variable free)
    cov = np.array([[1.0, 0.6, 0.0], [0.6, 1.0, 0.0], [0.0, 0.0, 1.0]])
    v, _ = mvn_cdf(
        [-inf, -inf, -inf],
        [-20.0, -20.0, inf],
        np.linalg.cholesky(cov),
        abseps=0.0,
        releps=1e-5,
        log=True,
        rng=0,
    )
    assert v == pytest.approx(log_bvn_cdf([-inf, -inf], [-20.0, -20.0], 0.6), rel=1e-6)


def _random_problem(rng, d):
    a = rng.normal(size=(d, d))
    cov = a @ a.T / d + 0.2 * np.eye(d)
    up = rng.normal(size=d) + 0.5
    lo = up - rng.exponential(2, size=d)
    return cov, lo, up


@pytest.mark.parametrize("d", [3, 5, 10])
@pytest.mark.parametrize("with_lower", [False, True])
def test_mvn_against_scipy(engine, d, with_lower):
    rng = np.random.default_rng(10 + d)
    cov, lo, up = _random_problem(rng, d)
    if not with_lower:
        lo = np.full(d, -inf)
    ref = scipy_mvn_cdf(
        up, np.zeros(d), cov, lower_limit=lo, abseps=1e-7, releps=0, maxpts=2_000_000, seed=5
    )
    v, e = engine(lo, up, np.linalg.cholesky(cov), abseps=1e-6, rng=4)
    assert e <= 1e-6
    assert abs(v - ref) <= 2e-6


def test_mvn_error_covers(engine):
    # one round only (maxpts), 40 seeds: the 3-sigma error covers the true error in >= 95%
    rng = np.random.default_rng(7)
    d = 4
    cov, lo, up = _random_problem(rng, d)
    lf = np.linalg.cholesky(cov)
    ref, ref_e = mvn_cdf(lo, up, lf, abseps=1e-9, rng=123)
    assert ref_e < 1e-8
    hits = 0
    for seed in range(40):
        v, e = engine(lo, up, lf, abseps=0.0, maxpts=500, rng=seed)
        hits += abs(v - ref) <= e
    assert hits >= 38


def test_mvn_releps_and_determinism():
    rng = np.random.default_rng(8)
    d = 5
    cov, lo, up = _random_problem(rng, d)
    lf = np.linalg.cholesky(cov)
    v1, e1 = mvn_cdf(lo, up, lf, abseps=0.0, releps=1e-2, rng=3)
    v2, e2 = mvn_cdf(lo, up, lf, abseps=0.0, releps=1e-5, rng=3)
    assert e1 <= 1e-2 * v1
    assert e2 <= 1e-5 * v2
    assert e1 > e2
    assert abs(v1 - v2) <= e1
    v3, e3 = mvn_cdf(lo, up, lf, abseps=0.0, releps=1e-5, rng=3)
    assert (v3, e3) == (v2, e2)
    v4, e4 = mvn_cdf(lo, up, lf, abseps=0.0, releps=1e-5, rng=np.random.default_rng(3))
    assert (v4, e4) == (v2, e2)


def test_mvn_batch_broadcast(engine):
    rng = np.random.default_rng(9)
    d = 4
    covs = [_random_problem(rng, d)[0] for _ in range(3)]
    lf = np.linalg.cholesky(np.stack(covs))  # (3, d, d)
    up = rng.normal(size=(2, 1, d)) + 1.0
    lo = np.full(d, -inf)
    v, e = engine(lo, up, lf, abseps=1e-5, rng=0)
    assert v.shape == e.shape == (2, 3)
    for i in range(2):
        for j in range(3):
            vi, ei = engine(lo, up[i, 0], lf[j], abseps=1e-5, rng=1)
            assert vi.shape == ()
            assert abs(v[i, j] - vi) <= e[i, j] + ei


def test_mvn_empty_and_edge_cases():
    lf = np.linalg.cholesky(np.full((3, 3), 0.3) + 0.7 * np.eye(3))
    v, e = mvn_cdf([0.0, -1.0, -1.0], [0.0, 1.0, 1.0], lf, rng=0)
    assert v == 0.0
    assert e == 0.0
    v, _ = mvn_cdf([0.0, -1.0, -1.0], [-1.0, 1.0, 1.0], lf, rng=0, log=True)
    assert v == -inf
    v, e = mvn_cdf(np.full(3, -inf), np.full(3, inf), lf, rng=0)
    assert v == pytest.approx(1.0, abs=1e-15)
    # D = 1 and D = 2 exact paths
    v, e = mvn_cdf([-1.0], [2.0], [[2.0]], rng=0)
    assert v == pytest.approx(norm_cdf(-0.5, 1.0), rel=1e-15)
    lf2 = np.linalg.cholesky([[4.0, 1.2], [1.2, 1.0]])
    v, e = mvn_cdf([-1.0, -inf], [1.0, 0.5], lf2, rng=0)
    assert v == pytest.approx(bvn_cdf([-0.5, -inf], [0.5, 0.5], 0.6), rel=1e-15)


def test_mvn_singular_covariance():
    # X3 = X1 exactly: P(X1 <= 0, X2 <= 0, X3 <= 1) = P(X1 <= 0, X2 <= 0)
    cov = np.array([[1.0, 0.5, 1.0], [0.5, 1.0, 0.5], [1.0, 0.5, 1.0]])
    lf = np.array([[1.0, 0.0, 0.0], [0.5, math.sqrt(0.75), 0.0], [1.0, 0.0, 0.0]])
    np.testing.assert_allclose(lf @ lf.T, cov)
    v, _ = mvn_cdf(np.full(3, -inf), [0.0, 0.0, 1.0], lf, abseps=1e-6, rng=0)
    assert np.isfinite(v)
    assert abs(v - (0.25 + math.asin(0.5) / (2 * math.pi))) <= 1e-6
    v, _ = mvn_cdf(np.full(3, -inf), [0.0, 0.0, -1.0], lf, abseps=1e-6, rng=0)
    assert abs(v - bvn_cdf([-inf, -inf], [-1.0, 0.0], 0.5)) <= 1e-6
    # a zero-variance coordinate
    lf0 = np.diag([1.0, 0.0, 1.0])
    v, _ = mvn_cdf([-inf, -1.0, -inf], [0.0, 1.0, 0.0], lf0, rng=0)
    assert v == pytest.approx(0.25, rel=1e-14)
    v, _ = mvn_cdf([-inf, 0.5, -inf], [0.0, 1.0, 0.0], lf0, rng=0)
    assert v == 0.0


# ---------------------------------------------------------------------------- CuPy engine
# GPU tests: the `cupy_only` fixture skips them without a CUDA device. The kernels take
# 3 <= D <= MAX_D (64); D = 1, 2 and larger D go through the NumPy engine.


@pytest.mark.parametrize("d", [3, 5, 10])
@pytest.mark.parametrize("log", [False, True])
def test_gpu_matches_numpy_engine(cupy_only, d, log):
    rng = np.random.default_rng(20 + d)
    probs = [_random_problem(rng, d) for _ in range(40)]
    lf = np.linalg.cholesky(np.stack([p[0] for p in probs]))
    lo = np.stack([p[1] for p in probs])
    up = np.stack([p[2] for p in probs])
    lo[::4] = -inf
    eps = 1e-3 if log else 1e-5
    vn, en = mvn_cdf(lo, up, lf, abseps=eps, rng=7, log=log)
    vg, eg = _gpu_cdf(cupy_only, lo, up, lf, abseps=eps, rng=7, log=log)
    # one seed draws the same shifts on both engines: the same value up to rounding, except
    # where rounding changes the variable order or the round a problem stops at
    close = np.abs(vg - vn) <= 1e-10 * np.maximum(1.0, np.abs(vn))
    assert close.mean() >= 0.9
    np.testing.assert_array_less(np.abs(vg - vn), eg + en + 1e-12)
    np.testing.assert_array_less(eg, eps)


@pytest.mark.parametrize("d", [3, 10, 64, 65])
def test_gpu_equicorrelated_orthant(cupy_only, d):
    # 64 is the kernels' largest D; 65 runs on the NumPy engine (a seed taken from the
    # cupy Generator)
    cov = np.full((d, d), 0.5) + 0.5 * np.eye(d)
    lf = np.linalg.cholesky(cov)
    eps = 1e-5 if d <= 10 else 1e-4
    gen = cupy_only.random.default_rng(0)
    v, e = _gpu_cdf(cupy_only, np.full(d, -inf), np.zeros(d), lf, abseps=eps, rng=gen)
    assert abs(v - 1 / (d + 1)) <= max(1.5 * e, eps)
    assert e <= eps
    lv, le = _gpu_cdf(
        cupy_only,
        np.full(d, -inf),
        np.zeros(d),
        lf,
        abseps=0.0,
        releps=1e-3 if d <= 10 else 1e-2,
        rng=1,
        log=True,
    )
    assert abs(lv + math.log(d + 1)) <= max(1.5 * le, 1e-3)


def test_gpu_log_far_tail(cupy_only):
    v, _ = _gpu_cdf(cupy_only, np.full(5, -inf), np.full(5, -10.0), np.eye(5), log=True, rng=0)
    assert np.isfinite(v)
    assert v == pytest.approx(5 * special.log_ndtr(-10.0), rel=1e-8)
    v, _ = _gpu_cdf(cupy_only, np.full(5, -inf), np.full(5, -40.0), np.eye(5), log=True, rng=0)
    assert v == pytest.approx(5 * special.log_ndtr(-40.0), rel=1e-12)
    cov = np.array([[1.0, 0.6, 0.0], [0.6, 1.0, 0.0], [0.0, 0.0, 1.0]])
    v, _ = _gpu_cdf(
        cupy_only,
        [-inf, -inf, -inf],
        [-20.0, -20.0, inf],
        np.linalg.cholesky(cov),
        abseps=0.0,
        releps=1e-5,
        log=True,
        rng=0,
    )
    assert v == pytest.approx(log_bvn_cdf([-inf, -inf], [-20.0, -20.0], 0.6), rel=1e-6)
    v, _ = _gpu_cdf(cupy_only, [-inf] * 3, [-10.0] * 3, np.linalg.cholesky(cov), rng=0)
    assert v == 0.0 or v < 1e-40  # the linear value underflows where the log does not


def test_gpu_determinism_and_rng(cupy_only):
    cupy = cupy_only
    rng = np.random.default_rng(8)
    d = 5
    cov, lo, up = _random_problem(rng, d)
    lf = np.linalg.cholesky(cov)
    for log in (False, True):
        first = _gpu_cdf(cupy, lo, up, lf, abseps=0.0, releps=1e-5, rng=3, log=log)
        assert _gpu_cdf(cupy, lo, up, lf, abseps=0.0, releps=1e-5, rng=3, log=log) == first
        g1 = _gpu_cdf(cupy, lo, up, lf, releps=1e-5, rng=cupy.random.default_rng(3), log=log)
        g2 = _gpu_cdf(cupy, lo, up, lf, releps=1e-5, rng=cupy.random.default_rng(3), log=log)
        assert g1 == g2
        assert abs(g1[0] - first[0]) <= g1[1] + first[1]
    with pytest.raises(TypeError, match="rng"):
        _gpu_cdf(cupy, lo, up, lf, rng="seed")


def test_gpu_nan_empty_and_edges(cupy_only):
    lf = np.linalg.cholesky(np.full((3, 3), 0.3) + 0.7 * np.eye(3))
    lo = np.array([[0.0, -1.0, -1.0], [np.nan, -1.0, -1.0], [-inf] * 3, [-1.0] * 3, [1.0] * 3])
    up = np.array([[0.0, 1.0, 1.0], [0.0, 1.0, 1.0], [inf] * 3, [1.0] * 3, [-inf] * 3])
    for log in (False, True):
        v, e = _gpu_cdf(cupy_only, lo, up, lf, rng=0, log=log)
        vn, _ = mvn_cdf(lo, up, lf, rng=0, log=log)
        assert v[0] == (-inf if log else 0.0)
        assert e[0] == 0.0
        assert np.isnan(v[1])
        assert np.isnan(e[1])
        assert v[2] == pytest.approx(0.0 if log else 1.0, abs=1e-15)
        assert abs(v[3] - vn[3]) <= 1e-5
        assert v[4] == (-inf if log else 0.0)
    v, e = _gpu_cdf(cupy_only, np.zeros((0, 3)), np.zeros((0, 3)), lf, rng=0)
    assert v.shape == e.shape == (0,)
    # D = 0, 1, 2: exact / deterministic paths
    v, e = _gpu_cdf(cupy_only, np.zeros((2, 0)), np.zeros((2, 0)), np.zeros((0, 0)))
    np.testing.assert_array_equal(v, [1.0, 1.0])
    v, e = _gpu_cdf(cupy_only, [-1.0], [2.0], [[2.0]], rng=cupy_only.random.default_rng(0))
    assert v == pytest.approx(norm_cdf(-0.5, 1.0), rel=1e-15)
    lf2 = np.linalg.cholesky([[4.0, 1.2], [1.2, 1.0]])
    v, e = _gpu_cdf(cupy_only, [-1.0, -inf], [1.0, 0.5], lf2, rng=0)
    assert v == pytest.approx(bvn_cdf([-0.5, -inf], [0.5, 0.5], 0.6), rel=1e-15)


def test_gpu_singular_covariance(cupy_only):
    cov = np.array([[1.0, 0.5, 1.0], [0.5, 1.0, 0.5], [1.0, 0.5, 1.0]])
    lf = np.array([[1.0, 0.0, 0.0], [0.5, math.sqrt(0.75), 0.0], [1.0, 0.0, 0.0]])
    np.testing.assert_allclose(lf @ lf.T, cov)
    v, _ = _gpu_cdf(cupy_only, np.full(3, -inf), [0.0, 0.0, 1.0], lf, abseps=1e-6, rng=0)
    assert abs(v - (0.25 + math.asin(0.5) / (2 * math.pi))) <= 1e-6
    v, _ = _gpu_cdf(cupy_only, np.full(3, -inf), [0.0, 0.0, -1.0], lf, abseps=1e-6, rng=0)
    assert abs(v - bvn_cdf([-inf, -inf], [-1.0, 0.0], 0.5)) <= 1e-6
    lv, _ = _gpu_cdf(cupy_only, np.full(3, -inf), [0.0, 0.0, -1.0], lf, rng=0, log=True)
    assert abs(lv - log_bvn_cdf([-inf, -inf], [-1.0, 0.0], 0.5)) <= 1e-4
    lf0 = np.diag([1.0, 0.0, 1.0])
    v, _ = _gpu_cdf(cupy_only, [-inf, -1.0, -inf], [0.0, 1.0, 0.0], lf0, rng=0)
    assert v == pytest.approx(0.25, rel=1e-14)
    v, _ = _gpu_cdf(cupy_only, [-inf, 0.5, -inf], [0.0, 1.0, 0.0], lf0, rng=0)
    assert v == 0.0


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gpu_distribution_cdf(cupy_only, dtype):
    """MultivariateNormal.cdf / logcdf of CuPy arrays: on the GPU, dtype and batch kept."""
    from xpops.distributions import MultivariateNormal

    cupy = cupy_only
    rng = np.random.default_rng(12)
    d = 6
    g = rng.normal(size=(3, d, d))
    cov = g @ np.swapaxes(g, -1, -2) / d + np.eye(d)
    loc = rng.normal(size=(3, d))
    value = loc + rng.normal(size=(2, 1, d))
    lower = loc - 2.0
    dist_np = MultivariateNormal(loc, covariance_matrix=cov)
    dist = MultivariateNormal(
        cupy.asarray(loc, dtype=dtype), covariance_matrix=cupy.asarray(cov, dtype=dtype)
    )
    val = cupy.asarray(value, dtype=dtype)
    for method in ("cdf", "logcdf"):
        got, err = getattr(dist, method)(
            val,
            lower_limit=cupy.asarray(lower, dtype=dtype),
            abseps=1e-4,
            rng=0,
            return_error=True,
        )
        assert isinstance(got, cupy.ndarray)
        assert got.dtype == err.dtype == np.dtype(dtype)
        assert got.shape == err.shape == (2, 3)
        assert got.device == dist.loc.device
        want = getattr(dist_np, method)(
            value.astype(dtype).astype(np.float64), lower_limit=lower, abseps=1e-5, rng=0
        )
        tol = 3e-4 if dtype == "float32" else 1.5e-4
        np.testing.assert_allclose(got.get(), want, atol=tol, rtol=tol)
        again = getattr(dist, method)(val, lower_limit=cupy.asarray(lower, dtype=dtype), rng=0)
        assert again.shape == (2, 3)
    with pytest.raises(TypeError, match=r"cupy\.random\.Generator"):
        dist.cdf(val, rng=np.random.default_rng(0))
    got = dist.cdf(val, rng=cupy.random.default_rng(1))
    assert isinstance(got, cupy.ndarray)
    # D = 1 (exact) and D = 2 (deterministic) through the NumPy engine
    one = MultivariateNormal(cupy.zeros(1), covariance_matrix=cupy.eye(1))
    assert float(one.logcdf(cupy.asarray([-40.0]))) == pytest.approx(-804.6084420137538)


def test_gpu_dask_value_with_cupy_chunks(cupy_only):
    da = pytest.importorskip("dask.array")
    from xpops.distributions import MultivariateNormal

    cupy = cupy_only
    rng = np.random.default_rng(13)
    cov, _, _ = _random_problem(rng, 4)
    dist = MultivariateNormal(cupy.zeros(4), covariance_matrix=cupy.asarray(cov))
    v = cupy.asarray(rng.normal(size=(40, 4)))
    got = dist.cdf(da.from_array(v, chunks=(16, 4)), abseps=1e-4, rng=1).compute()
    assert isinstance(got, cupy.ndarray)
    want = dist.cdf(v, abseps=1e-4, rng=1)
    np.testing.assert_allclose(got.get(), want.get(), atol=2e-4)
