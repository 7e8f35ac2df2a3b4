"""CuPy engine of the multivariate normal CDF: Genz's method of the NumPy engine (`_numpy`) on a
GPU, for 3 <= D <= `MAX_D` (the cdf entry, `_cdf.mvn_cdf`, sends other D to the NumPy engine).

The numerics are those of the NumPy engine (its module docstring describes them): variable
prioritization and Cholesky factor per problem, randomly shifted Korobov lattice rules with the
baker's transform, ``NSHIFTS`` shifts a round, a growing prime ``n``, rounds combined with
inverse-variance weights, the error 3.5 standard errors (the parameters of `_genz`). Three
kernels (source in `_cupy_source`), all in float64:

* ``prioritize``: a thread per problem runs Genz-Bretz prioritization and the Cholesky factor
  of its (copied) covariance in global memory; ``D**3`` work a problem, once a call.
* ``sample``: a block per (active problem, shift, chunk of lattice points). The block stages the
  problem's bounds, packed factor and degenerate flags, the generating vector and the shift in
  shared memory; each thread evaluates the separation-of-variables integrand at its points
  (``y`` in local memory; ``normcdf``/``normcdfinv``; for ``log=True`` the same and one ``log``
  where the probabilities are normal numbers, else ``log_ndtr`` through ``erfcx`` and its
  inverse ``ndtri_exp``) and the block reduces them in a fixed order, to a
  sum, or for ``log=True`` to a ``(max, sum of exp(f - max))`` pair so that far tails stay
  finite. No atomics: a call repeated on the same GPU gives the same result (the chunking, so
  the order of summation, follows the number of multiprocessors and of active problems).
* ``round``: a thread per active problem folds the chunk partials into the ``NSHIFTS`` shift
  means, updates the combined estimate and variance, writes value and error, and flags the
  problem done when it meets its tolerance (or the next round would pass `maxpts`).

The host runs the round loop: the Korobov vector (`_genz.korobov`, cached), the shifts
(drawn on the host from a NumPy generator for None / an int seed, so that a seed draws the
NumPy engine's shifts, or on the device from a ``cupy.random.Generator``), two launches and one
read of the done flags a round.

``logcdf`` first finds the problems near 1 (the union bound of the probability outside below
`_genz.COMPLEMENT_BOUND`, one read) and computes them, as the NumPy engine does, as
``log1p(-Q)`` from the boxes of `_genz.outside_boxes` (one more batch of rounds, in linear
space, to a relative error), the shifts drawn from one generator in the NumPy engine's order.
`of_distribution` sets a distribution's problems up on its GPU for the cdf entry.
"""

from __future__ import annotations

import math

import cupy
import numpy as np
from cupyx.scipy import special as cupyx_special

from ..._lib._cuda import grid_1d, multiprocessors
from .._common import batch_of
from ._cupy_source import SOURCE
from ._genz import (
    COMPLEMENT_BOUND,
    DEG_RTOL,
    DEVICE_DIMS,
    ERR_FACTOR,
    GROWTH,
    LOG_RTOL,
    N0,
    NSHIFTS,
    Y_CLIP,
    check_shift_rng,
    korobov,
    missed_tolerance,
    next_prime,
    outside_boxes,
    tolerance,
)

__all__ = ["MAX_D", "mvn_cdf", "of_distribution"]

#: The largest D the kernels take (`_genz.DEVICE_DIMS` says why).
MAX_D = DEVICE_DIMS[-1]
_DMAX_STEPS = (16, 32, 64)  # compiled capacities: the smallest one >= D is used
# Threads a block of the sample kernel: 128 was the fastest of 64 / 128 / 256 on an H200
# (1000 problems, D = 10, cdf at abseps=1e-6: 4.33 / 4.29 / 4.44 ms).
THREADS = 128
# Blocks aimed at for one round of the sample kernel, per multiprocessor: a lattice of n points
# is split into chunks until (active problems x shifts x chunks) reaches this many blocks
# (a chunk has at least THREADS points). 16 was the fastest of 8 / 16 / 32 on an H200 (the
# same problems: 4.18 / 4.05 / 4.10 ms for cdf at abseps=1e-6, 41.3 / 40.6 / 40.4 ms for
# logcdf at abseps=1e-4).
BLOCKS_PER_SM = 16
ROUND_THREADS = 128  # threads a block of the round kernel (a thread per active problem)
PRIORITIZE_THREADS = 64  # threads a block of the prioritize kernel (a thread per problem)

_OPTIONS = ("-std=c++17", f"-DXPOPS_NSHIFTS={NSHIFTS}", f"-DXPOPS_LOG_RTOL={LOG_RTOL!r}")


def of_distribution(dist, value, lower_limit, options, log, check, *, solve):
    """CuPy parameters: the problems set up on their GPU (in its device context) and solved
    by `solve` (`_cdf.mvn_cdf`, which picks the kernels or host copies by D); ``(value, error,
    missed)`` as `_cdf.of_distribution` takes them."""
    xp = dist.xp
    upper = dist.check(value, "value", allow_inf=True)
    batch = batch_of(upper.shape[:-1], dist.batch_shape)
    lower = None
    if lower_limit is not None:
        lower = dist.check(lower_limit, "lower_limit", allow_inf=True)
        batch = batch_of(batch, lower.shape[:-1])
    with dist.tril.device:  # the engine computes in float64 on the parameters' GPU
        loc = xp.astype(dist.loc, xp.float64)
        b = xp.astype(upper, xp.float64) - loc
        a = xp.full_like(b, -math.inf) if lower is None else lower - loc
        out, err = solve(a, b, dist.tril, log=log, **options)
        out, err = xp.reshape(out, batch), xp.reshape(err, batch)
        missed = 0
        if check:  # one sync
            missed = missed_tolerance(cupy, out, err, options["abseps"], options["releps"], log)
        result = tuple(xp.astype(r, dist.dtype) for r in (out, err))
    return (*result, missed)


def _dmax(d: int) -> int:
    return next(m for m in _DMAX_STEPS if m >= d)


@cupy.memoize(for_each_device=True)
def _kernels(dmax: int, threads: int, log: bool) -> dict[str, cupy.RawKernel]:
    flag = "true" if log else "false"
    names = {
        "prioritize": f"xpops_mvn_cdf_prioritize<{dmax}>",
        "sample": f"xpops_mvn_cdf_sample<{dmax}, {threads}, {flag}>",
        "round": f"xpops_mvn_cdf_round<{flag}>",
    }
    module = cupy.RawModule(code=SOURCE, options=_OPTIONS, name_expressions=list(names.values()))
    return {key: module.get_function(name) for key, name in names.items()}


def _chunking(n: int, nact: int, threads: int) -> tuple[int, int]:
    """(chunks, points a thread) of a lattice of n points for `nact` active problems."""
    want = max(1, -(-BLOCKS_PER_SM * multiprocessors() // (nact * NSHIFTS)))
    chunks = max(1, min(-(-n // threads), want))
    ppt = -(-n // (chunks * threads))
    return -(-n // (ppt * threads)), ppt


def mvn_cdf(lower, upper, chol, *, abseps=1e-5, releps=0.0, maxpts=None, rng=None, log=False):
    """``P(lower < X <= upper)`` for ``X ~ N(0, chol @ chol.T)`` on the GPU: ``(value, error)``.

    The contract of the NumPy engine's `mvn_cdf` (CuPy arrays in, float64 CuPy arrays of the
    broadcast batch shape out, on the arrays' device), with `rng` None, an int seed, a
    ``numpy.random.Generator`` (shifts drawn on the host: a seed gives the NumPy engine's
    shifts) or a ``cupy.random.Generator`` (shifts drawn on the device). D = 0 gives 1 (log 0);
    otherwise D must be in `_genz.DEVICE_DIMS` (``ValueError``).
    """
    check_shift_rng(rng)
    with chol.device:
        lower = cupy.asarray(lower, dtype=np.float64)
        upper = cupy.asarray(upper, dtype=np.float64)
        chol = cupy.asarray(chol, dtype=np.float64)
        d = chol.shape[-1]
        if (
            chol.ndim < 2
            or chol.shape[-2] != d
            or lower.shape[-1:] != (d,)
            or upper.shape[-1:] != (d,)
        ):
            msg = "lower, upper must have shape (..., D) and chol (..., D, D)"
            raise ValueError(msg)
        shape = np.broadcast_shapes(lower.shape[:-1], upper.shape[:-1], chol.shape[:-2])
        if d == 0:
            return cupy.full(shape, 0.0 if log else 1.0), cupy.zeros(shape)
        if d not in DEVICE_DIMS:
            msg = (
                f"the GPU kernels take 3 <= D <= {MAX_D}, got D = {d} (`_cdf.mvn_cdf` sends "
                "other D to the NumPy engine)"
            )
            raise ValueError(msg)
        if maxpts is None:
            maxpts = 1_000_000 * d
        kw = {"abseps": abseps, "releps": releps, "maxpts": maxpts, "log": log}
        if not log:
            return _mvn_cdf_device(lower, upper, chol, shape, d, rng, **kw)
        # one generator for the complement's problems and then the others: the NumPy
        # engine's order of draws
        gen = rng if isinstance(rng, cupy.random.Generator) else np.random.default_rng(rng)
        near = _outside_if_small(lower, upper, chol, shape, d, gen, abseps, releps, maxpts)
        if near is None:
            return _mvn_cdf_device(lower, upper, chol, shape, d, gen, **kw)
        idx, v_near, e_near = near
        # the near problems as empty boxes for the main rounds, their values set after
        lower = cupy.broadcast_to(lower, (*shape, d)).reshape(-1, d).copy()
        upper = cupy.broadcast_to(upper, (*shape, d)).reshape(-1, d)
        lower[idx] = upper[idx]
        value, error = _mvn_cdf_device(
            lower.reshape(*shape, d), upper.reshape(*shape, d), chol, shape, d, gen, **kw
        )
        value, error = value.reshape(-1), error.reshape(-1)
        value[idx], error[idx] = v_near, e_near
        return value.reshape(shape), error.reshape(shape)


def _outside_if_small(lower, upper, chol, shape, d, gen, abseps, releps, maxpts):
    """The NumPy engine's `_outside_if_small` on the GPU: where the union bound of the
    probability outside the box is below `_genz.COMPLEMENT_BOUND`, ``log P = log1p(-Q)`` with
    ``Q`` summed over `_genz.outside_boxes` (computed to a relative error by the rounds);
    ``(flat indices, log P, its error)`` of those problems, or None (one sync)."""
    nprob = math.prod(shape)
    a = cupy.broadcast_to(lower, (*shape, d)).reshape(nprob, d)
    b = cupy.broadcast_to(upper, (*shape, d)).reshape(nprob, d)
    tril = cupy.broadcast_to(chol, (*shape, d, d)).reshape(nprob, d, d)
    sd = cupy.sqrt((tril * tril).sum(-1))  # the marginal standard deviations
    outside = cupyx_special.ndtr(a / sd) + cupyx_special.ndtr(-b / sd)
    outside = cupy.where(sd > 0, outside, ((a >= 0) | (b < 0)).astype(np.float64))
    bound = outside.sum(-1)
    idx = cupy.flatnonzero(bound < COMPLEMENT_BOUND)
    m = int(idx.size)
    if m == 0:
        return None
    lo, up = outside_boxes(cupy, a[idx], b[idx])
    rel = float(tolerance(cupy, cupy.log(bound[idx]), abseps, releps, True).min())
    terms, err = _mvn_cdf_device(
        lo,
        up,
        cupy.ascontiguousarray(tril[idx][:, None]),
        (m, 2 * d),
        d,
        gen,
        abseps=0.0,
        releps=rel,
        maxpts=maxpts,
        log=False,
    )
    q = cupy.clip(terms.sum(-1), 0.0, 1.0)
    return idx, cupy.log1p(-q), cupy.sqrt((err * err).sum(-1)) / (1.0 - q)


def _mvn_cdf_device(lower, upper, chol, shape, d, rng, *, abseps, releps, maxpts, log):
    nprob = math.prod(shape)
    a = cupy.ascontiguousarray(cupy.broadcast_to(lower, (*shape, d))).reshape(nprob, d)
    b = cupy.ascontiguousarray(cupy.broadcast_to(upper, (*shape, d))).reshape(nprob, d)
    # covariances on the factor's own batch, broadcast after
    sig = cupy.matmul(chol, cupy.swapaxes(chol, -1, -2))
    bad = cupy.isnan(chol).any(axis=(-1, -2))
    bad = cupy.broadcast_to(bad, shape).reshape(nprob)
    nan = cupy.isnan(a).any(-1) | cupy.isnan(b).any(-1) | bad
    empty = (a >= b).any(-1) & ~nan
    value = cupy.where(nan, np.nan, -np.inf if log else 0.0)
    error = cupy.where(nan, np.nan, 0.0)
    todo = cupy.flatnonzero(~nan & ~empty)  # the one sync before the rounds
    ntodo = int(todo.size)
    if ntodo == 0:
        return value.reshape(shape), error.reshape(shape)
    a, b = a[todo], b[todo]
    sig = cupy.ascontiguousarray(cupy.broadcast_to(sig, (*shape, d, d)).reshape(nprob, d, d)[todo])
    c = cupy.zeros((ntodo, d, d))
    deg = cupy.empty((ntodo, d), dtype=np.uint8)
    threads = THREADS
    kernels = _kernels(_dmax(d), threads, bool(log))
    kernels["prioritize"](
        (grid_1d(ntodo, PRIORITIZE_THREADS),),
        (PRIORITIZE_THREADS,),
        (a, b, sig, c, deg, np.int64(ntodo), np.int32(d), np.float64(DEG_RTOL)),
    )
    nshifts = NSHIFTS
    device_gen = isinstance(rng, cupy.random.Generator)
    gen = rng if device_gen else np.random.default_rng(rng)
    s = d - 1
    n = N0
    used = 0
    est = cupy.zeros(ntodo)
    var = cupy.full(ntodo, np.inf)
    ref = cupy.zeros(ntodo)
    active_host = np.arange(ntodo, dtype=np.int64)
    active = cupy.arange(ntodo, dtype=np.int64)
    first = True
    while True:
        nact = active_host.size
        z = cupy.asarray(korobov(s, n), dtype=np.int64)
        if device_gen:
            shifts = gen.random((nshifts, s), dtype=np.float64)
        else:
            shifts = cupy.asarray(gen.random((nshifts, s)))
        used += n * nshifts
        nxt = next_prime(int(n * GROWTH))
        over = used + nshifts * nxt > maxpts
        chunks, ppt = _chunking(n, nact, threads)
        blocks = nact * nshifts * chunks
        part = cupy.empty(blocks * (2 if log else 1))
        kernels["sample"](
            (grid_1d(blocks, 1),),
            (threads,),
            (
                a,
                b,
                c,
                deg,
                active,
                np.int64(nact),
                np.int32(d),
                z,
                shifts,
                np.int64(n),
                np.int64(chunks),
                np.int64(ppt),
                np.float64(Y_CLIP),
                part,
            ),
        )
        done = cupy.empty(nact, dtype=np.uint8)
        kernels["round"](
            (grid_1d(nact, ROUND_THREADS),),
            (ROUND_THREADS,),
            (
                part,
                np.int64(nact),
                np.int64(chunks),
                np.int64(n),
                active,
                todo,
                est,
                var,
                ref,
                np.int32(first),
                np.int32(over),
                np.float64(abseps),
                np.float64(releps),
                np.float64(ERR_FACTOR),
                value,
                error,
                done,
            ),
        )
        if over:
            break
        keep = done.get() == 0  # the one sync a round
        if not keep.any():
            break
        active_host = active_host[keep]
        active = cupy.asarray(active_host)
        n = nxt
        first = False
    return value.reshape(shape), error.reshape(shape)
