"""Dask engine of cholesky_solve: batch dimensions chunked, each chunk solved in memory.

The core dimensions (M and K of `x`, M and M of `y`) must each be one chunk; batch
dimensions broadcast lazily (``dask.array.broadcast_to`` keeps views, nothing is copied
before a chunk is computed) and the factor's batch chunks are aligned to those of `x`.
"""

from typing import Any

__all__ = ["cholesky_solve"]


def _solve(x: Any, y: Any, upper: bool) -> Any:
    from ..linalg import cholesky_solve

    return cholesky_solve(x, y, upper=upper)


def _check_core(a: Any, name: str, core: int) -> None:
    split = [i for i in range(a.ndim - core, a.ndim) if len(a.chunks[i]) > 1]
    if split:
        dims = ", ".join(str(i - a.ndim) for i in split)
        msg = (
            f"`{name}` must hold its last {core} dimensions in one chunk (the solve needs whole "
            f"matrices), got {len(a.chunks[split[0]])} chunks along axis {dims}; rechunk "
            f"first, e.g. {name}.rechunk({{-2: -1, -1: -1}})"
        )
        raise ValueError(msg)


def cholesky_solve(x: Any, y: Any, upper: bool) -> Any:
    """x (*, M, K) and y (*, M, M), validated and cast by the contract."""
    import dask.array as da
    import numpy as np

    _check_core(x, "x", 2)
    _check_core(y, "y", 2)
    batch = tuple(np.broadcast_shapes(x.shape[:-2], y.shape[:-2]))
    m, k = x.shape[-2], x.shape[-1]
    xb = da.broadcast_to(x, (*batch, m, k))
    yb = da.broadcast_to(y, (*batch, m, m))
    # align batch chunks: where x was broadcast take y's chunks, else x's
    chunks = tuple(
        yc if len(xc) == 1 and len(yc) > 1 else xc
        for xc, yc in zip(xb.chunks[:-2], yb.chunks[:-2], strict=True)
    )
    xb = xb.rechunk((*chunks, -1, -1))
    yb = yb.rechunk((*chunks, -1, -1))
    return da.map_blocks(_solve, xb, yb, upper=upper, dtype=x.dtype, chunks=xb.chunks)
