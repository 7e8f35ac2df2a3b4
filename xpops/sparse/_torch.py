"""PyTorch engine of sparse.divide: sparse COO tensors of any ``sparse_dim`` (hybrid ones
included) and CSR tensors (2-D, batched, hybrid).

Each operand is brought, with PyTorch's own operations on its device, to the CSR arrays of one
2-D frame: the rows are the leading sparse positions flattened (the batch and row indices of a
CSR tensor), the columns the last sparse index, and each entry holds its block of dense values.
Where the rows would be too many for row pointers (COO tensors of several large sparse
dimensions), the frame is the tensor's row-major keys folded into about a row per
FOLD_ROW_ENTRIES entries, as in `_host.Frame`. The union is then merged by the op's NumPy
engine for CPU tensors (`_host.divide_csr`, on NumPy views of the tensors' memory through
DLPack) and by its CuPy kernels for CUDA tensors, on PyTorch's current stream
(`_lib._torch.run_on_cupy`). On CUDA the kernels read the tensors' memory by address and
write into tensors made here (`_cupyx.divide_csr_into`), so that no tensor crosses over
by DLPack either way: each crossing costs the host microseconds that, before the first
launch and after the one synchronisation, the GPU spends idle. Blocks of values (hybrid
tensors) go through CuPy views instead (`_cupyx.divide_csr`). The result is put in x's
layout. Two COO tensors of two sparse dimensions in a natural frame (the common case:
matrices) are handed over whole instead: the engine makes their row pointers, the union and
the result's coordinates in one call (`_host.divide_coo`; `_cupyx.divide_coo_into`, whose
union kernels write the result's columns straight into its coordinates).

Values are divided in float32 for float16 and bfloat16 tensors (and complex64 for
complex32), then rounded once to the result's dtype, as PyTorch's own kernels compute; the
quotient in float32 of two such values rounded to them is the correctly rounded quotient.

A scalar or dense divisor is PyTorch's own element-wise division of x's stored values.
"""

import functools
import math
import sys
from typing import Any

import numpy as np

from .._lib import _torch as _bridge
from .._lib._dispatch import Engines
from . import _torch_layout as layout
from ._common import check_positions
from ._host import FOLD_ROW_ENTRIES, NATURAL_ROWS_PER_ENTRY, index_dtype

__all__ = ["divide", "divide_dense", "divide_scalar", "result_dtype"]


def _no_engine(*args: Any) -> Any:  # pragma: no cover - only the NumPy and CuPy kinds are asked
    msg = "the PyTorch engine of sparse.divide runs on NumPy or CuPy arrays only"
    raise NotImplementedError(msg)


# The array engines of the union, and of the COO coordinates of its CSR arrays, on the
# tensors' memory (`_lib._torch.on_device`).
_ARRAY_ENGINES = Engines(
    __package__,
    numpy="._host:divide_csr",
    cupy="._cupyx:divide_csr",
    dask=_no_engine,
    generic=_no_engine,
)
_COO_ENGINES = Engines(
    __package__,
    numpy="._host:coo_indices",
    cupy="._cupyx:coo_indices",
    dask=_no_engine,
    generic=_no_engine,
)
# Two COO operands of two sparse dimensions (matrices, hybrid ones included) in a natural
# frame: row pointers, union and coordinates in one hand-over.
_COO_2D_ENGINES = Engines(
    __package__,
    numpy="._host:divide_coo",
    cupy="._cupyx:divide_coo",
    dask=_no_engine,
    generic=_no_engine,
)

# The same on CUDA, for operands of one value an entry: the engine takes the addresses of the
# tensors' memory and writes into tensors made here (no CuPy array of either, no DLPack).
_CSR_INTO_ENGINES = Engines(
    __package__,
    numpy=_no_engine,
    cupy="._cupyx:divide_csr_into",
    dask=_no_engine,
    generic=_no_engine,
)
_COO_INTO_ENGINES = Engines(
    __package__,
    numpy=_no_engine,
    cupy="._cupyx:divide_coo_into",
    dask=_no_engine,
    generic=_no_engine,
)


def _torch() -> Any:
    return sys.modules["torch"]


def result_dtype(dx: Any, dy: Any) -> Any:
    """PyTorch's dtype of ``x / y`` for tensors of dtypes `dx` and `dy` (true division: the
    default floating dtype for integers and bools)."""
    torch = _torch()
    dtype = torch.promote_types(dx, dy)
    if dtype.is_floating_point or dtype.is_complex:
        return dtype
    return torch.get_default_dtype()


def _compute_dtype(dtype: Any) -> Any:
    """The dtype the engines divide in: float32 for float16 and bfloat16, complex64 for
    complex32, else `dtype` itself."""
    torch = _torch()
    if dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    if dtype == torch.complex32:
        return torch.complex64
    return dtype


@functools.cache
def _numpy_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _as(a: Any, dtype: Any) -> Any:
    """Tensor `a` of `dtype`, C-contiguous: itself where it is (no call into PyTorch)."""
    if a.dtype != dtype:
        a = a.to(dtype)
    return a if a.is_contiguous() else a.contiguous()


# ---- operands as coordinates and as CSR arrays of a frame ---------------------------------------


class _Frame:
    """The 2-D frame of a division: `rows` x `ncols`, each entry's position in the sparse
    shape `shape` given by its row and column (`natural`: the row is the leading sparse
    position, the column the last index; else the row-major key is ``row * ncols + col``)."""

    def __init__(self, shape: tuple[int, ...], nnz: int, natural: bool) -> None:
        self.shape = shape
        lead = math.prod(shape[:-1])
        # no positions at all (a zero-length dimension): nothing to fold
        self.natural = (
            natural or math.prod(shape) == 0 or lead <= max(NATURAL_ROWS_PER_ENTRY * nnz, 1 << 10)
        )
        if self.natural:
            self.rows, self.ncols = lead, (shape[-1] if shape else 1)
        else:
            check_positions(shape)
            positions = math.prod(shape)
            self.rows = max(1, min(positions, nnz // FOLD_ROW_ENTRIES))
            self.ncols = -(-positions // self.rows)
            self.rows = -(-positions // self.ncols)

    def csr(self, coords: Any) -> tuple[Any, Any]:
        """(indptr, indices) of sorted unique sparse coordinates in this frame."""
        torch = _torch()
        if not self.shape:  # a 0-d tensor: one position
            n = coords.shape[1]
            return coords.new_tensor([0, n]), coords.new_zeros(n)
        if self.natural:
            major = layout.ravel(coords[:-1], self.shape[:-1])
            minor = coords[-1]
        else:
            keys = layout.ravel(coords, self.shape)
            major = torch.div(keys, self.ncols, rounding_mode="floor")
            minor = keys - major * self.ncols
        bounds = torch.arange(self.rows + 1, dtype=torch.int64, device=coords.device)
        return torch.searchsorted(major, bounds), minor

    def coords(self, indptr: Any, indices: Any) -> Any:
        """The sparse coordinates of CSR arrays of this frame."""
        torch = _torch()
        if not self.shape:
            return indices.new_zeros((0, indices.shape[0]), dtype=torch.int64)
        # (row, column) of each entry in the frame, by the op's engine on the arrays' device
        frame = _bridge.on_device(_COO_ENGINES, indices.device, indptr, indices)
        if self.natural and len(self.shape) == 2:
            return frame
        if self.natural:
            return torch.cat([layout.unravel(frame[0], self.shape[:-1]), frame[1:]])
        return layout.unravel(frame[0] * self.ncols + frame[1], self.shape)


# ---- the division of two sparse tensors -----------------------------------------------------


def _union(x: Any, y: Any, dtype: Any) -> tuple[Any, Any, Any, Any]:
    """(frame, indptr, indices, values) of x / y, values of compute dtype `dtype`."""
    torch = _torch()
    engine_dtype = _numpy_name(dtype)
    csr_pair = x.layout == y.layout == torch.sparse_csr
    if csr_pair:  # both CSR: their own (stacked) arrays, no coordinates
        xptr, xidx, xv, ncols = layout.batch_csr(x)
        yptr, yidx, yv, _ = layout.batch_csr(y)
        frame = None
    else:
        xc, xv = layout.coords(x)
        yc, yv = layout.coords(y)
        # a CSR x has row pointers of its frame's rows: the natural frame
        natural = x.layout == torch.sparse_csr
        frame = _Frame(layout.sparse_shape(x), xc.shape[1] + yc.shape[1], natural)
        (xptr, xidx), (yptr, yidx) = frame.csr(xc), frame.csr(yc)
        ncols = frame.ncols
    xv, yv = (v if v.dtype == dtype else v.to(dtype) for v in (xv, yv))
    if x.device.type == "cuda" and xv.ndim == 1 and xidx.shape[0] > 0:
        # a CSR x gives the result its index dtype (`_csr_result`)
        wide = x.layout == torch.sparse_csr and x.crow_indices().dtype == torch.int64
        return (frame, *_cuda_csr(xptr, xidx, xv, yptr, yidx, yv, ncols, dtype, wide))
    if xptr.dtype != yptr.dtype:  # CSR operands of two index dtypes (`_cuda_csr` casts its own)
        xptr, xidx, yptr, yidx = (a.to(torch.int64) for a in (xptr, xidx, yptr, yidx))
    out = _bridge.on_device(
        _ARRAY_ENGINES, x.device, xptr, xidx, xv, yptr, yidx, yv, ncols, engine_dtype
    )
    return (frame, *out)


def _cut(a: Any, n: int) -> Any:
    """The first `n` entries of a result buffer: a copy where that keeps less than half of
    it (the result does not hold twice the memory it needs), else a view."""
    return a[:n].clone() if n < a.shape[0] // 2 else a[:n]


def _cuda_csr(
    xptr: Any, xidx: Any, xv: Any, yptr: Any, yidx: Any, yv: Any, ncols: int, dtype: Any,
    wide: bool,
) -> tuple[Any, Any, Any]:  # fmt: skip
    """(indptr, indices, values) of x / y for the canonical CSR arrays of two CUDA operands of
    one value an entry (x storing at least one), by `_cupyx.divide_csr_into` on their memory,
    into tensors made here. The kernels take int32 indices where every size fits (half the
    index traffic of int64 ones, for a cast of int64 operands), and write the result's
    indices as int64 where `wide` (or a size needs it) and as int32 otherwise."""
    torch = _torch()
    nx, ny, rows = int(xidx.shape[0]), int(yidx.shape[0]), int(xptr.shape[0]) - 1
    fits = index_dtype(nx + ny, rows + 1, ncols) == np.int32
    index = torch.int32 if fits else torch.int64
    out_index = torch.int64 if wide or not fits else torch.int32
    xptr, xidx, yptr, yidx = (_as(a, index) for a in (xptr, xidx, yptr, yidx))
    xv, yv = _as(xv, dtype), _as(yv, dtype)
    device = xv.device
    made: list[Any] = []

    def allocate() -> tuple[int, int, int]:
        made.append(torch.empty(rows + 1, dtype=index, device=device))
        made.append(torch.empty(nx + ny, dtype=out_index, device=device))
        made.append(torch.empty(nx + ny, dtype=dtype, device=device))
        return made[0].data_ptr(), made[1].data_ptr(), made[2].data_ptr()

    x = (xptr.data_ptr(), xidx.data_ptr(), xv.data_ptr())
    y = (yptr.data_ptr(), yidx.data_ptr(), yv.data_ptr())
    names = _numpy_name(index), _numpy_name(out_index), _numpy_name(dtype)
    engine = _CSR_INTO_ENGINES["cupy"]
    nnz = _bridge.run_on_cupy(
        device.index, lambda view: engine(x, y, rows, nx, ny, *names, allocate)
    )
    indptr, indices, values = made
    return indptr, _cut(indices, nnz), _cut(values, nnz)


def _cuda_coo(xc: Any, xv: Any, yc: Any, yv: Any, shape: tuple[int, int], dtype: Any) -> Any:
    """(coordinates, values) of x / y for two coalesced 2-D COO CUDA operands of one value an
    entry (x storing at least one), by `_cupyx.divide_coo_into` on their memory, into tensors
    made here."""
    torch = _torch()
    xc, yc, xv, yv = (a.contiguous() for a in (xc, yc, xv, yv))
    nx, ny, device = int(xc.shape[1]), int(yc.shape[1]), xv.device
    made: dict[str, Any] = {}

    def allocate_values() -> int:
        made["values"] = torch.empty(nx + ny, dtype=dtype, device=device)
        return int(made["values"].data_ptr())

    def allocate_coords(n: int) -> int:
        made["coords"] = torch.empty(n, dtype=torch.int64, device=device)
        return int(made["coords"].data_ptr())

    x, y = (xc.data_ptr(), xv.data_ptr()), (yc.data_ptr(), yv.data_ptr())
    engine, name = _COO_INTO_ENGINES["cupy"], _numpy_name(dtype)
    nnz = _bridge.run_on_cupy(
        device.index,
        lambda view: engine(x, y, nx, ny, shape, name, allocate_values, allocate_coords),
    )
    return _cut(made["coords"], 2 * nnz).view(2, nnz), _cut(made["values"], nnz)


def _index_dtype(like: Any, nnz: int, ncols: int) -> Any:
    """The index dtype of a CSR result: that of `like` (x's row pointers; PyTorch's CSR
    tensors take int32 or int64 indices, both of one dtype), int64 if the result needs it."""
    torch = _torch()
    if like.dtype == torch.int32 and max(nnz, ncols) <= 2**31 - 1:
        return torch.int32
    return torch.int64


def _csr_result(x: Any, indptr: Any, indices: Any, values: Any, dtype: Any) -> Any:
    """The CSR tensor of x's shape (and batches) from stacked CSR arrays."""
    torch = _torch()
    crow = x.crow_indices()
    batch_shape = tuple(crow.shape[:-1])
    per = crow.shape[-1] - 1
    if batch_shape:
        batch = math.prod(batch_shape)
        starts = torch.arange(batch + 1, device=indptr.device) * per
        counts = indptr[starts[1:]] - indptr[starts[:-1]]
        if batch and bool((counts != counts[0]).any()):
            msg = (
                f"the quotient of batched CSR tensors stores a different number of entries in "
                f"each batch ({counts.tolist()}), which PyTorch's batched CSR layout cannot "
                f"hold; divide COO tensors instead (x.to_sparse_coo())"
            )
            raise ValueError(msg)
        nnz = int(counts[0]) if batch else 0
        at = starts[:-1, None] + torch.arange(per + 1, device=indptr.device)
        indptr = (indptr[at] - indptr[starts[:-1], None]).reshape(*batch_shape, per + 1)
        indices = indices.reshape(*batch_shape, nnz)
        values = values.reshape(*batch_shape, nnz, *values.shape[1:])
    index = _index_dtype(crow, int(indices.shape[-1]), int(x.shape[crow.ndim]))
    indptr, indices, values = _as(indptr, index), _as(indices, index), _as(values, dtype)
    return layout.csr_tensor(indptr, indices, values, tuple(x.shape))


def _coo_2d(x: Any, y: Any, dtype: Any) -> Any:
    """x / y of two COO tensors of two sparse dimensions whose rows can have row pointers (a
    natural frame): one engine call; None for other operands."""
    torch = _torch()
    if not x.layout == y.layout == torch.sparse_coo:
        return None
    shape = layout.sparse_shape(x)
    if len(shape) != 2 or not _Frame(shape, x._nnz() + y._nnz(), False).natural:
        return None
    cx, cy = layout.coalesced(x), layout.coalesced(y)
    compute = _compute_dtype(dtype)
    xv, yv = (v if v.dtype == compute else v.to(compute) for v in (cx.values(), cy.values()))
    if x.device.type == "cuda" and xv.ndim == 1 and xv.shape[0] > 0:
        coords, values = _cuda_coo(cx.indices(), xv, cy.indices(), yv, shape, compute)
    else:
        coords, values = _bridge.on_device(
            _COO_2D_ENGINES, x.device, cx.indices(), xv, cy.indices(), yv, shape,
            _numpy_name(compute),
        )  # fmt: skip
    return _coo(coords, values.to(dtype), x)


def divide(x: Any, y: Any) -> Any:
    """x / y of two PyTorch sparse tensors of one shape and dense dimensions; validated."""
    torch = _torch()
    _bridge.check_device(x.device)  # before any work
    dtype = result_dtype(x.dtype, y.dtype)
    out = _coo_2d(x, y, dtype)
    if out is not None:
        return out
    frame, indptr, indices, values = _union(x, y, _compute_dtype(dtype))
    if x.layout == torch.sparse_csr:  # the frame, if any, is x's stacked CSR frame
        return _csr_result(x, indptr, indices, values, dtype)
    coords = frame.coords(indptr, indices)
    return _coo(coords, values.to(dtype), x)


# ---- scalar and dense divisors: PyTorch's own division of the stored values ------------------


def _own(x: Any) -> tuple[Any, Any, Any]:
    """(x's structure as index tensors of its own, the sparse coordinates of its stored
    values, its values): a COO x coalesced, a CSR x as it is."""
    torch = _torch()
    if x.layout == torch.sparse_coo:
        c = layout.coalesced(x)
        indices = c.indices()
        return (indices.clone(),), indices, c.values()
    crow, col = x.crow_indices(), x.col_indices()
    return (crow.clone(), col.clone()), None, x.values().detach()


def _coo(indices: Any, values: Any, x: Any) -> Any:
    """A coalesced COO tensor of x's shape."""
    return layout.coo_tensor(indices, values, tuple(x.shape), coalesced=True)


def _like(x: Any, structure: tuple[Any, ...], values: Any) -> Any:
    torch = _torch()
    if x.layout == torch.sparse_coo:
        (indices,) = structure
        return _coo(indices, values, x)
    crow, col = structure
    return layout.csr_tensor(crow, col, values, tuple(x.shape))


def _scalar(y: Any) -> Any:
    """A scalar divisor as PyTorch takes it: a Python int past int64 as a float (the float it
    converts to, as NumPy takes it), a NumPy number or 0-d array as a Python number."""
    if isinstance(y, np.ndarray | np.generic):
        y = y.item()
    if isinstance(y, int) and not isinstance(y, bool) and not -(2**63) <= y < 2**63:
        return float(y)
    return y


def divide_scalar(x: Any, y: Any) -> Any:
    """x / y for a PyTorch sparse tensor `x` and a scalar `y` (a number or 0-d tensor): x's
    pattern (a COO x coalesced), its values divided by PyTorch."""
    structure, _, values = _own(x)
    if not isinstance(y, _torch().Tensor):
        y = _scalar(y)
    return _like(x, structure, values / (y.detach() if hasattr(y, "detach") else y))


def divide_dense(x: Any, y: Any) -> Any:
    """x / y for a PyTorch sparse tensor `x` and a strided tensor `y` of x's shape: x's
    pattern, each stored value (block) divided by y's value (block) at its position."""
    structure, coords, values = _own(x)
    if coords is None:  # CSR: the coordinates of its batches stacked
        coords, flat = layout.coords(x)
        at = y.detach()[tuple(coords)]
        return _like(x, structure, (flat / at).reshape(values.shape))
    return _like(x, structure, values / y.detach()[tuple(coords)])
