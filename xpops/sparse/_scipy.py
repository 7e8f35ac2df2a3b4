"""SciPy engine of sparse.divide: the union merge is SciPy's compiled CSR addition.

Both operands are brought to canonical CSR (COO and N-D COO through CSR). The merge of the two
sorted patterns is then done by SciPy's CSR addition (``_lib._scipy_sparse.csr_plus_csr``:
the compiled routine, writing straight into the result's buffers) on values encoded so that
the sum is never zero (SciPy drops zero sums) and tells which side was stored:

* **values** (real dtypes, no stored zeros on either side, the usual case): ``x + i*y`` in the
  complex dtype of the result, so each stored position of the sum holds ``x_ij + i*y_ij`` with
  a missing side 0, and the quotient is ``real / imag``: one merge and one division.
* **positions** (complex values, or stored zeros that could sum to zero): ``(k+1) + i*(l+1)``
  in complex128 for the k-th stored entry of `x` and the l-th of `y` (0 when missing; exact up
  to 2**53 entries), decoded into two gathers from the values padded with a leading zero.

The merge runs over blocks of rows of about BLOCK_ENTRIES entries, into buffers allocated once
a call and reused by every block: whole-matrix intermediates (about 35 MB of complex128 for
two operands of 400k entries) would be fresh memory on every call, and first-touching it
doubles the float64 time.

With at least HELPER_MIN_ENTRIES entries and a free helper thread (``_threads.helper_thread``),
the helper merges the second half of the blocks from where they would start if no position
were stored in both, and they are moved down after the first half ends (one copy of half the
result).

For two 20000 x 20000 CSR matrices of density 1e-3 (400k entries each) on a 2-core AMD EPYC
(Zen 4), this takes 1.5x (float64) and 1.4x (float32) the time of SciPy's own ``x + y`` (the
same merge) on one thread, 1.1x and 0.95x with the helper thread. A merge written in NumPy (a
stable argsort of row-major keys) is about 6x slower.
"""

from typing import Any

import numpy as np
import scipy.sparse as sp

from .._lib._dtypes import INT32_MAX
from .._lib._scipy_sparse import csr_plus_csr
from .._lib._threads import helper_thread
from ._common import quotient_dtype

__all__ = ["divide", "divide_scalar"]

# Rows are merged in blocks of about this many entries of x and y together, so that the
# intermediates are small enough for the allocator to reuse (see above). Best measured for the
# case above: blocks of 16k entries cost Python overhead (1.57x SciPy's x + y), of 256k
# first-touch fresh memory (2.1x).
BLOCK_ENTRIES = 1 << 16
# From this many entries of x and y together, a second thread merges half of the row blocks
# (SciPy's CSR addition and NumPy's arithmetic release the GIL).
HELPER_MIN_ENTRIES = 1 << 18


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


def _as_2d(a: Any) -> Any:
    """A 2-D CSR or COO as it is; a 1-D CSR as a 1 x n CSR on the same arrays; an N-D COO as
    a 2-D COO over (leading dimensions flattened, last dimension)."""
    shape = tuple(a.shape)
    if len(shape) == 2:
        return a
    if a.format == "csr":  # 1-D (SciPy's csr_array): its indptr is that of one row
        return sp.csr_array((a.data, a.indices, a.indptr), shape=(1, *shape))
    coords = a.coords
    lead = shape[:-1]
    rows = (
        np.ravel_multi_index(coords[:-1], lead)
        if lead
        else np.zeros(len(coords[-1]), dtype=np.intp)
    )
    return sp.coo_array((a.data, (rows, coords[-1])), shape=(int(np.prod(lead)), shape[-1]))


def _row_blocks(x: Any, y: Any) -> np.ndarray:
    """Row boundaries of blocks of about BLOCK_ENTRIES entries of x and y together."""
    nrows = x.shape[0]
    before = x.indptr.astype(np.int64) + y.indptr.astype(np.int64)  # entries before each row
    starts = np.searchsorted(before, np.arange(0, before[-1], BLOCK_ENTRIES), side="right") - 1
    return np.unique(np.concatenate([starts, [0, nrows]]).clip(0, nrows))


def _plus(x: Any, xv: np.ndarray, y: Any, yv: np.ndarray, r0: int, r1: int, out: Any) -> int:
    """Rows r0:r1 of (x with values xv) + (y with values yv) into `out` = (indptr, indices,
    data) buffers; returns the number of entries written."""
    xa, ya = int(x.indptr[r0]), int(y.indptr[r0])
    xp = x.indptr[r0 : r1 + 1] - x.indptr.dtype.type(xa)
    yp = y.indptr[r0 : r1 + 1] - y.indptr.dtype.type(ya)
    xi, yi = x.indices[xa : xa + xv.size], y.indices[ya : ya + yv.size]
    cp, cj, cx = out
    return csr_plus_csr(r1 - r0, x.shape[1], xp, xi, xv, yp, yi, yv, cp, cj, cx)


def _merge(x: Any, y: Any, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(data, indices, indptr) of x / y on the union of two canonical CSR patterns."""
    xd = x.data.astype(dtype, copy=False)
    yd = y.data.astype(dtype, copy=False)
    values = dtype.kind == "f" and bool(xd.all() and yd.all())
    ctype = _complex_of(dtype) if values else np.dtype(np.complex128)
    if values:
        xpad = ypad = np.empty(0, dtype=dtype)  # not read: the values encoding needs no gathers
    else:  # entry k of x is 1 + k, entry l of y is i (1 + l); 0: not stored
        xpad = np.zeros(xd.size + 1, dtype=dtype)
        xpad[1:] = xd
        ypad = np.zeros(yd.size + 1, dtype=dtype)
        ypad[1:] = yd
    index = np.dtype(np.int64 if np.int64 in (x.indices.dtype, y.indices.dtype) else np.int32)
    if x.indices.dtype != index or x.indptr.dtype != index:
        x = sp.csr_array((x.data, x.indices.astype(index), x.indptr.astype(index)), shape=x.shape)
    if y.indices.dtype != index or y.indptr.dtype != index:
        y = sp.csr_array((y.data, y.indices.astype(index), y.indptr.astype(index)), shape=y.shape)
    maxnnz = xd.size + yd.size
    data = np.empty(maxnnz, dtype=dtype)
    indices = np.empty(maxnnz, dtype=index)
    indptr = np.zeros(x.shape[0] + 1, dtype=np.int64)
    bounds = _row_blocks(x, y).tolist()
    before = [int(x.indptr[r]) + int(y.indptr[r]) for r in bounds]  # entries before block b

    def run(b0: int, b1: int) -> int:
        """Merge blocks b0:b1 into the result from offset before[b0] (where they would start
        if no position were stored in both) on; returns the offset after them."""
        rows = max(bounds[b + 1] - bounds[b] for b in range(b0, b1))
        span = max(before[b + 1] - before[b] for b in range(b0, b1))
        # per-block buffers, allocated once and reused: encoded values and the block's sum
        xv_buf = np.empty(span, dtype=ctype)
        yv_buf = np.empty(span, dtype=ctype)
        cp = np.empty(rows + 1, dtype=index)
        cx = np.empty(span, dtype=ctype)
        nnz = before[b0]
        for b in range(b0, b1):
            r0, r1 = bounds[b], bounds[b + 1]
            xa, xb = int(x.indptr[r0]), int(x.indptr[r1])
            ya, yb = int(y.indptr[r0]), int(y.indptr[r1])
            xv, yv = xv_buf[: xb - xa], yv_buf[: yb - ya]
            if values:
                xv.real = xd[xa:xb]
                xv.imag = 0
                yv.real = 0
                yv.imag = yd[ya:yb]  # not yd * 1j: inf * 1j is nan + inf j
            else:
                xv.real = np.arange(xa + 1, xb + 1)
                xv.imag = 0
                yv.real = 0
                yv.imag = np.arange(ya + 1, yb + 1)
            m = _plus(x, xv, y, yv, r0, r1, (cp, indices[nnz:], cx))
            out = data[nnz : nnz + m]
            with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
                if values:
                    np.divide(cx.real[:m], cx.imag[:m], out=out)
                else:
                    np.take(xpad, cx.real[:m].astype(np.intp), out=out)
                    np.divide(out, np.take(ypad, cx.imag[:m].astype(np.intp)), out=out)
            indptr[r0 + 1 : r1 + 1] = cp[1 : r1 - r0 + 1] + nnz
            nnz += m
        return nnz

    blocks = len(bounds) - 1
    helper = helper_thread() if blocks >= 2 and maxnnz >= HELPER_MIN_ENTRIES else None
    half = blocks // 2
    # the helper merges the second half of the blocks while this thread does the first; then
    # the second half moves down to where the first ended
    job = helper.try_submit(run, half, blocks) if helper is not None else None
    if job is None:
        nnz = run(0, blocks) if blocks else 0
    else:
        try:
            nnz = run(0, half)
        finally:
            end = job.result()
        gap = before[half] - nnz
        if gap:
            indices[nnz : end - gap] = indices[before[half] : end]
            data[nnz : end - gap] = data[before[half] : end]
            indptr[bounds[half] + 1 :] -= gap
        nnz = end - gap
    if nnz < maxnnz // 2:  # do not keep more than twice the memory the result needs
        return data[:nnz].copy(), indices[:nnz].copy(), indptr
    return data[:nnz], indices[:nnz], indptr


def _index_arrays(a: Any) -> tuple[np.ndarray, ...]:
    if a.format == "csr":
        return (a.indices, a.indptr)
    return tuple(a.coords) if hasattr(a, "coords") else (a.row, a.col)


def _index_dtype(operands: tuple[Any, ...], nnz: int, shape: tuple[int, ...]) -> np.dtype:
    """int64 if an operand indexes with int64 or the result needs it, else int32."""
    wide = any(arr.dtype == np.int64 for a in operands for arr in _index_arrays(a))
    big = max(nnz, *shape) > INT32_MAX
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
    """x / y of two SciPy COO/CSR operands of one shape (1-D, 2-D or, COO, N-D); arguments
    validated."""
    dtype = quotient_dtype(x.dtype, y.dtype)
    shape = tuple(x.shape)
    # both go to canonical CSR whatever their format (an N-D operand is a COO, flattened)
    xc, yc = _canonical_csr(_as_2d(x)), _canonical_csr(_as_2d(y))
    data, indices, indptr = _merge(xc, yc, dtype)
    idx = _index_dtype((x, y), data.size, shape)
    return _build(x, data, indices, indptr, shape, idx)


def divide_scalar(x: Any, y: Any) -> Any:
    """x / y for a SciPy COO/CSR `x` and a scalar `y`: the pattern of `x`, canonical."""
    shape = tuple(x.shape)
    xc = _canonical_csr(_as_2d(x))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        data = xc.data / y
    idx = _index_dtype((x,), data.size, shape)
    indices, indptr = xc.indices, xc.indptr
    if x.format == "csr" and np.may_share_memory(indices, x.indices):
        # a canonical CSR input (or a view of a 1-D one): the result must not share its arrays
        indices, indptr = indices.copy(), indptr.copy()
    return _build(x, data, indices, indptr, shape, idx)
