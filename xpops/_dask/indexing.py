"""Dask engine of tril_indices / triu_indices: each chunk from its own range of entries.

The result is ``arange(N)`` in chunks, each chunk mapped to its (row, column) pairs by the
closed form of the generic engine in NumPy: nothing of size row * col, and no chunk needs
another.
"""

from typing import Any

import numpy as np

__all__ = ["triangle_indices"]


def _pairs(t: np.ndarray, row: int, col: int, offset: int, upper: bool, dtype: Any) -> np.ndarray:
    from .._agnostic.indexing import triangle_entries
    from .._backend import _compat_numpy

    i, j = triangle_entries(t, row, col, offset, upper, _compat_numpy())
    return np.stack([np.asarray(i, dtype=dtype), np.asarray(j, dtype=dtype)])


def triangle_indices(row: int, col: int, offset: int, upper: bool, dtype: Any, chunks: Any) -> Any:
    """(2, N) lazy indices; arguments already validated."""
    import dask.array as da

    from .._lib._triangle import mirrored_offset, tril_layout

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
