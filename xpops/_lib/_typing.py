"""Type aliases used in signatures.

Arrays are duck-typed by the array API, so an array argument is typed by a type variable: a
type checker then sees the input's array type come back out (NumPy in, NumPy out).
"""

from types import ModuleType
from typing import Any, TypeAlias, TypeVar

Array: TypeAlias = Any
ArrayT = TypeVar("ArrayT")
Namespace: TypeAlias = ModuleType
Device: TypeAlias = Any
DType: TypeAlias = Any

__all__ = ["Array", "ArrayT", "DType", "Device", "Namespace"]
