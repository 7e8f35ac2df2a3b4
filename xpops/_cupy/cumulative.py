"""CuPy engine of logcumsumexp: five CUDA kernels, chosen by the shape of the scan.

Every kernel scans pairs ``(m, s)`` standing for ``m + log(s)``. A run of consecutive elements
is summed against one reference, a maximum ``ref``: one ``exp(x - ref)`` per element, plain
running sums, and one ``log`` per output once the prefix of everything before the run has been
folded in (``R + log(a + c_k * b)``). This *fast path* is exact whenever no output of the run
can underflow against ``ref``: prefix sums only grow, so it is enough that the first output, or
the prefix, is within THRESHOLD (60 in float32, 650 in float64) of ``ref``. Otherwise (NaN,
+-inf, everything -inf so far, larger jumps) the run takes the *exact path*: pairwise
``combine`` with every special value handled.

* ``tiles``: long rows (1-D input, or few rows): a block scans a tile held in registers,
  read and written as coalesced vectors, and gets the sum of all earlier tiles of its row by
  decoupled look-back (Merrill & Garland, 2016), so the input is read once and the output
  written once. float32.
* ``tiles_staged``: the same scheme for float64, the tile copied to shared memory by cp.async
  and scanned there in rolled loops (short code, no registers held by the tile).
* ``rows``: many short rows along the contiguous axis: a thread per row, the rows staged through
  shared memory a chunk of columns at a time, the carry in registers.
* ``column_blocks``: a strided axis with many columns: a block owns 32 adjacent columns for the
  whole axis, its warps take consecutive runs of rows and the carry moves down in registers.
* ``columns``: a strided axis with few columns: a thread per column, tiles of rows chained along
  the axis by decoupled look-back per column.

`reverse` maps logical index ``l`` to ``L - 1 - l`` in the loads and stores; `exclusive` shifts
the scan by one within registers. Neither copies the data.
"""

import math

import cupy
import numpy as np

# Launch constants, measured on an H100 (share of the copy rate, 2**28 float32 unless said).
BLOCK = 256  # threads per block of the columns kernel
# tiles: TILES_BLOCK threads of TILE_ITEMS elements in registers, read and written as
# TILE_VECTOR-element vectors: one 8192 float32 / 4096 float64 tile a block.
TILES_BLOCK = 256
TILE_ITEMS = {"float32": 32, "float64": 16}
TILE_VECTOR = {"float32": 4, "float64": 2}
# The row totals (`total`): ROUNDS vector loads a thread a step, about this many blocks an SM.
TOTAL_ROUNDS = 4
TOTAL_BLOCKS_PER_SM = 8
# A block of the tiles kernel prefetches into L2 the tile TILES_PREFETCH_PER_SM * SMs ahead of
# its own (a quarter of the resident blocks) on rows of at least TILES_PREFETCH_MIN_TILES
# tiles. Measured on an H100, kernel time, 2**28 float32 1-D: 74% without, 82% one tile an SM
# ahead, 77% two, 65% three; (8192, 32768), rows of 4 tiles, 85% without, 79% with. 2**27
# float64: 43% at 1 or 2 (the libdevice exp/log inlined, three blocks an SM), 50% with the
# table forms of TileMath and four blocks, 58% in tiles_staged of 16 items (56% without
# prefetch, 56-48% two ahead), 67% at 32 items (66% without prefetch).
TILES_PREFETCH_PER_SM = 1
# Which dtypes take the tiles_staged kernel for the tiles scheme (see there).
TILES_STAGED = {"float32": False, "float64": True}
# tiles_staged: TILES_BLOCK threads of STAGED_ITEMS elements in dynamic shared memory (66 KiB
# a float64 tile of 8192), at least STAGED_MIN_BLOCKS blocks an SM. H100, 2**27 float64, kernel
# time: 58% of the copy rate at 16 items and four blocks (static shared memory, 64 registers
# with spills), 63% at 22 and four, 65% at 24 and three or four, 67% at 32 and three (56
# registers, no spills), 66% at 32 and two, 58% at 40 and two; 128 threads of 32 items 62%.
STAGED_ITEMS = {"float32": 32, "float64": 32}
STAGED_MIN_BLOCKS = 3
TILES_PREFETCH_MIN_TILES = 64
ROWS_BLOCK = 128  # rows per block of the rows kernel
ROW_CHUNK = {"float32": 32, "float64": 16}  # columns staged at once: 17 KiB of shared memory
COLUMN_ITEMS = {"float32": 32, "float64": 16}  # rows per column tile
# column_blocks: 32 columns a block, COLUMN_BLOCK_THREADS / 32 warps down the axis.
COLUMN_BLOCK_THREADS = 256
COLUMN_BLOCK_ITEMS = {"float32": 16, "float64": 8}
# Below COLUMN_BLOCKS_MIN_LANES columns (512 blocks) the columns kernel is faster. H100,
# float32 axis 0: (8192, 32768) column_blocks 82-86%, columns 67-74%; (65536, 4096) 40-42%
# and 54-58%.
COLUMN_BLOCKS_MIN_LANES = 16384
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
__device__ __noinline__ double exp_call(double v) { return exp(v); }
__device__ __noinline__ double log_call(double v) { return log(v); }
__device__ __forceinline__ float xexp(float v) { return __expf(v); }
__device__ __forceinline__ double xexp(double v) { return exp(v); }
__device__ __forceinline__ float xlog(float v) { return __logf(v); }
__device__ __forceinline__ double xlog(double v) { return log(v); }

// The tiles kernels' per-element exp and per-output log. float32: the hardware forms above.
// float64: tables of 2^(j/64) and of 1 / (1 + (i + 1/2) / 64) and its log in shared memory, and
// short polynomials, with no float/int conversion instructions (the 1.5 * 2^52 shift trick):
// half the float64 instructions of exp() and log() (17 and 33 in PTX) in the hot loops. Within
// a few ulp. Arguments where the short forms do not hold (subnormal results, 0, inf, NaN) call
// exp() and log(): inlined at every element of a tile, their code crowded the instruction cache.
template <typename T> struct TileMath;
template <> struct TileMath<float> {
    __device__ __forceinline__ void fill() {}
    __device__ __forceinline__ float exp(float v) const { return __expf(v); }
    __device__ __forceinline__ float log(float v) const { return __logf(v); }
};
template <> struct TileMath<double> {
    double up[64], rcp[64], lg[64];  // 2^(j/64); 1 / (1 + (i + 1/2) / 64); -log(rcp[i])
    static constexpr double INV_STEP = 92.33248261689366;  // 64 / ln 2
    // ln 2 / 64 as STEP_HI + STEP_LO, STEP_HI with 17 trailing zero bits: k * STEP_HI is exact
    static constexpr double STEP_HI = 0.010830424696223417, STEP_LO = 2.572804622327669e-14;
    // ln 2 as LN2_HI + LN2_LO, LN2_HI with 12 trailing zero bits: n * LN2_HI is exact
    static constexpr double LN2_HI = 0.693147180559663, LN2_LO = 2.8235290563031577e-13;
    static constexpr double SHIFT = 6755399441055744.0;  // 1.5 * 2^52
    __device__ __forceinline__ void fill() {
        for (int j = threadIdx.x; j < 64; j += blockDim.x) {
            up[j] = exp2(j / 64.0);
            rcp[j] = 1.0 / (1.0 + (j + 0.5) / 64.0);
            lg[j] = -::log(rcp[j]);
        }
    }
    __device__ __forceinline__ double exp(double v) const {
        if (!(v > -707.0 && v < 709.0)) return exp_call(v);
        const double t = fma(v, INV_STEP, SHIFT);  // SHIFT + k, k = rint(v * INV_STEP)
        const int k = __double2loint(t);
        const double kd = t - SHIFT;
        const double r = fma(kd, -STEP_LO, fma(kd, -STEP_HI, v));  // |r| <= ln 2 / 128
        double q = fma(r, 1.0 / 120, 1.0 / 24);
        q = fma(q, r, 1.0 / 6);
        q = fma(q, r, 0.5);
        q = fma(q, r, 1.0);
        q *= r;  // exp(r) - 1, error r^6 / 720 < 4e-17
        const double u = up[k & 63];
        const double y = fma(u, q, u);
        return __longlong_as_double(__double_as_longlong(y) + ((long long)(k >> 6) << 52));
    }
    __device__ __forceinline__ double log(double y) const {
        if (!(y >= 2.2250738585072014e-308 && y <= 1.7976931348623157e308)) return log_call(y);
        const int hi = __double2hiint(y);
        const int i = (hi >> 14) & 63;  // the top 6 bits of the mantissa
        const double m = __hiloint2double((hi & 0x000FFFFF) | 0x3FF00000, __double2loint(y));
        const double e = fma(m, rcp[i], -1.0);  // |e| < 1/128
        double q = fma(e, 1.0 / 7, -1.0 / 6);
        q = fma(q, e, 1.0 / 5);
        q = fma(q, e, -0.25);
        q = fma(q, e, 1.0 / 3);
        q = fma(q, e, -0.5);
        const double l1p = fma(e * e, q, e);  // log(1 + e), error e^8 / 8 < 2e-18
        // the exponent n as a double by the same shift (n + 2^31 in the low word)
        const double n = __hiloint2double(0x43380000, ((hi >> 20) - 1023) ^ 0x80000000) -
                         (SHIFT + 2147483648.0);
        return fma(n, LN2_HI, fma(n, LN2_LO, l1p) + lg[i]);
    }
};

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

// The fast path writes an output as R + log(a + b * c), c a sum against `ref` of the run's
// own elements, after the prefix P: R = max(P.m, ref), a = P.s exp(P.m - R), b = exp(ref - R).
template <typename T> struct Rebase { T R, a, b; };
template <typename T> __device__ __forceinline__ Rebase<T> rebase(Pair<T> P, T ref) {
    const T R = P.m > ref ? P.m : ref;
    return Rebase<T>{R, (P.m == neg_inf<T>()) ? T(0) : P.s * xexp(P.m - R), xexp(ref - R)};
}

// Fast path with the sums against `ref` computed again from v[] instead of kept (registers).
template <typename T, int N>
__device__ __forceinline__ void fast_outputs_recompute(const T* v, T ref, Pair<T> P,
                                                       int exclusive, T* o) {
    const Rebase<T> f = rebase(P, ref);
    const T R = f.R, a = f.a, b = f.b;
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

// A thread's run of N elements down a strided column (rows start.. of `col`, stride `inner`,
// -inf past `count`) into v[], and the run's aggregate against its maximum `ref` (or exact).
template <typename T, int N>
__device__ __forceinline__ Pair<T> column_run(const T* col, long long L, long long inner,
                                              long long start, int count, int reverse, T* v,
                                              T& ref) {
#pragma unroll
    for (int k = 0; k < N; ++k) {
        const long long l = start + k;
        v[k] = k < count ? col[(reverse ? L - 1 - l : l) * inner] : neg_inf<T>();
    }
    ref = v[0];
#pragma unroll
    for (int k = 1; k < N; ++k) ref = nan_max(ref, v[k]);
    if (isfinite(ref)) {
        T acc = T(0);
#pragma unroll
        for (int k = 0; k < N; ++k) acc += xexp(v[k] - ref);
        return Pair<T>{ref, acc};
    }
    // read again from memory: indexing v[] in a loop that is not unrolled would put it in
    // local memory for the whole kernel
    return exact_aggregate(col + (reverse ? L - 1 - start : start) * inner,
                           reverse ? -inner : inner, count);
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
// The look-back state, one allocation (see _look_back_state): a tile counter, then `slots`
// aggregate slots, then `slots` inclusive-prefix slots.
template <typename T> struct LookBack {
    unsigned long long* counter;
    Pair<T>* aggs;
    Pair<T>* incls;
    __device__ __forceinline__ LookBack(unsigned long long* state, long long slots)
        : counter(state), aggs(reinterpret_cast<Pair<T>*>(state + 1)), incls(aggs + slots) {}
};
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

// ---- tiles: long rows, decoupled look-back ------------------------------------------------
// A tile is ROUNDS x THREADS chunks of VEC consecutive elements: in round k thread t holds
// chunk k * THREADS + t, so every load and store of a warp is one contiguous vector access and
// the data stay in registers (no shared-memory staging). The tile's sums are taken against its
// maximum B; with the prefix P of the earlier tiles every output is R + log(a + b * (S + c))
// (see `rebase`, with ref = B), S the sum of the chunks before and c the running sum within
// the chunk. This is exact when no output is below B - THRESHOLD: every output is at least
// max(value(P), first element of the tile). Otherwise (and for NaN, +inf) the tile is
// scanned again with pairwise combines.
template <typename T> struct Vec;
template <> struct Vec<float> { using type = float4; static constexpr int N = 4; };
template <> struct Vec<double> { using type = double2; static constexpr int N = 2; };

template <typename T, int VEC>
__device__ __forceinline__ void load_chunk(const T* __restrict__ xr, long long L, long long l0,
                                           int reverse, bool vector, T* v) {
    using V = typename Vec<T>::type;
    if (vector) {  // whole chunk in range and aligned
        const V w = *reinterpret_cast<const V*>(xr + (reverse ? L - VEC - l0 : l0));
        const T* e = reinterpret_cast<const T*>(&w);
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[j] = e[reverse ? VEC - 1 - j : j];
    } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const long long l = l0 + j;
            v[j] = l < L ? xr[reverse ? L - 1 - l : l] : neg_inf<T>();
        }
    }
}

template <typename T, int VEC>
__device__ __forceinline__ void store_chunk(T* __restrict__ outr, long long L, long long l0,
                                            int reverse, bool vector, const T* v) {
    using V = typename Vec<T>::type;
    if (vector) {
        V w;
        T* e = reinterpret_cast<T*>(&w);
#pragma unroll
        for (int j = 0; j < VEC; ++j) e[reverse ? VEC - 1 - j : j] = v[j];
        *reinterpret_cast<V*>(outr + (reverse ? L - VEC - l0 : l0)) = w;
    } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const long long l = l0 + j;
            if (l < L) outr[reverse ? L - 1 - l : l] = v[j];
        }
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

// The aggregate of a tile from its maximum B and, for finite B, its sum against B.
template <typename T> __device__ __forceinline__ Pair<T> tile_total(T B, T sum) {
    if (isfinite(B)) return Pair<T>{B, sum};
    if (isnan(B)) return Pair<T>{qnan<T>(), T(1)};
    if (B == pos_inf<T>()) return Pair<T>{pos_inf<T>(), T(1)};
    return identity<T>();  // every element -inf
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

    // running sums against B, in place (exclusive ones for `exclusive`), each plus the sum of
    // the warp's earlier chunks of the round: only the rounds' warp totals stay to be added, so
    // no per-chunk carry is held in registers through the look-back
    if (isfinite(B)) {
#pragma unroll
        for (int k = 0; k < ROUNDS; ++k) {
            T acc = T(0);
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                const T e = math.exp(v[k][j] - B);
                v[k][j] = exclusive ? acc : acc + e;
                acc += e;
            }
            const T incl = warp_inclusive_sum(acc, lane);
            if (lane == 31) sums_sh[k * WARPS + warp] = incl;
            // shifted, not incl - acc: that cancels when this chunk dwarfs the ones before
            const T ex = __shfl_up_sync(FULL_MASK, incl, 1);
            const T before = lane == 0 ? T(0) : ex;
#pragma unroll
            for (int j = 0; j < VEC; ++j) v[k][j] += before;
        }
    }
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
    if (!fast_ok(B, first_sh, P)) {
        exact_tile<T, TILE, THREADS>(xr, outr, L, start, P, exclusive, reverse, seg_agg);
        return;
    }
    const Rebase<T> f = rebase(P, B);
#pragma unroll
    for (int k = 0; k < ROUNDS; ++k) {
        const T S = sums_sh[k * WARPS + warp];
        T o[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) o[j] = f.R + math.log(f.a + f.b * (S + v[k][j]));
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
// crowded the instruction cache. H100, 2**27 float64: 58% of the copy rate against 48% at
// the same tile size of 4096; float32 gained little (85% against 83%) and stays on the
// register kernel.
// Long runs (ITEMS = 32: a tile of 8192 float64 in 66 KiB of dynamic shared memory, three
// blocks an SM) halve the look-backs and barriers an element against runs of 16 (see
// STAGED_ITEMS). Earlier, at 16 items: five or six blocks an SM spilled (47, 34% against 58%);
// unrolling the runs by 2, 4 or 8: 57, 58, 55%.
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
    const T S = warp_sh[warp] + before;
#pragma unroll UNROLL
    for (int j = 0; j < ITEMS; ++j) run[j] = f.R + math.log(f.a + f.b * (S + run[j]));
    // the tile's first exclusive output is P alone, which may lie below B - THRESHOLD
    if (exclusive && tid == 0) run[0] = value(P);
    __syncthreads();
    for (int k = 0; k < ITEMS; ++k) {
        const int l = k * THREADS + tid;
        const long long g = start + l;
        if (g < L) outr[reverse ? L - 1 - g : g] = buf[l + l / ITEMS];
    }
}

// ---- row totals: log(sum(exp(x))) of long rows, nothing else written (the Dask engine's
// block totals) ------------------------------------------------------------------------------
// Block (r, p) reduces elements [p * part, (p + 1) * part) of row r: each thread takes chunks
// of ROUNDS x VEC elements (vector loads where aligned), sums a chunk against its maximum and
// combines that pair into its own, then the block's pair goes to partials[r * parts + p]. A
// reduction needs neither the scan's look-back nor its exact path: each element is read once
// with one exp. xpops_logsumexp_rows then combines each row's parts, a warp a row.
template <typename T, int ROUNDS, int THREADS>
__global__ void __launch_bounds__(THREADS)
xpops_logsumexp_parts(const T* __restrict__ x, const long long L, const long long parts,
                      const long long part, T* __restrict__ partials) {
    constexpr int VEC = Vec<T>::N, STEP = ROUNDS * THREADS * VEC;
    constexpr unsigned long long ALIGN = sizeof(T) * VEC;
    __shared__ Pair<T> warp_sh[THREADS / 32];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const long long r = blockIdx.x / parts, p = blockIdx.x % parts;
    const T* xr = x + r * L;
    const long long lo = p * part, hi = min(L, lo + part);
    Pair<T> acc = identity<T>();
    for (long long s = lo; s < hi; s += STEP) {
        const bool vector =
            s + STEP <= hi && (reinterpret_cast<unsigned long long>(xr + s) % ALIGN) == 0;
        T v[ROUNDS][VEC];
#pragma unroll
        for (int k = 0; k < ROUNDS; ++k) {
            load_chunk<T, VEC>(xr, hi, s + ((long long)k * THREADS + tid) * VEC, 0, vector, v[k]);
        }
        T m = v[0][0];
#pragma unroll
        for (int k = 0; k < ROUNDS; ++k)
#pragma unroll
            for (int j = 0; j < VEC; ++j) m = nan_max(m, v[k][j]);
        T sum = T(0);
        if (isfinite(m)) {
#pragma unroll
            for (int k = 0; k < ROUNDS; ++k)
#pragma unroll
                for (int j = 0; j < VEC; ++j) sum += xexp(v[k][j] - m);
        }
        acc = combine(acc, tile_total(m, sum));
    }
    acc = warp_reduce(acc);
    if (lane == 0) warp_sh[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        acc = warp_reduce(lane < THREADS / 32 ? warp_sh[lane] : identity<T>());
        if (lane == 0) reinterpret_cast<Pair<T>*>(partials)[blockIdx.x] = acc;
    }
}

template <typename T>
__global__ void xpops_logsumexp_rows(const T* __restrict__ partials, const long long rows,
                                     const long long parts, T* __restrict__ totals) {
    const long long r = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x & 31;
    if (r >= rows) return;  // the whole warp: r is the warp's
    const Pair<T>* pr = reinterpret_cast<const Pair<T>*>(partials) + r * parts;
    Pair<T> acc = identity<T>();
    for (long long p = lane; p < parts; p += 32) acc = combine(acc, pr[p]);
    acc = warp_reduce(acc);
    if (lane == 0) totals[r] = value(acc);
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
                           unsigned long long* __restrict__ state) {
    __shared__ unsigned long long tile_id;
    const int tid = threadIdx.x;
    const LookBack<T> lb(state, (long long)gridDim.x * BLOCK);  // a slot per thread
    if (tid == 0) tile_id = atomicAdd(lb.counter, 1ull) + 1ull;  // the counter starts at ~0
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

    T v[ITEMS], ref;
    const Pair<T> agg = column_run<T, ITEMS>(xc, L, inner, start, count, reverse, v, ref);

    // look-back along this column: tile q-1 of the same group is `tile - groups`
    const long long slot = tile * BLOCK + tid;
    Pair<T> prefix = identity<T>();
    if (q == 0) {
        publish(&lb.incls[slot], agg);
    } else {
        publish(&lb.aggs[slot], agg);
        for (long long pred = tile - groups;; pred -= groups) {
            Pair<T> val;
            const int f = wait_slot(lb.aggs, lb.incls, pred * BLOCK + tid, val);
            prefix = combine(prefix, val);
            if (f == 2) break;
        }
        publish(&lb.incls[slot], combine(prefix, agg));
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

// ---- column_blocks: a strided axis with many columns, no look-back ---------------------------
// A block owns 32 adjacent columns for the whole axis: its warps take consecutive runs of
// ITEMS rows (each warp reads 32 adjacent elements per row), the runs are combined across
// warps through shared memory, and the carry moves down the axis in registers. No state in
// global memory, so nothing to clear before the launch.
template <typename T, int ITEMS, int THREADS>
__global__ void __launch_bounds__(THREADS)
xpops_logcumsumexp_column_blocks(const T* __restrict__ x, T* __restrict__ out,
                                 const long long L, const long long inner,
                                 const long long lanes, const int exclusive, const int reverse) {
    constexpr int WARPS = THREADS / 32;
    __shared__ T run_sum[WARPS][32];
    __shared__ Pair<T> run_agg[WARPS][32];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const long long lane_id = (long long)blockIdx.x * 32 + lane;
    const bool active = lane_id < lanes;
    const long long o_idx = active ? lane_id / inner : 0, i_idx = active ? lane_id % inner : 0;
    const T* xc = x + o_idx * L * inner + i_idx;
    T* oc = out + o_idx * L * inner + i_idx;
    Pair<T> carry = identity<T>();
    for (long long base = 0; base < L; base += (long long)WARPS * ITEMS) {
        const long long start = base + (long long)warp * ITEMS;
        const int count = active ? (int)max(0LL, min((long long)ITEMS, L - start)) : 0;
        T v[ITEMS], ref;
        const Pair<T> agg = column_run<T, ITEMS>(xc, L, inner, start, count, reverse, v, ref);
        // Combine the warps' runs of this column: as plain sums against their maximum when the
        // first run holding anything above -inf is within THRESHOLD of it (as in the tiles
        // kernel), else pairwise.
        run_agg[warp][lane] = agg;
        __syncthreads();
        T M = neg_inf<T>(), first = neg_inf<T>();
#pragma unroll
        for (int w = 0; w < WARPS; ++w) {
            const T m = run_agg[w][lane].m;
            M = nan_max(M, m);
            if (first == neg_inf<T>()) first = m;
        }
        const bool sums = isfinite(M) && first >= M - threshold<T>();
        if (sums) run_sum[warp][lane] = (agg.m == neg_inf<T>()) ? T(0) : agg.s * xexp(agg.m - M);
        __syncthreads();
        Pair<T> before = identity<T>(), chunk = identity<T>();
        if (sums) {
            T b = T(0), t = T(0);
#pragma unroll
            for (int w = 0; w < WARPS; ++w) {
                const T d = run_sum[w][lane];
                if (w < warp) b += d;
                t += d;
            }
            if (b != T(0)) before = Pair<T>{M, b};  // 0 only when every earlier run is -inf
            chunk = Pair<T>{M, t};
        } else {
            for (int w = 0; w < WARPS; ++w) {
                const Pair<T> p = run_agg[w][lane];
                if (w < warp) before = combine(before, p);
                chunk = combine(chunk, p);
            }
        }
        const Pair<T> P = combine(carry, before);
        carry = combine(carry, chunk);
        if (fast_ok(ref, v[0], P)) {
            T o[ITEMS];
            fast_outputs_recompute<T, ITEMS>(v, ref, P, exclusive, o);
#pragma unroll
            for (int k = 0; k < ITEMS; ++k) {
                const long long l = start + k;
                if (k < count) oc[(reverse ? L - 1 - l : l) * inner] = o[k];
            }
        } else if (count > 0) {
            const long long step = reverse ? -inner : inner;
            const long long first_at = (reverse ? L - 1 - start : start) * inner;
            for (int k = 0; k < count; ++k) oc[first_at + k * step] = xc[first_at + k * step];
            exact_run(oc + first_at, step, count, P, exclusive);
        }
        __syncthreads();  // the shared arrays are refilled by the next chunk
    }
}
"""

_CTYPES = {"float32": "float", "float64": "double"}


def _names(dtype_name: str) -> dict[str, str]:
    t = _CTYPES[dtype_name]
    return {
        "tiles": (
            f"xpops_logcumsumexp_tiles<{t}, {TILE_ITEMS[dtype_name] // TILE_VECTOR[dtype_name]}, "
            f"{TILES_BLOCK}>"
        ),
        "tiles_staged": (
            f"xpops_logcumsumexp_tiles_staged<{t}, {STAGED_ITEMS[dtype_name]}, {TILES_BLOCK}, "
            f"{STAGED_MIN_BLOCKS}>"
        ),
        "rows": f"xpops_logcumsumexp_rows<{t}, {ROW_CHUNK[dtype_name]}>",
        "total_parts": f"xpops_logsumexp_parts<{t}, {TOTAL_ROUNDS}, {TILES_BLOCK}>",
        "total_rows": f"xpops_logsumexp_rows<{t}>",
        "columns": f"xpops_logcumsumexp_columns<{t}, {COLUMN_ITEMS[dtype_name]}>",
        "column_blocks": (
            f"xpops_logcumsumexp_column_blocks<{t}, {COLUMN_BLOCK_ITEMS[dtype_name]}, "
            f"{COLUMN_BLOCK_THREADS}>"
        ),
    }


_OPTIONS = ("-std=c++17", f"-DBLOCK={BLOCK}", f"-DROWS_BLOCK={ROWS_BLOCK}")


@cupy.memoize(for_each_device=True)
def _kernels(dtype_name: str) -> dict[str, cupy.RawKernel]:
    names = _names(dtype_name)
    module = cupy.RawModule(code=_SOURCE, options=_OPTIONS, name_expressions=list(names.values()))
    kernels = {key: module.get_function(name) for key, name in names.items()}
    # above 48 KiB a kernel must ask for its dynamic shared memory
    kernels["tiles_staged"].max_dynamic_shared_size_bytes = _staged_shared_bytes(dtype_name)
    return kernels


def _staged_shared_bytes(dtype_name: str) -> int:
    """Dynamic shared memory of tiles_staged: the tile, one element of padding a run."""
    return TILES_BLOCK * (STAGED_ITEMS[dtype_name] + 1) * np.dtype(dtype_name).itemsize


def tile_items(kind: str, dtype_name: str) -> int:
    """Elements a thread of the tiles kernel `kind` scans: a tile is TILES_BLOCK times this."""
    return STAGED_ITEMS[dtype_name] if kind == "tiles_staged" else TILE_ITEMS[dtype_name]


@cupy.memoize(for_each_device=True)
def _multiprocessors() -> int:
    return int(cupy.cuda.Device().attributes["MultiProcessorCount"])


def _look_back_state(slots: int, dtype: np.dtype) -> cupy.ndarray:
    """The look-back state of a scan with `slots` slots, all bits set: a tile counter (which
    starts at 2**64 - 1: the kernels add one to what ``atomicAdd`` returns), then `slots`
    aggregate (m, s) pairs, then `slots` inclusive-prefix pairs.

    One allocation, one memset and one kernel argument: views into it for the three parts cost
    about 13 us of host time a call, the allocation and launch of a separate zeroed counter
    about 10 us, time in which the GPU idles before a short scan.
    """
    words = 1 + 2 * slots * (2 * np.dtype(dtype).itemsize // 8)  # 8-byte words
    state = cupy.empty(words, dtype=np.uint64)
    stream = cupy.cuda.get_current_stream().ptr
    cupy.cuda.runtime.memsetAsync(state.data.ptr, 0xFF, state.nbytes, stream)
    return state


_NULL = np.uint64(0)  # a null pointer argument


def _scan_tiles(x, out, rows, L, exclusive, reverse, kernel, kind, carry=None):
    """The tiles scan of `rows` rows of length `L`; `carry` (rows,): each row's carry."""
    name = x.dtype.name
    tiles_per_row = -(-L // (TILES_BLOCK * tile_items(kind, name)))
    tiles = rows * tiles_per_row
    state = _look_back_state(tiles, x.dtype)
    long_rows = tiles_per_row >= TILES_PREFETCH_MIN_TILES
    prefetch = TILES_PREFETCH_PER_SM * _multiprocessors() if long_rows else 0
    kernel(
        (tiles,),
        (TILES_BLOCK,),
        (
            x,
            out,
            np.int64(L),
            np.int64(tiles_per_row),
            np.int64(tiles),
            np.int64(prefetch),
            np.int32(exclusive),
            np.int32(reverse),
            state,
            _NULL if carry is None else carry,
        ),
        shared_mem=_staged_shared_bytes(name) if kind == "tiles_staged" else 0,
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
    state = _look_back_state(tiles * BLOCK, x.dtype)
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
            state,
        ),
    )


def _scan_column_blocks(x, out, outer, L, inner, exclusive, reverse, kernel):
    lanes = outer * inner
    kernel(
        (-(-lanes // 32),),
        (COLUMN_BLOCK_THREADS,),
        (
            x,
            out,
            np.int64(L),
            np.int64(inner),
            np.int64(lanes),
            np.int32(exclusive),
            np.int32(reverse),
        ),
    )


def choose_kernel(shape: tuple[int, ...], axis: int) -> str:
    """Which kernel scans `axis` of a C-contiguous array of `shape`."""
    inner = math.prod(shape[axis + 1 :])
    outer = math.prod(shape[:axis])
    if inner > 1:
        return "column_blocks" if outer * inner >= COLUMN_BLOCKS_MIN_LANES else "columns"
    short = shape[axis] <= ROWS_KERNEL_MAX_LEN and outer >= ROWS_KERNEL_MIN_ROWS
    return "rows" if short else "tiles"


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


def _kind(shape: tuple[int, ...], axis: int, dtype_name: str) -> str:
    """The kernel that scans `axis` of a real C-contiguous array: `choose_kernel`'s, with the
    tiles scheme's staged form where the dtype runs it (TILES_STAGED)."""
    kind = choose_kernel(shape, axis)
    return "tiles_staged" if kind == "tiles" and TILES_STAGED[dtype_name] else kind


def _tiles_kind(x: cupy.ndarray, axis: int) -> str | None:
    """The tiles kernel that scans `axis` of `x` (real, C-contiguous), or None if another does."""
    kind = _kind(x.shape, axis, x.dtype.name)
    return kind if kind in ("tiles", "tiles_staged") else None


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
    kernel = _kernels(x.dtype.name)[kind]
    _scan_tiles(x, out, rows, x.shape[axis], exclusive, reverse, kernel, kind, carry=carries)
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
    step = TOTAL_ROUNDS * TILES_BLOCK * TILE_VECTOR[x.dtype.name]
    # about TOTAL_BLOCKS_PER_SM blocks an SM in all, each part a whole number of steps
    parts = max(1, min(-(-L // step), TOTAL_BLOCKS_PER_SM * _multiprocessors() // rows))
    part = -(-L // (parts * step)) * step
    parts = -(-L // part)
    partials = cupy.empty(2 * rows * parts, x.dtype)
    totals = cupy.empty(rows, x.dtype)
    kernels = _kernels(x.dtype.name)
    kernels["total_parts"](
        (rows * parts,), (TILES_BLOCK,), (x, np.int64(L), np.int64(parts), np.int64(part), partials)
    )
    kernels["total_rows"](
        (-(-rows // 8),), (256,), (partials, np.int64(rows), np.int64(parts), totals)
    )
    return totals.reshape(shape)


def logcumsumexp(x: cupy.ndarray, axis: int, exclusive: bool, reverse: bool, kernel=None):
    """Scan `axis` of `x` (float32/float64/complex, ndim >= 1); arguments already validated.

    `kernel` (tests and benchmarks only) forces ``"tiles"``, ``"tiles_staged"``, ``"rows"``,
    ``"columns"`` or ``"column_blocks"``.
    """
    if x.dtype.kind == "c":
        # No complex kernel yet: the generic engine runs on CuPy arrays.
        import array_api_compat.cupy as cxp

        from .._agnostic import cumulative as generic

        return generic.logcumsumexp(x, axis, exclusive, reverse, xp=cxp)
    x = cupy.ascontiguousarray(x)  # non-contiguous input: one copy, never a transpose
    out = cupy.empty(x.shape, x.dtype)  # x is C-contiguous; empty_like costs 4 us more
    if x.size == 0:
        return out
    name = x.dtype.name
    shape = x.shape
    L = shape[axis]
    outer = math.prod(shape[:axis])
    inner = math.prod(shape[axis + 1 :])
    kind = kernel or _kind(shape, axis, name)
    kernels = _kernels(name)
    if kind == "columns":
        _scan_columns(
            x, out, outer, L, inner, exclusive, reverse, kernels["columns"], COLUMN_ITEMS[name]
        )
    elif kind == "column_blocks":
        _scan_column_blocks(x, out, outer, L, inner, exclusive, reverse, kernels["column_blocks"])
    elif kind == "rows":
        _scan_rows(x, out, outer * inner, L, exclusive, reverse, kernels["rows"])
    else:
        _scan_tiles(x, out, outer * inner, L, exclusive, reverse, kernels[kind], kind)
    return out
