"""Generic engine of logcumsumexp: any other array-API namespace (array-api-strict, PyTorch,
JAX, ...), by the log-depth scan of `_logdepth` in the array's own namespace."""

from .._lib import _compat
from .._lib._typing import Array
from ._logdepth import log_depth_scan

__all__ = ["logcumsumexp"]


def logcumsumexp(x: Array, axis: int, exclusive: bool, reverse: bool) -> Array:
    """Scan `axis` of `x` (real or complex floating, ndim >= 1; validated and cast by the
    contract) in log2(n) rounds of array-API operations."""
    return log_depth_scan(x, axis, exclusive, reverse, _compat.array_namespace(x))
