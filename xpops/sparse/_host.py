"""The NumPy core of sparse.divide: ``x / y`` on the union of two canonical CSR patterns, and
the keys that bring any other pattern to one.

Shared by the engines of host operands: SciPy (`_scipy`), pydata ``sparse`` (`_pydata`) and
PyTorch's CPU tensors (`_torch`). Each brings its operands to `Csr` arrays (a CSC operand is
the CSR of its transpose, an N-D one the CSR of its row-major keys folded into two dimensions)
and builds its result from the `Csr` that `merge` returns.

The merge of the two sorted patterns is SciPy's CSR addition (``_lib._scipy_sparse.
csr_plus_csr``: the compiled routine, writing straight into the result's buffers) on values
encoded so that the sum is never zero (SciPy drops zero sums) and tells which side was stored:

* **floats** (float64 values, and float32 ones with stored zeros, one an entry): the bits of
  the quotient where one side stores a position, as unsigned integers of the value's size
  (SciPy's integer merge is about 12% faster than its floating one, and faster than its
  ``x + y``): ``x / 0`` (``±inf`` or NaN) with the lowest bit cleared for x, ``0 / y``
  (``±0`` or NaN) with the lowest bit set for y, so that no code and no sum of two is zero;
  clearing the lowest bit of the sum gives the quotient. Where both sides store a position
  the sum is no quotient, so the rows with such positions (fewer entries than x's and y's
  together) are merged again by a complex encoding. Operands of one pattern skip the merge
  (``x.data / y.data``), and blocks where many rows hold such positions go to the complex
  encodings directly.
* **values** (float32 values, other real values, rows merged again): ``x + i*y`` in the
  complex dtype of the result, so each stored position of the sum holds ``x_ij + i*y_ij``
  with a missing side 0, and the quotient is ``real / imag``. No stored zeros on either
  side (they could cancel). complex64 codes are merged as the 64-bit unsigned integers of
  their bits (one half of each code is zero, so the sum is the pair): for float32 values
  this beats the float encoding, which would merge the rows with positions on both sides
  again.
* **positions** (complex values, stored zeros, or blocks of values an entry): ``(k+1) +
  i*(l+1)`` in complex128 for the k-th stored entry of `x` and the l-th of `y` (0 when
  missing; exact up to 2**53 entries), decoded into two gathers from the values padded with a
  leading zero.

The merge runs over blocks of rows of about FLOAT_BLOCK_ENTRIES (floats) or BLOCK_ENTRIES
entries, into buffers that each thread keeps and reuses for every block and every call: fresh
intermediates would be first-touched on every call. With at least HELPER_MIN_ENTRIES entries
and a free helper thread (``_threads.helper_thread``), this thread claims blocks from the
front and the helper from the back, each block from where it would start if no position were
stored in both (the helper's are moved down at the end), so that neither waits long for the
other when one of the two cores is busy with other work.

A merge written in NumPy (a stable sort of the two key arrays, or binary searches of one in the
other) is 2x to 4x slower than SciPy's compiled addition, which the merge's branches bound;
SciPy's ``x + y`` is that merge on one thread, so only the second core makes the division
faster than it.
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
    "coo_indices",
    "divide_coo",
    "divide_csr",
    "index_dtype",
    "merge",
    "ravel",
    "rows_of",
]

# The complex encodings merge rows in blocks of about this many entries of x and y together,
# so that their intermediates stay in the cache. Best measured on a 2-core AMD EPYC for two
# 20000 x 20000 operands of 400k entries each: blocks of 16k entries cost Python overhead.
BLOCK_ENTRIES = 1 << 16
# The float encoding (and float32 values) merge blocks of about this many entries: a few
# NumPy calls a block (each a handover of the GIL between the two threads) count for more
# than its intermediates leaving the cache (same machine and operands: blocks of 2**16
# entries cost about 20% more, 2**17 a few %, 2**19 as much or more).
FLOAT_BLOCK_ENTRIES = 1 << 18
# From this many entries of x and y together, a second thread merges part of the row blocks
# (SciPy's CSR addition and NumPy's arithmetic release the GIL), and converts y while this
# thread converts x (`_scipy`).
HELPER_MIN_ENTRIES = 1 << 18
# The dtypes merged by the float encoding (`_merge_floats`), with the unsigned integers of
# their bits.
FLOAT_BITS: dict[np.dtype, np.dtype] = {
    np.dtype(np.float32): np.dtype(np.uint32),
    np.dtype(np.float64): np.dtype(np.uint64),
}
FLOAT_DTYPES = tuple(FLOAT_BITS)
# A block merged by the float encoding with more positions stored on both sides than this
# share of its rows is merged again by the complex encodings, and so are the thread's further
# blocks (operands of nearly the same pattern): dividing those rows again would cost more.
# The first block of each thread is a sixteenth of the others, so that little is merged twice.
OVERLAP_SHARE = 0.25
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


def _row_blocks(before: np.ndarray, entries: int, probe: int = 0) -> np.ndarray:
    """Row boundaries of blocks of about equal numbers of entries, about `entries` each (a
    long row that crosses a cut adds to its block), given the entries `before` each row
    (int64, one more than the rows); with `probe`, the first and the last block are cut
    after (before) about `probe` entries."""
    nrows = before.size - 1
    total = int(before[-1])
    blocks = -(-total // entries)
    at = np.arange(blocks) * total // max(blocks, 1)
    if probe and total > 4 * probe:
        at = np.concatenate([at, [probe, total - probe]])
    starts = np.searchsorted(before, at, side="right")
    return np.unique(np.concatenate([starts - 1, [0, nrows]]).clip(0, nrows))


def _with_index(a: Csr, index: np.dtype) -> Csr:
    if a.indices.dtype == index and a.indptr.dtype == index:
        return a
    return Csr(a.indptr.astype(index), a.indices.astype(index), a.data, a.ncols)


# Each thread keeps its encoding buffers between calls, for blocks of up to KEEP_ENTRIES
# entries (a block of the float encoding and a row more: about 6 MB of complex64 for three
# buffers, for float32 values; 3 MB of complex128 for BLOCK_ENTRIES): new ones are fresh
# memory, zeroed and first-touched on every call, about a tenth of a call's time for two
# operands of 400k entries.
KEEP_ENTRIES = FLOAT_BLOCK_ENTRIES + BLOCK_ENTRIES
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


def _float_buffers(dtype: np.dtype, span: int) -> tuple[np.ndarray, np.ndarray]:
    """(x's codes, y's codes) of the float encoding, `span` entries of `dtype`: this thread's
    kept ones when they are large enough."""
    kept: dict[np.dtype, tuple[Any, Any]] = getattr(_KEPT, "floats", None) or {}
    bufs = kept.get(dtype)
    if bufs is not None and bufs[0].shape[0] >= span:
        return bufs
    size = max(span, FLOAT_BLOCK_ENTRIES)
    bufs = (np.empty(size, dtype), np.empty(size, dtype))
    if size <= KEEP_ENTRIES:
        kept[dtype] = bufs
        _KEPT.floats = kept
    return bufs


class _Buffers:
    """One thread's buffers for the blocks it merges, allocated on first use and reused: the
    float encoding's codes (`_float_buffers`), the encoded values of x and y in each complex
    dtype (`_encoding_buffers`), the block's sum and row pointers, and the operands' values
    padded with a leading zero (the positions encoding's gathers); with the thread's choice
    of encoding and the rows it leaves to divide again."""

    def __init__(self, span: int, rows: int, index: np.dtype, floats: bool) -> None:
        self.span = span
        self.indptr = np.empty(rows + 1, dtype=index)
        self.floats = floats  # the float encoding (`_merge_floats`), else the complex ones
        self.again: list[tuple[np.ndarray, np.ndarray]] = []  # rows to divide again
        self._encoded: dict[np.dtype, tuple[Any, Any, Any]] = {}
        self._padded: dict[str, np.ndarray] = {}

    def encoded(self, ctype: np.dtype) -> tuple[Any, Any, Any]:
        bufs = self._encoded.get(ctype)
        if bufs is None:
            bufs = self._encoded[ctype] = _encoding_buffers(ctype, self.span)
        return bufs

    def floats_of(self, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
        return _float_buffers(dtype, self.span)

    def padded(self, side: str, values: np.ndarray) -> np.ndarray:
        """`values` after a zero, in this thread's buffer for `side`."""
        n = values.shape[0]
        buf = self._padded.get(side)
        if buf is None or buf.shape[0] <= n:
            buf = self._padded[side] = np.zeros((self.span + 1, *values.shape[1:]), values.dtype)
        buf[1 : n + 1] = values
        return buf[: n + 1]


def _merge_block(
    x: Csr, y: Csr, r0: int, r1: int, bufs: _Buffers, indices: np.ndarray, data: np.ndarray,
    offset: int, apart: np.ndarray | None,
) -> int:  # fmt: skip
    """Rows r0:r1 of x / y into `indices` and `data` from `offset` on; returns the number of
    entries written and leaves the block's row pointers (from 0) in ``bufs.indptr``. With
    `apart` (the entries of each row of x and y together) the float encoding merges the block
    if ``bufs.floats``; its rows that hold positions stored on both sides (fewer entries than
    `apart`) are noted in ``bufs.again`` with where their entries start in `data`, to be
    divided again (`_divide_again`)."""
    xa, xb = int(x.indptr[r0]), int(x.indptr[r1])
    ya, yb = int(y.indptr[r0]), int(y.indptr[r1])
    index = x.indptr.dtype.type
    xs = Csr(x.indptr[r0 : r1 + 1] - index(xa), x.indices[xa:xb], x.data[xa:xb], x.ncols)
    ys = Csr(y.indptr[r0 : r1 + 1] - index(ya), y.indices[ya:yb], y.data[ya:yb], y.ncols)
    indices, data = indices[offset:], data[offset:]
    # float32 values without stored zeros: both values of a position fit one code, with no
    # positions stored on both sides to divide again
    packed = x.data.dtype.itemsize == 4 and _values(xs.data, ys.data)
    if bufs.floats and apart is not None and not packed:
        m = _merge_floats(xs, ys, bufs, indices, data)
        both = (xb - xa) + (yb - ya) - m  # positions stored on both sides
        if both == 0:
            return m
        if both <= OVERLAP_SHARE * (r1 - r0):
            ptr = bufs.indptr[: r1 - r0 + 1]
            rows = np.flatnonzero(np.diff(ptr) < apart[r0:r1])
            bufs.again.append((rows + r0, ptr[rows].astype(np.int64) + offset))
            return m
        # (such positions in many rows: the same pattern on both sides, say) this block and
        # the thread's further ones by the complex encodings
        bufs.floats = False
    return _merge_encoded(xs, ys, bufs, bufs.indptr, indices, data, packed or None)


def _merge_floats(x: Csr, y: Csr, bufs: _Buffers, indices: np.ndarray, data: np.ndarray) -> int:
    """x / y of real floating operands (one value an entry) by the float encoding, into
    `indices` and `data`, row pointers in ``bufs.indptr``; returns the number of entries.
    Correct but where a position is stored on both sides.

    The codes are the bits of the quotients where one side stores a position, as unsigned
    integers (SciPy's integer merge is faster than its floating one): ``x / 0`` for x
    (``±inf`` or NaN) with the lowest bit clear, even numbers, and ``0 / y`` for y (``±0``,
    or NaN for a stored zero or NaN) with the lowest bit set, odd numbers. So no code and
    no sum of an x code and a y code is zero (SciPy would drop it), and clearing the lowest
    bit of the sum at a position stored on one side gives that side's quotient (a NaN, quiet
    after the division, stays NaN)."""
    nx, ny = x.data.shape[0], y.data.shape[0]
    bits = FLOAT_BITS[data.dtype]
    xbuf, ybuf = bufs.floats_of(data.dtype)
    xe, ye = xbuf[:nx], ybuf[:ny]
    with np.errstate(divide="ignore", invalid="ignore"):
        np.divide(x.data, 0, out=xe)
        np.divide(0, y.data, out=ye)
    low = bits.type(1)
    np.bitwise_and(xe.view(bits), ~low, out=xe.view(bits))
    np.bitwise_or(ye.view(bits), low, out=ye.view(bits))
    out = data.view(bits)
    m = csr_plus_csr(
        x.indptr.size - 1, x.ncols, x.indptr, x.indices, xe.view(bits), y.indptr, y.indices,
        ye.view(bits), bufs.indptr, indices, out,
    )  # fmt: skip
    np.bitwise_and(out[:m], ~low, out=out[:m])
    return m


def _divide_again(
    x: Csr, y: Csr, again: list[tuple[np.ndarray, np.ndarray]], data: np.ndarray
) -> None:
    """Divide again, by the complex encodings, rows that the float encoding merged with
    positions stored on both sides (`again`: the rows, each once, and where their entries
    start in the result's values `data`)."""
    rows = np.concatenate([rows for rows, _ in again])
    starts = np.concatenate([starts for _, starts in again]).astype(np.intp)
    xr, yr = _rows(x, rows), _rows(y, rows)
    span = xr.data.shape[0] + yr.data.shape[0]
    bufs = _Buffers(span, rows.size, xr.indptr.dtype, floats=False)
    out = np.empty(span, dtype=data.dtype)
    k = _merge_encoded(xr, yr, bufs, bufs.indptr, np.empty(span, xr.indices.dtype), out)
    ptr = bufs.indptr[: rows.size + 1]
    at = np.arange(k, dtype=np.intp)
    at += np.repeat(starts - ptr[:-1], np.diff(ptr))
    data[at] = out[:k]


def _rows(a: Csr, rows: np.ndarray) -> Csr:
    """The rows `rows` of `a` (each once), as a `Csr` of their own."""
    starts = a.indptr[rows]
    counts = a.indptr[rows + 1] - starts
    indptr = np.zeros(rows.size + 1, dtype=a.indptr.dtype)
    np.cumsum(counts, out=indptr[1:])
    at = np.arange(indptr[-1], dtype=np.intp)
    at += np.repeat(starts - indptr[:-1], counts)
    return Csr(indptr, a.indices[at], a.data[at], a.ncols)


def _values(xs: np.ndarray, ys: np.ndarray) -> bool:
    """Whether the values encoding takes x's and y's values: real, one an entry, no stored
    zeros (``(a != 0).all()`` is about 3x faster than ``a.all()`` on floats)."""
    return xs.dtype.kind == "f" and xs.ndim == 1 and bool((xs != 0).all() and (ys != 0).all())


def _merge_encoded(
    x: Csr, y: Csr, bufs: _Buffers, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray,
    values: bool | None = None,
) -> int:  # fmt: skip
    """x / y by the complex encodings (the values one if `values`, or if x's and y's values
    allow it when None; else the positions one), into `indptr`, `indices` and `data`;
    returns the number of entries written."""
    xs, ys = x.data, y.data
    nx, ny = xs.shape[0], ys.shape[0]
    if values is None:
        values = _values(xs, ys)
    ctype = _complex_of(xs.dtype) if values else np.dtype(np.complex128)
    xv_buf, yv_buf, cx = bufs.encoded(ctype)
    xv, yv = xv_buf[:nx], yv_buf[:ny]
    if values:
        xv.real = xs
        yv.imag = ys  # not ys * 1j: inf * 1j is nan + inf j
    else:  # entry k of the block's x is 1 + k, entry l of its y is i (1 + l); 0: not stored
        xv.real = np.arange(1, nx + 1)
        yv.imag = np.arange(1, ny + 1)
    # (complex64 codes are merged as the unsigned integers of their bits: each code has one
    # half zero, so the sum of two is the pair, and SciPy's integer merge is faster)
    whole = np.uint64 if ctype == np.complex64 else ctype
    m = csr_plus_csr(
        x.indptr.size - 1, x.ncols, x.indptr, x.indices, xv.view(whole), y.indptr, y.indices,
        yv.view(whole), indptr, indices, cx.view(whole),
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


def _same_pattern(x: Csr, y: Csr) -> bool:
    """Whether x and y store the same positions (the row pointers compared first: cheap)."""
    return (
        x.indices.shape[0] == y.indices.shape[0]
        and np.array_equal(x.indptr, y.indptr)
        and np.array_equal(x.indices, y.indices)
    )


def merge(x: Csr, y: Csr, dtype: np.dtype) -> Csr:
    """``x / y`` of two canonical CSR patterns of one shape, as `dtype` (floating or complex),
    on the union of the patterns: a `Csr` of int64 row pointers, indices of the wider index
    dtype of the operands, and buffers of its own."""
    xd = x.data.astype(dtype, copy=False)
    yd = y.data.astype(dtype, copy=False)
    index = np.promote_types(x.indices.dtype, y.indices.dtype)
    x, y = _with_index(x, index)._replace(data=xd), _with_index(y, index)._replace(data=yd)
    if _same_pattern(x, y):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
            quotient = np.divide(xd, yd)
        return Csr(x.indptr.astype(np.int64), x.indices.copy(), quotient, x.ncols)
    nrows = x.indptr.size - 1
    maxnnz = xd.shape[0] + yd.shape[0]
    data = np.empty((maxnnz, *xd.shape[1:]), dtype=dtype)
    indices = np.empty(maxnnz, dtype=index)
    indptr = np.zeros(nrows + 1, dtype=np.int64)
    floats = dtype in FLOAT_DTYPES and xd.ndim == 1
    ahead = x.indptr.astype(np.int64) + y.indptr  # entries of x and y before each row
    # the entries of each row in x and y together (the float encoding's rows with fewer hold
    # positions stored on both sides)
    apart = np.diff(ahead) if floats else None
    if floats:  # each thread's first block is small: it tells the encoding of the others
        bounds = _row_blocks(ahead, FLOAT_BLOCK_ENTRIES, FLOAT_BLOCK_ENTRIES // 16).tolist()
    else:
        bounds = _row_blocks(ahead, BLOCK_ENTRIES).tolist()
    before = [int(ahead[r]) for r in bounds]  # entries before block b
    blocks = len(bounds) - 1
    # blocks are claimed one at a time, by this thread from the front and by the helper from
    # the back, so that neither waits long for the other when one is slowed down
    claimed = [0, blocks]  # the next block from the front; the end of those left
    claiming = threading.Lock()

    def claim(front: bool) -> int | None:
        with claiming:
            if claimed[0] >= claimed[1]:
                return None
            if front:
                claimed[0] += 1
                return claimed[0] - 1
            claimed[1] -= 1
            return claimed[1]

    def run(front: bool) -> tuple[dict[int, int], list[tuple[np.ndarray, np.ndarray]]]:
        """Merge the blocks claimed from the front (each one after the one before: no gap)
        or from the back (block b from offset before[b], where it would start if no position
        were stored in both); returns the number of entries of each block merged, and the
        rows to divide again (`_merge_block`)."""
        rows = max(bounds[b + 1] - bounds[b] for b in range(blocks))
        span = max(before[b + 1] - before[b] for b in range(blocks))
        bufs = _Buffers(span, rows, index, floats)
        merged = {}
        nnz = 0
        while (b := claim(front)) is not None:
            r0, r1 = bounds[b], bounds[b + 1]
            offset = nnz if front else before[b]
            m = _merge_block(x, y, r0, r1, bufs, indices, data, offset, apart)
            np.add(bufs.indptr[1 : r1 - r0 + 1], np.int64(offset), out=indptr[r0 + 1 : r1 + 1])
            merged[b] = m
            nnz = offset + m
        return merged, bufs.again

    helper = helper_thread() if blocks >= 2 and maxnnz >= HELPER_MIN_ENTRIES else None
    job = helper.try_submit(run, False) if helper is not None else None
    try:
        merged, again = run(True) if blocks else ({}, [])
    finally:
        from_back, again_back = job.result() if job is not None else ({}, [])
    if again or again_back:
        # once, on this thread, before the helper's blocks move: the two threads finish
        # their blocks together, and dividing their rows again at once would make them wait
        # for each other's GIL
        _divide_again(x, y, again + again_back, data)
    nnz = sum(merged.values())
    # the helper's blocks move down to follow this thread's
    for b in sorted(from_back):
        gap, m = before[b] - nnz, from_back[b]
        if gap:
            indices[nnz : nnz + m] = indices[before[b] : before[b] + m]
            data[nnz : nnz + m] = data[before[b] : before[b] + m]
            indptr[bounds[b] + 1 : bounds[b + 1] + 1] -= gap
        nnz += m
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


def coo_indices(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """The (2, nnz) int64 coordinates (row, column) of CSR arrays `indptr`, `indices` (a
    PyTorch COO tensor's indices)."""
    n = int(indices.shape[0])
    out = np.empty((2, n), dtype=np.int64)
    out[0] = rows_of(np.asarray(indptr), n)
    out[1] = indices
    return out


def divide_coo(
    xc: np.ndarray,
    xv: np.ndarray,
    yc: np.ndarray,
    yv: np.ndarray,
    shape: tuple[int, int],
    dtype: Any,
) -> tuple[np.ndarray, np.ndarray]:
    """(coordinates, values) of x / y for two coalesced COO operands of 2-D sparse `shape`
    (coordinates ``xc``, ``yc``: (2, n) int64, rows then columns): `divide_csr` on their row
    pointers, then `coo_indices`, PyTorch's 2-D COO tensors in one hand-over."""
    bounds = np.arange(shape[0] + 1)
    xptr, yptr = np.searchsorted(xc[0], bounds), np.searchsorted(yc[0], bounds)
    indptr, indices, data = divide_csr(xptr, xc[1], xv, yptr, yc[1], yv, shape[1], dtype)
    return coo_indices(indptr, indices), data
