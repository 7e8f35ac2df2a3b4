"""CuPy engine of sparse.divide: the union of two canonical CSR patterns by binary search.

With both operands canonical CSR (sorted, unique column indices in each row), let ``C[e]`` be
the number of entries of `x` before entry ``e`` (in storage order) whose position `y` also
stores. Storage order is row-major key order, so the union entry made from `x`'s entry ``e``
lands at ``e + lb_y(e) - C[e]``, where ``lb_y(e)`` is the storage index of the first entry of
`y` in the same row at or after ``e``'s column; an entry ``f`` of `y` that `x` lacks lands at
``f + lb_x(f) - C[lb_x(f)]``; and row ``r`` of the union starts at
``x.indptr[r] + y.indptr[r] - C[x.indptr[r]]``. So:

1. ``match``: one thread an entry of `x`: find its row (binary search in ``x.indptr``), then its
   column in `y`'s row (binary search); flag a match.
2. ``C``: the exclusive prefix sum of the flags (``cupy.cumsum``).
3. ``indptr``: the union's row pointers from the formula above; its last element, the union's
   size, is the one host synchronisation.
4. ``fill``: one thread an entry of `x` or of `y`: the same searches again, then the entry's
   column and quotient written at its union position.

Every thread does O(log) work whatever the row lengths, so power-law rows need no balancing;
the searches mostly hit L1/L2 because neighbouring threads read the same rows. COO operands
go through CSR (cupyx's conversion canonicalises them).
"""

from typing import Any

import cupy
import cupyx.scipy.sparse as csp
import numpy as np

THREADS = 256  # threads a block of every kernel here
ITEMS = 8  # entries a lane in the warp tiles of the match and fill kernels
SEG_BYTES = 2048  # shared memory a warp for the partner operand's indices of a tile's rows
ROW_BYTES = 1024  # shared memory a warp for each operand's row pointers of a tile's rows
MIN_BLOCKS = 4  # resident blocks an SM asked of the compiler (caps registers at 64)

_SOURCE = r"""
#include <cupy/complex.cuh>

// x / y with NumPy's semantics, so that the GPU and the CPU agree (also on complex x / 0).
__device__ __forceinline__ float quotient(float a, float b) { return a / b; }
__device__ __forceinline__ double quotient(double a, double b) { return a / b; }
template <typename R>
__device__ __forceinline__ complex<R> quotient(complex<R> a, complex<R> b) {
    const R ar = a.real(), ai = a.imag(), br = b.real(), bi = b.imag();
    if (fabs(br) >= fabs(bi)) {
        if (br == R(0) && bi == R(0)) {
            return complex<R>(ar / fabs(br), ai / fabs(br));
        }
        const R rat = bi / br, scl = R(1) / (br + bi * rat);
        return complex<R>((ar + ai * rat) * scl, (ai - ar * rat) * scl);
    }
    const R rat = br / bi, scl = R(1) / (bi + br * rat);
    return complex<R>((ar * rat + ai) * scl, (ai * rat - ar) * scl);
}

// The largest r in [lo, hi] with ptr[r] <= e: the row of CSR entry e (empty rows skipped).
template <typename I>
__device__ __forceinline__ long long row_in(const I* __restrict__ ptr, long long lo, long long hi,
                                            long long e) {
    while (lo < hi) {
        const long long mid = (lo + hi + 1) >> 1;
        if ((long long)ptr[mid] <= e) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// The first p in [lo, hi) with idx[p] >= col, or hi.
template <typename I>
__device__ __forceinline__ long long lower_bound(const I* __restrict__ idx, long long lo,
                                                 long long hi, I col) {
    while (lo < hi) {
        const long long mid = (lo + hi) >> 1;
        if (idx[mid] < col) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// Entries are taken in warp tiles of TILE = 32 * ITEMS consecutive ones of one operand (lane
// l holds base + 32 k + l: coalesced). `tile_rows` finds the rows of each tile's first and
// last entries once for both passes. A pass stages in shared memory the tile's row pointers
// of both operands (up to NROWS rows) and the partner's column indices of those rows (up to
// SEG), so that every search after the staging loads is a shared-memory one; tiles over more
// rows or longer partner rows search global memory instead.
#define TILE (32 * ITEMS)
#define SEG (SEG_BYTES / (int)sizeof(I))
#define NROWS (ROW_BYTES / (int)sizeof(I) - 2)

template <typename I>
__global__ void xpops_sparse_divide_tile_rows(const I* __restrict__ xptr,
                                              const I* __restrict__ yptr, const long long rows,
                                              const long long nx, const long long ny,
                                              I* __restrict__ first, I* __restrict__ last) {
    const long long x_tiles = (nx + TILE - 1) / TILE;
    const long long tiles = x_tiles + (ny + TILE - 1) / TILE;
    const long long w = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (w >= tiles) return;
    const bool of_x = w < x_tiles;
    const I* ptr = of_x ? xptr : yptr;
    const long long base = (of_x ? w : w - x_tiles) * TILE;
    const long long end = min(base + TILE, of_x ? nx : ny) - 1;
    const long long r0 = row_in(ptr, 0, rows - 1, base);
    first[w] = I(r0);
    last[w] = I(row_in(ptr, r0, rows - 1, end));
}

template <typename I> struct Tile {
    const I* ptr; const I* pptr; const I* pidx;  // global
    const I* sptr; const I* spptr; const I* seg;  // shared
    long long base, last, r0, r1, s0;
    bool rows_staged, staged;
};

template <typename I>
__device__ __forceinline__ Tile<I> tile_open(
    const I* __restrict__ ptr, const I* __restrict__ idx, const I* __restrict__ pptr,
    const I* __restrict__ pidx, const long long n, const long long base, const long long r0,
    const long long r1, I* __restrict__ sptr, I* __restrict__ spptr, I* __restrict__ seg,
    const int lane, I (&col)[ITEMS]) {
    Tile<I> t{ptr, pptr, pidx, sptr, spptr, seg, base, min(base + TILE, n) - 1, r0, r1,
              0, false, false};
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
        const long long e = base + 32 * k + lane;
        col[k] = e <= t.last ? idx[e] : I(0);
    }
    const long long nr = r1 - r0 + 2;  // row pointers r0 .. r1 + 1
    t.rows_staged = nr <= NROWS + 2;
    if (t.rows_staged) {
        for (long long i = lane; i < nr; i += 32) {
            sptr[i] = ptr[r0 + i];
            spptr[i] = pptr[r0 + i];
        }
    }
    t.s0 = pptr[r0];
    const long long s1 = pptr[r1 + 1];
    t.staged = s1 - t.s0 <= SEG;
    if (t.staged) {
        for (long long i = t.s0 + lane; i < s1; i += 32) seg[i - t.s0] = pidx[i];
    }
    __syncwarp();
    return t;
}

// Entry e (column col) of the tile: its lower bound p in the partner, and whether the partner
// stores the same position.
template <typename I>
__device__ __forceinline__ bool tile_entry(const Tile<I>& t, const long long e, const I col,
                                           long long& p) {
    long long lo, hi;
    if (t.rows_staged) {
        const long long r = row_in(t.sptr, 0, t.r1 - t.r0, e);
        lo = t.spptr[r];
        hi = t.spptr[r + 1];
    } else {
        const long long r = row_in(t.ptr, t.r0, t.r1, e);
        lo = t.pptr[r];
        hi = t.pptr[r + 1];
    }
    if (t.staged) {
        p = t.s0 + lower_bound(t.seg, lo - t.s0, hi - t.s0, col);
        return p < hi && t.seg[p - t.s0] == col;
    }
    p = lower_bound(t.pidx, lo, hi, col);
    return p < hi && t.pidx[p] == col;
}

#define TILE_SHARED                                                \
    __shared__ I seg_all[THREADS / 32][SEG];                       \
    __shared__ I sptr_all[THREADS / 32][NROWS + 2];                \
    __shared__ I spptr_all[THREADS / 32][NROWS + 2];               \
    I* seg = seg_all[threadIdx.x >> 5];                            \
    I* sptr = sptr_all[threadIdx.x >> 5];                          \
    I* spptr = spptr_all[threadIdx.x >> 5];

// Pass 1, over the tiles of x then of y: for each tile, one word of match bits per 32 entries
// (bit l: the lane's entry is stored in both operands) and the tile's number of matches.
// P[0] = 0 is written here; the caller scans the counts into P[1:].
template <typename I>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
xpops_sparse_divide_match(const I* __restrict__ xptr, const I* __restrict__ xidx,
                          const I* __restrict__ yptr, const I* __restrict__ yidx,
                          const I* __restrict__ first, const I* __restrict__ last,
                          const long long rows, const long long nx, const long long ny,
                          unsigned* __restrict__ bits, I* __restrict__ counts,
                          I* __restrict__ P) {
    TILE_SHARED
    const int lane = threadIdx.x & 31;
    const long long warps = ((long long)gridDim.x * blockDim.x) >> 5;
    const long long x_tiles = (nx + TILE - 1) / TILE;
    const long long tiles = x_tiles + (ny + TILE - 1) / TILE;
    if (blockIdx.x == 0 && threadIdx.x == 0) P[0] = I(0);
    for (long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < tiles;
         w += warps) {
        I col[ITEMS];
        const bool of_x = w < x_tiles;
        const Tile<I> t = of_x ? tile_open(xptr, xidx, yptr, yidx, nx, w * TILE, first[w],
                                           last[w], sptr, spptr, seg, lane, col)
                               : tile_open(yptr, yidx, xptr, xidx, ny, (w - x_tiles) * TILE,
                                           first[w], last[w], sptr, spptr, seg, lane, col);
        I count = I(0);
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const long long e = t.base + 32 * k + lane;
            long long p;
            const bool match = e <= t.last && tile_entry(t, e, col[k], p);
            const unsigned b = __ballot_sync(0xffffffffu, match);
            if (lane == 0) bits[w * ITEMS + k] = b;
            count += I(__popc(b));
        }
        if (lane == 0) counts[w] = count;
        __syncwarp();  // the next tile restages
    }
}

// Matched entries of x before entry e (0 <= e <= nx), from the tile prefix and match bits.
template <typename I>
__device__ __forceinline__ long long matched_before(const unsigned* __restrict__ bits,
                                                    const I* __restrict__ P, long long e) {
    const long long tile = e / TILE;
    const int k = (int)((e % TILE) / 32), lane = (int)(e % 32);
    long long c = P[tile];
    for (int j = 0; j < k; ++j) c += __popc(bits[tile * ITEMS + j]);
    return c + __popc(bits[tile * ITEMS + k] & ((1u << lane) - 1u));
}

// The union's row pointers: row r starts after the entries of x and of y before it, less the
// positions they share.
template <typename I>
__global__ void xpops_sparse_divide_indptr(const I* __restrict__ xptr, const I* __restrict__ yptr,
                                           const unsigned* __restrict__ bits,
                                           const I* __restrict__ P, const long long rows,
                                           const long long nx, I* __restrict__ optr) {
    const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (r > rows) return;
    const long long e = xptr[r];
    // e == nx may be a whole tile past the last one: all matches of x are before it
    const long long x_tiles = (nx + TILE - 1) / TILE;
    const long long before =
        e / TILE >= x_tiles ? (long long)P[x_tiles] : matched_before(bits, P, e);
    optr[r] = I(e + yptr[r] - before);
}

// Pass 2, the same tiles: each entry of x goes to e + p - (matches of x before e), holding
// x / y (or x / 0); each entry of y that x lacks goes to f + p - (matches of y before f),
// holding 0 / y. (p: the entry's lower bound in the other operand.)
template <typename T, typename I>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
xpops_sparse_divide_fill(const I* __restrict__ xptr, const I* __restrict__ xidx,
                         const T* __restrict__ xdat, const I* __restrict__ yptr,
                         const I* __restrict__ yidx, const T* __restrict__ ydat,
                         const I* __restrict__ first, const I* __restrict__ last,
                         const I* __restrict__ P, const long long rows, const long long nx,
                         const long long ny, I* __restrict__ oidx, T* __restrict__ odat) {
    TILE_SHARED
    const int lane = threadIdx.x & 31;
    const unsigned below = (1u << lane) - 1u;
    const long long warps = ((long long)gridDim.x * blockDim.x) >> 5;
    const long long x_tiles = (nx + TILE - 1) / TILE;
    const long long tiles = x_tiles + (ny + TILE - 1) / TILE;
    for (long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < tiles;
         w += warps) {
        I col[ITEMS];
        const bool of_x = w < x_tiles;
        const Tile<I> t = of_x ? tile_open(xptr, xidx, yptr, yidx, nx, w * TILE, first[w],
                                           last[w], sptr, spptr, seg, lane, col)
                               : tile_open(yptr, yidx, xptr, xidx, ny, (w - x_tiles) * TILE,
                                           first[w], last[w], sptr, spptr, seg, lane, col);
        long long c = of_x ? (long long)P[w] : (long long)(P[w] - P[x_tiles]);
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const long long e = t.base + 32 * k + lane;
            long long p = 0;
            const bool in = e <= t.last;
            const bool match = in && tile_entry(t, e, col[k], p);
            const unsigned b = __ballot_sync(0xffffffffu, match);
            const long long q = e + p - (c + __popc(b & below));
            if (in && of_x) {
                oidx[q] = col[k];
                odat[q] = quotient(xdat[e], match ? ydat[p] : T(0));
            } else if (in && !match) {
                oidx[q] = col[k];
                odat[q] = quotient(T(0), ydat[e]);
            }
            c += __popc(b);
        }
        __syncwarp();  // the next tile restages
    }
}

// The divisor is y_ptr[0] (a 0-d device array) or, when y_ptr is null, y_value.
template <typename T>
__global__ void xpops_sparse_divide_scalar(const T* __restrict__ xdat, const T* __restrict__ y_ptr,
                                           const T y_value, const long long n,
                                           T* __restrict__ odat) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const T den = y_ptr ? *y_ptr : y_value;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        odat[i] = quotient(xdat[i], den);
    }
}
"""

_CTYPES = {
    "float32": "float",
    "float64": "double",
    "complex64": "complex<float>",
    "complex128": "complex<double>",
}
_ITYPES = {"int32": "int", "int64": "long long"}


@cupy.memoize(for_each_device=True)
def _kernels(dtype_name: str, index_name: str) -> dict[str, cupy.RawKernel]:
    t, i = _CTYPES[dtype_name], _ITYPES[index_name]
    names = {
        "tile_rows": f"xpops_sparse_divide_tile_rows<{i}>",
        "match": f"xpops_sparse_divide_match<{i}>",
        "indptr": f"xpops_sparse_divide_indptr<{i}>",
        "fill": f"xpops_sparse_divide_fill<{t}, {i}>",
        "scalar": f"xpops_sparse_divide_scalar<{t}>",
    }
    options = (
        "-std=c++17",
        f"-DITEMS={ITEMS}",
        f"-DSEG_BYTES={SEG_BYTES}",
        f"-DROW_BYTES={ROW_BYTES}",
        f"-DTHREADS={THREADS}",
        f"-DMIN_BLOCKS={MIN_BLOCKS}",
    )
    module = cupy.RawModule(code=_SOURCE, options=options, name_expressions=list(names.values()))
    return {key: module.get_function(name) for key, name in names.items()}


@cupy.memoize(for_each_device=True)
def _max_blocks() -> int:
    # enough resident blocks to fill the device; the kernels stride over the rest
    return 32 * int(cupy.cuda.Device().attributes["MultiProcessorCount"])


def _grid(n: int) -> tuple[int]:
    return (max(1, min(-(-n // THREADS), _max_blocks())),)


def _quotient_dtype(dx: np.dtype, dy: np.dtype) -> np.dtype:
    """``x / y``'s dtype by NumPy's true-division rules (cupyx holds no integer dtypes)."""
    return (np.ones(1, dtype=dx) / np.ones(1, dtype=dy)).dtype


def _canonical_csr(a: Any, dtype: np.dtype) -> Any:
    """`a` as canonical CSR of `dtype`, never modifying `a`.

    ``has_canonical_format`` of a matrix whose state is unknown runs cupyx's check, a host
    synchronisation whose answer cupyx keeps on the matrix.
    """
    if a.format == "coo":
        a = a.tocsr()  # copies, sums duplicates, sorts
    elif not a.has_canonical_format:
        a = a.copy()
        a.sum_duplicates()
    if a.dtype != dtype:
        a = a.astype(dtype)
    return a


def _make_csr(data, indices, indptr, shape) -> Any:
    """A canonical csr_matrix from its arrays, without cupyx's content checks (host syncs)."""
    out = csp.csr_matrix(shape, dtype=data.dtype)
    out.data, out.indices, out.indptr = data, indices, indptr
    out.has_canonical_format = True
    return out


def _finish(x: Any, out: Any) -> Any:
    """`out` (canonical CSR) in the format of `x`."""
    if x.format == "coo":
        out = out.tocoo()
        out.has_canonical_format = True
    return out


def divide(x: Any, y: Any) -> Any:
    """x / y of two cupyx COO/CSR matrices of one shape; arguments validated."""
    dtype = _quotient_dtype(x.dtype, y.dtype)
    xc, yc = _canonical_csr(x, dtype), _canonical_csr(y, dtype)
    index = np.promote_types(xc.indices.dtype, yc.indices.dtype)
    xptr, xidx = xc.indptr.astype(index, copy=False), xc.indices.astype(index, copy=False)
    yptr, yidx = yc.indptr.astype(index, copy=False), yc.indices.astype(index, copy=False)
    rows = x.shape[0]
    nx, ny = int(xidx.size), int(yidx.size)
    kernels = _kernels(dtype.name, index.name)

    tile = 32 * ITEMS
    tiles = -(-nx // tile) + -(-ny // tile)
    bits = cupy.empty(tiles * ITEMS, dtype=np.uint32)
    counts = cupy.empty(tiles, dtype=index)
    prefix = cupy.empty(tiles + 1, dtype=index)  # prefix[0] = 0 is written by `match`
    sizes = (np.int64(rows), np.int64(nx), np.int64(ny))
    grid = (max(1, min(-(-tiles // (THREADS // 32)), _max_blocks())),)
    first = cupy.empty(tiles, dtype=index)  # the rows of each tile's first and last entries
    last = cupy.empty(tiles, dtype=index)
    if rows:
        args = (xptr, yptr, *sizes, first, last)
        kernels["tile_rows"]((-(-tiles // THREADS) or 1,), (THREADS,), args)
        args = (xptr, xidx, yptr, yidx, first, last, *sizes, bits, counts, prefix)
        kernels["match"](grid, (THREADS,), args)
        cupy.cumsum(counts, out=prefix[1:])
    else:
        prefix[:] = 0
    indptr = cupy.empty(rows + 1, dtype=index)
    args = (xptr, yptr, bits, prefix, np.int64(rows), np.int64(nx), indptr)
    kernels["indptr"]((-(-(rows + 1) // THREADS),), (THREADS,), args)
    nnz = int(indptr[-1])  # the one host synchronisation: the size of the union
    indices = cupy.empty(nnz, dtype=index)
    data = cupy.empty(nnz, dtype=dtype)
    if nnz:
        args = (xptr, xidx, xc.data, yptr, yidx, yc.data, first, last, prefix, *sizes)
        args = (*args, indices, data)
        kernels["fill"](grid, (THREADS,), args)
    return _finish(x, _make_csr(data, indices, indptr, x.shape))


def divide_scalar(x: Any, y: Any) -> Any:
    """x / y for a cupyx COO/CSR `x` and a scalar (or 0-d array) `y`: the pattern of `x`."""
    on_device = isinstance(y, cupy.ndarray)
    if on_device:
        dtype = _quotient_dtype(x.dtype, y.dtype)
    else:  # NumPy's rules, Python scalars weak (float32 / 2.0 stays float32)
        with np.errstate(all="ignore"):
            dtype = (np.ones(1, dtype=x.dtype) / y).dtype
    xc = _canonical_csr(x, dtype)
    n = int(xc.data.size)
    data = cupy.empty(n, dtype=dtype)
    if n:
        # a 0-d device divisor is read by the kernel: no synchronisation
        y_ptr = y.astype(dtype).reshape(1) if on_device else np.uint64(0)
        y_value = dtype.type(0 if on_device else y)
        args = (xc.data, y_ptr, y_value, np.int64(n), data)
        _kernels(dtype.name, "int32")["scalar"](_grid(n), (THREADS,), args)
    return _finish(x, _make_csr(data, xc.indices.copy(), xc.indptr.copy(), x.shape))
