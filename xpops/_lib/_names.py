"""How objects are named in error messages."""

from typing import Any

__all__ = ["type_name"]


def type_name(obj: Any) -> str:
    """``library.Class`` of `obj`, e.g. ``numpy.ndarray`` or ``scipy.sparse._csr.csr_array``
    (the top-level package, then the class's qualified name)."""
    cls = type(obj)
    return f"{cls.__module__.split('.')[0]}.{cls.__qualname__}"
