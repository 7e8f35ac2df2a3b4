"""Generic engine of tril_indices / triu_indices: the closed form in array-API operations."""

from typing import Any

from .._lib._typing import Array, Device, DType, Namespace
from ._layout import mirrored_offset, triangle_entries, tril_layout


def triangle_indices(
    row: int,
    col: int,
    offset: int,
    upper: bool,
    dtype: DType,
    device: Device,
    xp: Namespace,
    chunks: Any = None,
) -> Array:
    """(2, N) indices of ``triu`` if `upper` else ``tril`` in namespace `xp` on `device`;
    arguments already validated (`chunks` is for the Dask engine and unused here)."""
    lay = tril_layout(row, col, mirrored_offset(row, col, offset) if upper else offset)
    t = xp.arange(lay.size, dtype=xp.int64, device=device)
    i, j = triangle_entries(t, row, col, offset, upper, xp)
    return xp.stack([xp.astype(i, dtype), xp.astype(j, dtype)])
