"""The COO family of sparse.divide's kernels: CSR arrays of a PyTorch COO operand, and the COO
coordinates of a CSR result (`_cupyx.divide_coo`, `_cupyx.coo_indices`). Index arrays only:
compiled per index dtype.
"""

from typing import Any

import cupy

from .._lib._cuda import INDEX_C_TYPES
from ._cupyx_kernels import compile_family

__all__ = ["coo_kernels"]

_SOURCE = r"""
// CSR arrays of sorted unique 2-D COO coordinates `coords` ((2, n) int64, rows then columns):
// thread k writes column k (as I) and row pointer k, the first entry at or after row k (a
// binary search of the rows). Every write is in bounds whatever the coordinates hold.
template <typename I>
__global__ void __launch_bounds__(THREADS)
xpops_sparse_csr_of_coo(const long long* __restrict__ coords, const long long n,
                        const long long rows, I* __restrict__ indptr, I* __restrict__ idx) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long items = n > rows + 1 ? n : rows + 1;
    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < items; k += stride) {
        if (k < n) idx[k] = (I)coords[n + k];
        if (k <= rows) {
            long long lo = 0, hi = n;
            while (lo < hi) {
                const long long mid = lo + ((hi - lo) >> 1);
                if (coords[mid] < k) lo = mid + 1; else hi = mid;
            }
            indptr[k] = (I)lo;
        }
    }
}

// The coordinates of CSR arrays as a (2, n) int64 COO index array: each entry's row, then its
// column (a null `idx`: the rows only, the columns being written already). A warp a row:
// consecutive lanes write consecutive entries (rows of any length coalesce; an empty row
// costs its warp two loads).
template <typename I>
__global__ void __launch_bounds__(THREADS)
xpops_sparse_coo_indices(const I* __restrict__ indptr, const I* __restrict__ idx,
                         const long long rows, const long long n, long long* __restrict__ out) {
    const int lane = threadIdx.x & 31;
    const long long warps = ((long long)gridDim.x * blockDim.x) >> 5;
    for (long long r = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < rows;
         r += warps) {
        const long long end = indptr[r + 1];
        for (long long k = (long long)indptr[r] + lane; k < end; k += 32) {
            out[k] = r;
            if (idx) out[n + k] = (long long)idx[k];
        }
    }
}
"""


@cupy.memoize(for_each_device=True)
def coo_kernels(index_name: str) -> dict[str, Any]:
    """``csr_of_coo`` (CSR arrays of a PyTorch 2-D COO operand) and ``coo_indices`` (the COO
    coordinates of the result's CSR arrays) for indices of `index_name`, compiled on first
    use for the current device."""
    i = INDEX_C_TYPES[index_name]
    names = {
        "csr_of_coo": f"xpops_sparse_csr_of_coo<{i}>",
        "coo_indices": f"xpops_sparse_coo_indices<{i}>",
    }
    return compile_family(_SOURCE, names, {"csr_of_coo": "pqqpp", "coo_indices": "ppqqp"})
