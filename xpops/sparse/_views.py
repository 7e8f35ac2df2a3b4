"""Sparse operands of SciPy, cupyx and pydata seen element by element, for the backward rule
of sparse.divide (`_vjp`): the coordinates of the stored values in stored order, the values,
whether they are sorted in a given key order without repeats, and how to build an operand of
the same class and stored structure holding other values.

A key order is a permutation of the axes (``axes``): a position's key is its row-major index
over the axes in that order. A canonical CSR or COO operand is sorted in the identity order, a
canonical CSC one in the transposed order, a canonical GCXS one in its compressed-axes-first
order.
"""

from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np

from ._common import PYDATA, SCIPY
from ._host import rows_of

__all__ = ["View", "compressed", "key_axes", "known_canonical", "like", "view"]

# SciPy formats whose gradient is a CSR on the pattern SciPy's tocsr() gives them (cupyx has
# DIA too): the pattern the forward divided.
_CONVERTED = ("bsr", "dok", "lil", "dia")


class View(NamedTuple):
    """An operand element by element (see the module docstring)."""

    coords: tuple[Any, ...]
    data: Any
    ordered: bool  # sorted in the key order it was viewed in, no repeated positions
    like: Callable[[Any], Any]  # an operand of the same class and structure holding values


def known_canonical(a: Any) -> bool:
    """Whether cupyx has found compressed matrix `a` canonical: the answer cupyx cached only
    (asking anew synchronises; the forward's check leaves it on its operands and result)."""
    return getattr(a, "_has_canonical_format", None) is True


def compressed(
    cls: Any, data: Any, indices: Any, indptr: Any, shape: tuple[int, int], flags_of: Any = None
) -> Any:
    """A cupyx compressed matrix `cls` (csr_matrix, csc_matrix) of its arrays (indices and
    indptr of one dtype), without the content checks (host synchronisations) of cupyx's
    constructors: by CuPy's constructor from checked parts where it has one (CuPy 14.2 on an
    H200 host: 7 us, against 33 for an empty matrix whose arrays are then replaced). cupyx's
    cached checks (sorted, canonical) are those of `flags_of`; without it, canonical."""
    from_parts = getattr(cls, "_from_parts", None)
    if from_parts is not None:
        out = from_parts(data, indices, indptr, shape)
    else:
        out = cls(shape, dtype=data.dtype)
        out.data, out.indices, out.indptr = data, indices, indptr
    if flags_of is None:
        out.has_canonical_format = True
        return out
    for flag in ("_has_canonical_format", "_has_sorted_indices"):
        if hasattr(flags_of, flag):
            setattr(out, flag, getattr(flags_of, flag))
        elif hasattr(out, flag):
            delattr(out, flag)
    return out


def key_axes(a: Any) -> tuple[int, ...]:
    """The key order a canonical operand `a` (of any library here) is sorted in."""
    ndim = len(a.shape)
    if a.format == "csc":
        return (1, 0)
    if a.format == "gcxs":
        compressed = tuple(int(k) for k in (a.compressed_axes or ()))
        return compressed + tuple(k for k in range(ndim) if k not in compressed)
    return tuple(range(ndim))


def _major(xp: ModuleType, indptr: Any, nnz: int) -> Any:
    """The row (column, for CSC) of each of the `nnz` entries of compressed pointers."""
    if xp is np:
        return rows_of(indptr, nnz)
    return xp.searchsorted(indptr[1:], xp.arange(nnz), side="right")  # no repeat by counts


def _increasing(xp: ModuleType, coords: tuple[Any, ...], shape: tuple, axes: tuple) -> bool:
    """Whether positions `coords` are strictly increasing in key order `axes` (one pass on
    the host; on the GPU a host synchronisation, so only asked of host operands)."""
    if xp is not np or coords[0].shape[0] < 2:
        return xp is np
    keys = np.zeros(coords[0].shape[0], dtype=np.int64)
    for axis in axes:
        keys *= shape[axis]
        keys += coords[axis]
    return bool((keys[1:] > keys[:-1]).all())


def view(kind: str, xp: ModuleType, a: Any, axes: tuple[int, ...]) -> View:
    """Sparse operand `a` of library `kind` (`SCIPY`, `CUPYX` or `PYDATA`) element by element,
    `ordered` judged in key order `axes`. A BSR, DOK, LIL or DIA operand is seen (and its
    gradient built) as the CSR that ``tocsr()`` gives it, of its container kind."""
    if kind == PYDATA:
        return _pydata_view(a, axes)
    if a.format in _CONVERTED:
        return _converted_view(kind, xp, a, axes)
    fmt, shape = a.format, tuple(a.shape)
    if fmt == "coo":
        coords = tuple(a.coords) if hasattr(a, "coords") else (a.row, a.col)
        ordered = bool(a.has_canonical_format) and axes == tuple(range(len(shape)))
    elif len(shape) == 1:  # a 1-D CSR array
        coords = (a.indices,)
        ordered = bool(a.has_canonical_format)
    else:
        major = _major(xp, a.indptr, a.indices.shape[0])
        coords = (major, a.indices) if fmt == "csr" else (a.indices, major)
        # cupyx's check of a CSR or CSC matrix synchronises: on the GPU only the answer cupyx
        # cached is read (the forward's check leaves it on the operands)
        canonical = bool(a.has_canonical_format) if kind == SCIPY else known_canonical(a)
        ordered = canonical and axes == key_axes(a)
    return View(coords, a.data, ordered, lambda data: like(kind, a, data))


def _converted_view(kind: str, xp: ModuleType, a: Any, axes: tuple[int, ...]) -> View:
    c = a.tocsr()
    v = view(kind, xp, c, axes)
    if kind == SCIPY:
        import scipy.sparse as sp

        cls = sp.csr_matrix if isinstance(a, sp.spmatrix) else sp.csr_array
    else:
        cls = type(c)
    return v._replace(like=lambda data: like(kind, c, data, cls))


def like(kind: str, a: Any, data: Any, cls: Any = None) -> Any:
    """An operand of a's class (or `cls`) and stored structure (its index arrays, copied)
    holding `data`."""
    shape = tuple(a.shape)
    cls = cls or type(a)
    if kind == SCIPY:
        if a.format in ("csr", "csc"):
            indices, indptr = a.indices.copy(), a.indptr.copy()
            out = cls((data, indices, indptr), shape=shape)
            out.indices, out.indptr = indices, indptr  # SciPy narrows int64 whose values fit
            return out
        coords = tuple(c.copy() for c in (a.coords if hasattr(a, "coords") else (a.row, a.col)))
        out = cls((data, coords), shape=shape)
        if hasattr(out, "coords"):
            out.coords = coords
        else:
            out.row, out.col = coords
        out.has_canonical_format = a.has_canonical_format
        return out
    if a.format in ("csr", "csc"):
        return compressed(cls, data, a.indices.copy(), a.indptr.copy(), shape, flags_of=a)
    # cupyx COO: an empty operand of the shape given the arrays, since the constructors check
    # their contents (host synchronisations)
    out = cls(shape, dtype=data.dtype)
    out.data = data
    out.row, out.col = a.row.copy(), a.col.copy()
    out.has_canonical_format = a.has_canonical_format
    return out


# ---- pydata sparse ---------------------------------------------------------------------------


def _pydata_view(a: Any, axes: tuple[int, ...]) -> View:
    import sparse

    shape = tuple(int(n) for n in a.shape)
    if a.format == "coo":
        coords = tuple(a.coords)

        def like(data: Any) -> Any:
            # a.coords as they are (copied): pydata is told they are canonical, as x's are
            # made by pydata's constructor; a COO built with false flags keeps its order
            return sparse.COO(
                a.coords.copy(), data, shape=shape, has_duplicates=False, sorted=True,
                fill_value=data.dtype.type(0),
            )  # fmt: skip

    else:  # GCXS: its compressed axes make the rows
        own = key_axes(a)
        split = len(a.compressed_axes or ())
        ordered_shape = tuple(shape[k] for k in own)
        ncols = int(np.prod(ordered_shape[split:], dtype=np.int64))
        indptr = np.asarray(a.indptr)  # none for a 1-D GCXS of pydata before 0.16: one row
        rows = rows_of(indptr, a.indices.shape[0]) if indptr.size else 0
        keys = rows * ncols + a.indices
        flat = np.unravel_index(keys, ordered_shape) if shape else ()
        unordered: list[Any] = [None] * len(shape)
        for k, c in zip(own, flat, strict=True):
            unordered[k] = c
        coords = tuple(unordered)

        def like(data: Any) -> Any:
            arrays = (data, a.indices.copy(), np.array(a.indptr, copy=True))
            zero = data.dtype.type(0)
            return sparse.GCXS(
                arrays, shape=shape, compressed_axes=a.compressed_axes, fill_value=zero
            )

    ordered = _increasing(np, coords, shape, axes) if shape else a.nnz < 2
    return View(coords, a.data, ordered, like)
