"""Dtype helpers shared by the public functions (namespace-agnostic)."""

from typing import Any

import numpy as np

from ._compat import device
from ._typing import Array, DType, Namespace

__all__ = [
    "INT32_MAX",
    "INT64_MAX",
    "default_float",
    "dtype_name",
    "is_dtype",
    "is_low_precision",
]

#: The largest value of int32 and of int64, the index dtypes: what an index or a count of
#: entries must not exceed to be held in them.
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# NumPy and CuPy share NumPy's dtype objects: for them the checks below read ``dtype.kind``,
# which is several times faster than ``isdtype`` (it matters for short GPU calls).
_NUMPY_DTYPE_NAMESPACES = frozenset(
    {"numpy", "cupy", "array_api_compat.numpy", "array_api_compat.cupy"}
)
_KIND_CHARS = {
    "bool": "b",
    "signed integer": "i",
    "unsigned integer": "u",
    "integral": "iu",
    "real floating": "f",
    "complex floating": "c",
    "numeric": "iufc",
}


def _numpy_dtype(xp: Namespace, dtype: DType) -> bool:
    return isinstance(dtype, np.dtype) and getattr(xp, "__name__", "") in _NUMPY_DTYPE_NAMESPACES


# dtype_name's answers by dtype
_NAMES: dict[Any, str] = {}


def dtype_name(dtype: Any) -> str:
    """``numpy.dtype(dtype).name``, kept by dtype: NumPy computes the name in Python (about
    2 us a call, which the kernel choices of a short GPU call would pay several times)."""
    try:
        return _NAMES[dtype]
    except KeyError:
        name = _NAMES[dtype] = np.dtype(dtype).name
        return name


# is_dtype's answers by (namespace, dtype, kind): a few dtypes and kinds a namespace
_ANSWERS: dict[tuple[Any, Any, Any], bool] = {}


def is_dtype(xp: Namespace, dtype: DType, kind: str | tuple[str, ...]) -> bool:
    """``xp.isdtype``, False (not an error) for things that are not dtypes of `xp`, strings
    included (JAX's ``isdtype`` takes ``"float64"``; the array API's dtypes are objects).
    Answers are kept (the checks of short GPU calls ask the same questions every call)."""
    if isinstance(dtype, str):
        return False
    key = (xp, dtype, kind)
    try:
        return _ANSWERS[key]
    except KeyError:
        answer = _ANSWERS[key] = _is_dtype(xp, dtype, kind)
        return answer
    except TypeError:  # an unhashable dtype
        return _is_dtype(xp, dtype, kind)


def _is_dtype(xp: Namespace, dtype: DType, kind: str | tuple[str, ...]) -> bool:
    if _numpy_dtype(xp, dtype):
        kinds = (kind,) if isinstance(kind, str) else kind
        if all(k in _KIND_CHARS for k in kinds):
            return any(dtype.kind in _KIND_CHARS[k] for k in kinds)
    try:
        return bool(xp.isdtype(dtype, kind))
    except (TypeError, ValueError, AttributeError):  # AttributeError: PyTorch given a str
        return False


def is_low_precision(xp: Namespace, dtype: DType) -> bool:
    """float16 and bfloat16, which xpops computes in float32."""
    if _numpy_dtype(xp, dtype):
        return bool(dtype.kind == "f" and dtype.itemsize == 2)
    names = ("float16", "bfloat16")
    return any(hasattr(xp, n) and dtype == getattr(xp, n) for n in names)


def default_float(xp: Namespace, x: Array) -> DType:
    """The namespace's default real floating dtype on the device of `x`."""
    if _numpy_dtype(xp, x.dtype):
        return np.dtype(np.float64)
    try:
        return xp.__array_namespace_info__().default_dtypes(device=device(x))["real floating"]
    except (AttributeError, TypeError):
        return xp.float64
