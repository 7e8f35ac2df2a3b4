"""NumPy engine of log_prob for one distribution (no batch) at many points.

The points go through in chunks that stay in the cache: each chunk's ``x - loc``, its product
with ``L^-T`` (whose rows' sums of squares are the Mahalanobis distances) and those sums are
written into buffers reused from chunk to chunk, so the points are read from memory once and
nothing of their size is allocated (SciPy's ``logpdf`` makes three temporaries of that size,
each written and read again). Every step is one contiguous loop or one BLAS call: ``loc`` is
tiled to a chunk's length once, so the subtraction is a flat one rather than a broadcast over
rows of D elements, and the rows' sums of squares are the product of the squares with a vector
of ones. A chunk of `CHUNK` elements is big enough for OpenBLAS to run its product on two
threads.

The check of the values (`validate_args`) costs no pass of its own: a point with a NaN or an
infinity has a non-finite distance (its coordinate ``k`` meets the nonzero diagonal entry
``k`` of ``L^-T``), so the points are read again only when a distance is not finite.

The gradients of log_prob at those points (`log_prob_grads`) take the same products: with the
points as rows, ``u^T = (x - loc) L^-T`` and ``w^T = u^T L^-1`` are two matrix products with
the (D, D) inverse, and the factor's cotangent ``sum g w u^T`` a third, where the general code
solves with the points as the columns of two triangular solves (copies of the points to the
columns and back, a pass of BLAS's solve each).
"""

import contextlib
import math
from typing import Any

import numpy as np

from ._common import bad_values

__all__ = ["CHUNK", "GRAD_CHUNK", "log_prob_grads", "log_prob_points", "points_engine"]

#: Elements of a chunk of points (512 KiB of float64, half of one core's L2 cache).
CHUNK = 2**16

#: Elements of a chunk of points of `log_prob_grads`, which keeps two arrays of a chunk's size
#: in the cache, not one: at D = 16 on two cores, 2**14 ran 1.3-2.5x faster than 2**15 and
#: 2**16 and 1.1-1.25x faster than 2**13, at 1e5 and 2**20 points.
GRAD_CHUNK = 2**14

#: Largest event size taken: above it a chunk would hold fewer than 64 points, and the calls
#: a chunk costs would outweigh its arithmetic.
MAX_D = 64

_LOG_2PI = math.log(2 * math.pi)


def points_engine(batch: tuple[int, ...], d: int) -> Any:
    """`log_prob_points` for a distribution of batch shape `batch` and event size `d` when it
    takes them (no batch, 1 <= d <= `MAX_D`), else None."""
    return log_prob_points if not batch and 1 <= d <= MAX_D else None


def log_prob_points(
    value: np.ndarray, loc: np.ndarray, linv_t: np.ndarray, half_log_det: Any, check: bool
) -> np.ndarray | None:
    """Log densities at `value` (..., D), of the distribution's dtype, of the distribution of
    mean `loc` (D,) whose factor's inverse transposed is `linv_t` (D, D) and half log
    determinant `half_log_det`; None for no points (the caller's general code takes them).
    `check`: ``ValueError`` for non-finite values."""
    shape = value.shape
    d = shape[-1]
    points = value.reshape(-1, d)
    n = points.shape[0]
    if n == 0:
        return None
    dtype = value.dtype
    rows = min(n, max(1, CHUNK // d))
    diff = np.empty((rows, d), dtype=dtype)
    z = np.empty((rows, d), dtype=dtype)
    flat_diff, flat_z = diff.reshape(-1), z.reshape(-1)
    w = np.ascontiguousarray(linv_t, dtype=dtype)
    locs = np.tile(np.asarray(loc, dtype=dtype), rows)
    ones = np.ones(d, dtype=dtype)
    maha = np.empty(n, dtype=dtype)
    # with `check`, a non-finite value is an error, not a warning of the arithmetic on it
    with np.errstate(invalid="ignore", over="ignore") if check else contextlib.nullcontext():
        for start in range(0, n, rows):
            stop = min(start + rows, n)
            k = stop - start
            m = k * d
            np.subtract(points[start:stop].reshape(-1), locs[:m], out=flat_diff[:m])
            np.matmul(diff[:k], w, out=z[:k])
            np.multiply(flat_z[:m], flat_z[:m], out=flat_diff[:m])
            np.matmul(diff[:k], ones, out=maha[start:stop])
    if check and not np.isfinite(maha).all() and not np.isfinite(points).all():
        raise ValueError(bad_values("value", tuple(int(s) for s in shape), False))
    # -0.5 * (d * log(2 pi) + maha) - half_log_det, in place
    maha += d * _LOG_2PI
    maha *= -0.5
    maha -= half_log_det
    return maha.reshape(shape[:-1])


def log_prob_grads(
    loc: np.ndarray, tril: np.ndarray, value: np.ndarray, g: np.ndarray, *, xp: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`._grads.log_prob_grads` on NumPy arrays: for one distribution (no batch) at points
    `value` (..., D) of its dtype with cotangents `g` of the points' shape, by the products of
    the module docstring, chunk by chunk as `log_prob_points` goes (only the cotangent of the
    points is of their size); the general code (`._grads.generic_log_prob_grads`) otherwise."""
    from scipy.linalg import solve_triangular

    from ._grads import generic_log_prob_grads

    d = tril.shape[-1]
    if (
        tril.ndim != 2
        or loc.shape != (d,)
        or value.shape[:-1] != g.shape
        or not value.size
        or value.dtype != tril.dtype
        or g.dtype != tril.dtype
    ):
        return generic_log_prob_grads(loc, tril, value, g, xp=xp)
    dtype = tril.dtype
    points = value.reshape(-1, d)
    weights = g.reshape(-1, 1)
    n = points.shape[0]
    # C-ordered copies: BLAS took about twice as long with LAPACK's Fortran-ordered result
    linv = solve_triangular(tril, np.eye(d, dtype=dtype), lower=True, check_finite=False)
    linv, linv_t = np.ascontiguousarray(linv), np.ascontiguousarray(linv.T)
    g_value = np.empty((n, d), dtype=dtype)
    rows = min(n, max(1, GRAD_CHUNK // d))
    u_t = np.empty((rows, d), dtype=dtype)
    g_l = np.zeros((d, d), dtype=dtype)
    g_loc = np.zeros(d, dtype=dtype)
    for start in range(0, n, rows):
        stop = min(start + rows, n)
        k = stop - start
        gw = g_value[start:stop]
        np.subtract(points[start:stop], loc, out=gw)
        np.matmul(gw, linv_t, out=u_t[:k])  # u^T = (x - loc) L^-T
        np.matmul(u_t[:k], linv, out=gw)  # w^T = u^T L^-1, then g w^T
        np.multiply(gw, weights[start:stop], out=gw)
        g_l += np.matmul(gw.T, u_t[:k])
        g_loc += gw.sum(axis=0)
        np.negative(gw, out=gw)
    g_l = np.tril(g_l)
    g_l[np.diag_indices(d)] -= weights.sum() / np.diagonal(tril)
    return g_loc, g_l, g_value.reshape(value.shape)
