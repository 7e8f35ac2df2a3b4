"""SciPy engine of sparse.divide: the union merge is SciPy's compiled CSR addition.

Both operands are brought to canonical CSR (COO and N-D COO through CSR). The merge of the two
sorted patterns is then done by SciPy's ``csr_plus_csr`` on values encoded so that the sum is
never zero (SciPy drops zero sums) and tells which side was stored:

* **values** (real dtypes, no stored zeros on either side, the usual case): ``x + i*y`` in the
  complex dtype of the result, so each stored position of the sum holds ``x_ij + i*y_ij`` with
  a missing side 0, and the quotient is ``real / imag``: one merge and one division.
* **positions** (complex values, or stored zeros that could sum to zero): ``(k+1) + i*(l+1)``
  in complex128 for the k-th stored entry of `x` and the l-th of `y` (0 when missing; exact up
  to 2**53 entries), decoded into two gathers from the values padded with a leading zero.

Measured on the 2-core AMD EPYC (Zen 4) VM, two 20000 x 20000 CSR float64 matrices of
density 1e-3 (400k entries each), medians: SciPy's own ``x + y`` 4.3 ms; the values path
about 5.5 ms; a merge written in NumPy (stable argsort of row-major keys) 39 ms, and
``searchsorted`` of the keys alone 13 ms.
"""

from typing import Any

import numpy as np
import scipy.sparse as sp

_INT32_MAX = np.iinfo(np.int32).max


def _quotient_dtype(dx: np.dtype, dy: np.dtype) -> np.dtype:
    """The dtype of ``x / y`` under NumPy's true-division rules."""
    return (np.ones(1, dtype=dx) / np.ones(1, dtype=dy)).dtype


def _complex_of(dtype: np.dtype) -> np.dtype:
    return np.result_type(dtype, np.complex64)


def _canonical_csr(a: Any) -> Any:
    """`a` (CSR or 2-D COO) as a canonical CSR array; never modifies `a`."""
    if a.format == "coo":
        return sp.csr_array(a.tocsr())  # coo -> csr sums duplicates and sorts, new arrays
    if a.has_canonical_format:
        return a
    c = sp.csr_array(a, copy=True)
    c.sum_duplicates()
    return c


def _as_2d_coo(a: Any) -> tuple[Any, tuple[int, ...]]:
    """An N-D COO as a 2-D COO over (leading dimensions flattened, last dimension)."""
    shape = tuple(a.shape)
    coords = a.coords if hasattr(a, "coords") else (a.row, a.col)
    if len(shape) == 2:
        return a, shape
    lead = shape[:-1]
    rows = (
        np.ravel_multi_index(coords[:-1], lead)
        if lead
        else np.zeros(len(coords[-1]), dtype=np.intp)
    )
    flat = sp.coo_array((a.data, (rows, coords[-1])), shape=(int(np.prod(lead)), shape[-1]))
    return flat, shape


def _merge(x: Any, y: Any, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(data, indices, indptr) of x / y on the union of two canonical CSR patterns."""
    xd = x.data.astype(dtype, copy=False)
    yd = y.data.astype(dtype, copy=False)
    shape = x.shape
    if dtype.kind == "f" and xd.all() and yd.all():
        ctype = _complex_of(dtype)
        xs = sp.csr_array((xd.astype(ctype), x.indices, x.indptr), shape=shape)
        yc = np.zeros(yd.size, dtype=ctype)
        yc.imag = yd  # not yd * 1j: inf * 1j is nan + inf j
        ys = sp.csr_array((yc, y.indices, y.indptr), shape=shape)
        u = xs + ys
        with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
            data = u.data.real / u.data.imag
        return data.astype(dtype, copy=False), u.indices, u.indptr
    xs = sp.csr_array(
        (np.arange(1, xd.size + 1, dtype=np.float64).astype(np.complex128), x.indices, x.indptr),
        shape=shape,
    )
    ys = sp.csr_array((np.arange(1, yd.size + 1) * 1j, y.indices, y.indptr), shape=shape)
    u = xs + ys
    xpad = np.zeros(xd.size + 1, dtype=dtype)
    xpad[1:] = xd
    ypad = np.zeros(yd.size + 1, dtype=dtype)
    ypad[1:] = yd
    data = np.take(xpad, u.data.real.astype(np.intp))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        np.divide(data, np.take(ypad, u.data.imag.astype(np.intp)), out=data)
    return data, u.indices, u.indptr


def _index_arrays(a: Any) -> tuple[np.ndarray, ...]:
    if a.format == "csr":
        return (a.indices, a.indptr)
    return tuple(a.coords) if hasattr(a, "coords") else (a.row, a.col)


def _index_dtype(operands: tuple[Any, ...], nnz: int, shape: tuple[int, ...]) -> np.dtype:
    """int64 if an operand indexes with int64 or the result needs it, else int32."""
    wide = any(arr.dtype == np.int64 for a in operands for arr in _index_arrays(a))
    big = max(nnz, *shape) > _INT32_MAX
    return np.dtype(np.int64 if wide or big else np.int32)


def _build(
    x: Any, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, shape: tuple, idx: Any
) -> Any:
    """The result in the format and container kind of `x`, canonical, index dtype `idx`."""
    indices = indices.astype(idx, copy=False)
    indptr = indptr.astype(idx, copy=False)
    matrix = isinstance(x, sp.spmatrix)
    if x.format == "csr":
        cls = sp.csr_matrix if matrix else sp.csr_array
        out = cls((data, indices, indptr), shape=shape)
        out.indices, out.indptr = indices, indptr  # SciPy narrows int64 whose values fit
        out.has_canonical_format = True
        return out
    rows2d = np.repeat(np.arange(len(indptr) - 1, dtype=idx), np.diff(indptr))
    if len(shape) == 2:
        coords: tuple[np.ndarray, ...] = (rows2d, indices)
    else:
        lead = tuple(np.unravel_index(rows2d, shape[:-1])) if shape[:-1] else ()
        coords = (*(c.astype(idx, copy=False) for c in lead), indices)
    cls = sp.coo_matrix if matrix else sp.coo_array
    out = cls((data, coords), shape=shape)
    if hasattr(out, "coords"):
        out.coords = coords
    else:  # SciPy without N-D COO
        out.row, out.col = coords
    out.has_canonical_format = True
    return out


def divide(x: Any, y: Any) -> Any:
    """x / y of two SciPy COO/CSR operands of one shape; arguments validated."""
    dtype = _quotient_dtype(x.dtype, y.dtype)
    shape = tuple(x.shape)
    if x.format == "coo":
        x2, _ = _as_2d_coo(x)
        y2, _ = _as_2d_coo(y if y.format == "coo" else y.tocoo())
    else:
        x2, y2 = x, (y if y.format == "csr" else y.tocsr())
    xc, yc = _canonical_csr(x2), _canonical_csr(y2)
    data, indices, indptr = _merge(xc, yc, dtype)
    idx = _index_dtype((x, y), data.size, shape)
    return _build(x, data, indices, indptr, shape, idx)


def divide_scalar(x: Any, y: Any) -> Any:
    """x / y for a SciPy COO/CSR `x` and a scalar `y`: the pattern of `x`, canonical."""
    shape = tuple(x.shape)
    x2, _ = _as_2d_coo(x) if x.format == "coo" else (x, shape)
    xc = _canonical_csr(x2)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        data = xc.data / y
    idx = _index_dtype((x,), data.size, shape)
    return _build(x, data, xc.indices.copy(), xc.indptr.copy(), shape, idx)
