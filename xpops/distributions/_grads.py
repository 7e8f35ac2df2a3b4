"""The gradients of the multivariate normal's log density, entropy, draws and KL divergence with
respect to the mean and the lower factor ``L`` (``L L^T`` the covariance), and the gradient of
the matrix the distribution was built from, ``gL`` taken back through the factorization.

Array functions of any array-API namespace (NumPy, CuPy, PyTorch, array-api-strict), on the
device of their inputs; the rules of `_vjp` call them. Imports no engine.

Every quantity goes through ``L``, one path for the three parametrizations:

- ``scale_tril``: the factor is ``tril(scale_tril)``, so its gradient is ``tril(gL)``;
- ``covariance_matrix`` ``C = L L^T``: the Cholesky backward ``gC = L^-T Φ L^-1`` with ``Φ``
  the symmetric part of ``tril(L^T gL)`` with its diagonal halved (PyTorch's convention: a
  symmetric gradient, ``gC[i, j]`` half the derivative along ``E_ij + E_ji`` for ``i != j``);
- ``precision_matrix`` ``P = C^-1`` (its factor is ``L = chol(P^-1)`` whichever way it is
  computed): ``gP = -C gC C``, which is ``-L Φ L^T``, two products and no solve.
"""

import math

from .._lib import _compat
from .._lib._dispatch import Engines, dispatch
from .._lib._typing import Array, Namespace
from ..linalg._triangular import solve_triangular
from ._common import shape_of

__all__ = [
    "LOG_PROB_GRADS",
    "entropy_factor",
    "generic_log_prob_grads",
    "kl_grads",
    "log_prob_grads",
    "matrix_cotangent",
    "outer_sum",
    "solve",
    "sum_to",
]


def sum_to(xp: Namespace, a: Array, shape: tuple[int, ...]) -> Array:
    """`a` summed over the dimensions that broadcasting `shape` to ``a.shape`` added or
    stretched: the cotangent of a broadcast operand of `shape`."""
    extra = a.ndim - len(shape)
    if extra:
        a = xp.sum(a, axis=tuple(range(extra)))
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and a.shape[i] != 1)
    if stretched:
        a = xp.sum(a, axis=stretched, keepdims=True)
    return a


def solve(xp: Namespace, tril: Array, b: Array, *, transpose: bool = False) -> Array:
    """``L^-1 b`` (``L^-T b`` with `transpose`) for the lower factor `tril` (*, D, D) and `b`
    (*, D, K), batches broadcasting; zero-size operands give zeros of the result's shape."""
    shape = (*_batch(tril, b), int(tril.shape[-1]), int(b.shape[-1]))
    if math.prod(shape) == 0 or tril.shape[-1] == 0:
        return xp.zeros(shape, dtype=b.dtype, device=_compat.device(b))
    return solve_triangular(tril, b, lower=True, conjugate_transpose=transpose, xp=xp)


def _batch(a: Array, b: Array) -> tuple[int, ...]:
    sa, sb = shape_of(a)[:-2], shape_of(b)[:-2]
    n = max(len(sa), len(sb))
    sa, sb = (1,) * (n - len(sa)) + sa, (1,) * (n - len(sb)) + sb
    return tuple(x if y == 1 else y for x, y in zip(sa, sb, strict=True))


def _eye(xp: Namespace, tril: Array) -> Array:
    return xp.eye(int(tril.shape[-1]), dtype=tril.dtype, device=_compat.device(tril))


def _columns(xp: Namespace, a: Array, k: int) -> Array:
    """`a` of shape ``(*lead, *T, D)`` (`T` its last `k` batch dimensions) as ``(*T, D, P)``,
    the ``P = prod(lead)`` points as columns: one solve or product a batch of `T`."""
    shape = shape_of(a)
    lead, rest = shape[: len(shape) - 1 - k], shape[len(shape) - 1 - k :]
    a = xp.reshape(a, (math.prod(lead), *rest))
    return xp.permute_dims(a, (*range(1, k + 2), 0))


def _points(xp: Namespace, a: Array, shape: tuple[int, ...]) -> Array:
    """The inverse of `_columns`: ``(*T, D, P)`` back to `shape` ``(*lead, *T, D)``."""
    k = a.ndim - 2
    a = xp.permute_dims(a, (k + 1, *range(k + 1)))
    return xp.reshape(a, shape)


def outer_sum(xp: Namespace, a: Array, b: Array, tril: Array) -> Array:
    """``sum a b^T`` over the points of `a` and `b` (one shape ``(*S, D)``), summed to the batch
    shape of the factor `tril`: one matrix product a batch."""
    k = tril.ndim - 2
    out = xp.matmul(_columns(xp, a, k), xp.matrix_transpose(_columns(xp, b, k)))
    return sum_to(xp, out, shape_of(tril))


def _diagonal(xp: Namespace, v: Array, tril: Array) -> Array:
    """The matrices of diagonal `v` (*, D), in the dtype of `tril`: zeros off the diagonal
    whatever `v` holds (``eye * v`` would put NaN there for an infinite `v`)."""
    d = int(tril.shape[-1])
    v = xp.astype(v, tril.dtype) if v.dtype != tril.dtype else v
    shape = (*shape_of(v)[:-1], d, d)
    on = xp.eye(d, dtype=xp.bool, device=_compat.device(tril))
    return xp.where(
        on,
        xp.broadcast_to(v[..., None, :], shape),
        xp.zeros(shape, dtype=v.dtype, device=_compat.device(tril)),
    )


def log_prob_grads(
    xp: Namespace, loc: Array, tril: Array, value: Array, g: Array
) -> tuple[Array, Array, Array]:
    """``(g_loc, gL, g_value)`` of ``sum g * log_prob(value)``, of the shapes of `loc` (the
    mean broadcast to the batch), `tril` (the factor, its own batch) and `value`; ``gL`` is
    zero above the diagonal.

    With ``u = L^-1 (value - loc)`` and ``w = L^-T u``: ``d/dvalue = -w``, ``d/dloc = w``,
    ``d/dL = tril(w u^T) - diag(1 / L_ii)``, each times `g` and summed over broadcast batches.
    CuPy arrays of one distribution take fused kernels (`._cupy_grad.log_prob_grads`).
    """
    return dispatch(xp, LOG_PROB_GRADS, loc, tril, value, g, xp=xp)


def generic_log_prob_grads(
    loc: Array, tril: Array, value: Array, g: Array, *, xp: Namespace
) -> tuple[Array, Array, Array]:
    """`log_prob_grads` in the namespace `xp`: two triangular solves of the points as
    columns, one product for the factor's sum."""
    diff = value - loc
    shape = shape_of(diff)
    k = tril.ndim - 2
    # the points of each distribution of the factor's batch as the columns of one solve
    u = solve(xp, tril, _columns(xp, diff, k))
    w = solve(xp, tril, u, transpose=True)
    g_cols = _columns(xp, g[..., None], k)  # (*T, 1, P)
    gw = w * g_cols
    g_l = xp.tril(xp.matmul(gw, xp.matrix_transpose(u)))
    g_l = g_l - _diagonal(xp, xp.sum(g_cols, axis=-1) / xp.linalg.diagonal(tril), tril)
    g_diff = _points(xp, gw, shape)
    return (
        sum_to(xp, g_diff, shape_of(loc)),
        sum_to(xp, g_l, shape_of(tril)),
        sum_to(xp, -g_diff, shape_of(value)),
    )


# CuPy: the fused kernels for one distribution, NumPy: matrix products with the factor's
# inverse for one distribution (each falls back to the generic code itself); PyTorch's CUDA
# tensors: those kernels on the tensors' memory, or handed over to the CuPy engine
# (`._torch.log_prob_grads`), PyTorch's CPU tensors: the generic code on them
LOG_PROB_GRADS = Engines(
    __package__,
    numpy="._numpy:log_prob_grads",
    cupy="._cupy_grad:log_prob_grads",
    dask=generic_log_prob_grads,
    generic=generic_log_prob_grads,
    torch="._torch:log_prob_grads",
)


def entropy_factor(xp: Namespace, tril: Array, g: Array) -> Array:
    """``gL`` of ``sum g * entropy``: ``diag(1 / L_ii)`` times `g`, summed to the factor's
    batch."""
    g = sum_to(xp, g, shape_of(tril)[:-2])
    return _diagonal(xp, g[..., None] / xp.linalg.diagonal(tril), tril)


def kl_grads(
    xp: Namespace, loc_p: Array, tril_p: Array, loc_q: Array, tril_q: Array, g: Array
) -> tuple[Array, Array, Array, Array]:
    """``(g_loc_p, gLp, g_loc_q, gLq)`` of ``sum g * KL(p || q)``, each of its operand's shape.

    With ``M = Lq^-1 Lp``, ``A = Lq^-T M``, ``z = Lq^-1 (loc_q - loc_p)`` and ``w = Lq^-T z``:
    ``d/dloc_q = w = -d/dloc_p``, ``d/dLp = tril(A) - diag(1 / Lp_ii)``, ``d/dLq =
    -tril(A M^T + w z^T) + diag(1 / Lq_ii)``.
    """
    m = solve(xp, tril_q, tril_p)
    a = solve(xp, tril_q, m, transpose=True)
    diff = loc_q - loc_p
    z = solve(xp, tril_q, diff[..., None])
    w = solve(xp, tril_q, z, transpose=True)
    gm = g[..., None, None]
    g_w = (w * gm)[..., 0]
    diag_p = _diagonal(xp, 1 / xp.linalg.diagonal(tril_p), tril_p)
    diag_q = _diagonal(xp, 1 / xp.linalg.diagonal(tril_q), tril_q)
    g_lp = gm * (xp.tril(a) - diag_p)
    g_lq = gm * (diag_q - xp.tril(xp.matmul(a, xp.matrix_transpose(m))))
    g_lq = g_lq - xp.tril(xp.matmul(g_w[..., None], xp.matrix_transpose(z)))
    return (
        sum_to(xp, -g_w, shape_of(loc_p)),
        sum_to(xp, g_lp, shape_of(tril_p)),
        sum_to(xp, g_w, shape_of(loc_q)),
        sum_to(xp, g_lq, shape_of(tril_q)),
    )


def matrix_cotangent(
    xp: Namespace, name: str, tril: Array, g_l: Array, *, lower: bool = False
) -> Array:
    """The cotangent of parameter `name` (the matrix the distribution was built from, of the
    shape of its factor `tril`) from ``gL``, the cotangent of the factor; `lower`: `g_l` is
    zero above the diagonal already."""
    if not lower:
        g_l = xp.tril(g_l)
    if name == "scale_tril":
        return g_l
    s = xp.tril(xp.matmul(xp.matrix_transpose(tril), g_l))  # tril(L^T gL)
    phi = 0.5 * (s + xp.matrix_transpose(xp.tril(s, k=-1)))  # Φ: symmetric, diagonal halved
    if name == "covariance_matrix":  # gC = L^-T Φ L^-1
        half = solve(xp, tril, phi, transpose=True)
        g = xp.matrix_transpose(solve(xp, tril, xp.matrix_transpose(half), transpose=True))
    else:  # precision: gP = -C gC C = -L Φ L^T
        g = -xp.matmul(xp.matmul(tril, phi), xp.matrix_transpose(tril))
    return 0.5 * (g + xp.matrix_transpose(g))
