"""Checks shared by the public functions; each raises with the house wording (DESIGN.md §6)."""

import operator
from typing import Any

import numpy as np


def as_int(value: Any, name: str) -> int:
    """Return `value` as a Python int; only Python ints and NumPy integer scalars are accepted."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        msg = f"`{name}` must be an integer, got {type(value).__name__} {value!r}"
        raise TypeError(msg)
    return operator.index(value)


def as_nonnegative_int(value: Any, name: str) -> int:
    """Like `as_int`, and reject negative values."""
    result = as_int(value, name)
    if result < 0:
        msg = f"`{name}` must be non-negative, got {result}"
        raise ValueError(msg)
    return result


def as_bool(value: Any, name: str) -> bool:
    """Return `value` if it is a Python bool; anything else is a `TypeError`."""
    if not isinstance(value, bool):
        msg = f"`{name}` must be a bool, got {type(value).__name__} {value!r}"
        raise TypeError(msg)
    return value
