"""SciPy's compiled CSR addition, behind one function that works on every SciPy.

``scipy.sparse._sparsetools.csr_plus_csr`` merges two canonical CSR matrices into buffers the
caller owns: no wrapper objects, no allocation, and it releases the GIL. It is private to
SciPy, so it is used only where it exists and gives the expected answer on a small probe; the
fallback is the public ``csr_array.__add__`` (the same merge, through SciPy's objects), copied
into the caller's buffers.
"""

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = ["csr_plus_csr", "sparsetools_csr_plus_csr"]


@functools.cache
def sparsetools_csr_plus_csr() -> Callable[..., Any] | None:
    """SciPy's compiled ``csr_plus_csr``, or None where this SciPy lacks it or it does not
    give the expected sum of a small probe (which has a column in one operand only, one in
    the other only and one where the two cancel)."""
    try:
        from scipy.sparse._sparsetools import csr_plus_csr as routine
    except ImportError:  # a SciPy that moved it
        return None
    index = np.int32
    a = (np.array([0, 2], index), np.array([0, 2], index), np.array([1.0, 2.0]))
    b = (np.array([0, 2], index), np.array([1, 2], index), np.array([3.0, -2.0]))
    out = (np.zeros(2, index), np.zeros(4, index), np.zeros(4))
    try:
        routine(1, 3, *a, *b, *out)
    except Exception:  # a SciPy whose routine takes other arguments
        return None
    indptr, indices, data = out
    expected = indptr.tolist() == [0, 2] and indices[:2].tolist() == [0, 1]
    if not (expected and data[:2].tolist() == [1.0, 3.0]):
        return None
    return routine


def csr_plus_csr(
    n_row: int,
    n_col: int,
    a_indptr: np.ndarray,
    a_indices: np.ndarray,
    a_data: np.ndarray,
    b_indptr: np.ndarray,
    b_indices: np.ndarray,
    b_data: np.ndarray,
    out_indptr: np.ndarray,
    out_indices: np.ndarray,
    out_data: np.ndarray,
) -> int:
    """The sum of two canonical CSR matrices of shape ``(n_row, n_col)``, written into buffers.

    Positions whose sum is zero are dropped, as SciPy's sum drops them; the result is
    canonical. Returns its number of entries ``m``: ``out_indptr[:n_row + 1]``,
    ``out_indices[:m]`` and ``out_data[:m]`` hold it.

    Parameters
    ----------
    n_row, n_col : int
        The shape of both matrices.
    a_indptr, a_indices, a_data, b_indptr, b_indices, b_data : numpy.ndarray
        The operands' row pointers (``n_row + 1``, starting at 0), column indices and values:
        canonical (indices sorted and unique within each row).
    out_indptr, out_indices, out_data : numpy.ndarray
        Buffers of at least ``n_row + 1`` and ``a_data.size + b_data.size`` elements, with the
        index dtype and the value dtype of the result.

    Notes
    -----
    SciPy's compiled routine writes the buffers directly when every index array has one
    dtype and every value array another; otherwise, or where the routine is missing, the
    public ``+`` of two ``csr_array`` computes the sum, copied into the buffers.
    """
    routine = sparsetools_csr_plus_csr()
    index, value = a_indices.dtype, a_data.dtype
    same = all(
        arr.dtype == index for arr in (a_indptr, b_indptr, b_indices, out_indptr, out_indices)
    ) and (b_data.dtype == out_data.dtype == value)
    if routine is not None and same:
        routine(
            n_row,
            n_col,
            a_indptr,
            a_indices,
            a_data,
            b_indptr,
            b_indices,
            b_data,
            out_indptr,
            out_indices,
            out_data,
        )
        return int(out_indptr[n_row])
    shape = (n_row, n_col)
    total = sp.csr_array((a_data, a_indices, a_indptr), shape=shape) + sp.csr_array(
        (b_data, b_indices, b_indptr), shape=shape
    )
    m = int(total.nnz)
    out_indptr[: n_row + 1] = total.indptr
    out_indices[:m] = total.indices
    out_data[:m] = total.data
    return m
