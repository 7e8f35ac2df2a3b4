"""Generic engine of logcumsumexp: a log-depth (Hillis-Steele) scan in array-API operations."""

import numpy as np

from .._lib._typing import Array, Namespace


def _along(ndim: int, axis: int, index: slice) -> tuple[slice, ...]:
    """An index selecting `index` along `axis` and everything along the other axes."""
    return (slice(None),) * axis + (index,) + (slice(None),) * (ndim - axis - 1)


def _logaddexp(a: Array, b: Array, xp: Namespace) -> Array:
    """log(exp(a) + exp(b)), elementwise; -inf is the identity, +inf absorbs, NaN propagates."""
    if xp.isdtype(a.dtype, "complex floating"):
        a_larger = xp.real(a) >= xp.real(b)
        big = xp.where(a_larger, a, b)
        small = xp.where(a_larger, b, a)
        out = big + xp.log1p(xp.exp(small - big))
        # real part -inf on both sides: the sum is 0; +inf: the larger term alone
        return xp.where(xp.isinf(xp.real(big)), big, out)
    big = xp.maximum(a, b)
    out = big + xp.log1p(xp.exp(-xp.abs(a - b)))
    return xp.where(xp.isinf(big), big, out)


def logcumsumexp(x: Array, axis: int, exclusive: bool, reverse: bool, *, xp: Namespace) -> Array:
    """Scan of `x` along `axis` (ndim >= 1, floating); arguments already validated."""
    n = x.shape[axis]
    if n == 0:
        return xp.asarray(x, copy=True)
    # The standard has no reversed views, so `reverse` flips here (the generic engine only).
    y = xp.flip(x, axis=axis) if reverse else x
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf above is masked out
        shift = 1
        while shift < n:
            head = y[_along(y.ndim, axis, slice(0, shift))]
            tail = _logaddexp(
                y[_along(y.ndim, axis, slice(0, n - shift))],
                y[_along(y.ndim, axis, slice(shift, n))],
                xp,
            )
            y = xp.concat([head, tail], axis=axis)
            shift *= 2
        if exclusive:
            first = xp.full_like(y[_along(y.ndim, axis, slice(0, 1))], -xp.inf)
            y = xp.concat([first, y[_along(y.ndim, axis, slice(0, n - 1))]], axis=axis)
    if reverse:
        y = xp.flip(y, axis=axis)
    if xp.isdtype(y.dtype, "complex floating"):
        # the principal branch: imaginary parts into (-pi, pi]
        im = xp.imag(y)
        wrapped = xp.atan2(xp.sin(im), xp.cos(im))
        y = y - xp.astype(im - wrapped, y.dtype) * 1j
    if y is x:
        y = xp.asarray(x, copy=True)
    return y
