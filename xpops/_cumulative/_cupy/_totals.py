"""The row totals of the CuPy scan: ``log(sum(exp(row)))`` of long rows, nothing else written
(the Dask engine's block totals where the tiles kernels would scan the block).

Each row is cut into parts, a block a part: a block reads each element once with one ``exp``
and writes one (m, s) pair; a second kernel combines each row's pairs, a warp a row. A
reduction needs neither the scan's look-back nor its exact path.
"""

import cupy

from ..._lib._cuda import C_TYPES, FastKernel, multiprocessors
from ..._lib._dtypes import dtype_name
from ._device import CHUNKS, PAIRS, VECTOR, WARP

__all__ = [
    "TOTAL_BLOCKS_PER_SM",
    "TOTAL_COMBINE_THREADS",
    "TOTAL_ROUNDS",
    "TOTAL_THREADS",
    "kernels",
    "row_totals",
]

TOTAL_THREADS = 256  # threads a block of the parts kernel, as in the tiles kernels
# TOTAL_ROUNDS vector loads a thread a step, about TOTAL_BLOCKS_PER_SM blocks an SM in all.
TOTAL_ROUNDS = 4
TOTAL_BLOCKS_PER_SM = 8
TOTAL_COMBINE_THREADS = 256  # the combine of each row's parts: a warp a row, 8 rows a block

_SOURCE = r"""
// ---- row totals: log(sum(exp(x))) of long rows, nothing else written (the Dask engine's
// block totals) ------------------------------------------------------------------------------
// Block (r, p) reduces elements [p * part, (p + 1) * part) of row r: each thread takes chunks
// of ROUNDS x VEC elements (vector loads where aligned), sums a chunk against its maximum and
// combines that pair into its own, then the block's pair goes to partials[r * parts + p]. A
// reduction needs neither the scan's look-back nor its exact path: each element is read once
// with one exp. xpops_logcumsumexp_totals_rows then combines each row's parts, a warp a row.
template <typename T, int ROUNDS, int THREADS>
__global__ void __launch_bounds__(THREADS)
xpops_logcumsumexp_totals_parts(const T* __restrict__ x, const long long L,
                                const long long parts, const long long part,
                                T* __restrict__ partials) {
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
__global__ void xpops_logcumsumexp_totals_rows(const T* __restrict__ partials,
                                               const long long rows, const long long parts,
                                               T* __restrict__ totals) {
    const long long r = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x & 31;
    if (r >= rows) return;  // the whole warp: r is the warp's
    const Pair<T>* pr = reinterpret_cast<const Pair<T>*>(partials) + r * parts;
    Pair<T> acc = identity<T>();
    for (long long p = lane; p < parts; p += 32) acc = combine(acc, pr[p]);
    acc = warp_reduce(acc);
    if (lane == 0) totals[r] = value(acc);
}
"""

_CODE = PAIRS + WARP + CHUNKS + _SOURCE
_OPTIONS = ("-std=c++17",)


def _names(dtype_name: str) -> dict[str, str]:
    t = C_TYPES[dtype_name]
    return {
        "parts": f"xpops_logcumsumexp_totals_parts<{t}, {TOTAL_ROUNDS}, {TOTAL_THREADS}>",
        "rows": f"xpops_logcumsumexp_totals_rows<{t}>",
    }


@cupy.memoize(for_each_device=True)
def kernels(dtype_name: str) -> dict[str, FastKernel]:
    """The ``parts`` and ``rows`` kernels of `dtype_name`, compiled for the current device on
    first use."""
    names = _names(dtype_name)
    module = cupy.RawModule(code=_CODE, options=_OPTIONS, name_expressions=list(names.values()))
    # parts: x, L, parts, part, partials; rows: partials, rows, parts, totals
    signatures = {"parts": "pqqqp", "rows": "pqqp"}
    return {key: FastKernel(module.get_function(names[key]), signatures[key]) for key in names}


def row_totals(x: cupy.ndarray, rows: int, L: int) -> cupy.ndarray:
    """``log(sum(exp(row)))`` of each of the `rows` rows of length `L` of `x` (C-contiguous,
    not empty), with the scan's special values: a (rows,) array of the dtype of `x`."""
    step = TOTAL_ROUNDS * TOTAL_THREADS * VECTOR[dtype_name(x.dtype)]
    # about TOTAL_BLOCKS_PER_SM blocks an SM in all, each part a whole number of steps
    parts = max(1, min(-(-L // step), TOTAL_BLOCKS_PER_SM * multiprocessors() // rows))
    part = -(-L // (parts * step)) * step
    parts = -(-L // part)
    partials = cupy.empty(2 * rows * parts, x.dtype)
    totals = cupy.empty(rows, x.dtype)
    compiled = kernels(dtype_name(x.dtype))
    compiled["parts"](rows * parts, TOTAL_THREADS, (x.data.ptr, L, parts, part, partials.data.ptr))
    rows_a_block = TOTAL_COMBINE_THREADS // 32
    compiled["rows"](
        -(-rows // rows_a_block),
        TOTAL_COMBINE_THREADS,
        (partials.data.ptr, rows, parts, totals.data.ptr),
    )
    return totals
