"""CuPy engine of logcumsumexp: three CUDA kernels, chosen by the shape of the scan.

Every kernel scans pairs ``(m, s)`` standing for ``m + log(s)``. A run of consecutive elements
is summed against one reference, its maximum ``ref``: one ``exp(x - ref)`` per element, a plain
running sum, and at the end one ``log`` per output after the prefix of everything before the
run has been folded in (``R + log(a + c_k * b)``). This *fast path* is exact whenever the first
output of the run cannot underflow (prefix sums only grow, so the first is the smallest): when
``ref`` and the incoming prefix are finite and ``ref - max(prefix, x_first) <= THRESHOLD``.
Otherwise (NaN, +-inf, all -inf so far, jumps of more than 60 in float32 or 650 in float64)
the run takes the *exact path*: pairwise ``combine`` with every special value handled.

* ``tiles``: long rows (1-D input, or few rows): a block scans a tile and gets the sum of all
  earlier tiles of its row by decoupled look-back (Merrill & Garland, 2016), so the input is
  read once and the output written once.
* ``rows``: many short rows along the contiguous axis: a thread per row, the rows staged through
  shared memory a chunk of columns at a time, the carry in registers.
* ``columns``: a strided axis: a thread per column, tiles of rows chained along the axis by
  decoupled look-back per column.

`reverse` maps logical index ``l`` to ``L - 1 - l`` in the loads and stores; `exclusive` shifts
the scan by one within registers. Neither copies the data.
"""

import math

import cupy
import numpy as np

# Launch constants, measured on an H100 (share of the copy rate, 2**28 float32 unless said):
BLOCK = 256  # threads per block of the columns kernel
# tiles: 8192 float32 / 4096 float64 elements per block. The longer a row's chain of tiles, the
# slower the look-back: with 4096-element tiles 1-D ran at 56-63%, rows of 8 tiles at 78%; with
# 8192 (sums recomputed rather than kept in registers) 1-D ran at 69%, (8192, 32768) at 85%.
# 512-thread blocks and a look-back by the whole block (window 256) measured no better.
TILES_BLOCK = 256
TILE_ITEMS = {"float32": 32, "float64": 16}
ROWS_BLOCK = 128  # rows per block of the rows kernel
ROW_CHUNK = {"float32": 32, "float64": 16}  # columns staged at once: 17 KiB of shared memory
COLUMN_ITEMS = {"float32": 32, "float64": 16}  # rows per column tile
# The rows kernel (a thread per row) takes rows up to ROWS_KERNEL_MAX_LEN long when there are
# enough of them to fill the GPU; otherwise the tiles kernel splits rows among blocks. Measured
# on an H100, float32, share of the copy rate: (2**20, 64) rows 74%; (65536, 512) rows 49%,
# tiles 14%; (8192, 2048) rows 10% (64 blocks), tiles 38%; (8192, 32768) tiles 78%.
ROWS_KERNEL_MAX_LEN = 1024
ROWS_KERNEL_MIN_ROWS = 16384

_SOURCE = r"""
#include <cuda/std/limits>

#define FULL_MASK 0xffffffffu

template <typename T> struct Pair { T m; T s; };

// float32 uses the hardware approximations (ex2/lg2 units, denormals flushed): their error,
// a few 1e-7 relative, is far inside the float32 contract, and full-precision expf/logf made
// every kernel arithmetic-bound on an H100. float64 keeps exp/log.
__device__ __forceinline__ float xexp(float v) { return __expf(v); }
__device__ __forceinline__ double xexp(double v) { return exp(v); }
__device__ __forceinline__ float xlog(float v) { return __logf(v); }
__device__ __forceinline__ double xlog(double v) { return log(v); }
// A run may be summed against a reference `ref` when its smallest prefix is at least
// exp(-THRESHOLD) of exp(ref): terms lost below the smallest normal number (exp(-87) float32
// with denormals flushed, exp(-708) float64) are then under 1e-9 / 1e-20 of it, even summed
// over a block.
template <typename T> __device__ __forceinline__ T threshold();
template <> __device__ __forceinline__ float threshold<float>() { return 60.0f; }
template <> __device__ __forceinline__ double threshold<double>() { return 650.0; }
template <typename T> __device__ __forceinline__ T neg_inf() {
    return -cuda::std::numeric_limits<T>::infinity();
}
template <typename T> __device__ __forceinline__ T pos_inf() {
    return cuda::std::numeric_limits<T>::infinity();
}
template <typename T> __device__ __forceinline__ T qnan() {
    return cuda::std::numeric_limits<T>::quiet_NaN();
}
template <typename T> __device__ __forceinline__ Pair<T> identity() {
    return Pair<T>{neg_inf<T>(), T(0)};
}
// max that propagates NaN
template <typename T> __device__ __forceinline__ T nan_max(T a, T b) {
    return (a > b || isnan(a)) ? a : b;
}

// log(exp(a) + exp(b)) on pairs with every special value handled; commutative, associative.
template <typename T> __device__ __forceinline__ Pair<T> combine(Pair<T> a, Pair<T> b) {
    if (isnan(a.m) || isnan(b.m)) return Pair<T>{qnan<T>(), T(1)};
    if (b.m == neg_inf<T>()) return a;
    if (a.m == neg_inf<T>()) return b;
    if (a.m == pos_inf<T>() || b.m == pos_inf<T>()) return Pair<T>{pos_inf<T>(), T(1)};
    if (a.m >= b.m) return Pair<T>{a.m, a.s + b.s * xexp(b.m - a.m)};
    return Pair<T>{b.m, a.s * xexp(a.m - b.m) + b.s};
}
template <typename T> __device__ __forceinline__ T value(Pair<T> p) {
    return p.m + xlog(p.s);  // -inf + log(0) = -inf for the identity
}

template <typename T> __device__ __forceinline__ Pair<T> shfl_pair(Pair<T> p, int src) {
    return Pair<T>{__shfl_sync(FULL_MASK, p.m, src), __shfl_sync(FULL_MASK, p.s, src)};
}
template <typename T> __device__ __forceinline__ Pair<T> shfl_up_pair(Pair<T> p, int d) {
    return Pair<T>{__shfl_up_sync(FULL_MASK, p.m, d), __shfl_up_sync(FULL_MASK, p.s, d)};
}
template <typename T> __device__ __forceinline__ Pair<T> shfl_xor_pair(Pair<T> p, int d) {
    return Pair<T>{__shfl_xor_sync(FULL_MASK, p.m, d), __shfl_xor_sync(FULL_MASK, p.s, d)};
}
template <typename T> __device__ __noinline__ Pair<T> warp_inclusive_scan(Pair<T> p, int lane) {
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        Pair<T> o = shfl_up_pair(p, d);
        if (lane >= d) p = combine(o, p);
    }
    return p;
}
template <typename T> __device__ __forceinline__ Pair<T> warp_reduce(Pair<T> p) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) p = combine(p, shfl_xor_pair(p, d));
    return p;
}
template <typename T> __device__ __forceinline__ T warp_max(T v) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) v = nan_max(v, __shfl_xor_sync(FULL_MASK, v, d));
    return v;
}
template <typename T> __device__ __forceinline__ T warp_inclusive_sum(T v, int lane) {
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const T u = __shfl_up_sync(FULL_MASK, v, d);
        if (lane >= d) v += u;
    }
    return v;
}

// Whether a run with maximum `ref` and first element `x0`, after the prefix `P`, may use the
// fast path: its smallest output, at least max(value(P), x0), is within THRESHOLD of `ref`.
template <typename T> __device__ __forceinline__ bool fast_ok(T ref, T x0, Pair<T> P) {
    if (!isfinite(ref)) return false;
    const T plog = value(P);
    if (isnan(plog) || plog == pos_inf<T>()) return false;
    const T low = plog > x0 ? plog : x0;
    return ref - low <= threshold<T>();
}

// Fast path: outputs of a run whose running sums against `ref` are c[], after the prefix P.
template <typename T, int N>
__device__ __forceinline__ void fast_outputs(const T* c, T ref, Pair<T> P, int exclusive,
                                             T* o) {
    const T R = P.m > ref ? P.m : ref;
    const T a = (P.m == neg_inf<T>()) ? T(0) : P.s * xexp(P.m - R);
    const T b = xexp(ref - R);
#pragma unroll
    for (int k = 0; k < N; ++k) {
        if (exclusive) {
            o[k] = (k == 0) ? value(P) : R + xlog(a + c[k - 1] * b);
        } else {
            o[k] = R + xlog(a + c[k] * b);
        }
    }
}

// Fast path with the sums against `ref` computed again from v[] instead of kept (registers).
template <typename T, int N>
__device__ __forceinline__ void fast_outputs_recompute(const T* v, T ref, Pair<T> P,
                                                       int exclusive, T* o) {
    const T R = P.m > ref ? P.m : ref;
    const T a = (P.m == neg_inf<T>()) ? T(0) : P.s * xexp(P.m - R);
    const T b = xexp(ref - R);
    T acc = T(0);
#pragma unroll
    for (int k = 0; k < N; ++k) {
        if (exclusive) {
            o[k] = (k == 0) ? value(P) : R + xlog(a + acc * b);
            acc += xexp(v[k] - ref);
        } else {
            acc += xexp(v[k] - ref);
            o[k] = R + xlog(a + acc * b);
        }
    }
}

// Exact path, in place on n values at `io` (stride `stride`), from the prefix P.
template <typename T>
__device__ __noinline__ void exact_run(T* io, long long stride, int n, Pair<T> P,
                                       int exclusive) {
    for (int k = 0; k < n; ++k) {
        const T xv = io[k * stride];
        if (exclusive) io[k * stride] = value(P);
        P = combine(P, Pair<T>{xv, T(1)});
        if (!exclusive) io[k * stride] = value(P);
    }
}

template <typename T>
__device__ __noinline__ Pair<T> exact_aggregate(const T* p, long long stride, int n) {
    Pair<T> agg = identity<T>();
    for (int k = 0; k < n; ++k) agg = combine(agg, Pair<T>{p[k * stride], T(1)});
    return agg;
}

// Sums of a run against its maximum `ref` (fast path), or its exact aggregate.
template <typename T, int N>
__device__ __forceinline__ Pair<T> run_aggregate(const T* v, T* c, T& ref) {
    ref = v[0];
#pragma unroll
    for (int k = 1; k < N; ++k) ref = nan_max(ref, v[k]);
    if (isfinite(ref)) {
        T acc = T(0);
#pragma unroll
        for (int k = 0; k < N; ++k) {
            acc += xexp(v[k] - ref);
            c[k] = acc;
        }
        return Pair<T>{ref, acc};
    }
    Pair<T> agg = identity<T>();
#pragma unroll
    for (int k = 0; k < N; ++k) agg = combine(agg, Pair<T>{v[k], T(1)});
    return agg;
}

// Look-back slots: each tile (or column of a tile) publishes its aggregate in `aggs` and
// later its inclusive prefix in `incls`. Every slot is written once, word by word, over memory
// set to all-one bits beforehand (a NaN payload no computation here produces: NaNs published
// are the canonical quiet NaN, and sums are never NaN). A reader waits until both words of a
// slot have left that pattern, so no flag and no memory fence are needed.
__device__ __forceinline__ bool ready(float v) { return __float_as_uint(v) != 0xffffffffu; }
__device__ __forceinline__ bool ready(double v) {
    return __double_as_longlong(v) != (long long)0xffffffffffffffffull;
}
template <typename T> __device__ __forceinline__ void publish(Pair<T>* slot, Pair<T> p) {
    volatile T* s = reinterpret_cast<volatile T*>(slot);
    s[0] = p.m;
    s[1] = p.s;
}
template <typename T> __device__ __forceinline__ Pair<T> read_slot(const Pair<T>* slot) {
    const volatile T* s = reinterpret_cast<const volatile T*>(slot);
    return Pair<T>{s[0], s[1]};
}
// Wait for tile p: 2 with its inclusive prefix, or 1 with its aggregate.
template <typename T>
__device__ __forceinline__ int wait_slot(const Pair<T>* aggs, const Pair<T>* incls,
                                         long long p, Pair<T>& val) {
    while (true) {  // both slots in one round trip
        const Pair<T> inc = read_slot(&incls[p]);
        const Pair<T> agg = read_slot(&aggs[p]);
        if (ready(inc.m) && ready(inc.s)) {
            val = inc;
            return 2;
        }
        if (ready(agg.m) && ready(agg.s)) {
            val = agg;
            return 1;
        }
    }
}

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

__device__ __forceinline__ int padded(int i) { return i + (i >> 5); }

// ---- tiles: long rows, decoupled look-back ------------------------------------------------
template <typename T, int ITEMS>
__global__ void __launch_bounds__(TILES_BLOCK)
xpops_logcumsumexp_tiles(const T* __restrict__ x, T* __restrict__ out, const long long L,
                         const long long tiles_per_row, const int exclusive, const int reverse,
                         unsigned int* __restrict__ counter, Pair<T>* __restrict__ aggs,
                         Pair<T>* __restrict__ incls) {
    constexpr int TILE = TILES_BLOCK * ITEMS;
    constexpr int WARPS = TILES_BLOCK / 32;
    static_assert(ITEMS <= 32 && 32 % ITEMS == 0, "a thread's items share one padding offset");
    __shared__ T buf[TILE + TILE / 32];
    __shared__ T warp_max_sh[WARPS], warp_first_sh[WARPS], warp_sum_sh[WARPS];
    __shared__ Pair<T> warp_tot[WARPS];
    __shared__ Pair<T> prefix_sh;
    __shared__ unsigned int tile_id;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    // tiles are numbered in the order blocks start, so every predecessor is running or done
    if (tid == 0) tile_id = atomicAdd(counter, 1u);
    __syncthreads();
    const long long tile = tile_id;
    const long long r = tile / tiles_per_row, q = tile % tiles_per_row;
    const long long start = q * TILE;
    const int count = (int)min((long long)TILE, L - start);
    const T* xr = x + r * L;
    T* outr = out + r * L;

#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int idx = k * TILES_BLOCK + tid;
        T v = neg_inf<T>();
        if (idx < count) {
            const long long l = start + idx;
            v = xr[reverse ? L - 1 - l : l];
        }
        buf[padded(idx)] = v;
    }
    __syncthreads();

    // float32 recomputes exp(v - ref) for the outputs (one more ex2 per element, which is
    // cheap) instead of keeping the sums: that leaves registers for 32 items a thread
    constexpr bool RECOMPUTE = sizeof(T) == 4;
    T* const slot = &buf[padded(tid * ITEMS)];
    const bool idle = tid * ITEMS >= count;  // past the end of a short last tile
    T v[ITEMS], c[RECOMPUTE ? 1 : ITEMS];
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) v[k] = slot[k];
    T ref = neg_inf<T>();
    Pair<T> agg = identity<T>();
    if (!idle) {
        if (RECOMPUTE) {
            ref = v[0];
#pragma unroll
            for (int k = 1; k < ITEMS; ++k) ref = nan_max(ref, v[k]);
            if (isfinite(ref)) {
                T acc = T(0);
#pragma unroll
                for (int k = 0; k < ITEMS; ++k) acc += xexp(v[k] - ref);
                agg = Pair<T>{ref, acc};
            } else {
                agg = exact_aggregate(slot, 1, ITEMS);
            }
        } else {
            agg = run_aggregate<T, ITEMS>(v, c, ref);
        }
    }

    // Block scan. Fast: every thread's sum against the block maximum B, added as plain numbers;
    // valid when the first thread holding anything above -inf is within THRESHOLD of B (the
    // exclusive prefixes only grow from there). Otherwise: pairwise combines.
    const T wm = warp_max(agg.m);
    const unsigned any = __ballot_sync(FULL_MASK, agg.m != neg_inf<T>());
    const T wfirst = any ? __shfl_sync(FULL_MASK, agg.m, __ffs(any) - 1) : neg_inf<T>();
    if (lane == 0) {
        warp_max_sh[warp] = wm;
        warp_first_sh[warp] = wfirst;
    }
    __syncthreads();
    T B = neg_inf<T>(), first = neg_inf<T>();
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
        B = nan_max(B, warp_max_sh[w]);
        if (first == neg_inf<T>()) first = warp_first_sh[w];
    }
    const bool block_fast = isfinite(B) && first >= B - threshold<T>();
    Pair<T> thread_excl, block_total;
    if (block_fast) {
        const T d = (agg.m == neg_inf<T>()) ? T(0) : agg.s * xexp(agg.m - B);
        const T incl = warp_inclusive_sum(d, lane);
        if (lane == 31) warp_sum_sh[warp] = incl;
        T ex = __shfl_up_sync(FULL_MASK, incl, 1);
        if (lane == 0) ex = T(0);
        __syncthreads();
        T before = T(0), total = T(0);
#pragma unroll
        for (int w = 0; w < WARPS; ++w) {
            if (w < warp) before += warp_sum_sh[w];
            total += warp_sum_sh[w];
        }
        const T S = before + ex;
        // S is exactly 0 only when every earlier element is -inf
        thread_excl = S == T(0) ? identity<T>() : Pair<T>{B, S};
        block_total = Pair<T>{B, total};
    } else {
        const Pair<T> incl = warp_inclusive_scan(agg, lane);
        if (lane == 31) warp_tot[warp] = incl;
        Pair<T> ex = shfl_up_pair(incl, 1);
        if (lane == 0) ex = identity<T>();
        __syncthreads();
        Pair<T> before = identity<T>();
        block_total = identity<T>();
        for (int w = 0; w < WARPS; ++w) {
            if (w < warp) before = combine(before, warp_tot[w]);
            block_total = combine(block_total, warp_tot[w]);
        }
        thread_excl = combine(before, ex);
    }

    Pair<T> tile_prefix = identity<T>();
    if (q == 0) {
        if (tid == 0) publish(&incls[tile], block_total);
    } else {
        if (tid == 0) publish(&aggs[tile], block_total);
        if (warp == 0) {
            const Pair<T> pw = warp_look_back(tile, r * tiles_per_row, lane, aggs, incls);
            if (lane == 0) prefix_sh = pw;
        }
        __syncthreads();
        tile_prefix = prefix_sh;
        if (tid == 0) publish(&incls[tile], combine(tile_prefix, block_total));
    }
    __syncthreads();
    const Pair<T> P = combine(tile_prefix, thread_excl);
    if (idle) {
    } else if (fast_ok(ref, v[0], P)) {
        if (RECOMPUTE) {
            fast_outputs_recompute<T, ITEMS>(v, ref, P, exclusive, slot);
        } else {
            fast_outputs<T, ITEMS>(c, ref, P, exclusive, slot);
        }
    } else {
        exact_run(slot, 1, ITEMS, P, exclusive);
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int idx = k * TILES_BLOCK + tid;
        if (idx < count) {
            const long long l = start + idx;
            outr[reverse ? L - 1 - l : l] = buf[padded(idx)];
        }
    }
}

// ---- rows: many rows of up to a few thousand elements, a thread per row --------------------
// The block stages CHUNK columns of ROWS_BLOCK rows in shared memory (each warp loads and
// stores whole row segments, coalesced), then each thread scans its row's segment with exact
// pairwise combines, the carry in registers. Rows are padded by one element: the per-row walk
// is then free of bank conflicts.
template <typename T, int CHUNK>
__global__ void __launch_bounds__(ROWS_BLOCK)
xpops_logcumsumexp_rows(const T* __restrict__ x, T* __restrict__ out, const long long rows,
                        const long long L, const int exclusive, const int reverse) {
    constexpr int STRIDE = CHUNK + 1;
    constexpr int BATCH = 16;
    __shared__ T buf[ROWS_BLOCK * STRIDE];
    const int tid = threadIdx.x;
    const long long r0 = (long long)blockIdx.x * ROWS_BLOCK;
    const int nrows = (int)min((long long)ROWS_BLOCK, rows - r0);
    Pair<T> carry = identity<T>();
    for (long long c0 = 0; c0 < L; c0 += CHUNK) {
        const int w = (int)min((long long)CHUNK, L - c0);
        const int total = nrows * w;
        // element e of the staged block is row e / w, column e % w; BATCH loads are issued
        // before any is stored to shared memory, so they are in flight together
        for (int e0 = 0; e0 < total; e0 += BATCH * ROWS_BLOCK) {
            T tmp[BATCH];
#pragma unroll
            for (int u = 0; u < BATCH; ++u) {
                const int e = e0 + u * ROWS_BLOCK + tid;
                if (e < total) {
                    const int i = (w == CHUNK) ? e / CHUNK : e / w;
                    const long long l = c0 + (e - i * w);
                    tmp[u] = x[(r0 + i) * L + (reverse ? L - 1 - l : l)];
                }
            }
#pragma unroll
            for (int u = 0; u < BATCH; ++u) {
                const int e = e0 + u * ROWS_BLOCK + tid;
                if (e < total) {
                    const int i = (w == CHUNK) ? e / CHUNK : e / w;
                    buf[i * STRIDE + (e - i * w)] = tmp[u];
                }
            }
        }
        __syncthreads();
        if (tid < nrows) {
            T* row = &buf[tid * STRIDE];
            for (int j = 0; j < w; ++j) {
                const T xv = row[j];
                if (exclusive) row[j] = value(carry);
                carry = combine(carry, Pair<T>{xv, T(1)});
                if (!exclusive) row[j] = value(carry);
            }
        }
        __syncthreads();
        for (int e = tid; e < total; e += ROWS_BLOCK) {
            const int i = (w == CHUNK) ? e / CHUNK : e / w;
            const long long l = c0 + (e - i * w);
            out[(r0 + i) * L + (reverse ? L - 1 - l : l)] = buf[i * STRIDE + (e - i * w)];
        }
        __syncthreads();
    }
}

// ---- columns: a strided axis, look-back per column -----------------------------------------
template <typename T, int ITEMS>
__global__ void __launch_bounds__(BLOCK)
xpops_logcumsumexp_columns(const T* __restrict__ x, T* __restrict__ out, const long long L,
                           const long long inner, const long long lanes,
                           const long long groups, const int exclusive, const int reverse,
                           unsigned int* __restrict__ counter, Pair<T>* __restrict__ aggs,
                           Pair<T>* __restrict__ incls) {
    __shared__ unsigned int tile_id;
    const int tid = threadIdx.x;
    if (tid == 0) tile_id = atomicAdd(counter, 1u);
    __syncthreads();
    const long long tile = tile_id;
    const long long q = tile / groups, g = tile % groups;
    const long long lane_id = g * BLOCK + tid;
    if (lane_id >= lanes) return;
    const long long o_idx = lane_id / inner, i_idx = lane_id % inner;
    const T* xc = x + o_idx * L * inner + i_idx;
    T* outc = out + o_idx * L * inner + i_idx;
    const long long start = q * ITEMS;
    const int count = (int)min((long long)ITEMS, L - start);

    T v[ITEMS];
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const long long l = start + k;
        v[k] = k < count ? xc[(reverse ? L - 1 - l : l) * inner] : neg_inf<T>();
    }
    T ref = v[0];
#pragma unroll
    for (int k = 1; k < ITEMS; ++k) ref = nan_max(ref, v[k]);
    Pair<T> agg;
    if (isfinite(ref)) {
        T acc = T(0);
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) acc += xexp(v[k] - ref);
        agg = Pair<T>{ref, acc};
    } else {
        // read again from memory: indexing v[] in a loop that is not unrolled would put it in
        // local memory for the whole kernel
        agg = exact_aggregate(xc + (reverse ? L - 1 - start : start) * inner,
                              reverse ? -inner : inner, count);
    }

    // look-back along this column: tile q-1 of the same group is `tile - groups`
    const long long slot = tile * BLOCK + tid;
    Pair<T> prefix = identity<T>();
    if (q == 0) {
        publish(&incls[slot], agg);
    } else {
        publish(&aggs[slot], agg);
        for (long long pred = tile - groups;; pred -= groups) {
            Pair<T> val;
            const int f = wait_slot(aggs, incls, pred * BLOCK + tid, val);
            prefix = combine(prefix, val);
            if (f == 2) break;
        }
        publish(&incls[slot], combine(prefix, agg));
    }

    if (fast_ok(ref, v[0], prefix)) {
        // the sums against `ref` are computed again rather than kept: registers are the limit
        T o[ITEMS];
        fast_outputs_recompute<T, ITEMS>(v, ref, prefix, exclusive, o);
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const long long l = start + k;
            if (k < count) outc[(reverse ? L - 1 - l : l) * inner] = o[k];
        }
    } else {
        // the exact path copies the inputs to the output and scans them in place
        const long long step = reverse ? -inner : inner;
        const long long first = (reverse ? L - 1 - start : start) * inner;
        for (int k = 0; k < count; ++k) outc[first + k * step] = xc[first + k * step];
        exact_run(outc + first, step, count, prefix, exclusive);
    }
}
"""

_CTYPES = {"float32": "float", "float64": "double"}


def _names(dtype_name: str) -> dict[str, str]:
    t = _CTYPES[dtype_name]
    return {
        "tiles": f"xpops_logcumsumexp_tiles<{t}, {TILE_ITEMS[dtype_name]}>",
        "rows": f"xpops_logcumsumexp_rows<{t}, {ROW_CHUNK[dtype_name]}>",
        "columns": f"xpops_logcumsumexp_columns<{t}, {COLUMN_ITEMS[dtype_name]}>",
    }


@cupy.memoize(for_each_device=True)
def _kernels(dtype_name: str) -> dict[str, cupy.RawKernel]:
    names = _names(dtype_name)
    module = cupy.RawModule(
        code=_SOURCE,
        options=(
            "-std=c++17",
            f"-DBLOCK={BLOCK}",
            f"-DTILES_BLOCK={TILES_BLOCK}",
            f"-DROWS_BLOCK={ROWS_BLOCK}",
        ),
        name_expressions=list(names.values()),
    )
    return {key: module.get_function(name) for key, name in names.items()}


def _look_back_state(slots: int, dtype: np.dtype) -> tuple[cupy.ndarray, ...]:
    """A zero tile counter and two arrays of `slots` (m, s) pairs set to all-one bits."""
    counter = cupy.zeros(1, dtype=np.uint32)
    pairs = cupy.empty(4 * slots, dtype=dtype)
    stream = cupy.cuda.get_current_stream().ptr
    cupy.cuda.runtime.memsetAsync(pairs.data.ptr, 0xFF, pairs.nbytes, stream)
    return counter, pairs[: 2 * slots], pairs[2 * slots :]


def _scan_tiles(x, out, rows, L, exclusive, reverse, kernel, items):
    tiles_per_row = -(-L // (TILES_BLOCK * items))
    tiles = rows * tiles_per_row
    counter, aggs, incls = _look_back_state(tiles, x.dtype)
    kernel(
        (tiles,),
        (TILES_BLOCK,),
        (
            x,
            out,
            np.int64(L),
            np.int64(tiles_per_row),
            np.int32(exclusive),
            np.int32(reverse),
            counter,
            aggs,
            incls,
        ),
    )


def _scan_rows(x, out, rows, L, exclusive, reverse, kernel):
    kernel(
        (-(-rows // ROWS_BLOCK),),
        (ROWS_BLOCK,),
        (x, out, np.int64(rows), np.int64(L), np.int32(exclusive), np.int32(reverse)),
    )


def _scan_columns(x, out, outer, L, inner, exclusive, reverse, kernel, items):
    lanes = outer * inner
    groups = -(-lanes // BLOCK)
    tiles = groups * -(-L // items)
    counter, aggs, incls = _look_back_state(tiles * BLOCK, x.dtype)
    kernel(
        (tiles,),
        (BLOCK,),
        (
            x,
            out,
            np.int64(L),
            np.int64(inner),
            np.int64(lanes),
            np.int64(groups),
            np.int32(exclusive),
            np.int32(reverse),
            counter,
            aggs,
            incls,
        ),
    )


def choose_kernel(shape: tuple[int, ...], axis: int) -> str:
    """Which kernel scans `axis` of a C-contiguous array of `shape`."""
    inner = math.prod(shape[axis + 1 :])
    if inner > 1:
        return "columns"
    rows = math.prod(shape[:axis])
    short = shape[axis] <= ROWS_KERNEL_MAX_LEN and rows >= ROWS_KERNEL_MIN_ROWS
    return "rows" if short else "tiles"


def logcumsumexp(x: cupy.ndarray, axis: int, exclusive: bool, reverse: bool, kernel=None):
    """Scan `axis` of `x` (float32/float64/complex, ndim >= 1); arguments already validated.

    `kernel` (tests and benchmarks only) forces ``"tiles"``, ``"rows"`` or ``"columns"``.
    """
    if x.dtype.kind == "c":
        # No complex kernel yet: the generic engine runs on CuPy arrays.
        import array_api_compat.cupy as cxp

        from .._agnostic import cumulative as generic

        return generic.logcumsumexp(x, axis, exclusive, reverse, xp=cxp)
    x = cupy.ascontiguousarray(x)  # non-contiguous input: one copy, never a transpose
    out = cupy.empty_like(x)
    if x.size == 0:
        return out
    name = x.dtype.name
    shape = x.shape
    L = shape[axis]
    outer = math.prod(shape[:axis])
    inner = math.prod(shape[axis + 1 :])
    kind = kernel or choose_kernel(shape, axis)
    kernels = _kernels(name)
    if kind == "columns":
        _scan_columns(
            x, out, outer, L, inner, exclusive, reverse, kernels["columns"], COLUMN_ITEMS[name]
        )
    elif kind == "rows":
        _scan_rows(x, out, outer * inner, L, exclusive, reverse, kernels["rows"])
    else:
        _scan_tiles(
            x, out, outer * inner, L, exclusive, reverse, kernels["tiles"], TILE_ITEMS[name]
        )
    return out
