"""`xpops.vjp`: the forward result of a public function and its pull-back (NumPy, CuPy)."""

from collections.abc import Callable
from typing import Any

from .._cumulative._logcumsumexp import logcumsumexp
from .._indexing import tril_indices, triu_indices
from ..distributions._kl import kl_divergence
from ..distributions._mvn import MultivariateNormal
from ..linalg._cholesky import cholesky_solve
from ..sparse._divide import divide
from ._rule import rule_of

__all__ = ["vjp"]

# Each differentiable public function and its rule, imported on first use.
_RULES: dict[Any, str] = {
    logcumsumexp: "xpops._cumulative._vjp:RULE",
    cholesky_solve: "xpops.linalg._vjp:RULE",
    divide: "xpops.sparse._vjp:RULE",
    kl_divergence: "xpops.distributions._vjp:KL_DIVERGENCE",
    MultivariateNormal.log_prob: "xpops.distributions._vjp:LOG_PROB",
    MultivariateNormal.prob: "xpops.distributions._vjp:PROB",
    MultivariateNormal.entropy: "xpops.distributions._vjp:ENTROPY",
    MultivariateNormal.rsample: "xpops.distributions._vjp:RSAMPLE",
    MultivariateNormal.cdf: "xpops.distributions._cdf_vjp:CDF",
    MultivariateNormal.logcdf: "xpops.distributions._cdf_vjp:LOGCDF",
}
_INTEGER_OUTPUTS = (tril_indices, triu_indices)


def _name(fun: Any) -> str:
    return getattr(fun, "__qualname__", None) or type(fun).__name__


def vjp(fun: Callable[..., Any], /, *primals: Any, **kwargs: Any) -> tuple[Any, Callable[..., Any]]:
    """Evaluate `fun` and return its result with the function that pulls cotangents back.

    Modelled on ``jax.vjp``: ``out, pullback = xpops.vjp(fun, *primals, **kwargs)``, then
    ``pullback(cotangent)`` returns a tuple with one cotangent per primal, of the primal's
    shape, dtype, namespace and device. The positional `primals` are differentiated; the
    keyword arguments (``axis``, ``exclusive``, ``upper``, ``shape`` or ``sample_shape``,
    ``rng``, ...) are passed to `fun` and not differentiated.

    Parameters
    ----------
    fun : callable
        `xpops.logcumsumexp`, `xpops.linalg.cholesky_solve`, `xpops.sparse.divide`,
        `xpops.distributions.kl_divergence`, or an unbound method of
        `xpops.distributions.MultivariateNormal`: ``log_prob``, ``prob``, ``entropy``,
        ``rsample``, ``cdf`` or ``logcdf``.
    *primals
        The positional arguments of `fun`, differentiated. A `MultivariateNormal` primal's
        cotangent is a dict keyed by the parameters it was built with: ``"loc"`` and one of
        ``"covariance_matrix"``, ``"precision_matrix"``, ``"scale_tril"``.
    **kwargs
        The keyword arguments of `fun`, not differentiated.

    Returns
    -------
    out : array
        ``fun(*primals, **kwargs)``.
    pullback : callable
        ``pullback(cotangent)``: `cotangent` has the shape of `out` (for `sparse.divide`, a
        sparse array of `out`'s shape, or a dense array); returns a tuple of cotangents, one
        per primal.

    Raises
    ------
    TypeError
        If `fun` is not one of the functions above (`tril_indices` and `triu_indices` have
        integer outputs, which have no gradient), or the number of primals is not the number
        of positional arguments `fun` differentiates.

    Examples
    --------
    >>> import numpy as np
    >>> import xpops
    >>> x = np.array([0.0, 1.0, 2.0])
    >>> out, pullback = xpops.vjp(xpops.logcumsumexp, x)
    >>> (dx,) = pullback(np.array([0.0, 0.0, 1.0]))
    >>> dx  # the softmax of x: d out[-1] / dx
    array([0.09003057, 0.24472847, 0.66524096])
    """
    if fun in _INTEGER_OUTPUTS:
        msg = f"{_name(fun)} has integer outputs, which have no gradient"
        raise TypeError(msg)
    try:
        spec = _RULES.get(fun)
    except TypeError:  # an unhashable object
        spec = None
    if spec is None:
        names = ", ".join(_name(f) for f in _RULES)
        msg = f"`fun` must be one of {names}; got {_name(fun)}"
        raise TypeError(msg)
    rule = rule_of(spec)
    if len(primals) != len(rule.primals):
        msg = (
            f"xpops.vjp of {rule.name} takes {len(rule.primals)} primal(s) "
            f"({', '.join(rule.primals)}), got {len(primals)}"
        )
        raise TypeError(msg)
    out, residuals = rule.forward(*primals, **kwargs)

    out_shape = tuple(out.shape)

    def pullback(cotangent: Any, /) -> tuple[Any, ...]:
        shape = getattr(cotangent, "shape", None)
        if shape is None:
            got = _name(type(cotangent))
            msg = f"`cotangent` must be an array of shape {out_shape}, got {got}"
            raise TypeError(msg)
        if tuple(shape) != out_shape:
            msg = f"`cotangent` must have the shape of the output {out_shape}, got {tuple(shape)}"
            raise ValueError(msg)
        return rule.backward(residuals, cotangent, **kwargs)

    return out, pullback
