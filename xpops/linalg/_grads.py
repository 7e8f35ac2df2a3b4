"""The cotangent of the factor in `cholesky_solve`'s backward rule (`._vjp`), generically in
the arrays' namespace: the engine of every library but CuPy's, and CuPy's for the cases its
kernel (`._cupy_grad`) does not take."""

import math

from .._lib import _compat
from .._lib._dtypes import is_dtype
from .._lib._typing import Array, Namespace

__all__ = ["conj_transpose", "factor_cotangent"]


def conj_transpose(xp: Namespace, a: Array) -> Array:
    t = xp.matrix_transpose(a)
    return xp.conj(t) if is_dtype(xp, t.dtype, "complex floating") else t


def factor_cotangent(dx: Array, z: Array, u: Array, upper: bool, batch: tuple[int, ...]) -> Array:
    """``-tril(C u)`` (lower) or ``-triu(u C)`` (upper), ``C = dx z^H + z dx^H`` summed over
    the batch dimensions that the factor's batch shape `batch` broadcasts to those of `dx`
    and `z` (both (*full, M, K)); `u` (*batch, M, M) read on its used triangle only."""
    xp = _compat.array_namespace(dx)
    p = _sum_outer(xp, dx, z, batch)  # (*batch, M, M)
    c = -(p + conj_transpose(xp, p))  # -C, negated before `tril`/`triu`: their zeros stay +0
    return xp.triu(xp.triu(u) @ c) if upper else xp.tril(c @ xp.tril(u))


def _sum_outer(xp: Namespace, a: Array, b: Array, batch: tuple[int, ...]) -> Array:
    """``a @ b^H`` summed over the batch dimensions that `batch` broadcasts to those of `a`
    and `b` (both (*full, M, K)); shape (*batch, M, M).

    The summed dimensions are moved next to K and merged with it, so one matrix product
    does the sum: ``sum_j a_j b_j^H = [a_1 ... a_n] [b_1 ... b_n]^H``.
    """
    full = tuple(a.shape[:-2])
    m, k = a.shape[-2], a.shape[-1]
    n = len(full)
    padded = (1,) * (n - len(batch)) + batch
    keep = [i for i in range(n) if padded[i] == full[i]]
    summed = [i for i in range(n) if padded[i] != full[i]]
    if summed:
        order = (*keep, n, *summed, n + 1)
        shape = (*(full[i] for i in keep), m, math.prod(full[i] for i in summed) * k)
        a = xp.reshape(xp.permute_dims(a, order), shape)
        b = xp.reshape(xp.permute_dims(b, order), shape)
    return xp.reshape(a @ conj_transpose(xp, b), (*batch, m, m))
