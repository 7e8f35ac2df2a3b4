"""Dask engine of logcumsumexp: a blockwise scan plus per-block carries.

Each block is scanned by the in-memory xpops op (NumPy or CuPy chunks); each block's total
(the last inclusive output, the first when reversed) is gathered along the scan axis, a small
array of one element a block, and scanned exclusively by the same op: that gives every block
the log-sum-exp of all blocks before it (its carry), which is combined with the block's own
scan by ``logaddexp``. NaN and ±inf keep their meaning: ``logaddexp`` propagates NaN and
+inf, and the carry of the first block is ``-inf``, the identity. Nothing is gathered on one
worker but the carries.
"""

from typing import Any

import numpy as np

__all__ = ["logcumsumexp"]


def _scan(block: Any, axis: int, exclusive: bool, reverse: bool) -> Any:
    from .._cumulative import logcumsumexp

    return logcumsumexp(block, axis=axis, exclusive=exclusive, reverse=reverse)


def _end(block: Any, axis: int, reverse: bool) -> Any:
    """The inclusive total of a scanned block: its last (first if reversed) slice along
    `axis`, kept as a dimension of length 1; -inf for an empty block."""
    if block.shape[axis] == 0:
        shape = list(block.shape)
        shape[axis] = 1
        out = np.full(shape, -np.inf, dtype=block.dtype) if isinstance(block, np.ndarray) else None
        if out is None:  # a CuPy chunk
            import cupy

            out = cupy.full(shape, -np.inf, dtype=block.dtype)
        return out
    index = [slice(None)] * block.ndim
    index[axis] = slice(0, 1) if reverse else slice(-1, None)
    return block[tuple(index)]


def _combine(block: Any, carry: Any, axis: int) -> Any:
    """``log(exp(carry) + exp(block))``, the carry broadcast along `axis`."""
    from array_api_compat import array_namespace

    xp = array_namespace(block)
    if not xp.isdtype(block.dtype, "complex floating"):
        with np.errstate(invalid="ignore"):  # NaN and inf + inf: the documented answers
            return xp.logaddexp(carry, block)
    from .._cumulative import logcumsumexp  # complex: the op's own pairwise rule

    pair = xp.stack([xp.broadcast_to(carry, block.shape), block])
    return logcumsumexp(pair, axis=0)[1]


def logcumsumexp(x: Any, axis: int, exclusive: bool, reverse: bool) -> Any:
    """Scan `axis` of the Dask array `x` (validated and cast by the contract)."""
    import dask.array as da

    inclusive = x.map_blocks(_scan, axis=axis, exclusive=False, reverse=reverse, dtype=x.dtype)
    blocks = (
        x.map_blocks(_scan, axis=axis, exclusive=True, reverse=reverse, dtype=x.dtype)
        if exclusive
        else inclusive
    )
    nb = x.numblocks[axis]
    if nb == 1:
        return blocks
    ends_chunks = tuple(c if i != axis else (1,) * nb for i, c in enumerate(x.chunks))
    ends = inclusive.map_blocks(_end, axis=axis, reverse=reverse, dtype=x.dtype, chunks=ends_chunks)
    # the carries: exclusive scan of the block totals across blocks (small: one per block)
    carries = ends.rechunk({axis: -1}).map_blocks(
        _scan, axis=axis, exclusive=True, reverse=reverse, dtype=x.dtype
    )
    carries = carries.rechunk({axis: 1})
    index = tuple(range(x.ndim))
    return da.blockwise(
        _combine,
        index,
        blocks,
        index,
        carries,
        index,
        axis=axis,
        dtype=x.dtype,
        align_arrays=False,
        concatenate=False,
    )
