"""The read-only properties of MultivariateNormal (shapes, dtype, moments, the three forms of
its matrix): a base class of it, so that the class's file holds the rest. They read the
distribution's own attributes, set by its constructor.
"""

from typing import Any

from .._lib import _compat
from .._lib._typing import Array, Namespace

__all__ = ["Properties"]


class Properties:
    """The properties of MultivariateNormal, from the attributes its constructor sets."""

    _xp: Namespace
    _d: int
    _loc: Array
    _tril: Array
    _given: tuple[str, Array]
    _batch_shape: tuple[int, ...]
    _dtype: Any
    _validate: bool

    @property
    def batch_shape(self) -> tuple[int, ...]:
        return self._batch_shape

    @property
    def event_shape(self) -> tuple[int, ...]:
        return (self._d,)

    @property
    def dtype(self) -> Any:
        """The floating dtype of the parameters and of every result (read-only).

        Returns
        -------
        dtype
            The promotion of the dtypes of the parameters given as arrays, integers and bools
            taken as the default floating dtype of their library; float16 and bfloat16
            parameters are computed in float32, which is then the dtype of every result.
        """
        return self._dtype

    @property
    def validate_args(self) -> bool:
        """Whether the parameters were checked and values given to the methods are (read-only).

        Returns
        -------
        bool
            The `validate_args` the distribution was built with.
        """
        return self._validate

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
