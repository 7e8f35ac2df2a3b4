"""Linear algebra: solves from a Cholesky factor, batched and broadcasting."""

from ._cholesky import cholesky_solve

__all__ = ["cholesky_solve"]
