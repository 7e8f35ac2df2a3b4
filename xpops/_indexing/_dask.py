"""Dask engine of tril_indices / triu_indices: each chunk from its own range of entries.

The result is built by one ``map_blocks`` layer with no input array: each chunk reads its
range of entries ``[start, stop)`` from its own location in the output and maps it to its
(row, column) pairs by the closed form of `._layout.triangle_entries` in NumPy. Nothing of
size row * col is built, and no chunk needs another. Every task of the graph is named
``xpops-tril_indices-<token>`` (or ``xpops-triu_indices-<token>``).
"""

from typing import Any

import numpy as np

from .._lib._compat import wrapped_namespace
from .._lib._dask import task_name
from ._layout import mirrored_offset, triangle_entries, tril_layout

__all__ = ["triangle_indices"]


def _chunk(
    row: int, col: int, offset: int, upper: bool, dtype: Any, block_info: Any = None
) -> np.ndarray:
    """The (2, stop - start) pairs of the entries of one chunk, whose range along the
    entries Dask passes in `block_info`."""
    start, stop = block_info[None]["array-location"][1]
    t = np.arange(start, stop, dtype=np.int64)
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
    from dask.array.core import normalize_chunks

    lay = tril_layout(row, col, mirrored_offset(row, col, offset) if upper else offset)
    dtype = np.dtype(dtype)
    # the chunks of ``arange(N)`` (int64 positions), as Dask would choose them
    along = normalize_chunks(
        chunks if chunks is not None else "auto", (lay.size,), dtype=np.dtype(np.int64)
    )
    op = "triu_indices" if upper else "tril_indices"
    return da.map_blocks(
        _chunk,
        row,
        col,
        offset,
        upper,
        dtype,
        chunks=((2,), along[0]),
        dtype=dtype,
        meta=np.empty((0, 0), dtype=dtype),
        name=task_name(op, row, col, offset, dtype, along),
    )
