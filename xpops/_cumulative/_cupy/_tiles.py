"""The tiles kernels of the CuPy scan: long rows (1-D input, or few long rows).

Each row is cut into tiles, one a block, chained along the row by decoupled look-back (Merrill
& Garland, 2016): a block sums its tile against the tile's maximum, publishes that aggregate,
and gets the total of all earlier tiles of its row from its predecessors, so the input is read
once and the output written once.

* ``tiles`` (float32): the tile held in registers, read and written as coalesced vectors.
* ``tiles_staged`` (float64): the tile copied to shared memory by cp.async and scanned there
  in rolled loops (short code, no registers held by the tile).

Either kernel may start each row from a carry, a value standing before the row's first tile
(the Dask engine's blocks after the first).
"""

import cupy
import numpy as np

from ..._lib._cuda import C_TYPES, FastKernel, multiprocessors
from ..._lib._dtypes import dtype_name
from ._device import (
    CHUNKS,
    FAST_PATH,
    LOOK_BACK,
    PAIRS,
    TILE_MATH,
    VECTOR,
    WARP,
    look_back_state,
)

__all__ = [
    "STAGED_ITEMS",
    "STAGED_MIN_BLOCKS",
    "TILES_BLOCK",
    "TILES_PREFETCH_MIN_TILES",
    "TILES_PREFETCH_PER_SM",
    "TILE_ITEMS",
    "kernels",
    "scan",
    "staged_shared_bytes",
    "tile_items",
]

# Launch constants, measured on an H100 (kernel time as a share of the copy rate).
# tiles: TILES_BLOCK threads of TILE_ITEMS elements in registers, read and written as vectors of
# VECTOR elements: one 8192 float32 / 4096 float64 tile a block.
TILES_BLOCK = 256
TILE_ITEMS = {"float32": 32, "float64": 16}
# A block prefetches into L2 the tile TILES_PREFETCH_PER_SM * SMs ahead of its own (a quarter
# of the resident blocks) on rows of at least TILES_PREFETCH_MIN_TILES tiles. One tile an SM
# ahead is best. Kernel time as a share of the copy rate, H200 / H100 in one session, none and
# one, two, three tiles an SM ahead: 2**28 float32 1-D 64 / 74% and 73, 73, 65 / 87, 81, 65%;
# (8192, 32768) float32, rows of 4 tiles, 81 / 92% and 84, 85, 76 / 95, 84, 70%; float64 on
# tiles_staged (2**27 and rows of 4 tiles) within a point either way. Rows of fewer tiles were
# not measured and are not prefetched.
TILES_PREFETCH_PER_SM = 1
TILES_PREFETCH_MIN_TILES = 4
# tiles_staged: TILES_BLOCK threads of STAGED_ITEMS elements in dynamic shared memory (66 KiB
# a float64 tile of 8192), at least STAGED_MIN_BLOCKS blocks an SM. 32 items and three blocks
# are best for 2**27 float64: 67% (56 registers, no spills), against 58% at 16 items and four
# blocks (64 registers with spills), 63% at 22 and four, 65% at 24 and three or four, 66% at 32
# and two, 58% at 40 and two, and 62% for 128 threads of 32 items.
STAGED_ITEMS = {"float32": 32, "float64": 32}
STAGED_MIN_BLOCKS = 3

_SOURCE = r"""
// Decoupled look-back by one warp: the aggregate of tiles [first, tile).
template <typename T>
__device__ __forceinline__ Pair<T> warp_look_back(long long tile, long long first, int lane,
                                                  const Pair<T>* aggs, const Pair<T>* incls) {
    Pair<T> prefix = identity<T>();
    for (long long pred = tile - 1;; pred -= 32) {
        const long long p = pred - lane;
        int f = 2;
        Pair<T> val = identity<T>();
        if (p >= first) f = wait_slot(aggs, incls, p, val);
        const unsigned done = __ballot_sync(FULL_MASK, f == 2);
        if (done != 0 && lane > __ffs(done) - 1) val = identity<T>();
        prefix = combine(prefix, warp_reduce(val));
        if (done != 0) return prefix;
    }
}

// Warp 0: the exclusive prefix sums, in place, of the n <= 64 values at `sums` (two to a lane);
// returns their total.
template <typename T> __device__ __forceinline__ T warp_exclusive_sums(T* sums, int n, int lane) {
    const int i0 = 2 * lane;
    const T a0 = i0 < n ? sums[i0] : T(0);
    const T a1 = i0 + 1 < n ? sums[i0 + 1] : T(0);
    const T incl = warp_inclusive_sum(a0 + a1, lane);
    const T up = __shfl_up_sync(FULL_MASK, incl, 1);
    const T before = lane == 0 ? T(0) : up;
    __syncwarp();
    if (i0 < n) sums[i0] = before;
    if (i0 + 1 < n) sums[i0 + 1] = before + a0;
    return __shfl_sync(FULL_MASK, incl, 31);
}

// Running sums against `ref` of a thread's ROUNDS chunks v[][], in place (exclusive ones for
// `exclusive`), each plus the sum of the warp's earlier chunks of the round; the rounds' warp
// totals to sums[k * WARPS + warp]: only those stay to be added, so no per-chunk carry is held
// in registers through the look-back.
template <typename T, int ROUNDS, int VEC, int WARPS>
__device__ __forceinline__ void chunk_sums(T (&v)[ROUNDS][VEC], T ref, int exclusive, int lane,
                                           int warp, const TileMath<T>& math, T* sums) {
#pragma unroll
    for (int k = 0; k < ROUNDS; ++k) {
        T acc = T(0);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const T e = math.exp(v[k][j] - ref);
            v[k][j] = exclusive ? acc : acc + e;
            acc += e;
        }
        const T incl = warp_inclusive_sum(acc, lane);
        if (lane == 31) sums[k * WARPS + warp] = incl;
        // shifted, not incl - acc: that cancels when this chunk dwarfs the ones before
        const T ex = __shfl_up_sync(FULL_MASK, incl, 1);
        const T before = lane == 0 ? T(0) : ex;
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[k][j] += before;
    }
}

// Warp 0 of tile `tile` (q-th of its row, the row's first tile `first`): publish the tile's
// aggregate, look back, publish its inclusive prefix; the aggregate of the earlier tiles. The
// row's carry `*carry` (none: a null pointer) stands before its first tile.
template <typename T>
__device__ __forceinline__ Pair<T> tile_look_back(const LookBack<T>& lb, long long tile,
                                                  long long first, int lane, Pair<T> total,
                                                  const T* carry) {
    if (tile == first) {
        const Pair<T> prefix = carry ? Pair<T>{*carry, T(1)} : identity<T>();
        if (lane == 0) publish(&lb.incls[tile], combine(prefix, total));
        return prefix;
    }
    if (lane == 0) publish(&lb.aggs[tile], total);
    const Pair<T> prefix = warp_look_back(tile, first, lane, lb.aggs, lb.incls);
    if (lane == 0) publish(&lb.incls[tile], combine(prefix, total));
    return prefix;
}

// Pull tile `tile + distance` into L2: DRAM then stays busy while the resident blocks compute
// and wait on the look-back, and later loads hit L2. One 128-byte line a thread.
template <typename T, int TILE>
__device__ __forceinline__ void prefetch_tile(const T* x, long long L, long long tiles_per_row,
                                              long long tiles, long long tile,
                                              long long distance, int reverse) {
    if (distance <= 0 || tile + distance >= tiles) return;
    constexpr int LINE = 128 / sizeof(T);
    const long long t2 = tile + distance;
    const long long r2 = t2 / tiles_per_row, s2 = (t2 % tiles_per_row) * TILE;
    const long long lo = reverse ? max(0LL, L - s2 - TILE) : s2;
    const long long l = lo + (long long)threadIdx.x * LINE;
    const long long hi = reverse ? L - s2 : min(L, s2 + TILE);
    if (threadIdx.x * LINE < TILE && l < hi) {
        asm volatile("prefetch.global.L2 [%0];" ::"l"(x + r2 * L + l));
    }
}

// The exact path of a tile: each warp scans TILE / WARPS consecutive elements with pairwise
// combines, from P and the aggregates of the earlier warps' segments.
template <typename T, int TILE, int THREADS>
__device__ __noinline__ void exact_tile(const T* __restrict__ xr, T* __restrict__ outr,
                                        long long L, long long start, Pair<T> P,
                                        int exclusive, int reverse, Pair<T>* seg_agg) {
    constexpr int WARPS = THREADS / 32, SEG = TILE / WARPS;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long long s0 = start + (long long)warp * SEG;
    Pair<T> agg = identity<T>();
    for (int i = lane; i < SEG; i += 32) {
        const long long l = s0 + i;
        if (l < L) agg = combine(agg, Pair<T>{xr[reverse ? L - 1 - l : l], T(1)});
    }
    agg = warp_reduce(agg);
    if (lane == 0) seg_agg[warp] = agg;
    __syncthreads();
    Pair<T> carry = P;
    for (int w = 0; w < warp; ++w) carry = combine(carry, seg_agg[w]);
    for (int i0 = 0; i0 < SEG; i0 += 32) {
        const long long l = s0 + i0 + lane;
        const T xv = l < L ? xr[reverse ? L - 1 - l : l] : neg_inf<T>();
        const Pair<T> incl = warp_inclusive_scan(Pair<T>{xv, T(1)}, lane);
        Pair<T> ex = shfl_up_pair(incl, 1);
        if (lane == 0) ex = identity<T>();
        const T o = value(combine(carry, exclusive ? ex : incl));
        if (l < L) outr[reverse ? L - 1 - l : l] = o;
        carry = combine(carry, shfl_pair(incl, 31));
    }
}

// ---- tiles: long rows, decoupled look-back ------------------------------------------------
// A tile is ROUNDS x THREADS chunks of VEC consecutive elements: in round k thread t holds
// chunk k * THREADS + t, so every load and store of a warp is one contiguous vector access and
// the data stay in registers (no shared-memory staging). The tile's sums are taken against its
// maximum B; with the prefix P of the earlier tiles every output is R + log(a + b * (S + c))
// (see `rebase`, with ref = B), S the sum of the chunks before and c the running sum within
// the chunk. This is exact when no output is below B - THRESHOLD: every output is at least
// max(value(P), first element of the tile). A tile with an empty prefix (a row's first) that
// fails this is summed again, from L2, against a reference nearer its first element where that
// serves (`lifted_reference`); otherwise (and for NaN, +inf) it is scanned again with pairwise
// combines.
//
// Four blocks an SM (64 registers): float64 spills a little there, and runs faster than with
// the 76 registers and three blocks it takes unbounded.
template <typename T, int ROUNDS, int THREADS>
__global__ void __launch_bounds__(THREADS, 4)
xpops_logcumsumexp_tiles(const T* __restrict__ x, T* __restrict__ out, const long long L,
                         const long long tiles_per_row, const long long tiles,
                         const long long prefetch_distance, const int exclusive,
                         const int reverse, unsigned long long* __restrict__ state,
                         const T* __restrict__ carry) {
    constexpr int VEC = Vec<T>::N, WARPS = THREADS / 32, TILE = ROUNDS * THREADS * VEC;
    static_assert(ROUNDS * WARPS <= 64, "warp 0 scans the chunk sums two to a lane");
    __shared__ T warp_max_sh[WARPS], sums_sh[ROUNDS * WARPS];
    __shared__ T first_sh;
    __shared__ Pair<T> prefix_sh, seg_agg[WARPS];
    __shared__ unsigned long long tile_sh;
    __shared__ TileMath<T> math;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    math.fill();  // read after the __syncthreads below

    // tiles are numbered in the order blocks start, so every predecessor is running or done
    const LookBack<T> lb(state, tiles);
    if (tid == 0) tile_sh = atomicAdd(lb.counter, 1ull) + 1ull;  // the counter starts at ~0
    __syncthreads();
    const long long tile = tile_sh;
    const long long r = tile / tiles_per_row, q = tile % tiles_per_row;
    const long long start = q * TILE;
    const T* xr = x + r * L;
    T* outr = out + r * L;
    prefetch_tile<T, TILE>(x, L, tiles_per_row, tiles, tile, prefetch_distance, reverse);
    constexpr unsigned long long ALIGN = sizeof(T) * VEC;
    // vector access when the whole tile is in range and the chunks are aligned (the same for
    // every chunk of the tile: they start VEC elements apart)
    const bool full = start + TILE <= L;
    const bool vload =
        full && (reinterpret_cast<unsigned long long>(reverse ? xr + L - start : xr + start) %
                 ALIGN) == 0;
    const bool vstore =
        full && (reinterpret_cast<unsigned long long>(reverse ? outr + L - start : outr + start) %
                 ALIGN) == 0;

    T v[ROUNDS][VEC];
#pragma unroll
    for (int k = 0; k < ROUNDS; ++k) {
        load_chunk<T, VEC>(xr, L, start + ((long long)k * THREADS + tid) * VEC, reverse, vload,
                           v[k]);
    }
    T m = v[0][0];
#pragma unroll
    for (int k = 0; k < ROUNDS; ++k)
#pragma unroll
        for (int j = 0; j < VEC; ++j) m = nan_max(m, v[k][j]);
    m = warp_max(m);
    if (lane == 0) warp_max_sh[warp] = m;
    if (tid == 0) first_sh = v[0][0];
    __syncthreads();
    T B = warp_max_sh[0];
#pragma unroll
    for (int w = 1; w < WARPS; ++w) B = nan_max(B, warp_max_sh[w]);

    if (isfinite(B)) chunk_sums<T, ROUNDS, VEC, WARPS>(v, B, exclusive, lane, warp, math, sums_sh);
    __syncthreads();

    // warp 0: exclusive sums of the ROUNDS x WARPS warp totals in tile order, the tile's
    // aggregate, and the look-back
    if (warp == 0) {  // B is the same in every lane: the shuffles see the whole warp
        const T sum = isfinite(B) ? warp_exclusive_sums(sums_sh, ROUNDS * WARPS, lane) : T(0);
        const Pair<T> total = tile_total(B, sum);
        const Pair<T> prefix =
            tile_look_back(lb, tile, tile - q, lane, total, carry ? carry + r : nullptr);
        if (lane == 0) prefix_sh = prefix;
    }
    __syncthreads();
    const Pair<T> P = prefix_sh;
    T ref = B;  // the sums' reference
    if (!fast_ok(B, first_sh, P)) {  // block-uniform
        ref = lifted_reference<T, TILE>(B, first_sh, P);
        if (isnan(ref)) {
            exact_tile<T, TILE, THREADS>(xr, outr, L, start, P, exclusive, reverse, seg_agg);
            return;
        }
        // the tile again (from L2), its sums against ref
#pragma unroll
        for (int k = 0; k < ROUNDS; ++k) {
            load_chunk<T, VEC>(xr, L, start + ((long long)k * THREADS + tid) * VEC, reverse,
                               vload, v[k]);
        }
        chunk_sums<T, ROUNDS, VEC, WARPS>(v, ref, exclusive, lane, warp, math, sums_sh);
        __syncthreads();
        if (warp == 0) warp_exclusive_sums(sums_sh, ROUNDS * WARPS, lane);
        __syncthreads();
    }
    const Rebase<T> f = rebase(P, ref);
    // the tile's first term exp(x0 - ref) as its sums hold it, needed only after an empty prefix
    const bool empty = P.m == neg_inf<T>();
    const Sole<T> so = sole(P, first_sh, empty ? math.exp(first_sh - ref) : T(0));
#pragma unroll
    for (int k = 0; k < ROUNDS; ++k) {
        const T S = sums_sh[k * WARPS + warp];
        T o[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const T s = S + v[k][j];
            o[j] = (s == so.s) ? so.out : f.R + math.log(f.a + f.b * s);
        }
        // the tile's first exclusive output is P alone, which may lie below B - THRESHOLD
        if (exclusive && k == 0 && tid == 0) o[0] = value(P);
        store_chunk<T, VEC>(outr, L, start + ((long long)k * THREADS + tid) * VEC, reverse,
                            vstore, o);
    }
}

// ---- tiles_staged: the tiles scheme with the tile in shared memory (float64) ------------------
// The tile is copied to shared memory by cp.async (no registers held, every load in flight at
// once) and each thread scans a run of ITEMS consecutive elements there, padded by one element a
// run so that the runs are read without bank conflicts. The loops over a run stay rolled: the
// register tiles kernel unrolls every element's float64 exp and log into a straight line that
// crowds the instruction cache. H100, 2**27 float64, tiles of 4096: 58% of the copy rate against
// 48% on the register kernel; float32 gains little (85% against 83%) and stays on the register
// kernel.
// Long runs (ITEMS = 32: a tile of 8192 float64 in 66 KiB of dynamic shared memory, three
// blocks an SM) halve the look-backs and barriers an element against runs of 16 (see
// STAGED_ITEMS). At 16 items five or six blocks an SM spill (47% and 34% against 58% at four);
// unrolling the runs by 2, 4 (UNROLL) or 8 gives 57, 58 and 55%.
template <typename T, int ITEMS, int THREADS, int MIN_BLOCKS>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
xpops_logcumsumexp_tiles_staged(const T* __restrict__ x, T* __restrict__ out, const long long L,
                                const long long tiles_per_row, const long long tiles,
                                const long long prefetch_distance, const int exclusive,
                                const int reverse, unsigned long long* __restrict__ state,
                                const T* __restrict__ carry) {
    constexpr int WARPS = THREADS / 32, TILE = ITEMS * THREADS, RUN = ITEMS + 1;
    constexpr int UNROLL = 4;
    static_assert(WARPS <= 64, "warp 0 scans the warp totals two to a lane");
    extern __shared__ __align__(16) unsigned char staged_smem[];
    T* const buf = reinterpret_cast<T*>(staged_smem);  // THREADS * RUN elements
    __shared__ T warp_sh[WARPS];
    __shared__ T first_sh;
    __shared__ Pair<T> prefix_sh, seg_agg[WARPS];
    __shared__ unsigned long long tile_sh;
    __shared__ TileMath<T> math;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const LookBack<T> lb(state, tiles);
    if (tid == 0) tile_sh = atomicAdd(lb.counter, 1ull) + 1ull;  // the counter starts at ~0
    math.fill();
    __syncthreads();
    const long long tile = tile_sh;
    const long long r = tile / tiles_per_row, q = tile % tiles_per_row;
    const long long start = q * TILE;
    const T* xr = x + r * L;
    T* outr = out + r * L;
    prefetch_tile<T, TILE>(x, L, tiles_per_row, tiles, tile, prefetch_distance, reverse);

    // logical element l of the tile (in scan order) sits at buf[l + l / ITEMS]
    for (int k = 0; k < ITEMS; ++k) {
        const int l = k * THREADS + tid;
        T* dst = &buf[l + l / ITEMS];
        const long long g = start + l;
        if (g < L) {
            const T* src = xr + (reverse ? L - 1 - g : g);
            const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
            asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(d), "l"(src),
                         "n"(sizeof(T)));
        } else {
            *dst = neg_inf<T>();
        }
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();

    T* run = &buf[tid * RUN];
    T m = run[0];
    for (int j = 1; j < ITEMS; ++j) m = nan_max(m, run[j]);
    m = warp_max(m);
    if (lane == 0) warp_sh[warp] = m;
    if (tid == 0) first_sh = buf[0];
    __syncthreads();
    T B = warp_sh[0];
#pragma unroll
    for (int w = 1; w < WARPS; ++w) B = nan_max(B, warp_sh[w]);
    __syncthreads();  // warp_sh is reused for the warp sums

    // the run's sums against B in place (exclusive ones for `exclusive`), and the sums of the
    // earlier runs of the warp
    T before = T(0);
    if (isfinite(B)) {
        T acc = T(0);
#pragma unroll UNROLL
        for (int j = 0; j < ITEMS; ++j) {
            const T e = math.exp(run[j] - B);
            run[j] = exclusive ? acc : acc + e;
            acc += e;
        }
        const T incl = warp_inclusive_sum(acc, lane);
        if (lane == 31) warp_sh[warp] = incl;
        const T up = __shfl_up_sync(FULL_MASK, incl, 1);  // not incl - acc: that cancels
        before = lane == 0 ? T(0) : up;
    }
    __syncthreads();
    if (warp == 0) {  // B is the same in every lane: the shuffles see the whole warp
        const T sum = isfinite(B) ? warp_exclusive_sums(warp_sh, WARPS, lane) : T(0);
        const Pair<T> total = tile_total(B, sum);
        const Pair<T> prefix =
            tile_look_back(lb, tile, tile - q, lane, total, carry ? carry + r : nullptr);
        if (lane == 0) prefix_sh = prefix;
    }
    __syncthreads();
    const Pair<T> P = prefix_sh;
    if (!fast_ok(B, first_sh, P)) {
        exact_tile<T, TILE, THREADS>(xr, outr, L, start, P, exclusive, reverse, seg_agg);
        return;
    }
    const Rebase<T> f = rebase(P, B);
    // the tile's first term exp(x0 - B) as its sums hold it, needed only after an empty prefix
    const bool empty = P.m == neg_inf<T>();
    const Sole<T> so = sole(P, first_sh, empty ? math.exp(first_sh - B) : T(0));
    const T S = warp_sh[warp] + before;
    if (so.s == so.s) {  // block-uniform: a prefix of one finite term or none
#pragma unroll UNROLL
        for (int j = 0; j < ITEMS; ++j) {
            const T s = S + run[j];
            run[j] = (s == so.s) ? so.out : f.R + math.log(f.a + f.b * s);
        }
    } else {  // the usual tile: no output is a single term, no compare
#pragma unroll UNROLL
        for (int j = 0; j < ITEMS; ++j) run[j] = f.R + math.log(f.a + f.b * (S + run[j]));
    }
    // the tile's first exclusive output is P alone, which may lie below B - THRESHOLD
    if (exclusive && tid == 0) run[0] = value(P);
    __syncthreads();
    for (int k = 0; k < ITEMS; ++k) {
        const int l = k * THREADS + tid;
        const long long g = start + l;
        if (g < L) outr[reverse ? L - 1 - g : g] = buf[l + l / ITEMS];
    }
}
"""

_CODE = PAIRS + WARP + FAST_PATH + LOOK_BACK + CHUNKS + TILE_MATH + _SOURCE
_OPTIONS = ("-std=c++17",)

# FastKernel signature of both kernels: x, out, L, tiles_per_row, tiles, prefetch_distance,
# exclusive, reverse, state, carry (p a pointer, q a 64-bit, i a 32-bit integer)
_SIGNATURE = "ppqqqqiipp"


def _names(dtype_name: str) -> dict[str, str]:
    t = C_TYPES[dtype_name]
    return {
        "tiles": (
            f"xpops_logcumsumexp_tiles<{t}, {TILE_ITEMS[dtype_name] // VECTOR[dtype_name]}, "
            f"{TILES_BLOCK}>"
        ),
        "tiles_staged": (
            f"xpops_logcumsumexp_tiles_staged<{t}, {STAGED_ITEMS[dtype_name]}, {TILES_BLOCK}, "
            f"{STAGED_MIN_BLOCKS}>"
        ),
    }


@cupy.memoize(for_each_device=True)
def kernels(dtype_name: str) -> dict[str, FastKernel]:
    """The ``tiles`` and ``tiles_staged`` kernels of `dtype_name`, compiled for the current
    device on first use."""
    names = _names(dtype_name)
    module = cupy.RawModule(code=_CODE, options=_OPTIONS, name_expressions=list(names.values()))
    compiled = {key: module.get_function(name) for key, name in names.items()}
    # above 48 KiB a kernel must ask for its dynamic shared memory
    compiled["tiles_staged"].max_dynamic_shared_size_bytes = staged_shared_bytes(dtype_name)
    return {key: FastKernel(kernel, _SIGNATURE) for key, kernel in compiled.items()}


def staged_shared_bytes(dtype_name: str) -> int:
    """Dynamic shared memory of tiles_staged: the tile, one element of padding a run."""
    return TILES_BLOCK * (STAGED_ITEMS[dtype_name] + 1) * np.dtype(dtype_name).itemsize


def tile_items(kind: str, dtype_name: str) -> int:
    """Elements a thread of the tiles kernel `kind` scans: a tile is TILES_BLOCK times this."""
    return STAGED_ITEMS[dtype_name] if kind == "tiles_staged" else TILE_ITEMS[dtype_name]


def scan(
    x: cupy.ndarray,
    out: cupy.ndarray,
    rows: int,
    L: int,
    exclusive: bool,
    reverse: bool,
    kind: str,
    carry: cupy.ndarray | None = None,
) -> None:
    """The scan of the `rows` rows of length `L` of `x` (C-contiguous) into `out` by the tiles
    kernel `kind`; `carry` (rows,): each row's carry, or None."""
    name = dtype_name(x.dtype)
    kernel = kernels(name)[kind]
    tiles_per_row = -(-L // (TILES_BLOCK * tile_items(kind, name)))
    tiles = rows * tiles_per_row
    state = look_back_state(tiles, x.dtype)
    long_rows = tiles_per_row >= TILES_PREFETCH_MIN_TILES
    prefetch = TILES_PREFETCH_PER_SM * multiprocessors() if long_rows else 0
    kernel(
        tiles,
        TILES_BLOCK,
        (
            x.data.ptr,
            out.data.ptr,
            L,
            tiles_per_row,
            tiles,
            prefetch,
            int(exclusive),
            int(reverse),
            state.ptr,
            0 if carry is None else carry.data.ptr,
        ),
        staged_shared_bytes(name) if kind == "tiles_staged" else 0,
    )
