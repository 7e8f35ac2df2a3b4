"""Helpers of the Dask tests: a synchronous scheduler for every test, comparisons of lazy results
with in-memory ones, and small random operands."""

import numpy as np
import pytest

from xpops.distributions import MultivariateNormal

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")


@pytest.fixture(autouse=True)
def synchronous():
    with dask.config.set(scheduler="synchronous"):
        yield


def assert_same(got, want, rtol=1e-12):
    assert isinstance(got, da.Array)
    got = np.asarray(got.compute())
    assert got.shape == want.shape
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-300, equal_nan=True)


# ---- CuPy chunks (one GPU) ------------------------------------------------------------------


def assert_same_gpu(got, want, rtol=1e-12, atol=1e-300):
    """A lazy Dask array of CuPy chunks equal to the in-memory CuPy result."""
    import cupy

    assert isinstance(got, da.Array)
    computed = got.compute()
    assert isinstance(computed, cupy.ndarray)
    assert computed.dtype == want.dtype
    np.testing.assert_allclose(computed.get(), want.get(), rtol=rtol, atol=atol, equal_nan=True)


def _factors(rng, batch, m):
    g = rng.standard_normal((*batch, m, m))
    return np.tril(g) / m + 2 * np.eye(m)


def _mvn(rng, batch, d):
    g = rng.standard_normal((*batch, d, d))
    cov = g @ np.swapaxes(g, -1, -2) / d + np.eye(d)
    return MultivariateNormal(rng.standard_normal((*batch, d)), covariance_matrix=cov)


def _dask_params(rng, batch, d, chunks, param="covariance_matrix"):
    g = rng.standard_normal((*batch, d, d))
    cov = g @ np.swapaxes(g, -1, -2) / d + np.eye(d)
    loc = rng.standard_normal((*batch, d))
    matrix = {
        "covariance_matrix": cov,
        "precision_matrix": np.linalg.inv(cov),
        "scale_tril": np.linalg.cholesky(cov),
    }[param]
    lazy = MultivariateNormal(
        da.from_array(loc, chunks=(*chunks, d)),
        **{param: da.from_array(matrix, chunks=(*chunks, d, d))},
    )
    return lazy, MultivariateNormal(loc, **{param: matrix})
