"""SciPy engine of sparse.divide: SciPy operands of every format, merged by `_host`.

The result's layout follows `x`. A CSR, 1-D CSR or 2-D COO `x` is divided as CSR rows; a
CSC `x` as the CSR rows of its transpose (a column-wise merge, no conversion of a CSC operand),
and the result is CSC; an N-D or 1-D COO `x` as the row-major keys of its positions, folded
into two dimensions (`_host.Frame`). BSR, DOK, LIL and DIA operands are converted by SciPy's
``tocsr()`` (``tocsc()`` next to a CSC `x`), which keeps BSR's stored zeros and drops DIA's
(SciPy's conversion does), and an `x` of those formats gives a CSR result. A `y` of another
format is converted to x's layout the same way.

When both operands need a conversion (a COO operand, CSR rows out of order or with
duplicates, a format other than x's layout), y is converted on the helper thread while this
one converts x: SciPy's conversions (``coo_tocsr``, the sort of each row's indices) release
the GIL, and they cost several times the merge. The merge is SciPy's own CSR addition on
encoded values (`_host`): on one thread it costs more than SciPy's ``x + y`` (the same merge
on plain values, without the encoding and the division), and less with the helper thread of
a second free core.
"""

from typing import Any

import numpy as np
import scipy.sparse as sp

from .._lib._threads import helper_thread
from ._common import check_positions, quotient_dtype
from ._host import (
    HELPER_MIN_ENTRIES,
    Csr,
    Frame,
    canonical_keys,
    index_dtype,
    merge,
    ravel,
    rows_of,
)

__all__ = ["divide", "divide_dense", "divide_scalar"]

ROWS, COLUMNS, KEYS = "rows", "columns", "keys"


def _layout(x: Any) -> str:
    """How `x` and its divisor are merged: CSR `ROWS`, CSC `COLUMNS` (the CSR rows of the
    transpose) or the `KEYS` of an N-D or 1-D COO `x`."""
    if x.format == "csc":
        return COLUMNS
    if x.format == "coo" and len(x.shape) != 2:
        return KEYS
    return ROWS


def _coords(a: Any) -> tuple[np.ndarray, ...]:
    """The coordinates of a COO or 1-D CSR operand's entries, in stored order."""
    if a.format == "csr":  # 1-D
        return (a.indices,)
    return tuple(a.coords) if hasattr(a, "coords") else (a.row, a.col)


def _keys(a: Any, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(keys, data) of operand `a`: int64 row-major keys, sorted, duplicates summed."""
    if a.format not in ("coo", "csr"):
        a = a.tocoo()
    return canonical_keys(ravel(_coords(a), shape), a.data)


def _canonical(a: Any, csc: bool) -> Any:
    """`a` as a canonical CSR (or CSC, `csc`) of SciPy, never modifying `a`."""
    fmt = "csc" if csc else "csr"
    if a.format == fmt:
        if a.has_canonical_format:
            return a
        c = a.copy()
    else:
        c = a.tocsc() if csc else a.tocsr()  # a new object (SciPy sums COO's duplicates)
        if c.has_canonical_format:
            return c
    c.sum_duplicates()
    return c


def _operand(a: Any, layout: str, shape: tuple[int, ...], frame: Frame | None) -> Csr:
    """Operand `a` as a canonical `Csr` of `layout` (for `KEYS`: in `frame`)."""
    if frame is not None:
        return frame.csr(*_keys(a, shape))
    if len(shape) == 1:  # a 1-D CSR array: the arrays of one row
        c = _canonical(a, csc=False)
        return Csr(c.indptr, c.indices, c.data, shape[0])
    c = _canonical(a, layout == COLUMNS)
    return Csr(c.indptr, c.indices, c.data, shape[0] if layout == COLUMNS else shape[1])


def _converted(a: Any, layout: str) -> bool:
    """Whether bringing `a` to a canonical `Csr` of `layout` takes a conversion (a sort, a sum
    of duplicates or a change of format), not just its own arrays."""
    if layout == KEYS:
        return True
    fmt = "csc" if layout == COLUMNS else "csr"
    return not (a.format == fmt and a.has_canonical_format)


def _operands(
    x: Any, y: Any, layout: str, shape: tuple[int, ...], frame: Frame | None
) -> tuple[Csr, Csr]:
    """Both operands as canonical `Csr` arrays of `layout` (one for `x` divided by itself);
    when both take a conversion, y's on the helper thread while this one converts x (SciPy's
    conversions and NumPy's sorts release the GIL)."""
    if y is x:
        xc = _operand(x, layout, shape, frame)
        return xc, xc
    helper = None
    if int(x.nnz) + int(y.nnz) >= HELPER_MIN_ENTRIES and _converted(x, layout):
        helper = helper_thread() if _converted(y, layout) else None
    job = helper.try_submit(_operand, y, layout, shape, frame) if helper is not None else None
    if job is None:
        return _operand(x, layout, shape, frame), _operand(y, layout, shape, frame)
    try:
        xc = _operand(x, layout, shape, frame)
    finally:
        yc = job.result()
    return xc, yc


def _index_arrays(a: Any) -> tuple[np.ndarray, ...]:
    """The index arrays a SciPy operand stores (none for DOK and LIL)."""
    if a.format in ("csr", "csc", "bsr"):
        return (a.indices, a.indptr)
    if a.format == "coo":
        return tuple(a.coords) if hasattr(a, "coords") else (a.row, a.col)
    return ()


def _index_dtype(operands: tuple[Any, ...], nnz: int, shape: tuple[int, ...]) -> np.dtype:
    """int64 if an operand indexes with int64 or the result needs it, else int32."""
    wide = any(arr.dtype == np.int64 for a in operands for arr in _index_arrays(a))
    return np.dtype(np.int64) if wide else index_dtype(nnz, *shape)


def _build(
    x: Any, layout: str, frame: Frame | None, out: Csr, shape: tuple[int, ...], idx: np.dtype
) -> Any:
    """The result of merged `out` in x's format (CSR for BSR, DOK, LIL and DIA) and container
    kind, canonical, with index dtype `idx`."""
    matrix = isinstance(x, sp.spmatrix)
    data = out.data
    if frame is not None:
        coords = tuple(c.astype(idx) for c in frame.coords(out))
        return _coo(matrix, data, coords, shape)
    indices = out.indices.astype(idx, copy=False)
    indptr = out.indptr.astype(idx, copy=False)
    if layout == ROWS and x.format == "coo":
        return _coo(matrix, data, (rows_of(indptr, data.shape[0]).astype(idx), indices), shape)
    if layout == COLUMNS:
        cls = sp.csc_matrix if matrix else sp.csc_array
    else:
        cls = sp.csr_matrix if matrix else sp.csr_array
    result = cls((data, indices, indptr), shape=shape)
    result.indices, result.indptr = indices, indptr  # SciPy narrows int64 whose values fit
    result.has_canonical_format = True
    return result


def _coo(matrix: bool, data: np.ndarray, coords: tuple[np.ndarray, ...], shape: tuple) -> Any:
    cls = sp.coo_matrix if matrix else sp.coo_array
    out = cls((data, coords), shape=shape)
    if hasattr(out, "coords"):
        out.coords = coords  # SciPy narrows int64 whose values fit
    else:  # SciPy without N-D COO
        out.row, out.col = coords
    out.has_canonical_format = True
    return out


def divide(x: Any, y: Any) -> Any:
    """x / y of two SciPy operands of one shape; arguments validated."""
    dtype = quotient_dtype(x.dtype, y.dtype)
    shape = tuple(x.shape)
    layout = _layout(x)
    frame = _frame(layout, shape, int(x.nnz) + int(y.nnz))
    xc, yc = _operands(x, y, layout, shape, frame)
    out = merge(xc, yc, dtype)
    return _build(x, layout, frame, out, shape, _index_dtype((x, y), out.data.shape[0], shape))


def _frame(layout: str, shape: tuple[int, ...], nnz: int) -> Frame | None:
    """The frame of the `KEYS` layout (None for the others)."""
    if layout != KEYS:
        return None
    check_positions(shape)
    return Frame(shape, nnz)


def _own(x: Any, shape: tuple[int, ...]) -> tuple[str, Frame | None, Csr]:
    """(layout, frame, canonical Csr) of `x` alone, for a scalar or dense divisor."""
    layout = _layout(x)
    frame = _frame(layout, shape, int(x.nnz))
    return layout, frame, _operand(x, layout, shape, frame)


def _result(
    x: Any, layout: str, frame: Frame | None, xc: Csr, data: np.ndarray, shape: tuple[int, ...]
) -> Any:
    """The result on x's canonical pattern `xc` holding `data`, sharing no memory with `x`."""
    indices, indptr = xc.indices, xc.indptr
    if any(np.may_share_memory(indices, a) for a in _index_arrays(x)):
        indices, indptr = indices.copy(), indptr.copy()
    out = Csr(indptr, indices, data, xc.ncols)
    return _build(x, layout, frame, out, shape, _index_dtype((x,), data.size, shape))


def divide_scalar(x: Any, y: Any) -> Any:
    """x / y for a SciPy operand `x` and a scalar `y`: the pattern of `x`, canonical."""
    shape = tuple(x.shape)
    layout, frame, xc = _own(x, shape)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        data = xc.data / y
    return _result(x, layout, frame, xc, data, shape)


def divide_dense(x: Any, y: np.ndarray) -> Any:
    """x / y for a SciPy operand `x` and a dense NumPy array `y` of x's shape: the pattern of
    `x`, each stored value divided by y's value at its position."""
    shape = tuple(x.shape)
    dtype = quotient_dtype(x.dtype, y.dtype)
    layout, frame, xc = _own(x, shape)
    y = np.asarray(y)  # a NumPy matrix indexes as an ndarray
    if frame is not None:
        at = y[tuple(frame.coords(xc))]
    else:
        major = rows_of(xc.indptr, xc.indices.size)
        if len(shape) == 1:
            at = y[xc.indices]
        elif layout == COLUMNS:
            at = y[xc.indices, major]
        else:
            at = y[major, xc.indices]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        data = np.divide(xc.data, at, dtype=dtype)
    return _result(x, layout, frame, xc, data, shape)
