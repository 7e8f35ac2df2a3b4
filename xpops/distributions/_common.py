"""What the distribution and its engines share: shapes, batch broadcasting, the checks of a
value's shape and the messages of bad parameters or values. Imports no engine."""

import importlib
import numbers
import sys
import types
from typing import Any, NamedTuple

import numpy as np

from .. import _backend
from .._lib import _compat
from .._lib._dtypes import default_float, is_dtype, is_low_precision
from .._lib._typing import Array, Namespace

__all__ = [
    "all_true",
    "as_arrays",
    "bad_loc",
    "bad_values",
    "batch_of",
    "check_real",
    "float_dtype",
    "is_array",
    "namespace_of",
    "pack",
    "parameter_batch",
    "plain_parameters",
    "raise_unless",
    "result",
    "same_device",
    "sample_shape",
    "shape_of",
    "unpack",
    "value_batch",
]

# The kinds of dtype a parameter or a value may have: integers and bools are taken as the
# default floating dtype of their library.
_REAL = ("real floating", "integral", "bool")


def is_array(a: Any) -> bool:
    """Whether `a` is an array of an array-API library (None and Python values are not)."""
    return a is not None and _compat.is_array_api_obj(a)


def namespace_of(loc: Any, matrix: Any) -> Namespace:
    """The namespace of the parameters that are arrays (the default one if none is)."""
    arrays = [a for a in (loc, matrix) if is_array(a)]
    return _backend.get_namespace(*arrays)


def check_real(xp: Namespace, a: Array, what: str) -> None:
    """``TypeError`` unless array `a` (parameter or value `what`) holds real numbers: a real
    floating, integer or bool dtype (not complex, not strings or objects)."""
    if not is_dtype(xp, a.dtype, _REAL):
        msg = f"`{what}` must hold real numbers, got dtype {a.dtype}"
        raise TypeError(msg)


def float_dtype(xp: Namespace, arrays: list[Array], names: list[str]) -> Any:
    """The floating dtype the parameters `arrays` (named `names`) are computed in: the
    promotion of their dtypes, integers and bools taken as the default floating dtype;
    float16 and bfloat16 computed in float32. ``TypeError`` for dtypes that are not real and
    for long double, which the factorizations of NumPy and SciPy do not take."""
    dtypes = []
    for a, name in zip(arrays, names, strict=True):
        check_real(xp, a, name)
        if is_dtype(xp, a.dtype, "real floating"):
            if isinstance(a.dtype, np.dtype) and a.dtype.itemsize > 8:
                msg = (
                    f"`{name}` has dtype {a.dtype} (long double), which MultivariateNormal does "
                    "not support; convert it to float64 or float32"
                )
                raise TypeError(msg)
            dtypes.append(a.dtype)
        else:
            dtypes.append(default_float(xp, a))
    dtype = xp.result_type(*dtypes)
    return xp.result_type(dtype, xp.float32) if is_low_precision(xp, dtype) else dtype


def result(out: Any) -> Any:
    """A method's result as returned to the user: NumPy scalars become 0-d arrays, so that a
    single point gives a 0-d ``numpy.ndarray`` as every other result does (NumPy's operations
    on 0-d arrays return scalars); anything else unchanged."""
    return np.asarray(out) if isinstance(out, np.generic) else out


def sample_shape(shape: Any) -> tuple[int, ...]:
    """The `shape` argument of `sample` and `rsample` (an int or a sequence of ints) as a
    tuple: ``TypeError`` for anything else (a float, a bool), ``ValueError`` for a negative
    size."""
    dims = (shape,) if isinstance(shape, numbers.Integral) else shape
    if not isinstance(dims, tuple | list) or any(
        isinstance(n, bool | np.bool_) or not isinstance(n, numbers.Integral) for n in dims
    ):
        msg = f"`shape` must be an int or a tuple of ints, got {shape!r}"
        raise TypeError(msg)
    if any(n < 0 for n in dims):
        msg = f"`shape` must hold non-negative sizes, got {shape!r}"
        raise ValueError(msg)
    return tuple(int(n) for n in dims)


def bad_loc(shape: tuple[int, ...]) -> str:
    """The message for a `loc` of `shape` with NaN or infinite entries."""
    return f"`loc` must be finite, got shape {shape} with non-finite values"


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
    """Whether every entry of `condition` holds (reads the answer back from the device).

    True for a JAX tracer (under ``jax.jit``, ``jax.vmap``, ``jax.grad``), whose values are not
    known: the checks of values are skipped there, the checks of shapes and dtypes are not.
    """
    if _compat.is_traced(condition):
        return True
    return bool(xp.all(condition))


def raise_unless(xp: Namespace, checks: list[tuple[Array, str]]) -> None:
    """``ValueError`` with the message of the first condition of `checks` (``(condition,
    message)`` pairs) that does not hold everywhere. One read from the device when all hold
    (the usual case): the conditions are reduced there first, and read one by one only to
    name the failure."""
    if not checks:
        return
    if all_true(xp, xp.stack([xp.all(c) for c, _ in checks])):
        return
    for condition, message in checks:
        if not all_true(xp, condition):
            raise ValueError(message)


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


def as_arrays(*args: Any, names: list[str]) -> tuple[Namespace, tuple[Any, ...]]:
    """`_backend.array_args` of the parameters or values `args` named `names`, NumPy's own
    conversion errors (a ragged list) a ``ValueError`` naming the parameter."""
    try:
        return _backend.array_args(*args, names=names)
    except ValueError:
        for a, name in zip(args, names, strict=True):
            try:
                np.asarray(a)
            except ValueError as exc:
                msg = f"`{name}` could not be converted to an array: {exc}"
                raise ValueError(msg) from None
        raise


def same_device(loc: Array, matrix: Array, name: str) -> None:
    """``ValueError`` unless `loc` and `matrix` (parameter `name`) are on one device (a JAX
    tracer has none, and is not compared)."""
    if not _compat.same_device(loc, matrix):
        dl, dm = _compat.device(loc), _compat.device(matrix)
        msg = f"`loc` and `{name}` must be on the same device, got {dl} and {dm}"
        raise ValueError(msg)


_FLOAT32, _FLOAT64 = np.dtype(np.float32), np.dtype(np.float64)


def plain_parameters(
    loc: Any, cov: Any, precision: Any, tril: Any
) -> tuple[Namespace, str, Array] | None:
    """``(namespace, parameter name, matrix)`` of the constructor's arguments where exactly one
    matrix is given and it and `loc` are arrays of one type whose namespace `get_namespace`
    keeps by type (NumPy's and CuPy's ndarray, ``torch.Tensor``, from the first call that
    meets them on), of one device and of one float32 or float64 dtype (for NumPy and CuPy,
    NumPy's own dtype object, not an equal one with metadata): arrays that the constructor's
    conversions and its checks of types, devices and dtypes leave as they are (the shapes are
    still checked); None for anything else."""
    cls = type(loc)
    xp = _backend.namespace_of_type(cls)
    if xp is None:
        return None
    if tril is not None and cov is None and precision is None:
        name, matrix = "scale_tril", tril
    elif cov is not None and precision is None and tril is None:
        name, matrix = "covariance_matrix", cov
    elif precision is not None and cov is None and tril is None:
        name, matrix = "precision_matrix", precision
    else:
        return None
    dtype = loc.dtype
    if type(matrix) is not cls or matrix.dtype is not dtype:
        return None
    if dtype is not _FLOAT32 and dtype is not _FLOAT64 and not _torch_float(cls, dtype):
        return None
    if cls is not np.ndarray and loc.device != matrix.device:
        return None
    return xp, name, matrix


def _torch_float(cls: type, dtype: Any) -> bool:
    """Whether `cls` is ``torch.Tensor`` and `dtype` PyTorch's float32 or float64."""
    torch = sys.modules.get("torch")
    return torch is not None and cls is torch.Tensor and dtype in (torch.float32, torch.float64)


# ---- a distribution's state in the standard pickle ---------------------------------------------


class HostCopy(NamedTuple):
    """A NumPy copy of a CuPy array in a pickled state (`pack`)."""

    array: np.ndarray


class ModuleName(NamedTuple):
    """A module by name in a pickled state (`pack`)."""

    name: str


def pack(state: dict[str, Any]) -> dict[str, Any]:
    """A distribution's attributes for the standard pickle: a module (the array namespace) by
    name, which spares a task Distributed's cloudpickle fallback (three times the standard
    pickle's cost a task), and CuPy arrays as NumPy copies (a third of the time CuPy arrays
    take to pickle and unpickle; the scheduler, which unpickles the graph, needs no GPU).
    Tuples are packed entry by entry. `unpack` reverses it."""

    def host(v: Any) -> Any:
        if isinstance(v, tuple):
            return tuple(host(e) for e in v)
        if isinstance(v, types.ModuleType):
            return ModuleName(v.__name__)
        return HostCopy(v.get()) if _compat.is_cupy_array(v) else v

    return {k: host(v) for k, v in state.items()}


def unpack(state: dict[str, Any]) -> dict[str, Any]:
    """The attributes `pack` packed: modules imported, CuPy arrays on the current device."""

    def device(v: Any) -> Any:
        if isinstance(v, ModuleName):
            return importlib.import_module(v.name)
        if isinstance(v, HostCopy):
            import cupy

            return cupy.asarray(v.array)
        if isinstance(v, tuple):
            return tuple(device(e) for e in v)
        return v

    return {k: device(v) for k, v in state.items()}
