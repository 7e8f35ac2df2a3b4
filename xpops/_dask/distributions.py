"""Dask engine of MultivariateNormal with Dask parameters (chunked along batch dimensions).

The factor is computed chunk by chunk by the in-memory constructor (its checks run when a
chunk is computed), and every method is a ``dask.array.blockwise`` over aligned chunks of the
value, the mean and the factor: each output chunk is an in-memory MultivariateNormal of its
slice of the batch, so the CuPy kernels and the NumPy engines do the work. The core dimension
D (and the matrices' last two) must be one chunk.
"""

import math
import sys
from typing import Any

import numpy as np

from .linalg import _check_core


def _lib(block: Any) -> Any:
    """The in-memory library of a chunk (NumPy or CuPy)."""
    if isinstance(block, np.ndarray):
        return np
    return sys.modules[type(block).__module__.split(".")[0]]


def single(block: Any) -> Any:
    """The one block that ``blockwise(..., concatenate=False)`` passes as a (nested) list along
    indices missing from the output: the core dimensions are one chunk each. With
    ``concatenate=True`` Dask would copy it, a full pass over the block for nothing (a 4 GiB
    chunk of points: 5 ms on an H100, where log_prob takes 1.7)."""
    while isinstance(block, list):
        (block,) = block
    return block


def _in_memory(loc: Any, tril: Any, validate: bool = False) -> Any:
    """An in-memory distribution of one chunk's parameters (the factor is known good)."""
    from ..distributions import MultivariateNormal

    dist = MultivariateNormal(loc, scale_tril=tril, validate_args=False)
    dist._validate = validate  # values are still checked where the user asked for it
    return dist


def _factor_block(m: Any, param: str, validate: bool) -> Any:
    from ..distributions import MultivariateNormal

    if m.shape[-1] == 0 or math.prod(m.shape[:-2]) == 0:
        return m
    return MultivariateNormal(0.0, validate_args=validate, **{param: m})._tril


def _check_loc_block(loc: Any, shape: tuple[int, ...]) -> Any:
    ok = loc == loc  # False at NaN, in every chunk library
    finite = bool((ok & (abs(loc) != float("inf"))).all())
    if not finite:
        msg = f"`loc` must be finite, got shape {shape} with non-finite values"
        raise ValueError(msg)
    return loc


def parameters(name: str, loc: Any, matrix: Any, batch: tuple[int, ...], validate: bool) -> Any:
    """(loc broadcast to the batch, the lower factor with the matrix's own batch shape), lazy."""
    import dask.array as da

    _check_core(matrix, name, 2)
    d = matrix.shape[-1]
    loc = da.broadcast_to(loc, (*batch, d)).rechunk({len(batch): -1})
    if validate:
        loc = loc.map_blocks(_check_loc_block, shape=tuple(loc.shape), dtype=loc.dtype)
    tril = matrix.map_blocks(_factor_block, param=name, validate=validate, dtype=matrix.dtype)
    return loc, tril


def _aligned(dist: Any, value: Any) -> tuple[Any, Any, Any, tuple[str, ...], tuple[str, ...]]:
    """The value broadcast to the output batch and the parameters to the batch, with the
    blockwise indices of the point dimensions and of the batch dimensions."""
    import dask.array as da

    from ..distributions._mvn import _batch, _shape

    d, batch = dist._d, dist._batch_shape
    if not _is_dask(value):
        value = da.from_array(value, chunks=-1, asarray=False)
    vs = _shape(value)
    if len(vs) < 1 or vs[-1] != d:
        msg = f"`value` must have shape (*, {d}) (the event shape), got {vs}"
        raise ValueError(msg)
    try:
        out_batch = _batch(vs[:-1], batch)
    except ValueError:
        msg = f"`value` of shape {vs} does not broadcast against batch_shape {batch}"
        raise ValueError(msg) from None
    v = da.broadcast_to(value, (*out_batch, d)).rechunk({len(out_batch): -1})
    tril = da.broadcast_to(dist._tril, (*batch, d, d))
    points = tuple(f"p{i}" for i in range(len(out_batch) - len(batch)))
    dims = tuple(f"b{i}" for i in range(len(batch)))
    return v, dist._loc, tril, points, dims


def _is_dask(a: Any) -> bool:
    from .._lib import _compat

    return bool(_compat.is_dask_array(a))


def _method_block(
    v: Any, loc: Any, tril: Any, method: str, validate: bool, stacked: bool, kw: dict[str, Any]
) -> Any:
    v, loc, tril = single(v), single(loc), single(tril)
    out = getattr(_in_memory(loc, tril, validate), method)(v, **kw)
    if stacked:
        return _lib(out[0]).stack(out, axis=-1)
    return out


def method(dist: Any, value: Any, name: str, outputs: int = 0, **kw: Any) -> Any:
    """``dist.<name>(value, **kw)`` chunk by chunk; `outputs` > 0: that many stacked results
    (cdf with ``return_error``), returned as a tuple."""
    import dask.array as da

    v, loc, tril, points, dims = _aligned(dist, value)
    out_ind = (*points, *dims) + (("r",) if outputs else ())
    meta = v._meta if outputs else v._meta.sum(axis=-1)
    out = da.blockwise(
        _method_block,
        out_ind,
        v,
        (*points, *dims, "d"),
        loc,
        (*dims, "d"),
        tril,
        (*dims, "d", "e"),
        new_axes={"r": outputs} if outputs else {},
        dtype=dist._dtype,
        meta=meta,
        concatenate=False,
        method=name,
        validate=dist._validate,
        stacked=bool(outputs),
        kw=kw,
    )
    if outputs:
        return tuple(out[..., i] for i in range(outputs))
    return out


def _normals_block(
    loc: Any, entropy: int, shape_blocks: tuple[int, ...], block_info: Any = None
) -> Any:
    info = block_info[None]
    where, size = info["chunk-location"], info["chunk-shape"]
    # the block's own child of SeedSequence(entropy): only the entropy travels with the task
    index = int(np.ravel_multi_index(where[:-1], shape_blocks)) if shape_blocks else 0
    child = np.random.SeedSequence(entropy, spawn_key=(index,))
    seed = int(child.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))
    lib = _lib(loc)
    if lib is np:
        return np.random.default_rng(seed).standard_normal(size, dtype=loc.dtype)
    return lib.random.default_rng(seed).standard_normal(size, dtype=loc.dtype)


def _affine_block(eps: Any, loc: Any, tril: Any) -> Any:
    eps, loc, tril = single(eps), single(loc), single(tril)
    lib = _lib(eps)
    return loc + lib.matmul(tril, eps[..., None])[..., 0]


def sample(dist: Any, shape: tuple[int, ...], rng: Any, chunks: Any) -> Any:
    """Draws ``shape + batch_shape + (D,)``: standard normals from streams spawned from `rng`
    (one a chunk, so a seed and a chunking give one result), then ``loc + L eps`` chunk by
    chunk. `chunks` chunks the `shape` dimensions (None: one chunk); the batch dimensions
    follow the parameters' chunks."""
    import dask.array as da

    d, batch = dist._d, dist._batch_shape
    sample_chunks = da.core.normalize_chunks(chunks if chunks is not None else -1, shape)
    loc = dist._loc
    tril = da.broadcast_to(dist._tril, (*batch, d, d)).rechunk((*loc.chunks, (d,)))
    full = (*sample_chunks, *loc.chunks)
    blocks = tuple(len(c) for c in full[:-1])
    entropy = np.random.SeedSequence(None if rng is None else int(rng)).entropy
    meta = loc._meta
    eps = da.map_blocks(
        _normals_block,
        da.broadcast_to(loc, tuple(sum(c) for c in full), chunks=full),
        entropy=entropy,
        shape_blocks=blocks,
        dtype=dist._dtype,
        meta=meta,
    )
    points = tuple(f"s{i}" for i in range(len(shape)))
    dims = tuple(f"b{i}" for i in range(len(batch)))
    return da.blockwise(
        _affine_block,
        (*points, *dims, "d"),
        eps,
        (*points, *dims, "e"),
        loc,
        (*dims, "d"),
        tril,
        (*dims, "d", "e"),
        dtype=dist._dtype,
        meta=meta,
        concatenate=False,
    )


def _kl_block(lp: Any, tp: Any, lq: Any, tq: Any) -> Any:
    from ..distributions import kl_divergence

    lp, tp, lq, tq = single(lp), single(tp), single(lq), single(tq)
    return kl_divergence(_in_memory(lp, tp), _in_memory(lq, tq))


def kl_divergence(p: Any, q: Any, batch: tuple[int, ...]) -> Any:
    """KL(p || q) chunk by chunk over the broadcast batch."""
    import dask.array as da

    d = p._d
    args = []
    for dist in (p, q):
        loc = da.broadcast_to(dist._loc, (*batch, d))
        tril = da.broadcast_to(dist._tril, (*batch, d, d))
        args += [loc, tril]
    dims = tuple(f"b{i}" for i in range(len(batch)))
    return da.blockwise(
        _kl_block,
        dims,
        args[0],
        (*dims, "d"),
        args[1],
        (*dims, "d", "e"),
        args[2],
        (*dims, "d"),
        args[3],
        (*dims, "d", "e"),
        dtype=np.result_type(p._dtype, q._dtype),
        meta=args[0]._meta.sum(axis=-1),
        concatenate=False,
    )
