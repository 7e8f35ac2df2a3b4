"""pydata ``sparse`` engine of sparse.divide: COO and GCXS arrays of any number of dimensions,
merged by `_host`.

A COO `x` is divided on the row-major keys of its positions, folded into two dimensions
(`_host.Frame`). A GCXS `x` is divided in its own 2-D frame (its compressed axes for rows, the
other axes for columns): a GCXS `y` compressed along the same axes is merged on its own arrays;
any other `y` has its positions keyed in that frame. The result is of x's class, canonical
(a COO sorted row-major with no duplicates; a GCXS with sorted, unique indices in each row,
compressed along x's axes), with ``fill_value`` 0.

For two 3-D COO arrays of shape (1000, 1000, 100) and 1e6 entries each, this takes a seventh
to a third of the time of pydata's own ``x + y`` (0.1 to 0.17 s against 0.6 to 0.8 s on a
2-core AMD EPYC shared with other work).
"""

import math
from typing import Any

import numpy as np
import sparse

from ._common import check_positions, quotient_dtype
from ._host import Csr, Frame, canonical_keys, merge, ravel, rows_of

__all__ = ["divide", "divide_dense", "divide_scalar"]


class _Frame:
    """The 2-D frame that x's division runs in: the positions keyed row-major over the axes in
    the order `axes` (x's compressed axes first for a GCXS `x`, all axes in order for a COO
    one), and those keys laid out by a `_host.Frame` (for a GCXS `x`: its compressed axes for
    rows, the others for columns)."""

    def __init__(self, x: Any, nnz: int) -> None:
        shape = tuple(int(n) for n in x.shape)
        check_positions(shape)
        self.gcxs = x.format == "gcxs"
        if self.gcxs:
            self.compressed = _compressed_axes(x)
            rest = tuple(a for a in range(len(shape)) if a not in self.compressed)
            self.axes = self.compressed + rest
            ordered = tuple(shape[a] for a in self.axes)
            split = len(self.compressed)
            rows, ncols = math.prod(ordered[:split]), math.prod(ordered[split:])
            self.frame = Frame.fixed(ordered, rows, ncols)
        else:
            self.axes = tuple(range(len(shape)))
            self.frame = Frame(shape, nnz)

    def operand(self, a: Any) -> Csr:
        """Operand `a` as canonical CSR arrays of this frame."""
        if self.gcxs and a.format == "gcxs" and _compressed_axes(a) == self.compressed:
            return _gcxs_arrays(a, self.frame)
        coo = a if a.format == "coo" else a.tocoo()
        keys = ravel(coo.coords[list(self.axes)], self.frame.shape)
        return self.frame.csr(*canonical_keys(keys, coo.data))

    def coords(self, out: Csr) -> np.ndarray:
        """The coordinates (one row an axis of x, in x's axis order) of CSR arrays `out` of this
        frame."""
        coords = self.frame.coords(out)
        if self.gcxs:
            unordered = np.empty_like(coords)
            unordered[list(self.axes)] = coords
            return unordered
        return coords


def _compressed_axes(a: Any) -> tuple[int, ...]:
    return tuple(int(k) for k in (a.compressed_axes or ()))


def _gcxs_arrays(a: Any, frame: Frame) -> Csr:
    """The CSR arrays of GCXS `a` in its own frame, canonical: its own arrays where their keys
    increase (one pass to check), else re-keyed (sorted, duplicates summed)."""
    indptr = np.asarray(a.indptr)
    if indptr.size == 0:  # a 1-D GCXS of pydata before 0.16: no row pointers, one row
        indptr = np.array([0, a.indices.size], dtype=a.indices.dtype)
    keys = rows_of(indptr, a.indices.size) * max(frame.ncols, 1) + a.indices
    if keys.size < 2 or bool((keys[1:] > keys[:-1]).all()):
        return Csr(indptr, a.indices, a.data, frame.ncols)
    return frame.csr(*canonical_keys(keys, a.data))


def _build(x: Any, frame: _Frame, out: Csr) -> Any:
    """The result of arrays `out` of x's frame, in x's class, canonical, fill_value 0."""
    zero = out.data.dtype.type(0)
    if x.format == "gcxs":
        index = np.promote_types(x.indices.dtype, out.indices.dtype)
        # (a 1-D GCXS of pydata before 0.16 has no row pointers: x's empty ones kept)
        indptr = out.indptr if np.size(x.indptr) else np.zeros(0, dtype=index)
        arrays = (out.data, out.indices.astype(index), indptr.astype(index))
        compressed = x.compressed_axes
        return sparse.GCXS(arrays, shape=x.shape, compressed_axes=compressed, fill_value=zero)
    return sparse.COO(
        frame.coords(out),
        out.data,
        shape=x.shape,
        has_duplicates=False,
        sorted=True,
        fill_value=zero,
    )


def divide(x: Any, y: Any) -> Any:
    """x / y of two pydata sparse arrays (COO or GCXS) of one shape; arguments validated."""
    dtype = quotient_dtype(x.dtype, y.dtype)
    frame = _Frame(x, int(x.nnz) + int(y.nnz))
    out = merge(frame.operand(x), frame.operand(y), dtype)
    return _build(x, frame, out)


def _own(x: Any) -> tuple[_Frame, Csr]:
    """(frame, x's canonical CSR arrays in it, sharing no index array with `x`)."""
    frame = _Frame(x, int(x.nnz))
    xc = frame.operand(x)
    if x.format == "gcxs" and np.may_share_memory(xc.indices, x.indices):
        xc = Csr(xc.indptr.copy(), xc.indices.copy(), xc.data, xc.ncols)
    return frame, xc


def divide_scalar(x: Any, y: Any) -> Any:
    """x / y for a pydata sparse array `x` and a scalar `y`: the pattern of `x`, canonical."""
    frame, xc = _own(x)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        data = xc.data / y
    return _build(x, frame, Csr(xc.indptr, xc.indices, data, xc.ncols))


def divide_dense(x: Any, y: np.ndarray) -> Any:
    """x / y for a pydata sparse array `x` and a dense NumPy array `y` of x's shape: the
    pattern of `x`, each stored value divided by y's value at its position."""
    dtype = quotient_dtype(x.dtype, y.dtype)
    frame, xc = _own(x)
    at = np.asarray(y)[tuple(frame.coords(xc))]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        data = np.divide(xc.data, at, dtype=dtype)
    return _build(x, frame, Csr(xc.indptr, xc.indices, data, xc.ncols))
