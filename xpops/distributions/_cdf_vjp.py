"""Backward rules of `MultivariateNormal.cdf` and `MultivariateNormal.logcdf`.

The gradients with respect to the value (the upper limits), the lower limits and ``loc`` come
from an exact identity. For ``X ~ N(mu, Sigma)`` and the box ``a < X <= b``::

    dP/db_i =  N(b_i; mu_i, Sigma_ii) * P(a_{-i} < X_{-i} <= b_{-i} | X_i = b_i)
    dP/da_i = -N(a_i; mu_i, Sigma_ii) * P(a_{-i} < X_{-i} <= b_{-i} | X_i = a_i)
    dP/dmu  = -(dP/db + dP/da)

(a term is 0 where its limit is infinite: ``b_i = +inf``, ``a_i = -inf``). ``X_{-i}`` given
``X_i = t`` is normal with mean ``mu_{-i} + Sigma_{-i,i} (t - mu_i) / Sigma_ii`` and covariance
``Sigma_{-i,-i} - Sigma_{-i,i} Sigma_{i,-i} / Sigma_ii``. The ``D`` conditionals of every
problem (and of both limits when there is a lower limit) form one batched
`MultivariateNormal` of ``D - 1`` dimensions, whose own `cdf` (or `logcdf`) computes them with
the caller's options (``abseps``, ``releps``, ``maxpts``, ``rng``): the NumPy, CuPy and Dask
engines serve the gradient as they serve the value, with the same error control. D = 1 has no
conditional (its factor is 1); D = 2 takes the exact normal cdf and D = 3 the deterministic
bivariate algorithm, so that quasi-Monte-Carlo noise enters from D = 4. For `logcdf` the
gradient is ``exp(log N + logcdf_{D-1} - logcdf_D)``, computed in logs so that far tails, where
``P`` underflows, keep their gradients. An empty box (``a_i >= b_i`` for some ``i``) has the
gradient 0, as the probability is constant (0) around it.

The gradient with respect to the matrix (covariance, precision or scale_tril) is not
implemented: asking for it raises ``NotImplementedError`` naming it. `CDF` and `LOGCDF` (the
rules of `xpops.vjp`, primals ``(self, value)``) return the distribution's cotangent as a
`CdfCotangent`, a mapping whose ``"loc"`` is the gradient and whose matrix entry raises when it
is read. `CDF_ARRAYS` and `LOGCDF_ARRAYS` (the PyTorch binding's rules, primals ``(loc,
matrix, value)`` and optionally ``lower_limit`` fourth) raise in the backward pass when the
matrix requires a gradient. ``return_error=True`` is refused by every rule: the result would
be a pair, and the error estimate has no gradient.
"""

import math
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from .. import _backend
from .._autodiff import _jax
from .._autodiff._rule import Rule
from .._lib import _compat
from .._lib._dtypes import is_dtype
from .._lib._typing import Array, Namespace
from ._common import is_array, result, shape_of
from ._mvn import MultivariateNormal

__all__ = ["CDF", "CDF_ARRAYS", "LOGCDF", "LOGCDF_ARRAYS", "CdfCotangent"]

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
# the options of cdf and logcdf that the conditional probabilities take as they are
_OPTIONS = ("abseps", "releps", "maxpts", "rng")


class CdfCotangent(Mapping[str, Any]):
    """The cotangent of a `MultivariateNormal` primal of ``cdf`` or ``logcdf``.

    A read-only mapping keyed by the parameters the distribution was built with: ``"loc"``
    (the gradient, of the shape and dtype of ``loc`` as given) and the matrix's name, whose
    gradient is not implemented: reading it (``cot[name]``, ``cot.values()``, ``dict(cot)``)
    raises ``NotImplementedError`` naming it, never a silent zero. ``name in cot`` and
    ``cot.keys()`` work.
    """

    __slots__ = ("_loc", "_matrix", "_method")

    def __init__(self, loc: Array, matrix: str, method: str) -> None:
        self._loc = loc
        self._matrix = matrix
        self._method = method

    def __getitem__(self, key: str) -> Array:
        if key == "loc":
            return self._loc
        if key == self._matrix:
            raise NotImplementedError(_no_matrix_gradient(self._method, key))
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(("loc", self._matrix))

    def __len__(self) -> int:
        return 2

    def __contains__(self, key: object) -> bool:
        return key in ("loc", self._matrix)

    def __repr__(self) -> str:
        shape = tuple(self._loc.shape)
        return f"CdfCotangent(loc=<array of shape {shape}>, {self._matrix}=<not implemented>)"


def _no_matrix_gradient(method: str, name: str) -> str:
    return (
        f"the gradient of {method} with respect to `{name}` is not implemented (only `loc`, "
        "`value` and `lower_limit` have gradients); detach the matrix (or leave it out of what "
        "is differentiated)"
    )


class _Primal(NamedTuple):
    """What the backward pass needs of a primal: whether it gets a cotangent, its shape and
    its dtype."""

    wanted: bool
    shape: tuple[int, ...]
    dtype: Any


class _Saved(NamedTuple):
    """The residuals of a forward pass."""

    loc: Array  # the means, batch_shape + (D,)
    sigma: Array  # the covariance, the matrix's batch shape + (D, D)
    upper: Array  # the value, in the distribution's dtype
    lower: Array | None  # the lower limit, or None
    out: Array  # cdf or logcdf


def _method(log: bool) -> str:
    return "MultivariateNormal.logcdf" if log else "MultivariateNormal.cdf"


def _options(kwargs: dict[str, Any], log: bool) -> dict[str, Any]:
    """The options the conditional probabilities take; ``return_error=True`` refused."""
    if kwargs.get("return_error", False) is not False:
        msg = (
            f"`return_error` must be False for the gradient of {_method(log)}: the error "
            "estimate has no gradient; compute it by a separate call (under torch.no_grad() "
            "for tensors)"
        )
        raise NotImplementedError(msg)
    return {k: kwargs[k] for k in _OPTIONS if k in kwargs}


def _primal(p: Any, dtype: Any) -> _Primal:
    """A primal of the arrays rules: arrays get a cotangent (in their dtype if it is a
    floating one, else in the distribution's `dtype`) unless they are tensors that do not
    require one; None, numbers and lists get none."""
    if not is_array(p):
        return _Primal(False, (), dtype)
    floating = is_dtype(_backend.get_namespace(p), p.dtype, "real floating")
    wanted = _jax.wants_gradient(p)  # None unless JAX differentiates this call
    if wanted is None:
        wanted = bool(getattr(p, "requires_grad", True))
    return _Primal(wanted, shape_of(p), p.dtype if floating else dtype)


def _forward(
    dist: MultivariateNormal, value: Any, kwargs: dict[str, Any], log: bool
) -> tuple[Array, _Saved]:
    """The public cdf (`log`: logcdf) at `value` with `kwargs`, and what the backward pass
    needs of it."""
    _options(kwargs, log)
    out = (dist.logcdf if log else dist.cdf)(value, **kwargs)
    xp = dist._serving(value)  # a Dask value's namespace, else the parameters'
    lower_limit = kwargs.get("lower_limit")
    upper = _limit(xp, dist, value, "value")
    lower = None if lower_limit is None else _limit(xp, dist, lower_limit, "lower_limit")
    name, matrix = dist._given
    if name == "covariance_matrix":
        sigma = matrix
    else:
        sigma = dist._xp.matmul(dist._tril, dist._xp.matrix_transpose(dist._tril))
    loc = dist._loc
    if xp is not dist._xp:  # in-memory parameters, a Dask value: one-chunk Dask parameters
        loc, sigma = xp.asarray(loc), xp.asarray(sigma)
    return out, _Saved(loc, sigma, upper, lower, out)


def _limit(xp: Namespace, dist: MultivariateNormal, v: Any, what: str) -> Array:
    """A limit (`value` or `lower_limit`) as an array in the distribution's dtype (checked by
    the forward pass)."""
    if _compat.is_dask_namespace(xp):  # NumPy arrays, lists or numbers join Dask as they do
        v = v if _compat.is_dask_array(v) else xp.asarray(v)
        return xp.astype(v, dist.dtype) if v.dtype != dist.dtype else v
    return dist._value(v, what, allow_inf=True, check_values=False)


def _check_cotangent(cotangent: Any, out: Array, log: bool) -> None:
    xp = _backend.get_namespace(out)
    if not is_array(cotangent):
        msg = f"`cotangent` must be an array of {xp.__name__}, got {type(cotangent).__name__}"
        raise TypeError(msg)
    got = _backend.get_namespace(cotangent)
    if got.__name__ != xp.__name__:
        msg = (
            f"`cotangent` must be an array of the output's library ({xp.__name__}), "
            f"got {got.__name__}"
        )
        raise TypeError(msg)
    if not is_dtype(xp, cotangent.dtype, "real floating"):
        msg = f"`cotangent` of {_method(log)} must be real floating, got dtype {cotangent.dtype}"
        raise TypeError(msg)


def _sum_to(xp: Namespace, g: Array, shape: tuple[int, ...], dtype: Any) -> Array:
    """`g` summed over the dimensions that broadcasting added to `shape`, in `dtype`."""
    extra = len(g.shape) - len(shape)
    if extra:
        g = xp.sum(g, axis=tuple(range(extra)))
    axes = tuple(i for i, (s, n) in enumerate(zip(shape, g.shape, strict=True)) if s == 1 != n)
    if axes:
        g = xp.sum(g, axis=axes, keepdims=True)
    return g if g.dtype == dtype else xp.astype(g, dtype)


def _take(xp: Namespace, a: Array, index: list[int], shape: tuple[int, ...]) -> Array:
    """The entries `index` of the flattened last dimension of `a`, the last dimension then
    reshaped to `shape`."""
    idx = xp.asarray(index, dtype=xp.int64, device=_compat.device(a))
    taken = xp.take(a, idx, axis=-1) if len(a.shape) > 1 else xp.take(a, idx)
    return xp.reshape(taken, (*a.shape[:-1], *shape))


def _conditionals(
    xp: Namespace, s: _Saved, var: Array, t: Array, log: bool, options: dict[str, Any]
) -> Array:
    """cdf (`log`: logcdf) of the box without coordinate ``i`` given ``X_i = t_i``, for every
    ``i`` and every limit in `t` (shape ``(S, *batch, D)``, finite): shape ``(S, *batch, D)``.
    Row ``i`` of the conditionals' arrays holds the coordinates ``j != i`` in order."""
    d = int(s.loc.shape[-1])
    others = [[j for j in range(d) if j != i] for i in range(d)]
    flat = [j for row in others for j in row]
    sigma = xp.reshape(s.sigma, (*s.sigma.shape[:-2], d * d))
    # Sigma_{i,-i} (*, i, j) and Sigma_{-i,-i} (*, i, j, k)
    cross = _take(xp, sigma, [i * d + j for i, row in enumerate(others) for j in row], (d, d - 1))
    block = [j * d + k for row in others for j in row for k in row]
    cov = _take(xp, sigma, block, (d, d - 1, d - 1))
    # Sigma_{-i,-i} - Sigma_{-i,i} Sigma_{i,-i} / Sigma_ii (symmetric as computed)
    cov = cov - cross[..., :, None] * cross[..., None, :] / var[..., :, None, None]
    # mu_{-i} + Sigma_{-i,i} (t_i - mu_i) / Sigma_ii
    mean = _take(xp, s.loc, flat, (d, d - 1)) + (cross / var[..., None]) * (t - s.loc)[..., None]
    upper = _take(xp, s.upper, flat, (d, d - 1))
    lower = None if s.lower is None else _take(xp, s.lower, flat, (d, d - 1))
    cond = MultivariateNormal(mean, covariance_matrix=cov, validate_args=False)
    method = cond.logcdf if log else cond.cdf
    out: Array = method(upper, lower_limit=lower, **options)
    return out


def _derivatives(s: _Saved, log: bool, options: dict[str, Any]) -> tuple[Array, Array | None]:
    """The derivatives of the output with respect to the upper and the lower limits, each of
    shape ``(*batch, D)`` (the lower None without a lower limit)."""
    xp = _backend.get_namespace(s.out)
    d = int(s.loc.shape[-1])
    full = (*s.out.shape, d)
    b = xp.broadcast_to(s.upper, full)
    if s.lower is None:
        t = b[None, ...]
        empty = xp.any(b == -xp.inf, axis=-1)
    else:
        a = xp.broadcast_to(s.lower, full)
        t = xp.stack([b, a])
        empty = xp.any(a >= b, axis=-1)
    infinite = xp.isinf(t)
    t = xp.where(infinite, xp.broadcast_to(s.loc, t.shape), t)  # finite stand-ins, masked below
    var = xp.sum(s.sigma * xp.eye(d, dtype=s.sigma.dtype, device=_compat.device(s.sigma)), axis=-1)
    z = (t - s.loc) / xp.sqrt(var)
    log_density = -0.5 * z * z - _LOG_SQRT_2PI - 0.5 * xp.log(var)
    if log:
        # the conditionals' logcdf (0 for D = 1) less logcdf, whose -inf of an empty box takes
        # a stand-in (its terms are masked)
        log_p = xp.where(empty, xp.zeros_like(s.out), s.out)[..., None]
        log_c = _conditionals(xp, s, var, t, log, options) if d > 1 else 0.0
        term = xp.exp(log_density + log_c - log_p)
    else:
        term = xp.exp(log_density)
        if d > 1:
            term = term * _conditionals(xp, s, var, t, log, options)
    keep = ~infinite & ~empty[..., None]
    term = xp.where(keep, term, xp.zeros_like(term))
    return term[0, ...], (None if s.lower is None else -term[1, ...])


def _pull(
    s: _Saved, cotangent: Any, log: bool, options: dict[str, Any]
) -> tuple[Array, Array, Array | None]:
    """``cotangent`` pulled back to (loc, value, lower limit), each of shape
    ``(*batch, D)``."""
    _check_cotangent(cotangent, s.out, log)
    xp = _backend.get_namespace(s.out)
    d = int(s.loc.shape[-1])
    ct = cotangent[..., None]
    if d == 0 or math.prod(s.out.shape) == 0:
        zero = xp.zeros((*s.out.shape, d), dtype=s.out.dtype, device=_compat.device(s.out))
        return zero, zero, (None if s.lower is None else zero)
    db, da = _derivatives(s, log, options)
    dvalue = ct * db
    dlower = None if da is None else ct * da
    dloc = -dvalue if dlower is None else -(dvalue + dlower)
    return dloc, dvalue, dlower


# ---- the rules: array primals (PyTorch), and the distribution as a primal (xpops.vjp) ------


class _Info(NamedTuple):
    """What the backward pass needs besides arrays."""

    parameter: str  # the matrix's name
    options: dict[str, Any]  # abseps, releps, maxpts, rng
    loc: _Primal
    matrix: _Primal
    value: _Primal
    lower: _Primal | None  # None: no lower limit among the primals
    keyword_lower: bool  # a lower limit given as a keyword that requires a gradient


def _to_primal(xp: Namespace, g: Array | None, p: _Primal | None) -> Array | None:
    """`g` summed to the primal's shape in its dtype; None where the primal wants none."""
    if g is None or p is None or not p.wanted:
        return None
    g = _sum_to(xp, g, p.shape, p.dtype)
    return result(xp.reshape(g, p.shape))


def _cotangents(
    residuals: tuple[Any, ...], cotangent: Any, log: bool
) -> tuple[_Info, Array | None, Array | None, Array | None]:
    """(info, loc, value and lower-limit cotangents, None where a primal wants none)."""
    s, info = _Saved(*residuals[:-1]), residuals[-1]
    xp = _backend.get_namespace(s.out)
    dloc, dvalue, dlower = _pull(s, cotangent, log, info.options)
    return (
        info,
        _to_primal(xp, dloc, info.loc),
        _to_primal(xp, dvalue, info.value),
        _to_primal(xp, dlower, info.lower),
    )


def _arrays_rule(log: bool) -> Rule:
    method = _method(log)

    def forward(
        loc: Any,
        matrix: Any,
        value: Any,
        /,
        *lower: Any,
        parameter: str,
        validate_args: bool = True,
        dist: Any = None,
        **kwargs: Any,
    ) -> tuple[Array, tuple[Any, ...]]:
        if len(lower) > 1 or (lower and kwargs.get("lower_limit") is not None):
            msg = (
                f"{method} takes (loc, matrix, value) and optionally lower_limit as primals, "
                "with lower_limit not also a keyword"
            )
            raise TypeError(msg)
        if lower:
            kwargs = {**kwargs, "lower_limit": lower[0]}
        if parameter not in ("covariance_matrix", "precision_matrix", "scale_tril"):
            msg = (
                "`parameter` must be 'covariance_matrix', 'precision_matrix' or 'scale_tril', "
                f"got {parameter!r}"
            )
            raise ValueError(msg)
        if dist is None:
            dist = MultivariateNormal(loc, validate_args=validate_args, **{parameter: matrix})
        out, saved = _forward(dist, value, kwargs, log)
        limit = kwargs.get("lower_limit")
        info = _Info(
            parameter,
            _options(kwargs, log),
            _primal(loc, dist.dtype),
            _primal(matrix, dist.dtype),
            _primal(value, dist.dtype),
            _primal(limit, dist.dtype) if lower else None,
            # a lower limit given as a keyword gets no cotangent: it must not want one
            not lower and bool(getattr(limit, "requires_grad", False)),
        )
        return out, (*saved, info)

    def backward(residuals: tuple[Any, ...], cotangent: Any, /, **kwargs: Any) -> tuple[Any, ...]:
        info = residuals[-1]
        if info.matrix.wanted:
            raise NotImplementedError(_no_matrix_gradient(method, info.parameter))
        if info.keyword_lower:
            msg = (
                f"the gradient of {method} with respect to `lower_limit` is given only when "
                "lower_limit is the fourth primal, not a keyword argument"
            )
            raise NotImplementedError(msg)
        _, dloc, dvalue, dlower = _cotangents(residuals, cotangent, log)
        return (dloc, None, dvalue) if info.lower is None else (dloc, None, dvalue, dlower)

    return Rule(method, ("loc", "matrix", "value", "lower_limit"), forward, backward)


def _dist_rule(rule: Rule, log: bool) -> Rule:
    """`rule` with the distribution as its first primal: the array rule at the parameters as
    given (``dist._args``), the distribution's cotangent a `CdfCotangent`; `lower_limit` is a
    keyword (not differentiated), as are the options."""

    def forward(dist: Any, value: Any, /, **kwargs: Any) -> tuple[Array, tuple[Any, ...]]:
        if not isinstance(dist, MultivariateNormal):
            msg = f"`self` must be a MultivariateNormal, got {type(dist).__name__}"
            raise TypeError(msg)
        parameter = dist._given[0]
        out, residuals = rule.forward(*dist._args, value, parameter=parameter, dist=dist, **kwargs)
        s, info = _Saved(*residuals[:-1]), residuals[-1]
        # every array primal gets a cotangent; a value given as a number or a list gets one
        # of its shape as an array, in the distribution's dtype; the matrix's is read lazily
        info = info._replace(
            loc=info.loc._replace(wanted=True),
            matrix=info.matrix._replace(wanted=False),
            value=info.value._replace(wanted=True, shape=shape_of(s.upper)),
            keyword_lower=False,
        )
        return out, (*s, info)

    def backward(residuals: tuple[Any, ...], cotangent: Any, /, **kwargs: Any) -> tuple[Any, ...]:
        info, dloc, dvalue, _ = _cotangents(residuals, cotangent, log)
        return CdfCotangent(dloc, info.parameter, rule.name), dvalue

    return Rule(rule.name, ("self", "value"), forward, backward)


CDF_ARRAYS = _arrays_rule(log=False)
LOGCDF_ARRAYS = _arrays_rule(log=True)
CDF = _dist_rule(CDF_ARRAYS, log=False)
LOGCDF = _dist_rule(LOGCDF_ARRAYS, log=True)
