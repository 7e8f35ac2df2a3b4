"""sparse.divide: contract, validation and dispatch."""

from typing import Any

from .._autodiff import _torch as _autograd
from .._lib._compile import compiling, untraced
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
    r"""Element-wise ``x / y`` of two sparse arrays that stays sparse.

    The result stores exactly the union of the two stored patterns; positions stored in
    neither operand stay implicit zeros. Nothing is ever densified.

    Parameters
    ----------
    x : sparse array, matrix or tensor
        Dividend, of any numeric dtype:

        * a ``scipy.sparse`` array or matrix of any format (NumPy backend): CSR, CSC and COO
          (1-D CSR and N-D COO arrays where SciPy has them) are divided as they are; BSR,
          DOK, LIL and DIA are converted by SciPy's ``tocsr()`` first;
        * a ``cupyx.scipy.sparse`` matrix (CuPy backend): CSR, CSC, COO, or DIA (converted);
        * a pydata ``sparse`` ``COO`` or ``GCXS`` array of any number of dimensions, with
          ``fill_value`` 0;
        * a PyTorch sparse tensor, on the CPU or a CUDA device: COO of any ``sparse_dim``
          (hybrid tensors: the trailing dense dimensions of each stored sparse position are
          divided element by element), or CSR (2-D, batched, hybrid).
    y : sparse array, matrix or tensor, dense array, or scalar
        Divisor: a sparse operand of the same library, shape (and for PyTorch, dense
        dimensions and device) as `x`, in any format it takes (converted to the layout of
        `x` when it differs); or a dense array of x's shape (NumPy for SciPy and pydata,
        CuPy for cupyx, a strided tensor for PyTorch), which divides x's stored values only;
        or a scalar (a Python or NumPy number, a 0-d array of x's library or a 0-d NumPy
        array; for PyTorch a 0-d tensor), by which only the stored values of `x` are
        divided. A Python int is taken as NumPy takes it in ``x.data / y``, however large
        (``10**30``, ``2**64``): converted to the result's dtype.

    Returns
    -------
    out : sparse array, matrix or tensor
        Same library, container kind (``*_array`` or ``*_matrix``) and device as `x`, in x's
        format (CSR for BSR, DOK, LIL and DIA; pydata: x's class and compressed axes;
        PyTorch: x's layout), canonical (sorted indices, no duplicates: SciPy's and cupyx's
        ``has_canonical_format`` true, a coalesced COO tensor; pydata ``fill_value`` 0). Its
        dtype is the true-division dtype of the pair, NumPy's rules (float32 / float32 stays
        float32; integers and bools give float64), PyTorch's for tensors (integers and bools
        give the default floating dtype). Its index dtype is that of the inputs (the wider
        if they differ) unless the result needs int64.

    Raises
    ------
    TypeError
        If `x` is not a sparse operand above, `y` is neither one nor a dense array nor a
        scalar, the two come from different libraries, a dtype is not numeric, or a pydata
        or PyTorch operand has another format or layout (pydata DOK; PyTorch CSC, BSR,
        BSC). Dask arrays whose chunks are not sparse operands (dense chunks for `x`) raise
        it when the call is made.
    ValueError
        If the shapes of `x` and `y` differ (a dense `y` is not broadcast), PyTorch operands
        differ in dense dimensions or device, a pydata operand's ``fill_value`` is not 0,
        the quotient of batched PyTorch CSR tensors holds a different number of entries in
        each batch (which their layout cannot hold), or Dask operands are chunked
        differently.
    NotImplementedError
        For PyTorch sparse tensors divided by sparse tensors on devices other than the CPU
        and CUDA devices that CuPy sees (scalar and dense divisors divide the stored values
        by PyTorch's own division, on any device).
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
    pruned, so its pattern is always the union of the input patterns. With a scalar or a
    dense `y` the pattern of `x` is kept and ``x / 0`` follows the same IEEE rules: a dense
    divisor stores every position, so the union would store the whole array, and the values
    it would add there are ``0 / y``, zeros (or ``nan`` where ``y`` is 0, the same
    departure as above); its values outside x's pattern are not read.

    The peers: SciPy returns a dense matrix for sparse / sparse, CuPy densifies both operands,
    PyTorch, JAX and TensorFlow refuse sparse divisors; pydata ``sparse`` keeps the dense
    semantics, a result on the union with ``fill_value`` nan.

    Backend support: SciPy, pydata and PyTorch's CPU tensors are merged by SciPy's compiled
    CSR addition on encoded values, in blocks of rows, on two threads (a CSC operand column
    by column; an N-D one on its row-major keys folded into two dimensions; two SciPy
    operands that both need converting, such as COO, converted on the two threads). cupyx's
    operands and PyTorch's CUDA tensors (by DLPack, on PyTorch's current stream) go to CUDA
    kernels in two passes over tiles of `x`: binary searches in `y`'s staged rows, then a
    streaming write of each tile's stretch of the result (small operands: two kernels along
    a merge path of both operands' entries); one host synchronisation to size the result,
    plus sorting and summing first for operands that are not canonical. The
    result never holds more than the two operands' entries; nothing of the dense size is
    allocated. Dask arrays whose chunks are sparse operands of SciPy, cupyx or pydata,
    chunked alike, are divided chunk by chunk, lazily (a scalar `y`, or a Dask `y` of dense
    chunks, too), in tasks named ``xpops-sparse.divide-<token>``. Their chunk type is checked
    when the call is made, from the array's meta; where Dask shows an ndarray meta (for
    dense chunks, and for chunks it cannot slice such as SciPy's COO matrices) the first
    chunk is computed to tell them apart. PyTorch tensors that require grad are recorded by
    autograd (the backward rule of `xpops.vjp`).

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
    >>> xpops.sparse.divide(x.tocsc(), y).format  # x's format
    'csc'
    >>> xpops.sparse.divide(x, np.full((2, 3), 4.0)).nnz  # a dense y: x's pattern
    3
    """
    if compiling(x, y):
        return untraced(divide)(x, y)
    kind, form = check_operands(x, y)
    if kind == TORCH and _autograd.recording(x, y):
        return _autograd.apply("xpops.sparse._vjp:RULE", (x, y), {})
    return dispatch_kind(kind, _ENGINES[form], x, y)
