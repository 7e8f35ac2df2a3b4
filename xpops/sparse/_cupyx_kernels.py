"""The CUDA kernels of sparse.divide on cupyx: the union of two canonical CSR patterns.

With both operands canonical CSR (sorted, unique column indices in each row), entries are in
row-major key order. Let ``lb[e]`` be the storage index in `y` of the first entry at or after
entry ``e`` of `x`, and ``C[e]`` the number of entries of `x` before ``e`` that `y` also
stores. Then the union entry made from ``e`` lands at ``e + lb[e] - C[e]``, the entries of `y`
between ``e`` and the next entry of `x` (a "run", all absent from `x`) follow it in order, and
row ``r`` of the union starts at ``x.indptr[r] + y.indptr[r] - C[x.indptr[r]]``. So:

1. ``tile_rows``: for each warp tile of 32 * ITEMS entries of `x`, the rows of its first and
   last entries (a thread a row of `x` writes them, no searching).
2. ``match``: per tile, the row pointers and `y`'s column indices of those rows are staged in
   shared memory, and each entry's ``lb`` found by binary search there; match bits (one word
   per 32 entries) and the tile's match count are written. This pass is instruction-bound:
   the searches use int offsets and a per-lane row cursor.
3. ``scan``: the tile counts into tile prefixes (a block a chunk, decoupled look-back).
4. ``indptr``: the union's row pointers, ``C`` at each row start from the prefixes and bits;
   its last element, the union's size, is the one host synchronisation, made after every
   kernel is queued (the result is written into buffers of nx + ny entries, then cut).
5. ``fill``: per tile, no searching: the tile's entries of `x` and their runs of `y` are one
   contiguous stretch of the result, written 32 consecutive positions a step (coalesced
   reads of `y`, coalesced writes); a run after the tile's last entry longer than RUN is
   queued in chunks of CHUNK for ``runs``, and tiles with long runs inside are written lane
   by lane (runs longer than RUN queued too).

Every warp does bounded work whatever the row lengths (long runs are spread over warps by the
queue), so power-law rows need no balancing. Kernel times on an H100 for two 10^5 x 10^5
float32 operands of 10^7 uniformly placed entries (Nsight Compute, one kernel at a time):
tile_rows 4 us (a binary search a tile instead: 11), match 101, scan 6 (one block of 1024
threads instead: 26; cupy.cumsum: 37), indptr 5, fill 173 (lane by lane: 284), runs 5.

Two helper kernels complete the family: ``sum_runs`` sums the entries of each distinct
position of a sorted operand that is not canonical, and ``values`` divides values element by
element (a scalar divisor, or an empty `x`).
"""

import cupy

from .._lib._cuda import INDEX_C_TYPES, c_type

__all__ = ["CHUNK", "ITEMS", "RUN", "THREADS", "kernels"]

# Launch constants. On an H100 (10^5 x 10^5, 10^7 + 10^7 float32 entries), capping registers
# at 64 (MIN_BLOCKS), staging the tile's rows in shared memory, and int offsets with a per-lane
# row cursor in the searches together make `match` about 1.9x faster than without them. ITEMS,
# RUN, CHUNK and the staging sizes are sensible values, not swept.
THREADS = 256  # threads a block of every kernel here
ITEMS = 8  # entries a lane in the warp tiles of the match and fill kernels
RUN = 32  # runs of y between two entries of x longer than this go to the `runs` kernel
CHUNK = 2048  # entries of y a queued chunk of a long run
SEG_BYTES = 2048  # shared memory a warp for the partner operand's indices of a tile's rows
ROW_BYTES = 1024  # shared memory a warp for each operand's row pointers of a tile's rows
MIN_BLOCKS = 4  # resident blocks an SM asked of the compiler (caps registers at 64)

_SOURCE = r"""
#include <cupy/complex.cuh>

// x / y with NumPy's semantics, so that the GPU and the CPU agree (also on complex x / 0).
__device__ __forceinline__ float quotient(float a, float b) { return a / b; }
__device__ __forceinline__ double quotient(double a, double b) { return a / b; }
template <typename R>
__device__ __forceinline__ complex<R> quotient(complex<R> a, complex<R> b) {
    const R ar = a.real(), ai = a.imag(), br = b.real(), bi = b.imag();
    if (fabs(br) >= fabs(bi)) {
        if (br == R(0) && bi == R(0)) {
            return complex<R>(ar / fabs(br), ai / fabs(br));
        }
        const R rat = bi / br, scl = R(1) / (br + bi * rat);
        return complex<R>((ar + ai * rat) * scl, (ai - ar * rat) * scl);
    }
    const R rat = br / bi, scl = R(1) / (bi + br * rat);
    return complex<R>((ar * rat + ai) * scl, (ai * rat - ar) * scl);
}

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

// Entries are taken in warp tiles of TILE = 32 * ITEMS consecutive ones of one operand (lane
// l holds base + 32 k + l: coalesced). `tile_rows` finds the rows of each tile's first and
// last entries once for both passes. A pass stages in shared memory the tile's row pointers
// of both operands (up to NROWS rows) and the partner's column indices of those rows (up to
// SEG), so that every search after the staging loads is a shared-memory one; tiles over more
// rows or longer partner rows search global memory instead.
#define TILE (32 * ITEMS)
#define SCAN_TILE (4 * THREADS)  // counts a block of `scan`
#define STEPS 4  // fill: steps of 32 slots whose loads are issued together
#define SEG (SEG_BYTES / (int)sizeof(I))
#define NROWS (ROW_BYTES / (int)sizeof(I) - 2)

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

// Queues the run of y entries f0 .. f1 - 1 (output positions o + f) in chunks of CHUNK.
__device__ __forceinline__ void queue_run(unsigned long long* __restrict__ count,
                                          long long* __restrict__ queue, const long long f0,
                                          const long long f1, const long long o) {
    const long long chunks = (f1 - f0 + CHUNK - 1) / CHUNK;
    const long long slot = (long long)atomicAdd(count, (unsigned long long)chunks);
    for (long long c = 0; c < chunks; ++c) {
        queue[3 * (slot + c)] = f0 + c * CHUNK;
        queue[3 * (slot + c) + 1] = min(f0 + (c + 1) * CHUNK, f1);
        queue[3 * (slot + c) + 2] = o;
    }
}

// The warp's lanes' bits OR-ed together.
__device__ __forceinline__ unsigned warp_or(unsigned v) {
#if __CUDA_ARCH__ >= 800
    return __reduce_or_sync(0xffffffffu, v);
#else
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) v |= __shfl_xor_sync(0xffffffffu, v, d);
    return v;
#endif
}

// One tile of `fill` lane by lane: each lane writes its entries of x, the warp copies the
// lanes' short runs together (coalesced reads of y, scattered writes), runs longer than RUN
// are queued. Used for tiles whose slots (below) exceed the cap: long runs inside the tile.
template <typename T, typename I>
__device__ __forceinline__ void fill_tile_lanes(
    const I* __restrict__ xidx, const T* __restrict__ xdat, const I* __restrict__ yidx,
    const T* __restrict__ ydat, const I* __restrict__ lb, const unsigned* __restrict__ bits,
    const long long w, long long c, const long long nx, const long long ny,
    I* __restrict__ oidx, T* __restrict__ odat, unsigned long long* __restrict__ queued,
    long long* __restrict__ queue) {
    const unsigned full = 0xffffffffu;
    const int lane = threadIdx.x & 31;
    const unsigned below = (1u << lane) - 1u;
#pragma unroll 2
    for (int k = 0; k < ITEMS; ++k) {
        const long long e = w * TILE + 32 * k + lane;
        const unsigned b = bits[w * ITEMS + k];
        const bool match = (b >> lane) & 1u;
        const long long q = e - (c + __popc(b & below));
        c += __popc(b);
        long long f0 = 0, f1 = 0, o = 0;
        if (e < nx) {
            const long long p = lb[e];
            oidx[q + p] = xidx[e];
            odat[q + p] = quotient(xdat[e], match ? ydat[p] : T(0));
            f0 = p + (match ? 1 : 0);
            f1 = e + 1 < nx ? (long long)lb[e + 1] : ny;
            o = q + p + 1 - f0;  // the output position of y entry f of the run is o + f
        }
        int len = (int)min(f1 - f0, (long long)RUN + 1);
        if (len > RUN) {
            queue_run(queued, queue, f0, f1, o);
            len = 0;
        }
        // the short runs, copied by the whole warp: run of lane l covers slots
        // [start_l, start_l + len_l) of the warp's total
        int start = len;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const int v = __shfl_up_sync(full, start, d);
            if (lane >= d) start += v;
        }
        const int total = __shfl_sync(full, start, 31);
        start -= len;
        for (int j0 = 0; j0 < total; j0 += 32) {
            const int j = j0 + lane;
            int lo = 0, hi = 31;  // the last lane whose run starts at or before slot j
            while (lo < hi) {
                const int mid = (lo + hi + 1) >> 1;
                if (__shfl_sync(full, start, mid) <= j) lo = mid; else hi = mid - 1;
            }
            const long long f = __shfl_sync(full, f0, lo) + (j - __shfl_sync(full, start, lo));
            const long long at = __shfl_sync(full, o, lo) + f;
            if (j < total) {
                oidx[at] = yidx[f];
                odat[at] = quotient(T(0), ydat[f]);
            }
        }
    }
}

// Pass 2, over the same tiles of x, no searching. Entry e of x goes to
// q = e + lb[e] - (matches of x before e), holding x / y (or x / 0); the entries of y after it
// and before the next entry of x (positions lb[e] + match .. lb[e + 1] - 1, all absent from
// x: a "run") follow it, holding 0 / y. So a tile's result is one contiguous stretch of
// "slots", and the warp writes it slot by slot, 32 consecutive slots a step (coalesced): each
// entry's slot in the stretch is staged in shared memory (with its match bit), a step ORs the
// bits of the entries landing in it into a word, and a slot's rank in the word's running
// counts of x entries and of matches names its source: the x entry (count of x entries at or
// before it) - 1, or else the y entry lb[base] + slot - (x entries) + (matches) at or before
// it. Writing the entries of x and their runs lane by lane (scattered) takes 60% longer. A
// run after the tile's last entry longer than RUN is queued in chunks of CHUNK entries for the
// `runs` kernel, and tiles of more than `cap` slots up to their last entry of x (long runs
// inside) are written lane by lane, so that no warp copies a long row of y alone. Tile 0
// queues the entries of y before the first entry of x.
template <typename T, typename I>
__global__ void __launch_bounds__(THREADS)
xpops_sparse_divide_fill(const I* __restrict__ xidx, const T* __restrict__ xdat,
                         const I* __restrict__ yidx, const T* __restrict__ ydat,
                         const I* __restrict__ lb, const unsigned* __restrict__ bits,
                         const I* __restrict__ P, const long long nx, const long long ny,
                         const int cap, I* __restrict__ oidx, T* __restrict__ odat,
                         unsigned long long* __restrict__ queued, long long* __restrict__ queue) {
    __shared__ int slot_all[THREADS / 32][TILE];  // an entry's slot | its match bit << 31
    int* slot = slot_all[threadIdx.x >> 5];
    const int lane = threadIdx.x & 31;
    const unsigned below = (1u << lane) - 1u, upto = below | (1u << lane);
    const int none = 0x7fffffff;  // past every slot, no match bit
    const long long warps = ((long long)gridDim.x * blockDim.x) >> 5;
    const long long tiles = (nx + TILE - 1) / TILE;
    for (long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < tiles;
         w += warps) {
        if (w == 0 && lane == 0 && lb[0] > 0) queue_run(queued, queue, 0, lb[0], 0);
        const long long base = w * TILE, last = min(base + TILE, nx) - 1;
        const long long c0 = P[w], matches = (long long)P[w + 1] - c0;
        const long long lb0 = lb[base], lb_last = lb[last];
        const int last_match = (bits[w * ITEMS + ((last - base) >> 5)] >> ((last - base) & 31)) & 1;
        const long long s_last = (last - base) + (lb_last - lb0) - (matches - last_match);
        if (s_last >= cap) {
            fill_tile_lanes(xidx, xdat, yidx, ydat, lb, bits, w, c0, nx, ny, oidx, odat, queued,
                            queue);
            continue;
        }
        const long long out0 = base - c0 + lb0;  // the output position of slot 0 (entry base)
        const long long tail0 = lb_last + last_match;  // the run after the tile's last entry
        const long long tail1 = last + 1 < nx ? (long long)lb[last + 1] : ny;
        int slots = (int)s_last + 1;
        if (tail1 - tail0 > RUN) {
            if (lane == 0) queue_run(queued, queue, tail0, tail1, out0 + slots - tail0);
        } else {
            slots += (int)(tail1 - tail0);
        }
        int c = 0;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const int i = 32 * k + lane;
            const unsigned b = bits[w * ITEMS + k];
            int v = none;
            if (base + i <= last) {
                v = i + (int)((long long)lb[base + i] - lb0) - (c + __popc(b & below));
                v |= (int)((b >> lane) & 1u) << 31;
            }
            slot[i] = v;
            c += __popc(b);
        }
        __syncwarp();
        // Every slot's sources are relative to the tile's: its x entry xb[i], or its y entry (or
        // an x entry's partner) yb[j] with j = slot - (x entries) + (matches) at or before it.
        const I* __restrict__ xb = xidx + base;
        const T* __restrict__ xdb = xdat + base;
        const I* __restrict__ yb = yidx + lb0;
        const T* __restrict__ ydb = ydat + lb0;
        I* __restrict__ ob = oidx + out0;
        T* __restrict__ odb = odat + out0;
        int xs = 0, ms = 0;  // entries of x and matches in the slots before this step's
        for (int s0 = 0; s0 < slots; s0 += 32 * STEPS) {
            // STEPS steps at once: their loads in flight together
            int i[STEPS], j[STEPS];
            bool is_x[STEPS], has_y[STEPS];
#pragma unroll
            for (int k = 0; k < STEPS; ++k) {
                const int v = xs + lane < TILE ? slot[xs + lane] : none;
                const int sv = v & none;  // >= this step's first slot: counted from xs on
                const int first = s0 + 32 * k;
                const unsigned bit = sv < first + 32 ? 1u << (sv - first) : 0u;
                const unsigned xw = warp_or(bit), mw = warp_or(v < 0 ? bit : 0u);
                const int xle = xs + __popc(xw & upto), mle = ms + __popc(mw & upto);
                is_x[k] = (xw >> lane) & 1u;
                has_y[k] = !is_x[k] || ((mw >> lane) & 1u);
                i[k] = xle - 1;
                j[k] = first + lane - xle + mle;
                xs += __popc(xw);
                ms += __popc(mw);
            }
            I col[STEPS];
            T num[STEPS], den[STEPS];
#pragma unroll
            for (int k = 0; k < STEPS; ++k) {
                if (s0 + 32 * k + lane < slots) {
                    col[k] = is_x[k] ? xb[i[k]] : yb[j[k]];
                    num[k] = is_x[k] ? xdb[i[k]] : T(0);
                    den[k] = has_y[k] ? ydb[j[k]] : T(0);
                }
            }
#pragma unroll
            for (int k = 0; k < STEPS; ++k) {
                const int at = s0 + 32 * k + lane;
                if (at < slots) {
                    ob[at] = col[k];
                    odb[at] = quotient(num[k], den[k]);
                }
            }
        }
        __syncwarp();  // the next tile restages
    }
}

// The queued runs: chunk c copies y entries queue[3c] .. queue[3c + 1] - 1 to output positions
// queue[3c + 2] + f, holding 0 / y; a warp a chunk.
template <typename T, typename I>
__global__ void xpops_sparse_divide_runs(const I* __restrict__ yidx, const T* __restrict__ ydat,
                                         const unsigned long long* __restrict__ queued,
                                         const long long* __restrict__ queue,
                                         I* __restrict__ oidx, T* __restrict__ odat) {
    const int lane = threadIdx.x & 31;
    const long long warps = ((long long)gridDim.x * blockDim.x) >> 5;
    const long long n = (long long)*queued;
    for (long long c = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; c < n;
         c += warps) {
        const long long f0 = queue[3 * c], f1 = queue[3 * c + 1], o = queue[3 * c + 2];
#pragma unroll 4
        for (long long f = f0 + lane; f < f1; f += 32) {
            oidx[o + f] = yidx[f];
            odat[o + f] = quotient(T(0), ydat[f]);
        }
    }
}

// Distinct position i of a sorted operand: the sum of its entries vals[order[j]] for j in
// starts[i] .. starts[i + 1] - 1, in that order, starting from the first.
template <typename T>
__global__ void xpops_sparse_sum_runs(const T* __restrict__ vals,
                                      const long long* __restrict__ order,
                                      const long long* __restrict__ starts, const long long m,
                                      const long long n, T* __restrict__ out) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < m; i += stride) {
        const long long end = i + 1 < m ? starts[i + 1] : n;
        T sum = vals[order[starts[i]]];
        for (long long j = starts[i] + 1; j < end; ++j) sum += vals[order[j]];
        out[i] = sum;
    }
}

// out[i] = a[i] / b[i * b_step] (b_step 0: a 0-d device array); a null `a` or `b` stands for
// a_value or b_value everywhere.
template <typename T>
__global__ void xpops_sparse_divide_values(const T* __restrict__ a, const T a_value,
                                           const T* __restrict__ b, const long long b_step,
                                           const T b_value, const long long n,
                                           T* __restrict__ out) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = quotient(a ? a[i] : a_value, b ? b[i * b_step] : b_value);
    }
}
"""


@cupy.memoize(for_each_device=True)
def kernels(dtype_name: str, index_name: str) -> dict[str, cupy.RawKernel]:
    """The kernels of the family for values of `dtype_name` and indices of `index_name`,
    compiled on first use for the current device."""
    t, i = c_type(dtype_name, "complex"), INDEX_C_TYPES[index_name]
    names = {
        "tile_rows": f"xpops_sparse_divide_tile_rows<{i}>",
        "match": f"xpops_sparse_divide_match<{i}>",
        "scan": f"xpops_sparse_divide_scan<{i}>",
        "indptr": f"xpops_sparse_divide_indptr<{i}>",
        "fill": f"xpops_sparse_divide_fill<{t}, {i}>",
        "runs": f"xpops_sparse_divide_runs<{t}, {i}>",
        "values": f"xpops_sparse_divide_values<{t}>",
        "sum_runs": f"xpops_sparse_sum_runs<{t}>",
    }
    options = (
        "-std=c++17",
        f"-DITEMS={ITEMS}",
        f"-DSEG_BYTES={SEG_BYTES}",
        f"-DROW_BYTES={ROW_BYTES}",
        f"-DTHREADS={THREADS}",
        f"-DMIN_BLOCKS={MIN_BLOCKS}",
        f"-DRUN={RUN}",
        f"-DCHUNK={CHUNK}",
    )
    module = cupy.RawModule(code=_SOURCE, options=options, name_expressions=list(names.values()))
    return {key: module.get_function(name) for key, name in names.items()}
