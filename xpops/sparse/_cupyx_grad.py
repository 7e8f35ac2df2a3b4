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
generic rule, and the formulas are those of `_vjp`; complex values are divided by NumPy's
rule, as in the forward's kernels (the generic CuPy code's division of complex values by zero
gives NaN where NumPy's gives infinities).

The kernel is bound by instruction issue (the searches), not memory. On an H200, for two
10^5 x 10^5 float32 operands of 10^7 uniformly placed entries, both launches take 0.49 ms
with GRAD_RUN 4 (one entry a thread: 0.89 ms; 2: 0.61; 8: 0.54).
"""

from typing import Any

import cupy
import numpy as np

from .._lib._cuda import INDEX_C_TYPES, c_type, grid_1d, multiprocessors
from .._lib._dtypes import dtype_name
from ._cupyx_kernels import BLOCKS_PER_SM, QUOTIENT, THREADS, compile_family
from ._host import index_dtype
from ._views import known_canonical

__all__ = ["divide_grad", "gradients", "searchable", "takes"]

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
        if (r >= rows) break;  // entries past the last row pointer: none is read or written
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
                if (r >= rows) break;
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
def _kernel(dtype_name: str, index_name: str) -> Any:
    """The kernel for values of `dtype_name` and indices of `index_name`, compiled on first
    use for the current device."""
    t, i = c_type(dtype_name, "complex"), INDEX_C_TYPES[index_name]
    source = f"#define GRAD_RUN {GRAD_RUN}\n" + _SOURCE
    names = {"grad": f"xpops_sparse_divide_grad<{t}, {i}>"}
    # aptr, aidx, n, rows, own, then y, out and the cotangent (indptr, indices, values), grad
    return compile_family(source, names, {"grad": "ppqqppppppppppp"})["grad"]


def takes(x: Any, y: Any, out: Any) -> bool:
    """Whether the kernel takes these residuals: cupyx matrices of one compressed format (x's
    format is out's), all canonical, of a floating or complex quotient."""
    fmt = out.format
    return (
        fmt in ("csr", "csc")
        and x.format == fmt
        and getattr(y, "format", None) == fmt
        and dtype_name(out.dtype) in _VALUE_DTYPES
        and all(known_canonical(a) for a in (x, y, out))
    )


def searchable(cotangent: Any, out: Any) -> bool:
    """Whether the kernel looks the values of sparse `cotangent` up itself: a canonical cupyx
    matrix of out's format (checked to be one of the library's matrices by the caller)."""
    return getattr(cotangent, "format", None) == out.format and known_canonical(cotangent)


def gradients(x: Any, y: Any, out: Any, cotangent: Any, dout: Any, ctype: np.dtype) -> tuple:
    """The values of ``(dx, dy)`` (as `ctype`, in x's and y's stored orders) for residuals that
    `takes` accepts. The cotangent's values are `dout` on out's pattern, or, with `dout` None,
    looked up in `cotangent` (one that is `searchable`)."""
    c = (
        (cotangent.indptr, cotangent.indices, cotangent.data)
        if dout is None
        else (None, None, dout)
    )
    return _launch(
        (x.indptr, x.indices), (y.indptr, y.indices, y.data), (out.indptr, out.indices, out.data),
        c, ctype,
    )  # fmt: skip


def divide_grad(
    x0: Any, x1: Any, y0: Any, y1: Any, yval: Any, o0: Any, o1: Any, oval: Any,
    c0: Any, c1: Any, cval: Any, shape: tuple[int, int], dtype_name: str,
) -> tuple[Any, Any]:  # fmt: skip
    """`gradients` of a PyTorch operand's arrays (the CuPy engine of `_vjp_torch`): for each
    of x, y, the quotient and the cotangent, its row pointers and columns (``a0``, ``a1``:
    CSR) or its sorted unique (2, n) int64 coordinates (``a0``; ``a1`` None: coalesced COO);
    `c0` None for a cotangent given as values `cval` on the quotient's pattern; `shape` the
    operands' (rows, columns). The two gradients' values, as `dtype_name`, in x's and y's
    stored orders."""
    from ._cupyx import csr_of_coo

    ctype = np.dtype(dtype_name)
    rows, ncols = shape
    sizes = [a.shape[-1] for a in (x0, y0, o0, c0) if a is not None and a.ndim == 2]
    index = index_dtype(*sizes, rows + 1, ncols)

    def compressed(a0: Any, a1: Any) -> tuple[Any, Any]:
        if a1 is not None:
            return a0, a1
        return csr_of_coo(a0, rows, index)

    cptr, cidx = compressed(c0, c1) if c0 is not None else (None, None)
    return _launch(
        compressed(x0, x1), (*compressed(y0, y1), yval), (*compressed(o0, o1), oval),
        (cptr, cidx, cval), ctype,
    )  # fmt: skip


def _launch(x: tuple, y: tuple, out: tuple, c: tuple, ctype: np.dtype) -> tuple[Any, Any]:
    """The kernel on compressed arrays: x (indptr, indices), y and out (indptr, indices,
    values), the cotangent (indptr, indices, values), or (None, None, values on out's
    pattern); the gradients' values as `ctype`."""
    pointers = [a for a in (*x, *y[:2], *out[:2], *c[:2]) if a is not None]
    index = np.result_type(*(a.dtype for a in pointers))

    def idx(a: Any) -> Any:
        return cupy.ascontiguousarray(a.astype(index, copy=False))

    def values(a: Any) -> Any:
        return cupy.ascontiguousarray(a.astype(ctype, copy=False))

    kernel = _kernel(dtype_name(ctype), dtype_name(index))
    yptr, yidx, yval = idx(y[0]), idx(y[1]), values(y[2])
    optr, oidx, oval = idx(out[0]), idx(out[1]), values(out[2])
    cptr, cidx = (idx(c[0]), idx(c[1])) if c[0] is not None else (None, None)
    cval = values(c[2])
    rows = int(optr.shape[0]) - 1
    partners = (yptr, yidx, yval, optr, oidx, oval, cptr, cidx, cval)
    shared = tuple(0 if a is None else a.data.ptr for a in partners)
    grads = []
    for ptr, ind, own in ((idx(x[0]), idx(x[1]), None), (yptr, yidx, yval)):
        n = int(ind.shape[0])
        g = cupy.empty(n, dtype=ctype)
        if n:
            blocks = grid_1d(-(-n // GRAD_RUN), THREADS, BLOCKS_PER_SM * multiprocessors())
            own_ptr = 0 if own is None else own.data.ptr
            args = (ptr.data.ptr, ind.data.ptr, n, rows, own_ptr, *shared, g.data.ptr)
            kernel(blocks, THREADS, args)
        grads.append(g)
    return grads[0], grads[1]
