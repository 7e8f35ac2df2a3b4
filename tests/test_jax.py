"""JAX: ``jax.grad``, ``jax.jit``, ``jax.vmap`` and their compositions on every op, against
independent references (central finite differences in float64 of the NumPy results, closed
forms, JAX's own autodiff of a plain ``jnp`` formula), and the JAX `rng` keys.

Shapes are few and small: JAX compiles each new one (a fraction of a second each).
"""

import numpy as np
import pytest

import xpops
from xpops.distributions import MultivariateNormal, kl_divergence
from xpops.linalg import cholesky_solve

from ._support import to_numpy

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

pytestmark = pytest.mark.usefixtures("jax_only")  # skipped when XPOPS_BACKEND names another

inf = np.inf
PARAMETERS = ("covariance_matrix", "precision_matrix", "scale_tril")


@pytest.fixture(autouse=True, scope="module")
def _x64():
    """float64 in JAX (JAX's own flag; the other libraries do not read it)."""
    jax.config.update("jax_enable_x64", True)


def central_differences(f, x, eps=1e-6):
    """The gradient of the scalar NumPy function `f` at float64 `x`, by central differences."""
    x = np.asarray(x, dtype=np.float64)
    grad = np.zeros_like(x)
    for k in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[k] = eps
        grad[k] = (f(x + step) - f(x - step)) / (2 * eps)
    return grad


def directional(f, x, direction, eps=1e-6):
    """The derivative of the scalar NumPy function `f` at `x` along `direction`."""
    return (f(x + eps * direction) - f(x - eps * direction)) / (2 * eps)


def close(got, want, tol=1e-6):
    np.testing.assert_allclose(to_numpy(got), want, rtol=tol, atol=tol)


# ---- logcumsumexp -------------------------------------------------------------------------------

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 5)) * 3
WEIGHTS = RNG.standard_normal((2, 5))
SCANS = [  # (axis, exclusive, reverse)
    (1, False, False),
    (0, True, True),
    (None, False, True),
]


def _weights(axis):
    return WEIGHTS.reshape(-1) if axis is None else WEIGHTS


def _scan_loss_numpy(axis, exclusive, reverse):
    w = _weights(axis)

    def loss(x):
        y = xpops.logcumsumexp(x, axis, exclusive=exclusive, reverse=reverse)
        return float(np.sum(np.where(y == -inf, 0.0, w * y)))

    return loss


def _scan_loss_jax(axis, exclusive, reverse):
    w = jnp.asarray(_weights(axis))

    def loss(x):
        y = xpops.logcumsumexp(x, axis, exclusive=exclusive, reverse=reverse)
        return jnp.sum(jnp.where(y == -inf, 0.0, w * y))

    return loss


@pytest.mark.parametrize(("axis", "exclusive", "reverse"), SCANS)
def test_logcumsumexp_grad_and_compositions(axis, exclusive, reverse):
    want = central_differences(_scan_loss_numpy(axis, exclusive, reverse), X)
    loss = _scan_loss_jax(axis, exclusive, reverse)
    x = jnp.asarray(X)
    close(jax.jit(jax.grad(loss))(x), want)
    if axis == 1:  # the compositions once (each compiles anew)
        close(jax.grad(loss)(x), want)
        close(jax.grad(jax.jit(loss))(x), want)
        out = jax.jit(lambda x: xpops.logcumsumexp(x, axis=1))(x)
        close(out, xpops.logcumsumexp(X, axis=1), 1e-12)


def test_logcumsumexp_vmap():
    x = jnp.asarray(X)
    rows = jax.vmap(xpops.logcumsumexp)(x)  # axis None of each row
    close(rows, xpops.logcumsumexp(X, axis=1), 1e-12)
    close(jax.jit(jax.vmap(xpops.logcumsumexp))(x), xpops.logcumsumexp(X, axis=1), 1e-12)
    # vmap of grad: each row's gradient, the residuals batched and the cotangent not
    w = jnp.asarray(WEIGHTS[0])

    def row_loss(r):
        return jnp.sum(w * xpops.logcumsumexp(r))

    def numpy_row_loss(r):
        return float(np.sum(WEIGHTS[0] * xpops.logcumsumexp(r)))

    want = np.stack([central_differences(numpy_row_loss, r) for r in X])
    close(jax.vmap(jax.grad(row_loss))(x), want)
    # the Jacobian by reverse mode: vmap of the pullback over cotangents
    jac = jax.jacrev(xpops.logcumsumexp)(x[0])
    y = xpops.logcumsumexp(X[0])
    want = np.tril(np.exp(X[0][None, :] - y[:, None]))  # dy_i / dx_j = exp(x_j - y_i), j <= i
    close(jac, want, 1e-12)


def test_logcumsumexp_grad_at_minus_inf_has_no_nan():
    x = jnp.asarray([-inf, -inf, 0.0, 1.0, -inf, 2.0])
    grad = jax.grad(lambda x: jnp.sum(xpops.logcumsumexp(x)))(x)
    got = to_numpy(grad)
    assert not np.any(np.isnan(got))
    # outputs of -inf contribute nothing; a -inf input gets 0; the finite ones the sum of
    # exp(x_j - y_i) over the outputs i >= j
    xs = np.array([-inf, -inf, 0.0, 1.0, -inf, 2.0])
    y = np.logaddexp.accumulate(xs)
    want = np.zeros(6)
    for j in np.flatnonzero(np.isfinite(xs)):
        want[j] = np.sum(np.exp(xs[j] - y[j:]))
    close(got, want, 1e-12)
    # the same through jit and vmap
    close(jax.jit(jax.grad(lambda x: jnp.sum(xpops.logcumsumexp(x))))(x), want, 1e-12)
    batch = jnp.stack([x, x])
    grads = jax.vmap(jax.grad(lambda x: jnp.sum(xpops.logcumsumexp(x))))(batch)
    close(grads, np.stack([want, want]), 1e-12)


def test_logcumsumexp_complex_against_jax_autodiff_of_the_formula():
    z = jnp.asarray(RNG.standard_normal(4) + 1j * RNG.standard_normal(4))

    def loss(f):
        return lambda z: jnp.sum(jnp.abs(f(z)) ** 2)

    want = jax.grad(loss(lambda z: jnp.log(jnp.cumsum(jnp.exp(z)))))(z)
    close(jax.grad(loss(xpops.logcumsumexp))(z), to_numpy(want), 1e-10)


def test_logcumsumexp_float32_and_integers():
    x = jnp.asarray(X[0], dtype=jnp.float32)
    grad = jax.grad(lambda x: jnp.sum(xpops.logcumsumexp(x)))(x)
    assert grad.dtype == jnp.float32
    want = central_differences(lambda x: float(np.sum(xpops.logcumsumexp(x))), X[0])
    close(grad, want, 1e-4)
    # integer inputs have no gradient: they go to the engines, under jit too
    ints = jnp.arange(4)
    close(jax.jit(xpops.logcumsumexp)(ints), xpops.logcumsumexp(np.arange(4)), 1e-12)


def test_forward_mode_is_refused():
    with pytest.raises(TypeError, match="forward-mode"):
        jax.jacfwd(xpops.logcumsumexp)(jnp.asarray(X[0]))


# ---- cholesky_solve -----------------------------------------------------------------------------

FACTOR = np.array([[1.5, 0.0, 0.0], [0.4, 1.2, 0.0], [-0.3, 0.5, 0.9]])
RHS = RNG.standard_normal((3, 2))
RHS_WEIGHTS = RNG.standard_normal((3, 2))


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_grad_and_compositions(upper):
    factor = FACTOR.T if upper else FACTOR

    def numpy_loss(b, u):
        return float(np.sum(RHS_WEIGHTS * cholesky_solve(b, u, upper)))

    want_b = central_differences(lambda b: numpy_loss(b, factor), RHS)
    want_u = central_differences(lambda u: numpy_loss(RHS, u), factor)  # 0 off the triangle

    def loss(b, u):
        return jnp.sum(jnp.asarray(RHS_WEIGHTS) * cholesky_solve(b, u, upper))

    b, u = jnp.asarray(RHS), jnp.asarray(factor)
    gb, gu = jax.jit(jax.grad(loss, (0, 1)))(b, u)
    close(gb, want_b)
    close(gu, want_u)
    if not upper:  # the compositions once (each compiles anew)
        gb, gu = jax.grad(loss, (0, 1))(b, u)
        close(gb, want_b)
        close(gu, want_u)
        # one argument traced, the other concrete (closed over)
        close(jax.grad(lambda u: loss(b, u))(u), want_u)
        close(jax.jit(cholesky_solve)(b, u), cholesky_solve(RHS, factor))


def test_cholesky_solve_vmap():
    b, u = jnp.asarray(RHS), jnp.asarray(FACTOR)
    # the columns of b as separate right-hand sides (vectors)
    cols = jax.vmap(cholesky_solve, in_axes=(1, None), out_axes=1)(b, u)
    close(cols, cholesky_solve(RHS, FACTOR), 1e-12)
    # vmap of grad over a batch of factors
    factors = jnp.stack([u, 2 * u])

    def loss(u):
        return jnp.sum(cholesky_solve(b, u))

    def numpy_loss(f):
        return float(np.sum(cholesky_solve(RHS, f)))

    want = np.stack([central_differences(numpy_loss, f) for f in (FACTOR, 2 * FACTOR)])
    close(jax.vmap(jax.grad(loss))(factors), want)
    close(jax.jit(jax.vmap(jax.grad(loss)))(factors), want)


def test_cholesky_solve_large_systems_grad_jit_vmap():
    """A system of more than 64 unknowns (where NumPy and CuPy take the rule's one-product
    form): grad under jit, both triangles, and vmap of grad over factors, against the rule
    written out in NumPy (float64)."""
    from .linalg.test_vjp import closed_form

    rng = np.random.default_rng(5)
    m, k = 70, 3
    lower = np.tril(rng.standard_normal((2, m, m))) / m**0.5 + 2 * np.eye(m)
    b, w = rng.standard_normal((m, k)), rng.standard_normal((m, k))
    for upper in (False, True):
        factor = np.swapaxes(lower, -1, -2) if upper else lower

        def loss(bb, uu, upper=upper):
            return jnp.sum(jnp.asarray(w) * cholesky_solve(bb, uu, upper))

        gb, gu = jax.jit(jax.grad(loss, (0, 1)))(jnp.asarray(b), jnp.asarray(factor[0]))
        want_b, want_u = closed_form(b, factor[0], w, upper)
        close(gb, want_b, 1e-10)
        close(gu, want_u, 1e-10)
    grads = jax.vmap(jax.grad(lambda uu: loss(jnp.asarray(b), uu, False)))(jnp.asarray(lower))
    close(grads, np.stack([closed_form(b, f, w, False)[1] for f in lower]), 1e-10)


# ---- MultivariateNormal -------------------------------------------------------------------------

LOC = np.array([0.1, -0.2, 0.3])
COV = np.array([[1.0, 0.3, 0.1], [0.3, 2.0, 0.2], [0.1, 0.2, 1.5]])
VALUE = np.array([0.5, 0.1, -0.3])


def _matrix(name):
    if name == "covariance_matrix":
        return COV
    if name == "precision_matrix":
        return np.linalg.inv(COV)
    return np.linalg.cholesky(COV)


def _direction(name, seed):
    """A random direction in the parameter's space: symmetric, or lower triangular."""
    a = np.random.default_rng(seed).standard_normal((3, 3))
    return np.tril(a) if name == "scale_tril" else a + a.T


METHODS = {
    "log_prob": lambda d: d.log_prob(VALUE),
    "prob": lambda d: d.prob(VALUE),
    "entropy": lambda d: d.entropy(),
    "kl": lambda d: kl_divergence(d, MultivariateNormal(np.zeros(3), np.eye(3) * 1.3)),
}


@pytest.mark.parametrize("name", PARAMETERS)
@pytest.mark.parametrize("method", list(METHODS))
def test_mvn_grads_against_finite_differences(name, method):
    m = _matrix(name)
    value = VALUE

    def numpy_f(loc, m):
        d = MultivariateNormal(loc, validate_args=False, **{name: m})
        if method == "log_prob":
            return float(d.log_prob(value))
        if method == "prob":
            return float(d.prob(value))
        if method == "entropy":
            return float(d.entropy())
        return float(kl_divergence(d, MultivariateNormal(np.zeros(3), np.eye(3) * 1.3)))

    def jax_f(loc, m):
        d = MultivariateNormal(loc, **{name: m})
        if method == "log_prob":
            return d.log_prob(jnp.asarray(value))
        if method == "prob":
            return d.prob(jnp.asarray(value))
        if method == "entropy":
            return d.entropy()
        q = MultivariateNormal(jnp.zeros(3), jnp.eye(3) * 1.3)
        return kl_divergence(d, q)

    g_loc, g_m = jax.jit(jax.grad(jax_f, (0, 1)))(jnp.asarray(LOC), jnp.asarray(m))
    close(g_loc, central_differences(lambda a: numpy_f(a, m), LOC))
    for seed in (1, 2):
        direction = _direction(name, seed)
        want = directional(lambda a: numpy_f(LOC, a), m, direction)
        assert float(jnp.sum(g_m * direction)) == pytest.approx(want, rel=1e-6, abs=1e-8)


def test_mvn_log_prob_value_grad_vmap_and_jit():
    loc, cov = jnp.asarray(LOC), jnp.asarray(COV)
    values = np.stack([VALUE, VALUE + 1, VALUE - 0.5])

    def lp(v):
        return MultivariateNormal(loc, cov).log_prob(v)

    want = -np.linalg.solve(COV, (values - LOC).T).T  # d log_prob / d value
    close(jax.vmap(jax.grad(lp))(jnp.asarray(values)), want, 1e-12)
    close(jax.jit(jax.vmap(jax.grad(lp)))(jnp.asarray(values)), want, 1e-12)
    want_lp = MultivariateNormal(LOC, COV).log_prob(values)
    close(jax.jit(jax.vmap(lp))(jnp.asarray(values)), want_lp, 1e-12)
    # a distribution built outside jit and used inside, then outside again
    d = MultivariateNormal(loc, cov)
    close(jax.jit(d.log_prob)(jnp.asarray(values)), want_lp, 1e-12)
    close(d.log_prob(jnp.asarray(values)), want_lp, 1e-12)


@pytest.mark.parametrize("name", PARAMETERS)
def test_mvn_rsample_grads_with_a_key(name):
    m = _matrix(name)
    key = jax.random.key(3)
    eps = to_numpy(jax.random.normal(key, (4, 3), jnp.float64))

    def numpy_f(loc, m):
        tril = np.linalg.cholesky(np.linalg.inv(m) if name == "precision_matrix" else m)
        tril = np.tril(m) if name == "scale_tril" else tril
        return float(np.sum(np.cos(loc + eps @ tril.T)))

    def jax_f(loc, m):
        x = MultivariateNormal(loc, **{name: m}).rsample((4,), rng=key)
        return jnp.sum(jnp.cos(x))

    g_loc, g_m = jax.grad(jax_f, (0, 1))(jnp.asarray(LOC), jnp.asarray(m))
    close(g_loc, central_differences(lambda a: numpy_f(a, m), LOC))
    direction = _direction(name, 1)
    want = directional(lambda a: numpy_f(LOC, a), m, direction)
    assert float(jnp.sum(g_m * direction)) == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("log", [False, True])
def test_mvn_cdf_grads(log):
    cov2 = COV[:2, :2]  # D = 2: deterministic, so finite differences are exact enough
    loc, value = LOC[:2], VALUE[:2]

    def numpy_f(loc, value):
        d = MultivariateNormal(loc, cov2)
        return float(d.logcdf(value) if log else d.cdf(value))

    def jax_f(loc, value):
        d = MultivariateNormal(loc, jnp.asarray(cov2))
        return d.logcdf(value) if log else d.cdf(value)

    g_loc, g_value = jax.jit(jax.grad(jax_f, (0, 1)))(jnp.asarray(loc), jnp.asarray(value))
    close(g_loc, central_differences(lambda a: numpy_f(a, value), loc))
    close(g_value, central_differences(lambda v: numpy_f(loc, v), value))


def test_mvn_cdf_under_jit_and_vmap():
    values = np.stack([VALUE, VALUE + 1])
    want = MultivariateNormal(LOC, COV).cdf(values, rng=0)
    loc, cov = jnp.asarray(LOC), jnp.asarray(COV)
    got = jax.jit(lambda v: MultivariateNormal(loc, cov).cdf(v, rng=0))(jnp.asarray(values))
    close(got, want, 1e-12)
    got = jax.vmap(lambda v: MultivariateNormal(loc, cov).cdf(v, rng=0))(jnp.asarray(values))
    close(got, want, 1e-12)
    # the error estimate (no gradient) under jit
    out, err = jax.jit(lambda v: MultivariateNormal(loc, cov).cdf(v, rng=0, return_error=True))(
        jnp.asarray(values)
    )
    close(out, want, 1e-12)
    assert err.shape == (2,)


def test_mvn_cdf_gradient_of_the_matrix_is_refused():
    cov2 = jnp.asarray(COV[:2, :2])
    with pytest.raises(NotImplementedError, match="covariance_matrix"):
        jax.grad(lambda m: MultivariateNormal(jnp.zeros(2), m).cdf(jnp.ones(2)))(cov2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mvn_log_prob_at_many_points(dtype):
    """One distribution at many points (the JAX engine compiled as one program): against
    SciPy's ``logpdf`` in float64, the distribution's dtype kept, eager and under ``jax.jit``;
    a non-finite point anywhere is refused on concrete arrays."""
    from scipy.stats import multivariate_normal

    rng = np.random.default_rng(4)
    a = rng.standard_normal((5, 5))
    cov = a @ a.T / 5 + np.eye(5)
    loc = rng.standard_normal(5)
    values = rng.standard_normal((4, 300, 5)) * 2
    want = multivariate_normal(loc, cov).logpdf(values)
    d = MultivariateNormal(jnp.asarray(loc, dtype=dtype), jnp.asarray(cov, dtype=dtype))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for got in (
        d.log_prob(jnp.asarray(values, dtype=dtype)),
        jax.jit(d.log_prob)(jnp.asarray(values, dtype=dtype)),
    ):
        assert got.dtype == dtype
        assert got.shape == (4, 300)
        np.testing.assert_allclose(to_numpy(got), want, rtol=tol, atol=tol)
    for bad in (np.nan, np.inf, -np.inf):
        v = values.copy()
        v[3, 299, 4] = bad
        with pytest.raises(ValueError, match="must be finite"):
            d.log_prob(jnp.asarray(v, dtype=dtype))
    unchecked = MultivariateNormal(jnp.asarray(loc), jnp.asarray(cov), validate_args=False)
    v = values.copy()
    v[0, 0, 0] = np.inf
    out = to_numpy(unchecked.log_prob(jnp.asarray(v)))
    assert out[0, 0] == -np.inf
    np.testing.assert_allclose(out[1:], want[1:], rtol=1e-12, atol=1e-12)


def test_value_checks_are_skipped_under_a_trace():
    loc, cov = jnp.asarray(LOC), jnp.asarray(COV)
    bad = jnp.asarray([np.nan, 0.0, 0.0])
    with pytest.raises(ValueError, match="must be finite"):
        MultivariateNormal(loc, cov).log_prob(bad)
    out = jax.jit(lambda v: MultivariateNormal(loc, cov).log_prob(v))(bad)
    assert np.isnan(to_numpy(out))
    not_symmetric = jnp.asarray([[1.0, 0.5], [0.0, 1.0]])
    with pytest.raises(ValueError, match="symmetric"):
        MultivariateNormal(jnp.zeros(2), not_symmetric)
    jax.jit(lambda m: MultivariateNormal(jnp.zeros(2), m).entropy())(not_symmetric)
    # checks of shapes still run under a trace
    with pytest.raises(ValueError, match="event shape"):
        jax.jit(lambda v: MultivariateNormal(loc, cov).log_prob(v))(jnp.zeros(2))


# ---- rng ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("make_key", [jax.random.key, jax.random.PRNGKey])
def test_rng_keys(make_key):
    d = MultivariateNormal(jnp.asarray(LOC), jnp.asarray(COV))
    key = make_key(7)
    x = d.sample((5,), rng=key)
    assert x.shape == (5, 3)
    assert x.dtype == jnp.float64
    eps = to_numpy(jax.random.normal(key, (5, 3), jnp.float64))
    close(x, LOC + eps @ np.linalg.cholesky(COV).T, 1e-12)
    close(d.rsample((5,), rng=key), x, 0)
    assert not np.allclose(to_numpy(d.sample((5,), rng=make_key(8))), to_numpy(x))
    close(jax.jit(lambda k: d.sample((5,), rng=k))(key), x, 1e-12)
    keys = jax.random.split(make_key(1), 3)
    draws = to_numpy(jax.vmap(lambda k: d.sample((), rng=k))(keys))
    assert len({tuple(row) for row in draws}) == 3


def test_rng_none_under_a_trace_is_refused():
    loc, cov = jnp.asarray(LOC), jnp.asarray(COV)
    d = MultivariateNormal(loc, cov)
    match = "needs `rng` as a jax.random key"
    with pytest.raises(ValueError, match=match):
        jax.jit(lambda: d.sample((2,)))()
    with pytest.raises(ValueError, match=match):
        jax.jit(lambda loc: MultivariateNormal(loc, cov).rsample((2,)))(loc)
    with pytest.raises(ValueError, match=match):
        jax.vmap(lambda loc: MultivariateNormal(loc, cov).sample())(jnp.stack([loc, loc]))
    with pytest.raises(ValueError, match=match):
        jax.jit(lambda: d.sample((2,), rng=np.random.default_rng(0)))()
    # an int seed is a fixed draw: the same as outside the trace
    close(jax.jit(lambda: d.sample((2,), rng=5))(), d.sample((2,), rng=5), 1e-12)
    assert d.sample((2,)).shape == (2, 3)  # None outside a trace: fresh entropy


def test_a_key_is_for_jax_arrays():
    d = MultivariateNormal(LOC, COV)
    with pytest.raises(TypeError, match="`rng` must be"):
        d.sample((2,), rng=jax.random.key(0))


# ---- tril_indices, triu_indices -----------------------------------------------------------------


def test_indices_under_jit():
    got = jax.jit(lambda: xpops.tril_indices(4, 3, -1, xp=jnp))()
    np.testing.assert_array_equal(to_numpy(got), np.stack(np.tril_indices(4, -1, 3)))
    with pytest.raises(TypeError, match="must be an integer"):
        jax.jit(lambda n: xpops.triu_indices(n, xp=jnp))(3)


# ---- the helpers ------------------------------------------------------------------------------


def test_rng_kinds_and_trace_helpers():
    from xpops._lib import _compat
    from xpops._lib._random import rng_kind

    assert rng_kind(jax.random.key(0)) == "jax"
    assert rng_kind(jax.random.PRNGKey(0)) == "jax"
    assert rng_kind(jax.random.split(jax.random.key(0), 2)) == "other"  # several keys
    assert rng_kind(jnp.zeros(2, dtype=jnp.uint32)) == "jax"  # a legacy key is its data
    assert rng_kind(jnp.zeros(3, dtype=jnp.uint32)) == "other"
    a = jnp.ones(2)
    assert not _compat.is_traced(a)
    assert not _compat.jax_tracing()
    seen = []

    def f(x):
        seen.append(
            (
                _compat.is_traced(x),
                _compat.jax_tracing(),
                _compat.device(x),
                _compat.device_of(x, a),
            )
        )
        assert _compat.same_device(x, a)
        return x

    jax.jit(f)(a)
    assert seen == [(True, True, None, _compat.device(a))]
    assert _compat.same_device(a, a)
    assert _compat.device_of(a) == _compat.device(a)
