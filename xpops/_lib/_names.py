"""How objects are named in error messages."""

from typing import Any

__all__ = ["type_name"]


def type_name(obj: Any) -> str:
    """``library.Class`` of `obj`: the top-level package of its type's module, then the type's
    qualified name, e.g. ``numpy.ndarray``, ``builtins.list`` or ``scipy.csr_array`` (for
    ``scipy.sparse.csr_array``)."""
    cls = type(obj)
    return f"{cls.__module__.split('.')[0]}.{cls.__qualname__}"
