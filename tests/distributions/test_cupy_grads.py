"""The CuPy kernel of log_prob's gradients (GPU only: skipped without a CUDA device): one
distribution at many points, every D the kernel takes at its block boundaries, against float64
formulas on the host; the generic operations for what it does not take."""

import numpy as np
import pytest
from scipy.linalg import solve_triangular

import xpops
from xpops.distributions import MultivariateNormal


def _reference(loc, tril, value, g):
    """(g_loc, g_scale_tril, g_value) of sum g * log_prob(value), in float64 by SciPy's
    triangular solves: with u = L^-1 (v - loc), w = L^-T u: -g w, sum g w, and
    tril(sum g w u^T) - diag(sum g / L_ii)."""
    loc, tril = loc.astype(np.float64), tril.astype(np.float64)
    v = value.reshape(-1, tril.shape[0]).astype(np.float64)
    gs = g.reshape(-1).astype(np.float64)
    u = solve_triangular(tril, (v - loc).T, lower=True)
    w = solve_triangular(tril, u, lower=True, trans="T")
    gw = w * gs
    g_l = np.tril(gw @ u.T) - np.diag(gs.sum() / np.diag(tril))
    return gw.sum(axis=1), g_l, (-gw.T).reshape(value.shape)


def _factor(rng, d, dtype):
    a = rng.normal(0, 0.3, (d, d))
    return (np.tril(a, -1) + np.diag(rng.uniform(0.5, 1.5, d))).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
# every count of threads a 4 x 4 block of the sums (D 1-4: 64, 5-8: 21, 9-12: 10, 13-16: 6,
# 17-20: 4, 21-24: 3, 25-28: 2, 29-32: 1), float64 with the factor's transpose (D <= 16) and
# without, D not a multiple of 4
@pytest.mark.parametrize("d", [1, 3, 5, 12, 16, 17, 24, 28, 32])
def test_log_prob_grads_kernel(cupy_only, dtype, d):
    cupy = cupy_only
    rng = np.random.default_rng(d)
    tol = 2e-4 if dtype == "float32" else 1e-11
    # past one wave of blocks (a block strides over several tiles), and not a whole tile
    for shape in [(1,), (63,), (64,), (65,), (3, 700), (150_001,)]:
        loc = rng.normal(0, 1, d).astype(dtype)
        tril = _factor(rng, d, dtype)
        value = rng.normal(0, 2, (*shape, d)).astype(dtype)
        g = rng.normal(0, 1, shape).astype(dtype)
        dist = MultivariateNormal(cupy.asarray(loc), scale_tril=cupy.asarray(tril))
        _, pullback = xpops.vjp(MultivariateNormal.log_prob, dist, cupy.asarray(value))
        g_dist, g_value = pullback(cupy.asarray(g))
        want_loc, want_l, want_value = _reference(loc, tril, value, g)
        for got, want in [(g_dist["loc"], want_loc), (g_dist["scale_tril"], want_l),
                          (g_value, want_value)]:  # fmt: skip
            got = got.get()
            assert got.dtype == dtype
            assert got.shape == want.shape
            scale = max(1.0, float(np.max(np.abs(want))))
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


def test_log_prob_grads_kernel_is_used_and_the_batch_is_not(cupy_only, monkeypatch):
    """One distribution takes the kernel; a batch of them, or a broadcast value, the generic
    operations: the same gradients either way."""
    cupy = cupy_only
    from xpops.distributions import _grads

    calls = []
    original = _grads.generic_log_prob_grads

    def spy(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(_grads, "generic_log_prob_grads", spy)
    rng = np.random.default_rng(3)
    d = 4
    loc, tril = rng.normal(0, 1, d), _factor(rng, d, "float64")
    value = rng.normal(0, 1, (100, d))
    g = rng.normal(0, 1, 100)
    one = MultivariateNormal(cupy.asarray(loc), scale_tril=cupy.asarray(tril))
    _, pullback = xpops.vjp(MultivariateNormal.log_prob, one, cupy.asarray(value))
    fused = pullback(cupy.asarray(g))
    assert calls == []
    batch = MultivariateNormal(cupy.asarray(np.stack([loc, loc])), scale_tril=cupy.asarray(tril))
    _, pullback = xpops.vjp(MultivariateNormal.log_prob, batch, cupy.asarray(value[:, None]))
    g_batch, g_value = pullback(cupy.asarray(np.stack([g, np.zeros(100)], axis=1)))
    assert calls == [1]
    np.testing.assert_allclose(g_value.get()[:, 0], fused[1].get(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(g_batch["loc"].get()[0], fused[0]["loc"].get(), rtol=1e-12)
    np.testing.assert_allclose(
        g_batch["scale_tril"].get(), fused[0]["scale_tril"].get(), rtol=1e-12, atol=1e-12
    )


@pytest.mark.parametrize("kind", ["scalar", "strided"])
def test_log_prob_grads_kernel_broadcast_and_strided_mean(cupy_only, kind):
    """A Python scalar mean (broadcast to D: stride 0) and a mean that is a strided view take
    the kernel with the right entries; the mean's cotangent has the shape it was given."""
    cupy = cupy_only
    rng = np.random.default_rng(4)
    d = 6
    tril = _factor(rng, d, "float64")
    value = rng.normal(0, 2, (200, d))
    g = rng.normal(0, 1, 200)
    if kind == "scalar":
        loc, loc_host = 0.7, np.full(d, 0.7)
    else:
        base = rng.normal(0, 1, (d, 3))
        loc, loc_host = cupy.asarray(base)[:, 1], base[:, 1]
    dist = MultivariateNormal(loc, scale_tril=cupy.asarray(tril))
    _, pullback = xpops.vjp(MultivariateNormal.log_prob, dist, cupy.asarray(value))
    g_dist, g_value = pullback(cupy.asarray(g))
    want_loc, want_l, want_value = _reference(loc_host, tril, value, g)
    if kind == "scalar":
        want_loc = want_loc.sum()
    got_loc = g_dist["loc"]
    got_loc = np.asarray(got_loc.get() if hasattr(got_loc, "get") else got_loc)
    assert got_loc.shape == np.shape(want_loc)
    np.testing.assert_allclose(got_loc, want_loc, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(g_dist["scale_tril"].get(), want_l, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(g_value.get(), want_value, rtol=1e-11, atol=1e-11)
