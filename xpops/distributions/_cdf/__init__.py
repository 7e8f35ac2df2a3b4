"""The multivariate normal CDF: the entry `MultivariateNormal.cdf` and `logcdf` call.

`of_distribution` takes a distribution's parameters and the values (checked by the
distribution) to the problems ``P(lower - loc < L Z <= upper - loc)`` in float64, in the
parameters' library: on the CPU for NumPy and other CPU arrays (read in place), on their GPU
for CuPy arrays. `mvn_cdf` solves such a batch of problems and picks the engine: NumPy arrays
go to the NumPy engine (`_numpy`, Genz's quasi-Monte-Carlo method, D = 1 and 2
deterministic); CuPy arrays go to the CuPy engine (`_cupy`, GPU kernels) when their D is one
its kernels take (`_genz.DEVICE_DIMS`, and D = 0), and otherwise to the NumPy engine on host
copies, the results returned on the arrays' device. Both engines import only `_genz`, what
they share.
"""

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from ..._lib import _compat
from ..._lib._dispatch import Engines, dispatch
from ..._lib._random import host_rng
from ..._lib._typing import Array, Namespace
from .._common import batch_of
from ._genz import DEVICE_DIMS, check_shift_rng

__all__ = ["Distribution", "mvn_cdf", "of_distribution"]


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
    return dispatch(dist.xp, _OF_DISTRIBUTION, dist, value, lower_limit, options, log)


def _of_cupy(
    dist: Distribution, value: Any, lower_limit: Any, options: dict[str, Any], log: bool
) -> Any:
    """CuPy parameters: the problems on their GPU."""
    xp = dist.xp
    return_error = options.pop("return_error")
    upper = dist.check(value, "value", allow_inf=True)
    batch = batch_of(upper.shape[:-1], dist.batch_shape)
    lower = None
    if lower_limit is not None:
        lower = dist.check(lower_limit, "lower_limit", allow_inf=True)
        batch = batch_of(batch, lower.shape[:-1])
    with dist.tril.device:  # the engine computes in float64 on the parameters' GPU
        loc = xp.astype(dist.loc, xp.float64)
        b = xp.astype(upper, xp.float64) - loc
        a = xp.full_like(b, -math.inf) if lower is None else lower - loc
        out, err = mvn_cdf(a, b, dist.tril, log=log, **options)
        result = tuple(xp.astype(xp.reshape(r, batch), dist.dtype) for r in (out, err))
    return result if return_error else result[0]


def _of_numpy(
    dist: Distribution, value: Any, lower_limit: Any, options: dict[str, Any], log: bool
) -> Any:
    """NumPy parameters."""

    def back(r: np.ndarray) -> Array:
        return np.asarray(r, dtype=np.dtype(dist.dtype))

    return _on_cpu(dist, value, lower_limit, options, log, lambda a: a, back)


def _of_other(
    dist: Distribution, value: Any, lower_limit: Any, options: dict[str, Any], log: bool
) -> Any:
    """CPU arrays of other libraries: read in place by the NumPy engine, the results returned
    in their library; ``NotImplementedError`` on other devices."""
    xp, device = dist.xp, _compat.device(dist.tril)
    if "cpu" not in str(device).lower():
        msg = (
            "cdf and logcdf run on the CPU or, for CuPy arrays, on the GPU in this version, "
            f"got {xp.__name__} arrays on {device}"
        )
        raise NotImplementedError(msg)

    def host(a: Array) -> np.ndarray:  # no device transfer
        detach = getattr(a, "detach", None)  # a torch tensor that requires grad
        return np.from_dlpack(detach() if detach is not None else a)

    def back(r: np.ndarray) -> Array:
        return xp.asarray(np.array(r, dtype=np.float64), dtype=dist.dtype, device=device)

    return _on_cpu(dist, value, lower_limit, options, log, host, back)


def _on_cpu(
    dist: Distribution,
    value: Any,
    lower_limit: Any,
    options: dict[str, Any],
    log: bool,
    host: Callable[[Array], np.ndarray],
    back: Callable[[np.ndarray], Array],
) -> Any:
    """The problems in NumPy: `host` reads an array as NumPy, `back` returns a result in the
    parameters' library."""
    return_error = options.pop("return_error")
    d = dist.tril.shape[-1]
    upper = host(dist.check(value, "value", allow_inf=True))
    if lower_limit is None:
        lower = np.full_like(upper, -np.inf)
    else:
        lower = host(dist.check(lower_limit, "lower_limit", allow_inf=True))
    batch = batch_of(upper.shape[:-1], lower.shape[:-1], dist.batch_shape)
    loc = np.broadcast_to(host(dist.loc), (*batch, d)).astype(np.float64)
    a = np.broadcast_to(lower, (*batch, d)) - loc
    b = np.broadcast_to(upper, (*batch, d)) - loc
    tril = np.broadcast_to(host(dist.tril), (*batch, d, d)).astype(np.float64)
    if d == 0:
        out, err = (np.zeros(batch) if log else np.ones(batch)), np.zeros(batch)
    else:  # D = 1 and 2 deterministic inside, D >= 3 quasi-Monte-Carlo
        out, err = mvn_cdf(a, b, tril, log=log, **options)
    out, err = np.reshape(out, batch), np.reshape(err, batch)
    result = (out, err) if return_error else (out,)
    converted = tuple(back(r) for r in result)
    return converted if return_error else converted[0]


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


def _on_host(lower: Any, upper: Any, chol: Any, *, rng: Any, **options: Any) -> tuple[Any, Any]:
    """CuPy arrays of a D the GPU kernels do not take: the NumPy engine on host copies (D = 1
    and 2 by its deterministic algorithms), the results float64 arrays on `chol`'s device. A
    ``cupy.random.Generator`` gives the NumPy engine a generator seeded from it."""
    check_shift_rng(rng)
    xp = _compat.array_namespace(chol)
    device = _compat.device(chol)
    host = [
        _compat.to_device(xp.asarray(a, dtype=xp.float64, device=device), "cpu")
        for a in (lower, upper, chol)
    ]
    v, e = _HOST_ENGINES["numpy"](*host, rng=host_rng(rng), **options)
    return (
        xp.asarray(v, dtype=xp.float64, device=device),
        xp.asarray(e, dtype=xp.float64, device=device),
    )


def _in_memory_only(*args: Any, **kwargs: Any) -> Any:
    msg = "the CDF engines take in-memory arrays; a Dask value goes chunk by chunk"
    raise TypeError(msg)


_OF_DISTRIBUTION = Engines(
    __package__, numpy=_of_numpy, cupy=_of_cupy, dask=_in_memory_only, generic=_of_other
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
    cupy=_on_host,
    dask=_in_memory_only,
    generic="._numpy:mvn_cdf",
)
