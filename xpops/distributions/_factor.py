"""The parameters of a multivariate normal: their checks and the lower factor L of the
covariance ``L L^T``, on arrays of any array-API library (the constructor runs them on
in-memory parameters, the Dask engine on each chunk of Dask ones). Imports no engine."""

import math
from typing import Any

from .._lib import _compat
from .._lib._typing import Array, Namespace
from ..linalg._triangular import solve_triangular
from ._common import all_true, bad_values, shape_of

__all__ = ["check_factor", "factor", "matrix_checks", "scale_tril_messages"]


def scale_tril_messages(shape: tuple[int, ...]) -> list[str]:
    """The messages of a ``scale_tril`` of `shape` failing its checks, in their order:
    finite, zero above the diagonal, positive diagonal."""
    return [
        bad_values("scale_tril", shape, allow_inf=False),
        f"`scale_tril` must be lower triangular (zero above the diagonal), got shape {shape} "
        "with nonzero entries above the diagonal",
        f"`scale_tril` must have a positive diagonal, got shape {shape} with a diagonal entry <= 0",
    ]


def matrix_checks(xp: Namespace, name: str, m: Array, dtype: Any) -> list[tuple[Array, str]]:
    """The conditions (device arrays) that `m` must meet as parameter `name`, each with the
    message of its failure, in the order they are checked: finite, then lower triangular with a
    positive diagonal (``scale_tril``) or symmetric (a covariance or precision)."""
    shape = shape_of(m)
    if name == "scale_tril":
        conditions = [xp.isfinite(m), xp.triu(m, k=1) == 0, xp.linalg.diagonal(m) > 0]
        return list(zip(conditions, scale_tril_messages(shape), strict=True))
    checks = [(xp.isfinite(m), bad_values(name, shape, allow_inf=False))]
    if math.prod(shape) == 0:
        return checks
    eps = float(xp.finfo(dtype).eps)
    # on the finite entries only: the finite check reports the others (inf - inf would warn)
    mf = xp.where(xp.isfinite(m), m, xp.zeros_like(m))
    scale = xp.max(xp.abs(mf), axis=(-2, -1), keepdims=True)
    symmetric = xp.abs(mf - xp.matrix_transpose(mf)) <= 64 * eps * scale
    checks.append((symmetric, f"`{name}` must be symmetric, got shape {shape} with m != m.T"))
    return checks


def check_factor(xp: Namespace, name: str, m: Array, tril: Array) -> None:
    """``ValueError`` unless the factor `tril` of `m` has a finite, positive diagonal (`m`
    positive definite)."""
    diag = xp.linalg.diagonal(tril)
    if not all_true(xp, xp.isfinite(diag) & (diag > 0)):
        msg = f"`{name}` must be positive definite, got shape {shape_of(m)} that is not"
        raise ValueError(msg)


def _cholesky(xp: Namespace, name: str, m: Array, validate: bool) -> Array:
    if m.shape[-1] == 0:
        return m
    try:
        return xp.linalg.cholesky(m)
    except Exception as exc:  # numpy/torch raise LinAlgError on a non-PD matrix
        if "LinAlgError" not in type(exc).__name__:
            raise
        if validate:
            msg = f"`{name}` must be positive definite, got shape {shape_of(m)} that is not"
        else:  # the checks were skipped; the factorization itself could not go on
            msg = (
                f"the Cholesky factorization of `{name}` (shape {shape_of(m)}) failed: the "
                f"matrix is not positive definite ({exc})"
            )
        raise ValueError(msg) from None


def factor(xp: Namespace, name: str, m: Array, dtype: Any, validate: bool) -> Array:
    """The lower factor L (``L L^T`` the covariance) of parameter `name`, with `m`'s batch
    shape: the lower triangle of a ``scale_tril``, the Cholesky factor of a covariance, and
    of a precision P the inverse transpose of its reversed Cholesky factor."""
    if name == "scale_tril":
        return xp.tril(m)
    if name == "covariance_matrix":
        return _cholesky(xp, name, m, validate)
    # precision P = U U^T with U = flip(chol(flip(P))) upper triangular; then
    # covariance = U^-T U^-1, whose lower factor is U^-T (lower triangular)
    d = m.shape[-1]
    if d == 0:
        return m
    flipped = xp.flip(xp.flip(m, axis=-1), axis=-2)
    lf = _cholesky(xp, name, flipped, validate)
    u = xp.flip(xp.flip(lf, axis=-1), axis=-2)  # upper triangular, P = u u^T
    eye = xp.broadcast_to(xp.eye(d, dtype=dtype, device=_compat.device(m)), u.shape)
    # L = u^-T: solve u^T L = I
    return xp.tril(solve_triangular(u, eye, lower=False, conjugate_transpose=True, xp=xp))
