"""Gradients of MultivariateNormal.cdf and .logcdf (xpops.distributions._cdf_vjp): through
`xpops.vjp` on every backend (the PyTorch rules `CDF_ARRAYS` / `LOGCDF_ARRAYS`:
`test_cdf_vjp_torch`).

References: closed forms (D = 1 and independent components: the product rule; D = 2: the
bivariate conditional formula, with the probability by 1-D quadrature), central differences
of SciPy's `multivariate_normal.cdf` (common random numbers), mpmath in the far tail.
Finite differences of our own cdf would be too noisy for D >= 3.
"""

import inspect
import math
from typing import Any

import numpy as np
import pytest
from scipy import integrate, special, stats

import xpops
from tests._support import backend_name, scipy_mvn_cdf, to_numpy
from xpops.distributions import MultivariateNormal
from xpops.distributions._cdf_vjp import CDF, LOGCDF, CdfCotangent

inf = np.inf
_COV3 = np.array([[1.0, 0.3, 0.2], [0.3, 1.5, -0.4], [0.2, -0.4, 0.8]])
_MU3 = np.array([0.1, -0.2, 0.3])


def _skip_jax(xp):
    """JAX compiles each operation once per shape (about 0.2 s each on a CPU, 20 s a test):
    `test_jax` runs the product-rule test on it (slow), the xp tests skip it."""
    if backend_name(xp) == "jax":
        pytest.skip("JAX: covered by test_jax (slow)")


def _method(log):
    return MultivariateNormal.logcdf if log else MultivariateNormal.cdf


def _grads(dist, value, cot=None, log=False, **kw):
    """(out, dloc, dvalue) as NumPy arrays."""
    out, pullback = xpops.vjp(_method(log), dist, value, **kw)
    if cot is None:
        cot = np.ones(tuple(out.shape))
    xp = xpops.get_namespace(out)
    cot_d, dvalue = pullback(xp.asarray(cot, dtype=out.dtype))
    return to_numpy(out), to_numpy(cot_d["loc"]), to_numpy(dvalue)


def _dist(xp, loc, cov, dtype="float64", **kw):
    dt = getattr(xp, dtype)
    return MultivariateNormal(
        xp.asarray(np.asarray(loc), dtype=dt), xp.asarray(np.asarray(cov), dtype=dt), **kw
    )


def _independent(mu, var, b, a=None):
    """P, dP/db, dP/da, dlogP/db, dlogP/da of independent normals (the product rule)."""
    sd = np.sqrt(var)
    beta = (b - mu) / sd
    alpha = np.full_like(beta, -inf) if a is None else (a - mu) / sd
    # log F_i = log(ndtr(beta) - ndtr(alpha)), in the tail where it is small
    log_f = special.log_ndtr(beta) + np.log1p(
        -np.exp(special.log_ndtr(alpha) - special.log_ndtr(beta))
    )
    log_p = log_f.sum(-1)
    with np.errstate(divide="ignore"):
        log_pb = stats.norm.logpdf(beta) - np.log(sd)
        log_pa = stats.norm.logpdf(alpha) - np.log(sd)
    dlog_b = np.exp(log_pb - log_f)
    dlog_a = -np.exp(log_pa - log_f)
    p = np.exp(log_p)[..., None]
    return np.exp(log_p), p * dlog_b, p * dlog_a, dlog_b, dlog_a


def _bvn(rho, b, a=(-inf, -inf)):
    """P(a < Z <= b), unit-variance normals of correlation rho, by 1-D quadrature."""
    s = math.sqrt(1 - rho * rho)

    def f(x):
        return stats.norm.pdf(x) * (
            special.ndtr((b[1] - rho * x) / s) - special.ndtr((a[1] - rho * x) / s)
        )

    return integrate.quad(f, a[0], b[0], epsabs=1e-15, epsrel=1e-13)[0]


def _bvn_grads(rho, b, a=(-inf, -inf)):
    """dP/db and dP/da of `_bvn`: phi(b_1) (Phi((b_2 - rho b_1)/s) - Phi((a_2 - rho b_1)/s))."""
    s = math.sqrt(1 - rho * rho)

    def one(t, i):
        j = 1 - i
        if np.isinf(t):
            return 0.0
        return stats.norm.pdf(t) * (
            special.ndtr((b[j] - rho * t) / s) - special.ndtr((a[j] - rho * t) / s)
        )

    return (
        np.array([one(b[0], 0), one(b[1], 1)]),
        -np.array([one(a[0], 0), one(a[1], 1)]),
    )


def _scipy_fd(mu, cov, b, a=None, h=1e-3):
    """SciPy's cdf and its central differences in b (and a), with common random numbers."""

    def f(x, lo):
        return scipy_mvn_cdf(
            x, mu, cov, lower_limit=lo, abseps=1e-6, releps=0, maxpts=10**7, seed=0
        )

    eye = np.eye(len(b))
    db = np.array([(f(b + h * e, a) - f(b - h * e, a)) / (2 * h) for e in eye])
    da = (
        None
        if a is None
        else np.array([(f(b, a + h * e) - f(b, a - h * e)) / (2 * h) for e in eye])
    )
    return f(b, a), db, da


# ---- closed forms -------------------------------------------------------------------------
# (one test per backend loops over cdf/logcdf and the lower limit: JAX compiles each operation
# once per shape, which the repeated shapes reuse)


def test_one_dimension_closed_form(xp):
    _skip_jax(xp)
    mu, var = 0.4, 2.5
    b = np.array([[-3.0], [0.2], [1.5], [inf], [-30.0]])
    cot = np.array([1.0, -2.0, 0.5, 3.0, 1.5])
    d = _dist(xp, [mu], [[var]])
    for log in (False, True):
        for a in (None, np.array([[-5.0], [-inf], [-1.0], [0.0], [-31.0]])):
            kw = {} if a is None else {"lower_limit": xp.asarray(a)}
            _, dloc, dvalue = _grads(d, xp.asarray(b), cot, log, **kw)
            _, db, da, dlb, dla = _independent(mu, var, b, a)
            gb, ga = (dlb, dla) if log else (db, da)
            assert dvalue.shape == b.shape
            assert dloc.shape == (1,)
            np.testing.assert_allclose(dvalue, cot[:, None] * gb, rtol=1e-12, atol=1e-300)
            np.testing.assert_allclose(dloc, [-np.sum(cot[:, None] * (gb + ga))], rtol=1e-12)


def test_independent_components_product_rule(xp):
    _skip_jax(xp)
    _check_product_rule(xp)


@pytest.mark.slow
def test_jax(jax_only):
    jax = pytest.importorskip("jax")
    _check_product_rule(jax.numpy)


def _check_product_rule(xp):
    mu, var = np.array([0.2, -0.5, 1.0]), np.array([1.0, 0.5, 3.0])
    b = np.array([[0.3, 1.2, -0.4], [inf, 0.0, 2.0]])
    cot = np.array([0.7, -1.3])
    d = _dist(xp, mu, np.diag(var))
    for log in (False, True):
        for a in (None, np.array([[-1.0, -inf, -2.0], [0.5, -1.0, -inf]])):
            kw = {} if a is None else {"lower_limit": xp.asarray(a)}
            out, dloc, dvalue = _grads(d, xp.asarray(b), cot, log, **kw)
            p, db, da, dlb, dla = _independent(mu, var, b, a)
            gb, ga = (dlb, dla) if log else (db, da)
            np.testing.assert_allclose(out, np.log(p) if log else p, rtol=1e-12)
            np.testing.assert_allclose(dvalue, cot[:, None] * gb, rtol=1e-11, atol=1e-300)
            np.testing.assert_allclose(dloc, -np.sum(cot[:, None] * (gb + ga), 0), rtol=1e-11)
            assert dvalue[1, 0] == 0.0  # the +inf limit


def _check_bivariate(xp, rho, with_lower):
    """D = 2, unit variances after scaling: phi(b1) Phi((b2 - rho b1) / sqrt(1 - rho^2))."""
    mu, sd = np.array([0.2, -0.3]), np.array([1.5, 0.7])
    cov = np.outer(sd, sd) * np.array([[1.0, rho], [rho, 1.0]])
    b = np.array([0.9, -0.1])
    a = np.array([-1.2, -2.0]) if with_lower else np.array([-inf, -inf])
    d = _dist(xp, mu, cov)
    kw = {"lower_limit": xp.asarray(a)} if with_lower else {}
    gb, ga = _bvn_grads(rho, (b - mu) / sd, (a - mu) / sd)
    gb, ga = gb / sd, ga / sd
    p = _bvn(rho, (b - mu) / sd, (a - mu) / sd)
    _, dloc, dvalue = _grads(d, xp.asarray(b), **kw)
    np.testing.assert_allclose(dvalue, gb, rtol=1e-12)
    np.testing.assert_allclose(dloc, -(gb + ga), rtol=1e-12, atol=1e-15)
    _, dloc, dvalue = _grads(d, xp.asarray(b), log=True, **kw)
    np.testing.assert_allclose(dvalue, gb / p, rtol=1e-9)
    np.testing.assert_allclose(dloc, -(gb + ga) / p, rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize("rho", [-0.8, 0.0, 0.5])
@pytest.mark.parametrize("with_lower", [False, True])
def test_bivariate_conditional_formula(rho, with_lower):
    _check_bivariate(np, rho, with_lower)


def test_bivariate_conditional_formula_backends(xp):
    _skip_jax(xp)
    _check_bivariate(xp, 0.5, True)


def _block_diagonal():
    """D = 4 of two correlated blocks: (dist, b, a, P, dP/db, dP/da), P = P1 P2 with the
    bivariate closed forms of each block."""
    r1, r2, s2 = 0.5, -0.6, np.array([math.sqrt(2.0), 1.0])
    cov = np.zeros((4, 4))
    cov[:2, :2] = [[1.0, r1], [r1, 1.0]]
    cov[2:, 2:] = np.outer(s2, s2) * np.array([[1.0, r2], [r2, 1.0]])
    b = np.array([0.3, -0.2, 0.5, 0.1])
    a = np.array([-1.0, -inf, -1.0, -2.0])
    p1, p2 = _bvn(r1, b[:2], a[:2]), _bvn(r2, b[2:] / s2, a[2:] / s2)
    g1b, g1a = _bvn_grads(r1, b[:2], a[:2])
    g2b, g2a = _bvn_grads(r2, b[2:] / s2, a[2:] / s2)
    gb = np.concatenate([g1b * p2, g2b / s2 * p1])
    ga = np.concatenate([g1a * p2, g2a / s2 * p1])
    return MultivariateNormal(np.zeros(4), cov), b, a, p1 * p2, gb, ga


def test_block_diagonal_four_dimensions_qmc():
    """D = 4: the conditionals are 3-D quasi-Monte-Carlo integrals, accurate to the tolerance
    (each term is a density of at most 1/sqrt(2 pi Sigma_ii) times a probability within
    abseps)."""
    d, b, a, p, gb, ga = _block_diagonal()
    _, dloc, dvalue = _grads(d, b, lower_limit=a, rng=1)
    np.testing.assert_allclose(dvalue, gb, atol=1e-5)
    np.testing.assert_allclose(dloc, -(gb + ga), atol=2e-5)
    # logcdf: relative errors, of the conditionals and of P, each about abseps / P
    _, dloc, dvalue = _grads(d, b, log=True, lower_limit=a, rng=1)
    np.testing.assert_allclose(dvalue, gb / p, rtol=5e-4)
    np.testing.assert_allclose(dloc, -(gb + ga) / p, rtol=5e-4)


@pytest.mark.slow
def test_block_diagonal_tighter_tolerance():
    """The gradient follows the tolerance: abseps 1e-7 gives about 1e-7."""
    d, b, a, p, gb, ga = _block_diagonal()
    _, dloc, dvalue = _grads(d, b, lower_limit=a, abseps=1e-7, rng=2)
    np.testing.assert_allclose(dvalue, gb, atol=1e-7)
    np.testing.assert_allclose(dloc, -(gb + ga), atol=2e-7)
    _, _, dvalue = _grads(d, b, log=True, lower_limit=a, abseps=1e-7, rng=2)
    np.testing.assert_allclose(dvalue, gb / p, rtol=5e-6)


# ---- against SciPy ------------------------------------------------------------------------


@pytest.mark.parametrize("with_lower", [False, True])
def test_correlated_three_dimensions_against_scipy(with_lower):
    if "rng" not in inspect.signature(stats.multivariate_normal.cdf).parameters:
        # SciPy before 1.15 draws in compiled code: no common random numbers for the
        # differences, whose noise (abseps / h) is then above the tolerance
        pytest.skip("SciPy's multivariate_normal.cdf takes no rng")
    b = np.array([0.5, 0.2, 0.1])
    a = np.array([-1.0, -inf, -0.5]) if with_lower else None
    p, db, da = _scipy_fd(_MU3, _COV3, b, a)
    d = MultivariateNormal(_MU3, _COV3)
    kw: dict[str, Any] = {} if a is None else {"lower_limit": a}
    ga = 0.0 if da is None else da
    _, dloc, dvalue = _grads(d, b, **kw)
    np.testing.assert_allclose(dvalue, db, atol=5e-6)
    np.testing.assert_allclose(dloc, -(db + ga), atol=1e-5)
    # logcdf: the conditionals are deterministic (bivariate), P is quasi-Monte-Carlo
    _, dloc, dvalue = _grads(d, b, log=True, abseps=1e-6, rng=0, **kw)
    np.testing.assert_allclose(dvalue, db / p, rtol=1e-4)
    np.testing.assert_allclose(dloc, -(db + ga) / p, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("parameter", ["precision_matrix", "scale_tril"])
def test_other_parametrizations(parameter):
    matrix = np.linalg.inv(_COV3) if parameter == "precision_matrix" else np.linalg.cholesky(_COV3)
    ref = MultivariateNormal(_MU3, _COV3)
    kw: dict[str, Any] = {parameter: matrix}
    d = MultivariateNormal(_MU3, **kw)
    b = np.array([[0.5, 0.2, 0.1], [-0.3, 1.0, 0.4]])
    _, pullback = xpops.vjp(MultivariateNormal.cdf, d, b, rng=0)
    cot_d, dvalue = pullback(np.ones(2))
    assert set(cot_d) == {"loc", parameter}
    _, dloc_ref, dvalue_ref = _grads(ref, b, rng=0)
    np.testing.assert_allclose(dvalue, dvalue_ref, rtol=1e-10)
    np.testing.assert_allclose(cot_d["loc"], dloc_ref, rtol=1e-10)


# ---- far tails ----------------------------------------------------------------------------


def test_logcdf_far_lower_tail_independent(xp):
    _skip_jax(xp)
    mu, var = np.array([0.0, 1.0, -1.0]), np.array([1.0, 4.0, 0.25])
    b = np.array([-30.0, -60.0, -16.0])
    d = _dist(xp, mu, np.diag(var))
    out, dloc, dvalue = _grads(d, xp.asarray(b), log=True)
    _, _, _, dlb, _ = _independent(mu, var, b)
    assert out < -1000
    np.testing.assert_allclose(dvalue, dlb, rtol=1e-10)
    np.testing.assert_allclose(dloc, -dlb, rtol=1e-10)
    # the cdf underflows there: its gradient is the density product, 0
    out, dloc, dvalue = _grads(d, xp.asarray(b))
    assert out == 0.0
    np.testing.assert_array_equal(dvalue, 0.0)


def test_logcdf_far_lower_tail_correlated():
    """D = 2, rho = 0.5, P about 1e-108: d logP / db by the conditional formula in logs, log P
    by quadrature of the integrand scaled by its value at the corner."""
    rho, b = 0.5, np.array([-20.0, -18.0])
    s = math.sqrt(1 - rho * rho)

    def log_f(x):  # log of phi(x) Phi((b_2 - rho x) / s), the integrand over x <= b_1
        return stats.norm.logpdf(x) + special.log_ndtr((b[1] - rho * x) / s)

    scaled = integrate.quad(
        lambda x: math.exp(log_f(x) - log_f(b[0])), b[0] - 5, b[0], epsabs=0, epsrel=1e-13
    )[0]
    log_p = log_f(b[0]) + math.log(scaled)
    ref = np.exp(stats.norm.logpdf(b) + special.log_ndtr((b[::-1] - rho * b) / s) - log_p)
    d = MultivariateNormal(np.zeros(2), np.array([[1.0, rho], [rho, 1.0]]))
    out, _, dvalue = _grads(d, b, log=True)
    assert out == pytest.approx(log_p, rel=1e-9)
    np.testing.assert_allclose(dvalue, ref, rtol=1e-7)


# ---- broadcasting, dtypes, edges ----------------------------------------------------------


def test_broadcast_batches(xp):
    """loc of batch (2,), value of batch (4, 1): the result (4, 2); each cotangent summed
    back to its primal's shape."""
    _skip_jax(xp)
    mu = np.array([[0.0, 0.5, -0.5], [1.0, -1.0, 0.2]])
    var = np.array([1.0, 2.0, 0.5])
    rng = np.random.default_rng(3)
    b = rng.normal(size=(4, 1, 3))
    cot = rng.normal(size=(4, 2))
    d = _dist(xp, mu, np.diag(var))
    for log in (False, True):
        out, dloc, dvalue = _grads(d, xp.asarray(b), cot, log)
        _, db, _, dlb, _ = _independent(mu, var, b)
        g = cot[..., None] * (dlb if log else db)
        assert out.shape == (4, 2)
        assert dloc.shape == (2, 3)
        assert dvalue.shape == (4, 1, 3)
        np.testing.assert_allclose(dvalue, g.sum(1, keepdims=True), rtol=1e-11)
        np.testing.assert_allclose(dloc, -g.sum(0), rtol=1e-11)


def test_batched_matrix_unbatched_value():
    """loc of shape (3,) and two covariances: the loc cotangent has the shape of loc as given,
    summed over the batch."""
    cov = np.stack([_COV3, np.diag([1.0, 2.0, 0.5])])
    d = MultivariateNormal(_MU3, cov)
    b = np.array([0.5, 0.2, 0.1])
    out, dloc, dvalue = _grads(d, b, rng=0)
    assert (out.shape, dloc.shape, dvalue.shape) == ((2,), (3,), (3,))
    _, db, _, _, _ = _independent(_MU3, np.diag(cov[1]), b)
    _, _, dvalue0 = _grads(MultivariateNormal(_MU3, _COV3), b, rng=0)
    np.testing.assert_allclose(dvalue, dvalue0 + db, rtol=1e-11)
    np.testing.assert_allclose(dloc, -(dvalue0 + db), rtol=1e-11)


def test_scalar_loc():
    d = MultivariateNormal(0.5, np.diag([1.0, 2.0]))
    _, dloc, _ = _grads(d, np.zeros(2))
    _, db, _, _, _ = _independent(0.5, np.array([1.0, 2.0]), np.zeros(2))
    assert dloc.shape == ()
    np.testing.assert_allclose(dloc, -db.sum(), rtol=1e-12)


def test_float32_kept(xp):
    _skip_jax(xp)
    loc, cov, b = [0.0, 0.3], [[1.0, 0.4], [0.4, 2.0]], np.array([0.2, -0.1])
    d = _dist(xp, loc, cov, dtype="float32")
    for log in (False, True):
        out, pullback = xpops.vjp(_method(log), d, xp.asarray(b, dtype=xp.float32))
        cot_d, dvalue = pullback(xp.ones((), dtype=xp.float32))
        assert out.dtype == dvalue.dtype == cot_d["loc"].dtype == xp.float32
        ref = _grads(MultivariateNormal(np.array(loc), np.array(cov)), b, log=log)
        np.testing.assert_allclose(to_numpy(dvalue), ref[2], rtol=1e-5)
        np.testing.assert_allclose(to_numpy(cot_d["loc"]), ref[1], rtol=1e-5)


def test_value_dtypes_and_lists():
    d = MultivariateNormal(np.zeros(2), np.eye(2))
    _, pullback = xpops.vjp(MultivariateNormal.cdf, d, np.array([1, 0]))
    assert pullback(np.asarray(1.0))[1].dtype == np.float64  # integers: the parameters' dtype
    _, pullback = xpops.vjp(MultivariateNormal.cdf, d, np.array([1, 0], dtype=np.float32))
    assert pullback(np.asarray(1.0))[1].dtype == np.float32
    _, pullback = xpops.vjp(MultivariateNormal.cdf, d, [[1.0, 0.0]])
    dvalue = pullback(np.ones(1))[1]
    assert isinstance(dvalue, np.ndarray)
    assert dvalue.shape == (1, 2)
    np.testing.assert_allclose(dvalue[0], stats.norm.pdf([1.0, 0.0]) * special.ndtr([0.0, 1.0]))


@pytest.mark.parametrize("log", [False, True])
def test_infinite_and_empty_limits(log):
    d = MultivariateNormal(_MU3, _COV3)
    b = np.array([[inf, 0.2, 0.1], [-inf, 0.2, 0.1], [inf, inf, inf], [0.5, 0.2, 0.1]])
    a = np.array([[-inf] * 3, [-inf] * 3, [-inf] * 3, [0.6, -inf, -inf]])  # last: empty box
    _, dloc, dvalue = _grads(d, b, log=log, lower_limit=a, rng=0)
    assert dvalue[0, 0] == 0.0
    assert np.all(dvalue[0, 1:] > 0)
    np.testing.assert_array_equal(dvalue[1:], 0.0)  # P = 0 (constant) or P = 1
    np.testing.assert_allclose(dloc, -dvalue[0], rtol=1e-12)
    # the first row: the 2-D marginal's gradient
    marginal = MultivariateNormal(_MU3[1:], _COV3[1:, 1:])
    _, _, ref = _grads(marginal, b[0, 1:], log=log)
    # (logcdf divides by the 3-D probability, quasi-Monte-Carlo to abseps)
    np.testing.assert_allclose(dvalue[0, 1:], ref, rtol=1e-4 if log else 1e-12)


def test_nan_propagates_without_validation():
    d = MultivariateNormal(_MU3, _COV3, validate_args=False)
    b = np.array([[np.nan, 0.2, 0.1], [0.5, 0.2, 0.1]])
    out, _, dvalue = _grads(d, b, rng=0)
    assert np.isnan(out[0])
    assert np.all(np.isnan(dvalue[0]))
    assert np.all(np.isfinite(dvalue[1]))


def test_zero_size():
    d = MultivariateNormal(_MU3, _COV3)
    out, dloc, dvalue = _grads(d, np.zeros((0, 3)))
    assert (out.shape, dloc.shape, dvalue.shape) == ((0,), (3,), (0, 3))
    np.testing.assert_array_equal(dloc, 0.0)
    d0 = MultivariateNormal(np.zeros(0), np.zeros((0, 0)))
    out, dloc, dvalue = _grads(d0, np.zeros((2, 0)))
    assert (out.shape, dloc.shape, dvalue.shape) == ((2,), (0,), (2, 0))


def test_inputs_unmodified():
    loc, cov = _MU3.copy(), _COV3.copy()
    d = MultivariateNormal(loc, cov)
    b, a = np.array([[0.5, 0.2, 0.1]]), np.array([[-1.0, -inf, -0.5]])
    copies = [x.copy() for x in (loc, cov, b, a)]
    cot = np.ones(1)
    _, pullback = xpops.vjp(MultivariateNormal.logcdf, d, b, lower_limit=a, rng=0)
    pullback(cot)
    for x, c in zip((loc, cov, b, a), copies, strict=True):
        np.testing.assert_array_equal(x, c)
    np.testing.assert_array_equal(cot, 1.0)


def test_same_rng_same_gradient():
    cov = np.full((4, 4), 0.3) + 0.7 * np.eye(4)
    d = MultivariateNormal(np.zeros(4), cov)
    b = np.array([0.3, -0.2, 0.5, 0.1])
    g1 = _grads(d, b, rng=5)[2]
    g2 = _grads(d, b, rng=5)[2]
    np.testing.assert_array_equal(g1, g2)


def test_dask_value():
    da = pytest.importorskip("dask.array")
    d = MultivariateNormal(_MU3, _COV3)
    b = np.array([[0.5, 0.2, 0.1], [-0.3, 1.0, 0.4], [1.0, 0.0, -1.0]])
    _, pullback = xpops.vjp(MultivariateNormal.cdf, d, da.from_array(b, chunks=(2, 3)), rng=0)
    cot_d, dvalue = pullback(da.ones(3, chunks=2))
    assert isinstance(dvalue, da.Array)
    _, dloc_ref, dvalue_ref = _grads(d, b, rng=0)
    np.testing.assert_allclose(dvalue.compute(), dvalue_ref, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(cot_d["loc"].compute()), dloc_ref, rtol=1e-10)


# ---- what is not given ----------------------------------------------------------------------


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("parameter", ["covariance_matrix", "precision_matrix", "scale_tril"])
def test_matrix_gradient_not_implemented(log, parameter):
    kw: dict[str, Any] = {parameter: np.eye(2)}
    d = MultivariateNormal(np.zeros(2), **kw)
    _, pullback = xpops.vjp(_method(log), d, np.zeros(2))
    cot_d, _ = pullback(np.asarray(1.0))
    assert isinstance(cot_d, CdfCotangent)
    assert parameter in cot_d
    assert "loc" in cot_d
    assert "other" not in cot_d
    assert list(cot_d) == ["loc", parameter]
    assert len(cot_d) == 2
    assert cot_d["loc"].shape == (2,)
    name = "logcdf" if log else "cdf"
    match = rf"MultivariateNormal\.{name} with respect to `{parameter}` is not implemented"
    with pytest.raises(NotImplementedError, match=match):
        cot_d[parameter]
    with pytest.raises(NotImplementedError, match=match):
        dict(cot_d)
    with pytest.raises(KeyError):
        cot_d["other"]
    assert parameter in repr(cot_d)


def test_bad_arguments():
    d = MultivariateNormal(np.zeros(2), np.eye(2))
    with pytest.raises(NotImplementedError, match="`return_error` must be False"):
        xpops.vjp(MultivariateNormal.cdf, d, np.zeros(2), return_error=True)
    with pytest.raises(TypeError, match="`self` must be a MultivariateNormal"):
        xpops.vjp(MultivariateNormal.cdf, object(), np.zeros(2))
    with pytest.raises(ValueError, match="`value` must have shape"):
        xpops.vjp(MultivariateNormal.cdf, d, np.zeros(3))
    with pytest.raises(TypeError, match="unexpected keyword"):
        xpops.vjp(MultivariateNormal.cdf, d, np.zeros(2), tolerance=1)
    _, pullback = xpops.vjp(MultivariateNormal.logcdf, d, np.zeros(2))
    with pytest.raises(TypeError, match=r"`cotangent` .* real floating"):
        pullback(np.asarray(1))
    assert CDF.primals == LOGCDF.primals == ("self", "value")
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="`cotangent` must be an array of the output's library"):
        pullback(torch.ones((), dtype=torch.float64))
