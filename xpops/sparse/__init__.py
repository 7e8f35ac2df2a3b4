"""Sparse matrices: element-wise division that stays sparse."""

from ._divide import divide

__all__ = ["divide"]
