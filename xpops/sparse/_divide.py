"""sparse.divide: contract, validation and dispatch."""

from typing import Any

from .._autodiff import _torch as _autograd
from .._lib._dispatch import Engines, dispatch_kind
from .._lib._typing import ArrayT
from ._common import DENSE, SCALAR, SPARSE, TORCH, check_operands

__all__ = ["divide"]


# The engines of each form of divisor, by the library of the operands (see `_common`): SciPy
# (numpy), cupyx (cupy), PyTorch's sparse tensors (torch), pydata sparse (generic), Dask.
_ENGINES = {
    SPARSE: Engines(
        __package__,
        numpy="._scipy:divide",
        cupy="._cupyx:divide",
        dask="._dask:divide",
        torch="._torch:divide",
        generic="._pydata:divide",
    ),
    SCALAR: Engines(
        __package__,
        numpy="._scipy:divide_scalar",
        cupy="._cupyx:divide_scalar",
        dask="._dask:divide",
        torch="._torch:divide_scalar",
        generic="._pydata:divide_scalar",
    ),
    DENSE: Engines(
        __package__,
        numpy="._scipy:divide_dense",
        cupy="._cupyx:divide_dense",
        dask="._dask:divide",
        torch="._torch:divide_dense",
        generic="._pydata:divide_dense",
    ),
}


def divide(x: ArrayT, y: Any, /) -> ArrayT:
    r"""Element-wise ``x / y`` of two sparse matrices that stays sparse.

    The result stores exactly the union of the two stored patterns; positions stored in
    neither operand stay implicit zeros. Nothing is ever densified.

    Parameters
    ----------
    x : sparse array or matrix
        Dividend: a COO or CSR ``scipy.sparse`` array or matrix (NumPy backend), or a COO or
        CSR ``cupyx.scipy.sparse`` matrix (CuPy backend). Any numeric dtype; 1-D CSR and N-D
        COO arrays where SciPy has them.
    y : sparse array or matrix, or scalar
        Divisor: a sparse operand of the same library and shape as `x` (converted to the
        format of `x` when it differs), or a scalar (a Python or NumPy number, a 0-d NumPy
        array, or with cupyx a 0-d CuPy array), by which only the stored values of `x` are
        divided. A Python int is taken as NumPy takes it in ``x.data / y``, however large
        (``10**30``, ``2**64``): converted to the result's dtype.

    Returns
    -------
    out : sparse array or matrix
        Same library, format and container kind (``*_array`` or ``*_matrix``) as `x`, in
        canonical form (sorted indices, no duplicates, ``has_canonical_format`` true). Its
        dtype is the true-division dtype of the pair (float32 / float32 stays float32;
        integers and bools give float64). Its index dtype is that of the inputs (int64 if
        either uses int64) unless the result needs int64.

    Raises
    ------
    TypeError
        If `x` is not a COO/CSR sparse operand of SciPy or cupyx, `y` is neither such an
        operand nor a scalar, the two come from different libraries, or a dtype is not
        numeric. Dask arrays whose chunks are not such operands (dense or pydata chunks)
        raise it when the call is made.
    ValueError
        If the shapes of `x` and `y` differ, or Dask operands are chunked differently.
    OverflowError
        If `y` is a Python int too large to convert to a float (as in NumPy).

    See Also
    --------
    scipy.sparse.csr_array.multiply : the element-wise product (intersection of patterns).

    Notes
    -----
    **Semantics.** Duplicate entries are summed and indices sorted first (the inputs are not
    modified). At each position stored in `x` or in `y` (explicitly stored zeros count as
    stored) the result holds ``x_ij / y_ij`` with IEEE arithmetic, 0 standing for the side
    that is not stored: ``x/0`` gives ``±inf``, ``0/0`` gives ``nan`` and ``0/y`` gives
    ``±0``. Positions stored in neither operand stay implicit (zero), although the dense
    quotient there would be ``0/0 = nan``: this is the one deliberate departure from dense
    semantics, since honouring it would make every result dense. Zeros in the result are not
    pruned, so its pattern is always the union of the input patterns. With a scalar `y` the
    pattern of `x` is kept and ``x / 0`` follows the same IEEE rules.

    The peers: SciPy returns a dense matrix for sparse / sparse, CuPy densifies both operands,
    PyTorch, JAX and TensorFlow refuse sparse divisors.

    Backend support: SciPy (the union is merged by SciPy's compiled CSR addition on encoded
    values, in blocks of rows; COO through CSR) and cupyx (CUDA kernels in two passes over
    tiles of `x`: binary searches in `y`'s staged rows, then a streaming write of each tile's
    stretch of the result; one host synchronisation to size the result, plus sorting and
    summing first for operands that are not canonical; COO through CSR). The result never
    holds more than the two operands' entries; nothing of the dense size is allocated. Dask
    arrays whose chunks are SciPy or cupyx sparse matrices, chunked alike, are divided chunk
    by chunk, lazily (a scalar `y` too), in tasks named ``xpops-sparse.divide-<token>``. Their
    chunk type is checked when the call is made, from the array's meta; where Dask shows an
    ndarray meta (for dense chunks, and for chunks it cannot slice such as SciPy's COO
    matrices) the first chunk is computed to tell them apart.

    Examples
    --------
    >>> import numpy as np
    >>> import scipy.sparse as sp
    >>> import xpops
    >>> x = sp.csr_array(np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 3.0]]))
    >>> y = sp.csr_array(np.array([[4.0, 5.0, 0.0], [0.0, 0.0, 6.0]]))
    >>> out = xpops.sparse.divide(x, y)
    >>> out.toarray()
    array([[0.25, 0.  ,  inf],
           [0.  , 0.  , 0.5 ]])
    >>> out.nnz  # (0, 0), (0, 1), (0, 2), (1, 2): the union of the two patterns
    4
    >>> xpops.sparse.divide(x, 2).toarray()
    array([[0.5, 0. , 1. ],
           [0. , 0. , 1.5]])
    """
    kind, form = check_operands(x, y)
    if kind == TORCH and _autograd.recording(x, y):
        return _autograd.apply("xpops.sparse._vjp:RULE", (x, y), {})
    return dispatch_kind(kind, _ENGINES[form], x, y)
