"""NumPy engine of tril_indices / triu_indices.

For large triangles the time goes to first-touch page faults of the memory written, so this
engine allocates nothing of size N but the output (``numpy.tril_indices`` builds a
``row x col`` boolean mask and calls ``nonzero``) and writes each half of it in place: a
difference array (1 where the value steps, the jump at the start of each row) summed in place
with ``cumsum``.
"""

from typing import Any

import numpy as np


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
    contract has checked that the device is the CPU)."""
    # Non-empty rows form one range: rows >= -offset for tril, rows < col - offset for triu.
    lo, hi = (0, min(row, col - offset)) if upper else (max(0, -offset), row)
    i = np.arange(lo, max(lo, hi), dtype=np.int64)
    if upper:
        first = np.maximum(i + offset, 0)
        counts = col - first
    else:
        first = np.zeros_like(i)
        counts = np.minimum(i + offset + 1, col)
    n = int(counts.sum())
    out = np.empty((2, n), dtype=dtype)
    if n == 0:
        return out
    starts = np.cumsum(counts)[:-1]  # where each row after the first begins

    row_idx = out[0]
    row_idx.fill(0)
    row_idx[0] = lo
    row_idx[starts] = 1
    np.cumsum(row_idx, out=row_idx)

    col_idx = out[1]
    col_idx.fill(1)
    col_idx[0] = first[0]
    # the step from the last column of one row to the first column of the next
    col_idx[starts] = first[1:] - (first[:-1] + counts[:-1] - 1)
    np.cumsum(col_idx, out=col_idx)
    return out
