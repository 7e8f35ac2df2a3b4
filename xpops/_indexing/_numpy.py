"""NumPy engine of tril_indices / triu_indices.

The non-empty rows of a triangle are consecutive, and their lengths step by one (growing for
tril, shrinking for triu) up to ``col``: rows of ``col`` entries are full. Three ways to fill
the (2, N) output, chosen by size:

* A small matrix (`MASK_MAX` entries or fewer) is read off a boolean mask: the flat positions
  of its true entries, split into row and column by one division. It takes the fewest NumPy
  calls, and at these sizes the calls are most of the cost.
* A triangle of at most `REPEAT_MAX` entries, most of them in rows that are not full, is one
  ``repeat`` along the rows, written straight into the output: each row's index, and the
  position its column 0 would have; the column indices follow by a subtraction from the
  entries' positions, block by block in the cache.
* Otherwise the triangle is written part by part into the output: the full rows by two
  broadcast assignments; the rows of `LONG_ROW` entries or more one by one, by a fill and a
  copy of a slice of one ``arange``; the shorter rows together, as difference arrays summed
  in place by ``cumsum``. A large triangle's time goes to the first touch of the output's
  pages and to writing them: each entry is written once (the short rows' sums run in the
  cache), and nothing else of size N is allocated.

``numpy.tril_indices`` builds a ``row x col`` mask, then two index arrays by boolean indexing.
"""

from typing import Any

import numpy as np

from .._lib._dtypes import INT32_MAX

__all__ = ["LONG_ROW", "MASK_MAX", "REPEAT_MAX", "triangle_indices"]

#: Largest ``row * col`` read off a mask: about where the per-entry cost of the mask (a byte
#: per matrix entry and a division per triangle entry) overtakes the extra calls of the
#: ``repeat`` (a square matrix of about 80 rows), measured on two cores.
MASK_MAX = 6_400

#: Shortest row written on its own (beyond `REPEAT_MAX` entries): about where a fill and a copy
#: of a slice (a Python loop step, about 1 us) cost less than the row's part of the short
#: rows' difference arrays and ``cumsum`` (about 2 ns an entry), measured on two cores.
LONG_ROW = 1024

#: Most entries written by ``repeat``: its output (32 MiB of int64 at this size) is read again
#: by the subtraction that makes the column indices, which beyond this size no longer finds it
#: in the cache; writing each entry once (the parts) is then faster. Measured on two cores.
REPEAT_MAX = 2**21

#: Entries of a block of the column indices' subtraction in `_repeat_rows`: 256 KiB of int64.
_BLOCK = 2**15


def triangle_indices(
    row: int,
    col: int,
    offset: int,
    upper: bool,
    dtype: np.dtype,
    device: Any = None,
    xp: Any = None,
    chunks: Any = None,
) -> np.ndarray:
    """(2, N) indices of ``triu`` if `upper` else ``tril``; arguments already validated
    (`device`, `xp` and `chunks` are the dispatch's common arguments, unused here: the
    contract has checked that the device is the CPU, and `offset` lies in ``[-row, col]``)."""
    if row * col <= MASK_MAX:
        return _from_mask(row, col, offset, upper, dtype)
    # non-empty rows [lo, hi); row lo + k holds min(count + step * k, col) entries
    if upper:  # row i holds col - (i + offset) entries, all col while i + offset <= 0
        lo, hi, count, step = 0, max(min(row, col - offset), 0), col - offset, -1
    else:  # row i holds i + offset + 1 entries, from row -offset on
        lo, hi, step = max(-offset, 0), row, 1
        count = lo + offset + 1
    m = hi - lo
    n = _size(m, count, step, col)
    if n == 0:
        return np.empty((2, 0), dtype=dtype)
    # full rows go faster by broadcasting than by the repeat
    if n <= REPEAT_MAX and 2 * _full_rows(m, count, step, col) * col < n:
        return _repeat_rows(lo, m, count, step, col, dtype, n)
    return _by_parts(lo, m, count, step, col, dtype, n)


def _from_mask(row: int, col: int, offset: int, upper: bool, dtype: np.dtype) -> np.ndarray:
    """The triangle read off its ``row x col`` mask (small matrices).

    Entry ``(i, j)`` is in the triangle by its diagonal ``j - i`` alone, so the mask is a view
    of one line of ``row + col - 1`` flags, stepping back one flag a row; its C-order copy
    gives the flat positions ``i * col + j`` of the entries.
    """
    if row == 0 or col == 0:
        return np.empty((2, 0), dtype=dtype)
    diagonal = np.arange(1 - row, col)  # j - i, from the bottom-left corner to the top-right
    line = diagonal >= offset if upper else diagonal <= offset
    mask = np.ndarray((row, col), dtype=np.bool_, buffer=line, offset=row - 1, strides=(-1, 1))
    flat = mask.ravel().nonzero()[0]
    out = np.empty((2, flat.size), dtype=dtype)
    i = np.floor_divide(flat, col, out=out[0])
    j = np.multiply(i, col, out=out[1])
    np.subtract(flat, j, out=j)
    return out


def _full_rows(m: int, count: int, step: int, col: int) -> int:
    """How many of `m` rows, the first of `count` entries and each next `step` more, reach
    `col` entries: the tail of tril's rows, the head of triu's."""
    if step > 0:
        return min(max(m - (col - count), 0), m)
    return min(max(count - col + 1, 0), m)


def _size(m: int, count: int, step: int, col: int) -> int:
    """Entries of `m` rows, the first of `count` entries and each next `step` more, each
    clipped to `col` (Python ints: exact whatever the size)."""
    full = _full_rows(m, count, step, col)
    part = m - full  # rows of fewer than col entries, the first of `first`
    first = count if step > 0 else count - full
    return full * col + part * first + step * (part * (part - 1) // 2)


def _repeat_rows(
    lo: int, m: int, count: int, step: int, col: int, dtype: np.dtype, n: int
) -> np.ndarray:
    """(2, n) indices of the `m` rows from `lo` (as `triangle_indices` numbers them) by one
    ``repeat`` along the rows."""
    counts = np.minimum(np.arange(count, count + step * m, step), col)
    # The positions of column 0 lie in [-col, n]: in int64 where int32 cannot hold them
    # (a triu whose last column is near 2**31), the result then cast.
    work = dtype if col + n <= INT32_MAX else np.dtype(np.int64)
    runs = np.empty((2, m), dtype=work)
    runs[0] = np.arange(lo, lo + m)
    # the position of each row's column 0: its start, less its first column (col - count_i
    # for triu, where rows end at the last column; 0 for tril)
    if step > 0:
        runs[1, :1] = 0
        np.cumsum(counts[:-1], out=runs[1, 1:])
    else:
        np.cumsum(counts, out=runs[1])
        runs[1] -= col
    out = np.repeat(runs, counts, axis=1)
    # column = position - that, block by block: positions start + arange(_BLOCK), the
    # arange made once and the block in the cache
    cols = out[1]
    positions = np.arange(min(_BLOCK, n), dtype=work)
    for start in range(0, n, _BLOCK):
        block = cols[start : start + _BLOCK]
        block -= start
        np.subtract(positions[: block.shape[0]], block, out=block)
    return out if work == dtype else out.astype(dtype)


def _by_parts(
    lo: int, m: int, count: int, step: int, col: int, dtype: np.dtype, n: int
) -> np.ndarray:
    """(2, n) indices of the `m` rows from `lo`, written part by part: the short rows by
    `_short_rows`, the long ones by `_long_rows`, the full ones by broadcasting.

    In row order, tril is short, long, full rows; triu is full, long, short.
    """
    out = np.empty((2, n), dtype=dtype)
    full = _full_rows(m, count, step, col)
    if step > 0:  # rows [0, short) are short, [m - full, m) full
        short = min(max(min(LONG_ROW, col) - count, 0), m - full)
        parts = [("short", 0, short), ("long", short, m - full), ("full", m - full, m)]
    else:  # rows [0, full) are full, [short, m) short
        short = min(max(count - LONG_ROW + 1, full), m)
        parts = [("full", 0, full), ("long", full, short), ("short", short, m)]
    start = 0
    for kind, k0, k1 in parts:
        if k1 <= k0:
            continue
        first = count + step * k0
        size = _size(k1 - k0, first, step, col)
        part = out[:, start : start + size]
        if kind == "short":
            _short_rows(part, lo + k0, k1 - k0, first, step, col)
        elif kind == "long":
            _long_rows(part, lo + k0, k1 - k0, first, step, col)
        else:
            shape = (k1 - k0, col)
            part[0].reshape(shape)[...] = np.arange(lo + k0, lo + k1, dtype=dtype)[:, None]
            part[1].reshape(shape)[...] = np.arange(col, dtype=dtype)
        start += size
    return out


def _long_rows(out: np.ndarray, lo: int, m: int, count: int, step: int, col: int) -> None:
    """Fill `out` with the `m` rows from `lo`, the first of `count` entries and each next
    `step` more, one by one: a fill of the row index, then (in a second pass, which writes
    one stream of memory at a time) a copy of a slice of one ``arange`` for the columns."""
    rows, cols = out
    start, length = 0, count
    for i in range(lo, lo + m):
        rows[start : start + length] = i
        start += length
        length += step
    start, length = 0, count
    if step > 0:  # tril: row i holds columns [0, length)
        columns = np.arange(count + m - 1, dtype=out.dtype)
        for _ in range(m):
            cols[start : start + length] = columns[:length]
            start += length
            length += 1
    else:  # triu: row i holds columns [col - length, col)
        columns = np.arange(col - count, col, dtype=out.dtype)
        for k in range(m):
            cols[start : start + length] = columns[k:]
            start += length
            length -= 1


def _short_rows(out: np.ndarray, lo: int, m: int, count: int, step: int, col: int) -> None:
    """Fill `out` with the `m` rows from `lo`, the first of `count` entries and each next
    `step` more, in place: difference arrays (1 where the row index steps; the jump from one
    row's last column to the next row's first) summed by ``cumsum``."""
    rows, cols = out
    counts = np.arange(count, count + step * (m - 1), step)  # of every row but the last
    starts = np.cumsum(counts)  # where each next row starts
    rows.fill(0)
    rows[0] = lo
    rows[starts] = 1
    np.cumsum(rows, out=rows, dtype=rows.dtype)
    cols.fill(1)
    # tril rows run over [0, count): the jump is 1 - count; triu rows over [col - count, col),
    # the next one starting one column further on: the jump is 2 - count
    cols[0] = 0 if step > 0 else col - count
    cols[starts] = (1 if step > 0 else 2) - counts
    np.cumsum(cols, out=cols, dtype=cols.dtype)
