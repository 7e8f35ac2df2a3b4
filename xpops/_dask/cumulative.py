"""Dask engine of logcumsumexp: block totals, carries, then each block scanned from its carry.

Each block's total (its log-sum-exp along the scan axis) is copied to the host and gathered
along the scan axis, a small NumPy array of one element a block, and scanned exclusively by
the in-memory op: that gives every block the log-sum-exp of all blocks before it (after it,
when reversed), its carry. Each block is then scanned from its carry. The graph has one task a
block for the totals and one for the scans (written directly, so that no task splits the
carries: on a local cluster each task costs the scheduler about a millisecond; 8 blocks took
44 ms against 103 with a rechunk of the carries), plus two for the carries. NaN and ±inf keep
their meaning: the carry of the first block is ``-inf``, the identity. Only the carries cross
blocks.

NumPy blocks, and complex blocks of either library: the total is a max-shifted reduction with
one ``exp`` an element (complex: the in-memory scan's last element), and the carry is placed
in front of the block (behind it when reversed) so that it enters the scan as one more
element: a copy of the block, but no second ``exp`` and ``log`` an element (scanning first and
adding the carry with ``logaddexp`` afterwards took 1.3 times as long on the CPU).

CuPy blocks (float32, float64): where the in-memory op scans with its tiles kernels (long rows
along the last axis, as a 1-D scan), the carry enters each row's first tile in the kernel, and
the totals come from the same kernels with nothing written but one value a row: a block is
read once for its total and read and written once for its scan, 1.5 times the in-memory scan's
traffic (earlier: a scan for the total and a copy with the carry in front, three times).
Other layouts scan for the total (its last element) and add the carry to the scan with
``logaddexp`` afterwards. CuPy's own reductions (``max``, then a fused ``sum(exp(x - max))``)
are not used: reducing a block of 2^30 float32 elements to one they took 0.85 s on an H100,
where the scan takes a few milliseconds.
"""

import itertools
from typing import Any

import numpy as np

from .._lib import _compat

__all__ = ["logcumsumexp"]


def _scan(block: Any, axis: int, exclusive: bool, reverse: bool) -> Any:
    from .._cumulative import logcumsumexp

    return logcumsumexp(block, axis=axis, exclusive=exclusive, reverse=reverse)


def _empty_total(block: Any, axis: int) -> Any:
    from array_api_compat import array_namespace

    xp = array_namespace(block)
    shape = list(block.shape)
    shape[axis] = 1
    return xp.full(tuple(shape), -xp.inf, dtype=block.dtype)


def _total(block: Any, axis: int, reverse: bool) -> Any:
    """log(sum(exp(block))) along `axis`, kept as a dimension of length 1, as a NumPy array,
    with the special values of the scan: -inf for an empty or all -inf block, +inf with a
    +inf, NaN with a NaN."""
    if block.shape[axis] == 0:
        return _to_host(_empty_total(block, axis))
    xp = _compat.array_namespace(block)
    if _real_cupy(block):
        from .._cupy import cumulative as engine

        return _to_host(engine.total(_contiguous(block), axis, reverse))
    if _compat.is_cupy_array(block) or xp.isdtype(block.dtype, "complex floating"):
        # the in-memory scan's last element: the op's own complex rules, and for the CuPy
        # blocks left (complex, or empty across the axis) no CuPy reduction (module docstring)
        scanned = _scan(block, axis, False, reverse)
        index = [slice(None)] * block.ndim
        index[axis] = slice(0, 1) if reverse else slice(-1, None)
        return _to_host(scanned[tuple(index)])
    with np.errstate(invalid="ignore", divide="ignore"):
        m = xp.max(block, axis=axis, keepdims=True)
        ref = xp.where(xp.isfinite(m), m, xp.zeros_like(m))
        total = xp.log(xp.sum(xp.exp(block - ref), axis=axis, keepdims=True)) + ref
    total = xp.where(m == xp.inf, m, total)
    return xp.where(xp.isnan(m), m, total)


def _real_cupy(block: Any) -> bool:
    """Whether `block` goes to the CuPy engine's carry-aware kernels (float32/float64)."""
    return _compat.is_cupy_array(block) and block.dtype.char in "fd" and block.size > 0


def _contiguous(block: Any) -> Any:
    import cupy

    return cupy.ascontiguousarray(block)


def _to_host(a: Any) -> Any:
    """`a` as a NumPy array: block totals and carries cross between workers as small host
    arrays (a CuPy array would be copied through the host by the workers' event loops)."""
    return a.get() if _compat.is_cupy_array(a) else a


def _scan_from(
    block: Any, carries: Any, axis: int, index: int, exclusive: bool, reverse: bool
) -> Any:
    """The block's scan started from its carry, ``carries[index]`` along `axis` (one more
    element before it in scan order)."""
    from array_api_compat import array_namespace

    xp = array_namespace(block)
    where = [slice(None)] * block.ndim
    where[axis] = slice(index, index + 1)
    carry = xp.asarray(carries[tuple(where)])  # host carries onto the block's device
    if _real_cupy(block):
        from .._cupy import cumulative as engine

        return engine.logcumsumexp_from(_contiguous(block), carry, axis, exclusive, reverse)
    joined = xp.concat([block, carry] if reverse else [carry, block], axis=axis)
    out = _scan(joined, axis, exclusive, reverse)
    keep = [slice(None)] * block.ndim
    keep[axis] = slice(0, -1) if reverse else slice(1, None)
    return out[tuple(keep)]


def logcumsumexp(x: Any, axis: int, exclusive: bool, reverse: bool) -> Any:
    """Scan `axis` of the Dask array `x` (validated and cast by the contract)."""
    import dask.array as da

    nb = x.numblocks[axis]
    if nb == 1:
        return x.map_blocks(_scan, axis=axis, exclusive=exclusive, reverse=reverse, dtype=x.dtype)
    totals_chunks = tuple(c if i != axis else (1,) * nb for i, c in enumerate(x.chunks))
    totals = x.map_blocks(
        _total,
        axis=axis,
        reverse=reverse,
        chunks=totals_chunks,
        meta=np.empty((0,) * x.ndim, dtype=x.dtype),
    )
    # the carries: exclusive scan of the block totals across blocks (small: one per block)
    carries = totals.rechunk({axis: -1}).map_blocks(
        _scan, axis=axis, exclusive=True, reverse=reverse, dtype=x.dtype
    )
    # one task a block, reading its block and the one chunk of carries along `axis`: no
    # task splits the carries (each task costs the scheduler about a millisecond)
    from dask.base import tokenize
    from dask.highlevelgraph import HighLevelGraph

    name = "xpops-logcumsumexp-" + tokenize(x, carries, axis, exclusive, reverse)
    layer: dict[Any, Any] = {}
    for key in itertools.product(*(range(n) for n in x.numblocks)):
        ckey = tuple(0 if i == axis else k for i, k in enumerate(key))
        layer[(name, *key)] = (
            _scan_from,
            (x.name, *key),
            (carries.name, *ckey),
            axis,
            key[axis],
            exclusive,
            reverse,
        )
    graph = HighLevelGraph.from_collections(name, layer, dependencies=[x, carries])
    return da.Array(graph, name, x.chunks, meta=x._meta)
