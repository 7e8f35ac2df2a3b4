"""The columns kernels of the CuPy scan: a strided axis (the scan axis is not the last one).

* ``column_blocks``: many columns. A block owns 32 adjacent columns for the whole axis, its
  warps take consecutive runs of rows and the carry moves down the axis in registers; no state
  in global memory.
* ``columns``: few columns. A thread a column, tiles of rows chained along the axis by
  decoupled look-back per column.

A thread sums its run of a column against the run's maximum and writes the outputs from the
prefix before the run (the fast path), or scans the run with pairwise combines where that
could lose accuracy (NaN, +-inf, large jumps).
"""

import cupy

from ..._lib._cuda import C_TYPES, FastKernel
from ..._lib._dtypes import dtype_name
from ._device import FAST_PATH, LOOK_BACK, PAIRS, TILE_MATH, look_back_state

__all__ = [
    "BLOCK",
    "COLUMN_BLOCK_ITEMS",
    "COLUMN_BLOCK_THREADS",
    "COLUMN_ITEMS",
    "kernels",
    "scan_column_blocks",
    "scan_columns",
]

BLOCK = 256  # threads per block of the columns kernel
COLUMN_ITEMS = {"float32": 32, "float64": 16}  # rows per column tile
# column_blocks: 32 columns a block, COLUMN_BLOCK_THREADS / 32 warps down the axis, each warp
# taking runs of COLUMN_BLOCK_ITEMS rows. Measured on an H200 (share of the copy rate), float32
# (8192, 32768): 16 rows 69%, 8 rows 55%, 32 rows 67%, 512 threads 62%; float64 (8192, 16384):
# 16 rows 42% (two blocks an SM), 8 rows 33-39%. An L2 prefetch of the next chunks gains none.
COLUMN_BLOCK_THREADS = 256
COLUMN_BLOCK_ITEMS = {"float32": 16, "float64": 16}

_SOURCE = r"""
// Fast path of a run from its running sums c[] against `ref` (inclusive: c[k] holds the terms
// up to k) and its first element x0, after the prefix P.
template <typename T, int N>
__device__ __forceinline__ void fast_outputs(const T* c, T x0, T ref, Pair<T> P, int exclusive,
                                             const TileMath<T>& math, T* o) {
    const Rebase<T> f = rebase(P, ref);
    // outputs of a single finite term (see `sole`); after an empty prefix, the run's first
    // term is c[0]
    const Sole<T> so = sole(P, x0, P.m == neg_inf<T>() ? c[0] : T(0));
#pragma unroll
    for (int k = 0; k < N; ++k) {
        const T s = exclusive ? (k == 0 ? T(0) : c[k - 1]) : c[k];
        o[k] = (s == so.s) ? so.out : f.R + math.log(f.a + f.b * s);
    }
    if (exclusive) o[0] = value(P);  // the prefix alone: a log the inclusive scan never needs
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
// -inf past `count`): its first element `x0`, its maximum `ref` and its aggregate. For finite
// `ref`, v[] holds the run's running sums against `ref` (see `fast_outputs`); otherwise `ref`
// is not finite, the aggregate is exact and v[] is left unused. The element addresses step by
// one pointer increment, and a whole run loads without bounds checks.
template <typename T, int N>
__device__ __forceinline__ Pair<T> column_run(const T* col, long long L, long long inner,
                                              long long start, int count, int reverse,
                                              const TileMath<T>& math, T* v, T& x0, T& ref) {
    const long long step = reverse ? -inner : inner;
    const T* const first = col + (reverse ? L - 1 - start : start) * inner;
    const T* p = first;
    if (count == N) {
#pragma unroll
        for (int k = 0; k < N; ++k, p += step) v[k] = *p;
    } else {
#pragma unroll
        for (int k = 0; k < N; ++k, p += step) v[k] = k < count ? *p : neg_inf<T>();
    }
    x0 = v[0];
    // the maximum without NaN (fmax drops it): a NaN element makes the sums NaN below
    ref = v[0];
#pragma unroll
    for (int k = 1; k < N; ++k) ref = fmax(ref, v[k]);
    if (isfinite(ref)) {
        T acc = T(0);
#pragma unroll
        for (int k = 0; k < N; ++k) {
            acc += math.exp(v[k] - ref);
            v[k] = acc;
        }
        if (!isnan(acc)) return Pair<T>{ref, acc};
        ref = qnan<T>();  // not finite: the caller takes the exact path
    }
    // read again from memory: indexing v[] in a loop that is not unrolled would put it in
    // local memory for the whole kernel
    return exact_aggregate(first, step, count);
}

// The outputs o[] of a run (as column_run's) to its column, `count` of them.
template <typename T, int N>
__device__ __forceinline__ void column_store(T* col, long long L, long long inner,
                                             long long start, int count, int reverse,
                                             const T* o) {
    const long long step = reverse ? -inner : inner;
    T* p = col + (reverse ? L - 1 - start : start) * inner;
    if (count == N) {
#pragma unroll
        for (int k = 0; k < N; ++k, p += step) *p = o[k];
    } else {
#pragma unroll
        for (int k = 0; k < N; ++k, p += step) {
            if (k < count) *p = o[k];
        }
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
    __shared__ TileMath<T> math;
    const int tid = threadIdx.x;
    const LookBack<T> lb(state, (long long)gridDim.x * BLOCK);  // a slot per thread
    if (tid == 0) tile_id = atomicAdd(lb.counter, 1ull) + 1ull;  // the counter starts at ~0
    math.fill();
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

    T v[ITEMS], x0, ref;
    const Pair<T> agg =
        column_run<T, ITEMS>(xc, L, inner, start, count, reverse, math, v, x0, ref);

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

    if (fast_ok(ref, x0, prefix)) {
        T o[ITEMS];
        fast_outputs<T, ITEMS>(v, x0, ref, prefix, exclusive, math, o);
        column_store<T, ITEMS>(outc, L, inner, start, count, reverse, o);
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
xpops_logcumsumexp_columns_blocks(const T* __restrict__ x, T* __restrict__ out,
                                  const long long L, const long long inner,
                                  const long long lanes, const int exclusive,
                                  const int reverse) {
    constexpr int WARPS = THREADS / 32;
    __shared__ T run_sum[WARPS][32];
    __shared__ Pair<T> run_agg[WARPS][32];
    __shared__ TileMath<T> math;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    math.fill();
    __syncthreads();
    const long long lane_id = (long long)blockIdx.x * 32 + lane;
    const bool active = lane_id < lanes;
    const long long o_idx = active ? lane_id / inner : 0, i_idx = active ? lane_id % inner : 0;
    const T* xc = x + o_idx * L * inner + i_idx;
    T* oc = out + o_idx * L * inner + i_idx;
    Pair<T> carry = identity<T>();
    for (long long base = 0; base < L; base += (long long)WARPS * ITEMS) {
        const long long start = base + (long long)warp * ITEMS;
        const int count = active ? (int)max(0LL, min((long long)ITEMS, L - start)) : 0;
        T v[ITEMS], x0, ref;
        const Pair<T> agg =
            column_run<T, ITEMS>(xc, L, inner, start, count, reverse, math, v, x0, ref);
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
            if (b != T(0)) {  // 0 only when every earlier run is -inf
                before = Pair<T>{M, b};
                // With nothing before the chunk, a single earlier run is taken as its own
                // pair: (M, b) would round a single finite term x through exp(x - M) and log.
                // (After a carry, P holds one term only where `before` is empty.)
                if (carry.m == neg_inf<T>()) {
                    int earlier = 0, only = 0;
                    for (int w = 0; w < warp; ++w) {
                        if (run_sum[w][lane] != T(0)) {
                            ++earlier;
                            only = w;
                        }
                    }
                    if (earlier == 1) before = run_agg[only][lane];
                }
            }
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
        if (fast_ok(ref, x0, P)) {
            T o[ITEMS];
            fast_outputs<T, ITEMS>(v, x0, ref, P, exclusive, math, o);
            column_store<T, ITEMS>(oc, L, inner, start, count, reverse, o);
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

_CODE = PAIRS + FAST_PATH + LOOK_BACK + TILE_MATH + _SOURCE
_OPTIONS = ("-std=c++17", f"-DBLOCK={BLOCK}")


# FastKernel signatures (p a pointer, q a 64-bit, i a 32-bit integer): columns takes x, out, L,
# inner, lanes, groups, exclusive, reverse, state; column_blocks x, out, L, inner, lanes,
# exclusive, reverse
_SIGNATURES = {"columns": "ppqqqqiip", "column_blocks": "ppqqqii"}


def _names(dtype_name: str) -> dict[str, str]:
    t = C_TYPES[dtype_name]
    return {
        "columns": f"xpops_logcumsumexp_columns<{t}, {COLUMN_ITEMS[dtype_name]}>",
        "column_blocks": (
            f"xpops_logcumsumexp_columns_blocks<{t}, {COLUMN_BLOCK_ITEMS[dtype_name]}, "
            f"{COLUMN_BLOCK_THREADS}>"
        ),
    }


@cupy.memoize(for_each_device=True)
def kernels(dtype_name: str) -> dict[str, FastKernel]:
    """The ``columns`` and ``column_blocks`` kernels of `dtype_name`, compiled for the current
    device on first use."""
    names = _names(dtype_name)
    module = cupy.RawModule(code=_CODE, options=_OPTIONS, name_expressions=list(names.values()))
    return {key: FastKernel(module.get_function(names[key]), _SIGNATURES[key]) for key in names}


def scan_columns(
    x: cupy.ndarray,
    out: cupy.ndarray,
    outer: int,
    L: int,
    inner: int,
    exclusive: bool,
    reverse: bool,
) -> None:
    """The scan of `x` (C-contiguous, shape (outer, L, inner)) along L into `out` by the
    columns kernel."""
    kernel = kernels(dtype_name(x.dtype))["columns"]
    items = COLUMN_ITEMS[dtype_name(x.dtype)]
    lanes = outer * inner
    groups = -(-lanes // BLOCK)
    tiles = groups * -(-L // items)
    state = look_back_state(tiles * BLOCK, x.dtype)
    args = (x.data.ptr, out.data.ptr, L, inner, lanes, groups)
    kernel(tiles, BLOCK, (*args, int(exclusive), int(reverse), state.ptr))


def scan_column_blocks(
    x: cupy.ndarray,
    out: cupy.ndarray,
    outer: int,
    L: int,
    inner: int,
    exclusive: bool,
    reverse: bool,
) -> None:
    """The scan of `x` (C-contiguous, shape (outer, L, inner)) along L into `out` by the
    column_blocks kernel."""
    kernel = kernels(dtype_name(x.dtype))["column_blocks"]
    lanes = outer * inner
    args = (x.data.ptr, out.data.ptr, L, inner, lanes, int(exclusive), int(reverse))
    kernel(-(-lanes // 32), COLUMN_BLOCK_THREADS, args)
