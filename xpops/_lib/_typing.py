"""Type aliases used in signatures (arrays are duck-typed by the array API)."""

from types import ModuleType
from typing import Any, TypeAlias

Array: TypeAlias = Any
Namespace: TypeAlias = ModuleType
Device: TypeAlias = Any
DType: TypeAlias = Any

__all__ = ["Array", "DType", "Device", "Namespace"]
