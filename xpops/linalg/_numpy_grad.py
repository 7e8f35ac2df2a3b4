"""The NumPy engines of `cholesky_solve`'s backward rule for large systems (the BLAS path of
`._numpy`): the rule's forward keeping the first of its two triangular solves (`forward`), and
both cotangents from it (`backward`). PyTorch's CPU tensors reach them on their memory.

With ``Y`` the forward's first solve (``L^-1 B``, or ``U^-H B`` for an upper factor), ``W``
the first of the two solves of ``dB = A^-1 G`` and X the result, the factor's cotangent
``-tril((dB X^H + X dB^H) L)`` of `._vjp` is ``-tril([dB X] [Y W]^H)`` (upper:
``-triu([W Y] [X dB]^H)``): one product of M x 2K operands, where the generic rule takes two
(``[dB X] ([X dB]^H L)``, the second against the M x M factor) and a copy of the factor's
triangle. The solves are the BLAS path's own ``trsm`` calls, so the forward's result is the
public function's. Only the used triangle's row blocks are multiplied, and the rest of the
cotangent is zeroed in place: ``numpy.tril`` of a whole (2048, 2048) float64 product took
24 ms, as long as the product.

On the 2-core VM (float64, the pull-back alone, best of 15, two alternated rounds; against the
generic rule): (1, 1024, 1024) K=64 7.5-7.8 ms against 19.6-24.3; (1, 2048, 2048) K=64 56-62
against 97-102; (4, 512, 512) K=32 7.2-7.8 against 10.8-15.5; (1, 1024, 1024) K=1 3.6-3.9
against 5.4-5.9.
"""

from typing import Any

import numpy as np

from ._numpy import BLAS_DTYPES, solve_triangular

__all__ = ["MIN_M", "backward", "forward"]

# Systems of more than MIN_M unknowns (all on the BLAS path of `._numpy`; for smaller ones the
# rule's products are small, and PyTorch's CPU tensors take ``torch.cholesky_solve``)
MIN_M = 64
# Rows of a block of the factor's cotangent (`_triangle_product`)
_BLOCK_ROWS = 256


def forward(x: Any, y: Any, upper: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """``(cholesky_solve(x, y, upper), the first solve's result)`` for two NumPy arrays of one
    float or complex dtype and one batch shape, of more than MIN_M unknowns, nothing empty
    (the checks of the public function hold then, and it would solve them by BLAS too); None
    otherwise."""
    if type(x) is not np.ndarray or type(y) is not np.ndarray:
        return None
    if x.dtype != y.dtype or x.dtype not in BLAS_DTYPES or x.ndim < 2 or y.ndim < 2:
        return None
    m = y.shape[-1]
    same = x.shape[:-2] == y.shape[:-2] and x.shape[-2] == y.shape[-2] == m
    if not same or m <= MIN_M or x.size == 0:
        return None
    half = solve_triangular(x, y, not upper, upper)
    return solve_triangular(half, y, not upper, not upper), half


def backward(
    g: np.ndarray,
    z: np.ndarray,
    u: np.ndarray,
    upper: bool,
    batch: tuple[int, ...],
    half: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray] | None:
    """``(A^-1 g, the factor's cotangent)`` from the forward's kept `half`; None without it
    (the forward did not keep one) or where the factor's batch `batch` is broadcast against
    `g`'s. `g`, `z` and `half` (*batch, M, K), `u` (*batch, M, M), one dtype."""
    if half is None or tuple(g.shape[:-2]) != batch or half.dtype != g.dtype:
        return None
    w = solve_triangular(g, u, not upper, upper)
    db = solve_triangular(w, u, not upper, not upper)
    # lower: [dB X] [Y W]^H; upper: [W Y] [X dB]^H; the minus on the M x 2K operand
    first, second = ((w, half), (z, db)) if upper else ((db, z), (half, w))
    left = np.concatenate(first, axis=-1)
    left *= -1
    right = np.swapaxes(np.concatenate(second, axis=-1), -1, -2)
    if np.iscomplexobj(right):
        np.conjugate(right, out=right)
    return db, _triangle_product(left, right, upper)


def _triangle_product(left: np.ndarray, right: np.ndarray, upper: bool) -> np.ndarray:
    """The lower (or upper) triangle of ``left @ right`` ((*, M, 2K) by (*, 2K, M)), zeros
    elsewhere: row blocks of `_BLOCK_ROWS` multiplied only where they meet the triangle, the
    rest filled with zeros in place (``numpy.tril`` of the whole product masks a full copy)."""
    m = left.shape[-2]
    out = np.empty((*left.shape[:-1], m), dtype=np.result_type(left, right))
    for r0 in range(0, m, _BLOCK_ROWS):
        r1 = min(m, r0 + _BLOCK_ROWS)
        c0, c1 = (r0, m) if upper else (0, r1)  # the block's columns that meet the triangle
        np.matmul(left[..., r0:r1, :], right[..., c0:c1], out=out[..., r0:r1, c0:c1])
        out[..., r0:r1, :c0] = 0
        out[..., r0:r1, c1:] = 0
        block = out[..., r0:r1, r0:r1]  # the wrong side of the diagonal block
        rows, cols = np.tril_indices(r1 - r0, -1) if upper else np.triu_indices(r1 - r0, 1)
        block[..., rows, cols] = 0
    return out
