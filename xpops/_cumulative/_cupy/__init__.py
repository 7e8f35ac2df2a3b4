"""CuPy engine of logcumsumexp: six CUDA kernels in three families, chosen by the shape and
dtype of the scan.

Every kernel scans pairs ``(m, s)`` standing for ``m + log(s)``. A run of consecutive elements
is summed against one reference, a maximum ``ref``: one ``exp(x - ref)`` per element, plain
running sums, and one ``log`` per output once the prefix of everything before the run has been
folded in (``R + log(a + c_k * b)``). This *fast path* is exact whenever no output of the run
can underflow against ``ref``: prefix sums only grow, so it is enough that the first output, or
the prefix, is within THRESHOLD (60 in float32, 650 in float64) of ``ref``. Otherwise (NaN,
+-inf, everything -inf so far, larger jumps) the run takes the *exact path*: pairwise
``combine`` with every special value handled.

* ``tiles`` (`_tiles`): long rows (1-D input, or few rows): a block scans a tile held in
  registers, read and written as coalesced vectors, and gets the sum of all earlier tiles of
  its row by decoupled look-back (Merrill & Garland, 2016), so the input is read once and the
  output written once. float32.
* ``tiles_staged`` (`_tiles`): the same scheme for float64, the tile copied to shared memory by
  cp.async and scanned there in rolled loops (short code, no registers held by the tile).
* ``group_rows`` (`_rows`): rows of up to 1024 float32 / 512 float64 elements along the
  contiguous axis: a group of lanes a row, the row in registers, scanned with warp shuffles.
* ``rows`` (`_rows`): many longer short rows (float64 up to 1024 elements): a thread per row,
  the rows staged through shared memory a chunk of columns at a time, the carry in registers.
* ``column_blocks`` (`_columns`): a strided axis with many columns: a block owns 32 adjacent
  columns for the whole axis, its warps take consecutive runs of rows and the carry moves down
  in registers.
* ``columns`` (`_columns`): a strided axis with few columns: a thread per column, tiles of rows
  chained along the axis by decoupled look-back per column.

`reverse` maps logical index ``l`` to ``L - 1 - l`` in the loads and stores; `exclusive` shifts
the scan by one within registers. Neither copies the data. Each family is compiled on its own
(a module per family and dtype, on first use) from the device helpers of `_device` and its own
kernels. Complex input has no kernel: it runs the log-depth scan of the generic engine
(`.._logdepth`) in CuPy operations.

For the Dask engine: `logcumsumexp_from` (a scan started from a carry) and `total` (the
log-sum-exp along the axis, by the reduction kernels of `_totals` for long rows).
"""

import math

import cupy

from ..._lib import _compat
from ..._lib._dtypes import dtype_name
from .._logdepth import log_depth_scan
from . import _columns, _rows, _tiles, _totals

__all__ = ["choose_kernel", "logcumsumexp", "logcumsumexp_from", "total"]

# The kernel choice, measured on an H100 (share of the copy rate, 2**28 float32 unless said).
# Below COLUMN_BLOCKS_MIN_LANES columns (512 blocks) the columns kernel is faster. H100,
# float32 axis 0: (8192, 32768) column_blocks 82-86%, columns 67-74%; (65536, 4096) 40-42%
# and 54-58%. H200, the same axis: (16384, 8192) column_blocks 58%, columns 57%; (65536, 4096)
# 38% and 54%; (262144, 1024) 13% and 45%.
COLUMN_BLOCKS_MIN_LANES = 16384
# The rows kernel (a thread per row) takes rows up to ROWS_KERNEL_MAX_LEN long when there are
# enough of them to fill the GPU; otherwise the tiles kernel splits rows among blocks. Measured
# on an H100, float32, share of the copy rate: (2**20, 64) rows 74%; (65536, 512) rows 49%,
# tiles 14%; (8192, 2048) rows 10% (64 blocks), tiles 38%; (8192, 32768) tiles 78%.
ROWS_KERNEL_MAX_LEN = 1024
ROWS_KERNEL_MIN_ROWS = 16384
# Which dtypes scan long rows with tiles_staged rather than the register tiles kernel: float64,
# whose exp and log unrolled over a register tile crowd the instruction cache (see `_tiles`).
TILES_STAGED = {"float32": False, "float64": True}


def choose_kernel(shape: tuple[int, ...], axis: int) -> str:
    """Which kernel scans `axis` of a C-contiguous array of `shape`."""
    inner = math.prod(shape[axis + 1 :])
    outer = math.prod(shape[:axis])
    if inner > 1:
        return "column_blocks" if outer * inner >= COLUMN_BLOCKS_MIN_LANES else "columns"
    short = shape[axis] <= ROWS_KERNEL_MAX_LEN and outer >= ROWS_KERNEL_MIN_ROWS
    return "rows" if short else "tiles"


def _kind(shape: tuple[int, ...], axis: int, dtype_name: str) -> str:
    """The kernel that scans `axis` of a real C-contiguous array: `choose_kernel`'s, with
    group_rows for contiguous rows it holds (however many rows: a few short rows leave most of
    a tile idle), and the tiles scheme's staged form where the dtype runs it (TILES_STAGED)."""
    kind = choose_kernel(shape, axis)
    if kind in ("rows", "tiles") and shape[axis] <= _rows.group_rows_max_len(dtype_name):
        return "group_rows"
    return "tiles_staged" if kind == "tiles" and TILES_STAGED[dtype_name] else kind


def _tiles_kind(x: cupy.ndarray, axis: int) -> str | None:
    """The tiles kernel that scans `axis` of `x` (real, C-contiguous), or None if another does."""
    kind = _kind(x.shape, axis, dtype_name(x.dtype))
    return kind if kind in ("tiles", "tiles_staged") else None


# log(exp(c) + exp(y)) with the scan's special values (those of `combine`)
_add_carry = cupy.ElementwiseKernel(
    "T c, T y",
    "T out",
    """
    if (isnan(c) || isnan(y)) {
        out = c + y;
    } else if (isinf(c) && c < 0) {
        out = y;
    } else if (isinf(y) && y < 0) {
        out = c;
    } else if (isinf(c) || isinf(y)) {
        out = c + y;  // +inf
    } else {
        out = (c > y ? c : y) + log1p(exp(-fabs(c - y)));
    }
    """,
    "xpops_logcumsumexp_add_carry",
)


def _row_carries(carry: cupy.ndarray, x: cupy.ndarray, axis: int) -> cupy.ndarray:
    """`carry` (the shape of `x` with `axis` of length 1) as one contiguous value a row."""
    shape = (*x.shape[:axis], 1, *x.shape[axis + 1 :])
    return cupy.ascontiguousarray(cupy.broadcast_to(carry, shape)).reshape(-1)


def logcumsumexp_from(
    x: cupy.ndarray, carry: cupy.ndarray, axis: int, exclusive: bool, reverse: bool
) -> cupy.ndarray:
    """`logcumsumexp` of `x` (float32/float64, C-contiguous, not empty) started from `carry`
    (the shape of `x` with `axis` of length 1): as if `carry` stood before `x` along `axis`
    (after it when `reverse`), which is left out of the result. On the tiles kernels the carry
    enters each row's first tile, and the scan reads and writes each element once; the other
    kernels scan, then add the carry with ``logaddexp`` (a second read and write)."""
    carry = cupy.asarray(carry, dtype=x.dtype)
    kind = _tiles_kind(x, axis)
    if kind is None:
        out = logcumsumexp(x, axis, exclusive, reverse)
        return _add_carry(carry, out, out)
    out = cupy.empty(x.shape, x.dtype)
    rows = math.prod(x.shape[:axis])
    carries = _row_carries(carry, x, axis)
    _tiles.scan(x, out, rows, x.shape[axis], exclusive, reverse, kind, carry=carries)
    return out


def total(x: cupy.ndarray, axis: int, reverse: bool) -> cupy.ndarray:
    """log(sum(exp(x))) along `axis` of `x` (float32/float64, C-contiguous, not empty), kept as
    a dimension of length 1, with the scan's special values: where the tiles kernels would scan
    (long rows), a reduction that reads each element once and writes one value a part of a
    row; otherwise the scan's last element (first, when `reverse`)."""
    kind = _tiles_kind(x, axis)
    shape = (*x.shape[:axis], 1, *x.shape[axis + 1 :])
    if kind is None:
        scanned = logcumsumexp(x, axis, False, reverse)
        index = [slice(None)] * x.ndim
        index[axis] = slice(0, 1) if reverse else slice(-1, None)
        return scanned[tuple(index)]
    rows, L = math.prod(x.shape[:axis]), x.shape[axis]
    return _totals.row_totals(x, rows, L).reshape(shape)


def logcumsumexp(
    x: cupy.ndarray, axis: int, exclusive: bool, reverse: bool, kernel: str | None = None
) -> cupy.ndarray:
    """Scan `axis` of `x` (float32/float64/complex, ndim >= 1); arguments already validated.

    `kernel` (tests and benchmarks only) forces ``"tiles"``, ``"tiles_staged"``, ``"rows"``,
    ``"group_rows"``, ``"columns"`` or ``"column_blocks"``.
    """
    if x.dtype.kind == "c":  # no complex kernel: the log-depth scan in CuPy operations
        return log_depth_scan(x, axis, exclusive, reverse, _compat.array_namespace(x))
    x = cupy.ascontiguousarray(x)  # non-contiguous input: one copy, never a transpose
    out = cupy.empty(x.shape, x.dtype)  # x is C-contiguous; empty_like costs 4 us more
    if x.size == 0:
        return out
    name = dtype_name(x.dtype)
    shape = x.shape
    L = shape[axis]
    outer = math.prod(shape[:axis])
    inner = math.prod(shape[axis + 1 :])
    kind = kernel or _kind(shape, axis, name)
    if kind == "columns":
        _columns.scan_columns(x, out, outer, L, inner, exclusive, reverse)
    elif kind == "column_blocks":
        _columns.scan_column_blocks(x, out, outer, L, inner, exclusive, reverse)
    elif kind == "rows":
        _rows.scan(x, out, outer * inner, L, exclusive, reverse)
    elif kind == "group_rows":
        _rows.scan_groups(x, out, outer * inner, L, exclusive, reverse)
    else:
        _tiles.scan(x, out, outer * inner, L, exclusive, reverse, kind)
    return out
