"""MultivariateNormal: batched parameters, validated, moments, sampling, densities, KL, CDF."""

import copy
import importlib
import math
import numbers
import types
from typing import Any

import numpy as np

from .. import _backend
from .._lib import _compat
from .._lib._dtypes import default_float, is_dtype
from .._lib._typing import Array, Namespace
from .._lib._validation import as_bool
from ..linalg._triangular import solve_triangular

__all__ = ["MultivariateNormal", "kl_divergence"]

_LOG_2PI = math.log(2 * math.pi)
_PARAMS = ("covariance_matrix", "precision_matrix", "scale_tril")


def _is_array(a: Any) -> bool:
    return a is not None and _compat.is_array_api_obj(a)


def _namespace(loc: Any, matrix: Any) -> Namespace:
    arrays = [a for a in (loc, matrix) if _is_array(a)]
    return _backend.get_namespace(*arrays)


def _float_dtype(xp: Namespace, arrays: list[Array]) -> Any:
    """The floating dtype the parameters are computed in (integers and bools: the default)."""
    dtypes = []
    for a in arrays:
        if is_dtype(xp, a.dtype, "real floating"):
            dtypes.append(a.dtype)
        elif is_dtype(xp, a.dtype, ("integral", "bool")):
            dtypes.append(default_float(xp, a))
        else:
            msg = f"the parameters must be real numbers, got dtype {a.dtype}"
            raise TypeError(msg)
    return xp.result_type(*dtypes)


def _shape(a: Array) -> tuple[int, ...]:
    return tuple(int(s) for s in a.shape)


def _batch(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(np.broadcast_shapes(*shapes))


def _bad_values(what: str, shape: tuple[int, ...], allow_inf: bool) -> str:
    if allow_inf:
        return f"`{what}` must be free of NaN, got shape {shape} with NaN values"
    return f"`{what}` must be finite, got shape {shape} with non-finite values"


def _all(xp: Namespace, condition: Array) -> bool:
    return bool(xp.all(condition))


# Parameters up to this size go into every chunk's task (see `_graph_input`).
_EMBED_BYTES = 64 * 1024


def _graph_input(dist: "MultivariateNormal") -> Any:
    """`dist` as an input of a Dask graph. Small parameters (a few matrices): an argument of
    every chunk's task (`_Carried`), so that the chunks wait for nothing (a task of its own
    ahead of them is one more scheduler round trip: one worker's log_prob of 2^30 points in
    D = 16 on an H100 took 51.5 ms with it, 43.8 without). Larger ones: a key of its own that
    each worker fetches once, not a constant serialized for every task."""
    import dask

    state = vars(dist).values()
    arrays = [v for v in state if hasattr(v, "nbytes")]
    arrays += [v for t in state if isinstance(t, tuple) for v in t if hasattr(v, "nbytes")]
    if sum(a.nbytes for a in arrays) <= _EMBED_BYTES:
        return _Carried(dist)
    return dask.delayed(dist, pure=False, traverse=False)


class _Carried:
    """A small distribution inside every chunk's task. In this process `arrive` gives the
    distribution itself. Pickled (for a cluster), it is made for the standard pickle: the
    array namespace travels by name (a module sent every task through Distributed's
    cloudpickle fallback: 43 us a task against 14 on the CPU VM, and on an H100 host the
    first of 8 tasks started 5 ms after the scheduler sent them), CuPy arrays as NumPy copies
    (pickling and unpickling the arrays of a D = 16 distribution took 250 us as CuPy arrays,
    85 us as NumPy copies; and the scheduler, which unpickles the graph, needs no GPU), which
    `arrive` puts on the current device of the worker that runs the task."""

    def __init__(self, dist: "MultivariateNormal") -> None:
        self.dist: MultivariateNormal | None = dist
        self.state: dict[str, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        def host(v: Any) -> Any:
            if isinstance(v, tuple):
                return tuple(host(e) for e in v)
            if isinstance(v, types.ModuleType):
                return _Module(v.__name__)
            return _OnHost(v.get()) if _compat.is_cupy_array(v) else v

        if self.dist is None:
            return {"dist": None, "state": self.state}
        return {"dist": None, "state": {k: host(v) for k, v in vars(self.dist).items()}}

    def arrive(self) -> "MultivariateNormal":
        if self.dist is not None:
            return self.dist

        def device(v: Any) -> Any:
            if isinstance(v, tuple):
                return tuple(device(e) for e in v)
            if isinstance(v, _Module):
                return importlib.import_module(v.name)
            if isinstance(v, _OnHost):
                import cupy

                return cupy.asarray(v.array)
            return v

        dist = MultivariateNormal.__new__(MultivariateNormal)
        vars(dist).update({k: device(v) for k, v in self.state.items()})
        return dist


class _OnHost:
    """A NumPy copy of a CuPy array (`_Carried`)."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array


class _Module:
    """A module by name (`_Carried`)."""

    def __init__(self, name: str) -> None:
        self.name = name


def _arrived(dist: Any) -> "MultivariateNormal":
    return dist.arrive() if isinstance(dist, _Carried) else dist


def _dask_chunk(
    block: Any,
    dist: "MultivariateNormal",
    where: tuple[slice, ...],
    method: str,
    out_axis: int,
    kw: dict[str, Any],
) -> Any:
    """`method` of one chunk of a Dask value (`_over_dask`): `where` holds the block's slices of
    the value's batch dimensions, the last ``len(dist.batch_shape)`` of them the
    distribution's. A module-level function: a closure would be pickled into every task."""
    from .._dask.distributions import single

    dist = _arrived(dist)
    xp, nb = dist._xp, len(dist._batch_shape)
    full = (*dist._batch_shape, dist._d)
    sl = where[len(where) - nb :]
    sub = copy.copy(dist)
    sub._loc = xp.broadcast_to(dist._loc, full)[sl]
    sub._tril = xp.broadcast_to(dist._tril, (*full, dist._d))[sl]
    sub._batch_shape = tuple(s.stop - s.start for s in sl)
    # unbatched: the chunk's parameters are the distribution's, and so are its cached forms
    sub._linv_t = None if nb else dist._linv_t
    sub._fused = None if nb else dist._fused
    out = getattr(sub, method)(single(block), **kw)
    return xp.stack(out, axis=-1) if out_axis else out


def _draw_chunk(sampler: Any, entropy: int, blocks: list[int], block_info: Any = None) -> Any:
    """One chunk of `sample` with chunks: its own stream, from `entropy` and the chunk's index
    among `blocks` chunks a sample dimension. A module-level function: a closure would be
    pickled into every task."""
    where = block_info[None]["chunk-location"][: len(blocks)]
    index = int(np.ravel_multi_index(where, blocks)) if blocks else 0
    child = np.random.SeedSequence(entropy, spawn_key=(index,))  # not a list per task
    size = block_info[None]["chunk-shape"][: len(blocks)]
    seed = int(child.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))
    return _arrived(sampler).rsample(tuple(size), rng=seed)


class MultivariateNormal:
    r"""Multivariate normal distributions, batched over their parameters.

    ``X ~ N(loc, Σ)`` with ``Σ`` given as a covariance matrix, a precision matrix ``Σ^{-1}``
    or the lower Cholesky factor ``L`` of ``Σ = L L^T`` (exactly one of them). Parameters
    broadcast: ``batch_shape`` is the broadcast of ``loc.shape[:-1]`` and the matrix's
    ``shape[:-2]``, ``event_shape`` is ``(D,)``.

    Parameters
    ----------
    loc : array or array-like, shape (..., D)
        The means. Python scalars and lists are converted in the matrix's namespace (or the
        default one, see ``XPOPS_BACKEND``).
    covariance_matrix, precision_matrix, scale_tril : array, shape (..., D, D)
        Exactly one: symmetric positive definite covariances or precisions, or lower-triangular
        factors with a positive diagonal.
    validate_args : bool, optional
        If True (the default), check the parameters (and the values given to `log_prob`,
        `prob`, `cdf` and `logcdf`) and raise ``ValueError`` naming the parameter, its shape and
        the constraint. Checks read data back from the device; False skips every check.

    Raises
    ------
    ValueError
        If not exactly one matrix is given, shapes are inconsistent, or (with `validate_args`)
        a constraint is violated: a covariance or precision matrix that is not symmetric or not
        positive definite, a `scale_tril` with anything above the diagonal or a non-positive
        diagonal, non-finite `loc`.
    TypeError
        For complex or non-numeric parameters, or parameters of two array libraries.

    Notes
    -----
    One lower factor ``L`` is computed when the distribution is built (a Cholesky
    factorization of the covariance, or of the precision through the reversal identity) and
    every method works from it: ``log_prob`` solves ``L z = x - loc`` with the shared
    triangular solve of :func:`xpops.linalg.cholesky_solve`, ``sample`` is ``loc + L eps``.
    The other parametrizations are computed lazily on first access.

    On CuPy, ``log_prob``/``prob`` and ``sample``/``rsample`` run fused kernels for
    D <= 32 (float32, float64): one pass over the points, the normals drawn in the kernel.

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
        if not _is_array(matrix):
            msg = f"`{name}` must be an array, got {type(matrix).__name__}"
            raise TypeError(msg)
        xp = _namespace(loc, matrix)
        self._xp = xp
        device = _compat.device(matrix)
        if not _is_array(loc):
            if not isinstance(loc, numbers.Real | list | tuple) or isinstance(loc, bool):
                msg = f"`loc` must be an array, a number or a list of numbers, got {type(loc)}"
                raise TypeError(msg)
            if isinstance(loc, numbers.Real) and len(matrix.shape) >= 1:
                loc = [float(loc)] * int(matrix.shape[-1])  # one mean for every coordinate
            loc = xp.asarray(loc, device=device)
        dtype = _float_dtype(xp, [loc, matrix])
        loc = xp.astype(loc, dtype) if loc.dtype != dtype else loc
        matrix = xp.astype(matrix, dtype) if matrix.dtype != dtype else matrix
        ls, ms = _shape(loc), _shape(matrix)
        if len(ms) < 2 or ms[-1] != ms[-2]:
            msg = f"`{name}` must have shape (*, D, D), got {ms}"
            raise ValueError(msg)
        if len(ls) < 1:
            msg = f"`loc` must have at least one dimension, shape (*, D), got {ls}"
            raise ValueError(msg)
        if ls[-1] != ms[-1]:
            msg = (
                f"`loc` and `{name}` must agree on D (loc.shape[-1] == {name}.shape[-1]), got "
                f"shapes {ls} and {ms}"
            )
            raise ValueError(msg)
        try:
            batch = _batch(ls[:-1], ms[:-2])
        except ValueError:
            msg = f"the batch shapes {ls[:-1]} of `loc` and {ms[:-2]} of `{name}` do not broadcast"
            raise ValueError(msg) from None
        self._d = ms[-1]
        self._batch_shape = batch
        self._dtype = dtype
        self._loc = xp.broadcast_to(loc, (*batch, self._d))
        self._given = (name, matrix)
        self._linv_t: Array | None = None
        self._fused: tuple[Array, Array, Array] | None = None  # CuPy kernels' parameter layout
        self._dask = _compat.is_dask_array(matrix)
        if self._dask:  # lazy: the factor and the checks run chunk by chunk
            from .._dask import distributions as engine

            lazy = engine.parameters(name, self._loc, matrix, batch, self._validate)
            self._loc, self._tril = lazy
            return
        if self._validate:
            if not _all(xp, xp.isfinite(loc)):
                msg = f"`loc` must be finite, got shape {ls} with non-finite values"
                raise ValueError(msg)
            self._check_matrix(name, matrix)
        self._tril = self._factor(name, matrix)  # L with L L^T = covariance, own batch shape
        if self._validate and name != "scale_tril":
            self._check_factor(name, matrix)

    # ---- construction -------------------------------------------------------------------

    def _check_matrix(self, name: str, m: Array) -> None:
        xp = self._xp
        if not _all(xp, xp.isfinite(m)):
            msg = f"`{name}` must be finite, got shape {_shape(m)} with non-finite values"
            raise ValueError(msg)
        if name == "scale_tril":
            if not _all(xp, xp.triu(m, k=1) == 0):
                msg = (
                    f"`scale_tril` must be lower triangular (zero above the diagonal), got shape "
                    f"{_shape(m)} with nonzero entries above the diagonal"
                )
                raise ValueError(msg)
            if not _all(xp, xp.linalg.diagonal(m) > 0):
                msg = (
                    f"`scale_tril` must have a positive diagonal, got shape {_shape(m)} with a "
                    "diagonal entry <= 0"
                )
                raise ValueError(msg)
            return
        mt = xp.matrix_transpose(m)
        eps = float(xp.finfo(self._dtype).eps)
        if math.prod(_shape(m)) == 0:
            return
        scale = xp.max(xp.abs(m), axis=(-2, -1), keepdims=True)
        if not _all(xp, xp.abs(m - mt) <= 64 * eps * scale):
            msg = f"`{name}` must be symmetric, got shape {_shape(m)} with m != m.T"
            raise ValueError(msg)

    def _check_factor(self, name: str, m: Array) -> None:
        xp = self._xp
        diag = xp.linalg.diagonal(self._tril)
        if not _all(xp, xp.isfinite(diag) & (diag > 0)):
            msg = f"`{name}` must be positive definite, got shape {_shape(m)} that is not"
            raise ValueError(msg)

    def _cholesky(self, name: str, m: Array) -> Array:
        xp = self._xp
        if m.shape[-1] == 0:
            return m
        try:
            return xp.linalg.cholesky(m)
        except Exception as exc:  # numpy/torch raise LinAlgError on a non-PD matrix
            if self._validate or "LinAlgError" in type(exc).__name__:
                msg = f"`{name}` must be positive definite, got shape {_shape(m)} that is not"
                raise ValueError(msg) from None
            raise

    def _factor(self, name: str, m: Array) -> Array:
        xp = self._xp
        if name == "scale_tril":
            return xp.tril(m)
        if name == "covariance_matrix":
            return self._cholesky(name, m)
        # precision P = U U^T with U = flip(chol(flip(P))) upper triangular; then
        # covariance = U^-T U^-1, whose lower factor is U^-T (lower triangular)
        d = m.shape[-1]
        if d == 0:
            return m
        flipped = xp.flip(xp.flip(m, axis=-1), axis=-2)
        lf = self._cholesky(name, flipped)
        u = xp.flip(xp.flip(lf, axis=-1), axis=-2)  # upper triangular, P = u u^T
        eye = xp.broadcast_to(xp.eye(d, dtype=self._dtype, device=_compat.device(m)), u.shape)
        # L = u^-T: solve u^T L = I
        return xp.tril(solve_triangular(u, eye, lower=False, conjugate_transpose=True, xp=xp))

    # ---- properties -----------------------------------------------------------------------

    @property
    def batch_shape(self) -> tuple[int, ...]:
        return self._batch_shape

    @property
    def event_shape(self) -> tuple[int, ...]:
        return (self._d,)

    @property
    def loc(self) -> Array:
        return self._loc

    @property
    def mean(self) -> Array:
        return self._loc

    @property
    def mode(self) -> Array:
        return self._loc

    @property
    def scale_tril(self) -> Array:
        return self._xp.broadcast_to(self._tril, (*self._batch_shape, self._d, self._d))

    @property
    def covariance_matrix(self) -> Array:
        xp = self._xp
        name, m = self._given
        if name != "covariance_matrix":
            m = xp.matmul(self._tril, xp.matrix_transpose(self._tril))
        return xp.broadcast_to(m, (*self._batch_shape, self._d, self._d))

    @property
    def precision_matrix(self) -> Array:
        xp = self._xp
        name, m = self._given
        if name != "precision_matrix":
            from ..linalg import cholesky_solve

            eye = xp.eye(self._d, dtype=self._dtype, device=_compat.device(self._tril))
            m = cholesky_solve(xp.broadcast_to(eye, self._tril.shape), self._tril)
        return xp.broadcast_to(m, (*self._batch_shape, self._d, self._d))

    @property
    def variance(self) -> Array:
        xp = self._xp
        v = xp.sum(self._tril * self._tril, axis=-1)
        return xp.broadcast_to(v, (*self._batch_shape, self._d))

    @property
    def stddev(self) -> Array:
        return self._xp.sqrt(self.variance)

    def __repr__(self) -> str:
        return (
            f"MultivariateNormal(batch_shape={self._batch_shape}, event_shape=({self._d},), "
            f"dtype={self._dtype})"
        )

    # ---- helpers --------------------------------------------------------------------------

    def _inverse_factor_t(self) -> Array:
        """``L^-T`` of an unbatched distribution, computed once."""
        if self._linv_t is None:
            xp = self._xp
            eye = xp.eye(self._d, dtype=self._dtype, device=_compat.device(self._tril))
            linv = solve_triangular(self._tril, eye, lower=True, xp=xp)
            self._linv_t = xp.matrix_transpose(linv)
        return self._linv_t

    def _half_log_det(self) -> Array:
        xp = self._xp
        return xp.sum(xp.log(xp.linalg.diagonal(self._tril)), axis=-1)

    def _value(
        self, value: Any, what: str, *, allow_inf: bool = False, check_values: bool = True
    ) -> Array:
        xp = self._xp
        if not _is_array(value):
            value = xp.asarray(value, dtype=self._dtype, device=_compat.device(self._tril))
        elif _backend.get_namespace(value).__name__ != xp.__name__:
            msg = f"`{what}` must be an array of the distribution's library, got {type(value)}"
            raise TypeError(msg)
        vs = _shape(value)
        if len(vs) < 1 or vs[-1] != self._d:
            msg = f"`{what}` must have shape (*, {self._d}) (the event shape), got {vs}"
            raise ValueError(msg)
        try:
            _batch(vs[:-1], self._batch_shape)
        except ValueError:
            msg = (
                f"`{what}` of shape {vs} does not broadcast against batch_shape {self._batch_shape}"
            )
            raise ValueError(msg) from None
        if value.dtype != self._dtype:
            value = xp.astype(value, self._dtype)
        if self._validate and check_values:
            ok = ~xp.isnan(value) if allow_inf else xp.isfinite(value)
            if not _all(xp, ok):
                raise ValueError(_bad_values(what, vs, allow_inf))
        return value

    # ---- Dask values ----------------------------------------------------------------------

    def _over_dask(self, value: Any, method: str, out_axis: int = 0, **kw: Any) -> Any:
        """`method` chunk by chunk over a Dask `value` (NumPy or CuPy chunks): each chunk meets
        the slice of the parameters its batch dimensions cover. Checks run when a chunk is
        computed. `out_axis` > 0: the method returns that many stacked results (cdf with
        return_error)."""
        import dask.array as da

        vs = tuple(int(s) for s in value.shape)
        if len(vs) < 1 or vs[-1] != self._d:
            msg = f"`value` must have shape (*, {self._d}) (the event shape), got {vs}"
            raise ValueError(msg)
        try:
            batch = _batch(vs[:-1], self._batch_shape)
        except ValueError:
            msg = (
                f"`value` of shape {vs} does not broadcast against batch_shape {self._batch_shape}"
            )
            raise ValueError(msg) from None
        v = da.broadcast_to(value, (*batch, self._d)).rechunk({len(batch): -1})
        from dask.layers import ArraySliceDep

        dist = _graph_input(self)
        lead = tuple(range(len(batch)))  # blockwise indices of the batch dimensions
        ind = (*lead, len(batch))  # and of the event dimension
        options = {"method": method, "out_axis": out_axis, "kw": kw}
        if out_axis:
            out = da.blockwise(
                _dask_chunk, ind, v, ind, dist, None, ArraySliceDep(v.chunks[:-1]), lead,
                dtype=self._dtype, adjust_chunks={len(batch): out_axis}, meta=v._meta,
                align_arrays=False, **options,  # align_arrays: as map_blocks with a BlockwiseDep
            )  # fmt: skip
            return tuple(out[..., i] for i in range(out_axis))
        # concatenate=False: the block as it is, not a copy (see `_dask.distributions.single`)
        return da.blockwise(
            _dask_chunk, lead, v, ind, dist, None, ArraySliceDep(v.chunks[:-1]), lead,
            dtype=self._dtype, concatenate=False, meta=v._meta.sum(axis=-1), align_arrays=False,
            **options,
        )  # fmt: skip

    # ---- densities, moments, sampling -------------------------------------------------------

    def log_prob(self, value: Any) -> Array:
        """Log density at `value`, shape ``broadcast(value.shape[:-1], batch_shape)``; a Dask
        `value` gives a lazy result computed chunk by chunk."""
        if self._dask:
            return self._dask_engine().method(self, value, "log_prob")
        if _compat.is_dask_array(value):
            return self._over_dask(value, "log_prob")
        xp = self._xp
        fused = self._fused_kernels()
        value = self._value(value, "value", check_values=fused is None)
        if fused is not None:
            out = self._fused_log_prob(fused, value)
            if out is not None:
                return out
            if self._validate and not _all(xp, xp.isfinite(value)):
                raise ValueError(_bad_values("value", _shape(value), False))
        diff = value - self._loc
        if self._d == 0 or math.prod(_shape(diff)) == 0:
            maha = xp.sum(diff * diff, axis=-1)
        elif not self._batch_shape:
            # one distribution, many points: one matrix product with L^-T (what SciPy does),
            # not a solve per point; L^-T is computed once, by a triangular solve
            flat = xp.reshape(diff, (-1, self._d))
            z = xp.reshape(xp.matmul(flat, self._inverse_factor_t()), _shape(diff))
            maha = xp.sum(z * z, axis=-1)
        else:
            z = solve_triangular(self._tril, diff[..., None], lower=True, xp=xp)[..., 0]
            maha = xp.sum(z * z, axis=-1)
        return -0.5 * (self._d * _LOG_2PI + maha) - self._half_log_det()

    def _dask_engine(self) -> Any:
        from .._dask import distributions as engine

        return engine

    def _fused_kernels(self) -> Any:
        """The CuPy engine module when its fused kernels take this distribution, else None."""
        if not _backend.is_cupy_namespace(self._xp):
            return None
        from .._cupy import distributions as engine

        return engine if engine.supported(self._dtype, self._d) else None

    def _fused_params(self, engine: Any) -> tuple[Array, Array, Array]:
        """(loc rows, factors, half log-determinants) laid out for the fused kernels: point o
        of a flat (points..., *batch_shape) layout meets row o % len(loc rows) and factor
        o % len(factors)."""
        if self._fused is None:
            import cupy

            d, batch = self._d, self._batch_shape
            size = math.prod(batch)
            if all(st == 0 for st in self._loc.strides[:-1]):  # one mean, broadcast
                loc = cupy.reshape(self._loc[(0,) * len(batch)], (1, d))
            else:
                loc = cupy.reshape(self._loc, (size, d))
            rows = engine.points_layout(batch, _shape(self._tril)[:-2])
            tril = self._tril if rows else cupy.broadcast_to(self._tril, (*batch, d, d))
            tril = cupy.ascontiguousarray(cupy.reshape(tril, (rows or size, d, d)))
            half = cupy.sum(cupy.log(cupy.diagonal(tril, axis1=-2, axis2=-1)), axis=-1)
            self._fused = (cupy.ascontiguousarray(loc), tril, half)
        return self._fused

    def _fused_log_prob(self, engine: Any, value: Array) -> Array | None:
        """log_prob by the fused CuPy kernel, or None where the layout does not suit it (a
        broadcast `value`, a batch that is not the trailing part of the output, no points)."""
        vs = _shape(value)
        out_batch = _batch(vs[:-1], self._batch_shape)
        nb = len(self._batch_shape)
        if (
            out_batch != vs[:-1]
            or (nb and out_batch[-nb:] != self._batch_shape)
            or math.prod(out_batch) == 0
        ):
            return None
        loc, tril, half = self._fused_params(engine)
        flat = value.reshape(-1, self._d)
        if not flat.flags.c_contiguous:
            flat = flat.copy()
        out, flag = engine.log_prob(flat, loc, tril, half, check=self._validate)
        if flag is not None and int(flag):
            raise ValueError(_bad_values("value", vs, False))
        return out.reshape(out_batch)

    def prob(self, value: Any) -> Array:
        """Density at `value` (lazy for a Dask `value`)."""
        if self._dask:
            return self._dask_engine().method(self, value, "prob")
        if _compat.is_dask_array(value):
            return self._over_dask(value, "prob")
        return self._xp.exp(self.log_prob(value))

    def entropy(self) -> Array:
        """Differential entropy, shape ``batch_shape``."""
        xp = self._xp
        h = 0.5 * self._d * (1.0 + _LOG_2PI) + self._half_log_det()
        return xp.broadcast_to(xp.asarray(h, dtype=self._dtype), self._batch_shape)

    def _normal(self, shape: tuple[int, ...], rng: Any) -> Array:
        xp = self._xp
        full = (*shape, *self._batch_shape, self._d)
        if _backend.is_cupy_namespace(xp):
            import cupy

            _check_cupy_rng(rng)
            gen = rng if isinstance(rng, cupy.random.Generator) else cupy.random.default_rng(rng)
            return gen.standard_normal(full, dtype=self._dtype)
        if rng is not None and not isinstance(rng, numbers.Integral | np.random.Generator):
            msg = (
                "`rng` must be None, an int seed or a numpy.random.Generator, got "
                f"{type(rng).__module__}.{type(rng).__name__}"
            )
            raise TypeError(msg)
        gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)  # type: ignore[arg-type]
        if _backend.is_numpy_namespace(xp):  # NumPy draws float32 directly (faster)
            return gen.standard_normal(full, dtype=np.dtype(self._dtype).type)
        eps = gen.standard_normal(full)
        return xp.asarray(eps, dtype=self._dtype, device=_compat.device(self._tril))

    def rsample(self, shape: tuple[int, ...] | int = (), *, rng: Any = None) -> Array:
        """``loc + L eps``: shape ``shape + batch_shape + event_shape`` (differentiable in
        the parameters with PyTorch tensors)."""
        shape = (int(shape),) if isinstance(shape, numbers.Integral) else tuple(shape)  # type: ignore[arg-type]
        if self._dask:
            return self._sample_dask(shape, rng, None)
        xp = self._xp
        engine = self._fused_kernels()
        points = math.prod(shape) * math.prod(self._batch_shape)
        if engine is not None and points:
            _check_cupy_rng(rng)
            loc, tril, _ = self._fused_params(engine)
            out = engine.sample(points, loc, tril, rng, self._dtype)
            return xp.reshape(out, (*shape, *self._batch_shape, self._d))
        eps = self._normal(shape, rng)
        if not self._batch_shape and self._d and math.prod(_shape(eps)):
            # one distribution: one matrix product eps L^T, not one per point
            flat = xp.reshape(eps, (-1, self._d))
            x = xp.matmul(flat, xp.matrix_transpose(self._tril))
            return self._loc + xp.reshape(x, _shape(eps))
        return self._loc + xp.matmul(self._tril, eps[..., None])[..., 0]

    def sample(
        self, shape: tuple[int, ...] | int = (), *, rng: Any = None, chunks: Any = None
    ) -> Array:
        """Draws of shape ``shape + batch_shape + event_shape``: the same draw as `rsample`.

        With `chunks` (Dask's chunks of the `shape` dimensions), a lazy Dask array whose chunks
        draw from independent streams spawned from `rng` (None or an int seed): the same seed
        and chunking give the same draws (other chunkings give other draws).
        """
        if chunks is not None or self._dask:
            return self._sample_dask(shape, rng, chunks)
        return self.rsample(shape, rng=rng)

    def _sample_dask(self, shape: Any, rng: Any, chunks: Any) -> Any:
        import dask.array as da

        shape = (int(shape),) if isinstance(shape, numbers.Integral) else tuple(shape)
        xp = self._xp
        if self._dask:
            _check_seed(rng, "with Dask parameters")
            return self._dask_engine().sample(self, shape, rng, chunks)
        if not (_backend.is_numpy_namespace(xp) or _backend.is_cupy_namespace(xp)):
            msg = (
                f"`chunks` needs NumPy or CuPy parameters (the chunks' library), got {xp.__name__}"
            )
            raise NotImplementedError(msg)
        _check_seed(rng, "with `chunks`")
        sample_chunks = da.core.normalize_chunks(chunks, shape) if shape else ()
        tail = (*self._batch_shape, self._d)
        full_chunks = (*sample_chunks, *((n,) for n in tail))
        blocks = [len(c) for c in sample_chunks]
        entropy = np.random.SeedSequence(None if rng is None else int(rng)).entropy
        meta = xp.empty((0,) * len(full_chunks), dtype=self._dtype)
        sampler = _graph_input(copy.copy(self))
        return da.map_blocks(
            _draw_chunk, sampler, entropy=entropy, blocks=blocks, dtype=self._dtype,
            chunks=full_chunks, meta=meta,
        )  # fmt: skip

    def kl_divergence(self, other: "MultivariateNormal") -> Array:
        """``KL(self || other)``, shape ``broadcast(self.batch_shape, other.batch_shape)``."""
        return kl_divergence(self, other)

    # ---- CDF ------------------------------------------------------------------------------

    def _cdf_cupy(self, value: Any, lower_limit: Any, options: dict[str, Any], log: bool) -> Any:
        """cdf/logcdf of CuPy arrays: computed on their GPU (xpops._cupy.mvn_cdf)."""
        from .._cupy import mvn_cdf as engine

        xp = self._xp
        return_error = options.pop("return_error")
        upper = self._value(value, "value", allow_inf=True)
        batch = _batch(upper.shape[:-1], self._batch_shape)
        if lower_limit is not None:
            lower = self._value(lower_limit, "lower_limit", allow_inf=True)
            batch = _batch(batch, lower.shape[:-1])
        with self._tril.device:  # the engine computes in float64 on the parameters' GPU
            loc = xp.astype(self._loc, xp.float64)
            b = xp.astype(upper, xp.float64) - loc
            a = xp.full_like(b, -math.inf) if lower_limit is None else lower - loc
            out, err = engine.mvn_cdf(a, b, self._tril, log=log, **options)
            result = tuple(xp.astype(xp.reshape(r, batch), self._dtype) for r in (out, err))
        return result if return_error else result[0]

    def _cdf(self, value: Any, lower_limit: Any, options: dict[str, Any], log: bool) -> Any:
        xp = self._xp
        if _backend.is_cupy_namespace(xp):
            return self._cdf_cupy(value, lower_limit, options, log)
        device = _compat.device(self._tril)
        numpy = _backend.is_numpy_namespace(xp)
        if not numpy and "cpu" not in str(device).lower():
            msg = (
                "cdf and logcdf run on the CPU or, for CuPy arrays, on the GPU in this version, "
                f"got {xp.__name__} arrays on {device}"
            )
            raise NotImplementedError(msg)
        from .._numpy import mvn_cdf

        def host(a: Array) -> np.ndarray:  # CPU arrays of other libraries: no device transfer
            if numpy:
                return a
            detach = getattr(a, "detach", None)  # a torch tensor that requires grad
            return np.from_dlpack(detach() if detach is not None else a)

        return_error = options.pop("return_error")
        upper = host(self._value(value, "value", allow_inf=True))
        if lower_limit is None:
            lower = np.full_like(upper, -np.inf)
        else:
            lower = host(self._value(lower_limit, "lower_limit", allow_inf=True))
        batch = _batch(upper.shape[:-1], lower.shape[:-1], self._batch_shape)
        loc = np.broadcast_to(host(self._loc), (*batch, self._d)).astype(np.float64)
        a = np.broadcast_to(lower, (*batch, self._d)) - loc
        b = np.broadcast_to(upper, (*batch, self._d)) - loc
        tril = np.broadcast_to(host(self._tril), (*batch, self._d, self._d)).astype(np.float64)
        if self._d == 0:
            out, err = (np.zeros(batch) if log else np.ones(batch)), np.zeros(batch)
        else:  # D = 1 and 2 deterministic inside, D >= 3 quasi-Monte-Carlo
            out, err = mvn_cdf.mvn_cdf(a, b, tril, log=log, **options)
        out, err = np.reshape(out, batch), np.reshape(err, batch)
        result = (out, err) if return_error else (out,)
        if numpy:
            converted = tuple(np.asarray(r, dtype=np.dtype(self._dtype)) for r in result)
        else:
            converted = tuple(
                xp.asarray(np.array(r, dtype=np.float64), dtype=self._dtype, device=device)
                for r in result
            )
        return converted if return_error else converted[0]

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

        D = 1 and 2 are deterministic (D = 1 exact, reported error 0; D = 2 accurate to about
        1e-14, reported error 1e-14); D >= 3 uses Genz's randomized quasi-Monte-Carlo method,
        stopping when its error estimate is within ``max(abseps, releps * |cdf|)`` or after
        `maxpts` points (default ``1_000_000 * D``); the same `rng` (None, an int seed, or a
        ``numpy.random.Generator`` for CPU arrays and a ``cupy.random.Generator`` for CuPy
        arrays) gives the same result. CuPy arrays are computed on their GPU. `return_error`
        returns ``(cdf, error_estimate)``. A Dask `value` gives lazy results, chunk by chunk.
        """
        options = self._cdf_options(abseps, releps, maxpts, rng, return_error)
        if self._dask or _compat.is_dask_array(value):
            return self._cdf_dask(value, lower_limit, options, log=False)
        return self._cdf(value, lower_limit, options, log=False)

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
        """``log P(lower_limit < X <= value)``, computed in log space so that far tails stay
        finite (``logcdf(-40)`` of a standard normal is about -804.608). The keywords are those
        of `cdf`, but `abseps`, `releps` and the error estimate apply to the log (so `abseps`
        bounds the relative error of the probability)."""
        options = self._cdf_options(abseps, releps, maxpts, rng, return_error)
        if self._dask or _compat.is_dask_array(value):
            return self._cdf_dask(value, lower_limit, options, log=True)
        return self._cdf(value, lower_limit, options, log=True)

    def _cdf_dask(self, value: Any, lower_limit: Any, options: dict[str, Any], log: bool) -> Any:
        """cdf/logcdf over the chunks of a Dask `value` (`lower_limit` in memory or None; an
        int seed is used as is in every chunk, so a chunking gives one result)."""
        if lower_limit is not None and (
            _compat.is_dask_array(lower_limit) or tuple(np.shape(lower_limit)) != (self._d,)
        ):
            msg = (
                f"with a Dask `value`, `lower_limit` must be None or one in-memory bound of "
                f"shape ({self._d},), got {type(lower_limit).__name__} of shape "
                f"{tuple(getattr(lower_limit, 'shape', ()))}"
            )
            raise NotImplementedError(msg)
        _check_seed(options.get("rng"), "with Dask arrays (one seed for every chunk)")
        method = "logcdf" if log else "cdf"
        kw = dict(options)
        kw["lower_limit"] = lower_limit
        if self._dask:
            outputs = 2 if kw["return_error"] else 0
            return self._dask_engine().method(self, value, method, outputs, **kw)
        return self._over_dask(value, method, out_axis=2 if kw["return_error"] else 0, **kw)

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
        if _backend.is_cupy_namespace(self._xp):
            _check_cupy_rng(rng)
        elif rng is not None and not isinstance(rng, numbers.Integral | np.random.Generator):
            msg = f"`rng` must be None, an int seed or a numpy.random.Generator, got {type(rng)}"
            raise TypeError(msg)
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


def _check_seed(rng: Any, where: str) -> None:
    if rng is not None and (isinstance(rng, bool) or not isinstance(rng, numbers.Integral)):
        msg = f"{where}, `rng` must be None or an int seed, got {type(rng).__name__}"
        raise TypeError(msg)


def _check_cupy_rng(rng: Any) -> None:
    import cupy

    if not (
        rng is None
        or isinstance(rng, cupy.random.Generator)
        or (isinstance(rng, numbers.Integral) and not isinstance(rng, bool))
    ):
        msg = (
            "`rng` must be None, an int seed or a cupy.random.Generator for CuPy, got "
            f"{type(rng).__module__}.{type(rng).__name__}"
        )
        raise TypeError(msg)


def kl_divergence(p: MultivariateNormal, q: MultivariateNormal) -> Array:
    """``KL(p || q)`` of two multivariate normals, batch shapes broadcasting.

    Raises ``ValueError`` for different event sizes and ``TypeError`` for other objects or
    distributions of two array libraries.
    """
    for name, dist in (("p", p), ("q", q)):
        if not isinstance(dist, MultivariateNormal):
            msg = f"`{name}` must be a MultivariateNormal, got {type(dist).__name__}"
            raise TypeError(msg)
    if p._xp.__name__ != q._xp.__name__:
        msg = f"`p` and `q` must use one array library, got {p._xp.__name__} and {q._xp.__name__}"
        raise TypeError(msg)
    if p._d != q._d:
        msg = f"`p` and `q` must have the same event size, got {p.event_shape} and {q.event_shape}"
        raise ValueError(msg)
    try:
        batch = _batch(p.batch_shape, q.batch_shape)
    except ValueError:
        msg = f"the batch shapes {p.batch_shape} and {q.batch_shape} do not broadcast"
        raise ValueError(msg) from None
    if p._dask:
        return p._dask_engine().kl_divergence(p, q, batch)
    xp = p._xp
    dtype = xp.result_type(p._dtype, q._dtype)
    lp, lq = xp.astype(p._tril, dtype), xp.astype(q._tril, dtype)
    d = p._d
    logdet = q._half_log_det() - p._half_log_det()
    if d == 0 or math.prod(batch) == 0:
        return xp.broadcast_to(xp.asarray(logdet, dtype=dtype), batch)
    m = solve_triangular(lq, lp, lower=True, xp=xp)  # Lq^-1 Lp
    trace = xp.sum(m * m, axis=(-2, -1))
    diff = xp.astype(q._loc, dtype) - xp.astype(p._loc, dtype)
    z = solve_triangular(lq, diff[..., None], lower=True, xp=xp)[..., 0]
    maha = xp.sum(z * z, axis=-1)
    kl = logdet + 0.5 * (trace + maha - d)
    return xp.broadcast_to(kl, batch)
