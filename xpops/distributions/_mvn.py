"""MultivariateNormal: batched parameters, validated, moments, sampling, densities, CDF.

Every method picks its engine by `dispatch` over a table of its own (the tables follow the
class): the class's in-memory code for NumPy, CuPy and other namespaces, with the fused CuPy
kernels (`_cupy`) where they take the distribution, and the Dask engine (`_dask`, imported on
first use) for Dask parameters or a Dask value; for PyTorch's CUDA tensors, the constructor,
log_prob and prob run the CuPy engine on their memory (`_torch`). The Dask engine
reads only the public properties of a distribution; what its chunks need of this module
reaches it through `_on_dask`, the one hand-off. A call that PyTorch's autograd records
(parameters or a value that require grad) goes instead to the array-level rules of `_vjp` and
`_cdf_vjp` (`_recorded`), whose forward pass is the method itself. The properties live in the
base class `_properties.Properties`, cdf and logcdf in `_cdf_methods.CdfMethods`, and
pickling, copies and the helpers the methods share (the checks of values, the cached forms of
the factor) in `_state.State`, the base of `CdfMethods`.
"""

import copy
import functools
import math
import numbers
from typing import Any, NamedTuple

from .._autodiff import _jax
from .._autodiff import _torch as _autograd
from .._lib import _compat, _random
from .._lib._compile import compiling, untraced
from .._lib._dispatch import Engines, dispatch
from .._lib._typing import Array
from .._lib._validation import as_bool
from ..linalg._triangular import solve_triangular
from ._cdf_methods import CdfMethods, cdf_in_memory
from ._common import (
    all_true,
    as_arrays,
    bad_values,
    batch_of,
    check_real,
    float_dtype,
    is_array,
    parameter_batch,
    plain_parameters,
    result,
    same_device,
    sample_shape,
    shape_of,
)
from ._kl import kl_divergence, normal_kl, register_kl
from ._properties import Properties
from ._torch import log_prob_of_tensor, on_cuda_tensors, parameters_of_tensors

__all__ = ["MultivariateNormal"]

_LOG_2PI = math.log(2 * math.pi)
_PARAMS = ("covariance_matrix", "precision_matrix", "scale_tril")


class MultivariateNormal(CdfMethods, Properties):
    r"""Multivariate normal distributions, batched over their parameters.

    ``X ~ N(loc, Σ)`` with ``Σ`` given as a covariance matrix, a precision matrix ``Σ^{-1}``
    or the lower Cholesky factor ``L`` of ``Σ = L L^T`` (exactly one of them). Parameters
    broadcast: ``batch_shape`` is the broadcast of ``loc.shape[:-1]`` and the matrix's
    ``shape[:-2]``, ``event_shape`` is ``(D,)``.

    Parameters
    ----------
    loc : array or array-like, shape (..., D)
        The means; a Python number is the mean of every coordinate.
    covariance_matrix, precision_matrix, scale_tril : array or array-like, shape (..., D, D)
        Exactly one: symmetric positive definite covariances or precisions, or lower-triangular
        factors with a positive diagonal.

        Every parameter, and the values given to the methods, may be a Python number or a
        (nested) list: it becomes an array of the library of the array beside it, on that
        array's device (NumPy when none is an array). NumPy arrays next to Dask arrays become
        one-chunk Dask arrays; other mixes of libraries raise ``TypeError``. The dtype comes
        from the parameters given as arrays only (a Python number or list does not promote
        it); with no array, NumPy's float64.
    validate_args : bool, optional
        If True (the default), check the parameters (and the values given to `log_prob`,
        `prob`, `cdf` and `logcdf`) and raise ``ValueError`` naming the parameter, its shape and
        the constraint. Checks read data back from the device; False skips every check (a
        factorization that cannot go on, a non-positive-definite matrix on NumPy or PyTorch,
        still raises ``ValueError``, saying that the factorization failed).

    Raises
    ------
    ValueError
        If not exactly one matrix is given, shapes are inconsistent, or (with `validate_args`)
        a constraint is violated: a covariance or precision matrix that is not symmetric or not
        positive definite, a `scale_tril` with anything above the diagonal or a non-positive
        diagonal, non-finite `loc`.
    TypeError
        For complex or non-numeric parameters (or values), long double parameters (which the
        factorizations of NumPy and SciPy do not take), or parameters of two array libraries.
    ValueError
        If `loc` and the matrix are on different devices.

    Notes
    -----
    One lower factor ``L`` is computed when the distribution is built (a Cholesky
    factorization of the covariance, or of the precision through the reversal identity) and
    every method works from it: ``log_prob`` solves ``L z = x - loc`` with the shared
    triangular solve of :func:`xpops.linalg.cholesky_solve`, ``sample`` is ``loc + L eps``.
    The other parametrizations are computed lazily on first access.

    On CuPy, ``log_prob``/``prob`` and ``sample``/``rsample`` run fused kernels for
    D <= 32 (float32, float64): one pass over the points, the normals drawn in the kernel.
    PyTorch's CUDA tensors (where CuPy is installed) are checked, and their ``log_prob`` and
    ``prob`` computed, by the CuPy engine on the tensors' memory, with no copy and on
    PyTorch's current stream; so is the factor, unless autograd records the parameters or
    `validate_args` is False (then PyTorch's factorization, which raises for a matrix that is
    not positive definite). Draws stay with PyTorch's generators.
    On NumPy, ``log_prob``/``prob`` of a distribution with no batch (D <= 64) read the points
    once, in chunks that stay in the cache: ``x - loc`` times ``L^-T`` (computed once), and
    the rows' sums of squares, with no temporary of the points' size.

    Results are arrays of the parameters' library: on NumPy a result of shape ``()`` (one
    point, one distribution) is a 0-d ``numpy.ndarray``, never a NumPy scalar, in every
    method (`log_prob`, `prob`, `entropy`, `kl_divergence`, `cdf`, `logcdf`).

    Gradients: `xpops.vjp` takes ``log_prob``, ``prob``, ``entropy``, ``rsample``, ``cdf``,
    ``logcdf`` and `kl_divergence`, a distribution's cotangent keyed by the parameters it was
    built with (``"loc"`` and its matrix's name); built from PyTorch tensors that require grad
    (or given such a value), these methods are recorded by PyTorch's autograd.

    JAX: a distribution may be built and used under ``jax.jit``, ``jax.vmap`` and ``jax.grad``
    (and their compositions), which differentiate these methods by the same rules (a
    ``jax.custom_vjp``; forward mode is not available). Under a trace the values are not
    known, so the checks of values are skipped: finiteness of `loc`, of the matrix and of the
    values given to the methods, symmetry, triangularity and positive definiteness (a matrix
    that is not positive definite gives NaN); the checks of shapes, dtypes and arguments still
    run. `sample` and `rsample` take a ``jax.random`` key as `rng` (``jax.random.key`` or
    ``jax.random.PRNGKey``); under a trace `rng` must be a key or an int seed (whose draws
    are then constants of the traced function): None or a NumPy generator raises
    ``ValueError``, as its draws would be made once, at trace time, and reused by every call.
    `cdf` and `logcdf` of traced arrays run the NumPy engine when the compiled function runs
    (``jax.pure_callback``; one call per member of a vmapped batch), with no
    ``IntegrationWarning`` (pass ``return_error=True`` to see the error estimates). The
    triangular solves (of `log_prob`, `kl_divergence` and the gradients) are
    ``jax.lax.linalg.triangular_solve``.

    Dask: a Dask `value` gives lazy results chunk by chunk; Dask parameters (`loc` and the
    matrix both Dask arrays, chunked along batch dimensions, the last dimensions one chunk)
    make every method lazy, the factor computed and checked chunk by chunk.

    ``cdf`` and ``logcdf``: D = 1 exactly (``ndtr``, ``log_ndtr``), D = 2 by a deterministic
    bivariate-normal algorithm, D >= 3 by Genz's randomized quasi-Monte-Carlo method. NumPy
    computes it on the CPU (CPU arrays of other libraries are read in place and the result is
    returned in their library); CuPy arrays are computed on their GPU by CUDA kernels (3 <= D
    <= 64; D = 1, 2 and D > 64 through the NumPy engine, copied to the host and back), with
    the same accuracy semantics; GPU arrays of other libraries raise ``NotImplementedError``.

    Examples
    --------
    >>> import numpy as np
    >>> from xpops.distributions import MultivariateNormal
    >>> d = MultivariateNormal(np.zeros(2), covariance_matrix=np.array([[2.0, 0.5], [0.5, 1.0]]))
    >>> d.batch_shape, d.event_shape
    ((), (2,))
    >>> round(float(d.log_prob(np.zeros(2))), 6)
    -2.117685
    >>> round(float(d.entropy()), 6)
    3.117685
    >>> d.sample((1000,), rng=0).shape
    (1000, 2)
    """

    def __init__(
        self,
        loc: Any,
        covariance_matrix: Array | None = None,
        precision_matrix: Array | None = None,
        scale_tril: Array | None = None,
        *,
        validate_args: bool = True,
    ) -> None:
        if compiling(loc, covariance_matrix, precision_matrix, scale_tril):
            untraced(MultivariateNormal.__init__)(
                self, loc, covariance_matrix, precision_matrix, scale_tril,
                validate_args=validate_args,
            )  # fmt: skip
            return
        plain = plain_parameters(loc, covariance_matrix, precision_matrix, scale_tril)
        if plain is not None:  # NumPy or CuPy arrays of one floating dtype: checks that hold
            xp, name, matrix = plain
            self._validate = as_bool(validate_args, "validate_args")
            self._setup(xp, name, loc, matrix, (loc, matrix), loc.dtype)
            return
        given = {
            name: m
            for name, m in zip(
                _PARAMS, (covariance_matrix, precision_matrix, scale_tril), strict=True
            )
            if m is not None
        }
        if len(given) != 1:
            msg = (
                "Exactly one of covariance_matrix, precision_matrix or scale_tril must be specified"
            )
            raise ValueError(msg)
        ((name, matrix),) = given.items()
        self._validate = as_bool(validate_args, "validate_args")
        if loc is None:
            msg = "`loc` must be an array, a number or a list of numbers, got None"
            raise TypeError(msg)
        # the dtype comes from the parameters given as arrays: a Python number or list
        # does not promote it (as in PyTorch); with none an array, NumPy's default
        typed = [(a, n) for a, n in ((loc, "loc"), (matrix, name)) if is_array(a)]
        given_as_arrays = (is_array(loc), is_array(matrix))
        scalar_loc = isinstance(loc, numbers.Number)
        xp, (loc, matrix) = as_arrays(loc, matrix, names=["loc", name])
        args = (loc, matrix)
        if scalar_loc and len(matrix.shape) >= 1:  # one mean for every coordinate
            loc = xp.broadcast_to(loc, (int(matrix.shape[-1]),))
        if not _compat.is_dask_array(matrix):
            same_device(loc, matrix, name)
        for a, n in ((loc, "loc"), (matrix, name)):
            check_real(xp, a, n)
        if typed:
            dtype = float_dtype(xp, [a for a, _ in typed], [n for _, n in typed])
        else:
            dtype = float_dtype(xp, [loc, matrix], ["loc", name])
        loc = xp.astype(loc, dtype) if loc.dtype != dtype else loc
        matrix = xp.astype(matrix, dtype) if matrix.dtype != dtype else matrix
        # the parameters as given, a number or a list as an array of `dtype`: the primals of
        # the gradients (`_vjp`), whose cotangents take their shapes
        loc_arg, matrix_arg = (
            a if given or a.dtype == dtype else xp.astype(a, dtype)
            for a, given in zip(args, given_as_arrays, strict=True)
        )
        self._setup(xp, name, loc, matrix, (loc_arg, matrix_arg), dtype)

    def _setup(
        self, xp: Any, name: str, loc: Array, matrix: Array, args: tuple[Any, Any], dtype: Any
    ) -> None:
        """The state of a distribution of `loc` and parameter `name` (arrays of `dtype` on one
        device), `args` the primals of the gradients; the checks and the factor."""
        self._xp = xp
        batch = parameter_batch(name, shape_of(loc), shape_of(matrix))
        self._d = int(matrix.shape[-1])
        self._batch_shape = batch
        self._dtype = dtype
        self._loc = xp.broadcast_to(loc, (*batch, self._d))
        self._given = (name, matrix)
        self._args = args
        self._linv_t: Array | None = None
        self._fused: tuple[Array, Array, Array | None] | None = None  # the CuPy kernels' layout
        self._dask = _compat.is_dask_array(matrix)
        # the factor with its own batch shape (lazy, computed and checked chunk by chunk, for Dask)
        self._loc, self._tril = dispatch(xp, _PARAMETERS, self, name, loc, matrix)

    # ---- construction -------------------------------------------------------------------

    def _parameters(self, name: str, loc: Array, matrix: Array) -> tuple[Array, Array]:
        """(loc broadcast to the batch, the lower factor L with L L^T = covariance), checked."""
        return self._loc, self._factor(name, loc, matrix)

    # ---- the fused CuPy kernels ----------------------------------------------------------

    def _fused_kernels(self) -> Any:
        """The fused-kernel engine (`_cupy`) when its kernels take this distribution (CuPy
        arrays of float32 or float64, 1 <= D <= 32), else None."""
        return dispatch(self._xp, _FUSED, self._dtype, self._d)

    def _fused_params(self, engine: Any) -> tuple[Array, Array, Array | None]:
        """The parameters laid out for the fused kernels (`_cupy.layout`), computed once."""
        fused = self._fused
        if fused is None:
            fused = self._fused = engine.layout(self._loc, self._tril, self._batch_shape)
        return fused

    # ---- densities, moments, sampling -------------------------------------------------------

    def _recorded(self, rule: str, *values: Any, **kwargs: Any) -> Any:
        """The method of `rule` (``"module:attribute"`` in this package: an array-level rule,
        primals ``loc``, the matrix and `values`) recorded by PyTorch's autograd, the primals the
        parameters as given and `values` as tensors; the rule's keywords are `kwargs`, the
        parameter's name (``parameter``) and `validate_args`. Under a JAX trace, differentiated
        by JAX through the rule instead (`_differentiated`), which then builds the distribution
        from its primals: a `dist` keyword is dropped (its arrays belong to the outer trace)."""
        values = tuple(
            v if is_array(v) else self._value(v, what, check_values=False)
            for v, what in zip(values, ("value", "lower_limit"), strict=False)
        )
        kwargs = {"parameter": self._given[0], "validate_args": self._validate, **kwargs}
        spec = f"{__package__}.{rule}"
        if _jax.handles(*self._args, *values, traced_only=True):
            kwargs.pop("dist", None)
            return _jax.apply(spec, (*self._args, *values), kwargs, compile=False)
        return _autograd.apply(spec, (*self._args, *values), kwargs)

    def log_prob(self, value: Any) -> Array:
        """Log density at `value`, shape ``broadcast(value.shape[:-1], batch_shape)``; a Dask
        `value` gives a lazy result computed chunk by chunk."""
        if compiling(value, *self._args):
            return untraced(MultivariateNormal.log_prob)(self, value)
        if _differentiated(*self._args, value):
            return self._recorded("_vjp:LOG_PROB_ARRAYS", value, dist=self)
        return dispatch(self._serving(value), _LOG_PROB, self, value)

    def _log_prob(self, value: Any) -> Array:
        xp = self._xp
        fused = self._fused_kernels()
        # NumPy's or JAX's engine of one distribution at many points (this package's `_numpy`
        # and `_jax` modules), where it takes it
        points = None if fused is not None else dispatch(xp, _POINTS, self._batch_shape, self._d)
        value = self._value(value, "value", check_values=fused is None and points is None)
        if fused is not None:
            params = functools.partial(self._fused_params, fused)
            out = fused.log_prob_of(value, params, self._batch_shape, self._validate)
            if out is not None:
                return out
        if points is not None:
            out = points(
                value, self._loc, self._inverse_factor_t(), self._half_log_det(), self._validate
            )
            if out is not None:
                return result(out)
        unchecked = fused is not None or points is not None  # the engine was to check them
        if unchecked and self._validate and not all_true(xp, xp.isfinite(value)):
            raise ValueError(bad_values("value", shape_of(value), False))
        diff = value - self._loc
        if self._d == 0 or math.prod(shape_of(diff)) == 0:
            maha = xp.sum(diff * diff, axis=-1)
        elif not self._batch_shape:
            # one distribution, many points: one matrix product with L^-T (what SciPy does),
            # not a solve per point; L^-T is computed once, by a triangular solve
            flat = xp.reshape(diff, (-1, self._d))
            z = xp.reshape(xp.matmul(flat, self._inverse_factor_t()), shape_of(diff))
            maha = xp.sum(z * z, axis=-1)
        else:
            z = solve_triangular(self._tril, diff[..., None], lower=True, xp=xp)[..., 0]
            maha = xp.sum(z * z, axis=-1)
        return result(-0.5 * (self._d * _LOG_2PI + maha) - self._half_log_det())

    def prob(self, value: Any) -> Array:
        """Density at `value` (lazy for a Dask `value`)."""
        if compiling(value, *self._args):
            return untraced(MultivariateNormal.prob)(self, value)
        if _differentiated(*self._args, value):
            return self._recorded("_vjp:PROB_ARRAYS", value, dist=self)
        return dispatch(self._serving(value), _PROB, self, value)

    def _prob(self, value: Any) -> Array:
        return result(self._xp.exp(self._log_prob(value)))

    def entropy(self) -> Array:
        """Differential entropy, shape ``batch_shape``."""
        if compiling(*self._args):
            return untraced(MultivariateNormal.entropy)(self)
        if _differentiated(*self._args):
            return self._recorded("_vjp:ENTROPY_ARRAYS", dist=self)
        xp = self._xp
        h = 0.5 * self._d * (1.0 + _LOG_2PI) + self._half_log_det()
        return result(xp.broadcast_to(xp.asarray(h, dtype=self._dtype), self._batch_shape))

    def rsample(self, shape: tuple[int, ...] | int = (), *, rng: Any = None) -> Array:
        """``loc + L eps``: shape ``shape + batch_shape + event_shape`` (differentiable in
        the parameters with PyTorch tensors)."""
        if compiling(*self._args):
            return untraced(MultivariateNormal.rsample)(self, shape, rng=rng)
        if _differentiated(*self._args):
            return self._recorded("_vjp:RSAMPLE_ARRAYS", shape=shape, rng=rng, dist=self)
        return dispatch(self._xp, _RSAMPLE, self, sample_shape(shape), rng)

    def _rsample(self, shape: tuple[int, ...], rng: Any) -> Array:
        return self._draw(shape, rng)[0]

    def _draw(self, shape: tuple[int, ...], rng: Any) -> tuple[Array, Array | None]:
        """``(loc + L eps, eps)`` of in-memory parameters; eps None where the fused CuPy
        kernels drew it (on the device, not kept)."""
        xp = self._xp
        engine = self._fused_kernels()
        points = math.prod(shape) * math.prod(self._batch_shape)
        if engine is not None and points:
            _random.check_cupy_rng(rng)
            loc, tril, _ = self._fused_params(engine)
            out = engine.sample(points, loc, tril, rng, self._dtype)
            return xp.reshape(out, (*shape, *self._batch_shape, self._d)), None
        full = (*shape, *self._batch_shape, self._d)
        device = _compat.device(self._tril)
        eps = dispatch(xp, _NORMAL, xp, full, self._dtype, device, rng)
        if not self._batch_shape and self._d and math.prod(shape_of(eps)):
            # one distribution: one matrix product eps L^T, not one per point
            flat = xp.reshape(eps, (-1, self._d))
            x = xp.matmul(flat, xp.matrix_transpose(self._tril))
            return self._loc + xp.reshape(x, shape_of(eps)), eps
        return self._loc + xp.matmul(self._tril, eps[..., None])[..., 0], eps

    def sample(
        self, shape: tuple[int, ...] | int = (), *, rng: Any = None, chunks: Any = None
    ) -> Array:
        """Draws of shape ``shape + batch_shape + event_shape``: the same draw as `rsample`.

        With `chunks` (Dask's chunks of the `shape` dimensions), a lazy Dask array whose chunks
        draw from independent streams spawned from `rng` (None or an int seed): the same seed
        and chunking give the same draws (other chunkings give other draws). For JAX arrays
        `rng` may be a ``jax.random`` key, and must be a key or an int seed under a trace (see
        the class's notes); for PyTorch tensors, a ``torch.Generator`` of their device (drawn
        from by ``torch.randn``).
        """
        if chunks is None:
            return self.rsample(shape, rng=rng)
        return _on_dask("sample", self, sample_shape(shape), rng, chunks)

    def kl_divergence(self, other: "MultivariateNormal") -> Array:
        """``KL(self || other)``, shape ``broadcast(self.batch_shape, other.batch_shape)``."""
        return kl_divergence(self, other)

    # ---- CDF ------------------------------------------------------------------------------


# ---- what the engines and the tables use ------------------------------------------------


def _no_kernels(*args: Any) -> None:
    """The engine of the kinds without fused kernels (`_FUSED`) or points engine
    (`_POINTS`): none."""


def _differentiated(*arrays: Any) -> bool:
    """Whether a method's call goes to its rule: PyTorch's autograd records it, or JAX traces
    it (`_jax.handles`: floating JAX arrays under ``jax.jit``, ``jax.grad``, ``jax.vmap``)."""
    return _autograd.recording(*arrays) or _jax.handles(*arrays, traced_only=True)


def _factor_of(name: str, m: Array, validate: bool) -> Array:
    """The lower factor of parameter `name` (a covariance, precision or scale matrix), checked
    as the constructor checks it (for a chunk of Dask parameters)."""
    return MultivariateNormal(0.0, validate_args=validate, **{name: m})._tril


def _of_factor(loc: Array, tril: Array, validate: bool) -> MultivariateNormal:
    """The distribution of a chunk's mean and factor: the factor is known good, and values are
    checked when `validate` is."""
    dist = MultivariateNormal(loc, scale_tril=tril, validate_args=False)
    dist._validate = validate
    return dist


def _batch_part(dist: MultivariateNormal, where: tuple[slice, ...]) -> MultivariateNormal:
    """The distribution of the batch slice `where` of `dist` (one slice a batch dimension),
    for a chunk of a Dask value. An unbatched one keeps the cached forms of its parameters."""
    xp, nb = dist._xp, len(dist._batch_shape)
    full = (*dist._batch_shape, dist._d)
    sub = copy.copy(dist)
    vars(sub).pop("_mirror_of", None)  # the parent's CuPy mirror (and its caches) is not the part's
    sub._loc = xp.broadcast_to(dist._loc, full)[where]
    sub._tril = xp.broadcast_to(dist._tril, (*full, dist._d))[where]
    sub._batch_shape = tuple(s.stop - s.start for s in where)
    sub._linv_t = None if nb else dist._linv_t
    sub._fused = None if nb else dist._fused
    return sub


def _chunk_method(dist: MultivariateNormal, name: str, arg: Any, kw: dict[str, Any]) -> Any:
    """`name` of the in-memory distribution of a chunk at `arg` (the chunk's values, the
    sample shape, or the other distribution of ``kl_divergence``): the in-memory code, whose
    value checks run as `validate_args` asks. cdf and logcdf go through their public methods,
    whose own checks read no data (the options)."""
    if name == "log_prob":
        return dist._log_prob(arg)
    if name == "prob":
        return dist._prob(arg)
    if name == "sample":
        return dist._rsample(arg, kw["rng"])
    if name == "kl_divergence":
        return _kl_in_memory(dist, arg, batch_of(dist.batch_shape, arg.batch_shape))
    return getattr(dist, name)(arg, **kw)


def _held_bytes(dist: MultivariateNormal) -> int:
    """The bytes of the arrays `dist` holds (its parameters and cached forms), each array
    once (the parameters as given are often the arrays it computes with)."""
    held = [v for v in vars(dist).values() if not isinstance(v, tuple)]
    held += [v for t in vars(dist).values() if isinstance(t, tuple) for v in t]
    unique = {id(v): v for v in held if hasattr(v, "shape")}
    return sum(int(getattr(v, "nbytes", 0)) for v in unique.values())


class ChunkTools(NamedTuple):
    """What the Dask engine's chunks need of this module (module-level functions: a task takes
    them by reference in the standard pickle). A distribution travels in a task as it pickles
    (`MultivariateNormal.__getstate__`)."""

    factor: Any  # (name, matrix, validate) -> the checked lower factor
    distribution: Any  # (loc, tril, validate) -> the distribution of a chunk's parameters
    batch_part: Any  # (dist, slices) -> the distribution of a slice of the batch
    method: Any  # (dist, name, arg, kw) -> a method of an in-memory distribution
    nbytes: Any  # (dist) -> the bytes of the arrays a distribution holds


_TOOLS = ChunkTools(_factor_of, _of_factor, _batch_part, _chunk_method, _held_bytes)


def _on_dask(name: str, dist: MultivariateNormal, /, *args: Any) -> Any:
    """The one hand-off to the Dask engine (imported on first use): `name` of `dist`, lazily,
    chunk by chunk; the Dask slot of every method's table, and `sample` with `chunks`."""
    return _DASK["dask"](name, dist, *args, tools=_TOOLS)


def _engines(in_memory: Any, lazy: str, torch: Any = None) -> Engines:
    """A method's table: its in-memory code for NumPy, CuPy (the fused kernels join where
    `_fused_kernels` finds them) and other libraries, the Dask engine's `lazy` for Dask arrays,
    and `torch` for PyTorch tensors (default: the in-memory code on the tensors)."""
    dask = functools.partial(_on_dask, lazy)
    engines = {"numpy": in_memory, "cupy": in_memory, "dask": dask, "generic": in_memory}
    if torch is not None:  # else the generic engine serves tensors, as for other namespaces
        engines["torch"] = torch
    return Engines(__package__, **engines)


# every lazy call goes to the Dask engine, whatever the parameters' library (`chunks`)
_DASK = Engines(
    __package__, numpy="._dask:run", cupy="._dask:run", dask="._dask:run", generic="._dask:run"
)
_PARAMETERS = _engines(MultivariateNormal._parameters, "parameters", parameters_of_tensors)
_LOG_PROB = _engines(
    MultivariateNormal._log_prob,
    "log_prob",
    on_cuda_tensors(MultivariateNormal._log_prob, log_prob_of_tensor),
)
_PROB = _engines(MultivariateNormal._prob, "prob", on_cuda_tensors(MultivariateNormal._prob))
_RSAMPLE = _engines(MultivariateNormal._rsample, "sample")
MultivariateNormal._cdf_engines = _engines(cdf_in_memory, "cdf")
# standard normals of `rsample` (the fused CuPy kernels draw their own)
_NORMAL = Engines(
    __package__,
    numpy=_random.normal_in_dtype,
    cupy="._cupy:standard_normal",
    dask=_random.normal_as_float64,
    generic=_random.normal_as_float64,
    torch=_random.normal_torch,
)
# the fused CuPy kernels, where they take the dtype and D
_FUSED = Engines(
    __package__, numpy=_no_kernels, cupy="._cupy:kernels_for", dask=_no_kernels, generic=_no_kernels
)
# NumPy's and JAX's log_prob of one distribution at many points, where they take the batch
# and D
_POINTS = Engines(
    __package__,
    numpy="._numpy:points_engine",
    cupy=_no_kernels,
    dask=_no_kernels,
    generic=_no_kernels,
    jax="._jax:points_engine",
)


# ---- KL divergence ----------------------------------------------------------------------


@register_kl(MultivariateNormal, MultivariateNormal)
def _kl_normal_normal(p: MultivariateNormal, q: MultivariateNormal) -> Array:
    if p._xp.__name__ != q._xp.__name__:
        msg = f"`p` and `q` must use one array library, got {p._xp.__name__} and {q._xp.__name__}"
        raise TypeError(msg)
    if p._d != q._d:
        msg = f"`p` and `q` must have the same event size, got {p.event_shape} and {q.event_shape}"
        raise ValueError(msg)
    try:
        batch = batch_of(p.batch_shape, q.batch_shape)
    except ValueError:
        msg = f"the batch shapes {p.batch_shape} and {q.batch_shape} do not broadcast"
        raise ValueError(msg) from None
    spec = f"{__package__}._vjp:KL_DIVERGENCE_ARRAYS"
    if _autograd.recording(*p._args, *q._args):
        kwargs = {"parameters": (p._given[0], q._given[0]), "dists": (p, q)}
        return _autograd.apply(spec, (*p._args, *q._args), kwargs)
    if _jax.handles(*p._args, *q._args, traced_only=True):
        # the rule builds both distributions from its primals (their arrays here belong to the
        # outer trace)
        validate = p._validate and q._validate
        options: dict[str, Any] = {
            "parameters": (p._given[0], q._given[0]),
            "validate_args": validate,
        }
        return _jax.apply(spec, (*p._args, *q._args), options, compile=False)
    return dispatch(p._xp, _KL, p, q, batch)


def _kl_in_memory(p: MultivariateNormal, q: MultivariateNormal, batch: tuple[int, ...]) -> Array:
    xp = p._xp
    dtype = xp.result_type(p._dtype, q._dtype)
    return result(normal_kl(xp, p._loc, p._tril, q._loc, q._tril, batch, dtype))


_KL = _engines(_kl_in_memory, "kl_divergence")
