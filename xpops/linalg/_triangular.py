"""Internal triangular solve, dispatched by namespace; shared by cholesky_solve's users.

It takes operands that are already validated: `a` of shape (*, M, M) and `b` of shape
(*, M, K), batch dimensions broadcasting, both of one compute dtype (float32, float64,
complex64 or complex128) of the namespace `xp`, an array-API namespace as
``xpops.get_namespace`` returns it. Callers (``xpops.linalg``, distributions) do the checks,
the casts and the 1-D handling.
"""

from .._lib._dispatch import Engines, dispatch
from .._lib._typing import Array, Namespace

__all__ = ["solve_triangular"]

# Each engine takes (b, a, lower, conj_trans, *, xp). NumPy and JAX have their own engines;
# every other namespace, CuPy and Dask included, takes the generic one.
_ENGINES = Engines(
    __package__,
    numpy="._numpy:solve_triangular",
    cupy="._agnostic:solve_triangular",
    dask="._agnostic:solve_triangular",
    generic="._agnostic:solve_triangular",
    jax="._jax:solve_triangular",
)


def solve_triangular(
    a: Array, b: Array, *, lower: bool, conjugate_transpose: bool = False, xp: Namespace
) -> Array:
    """Solve ``op(a) X = b`` with ``op(a) = a`` or ``a^H`` (`conjugate_transpose`).

    Only the triangle of `a` named by `lower` is read. Returns the C-contiguous (where the
    namespace has the notion) ``(broadcast batch, M, K)`` solution. A zero on the diagonal
    gives inf or NaN in the systems concerned, never an error.

    Engines: NumPy (vectorized substitution for small systems, BLAS ``trsm`` per matrix for
    large ones, see ``xpops.linalg._numpy``); PyTorch (``torch.linalg.solve_triangular``);
    JAX (``jax.lax.linalg.triangular_solve``, see ``xpops.linalg._jax``); any other
    namespace, CuPy included, ``xp.linalg.solve`` on the masked triangle.
    """
    return dispatch(xp, _ENGINES, b, a, lower, conjugate_transpose, xp=xp)
