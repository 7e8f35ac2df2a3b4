"""The match family of sparse.divide's kernels (steps 1 to 4 of `_cupyx_kernels`): for each
entry of `x`, its lower bound in `y` and whether `y` stores it too, then the tiles' match
prefixes and the union's row pointers. Index arrays only: compiled per index dtype.
"""

from typing import Any

import cupy
import numpy as np

from .._lib._cuda import INDEX_C_TYPES
from .._lib._dtypes import dtype_name
from ._cupyx_kernels import TILING, compile_family

__all__ = ["match_kernels"]

_SOURCE = (
    r"""
// The largest r in [lo, hi] with ptr[r] <= e: the row of CSR entry e (empty rows skipped).
template <typename I>
__device__ __forceinline__ long long row_in(const I* __restrict__ ptr, long long lo, long long hi,
                                            long long e) {
    while (lo < hi) {
        const long long mid = (lo + hi + 1) >> 1;
        if ((long long)ptr[mid] <= e) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// The first p in [lo, hi) with idx[p] >= col, or hi.
template <typename I>
__device__ __forceinline__ long long lower_bound(const I* __restrict__ idx, long long lo,
                                                 long long hi, I col) {
    while (lo < hi) {
        const long long mid = (lo + hi) >> 1;
        if (idx[mid] < col) lo = mid + 1; else hi = mid;
    }
    return lo;
}
"""
    + TILING
    + r"""
// Row r of x writes itself as the first row of the tiles starting in it and as the last row
// of the tiles ending in it (a thread a row, no searching: a binary search a tile is about 3x
// slower). Also zeroes the look-back flags and block tickets of `scan` and the run queue's
// counter.
template <typename I>
__global__ void xpops_sparse_divide_tile_rows(const I* __restrict__ xptr, const long long rows,
                                              const long long nx, I* __restrict__ first,
                                              I* __restrict__ last,
                                              unsigned long long* __restrict__ status,
                                              unsigned long long* __restrict__ counters) {
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long chunks = ((nx + TILE - 1) / TILE + SCAN_TILE - 1) / SCAN_TILE;
    for (long long i = r; i < chunks; i += (long long)gridDim.x * blockDim.x) status[i] = 0ull;
    if (r < 2) counters[r] = 0ull;
    if (r >= rows) return;
    const long long e0 = xptr[r], e1 = xptr[r + 1];
    for (long long w = e0 / TILE; w * TILE < e1; ++w) {  // the tiles overlapping the row
        if (w * TILE >= e0) first[w] = I(r);
        if (min(w * TILE + TILE, nx) <= e1) last[w] = I(r);
    }
}

template <typename I> struct Tile {
    const I* ptr; const I* pptr; const I* pidx;  // global
    const I* sptr; const I* spptr; const I* seg;  // shared
    long long base, last, r0, r1, s0;
    bool rows_staged, staged;
};

template <typename I>
__device__ __forceinline__ Tile<I> tile_open(
    const I* __restrict__ ptr, const I* __restrict__ idx, const I* __restrict__ pptr,
    const I* __restrict__ pidx, const long long n, const long long base, const long long r0,
    const long long r1, I* __restrict__ sptr, I* __restrict__ spptr, I* __restrict__ seg,
    const int lane, I (&col)[ITEMS]) {
    Tile<I> t{ptr, pptr, pidx, sptr, spptr, seg, base, min(base + TILE, n) - 1, r0, r1,
              0, false, false};
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const long long e = base + 32 * k + lane;
        col[k] = e <= t.last ? idx[e] : I(0);
    }
    const long long nr = r1 - r0 + 2;  // row pointers r0 .. r1 + 1
    t.rows_staged = nr <= NROWS + 2;
    if (t.rows_staged) {
        for (long long i = lane; i < nr; i += 32) {
            sptr[i] = ptr[r0 + i];
            spptr[i] = pptr[r0 + i];
        }
    }
    t.s0 = pptr[r0];
    const long long s1 = pptr[r1 + 1];
    t.staged = s1 - t.s0 <= SEG;
    if (t.staged) {
        for (long long i = t.s0 + lane; i < s1; i += 32) seg[i - t.s0] = pidx[i];
    }
    __syncwarp();
    return t;
}

// Entry e (column col) of the tile: its lower bound p in the partner, and whether the partner
// stores the same position. `cursor` is the lane's row (relative to r0) of its previous entry:
// rows only advance along a lane's entries. Staged tiles search shared memory with int offsets
// (the searches are what bounds these kernels: they are instruction-bound).
template <typename I>
__device__ __forceinline__ bool tile_entry(const Tile<I>& t, const long long e, const I col,
                                           int& cursor, long long& p) {
    if (t.rows_staged && t.staged) {
        const I* __restrict__ sptr = t.sptr;
        int r = cursor;
        if (sptr[r + 1] <= I(e)) {  // a later row: binary search the rest
            int lo = r + 1, hi = (int)(t.r1 - t.r0);
            while (lo < hi) {
                const int mid = (lo + hi + 1) >> 1;
                if (sptr[mid] <= I(e)) lo = mid; else hi = mid - 1;
            }
            r = lo;
        }
        cursor = r;
        const I* __restrict__ seg = t.seg;
        int lo = (int)(t.spptr[r] - I(t.s0));
        const int hi = (int)(t.spptr[r + 1] - I(t.s0));
        int h = hi;
        while (lo < h) {
            const int mid = (lo + h) >> 1;
            if (seg[mid] < col) lo = mid + 1; else h = mid;
        }
        p = t.s0 + lo;
        return lo < hi && seg[lo] == col;
    }
    long long lo, hi;
    if (t.rows_staged) {
        const long long r = row_in(t.sptr, 0, t.r1 - t.r0, e);
        lo = t.spptr[r];
        hi = t.spptr[r + 1];
    } else {
        const long long r = row_in(t.ptr, t.r0, t.r1, e);
        lo = t.pptr[r];
        hi = t.pptr[r + 1];
    }
    if (t.staged) {
        p = t.s0 + lower_bound(t.seg, lo - t.s0, hi - t.s0, col);
        return p < hi && t.seg[p - t.s0] == col;
    }
    p = lower_bound(t.pidx, lo, hi, col);
    return p < hi && t.pidx[p] == col;
}

#define TILE_SHARED                                                \
    __shared__ I seg_all[THREADS / 32][SEG];                       \
    __shared__ I sptr_all[THREADS / 32][NROWS + 2];                \
    __shared__ I spptr_all[THREADS / 32][NROWS + 2];               \
    I* seg = seg_all[threadIdx.x >> 5];                            \
    I* sptr = sptr_all[threadIdx.x >> 5];                          \
    I* spptr = spptr_all[threadIdx.x >> 5];

// Pass 1, over the tiles of x: each entry's lower bound in y (`lb`), one word of match bits
// per 32 entries (bit l: y stores the lane's position too) and the matches before each tile.
template <typename I>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
xpops_sparse_divide_match(const I* __restrict__ xptr, const I* __restrict__ xidx,
                          const I* __restrict__ yptr, const I* __restrict__ yidx,
                          const I* __restrict__ first, const I* __restrict__ last,
                          const long long nx, I* __restrict__ lb, unsigned* __restrict__ bits,
                          I* __restrict__ counts) {
    TILE_SHARED
    const int lane = threadIdx.x & 31;
    const long long warps = ((long long)gridDim.x * blockDim.x) >> 5;
    const long long tiles = (nx + TILE - 1) / TILE;
    for (long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < tiles;
         w += warps) {
        I col[ITEMS];
        const Tile<I> t = tile_open(xptr, xidx, yptr, yidx, nx, w * TILE, first[w], last[w],
                                    sptr, spptr, seg, lane, col);
        I count = I(0);
        int cursor = 0;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const long long e = t.base + 32 * k + lane;
            long long p = 0;
            const bool match = e <= t.last && tile_entry(t, e, col[k], cursor, p);
            if (e <= t.last) lb[e] = I(p);
            const unsigned b = __ballot_sync(0xffffffffu, match);
            if (lane == 0) bits[w * ITEMS + k] = b;
            count += I(__popc(b));
        }
        if (lane == 0) counts[w] = count;
        __syncwarp();  // the next tile restages
    }
}

// P[i] = matches in the tiles before tile i (P[0] = 0, n + 1 values): a block scans SCAN_TILE
// counts, four a thread, and adds the counts of the blocks before it by decoupled look-back
// (Merrill & Garland 2016). Blocks take their chunks in order (a ticket a block), so that a
// block looks back only at blocks already running. The tiles number nx / 256, a few tens of
// thousands, on which (H100) this kernel takes 6 us, cupy.cumsum 30-40 us, one block of 1024
// threads 26 us, and a look-back inside `match` (a warp a tile) 60 us, its warps waiting on
// their predecessors.
template <typename I>
__global__ void __launch_bounds__(THREADS)
xpops_sparse_divide_scan(const I* __restrict__ counts, const long long n, I* __restrict__ P,
                         unsigned long long* __restrict__ tickets,
                         unsigned long long* __restrict__ status) {
    __shared__ long long warp_sums[THREADS / 32];
    __shared__ unsigned long long chunk;
    __shared__ long long chunk_before;
    const unsigned full = 0xffffffffu;
    const int t = threadIdx.x, lane = t & 31, wid = t >> 5;
    if (t == 0) chunk = atomicAdd(tickets, 1ull);
    __syncthreads();
    const long long b = (long long)chunk, first = b * SCAN_TILE + 4 * t;
    long long v[4], sum = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        v[j] = first + j < n ? (long long)counts[first + j] : 0;
        sum += v[j];
    }
    long long incl = sum;  // inclusive scan over the warp, then over the warps' totals
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const long long u = __shfl_up_sync(full, incl, d);
        if (lane >= d) incl += u;
    }
    if (lane == 31) warp_sums[wid] = incl;
    __syncthreads();
    if (wid == 0) {
        long long w = lane < THREADS / 32 ? warp_sums[lane] : 0;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const long long u = __shfl_up_sync(full, w, d);
            if (lane >= d) w += u;
        }
        if (lane < THREADS / 32) warp_sums[lane] = w;
        const long long total = __shfl_sync(full, w, THREADS / 32 - 1);
        // status[b]: the chunk's total (flag COUNTED), then the sum up to and including it
        // (flag SUMMED); warp 0 reads 32 chunks back at a time
        volatile unsigned long long* st = status;
        const unsigned long long COUNTED = 1ull << 62, SUMMED = 2ull << 62, VALUE = COUNTED - 1;
        if (lane == 0 && b > 0) st[b] = COUNTED | (unsigned long long)total;
        long long before = 0;
        for (long long j = b - 1; b > 0; j -= 32) {
            unsigned long long word;
            do {  // until every chunk of the window has its total
                word = j - lane >= 0 ? st[j - lane] : SUMMED;
            } while (__any_sync(full, (word >> 62) == 0));
            const unsigned summed = __ballot_sync(full, (word >> 62) == 2);
            long long u = (long long)(word & VALUE);
            if (summed && lane > __ffs(summed) - 1) u = 0;  // past the nearest summed chunk
#pragma unroll
            for (int d = 16; d > 0; d >>= 1) u += __shfl_xor_sync(full, u, d);
            before += u;
            if (summed) break;
        }
        if (lane == 0) {
            st[b] = SUMMED | (unsigned long long)(before + total);
            chunk_before = before;
        }
    }
    __syncthreads();
    long long run = chunk_before + incl - sum + (wid ? warp_sums[wid - 1] : 0);
    if (first == 0) P[0] = I(0);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        run += v[j];
        if (first + j < n) P[first + j + 1] = I(run);
    }
}

// Matched entries of x before entry e (0 <= e <= nx), from the tile prefix and match bits.
template <typename I>
__device__ __forceinline__ long long matched_before(const unsigned* __restrict__ bits,
                                                    const I* __restrict__ P, long long e) {
    const long long tile = e / TILE;
    const int k = (int)((e % TILE) / 32), lane = (int)(e % 32);
    long long c = P[tile];
    for (int j = 0; j < k; ++j) c += __popc(bits[tile * ITEMS + j]);
    return c + __popc(bits[tile * ITEMS + k] & ((1u << lane) - 1u));
}

// The union's row pointers: row r starts after the entries of x and of y before it, less the
// positions they share.
template <typename I>
__global__ void xpops_sparse_divide_indptr(const I* __restrict__ xptr, const I* __restrict__ yptr,
                                           const unsigned* __restrict__ bits,
                                           const I* __restrict__ P, const long long rows,
                                           const long long nx, I* __restrict__ optr) {
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r > rows) return;
    const long long e = xptr[r];
    // e == nx may be a whole tile past the last one: all matches of x are before it
    const long long x_tiles = (nx + TILE - 1) / TILE;
    const long long before =
        e / TILE >= x_tiles ? (long long)P[x_tiles] : matched_before(bits, P, e);
    optr[r] = I(e + yptr[r] - before);
}
"""
)


# FastKernel signatures (p pointer, q 64-bit integer), one letter a kernel parameter
_SIGNATURES = {"tile_rows": "pqqpppp", "match": "ppppppqppp", "scan": "pqppp", "indptr": "ppppqqp"}


@cupy.memoize(for_each_device=True)
def match_kernels(index: np.dtype) -> dict[str, Any]:
    """``tile_rows``, ``match``, ``scan`` and ``indptr`` for indices of dtype `index`, compiled
    on first use for the current device. Keyed by the dtype itself: NumPy computes a dtype's
    ``name`` in Python, about 2 us a call."""
    i = INDEX_C_TYPES[dtype_name(index)]
    names = {
        "tile_rows": f"xpops_sparse_divide_tile_rows<{i}>",
        "match": f"xpops_sparse_divide_match<{i}>",
        "scan": f"xpops_sparse_divide_scan<{i}>",
        "indptr": f"xpops_sparse_divide_indptr<{i}>",
    }
    return compile_family(_SOURCE, names, _SIGNATURES)
