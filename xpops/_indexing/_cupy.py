"""CuPy engine of tril_indices / triu_indices: one closed-form kernel, no mask, no host sync.

Each thread places ITEMS consecutive entries: the first in closed form (the trapezoid row by a
square root in double precision, corrected against the exact 64-bit row starts; the rectangle by
a double-precision division corrected the same way), the others by stepping along the row. The
block stages its entries in shared memory and writes them out so that each warp's store covers
consecutive addresses, whatever the alignment of the second output row. The upper triangle is
the lower one of the matrix turned by 180 degrees, read backwards.
"""

from typing import Any

import cupy

from .._lib._cuda import INDEX_C_TYPES, FastKernel, grid_1d
from ._layout import TrilLayout, mirrored_offset, tril_layout

#: Threads a block; the block stages 2 * BLOCK * 32 bytes (16 KiB) of output in shared memory.
BLOCK = 256
#: Entries a thread places: 32 bytes of each output row (4 int64 or 8 int32 entries). Only the
#: first is found in closed form: a square root per entry makes int32 output arithmetic-bound
#: (1.8 TB/s on an H100 at (20000, 20000)). Staged in shared memory, the entries leave the
#: block in warp-wide stores of consecutive addresses: a thread's own 16-byte stores would
#: cover half of every sector a warp touches (1.6 TB/s for int64 there).
ITEMS = {"int64": 4, "int32": 8}

_SOURCE = r"""
__device__ __forceinline__ long long xpops_trapezoid_start(long long r, long long a) {
    return r * a + (r * (r - 1)) / 2;
}

template <typename T, int ITEMS>
__global__ void __launch_bounds__(BLOCK)
xpops_triangle_indices(T* __restrict__ out, const long long n, const long long first_row,
                       const long long first_count, const long long rect_row,
                       const long long trap_total, const long long row, const long long col,
                       const int upper) {
    static_assert(sizeof(T) * ITEMS % 16 == 0, "whole 16-byte chunks per thread");
    __shared__ __align__(16) T tile[2][BLOCK * ITEMS];
    const long long block_base = (long long)blockIdx.x * (BLOCK * ITEMS);
    const long long t0 = block_base + (long long)threadIdx.x * ITEMS;
    if (t0 < n) {
        // position in the lower triangle (of the turned matrix when `upper`)
        const long long t = upper ? n - 1 - t0 : t0;
        long long i, j;
        if (t < trap_total) {
            const double b = 2.0 * (double)first_count - 1.0;
            const double tf = (double)t;
            long long r = (long long)floor(4.0 * tf / (sqrt(b * b + 8.0 * tf) + b));
            if (xpops_trapezoid_start(r, first_count) > t) {
                --r;
            } else if (xpops_trapezoid_start(r + 1, first_count) <= t) {
                ++r;
            }
            i = first_row + r;
            j = t - xpops_trapezoid_start(r, first_count);
        } else {
            const long long u = t - trap_total;
            long long q = (long long)((double)u / (double)col);
            long long rem = u - q * col;
            if (rem < 0) {
                --q;
                rem += col;
            } else if (rem >= col) {
                ++q;
                rem -= col;
            }
            i = rect_row + q;
            j = rem;
        }
        __align__(16) T ri[ITEMS];
        __align__(16) T cj[ITEMS];
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            ri[k] = (T)(upper ? row - 1 - i : i);
            cj[k] = (T)(upper ? col - 1 - j : j);
            // next entry: forwards in the lower triangle, or backwards for `upper`; entries
            // past the end are computed but never stored
            if (upper) {
                if (--j < 0) {
                    --i;
                    j = min(first_count + (i - first_row), col) - 1;
                }
            } else if (++j == min(first_count + (i - first_row), col)) {
                ++i;
                j = 0;
            }
        }
        constexpr int CHUNKS = sizeof(T) * ITEMS / 16;
#pragma unroll
        for (int q = 0; q < CHUNKS; ++q) {
            reinterpret_cast<uint4*>(&tile[0][threadIdx.x * ITEMS])[q] =
                reinterpret_cast<const uint4*>(ri)[q];
            reinterpret_cast<uint4*>(&tile[1][threadIdx.x * ITEMS])[q] =
                reinterpret_cast<const uint4*>(cj)[q];
        }
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const int idx = k * BLOCK + threadIdx.x;
        const long long t_out = block_base + idx;
        if (t_out < n) {
            out[t_out] = tile[0][idx];
            out[n + t_out] = tile[1][idx];
        }
    }
}
"""

# FastKernel signature: out, n, first_row, first_count, rect_row, trap_total, row, col, upper
_SIGNATURE = "pqqqqqqqi"


@cupy.memoize(for_each_device=True)
def _kernel(dtype_name: str) -> FastKernel:
    name = f"xpops_triangle_indices<{INDEX_C_TYPES[dtype_name]}, {ITEMS[dtype_name]}>"
    module = cupy.RawModule(
        code=_SOURCE,
        options=("-std=c++17", f"-DBLOCK={BLOCK}"),
        name_expressions=[name],
    )
    return FastKernel(module.get_function(name), _SIGNATURE)


def _launch(out: cupy.ndarray, lay: TrilLayout, upper: bool) -> None:
    # by itemsize, not dtype.name: NumPy computes the name in Python (about 2 us a call)
    name = "int64" if out.itemsize == 8 else "int32"
    n = lay.size
    per_block = BLOCK * ITEMS[name]
    # one block per `per_block` entries (the kernel does not stride); grid_1d's cap of 2**31 - 1
    # blocks lies past 2**41 entries, more than a GPU holds
    grid = grid_1d(n, per_block)
    args = (n, lay.first_row, lay.first_count, lay.rect_row, lay.trap_total, lay.row, lay.col)
    _kernel(name)(grid, BLOCK, (out.data.ptr, *args, int(upper)))


def triangle_indices(
    row: int,
    col: int,
    offset: int,
    upper: bool,
    dtype: object,
    device: Any = None,
    xp: Any = None,
    chunks: Any = None,
    *,
    out: cupy.ndarray | None = None,
) -> cupy.ndarray:
    """(2, N) indices of ``triu`` if `upper` else ``tril``; arguments already validated.

    `device` is a ``cupy.cuda.Device`` or an integer id (None: the current device); `xp` and
    `chunks` are the dispatch's common arguments, unused here. `out` (tests only) is a
    preallocated C-contiguous (2, N) array to write into.
    """
    lay = tril_layout(row, col, mirrored_offset(row, col, offset) if upper else offset)
    if device is not None:
        with cupy.cuda.Device(getattr(device, "id", device)):
            return triangle_indices(row, col, offset, upper, dtype, out=out)
    if out is None:
        out = cupy.empty((2, lay.size), dtype=dtype)
    if lay.size > 0:
        _launch(out, lay, upper)
    return out
