"""The rows kernel of the CuPy scan: many short rows along the contiguous axis.

A thread a row: the block stages a chunk of columns of its rows through shared memory (loads
and stores coalesced), each thread scans its row's segment (on the fast path of `_device`
where it holds, else with exact pairwise combines) and keeps the row's carry in registers from
chunk to chunk.
"""

import cupy
import numpy as np

from ..._lib._cuda import C_TYPES
from ._device import FAST_PATH, PAIRS

__all__ = ["ROWS_BLOCK", "ROW_CHUNK", "kernel", "scan"]

ROWS_BLOCK = 128  # rows per block of the rows kernel
ROW_CHUNK = {"float32": 32, "float64": 16}  # columns staged at once: 17 KiB of shared memory

_SOURCE = r"""
// ---- rows: many rows of up to a few thousand elements, a thread per row --------------------
// The block stages CHUNK columns of ROWS_BLOCK rows in shared memory (each warp loads and
// stores whole row segments, coalesced), then each thread scans its row's segment, the carry
// in registers: summed against the segment's maximum where no output can underflow against it
// (the fast path of the tiles kernels: one exp an element and one log an output), else with
// exact pairwise combines. Rows are padded by one element: the per-row walk is then free of
// bank conflicts.
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
            T ref = row[0];
            for (int j = 1; j < w; ++j) ref = nan_max(ref, row[j]);
            if (fast_ok(ref, row[0], carry)) {
                const Rebase<T> f = rebase(carry, ref);
                const T e0 = xexp(row[0] - ref);
                const Sole<T> so = sole(carry, row[0], e0);
                T acc = T(0);
                for (int j = 0; j < w; ++j) {
                    const T e = j == 0 ? e0 : xexp(row[j] - ref);
                    if (exclusive) {
                        row[j] = j == 0            ? value(carry)
                                 : (acc == so.s) ? so.out
                                                 : f.R + xlog(f.a + f.b * acc);
                        acc += e;
                    } else {
                        acc += e;
                        row[j] = (acc == so.s) ? so.out : f.R + xlog(f.a + f.b * acc);
                    }
                }
                carry = combine(carry, Pair<T>{ref, acc});
            } else {
                for (int j = 0; j < w; ++j) {
                    const T xv = row[j];
                    if (exclusive) row[j] = value(carry);
                    carry = combine(carry, Pair<T>{xv, T(1)});
                    if (!exclusive) row[j] = value(carry);
                }
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
"""

_CODE = PAIRS + FAST_PATH + _SOURCE
_OPTIONS = ("-std=c++17", f"-DROWS_BLOCK={ROWS_BLOCK}")


@cupy.memoize(for_each_device=True)
def kernel(dtype_name: str) -> cupy.RawKernel:
    """The rows kernel of `dtype_name`, compiled for the current device on first use."""
    name = f"xpops_logcumsumexp_rows<{C_TYPES[dtype_name]}, {ROW_CHUNK[dtype_name]}>"
    module = cupy.RawModule(code=_CODE, options=_OPTIONS, name_expressions=[name])
    return module.get_function(name)


def scan(
    x: cupy.ndarray, out: cupy.ndarray, rows: int, L: int, exclusive: bool, reverse: bool
) -> None:
    """The scan of the `rows` rows of length `L` of `x` (C-contiguous) into `out`."""
    kernel(x.dtype.name)(
        (-(-rows // ROWS_BLOCK),),
        (ROWS_BLOCK,),
        (x, out, np.int64(rows), np.int64(L), np.int32(exclusive), np.int32(reverse)),
    )
