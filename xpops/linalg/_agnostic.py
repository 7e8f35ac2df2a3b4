"""Generic array-API engine of cholesky_solve and of the internal triangular solve.

The array API standard has no triangular solve, so each one is ``xp.linalg.solve`` on the
triangle (``xp.tril``/``xp.triu`` select it, so junk and NaN in the other triangle are never
read: a multiplication by a 0/1 mask would turn NaN into NaN, not 0). A general solve pivots
and raises on a singular matrix; a zero on the diagonal is therefore found first, that
diagonal entry replaced by 1, and the systems concerned set to NaN afterwards, so that they
give NaN (LAPACK gives inf or NaN) and the others are untouched. PyTorch has its own
``torch.linalg.solve_triangular`` (BLAS trsm on the CPU), which is used instead.
"""

import math

import numpy as np

from .._lib._compat import device, is_torch_namespace
from .._lib._typing import Array, Namespace

__all__ = ["cholesky_solve", "solve_triangular"]


# PyTorch's CUDA triangular solve slows down sharply with the number of right-hand sides (an
# H200, 16 x 16 factor: 0.1 ms for 1e5 columns, 9.4 s for 1e6): CUDA tensors are solved in
# chunks of at most this many columns.
TORCH_CUDA_MAX_COLUMNS = 1 << 16


def _solve_torch(b: Array, a: Array, lower: bool, conj_trans: bool) -> Array:
    import torch

    k = b.shape[-1]
    if b.is_cuda and k > TORCH_CUDA_MAX_COLUMNS:
        step = TORCH_CUDA_MAX_COLUMNS
        parts = [
            _solve_torch(b[..., i : i + step], a, lower, conj_trans) for i in range(0, k, step)
        ]
        return torch.cat(parts, dim=-1)
    # the solution in LAPACK's column-major layout, as PyTorch returns it: a solve that takes
    # it solves in place of a copy of it, with no transposition
    if conj_trans:
        return torch.linalg.solve_triangular(a.mH, b, upper=lower)
    return torch.linalg.solve_triangular(a, b, upper=not lower)


def solve_triangular(b: Array, a: Array, lower: bool, conj_trans: bool, *, xp: Namespace) -> Array:
    """Solve ``op(a) X = b``, ``op(a) = a^H`` if `conj_trans`; a (*, M, M), b (*, M, K)."""
    if is_torch_namespace(xp):
        return _solve_torch(b, a, lower, conj_trans)
    m = a.shape[-1]
    t = xp.tril(a) if lower else xp.triu(a)
    diag = xp.linalg.diagonal(a)
    zero = diag == 0
    singular = xp.any(zero, axis=-1)
    dev = device(a)  # None for a JAX tracer: JAX places it
    eye = xp.eye(m, dtype=xp.bool, device=dev)
    t = xp.where(eye & zero[..., None, :], xp.asarray(1, dtype=a.dtype, device=dev), t)
    t = xp.matrix_transpose(t) if conj_trans else t
    if conj_trans and xp.isdtype(t.dtype, "complex floating"):
        t = xp.conj(t)
    # not every namespace's solve broadcasts batch dimensions (CuPy's does not)
    batch = tuple(np.broadcast_shapes(tuple(t.shape[:-2]), tuple(b.shape[:-2])))
    t = xp.broadcast_to(t, (*batch, m, m))
    b = xp.broadcast_to(b, (*batch, m, b.shape[-1]))
    out = xp.linalg.solve(t, b)
    nan = xp.asarray(math.nan, dtype=out.dtype, device=dev)
    return xp.where(singular[..., None, None], nan, out)


def cholesky_solve(x: Array, y: Array, upper: bool, *, xp: Namespace) -> Array:
    """Two triangular solves: ``y y^H`` (or ``y^H y`` if `upper`) ``X = x``; C-contiguous (a
    tensor's solution comes column-major from PyTorch's solve)."""
    if upper:
        z = solve_triangular(x, y, False, True, xp=xp)
        out = solve_triangular(z, y, False, False, xp=xp)
    else:
        z = solve_triangular(x, y, True, False, xp=xp)
        out = solve_triangular(z, y, True, True, xp=xp)
    return out.contiguous() if is_torch_namespace(xp) else out
