"""Backend selection: ``XPOPS_BACKEND``, array namespaces and devices.

This is the only module that reads ``XPOPS_BACKEND``. It is read once, when xpops is imported.
CuPy is imported only when a CuPy array is passed, a CuPy namespace is asked for, or
``XPOPS_BACKEND=cupy``.
"""

import functools
import os
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np

from ._lib import _compat
from ._lib._names import type_name
from ._lib._typing import Array, Device, Namespace

__all__ = [
    "BACKENDS",
    "array_args",
    "cupy_unavailable_reason",
    "default_backend",
    "default_namespace",
    "get_namespace",
    "namespace_of_type",
    "resolve_namespace",
]

BACKENDS = ("numpy", "cupy")
_ENV = "XPOPS_BACKEND"


def _read_backend() -> str:
    value = os.environ.get(_ENV, "").strip()
    if not value:
        return "numpy"
    if value.lower() not in BACKENDS:
        valid = ", ".join(repr(b) for b in BACKENDS)
        msg = f"{_ENV} must be one of {valid} (or unset for 'numpy'), got {value!r}"
        raise ValueError(msg)
    return value.lower()


_DEFAULT_BACKEND = _read_backend()


def default_backend() -> str:
    """Return the name of the default backend, ``'numpy'`` or ``'cupy'``."""
    return _DEFAULT_BACKEND


def cupy_unavailable_reason() -> str | None:
    """Return why CuPy cannot be used here, or None when it can (imports CuPy)."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA install raising something else
        return f"CuPy is not importable ({type(exc).__name__}: {exc})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"CuPy cannot reach a CUDA device ({type(exc).__name__}: {exc})"
    if count == 0:
        return "no CUDA device available"
    return None


def _compat_numpy() -> Namespace:
    return _compat.wrapped_namespace("numpy")


@functools.cache
def _compat_cupy() -> Namespace:
    reason = cupy_unavailable_reason()
    if reason is not None:
        msg = f"the CuPy backend was requested but cannot be used: {reason}"
        raise RuntimeError(msg)
    return _compat.wrapped_namespace("cupy")


def default_namespace() -> Namespace:
    """Return the array namespace used when no array input decides it.

    It is chosen by the environment variable ``XPOPS_BACKEND`` (``numpy``, the default, or
    ``cupy``), read once when xpops is imported.

    Returns
    -------
    namespace : module
        ``array_api_compat.numpy`` or ``array_api_compat.cupy``.

    Raises
    ------
    RuntimeError
        If ``XPOPS_BACKEND=cupy`` but CuPy is not importable or no CUDA device is present.

    Examples
    --------
    >>> import xpops
    >>> xpops.default_namespace().__name__  # doctest: +SKIP
    'array_api_compat.numpy'
    """
    if _DEFAULT_BACKEND == "cupy":
        return _compat_cupy()
    return _compat_numpy()


def _is_scalar(obj: Any) -> bool:
    return obj is None or isinstance(obj, bool | int | float | complex)


def get_namespace(*arrays: Array) -> Namespace:
    """Return the array namespace of the inputs, or the default namespace when there are none.

    Python scalars and None are ignored.

    Parameters
    ----------
    *arrays : array
        Arrays of any array-API library (NumPy, CuPy, PyTorch, array-api-strict, ...).

    Returns
    -------
    namespace : module
        The array-API namespace (through ``array_api_compat`` where it wraps the library).

    Raises
    ------
    TypeError
        If the inputs belong to different libraries, or one is not an array.

    Examples
    --------
    >>> import numpy as np
    >>> import xpops
    >>> xpops.get_namespace(np.ones(3)).__name__
    'array_api_compat.numpy'
    """
    if arrays:  # fast path: arrays of one type already seen (NumPy and CuPy ndarrays)
        cls = type(arrays[0])
        ns = _NAMESPACE_OF_TYPE.get(cls)
        if ns is not None and all(type(a) is cls for a in arrays):
            return ns
    candidates = [a for a in arrays if not _is_scalar(a)]
    if not candidates:
        return default_namespace()
    namespaces: dict[str, tuple[Namespace, Any]] = {}
    for a in candidates:
        if not _compat.is_array_api_obj(a):
            msg = f"expected an array, got {type_name(a)}"
            raise TypeError(msg)
        ns = _compat.array_namespace(a)
        namespaces.setdefault(ns.__name__, (ns, a))
    if len(namespaces) > 1:
        kinds = " and ".join(sorted({type_name(a) for _, a in namespaces.values()}))
        msg = (
            f"arrays from different libraries cannot be mixed, got {kinds}; "
            "convert them to one library first"
        )
        raise TypeError(msg)
    ns = next(iter(namespaces.values()))[0]
    cls = type(candidates[0])
    if (cls.__name__, ns.__name__) in _CACHED_NAMESPACES:
        _NAMESPACE_OF_TYPE[cls] = ns
    return ns


# The namespace of numpy.ndarray, cupy.ndarray and torch.Tensor (the type itself, not its
# subclasses) depends on the type alone; remembering it saves array_api_compat's checks
# (several microseconds a call, which the GPU sees as idle time before the first launch of a
# short kernel).
_CACHED_NAMESPACES = frozenset(
    {
        ("ndarray", "array_api_compat.numpy"),
        ("ndarray", "array_api_compat.cupy"),
        ("Tensor", "array_api_compat.torch"),
    }
)
_NAMESPACE_OF_TYPE: dict[type, Namespace] = {}


def namespace_of_type(cls: type) -> Namespace | None:
    """The namespace of every array of type `cls` where `get_namespace` has met that type and
    it decides the namespace (NumPy's and CuPy's ndarray, ``torch.Tensor``); else None."""
    return _NAMESPACE_OF_TYPE.get(cls)


def resolve_namespace(xp: ModuleType | None) -> Namespace:
    """Map a user's `xp` argument (None, a library module or a namespace) to a namespace."""
    if xp is None:
        return default_namespace()
    if not isinstance(xp, ModuleType):
        msg = f"`xp` must be an array namespace (a module such as numpy), got {type_name(xp)}"
        raise TypeError(msg)
    name = xp.__name__
    if name in ("numpy", "array_api_compat.numpy"):
        return _compat_numpy()
    if name in ("cupy", "array_api_compat.cupy"):
        return _compat_cupy()
    if name in ("torch", "array_api_compat.torch"):
        return _compat.wrapped_namespace("torch")
    if name in ("dask.array", "array_api_compat.dask.array"):
        return _compat.wrapped_namespace("dask.array")
    if not all(hasattr(xp, attr) for attr in ("asarray", "arange", "int64")):
        msg = f"`xp` must be an array namespace, got module {name!r}"
        raise TypeError(msg)
    return xp


def check_device(xp: Namespace, device: Device) -> None:
    """Reject a device the NumPy backend cannot place arrays on."""
    if device is None or not _compat.is_numpy_namespace(xp):
        return
    if device != "cpu" and type(device).__name__ != "_CPUDevice":
        msg = f"the NumPy backend only has the device 'cpu', got {device!r}"
        raise ValueError(msg)


# ---- array arguments --------------------------------------------------------------------------
# Every parameter that takes an array also takes what NumPy would make one of: a Python list or
# tuple (nested) or a Python scalar (bool, int, float, complex). These become arrays of the
# namespace of the call's array arguments, on the device of the first of them, or NumPy arrays
# when no argument is an array (as SciPy does). NumPy arrays next to Dask arrays become Dask
# arrays of one chunk, as Dask itself combines them; any other mix of libraries is a TypeError.

# NumPy scalars are arrays to array_api_compat already
_ARRAY_LIKE = (list, tuple, bool, int, float, complex)


def is_array_like(obj: Any) -> bool:
    """Whether `obj` is a list, tuple or Python scalar that `array_args` turns into an array."""
    return isinstance(obj, _ARRAY_LIKE)


def array_args(*args: Any, names: Sequence[str] | None = None) -> tuple[Namespace, tuple[Any, ...]]:
    """``(namespace, arrays)`` of the array arguments `args` (None passes through unchanged).

    Parameters
    ----------
    *args
        Arrays of one library, NumPy arrays with Dask arrays, lists, tuples, scalars or None.
    names : sequence of str, optional
        The parameters' names, for messages; default ``x``, ``y``, ...

    Raises
    ------
    TypeError
        If an argument is none of these (a string, a dict, ...), naming the parameter, or the
        arrays come from libraries that cannot be mixed.
    """
    if args:  # arrays of one type whose namespace the type decides: nothing to convert
        cls = type(args[0])
        ns = _NAMESPACE_OF_TYPE.get(cls)
        if ns is not None and all(type(a) is cls for a in args):
            return ns, args
    names = names if names is not None else [f"arg{i}" for i in range(len(args))]
    arrays = [a for a in args if a is not None and not is_array_like(a)]
    for a, name in zip(args, names, strict=True):
        if a is not None and not is_array_like(a) and not _compat.is_array_api_obj(a):
            msg = f"`{name}` must be an array, got {type_name(a)}"
            raise TypeError(msg)
    if not arrays:
        xp = _compat.wrapped_namespace("numpy")
        return xp, tuple(
            None if a is None else _numpy_array(a, name)
            for a, name in zip(args, names, strict=True)
        )
    libraries = {_library(a) for a in arrays}
    if libraries == {"numpy", "dask"}:
        xp = get_namespace(*(a for a in arrays if _library(a) == "dask"))
    else:
        xp = get_namespace(*arrays)  # TypeError for any other mix
    device = _compat.device(arrays[0]) if "dask" not in libraries else None
    out: list[Any] = []
    for a, name in zip(args, names, strict=True):
        if a is None:
            out.append(None)
        elif is_array_like(a):
            out.append(_as_array(xp, a, device, name))
        elif "dask" in libraries and _library(a) == "numpy":
            out.append(_as_dask(a))
        else:
            out.append(a)
    return xp, tuple(out)


def _library(a: Any) -> str:
    if _compat.is_dask_array(a):
        return "dask"
    if _compat.is_numpy_array(a):
        return "numpy"
    return type(a).__module__.split(".")[0]


def _numpy_array(a: Any, name: str) -> Any:
    """`a` (a list, tuple or Python scalar) as a NumPy array; a ragged nested sequence is a
    ValueError naming the parameter, not NumPy's own message."""
    try:
        return np.asarray(a)
    except ValueError:
        msg = (
            f"`{name}` must be an array or a nested sequence of one shape (like NumPy's "
            "arrays), got a ragged nested sequence"
        )
        raise ValueError(msg) from None


def _as_array(xp: Namespace, a: Any, device: Any, name: str) -> Any:
    """`a` as an array of `xp` on `device`, by `xp`'s own rules (its default dtypes)."""
    host = _numpy_array(a, name)
    if _compat.is_dask_namespace(xp):
        return _as_dask(host)
    if _compat.is_numpy_namespace(xp):
        return host
    if device is None:
        return xp.asarray(a)
    return xp.asarray(a, device=device)


def _as_dask(a: Any) -> Any:
    import dask.array as da

    return da.from_array(np.asarray(a), chunks=-1)  # pyright: ignore[reportArgumentType]
