"""distributions.MultivariateNormal on every backend.

References are independent: scipy.stats.multivariate_normal (logpdf, entropy), closed forms
computed here in float64 NumPy (KL divergence, moments), and the issue's numeric anchors.
"""

import math

import numpy as np
import pytest
import scipy.special
import scipy.stats

import xpops
from xpops.distributions import MultivariateNormal, kl_divergence

from .._support import backend_name, library_of, scipy_mvn_cdf, to_numpy

COV = np.array([[2.0, 0.5], [0.5, 1.0]])


def random_cov(rng, batch, d):
    g = rng.standard_normal((*batch, d, d))
    return g @ np.swapaxes(g, -1, -2) / max(d, 1) + np.eye(d)


def as_xp(xp, a, dtype="float64"):
    return xp.asarray(np.array(a, dtype=dtype))  # a writable copy (torch warns otherwise)


def rtol(dtype):
    return 2e-4 if dtype == "float32" else 1e-10


def make(xp, loc, param, matrix, dtype="float64", **kw):
    return MultivariateNormal(as_xp(xp, loc, dtype), **{param: as_xp(xp, matrix, dtype)}, **kw)


def matrices(cov):
    """The three parametrizations of one covariance, in float64."""
    return {
        "covariance_matrix": cov,
        "precision_matrix": np.linalg.inv(cov),
        "scale_tril": np.linalg.cholesky(cov),
    }


PARAMS = ["covariance_matrix", "precision_matrix", "scale_tril"]


# ---- the anchors and SciPy ------------------------------------------------------------


@pytest.mark.parametrize("param", PARAMS)
def test_anchors(xp, param):
    d = make(xp, np.zeros(2), param, matrices(COV)[param])
    assert math.isclose(float(d.log_prob(as_xp(xp, [0.0, 0.0]))), -2.117685, abs_tol=1e-6)
    assert math.isclose(float(d.log_prob(as_xp(xp, [1.0, 1.0]))), -2.689114, abs_tol=1e-6)
    assert math.isclose(float(d.entropy()), 3.117685, abs_tol=1e-6)
    q = make(xp, np.ones(2), "covariance_matrix", np.eye(2))
    assert math.isclose(float(d.kl_divergence(q)), 1.220192, abs_tol=1e-6)
    assert math.isclose(float(kl_divergence(d, q)), 1.220192, abs_tol=1e-6)


@pytest.mark.parametrize("param", PARAMS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_log_prob_and_entropy_against_scipy(xp, param, dtype):
    rng = np.random.default_rng(1)
    batch, d = (3, 2), 4
    cov = random_cov(rng, batch, d)
    loc = rng.standard_normal((*batch, d))
    value = rng.standard_normal((5, *batch, d)) * 2
    dist = make(xp, loc, param, matrices(cov)[param], dtype)
    got = to_numpy(dist.log_prob(as_xp(xp, value, dtype)))
    assert got.shape == (5, *batch)
    assert got.dtype == np.dtype(dtype)
    want = np.empty((5, *batch))
    ent = np.empty(batch)
    for idx in np.ndindex(*batch):
        ref = scipy.stats.multivariate_normal(loc[idx], cov[idx])
        want[(slice(None), *idx)] = ref.logpdf(value[(slice(None), *idx)])
        ent[idx] = ref.entropy()
    np.testing.assert_allclose(got, want, rtol=rtol(dtype), atol=rtol(dtype))
    np.testing.assert_allclose(
        to_numpy(dist.prob(as_xp(xp, value, dtype))),
        np.exp(want),
        rtol=10 * rtol(dtype),
        atol=1e-12,
    )
    np.testing.assert_allclose(to_numpy(dist.entropy()), ent, rtol=rtol(dtype))


def test_the_three_parametrizations_agree(xp):
    rng = np.random.default_rng(2)
    cov = random_cov(rng, (4,), 3)
    loc = rng.standard_normal((4, 3))
    dists = {p: make(xp, loc, p, matrices(cov)[p]) for p in PARAMS}
    for p, dist in dists.items():
        np.testing.assert_allclose(to_numpy(dist.covariance_matrix), cov, rtol=1e-10, err_msg=p)
        np.testing.assert_allclose(
            to_numpy(dist.precision_matrix), np.linalg.inv(cov), rtol=1e-9, err_msg=p
        )
        np.testing.assert_allclose(
            to_numpy(dist.scale_tril), np.linalg.cholesky(cov), rtol=1e-9, atol=1e-12, err_msg=p
        )
        np.testing.assert_allclose(to_numpy(dist.mean), loc)
        np.testing.assert_allclose(to_numpy(dist.mode), loc)
        np.testing.assert_allclose(to_numpy(dist.loc), loc)
        var = np.diagonal(cov, axis1=-2, axis2=-1)
        np.testing.assert_allclose(to_numpy(dist.variance), var, rtol=1e-10)
        np.testing.assert_allclose(to_numpy(dist.stddev), np.sqrt(var), rtol=1e-10)


# ---- shapes and broadcasting ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("loc_shape", "cov_batch", "batch"),
    [((3,), (), ()), ((4, 3), (), (4,)), ((3,), (5,), (5,)), ((2, 1, 3), (4,), (2, 4))],
)
def test_batch_broadcasting(xp, loc_shape, cov_batch, batch):
    rng = np.random.default_rng(3)
    d = loc_shape[-1]
    loc = rng.standard_normal(loc_shape)
    cov = random_cov(rng, cov_batch, d)
    dist = make(xp, loc, "covariance_matrix", cov)
    assert dist.batch_shape == batch
    assert dist.event_shape == (d,)
    assert tuple(dist.scale_tril.shape) == (*batch, d, d)
    assert tuple(dist.covariance_matrix.shape) == (*batch, d, d)
    assert tuple(dist.mean.shape) == (*batch, d)
    value = rng.standard_normal((6, *[1] * len(batch), d))
    lp = to_numpy(dist.log_prob(as_xp(xp, value)))
    assert lp.shape == (6, *batch)
    loc_b = np.broadcast_to(loc, (*batch, d))
    cov_b = np.broadcast_to(cov, (*batch, d, d))
    for idx in np.ndindex(*batch):
        want = scipy.stats.multivariate_normal(loc_b[idx], cov_b[idx]).logpdf(value.reshape(6, d))
        np.testing.assert_allclose(lp[(slice(None), *idx)], np.atleast_1d(want), rtol=1e-10)
    assert tuple(dist.sample((7,), rng=0).shape) == (7, *batch, d)
    assert tuple(dist.entropy().shape) == batch


def test_kl_batch_broadcasting_against_closed_form(xp):
    rng = np.random.default_rng(4)
    d = 3
    cp, cq = random_cov(rng, (4, 1), d), random_cov(rng, (5,), d)
    mp, mq = rng.standard_normal((4, 1, d)), rng.standard_normal((d,))
    p = make(xp, mp, "covariance_matrix", cp)
    q = make(xp, mq, "precision_matrix", np.linalg.inv(cq))
    got = to_numpy(kl_divergence(p, q))
    assert got.shape == (4, 5)
    cp_b, cq_b = np.broadcast_to(cp, (4, 5, d, d)), np.broadcast_to(cq, (4, 5, d, d))
    mp_b, mq_b = np.broadcast_to(mp, (4, 5, d)), np.broadcast_to(mq, (4, 5, d))
    want = np.empty((4, 5))
    for idx in np.ndindex(4, 5):
        qi = np.linalg.inv(cq_b[idx])
        diff = mq_b[idx] - mp_b[idx]
        want[idx] = 0.5 * (
            np.trace(qi @ cp_b[idx])
            + diff @ qi @ diff
            - d
            + np.linalg.slogdet(cq_b[idx])[1]
            - np.linalg.slogdet(cp_b[idx])[1]
        )
    np.testing.assert_allclose(got, want, rtol=1e-9)
    np.testing.assert_allclose(to_numpy(kl_divergence(p, p)), np.zeros((4, 1)), atol=1e-12)


def test_zero_size_batch_and_d_zero(xp):
    dist = make(xp, np.zeros((0, 3)), "covariance_matrix", np.eye(3))
    assert dist.batch_shape == (0,)
    assert tuple(dist.log_prob(as_xp(xp, np.zeros(3))).shape) == (0,)
    assert tuple(dist.sample((2,), rng=0).shape) == (2, 0, 3)
    assert tuple(dist.entropy().shape) == (0,)
    empty = make(xp, np.zeros((4, 0)), "covariance_matrix", np.zeros((0, 0)))
    assert empty.event_shape == (0,)
    np.testing.assert_allclose(to_numpy(empty.log_prob(as_xp(xp, np.zeros((4, 0))))), 0.0)
    np.testing.assert_allclose(to_numpy(empty.entropy()), np.zeros(4))
    assert tuple(empty.sample((3,), rng=1).shape) == (3, 4, 0)
    np.testing.assert_allclose(to_numpy(kl_divergence(empty, empty)), np.zeros(4))


def test_loc_as_python_list_or_number():
    d = MultivariateNormal([0.0, 0.0], covariance_matrix=COV)
    assert isinstance(d.loc, np.ndarray)
    assert math.isclose(float(d.log_prob([1.0, 1.0])), -2.689114, abs_tol=1e-6)
    s = MultivariateNormal(0, covariance_matrix=COV)
    np.testing.assert_array_equal(s.loc, [0.0, 0.0])
    assert math.isclose(float(s.log_prob([0.0, 0.0])), -2.117685, abs_tol=1e-6)
    with pytest.raises(TypeError, match="loc"):
        MultivariateNormal("0", covariance_matrix=COV)


def test_integer_parameters_become_float(xp):
    d = MultivariateNormal(
        as_xp(xp, [0, 0], "int64"), covariance_matrix=as_xp(xp, [[2, 0], [0, 1]], "int64")
    )
    assert "float" in str(d.mean.dtype)


# ---- many points against few factors (the CuPy engine's fused kernels; D > 32 is generic) ----

LAYOUTS = [  # (loc batch, covariance batch, value shape without D)
    ((), (), (1000,)),
    ((3,), (), (333, 3)),
    ((), (3,), (129, 3)),
    ((3,), (3,), (2, 130, 3)),
    ((2, 1), (3,), (65, 2, 3)),  # a partly broadcast factor batch
]


@pytest.mark.parametrize("d", [1, 3, 16, 17, 32, 33])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("loc_batch", "cov_batch", "points"), LAYOUTS)
def test_log_prob_many_points(xp, d, dtype, loc_batch, cov_batch, points):
    rng = np.random.default_rng(d)
    loc = rng.standard_normal((*loc_batch, d))
    cov = random_cov(rng, cov_batch, d)
    value = rng.standard_normal((*points, d)) * 1.5
    dist = make(xp, loc, "covariance_matrix", cov, dtype)
    got = to_numpy(dist.log_prob(as_xp(xp, value, dtype)))
    assert got.shape == points
    assert got.dtype == np.dtype(dtype)
    batch = np.broadcast_shapes(loc_batch, cov_batch)
    loc_b = np.broadcast_to(loc, (*batch, d))
    cov_b = np.broadcast_to(cov, (*batch, d, d))
    want = np.empty(points)
    for idx in np.ndindex(*batch):
        ref = scipy.stats.multivariate_normal(loc_b[idx], cov_b[idx])
        sel = (Ellipsis, *idx) if idx else (Ellipsis,)
        want[sel] = ref.logpdf(value[(*sel, slice(None))])
    np.testing.assert_allclose(got, want, rtol=rtol(dtype), atol=d * rtol(dtype))


def test_log_prob_strided_values_and_late_nan(xp):
    rng = np.random.default_rng(4)
    d = 16
    cov = random_cov(rng, (), d)
    loc = rng.standard_normal(d)
    dist = make(xp, loc, "scale_tril", np.linalg.cholesky(cov))
    ref = scipy.stats.multivariate_normal(loc, cov)
    wide = rng.standard_normal((300, 2 * d))
    xwide = as_xp(xp, wide)
    for sl in ((slice(None), slice(None, None, 2)), (slice(None, None, 2), slice(0, d))):
        got = to_numpy(dist.log_prob(xwide[sl]))  # strided columns, then strided rows
        np.testing.assert_allclose(got, ref.logpdf(wide[sl]), rtol=1e-10)
    bad = rng.standard_normal((1000, d))
    bad[-1, -1] = np.nan
    with pytest.raises(ValueError, match="`value` must be finite"):
        dist.log_prob(as_xp(xp, bad))
    lax = make(xp, loc, "scale_tril", np.linalg.cholesky(cov), validate_args=False)
    got = to_numpy(lax.log_prob(as_xp(xp, bad)))
    assert np.isnan(got[-1])
    np.testing.assert_allclose(got[:-1], ref.logpdf(bad[:-1]), rtol=1e-10)


@pytest.mark.parametrize("d", [1, 16, 17])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sample_moments_many_points(xp, d, dtype):
    rng = np.random.default_rng(6)
    loc = rng.standard_normal((2, d))
    cov = random_cov(rng, (2,), d)
    dist = make(xp, loc, "covariance_matrix", cov, dtype)
    n = 100_000
    s = to_numpy(dist.sample((n,), rng=11)).astype(np.float64)
    assert s.shape == (n, 2, d)
    for b in range(2):
        sd = np.sqrt(np.diag(cov[b]))
        assert np.all(np.abs(s[:, b].mean(0) - loc[b]) < 5 * sd / math.sqrt(n))
        emp = np.atleast_2d(np.cov(s[:, b].T))
        se = np.sqrt((cov[b] ** 2 + np.outer(np.diag(cov[b]), np.diag(cov[b]))) / n)
        assert np.all(np.abs(emp - cov[b]) < 6 * se)
        # the whitened draws are standard normal, coordinate by coordinate
        z = np.linalg.solve(np.linalg.cholesky(cov[b]), (s[:, b] - loc[b]).T)
        for row in z[: min(d, 4)]:
            assert scipy.stats.kstest(row, "norm").pvalue > 1e-4


# ---- sampling -------------------------------------------------------------------------------


@pytest.mark.parametrize("param", PARAMS)
def test_sample_moments(xp, param):
    rng = np.random.default_rng(5)
    cov = random_cov(rng, (), 3)
    loc = rng.standard_normal(3)
    dist = make(xp, loc, param, matrices(cov)[param])
    n = 200_000
    s = to_numpy(dist.sample((n,), rng=42))
    assert s.shape == (n, 3)
    sd = np.sqrt(np.diag(cov))
    assert np.all(np.abs(s.mean(0) - loc) < 5 * sd / math.sqrt(n))
    emp = np.cov(s.T)
    se = np.sqrt((cov**2 + np.outer(np.diag(cov), np.diag(cov))) / n)  # sd of the estimates
    assert np.all(np.abs(emp - cov) < 6 * se)


def test_sample_reproducible_and_rsample_equal(xp):
    dist = make(xp, np.zeros(2), "covariance_matrix", COV)
    a = to_numpy(dist.sample((4,), rng=3))
    b = to_numpy(dist.rsample((4,), rng=3))
    np.testing.assert_array_equal(a, b)
    if backend_name(xp) != "cupy":
        c = to_numpy(dist.sample(4, rng=np.random.default_rng(3)))
        np.testing.assert_array_equal(a, c)
    else:  # a cupy.random.Generator: same seed, same draws; the generator moves on
        import cupy

        gen = cupy.random.default_rng(3)
        c = to_numpy(dist.sample(4, rng=gen))
        np.testing.assert_array_equal(c, to_numpy(dist.sample(4, rng=cupy.random.default_rng(3))))
        assert not np.array_equal(c, to_numpy(dist.sample(4, rng=gen)))
        with pytest.raises(TypeError, match="rng"):
            dist.sample(4, rng="seed")
    assert not np.array_equal(a, to_numpy(dist.sample((4,), rng=4)))
    with pytest.raises(ValueError, match="negative"):
        dist.sample((4,), rng=-1)


def test_rng_of_the_wrong_backend():
    dist = MultivariateNormal(np.zeros(2), covariance_matrix=COV)
    with pytest.raises(TypeError, match="rng"):
        dist.sample((2,), rng="seed")
    cupy = pytest.importorskip("cupy")
    try:
        gen = cupy.random.default_rng(0)
    except Exception:
        pytest.skip("no CUDA device available")
    with pytest.raises(TypeError, match="rng"):
        dist.sample((2,), rng=gen)


def test_rsample_keeps_gradients():
    torch = pytest.importorskip("torch")
    loc = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    tril = torch.tensor(np.linalg.cholesky(COV), requires_grad=True)
    dist = MultivariateNormal(loc, scale_tril=tril)
    dist.rsample((10,), rng=0).sum().backward()
    assert loc.grad is not None
    assert tril.grad is not None
    np.testing.assert_allclose(loc.grad.numpy(), [10.0, 10.0])
    got = dist.cdf(torch.zeros(2, dtype=torch.float64))  # parameters that require grad
    want = 0.25 + math.asin(0.5 / math.sqrt(2.0)) / (2 * math.pi)
    assert got.requires_grad  # recorded by autograd: a loss with it gets its gradient
    assert float(got.detach()) == pytest.approx(want, abs=1e-14)


# ---- validation -----------------------------------------------------------------------------


def test_exactly_one_matrix():
    with pytest.raises(ValueError, match="Exactly one of covariance_matrix"):
        MultivariateNormal(np.zeros(2))
    with pytest.raises(ValueError, match="Exactly one of covariance_matrix"):
        MultivariateNormal(np.zeros(2), covariance_matrix=COV, scale_tril=COV)


@pytest.mark.parametrize(
    ("param", "matrix", "message"),
    [
        ("covariance_matrix", [[1.0, 2.0], [0.0, 1.0]], "symmetric"),
        ("covariance_matrix", [[1.0, 2.0], [2.0, 1.0]], "positive definite"),
        ("precision_matrix", [[1.0, 0.0], [0.0, -1.0]], "positive definite"),
        ("precision_matrix", [[1.0, 0.5], [0.4, 1.0]], "symmetric"),
        ("scale_tril", [[1.0, 0.3], [0.5, 1.0]], "lower triangular"),
        ("scale_tril", [[1.0, 0.0], [0.5, -1.0]], "positive diagonal"),
        ("covariance_matrix", [[1.0, np.nan], [np.nan, 1.0]], "finite"),
        ("covariance_matrix", [[np.inf, 0.0], [0.0, 1.0]], "finite"),
        ("precision_matrix", [[1.0, -np.inf], [-np.inf, 1.0]], "finite"),
    ],
)
def test_constraint_errors(xp, param, matrix, message):
    with pytest.raises(ValueError, match=message) as info:
        make(xp, np.zeros(2), param, matrix)
    assert param in str(info.value)
    assert "(2, 2)" in str(info.value)


_GOOD_TRIL = np.array([[1.5, 0.0], [0.3, 0.7]])


def _tril_with(i, j, v, batch=()):
    m = np.broadcast_to(_GOOD_TRIL, (*batch, 2, 2)).copy()
    m[(*(b - 1 for b in batch), i, j)] = v  # in the last matrix of the batch
    return m


@pytest.mark.parametrize(
    ("loc", "tril", "message"),
    [  # the first failed check is reported: the mean, finite, triangular, diagonal
        ([0.0, np.inf], _tril_with(0, 1, 2.0), "`loc` must be finite"),
        ([0.0, 0.0], _tril_with(0, 1, np.nan), "`scale_tril` must be finite"),
        ([0.0, 0.0], _tril_with(1, 1, -np.inf), "`scale_tril` must be finite"),
        ([0.0, 0.0], _tril_with(1, 1, 0.0), "positive diagonal"),
        ([0.0, 0.0], _tril_with(0, 1, -0.0), None),  # a signed zero above it is zero
        (np.zeros((3, 2)), _tril_with(0, 1, 1e-30, (4, 1)), "lower triangular"),
        ([[0.0, 0.0], [np.nan, 0.0]], _GOOD_TRIL, "`loc` must be finite"),
        (np.zeros((0, 2)), _tril_with(1, 0, np.nan), "`scale_tril` must be finite"),
        (np.zeros((0, 2)), _tril_with(0, 0, -1.0), "positive diagonal"),
        (np.zeros(2), np.zeros((0, 2, 2)), None),
        (np.full(2, np.nan), np.zeros((0, 2, 2)), "`loc` must be finite"),
        # past one block of CuPy's check kernel (256 entries): the last block's bits count
        (np.zeros(2), _tril_with(1, 1, 0.0, (150,)), "positive diagonal"),
        (np.zeros(2), _tril_with(0, 1, 0.5, (150,)), "lower triangular"),
        (np.zeros(2), _tril_with(1, 0, 0.5, (150,)), None),
    ],
)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_scale_tril_checks(xp, loc, tril, message, dtype):
    """Every check of a `scale_tril` distribution, in order, batched and broadcast, with empty
    batches (CuPy runs them in one kernel)."""
    args = (as_xp(xp, np.asarray(loc, dtype)), as_xp(xp, np.asarray(tril, dtype)))
    if message is None:
        MultivariateNormal(args[0], scale_tril=args[1])
        return
    with pytest.raises(ValueError, match=message):
        MultivariateNormal(args[0], scale_tril=args[1])


def test_loc_and_value_errors(xp):
    with pytest.raises(ValueError, match="`loc` must be finite"):
        make(xp, [0.0, np.inf], "covariance_matrix", COV)
    with pytest.raises(ValueError, match="agree on D"):
        make(xp, np.zeros(3), "covariance_matrix", COV)
    with pytest.raises(ValueError, match=r"shape \(\*, D, D\)"):
        make(xp, np.zeros(2), "covariance_matrix", np.ones((2, 3)))
    with pytest.raises(ValueError, match="do not broadcast"):
        make(xp, np.zeros((3, 2)), "covariance_matrix", np.broadcast_to(COV, (4, 2, 2)))
    dist = make(xp, np.zeros(2), "covariance_matrix", COV)
    with pytest.raises(ValueError, match=r"event shape"):
        dist.log_prob(as_xp(xp, np.zeros(3)))
    with pytest.raises(ValueError, match="finite"):
        dist.log_prob(as_xp(xp, [np.nan, 0.0]))


def test_validate_args_false_skips_checks():
    junk = np.array([[1.0, 0.3], [0.5, 1.0]])  # junk above the diagonal
    dist = MultivariateNormal(np.zeros(2), scale_tril=junk, validate_args=False)
    clean = MultivariateNormal(np.zeros(2), scale_tril=np.tril(junk))
    np.testing.assert_allclose(dist.log_prob(np.ones(2)), clean.log_prob(np.ones(2)))
    np.testing.assert_array_equal(dist.sample((3,), rng=1), clean.sample((3,), rng=1))
    MultivariateNormal(np.array([np.nan, 0.0]), covariance_matrix=COV, validate_args=False)


def test_kl_errors():
    p = MultivariateNormal(np.zeros(2), covariance_matrix=COV)
    q = MultivariateNormal(np.zeros(3), covariance_matrix=np.eye(3))
    with pytest.raises(ValueError, match="same event size"):
        kl_divergence(p, q)
    with pytest.raises(TypeError, match="MultivariateNormal"):
        kl_divergence(p, "q")


_PLAIN_CASES = [  # (loc shape, matrix shape, parameter, dtype, validate_args): built or refused
    ((2,), (2, 2), "covariance_matrix", "float64", True),
    ((3, 2), (2, 2), "precision_matrix", "float32", True),
    ((2,), (4, 2, 2), "scale_tril", "float32", True),
    ((4, 1, 2), (3, 2, 2), "scale_tril", "float64", False),
    ((0, 2), (2, 2), "covariance_matrix", "float64", True),
    ((), (2, 2), "covariance_matrix", "float64", True),  # 0-d loc
    ((3,), (2, 2), "scale_tril", "float64", True),  # D differs
    ((2,), (2, 3), "covariance_matrix", "float32", True),  # not square
    ((3, 2), (4, 2, 2), "scale_tril", "float64", True),  # batches do not broadcast
    ((2,), (2, 2), "scale_tril", "float64", "yes"),  # validate_args not a bool
]


@pytest.mark.parametrize("case", _PLAIN_CASES, ids=str)
def test_plain_parameters_build_what_the_general_path_builds(xp, monkeypatch, case):
    """NumPy, CuPy and PyTorch parameters of one floating dtype take the constructor's fast
    path (`_common.plain_parameters`): the distribution, or the error, is the general path's."""
    from xpops.distributions import _mvn

    if backend_name(xp) not in ("numpy", "cupy", "torch"):
        pytest.skip("the fast path serves NumPy and CuPy arrays and PyTorch tensors")
    loc_shape, matrix_shape, name, dtype, validate = case
    rng = np.random.default_rng(4)
    size = matrix_shape[-1]
    if matrix_shape[-2] == size:
        m = np.tril(rng.uniform(-1, 1, matrix_shape), -1) + 2 * np.eye(size)
        m = m if name == "scale_tril" else m @ np.swapaxes(m, -1, -2)
    else:
        m = rng.uniform(-1, 1, matrix_shape)
    loc, matrix = as_xp(xp, rng.standard_normal(loc_shape), dtype), as_xp(xp, m, dtype)
    xpops.get_namespace(loc)  # the type's namespace cached, as after any earlier call
    taken = []
    plain = _mvn.plain_parameters

    def spy(*args):
        out = plain(*args)
        taken.append(out is not None)
        return out

    def build():
        return MultivariateNormal(loc, **{name: matrix}, validate_args=validate)

    monkeypatch.setattr(_mvn, "plain_parameters", spy)
    try:
        fast = build()
    except (TypeError, ValueError) as exc:
        fast = exc
    assert taken == [True]
    monkeypatch.setattr(_mvn, "plain_parameters", lambda *args: None)
    try:
        general = build()
    except (TypeError, ValueError) as exc:
        general = exc
    if isinstance(general, Exception):
        assert type(fast) is type(general)
        assert str(fast) == str(general)
        return
    assert not isinstance(fast, Exception)
    state = [(a.batch_shape, a.event_shape, a._dtype, a._given[0]) for a in (fast, general)]
    assert state[0] == state[1]
    assert all(p is q for p, q in zip(fast._args, general._args, strict=True))
    np.testing.assert_array_equal(to_numpy(fast.loc), to_numpy(general.loc))
    np.testing.assert_array_equal(to_numpy(fast.scale_tril), to_numpy(general.scale_tril))


@pytest.mark.parametrize("batch", [(), (3,), (150,)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_factor_is_the_distributions_own(xp, batch, dtype):
    """The factor given as `scale_tril` is copied: writing to the caller's array later changes
    nothing (the CuPy check kernel makes the copy)."""
    if backend_name(xp) == "jax":
        pytest.skip("JAX arrays cannot be written to")
    rng = np.random.default_rng(3)
    tril = np.broadcast_to(_GOOD_TRIL, (*batch, 2, 2)) * rng.uniform(1, 2, (*batch, 1, 1))
    given = as_xp(xp, tril, dtype)
    d = MultivariateNormal(as_xp(xp, np.zeros(2), dtype), scale_tril=given)
    given[...] = 7.0
    np.testing.assert_array_equal(to_numpy(d.scale_tril), tril.astype(dtype))
    assert library_of(d.scale_tril) == backend_name(xp)


def test_inputs_unmodified(xp):
    loc, cov = np.zeros(2), COV.copy()
    xl, xc = as_xp(xp, loc), as_xp(xp, cov)
    d = MultivariateNormal(xl, covariance_matrix=xc)
    d.log_prob(as_xp(xp, np.ones(2)))
    d.sample((3,), rng=0)
    np.testing.assert_array_equal(to_numpy(xl), loc)
    np.testing.assert_array_equal(to_numpy(xc), cov)


def test_result_namespace(xp):
    d = make(xp, np.zeros(2), "covariance_matrix", COV)
    name = backend_name(xp)
    for out in (d.log_prob(as_xp(xp, np.ones(2))), d.sample((2,), rng=0), d.entropy()):
        assert library_of(out) == name or name == "numpy"


def test_public_surface():
    assert xpops.distributions.MultivariateNormal is MultivariateNormal
    assert "distributions" in xpops.__all__


# ---- cdf and logcdf -------------------------------------------------------------------------


def test_cdf_1d_exact_and_far_tail():
    d = MultivariateNormal(np.zeros(1), covariance_matrix=np.eye(1))
    np.testing.assert_allclose(d.cdf(np.array([0.0])), 0.5)
    np.testing.assert_allclose(d.logcdf(np.array([-40.0])), -804.6084420137538, rtol=1e-12)
    x = np.linspace(-5, 5, 11)[:, None]
    np.testing.assert_allclose(d.cdf(x), scipy.stats.norm.cdf(x[:, 0]), rtol=1e-13, atol=0)
    s = MultivariateNormal(np.array([1.0]), covariance_matrix=np.array([[4.0]]))
    got = s.cdf(np.array([3.0]), lower_limit=np.array([-1.0]))
    np.testing.assert_allclose(got, scipy.stats.norm.cdf(1) - scipy.stats.norm.cdf(-1), rtol=1e-13)


def test_cdf_2d_against_closed_form_and_scipy():
    rho = 0.3
    cov = np.array([[1.0, rho], [rho, 1.0]])
    d = MultivariateNormal(np.zeros(2), covariance_matrix=cov)
    want = 0.25 + math.asin(rho) / (2 * math.pi)
    np.testing.assert_allclose(d.cdf(np.zeros(2)), want, rtol=0, atol=1e-14)
    values = np.array([[0.5, -1.0], [2.0, 1.5], [-3.0, 0.2]])
    want = scipy_mvn_cdf(values, np.zeros(2), cov, abseps=1e-12, releps=1e-12, seed=0)
    np.testing.assert_allclose(d.cdf(values), want, atol=1e-9)
    cov2 = 2.0 * cov
    d2 = MultivariateNormal(np.ones(2), covariance_matrix=cov2)
    want2 = scipy_mvn_cdf(values, np.ones(2), cov2, abseps=1e-12, releps=1e-12, seed=0)
    np.testing.assert_allclose(d2.cdf(values), want2, atol=1e-9)
    _, err = d.cdf(np.zeros(2), return_error=True)
    assert 0 <= float(err) <= 1e-13


@pytest.mark.parametrize("dim", [3, 5])
def test_cdf_equicorrelated_orthant(dim):
    cov = np.full((dim, dim), 0.5) + 0.5 * np.eye(dim)
    d = MultivariateNormal(np.zeros(dim), covariance_matrix=cov)
    got, err = d.cdf(np.zeros(dim), abseps=1e-5, rng=1, return_error=True)
    assert abs(float(got) - 1 / (dim + 1)) <= max(3 * float(err), 2e-5)
    again = d.cdf(np.zeros(dim), abseps=1e-5, rng=1)
    assert float(again) == float(got)


def test_cdf_batched_against_scipy():
    rng = np.random.default_rng(9)
    cov = random_cov(rng, (3,), 4)
    loc = rng.standard_normal((3, 4))
    d = MultivariateNormal(loc, covariance_matrix=cov)
    value = loc + 0.5
    got = d.cdf(value, abseps=1e-6, rng=0)
    assert got.shape == (3,)
    for i in range(3):
        want = scipy_mvn_cdf(value[i], loc[i], cov[i], abseps=1e-7, releps=0, seed=1)
        assert abs(got[i] - want) < 5e-5


def test_logcdf_far_tail_5d():
    d = MultivariateNormal(np.zeros(5), covariance_matrix=np.eye(5))
    got = d.logcdf(np.full(5, -10.0), rng=0)
    want = 5 * scipy.special.log_ndtr(-10.0)
    assert np.isfinite(got)
    np.testing.assert_allclose(got, want, rtol=1e-8)


def test_cdf_option_errors():
    d = MultivariateNormal(np.zeros(3), covariance_matrix=np.eye(3))
    with pytest.raises(ValueError, match="abseps"):
        d.cdf(np.zeros(3), abseps=-1)
    with pytest.raises(ValueError, match="maxpts"):
        d.cdf(np.zeros(3), maxpts=0)
    with pytest.raises(TypeError, match="rng"):
        d.cdf(np.zeros(3), rng="seed")
    with pytest.raises(ValueError, match="NaN"):
        d.cdf(np.array([np.nan, 0.0, 0.0]))
    with pytest.raises(ValueError, match="event shape"):
        d.cdf(np.zeros(2))


def test_cdf_on_every_namespace(xp):
    """CPU arrays of any library get the NumPy computation and a result of their library;
    CuPy arrays a result on their GPU (D = 2 through the NumPy engine)."""
    rho = 0.3
    cov = np.array([[1.0, rho], [rho, 1.0]])
    d = make(xp, np.zeros(2), "covariance_matrix", cov)
    got = d.cdf(as_xp(xp, np.zeros((3, 2))))
    assert library_of(got) == backend_name(xp)
    np.testing.assert_allclose(to_numpy(got), 0.25 + math.asin(rho) / (2 * math.pi), atol=1e-14)
    value, err = d.logcdf(as_xp(xp, np.full(2, -10.0)), return_error=True)
    assert tuple(value.shape) == ()
    assert np.isfinite(float(to_numpy(value)))
    assert float(to_numpy(err)) >= 0
    log_ndtr = scipy.special.log_ndtr
    assert float(to_numpy(value)) < log_ndtr(-10.0)  # below the marginal's
    assert float(to_numpy(value)) > 2 * log_ndtr(-10.0)  # above independence (rho > 0)


def test_batched_sample_moments(xp):
    rng = np.random.default_rng(8)
    cov = random_cov(rng, (2,), 3)
    loc = rng.standard_normal((2, 3))
    dist = make(xp, loc, "scale_tril", np.linalg.cholesky(cov))
    n = 100_000
    s = to_numpy(dist.sample((n,), rng=7))
    assert s.shape == (n, 2, 3)
    for b in range(2):
        sd = np.sqrt(np.diag(cov[b]))
        assert np.all(np.abs(s[:, b].mean(0) - loc[b]) < 5 * sd / math.sqrt(n))
        se = np.sqrt((cov[b] ** 2 + np.outer(np.diag(cov[b]), np.diag(cov[b]))) / n)
        assert np.all(np.abs(np.cov(s[:, b].T) - cov[b]) < 6 * se)


def test_cdf_d_zero_and_lower_limit_3d():
    empty = MultivariateNormal(np.zeros((2, 0)), covariance_matrix=np.zeros((0, 0)))
    np.testing.assert_array_equal(empty.cdf(np.zeros((2, 0))), np.ones(2))
    np.testing.assert_array_equal(empty.logcdf(np.zeros((2, 0))), np.zeros(2))
    rng = np.random.default_rng(11)
    cov = random_cov(rng, (), 3)
    loc = rng.standard_normal(3)
    d = MultivariateNormal(loc, covariance_matrix=cov)
    lower, upper = loc - 1.0, loc + 0.5
    got = d.cdf(upper, lower_limit=lower, abseps=1e-6, rng=0)
    want = scipy_mvn_cdf(upper, loc, cov, lower_limit=lower, abseps=1e-7, releps=0, seed=2)
    assert abs(float(got) - float(want)) < 5e-5
    np.testing.assert_allclose(
        d.logcdf(upper, lower_limit=lower, abseps=1e-6, rng=0), np.log(float(got)), rtol=1e-4
    )
