"""Backward rules of MultivariateNormal's ``log_prob``, ``prob``, ``entropy`` and ``rsample``
and of `kl_divergence`.

Each is written once at array level (``*_ARRAYS``): its primals are the parameters as the
distribution was built from them, ``loc`` and the matrix (the parameter's name in the
``parameter`` keyword), then the method's values; the distribution itself may come as ``dist``
(it is built from the primals, with ``validate_args``, otherwise). PyTorch's autograd records
these: the class hands them a call it records. The rules of `xpops.vjp` (``LOG_PROB``, ...)
take the distribution as a primal and give its cotangent as a dict keyed by the parameters it
was built with, ``"loc"`` and one of ``"covariance_matrix"``, ``"precision_matrix"``,
``"scale_tril"``, each of the shape and dtype of the parameter as given (a number or a list
as an array of the distribution's dtype).

The gradients themselves (`_grads`) go through the lower factor ``L`` of the covariance.
"""

from typing import Any

from .. import _backend
from .._autodiff._rule import Rule
from .._lib import _compat
from .._lib._dtypes import is_dtype
from .._lib._typing import Array, Namespace
from ._common import is_array, result, shape_of
from ._common import sample_shape as checked_shape
from ._grads import (
    entropy_factor,
    kl_grads,
    log_prob_grads,
    matrix_cotangent,
    outer_sum,
    solve,
    sum_to,
)
from ._kl import kl_divergence
from ._mvn import MultivariateNormal
from ._torch import log_prob_on_tensors

__all__ = [
    "ENTROPY",
    "ENTROPY_ARRAYS",
    "KL_DIVERGENCE",
    "KL_DIVERGENCE_ARRAYS",
    "LOG_PROB",
    "LOG_PROB_ARRAYS",
    "PROB",
    "PROB_ARRAYS",
    "RSAMPLE",
    "RSAMPLE_ARRAYS",
]


# ---- shared -------------------------------------------------------------------------------


def _distribution(
    loc: Any, matrix: Any, parameter: str, validate_args: bool, dist: Any
) -> MultivariateNormal:
    """`dist`, or the distribution of `loc` and `matrix` (parameter `parameter`) when `dist` is
    None; Dask parameters raise NotImplementedError."""
    if dist is None:
        dist = MultivariateNormal(loc, validate_args=validate_args, **{parameter: matrix})
    if dist._dask:
        msg = (
            "the gradients of MultivariateNormal do not take Dask parameters, got Dask "
            f"`loc` or `{dist._given[0]}`"
        )
        raise NotImplementedError(msg)
    return dist


def _no_dask(value: Any) -> None:
    if _compat.is_dask_array(value):
        msg = "the gradients of MultivariateNormal do not take a Dask `value`"
        raise NotImplementedError(msg)


def _cotangent(xp: Namespace, cotangent: Any, dtype: Any) -> Array:
    """`cotangent` in `dtype`: ``TypeError`` unless a real floating array of `xp`'s library."""
    if not is_array(cotangent) or _backend.get_namespace(cotangent).__name__ != xp.__name__:
        msg = f"`cotangent` must be an array of the distribution's library, got {type(cotangent)}"
        raise TypeError(msg)
    if not is_dtype(xp, cotangent.dtype, "real floating"):
        msg = f"`cotangent` must have a real floating dtype, got {cotangent.dtype}"
        raise TypeError(msg)
    return xp.astype(cotangent, dtype) if cotangent.dtype != dtype else cotangent


def _as_primal(xp: Namespace, g: Array, primal: Array) -> Array:
    """`g` summed to the shape of `primal` and cast to its dtype (where floating); a 0-d
    NumPy array, never a NumPy scalar, for a primal of shape ``()``."""
    if g.shape == primal.shape and g.dtype == primal.dtype:  # nothing to sum or cast
        return result(g)
    g = xp.reshape(sum_to(xp, g, shape_of(primal)), shape_of(primal))
    if is_dtype(xp, primal.dtype, "real floating") and g.dtype != primal.dtype:
        g = xp.astype(g, primal.dtype)
    return result(g)


def _value_of(dist: MultivariateNormal, value: Any) -> tuple[Array, Array]:
    """(`value` as an array of the distribution's dtype, the primal `value` as an array)."""
    v = dist._value(value, "value", check_values=False)
    return v, (value if is_array(value) else v)


# ---- log_prob and prob ------------------------------------------------------------------


def _density_forward(prob: bool) -> Any:
    """The forward of log_prob (`prob` False) or prob: the result and the residuals of
    `_log_prob_backward` (prob's result too, the factor of its chain rule)."""

    def forward(
        loc: Any,
        matrix: Any,
        value: Any,
        *,
        parameter: str,
        validate_args: bool = True,
        dist: Any = None,
    ) -> tuple[Array, tuple[Any, ...]]:
        d = _distribution(loc, matrix, parameter, validate_args, dist)
        _no_dask(value)
        out = d.prob(value) if prob else d.log_prob(value)
        v, primal = _value_of(d, value)
        return out, (loc, matrix, primal, d._loc, d._tril, v, out if prob else None)

    return forward


_log_prob_forward = _density_forward(prob=False)
_prob_forward = _density_forward(prob=True)


def _log_prob_backward(
    residuals: tuple[Any, ...], cotangent: Any, *, parameter: str, **kwargs: Any
) -> tuple[Array, Array, Array]:
    """(loc, matrix, value) cotangents; `prob` is ``exp(log_prob)``: its cotangent times the
    density is the cotangent of the log density."""
    loc, matrix, value, mean, tril, v, density = residuals
    xp = _backend.get_namespace(tril)
    g = _cotangent(xp, cotangent, tril.dtype)
    if density is not None:
        g = g * density
    g_loc, g_l, g_value = log_prob_grads(xp, mean, tril, v, g)
    return (
        _as_primal(xp, g_loc, loc),
        _as_primal(xp, matrix_cotangent(xp, parameter, tril, g_l, lower=True), matrix),
        _as_primal(xp, g_value, value),
    )


# PyTorch's CUDA tensors of one distribution at contiguous points run the rules as they are:
# the method's forward hands them over once, the backward's kernels read them by address
# (`._torch.log_prob_on_tensors`)
LOG_PROB_ARRAYS = Rule(
    "MultivariateNormal.log_prob",
    ("loc", "matrix", "value"),
    _log_prob_forward,
    _log_prob_backward,
    log_prob_on_tensors,
)
PROB_ARRAYS = Rule(
    "MultivariateNormal.prob",
    ("loc", "matrix", "value"),
    _prob_forward,
    _log_prob_backward,
    log_prob_on_tensors,
)


# ---- entropy ----------------------------------------------------------------------------


def _entropy_forward(
    loc: Any, matrix: Any, *, parameter: str, validate_args: bool = True, dist: Any = None
) -> tuple[Array, tuple[Any, ...]]:
    d = _distribution(loc, matrix, parameter, validate_args, dist)
    return d.entropy(), (loc, matrix, d._tril)


def _entropy_backward(
    residuals: tuple[Any, ...], cotangent: Any, *, parameter: str, **kwargs: Any
) -> tuple[Array, Array]:
    """(loc, matrix) cotangents: the entropy does not depend on ``loc`` (a zero cotangent)."""
    loc, matrix, tril = residuals
    xp = _backend.get_namespace(tril)
    g = _cotangent(xp, cotangent, tril.dtype)
    g_matrix = matrix_cotangent(xp, parameter, tril, entropy_factor(xp, tril, g), lower=True)
    g_loc = xp.zeros(shape_of(loc), dtype=tril.dtype, device=_compat.device(tril))
    return _as_primal(xp, g_loc, loc), _as_primal(xp, g_matrix, matrix)


ENTROPY_ARRAYS = Rule(
    "MultivariateNormal.entropy", ("loc", "matrix"), _entropy_forward, _entropy_backward
)


# ---- rsample ----------------------------------------------------------------------------


def _rsample_forward(
    loc: Any,
    matrix: Any,
    *,
    parameter: str,
    validate_args: bool = True,
    dist: Any = None,
    shape: Any = (),
    rng: Any = None,
    sample_shape: Any = None,
) -> tuple[Array, tuple[Any, ...]]:
    """The draw of ``rsample(shape, rng=rng)`` (its engine, its normals) and its standard
    normals ``eps``: recovered as ``L^-1 (x - loc)`` where the fused CuPy kernels drew them
    on the device. `sample_shape` is another name of `shape` (``jax.vjp``'s and
    torch.distributions' word)."""
    if sample_shape is not None:
        if shape != ():
            msg = "give `shape` or `sample_shape`, not both"
            raise TypeError(msg)
        shape = sample_shape
    d = _distribution(loc, matrix, parameter, validate_args, dist)
    x, eps = d._draw(checked_shape(shape), rng)
    if eps is None:
        eps = solve(d._xp, d._tril, (x - d._loc)[..., None])[..., 0]
    return x, (loc, matrix, d._tril, eps)


def _rsample_backward(
    residuals: tuple[Any, ...], cotangent: Any, *, parameter: str, **kwargs: Any
) -> tuple[Array, Array]:
    """(loc, matrix) cotangents of ``x = loc + L eps``: ``g`` summed, and ``tril(sum g
    eps^T)``."""
    loc, matrix, tril, eps = residuals
    xp = _backend.get_namespace(tril)
    g = _cotangent(xp, cotangent, tril.dtype)
    g_matrix = matrix_cotangent(xp, parameter, tril, outer_sum(xp, g, eps, tril))
    return _as_primal(xp, g, loc), _as_primal(xp, g_matrix, matrix)


RSAMPLE_ARRAYS = Rule(
    "MultivariateNormal.rsample", ("loc", "matrix"), _rsample_forward, _rsample_backward
)


# ---- kl_divergence ----------------------------------------------------------------------


def _kl_forward(
    loc_p: Any,
    matrix_p: Any,
    loc_q: Any,
    matrix_q: Any,
    *,
    parameters: tuple[str, str],
    validate_args: bool = True,
    dists: Any = None,
) -> tuple[Array, tuple[Any, ...]]:
    dists = (None, None) if dists is None else dists
    p = _distribution(loc_p, matrix_p, parameters[0], validate_args, dists[0])
    q = _distribution(loc_q, matrix_q, parameters[1], validate_args, dists[1])
    out = kl_divergence(p, q)
    return out, (loc_p, matrix_p, loc_q, matrix_q, p._loc, p._tril, q._loc, q._tril)


def _kl_backward(
    residuals: tuple[Any, ...], cotangent: Any, *, parameters: tuple[str, str], **kwargs: Any
) -> tuple[Array, Array, Array, Array]:
    """(loc_p, matrix_p, loc_q, matrix_q) cotangents, computed in the result's dtype."""
    loc_p, matrix_p, loc_q, matrix_q, mean_p, tril_p, mean_q, tril_q = residuals
    xp = _backend.get_namespace(tril_p)
    dtype = xp.result_type(tril_p.dtype, tril_q.dtype)
    g = _cotangent(xp, cotangent, dtype)
    mean_p, tril_p, mean_q, tril_q = (
        xp.astype(a, dtype) if a.dtype != dtype else a for a in (mean_p, tril_p, mean_q, tril_q)
    )
    g_loc_p, g_lp, g_loc_q, g_lq = kl_grads(xp, mean_p, tril_p, mean_q, tril_q, g)
    return (
        _as_primal(xp, g_loc_p, loc_p),
        _as_primal(xp, matrix_cotangent(xp, parameters[0], tril_p, g_lp), matrix_p),
        _as_primal(xp, g_loc_q, loc_q),
        _as_primal(xp, matrix_cotangent(xp, parameters[1], tril_q, g_lq), matrix_q),
    )


KL_DIVERGENCE_ARRAYS = Rule(
    "kl_divergence", ("loc_p", "matrix_p", "loc_q", "matrix_q"), _kl_forward, _kl_backward
)


# ---- the rules of xpops.vjp: the distribution as a primal ---------------------------------


def _check(dist: Any, what: str) -> MultivariateNormal:
    if not isinstance(dist, MultivariateNormal):
        msg = f"`{what}` must be a MultivariateNormal, got {type(dist).__name__}"
        raise TypeError(msg)
    return dist


def _cotangent_dict(parameter: str, g_loc: Array, g_matrix: Array) -> dict[str, Array]:
    return {"loc": g_loc, parameter: g_matrix}


def _of_distribution(rule: Rule, primals: tuple[str, ...]) -> Rule:
    """`rule`'s form with the distribution as its first primal (``self``, then `rule`'s
    values): the array rule at the parameters as given, the distribution's cotangent a dict."""

    def forward(dist: Any, *values: Any, **kwargs: Any) -> tuple[Array, tuple[Any, ...]]:
        dist = _check(dist, "self")
        parameter = dist._given[0]
        out, residuals = rule.forward(
            *dist._args, *values, parameter=parameter, dist=dist, **kwargs
        )
        return out, (parameter, residuals)

    def backward(residuals: tuple[Any, ...], cotangent: Any, **kwargs: Any) -> tuple[Any, ...]:
        parameter, inner = residuals
        g_loc, g_matrix, *g_values = rule.backward(inner, cotangent, parameter=parameter)
        return (_cotangent_dict(parameter, g_loc, g_matrix), *g_values)

    return Rule(rule.name, primals, forward, backward)


def _kl_of(p: Any, q: Any) -> tuple[Array, tuple[Any, ...]]:
    p, q = _check(p, "p"), _check(q, "q")
    parameters = (p._given[0], q._given[0])
    out, residuals = _kl_forward(*p._args, *q._args, parameters=parameters, dists=(p, q))
    return out, (parameters, residuals)


def _kl_pullback(
    residuals: tuple[Any, ...], cotangent: Any
) -> tuple[dict[str, Array], dict[str, Array]]:
    parameters, inner = residuals
    g_loc_p, g_p, g_loc_q, g_q = _kl_backward(inner, cotangent, parameters=parameters)
    return (
        _cotangent_dict(parameters[0], g_loc_p, g_p),
        _cotangent_dict(parameters[1], g_loc_q, g_q),
    )


LOG_PROB = _of_distribution(LOG_PROB_ARRAYS, ("self", "value"))
PROB = _of_distribution(PROB_ARRAYS, ("self", "value"))
ENTROPY = _of_distribution(ENTROPY_ARRAYS, ("self",))
RSAMPLE = _of_distribution(RSAMPLE_ARRAYS, ("self",))
KL_DIVERGENCE = Rule("kl_divergence", ("p", "q"), _kl_of, _kl_pullback)
