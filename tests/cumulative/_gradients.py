"""Independent references for the logcumsumexp gradient tests: central finite differences of
the float64 scan of `_reference`, and the brute-force double sum of ``g_i exp(x_j - y_i)``."""

import numpy as np

from .._support import to_numpy
from ._reference import reference

nan, inf = np.nan, np.inf


def finite_difference_vjp(x, g, axis=None, exclusive=False, reverse=False, eps=1e-6):
    """Central differences of ``L(x) = Re(sum(conj(g) * scan(x)))`` (outputs of -inf left out)
    in float64 (complex128), with `reference` as the scan; for complex `x` the gradient is
    ``dL/dRe x + i dL/dIm x`` (PyTorch's convention)."""
    x = np.asarray(x)
    g = np.asarray(g)

    def loss(z):
        y = reference(z, axis, exclusive, reverse)
        y = np.where(np.real(y) == -inf, 0, y)  # constant outputs (exclusive first)
        return np.real(np.sum(np.conj(g) * y))

    flat = x.reshape(-1)
    grad = np.zeros(flat.shape, dtype=x.dtype)
    directions = [1.0, 1j] if np.iscomplexobj(x) else [1.0]
    for k in range(flat.size):
        for d in directions:
            step = np.zeros_like(flat)
            step[k] = eps * d
            up = loss((flat + step).reshape(x.shape))
            down = loss((flat - step).reshape(x.shape))
            grad[k] += d * (up - down) / (2 * eps)
    return grad.reshape(x.shape)


def brute_force_vjp(x, g, axis=None, exclusive=False, reverse=False):
    """``(dx, scale)``: ``dx_j = sum_i g_i conj(exp(x_j - y_i))`` over the outputs ``i`` whose
    terms hold ``x_j``, dropping outputs of ``-inf`` and outputs of cotangent 0, NaN for inputs
    of NaN or +inf (as documented); `scale` is ``sum_i |g_i exp(x_j - y_i)|``, for tolerances. In
    float64 (complex128) with `y` from `reference`."""
    x = np.asarray(x)
    g = np.asarray(g)
    y = reference(x, axis, exclusive, reverse)
    shape = x.shape
    if axis is None or x.ndim == 0:
        x, axis = x.reshape(-1), 0
    g = np.moveaxis(g.reshape(x.shape), axis, -1)
    y = np.moveaxis(y.reshape(x.shape), axis, -1)
    x = np.moveaxis(x, axis, -1)
    n = x.shape[-1]
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    covers = {
        (False, False): j <= i,
        (True, False): j < i,
        (False, True): j >= i,
        (True, True): j > i,
    }[exclusive, reverse]
    with np.errstate(all="ignore"):
        w = np.exp(x[..., None, :] - y[..., :, None])  # [..., i, j]
        use = covers & (np.real(y)[..., :, None] != -inf) & (g[..., :, None] != 0)
        terms = np.where(use, g[..., :, None] * np.conj(w), 0)
        scale = np.sum(np.where(use, np.abs(terms), 0), axis=-2)
    dx = np.sum(terms, axis=-2)
    undefined = np.isnan(x) | (np.real(x) == inf)
    dx = np.where(undefined, nan * (1 + 1j) if np.iscomplexobj(dx) else nan, dx)
    dx, scale = np.moveaxis(dx, -1, axis), np.moveaxis(scale, -1, axis)
    return dx.reshape(shape), scale.reshape(shape)


def assert_close(got, want, atol, rtol=0.0):
    """Same NaN positions, other values within tolerance (of the real and imaginary parts)."""
    got = to_numpy(got)
    want = np.asarray(want)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=rtol, atol=atol)


def assert_scaled(got, want, scale, rel, floor=0.0):
    """Same NaN positions; elsewhere ``|got - want| <= rel * scale + floor`` elementwise, where
    `scale` is the sum of the magnitudes of the terms (the error a sum of them can carry)."""
    got = to_numpy(got)
    if got.dtype.itemsize <= 2 or got.dtype.kind == "V":
        got = got.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    err = np.abs(got.astype(want.dtype) - want)[ok]
    bound = (rel * np.asarray(scale) + floor)[ok]
    worst = np.argmax(err - bound) if err.size else 0
    assert (err <= bound).all(), f"error {err[worst]:.3g} over {bound[worst]:.3g} at {worst}"
