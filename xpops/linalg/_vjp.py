r"""The backward rule of `cholesky_solve`.

With :math:`Z = A^{-1} B` the result, :math:`G` the cotangent of :math:`Z`, `x` :math:`= B`
and `y` :math:`= u`, :math:`A = u u^H` (lower) or :math:`A = u^H u` (upper):

.. math::

    \bar B = A^{-1} G, \qquad C = \bar B Z^H + Z \bar B^H,

    \bar u = -\operatorname{tril}(C u) \text{ (lower)}, \qquad
    \bar u = -\operatorname{triu}(u C) \text{ (upper)},

where :math:`u` is the used triangle alone: the other triangle is never read by the solve,
so its cotangent is exactly 0 (and junk there, NaN included, does not reach the gradient).
:math:`\bar B` is itself a `cholesky_solve`, the fast path of every engine. On CuPy, batches
of small systems with a factor of their own compute both cotangents in one kernel that reads
the factor once (`._cupy_grad.backward`; on PyTorch's CUDA tensors by their addresses).
Systems of more than 64 unknowns with a factor of their own (real ones on CuPy) take
:math:`[Z\; \bar B]^H u` as :math:`[Y\; W]^H`, the first halves of the forward's and of
:math:`\bar B`'s triangular solves, the forward keeping :math:`Y` (`._cupy_blas` on CuPy,
`._numpy_grad` on NumPy and PyTorch's CPU tensors).

Complex inputs follow PyTorch's convention: for a real loss :math:`L`, the cotangent of
:math:`w` is :math:`\partial L / \partial \operatorname{Re} w + i\,\partial L /
\partial \operatorname{Im} w`, so that :math:`\delta L = \operatorname{Re}
\sum \overline{\bar w}\,\delta w`. The formulas above hold in that convention with
:math:`A` Hermitian; a real input's cotangent is the real part of its complex one.

`torch.cholesky_solve`'s own backward gives the same :math:`\bar B`, and for the factor
:math:`-C y` (lower) or :math:`-y C` (upper) with the whole of `y`, unused triangle
included and not restricted: on a factor whose unused triangle is zero its used triangle is
:math:`\bar u`, its other triangle the derivative with respect to entries that the solve does
not read (and junk in that triangle changes its result; NaN there makes it NaN).

Batch dimensions broadcast in the forward are summed back to each input's shape. For `y`
the sum over the batch dimensions in which it was broadcast is folded into the product
:math:`\bar B Z^H` (those dimensions join K), so that no (batch, M, M) intermediate is made.
With few right-hand sides (:math:`3K < M`, K after that folding) the products are taken as
:math:`C u = [\bar B\; Z]\,([Z\; \bar B]^H u)` (:math:`u C` likewise for an upper
factor): :math:`4 K M^2` multiply-adds instead of the :math:`M^3 + K M^2` of forming :math:`C`
first (M = 1024, K = 64: a quarter of them).

Each cotangent has its input's dtype: the rule computes in the result's dtype (float32 for
float16 and bfloat16) and casts back, taking the real part for a real input.
"""

from typing import Any

from .. import _backend
from .._autodiff._rule import Rule
from .._lib import _compat
from .._lib._dispatch import OWN_ENGINES, Engines, dispatch
from .._lib._dtypes import is_dtype, is_low_precision
from .._lib._names import type_name
from .._lib._typing import Array, DType, Namespace
from .._lib._validation import as_bool
from ._cholesky import cholesky_solve
from ._grads import factor_cotangent
from ._torch import rule_by_address

__all__ = ["RULE"]

_FLOATING = ("real floating", "complex floating")


def forward(
    x: Any, y: Any, /, upper: bool = False
) -> tuple[Array, tuple[Array, Array, Array, Array | None]]:
    """``cholesky_solve(x, y, upper)`` and the residuals ``(x, y, out, half)``: the arrays, and
    on CuPy for large real systems the first of the two solves' results (else None)."""
    for name, arg in (("x", x), ("y", y)):
        if arg is None:  # array_args passes None through, for optional parameters
            msg = f"`{name}` must be an array, got None"
            raise TypeError(msg)
    xp, (a, b) = _backend.array_args(x, y, names=("x", "y"))
    for name, arg in (("x", a), ("y", b)):
        if not is_dtype(xp, arg.dtype, _FLOATING):
            msg = (
                f"`{name}` has dtype {arg.dtype}, which has no gradient: the primals of "
                "cholesky_solve's gradient must be real or complex floating arrays"
            )
            raise TypeError(msg)
    kept = dispatch(xp, _KEPT, a, b, as_bool(upper, "upper"))
    out, half = (cholesky_solve(a, b, upper), None) if kept is None else kept
    return out, (a, b, out, half)


def backward(
    residuals: tuple[Array, Array, Array, Array | None], cotangent: Any, /, upper: bool = False
) -> tuple[Array, Array]:
    """The cotangents of `x` and `y` (see the module's docstring)."""
    x, y, out, half = residuals
    upper = as_bool(upper, "upper")
    xp = _compat.array_namespace(out)
    _check_cotangent(xp, cotangent, out)
    compute = xp.float32 if is_low_precision(xp, out.dtype) else out.dtype
    g = _as(xp, cotangent, compute)
    z = _as(xp, out, compute)
    u = _as(xp, y, compute)
    x_shape = tuple(x.shape)
    if len(x_shape) == 1:  # a vector (M,) against one factor: one column
        x_shape = (x_shape[0], 1)
        g = xp.reshape(g, x_shape)
        z = xp.reshape(z, x_shape)

    both = dispatch(xp, _FUSED, g, z, u, upper, tuple(y.shape[:-2]), half)
    if both is None:
        dx = cholesky_solve(g, u, upper)  # (*batch, M, K), the result's batch
        dy = dispatch(xp, _FACTOR, dx, z, u, upper, tuple(y.shape[:-2]))
    else:
        dx, dy = both

    dx = xp.reshape(_sum_to(xp, dx, x_shape), tuple(x.shape))
    return _cast_back(xp, dx, x.dtype), _cast_back(xp, dy, y.dtype)


# The factor's cotangent: a fused kernel on CuPy (and PyTorch's CUDA tensors) for batches of
# small real systems, the generic operations of `._grads` elsewhere (one by one for JAX with
# K = 1).
_FACTOR = Engines(
    __package__,
    numpy=factor_cotangent,
    cupy="._cupy_grad:factor_cotangent",
    dask=factor_cotangent,
    generic=factor_cotangent,
    torch=OWN_ENGINES,
    jax="._grads:factor_cotangent_jax",
)


def _none(*args: Any) -> None:
    return None


# The forward, keeping the first of its two solves, for systems of more than 64 unknowns with a
# factor of their own: on NumPy (`._numpy_grad.forward`, PyTorch's CPU tensors on their
# memory) and on CuPy for real ones (`._cupy_grad.forward`); None elsewhere (the public
# function runs).
_KEPT = Engines(
    __package__,
    numpy="._numpy_grad:forward",
    cupy="._cupy_grad:forward",
    dask=_none,
    generic=_none,
    torch="._torch:forward_keeping_half",
    jax=_none,
)

# Both cotangents at once: on CuPy (`._cupy_grad.backward`) one kernel that reads the factor
# once for batches of small systems, cuBLAS calls for large real systems; on NumPy from the
# forward's kept solve (`._numpy_grad.backward`); on PyTorch's tensors the same engines, the
# kernel by the tensors' addresses for CUDA ones (`._torch.backward_from_half`); None
# elsewhere, and the two steps above run.
_FUSED = Engines(
    __package__,
    numpy="._numpy_grad:backward",
    cupy="._cupy_grad:backward",
    dask=_none,
    generic=_none,
    torch="._torch:backward_from_half",
    jax=_none,
)

# PyTorch's CUDA tensors of batches of small systems run the rule as they are: both halves
# reach the lanes kernels by the tensors' addresses (`._torch.rule_by_address`)
RULE = Rule("linalg.cholesky_solve", ("x", "y"), forward, backward, rule_by_address)


def _check_cotangent(xp: Namespace, cotangent: Any, out: Array) -> None:
    """The cotangent must be an array of `out`'s library and device, of a floating dtype
    (complex only for a complex result)."""
    if not _of_library(xp, cotangent):
        msg = (
            f"`cotangent` must be an array of the output's library ({type_name(out)}), "
            f"got {type_name(cotangent)}"
        )
        raise TypeError(msg)
    kinds = _FLOATING if is_dtype(xp, out.dtype, "complex floating") else "real floating"
    if not is_dtype(xp, cotangent.dtype, kinds):
        expected = "real or complex floating" if kinds == _FLOATING else "real floating"
        msg = (
            f"`cotangent` must have a {expected} dtype for an output of dtype {out.dtype}, "
            f"got {cotangent.dtype}"
        )
        raise TypeError(msg)
    if not _compat.same_device(cotangent, out):  # a JAX tracer has no device to compare
        msg = (
            f"`cotangent` must be on the output's device {_compat.device(out)}, "
            f"got {_compat.device(cotangent)}"
        )
        raise ValueError(msg)


def _of_library(xp: Namespace, a: Any) -> bool:
    return _compat.is_array_api_obj(a) and _compat.array_namespace(a) is xp


def _as(xp: Namespace, a: Array, dtype: DType) -> Array:
    return a if a.dtype == dtype else xp.astype(a, dtype)


def _sum_to(xp: Namespace, a: Array, shape: tuple[int, ...]) -> Array:
    """`a` (*full, M, K) summed over the batch dimensions that `shape` (*batch, M, K)
    broadcasts to `full`; shape `shape`."""
    lead = a.ndim - len(shape)
    axes = [*range(lead)]
    axes += [lead + i for i, s in enumerate(shape[:-2]) if s == 1 and a.shape[lead + i] != 1]
    if not axes:
        return a
    return xp.reshape(xp.sum(a, axis=tuple(axes)), shape)


def _cast_back(xp: Namespace, a: Array, dtype: DType) -> Array:
    """`a` in the input's `dtype`: the real part for a real input of a complex computation."""
    if is_dtype(xp, a.dtype, "complex floating") and not is_dtype(xp, dtype, "complex floating"):
        a = xp.real(a)
    return _as(xp, a, dtype)
