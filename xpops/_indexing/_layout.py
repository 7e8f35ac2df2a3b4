"""Closed-form layout of the (row, col) pairs of a matrix triangle, shared by every engine of
`tril_indices`/`triu_indices`.

The lower triangle ``j <= i + offset`` of a ``row x col`` matrix, read row by row, is made of

* rows ``[0, first_row)`` holding nothing,
* a *trapezoid*: rows ``[first_row, rect_row)`` whose counts grow by one, the first holding
  ``first_count`` entries (``trap_total`` in all),
* a *rectangle*: rows ``[rect_row, row)`` holding all ``col`` entries.

Entry ``t`` of the trapezoid lies in its row ``r`` where ``r*a + r*(r-1)/2 <= t`` is the largest
such sum (``a = first_count``); the rectangle is a plain division by ``col``. The upper triangle
``j >= i + offset`` is the lower triangle of the matrix turned by 180 degrees
(``i -> row-1-i``, ``j -> col-1-j``, offset ``col - row - offset``), read backwards.

The layout is in Python ints; `triangle_entries` evaluates the closed form in the array-API
operations of a namespace it is given, so that the generic and the Dask engines share it.
This module imports no array library.
"""

import functools
from typing import NamedTuple

from .._lib._typing import Array, Namespace

__all__ = [
    "TrilLayout",
    "largest_index",
    "mirrored_offset",
    "triangle_entries",
    "triangle_size",
    "tril_layout",
]


class TrilLayout(NamedTuple):
    """Layout of the lower triangle ``j <= i + offset`` of a ``row x col`` matrix.

    A named tuple: immutable, so that `tril_layout` can hand out the same one for the same
    arguments, and built in about half the host time of a frozen dataclass.
    """

    row: int
    col: int
    first_row: int
    first_count: int
    rect_row: int
    trap_total: int
    size: int


# Cached: a GPU call of a small triangle is all host time, of which computing the layout is
# about 2 us of 11 (H200 host), and a hit of the cache a tenth of that.
@functools.lru_cache(maxsize=64)
def tril_layout(row: int, col: int, offset: int) -> TrilLayout:
    """Return the layout of ``tril(row, col, offset)``; `row` and `col` are non-negative."""
    if row == 0 or col == 0:
        return TrilLayout(row, col, row, 1, row, 0, 0)
    first_row = min(max(-offset, 0), row)
    rect_row = min(max(col - offset - 1, first_row), row)
    first_count = first_row + offset + 1
    m = rect_row - first_row
    trap_total = m * first_count + m * (m - 1) // 2
    size = trap_total + (row - rect_row) * col
    return TrilLayout(row, col, first_row, first_count, rect_row, trap_total, size)


def mirrored_offset(row: int, col: int, offset: int) -> int:
    """Offset of the lower triangle whose 180-degree turn is ``triu(row, col, offset)``."""
    return col - row - offset


def triangle_size(row: int, col: int, offset: int, upper: bool) -> int:
    """Number of entries of ``tril`` (or ``triu`` if `upper`) of a ``row x col`` matrix."""
    if upper:
        offset = mirrored_offset(row, col, offset)
    return tril_layout(row, col, offset).size


def largest_index(row: int, col: int, offset: int, upper: bool) -> int:
    """The largest row or column index present in the triangle (-1 if it is empty)."""
    # empty: no row or column, or the corner entry nearest the diagonal's side left out
    if row == 0 or col == 0 or (offset > col - 1 if upper else row - 1 + offset < 0):
        return -1
    if upper:
        return max(min(row - 1, col - 1 - offset), col - 1)
    return max(row - 1, min(col - 1, row - 1 + offset))


def _trapezoid_start(r: Array, first_count: int) -> Array:
    """Entries before row ``r`` of a trapezoid whose first row holds `first_count`."""
    return r * first_count + (r * (r - 1)) // 2


def triangle_entries(
    t: Array, row: int, col: int, offset: int, upper: bool, xp: Namespace
) -> tuple[Array, Array]:
    """(i, j) of the entries numbered `t` (int64, row-major) of ``triu``/``tril``, computed
    with the operations of namespace `xp`."""
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
