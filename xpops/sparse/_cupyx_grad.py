"""The backward rule of sparse.divide (`_vjp`) on the GPU for compressed operands: x, y and
the quotient canonical CSR (or all CSC), the cotangent canonical in their format or given as
values on the quotient's pattern.

One kernel, launched once for x's entries and once for y's. A thread takes GRAD_RUN
consecutive entries of the operand, finds the row of the first (a binary search of the row
pointers) and looks each column up in the same row of the other arrays it needs: the
cotangent (unless given on the quotient's pattern), the quotient (for ``dy``, or to index such
a cotangent) and y (for ``dx``). Rows are sorted, so each lookup moves a cursor forward from
the previous one (a step or two, then a binary search); nothing is expanded, sorted or
scattered, there are no atomics and no host synchronisation, and each gradient value is
written once, in its operand's stored order. Values absent from a pattern are +0, as in the
generic rule: the formulas and IEEE results are those of `_vjp`.

The kernel is bound by instruction issue (the searches), not memory. On an H200, for two
10^5 x 10^5 float32 operands of 10^7 uniformly placed entries, both launches take 0.49 ms
with GRAD_RUN 4 (one entry a thread: 0.89 ms; 2: 0.61; 8: 0.54).
"""

from typing import Any

import cupy
import numpy as np

from .._lib._cuda import INDEX_C_TYPES, c_type, grid_1d, multiprocessors
from ._cupyx_kernels import QUOTIENT, THREADS, compile_family

__all__ = ["gradients", "searchable", "takes"]

_BLOCKS_PER_SM = 32  # grid-stride kernel: enough resident blocks to fill the device
GRAD_RUN = 4  # consecutive entries a thread (see the module docstring)
_VALUE_DTYPES = ("float32", "float64", "complex64", "complex128")

_SOURCE = (
    QUOTIENT
    + r"""
__device__ __forceinline__ float conjugate(float a) { return a; }
__device__ __forceinline__ double conjugate(double a) { return a; }
template <typename R>
__device__ __forceinline__ complex<R> conjugate(complex<R> a) { return conj(a); }

// The first q in [lo, end) with idx[q] >= c (end if none): a few steps forward from lo, then
// a binary search of the rest. Successive columns of one row are increasing, so a cursor
// that starts where the previous column stopped is usually one or two steps away.
template <typename I>
__device__ __forceinline__ I seek(const I* __restrict__ idx, I lo, const I end, const I c) {
#pragma unroll
    for (int step = 0; step < 4; ++step) {
        if (lo >= end || idx[lo] >= c) return lo;
        ++lo;
    }
    I hi = end;
    while (lo < hi) {
        const I mid = lo + ((hi - lo) >> 1);
        if (idx[mid] < c) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// A cursor in one row of compressed arrays (ptr, idx): `at` moves forward, `end` ends the row.
template <typename I>
struct Cursor {
    const I* ptr;
    const I* idx;
    I at, end;
    __device__ __forceinline__ void start(const long long r) {
        if (ptr) { at = ptr[r]; end = ptr[r + 1]; }
    }
    // The storage index of column c in the row, or -1.
    __device__ __forceinline__ long long find(const I c) {
        at = seek(idx, at, end, c);
        return at < end && idx[at] == c ? (long long)at : -1;
    }
};

// The row of entry e: the first r >= lo with ptr[r + 1] > e (a binary search).
template <typename I>
__device__ __forceinline__ long long row_of(const I* __restrict__ ptr, long long lo,
                                            long long hi, const long long e) {
    while (lo < hi) {
        const long long mid = lo + ((hi - lo) >> 1);
        if ((long long)ptr[mid + 1] <= e) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// The gradient at each of the n entries of operand a (rows of pointers aptr, columns aidx).
// For y (own holds y's values): -dout * conj(out / y). For x (own null): dout / conj(y), with
// y's value looked up in (yptr, yidx, yval). dout is looked up in (cptr, cidx, cval), or, with
// cptr null, cval holds it on out's pattern (optr, oidx). Absent values are +0.
// A thread takes GRAD_RUN consecutive entries: one search for the row of the first, then
// cursors that move forward along the rows of the other arrays (most runs lie in one row).
template <typename T, typename I>
__global__ void __launch_bounds__(THREADS)
xpops_sparse_divide_grad(const I* __restrict__ aptr, const I* __restrict__ aidx,
                         const long long n, const long long rows, const T* __restrict__ own,
                         const I* __restrict__ yptr, const I* __restrict__ yidx,
                         const T* __restrict__ yval, const I* __restrict__ optr,
                         const I* __restrict__ oidx, const T* __restrict__ oval,
                         const I* __restrict__ cptr, const I* __restrict__ cidx,
                         const T* __restrict__ cval, T* __restrict__ grad) {
    const bool needs_out = own || !cptr;
    Cursor<I> oc{needs_out ? optr : nullptr, oidx, 0, 0};
    Cursor<I> cc{cptr, cidx, 0, 0};
    Cursor<I> yc{own ? nullptr : yptr, yidx, 0, 0};
    const long long stride = (long long)gridDim.x * blockDim.x * GRAD_RUN;
    for (long long e0 = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * GRAD_RUN; e0 < n;
         e0 += stride) {
        const long long e1 = min(e0 + GRAD_RUN, n);
        long long r = row_of(aptr, 0, rows, e0);
        long long row_end = aptr[r + 1];
        oc.start(r); cc.start(r); yc.start(r);
        for (long long e = e0; e < e1; ++e) {
            if (e >= row_end) {  // the next nonempty row: galloping, then a binary search
                long long lo = r + 1, step = 1;
                while (lo + step < rows && (long long)aptr[lo + step] <= e) {
                    lo += step;
                    step <<= 1;
                }
                r = row_of(aptr, lo, min(lo + step, rows), e);
                row_end = aptr[r + 1];
                oc.start(r); cc.start(r); yc.start(r);
            }
            const I c = aidx[e];
            const long long p = needs_out ? oc.find(c) : -1;
            const long long k = cptr ? cc.find(c) : p;
            const T d = k >= 0 ? cval[k] : T(0);
            if (own) {
                const T o = p >= 0 ? oval[p] : T(0);
                grad[e] = -d * conjugate(quotient(o, own[e]));
            } else {
                const long long j = yc.find(c);
                grad[e] = quotient(d, conjugate(j >= 0 ? yval[j] : T(0)));
            }
        }
    }
}
"""
)


@cupy.memoize(for_each_device=True)
def _kernel(dtype_name: str, index_name: str) -> cupy.RawKernel:
    """The kernel for values of `dtype_name` and indices of `index_name`, compiled on first
    use for the current device."""
    t, i = c_type(dtype_name, "complex"), INDEX_C_TYPES[index_name]
    source = f"#define GRAD_RUN {GRAD_RUN}\n" + _SOURCE
    return compile_family(source, {"grad": f"xpops_sparse_divide_grad<{t}, {i}>"})["grad"]


def _canonical(a: Any) -> bool:
    """Whether cupyx has found compressed matrix `a` canonical (its cached check only: asking
    anew would synchronise; the forward leaves the answer on its operands and result)."""
    return getattr(a, "_has_canonical_format", None) is True


def takes(x: Any, y: Any, out: Any) -> bool:
    """Whether the kernel takes these residuals: cupyx matrices of one compressed format (x's
    format is out's), all canonical, of a floating or complex quotient."""
    fmt = out.format
    return (
        fmt in ("csr", "csc")
        and x.format == fmt
        and getattr(y, "format", None) == fmt
        and np.dtype(out.dtype).name in _VALUE_DTYPES
        and all(_canonical(a) for a in (x, y, out))
    )


def searchable(cotangent: Any, out: Any) -> bool:
    """Whether the kernel looks the values of sparse `cotangent` up itself: a canonical cupyx
    matrix of out's format (checked to be one of the library's matrices by the caller)."""
    return getattr(cotangent, "format", None) == out.format and _canonical(cotangent)


def gradients(x: Any, y: Any, out: Any, cotangent: Any, dout: Any, ctype: np.dtype) -> tuple:
    """The values of ``(dx, dy)`` (as `ctype`, in x's and y's stored orders) for residuals that
    `takes` accepts. The cotangent's values are `dout` on out's pattern, or, with `dout` None,
    looked up in `cotangent` (one that is `searchable`)."""
    mats = (x, y, out) if dout is not None else (x, y, out, cotangent)
    index = np.result_type(*(a.indices.dtype for a in mats), *(a.indptr.dtype for a in mats))
    arrays = {
        id(a): (a.indptr.astype(index, copy=False), a.indices.astype(index, copy=False))
        for a in mats
    }
    kernel = _kernel(ctype.name, index.name)
    yval = y.data.astype(ctype, copy=False)
    oval = out.data.astype(ctype, copy=False)
    if dout is None:
        cptr, cidx = arrays[id(cotangent)]
        cval = cotangent.data.astype(ctype, copy=False)
    else:
        null = np.uint64(0)
        cptr, cidx, cval = null, null, dout.astype(ctype, copy=False)
    optr, oidx = arrays[id(out)]
    yptr, yidx = arrays[id(y)]
    rows = np.int64(out.indptr.shape[0] - 1)
    grads = []
    for a, own in ((x, None), (y, yval)):
        ptr, idx = arrays[id(a)]
        n = int(idx.shape[0])
        g = cupy.empty(n, dtype=ctype)
        if n:
            blocks = grid_1d(-(-n // GRAD_RUN), THREADS, _BLOCKS_PER_SM * multiprocessors())
            args = (ptr, idx, np.int64(n), rows, own if own is not None else np.uint64(0),
                    yptr, yidx, yval, optr, oidx, oval, cptr, cidx, cval, g)  # fmt: skip
            kernel((blocks,), (THREADS,), args)
        grads.append(g)
    return grads[0], grads[1]
