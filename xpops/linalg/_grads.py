"""The cotangent of the factor in `cholesky_solve`'s backward rule (`._vjp`), generically in
the arrays' namespace: the engine of every library but CuPy's, and CuPy's for the cases its
kernel (`._cupy_grad`) does not take."""

import math

from .._lib import _compat
from .._lib._dtypes import is_dtype
from .._lib._typing import Array, Namespace

__all__ = ["conj_transpose", "factor_cotangent", "factor_cotangent_jax"]


def conj_transpose(xp: Namespace, a: Array) -> Array:
    t = xp.matrix_transpose(a)
    return xp.conj(t) if is_dtype(xp, t.dtype, "complex floating") else t


def factor_cotangent(dx: Array, z: Array, u: Array, upper: bool, batch: tuple[int, ...]) -> Array:
    """``-tril(C u)`` (lower) or ``-triu(u C)`` (upper), ``C = dx z^H + z dx^H`` summed over
    the batch dimensions that the factor's batch shape `batch` broadcasts to those of `dx`
    and `z` (both (*full, M, K)); `u` (*batch, M, M) read on its used triangle only."""
    xp = _compat.array_namespace(dx)
    return _factor_cotangent(xp, dx, z, u, upper, batch, separate=False)


def factor_cotangent_jax(
    dx: Array, z: Array, u: Array, upper: bool, batch: tuple[int, ...]
) -> Array:
    """`factor_cotangent` of JAX arrays: with one right-hand side the reassociated products
    are taken one by one (XLA makes a product with a dimension of 1 a broadcast, where the
    concatenated ones are batched products of tiny matrices: 3-5x slower on the CPU at
    (10000, 16, 16))."""
    xp = _compat.array_namespace(dx)
    return _factor_cotangent(xp, dx, z, u, upper, batch, separate=True)


def _factor_cotangent(
    xp: Namespace,
    dx: Array,
    z: Array,
    u: Array,
    upper: bool,
    batch: tuple[int, ...],
    *,
    separate: bool,
) -> Array:
    a, b = _fold_summed(xp, dx, z, batch)  # (*batch, M, F*K): the summed dimensions in K
    m, k = a.shape[-2], a.shape[-1]
    t = xp.triu(u) if upper else xp.tril(u)
    # -C u or -u C, the minus taken on an operand of M x 2K rows where there is one (the
    # products come out negated, without a pass over the M x M result); the zeros that
    # `tril`/`triu` write are +0
    if 3 * k < m and separate and k == 1:
        # C u = a (b^H u) + b (a^H u), u C = (u a) b^H + (u b) a^H
        if upper:
            ncu = (t @ a) @ conj_transpose(xp, -b) + (t @ b) @ conj_transpose(xp, -a)
        else:
            ncu = -a @ (conj_transpose(xp, b) @ t) + -b @ (conj_transpose(xp, a) @ t)
    elif 3 * k < m:
        # Few right-hand sides: C u = [a b] ([b a]^H u), u C = (u [a b]) [b a]^H, two
        # products over 2K, 4KM^2 multiply-adds instead of the M^3 + KM^2 of forming C
        ab = xp.concat([a, b], axis=-1)
        ba = xp.concat([b, a], axis=-1)
        ncu = (t @ ab) @ conj_transpose(xp, -ba) if upper else -ab @ (conj_transpose(xp, ba) @ t)
    else:
        p = a @ conj_transpose(xp, b)
        c = p + conj_transpose(xp, p)
        ncu = -(t @ c) if upper else -(c @ t)
    return xp.triu(ncu) if upper else xp.tril(ncu)


def _fold_summed(xp: Namespace, a: Array, b: Array, batch: tuple[int, ...]) -> tuple[Array, Array]:
    """`a` and `b` (both (*full, M, K)) with the batch dimensions that `batch` broadcasts to
    ``full`` moved next to K and merged with it, so that one matrix product ``a @ b^H`` of the
    results is the sum over them: ``sum_j a_j b_j^H = [a_1 ... a_n] [b_1 ... b_n]^H``. The
    results have the shape ``(*batch, M, F*K)``, aligned with the factor's batch."""
    full = tuple(a.shape[:-2])
    m, k = a.shape[-2], a.shape[-1]
    n = len(full)
    padded = (1,) * (n - len(batch)) + batch
    keep = [i for i in range(n) if padded[i] == full[i]]
    summed = [i for i in range(n) if padded[i] != full[i]]
    if summed:
        order = (*keep, n, *summed, n + 1)
        a = xp.permute_dims(a, order)
        b = xp.permute_dims(b, order)
    shape = (*batch, m, math.prod(full[i] for i in summed) * k)
    return xp.reshape(a, shape), xp.reshape(b, shape)
