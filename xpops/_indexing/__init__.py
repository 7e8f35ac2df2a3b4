"""tril_indices and triu_indices: contract, validation and dispatch.

Every engine takes ``(row, col, offset, upper, dtype, device, xp, chunks)``, validated: sizes
as Python ints, the offset clipped to the matrix, the dtype resolved in namespace `xp`.
"""

from types import ModuleType
from typing import Any

import numpy as np

from .. import _backend
from .._lib._dispatch import Engines, dispatch, engine_kind
from .._lib._dtypes import INT32_MAX, INT64_MAX
from .._lib._typing import Array, Device, DType, Namespace
from .._lib._validation import as_int, as_nonnegative_int
from . import _agnostic, _numpy
from ._layout import largest_index, triangle_size

__all__ = ["tril_indices", "triu_indices"]

_ENGINES = Engines(
    __package__,
    numpy=_numpy.triangle_indices,
    cupy="._cupy:triangle_indices",
    dask="._dask:triangle_indices",
    generic=_agnostic.triangle_indices,
)


def _resolve_dtype(dtype: DType, xp: Namespace, largest: int) -> DType:
    """The index dtype, after checking that it holds `largest`, the triangle's largest index.

    int64 is checked as int32 is: an index past 2**63 - 1 is refused on every engine (NumPy
    raises OverflowError there, and array-API engines would wrap it to a negative index)."""
    if dtype is None:
        dtype = xp.int64
    elif dtype != xp.int32 and dtype != xp.int64:
        msg = f"`dtype` must be int32 or int64 of {xp.__name__}, got {dtype!r}"
        raise TypeError(msg)
    if dtype == xp.int32 and largest > INT32_MAX:
        msg = (
            f"`dtype` int32 cannot hold the index {largest} of this triangle; "
            "use int64 (the default)"
        )
        raise ValueError(msg)
    if largest > INT64_MAX:
        msg = (
            f"`dtype` int64 cannot hold the index {largest} of this triangle (at most "
            "2**63 - 1), and no index dtype is wider; use a smaller `row`, `col` or `offset`"
        )
        raise ValueError(msg)
    return dtype


def _check_sizes(row: int, col: int, offset: int, upper: bool) -> None:
    """Refuse a `row` or `col` past int64, which the engines take as int64 (an index of the
    triangle past it is refused before, naming the index), and a triangle of more than
    2**63 - 1 entries, which int64 cannot number."""
    for name, value in (("row", row), ("col", col)):
        if value > INT64_MAX:
            msg = f"`{name}` must be at most 2**63 - 1 (the range of int64), got {value}"
            raise ValueError(msg)
    if row * col <= INT64_MAX:  # the common case: no layout to compute
        return
    size = triangle_size(row, col, offset, upper)
    if size > INT64_MAX:
        msg = (
            f"`row` = {row} and `col` = {col} (offset {offset}) give a triangle of {size} "
            "entries, more than int64 can number (2**63 - 1)"
        )
        raise ValueError(msg)


# The fast paths take sizes up to this bound: their triangles' indices and entry counts fit
# int64, and every index fits int32, without a check.
_FAST_MAX = 2**31
# The namespaces the fast paths serve, by module name: the libraries and their array-API
# wrappers (``xpops.default_namespace()``, ``get_namespace``), whose engines are the same.
_FAST_NAMESPACES = {
    "numpy": "numpy",
    "array_api_compat.numpy": "numpy",
    "cupy": "cupy",
    "array_api_compat.cupy": "cupy",
}
_INT64 = np.dtype(np.int64)
_INT32 = np.dtype(np.int32)


def _fast_path(
    row: Any, col: Any, offset: Any, dtype: Any, device: Any, xp: Any, chunks: Any, upper: bool
) -> Array | None:
    """The NumPy or CuPy engine's result for the common call (Python int sizes and offset, no
    `device` or `chunks`, NumPy or CuPy asked for or the default; on NumPy no `dtype`, on CuPy
    none or NumPy's int32 or int64 type), or None. The general path's checks cost about as much
    as the engine's work on a small triangle (on a GPU, its host time); such a call passes
    every one of them (the sizes bound every index and the entry count below 2**31 and
    2**63), and the engine gets the same arguments from either."""
    if device is not None or chunks is not None:
        return None
    if col is None:
        col = row
    if type(row) is not int or type(col) is not int or type(offset) is not int:
        return None
    if not (0 <= row <= _FAST_MAX and 0 <= col <= _FAST_MAX):
        return None
    if xp is None:
        library = _backend.default_backend()
    elif xp is np:
        library = "numpy"
    else:
        library = _FAST_NAMESPACES.get(getattr(xp, "__name__", ""), "")
    offset = min(max(offset, -row), col)
    if library == "numpy" and dtype is None:
        return _numpy.triangle_indices(row, col, offset, upper, _INT64)
    if library == "cupy" and (dtype is None or dtype is np.int64 or dtype is np.int32):
        _backend.resolve_namespace(xp)  # RuntimeError where CuPy cannot be used, as below
        engine = _ENGINES["cupy"]
        return engine(row, col, offset, upper, _INT32 if dtype is np.int32 else _INT64)
    return None


def _triangle_indices(
    row: int,
    col: int | None,
    offset: int,
    dtype: DType,
    device: Device,
    xp: ModuleType | None,
    upper: bool,
    chunks: Any = None,
) -> Array:
    fast = _fast_path(row, col, offset, dtype, device, xp, chunks, upper)
    if fast is not None:
        return fast
    row = as_nonnegative_int(row, "row")
    col = row if col is None else as_nonnegative_int(col, "col")
    offset = as_int(offset, "offset")
    # An offset past either edge selects all entries or none, the same as the edge itself.
    offset = min(max(offset, -row), col)
    namespace = _backend.resolve_namespace(xp)
    _backend.check_device(namespace, device)
    if chunks is not None and engine_kind(namespace) != "dask":
        msg = f"`chunks` is for xp=dask.array only, got xp={namespace.__name__}"
        raise ValueError(msg)
    dtype = _resolve_dtype(dtype, namespace, largest_index(row, col, offset, upper))
    _check_sizes(row, col, offset, upper)
    return dispatch(namespace, _ENGINES, row, col, offset, upper, dtype, device, namespace, chunks)


_NOTES = """
    Notes
    -----
    The result is computed in closed form: the triangle is a run of empty rows, a trapezoid
    whose row lengths grow (or, for the upper triangle, shrink) by one, and a rectangle of full
    rows. Entry ``t`` of the trapezoid lies in the row given by the root of a quadratic, found
    with a double-precision square root and corrected against exact 64-bit row starts; the
    rectangle is a division. Nothing of size ``row * col`` is built (but a mask of at most 6400
    entries by the NumPy engine), unlike NumPy's and CuPy's own functions, which make a
    boolean mask and call ``nonzero``.

    Time and memory are O(N) for N entries. The NumPy and CuPy engines allocate nothing of size
    N but the output; the generic engine makes a few int64 temporaries of size N.

    Unlike ``numpy.{name}``, negative `row`/`col` raise instead of giving an empty result,
    and the output dtype is checked for overflow before any work, int32 and int64 alike, on
    every engine: an index past 2**63 - 1 (where NumPy raises ``OverflowError``), a `row` or
    `col` past 2**63 - 1, or more than 2**63 - 1 entries, raise ``ValueError``.

    Backend support: NumPy (whole rows at a time: a small mask, one ``repeat``, or fills and
    copies of slices, by size), CuPy (one CUDA kernel, no host synchronization, correct beyond
    2**31 entries), Dask (lazy, each chunk computed by the closed form in NumPy from its own
    range of entries, nothing gathered), and any other array-API namespace, such as
    array-api-strict or PyTorch (the closed form in array-API operations, which needs int64
    and float64 on the device).
"""

_PARAMS = """
    Parameters
    ----------
    row : int
        Number of rows of the matrix; a Python int or NumPy integer, non-negative.
    col : int, optional
        Number of columns; defaults to `row`.
    offset : int, optional
        Diagonal offset: 0 is the main diagonal, positive values are above it, negative values
        below it. Offsets past the matrix's edge select all entries or none.
    dtype : dtype, optional
        ``int32`` or ``int64`` of the namespace; default ``int64``.
    device : device, optional
        Device to put the result on (for CuPy a ``cupy.cuda.Device`` or an integer id); default
        the namespace's current device.
    xp : module, optional
        Array namespace of the result (``numpy``, ``cupy``, ``torch``, ``array_api_strict``,
        ``dask.array``, ...); default chosen by ``XPOPS_BACKEND``.
    chunks : int or tuple of int, optional
        With ``xp=dask.array`` only: the chunks of the result along its entries (default
        Dask's automatic chunking). Each chunk is computed from its own range of entries.

    Returns
    -------
    indices : array, shape (2, N)
        Row indices in ``indices[0]``, column indices in ``indices[1]``, in row-major order:
        the pairs and order of ``numpy.{name}(row, offset, col)``. C-contiguous.

    Raises
    ------
    TypeError
        If `row`, `col` or `offset` is not an integer (bools and floats included), or `dtype`
        is not int32 or int64.
    ValueError
        If `row` or `col` is negative; if an index of the triangle exceeds what `dtype` holds
        (2**31 - 1 for int32, 2**63 - 1 for int64, on every engine); or if `row` or `col`
        exceeds 2**63 - 1, or the triangle has more than 2**63 - 1 entries.
    RuntimeError
        If the CuPy backend is asked for and CuPy or a CUDA device is missing.
"""


def tril_indices(
    row: int,
    col: int | None = None,
    offset: int = 0,
    *,
    dtype: DType = None,
    device: Device = None,
    xp: ModuleType | None = None,
    chunks: Any = None,
) -> Array:
    return _triangle_indices(row, col, offset, dtype, device, xp, upper=False, chunks=chunks)


def triu_indices(
    row: int,
    col: int | None = None,
    offset: int = 0,
    *,
    dtype: DType = None,
    device: Device = None,
    xp: ModuleType | None = None,
    chunks: Any = None,
) -> Array:
    return _triangle_indices(row, col, offset, dtype, device, xp, upper=True, chunks=chunks)


tril_indices.__doc__ = (
    """Return the indices of the lower triangle of a ``row x col`` matrix.

    Entry ``(i, j)`` is in the lower triangle when ``j <= i + offset``.
"""
    + _PARAMS.format(name="tril_indices")
    + """
    See Also
    --------
    triu_indices : the upper triangle.
"""
    + _NOTES.format(name="tril_indices")
    + """
    Examples
    --------
    >>> import numpy as np
    >>> import xpops
    >>> xpops.tril_indices(3, xp=np)
    array([[0, 1, 1, 2, 2, 2],
           [0, 0, 1, 0, 1, 2]])
    >>> xpops.tril_indices(2, 4, offset=1, dtype=np.int32, xp=np)
    array([[0, 0, 1, 1, 1],
           [0, 1, 0, 1, 2]], dtype=int32)

    The indices select the triangle of a matrix:

    >>> a = np.arange(9).reshape(3, 3)
    >>> i, j = xpops.tril_indices(3, offset=-1, xp=np)
    >>> a[i, j]
    array([3, 6, 7])
"""
)

triu_indices.__doc__ = (
    """Return the indices of the upper triangle of a ``row x col`` matrix.

    Entry ``(i, j)`` is in the upper triangle when ``j >= i + offset``.
"""
    + _PARAMS.format(name="triu_indices")
    + """
    See Also
    --------
    tril_indices : the lower triangle.
"""
    + _NOTES.format(name="triu_indices")
    + """
    Examples
    --------
    >>> import numpy as np
    >>> import xpops
    >>> xpops.triu_indices(3, xp=np)
    array([[0, 0, 0, 1, 1, 2],
           [0, 1, 2, 1, 2, 2]])
    >>> xpops.triu_indices(3, 2, offset=-1, xp=np)
    array([[0, 0, 1, 1, 2],
           [0, 1, 0, 1, 1]])
"""
)
