"""Dask engine of sparse.divide: chunk by chunk, lazily, for Dask arrays of sparse chunks.

The Dask operands are checked here (`_check_operands`), before the graph is built: the type of
their chunks as the contract checks an in-memory operand's type, taken from the array's meta,
or from its first chunk where the meta is an ndarray (Dask shows chunks that it cannot slice,
such as SciPy's COO matrices, as an ndarray meta, just as it shows dense chunks). A divisor
may be a Dask array of dense chunks of x's library (NumPy for SciPy and pydata chunks, CuPy for
cupyx ones), chunked as `x`. Each chunk also goes through the contract's checks
(`_common.check_operands`) before its in-memory engine (SciPy, cupyx or pydata, by the chunk's
library, `_lib._dask.chunk_engine`).
"""

from typing import Any

import numpy as np

from .._lib._compat import is_dask_array
from .._lib._dask import chunk_engine, task_name
from .._lib._dispatch import Engines
from .._lib._names import type_name
from ._common import (
    CUPYX,
    DENSE,
    PYDATA,
    SCALAR,
    SCIPY,
    SPARSE,
    check_numeric,
    check_operands,
    check_same_shape,
    check_scalar,
    check_sparse,
    is_dense,
    is_scalar,
    library,
)

__all__ = ["divide", "divide_scalar"]

#: The task names' op: ``xpops-sparse.divide-<token>``.
_OP = "sparse.divide"


def _no_chunk_engine(a: Any, b: Any) -> Any:
    """The engine of a chunk of no library of ours: none, since `check_operands` refuses it."""
    msg = f"xpops.sparse.divide has no engine for chunks of type {type_name(a)}"
    raise TypeError(msg)


def _chunk_engines(suffix: str) -> Engines:
    """The in-memory engines of a chunk (`divide` with `suffix`), by the chunk's library:
    SciPy's chunks go to the NumPy kind, cupyx's to the CuPy kind, pydata's to the generic
    kind (`_lib._dask.chunk_engine`)."""
    return Engines(
        __package__,
        numpy=f"._scipy:divide{suffix}",
        cupy=f"._cupyx:divide{suffix}",
        dask=_no_chunk_engine,
        generic=f"._pydata:divide{suffix}",
    )


# The in-memory engines of a chunk, by the form of its divisor.
_CHUNK_ENGINES = {
    SPARSE: _chunk_engines(""),
    SCALAR: _chunk_engines("_scalar"),
    DENSE: _chunk_engines("_dense"),
}


def _divide_chunk(a: Any, b: Any) -> Any:
    """``divide(a, b)`` of two in-memory chunks (or a chunk and a scalar), checked as the
    contract checks its operands."""
    _, form = check_operands(a, b)
    return chunk_engine(_CHUNK_ENGINES[form], a)(a, b)


def divide(x: Any, y: Any) -> Any:
    """x / y where `x` or `y` is a Dask array: two Dask arrays of sparse chunks, chunked
    alike, or a Dask `x` and a scalar `y`; the operands are checked here, before any work."""
    import dask.array as da

    if _check_operands(x, y):
        return divide_scalar(x, y)
    meta = _meta(x, y._meta)
    name = task_name(_OP, x, y)
    return da.map_blocks(_divide_chunk, x, y, dtype=_dtype(x, y), meta=meta, name=name)


def divide_scalar(x: Any, y: Any) -> Any:
    """x / y for a Dask array `x` of sparse chunks and a scalar `y`; arguments validated."""
    name = task_name(_OP, x, y)
    return x.map_blocks(_divide_chunk, y, dtype=_dtype(x, y), meta=_meta(x, y), name=name)


def _dtype(x: Any, y: Any) -> Any:
    y_dtype = y.dtype if hasattr(y, "dtype") else None
    with np.errstate(all="ignore"):
        divisor = np.ones(1, dtype=y_dtype) if y_dtype is not None else y
        return (np.ones(1, dtype=x.dtype) / divisor).dtype


def _meta(x: Any, y: Any) -> Any:
    """The result's meta: a sparse meta like x's where x's meta is sparse (x's meta, with the
    quotient's dtype, from a dense or ndarray divisor meta)."""
    kind = library(x._meta)
    if kind is None:
        return x._meta
    if library(y) is not None or not _is_array_like(y):
        return _divide_chunk(x._meta, y)
    if is_dense(y, kind):
        return _divide_chunk(x._meta, y.reshape(x._meta.shape))
    return x._meta


def _is_array_like(a: Any) -> bool:
    return hasattr(a, "shape") and getattr(a, "ndim", 0) > 0


def _first_chunk(a: Any) -> Any:
    """The meta of Dask array `a`, or its first chunk where the meta is an ndarray (dense
    chunks, or chunks Dask cannot slice such as SciPy's COO matrices: the cost of computing one
    chunk to tell them apart, once per operand; the graph computes it again, as it does not hold
    the chunk; the other chunks are checked when they are computed)."""
    sample = a._meta
    if isinstance(sample, np.ndarray):
        sample = a.to_delayed().ravel()[0].compute()
    return sample


def _check_chunks(a: Any, name: str, sample: Any) -> str:
    """The library of the sparse chunks of Dask array `a`, checked as an in-memory operand is,
    from `sample`, the `_first_chunk` of `a` (which the caller may also need: computed once)."""
    kind = check_sparse(sample, name, "'s chunks")
    check_numeric(a.dtype, f"`{name}`")
    return kind


def _check_operands(x: Any, y: Any) -> bool:
    """Validate Dask operands whose chunks are sparse (a divisor's dense); whether `y` is a
    scalar."""
    if not is_dask_array(x):
        msg = f"`y` is a Dask array, so `x` must be one too, got {type_name(x)}"
        raise TypeError(msg)
    if not is_dask_array(y):
        if not any(is_scalar(y, kind) for kind in (SCIPY, CUPYX, PYDATA)):
            msg = (
                f"`x` is a Dask array, so `y` must be a Dask array (of sparse chunks, or of "
                f"dense chunks of x's shape) or a scalar, got {type_name(y)}"
            )
            raise TypeError(msg)
        kind = _check_chunks(x, "x", _first_chunk(x))
        if not is_scalar(y, kind):
            msg = (
                f"`y` must be a scalar of the library of `x`'s chunks, got {type_name(y)}; "
                f"move it first"
            )
            raise TypeError(msg)
        check_scalar(y)
        return True
    check_same_shape(x, y, dense=library(y._meta) is None)
    if x.chunks != y.chunks:
        msg = (
            f"`x` and `y` must be chunked the same way (the division is chunk by chunk), got "
            f"{x.chunks} and {y.chunks}; rechunk one of them, e.g. y = y.rechunk(x.chunks)"
        )
        raise ValueError(msg)
    x_sample = _first_chunk(x)
    x_kind = _check_chunks(x, "x", x_sample)
    y_sample = _first_chunk(y)  # tells dense from sparse, and is what `_check_chunks` checks
    if is_dense(y_sample, x_kind):
        check_numeric(y.dtype, "`y`")
        return False
    y_kind = _check_chunks(y, "y", y_sample)
    if x_kind != y_kind:
        msg = (
            f"`x` and `y` must have chunks of the same library, got chunks of "
            f"{type_name(x_sample)} and {type_name(y_sample)}; move one of them first"
        )
        raise TypeError(msg)
    return False
