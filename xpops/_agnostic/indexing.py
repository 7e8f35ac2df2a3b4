"""Generic engine of tril_indices / triu_indices: the closed form in array-API operations."""

from .._lib._triangle import mirrored_offset, tril_layout
from .._lib._typing import Array, Device, DType, Namespace


def _trapezoid_start(r: Array, first_count: int) -> Array:
    """Entries before row ``r`` of a trapezoid whose first row holds `first_count`."""
    return r * first_count + (r * (r - 1)) // 2


def triangle_entries(
    t: Array, row: int, col: int, offset: int, upper: bool, xp: Namespace
) -> tuple[Array, Array]:
    """(i, j) of the entries numbered `t` (int64, row-major) of ``triu``/``tril``."""
    lay = tril_layout(row, col, mirrored_offset(row, col, offset) if upper else offset)
    n = lay.size
    if upper:
        t = (n - 1) - t
    i = xp.zeros_like(t)
    j = xp.zeros_like(t)
    if lay.trap_total > 0:
        # Largest r with start(r) <= t: r = floor(4t / (sqrt(b^2 + 8t) + b)), b = 2a - 1 (the
        # root of r^2 + b r - 2t = 0 written without cancellation), then corrected by one step
        # either way against the exact integer starts.
        b = float(2 * lay.first_count - 1)
        tf = xp.astype(t, xp.float64)
        r = xp.astype(xp.floor(4.0 * tf / (xp.sqrt(b * b + 8.0 * tf) + b)), xp.int64)
        r = xp.where(_trapezoid_start(r, lay.first_count) > t, r - 1, r)
        r = xp.where(_trapezoid_start(r + 1, lay.first_count) <= t, r + 1, r)
        i = lay.first_row + r
        j = t - _trapezoid_start(r, lay.first_count)
    if lay.trap_total < n:
        u = t - lay.trap_total
        in_rect = u >= 0
        u = xp.where(in_rect, u, xp.zeros_like(u))
        i = xp.where(in_rect, lay.rect_row + u // col, i)
        j = xp.where(in_rect, u % col, j)
    if upper:
        i = (row - 1) - i
        j = (col - 1) - j
    return i, j


def triangle_indices(
    row: int, col: int, offset: int, upper: bool, dtype: DType, device: Device, xp: Namespace
) -> Array:
    """(2, N) indices of ``triu`` if `upper` else ``tril``; arguments already validated."""
    lay = tril_layout(row, col, mirrored_offset(row, col, offset) if upper else offset)
    t = xp.arange(lay.size, dtype=xp.int64, device=device)
    i, j = triangle_entries(t, row, col, offset, upper, xp)
    return xp.stack([xp.astype(i, dtype), xp.astype(j, dtype)])
