"""CuPy engine of cholesky_solve: fused kernels for small systems, cuBLAS trsm for large ones.

``lanes``: for M up to LANES_MAX_M = 32. G lanes solve one system (G the power of two at or
above M), lane i owning row i of the right-hand sides. Lane i reads column i of the stored
factor (adjacent lanes read adjacent elements, only the used triangle) and gets row i by a
transpose through a small shared-memory tile, so row i and column i of L sit in registers (one
array of M: the row's part left of the diagonal, the column's part below it).
Forward substitution: at step j lane j scales its value by the reciprocal diagonal and
broadcasts it with a shuffle; lanes below subtract ``L[i][j] y_j`` (row registers). Back
substitution does the same upwards with ``conj(L[j][i])`` (column registers). No index
arithmetic in the loops (M is a template parameter), one read of the factor. Its backward
(`._cupy_grad`, on the device functions of `SOURCE`) solves for the cotangent of the
right-hand sides the same way and computes the factor's cotangent from the same registers.

``small``: for LANES_MAX_M < M <= SMALL_MAX_M. A group of G = min(32, M_MAX) lanes solves one
system (M_MAX the power of two at or above M; each lane owns M_MAX / G rows). The group copies
the used triangle of its factor into shared memory, packed row by row (the other triangle is
never read), then runs forward and back substitution on KC right-hand sides at a time held in
registers: at step j the owner of row j scales it by the stored reciprocal of the diagonal,
broadcasts it with a shuffle, and every lane updates its rows from the shared triangle. One
launch covers the whole batch; broadcast batch dimensions are followed through index arrays,
never copied.

``blas``: larger M, cuBLAS and cuSOLVER calls (`._cupy_blas`).
"""

import functools
import math

import cupy
import numpy as np

from .._lib._cuda import FastKernel, c_type, grid_1d
from .._lib._dtypes import dtype_name
from .._lib._typing import Namespace
from ._cupy_blas import solve as solve_blas

# Systems with LANES_MAX_M < M <= SMALL_MAX_M use the small kernel. Measured on an H100:
# (10000, 64, 64) K=8 0.22 / 0.42 ms (float32 / float64) against 0.53 / 0.91 ms for batched
# trsm. Above 64 its registers (2 rows x KC columns a lane) and shared memory (the packed
# triangle) run out.
SMALL_MAX_M = 64
SMALL_THREADS = 256  # at most this many threads a block
SMALL_SMEM = 24576  # bytes of packed triangles a block
SMALL_COLUMNS = 4  # right-hand sides a lane holds at once when K > 1

# Systems with M <= LANES_MAX_M use the lanes kernel. Measured on an H100 (kernel alone, K=1,
# 100000 systems, float32 / float64): M=8 0.026 / 0.040 ms against 0.048 / 0.052 ms for the
# small kernel, M=16 0.062 / 0.095 against 0.091 / 0.123, M=24 0.13 / 0.23 against 0.24 /
# 0.31, M=32 0.18 / 0.34 against 0.25 / 0.35; with K=8 it was faster at every M up to 32.
# A lane keeps its row and column of L in one register array, not two: float64 M=16 then
# needs 72 registers a lane, not 92 (40% of the warp slots busy, not 28%), and M=16 K=1 takes
# 0.051 / 0.074 ms against 0.052 / 0.085, complex128 0.176 against 0.215, float32 M=32 K=8
# 0.33 against 0.41.
LANES_MAX_M = 32
LANES_THREADS = 128  # threads a block (64 ran the same; 32 up to 25% slower, 256 up to 16%)

SOURCE = r"""
template <typename R> struct Cplx { R re, im; };

__device__ __forceinline__ float conj_(float a) { return a; }
__device__ __forceinline__ double conj_(double a) { return a; }
template <typename R> __device__ __forceinline__ Cplx<R> conj_(Cplx<R> a) {
    return Cplx<R>{a.re, -a.im};
}
__device__ __forceinline__ float mul(float a, float b) { return a * b; }
__device__ __forceinline__ double mul(double a, double b) { return a * b; }
template <typename R> __device__ __forceinline__ Cplx<R> mul(Cplx<R> a, Cplx<R> b) {
    return Cplx<R>{a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}
// a - b * c
__device__ __forceinline__ float sub_mul(float a, float b, float c) { return fmaf(-b, c, a); }
__device__ __forceinline__ double sub_mul(double a, double b, double c) { return fma(-b, c, a); }
template <typename R> __device__ __forceinline__ Cplx<R> sub_mul(Cplx<R> a, Cplx<R> b, Cplx<R> c) {
    return Cplx<R>{a.re - (b.re * c.re - b.im * c.im), a.im - (b.re * c.im + b.im * c.re)};
}
// a + b * c
__device__ __forceinline__ float add_mul(float a, float b, float c) { return fmaf(b, c, a); }
__device__ __forceinline__ double add_mul(double a, double b, double c) { return fma(b, c, a); }
template <typename R> __device__ __forceinline__ Cplx<R> add_mul(Cplx<R> a, Cplx<R> b, Cplx<R> c) {
    return Cplx<R>{a.re + (b.re * c.re - b.im * c.im), a.im + (b.re * c.im + b.im * c.re)};
}
// 1 / a: a zero diagonal gives inf (real) or NaN (complex), as LAPACK's division would
__device__ __forceinline__ float recip(float a) { return 1.0f / a; }
__device__ __forceinline__ double recip(double a) { return 1.0 / a; }
template <typename R> __device__ __forceinline__ Cplx<R> recip(Cplx<R> a) {
    const R d = a.re * a.re + a.im * a.im;
    return Cplx<R>{a.re / d, -a.im / d};
}
__device__ __forceinline__ float shfl(float v, int src, int width) {
    return __shfl_sync(0xffffffffu, v, src, width);
}
__device__ __forceinline__ double shfl(double v, int src, int width) {
    return __shfl_sync(0xffffffffu, v, src, width);
}
template <typename R> __device__ __forceinline__ Cplx<R> shfl(Cplx<R> v, int src, int width) {
    return Cplx<R>{__shfl_sync(0xffffffffu, v.re, src, width),
                   __shfl_sync(0xffffffffu, v.im, src, width)};
}

#ifndef LANES_THREADS  // threads a block of the lanes kernel (set when compiling it)
#define LANES_THREADS 128
#endif

// The lanes a system of the lanes kernels: the power of two at or above M
template <int M> __host__ __device__ constexpr int lanes_of() {
    return M <= 1 ? 1 : M <= 2 ? 2 : M <= 4 ? 4 : M <= 8 ? 8 : M <= 16 ? 16 : 32;
}

// Lane i of a group of G reads row i and column i of L from the stored factor F (see the
// module docstring) into one register array: w[k] = L[i][k] for k < i (the row left of the
// diagonal, forward substitution's), w[k] = L[k][i] for k > i (the column below it, back
// substitution's). Returns L[i][i]. `tile` is the group's M x (G + 1) shared-memory tile.
template <typename T, int M, int G>
__device__ __forceinline__ T load_lanes(const T* F, const int i, const bool active,
                                        const int upper, T* tile, T (&w)[M]) {
    // Lane i reads column i of the stored factor (adjacent lanes read adjacent elements:
    // coalesced), the used part only, and gets row i of the stored factor through shared
    // memory. L = F (lower): row i is L[i][:], column i is L[:][i]; F = U = L^H (upper):
    // L[i][k] = conj(U[k][i]), L[k][i] = conj(U[i][k]).
    constexpr int P = G + 1;  // odd pitch: the transposed reads hit distinct banks
    T a[M], b[M];
#pragma unroll
    for (int k = 0; k < M; ++k) {
        const bool used = active && (upper ? k <= i : k >= i);
        a[k] = used ? F[k * M + i] : T{};
        if (active) tile[k * P + i] = a[k];
    }
    __syncwarp();
#pragma unroll
    for (int k = 0; k < M; ++k) {
        const bool used = active && (upper ? k >= i : k <= i);
        b[k] = used ? tile[i * P + k] : T{};
    }
    const T diag = active ? tile[i * P + i] : T{};
    // (Two arrays, row and column, took 92 registers a lane in float64 at M = 16, 5 blocks
    // an SM; one, 72 and 7.)
#pragma unroll
    for (int k = 0; k < M; ++k) {
        w[k] = upper ? conj_(k < i ? a[k] : b[k]) : (k < i ? b[k] : a[k]);
    }
    return upper ? conj_(diag) : diag;
}

// L L^H x = b for KC right-hand sides, lane i holding row i of them in v (x on return); w and
// inv = 1 / L[i][i] as `load_lanes` and its caller leave them.
template <typename T, int M, int G, int KC>
__device__ __forceinline__ void solve_lanes(T (&v)[KC], const T (&w)[M], const T inv,
                                            const int i) {
#pragma unroll
    for (int j = 0; j < M; ++j) {  // L y = b: lane j finishes y_j, the lanes below use it
#pragma unroll
        for (int c = 0; c < KC; ++c) {
            const T y = shfl(mul(v[c], inv), j, G);
            if (i == j) {
                v[c] = y;
            } else if (i > j) {
                v[c] = sub_mul(v[c], w[j], y);
            }
        }
    }
#pragma unroll
    for (int j = M - 1; j >= 0; --j) {  // L^H x = y, (L^H)[i][j] = conj(L[j][i])
#pragma unroll
        for (int c = 0; c < KC; ++c) {
            const T x = shfl(mul(v[c], conj_(inv)), j, G);
            if (i == j) {
                v[c] = x;
            } else if (i < j) {
                v[c] = sub_mul(v[c], conj_(w[j]), x);
            }
        }
    }
}

// One lane a row, G lanes a system (M <= 32), row and column of the factor in registers; see
// the module docstring.
template <typename T, int M, int KC>
__global__ void __launch_bounds__(LANES_THREADS)
xpops_cholesky_solve_lanes(const T* __restrict__ rhs, const T* __restrict__ factor,
                           T* __restrict__ out, const long long batch, const int K,
                           const int upper, const long long* __restrict__ rhs_index,
                           const long long* __restrict__ factor_index) {
    constexpr int G = lanes_of<M>();
    const long long s = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / G;
    const int i = threadIdx.x % G;
    const bool live = s < batch;  // idle lanes still take part in the shuffles
    const bool active = live && i < M;
    const long long sf = live ? (factor_index ? factor_index[s] : s) : 0;
    __shared__ T tile_all[LANES_THREADS / G][M * (G + 1)];
    T w[M];
    const T lii = load_lanes<T, M, G>(factor + sf * (long long)(M * M), i, active, upper,
                                      tile_all[threadIdx.x / G], w);
    const T inv = active ? recip(lii) : T{};
    const long long mk = (long long)M * K;
    const T* B = rhs + (live ? (rhs_index ? rhs_index[s] : s) : 0) * mk;
    T* O = out + (live ? s : 0) * mk;
    for (int c0 = 0; c0 < K; c0 += KC) {
        T v[KC];
#pragma unroll
        for (int c = 0; c < KC; ++c) {
            v[c] = (active && c0 + c < K) ? B[(long long)i * K + c0 + c] : T{};
        }
        solve_lanes<T, M, G, KC>(v, w, inv, i);
#pragma unroll
        for (int c = 0; c < KC; ++c) {
            if (active && c0 + c < K) O[(long long)i * K + c0 + c] = v[c];
        }
    }
}

// One group of G lanes a system, SYS systems a block; see the module docstring.
template <typename T, int M_MAX, int KC, int SYS>
__global__ void __launch_bounds__((M_MAX < 32 ? M_MAX : 32) * SYS)
xpops_cholesky_solve_small(const T* __restrict__ rhs, const T* __restrict__ factor,
                           T* __restrict__ out, const long long batch, const int M, const int K,
                           const int upper, const long long* __restrict__ rhs_index,
                           const long long* __restrict__ factor_index) {
    constexpr int G = M_MAX < 32 ? M_MAX : 32;
    constexpr int ROWS = M_MAX / G;
    constexpr int TRI = M_MAX * (M_MAX + 1) / 2;
    __shared__ T tri_all[SYS][TRI];
    __shared__ T inv_all[SYS][M_MAX];
    const int group = threadIdx.x / G, lane = threadIdx.x % G;
    const long long s = (long long)blockIdx.x * SYS + group;
    const bool active = s < batch;  // idle groups still take part in the warp's shuffles
    T* tri = tri_all[group];
    T* inv = inv_all[group];
    const long long mm = (long long)M * M, mk = (long long)M * K;

    if (active) {
        const T* F = factor + (factor_index ? factor_index[s] : s) * mm;
        // CH rows at a time: all their loads in flight together, each row read by adjacent
        // lanes (coalesced), only the used triangle read
        constexpr int CH = M_MAX < 16 ? M_MAX : 16;
#pragma unroll 1
        for (int r0 = 0; r0 < M; r0 += CH) {
            T tmp[CH][ROWS];
#pragma unroll
            for (int rr = 0; rr < CH; ++rr) {
                const int row = r0 + rr;
#pragma unroll
                for (int q = 0; q < ROWS; ++q) {
                    const int col = lane + q * G;
                    const bool used = row < M && col < M && (upper ? col >= row : col <= row);
                    tmp[rr][q] = used ? F[(long long)row * M + col] : T{};
                }
            }
#pragma unroll
            for (int rr = 0; rr < CH; ++rr) {
                const int row = r0 + rr;
#pragma unroll
                for (int q = 0; q < ROWS; ++q) {
                    const int col = lane + q * G;
                    if (row < M && col < M) {
                        if (upper && col >= row) {  // U[row][col] is conj(L[col][row])
                            tri[col * (col + 1) / 2 + row] = conj_(tmp[rr][q]);
                        } else if (!upper && col <= row) {
                            tri[row * (row + 1) / 2 + col] = tmp[rr][q];
                        }
                    }
                }
            }
        }
    }
    __syncwarp();
    if (active) {
        for (int i = lane; i < M; i += G) inv[i] = recip(tri[i * (i + 1) / 2 + i]);
    }
    __syncwarp();

    const T* Bs = rhs + (active ? (rhs_index ? rhs_index[s] : s) : 0) * mk;
    T* Os = out + (active ? s : 0) * mk;
    for (int c0 = 0; c0 < K; c0 += KC) {
        T v[ROWS][KC];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            const int i = lane + r * G;
#pragma unroll
            for (int c = 0; c < KC; ++c) {
                v[r][c] = (active && i < M && c0 + c < K) ? Bs[(long long)i * K + c0 + c] : T{};
            }
        }
        // forward: L y = b
#pragma unroll
        for (int j = 0; j < M_MAX; ++j) {
            if (j < M) {
                const T d = active ? inv[j] : T{};
#pragma unroll
                for (int c = 0; c < KC; ++c) {
                    const T y = shfl(mul(v[j / G][c], d), j % G, G);
                    if (lane == j % G) v[j / G][c] = y;
#pragma unroll
                    for (int r = 0; r < ROWS; ++r) {
                        const int i = lane + r * G;
                        if (active && i > j && i < M) {
                            v[r][c] = sub_mul(v[r][c], tri[i * (i + 1) / 2 + j], y);
                        }
                    }
                }
            }
        }
        // back: L^H x = y, with (L^H)[i][j] = conj(L[j][i])
#pragma unroll
        for (int j = M_MAX - 1; j >= 0; --j) {
            if (j < M) {
                const T d = active ? conj_(inv[j]) : T{};
#pragma unroll
                for (int c = 0; c < KC; ++c) {
                    const T x = shfl(mul(v[j / G][c], d), j % G, G);
                    if (lane == j % G) v[j / G][c] = x;
#pragma unroll
                    for (int r = 0; r < ROWS; ++r) {
                        const int i = lane + r * G;
                        if (active && i < j) {
                            v[r][c] = sub_mul(v[r][c], conj_(tri[j * (j + 1) / 2 + i]), x);
                        }
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            const int i = lane + r * G;
#pragma unroll
            for (int c = 0; c < KC; ++c) {
                if (active && i < M && c0 + c < K) Os[(long long)i * K + c0 + c] = v[r][c];
            }
        }
    }
}
"""


# FastKernel signatures (p pointer, q 64-bit, i 32-bit integer), one letter a kernel parameter:
# lanes (rhs, factor, out, long long batch, int K, int upper, rhs_index, factor_index) and
# small (rhs, factor, out, long long batch, int M, int K, int upper, rhs_index, factor_index).
_LANES_SIGNATURE = "pppqiipp"
_SMALL_SIGNATURE = "pppqiiipp"


def _small_config(M: int, K: int, itemsize: int) -> tuple[int, int, int, int]:
    """(M_MAX, KC, SYS, threads a block) of the small kernel."""
    m_max = 1 << max(0, (M - 1).bit_length())
    lanes = min(32, m_max)
    triangle = m_max * (m_max + 1) // 2 * itemsize
    systems = max(1, min(SMALL_THREADS // lanes, SMALL_SMEM // triangle))
    columns = 1 if K == 1 else SMALL_COLUMNS
    return m_max, columns, systems, lanes * systems


@cupy.memoize(for_each_device=True)
def _small_kernel(dtype_name: str, m_max: int, columns: int, systems: int) -> FastKernel:
    ctype = c_type(dtype_name, "Cplx")
    name = f"xpops_cholesky_solve_small<{ctype}, {m_max}, {columns}, {systems}>"
    module = cupy.RawModule(code=SOURCE, options=("-std=c++17",), name_expressions=[name])
    return FastKernel(module.get_function(name), _SMALL_SIGNATURE)


@cupy.memoize(for_each_device=True)
def _lanes_kernel(
    code: str, template: str, signature: str, dtype_name: str, m: int, columns: int, threads: int
) -> FastKernel:
    name = f"{template}<{c_type(dtype_name, 'Cplx')}, {m}, {columns}>"
    options = ("-std=c++17", f"-DLANES_THREADS={threads}")
    module = cupy.RawModule(code=code, options=options, name_expressions=[name])
    return FastKernel(module.get_function(name), signature)


def _lanes_config(M: int, itemsize: int) -> tuple[int, int]:
    """(lanes a system, threads a block) of the lanes kernel: its transpose tiles, M x (lanes
    + 1) elements a system, stay within the 48 KiB of static shared memory."""
    lanes = 1 << max(0, (M - 1).bit_length())
    threads = LANES_THREADS
    while threads > lanes and threads // lanes * M * (lanes + 1) * itemsize > 49152:
        threads //= 2
    return lanes, threads


# A kernel of the lanes family: (source, template, launch signature). The lanes kernel's
# backward (`._cupy_grad`) is another, on the same device functions and launch shape.
LANES = (SOURCE, "xpops_cholesky_solve_lanes", _LANES_SIGNATURE)


@functools.cache
def lanes_launch(
    dtype: np.dtype, M: int, single: bool, device: int, family: tuple[str, str, str] = LANES
) -> tuple[int, int, FastKernel]:
    """(lanes a system, threads a block, kernel on `device`) of the lanes kernel (or another of
    its `family`) for one right-hand side (`single`) or more: looked up once a shape, since the
    host's time before a launch is GPU time lost for small batches."""
    lanes, threads = _lanes_config(M, dtype.itemsize)
    columns = 1 if single else SMALL_COLUMNS
    with cupy.cuda.Device(device):
        kernel = _lanes_kernel(*family, dtype_name(dtype), M, columns, threads)
    return lanes, threads, kernel


@functools.cache
def small_launch(dtype: np.dtype, M: int, K: int, device: int) -> tuple[int, int, FastKernel]:
    """(systems a block, threads a block, kernel on `device`) of the small kernel for M
    unknowns and K right-hand sides, looked up once a shape (as `lanes_launch`)."""
    m_max, columns, systems, threads = _small_config(M, K, dtype.itemsize)
    with cupy.cuda.Device(device):
        kernel = _small_kernel(dtype_name(dtype), m_max, columns, systems)
    return systems, threads, kernel


def _operands(
    x: cupy.ndarray, y: cupy.ndarray, out: cupy.ndarray, batch: tuple[int, ...]
) -> tuple[int, tuple[int, int, int], tuple[int, ...], tuple[cupy.ndarray | None, ...]]:
    """The lanes and small kernels' common arguments: (systems, pointers of x, y and out,
    pointers of the index arrays that follow broadcast batch dimensions (0 for an operand that
    is not broadcast), the index arrays themselves, to be held until the launch)."""
    index_arrays = (_batch_index(x.shape[:-2], batch), _batch_index(y.shape[:-2], batch))
    indexes = tuple(0 if a is None else a.data.ptr for a in index_arrays)
    return math.prod(batch), (x.data.ptr, y.data.ptr, out.data.ptr), indexes, index_arrays


def solve_small_at(
    dtype: np.dtype,
    M: int,
    K: int,
    n: int,
    pointers: tuple[int, int, int],
    upper: bool,
    device: int,
    stream: int | None = None,
) -> None:
    """The small kernel on the device addresses of C-contiguous x (n, M, K), factors (n, M, M)
    and the result (n, M, K) of `dtype` (`pointers`, in that order), one batch,
    LANES_MAX_M < M <= SMALL_MAX_M, on `device` (the current one) and the stream whose pointer
    is `stream` (CuPy's current one where None)."""
    systems, threads, kernel = small_launch(dtype, M, K, device)
    args = (*pointers, n, M, K, int(upper), 0, 0)
    kernel(grid_1d(n, systems), threads, args, stream=stream)


def _solve_lanes(x, y, out, batch, M, K, upper):
    lanes, threads, kernel = lanes_launch(x.dtype, M, K == 1, x.data.device_id)
    n, pointers, indexes, _held = _operands(x, y, out, batch)
    kernel(grid_1d(n * lanes, threads), threads, (*pointers, n, K, int(upper), *indexes))


def solve_same_batch(x: cupy.ndarray, y: cupy.ndarray, upper: bool) -> cupy.ndarray:
    """`cholesky_solve` of two arrays of one float or complex dtype and one batch shape,
    nothing empty (the public function's fast path): small systems go straight to the lanes
    kernel, with as little host work before the launch as can be."""
    M, K = x.shape[-2], x.shape[-1]
    if M > LANES_MAX_M or not (x.flags.c_contiguous and y.flags.c_contiguous):
        return cholesky_solve(x, y, upper)
    out = cupy.empty(x.shape, x.dtype)
    n = out.size // (M * K)
    solve_lanes_at(x.dtype, M, K, n, (x.data.ptr, y.data.ptr, out.data.ptr), upper, out.device.id)
    return out


def solve_lanes_at(
    dtype: np.dtype,
    M: int,
    K: int,
    n: int,
    pointers: tuple[int, int, int],
    upper: bool,
    device: int,
    stream: int | None = None,
) -> None:
    """The lanes kernel on the device addresses of C-contiguous x (n, M, K), factors
    (n, M, M) and the result (n, M, K) of `dtype` (`pointers`, in that order), one batch,
    M <= LANES_MAX_M, on `device` (the current one) and the stream whose pointer is `stream`
    (CuPy's current one where None)."""
    lanes, threads, kernel = lanes_launch(dtype, M, K == 1, device)
    args = (*pointers, n, K, int(upper), 0, 0)
    kernel(grid_1d(n * lanes, threads), threads, args, stream=stream)


def _batch_index(shape: tuple[int, ...], batch: tuple[int, ...]) -> cupy.ndarray | None:
    """For each system of the broadcast `batch`, the index of its operand in `shape`; None when
    the operand is not broadcast."""
    if shape == batch:
        return None
    own = cupy.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    return cupy.ascontiguousarray(cupy.broadcast_to(own, batch)).reshape(-1)


def _solve_small(x, y, out, batch, M, K, upper):
    m_max, columns, systems, threads = _small_config(M, K, x.dtype.itemsize)
    kernel = _small_kernel(dtype_name(x.dtype), m_max, columns, systems)
    n, pointers, indexes, _held = _operands(x, y, out, batch)
    args = (*pointers, n, M, K, int(upper), *indexes)
    kernel(grid_1d(n, systems), threads, args)


def cholesky_solve(
    x: cupy.ndarray,
    y: cupy.ndarray,
    upper: bool,
    path: str | None = None,
    *,
    xp: Namespace | None = None,
) -> cupy.ndarray:
    """Solve with a Cholesky factor; arguments validated and cast to one float/complex dtype.

    `x` is (*bx, M, K), `y` is (*by, M, M); returns the C-contiguous (*batch, M, K) result.
    `path` (tests and benchmarks only) forces ``"lanes"``, ``"small"`` or ``"blas"``. `xp` is
    not used: the dispatch passes it to every engine.
    """
    M, K = x.shape[-2], x.shape[-1]
    bx, by = x.shape[:-2], y.shape[:-2]
    batch = bx if bx == by else tuple(np.broadcast_shapes(bx, by))
    out = cupy.empty((*batch, M, K), dtype=x.dtype)
    if out.size == 0:
        return out
    if not y.flags.c_contiguous:
        y = cupy.ascontiguousarray(y)
    kind = path or ("lanes" if M <= LANES_MAX_M else "small" if M <= SMALL_MAX_M else "blas")
    if kind in ("lanes", "small") and not x.flags.c_contiguous:
        x = cupy.ascontiguousarray(x)
    if kind == "lanes":
        _solve_lanes(x, y, out, batch, M, K, upper)
    elif kind == "small":
        _solve_small(x, y, out, batch, M, K, upper)
    else:
        solve_blas(x, y, out, _batch_index(y.shape[:-2], batch), upper)
    return out
