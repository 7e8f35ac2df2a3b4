"""Dask engine of cholesky_solve: batch dimensions chunked, each chunk solved in memory.

The core dimensions (M and K of `x`, M and M of `y`) must each be one chunk; batch
dimensions broadcast lazily (``dask.array.broadcast_to`` keeps views, nothing is copied
before a chunk is computed) and the factor's batch chunks are aligned to those of `x`. Each
chunk pair is solved by the in-memory engine of its library (NumPy or CuPy, picked by
`_lib._dask.chunk_engine`): the contract has already validated and cast the whole arrays, so
their chunks need nothing more. The solve's graph layer is ``xpops-cholesky_solve-<token>``.
"""

from typing import Any

from .._lib._compat import array_namespace
from .._lib._dask import check_core_chunks, chunk_engine, task_name
from .._lib._dispatch import Engines
from .._lib._typing import Namespace

__all__ = ["cholesky_solve"]

# The in-memory engines of the chunks, which are NumPy or CuPy arrays (the Dask and generic
# entries only complete the table).
_CHUNK_ENGINES = Engines(
    __package__,
    numpy="._numpy:cholesky_solve",
    cupy="._cupy:cholesky_solve",
    dask="._agnostic:cholesky_solve",
    generic="._agnostic:cholesky_solve",
)


def _solve(x: Any, y: Any, upper: bool) -> Any:
    """One chunk: x (*, M, K) and y (*, M, M) of one library, one dtype and one batch shape."""
    return chunk_engine(_CHUNK_ENGINES, x)(x, y, upper, xp=array_namespace(x, y))


def cholesky_solve(x: Any, y: Any, upper: bool, *, xp: Namespace | None = None) -> Any:
    """x (*, M, K) and y (*, M, M), validated and cast by the contract; `xp` is not used."""
    import dask.array as da
    import numpy as np

    check_core_chunks(x, "x", 2, "the solve needs whole matrices")
    check_core_chunks(y, "y", 2, "the solve needs whole matrices")
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
    name = task_name("cholesky_solve", xb, yb, upper)
    return da.map_blocks(_solve, xb, yb, upper=upper, dtype=x.dtype, chunks=xb.chunks, name=name)
