"""The state of a MultivariateNormal and the helpers its methods share: pickling and copies,
the parameters' checks and factor, the namespace that serves a call, the cached forms of the
factor, and the checks of the values given to the methods. A base class of it (through
`_cdf_methods.CdfMethods`, whose methods use these helpers), so that the class's file holds the
constructor and the methods.
"""

from collections.abc import Callable
from typing import Any, Self

from .. import _backend
from .._lib import _compat
from .._lib._typing import Array, Namespace
from ..linalg._triangular import solve_triangular
from ._common import (
    all_true,
    as_arrays,
    bad_loc,
    bad_values,
    check_real,
    is_array,
    pack,
    raise_unless,
    shape_of,
    unpack,
    value_batch,
)
from ._factor import check_factor, factor, matrix_checks, scale_tril_messages

__all__ = ["State"]


class State:
    """The attributes a MultivariateNormal's constructor sets, and the helpers that read them."""

    _xp: Namespace
    _d: int
    _loc: Array
    _tril: Array
    _batch_shape: tuple[int, ...]
    _dtype: Any
    _validate: bool
    _dask: bool
    _linv_t: Array | None
    _args: tuple[Any, Any]  # loc and the matrix as given (as arrays): the gradients' primals
    _fused_kernels: Callable[[], Any]  # the fused CuPy kernels where they take it (the class's)

    # ---- pickling and copies ----------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        """The attributes for the standard pickle (`_common.pack`: the namespace by name,
        CuPy arrays as NumPy copies, returned to the current device by `__setstate__`)."""
        return pack({k: v for k, v in vars(self).items() if k != "_mirror_of"})

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(unpack(state))

    def __copy__(self) -> Self:
        """A shallow copy: the same arrays, no round trip through `__getstate__`."""
        new = object.__new__(type(self))
        vars(new).update(vars(self))
        return new

    def _mapped(self, view: Callable[[Any], Any], *, given: bool = True) -> Self:
        """A copy whose arrays are ``view`` of this one's, with their library's namespace and
        dtype: the same distribution on the same memory in another library. Calls on PyTorch's
        CUDA tensors run on their CuPy views this way: the rules that the autograd binding
        records, with the factor already computed and checked, and the methods' ``torch``
        engines, the constructor's included (before the factor exists). Without `given`, the
        parameters as given (the rules' primals) are left out, and only the arrays the methods
        compute with are viewed. Caches tied to a library (the fused kernels' layout) are
        left to be remade."""
        new = object.__new__(type(self))
        state = {}
        for name, value in vars(self).items():
            if name == "_mirror_of":  # this distribution's own mirror (`_mirror`)
                continue
            if not given and name in ("_args", "_given"):
                value = None
            elif is_array(value):
                value = view(value)
            elif isinstance(value, tuple):  # the parameters as given, (name, matrix)
                value = tuple(view(a) if is_array(a) else a for a in value)
            state[name] = value
        state["_xp"] = _backend.get_namespace(state["_loc"])
        state["_dtype"] = state["_loc"].dtype
        state["_fused"] = None
        vars(new).update(state)
        return new

    def _mirror(self, view: Callable[[Any], Any]) -> Self:
        """``_mapped(view, given=False)``, kept for the next call while this distribution
        computes with the same arrays: a distribution of CUDA tensors is viewed once, and the
        caches of its CuPy mirror (the fused kernels' layout, ``L^-T``) serve every later
        call. The views hold the tensors they view, which this distribution holds anyway; a
        copy whose arrays are replaced (a Dask chunk's part of the batch) makes its own. The
        caches are made on the stream of the first call: calls on other streams are ordered
        after it by the caller, as for any array the distribution holds."""
        held = vars(self).get("_mirror_of")
        if held is not None and held[0] is self._loc and held[1] is self._tril:
            mirror: Self = held[2]
            return mirror
        mirror = self._mapped(view, given=False)
        self._mirror_of = (self._loc, self._tril, mirror)
        return mirror

    # ---- the parameters' checks and factor (the constructor's engines) -----------------------

    def _factor(self, name: str, loc: Array, matrix: Array, *, checked: bool = False) -> Array:
        """The lower factor of `matrix` (parameter `name`), the parameters checked first where
        `validate_args` asks and they were not `checked` already."""
        xp = self._xp
        if self._validate and not checked:
            copy = self._check_parameters(name, loc, matrix)
            if copy is not None:
                # the fused kernel found it zero above the diagonal: its copy is its lower
                # triangle (and the distribution's own, as `tril` would make it)
                return copy
        tril = factor(xp, name, matrix, self._dtype, self._validate)
        if self._validate and name != "scale_tril":
            check_factor(xp, name, matrix, tril)
        return tril

    def _check_parameters(
        self, name: str, loc: Array, matrix: Array, *, copy: bool = True
    ) -> Array | None:
        """``ValueError`` for the first check that `loc` or `matrix` (parameter `name`) fails;
        a copy of `matrix` where the fused CuPy kernel made the checks (of a ``scale_tril``)
        and `copy` asks for it, None otherwise (the generic checks: one read from the device
        for all of them)."""
        xp = self._xp
        fused = self._fused_kernels() if name == "scale_tril" else None
        if fused is not None:  # the CuPy kernel of all the checks, one read
            from ._cupy_checks import scale_tril_failures  # imports CuPy: only on the CuPy engine

            failures, kept = scale_tril_failures(loc, matrix, copy=copy)
            messages = [bad_loc(shape_of(loc)), *scale_tril_messages(shape_of(matrix))]
            for bit, message in enumerate(messages):
                if failures >> bit & 1:
                    raise ValueError(message)
            return kept
        checks = [(xp.isfinite(loc), bad_loc(shape_of(loc)))]
        raise_unless(xp, checks + matrix_checks(xp, name, matrix, self._dtype))
        return None

    # ---- helpers of the methods -------------------------------------------------------------

    def _serving(self, value: Any = None) -> Namespace:
        """The namespace whose engine serves a method: a Dask `value`'s (lazy results, chunk by
        chunk), else the parameters' (Dask's for Dask parameters)."""
        if not self._dask and _compat.is_dask_array(value):
            return _compat.array_namespace(value)
        return self._xp

    def _inverse_factor_t(self) -> Array:
        """``L^-T`` of an unbatched distribution, computed once (not kept when it is a JAX
        tracer: it belongs to the trace that made it)."""
        if self._linv_t is not None:
            return self._linv_t
        xp = self._xp
        eye = xp.eye(self._d, dtype=self._dtype, device=_compat.device(self._tril))
        linv_t = xp.matrix_transpose(solve_triangular(self._tril, eye, lower=True, xp=xp))
        if not _compat.is_traced(linv_t):
            self._linv_t = linv_t
        return linv_t

    def _half_log_det(self) -> Array:
        xp = self._xp
        return xp.sum(xp.log(xp.linalg.diagonal(self._tril)), axis=-1)

    def _value(
        self, value: Any, what: str, *, allow_inf: bool = False, check_values: bool = True
    ) -> Array:
        xp = self._xp
        if value is None:
            msg = f"`{what}` must be an array or a list of numbers, got None"
            raise TypeError(msg)
        if not is_array(value):  # a list or a number: an array of the parameters' library
            value = as_arrays(value, self._tril, names=[what, "scale_tril"])[1][0]
        elif _backend.get_namespace(value).__name__ != xp.__name__:
            msg = f"`{what}` must be an array of the distribution's library, got {type(value)}"
            raise TypeError(msg)
        check_real(xp, value, what)
        vs = shape_of(value)
        value_batch(what, vs, self._d, self._batch_shape)
        if value.dtype != self._dtype:
            value = xp.astype(value, self._dtype)
        if self._validate and check_values:
            ok = ~xp.isnan(value) if allow_inf else xp.isfinite(value)
            if not all_true(xp, ok):
                raise ValueError(bad_values(what, vs, allow_inf))
        return value
