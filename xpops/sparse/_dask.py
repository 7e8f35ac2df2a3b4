"""Dask engine of sparse.divide: chunk by chunk, lazily, for Dask arrays of sparse chunks.

The Dask operands are checked here (`_check_operands`), before the graph is built; each chunk
goes through the contract's checks of in-memory operands (`_common.check_operands`) before its
in-memory engine (SciPy or cupyx, by the chunk's library), since
Dask shows a chunk's type in the array's meta only when it can slice it (a COO chunk shows as
an ndarray meta).
"""

from collections.abc import Callable
from typing import Any

import numpy as np

from .._lib._compat import is_dask_array
from .._lib._names import type_name
from ._common import (
    CUPYX,
    SCIPY,
    check_operands,
    check_same_shape,
    check_sparse,
    is_scalar,
    library,
)

__all__ = ["divide", "divide_scalar"]


def _in_memory_engine(kind: str, scalar: bool) -> Callable[[Any, Any], Any]:
    """The SciPy or cupyx engine (`kind` ``"numpy"`` or ``"cupy"``), imported on first use."""
    if kind == CUPYX:
        from . import _cupyx as engine
    else:
        from . import _scipy as engine  # type: ignore[no-redef]
    return engine.divide_scalar if scalar else engine.divide


def _divide_chunk(a: Any, b: Any) -> Any:
    """``divide(a, b)`` of two in-memory chunks (or a chunk and a scalar), checked as the
    contract checks its operands."""
    kind, scalar = check_operands(a, b)
    return _in_memory_engine(kind, scalar)(a, b)


def divide(x: Any, y: Any) -> Any:
    """x / y where `x` or `y` is a Dask array: two Dask arrays of sparse chunks, chunked
    alike, or a Dask `x` and a scalar `y`; the operands are checked here, before any work."""
    import dask.array as da

    if _check_operands(x, y):
        return divide_scalar(x, y)
    return da.map_blocks(_divide_chunk, x, y, dtype=_dtype(x, y), meta=_meta(x, y._meta))


def divide_scalar(x: Any, y: Any) -> Any:
    """x / y for a Dask array `x` of sparse chunks and a scalar `y`; arguments validated."""
    return x.map_blocks(_divide_chunk, y, dtype=_dtype(x, y), meta=_meta(x, y))


def _dtype(x: Any, y: Any) -> Any:
    y_dtype = y.dtype if hasattr(y, "dtype") else None
    with np.errstate(all="ignore"):
        divisor = np.ones(1, dtype=y_dtype) if y_dtype is not None else y
        return (np.ones(1, dtype=x.dtype) / divisor).dtype


def _meta(x: Any, y: Any) -> Any:
    """The result's meta: a sparse one when both metas are sparse (or y a scalar)."""
    if library(x._meta) is not None and (library(y) is not None or not _is_array_like(y)):
        return _divide_chunk(x._meta, y)
    return x._meta


def _is_array_like(a: Any) -> bool:
    return hasattr(a, "shape") and getattr(a, "ndim", 0) > 0


def _check_operands(x: Any, y: Any) -> bool:
    """Validate Dask operands whose chunks are sparse; whether `y` is a scalar.

    Dask records the chunk type in ``_meta`` only when it can slice it (a COO chunk shows as
    an ndarray meta): a sparse meta is checked now, chunks otherwise when computed."""
    if not is_dask_array(x):
        msg = f"`y` is a Dask array, so `x` must be one too, got {type_name(x)}"
        raise TypeError(msg)
    if library(x._meta) is not None:
        check_sparse(x._meta, "x")
    if not is_dask_array(y):
        if is_scalar(y, library(x._meta) or SCIPY):
            return True
        msg = (
            f"`x` is a Dask array, so `y` must be a Dask array of sparse chunks or a scalar, "
            f"got {type_name(y)}"
        )
        raise TypeError(msg)
    if library(y._meta) is not None:
        check_sparse(y._meta, "y")
    check_same_shape(x, y)
    if x.chunks != y.chunks:
        msg = (
            f"`x` and `y` must be chunked the same way (the division is chunk by chunk), got "
            f"{x.chunks} and {y.chunks}; rechunk one of them, e.g. y = y.rechunk(x.chunks)"
        )
        raise ValueError(msg)
    return False
