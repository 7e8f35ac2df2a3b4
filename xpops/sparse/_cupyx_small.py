"""The small-operand kernels of sparse.divide on cupyx: the union of two canonical CSR
patterns in two launches, instead of the six of `_cupyx_kernels`' tiled pipeline.

A small call is bound by the host and by the chain of dependent launches, not by the GPU's
work: on an H200 host one launch with a host synchronisation took 19 us and six of them
44 us, where the kernels of 1000 x 1000 operands of 10^4 entries each have almost nothing
to do. Here both operands are merged along a merge path (Odeh, Green, Mwassi, Shmueli and
Birk 2012, "Merge Path - Parallel Merging Made Simple") over their row-major keys: thread g
of the grid takes the g-th stretch of SMALL_ITEMS entries of the merged sequence, found by
a binary search over the rows (the rows before row r hold the first ``x.indptr[r] +
y.indptr[r]`` entries), then one over the columns of the row it starts in; so the work is
balanced whatever the row lengths. ``small_count`` counts each stretch's union entries;
``small_write`` sums the counts before each thread and writes its entries and the row
pointers of the rows they start. Both kernels stage the operands' row pointers in shared
memory (the key of an entry is its row, found there, and its column), which bounds the rows
(`SMALL_ROWS`).

Each thread reads and writes its own stretch, so a warp's accesses are not coalesced, and
each thread waits on a chain of dependent loads (its searches): these kernels are bound by
latency, not by memory bandwidth, which is why they serve small operands only
(`SMALL_ENTRIES`). A thread's columns are loaded together before its walk, and the
searches over a row's columns probe three places a step. The threads are spread over
blocks of SMALL_BLOCK, one stretch each, rather than looping in one block: there each warp
instruction's 32 cache lines would queue on a single multiprocessor's load and store unit.
"""

from typing import Any

import cupy
import numpy as np

from .._lib._cuda import INDEX_C_TYPES, c_type
from .._lib._dtypes import dtype_name
from ._cupyx_kernels import QUOTIENT, compile_family

__all__ = ["SMALL_BLOCK", "SMALL_ENTRIES", "SMALL_ITEMS", "SMALL_ROWS", "small_kernels"]

SMALL_BLOCK = 256  # threads a block
SMALL_ITEMS = 8  # entries of the merged sequence a thread
SMALL_ROWS = 2047  # rows at most: both operands' row pointers staged (2 x 2048 x 8 bytes)
# Entries of both operands at most. On an H200 host, 2000 x 2000 operands of 32000 + 32000
# entries took 82 us a call here, against 95-98 us through the tiles.
SMALL_ENTRIES = 2**16

_SOURCE = (
    QUOTIENT
    + f"""
#define SMALL_BLOCK {SMALL_BLOCK}
#define SMALL_ITEMS {SMALL_ITEMS}
#define SMALL_ROWS {SMALL_ROWS}
"""
    + r"""
// The largest r in [lo, hi] with ptr[r] <= e: the row of entry e (empty rows skipped).
template <typename I>
__device__ __forceinline__ int row_of(const I* __restrict__ ptr, int lo, int hi, long long e) {
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if ((long long)ptr[mid] <= e) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// Whether entry (ra, ca) comes before entry (rb, cb) in row-major order, or is the same.
template <typename I>
__device__ __forceinline__ bool not_after(int ra, I ca, int rb, I cb) {
    return ra < rb || (ra == rb && ca <= cb);
}

// The row of an entry e of an operand (-1 for e < 0).
template <typename I>
__device__ __forceinline__ int row_at(const I* __restrict__ ptr, int rows, long long e) {
    return e < 0 ? -1 : row_of(ptr, 0, rows - 1, e);
}

// Both operands' row pointers (rows + 1 each) into shared memory, every load of a thread
// issued before its first store.
#define STAGED ((SMALL_ROWS + SMALL_BLOCK) / SMALL_BLOCK)  // row pointers a thread stages
template <typename I>
__device__ __forceinline__ void stage_rows(const I* __restrict__ xptr, const I* __restrict__ yptr,
                                           const int rows, I* __restrict__ sx,
                                           I* __restrict__ sy) {
    I vx[STAGED], vy[STAGED];
#pragma unroll
    for (int k = 0; k < STAGED; ++k) {
        const int r = threadIdx.x + k * SMALL_BLOCK;
        vx[k] = r <= rows ? xptr[r] : I(0);
        vy[k] = r <= rows ? yptr[r] : I(0);
    }
#pragma unroll
    for (int k = 0; k < STAGED; ++k) {
        const int r = threadIdx.x + k * SMALL_BLOCK;
        if (r <= rows) {
            sx[r] = vx[k];
            sy[r] = vy[k];
        }
    }
    __syncthreads();
}

// The entries of x before entry d0 of the merged sequence of x's and y's entries (x's first
// where both store a position). The rows before row R hold the first sx[R] + sy[R] <= d0
// entries of the sequence; the rest, k, come from row R: a merge path on its columns alone.
template <typename I>
__device__ __forceinline__ long long x_before(const I* __restrict__ sx, const I* __restrict__ sy,
                                              const I* __restrict__ xidx,
                                              const I* __restrict__ yidx, const int rows,
                                              const long long nx, const long long d0) {
    int R = 0;
    for (int hi = rows; R < hi;) {
        const int mid = (R + hi + 1) >> 1;
        if ((long long)sx[mid] + (long long)sy[mid] <= d0) R = mid; else hi = mid - 1;
    }
    if (R == rows) return nx;
    const long long xa = sx[R], ya = sy[R], k = d0 - xa - ya;
    const long long xl = (long long)sx[R + 1] - xa, yl = (long long)sy[R + 1] - ya;
    // The first i in [lo, hi] whose x entry comes after y's entry k - 1 - i (a predicate true
    // then false along the row): three probes a step, their six loads issued together.
    long long lo = k > yl ? k - yl : 0, hi = k < xl ? k : xl;
    const I* __restrict__ xs = xidx + xa;
    const I* __restrict__ ys = yidx + ya + k - 1;
    while (lo < hi) {
        const long long q1 = lo + (hi - lo) / 4, q2 = lo + (hi - lo) / 2;
        const long long q3 = lo + 3 * (hi - lo) / 4;
        const bool p1 = xs[q1] <= ys[-q1], p2 = xs[q2] <= ys[-q2], p3 = xs[q3] <= ys[-q3];
        if (!p1) {
            hi = q1;
        } else if (!p2) {
            lo = q1 + 1;
            hi = q2;
        } else if (!p3) {
            lo = q2 + 1;
            hi = q3;
        } else {
            lo = q3 + 1;
        }
    }
    return xa + lo;
}

// One operand's side of a thread's walk: its next entry e, that entry's row, and the columns
// of its next SMALL_ITEMS entries, loaded together and shifted out one by one (registers: no
// dependent load a step).
template <typename I> struct Side {
    const I* ptr;  // staged row pointers
    long long n, e;
    int rows, row;
    I col[SMALL_ITEMS];

    __device__ __forceinline__ Side(const I* ptr_, const I* __restrict__ idx, long long n_,
                                    int rows_, long long e0)
        : ptr(ptr_), n(n_), e(e0), rows(rows_), row(0) {
#pragma unroll
        for (int k = 0; k < SMALL_ITEMS; ++k) col[k] = e0 + k < n ? idx[e0 + k] : I(0);
        if (e < n) row = row_of(ptr, 0, rows - 1, e);
    }
    __device__ __forceinline__ bool more() const { return e < n; }
    __device__ __forceinline__ void next() {
#pragma unroll
        for (int k = 0; k + 1 < SMALL_ITEMS; ++k) col[k] = col[k + 1];
        ++e;
        if (e < n && (long long)ptr[row + 1] <= e) row = row_of(ptr, row + 1, rows - 1, e);
    }
};

// The union entries of a thread's stretch [d0, d1) of the merged sequence (at most
// SMALL_ITEMS), i0 entries of x before it. With WRITE they are written from position o on,
// with the row pointers of the rows they start (and, with `last`, of the rows after the
// union's end); the quotients after the walk, their loads issued together.
template <bool WRITE, typename T, typename I>
__device__ __forceinline__ long long walk(
    const I* __restrict__ sx, const I* __restrict__ sy, const I* __restrict__ xidx,
    const T* __restrict__ xdat, const I* __restrict__ yidx, const T* __restrict__ ydat,
    const int rows, const long long nx, const long long ny, const long long d0,
    const long long d1, const long long i0, const long long o, I* __restrict__ optr,
    I* __restrict__ oidx, T* __restrict__ odat, const bool last) {
    const long long j0 = d0 - i0;
    Side<I> x(sx, xidx, nx, rows, i0), y(sy, yidx, ny, rows, j0);
    // x's last entry before the stretch (a y entry at its position is skipped), and the row
    // of the union's last entry before it
    int taken_row = row_at(sx, rows, i0 - 1);
    I taken_col = i0 > 0 ? xidx[i0 - 1] : I(0);
    int prev_row = max(taken_row, row_at(sy, rows, j0 - 1));
    long long from_x[SMALL_ITEMS], from_y[SMALL_ITEMS];  // each step's operand entries, or -1
    long long written = 0;
#pragma unroll
    for (int s = 0; s < SMALL_ITEMS; ++s) {
        from_x[s] = from_y[s] = -1;
        if (d0 + s >= d1) continue;
        bool emit = true;
        int row;
        I col;
        if (x.more() && (!y.more() || not_after(x.row, x.col[0], y.row, y.col[0]))) {
            from_x[s] = x.e;
            if (y.more() && x.row == y.row && x.col[0] == y.col[0]) from_y[s] = y.e;
            row = taken_row = x.row;
            col = taken_col = x.col[0];
            x.next();
        } else {
            row = y.row;
            col = y.col[0];
            emit = !(row == taken_row && col == taken_col);
            if (emit) from_y[s] = y.e;
            y.next();
        }
        if (!emit) continue;
        if (WRITE) {
            oidx[o + written] = col;
            for (int r = prev_row + 1; r <= row; ++r) optr[r] = I(o + written);  // rows started
            prev_row = row;
        }
        ++written;
    }
    if (WRITE) {
        long long at = o;
#pragma unroll
        for (int s = 0; s < SMALL_ITEMS; ++s) {
            if (from_x[s] < 0 && from_y[s] < 0) continue;
            const T a = from_x[s] >= 0 ? xdat[from_x[s]] : T(0);
            const T b = from_y[s] >= 0 ? ydat[from_y[s]] : T(0);
            odat[at++] = quotient(a, b);
        }
        if (last) {
            for (int r = prev_row + 1; r <= rows; ++r) optr[r] = I(o + written);
        }
    }
    return written;
}

// Step 1: for thread g of the grid, its stretch of SMALL_ITEMS entries of the merged sequence
// (fewer at its end): the entries of x before it, starts[g], and its count of union entries,
// counts[g].
template <typename I>
__global__ void __launch_bounds__(SMALL_BLOCK)
xpops_sparse_divide_small_count(const I* __restrict__ xptr, const I* __restrict__ xidx,
                                const I* __restrict__ yptr, const I* __restrict__ yidx,
                                const long long rows, const long long nx, const long long ny,
                                long long* __restrict__ counts, long long* __restrict__ starts) {
    __shared__ I sx[SMALL_ROWS + 1], sy[SMALL_ROWS + 1];
    stage_rows(xptr, yptr, (int)rows, sx, sy);
    const long long g = (long long)blockIdx.x * SMALL_BLOCK + threadIdx.x, n = nx + ny;
    const long long d0 = min(g * SMALL_ITEMS, n), d1 = min(d0 + SMALL_ITEMS, n);
    const long long i0 = x_before(sx, sy, xidx, yidx, (int)rows, nx, d0);
    starts[g] = i0;
    counts[g] = walk<false, float, I>(sx, sy, xidx, nullptr, yidx, nullptr, (int)rows, nx, ny,
                                      d0, d1, i0, 0, nullptr, nullptr, nullptr, false);
}

// Step 2: each thread's union entries written after those of the threads before it (the
// counts of the blocks before this one summed, the block's own scanned), with the row
// pointers optr (rows + 1) of the rows they start; the grid's last thread writes those of the
// rows after the union's last entry.
template <typename T, typename I>
__global__ void __launch_bounds__(SMALL_BLOCK)
xpops_sparse_divide_small_write(const I* __restrict__ xptr, const I* __restrict__ xidx,
                                const T* __restrict__ xdat, const I* __restrict__ yptr,
                                const I* __restrict__ yidx, const T* __restrict__ ydat,
                                const long long rows, const long long nx, const long long ny,
                                const long long* __restrict__ counts,
                                const long long* __restrict__ starts, I* __restrict__ optr,
                                I* __restrict__ oidx, T* __restrict__ odat) {
    __shared__ I sx[SMALL_ROWS + 1], sy[SMALL_ROWS + 1];
    __shared__ long long warp_sums[SMALL_BLOCK / 32];
    __shared__ long long block_before;
    const unsigned full = 0xffffffffu;
    const int t = threadIdx.x, lane = t & 31, wid = t >> 5;
    const long long first = (long long)blockIdx.x * SMALL_BLOCK, g = first + t;
    const long long count = counts[g], i0 = starts[g];
    long long before = 0;  // the counts of the threads of the blocks before this one
#pragma unroll 4
    for (long long k = t; k < first; k += SMALL_BLOCK) before += counts[k];
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) before += __shfl_xor_sync(full, before, d);
    if (lane == 0) warp_sums[wid] = before;
    stage_rows(xptr, yptr, (int)rows, sx, sy);  // its barrier orders warp_sums too
    if (t == 0) {
        long long b = 0;
        for (int w = 0; w < SMALL_BLOCK / 32; ++w) b += warp_sums[w];
        block_before = b;
    }
    __syncthreads();
    long long incl = count;  // the block's inclusive scan of the counts
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const long long u = __shfl_up_sync(full, incl, d);
        if (lane >= d) incl += u;
    }
    if (lane == 31) warp_sums[wid] = incl;
    __syncthreads();
    long long warps_before = 0;
    for (int w = 0; w < wid; ++w) warps_before += warp_sums[w];
    const long long n = nx + ny;
    const long long d0 = min(g * SMALL_ITEMS, n), d1 = min(d0 + SMALL_ITEMS, n);
    const bool last = g == (long long)gridDim.x * SMALL_BLOCK - 1;
    walk<true, T, I>(sx, sy, xidx, xdat, yidx, ydat, (int)rows, nx, ny, d0, d1, i0,
                     block_before + warps_before + incl - count, optr, oidx, odat, last);
}
"""
)


@cupy.memoize(for_each_device=True)
def small_kernels(dtype: np.dtype, index: np.dtype) -> dict[str, Any]:
    """``count`` and ``write`` for values of `dtype` and indices of dtype `index`
    (`_cuda.FastKernel`s), compiled on first use for the current device."""
    t, i = c_type(dtype_name(dtype), "complex"), INDEX_C_TYPES[dtype_name(index)]
    names = {
        "count": f"xpops_sparse_divide_small_count<{i}>",
        "write": f"xpops_sparse_divide_small_write<{t}, {i}>",
    }
    return compile_family(_SOURCE, names, {"count": "ppppqqqpp", "write": "ppppppqqqppppp"})
