"""The log-depth scan of logcumsumexp in array-API operations, on any namespace.

A Hillis-Steele scan with a stable, associative logaddexp: log2(n) rounds of whole-array
operations. It is the generic engine (array-api-strict, PyTorch, JAX, ...) and the CuPy
engine's path for complex input, which has no kernel.

Special values, as on every engine: real -inf is the identity, +inf wins from there on, NaN
wins over everything; complex inputs follow the rules of `_complex`. Every operand is sanitized
before exp/log so that no floating-point warning is raised (array-api-strict forwards NumPy's).
"""

import math

from .._lib._compat import device
from .._lib._typing import Array, Namespace
from ._complex import element_specials, sum_specials, wrap

__all__ = ["log_depth_scan"]


def _add_real(a: Array, b: Array, xp: Namespace) -> Array:
    """Associative ``log(exp(a) + exp(b))`` of real arrays."""
    m = xp.maximum(a, b)
    finite = xp.isfinite(m)
    # exp(-|a - b|) as exp(-|a/2 - b/2|)**2: the halves cannot overflow
    half = xp.exp(-xp.abs(xp.where(finite, a, 0.0) * 0.5 - xp.where(finite, b, 0.0) * 0.5))
    return xp.where(finite, m + xp.log1p(half * half), m)


def _normalize_complex(z: Array, xp: Namespace) -> Array:
    """``log(exp(z))`` of single elements, special values as in `_complex`."""
    re, im = xp.real(z), xp.imag(z)
    safe_im = xp.where(xp.isfinite(im), im, 0.0)
    out = z - xp.astype(safe_im - wrap(safe_im, xp), z.dtype) * 1j
    return element_specials(re, im, out, xp)


def _add_complex(a: Array, b: Array, xp: Namespace) -> Array:
    """Associative ``log(exp(a) + exp(b))`` of normalized complex arrays."""
    ar, br = xp.real(a), xp.real(b)
    both = xp.isfinite(ar) & xp.isfinite(br)
    m = xp.where(both, xp.maximum(ar, br), 0.0)
    half_m = xp.astype(m * 0.5, a.dtype)
    # exp(a - m) as exp(a/2 - m/2)**2: the halves cannot overflow
    ea = xp.exp(xp.where(both, a, 0.0) * 0.5 - half_m)
    eb = xp.exp(xp.where(both, b, 0.0) * 0.5 - half_m)
    s = ea * ea + eb * eb
    mc = xp.astype(m, a.dtype)
    zero = s == 0
    out = xp.where(zero, complex(-math.inf, 0.0), xp.log(xp.where(zero, 1.0, s)) + mc)
    return sum_specials(a, b, out, xp)


def log_depth_scan(x: Array, axis: int, exclusive: bool, reverse: bool, xp: Namespace) -> Array:
    """Hillis-Steele scan of `x` (real or complex floating, ndim >= 1) along `axis` in the
    operations of namespace `xp`, with a stable logaddexp (log2(n) rounds)."""
    complex_ = xp.isdtype(x.dtype, "complex floating")
    add = _add_complex if complex_ else _add_real
    y = xp.moveaxis(x, axis, -1)
    n = y.shape[-1]
    if n == 0 or math.prod(y.shape) == 0:
        return xp.empty(x.shape, dtype=x.dtype, device=device(x))
    # The standard has no reversed views (PyTorch has no negative steps), so `reverse` flips.
    if reverse:
        y = xp.flip(y, axis=-1)
    if complex_:
        y = _normalize_complex(y, xp)
    d = 1
    while d < n:
        y = xp.concat([y[..., :d], add(y[..., :-d], y[..., d:], xp)], axis=-1)
        d *= 2
    if exclusive:
        empty = complex(-math.inf, 0.0) if complex_ else -math.inf
        start = xp.full((*y.shape[:-1], 1), empty, dtype=y.dtype, device=device(x))
        y = xp.concat([start, y[..., :-1]], axis=-1)
    if reverse:
        y = xp.flip(y, axis=-1)
    if n == 1 and not (exclusive or complex_):  # no operation made a new array yet
        y = xp.asarray(y, copy=True)
    return xp.moveaxis(y, -1, axis)
