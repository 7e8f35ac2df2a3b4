"""JAX engine of cholesky_solve and of the internal triangular solve: XLA's triangular solve,
``jax.lax.linalg.triangular_solve`` (what ``jax.scipy.linalg.cho_solve`` calls), traced into
the caller's program.

XLA's solve reads only the triangle it is told to (the other one may hold anything, NaN
included) and, as LAPACK, gives inf or NaN for a system with a zero on the factor's diagonal
without touching the other systems of the batch. It takes one batch shape for both operands:
batch dimensions in which the factor is broadcast are folded into K (one solve with more
right-hand sides, every distinct factor read once), as in the NumPy engine, and the
right-hand sides are broadcast over the others. ``transpose_a`` with ``conjugate_a`` is the
conjugate transpose of a complex factor.

Importing this module does not import JAX: the engines are reached once a JAX array exists.
"""

import math
from collections.abc import Callable

import numpy as np

from .._lib._typing import Array, Namespace

__all__ = ["cholesky_solve", "solve_triangular"]


def _fold(b: Array, a: Array) -> tuple[Array, Array, Callable[[Array], Array]]:
    """`b` (*, M, K) as right-hand sides that line up with the factors `a` (*, M, M).

    Returns the right-hand sides, the factors with one batch shape, and the function that
    turns the solution of those back into the ``(*batch, M, K)`` result: the batch dimensions
    where `a` has size 1 and the broadcast batch does not move next to K."""
    import jax

    jnp = jax.numpy
    m, k = int(b.shape[-2]), int(b.shape[-1])
    batch = tuple(np.broadcast_shapes(tuple(b.shape[:-2]), tuple(a.shape[:-2])))
    nb = len(batch)
    a_batch = (1,) * (nb - (a.ndim - 2)) + tuple(a.shape[:-2])
    fold = [d for d in range(nb) if a_batch[d] == 1 and batch[d] > 1]
    keep = [d for d in range(nb) if d not in fold]
    kept = tuple(batch[d] for d in keep)
    factors = jnp.reshape(a, (*kept, m, m))
    rhs = jnp.broadcast_to(b, (*batch, m, k))
    if not fold:
        return rhs, factors, lambda out: out
    perm = (*keep, nb, *fold, nb + 1)
    moved = jnp.transpose(rhs, perm)
    moved_shape = moved.shape
    rhs = jnp.reshape(moved, (*kept, m, math.prod(batch[d] for d in fold) * k))
    inverse = tuple(int(i) for i in np.argsort(perm))
    return rhs, factors, lambda out: jnp.transpose(jnp.reshape(out, moved_shape), inverse)


def _solve(a: Array, b: Array, lower: bool, conj_trans: bool) -> Array:
    """``op(a) X = b`` of one batch shape, ``op(a) = a^H`` if `conj_trans`."""
    import jax

    return jax.lax.linalg.triangular_solve(
        a, b, left_side=True, lower=lower, transpose_a=conj_trans, conjugate_a=conj_trans
    )


def solve_triangular(
    b: Array, a: Array, lower: bool, conj_trans: bool, *, xp: Namespace | None = None
) -> Array:
    """Solve ``op(a) X = b`` (``op(a) = a^H`` if `conj_trans`); a (*, M, M), b (*, M, K),
    batch dimensions broadcasting. `xp` is not used: the dispatch passes it to every engine."""
    rhs, factors, restore = _fold(b, a)
    return restore(_solve(factors, rhs, lower, conj_trans))


def cholesky_solve(x: Array, y: Array, upper: bool, *, xp: Namespace | None = None) -> Array:
    """Solve ``A X = x`` with ``A = y y^H`` (``y^H y`` if `upper`): two triangular solves.
    `xp` is not used: the dispatch passes it to every engine."""
    rhs, factors, restore = _fold(x, y)
    if upper:  # U^H then U
        z = _solve(factors, rhs, False, True)
        return restore(_solve(factors, z, False, False))
    z = _solve(factors, rhs, True, False)  # L then L^H
    return restore(_solve(factors, z, True, True))
