"""What the engines of sparse.divide share: the operand checks and the quotient dtype.

The checks are those of the contract. They live here, importing no engine, because the Dask
engine repeats them on every chunk (Dask shows some chunk types only once they are computed):
a chunk then fails with the same error as the operand would have.
"""

import functools
import numbers
import sys
from typing import Any

import numpy as np

from .._lib._compat import is_dask_array
from .._lib._names import type_name

__all__ = [
    "CUPYX",
    "SCIPY",
    "check_numeric",
    "check_operands",
    "check_same_shape",
    "check_scalar",
    "check_sparse",
    "is_scalar",
    "library",
    "quotient_dtype",
]

#: The engine kinds that serve each library's sparse operands.
SCIPY, CUPYX = "numpy", "cupy"

_FORMATS = ("csr", "coo")
_SUPPORTED = (
    "a COO or CSR sparse array or matrix of scipy.sparse (NumPy backend) or of "
    "cupyx.scipy.sparse (CuPy backend)"
)


@functools.cache
def quotient_dtype(dx: np.dtype, dy: np.dtype) -> np.dtype:
    """The dtype of ``x / y`` under NumPy's true-division rules."""
    return (np.ones(1, dtype=dx) / np.ones(1, dtype=dy)).dtype


def library(a: Any) -> str | None:
    """The engine kind of a sparse matrix/array: `SCIPY` or `CUPYX`; None for anything else.

    A module not imported yet holds no operand of its types: looking modules up in
    sys.modules instead of importing them saves about 10 us a call, which the GPU would
    otherwise spend idle before the first kernel."""
    csp = sys.modules.get("cupyx.scipy.sparse")
    if csp is not None and csp.issparse(a):
        return CUPYX
    sp = sys.modules.get("scipy.sparse")
    return SCIPY if sp is not None and sp.issparse(a) else None


def check_sparse(a: Any, name: str, what: str = "") -> str:
    """The library of sparse operand `a`; TypeError for anything but COO/CSR. `what` follows
    the name in the message (``"'s chunks"`` for the chunks of a Dask array)."""
    kind = library(a)
    if kind is None:
        msg = f"`{name}`{what} must be {_SUPPORTED}, got {type_name(a)}"
        raise TypeError(msg)
    if a.format not in _FORMATS:
        msg = f"`{name}`{what} must be {_SUPPORTED}, got {type_name(a)} (format {a.format!r})"
        raise TypeError(msg)
    return kind


def is_scalar(y: Any, kind: str) -> bool:
    """Python and NumPy numbers, and 0-d arrays of the library of engine kind `kind`."""
    if isinstance(y, numbers.Number | np.generic):
        return True
    if isinstance(y, np.ndarray):
        return y.ndim == 0
    if kind == CUPYX and type(y).__module__.startswith("cupy"):
        return getattr(y, "ndim", None) == 0 and hasattr(y, "device")
    return False


def check_numeric(dtype: Any, what: str) -> None:
    """TypeError unless `dtype` is a bool, integer, floating or complex dtype."""
    if np.dtype(dtype).kind not in "biufc":
        msg = f"{what} must have a numeric dtype, got {dtype}"
        raise TypeError(msg)


def check_scalar(y: Any) -> None:
    """Check a scalar divisor (one that `is_scalar` accepts).

    A Python int is taken as NumPy takes it in ``x.data / y``: converted to the result's
    floating dtype, however large (NumPy holds ``10**30`` only as an object array, yet divides
    by it), up to the largest int that converts to a float."""
    if isinstance(y, int) and not isinstance(y, np.generic):
        try:
            float(y)
        except OverflowError:
            msg = (
                f"`y` must be a Python int that converts to a float (magnitude below about "
                f"1.8e308), got an int of {len(str(abs(y)))} digits"
            )
            raise OverflowError(msg) from None
        return
    check_numeric(y.dtype if hasattr(y, "dtype") else np.asarray(y).dtype, "`y`")


def check_same_shape(x: Any, y: Any) -> None:
    if tuple(x.shape) != tuple(y.shape):
        msg = f"`x` and `y` must have the same shape, got {tuple(x.shape)} and {tuple(y.shape)}"
        raise ValueError(msg)


def check_operands(x: Any, y: Any) -> tuple[str, bool]:
    """Validate ``divide(x, y)``: the engine kind that serves it (``"numpy"`` for SciPy,
    ``"cupy"`` for cupyx, ``"dask"`` for Dask arrays) and whether `y` is a scalar."""
    if is_dask_array(x) or is_dask_array(y):
        return "dask", False  # the Dask engine checks Dask operands (`_dask.divide`)
    kind = check_sparse(x, "x")
    check_numeric(x.dtype, "`x`")
    if is_scalar(y, kind):
        check_scalar(y)
        return kind, True
    y_kind = library(y)
    if y_kind is None or y.format not in _FORMATS:
        msg = f"`y` must be {_SUPPORTED}, or a scalar, got {type_name(y)}"
        raise TypeError(msg)
    if y_kind != kind:
        msg = (
            f"`x` and `y` must come from the same library, got {type_name(x)} and "
            f"{type_name(y)}; move one of them first"
        )
        raise TypeError(msg)
    check_numeric(y.dtype, "`y`")
    check_same_shape(x, y)
    return kind, False
