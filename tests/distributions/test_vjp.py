"""Gradients of MultivariateNormal's log_prob, prob, entropy and rsample and of kl_divergence:
`xpops.vjp` on every backend (PyTorch's autograd through the class's methods: `test_vjp_torch`).

References are independent: central finite differences in float64 of the public methods on
NumPy (a symmetric perturbation of a covariance or precision matrix, the lower triangle of a
scale_tril).
"""

import functools

import numpy as np
import pytest

import xpops
from xpops.distributions import MultivariateNormal, kl_divergence

from .._support import backend_name, to_numpy

PARAMS = ["covariance_matrix", "precision_matrix", "scale_tril"]
D = 3


def random_cov(rng, batch, d=D):
    g = rng.standard_normal((*batch, d, d))
    return g @ np.swapaxes(g, -1, -2) / d + np.eye(d)


def matrix_of(param, cov):
    if param == "covariance_matrix":
        return cov
    if param == "precision_matrix":
        return np.linalg.inv(cov)
    return np.linalg.cholesky(cov)


def as_xp(xp, a, dtype="float64"):
    return xp.asarray(np.array(a, dtype=dtype))  # a writable copy (torch warns otherwise)


def fd(f, x, kind="free", h=1e-6):
    """Central differences of the scalar ``f`` at `x` (float64). `kind`: ``"free"`` every
    entry; ``"tril"`` the lower triangle (0 above); ``"sym"`` entries (i, j) and (j, i)
    together, the symmetric gradient (half the derivative off the diagonal)."""
    x = np.array(x, dtype=np.float64)
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        if kind != "free" and idx[-1] > idx[-2]:
            continue
        e = np.zeros_like(x)
        e[idx] = h
        if kind == "sym":
            e[(*idx[:-2], idx[-1], idx[-2])] = h
        g[idx] = (f(x + e) - f(x - e)) / (2 * h)
        if kind == "sym" and idx[-1] != idx[-2]:
            g[idx] /= 2
    if kind == "sym":
        g = np.tril(g) + np.swapaxes(np.tril(g, -1), -1, -2)
    return g


def kind_of(param):
    return "tril" if param == "scale_tril" else "sym"


def mvn(loc, param, m):
    return MultivariateNormal(loc, **{param: m}, validate_args=False)


def skip_jax(xp):
    """JAX compiles each op anew for every shape and dtype (seconds a case on two cores):
    `test_jax` runs the broadcast cases on it (slow), the xp tests skip it."""
    if backend_name(xp) == "jax":
        pytest.skip("JAX: covered by test_jax (slow)")


def close(got, want, rtol=1e-6, atol=1e-7):
    np.testing.assert_allclose(to_numpy(got), want, rtol=rtol, atol=atol)


# loc, matrix and value shapes: one distribution, a batch broadcasting against the value, a
# value that broadcasts against the batch
SHAPES = {
    "single": ((D,), (), (5, D)),
    "batch": ((2, 1, D), (3,), (4, 1, 1, D)),
    "value_broadcast": ((2, D), (), (D,)),
}


def case(seed, shape):
    rng = np.random.default_rng(seed)
    ls, mb, vs = SHAPES[shape]
    return rng.standard_normal(ls), random_cov(rng, mb), rng.standard_normal(vs), rng


# ---- xpops.vjp against finite differences -----------------------------------------------------
# The references (finite differences of the public methods on NumPy, with a random cotangent)
# are computed once a case, for every backend.


@functools.cache
def density_reference(method, param, shape):
    loc, cov, value, rng = case(0, shape)
    m = matrix_of(param, cov)
    cot = rng.standard_normal(getattr(mvn(loc, param, m), method)(value).shape)

    def f(loc_, m_, v_):
        return float(np.sum(cot * getattr(mvn(loc_, param, m_), method)(v_)))

    grads = (
        fd(lambda a: f(a, m, value), loc),
        fd(lambda a: f(loc, a, value), m, kind_of(param)),
        fd(lambda a: f(loc, m, a), value),
    )
    return (loc, m, value), cot, grads


def check_density(xp, method, param, shape):
    (loc, m, value), cot, (g_loc, g_m, g_value) = density_reference(method, param, shape)
    d = MultivariateNormal(as_xp(xp, loc), **{param: as_xp(xp, m)})
    fun = getattr(MultivariateNormal, method)
    out, pullback = xpops.vjp(fun, d, as_xp(xp, value))
    close(out, to_numpy(getattr(d, method)(as_xp(xp, value))), rtol=1e-12)
    got, got_value = pullback(as_xp(xp, cot))
    assert set(got) == {"loc", param}
    close(got["loc"], g_loc)
    close(got[param], g_m)
    close(got_value, g_value)
    for g, a in ((got["loc"], loc), (got[param], m), (got_value, value)):
        assert tuple(g.shape) == a.shape
        assert g.dtype == xp.float64


@functools.cache
def entropy_reference(param, shape):
    loc, cov, _, rng = case(1, shape)
    m = matrix_of(param, cov)
    cot = rng.standard_normal(mvn(loc, param, m).batch_shape)
    want = fd(lambda a: float(np.sum(cot * mvn(loc, param, a).entropy())), m, kind_of(param))
    return (loc, m), cot, want


def check_entropy(xp, param, shape):
    (loc, m), cot, want = entropy_reference(param, shape)
    d = MultivariateNormal(as_xp(xp, loc), **{param: as_xp(xp, m)})
    _, pullback = xpops.vjp(MultivariateNormal.entropy, d)
    (got,) = pullback(as_xp(xp, cot))
    close(got[param], want)
    close(got["loc"], np.zeros_like(loc), atol=0)  # the entropy does not depend on loc
    assert tuple(got["loc"].shape) == loc.shape


@functools.cache
def rsample_reference(param, shape, xp=np):
    """Central differences of draws with one seed: the NumPy draws, or CuPy's (by Philox,
    other numbers) for CuPy."""
    loc, cov, _, rng = case(2, shape)
    m = matrix_of(param, cov)

    def draw(loc_, m_):
        d = MultivariateNormal(as_xp(xp, loc_), **{param: as_xp(xp, m_)})
        return to_numpy(d.rsample((4,), rng=7))

    x = draw(loc, m)
    cot = rng.standard_normal(x.shape)

    def f(loc_, m_):
        return float(np.sum(cot * draw(loc_, m_)))

    return (
        (loc, m),
        x,
        cot,
        (fd(lambda a: f(a, m), loc), fd(lambda a: f(loc, a), m, kind_of(param))),
    )


def check_rsample(xp, param, shape):
    cupy = backend_name(xp) == "cupy"
    (loc, m), x, cot, (g_loc, g_m) = rsample_reference(param, shape, xp if cupy else np)
    d = MultivariateNormal(as_xp(xp, loc), **{param: as_xp(xp, m)})
    out, pullback = xpops.vjp(MultivariateNormal.rsample, d, shape=(4,), rng=7)
    # the draw of rsample with that rng, which the reference draws too
    close(out, to_numpy(d.rsample((4,), rng=7)), rtol=0, atol=0)
    close(out, x, rtol=1e-12)
    (got,) = pullback(as_xp(xp, cot))
    close(got["loc"], g_loc)
    close(got[param], g_m)


@functools.cache
def kl_reference(param_p, param_q):
    rng = np.random.default_rng(3)
    loc_p, m_p = rng.standard_normal((2, 1, D)), matrix_of(param_p, random_cov(rng, (3,)))
    loc_q, m_q = rng.standard_normal(D), matrix_of(param_q, random_cov(rng, ()))
    cot = rng.standard_normal((2, 3))

    def f(lp, mp, lq, mq):
        return float(np.sum(cot * kl_divergence(mvn(lp, param_p, mp), mvn(lq, param_q, mq))))

    grads = (
        fd(lambda a: f(a, m_p, loc_q, m_q), loc_p),
        fd(lambda a: f(loc_p, a, loc_q, m_q), m_p, kind_of(param_p)),
        fd(lambda a: f(loc_p, m_p, a, m_q), loc_q),
        fd(lambda a: f(loc_p, m_p, loc_q, a), m_q, kind_of(param_q)),
    )
    return (loc_p, m_p, loc_q, m_q), cot, grads


def check_kl(xp, param_p, param_q):
    (loc_p, m_p, loc_q, m_q), cot, grads = kl_reference(param_p, param_q)
    p = MultivariateNormal(as_xp(xp, loc_p), **{param_p: as_xp(xp, m_p)})
    q = MultivariateNormal(as_xp(xp, loc_q), **{param_q: as_xp(xp, m_q)})
    _, pullback = xpops.vjp(kl_divergence, p, q)
    g_p, g_q = pullback(as_xp(xp, cot))
    got = (g_p["loc"], g_p[param_p], g_q["loc"], g_q[param_q])
    for a, b in zip(got, grads, strict=True):
        close(a, b)


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("param", PARAMS)
@pytest.mark.parametrize("method", ["log_prob", "prob"])
def test_density_against_fd(xp, method, param, shape):
    skip_jax(xp)
    check_density(xp, method, param, shape)


@pytest.mark.parametrize("method", ["log_prob", "prob"])
@pytest.mark.parametrize("param", PARAMS)
def test_numpy_points_gradients_across_chunks(monkeypatch, method, param):
    """NumPy's products for one distribution at many points (`_numpy.log_prob_grads`) two
    points a chunk: the five points of the "single" case in three chunks, the last one short."""
    from xpops.distributions import _numpy as engine

    sized = []  # the event sizes the chunk was divided by: one a call of the products

    class Chunk(int):
        def __floordiv__(self, d):
            sized.append(d)
            return int(self) // d

    monkeypatch.setattr(engine, "GRAD_CHUNK", Chunk(2 * D))
    check_density(np, method, param, "single")
    assert sized == [D]


@pytest.mark.parametrize("shape", ["single", "batch"])
@pytest.mark.parametrize("param", PARAMS)
def test_entropy_against_fd(xp, param, shape):
    skip_jax(xp)
    check_entropy(xp, param, shape)


@pytest.mark.parametrize("shape", ["single", "batch"])
@pytest.mark.parametrize("param", PARAMS)
def test_rsample_against_fd(xp, param, shape):
    skip_jax(xp)
    check_rsample(xp, param, shape)


@pytest.mark.parametrize("param_q", PARAMS)
@pytest.mark.parametrize("param_p", PARAMS)
def test_kl_against_fd(xp, param_p, param_q):
    skip_jax(xp)
    check_kl(xp, param_p, param_q)


@pytest.mark.slow
def test_jax(jax_only):
    jax = pytest.importorskip("jax")
    xp = jax.numpy
    for param in PARAMS:
        check_density(xp, "log_prob", param, "batch")
    check_density(xp, "prob", "covariance_matrix", "batch")
    check_entropy(xp, "precision_matrix", "batch")
    check_rsample(xp, "covariance_matrix", "batch")
    check_kl(xp, "scale_tril", "covariance_matrix")


def test_kl_of_a_distribution_with_itself():
    """KL(p || p) = 0 is its minimum: every gradient is 0 (closed form)."""
    rng = np.random.default_rng(4)
    p = MultivariateNormal(rng.standard_normal(D), covariance_matrix=random_cov(rng, ()))
    out, pullback = xpops.vjp(kl_divergence, p, p)
    g_p, g_q = pullback(np.ones_like(out))
    for g in (*g_p.values(), *g_q.values()):
        np.testing.assert_allclose(g, 0, atol=1e-12)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf * 0 in the products below it
def test_infinite_cotangent_leaves_zeros_above_the_diagonal(xp):
    """An infinite cotangent of the density or the entropy gives a scale_tril cotangent of
    exact zeros above the diagonal (the factor's entries there are not parameters), in the
    engines that compute the factor's cotangent (NumPy's one distribution, the general code
    for a batch)."""
    skip_jax(xp)
    rng = np.random.default_rng(7)
    for batch in [(), (2,)]:
        tril = np.linalg.cholesky(random_cov(rng, batch))
        d = MultivariateNormal(as_xp(xp, rng.standard_normal(D)), scale_tril=as_xp(xp, tril))
        value = as_xp(xp, rng.standard_normal((3, *batch, D)))
        for method, args in [(MultivariateNormal.log_prob, (value,)),
                             (MultivariateNormal.entropy, ())]:  # fmt: skip
            out, pullback = xpops.vjp(method, d, *args)
            g = to_numpy(pullback(as_xp(xp, np.full(tuple(out.shape), np.inf)))[0]["scale_tril"])
            above = np.triu(np.ones((D, D), dtype=bool), 1)
            assert (g[..., above] == 0).all(), (method.__name__, batch)


# ---- the parameters as given: shapes and dtypes of the cotangents ---------------------------


def test_scalar_and_list_parameters():
    rng = np.random.default_rng(5)
    cov = random_cov(rng, (2,))
    value = rng.standard_normal((4, 2, D))
    d = MultivariateNormal(0.5, covariance_matrix=cov.tolist())
    out, pullback = xpops.vjp(MultivariateNormal.log_prob, d, value.tolist())
    cot = rng.standard_normal(out.shape)
    g, g_value = pullback(cot)
    full = MultivariateNormal(np.full(D, 0.5), covariance_matrix=cov)
    _, pull_full = xpops.vjp(MultivariateNormal.log_prob, full, value)
    want, want_value = pull_full(cot)
    # one mean for every coordinate: the sum of the gradients of the coordinates
    assert isinstance(g["loc"], np.ndarray)
    assert g["loc"].shape == ()
    assert g["loc"].dtype == np.float64
    np.testing.assert_allclose(g["loc"], want["loc"].sum(), rtol=1e-12)
    np.testing.assert_allclose(g["covariance_matrix"], want["covariance_matrix"], rtol=1e-12)
    np.testing.assert_allclose(g_value, want_value, rtol=1e-12)
    assert isinstance(g_value, np.ndarray)


def test_float32(xp):
    skip_jax(xp)
    rng = np.random.default_rng(6)
    loc, cov, value = rng.standard_normal(D), random_cov(rng, (2,)), rng.standard_normal((4, D))
    results = {}
    for dtype in ("float32", "float64"):
        d = MultivariateNormal(
            as_xp(xp, loc, dtype), scale_tril=as_xp(xp, np.linalg.cholesky(cov), dtype)
        )
        q = MultivariateNormal(
            as_xp(xp, value[0], dtype), covariance_matrix=as_xp(xp, cov[0], dtype)
        )
        grads = []
        for fun, args, kw in (
            (MultivariateNormal.log_prob, (d, as_xp(xp, value[:, None], dtype)), {}),
            (MultivariateNormal.prob, (d, as_xp(xp, value[:, None], dtype)), {}),
            (MultivariateNormal.entropy, (d,), {}),
            (MultivariateNormal.rsample, (d,), {"shape": (3,), "rng": 0}),
            (kl_divergence, (d, q), {}),
        ):
            out, pullback = xpops.vjp(fun, *args, **kw)
            assert out.dtype == getattr(xp, dtype)
            for g in pullback(xp.ones_like(out)):
                for a in g.values() if isinstance(g, dict) else (g,):
                    assert a.dtype == getattr(xp, dtype)
                    # rsample draws float32 normals for float32: not the float64 draw
                    if fun is not MultivariateNormal.rsample:
                        grads.append(to_numpy(a))
        results[dtype] = grads
    for g32, g64 in zip(results["float32"], results["float64"], strict=True):
        np.testing.assert_allclose(g32, g64, rtol=2e-3, atol=2e-4)


def test_mixed_dtypes_keep_each_primals_dtype():
    rng = np.random.default_rng(7)
    loc = rng.standard_normal(D).astype(np.float32)
    cov = random_cov(rng, ())
    value = rng.standard_normal((2, D)).astype(np.float32)
    d = MultivariateNormal(loc, precision_matrix=np.linalg.inv(cov))
    assert d.dtype == np.float64
    out, pullback = xpops.vjp(MultivariateNormal.log_prob, d, value)
    assert out.dtype == np.float64
    g, g_value = pullback(np.ones_like(out))
    assert g["loc"].dtype == np.float32
    assert g["precision_matrix"].dtype == np.float64
    assert g_value.dtype == np.float32
    # an integer value: a cotangent in the distribution's dtype
    out, pullback = xpops.vjp(MultivariateNormal.log_prob, d, np.ones((2, D), dtype=np.int64))
    assert pullback(np.ones_like(out))[1].dtype == np.float64


def test_zero_size(xp):
    skip_jax(xp)
    rng = np.random.default_rng(8)
    cov = random_cov(rng, (2,))
    d = MultivariateNormal(as_xp(xp, np.zeros((2, D))), covariance_matrix=as_xp(xp, cov))
    out, pullback = xpops.vjp(MultivariateNormal.log_prob, d, as_xp(xp, np.zeros((0, 1, D))))
    assert tuple(out.shape) == (0, 2)
    g, g_value = pullback(xp.ones_like(out))
    assert tuple(g_value.shape) == (0, 1, D)
    close(g["loc"], np.zeros((2, D)), atol=0)
    close(g["covariance_matrix"], np.zeros((2, D, D)), atol=0)
    out, pullback = xpops.vjp(MultivariateNormal.rsample, d, shape=(0,), rng=0)
    (g,) = pullback(xp.ones_like(out))
    close(g["covariance_matrix"], np.zeros((2, D, D)), atol=0)
    # D = 0: every gradient is empty
    e = MultivariateNormal(as_xp(xp, np.zeros(0)), scale_tril=as_xp(xp, np.zeros((0, 0))))
    for fun, args, kw in (
        (MultivariateNormal.log_prob, (e, as_xp(xp, np.zeros((2, 0)))), {}),
        (MultivariateNormal.entropy, (e,), {}),
        (MultivariateNormal.rsample, (e,), {"shape": (2,), "rng": 0}),
        (kl_divergence, (e, e), {}),
    ):
        out, pullback = xpops.vjp(fun, *args, **kw)
        for g in pullback(xp.ones_like(out)):
            for a in g.values() if isinstance(g, dict) else (g,):
                assert 0 in tuple(a.shape)


def test_inputs_unmodified(xp):
    skip_jax(xp)
    rng = np.random.default_rng(9)
    loc, cov, value = rng.standard_normal(D), random_cov(rng, ()), rng.standard_normal((3, D))
    arrays = [as_xp(xp, a) for a in (loc, cov, value)]
    d = MultivariateNormal(arrays[0], covariance_matrix=arrays[1])
    for fun, args, kw in (
        (MultivariateNormal.log_prob, (d, arrays[2]), {}),
        (MultivariateNormal.entropy, (d,), {}),
        (MultivariateNormal.rsample, (d,), {"shape": (2,), "rng": 0}),
        (kl_divergence, (d, d), {}),
    ):
        out, pullback = xpops.vjp(fun, *args, **kw)
        cot = xp.ones_like(out)
        pullback(cot)
        close(cot, np.ones(tuple(out.shape)), rtol=0, atol=0)
    for a, ref in zip(arrays, (loc, cov, value), strict=True):
        close(a, ref, rtol=0, atol=0)


# ---- rsample: its draw and its normals -----------------------------------------------------


def test_rsample_takes_the_draw_of_rsample():
    d = MultivariateNormal(np.zeros(D), covariance_matrix=random_cov(np.random.default_rng(10), ()))
    gen = np.random.default_rng(11)
    out, _ = xpops.vjp(MultivariateNormal.rsample, d, shape=(5,), rng=gen)
    # a generator advances as the public method advances it
    np.testing.assert_array_equal(out, d.rsample((5,), rng=np.random.default_rng(11)))
    out2, _ = xpops.vjp(MultivariateNormal.rsample, d, shape=(5,), rng=gen)
    ref = np.random.default_rng(11)
    d.rsample((5,), rng=ref)
    np.testing.assert_array_equal(out2, d.rsample((5,), rng=ref))


def test_rsample_normals_recovered(monkeypatch):
    """Where the engine keeps no normals (the fused CuPy kernels), they are recovered from
    the draw: the same gradients."""
    rng = np.random.default_rng(12)
    d = MultivariateNormal(
        rng.standard_normal((2, D)), scale_tril=np.linalg.cholesky(random_cov(rng, (2,)))
    )
    cot = rng.standard_normal((4, 2, D))
    out, pullback = xpops.vjp(MultivariateNormal.rsample, d, shape=(4,), rng=1)
    (want,) = pullback(cot)
    draw = MultivariateNormal._draw
    monkeypatch.setattr(MultivariateNormal, "_draw", lambda self, *a: (draw(self, *a)[0], None))
    out2, pullback = xpops.vjp(MultivariateNormal.rsample, d, shape=(4,), rng=1)
    np.testing.assert_array_equal(out2, out)
    (got,) = pullback(cot)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-10, atol=1e-12)


# ---- errors ---------------------------------------------------------------------------------


def test_cotangent_errors(xp):
    skip_jax(xp)
    d = MultivariateNormal(as_xp(xp, np.zeros(2)), covariance_matrix=as_xp(xp, np.eye(2)))
    out, pullback = xpops.vjp(MultivariateNormal.log_prob, d, as_xp(xp, np.zeros((3, 2))))
    with pytest.raises(ValueError, match="shape of the output"):
        pullback(as_xp(xp, np.ones(4)))
    with pytest.raises(TypeError, match="cotangent"):
        pullback([1.0, 1.0, 1.0])
    with pytest.raises(TypeError, match="`cotangent` must have a real floating dtype"):
        pullback(as_xp(xp, np.ones(3), dtype="int64"))
    if backend_name(xp) != "numpy":
        with pytest.raises(TypeError, match="`cotangent` must be an array of the distribution"):
            pullback(np.ones(3))
    else:
        with pytest.raises(TypeError, match="`cotangent` must have a real floating dtype"):
            pullback(np.ones(3, dtype=np.complex128))
    for fun, args, kw in (
        (MultivariateNormal.entropy, (d,), {}),
        (MultivariateNormal.rsample, (d,), {"shape": (2,)}),
        (kl_divergence, (d, d), {}),
    ):
        out, pullback = xpops.vjp(fun, *args, **kw)
        with pytest.raises(TypeError, match="`cotangent` must have a real floating dtype"):
            pullback(as_xp(xp, np.ones(tuple(out.shape)), dtype="int64"))


def test_primal_errors():
    d = MultivariateNormal(np.zeros(2), covariance_matrix=np.eye(2))
    with pytest.raises(TypeError, match="`self` must be a MultivariateNormal"):
        xpops.vjp(MultivariateNormal.log_prob, np.zeros(2), np.zeros(2))
    with pytest.raises(TypeError, match="`q` must be a MultivariateNormal"):
        xpops.vjp(kl_divergence, d, "q")
    with pytest.raises(TypeError, match="takes 2 primal"):
        xpops.vjp(MultivariateNormal.log_prob, d)
    with pytest.raises(ValueError, match="`value` must have shape"):
        xpops.vjp(MultivariateNormal.log_prob, d, np.zeros(3))
    with pytest.raises(ValueError, match="`value` must be finite"):
        xpops.vjp(MultivariateNormal.log_prob, d, np.array([np.nan, 0.0]))


def test_dask_not_supported():
    da = pytest.importorskip("dask.array")
    d = MultivariateNormal(da.zeros(2), covariance_matrix=da.from_array(np.eye(2)))
    with pytest.raises(NotImplementedError, match="Dask parameters"):
        xpops.vjp(MultivariateNormal.log_prob, d, np.zeros(2))
    e = MultivariateNormal(np.zeros(2), covariance_matrix=np.eye(2))
    with pytest.raises(NotImplementedError, match="Dask `value`"):
        xpops.vjp(MultivariateNormal.prob, e, da.zeros(2))


def test_array_rules_build_the_distribution():
    """The array-level rules without ``dist``: the distribution built from the primals."""
    from xpops.distributions import _vjp

    rng = np.random.default_rng(13)
    loc, m, value = rng.standard_normal(D), random_cov(rng, ()), rng.standard_normal((2, D))
    out, res = _vjp.LOG_PROB_ARRAYS.forward(loc, m, value, parameter="precision_matrix")
    got = _vjp.LOG_PROB_ARRAYS.backward(res, np.ones(2), parameter="precision_matrix")
    d = MultivariateNormal(loc, precision_matrix=m)
    want_out, pullback = xpops.vjp(MultivariateNormal.log_prob, d, value)
    want, want_value = pullback(np.ones(2))
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(got[0], want["loc"])
    np.testing.assert_array_equal(got[1], want["precision_matrix"])
    np.testing.assert_array_equal(got[2], want_value)
    with pytest.raises(ValueError, match="positive definite"):
        _vjp.ENTROPY_ARRAYS.forward(loc, -m, parameter="covariance_matrix")
