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
"""

import contextlib
import math
from typing import Any

import numpy as np

from ._common import bad_values

__all__ = ["CHUNK", "log_prob_points", "points_engine"]

#: Elements of a chunk of points (512 KiB of float64, half of one core's L2 cache).
CHUNK = 2**16

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
