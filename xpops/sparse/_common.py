"""What the engines of sparse.divide share: the operand checks and the quotient dtype.

The checks are those of the contract. They live here, importing no engine, because the Dask
engine repeats them on every chunk (Dask shows some chunk types only once they are computed):
a chunk then fails with the same error as the operand would have.

Each library of sparse operands is served by one engine kind of the dispatch tables: SciPy by
the NumPy engine, cupyx by the CuPy engine, PyTorch's sparse tensors by the ``torch`` engine,
and pydata ``sparse`` by the ``generic`` one (it is neither SciPy nor cupyx, as Dask's chunk
dispatch also sees it: ``_lib._dask.chunk_engine``).
"""

import functools
import math
import numbers
import sys
from typing import Any

import numpy as np

from .._lib._compat import is_dask_array
from .._lib._dtypes import INT64_MAX
from .._lib._names import type_name

__all__ = [
    "CUPYX",
    "DENSE",
    "PYDATA",
    "SCALAR",
    "SCIPY",
    "SPARSE",
    "TORCH",
    "check_numeric",
    "check_operands",
    "check_positions",
    "check_same_shape",
    "check_scalar",
    "check_sparse",
    "is_dense",
    "is_scalar",
    "library",
    "quotient_dtype",
    "torch_layout",
]

#: The engine kinds that serve each library's sparse operands.
SCIPY, CUPYX, PYDATA, TORCH = "numpy", "cupy", "generic", "torch"
#: The forms of the divisor: a sparse operand, a scalar, a dense array of x's shape.
SPARSE, SCALAR, DENSE = "sparse", "scalar", "dense"

_PYDATA_FORMATS = ("coo", "gcxs")
_TORCH_LAYOUTS = ("sparse_coo", "sparse_csr")
_SUPPORTED = (
    "a sparse array or matrix of scipy.sparse (NumPy backend) or cupyx.scipy.sparse (CuPy "
    "backend), a COO or GCXS array of pydata sparse, or a PyTorch sparse COO or CSR tensor"
)
# The dense divisors of each library (by engine kind), for messages.
_DENSE_NAMES = {
    SCIPY: "a NumPy array",
    CUPYX: "a CuPy array",
    PYDATA: "a NumPy array",
    TORCH: "a strided PyTorch tensor",
}


@functools.cache
def quotient_dtype(dx: np.dtype, dy: np.dtype) -> np.dtype:
    """The dtype of ``x / y`` under NumPy's true-division rules."""
    return (np.ones(1, dtype=dx) / np.ones(1, dtype=dy)).dtype


def torch_layout(a: Any) -> str | None:
    """The layout of a PyTorch tensor (``"strided"``, ``"sparse_coo"``, ...), None for anything
    else (PyTorch is not imported here: a tensor exists only once it is)."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(a, torch.Tensor):
        return None
    layout = a.layout
    name = _LAYOUT_NAMES.get(layout)
    if name is None:
        name = _LAYOUT_NAMES[layout] = str(layout).removeprefix("torch.")
    return name


# The names of PyTorch's layouts, by layout, as `torch_layout` meets them (a lookup, not a str).
_LAYOUT_NAMES: dict[Any, str] = {}


@functools.cache
def _torch_numeric(dtype: Any) -> bool:
    """Whether PyTorch dtype `dtype` is numeric as `check_numeric` takes it: bool, uint8, int8
    to int64, or a floating or complex dtype of at least 2 bytes (PyTorch imported)."""
    torch = sys.modules["torch"]
    ints = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
    inexact = dtype.is_floating_point or dtype.is_complex
    return dtype in ints or (inexact and dtype.itemsize >= 2)


def _torch_pair(x: Any, y: Any) -> bool:
    """Whether `x` and `y` are two PyTorch sparse tensors that pass every check of
    `check_operands` (COO or CSR layouts, numeric dtypes, one shape, device and number of
    dense dimensions): the common PyTorch call, checked in a few microseconds of host time,
    which on CUDA the GPU spends idle. Anything else is left to the general checks, which
    also give the errors."""
    torch = sys.modules.get("torch")
    if torch is None or type(x) is not torch.Tensor or type(y) is not torch.Tensor:
        return False
    taken = (torch.sparse_coo, torch.sparse_csr)
    return (
        x.layout in taken
        and y.layout in taken
        and _torch_numeric(x.dtype)
        and _torch_numeric(y.dtype)
        and x.shape == y.shape
        and x.device == y.device
        and x.dense_dim() == y.dense_dim()
    )


def library(a: Any) -> str | None:
    """The engine kind of a sparse operand: `SCIPY`, `CUPYX`, `PYDATA` or `TORCH`; None for
    anything else (a dense array or tensor included).

    A module not imported yet holds no operand of its types: looking modules up in
    sys.modules instead of importing them saves about 10 us a call, which the GPU would
    otherwise spend idle before the first kernel."""
    csp = sys.modules.get("cupyx.scipy.sparse")
    if csp is not None and csp.issparse(a):
        return CUPYX
    sp = sys.modules.get("scipy.sparse")
    if sp is not None and sp.issparse(a):
        return SCIPY
    layout = torch_layout(a)
    if layout is not None:
        return TORCH if layout != "strided" else None
    pydata = sys.modules.get("sparse")
    if pydata is not None and isinstance(a, getattr(pydata, "SparseArray", ())):
        return PYDATA
    return None


def _format(a: Any, kind: str) -> str:
    """The format of a sparse operand of engine kind `kind` (a PyTorch tensor's layout)."""
    if kind == TORCH:
        return str(torch_layout(a))
    return str(getattr(a, "format", type(a).__name__.lower()))


def check_sparse(a: Any, name: str, what: str = "") -> str:
    """The library of sparse operand `a`; TypeError for anything else, and for pydata formats
    other than COO and GCXS, PyTorch layouts other than COO and CSR. `what` follows the name
    in the message (``"'s chunks"`` for the chunks of a Dask array)."""
    kind = library(a)
    if kind is None:
        msg = f"`{name}`{what} must be {_SUPPORTED}, got {type_name(a)}"
        raise TypeError(msg)
    fmt = _format(a, kind)
    if (kind == PYDATA and fmt not in _PYDATA_FORMATS) or (
        kind == TORCH and fmt not in _TORCH_LAYOUTS
    ):
        msg = f"`{name}`{what} must be {_SUPPORTED}, got {type_name(a)} (format {fmt!r})"
        raise TypeError(msg)
    if kind == PYDATA and not _zero(a.fill_value):
        msg = (
            f"`{name}`{what} must have fill_value 0 (the union semantics of sparse.divide hold "
            f"for implicit zeros), got fill_value {a.fill_value!r}"
        )
        raise ValueError(msg)
    return kind


def _zero(value: Any) -> bool:
    with np.errstate(invalid="ignore"):
        return bool(np.asarray(value) == 0)


def is_scalar(y: Any, kind: str) -> bool:
    """Python and NumPy numbers, 0-d NumPy arrays, and the 0-d arrays of the library of engine
    kind `kind` (CuPy arrays for cupyx, strided tensors for PyTorch)."""
    if isinstance(y, numbers.Number | np.generic):
        return True
    if isinstance(y, np.ndarray):
        return y.ndim == 0
    if kind == CUPYX and type(y).__module__.startswith("cupy"):
        return getattr(y, "ndim", None) == 0 and hasattr(y, "device")
    if kind == TORCH and torch_layout(y) == "strided":
        return y.ndim == 0
    return False


def is_dense(y: Any, kind: str) -> bool:
    """Whether `y` is a dense array of the library of engine kind `kind` with at least one
    dimension (0-d arrays are scalars): a NumPy array (or matrix) for SciPy and pydata, a CuPy
    array for cupyx, a strided tensor for PyTorch."""
    if kind in (SCIPY, PYDATA):  # not a masked array: its mask would be ignored
        return isinstance(y, np.ndarray) and not isinstance(y, np.ma.MaskedArray) and y.ndim > 0
    if kind == CUPYX:
        cupy = sys.modules.get("cupy")
        return cupy is not None and isinstance(y, cupy.ndarray) and y.ndim > 0
    return torch_layout(y) == "strided" and y.ndim > 0


def check_numeric(dtype: Any, what: str) -> None:
    """TypeError unless `dtype` (NumPy's or PyTorch's) is a bool, integer, floating or complex
    dtype (for PyTorch: bool, uint8, int8 to int64, float16 to float64, complex32 to
    complex128)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(dtype, torch.dtype):
        if _torch_numeric(dtype):
            return
    elif np.dtype(dtype).kind in "biufc":
        return
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


def check_same_shape(x: Any, y: Any, dense: bool = False) -> None:
    """ValueError unless `x` and `y` have one shape; `dense`: `y` is a dense divisor, which
    sparse.divide does not broadcast (the message says so)."""
    if tuple(x.shape) != tuple(y.shape):
        msg = f"`x` and `y` must have the same shape, got {tuple(x.shape)} and {tuple(y.shape)}"
        if dense:
            msg += (
                "; a dense `y` is not broadcast (it divides x's stored values one by one): "
                "expand it to x's shape first, or divide by a scalar"
            )
        raise ValueError(msg)


def check_positions(shape: tuple[int, ...], name: str = "x") -> None:
    """ValueError when an N-D operand has 2**63 positions or more: its row-major keys (int64)
    would overflow."""
    if math.prod(shape) > INT64_MAX:
        msg = f"`{name}` must have fewer than 2**63 positions, got shape {shape}"
        raise ValueError(msg)


def _check_devices(x: Any, y: Any, kind: str) -> None:
    """ValueError unless PyTorch operands share a device (a 0-d CPU tensor divides any)."""
    if kind != TORCH or torch_layout(y) is None or y.device == x.device:
        return
    if torch_layout(y) == "strided" and y.ndim == 0 and y.device.type == "cpu":
        return
    msg = f"`x` and `y` must be on the same device, got {x.device} and {y.device}"
    raise ValueError(msg)


def check_operands(x: Any, y: Any) -> tuple[str, str]:
    """Validate ``divide(x, y)``: the engine kind that serves it (`SCIPY`, `CUPYX`, `PYDATA`,
    `TORCH`, or ``"dask"`` for Dask arrays) and the form of `y` (`SPARSE`, `SCALAR` or
    `DENSE`)."""
    if _torch_pair(x, y):
        return TORCH, SPARSE
    if is_dask_array(x) or is_dask_array(y):
        return "dask", SPARSE  # the Dask engine checks Dask operands (`_dask.divide`)
    kind = check_sparse(x, "x")
    check_numeric(x.dtype, "`x`")
    if is_scalar(y, kind):
        check_scalar(y)
        _check_devices(x, y, kind)
        return kind, SCALAR
    if is_dense(y, kind):
        check_numeric(y.dtype, "`y`")
        check_same_shape(x, y, dense=True)
        _check_devices(x, y, kind)
        return kind, DENSE
    y_kind = library(y)
    if y_kind is None:
        msg = (
            f"`y` must be {_SUPPORTED}, {_DENSE_NAMES[kind]} of x's shape, or a scalar, got "
            f"{type_name(y)}"
        )
        raise TypeError(msg)
    if y_kind != kind:
        msg = (
            f"`x` and `y` must come from the same library, got {type_name(x)} and "
            f"{type_name(y)}; move one of them first"
        )
        raise TypeError(msg)
    check_sparse(y, "y")
    check_numeric(y.dtype, "`y`")
    check_same_shape(x, y)
    _check_devices(x, y, kind)
    if kind == TORCH and x.dense_dim() != y.dense_dim():
        msg = (
            f"`x` and `y` must have the same dense dimensions (PyTorch's dense_dim: trailing "
            f"dimensions stored whole at each sparse position), got {x.dense_dim()} and "
            f"{y.dense_dim()}"
        )
        raise ValueError(msg)
    return kind, SPARSE
