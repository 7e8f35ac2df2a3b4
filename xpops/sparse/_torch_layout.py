"""PyTorch sparse tensors as index and value tensors, with PyTorch's own operations on their
device: what the PyTorch engine of sparse.divide (`_torch`) and the rule's PyTorch backward
(`_vjp_torch`) share.

A tensor's sparse positions are its leading dimensions (all but its ``dense_dim()`` trailing
ones: the batch, row and column indices of a CSR tensor); each stored position holds a block
of the dense dimensions' values.
"""

import math
import sys
import warnings
from collections.abc import Callable
from typing import Any

__all__ = [
    "batch_csr",
    "coalesced",
    "coo_tensor",
    "coords",
    "csr_major",
    "csr_tensor",
    "ravel",
    "raw_coords",
    "sparse_shape",
    "unravel",
]


def _torch() -> Any:
    return sys.modules["torch"]


# PyTorch warns, once a process, that invariant checks are off even where the call turns them
# off explicitly (seen with 2.11); ours hold by construction, so the warning is no news.
_UNCHECKED = "Sparse invariant checks are implicitly disabled"
# The constructors ("coo", "csr") called once under the filter: PyTorch warns at most once a
# process and constructor, so later calls skip the filter, which costs a few microseconds and
# makes Python forget which warnings every module has already shown.
_FILTERED: set[str] = set()


def _unwarned(kind: str, build: Callable[[], Any]) -> Any:
    """``build()``, PyTorch's warning about unchecked invariants silenced on the first call of
    constructor `kind`."""
    if kind in _FILTERED:
        return build()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", _UNCHECKED, UserWarning)
        out = build()
    _FILTERED.add(kind)
    return out


def coo_tensor(indices: Any, values: Any, size: tuple[int, ...], *, coalesced: bool) -> Any:
    """A COO tensor whose invariants hold by construction: not checked, no warning."""
    return _unwarned(
        "coo",
        lambda: _torch().sparse_coo_tensor(
            indices, values, size, is_coalesced=coalesced, check_invariants=False
        ),
    )


def csr_tensor(crow: Any, col: Any, values: Any, size: tuple[int, ...]) -> Any:
    """A CSR tensor (batched as PyTorch stacks them) whose invariants hold by construction:
    not checked, no warning."""
    return _unwarned(
        "csr",
        lambda: _torch().sparse_csr_tensor(crow, col, values, size=size, check_invariants=False),
    )


def sparse_shape(a: Any) -> tuple[int, ...]:
    """The shape of a's sparse positions: all dimensions but the dense ones."""
    return tuple(a.shape[: a.ndim - a.dense_dim()])


def coalesced(a: Any) -> Any:
    """A COO tensor coalesced, with IEEE sums of its duplicates, detached: the engines'
    forward is not recorded (the autograd binding records it).

    PyTorch sums duplicates from the first on the CPU (a sum of -0.0 alone stays -0.0), but
    gives +0.0 for it on CUDA; there the positions whose terms are all -0.0 are found by a
    second coalesce, of the count of other terms (the same indices give the same order),
    and set to -0.0."""
    torch = _torch()
    a = a.detach()
    if a.is_coalesced():
        return a
    c = a.coalesce()
    values = a._values()
    if a.device.type == "cpu" or not (values.is_floating_point() or values.is_complex()):
        return c
    parts = torch.view_as_real(values) if values.is_complex() else values
    plain = ((parts != 0) | ~torch.signbit(parts)).to(torch.float32)  # NaN included
    size = (*a.shape, *parts.shape[values.ndim :])
    others = coo_tensor(a._indices(), plain, size, coalesced=False)
    negative_zero = others.coalesce()._values() == 0
    summed = c._values()
    summed_parts = torch.view_as_real(summed) if summed.is_complex() else summed
    fixed = torch.where(negative_zero, torch.full_like(summed_parts, -0.0), summed_parts)
    if summed.is_complex():
        fixed = torch.view_as_complex(fixed.contiguous())
    return coo_tensor(c._indices(), fixed, tuple(a.shape), coalesced=True)


def ravel(coords: Any, shape: tuple[int, ...]) -> Any:
    """Row-major linear indices (int64) of `coords` (one row an axis) in `shape`: for a 1-D
    `shape`, ``coords[0]`` itself (a view, not to be written to)."""
    torch = _torch()
    if len(shape) == 1:  # the coordinates themselves
        return coords[0].to(torch.int64)
    keys = torch.zeros(coords.shape[1], dtype=torch.int64, device=coords.device)
    for axis, n in enumerate(shape):
        keys = keys * n + coords[axis]
    return keys


def unravel(keys: Any, shape: tuple[int, ...]) -> Any:
    """The coordinates (int64, one row an axis) of row-major linear indices `keys`."""
    torch = _torch()
    out = torch.empty((len(shape), keys.shape[0]), dtype=torch.int64, device=keys.device)
    for axis in range(len(shape) - 1, -1, -1):
        n = shape[axis]
        out[axis] = keys % n if n else keys
        keys = torch.div(keys, n, rounding_mode="floor") if n else keys
    return out


def csr_major(indptr: Any, n: int) -> Any:
    """The row of each of the `n` entries of row pointers `indptr`."""
    torch = _torch()
    at = torch.arange(n, dtype=indptr.dtype, device=indptr.device)
    return torch.searchsorted(indptr[1:], at, right=True)


def batch_csr(a: Any) -> tuple[Any, Any, Any, int]:
    """(indptr, indices, values, ncols) of CSR tensor `a` with its batches stacked: row ``r``
    of batch ``b`` is row ``b * rows_per_batch + r``."""
    torch = _torch()
    crow, col, values = a.crow_indices(), a.col_indices(), a.values()
    if values.requires_grad:
        values = values.detach()
    if crow.ndim == 1:
        return crow, col, values, int(a.shape[1])
    batch = math.prod(crow.shape[:-1])
    per = crow.shape[-1] - 1  # rows a batch
    ncols = int(a.shape[crow.ndim])
    nnz = col.shape[-1]  # entries a batch (the same in every batch)
    block = values.shape[crow.ndim :]  # values: (*batch, nnz, *block)
    crow = crow.reshape(batch, per + 1).to(torch.int64)
    offsets = torch.arange(batch, dtype=torch.int64, device=crow.device)[:, None] * nnz
    indptr = torch.cat([(crow[:, :-1] + offsets).reshape(-1), crow.new_full((1,), batch * nnz)])
    values = values.reshape(batch * nnz, *block)
    return indptr, col.reshape(-1).to(torch.int64), values, ncols


def coords(a: Any) -> tuple[Any, Any]:
    """(coordinates of the sparse positions, one row an axis, sorted row-major and unique;
    values) of operand `a`."""
    torch = _torch()
    if a.layout == torch.sparse_coo:
        c = coalesced(a)
        return c.indices(), c.values()
    indptr, indices, values, _ = batch_csr(a)
    major = csr_major(indptr, indices.shape[0])
    lead = sparse_shape(a)[:-1]
    return torch.cat([unravel(major, lead), indices.to(torch.int64)[None]]), values


def raw_coords(a: Any) -> tuple[Any, Any]:
    """(coordinates of the sparse positions, values) of operand `a` as it stores them: a COO
    tensor's indices and values as they are (not coalesced: duplicates and order kept), a CSR
    tensor's with its batches stacked."""
    torch = _torch()
    if a.layout == torch.sparse_coo:
        return a._indices(), a._values().detach()
    return coords(a)
