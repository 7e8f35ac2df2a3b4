"""Dask engine of MultivariateNormal: lazy results, chunk by chunk.

Two cases. A Dask `value` with in-memory parameters (NumPy or CuPy): every chunk of the value
meets the slice of the parameters its batch dimensions cover, the distribution itself travelling
with the tasks (`_graph_input`). Dask parameters (chunked along batch dimensions): the factor is
computed chunk by chunk by the in-memory constructor (its checks run when a chunk is computed),
and every method is a ``dask.array.blockwise`` over aligned chunks of the value, the mean and the
factor: each output chunk is an in-memory MultivariateNormal of its slice of the batch, so the
CuPy kernels and the NumPy engines do the work. The core dimension D (and the matrices' last
two) must be one chunk.

The distribution class hands every lazy call to `run`, with `tools` (``ChunkTools``): what the
chunks need of the class (a checked factor, the distribution of a chunk's parameters or of a
slice of the batch, its in-memory methods, the bytes it holds). Of a distribution this engine
reads only its public properties; it travels in the tasks as an opaque object that pickles
itself. Every graph layer is named ``xpops-multivariate_normal-<method>-<token>``. Chunk
functions are module-level: a closure would be pickled into every task.
"""

import copy
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import _backend
from .._lib import _compat
from .._lib._dask import block_library, check_core_chunks, child_seed, single_block, task_name
from .._lib._dispatch import engine_kind
from .._lib._random import as_seed, check_seed
from ._common import bad_loc, check_real, value_batch

__all__ = ["run"]

# The prefix of the names of this engine's graph layers: xpops-multivariate_normal-<method>-<token>
_OP = "multivariate_normal"
# Parameters up to this size go into every chunk's task (see `_graph_input`).
_EMBED_BYTES = 64 * 1024


def run(name: str, dist: Any, /, *args: Any, tools: Any) -> Any:
    """``dist.<name>(*args)`` as a lazy Dask result: `name` is one of ``parameters``,
    ``log_prob``, ``prob``, ``cdf``, ``sample`` and ``kl_divergence``."""
    entry = _ENTRIES[name]
    return entry(dist, *args, tools=tools)


# ---- the distribution inside the tasks -------------------------------------------------------


def _graph_input(dist: Any, nbytes: Any) -> Any:
    """`dist` as an input of a Dask graph. Small parameters (up to `_EMBED_BYTES`, as
    `nbytes` counts them): an argument of every chunk's task (`_Carried`), so that the chunks
    wait for nothing (a task of its own ahead of them would be one more scheduler round trip,
    about 15% of one worker's log_prob of 2^30 points in D = 16 on an H100). Larger ones: a
    key of its own that each worker fetches once, not a constant serialized for every task."""
    import dask

    if nbytes(dist) <= _EMBED_BYTES:
        return _Carried(dist)
    return dask.delayed(dist, pure=False, traverse=False)  # pyright: ignore[reportPrivateImportUsage]


class _Carried:
    """A small distribution inside every chunk's task, opaque to this engine. In this process
    `arrive` gives the distribution itself; pickled (for a cluster), a copy, as the
    distribution pickles itself (in the standard pickle, its CuPy arrays returning to the
    current device of the worker that runs the task)."""

    def __init__(self, dist: Any) -> None:
        self.dist: Any = dist

    def arrive(self) -> Any:
        return self.dist


def _arrived(dist: Any) -> Any:
    return dist.arrive() if isinstance(dist, _Carried) else dist


# ---- in-memory parameters, a Dask value ------------------------------------------------------


def _value_chunk(
    block: Any,
    dist: Any,
    where: tuple[slice, ...],
    method: str,
    out_axis: int,
    kw: dict[str, Any],
    tools: Any,
) -> Any:
    """`method` of one chunk of a Dask value (`_over_value`): `where` holds the block's slices
    of the value's batch dimensions, the last ``len(dist.batch_shape)`` of them the
    distribution's, whose part ``tools.batch_part`` gives."""
    dist = _arrived(dist)
    nb = len(dist.batch_shape)
    sub = tools.batch_part(dist, where[len(where) - nb :])
    out = tools.method(sub, method, single_block(block), kw)
    return block_library(out[0]).stack(out, axis=-1) if out_axis else out


def _over_value(
    dist: Any, value: Any, method: str, tools: Any, out_axis: int = 0, **kw: Any
) -> Any:
    """`method` chunk by chunk over a Dask `value` (NumPy or CuPy chunks): each chunk meets
    the slice of the parameters its batch dimensions cover. Checks run when a chunk is
    computed. `out_axis` > 0: the method returns that many stacked results (cdf with
    return_error)."""
    import dask.array as da
    from dask.layers import ArraySliceDep

    d, dtype = dist.event_shape[0], dist.dtype
    check_real(_backend.get_namespace(value), value, "value")
    batch = value_batch("value", tuple(int(s) for s in value.shape), d, dist.batch_shape)
    v = da.broadcast_to(value, (*batch, d)).rechunk({len(batch): -1})
    carried = _graph_input(dist, tools.nbytes)
    lead = tuple(range(len(batch)))  # blockwise indices of the batch dimensions
    ind = (*lead, len(batch))  # and of the event dimension
    options = {"method": method, "out_axis": out_axis, "kw": kw, "tools": tools}
    name = task_name(f"{_OP}-{method}", v, carried, out_axis, kw)
    if out_axis:
        out = da.blockwise(
            _value_chunk, ind, v, ind, carried, None, ArraySliceDep(v.chunks[:-1]), lead,
            name=name, dtype=dtype, adjust_chunks={len(batch): out_axis}, meta=v._meta,
            align_arrays=False, **options,  # align_arrays: as map_blocks with a BlockwiseDep
        )  # fmt: skip
        return tuple(out[..., i] for i in range(out_axis))
    # concatenate=False: the block as it is, not a copy (see `single_block`)
    return da.blockwise(
        _value_chunk, lead, v, ind, carried, None, ArraySliceDep(v.chunks[:-1]), lead,
        name=name, dtype=dtype, concatenate=False, meta=v._meta.sum(axis=-1),
        align_arrays=False, **options,
    )  # fmt: skip


def _draw_chunk(
    sampler: Any, entropy: int, blocks: list[int], method: Any, block_info: Any = None
) -> Any:
    """One chunk of `sample` with chunks: its own stream, from `entropy` and the chunk's index
    among `blocks` chunks a sample dimension; `method` is ``ChunkTools.method``."""
    where = block_info[None]["chunk-location"][: len(blocks)]
    index = int(np.ravel_multi_index(where, blocks)) if blocks else 0
    size = block_info[None]["chunk-shape"][: len(blocks)]
    rng = child_seed(entropy, index)
    return method(_arrived(sampler), "sample", tuple(size), {"rng": rng})


def _sample_in_chunks(dist: Any, shape: tuple[int, ...], rng: Any, chunks: Any, tools: Any) -> Any:
    """`sample` of in-memory parameters in chunks of the `shape` dimensions."""
    import dask.array as da
    from dask.array.core import normalize_chunks

    xp = _backend.get_namespace(dist.loc)
    if engine_kind(xp) not in ("numpy", "cupy"):
        msg = f"`chunks` needs NumPy or CuPy parameters (the chunks' library), got {xp.__name__}"
        raise NotImplementedError(msg)
    check_seed(rng, "with `chunks`")
    sample_chunks = normalize_chunks(chunks, shape) if shape else ()
    tail = (*dist.batch_shape, dist.event_shape[0])
    full_chunks = (*sample_chunks, *((n,) for n in tail))
    blocks = [len(c) for c in sample_chunks]
    entropy = np.random.SeedSequence(None if rng is None else int(as_seed(rng))).entropy
    meta = xp.empty((0,) * len(full_chunks), dtype=dist.dtype)
    sampler = _graph_input(copy.copy(dist), tools.nbytes)
    name = task_name(f"{_OP}-sample", sampler, entropy, full_chunks, dist.dtype)
    return da.map_blocks(
        _draw_chunk, sampler, entropy=entropy, blocks=blocks, method=tools.method,
        name=name, dtype=dist.dtype, chunks=full_chunks, meta=meta,
    )  # fmt: skip


# ---- Dask parameters ---------------------------------------------------------------------------


def _factor_block(m: Any, param: str, validate: bool, factor: Any) -> Any:
    if m.shape[-1] == 0 or math.prod(m.shape[:-2]) == 0:
        return m
    return factor(param, m, validate)


def _check_loc_block(loc: Any, shape: tuple[int, ...]) -> Any:
    ok = loc == loc  # False at NaN, in every chunk library
    finite = bool((ok & (abs(loc) != float("inf"))).all())
    if not finite:
        raise ValueError(bad_loc(shape))
    return loc


def parameters(dist: Any, name: str, loc: Any, matrix: Any, *, tools: Any) -> Any:
    """(loc broadcast to the batch, the lower factor with the matrix's own batch shape), lazy:
    the distribution being built has its batch shape and `validate_args` already."""
    import dask.array as da

    check_core_chunks(matrix, name, 2, "the solve needs whole matrices")
    d, batch, validate = matrix.shape[-1], dist.batch_shape, dist.validate_args
    loc = da.broadcast_to(loc, (*batch, d)).rechunk({len(batch): -1})
    if validate:
        loc = loc.map_blocks(
            _check_loc_block, shape=tuple(loc.shape), dtype=loc.dtype,
            name=task_name(f"{_OP}-loc", loc),
        )  # fmt: skip
    tril = matrix.map_blocks(
        _factor_block, param=name, validate=validate, factor=tools.factor, dtype=matrix.dtype,
        name=task_name(f"{_OP}-factor", matrix, name, validate),
    )  # fmt: skip
    return loc, tril


def _aligned(dist: Any, value: Any) -> tuple[Any, Any, Any, tuple[str, ...], tuple[str, ...]]:
    """The value broadcast to the output batch and the parameters to the batch, with the
    blockwise indices of the point dimensions and of the batch dimensions."""
    import dask.array as da

    d, batch = dist.event_shape[0], dist.batch_shape
    if value is None:
        msg = "`value` must be an array or a list of numbers, got None"
        raise TypeError(msg)
    # lists, numbers and NumPy arrays become one-chunk Dask arrays
    value = _backend.array_args(value, dist.loc, names=["value", "loc"])[1][0]
    check_real(_backend.get_namespace(value), value, "value")
    out_batch = value_batch("value", tuple(int(s) for s in value.shape), d, batch)
    v = da.broadcast_to(value, (*out_batch, d)).rechunk({len(out_batch): -1})
    points = tuple(f"p{i}" for i in range(len(out_batch) - len(batch)))
    dims = tuple(f"b{i}" for i in range(len(batch)))
    return v, dist.loc, dist.scale_tril, points, dims


def _method_block(
    v: Any,
    loc: Any,
    tril: Any,
    method: str,
    validate: bool,
    stacked: bool,
    kw: dict[str, Any],
    tools: Any,
) -> Any:
    v, loc, tril = single_block(v), single_block(loc), single_block(tril)
    out = tools.method(tools.distribution(loc, tril, validate), method, v, kw)
    if stacked:
        return block_library(out[0]).stack(out, axis=-1)
    return out


def _method(dist: Any, value: Any, name: str, tools: Any, outputs: int = 0, **kw: Any) -> Any:
    """``dist.<name>(value, **kw)`` of Dask parameters chunk by chunk; `outputs` > 0: that
    many stacked results (cdf with ``return_error``), returned as a tuple."""
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
        name=task_name(f"{_OP}-{name}", v, loc, tril, dist.validate_args, outputs, kw),
        dtype=dist.dtype,
        meta=meta,
        concatenate=False,
        method=name,
        validate=dist.validate_args,
        stacked=bool(outputs),
        kw=kw,
        tools=tools,
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
    seed = child_seed(entropy, index)
    return block_library(loc).random.default_rng(seed).standard_normal(size, dtype=loc.dtype)


def _affine_block(eps: Any, loc: Any, tril: Any) -> Any:
    eps, loc, tril = single_block(eps), single_block(loc), single_block(tril)
    lib = block_library(eps)
    return loc + lib.matmul(tril, eps[..., None])[..., 0]


def _sample_parameters(dist: Any, shape: tuple[int, ...], rng: Any, chunks: Any) -> Any:
    """Draws ``shape + batch_shape + (D,)`` of Dask parameters: standard normals from streams
    spawned from `rng` (one a chunk, so a seed and a chunking give one result), then
    ``loc + L eps`` chunk by chunk. `chunks` chunks the `shape` dimensions (None: one chunk);
    the batch dimensions follow the parameters' chunks."""
    import dask.array as da
    from dask.array.core import normalize_chunks

    d = dist.event_shape[0]
    sample_chunks = normalize_chunks(chunks if chunks is not None else -1, shape)
    loc = dist.loc
    tril = dist.scale_tril.rechunk((*loc.chunks, (d,)))
    full = (*sample_chunks, *loc.chunks)
    blocks = tuple(len(c) for c in full[:-1])
    entropy = np.random.SeedSequence(None if rng is None else int(as_seed(rng))).entropy
    meta = loc._meta
    eps = da.map_blocks(
        _normals_block,
        da.broadcast_to(loc, tuple(sum(c) for c in full), chunks=full),
        entropy=entropy,
        shape_blocks=blocks,
        name=task_name(f"{_OP}-normals", loc, entropy, full),
        dtype=dist.dtype,
        meta=meta,
    )
    points = tuple(f"s{i}" for i in range(len(shape)))
    dims = tuple(f"b{i}" for i in range(len(dist.batch_shape)))
    return da.blockwise(
        _affine_block,
        (*points, *dims, "d"),
        eps,
        (*points, *dims, "e"),
        loc,
        (*dims, "d"),
        tril,
        (*dims, "d", "e"),
        name=task_name(f"{_OP}-sample", eps, loc, tril),
        dtype=dist.dtype,
        meta=meta,
        concatenate=False,
    )


def _kl_block(lp: Any, tp: Any, lq: Any, tq: Any, tools: Any) -> Any:
    lp, tp, lq, tq = single_block(lp), single_block(tp), single_block(lq), single_block(tq)
    p, q = tools.distribution(lp, tp, False), tools.distribution(lq, tq, False)
    return tools.method(p, "kl_divergence", q, {})


# ---- the entries -------------------------------------------------------------------------------


def log_prob(dist: Any, value: Any, *, tools: Any) -> Any:
    """Log densities, lazily."""
    if _compat.is_dask_array(dist.loc):
        return _method(dist, value, "log_prob", tools)
    return _over_value(dist, value, "log_prob", tools)


def prob(dist: Any, value: Any, *, tools: Any) -> Any:
    """Densities, lazily."""
    if _compat.is_dask_array(dist.loc):
        return _method(dist, value, "prob", tools)
    return _over_value(dist, value, "prob", tools)


def cdf(
    dist: Any, value: Any, lower_limit: Any, options: dict[str, Any], log: bool, *, tools: Any
) -> Any:
    """cdf/logcdf over the chunks of a Dask `value` or of Dask parameters (`lower_limit` in
    memory or None; an int seed is used as is in every chunk, so a chunking gives one
    result)."""
    d = dist.event_shape[0]
    if lower_limit is not None and (
        _compat.is_dask_array(lower_limit) or tuple(np.shape(lower_limit)) != (d,)
    ):
        msg = (
            f"with a Dask `value`, `lower_limit` must be None or one in-memory bound of "
            f"shape ({d},), got {type(lower_limit).__name__} of shape "
            f"{tuple(getattr(lower_limit, 'shape', ()))}"
        )
        raise NotImplementedError(msg)
    check_seed(options.get("rng"), "with Dask arrays (one seed for every chunk)")
    method = "logcdf" if log else "cdf"
    kw = dict(options)
    kw["lower_limit"] = lower_limit
    if _compat.is_dask_array(dist.loc):
        outputs = 2 if kw["return_error"] else 0
        return _method(dist, value, method, tools, outputs, **kw)
    out_axis = 2 if kw["return_error"] else 0
    return _over_value(dist, value, method, tools, out_axis=out_axis, **kw)


def sample(dist: Any, shape: tuple[int, ...], rng: Any, chunks: Any = None, *, tools: Any) -> Any:
    """Draws, lazily: of Dask parameters (`chunks` those of the sample dimensions, None: one),
    or of in-memory parameters in `chunks`; `shape` checked by the class."""
    if _compat.is_dask_array(dist.loc):
        check_seed(rng, "with Dask parameters")
        return _sample_parameters(dist, shape, rng, chunks)
    return _sample_in_chunks(dist, shape, rng, chunks, tools)


def kl_divergence(p: Any, q: Any, batch: tuple[int, ...], *, tools: Any) -> Any:
    """KL(p || q) chunk by chunk over the broadcast batch."""
    import dask.array as da

    d = p.event_shape[0]
    args = []
    for dist in (p, q):
        loc = da.broadcast_to(dist.loc, (*batch, d))
        tril = da.broadcast_to(dist.scale_tril, (*batch, d, d))
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
        name=task_name(f"{_OP}-kl_divergence", *args),
        dtype=np.result_type(p.dtype, q.dtype),
        meta=args[0]._meta.sum(axis=-1),
        concatenate=False,
        tools=tools,
    )


_ENTRIES: dict[str, Callable[..., Any]] = {
    "parameters": parameters,
    "log_prob": log_prob,
    "prob": prob,
    "cdf": cdf,
    "sample": sample,
    "kl_divergence": kl_divergence,
}
