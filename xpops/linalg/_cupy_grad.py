"""The CuPy engine of the factor's cotangent in `cholesky_solve`'s backward rule: one fused
kernel for batches of small real systems, `._grads` for the rest.

With ``U = dx`` and ``X = z`` (both (batch, M, K)) and the lower factor ``L``, the cotangent
``-tril((U X^T + X U^T) L)`` is, element by element (``i >= j``),

    ``-sum_r (U_ir (X^T L)_rj + X_ir (U^T L)_rj)``,  with  ``(X^T L)_rj = sum_{k >= j} X_kr L_kj``

(the upper case is its transpose, with ``L = u^T``). A thread an element reads the column
of ``L`` below the diagonal, from the L1 cache: the kernel reads ``u``, ``dx`` and ``z`` once
and writes the cotangent once, where the generic code makes and reads several
(batch, M, M) intermediates and runs two batched matrix products.
"""

import math

import cupy

from ._grads import factor_cotangent as generic_factor_cotangent

__all__ = ["MAX_K", "MAX_M", "MIN_ELEMENTS", "factor_cotangent"]

# The kernel's reads of a column grow with M (M - j a thread, M^2 / 2 an element's row on
# average) and its serial loop with K: past 64 of either the batched matrix products of the
# generic code are the better plan. A thread an element: with fewer than MIN_ELEMENTS
# elements the GPU is mostly idle, and the generic code's products spread the work better.
MAX_M = 64
MAX_K = 64
MIN_ELEMENTS = 1 << 16

_KERNEL = cupy.ElementwiseKernel(
    "raw T U, raw T X, raw T F, int64 M, int64 K, bool upper",
    "T dy",
    """
    // dy[b, row, col]; the lower case reads F[b, k, j] (k >= j), the upper case the
    // transposed element F[b, j, k] and writes the transposed position
    const long long m2 = M * M;
    const long long b = i / m2;
    const long long rc = i - b * m2;
    const long long r0 = rc / M, c0 = rc - r0 * M;
    const long long row = upper ? c0 : r0, col = upper ? r0 : c0;
    if (row < col) {
        dy = T(0);
    } else {
        const T* u = &U[b * M * K];
        const T* x = &X[b * M * K];
        const T* f = &F[b * m2];
        T acc = T(0);
        for (long long r = 0; r < K; ++r) {
            T s = T(0), t = T(0);  // (X^T L)_{r,col}, (U^T L)_{r,col}
            for (long long k = col; k < M; ++k) {
                const T l = upper ? f[col * M + k] : f[k * M + col];
                s += x[k * K + r] * l;
                t += u[k * K + r] * l;
            }
            acc -= u[row * K + r] * s + x[row * K + r] * t;
        }
        dy = acc;
    }
    """,
    "xpops_cholesky_solve_grad_factor",
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
    _KERNEL(dx, z, u, m, k, upper, dy)
    return dy
