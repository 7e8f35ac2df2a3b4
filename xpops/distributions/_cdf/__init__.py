"""The multivariate normal CDF: the entry `MultivariateNormal.cdf` and `logcdf` call.

`of_distribution` takes a distribution's parameters and the values (checked by the
distribution) to the problems ``P(lower - loc < L Z <= upper - loc)`` in float64, in the
parameters' library, solves them, warns (`IntegrationWarning`) where a problem stopped at
`maxpts` short of its tolerance unless the caller asked for the error estimates, and returns
the results in the parameters' dtype. The problems of NumPy arrays and of other CPU arrays
(read in place) are set up by the NumPy engine (`_numpy`), those of CuPy arrays on their GPU by
the CuPy engine (`_cupy`). `mvn_cdf` solves a batch of problems: NumPy arrays by the NumPy
engine (Genz's quasi-Monte-Carlo method, D = 1 and 2 deterministic); CuPy arrays by the GPU
kernels when their D is one they take (`_genz.DEVICE_DIMS`, and D = 0), and otherwise by the
NumPy engine on host copies (`_host`), the results returned on the arrays' device. This module
holds the dispatch tables and the shared handling of the arguments; the engines import only
`_genz`, what they share.
"""

import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from ..._lib import _compat
from ..._lib._dispatch import Engines, dispatch
from ..._lib._typing import Array, Namespace
from . import _host
from ._genz import DEVICE_DIMS

__all__ = ["Distribution", "IntegrationWarning", "mvn_cdf", "of_distribution"]


class IntegrationWarning(RuntimeWarning):
    """A multivariate normal ``cdf`` or ``logcdf`` stopped at ``maxpts`` integrand evaluations
    before its error estimate met the requested tolerance (``abseps``, ``releps``).

    The results are returned with the error they reached. Raise ``maxpts`` (or loosen the
    tolerance) to meet it, or pass ``return_error=True`` to get the error estimates and no
    warning.
    """


class Distribution(NamedTuple):
    """What the CDF takes of a multivariate normal."""

    xp: Namespace
    loc: Array  # the means, shape batch_shape + (D,)
    tril: Array  # the lower factor L, with its own batch shape
    batch_shape: tuple[int, ...]
    dtype: Any  # of the parameters and the results
    check: Callable[..., Array]  # (value, what, allow_inf=True): the value checked, in dtype


def of_distribution(
    dist: Distribution, value: Any, lower_limit: Any, options: dict[str, Any], log: bool
) -> Any:
    """cdf (`log`: logcdf) of `dist` at `value` above `lower_limit` (None: -inf), with the
    options of `mvn_cdf` and ``return_error``; results of shape ``broadcast(value.shape[:-1],
    lower_limit.shape[:-1], batch_shape)`` in the parameters' dtype and library."""
    options = dict(options)
    return_error = options.pop("return_error")
    check = not return_error and dist.tril.shape[-1] >= 3  # D = 1, 2: deterministic
    out, err, missed = dispatch(
        dist.xp, _OF_DISTRIBUTION, dist, value, lower_limit, options, log, check
    )
    if missed:
        name = "logcdf" if log else "cdf"
        msg = (
            f"{name}: {missed} of the integrals stopped at maxpts={options['maxpts']} "
            f"integrand evaluations short of the tolerance (abseps={options['abseps']}, "
            f"releps={options['releps']}); raise `maxpts`, or pass `return_error=True` to get "
            "the error estimates"
        )
        warnings.warn(msg, IntegrationWarning, stacklevel=5)
    return (out, err) if return_error else out


def mvn_cdf(
    lower: Any,
    upper: Any,
    chol: Any,
    *,
    abseps: float = 1e-5,
    releps: float = 0.0,
    maxpts: int | None = None,
    rng: Any = None,
    log: bool = False,
) -> tuple[Array, Array]:
    """``P(lower < X <= upper)`` for ``X ~ N(0, chol @ chol.T)``, batched: ``(value, error)``.

    The contract of the NumPy engine's `mvn_cdf` (`_numpy`): `lower`, `upper` of shape
    ``(..., D)``, `chol` of shape ``(..., D, D)``, batch shapes broadcasting, float64 results
    in the arrays' library and on their device. CuPy arrays also take a ``cupy.random.Generator``
    as `rng`.
    """
    options = {"abseps": abseps, "releps": releps, "maxpts": maxpts, "rng": rng, "log": log}
    shape = tuple(chol.shape) if hasattr(chol, "shape") else np.shape(chol)
    # array-likes go to the NumPy engine
    xp = _compat.array_namespace(chol) if _compat.is_array_api_obj(chol) else np
    d = shape[-1] if shape else 0
    engines = _ENGINES if d == 0 or d in DEVICE_DIMS else _HOST_ENGINES
    result: tuple[Array, Array] = dispatch(xp, engines, lower, upper, chol, **options)
    return result


def _of_cupy(*args: Any) -> Any:
    """CuPy parameters: the CuPy engine sets the problems up on their GPU and solves them by
    `mvn_cdf` (kernels or host copies, by D)."""
    return _CUPY_PROBLEMS["cupy"](*args, solve=mvn_cdf)


def _via_host(lower: Any, upper: Any, chol: Any, **options: Any) -> tuple[Any, Any]:
    """Device arrays of a D the kernels do not take: the NumPy engine on host copies."""
    return _host.on_host(lower, upper, chol, solve=_ENGINES["numpy"], **options)


def _in_memory_only(*args: Any, **kwargs: Any) -> Any:
    msg = "the CDF engines take in-memory arrays; a Dask value goes chunk by chunk"
    raise TypeError(msg)


# The problems of a distribution: set up in NumPy for NumPy and other CPU arrays, on the GPU
# for CuPy arrays.
_OF_DISTRIBUTION = Engines(
    __package__,
    numpy="._numpy:of_numpy",
    cupy=_of_cupy,
    dask=_in_memory_only,
    generic="._numpy:of_other",
)
_CUPY_PROBLEMS = Engines(
    __package__,
    numpy=_in_memory_only,
    cupy="._cupy:of_distribution",
    dask=_in_memory_only,
    generic=_in_memory_only,
)
# NumPy and other CPU arrays (read as NumPy by np.asarray) take the NumPy engine; CuPy arrays
# the GPU kernels.
_ENGINES = Engines(
    __package__,
    numpy="._numpy:mvn_cdf",
    cupy="._cupy:mvn_cdf",
    dask=_in_memory_only,
    generic="._numpy:mvn_cdf",
)
# The D that only the NumPy engine computes (D = 1, 2 and D above the kernels' capacity): CuPy
# arrays go there through host copies.
_HOST_ENGINES = Engines(
    __package__,
    numpy="._numpy:mvn_cdf",
    cupy=_via_host,
    dask=_in_memory_only,
    generic="._numpy:mvn_cdf",
)
