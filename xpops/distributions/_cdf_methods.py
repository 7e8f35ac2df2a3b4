"""cdf and logcdf of MultivariateNormal: a base class of it, so that the class's file holds the
rest. The methods use the distribution's own attributes and the helpers of its base
`_state.State`; the class sets `_cdf_engines`, the table of the in-memory `_cdf` and the Dask
engine, once it is defined.
"""

import functools
import numbers
from typing import Any, ClassVar

from .._autodiff import _jax
from .._autodiff import _torch as _autograd
from .._lib import _random
from .._lib._compile import compiling, untraced
from .._lib._dispatch import Engines, dispatch
from .._lib._validation import as_bool
from . import _cdf
from ._state import State

__all__ = ["CdfMethods"]

# the `rng` of cdf and logcdf: a CuPy generator for CuPy arrays, else a NumPy one
_NUMPY_RNG = functools.partial(_random.check_numpy_rng, got="repr")
_CDF_RNG = Engines(
    __package__,
    numpy=_NUMPY_RNG,
    cupy=_random.check_cupy_rng,
    dask=_NUMPY_RNG,
    generic=_NUMPY_RNG,
)


class CdfMethods(State):
    """`cdf` and `logcdf` (and their argument checks) of MultivariateNormal."""

    _cdf_engines: ClassVar[Engines]

    def cdf(
        self,
        value: Any,
        *,
        lower_limit: Any = None,
        abseps: float = 1e-5,
        releps: float = 0.0,
        maxpts: int | None = None,
        rng: Any = None,
        return_error: bool = False,
    ) -> Any:
        """``P(lower_limit < X <= value)``, batched over `value` and ``batch_shape``.

        Parameters
        ----------
        value : array, shape (..., D)
            The upper limits (``+inf`` allowed). A Dask array gives lazy results, chunk by
            chunk.
        lower_limit : array, shape (..., D), optional
            The lower limits (``-inf`` allowed); None (the default) is ``-inf``.
        abseps, releps : float, optional
            Absolute and relative tolerance: D >= 3 stops once the error estimate is at most
            ``max(abseps, releps * cdf)`` (defaults 1e-5 and 0).
        maxpts : int, optional
            The most integrand evaluations a problem may take (default ``1_000_000 * D``).
        rng : None, int, numpy.random.Generator or cupy.random.Generator, optional
            The source of the random shifts (a CuPy generator for CuPy arrays, a NumPy one
            otherwise); the same `rng` gives the same result.
        return_error : bool, optional
            Return ``(cdf, error_estimate)`` instead of the cdf alone.

        Returns
        -------
        array, or (array, array) with `return_error`
            Shape ``broadcast(value.shape[:-1], lower_limit.shape[:-1], batch_shape)``, in the
            parameters' dtype, library and device.

        Warns
        -----
        IntegrationWarning
            Where a problem stopped at `maxpts` before its error estimate met the tolerance
            (the result is returned with the error it reached), unless `return_error` is
            True.

        Notes
        -----
        D = 1 and 2 are deterministic (D = 1 exact, reported error 0; D = 2 accurate to about
        1e-14, reported error 1e-14); D >= 3 uses Genz's randomized quasi-Monte-Carlo method
        (variable prioritization, randomly shifted lattice rules; the error estimate is 3.5
        standard errors over the shifts). CuPy arrays are computed on their GPU (3 <= D <=
        64; other D through host copies).
        """
        if compiling(value, lower_limit, *self._args):
            kwargs = {"lower_limit": lower_limit, "abseps": abseps, "releps": releps}
            kwargs |= {"maxpts": maxpts, "rng": rng, "return_error": return_error}
            return untraced(CdfMethods.cdf)(self, value, **kwargs)
        options = self._cdf_options(abseps, releps, maxpts, rng, return_error)
        return dispatch(
            self._serving(value), self._cdf_engines, self, value, lower_limit, options, False
        )

    def logcdf(
        self,
        value: Any,
        *,
        lower_limit: Any = None,
        abseps: float = 1e-5,
        releps: float = 0.0,
        maxpts: int | None = None,
        rng: Any = None,
        return_error: bool = False,
    ) -> Any:
        """``log P(lower_limit < X <= value)``, accurate where the probability underflows
        and where it is near 1.

        The parameters are those of `cdf`; the tolerances apply to the probability ``P`` as in
        `cdf` (``max(abseps, releps * P)``), tightened where ``P`` is small so that the log
        keeps its meaning: the relative error of ``P`` (the error of its log) is at most
        ``max(releps, min(abseps / P, 1e-3))``. At the defaults a logcdf costs about what the
        cdf costs where ``P`` is not small, and is accurate to about 0.001 in the log (at
        most) where it is. `return_error` returns the error estimate of the log.

        Returns
        -------
        array, or (array, array) with `return_error`
            As in `cdf`: the log of the probability, and the error estimate of the log.

        Warns
        -----
        IntegrationWarning
            As in `cdf`.

        Notes
        -----
        Far tails stay finite: ``logcdf(-40)`` of a standard normal is about -804.608 (D >= 3
        integrates the log of the integrand). Where ``P`` is near 1 the log is
        ``log1p(-Q)`` of the probability outside, ``Q``, computed to a relative error (D = 1
        exactly; D = 2 deterministically; D >= 3 where the union bound puts ``Q`` below 0.01,
        as the sum over coordinates ``i`` of the probability of ``X_i`` outside its interval
        and the coordinates before ``i`` inside, on the CPU and the GPU), so that
        ``logcdf(20)`` of a standard normal is -2.75e-89 and not 0.
        """
        if compiling(value, lower_limit, *self._args):
            kwargs = {"lower_limit": lower_limit, "abseps": abseps, "releps": releps}
            kwargs |= {"maxpts": maxpts, "rng": rng, "return_error": return_error}
            return untraced(CdfMethods.logcdf)(self, value, **kwargs)
        options = self._cdf_options(abseps, releps, maxpts, rng, return_error)
        return dispatch(
            self._serving(value), self._cdf_engines, self, value, lower_limit, options, True
        )

    def _cdf_options(
        self, abseps: Any, releps: Any, maxpts: Any, rng: Any, return_error: Any
    ) -> dict[str, Any]:
        for name, v in (("abseps", abseps), ("releps", releps)):
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not float(v) >= 0:
                msg = f"`{name}` must be a non-negative number, got {v!r}"
                raise ValueError(msg)
        if maxpts is not None and (
            isinstance(maxpts, bool) or not isinstance(maxpts, numbers.Integral) or maxpts < 1
        ):
            msg = f"`maxpts` must be a positive integer or None, got {maxpts!r}"
            raise ValueError(msg)
        dispatch(self._xp, _CDF_RNG, rng)
        if self._d >= 3 and abseps == 0 and releps == 0 and maxpts is None:
            msg = "`abseps` and `releps` cannot both be 0 without `maxpts`"
            raise ValueError(msg)
        return {
            "abseps": float(abseps),
            "releps": float(releps),
            "maxpts": maxpts,
            "rng": rng,
            "return_error": as_bool(return_error, "return_error"),
        }

    def _cdf(self, value: Any, lower_limit: Any, options: dict[str, Any], log: bool) -> Any:
        """cdf/logcdf of in-memory parameters (`_cdf.of_distribution` picks CPU or GPU)."""
        dist = _cdf.Distribution(
            self._xp, self._loc, self._tril, self._batch_shape, self._dtype, self._value
        )
        return _cdf.of_distribution(dist, value, lower_limit, options, log)


def cdf_in_memory(
    dist: Any, value: Any, lower_limit: Any, options: dict[str, Any], log: bool
) -> Any:
    """cdf or logcdf of in-memory parameters; recorded by PyTorch's autograd where it records
    the call, by the rules of `_cdf_vjp` (primals ``loc``, the matrix, `value` and, where given,
    `lower_limit`)."""
    # with return_error, JAX's tracers go to the engines (the error estimate has no gradient,
    # and JAX refuses to differentiate the engine's host callback)
    limits = (value, lower_limit)
    if not (
        _autograd.recording(*dist._args, *limits)
        or (not options["return_error"] and _jax.handles(*dist._args, *limits, traced_only=True))
    ):
        # `CdfMethods._cdf`, inlined: the integration warning's stacklevel counts the frames
        # from here to the caller of cdf
        of = _cdf.Distribution(
            dist._xp, dist._loc, dist._tril, dist._batch_shape, dist._dtype, dist._value
        )
        return _cdf.of_distribution(of, value, lower_limit, options, log)
    method = "logcdf" if log else "cdf"
    rule = f"_cdf_vjp:{method.upper()}_ARRAYS"
    if options["return_error"]:
        msg = (
            f"MultivariateNormal.{method} is not differentiable with return_error=True (the "
            "error estimate has no gradient)"
        )
        raise NotImplementedError(msg)
    kwargs = {k: v for k, v in options.items() if k != "return_error"}
    primals = (value,) if lower_limit is None else (value, lower_limit)
    return dist._recorded(rule, *primals, **kwargs)
