"""The one import point of array_api_compat inside xpops, and the device and trace helpers
built on it.

A JAX array under a trace (``jax.jit``, ``jax.grad``, ``jax.vmap``) is a tracer: it has no
device (`device` gives None) and no values. `same_device` and `device_of` compare and pick
devices among the arrays that have one; `is_traced` tells the checks that need values to skip.
"""

import functools
import importlib
import sys
from types import ModuleType
from typing import Any

from array_api_compat import (
    array_namespace,
    device,
    is_array_api_obj,
    is_cupy_array,
    is_cupy_namespace,
    is_dask_array,
    is_dask_namespace,
    is_jax_array,
    is_jax_namespace,
    is_numpy_array,
    is_numpy_namespace,
    is_torch_namespace,
    size,
    to_device,
)

__all__ = [
    "array_namespace",
    "device",
    "device_of",
    "is_array_api_obj",
    "is_cupy_array",
    "is_cupy_namespace",
    "is_dask_array",
    "is_dask_namespace",
    "is_jax_array",
    "is_jax_namespace",
    "is_numpy_array",
    "is_numpy_namespace",
    "is_torch_namespace",
    "is_traced",
    "jax_tracing",
    "same_device",
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


def is_traced(*arrays: Any) -> bool:
    """Whether an argument is a JAX tracer: an array of a ``jax.jit``, ``jax.grad`` or
    ``jax.vmap`` trace, whose values are not known (a check of values must be skipped) and
    whose device is not either. False without JAX imported (JAX is never imported here)."""
    jax = sys.modules.get("jax")
    if jax is None:
        return False
    tracer = jax.core.Tracer
    return any(isinstance(a, tracer) for a in arrays)


def device_of(*arrays: Any) -> Any:
    """The device of the first of `arrays` that has one (None if none has: JAX tracers)."""
    for a in arrays:
        d = device(a)
        if d is not None:
            return d
    return None


def same_device(*arrays: Any) -> bool:
    """Whether the arrays that have a device are on one device. A JAX tracer has none and is
    taken to be on the others' device: JAX itself places the traced computation."""
    known = [d for d in map(device, arrays) if d is not None]
    return all(d == known[0] for d in known[1:])


def jax_tracing() -> bool:
    """Whether JAX is tracing a function now (``jax.jit``, ``jax.vmap``, ``jax.grad``), even
    one whose arrays reach this call as concrete values (closed over). False without JAX
    imported. Reads JAX's trace state (a private function, guarded: without it, False)."""
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import core

        return not core.trace_state_clean()
    except (ImportError, AttributeError):  # pragma: no cover - a JAX without it
        return False
