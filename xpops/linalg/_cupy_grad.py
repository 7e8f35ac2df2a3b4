"""The CuPy engines of `cholesky_solve`'s backward rule: the whole backward in one kernel for
batches of small systems (`backward`), or in cuBLAS calls for real systems of more than
SMALL_MAX_M unknowns (`._cupy_blas.backward`); else the factor's cotangent in one kernel for
batches of small real systems (`factor_cotangent`) after a solve, and `._grads` for the rest.

`backward` launches the lanes kernel's backward (``xpops_cholesky_solve_lanes_grad``, below,
on the device functions of `._cupy`'s source): lane i of a system solves for row i of
``dx = A^-1 g`` as the lanes kernel solves, with row i and column i of the factor in
registers, and then computes the factor's cotangent from those registers and the other
lanes' rows of ``dx`` and ``z`` (shuffles), so the factor is read once for both cotangents;
the two steps read it twice and write and read ``dx`` between them. On an H200,
(10^5, 16, 16) K=1 float32: 0.107 ms against 0.180 for the two steps (the forward: 0.058);
complex64 0.200 against 1.485 (the generic code's products).

`factor_cotangent`:

With ``U = dx`` and ``X = z`` (both (batch, M, K)) and the lower factor ``L``, the cotangent
``-tril((U X^T + X U^T) L)`` is, element by element (``i >= j``),

    ``-sum_r (U_ir (X^T L)_rj + X_ir (U^T L)_rj)``,  with  ``(X^T L)_rj = sum_{k >= j} X_kr L_kj``

(the upper case is its transpose, with ``L = u^T``). A thread a column ``j`` of a system
computes ``(X^T L)_rj`` and ``(U^T L)_rj`` once, ``min(K, CHUNK)`` right-hand sides at a time
in registers (a kernel compiled for each such count: with K = 1 a kernel for 8 takes about
twice as long at (10^5, 16, 16) on an H200), then every element of its column below the
diagonal, and writes the zeros above it. Adjacent threads hold adjacent columns, so the reads
of ``L`` and the writes of the cotangent are contiguous rows (transposed for ``upper``) and
the reads of ``U`` and ``X`` broadcasts. The kernel reads the used triangle of ``u`` (a load
only where the product needs it; reading every element is about 4x slower at M = 64, K = 8
on an H200), ``dx`` and ``z`` once and writes the cotangent once, where the generic code
makes and reads several (batch, M, M) intermediates and runs two batched matrix products.
"""

import math
from typing import Any

import cupy
import numpy as np

from .._lib._cuda import FastKernel, grid_1d
from ._cupy import SMALL_MAX_M, SOURCE, lanes_launch
from ._cupy_blas import backward as blas_backward
from ._cupy_blas import solve as solve_blas
from ._grads import factor_cotangent as generic_factor_cotangent

__all__ = [
    "FUSED_MAX_BYTES",
    "MAX_K",
    "MAX_M",
    "MIN_ELEMENTS",
    "backward",
    "backward_at",
    "factor_cotangent",
    "forward",
    "lanes_grad_launch",
]

# The whole backward in one kernel (`backward`) for systems whose row of the factor takes at
# most this many bytes (float32 M <= 32, float64 and complex64 M <= 16, complex128 M <= 8): a
# lane holds a row and a column of the factor and a column of its cotangent in registers, 96
# registers a lane for float32 at M = 32, 255 for complex128 at M = 16.
FUSED_MAX_BYTES = 128

# compiled after the lanes kernel's source, whose device functions (`load_lanes`,
# `solve_lanes`, the arithmetic helpers) it uses
_BACKWARD_SOURCE = r"""
// The backward of cholesky_solve in one pass over the factor, for a batch of systems of one
// shape (nothing broadcast), M <= 32: with G the cotangent of the solution Z, lane i (as in
// the lanes kernel) solves for row i of dB = A^-1 G, then
//     s_j = sum_{k >= j} conj(Z_k) L[k][j],  t_j = sum_{k >= j} conj(dB_k) L[k][j]
// (lane j, from its column of L and the other lanes' rows by shuffles), and the factor's
// cotangent dL = -tril((dB Z^H + Z dB^H) L), dL[i][j] = -sum_c (dB_ic s_jc + Z_ic t_jc),
// summed over the right-hand sides c in registers. For a lower factor lane j keeps column j
// of dL and the lanes write its rows (contiguous); for an upper one the cotangent is dL^H,
// lane i keeps row i of dL and the lanes write the rows of dL^H. Zeros on the unused
// triangle.
template <typename T, int M, int KC>
__global__ void __launch_bounds__(LANES_THREADS)
xpops_cholesky_solve_lanes_grad(const T* __restrict__ cotangent, const T* __restrict__ solution,
                                const T* __restrict__ factor, T* __restrict__ d_rhs,
                                T* __restrict__ d_factor, const long long batch, const int K,
                                const int upper) {
    constexpr int G = lanes_of<M>();
    const long long s = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / G;
    const int i = threadIdx.x % G;
    const bool live = s < batch;  // idle lanes still take part in the shuffles
    const bool active = live && i < M;
    const long long base = live ? s : 0;
    __shared__ T tile_all[LANES_THREADS / G][M * (G + 1)];
    T w[M];
    const T lii = load_lanes<T, M, G>(factor + base * (M * M), i, active, upper,
                                      tile_all[threadIdx.x / G], w);
    const T inv = active ? recip(lii) : T{};
    const long long mk = (long long)M * K;
    const T* Gc = cotangent + base * mk;
    const T* Z = solution + base * mk;
    T* D = d_rhs + base * mk;
    T acc[M];  // lower: column i of dL (acc[r] = dL[r][i]); upper: row i (acc[j] = dL[i][j])
#pragma unroll
    for (int k = 0; k < M; ++k) acc[k] = T{};
    for (int c0 = 0; c0 < K; c0 += KC) {
        T v[KC], z[KC], sv[KC], tv[KC];
#pragma unroll
        for (int c = 0; c < KC; ++c) {
            const bool here = active && c0 + c < K;
            v[c] = here ? Gc[(long long)i * K + c0 + c] : T{};
            z[c] = here ? Z[(long long)i * K + c0 + c] : T{};
        }
        solve_lanes<T, M, G, KC>(v, w, inv, i);  // v: row i of dB
#pragma unroll
        for (int c = 0; c < KC; ++c) {
            if (active && c0 + c < K) D[(long long)i * K + c0 + c] = v[c];
            sv[c] = mul(conj_(z[c]), lii);
            tv[c] = mul(conj_(v[c]), lii);
        }
#pragma unroll
        for (int k = 0; k < M; ++k) {
#pragma unroll
            for (int c = 0; c < KC; ++c) {
                const T zk = shfl(z[c], k, G), bk = shfl(v[c], k, G);
                if (k > i) {
                    sv[c] = add_mul(sv[c], conj_(zk), w[k]);
                    tv[c] = add_mul(tv[c], conj_(bk), w[k]);
                }
            }
        }
        if (upper) {
#pragma unroll
            for (int j = 0; j < M; ++j) {
#pragma unroll
                for (int c = 0; c < KC; ++c) {
                    const T sj = shfl(sv[c], j, G), tj = shfl(tv[c], j, G);
                    acc[j] = sub_mul(sub_mul(acc[j], v[c], sj), z[c], tj);
                }
            }
        } else {
#pragma unroll
            for (int r = 0; r < M; ++r) {
#pragma unroll
                for (int c = 0; c < KC; ++c) {
                    const T br = shfl(v[c], r, G), zr = shfl(z[c], r, G);
                    acc[r] = sub_mul(sub_mul(acc[r], br, sv[c]), zr, tv[c]);
                }
            }
        }
    }
    if (!active) return;
    T* dF = d_factor + base * (M * M);
    // step r writes row r, lanes its adjacent columns; the unused triangle gets zeros
#pragma unroll
    for (int r = 0; r < M; ++r) {
        dF[r * M + i] = upper ? (r <= i ? conj_(acc[r]) : T{}) : (r >= i ? acc[r] : T{});
    }
}
"""

# arguments: cotangent, solution, factor, cotangents of the right-hand sides and of the
# factor (pointers), systems, K, upper
_BACKWARD = (SOURCE + _BACKWARD_SOURCE, "xpops_cholesky_solve_lanes_grad", "pppppqii")


def lanes_grad_launch(
    dtype: np.dtype, M: int, single: bool, device: int
) -> tuple[int, int, FastKernel]:
    """(lanes a system, threads a block, kernel on `device`) of the lanes kernel's backward,
    as `._cupy.lanes_launch` gives them for the lanes kernel."""
    return lanes_launch(dtype, M, single, device, _BACKWARD)


# A thread's loops grow with M (2 (M - j) K multiply-adds for column j) and K: past 64 of
# either the batched matrix products of the generic code are the better plan. A thread a
# column: with fewer than MIN_ELEMENTS elements the GPU is mostly idle, and the generic code's
# products spread the work better.
MAX_M = 64
MAX_K = 64
MIN_ELEMENTS = 1 << 16

_CHUNK = 8  # right-hand sides held in registers at a time


@cupy.memoize(for_each_device=True)
def _kernel(chunk: int) -> cupy.ElementwiseKernel:
    """The kernel that holds `chunk` right-hand sides in registers at a time."""
    return cupy.ElementwiseKernel(
        "raw T U, raw T X, raw T F, int64 M, int64 K, bool upper",
        "raw T dy",
        f"""
        const long long b = i / M, col = i - b * M;
        const T* u = &U[b * M * K];
        const T* x = &X[b * M * K];
        const T* f = &F[b * M * M];
        T* d = &dy[b * M * M];
        // every loop runs over all M rows, predicated, so that the threads of a system read
        // and write one row together (contiguous columns) rather than a diagonal of it
        for (long long r0 = 0; r0 < K; r0 += {chunk}) {{
            const long long n = K - r0 < {chunk} ? K - r0 : {chunk};
            T s[{chunk}], t[{chunk}];  // (X^T L)_(r, col), (U^T L)_(r, col)
#pragma unroll
            for (int q = 0; q < {chunk}; ++q) {{
                s[q] = T(0);
                t[q] = T(0);
            }}
            for (long long k = 0; k < M; ++k) {{
                if (k >= col) {{  // the used triangle only: half the factor's bytes read
                    const T l = upper ? f[col * M + k] : f[k * M + col];
#pragma unroll
                    for (int q = 0; q < {chunk}; ++q) {{
                        if (q < n) {{
                            s[q] += x[k * K + r0 + q] * l;
                            t[q] += u[k * K + r0 + q] * l;
                        }}
                    }}
                }}
            }}
            for (long long row = 0; row < M; ++row) {{
                T acc = T(0);
#pragma unroll
                for (int q = 0; q < {chunk}; ++q) {{
                    if (q < n) acc += u[row * K + r0 + q] * s[q] + x[row * K + r0 + q] * t[q];
                }}
                T* at = &d[upper ? col * M + row : row * M + col];
                if (row < col) {{
                    *at = T(0);
                }} else {{
                    *at = (r0 == 0 ? T(0) : *at) - acc;
                }}
            }}
        }}
        """,
        f"xpops_cholesky_solve_grad_factor_{chunk}",
    )


def factor_cotangent(
    dx: cupy.ndarray, z: cupy.ndarray, u: cupy.ndarray, upper: bool, batch: tuple[int, ...]
) -> cupy.ndarray:
    """`._grads.factor_cotangent` on CuPy arrays: the fused kernel for real dtypes, factors
    with no broadcast batch dimension, M <= `MAX_M`, K <= `MAX_K` and at least
    `MIN_ELEMENTS` elements, the generic code otherwise.

    Where `dx` or `z` holds an infinity the two differ in which non-finite value they give:
    the kernel multiplies only the used triangle, the generic matrix products also its
    zeros (``0 * inf`` is NaN), so the kernel may give +-inf where the generic code gives
    NaN."""
    m, k = dx.shape[-2], dx.shape[-1]
    full = tuple(dx.shape[:-2])
    small = m <= MAX_M and k <= MAX_K and math.prod(full) * m * m >= MIN_ELEMENTS
    if dx.dtype.kind != "f" or batch != full or not small or dx.size == 0:
        return generic_factor_cotangent(dx, z, u, upper, batch)
    dx, z, u = (cupy.ascontiguousarray(a) for a in (dx, z, u))
    dy = cupy.empty((*batch, m, m), dx.dtype)
    _kernel(min(k, _CHUNK))(dx, z, u, m, k, upper, dy, size=math.prod(batch) * m)
    return dy


def forward(x: Any, y: Any, upper: bool) -> tuple[cupy.ndarray, cupy.ndarray] | None:
    """``(cholesky_solve(x, y, upper), the first solve's result)`` for real systems of more
    than SMALL_MAX_M unknowns given as two CuPy arrays of one dtype, batch shape and device,
    nothing empty (the checks of the public function hold then); None for anything else.
    The rule's backward takes the kept half for ``Y`` instead of a product with the factor."""
    if not (isinstance(x, cupy.ndarray) and isinstance(y, cupy.ndarray)):
        return None
    if x.dtype != y.dtype or x.dtype.char not in "fd" or x.ndim < 2 or y.ndim < 2:
        return None
    m = y.shape[-1]
    same = x.shape[:-2] == y.shape[:-2] and x.shape[-2] == y.shape[-2] == m
    if not same or m <= SMALL_MAX_M or x.size == 0 or x.device != y.device:
        return None
    with x.device:
        out = cupy.empty(x.shape, x.dtype)
        half = cupy.empty(x.shape, x.dtype)
        solve_blas(x, cupy.ascontiguousarray(y), out, None, upper, half)
    return out, half


def backward(
    g: cupy.ndarray,
    z: cupy.ndarray,
    u: cupy.ndarray,
    upper: bool,
    batch: tuple[int, ...],
    half: cupy.ndarray | None,
) -> tuple[cupy.ndarray, cupy.ndarray] | None:
    """Both cotangents of the rule, ``(A^-1 g, factor's)``, from one kernel that reads the
    factor once (``xpops_cholesky_solve_lanes_grad``: the solve of the lanes kernel, then the
    factor's cotangent from the registers), or for real systems of more than SMALL_MAX_M
    unknowns from `._cupy_blas.backward`; None where neither applies: a factor batch that is
    broadcast against the right-hand sides' (`batch`, the factor's, against `g`'s), rows of
    more than `FUSED_MAX_BYTES` bytes up to SMALL_MAX_M, complex systems past it, an empty
    array. `g` and `z` (*batch, M, K), `u` (*batch, M, M), one dtype; `half` what `forward`
    kept, or None."""
    m, k = g.shape[-2], g.shape[-1]
    if tuple(g.shape[:-2]) != batch or g.size == 0:
        return None
    if m > SMALL_MAX_M:
        return blas_backward(g, z, u, upper, half)
    if m * g.dtype.itemsize > FUSED_MAX_BYTES:
        return None
    g, z, u = (cupy.ascontiguousarray(a) for a in (g, z, u))
    dx = cupy.empty(g.shape, g.dtype)
    dy = cupy.empty(u.shape, u.dtype)
    pointers = (g.data.ptr, z.data.ptr, u.data.ptr, dx.data.ptr, dy.data.ptr)
    backward_at(g.dtype, m, k, math.prod(batch), pointers, upper, g.data.device_id)
    return dx, dy


def backward_at(
    dtype: np.dtype,
    M: int,
    K: int,
    n: int,
    pointers: tuple[int, int, int, int, int],
    upper: bool,
    device: int,
    stream: int | None = None,
) -> None:
    """The lanes kernel's backward on the device addresses of C-contiguous arrays of `dtype`:
    the cotangent and the solution (n, M, K), the factors (n, M, M), and the two cotangents
    it writes, (n, M, K) and (n, M, M) (`pointers`, in that order); one batch, rows of the
    factor of at most `FUSED_MAX_BYTES`; on `device` (the current one) and the stream whose
    pointer is `stream` (CuPy's current one where None)."""
    lanes, threads, kernel = lanes_grad_launch(dtype, M, K == 1, device)
    args = (*pointers, n, K, int(upper))
    kernel(grid_1d(n * lanes, threads), threads, args, stream=stream)
