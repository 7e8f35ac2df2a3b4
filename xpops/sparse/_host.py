"""The NumPy core of sparse.divide: ``x / y`` on the union of two canonical CSR patterns, and
the keys that bring any other pattern to one.

Shared by the engines of host operands: SciPy (`_scipy`), pydata ``sparse`` (`_pydata`) and
PyTorch's CPU tensors (`_torch`). Each brings its operands to `Csr` arrays (a CSC operand is
the CSR of its transpose, an N-D one the CSR of its row-major keys folded into two dimensions)
and builds its result from the `Csr` that `merge` returns.

The merge of the two sorted patterns is SciPy's CSR addition (``_lib._scipy_sparse.
csr_plus_csr``: the compiled routine, writing straight into the result's buffers) on values
encoded so that the sum is never zero (SciPy drops zero sums) and tells which side was stored:

* **values** (one real value an entry, no stored zeros on either side: the usual case):
  ``x + i*y`` in the complex dtype of the result, so each stored position of the sum holds
  ``x_ij + i*y_ij`` with a missing side 0, and the quotient is ``real / imag``.
* **positions** (complex values, stored zeros that could sum to zero, or blocks of values an
  entry): ``(k+1) + i*(l+1)`` in complex128 for the k-th stored entry of `x` and the l-th of
  `y` (0 when missing; exact up to 2**53 entries), decoded into two gathers from the values
  padded with a leading zero.

The merge runs over blocks of rows of about BLOCK_ENTRIES entries, into buffers that each
thread keeps and reuses for every block and every call: whole-matrix intermediates (about
35 MB of complex128 for two operands of 400k entries) would be fresh memory on every call,
and first-touching it doubles the float64 time. With at least HELPER_MIN_ENTRIES entries and
a free helper thread (``_threads.helper_thread``), the helper merges the second half of the
blocks from where they would start if no position were stored in both, and they are moved
down after the first half ends (one copy of half the result).

A merge written in NumPy (a stable sort of the two key arrays, or binary searches of one in the
other) is 2x to 4x slower than SciPy's compiled addition, which the merge's branches bound.
"""

import math
import threading
from typing import Any, NamedTuple

import numpy as np

from .._lib._dtypes import INT32_MAX
from .._lib._scipy_sparse import csr_plus_csr
from .._lib._threads import helper_thread

__all__ = [
    "Csr",
    "Frame",
    "canonical_keys",
    "divide_csr",
    "index_dtype",
    "merge",
    "ravel",
    "rows_of",
]

# Rows are merged in blocks of about this many entries of x and y together, so that the
# intermediates are small enough for the allocator to reuse (see above). Best measured on a
# 2-core AMD EPYC for two 20000 x 20000 operands of 400k entries each: blocks of 16k entries
# cost Python overhead, of 256k first-touch fresh memory.
BLOCK_ENTRIES = 1 << 16
# From this many entries of x and y together, a second thread merges half of the row blocks
# (SciPy's CSR addition and NumPy's arithmetic release the GIL).
HELPER_MIN_ENTRIES = 1 << 18
# The frames of N-D operands (`Frame`): their leading dimensions make the rows unless there
# would be more than NATURAL_ROWS_PER_ENTRY rows a stored entry; then the keys are folded into
# about a row per FOLD_ROW_ENTRIES entries: rows long enough that the merge's cost a row is
# small next to their entries, few enough that their pointers stay small next to the entries.
NATURAL_ROWS_PER_ENTRY = 4
FOLD_ROW_ENTRIES = 4


class Csr(NamedTuple):
    """A CSR pattern with its values: ``indptr`` (rows + 1), ``indices`` (sorted and unique
    within each row) of one integer dtype, ``data`` of shape ``(entries, *block)`` (a block of
    values an entry: the dense dimensions of a PyTorch hybrid tensor; none in general), and
    the number of columns."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    ncols: int


def index_dtype(*sizes: int) -> np.dtype:
    """int32 if every size (entries, rows + 1, columns) fits in it, else int64."""
    return np.dtype(np.int32 if max(sizes, default=0) <= INT32_MAX else np.int64)


# ---- N-D patterns as keys -----------------------------------------------------------------------


def canonical_keys(keys: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(keys, data) of entries at int64 `keys`, sorted, with repeated keys summed in their
    stored order from the first term (so a lone -0.0 keeps its sign). Returns the inputs
    themselves when the keys are already increasing (one pass to check)."""
    if keys.size < 2 or bool((keys[1:] > keys[:-1]).all()):
        return keys, data
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    first = np.empty(keys.size, dtype=bool)
    first[0] = True
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    values = data[order]
    if starts.size < keys.size:
        values = np.add.reduceat(values, starts, axis=0)
    return keys[starts], values


def ravel(coords: Any, shape: tuple[int, ...]) -> np.ndarray:
    """The row-major keys (int64) of coordinates `coords` (one array an axis) in `shape` (a
    multiply-add an axis: faster than ``numpy.ravel_multi_index``)."""
    if not shape:
        return np.zeros(len(coords[0]) if len(coords) else 0, dtype=np.int64)
    keys = np.asarray(coords[0]).astype(np.int64)  # a new array, updated in place
    for c, n in zip(coords[1:], shape[1:], strict=True):
        keys *= n
        keys += c
    return keys


def rows_of(indptr: np.ndarray, nnz: int) -> np.ndarray:
    """The row (intp) of each of the `nnz` entries of row pointers `indptr`: the number of
    row starts after the first at or before it (counted, then summed: faster than
    ``numpy.repeat`` of the row lengths)."""
    starts = np.bincount(indptr[1:-1], minlength=nnz + 1)[:nnz]
    return np.cumsum(starts, out=starts)


class Frame:
    """The 2-D frame of the division of N-D operands of `shape`, `nnz` entries in all: the
    leading dimensions flattened into rows and the last one the columns ("natural"), or, where
    that would make too many rows for their pointers (more than NATURAL_ROWS_PER_ENTRY a stored
    entry), the row-major keys folded into about a row per FOLD_ROW_ENTRIES entries."""

    def __init__(self, shape: tuple[int, ...], nnz: int) -> None:
        self.shape = shape
        lead, last = math.prod(shape[:-1]), (shape[-1] if shape else 1)
        # no positions at all (a zero-length dimension): nothing to fold
        self.natural = lead * last == 0 or lead <= max(NATURAL_ROWS_PER_ENTRY * nnz, 1 << 10)
        if self.natural:
            self.rows, self.ncols = lead, last
        else:
            positions = lead * last
            rows = max(1, min(positions, nnz // FOLD_ROW_ENTRIES))
            self.ncols = -(-positions // rows)
            self.rows = -(-positions // self.ncols)

    @classmethod
    def fixed(cls, shape: tuple[int, ...], rows: int, ncols: int) -> "Frame":
        """The frame of `rows` x `ncols` over the positions of `shape` (a GCXS array's own)."""
        frame = cls.__new__(cls)
        frame.shape, frame.natural, frame.rows, frame.ncols = shape, False, rows, ncols
        return frame

    def csr(self, keys: np.ndarray, data: np.ndarray) -> Csr:
        """The CSR arrays of entries at sorted unique row-major `keys` holding `data`."""
        ncols = max(self.ncols, 1)
        major = keys // ncols
        index = index_dtype(keys.size, self.rows + 1, ncols)
        indptr = np.zeros(self.rows + 1, dtype=index)
        np.cumsum(np.bincount(major, minlength=self.rows), out=indptr[1:])
        return Csr(indptr, (keys - major * ncols).astype(index), data, self.ncols)

    def coords(self, out: Csr) -> np.ndarray:
        """The coordinates (intp, one row an axis) of the entries of CSR arrays `out`."""
        nnz = out.indices.shape[0]
        coords = np.empty((len(self.shape), nnz), dtype=np.intp)
        if not self.shape:
            return coords
        rows = rows_of(out.indptr, nnz)
        if self.natural:
            coords[-1] = out.indices
            lead = np.unravel_index(rows, self.shape[:-1]) if len(self.shape) > 1 else ()
        else:
            rows *= self.ncols
            rows += out.indices
            lead = np.unravel_index(rows, self.shape)
        for axis, c in enumerate(lead):
            coords[axis] = c
        return coords


# ---- the merge -----------------------------------------------------------------------------------


def _complex_of(dtype: np.dtype) -> np.dtype:
    return np.result_type(dtype, np.complex64)


def _row_blocks(x: Csr, y: Csr) -> np.ndarray:
    """Row boundaries of blocks of about BLOCK_ENTRIES entries of x and y together."""
    nrows = x.indptr.size - 1
    before = x.indptr.astype(np.int64) + y.indptr.astype(np.int64)  # entries before each row
    starts = np.searchsorted(before, np.arange(0, before[-1], BLOCK_ENTRIES), side="right") - 1
    return np.unique(np.concatenate([starts, [0, nrows]]).clip(0, nrows))


def _with_index(a: Csr, index: np.dtype) -> Csr:
    if a.indices.dtype == index and a.indptr.dtype == index:
        return a
    return Csr(a.indptr.astype(index), a.indices.astype(index), a.data, a.ncols)


# Each thread keeps its encoding buffers between calls, for blocks of up to KEEP_ENTRIES
# entries (about 3 MB of complex128 for three buffers of BLOCK_ENTRIES): new ones are fresh
# memory, zeroed and first-touched on every call, about a tenth of a call's time for two
# operands of 400k entries.
KEEP_ENTRIES = 4 * BLOCK_ENTRIES
_KEPT = threading.local()


def _encoding_buffers(ctype: np.dtype, span: int) -> tuple[Any, Any, Any]:
    """(x's encoded values, y's, the sum) of `span` entries of `ctype`, the first two zeroed
    but for the parts the encodings write (x's real parts, y's imaginary parts): this
    thread's kept ones when they are large enough."""
    kept: dict[np.dtype, tuple[Any, Any, Any]] = getattr(_KEPT, "buffers", None) or {}
    bufs = kept.get(ctype)
    if bufs is not None and bufs[0].shape[0] >= span:
        return bufs
    size = max(span, BLOCK_ENTRIES)
    bufs = (np.zeros(size, ctype), np.zeros(size, ctype), np.empty(size, ctype))
    if size <= KEEP_ENTRIES:
        kept[ctype] = bufs
        _KEPT.buffers = kept
    return bufs


class _Buffers:
    """One thread's buffers for the blocks it merges, allocated on first use and reused: the
    encoded values of x and y in each complex dtype (`_encoding_buffers`), the block's sum
    and row pointers, and the operands' values padded with a leading zero (the positions
    encoding's gathers)."""

    def __init__(self, span: int, rows: int, index: np.dtype) -> None:
        self.span = span
        self.indptr = np.empty(rows + 1, dtype=index)
        self._encoded: dict[np.dtype, tuple[Any, Any, Any]] = {}
        self._padded: dict[str, np.ndarray] = {}

    def encoded(self, ctype: np.dtype) -> tuple[Any, Any, Any]:
        bufs = self._encoded.get(ctype)
        if bufs is None:
            bufs = self._encoded[ctype] = _encoding_buffers(ctype, self.span)
        return bufs

    def padded(self, side: str, values: np.ndarray) -> np.ndarray:
        """`values` after a zero, in this thread's buffer for `side`."""
        n = values.shape[0]
        buf = self._padded.get(side)
        if buf is None or buf.shape[0] <= n:
            buf = self._padded[side] = np.zeros((self.span + 1, *values.shape[1:]), values.dtype)
        buf[1 : n + 1] = values
        return buf[: n + 1]


def _merge_block(
    x: Csr, xd: np.ndarray, y: Csr, yd: np.ndarray, r0: int, r1: int, bufs: _Buffers,
    indices: np.ndarray, data: np.ndarray,
) -> int:  # fmt: skip
    """Rows r0:r1 of x / y into `indices` and `data` (from their start); returns the number of
    entries written and leaves the block's row pointers (from 0) in ``bufs.indptr``."""
    xa, xb = int(x.indptr[r0]), int(x.indptr[r1])
    ya, yb = int(y.indptr[r0]), int(y.indptr[r1])
    xs, ys = xd[xa:xb], yd[ya:yb]
    # values (real values, no stored zeros in this block's entries) or positions
    # (``(a != 0).all()`` is about 3x faster than ``a.all()`` on floats)
    values = xs.dtype.kind == "f" and xs.ndim == 1 and bool((xs != 0).all() and (ys != 0).all())
    ctype = _complex_of(xs.dtype) if values else np.dtype(np.complex128)
    xv_buf, yv_buf, cx = bufs.encoded(ctype)
    xv, yv = xv_buf[: xb - xa], yv_buf[: yb - ya]
    if values:
        xv.real = xs
        yv.imag = ys  # not ys * 1j: inf * 1j is nan + inf j
    else:  # entry k of the block's x is 1 + k, entry l of its y is i (1 + l); 0: not stored
        xv.real = np.arange(1, xb - xa + 1)
        yv.imag = np.arange(1, yb - ya + 1)
    index = x.indptr.dtype.type
    m = csr_plus_csr(
        r1 - r0, x.ncols, x.indptr[r0 : r1 + 1] - index(xa), x.indices[xa:xb], xv,
        y.indptr[r0 : r1 + 1] - index(ya), y.indices[ya:yb], yv, bufs.indptr, indices, cx,
    )  # fmt: skip
    out = data[:m]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        if values:
            np.divide(cx.real[:m], cx.imag[:m], out=out)
        else:
            # (mode "clip": the codes are in range, and the default mode's check with `out`
            # buffers the whole gather, about 3x slower)
            at_x, at_y = cx.real[:m].astype(np.intp), cx.imag[:m].astype(np.intp)
            np.take(bufs.padded("x", xs), at_x, axis=0, out=out, mode="clip")
            np.divide(out, np.take(bufs.padded("y", ys), at_y, axis=0, mode="clip"), out=out)
    return m


def merge(x: Csr, y: Csr, dtype: np.dtype) -> Csr:
    """``x / y`` of two canonical CSR patterns of one shape, as `dtype` (floating or complex),
    on the union of the patterns: a `Csr` of int64 row pointers, indices of the wider index
    dtype of the operands, and buffers of its own."""
    xd = x.data.astype(dtype, copy=False)
    yd = y.data.astype(dtype, copy=False)
    index = np.promote_types(x.indices.dtype, y.indices.dtype)
    x, y = _with_index(x, index), _with_index(y, index)
    nrows = x.indptr.size - 1
    maxnnz = xd.shape[0] + yd.shape[0]
    data = np.empty((maxnnz, *xd.shape[1:]), dtype=dtype)
    indices = np.empty(maxnnz, dtype=index)
    indptr = np.zeros(nrows + 1, dtype=np.int64)
    bounds = _row_blocks(x, y).tolist()
    before = [int(x.indptr[r]) + int(y.indptr[r]) for r in bounds]  # entries before block b

    def run(b0: int, b1: int) -> int:
        """Merge blocks b0:b1 into the result from offset before[b0] (where they would start
        if no position were stored in both) on; returns the offset after them."""
        rows = max(bounds[b + 1] - bounds[b] for b in range(b0, b1))
        span = max(before[b + 1] - before[b] for b in range(b0, b1))
        bufs = _Buffers(span, rows, index)
        nnz = before[b0]
        for b in range(b0, b1):
            r0, r1 = bounds[b], bounds[b + 1]
            m = _merge_block(x, xd, y, yd, r0, r1, bufs, indices[nnz:], data[nnz:])
            indptr[r0 + 1 : r1 + 1] = bufs.indptr[1 : r1 - r0 + 1] + nnz
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
        return Csr(indptr, indices[:nnz].copy(), data[:nnz].copy(), x.ncols)
    return Csr(indptr, indices[:nnz], data[:nnz], x.ncols)


def divide_csr(
    xptr: np.ndarray,
    xidx: np.ndarray,
    xv: np.ndarray,
    yptr: np.ndarray,
    yidx: np.ndarray,
    yv: np.ndarray,
    ncols: int,
    dtype: Any,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indptr, indices, values) of x / y for the canonical CSR arrays of two operands of one
    shape (values: one or a block of them an entry), on the union of their patterns: `merge`
    on plain arrays, the engine of PyTorch's CPU tensors (`_torch`)."""
    # SciPy's compiled addition takes contiguous arrays (views of PyTorch's tensors may not be)
    xptr, xidx, xv, yptr, yidx, yv = map(np.ascontiguousarray, (xptr, xidx, xv, yptr, yidx, yv))
    out = merge(Csr(xptr, xidx, xv, ncols), Csr(yptr, yidx, yv, ncols), np.dtype(dtype))
    return out.indptr, out.indices, out.data
