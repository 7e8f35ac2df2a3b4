"""The state of a MultivariateNormal and the helpers its methods share: pickling and copies,
the namespace that serves a call, the cached forms of the factor, and the checks of the values
given to the methods. A base class of it (through `_cdf_methods.CdfMethods`, whose methods use
these helpers), so that the class's file holds the constructor and the methods.
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
    bad_values,
    check_real,
    is_array,
    pack,
    shape_of,
    unpack,
    value_batch,
)

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
