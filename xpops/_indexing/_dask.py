"""Dask engine of tril_indices / triu_indices: each chunk from its own range of entries.

The result is ``arange(N)`` in chunks, each chunk mapped to its (row, column) pairs by the
closed form of `._layout.triangle_entries` in NumPy: nothing of size row * col, and no chunk
needs another.
"""

from typing import Any

import numpy as np

from .._lib._compat import wrapped_namespace
from ._layout import mirrored_offset, triangle_entries, tril_layout

__all__ = ["triangle_indices"]


def _pairs(t: np.ndarray, row: int, col: int, offset: int, upper: bool, dtype: Any) -> np.ndarray:
    i, j = triangle_entries(t, row, col, offset, upper, wrapped_namespace("numpy"))
    return np.stack([np.asarray(i, dtype=dtype), np.asarray(j, dtype=dtype)])


def triangle_indices(
    row: int,
    col: int,
    offset: int,
    upper: bool,
    dtype: Any,
    device: Any = None,
    xp: Any = None,
    chunks: Any = None,
) -> Any:
    """(2, N) lazy indices, in `chunks` along the entries (Dask's automatic chunking if
    None); arguments already validated (`device` and `xp` are unused: chunks are NumPy)."""
    import dask.array as da

    lay = tril_layout(row, col, mirrored_offset(row, col, offset) if upper else offset)
    t = da.arange(lay.size, dtype=np.int64, chunks=chunks if chunks is not None else "auto")
    dtype = np.dtype(dtype)
    return t.map_blocks(
        _pairs,
        row,
        col,
        offset,
        upper,
        dtype,
        new_axis=0,
        chunks=((2,), t.chunks[0]),
        dtype=dtype,
    )
