"""Dask engine of logcumsumexp: block totals, then each block scanned from its carry.

Each block's total (its log-sum-exp along the scan axis) is copied to the host, a small NumPy
array of one element a row. A block's carry is the log-sum-exp of the totals of every block
before it (after it, when reversed), and the block is scanned from its carry. NaN and ±inf keep
their meaning: the first block's carry is ``-inf``, the identity, and it is scanned as in
memory. Only the totals cross blocks; the last block's total is never needed, nor computed.
Blocks are scanned by the in-memory engines of their library (NumPy, CuPy, or the generic one).

Up to 16 blocks along the axis (`_DIRECT_BLOCKS`, and 4096 dependencies in all), every
block's scan task reads the totals itself: one dependency level between the two kinds of
task, where on a cluster each level costs a scheduler round trip (a level of tasks that scan
the totals into carries makes the scan of 2^33 float32 elements on one or two H100 workers
1.4 to 1.7 times as long). Every scan waits for all the totals, so that Dask orders each
worker's totals before its scans: ordered block by block, a worker would scan a block while the
next worker waited for that block's total. With more blocks, one task a row of blocks scans the
totals into carries (each block's scan reading all totals would be a number of dependencies
quadratic in the blocks), and each block's scan reads the carries' one chunk along the axis:
no task splits them (a rechunk into one chunk a block makes 8 blocks on a local cluster take
twice as long).

NumPy blocks, and complex blocks of either library: the total is a max-shifted reduction with
one ``exp`` an element (complex: the in-memory scan's last element), and the carry is placed
in front of the block (behind it when reversed) so that it enters the scan as one more
element: a copy of the block, but no second ``exp`` and ``log`` an element (scanning first and
adding the carry with ``logaddexp`` afterwards takes 1.3 times as long on the CPU).

CuPy blocks (float32, float64): where the in-memory engine scans with its tiles kernels (long
rows along the last axis, as a 1-D scan), the carry enters each row's first tile in the kernel,
and the totals come from a reduction kernel that reads each element once and writes one value a
part of a row (2.8 TB/s on an H100, about half the scan's time): a block is read once for its
total and read and written once for its scan, at most 1.5 times the in-memory scan's traffic (a
scan for the total and a copy with the carry in front would be three times). Other layouts scan
for the total (its last element) and add the carry to the scan with ``logaddexp`` afterwards.
CuPy's own reductions (``max``, then a fused ``sum(exp(x - max))``) are not used: they take
0.85 s on an H100 to reduce a block of 2^30 float32 elements to one, where the scan takes a few
milliseconds.
"""

import itertools
import math
from typing import Any

import numpy as np

from .._lib import _compat
from .._lib._dask import task_name
from . import _agnostic, _numpy

__all__ = ["logcumsumexp"]


def _scan(block: Any, axis: int, exclusive: bool, reverse: bool) -> Any:
    """The in-memory scan of one block (of the compute dtype: the contract cast `x`) by the
    engine of its library."""
    if _compat.is_numpy_array(block):
        return _numpy.logcumsumexp(block, axis, exclusive, reverse)
    if _compat.is_cupy_array(block):
        from ._cupy import logcumsumexp

        return logcumsumexp(block, axis, exclusive, reverse)
    return _agnostic.logcumsumexp(block, axis, exclusive, reverse)


def _empty_total(block: Any, axis: int) -> Any:
    xp = _compat.array_namespace(block)
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
        from ._cupy import total

        return _to_host(total(_contiguous(block), axis, reverse))
    if _compat.is_cupy_array(block) or xp.isdtype(block.dtype, "complex floating"):
        # the in-memory scan's last element: the op's own complex rules, and for the CuPy
        # blocks left (complex, or empty across the axis) no CuPy reduction (module docstring)
        scanned = _scan(block, axis, False, reverse)
        index = [slice(None)] * block.ndim
        index[axis] = slice(0, 1) if reverse else slice(-1, None)
        return _to_host(scanned[tuple(index)])
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):  # +inf: replaced below
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


def _as_elements(t: Any, axis: int) -> Any:
    """Totals or carries `t` (results of the scan) as elements that the scan reads back with
    the same sum: real ones as they are; complex ones as two elements each along `axis`. A
    complex result ``inf+nanj`` (real parts of +inf whose phases differ) read as an element
    would be NaN (a NaN imaginary part); it becomes ``inf+0j`` and ``inf+1j``, whose sum it
    is. Every other value is followed by ``-inf+0j``, the identity."""
    xp = _compat.array_namespace(t)
    if not xp.isdtype(t.dtype, "complex floating"):
        return t
    clash = (xp.real(t) == math.inf) & xp.isnan(xp.imag(t))
    first = xp.astype(xp.where(clash, complex(math.inf, 0.0), t), t.dtype)
    second = xp.where(clash, complex(math.inf, 1.0), complex(-math.inf, 0.0))
    pair = xp.stack([first, xp.astype(second, t.dtype)], axis=axis + 1)
    shape = list(t.shape)
    shape[axis] *= 2
    return xp.reshape(pair, tuple(shape))


def _scan_from(block: Any, carry: Any, axis: int, exclusive: bool, reverse: bool) -> Any:
    """The block's scan started from `carry` (a NumPy array, the block's shape with `axis` of
    length 1): one more element before it in scan order (two for complex blocks, see
    `_as_elements`)."""
    xp = _compat.array_namespace(block)
    carry = xp.asarray(carry)  # host carry onto the block's device
    if _real_cupy(block):
        from ._cupy import logcumsumexp_from

        return logcumsumexp_from(_contiguous(block), carry, axis, exclusive, reverse)
    carry = _as_elements(carry, axis)
    joined = xp.concat([block, carry] if reverse else [carry, block], axis=axis)
    out = _scan(joined, axis, exclusive, reverse)
    keep = [slice(None)] * block.ndim
    k = carry.shape[axis]
    keep[axis] = slice(0, -k) if reverse else slice(k, None)
    return out[tuple(keep)]


def _scan_after(
    block: Any, totals: list[Any], at: int, axis: int, exclusive: bool, reverse: bool
) -> Any:
    """The block's scan started from the log-sum-exp of ``totals[:at]``, the totals of the
    blocks before it in scan order (NumPy arrays)."""
    if at == 0:  # the first block: its carry is the identity
        return _scan(block, axis, exclusive, reverse)
    before = np.concatenate(totals[:at], axis=axis)
    carry = _total(_as_elements(before, axis), axis, False)
    return _scan_from(block, carry, axis, exclusive, reverse)


def _carries(totals: Any, axis: int, reverse: bool) -> Any:
    """The carry of each block: the exclusive scan of the block `totals` (one chunk along
    `axis`, in block order). Complex totals are read as pairs of elements (`_as_elements`):
    the exclusive scan at the first of the pair of block i (the second when `reverse`) covers
    the pairs of the blocks before it in scan order, and nothing else."""
    elements = _as_elements(totals, axis)
    scanned = _scan(elements, axis, True, reverse)
    if elements is totals:
        return scanned
    take = [slice(None)] * totals.ndim
    take[axis] = slice(1, None, 2) if reverse else slice(0, None, 2)
    return scanned[tuple(take)]


def _scan_from_carries(
    block: Any, carries: Any, axis: int, index: int, exclusive: bool, reverse: bool
) -> Any:
    """The block's scan started from ``carries[index]`` along `axis`."""
    where = [slice(None)] * block.ndim
    where[axis] = slice(index, index + 1)
    return _scan_from(block, carries[tuple(where)], axis, exclusive, reverse)


# Up to this many blocks along the axis and dependencies in all, each block's scan reads the
# totals itself (at most 15 each); beyond, one task a row of blocks scans the totals into
# carries first (module docstring): the scheduler's work grows with the dependencies.
_DIRECT_BLOCKS = 16
_DIRECT_DEPENDENCIES = 4096


def logcumsumexp(x: Any, axis: int, exclusive: bool, reverse: bool) -> Any:
    """Scan `axis` of the Dask array `x` (validated and cast by the contract)."""
    from dask.array.core import Array  # the graph-backed array (da.Array)
    from dask.highlevelgraph import HighLevelGraph

    nb = x.numblocks[axis]
    name = task_name("logcumsumexp", x, axis, exclusive, reverse)
    if nb == 1:
        return x.map_blocks(
            _scan, axis=axis, exclusive=exclusive, reverse=reverse, dtype=x.dtype, name=name
        )
    # the blocks in scan order along the axis; the last one's total is never needed
    order = list(range(nb))[::-1] if reverse else list(range(nb))
    if nb <= _DIRECT_BLOCKS and math.prod(x.numblocks) * (nb - 1) <= _DIRECT_DEPENDENCIES:
        # every block's scan waits for all the totals, and uses those before it
        tname = task_name("logcumsumexp-total", x, axis, exclusive, reverse)
        totals: dict[Any, Any] = {}
        layer: dict[Any, Any] = {}
        for key in itertools.product(*(range(n) for n in x.numblocks)):
            needed = [(tname, *key[:axis], b, *key[axis + 1 :]) for b in order[:-1]]
            at = order.index(key[axis])
            if at < nb - 1:
                totals[needed[at]] = (_total, (x.name, *key), axis, reverse)
            layer[(name, *key)] = (
                _scan_after, (x.name, *key), needed, at, axis, exclusive, reverse
            )  # fmt: skip
        graph = HighLevelGraph(
            {tname: totals, name: layer, **x.dask.layers},
            {tname: {x.name}, name: {x.name, tname}, **x.dask.dependencies},
        )
        return Array(graph, name, x.chunks, meta=x)
    totals_chunks = tuple(c if i != axis else (1,) * nb for i, c in enumerate(x.chunks))
    totals_array = x.map_blocks(
        _total,
        axis=axis,
        reverse=reverse,
        chunks=totals_chunks,
        meta=np.empty((0,) * x.ndim, dtype=x.dtype),
        name=task_name("logcumsumexp-total", x, axis, exclusive, reverse),
    )
    # the carries: exclusive scan of the block totals across blocks (small: one per block)
    carries = totals_array.rechunk({axis: -1}).map_blocks(
        _carries,
        axis=axis,
        reverse=reverse,
        dtype=x.dtype,
        name=task_name("logcumsumexp-carries", x, axis, exclusive, reverse),
    )
    # one task a block, reading its block and the one chunk of carries along `axis`: no
    # task splits the carries (each task costs the scheduler about a millisecond)
    layer = {}
    for key in itertools.product(*(range(n) for n in x.numblocks)):
        ckey = tuple(0 if i == axis else k for i, k in enumerate(key))
        layer[(name, *key)] = (
            _scan_from_carries,
            (x.name, *key),
            (carries.name, *ckey),
            axis,
            key[axis],
            exclusive,
            reverse,
        )
    graph = HighLevelGraph.from_collections(name, layer, dependencies=[x, carries])
    return Array(graph, name, x.chunks, meta=x)
