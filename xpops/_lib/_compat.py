"""The one import point of array_api_compat inside xpops."""

import functools
import importlib
from types import ModuleType

from array_api_compat import (
    array_namespace,
    device,
    is_array_api_obj,
    is_cupy_array,
    is_cupy_namespace,
    is_dask_array,
    is_dask_namespace,
    is_numpy_array,
    is_numpy_namespace,
    is_torch_namespace,
    size,
    to_device,
)

__all__ = [
    "array_namespace",
    "device",
    "is_array_api_obj",
    "is_cupy_array",
    "is_cupy_namespace",
    "is_dask_array",
    "is_dask_namespace",
    "is_numpy_array",
    "is_numpy_namespace",
    "is_torch_namespace",
    "size",
    "to_device",
    "wrapped_namespace",
]


@functools.cache
def wrapped_namespace(library: str) -> ModuleType:
    """array_api_compat's array-API namespace of `library` (``"numpy"``, ``"cupy"``,
    ``"torch"``, ``"dask.array"``), imported on first use: the wrapped namespace of a library
    is imported only once an array or namespace of that library has been asked for."""
    return importlib.import_module(f"array_api_compat.{library}")
