"""The fill family of sparse.divide's kernels (step 5 of `_cupyx_kernels`): the union's
indices and quotients written tile by tile from the match family's lower bounds and match
bits, the queued long runs of `y`, and the helpers ``sum_runs`` and ``values``. Compiled per
value and index dtype.
"""

from typing import Any

import cupy
import numpy as np

from .._lib._cuda import INDEX_C_TYPES, c_type
from .._lib._dtypes import dtype_name
from ._cupyx_kernels import QUOTIENT, TILING, compile_family

__all__ = ["fill_kernels"]

_SOURCE = (
    QUOTIENT
    + TILING
    + r"""
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
template <typename T, typename I, typename O>
__device__ __forceinline__ void fill_tile_lanes(
    const I* __restrict__ xidx, const T* __restrict__ xdat, const I* __restrict__ yidx,
    const T* __restrict__ ydat, const I* __restrict__ lb, const unsigned* __restrict__ bits,
    const long long w, long long c, const long long nx, const long long ny,
    O* __restrict__ oidx, T* __restrict__ odat, unsigned long long* __restrict__ queued,
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
            oidx[q + p] = (O)xidx[e];
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
                oidx[at] = (O)yidx[f];
                odat[at] = quotient(T(0), ydat[f]);
            }
        }
    }
}

// Where the indices go: `oidx` itself, or for a COO result (`coo`) the second row of the
// (2, size) coordinates at `oidx`, past the union's `size` entries (nx + ny less the matches,
// P[tiles], known once `scan` has run); the rows are written later (`coo_indices`).
template <typename O, typename I>
__device__ __forceinline__ O* index_out(O* oidx, const I* __restrict__ P, long long nx,
                                        long long ny, int coo) {
    return coo ? oidx + (nx + ny - (long long)P[(nx + TILE - 1) / TILE]) : oidx;
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
template <typename T, typename I, typename O>
__global__ void __launch_bounds__(THREADS)
xpops_sparse_divide_fill(const I* __restrict__ xidx, const T* __restrict__ xdat,
                         const I* __restrict__ yidx, const T* __restrict__ ydat,
                         const I* __restrict__ lb, const unsigned* __restrict__ bits,
                         const I* __restrict__ P, const long long nx, const long long ny,
                         const int cap, O* __restrict__ out_idx, T* __restrict__ odat,
                         unsigned long long* __restrict__ queued, long long* __restrict__ queue,
                         const int coo) {
    O* __restrict__ oidx = index_out(out_idx, P, nx, ny, coo);
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
        O* __restrict__ ob = oidx + out0;
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
                    ob[at] = (O)col[k];
                    odb[at] = quotient(num[k], den[k]);
                }
            }
        }
        __syncwarp();  // the next tile restages
    }
}

// The queued runs: chunk c copies y entries queue[3c] .. queue[3c + 1] - 1 to output positions
// queue[3c + 2] + f, holding 0 / y; a warp a chunk. Indices go where `fill` writes them.
template <typename T, typename I, typename O>
__global__ void xpops_sparse_divide_runs(const I* __restrict__ yidx, const T* __restrict__ ydat,
                                         const unsigned long long* __restrict__ queued,
                                         const long long* __restrict__ queue,
                                         O* __restrict__ out_idx, T* __restrict__ odat,
                                         const I* __restrict__ P, const long long nx,
                                         const long long ny, const int coo) {
    O* __restrict__ oidx = index_out(out_idx, P, nx, ny, coo);
    const int lane = threadIdx.x & 31;
    const long long warps = ((long long)gridDim.x * blockDim.x) >> 5;
    const long long n = (long long)*queued;
    for (long long c = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; c < n;
         c += warps) {
        const long long f0 = queue[3 * c], f1 = queue[3 * c + 1], o = queue[3 * c + 2];
#pragma unroll 4
        for (long long f = f0 + lane; f < f1; f += 32) {
            oidx[o + f] = (O)yidx[f];
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
)


# FastKernel signatures (p pointer, q 64-bit, i 32-bit integer) of the kernels launched on every
# division; ``values`` and ``sum_runs`` take values (and launch as RawKernels)
_SIGNATURES = {"fill": "pppppppqqippppi", "runs": "pppppppqqi"}


@cupy.memoize(for_each_device=True)
def fill_kernels(
    dtype: np.dtype, index: np.dtype, out_index: np.dtype | None = None
) -> dict[str, Any]:
    """``fill``, ``runs``, ``values`` and ``sum_runs`` for values of `dtype`, operands'
    indices of dtype `index` and the result's of `out_index` (default `index`), compiled on
    first use for the current device (keyed by the dtypes, as `match_kernels`)."""
    t, i = c_type(dtype_name(dtype), "complex"), INDEX_C_TYPES[dtype_name(index)]
    o = INDEX_C_TYPES[dtype_name(index if out_index is None else out_index)]
    names = {
        "fill": f"xpops_sparse_divide_fill<{t}, {i}, {o}>",
        "runs": f"xpops_sparse_divide_runs<{t}, {i}, {o}>",
        "values": f"xpops_sparse_divide_values<{t}>",
        "sum_runs": f"xpops_sparse_sum_runs<{t}>",
    }
    return compile_family(_SOURCE, names, _SIGNATURES)
