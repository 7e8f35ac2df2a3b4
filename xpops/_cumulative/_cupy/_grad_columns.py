"""The CuPy engine of logcumsumexp's backward along a strided axis (`._backward` chooses):
two kernel families, both with adjacent threads on adjacent columns, so that every load and
store of a warp is one contiguous row.

* ``grad_column_blocks``: many columns. A block owns 32 adjacent columns for the whole axis,
  as the forward's ``column_blocks`` does, and runs the recurrence down them a chunk of runs at
  a time with the value ``S`` carried from chunk to chunk: four passes over arrays of the size
  of ``x``, the least the rule allows. The run length and block size follow the blocks an SM
  (COLUMN_BLOCK_SHAPES).
* ``grad_columns``: fewer columns. Each column is cut into segments, a thread a column and
  segment, enough of them to fill the GPU: a pass for each segment's map, a pass applying the
  maps before a segment and writing its cotangents: six passes, no look-back.
"""

import math

import cupy

from ..._lib._cuda import C_TYPES, MAX_GRID_Y, FastKernel, multiprocessors
from ..._lib._dtypes import dtype_name
from ._device import GRAD_MAPS, PAIRS

__all__ = [
    "COLUMN_BLOCK_SHAPES",
    "GRAD_COLUMN_MIN_LANES",
    "GRAD_COLUMN_MIN_SEGMENT",
    "GRAD_COLUMN_THREADS",
    "GRAD_COLUMN_WAVES",
    "column_block_shape",
    "grad_column_blocks_scan",
    "grad_columns_scan",
]

# grad_column_blocks: (at least this many blocks of 32 columns an SM, positions a run, threads
# a block), the first that applies; below the last, grad_columns. Measured on an H200 (132
# SMs), share of the copy rate counting four passes, float32 axis 0, runs of 8 / 16 / 32 at
# 256 threads and at 512: (8192, 32768), 7.8 blocks an SM, 91 / 86 / 86% and 85 / 71 / 83%;
# (16384, 8192), 1.9 an SM, 65 / 76 / 86% and 85 / 71 / 83%; (65536, 4096), 1.0 an SM, 40 /
# 50 / 61% and 60 / 73 / 85%; (131072, 2048), 0.5 an SM, at best 52% against grad_columns'
# 60%. float64, runs of 4 / 8 / 16 (the links kept in registers): (8192, 16384), 3.9 an SM,
# 74 / 53 / 32% and 66 / 49 / 53%; (16384, 8192), 1.9 an SM, 47 / 53 / 32% and 67 / 49 / 53%,
# against grad_columns' 63%; (8192, 12288), 2.9 an SM, 4 at 512 threads 54% against 62%;
# (32768, 4096), 1.0 an SM, at best 53% against 60%. grad_columns ran at 60-66% on each. On
# an H100 (132 SMs) the shapes chosen here ran at 83-100% (float32) and 87% (float64 (8192,
# 16384)), grad_columns at 62-67%; float64 (8192, 12288), 2.9 an SM, at 4 and 256 threads 77%
# against 65% (not measured on an H200).
COLUMN_BLOCK_SHAPES = {
    "float32": ((4.0, 8, 256), (1.5, 32, 256), (0.75, 32, 512)),
    "float64": ((3.0, 4, 256),),
}

# grad_columns: blocks of GRAD_COLUMN_THREADS adjacent columns, each column cut into segments of
# at least GRAD_COLUMN_MIN_SEGMENT positions, enough of them for GRAD_COLUMN_WAVES full waves
# (2048 threads an SM). H200, share of the copy rate counting four passes (the kernels make six,
# the second reading of y and g partly from L2), waves 2 / 4 / 8 / 16: (8192, 32768) float32
# axis 0 59 / 66 / 64 / 57%; (65536, 4096) 63 / 61 / 55 / 36%; (8192, 16384) float64 66 / 64 /
# 59 / 44%; (64, 4096, 1024) float32 axis 1 59 / 62 / 62 / 56%. The minimum segment (16 or 64)
# changes none of them.
GRAD_COLUMN_THREADS = 256
GRAD_COLUMN_MIN_SEGMENT = 16
GRAD_COLUMN_WAVES = 4
# Each thread of grad_columns folds the maps of the segments before its own, so the maps read
# grow as columns x segments^2 / 2: fewer columns than this would take thousands of segments
# to fill the GPU, and the two scans (whose columns kernel chains tiles by look-back) serve
# them. At this many, four waves need at most 2 x SMs segments.
GRAD_COLUMN_MIN_LANES = 4096

_SOURCE = r"""
// ---- grad_columns: a strided axis, a thread a column and segment ----------------------------
// Column c (of `lanes` = outer * inner) and segment s (scan positions [s * seg, (s + 1) * seg)
// of the column): grad_column_maps writes the segment's map run from S = 0; grad_columns
// applies the maps of the segments before its own to get S entering it, then runs its segment
// again and writes the cotangents. Adjacent threads hold adjacent columns: every load and store
// of a warp is one contiguous row.
template <typename T>
__global__ void xpops_logcumsumexp_grad_column_maps(const T* __restrict__ y,
                                                    const T* __restrict__ g,
                                                    Pair<T>* __restrict__ maps, const long long L,
                                                    const long long inner, const long long lanes,
                                                    const long long seg, const int reverse) {
    const long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= lanes) return;
    const long long s = blockIdx.y, o = c / inner, base = o * L * inner + (c - o * inner);
    const long long m0 = s * seg, m1 = min(L, m0 + seg);
    T y_prev = m0 == 0 ? pos_inf<T>() : y[base + (reverse ? L - m0 : m0 - 1) * inner];
    Pair<T> m = map_identity<T>();
    const long long step = reverse ? -inner : inner;  // the positions' offsets step by this
    long long at = base + (reverse ? L - 1 - m0 : m0) * inner;
#pragma unroll 4
    for (long long k = m0; k < m1; ++k, at += step) {
        const T yk = y[at];
        const T a = grad_link(yk, y_prev);
        m = Pair<T>{a * m.m, fma(a, m.s, grad_term(yk, g[at]))};
        y_prev = yk;
    }
    maps[s * lanes + c] = m;
}

template <typename T>
__global__ void xpops_logcumsumexp_grad_columns(const T* __restrict__ x, const T* __restrict__ y,
                                                const T* __restrict__ g,
                                                const Pair<T>* __restrict__ maps,
                                                T* __restrict__ dx, const long long L,
                                                const long long inner, const long long lanes,
                                                const long long seg, const int exclusive,
                                                const int reverse) {
    const long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= lanes) return;
    const long long s = blockIdx.y, o = c / inner, base = o * L * inner + (c - o * inner);
    const long long m0 = s * seg, m1 = min(L, m0 + seg);
    T S = T(0);  // S before the column's first element: its link is 0
    for (long long p = 0; p < s; ++p) {
        const Pair<T> mp = maps[p * lanes + c];
        S = fma(mp.m, S, mp.s);
    }
    T y_prev = m0 == 0 ? pos_inf<T>() : y[base + (reverse ? L - m0 : m0 - 1) * inner];
    const long long step = reverse ? -inner : inner;  // the positions' offsets step by this
    long long at = base + (reverse ? L - 1 - m0 : m0) * inner;
#pragma unroll 4
    for (long long k = m0; k < m1; ++k, at += step) {
        const T yk = y[at];
        const T next = fma(grad_link(yk, y_prev), S, grad_term(yk, g[at]));
        dx[at] = exclusive ? grad_weight(x[at], y_prev) * S : grad_weight(x[at], yk) * next;
        S = next;
        y_prev = yk;
    }
}

// ---- grad_column_blocks: a strided axis with many columns, one pass -------------------------
// A block owns 32 adjacent columns for the whole axis, as the forward's column_blocks does; its
// warps take consecutive runs of ITEMS positions of a chunk of WARPS * ITEMS. A lane reads its
// run's y and g once and composes the run's map; the maps of the chunk's earlier runs, applied
// to the block's carry, give S entering the run, and the lane runs it again from its registers,
// reading x and writing dx: four passes over arrays of the size of x.

// The link of the k-th position of a run: kept from the run's first pass, or computed again.
template <bool KEPT, typename T, int N>
__device__ __forceinline__ T link(const T (&kept)[N], int k, T y, T y_prev) {
    if constexpr (KEPT) return kept[k];
    return grad_link(y, y_prev);
}

template <typename T, int ITEMS, int THREADS>
__global__ void __launch_bounds__(THREADS)
xpops_logcumsumexp_grad_column_blocks(const T* __restrict__ x, const T* __restrict__ y,
                                      const T* __restrict__ g, T* __restrict__ dx,
                                      const long long L, const long long inner,
                                      const long long lanes, const int exclusive,
                                      const int reverse) {
    constexpr int WARPS = THREADS / 32;
    // float64's exp costs more than the registers that keep the links; float32's less
    constexpr bool KEEP_LINKS = sizeof(T) == 8;
    __shared__ Pair<T> run_map[WARPS][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long long lane_id = (long long)blockIdx.x * 32 + lane;
    const bool active = lane_id < lanes;
    const long long o_idx = active ? lane_id / inner : 0, i_idx = active ? lane_id % inner : 0;
    const long long column = o_idx * L * inner + i_idx;
    const long long step = reverse ? -inner : inner;  // the positions' offsets step by this
    T carry = T(0);  // S entering the chunk; before the column's first position its link is 0
    for (long long base = 0; base < L; base += (long long)WARPS * ITEMS) {
        const long long start = base + (long long)warp * ITEMS;
        const int count = active ? (int)max(0LL, min((long long)ITEMS, L - start)) : 0;
        const long long first = column + (reverse ? L - 1 - start : start) * inner;
        T yv[ITEMS], gv[ITEMS], av[KEEP_LINKS ? ITEMS : 1];
        if (count == ITEMS) {
            const T* yp = y + first;
            const T* gp = g + first;
#pragma unroll
            for (int k = 0; k < ITEMS; ++k, yp += step, gp += step) {
                yv[k] = *yp;
                gv[k] = *gp;
            }
        } else {
#pragma unroll
            for (int k = 0; k < ITEMS; ++k) {
                yv[k] = k < count ? y[first + k * step] : T(0);
                gv[k] = k < count ? g[first + k * step] : T(0);
            }
        }
        // the output before the run (+inf before the column's first: a link of 0)
        const T y_before = (count > 0 && start > 0) ? y[first - step] : pos_inf<T>();
        Pair<T> m = map_identity<T>();
        T y_prev = y_before;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            if (k < count) {
                const T a = grad_link(yv[k], y_prev);
                if constexpr (KEEP_LINKS) av[k] = a;
                m = Pair<T>{a * m.m, fma(a, m.s, grad_term(yv[k], gv[k]))};
                y_prev = yv[k];
            }
        }
        run_map[warp][lane] = m;
        __syncthreads();
        // S entering this run, and the carry past the chunk (every warp folds the same maps in
        // the same order: one carry)
        T S = carry;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) {
            const Pair<T> p = run_map[w][lane];
            if (w == warp) S = carry;
            carry = fma(p.m, carry, p.s);
        }
        y_prev = y_before;
        if (count == ITEMS) {
            const T* xp = x + first;
            T* dp = dx + first;
#pragma unroll
            for (int k = 0; k < ITEMS; ++k, xp += step, dp += step) {
                const T a = link<KEEP_LINKS>(av, k, yv[k], y_prev);
                const T next = fma(a, S, grad_term(yv[k], gv[k]));
                *dp = exclusive ? grad_weight(*xp, y_prev) * S : grad_weight(*xp, yv[k]) * next;
                S = next;
                y_prev = yv[k];
            }
        } else {
#pragma unroll
            for (int k = 0; k < ITEMS; ++k) {
                if (k < count) {
                    const long long at = first + k * step;
                    const T a = link<KEEP_LINKS>(av, k, yv[k], y_prev);
                    const T next = fma(a, S, grad_term(yv[k], gv[k]));
                    dx[at] = exclusive ? grad_weight(x[at], y_prev) * S
                                       : grad_weight(x[at], yv[k]) * next;
                    S = next;
                    y_prev = yv[k];
                }
            }
        }
        __syncthreads();  // run_map is refilled by the next chunk
    }
}
"""

_CODE = PAIRS + GRAD_MAPS + _SOURCE
_OPTIONS = ("-std=c++17",)


@cupy.memoize(for_each_device=True)
def _grad_columns(dtype_name: str) -> tuple[FastKernel, FastKernel]:
    """The ``grad_column_maps`` and ``grad_columns`` kernels of `dtype_name`."""
    t = C_TYPES[dtype_name]
    names = [
        f"xpops_logcumsumexp_grad_column_maps<{t}>",
        f"xpops_logcumsumexp_grad_columns<{t}>",
    ]
    module = cupy.RawModule(code=_CODE, options=_OPTIONS, name_expressions=names)
    # y, g, maps, L, inner, lanes, seg, reverse; x, y, g, maps, dx, L, inner, lanes, seg,
    # exclusive, reverse
    maps = FastKernel(module.get_function(names[0]), "pppqqqqi")
    columns = FastKernel(module.get_function(names[1]), "pppppqqqqii")
    return maps, columns


@cupy.memoize(for_each_device=True)
def _grad_column_blocks(dtype_name: str, items: int, threads: int) -> FastKernel:
    """The ``grad_column_blocks`` kernel of `dtype_name`, runs of `items`, `threads` a block."""
    name = f"xpops_logcumsumexp_grad_column_blocks<{C_TYPES[dtype_name]}, {items}, {threads}>"
    module = cupy.RawModule(code=_CODE, options=_OPTIONS, name_expressions=[name])
    # x, y, g, dx, L, inner, lanes, exclusive, reverse
    return FastKernel(module.get_function(name), "ppppqqqii")


def column_block_shape(lanes: int, dtype_name: str) -> tuple[int, int] | None:
    """(positions a run, threads a block) of grad_column_blocks for `lanes` columns, or None
    where grad_columns is faster (COLUMN_BLOCK_SHAPES)."""
    per_sm = lanes / 32 / multiprocessors()
    for least, items, threads in COLUMN_BLOCK_SHAPES[dtype_name]:
        if per_sm >= least:
            return items, threads
    return None


def grad_columns_scan(
    x: cupy.ndarray, y: cupy.ndarray, g: cupy.ndarray, axis: int, exclusive: bool, reverse: bool
) -> cupy.ndarray:
    """`._backward.real_pullback` by the grad_columns kernels."""
    L = x.shape[axis]
    inner = math.prod(x.shape[axis + 1 :])
    lanes = math.prod(x.shape[:axis]) * inner
    # enough segments for GRAD_COLUMN_WAVES waves of the GPU, none shorter than
    # GRAD_COLUMN_MIN_SEGMENT positions
    wanted = -(-GRAD_COLUMN_WAVES * multiprocessors() * 2048 // lanes)
    segments = max(1, min(L // GRAD_COLUMN_MIN_SEGMENT, wanted, MAX_GRID_Y))
    seg = -(-L // segments)
    segments = -(-L // seg)
    maps_kernel, columns_kernel = _grad_columns(dtype_name(x.dtype))
    maps = cupy.empty((segments, lanes, 2), x.dtype)
    dx = cupy.empty(x.shape, x.dtype)
    grid = (-(-lanes // GRAD_COLUMN_THREADS), segments)
    sizes = (L, inner, lanes, seg)
    maps_kernel(
        grid, GRAD_COLUMN_THREADS, (y.data.ptr, g.data.ptr, maps.data.ptr, *sizes, int(reverse))
    )
    pointers = (x.data.ptr, y.data.ptr, g.data.ptr, maps.data.ptr, dx.data.ptr)
    columns_kernel(grid, GRAD_COLUMN_THREADS, (*pointers, *sizes, int(exclusive), int(reverse)))
    return dx


def grad_column_blocks_scan(
    x: cupy.ndarray,
    y: cupy.ndarray,
    g: cupy.ndarray,
    axis: int,
    exclusive: bool,
    reverse: bool,
    shape: tuple[int, int] | None = None,
) -> cupy.ndarray:
    """`._backward.real_pullback` by the grad_column_blocks kernel, of `shape` (positions a
    run, threads a block; by default `column_block_shape`'s, its last where that is None)."""
    L = x.shape[axis]
    inner = math.prod(x.shape[axis + 1 :])
    lanes = math.prod(x.shape[:axis]) * inner
    name = dtype_name(x.dtype)
    if shape is None:
        shape = column_block_shape(lanes, name) or COLUMN_BLOCK_SHAPES[name][-1][1:]
    items, threads = shape
    dx = cupy.empty(x.shape, x.dtype)
    args = (x.data.ptr, y.data.ptr, g.data.ptr, dx.data.ptr, L, inner, lanes)
    _grad_column_blocks(name, items, threads)(
        -(-lanes // 32), threads, (*args, int(exclusive), int(reverse))
    )
    return dx
