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

`forward_keeping_half` and `backward_from_half` are the backward rule's (`._vjp`) for systems
of more than 64 unknowns with a factor of their own, as on NumPy (`._numpy_grad`): the forward
keeps its first triangular solve ``Y``, and the factor's cotangent is one product from it and
from the first solve ``W`` of the backward's own, ``-tril([dB X] [Y W]^H)`` (upper:
``-triu([W Y] [X dB]^H)``), where the generic rule takes two products.

Importing this module does not import JAX: the engines are reached once a JAX array exists.
"""

import math
from collections.abc import Callable

import numpy as np

from .._lib._typing import Array, Namespace

__all__ = ["backward_from_half", "cholesky_solve", "forward_keeping_half", "solve_triangular"]


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


# the dtypes of the kept solve: those the rule computes in (not float16 or bfloat16)
_KEPT_DTYPES = frozenset({"float32", "float64", "complex64", "complex128"})


def forward_keeping_half(x: Array, y: Array, upper: bool) -> tuple[Array, Array] | None:
    """``(cholesky_solve(x, y, upper), the first solve's result)`` for two JAX arrays (or
    tracers) of one float or complex dtype and one batch shape, of more than 64 unknowns,
    nothing empty (the checks of the public function hold then); None otherwise."""
    if x.dtype != y.dtype or str(x.dtype) not in _KEPT_DTYPES or x.ndim < 2 or y.ndim < 2:
        return None
    m = y.shape[-1]
    same = x.shape[:-2] == y.shape[:-2] and x.shape[-2] == y.shape[-2] == m
    if not same or m <= 64 or x.size == 0:
        return None
    half = _solve(y, x, not upper, upper)
    return _solve(y, half, not upper, not upper), half


def backward_from_half(
    g: Array, z: Array, u: Array, upper: bool, batch: tuple[int, ...], half: Array | None
) -> tuple[Array, Array] | None:
    """``(A^-1 g, the factor's cotangent)`` from the forward's kept `half`; None without one
    or where the factor's batch `batch` is broadcast against `g`'s."""
    import jax

    jnp = jax.numpy
    if half is None or tuple(g.shape[:-2]) != batch or half.dtype != g.dtype:
        return None
    w = _solve(u, g, not upper, upper)
    db = _solve(u, w, not upper, not upper)
    first, second = ((w, half), (z, db)) if upper else ((db, z), (half, w))
    left = -jnp.concatenate(first, axis=-1)
    right = jnp.conj(jnp.swapaxes(jnp.concatenate(second, axis=-1), -1, -2))
    product = left @ right
    return db, jnp.triu(product) if upper else jnp.tril(product)
