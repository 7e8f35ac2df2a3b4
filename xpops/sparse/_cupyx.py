"""CuPy engine of sparse.divide: cupyx operands, divided by the kernels of `_cupyx_kernels`
(the families `_cupyx_match` and `_cupyx_fill`), and the arrays of PyTorch's CUDA tensors
(`divide_csr_into` and `divide_coo_into`, on their addresses, or `divide_csr` and `divide_coo`
with the kernels of `_cupyx_coo`, on CuPy views; called by `_torch` on PyTorch's current
stream).

The result's layout follows `x`: a CSC `x` is divided as the CSR rows of its transpose (a
column-wise merge on the CSC operand's own arrays) and gives a CSC result; a CSR or COO `x`
as CSR rows. A DIA operand is converted by cupyx's ``tocsr()`` (``tocsc()`` next to a CSC
`x`) and a DIA `x` gives a CSR result; a `y` of another format is converted to x's layout.

Both operands are brought to canonical CSR of the result's dtype. Operands that are not
canonical (COO, unsorted or repeated positions) are sorted and summed first by the kernel
``sum_runs`` (cupyx's own summation turns a lone -0.0 into +0.0). The union is then merged and
divided by six kernels (see `_cupyx_kernels`) with one host synchronisation, to size the
result: 0.35 ms a call on an H100 for two 10^5 x 10^5 float32 operands of 10^7 uniformly
placed entries (the first kernel starts about 45 us after the call), where cuSPARSE's
``csrgeam`` (cupyx's ``x + y``) takes 4.7 ms. Small operands (`_cupyx_small`: at most 2047
rows and 2^16 entries in all) are merged by two kernels instead, whose call is bound by the
host's launches and that synchronisation.
"""

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import cupy
import cupyx.scipy.sparse as csp
import numpy as np

from .._lib._cuda import grid_1d, multiprocessors, read_int, read_int_at, scratch
from .._lib._dtypes import INT32_MAX, dtype_name
from ._common import quotient_dtype
from ._cupyx_coo import coo_kernels
from ._cupyx_fill import fill_kernels
from ._cupyx_kernels import BLOCKS_PER_SM, CHUNK, ITEMS, RUN, THREADS
from ._cupyx_match import match_kernels
from ._cupyx_small import SMALL_BLOCK, SMALL_ENTRIES, SMALL_ITEMS, SMALL_ROWS, small_kernels
from ._host import index_dtype
from ._views import compressed

__all__ = [
    "CsrPointers",
    "coo_indices",
    "csr_of_coo",
    "divide",
    "divide_coo",
    "divide_coo_into",
    "divide_csr",
    "divide_csr_into",
    "divide_dense",
    "divide_scalar",
    "queue_union",
]

_INT32 = np.dtype(np.int32)
SLOTS_CAP = 4 * 32 * ITEMS  # fill: tiles of more slots (long runs inside) go lane by lane


def _blocks(n: int) -> int:
    """Blocks of THREADS for `n` items, at most BLOCKS_PER_SM a multiprocessor (the kernels
    stride over the rest)."""
    return grid_1d(n, THREADS, BLOCKS_PER_SM * multiprocessors())


def _grid(n: int) -> tuple[int]:
    """`_blocks` as a RawKernel's grid."""
    return (_blocks(n),)


def _canonical_csr(a: Any, dtype: np.dtype) -> Any:
    """`a` as canonical CSR of `dtype`, never modifying `a`.

    ``has_canonical_format`` of a matrix whose state is unknown runs cupyx's check, a host
    synchronisation whose answer cupyx keeps on the matrix. Non-canonical operands are sorted
    and summed here, not by cupyx, whose summation starts from +0 and so turns a lone stored
    -0.0 into +0.0 (SciPy keeps it, and the sign shows in 0 / y).
    """
    if not a.has_canonical_format:
        return _summed_csr(a, dtype)
    if a.format == "coo":
        a = a.tocsr()  # canonical: nothing to sum
    return a.astype(dtype) if a.dtype != dtype else a


def _summed_csr(a: Any, dtype: np.dtype) -> Any:
    """Canonical CSR of a COO or CSR matrix with unsorted or repeated positions.

    Stable sort of the row-major keys, then one thread a distinct position summing its
    entries in their stored order, starting from the first (so one entry keeps its exact
    value). Host synchronisations: sizing the distinct positions.
    """
    nrows, ncols = a.shape
    if a.format == "coo":
        rows, cols = a.row, a.col
    else:
        cols = a.indices
        rows = cupy.searchsorted(a.indptr[1:], cupy.arange(cols.size), side="right")
    keys = rows.astype(np.int64) * ncols + cols.astype(np.int64)
    order = cupy.argsort(keys, kind="stable")
    keys = keys[order]
    n = keys.size
    first = cupy.ones(n, dtype=bool)
    if n:
        first[1:] = keys[1:] != keys[:-1]
    starts = cupy.flatnonzero(first)
    data = cupy.empty(starts.size, dtype=dtype)
    if starts.size:
        kernel = fill_kernels(dtype, _INT32)["sum_runs"]
        vals = a.data.astype(dtype, copy=False)
        args: tuple[Any, ...] = (vals, order, starts, np.int64(starts.size), np.int64(n), data)
        kernel(_grid(starts.size), (THREADS,), args)
    unique = keys[starts]
    index = index_dtype(nrows, ncols, n)
    indptr = cupy.searchsorted(unique // ncols if ncols else unique, cupy.arange(nrows + 1))
    indices = (unique % ncols if ncols else unique).astype(index)
    return _make_csr(data, indices, indptr.astype(index), (nrows, ncols))


def _make_csr(data, indices, indptr, shape) -> Any:
    """A canonical csr_matrix from its arrays (indices and indptr of one dtype), without
    cupyx's content checks (host syncs)."""
    return compressed(csp.csr_matrix, data, indices, indptr, shape)


def _values(a, a_value, b, b_step, b_value, n, dtype) -> cupy.ndarray:
    """``a / b`` elementwise over `n` values; None for `a` or `b` stands for the value."""
    out = cupy.empty(n, dtype=dtype)
    if n:
        args: tuple[Any, ...] = (
            a if a is not None else np.uint64(0),
            dtype.type(a_value),
            b if b is not None else np.uint64(0),
            np.int64(b_step),
            dtype.type(b_value),
            np.int64(n),
            out,
        )
        fill_kernels(dtype, _INT32)["values"](_grid(n), (THREADS,), args)
    return out


def _union(xc: Any, yc: Any, dtype: np.dtype) -> tuple[Any, Any, Any]:
    """(data, indices, indptr) of xc / yc, two canonical CSR matrices (or `_Arrays`) of one
    shape and of `dtype`, on the union of their patterns; the index dtype is the wider of
    theirs."""
    xi, yi = xc.indices.dtype, yc.indices.dtype
    index = xi if xi == yi else np.promote_types(xi, yi)
    xptr, xidx, yptr, yidx = (
        a if a.dtype == index else a.astype(index)
        for a in (xc.indptr, xc.indices, yc.indptr, yc.indices)
    )
    rows = xc.shape[0]
    nx, ny = int(xidx.size), int(yidx.size)
    if nx == 0:  # the pattern of y, 0 / y
        return _values(None, 0, yc.data, 1, 0, ny, dtype), yidx.copy(), yptr.copy()
    buffers: list[Any] = []

    def allocate() -> tuple[int, int, int]:
        indptr = cupy.empty(rows + 1, dtype=index)
        indices = cupy.empty(nx + ny, dtype=index)
        data = cupy.empty(nx + ny, dtype=dtype)
        buffers.extend((data, indices, indptr))
        return indptr.data.ptr, indices.data.ptr, data.data.ptr

    x = CsrPointers(xptr.data.ptr, xidx.data.ptr, xc.data.data.ptr)
    y = CsrPointers(yptr.data.ptr, yidx.data.ptr, yc.data.data.ptr)
    queue_union(x, y, rows, nx, ny, index, dtype, allocate)
    return _cut(*buffers)


def small(rows: int, nx: int, ny: int) -> bool:
    """Whether `queue_union` merges operands of `rows` rows and `nx` + `ny` entries by the
    two small-operand kernels (`_cupyx_small`) rather than the tiled pipeline."""
    return rows <= SMALL_ROWS and nx + ny <= SMALL_ENTRIES


class CsrPointers(NamedTuple):
    """The device addresses of an operand's canonical CSR arrays (row pointers, column indices
    and values), as `queue_union` reads them."""

    indptr: int
    indices: int
    data: int


def queue_union(
    x: CsrPointers,
    y: CsrPointers,
    rows: int,
    nx: int,
    ny: int,
    index: np.dtype,
    dtype: np.dtype,
    allocate: Callable[[], tuple[int, int, int]],
    out_index: np.dtype | None = None,
    coo: bool = False,
) -> None:
    """Queue on the current stream the kernels that write x / y on the union of the patterns
    of `x` and `y` (`nx` >= 1 and `ny` entries, `rows` rows, indices of `index`, values of
    `dtype`) into the buffers that ``allocate()`` returns the addresses of: row pointers
    (rows + 1, of `index`), indices (of `out_index`, default `index`) and values (nx + ny
    each), to be cut to the union's size, the last row pointer. `allocate` is called once the
    first kernels are queued, so that the GPU works while the host allocates the result: on
    `_union`'s arrays, or a PyTorch caller's tensors.

    With `coo` (tiled operands only, see `small`) the indices buffer holds 2 * (nx + ny)
    int64 and the columns are written from the union's size on (found by the kernels), so
    that its first 2 * size elements are a COO result's (2, size) coordinates once
    `coo_indices` has written the rows before them.

    The result is written into buffers of the largest possible size, nx + ny, so that every
    kernel is queued before the one host synchronisation: sized exactly after it, the GPU
    would idle while the host allocates them and launches the last kernels."""
    out_index = index if out_index is None else out_index
    if out_index == index and not coo and small(rows, nx, ny):  # two launches instead of six
        merge = small_kernels(dtype, index)
        blocks = -(-(nx + ny) // (SMALL_ITEMS * SMALL_BLOCK))
        threads = blocks * SMALL_BLOCK
        # each thread's count and start (int64), held until both kernels are queued
        temporary = cupy.cuda.alloc(2 * 8 * threads)
        counts, starts = temporary.ptr, temporary.ptr + 8 * threads
        args: tuple[int, ...] = (*x[:2], *y[:2], rows, nx, ny, counts, starts)
        merge["count"](blocks, SMALL_BLOCK, args)
        args = (*x, *y, rows, nx, ny, counts, starts)
        merge["write"](blocks, SMALL_BLOCK, (*args, *allocate()))
        del temporary
        return
    match, fill = match_kernels(index), fill_kernels(dtype, index, out_index)
    tiles = -(-nx // (32 * ITEMS))
    chunks = -(-tiles // (4 * THREADS))  # blocks of `scan`
    # chunks `fill` queues at most: one a run longer than RUN, plus one a CHUNK of y's entries
    queued_most = ny // (RUN + 1) + ny // CHUNK + 1
    i = index.itemsize
    # the temporaries in one allocation: the rows of each tile's first and last entries,
    # scan's look-back flags, two counters (scan's block tickets, the chunks queued by
    # `fill`), each entry's lower bound in y, the match bits, the tiles' match counts and
    # their prefixes, the queue
    sizes = (tiles * i, tiles * i, chunks * 8, 16, nx * i, tiles * ITEMS * 4, tiles * i)
    owner, buffers = scratch(*sizes, (tiles + 1) * i, queued_most * 3 * 8)
    first, last, status, tickets, lb, bits, counts, prefix, queue = buffers
    queued = tickets + 8
    # tile_rows also clears the flags and both counters
    args = (x.indptr, rows, nx, first, last, status, tickets)
    match["tile_rows"](-(-max(rows, chunks) // THREADS), THREADS, args)
    args = (*x[:2], *y[:2], first, last, nx, lb, bits, counts)
    match["match"](_blocks(32 * tiles), THREADS, args)
    match["scan"](chunks, THREADS, (counts, tiles, prefix, tickets, status))
    p_indptr, p_indices, p_data = allocate()
    args = (x.indptr, y.indptr, bits, prefix, rows, nx, p_indptr)
    match["indptr"](-(-(rows + 1) // THREADS), THREADS, args)
    args = (x.indices, x.data, y.indices, y.data, lb, bits, prefix, nx, ny, SLOTS_CAP)
    args += (p_indices, p_data, queued, queue, int(coo))
    fill["fill"](_blocks(32 * tiles), THREADS, args)
    args = (y.indices, y.data, queued, queue, p_indices, p_data, prefix, nx, ny, int(coo))
    fill["runs"](_blocks(32 * queued_most), THREADS, args)  # a warp a chunk
    del owner  # every kernel using the temporaries is queued (the pool reuses in stream order)


def _cut(data: Any, indices: Any, indptr: Any) -> tuple[Any, Any, Any]:
    """(data, indices, indptr) of the union, its values and indices cut from the buffers of
    nx + ny entries they were written into: the one host synchronisation."""
    nnz = read_int(indptr, -1)  # the size of the union
    if nnz < data.size // 2:  # do not keep more than twice the memory the result needs
        return data[:nnz].copy(), indices[:nnz].copy(), indptr
    return data[:nnz], indices[:nnz], indptr


def _transposed(a: Any) -> Any:
    """The CSR matrix of the transpose of CSC matrix `a`, on a's arrays (cupyx's cached
    canonical-format checks carried over)."""
    shape = (a.shape[1], a.shape[0])
    return compressed(csp.csr_matrix, a.data, a.indices, a.indptr, shape, flags_of=a)


def _coo_of(a: Any, transpose: bool) -> Any:
    """A COO matrix of `a` (COO, CSR or CSC), or of its transpose, on a's values in stored
    order (sorted and summed later by `_summed_csr`), built without cupyx's checks."""
    if a.format == "coo":
        rows, cols = a.row, a.col
    else:
        major = cupy.searchsorted(a.indptr[1:], cupy.arange(a.indices.size), side="right")
        major = major.astype(a.indices.dtype)
        rows, cols = (major, a.indices) if a.format == "csr" else (a.indices, major)
    if transpose:
        rows, cols = cols, rows
    shape = a.shape[::-1] if transpose else a.shape
    out = csp.coo_matrix(shape, dtype=a.dtype)
    out.data, out.row, out.col = a.data, rows, cols
    out.has_canonical_format = False
    return out


def _in_layout(a: Any, columns: bool, dtype: np.dtype) -> Any:
    """Operand `a` as canonical CSR of `dtype`: of `a` itself (rows), or of its transpose
    (`columns`, next to a CSC `x`); never modifying `a`.

    cuSPARSE's transposition (cupyx's ``tocsc()`` of a CSR, ``tocsr()`` of a CSC) converts a
    canonical operand; cupyx's conversions of a COO or of a compressed operand that is not
    canonical sum duplicates from +0 (turning a lone -0.0 into +0.0), so those go through a
    COO of the right orientation and `_summed_csr` instead."""
    if a.format == "dia":
        a = a.tocsc() if columns else a.tocsr()  # DIA has no repeated positions
    if columns:
        if a.format == "csc":
            # cupyx's check asked of `a` itself, whose answer it keeps there (the backward
            # reads it), then carried over to the transposed view
            a.has_canonical_format  # noqa: B018
            return _canonical_csr(_transposed(a), dtype)
        if a.format == "csr" and a.has_canonical_format:
            return _canonical_csr(_transposed(a.tocsc()), dtype)
        return _summed_csr(_coo_of(a, True), dtype)
    if a.format in ("csr", "coo"):
        return _canonical_csr(a, dtype)
    if a.has_canonical_format:  # CSC
        return _canonical_csr(a.tocsr(), dtype)
    return _summed_csr(_coo_of(a, False), dtype)


def _finish(x: Any, columns: bool, data: Any, indices: Any, indptr: Any) -> Any:
    """The result of arrays (data, indices, indptr) in x's format (CSR for DIA)."""
    if columns:
        return compressed(csp.csc_matrix, data, indices, indptr, x.shape)
    out = _make_csr(data, indices, indptr, x.shape)
    if x.format == "coo":
        out = out.tocoo()
        out.has_canonical_format = True
    return out


def divide(x: Any, y: Any) -> Any:
    """x / y of two cupyx operands of one shape; arguments validated."""
    dtype = quotient_dtype(x.dtype, y.dtype)
    columns = x.format == "csc"
    xc, yc = _in_layout(x, columns, dtype), _in_layout(y, columns, dtype)
    return _finish(x, columns, *_union(xc, yc, dtype))


def divide_scalar(x: Any, y: Any) -> Any:
    """x / y for a cupyx operand `x` and a scalar (or 0-d array) `y`: the pattern of `x`."""
    on_device = isinstance(y, cupy.ndarray)
    if on_device:
        dtype = quotient_dtype(x.dtype, y.dtype)
    else:  # NumPy's rules, Python scalars weak (float32 / 2.0 stays float32); a Python int
        # of any size converted to the result's dtype as NumPy converts it (inf past its range)
        with np.errstate(all="ignore"):
            dtype = (np.ones(1, dtype=x.dtype) / y).dtype
            y = dtype.type(y)
    columns = x.format == "csc"
    xc = _in_layout(x, columns, dtype)
    n = int(xc.data.size)
    if on_device:  # a 0-d device divisor is read by the kernel: no synchronisation
        data = _values(xc.data, 0, y.astype(dtype).reshape(1), 0, 0, n, dtype)
    else:
        data = _values(xc.data, 0, None, 0, y, n, dtype)
    return _finish(x, columns, data, xc.indices.copy(), xc.indptr.copy())


def divide_dense(x: Any, y: Any) -> Any:
    """x / y for a cupyx operand `x` and a dense CuPy array `y` of x's shape: the pattern of
    `x`, each stored value divided by y's value at its position."""
    dtype = quotient_dtype(x.dtype, y.dtype)
    columns = x.format == "csc"
    xc = _in_layout(x, columns, dtype)
    n = int(xc.data.size)
    major = cupy.searchsorted(xc.indptr[1:], cupy.arange(n), side="right")
    at = y[xc.indices, major] if columns else y[major, xc.indices]
    data = _values(xc.data, 0, cupy.ascontiguousarray(at, dtype=dtype), 1, 0, n, dtype)
    return _finish(x, columns, data, xc.indices.copy(), xc.indptr.copy())


class _Arrays(NamedTuple):
    """Canonical CSR arrays, as `_union` reads them from a matrix."""

    data: Any
    indices: Any
    indptr: Any
    shape: tuple[int, int]


def _expanded(indptr: Any, indices: Any, values: Any, size: int) -> tuple[Any, Any, Any]:
    """CSR arrays whose entries hold `size` values each, as arrays of one value an entry: the
    k-th value of the entry at column ``j`` goes to column ``j * size + k``."""
    offsets = cupy.arange(size, dtype=np.int64)
    wide = (indices.astype(np.int64)[:, None] * size + offsets).reshape(-1)
    return indptr.astype(np.int64) * size, wide, values.reshape(-1)


def divide_csr(
    xptr: Any, xidx: Any, xv: Any, yptr: Any, yidx: Any, yv: Any, ncols: int, dtype: Any
) -> tuple[Any, Any, Any]:
    """(indptr, indices, values) of x / y for the canonical CSR arrays of two operands of one
    shape (``xv``, ``yv``: the values, one or a block of them an entry, of the result's
    `dtype`), on the union of their patterns: the engine of PyTorch's CUDA tensors (`_torch`).

    Blocks of values (the dense dimensions of a hybrid tensor) are divided as entries of one
    value each, ``size`` columns an entry, so that the kernels stay those of cupyx operands.
    """
    dtype = np.dtype(dtype)
    # the kernels read raw pointers: contiguous arrays (views of PyTorch's tensors may not be)
    xptr, xidx, xv, yptr, yidx, yv = map(cupy.ascontiguousarray, (xptr, xidx, xv, yptr, yidx, yv))
    block = tuple(xv.shape[1:])
    size = math.prod(block)
    rows = int(xptr.size) - 1
    if block and size == 0:  # blocks of no values: the union of the patterns, empty blocks
        zx, zy = (cupy.zeros((int(i.shape[0]), 1), dtype) for i in (xidx, yidx))
        indptr, indices, _ = divide_csr(xptr, xidx, zx, yptr, yidx, zy, ncols, dtype)
        return indptr, indices, cupy.empty((int(indices.shape[0]), *block), dtype)
    if block:
        xptr, xidx, xv = _expanded(xptr, xidx, xv, size)
        yptr, yidx, yv = _expanded(yptr, yidx, yv, size)
        ncols *= size
    # int32 indices where every size fits (PyTorch's COO indices are int64): half the index
    # traffic of the kernels, for a cast of each index array
    if max(int(xidx.size) + int(yidx.size), ncols, rows + 1) <= INT32_MAX:
        xptr, xidx, yptr, yidx = (a.astype(np.int32, copy=False) for a in (xptr, xidx, yptr, yidx))
    xc = _Arrays(xv.astype(dtype, copy=False), xidx, xptr, (rows, ncols))
    yc = _Arrays(yv.astype(dtype, copy=False), yidx, yptr, (rows, ncols))
    data, indices, indptr = _union(xc, yc, dtype)
    if block:  # every block is stored whole: its first column tells its entry
        return indptr // size, indices[::size] // size, data.reshape(-1, *block)
    return indptr, indices, data


def divide_csr_into(
    x: tuple[int, int, int],
    y: tuple[int, int, int],
    rows: int,
    nx: int,
    ny: int,
    index: Any,
    out_index: Any,
    dtype: Any,
    allocate: Callable[[], tuple[int, int, int]],
) -> int:
    """x / y of two canonical CSR operands of `rows` rows given by the device addresses of
    their arrays (row pointers and `nx` >= 1, `ny` column indices of dtype `index`, values of
    the result's `dtype`), written into the buffers whose addresses ``allocate()`` returns
    (`queue_union`: row pointers of `index`, indices of `out_index`); returns the union's
    size, read back (the one host synchronisation).

    The engine of PyTorch's CUDA CSR tensors of one value an entry: no array is made of their
    memory, and the result is made by the caller, so that neither crosses over by DLPack."""
    index, out_index, dtype = np.dtype(index), np.dtype(out_index), np.dtype(dtype)
    made: list[int] = []

    def allocated() -> tuple[int, int, int]:
        out = allocate()
        made.append(out[0])
        return out

    x_, y_ = CsrPointers(*x), CsrPointers(*y)
    queue_union(x_, y_, rows, nx, ny, index, dtype, allocated, out_index)
    return read_int_at(made[0] + rows * index.itemsize, index)


def divide_coo_into(
    x: tuple[int, int],
    y: tuple[int, int],
    nx: int,
    ny: int,
    shape: tuple[int, int],
    dtype: Any,
    allocate_values: Callable[[], int],
    allocate_coords: Callable[[int], int],
) -> int:
    """x / y of two coalesced COO operands of 2-D sparse `shape` given by the device
    addresses of their (2, n) int64 coordinates and their values (`nx` >= 1 and `ny` entries,
    one value of the result's `dtype` an entry); returns the union's size ``nnz`` (the one host
    synchronisation).

    The quotients are written into the buffer of nx + ny values whose address
    ``allocate_values()`` returns, the coordinates into the int64 buffer of
    ``allocate_coords(n)`` (n elements): its first 2 * nnz elements are the (2, nnz)
    coordinates, the caller cuts both. As `divide_coo`, for PyTorch's CUDA COO tensors, with
    no array made of their memory and the result made by the caller. Tiled operands have their
    columns written by the union's kernels straight into a buffer of 2 * (nx + ny) (asked for
    before the synchronisation), and only the rows after it; small ones get a buffer of
    2 * nnz and both."""
    rows, ncols = shape
    index = index_dtype(nx + ny, ncols, rows + 1)
    xptr, xidx = _csr_of_coo_at(x[0], nx, rows, index)
    yptr, yidx = _csr_of_coo_at(y[0], ny, rows, index)
    fused = not small(rows, nx, ny)
    buffers: list[Any] = []
    coords: list[int] = []

    def allocate() -> tuple[int, int, int]:
        indptr = cupy.empty(rows + 1, dtype=index)
        buffers.append(indptr)
        if fused:
            coords.append(allocate_coords(2 * (nx + ny)))
            return indptr.data.ptr, coords[0], allocate_values()
        buffers.append(cupy.empty(nx + ny, dtype=index))
        return indptr.data.ptr, buffers[1].data.ptr, allocate_values()

    xp = CsrPointers(xptr.data.ptr, xidx.data.ptr, x[1])
    yp = CsrPointers(yptr.data.ptr, yidx.data.ptr, y[1])
    out_index = np.dtype(np.int64) if fused else index
    queue_union(xp, yp, rows, nx, ny, index, np.dtype(dtype), allocate, out_index, fused)
    nnz = read_int(buffers[0], -1)
    if fused:
        _coo_indices_at(buffers[0], None, nnz, coords[0])
    else:
        _coo_indices_at(buffers[0], buffers[1], nnz, allocate_coords(2 * nnz))
    return nnz


def csr_of_coo(coords: Any, rows: int, index: Any) -> tuple[Any, Any]:
    """(indptr, indices) of `index` dtype of sorted unique 2-D COO coordinates `coords`
    ((2, n) int64) of `rows` rows: one kernel."""
    coords = cupy.ascontiguousarray(coords)
    return _csr_of_coo_at(coords.data.ptr, int(coords.shape[1]), rows, index)


def _csr_of_coo_at(address: int, n: int, rows: int, index: Any) -> tuple[Any, Any]:
    """`csr_of_coo` of the (2, n) int64 coordinates at device `address`."""
    if n == 0:
        return cupy.zeros(rows + 1, dtype=index), cupy.empty(0, dtype=index)
    indptr, indices = cupy.empty(rows + 1, dtype=index), cupy.empty(n, dtype=index)
    kernel = coo_kernels(dtype_name(index))["csr_of_coo"]
    args = (address, n, rows, indptr.data.ptr, indices.data.ptr)
    kernel(_blocks(max(n, rows + 1)), THREADS, args)
    return indptr, indices


def divide_coo(
    xc: Any, xv: Any, yc: Any, yv: Any, shape: tuple[int, int], dtype: Any
) -> tuple[Any, Any]:
    """(coordinates, values) of x / y for two coalesced COO operands of 2-D sparse `shape`
    (coordinates ``xc``, ``yc``: (2, n) int64, rows then columns; values of the result's
    `dtype`, one or a block of them an entry): `divide_csr` between `csr_of_coo` and
    `coo_indices`, PyTorch's 2-D COO tensors in one hand-over."""
    rows, ncols = shape
    index = index_dtype(int(xc.shape[1]) + int(yc.shape[1]), ncols, rows + 1)
    (xptr, xidx), (yptr, yidx) = csr_of_coo(xc, rows, index), csr_of_coo(yc, rows, index)
    indptr, indices, data = divide_csr(xptr, xidx, xv, yptr, yidx, yv, ncols, dtype)
    return coo_indices(indptr, indices), data


def coo_indices(indptr: Any, indices: Any) -> Any:
    """The (2, nnz) int64 coordinates (row, column) of CSR arrays `indptr`, `indices` (a
    PyTorch COO tensor's indices): one kernel, a warp a row."""
    indptr, indices = map(cupy.ascontiguousarray, (indptr, indices))
    if indptr.dtype != indices.dtype:
        indptr, indices = (a.astype(np.int64, copy=False) for a in (indptr, indices))
    n = int(indices.size)
    out = cupy.empty((2, n), dtype=np.int64)
    _coo_indices_at(indptr, indices, n, out.data.ptr)
    return out


def _coo_indices_at(indptr: Any, indices: Any | None, n: int, address: int) -> None:
    """`coo_indices` of the first `n` entries of CSR arrays `indptr`, `indices` (contiguous,
    of one dtype; n = indptr[-1]) into the (2, n) int64 buffer at device `address`; with
    `indices` None, its first row only (the rows)."""
    if n:
        rows = int(indptr.size) - 1
        kernel = coo_kernels(dtype_name(indptr.dtype))["coo_indices"]
        idx = 0 if indices is None else indices.data.ptr
        kernel(_blocks(32 * rows), THREADS, (indptr.data.ptr, idx, rows, n, address))
