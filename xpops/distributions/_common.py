"""What the distribution and its engines share: shapes, batch broadcasting, the checks of a
value's shape and the messages of bad parameters or values. Imports no engine."""

from typing import Any

import numpy as np

from .. import _backend
from .._lib import _compat
from .._lib._dtypes import default_float, is_dtype
from .._lib._typing import Array, Namespace

__all__ = [
    "all_true",
    "bad_values",
    "batch_of",
    "float_dtype",
    "is_array",
    "namespace_of",
    "parameter_batch",
    "shape_of",
    "value_batch",
]


def is_array(a: Any) -> bool:
    """Whether `a` is an array of an array-API library (None and Python values are not)."""
    return a is not None and _compat.is_array_api_obj(a)


def namespace_of(loc: Any, matrix: Any) -> Namespace:
    """The namespace of the parameters that are arrays (the default one if none is)."""
    arrays = [a for a in (loc, matrix) if is_array(a)]
    return _backend.get_namespace(*arrays)


def float_dtype(xp: Namespace, arrays: list[Array]) -> Any:
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


def shape_of(a: Array) -> tuple[int, ...]:
    """The shape of `a` as Python ints."""
    return tuple(int(s) for s in a.shape)


def batch_of(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The broadcast of batch shapes (``ValueError`` where they do not broadcast)."""
    return tuple(np.broadcast_shapes(*shapes))


def parameter_batch(name: str, ls: tuple[int, ...], ms: tuple[int, ...]) -> tuple[int, ...]:
    """The batch shape of a distribution of `loc` of shape `ls` and matrix `name` of shape
    `ms`; ``ValueError`` where the shapes do not fit ``(*, D)`` and ``(*, D, D)``."""
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
        return batch_of(ls[:-1], ms[:-2])
    except ValueError:
        msg = f"the batch shapes {ls[:-1]} of `loc` and {ms[:-2]} of `{name}` do not broadcast"
        raise ValueError(msg) from None


def all_true(xp: Namespace, condition: Array) -> bool:
    """Whether every entry of `condition` holds (reads the answer back from the device)."""
    return bool(xp.all(condition))


def bad_values(what: str, shape: tuple[int, ...], allow_inf: bool) -> str:
    """The message for NaN (or, unless `allow_inf`, non-finite) values in `what`."""
    if allow_inf:
        return f"`{what}` must be free of NaN, got shape {shape} with NaN values"
    return f"`{what}` must be finite, got shape {shape} with non-finite values"


def value_batch(
    what: str, shape: tuple[int, ...], d: int, batch: tuple[int, ...]
) -> tuple[int, ...]:
    """The batch shape of the results for a value `what` of `shape`: ``ValueError`` unless its
    last dimension is the event size `d` and the rest broadcasts against the distribution's
    `batch`."""
    if len(shape) < 1 or shape[-1] != d:
        msg = f"`{what}` must have shape (*, {d}) (the event shape), got {shape}"
        raise ValueError(msg)
    try:
        return batch_of(shape[:-1], batch)
    except ValueError:
        msg = f"`{what}` of shape {shape} does not broadcast against batch_shape {batch}"
        raise ValueError(msg) from None
