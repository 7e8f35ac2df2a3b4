"""The one import point of array_api_compat inside xpops."""

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
]
