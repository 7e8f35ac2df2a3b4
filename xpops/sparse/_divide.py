"""sparse.divide: contract, validation and dispatch."""

import numbers
import sys
from typing import Any

import numpy as np

from .._lib._compat import is_dask_array as _is_dask

__all__ = ["divide"]

_FORMATS = ("csr", "coo")
_SUPPORTED = (
    "a COO or CSR sparse array or matrix of scipy.sparse (NumPy backend) or of "
    "cupyx.scipy.sparse (CuPy backend)"
)


def _type_name(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__.split('.')[0]}.{cls.__qualname__}"


def _library(a: Any) -> str | None:
    """``"scipy"`` or ``"cupyx"`` for a sparse matrix/array of either, else None.

    A module not imported yet holds no operand of its types: looking modules up in
    sys.modules instead of importing them saves about 10 us a call, which the GPU would
    otherwise spend idle before the first kernel."""
    csp = sys.modules.get("cupyx.scipy.sparse")
    if csp is not None and csp.issparse(a):
        return "cupyx"
    sp = sys.modules.get("scipy.sparse")
    return "scipy" if sp is not None and sp.issparse(a) else None


def _check_sparse(a: Any, name: str) -> str:
    """The library of sparse operand `a`; TypeError for anything but COO/CSR."""
    library = _library(a)
    if library is None:
        msg = f"`{name}` must be {_SUPPORTED}, got {_type_name(a)}"
        raise TypeError(msg)
    if a.format not in _FORMATS:
        msg = f"`{name}` must be {_SUPPORTED}, got {_type_name(a)} (format {a.format!r})"
        raise TypeError(msg)
    return library


def _is_scalar(y: Any, library: str) -> bool:
    """Python and NumPy numbers, and 0-d arrays of the operand's library."""
    if isinstance(y, numbers.Number | np.generic):
        return True
    if isinstance(y, np.ndarray):
        return y.ndim == 0
    if library == "cupyx" and type(y).__module__.startswith("cupy"):
        return getattr(y, "ndim", None) == 0 and hasattr(y, "device")
    return False


def _check_numeric(dtype: Any, what: str) -> None:
    if np.dtype(dtype).kind not in "biufc":
        msg = f"{what} must have a numeric dtype, got {dtype}"
        raise TypeError(msg)


def _divide_chunk(a: Any, b: Any) -> Any:
    return divide(a, b)


def _divide_dask(x: Any, y: Any) -> Any:
    """Chunk-wise division of Dask arrays whose chunks are sparse matrices (lazy).

    Dask records the chunk type in ``_meta`` only when it can slice it (a COO chunk shows as
    an ndarray meta): a sparse meta is checked now, chunks otherwise when computed."""
    import dask.array as da

    if not _is_dask(x):
        msg = f"`y` is a Dask array, so `x` must be one too, got {_type_name(x)}"
        raise TypeError(msg)
    if _library(x._meta) is not None:
        _check_sparse(x._meta, "x")
    library = _library(x._meta) or "scipy"
    if not _is_dask(y):
        if _is_scalar(y, library):
            dx: Any = x  # (mypy narrows a Dask array to the array-API protocol)
            return dx.map_blocks(_divide_chunk, y, dtype=_dask_dtype(x, y), meta=_dask_meta(x, y))
        msg = (
            f"`x` is a Dask array, so `y` must be a Dask array of sparse chunks or a scalar, "
            f"got {_type_name(y)}"
        )
        raise TypeError(msg)
    if _library(y._meta) is not None:
        _check_sparse(y._meta, "y")
    if tuple(x.shape) != tuple(y.shape):
        msg = f"`x` and `y` must have the same shape, got {tuple(x.shape)} and {tuple(y.shape)}"
        raise ValueError(msg)
    if x.chunks != y.chunks:
        msg = (
            f"`x` and `y` must be chunked the same way (the division is chunk by chunk), got "
            f"{x.chunks} and {y.chunks}; rechunk one of them, e.g. y = y.rechunk(x.chunks)"
        )
        raise ValueError(msg)
    return da.map_blocks(_divide_chunk, x, y, dtype=_dask_dtype(x, y), meta=_dask_meta(x, y._meta))


def _dask_dtype(x: Any, y: Any) -> Any:
    y_dtype = y.dtype if hasattr(y, "dtype") else None
    with np.errstate(all="ignore"):
        divisor = np.ones(1, dtype=y_dtype) if y_dtype is not None else y
        return (np.ones(1, dtype=x.dtype) / divisor).dtype


def _dask_meta(x: Any, y: Any) -> Any:
    """The result's meta: a sparse one when both metas are sparse (or y a scalar)."""
    if _library(x._meta) is not None and (_library(y) is not None or not _is_array_like(y)):
        return divide(x._meta, y)
    return x._meta


def _is_array_like(a: Any) -> bool:
    return hasattr(a, "shape") and getattr(a, "ndim", 0) > 0


def divide(x: Any, y: Any, /) -> Any:
    r"""Element-wise ``x / y`` of two sparse matrices that stays sparse.

    The result stores exactly the union of the two stored patterns; positions stored in
    neither operand stay implicit zeros. Nothing is ever densified.

    Parameters
    ----------
    x : sparse array or matrix
        Dividend: a COO or CSR ``scipy.sparse`` array or matrix (NumPy backend), or a COO or
        CSR ``cupyx.scipy.sparse`` matrix (CuPy backend). Any numeric dtype; N-D COO where
        SciPy has it.
    y : sparse array or matrix, or scalar
        Divisor: a sparse operand of the same library and shape as `x` (converted to the
        format of `x` when it differs), or a scalar (a Python or NumPy number, a 0-d NumPy
        array, or with cupyx a 0-d CuPy array), by which only the stored values of `x` are
        divided.

    Returns
    -------
    out : sparse array or matrix
        Same library, format and container kind (``*_array`` or ``*_matrix``) as `x`, in
        canonical form (sorted indices, no duplicates, ``has_canonical_format`` true). Its
        dtype is the true-division dtype of the pair (float32 / float32 stays float32;
        integers and bools give float64). Its index dtype is that of the inputs (int64 if
        either uses int64) unless the result needs int64.

    Raises
    ------
    TypeError
        If `x` is not a COO/CSR sparse operand of SciPy or cupyx, `y` is neither such an
        operand nor a scalar, the two come from different libraries, or a dtype is not
        numeric.
    ValueError
        If the shapes of `x` and `y` differ.

    See Also
    --------
    scipy.sparse.csr_array.multiply : the element-wise product (intersection of patterns).

    Notes
    -----
    **Semantics.** Duplicate entries are summed and indices sorted first (the inputs are not
    modified). At each position stored in `x` or in `y` (explicitly stored zeros count as
    stored) the result holds ``x_ij / y_ij`` with IEEE arithmetic, 0 standing for the side
    that is not stored: ``x/0`` gives ``±inf``, ``0/0`` gives ``nan`` and ``0/y`` gives
    ``±0``. Positions stored in neither operand stay implicit (zero), although the dense
    quotient there would be ``0/0 = nan``: this is the one deliberate departure from dense
    semantics, since honouring it would make every result dense. Zeros in the result are not
    pruned, so its pattern is always the union of the input patterns. With a scalar `y` the
    pattern of `x` is kept and ``x / 0`` follows the same IEEE rules.

    The peers: SciPy returns a dense matrix for sparse / sparse, CuPy densifies both operands,
    PyTorch, JAX and TensorFlow refuse sparse divisors.

    Backend support: SciPy (the union is merged by SciPy's compiled CSR addition on encoded
    values, in blocks of rows; COO through CSR) and cupyx (CUDA kernels in two passes over
    tiles of `x`: binary searches in `y`'s staged rows, then a streaming write of each tile's
    stretch of the result; one host synchronisation to size the result, plus sorting and
    summing first for operands that are not canonical; COO through CSR). The result never
    holds more than the two operands' entries; nothing of the dense size is allocated. Dask
    arrays whose chunks are SciPy or cupyx sparse matrices, chunked alike, are divided chunk
    by chunk, lazily (a scalar `y` too).

    Examples
    --------
    >>> import numpy as np
    >>> import scipy.sparse as sp
    >>> import xpops
    >>> x = sp.csr_array(np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 3.0]]))
    >>> y = sp.csr_array(np.array([[4.0, 5.0, 0.0], [0.0, 0.0, 6.0]]))
    >>> out = xpops.sparse.divide(x, y)
    >>> out.toarray()
    array([[0.25, 0.  ,  inf],
           [0.  , 0.  , 0.5 ]])
    >>> out.nnz  # (0, 0), (0, 1), (0, 2), (1, 2): the union of the two patterns
    4
    >>> xpops.sparse.divide(x, 2).toarray()
    array([[0.5, 0. , 1. ],
           [0. , 0. , 1.5]])
    """
    if _is_dask(x) or _is_dask(y):
        return _divide_dask(x, y)
    library = _check_sparse(x, "x")
    _check_numeric(x.dtype, "`x`")
    if _is_scalar(y, library):
        _check_numeric(y.dtype if hasattr(y, "dtype") else np.asarray(y).dtype, "`y`")
        scalar = True
    else:
        y_library = _library(y)
        if y_library is None or y.format not in _FORMATS:
            msg = f"`y` must be {_SUPPORTED}, or a scalar, got {_type_name(y)}"
            raise TypeError(msg)
        if y_library != library:
            msg = (
                f"`x` and `y` must come from the same library, got {_type_name(x)} and "
                f"{_type_name(y)}; move one of them first"
            )
            raise TypeError(msg)
        _check_numeric(y.dtype, "`y`")
        if tuple(x.shape) != tuple(y.shape):
            msg = f"`x` and `y` must have the same shape, got {tuple(x.shape)} and {tuple(y.shape)}"
            raise ValueError(msg)
        scalar = False

    if library == "scipy":
        from .._numpy import sparse as engine
    else:
        from .._cupy import sparse as engine  # type: ignore[no-redef]
    if scalar:
        return engine.divide_scalar(x, y)
    return engine.divide(x, y)
