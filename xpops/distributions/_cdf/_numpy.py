"""NumPy engine of the multivariate normal CDF, vectorized over a batch of problems.

`mvn_cdf`: Genz's separation-of-variables transform with variable prioritization (Genz &
Bretz 2002: at each step the remaining variable with the smallest expected interval
probability goes next, its Cholesky column recomputed; each problem of the batch gets its own
order), integrated by randomly shifted rank-1 lattice rules (Korobov generating vectors,
searched once per (dimension, n) under a weighted P_2 criterion and cached; baker's/tent
transform), ``NSHIFTS`` independent shifts per round and a growing sequence of prime ``n``.
Rounds are combined with inverse-variance weights; the error is 3.5 standard errors of the
combined estimate. Problems stop as soon as they meet their tolerance. All arrays are
``(problems, points)`` per dimension step; Python loops only over dimensions, rounds and
memory-bounded chunks. ``log=True`` accumulates each sample as a sum of logs and averages by
log-sum-exp, so far tails stay finite.

D = 1 is exact and D = 2 with a nonsingular covariance takes the bivariate algorithm of
`_bivariate`; the lattice parameters are those of `_genz`, shared with the CuPy engine.
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np
from scipy import special

from ..._lib import _compat
from .._common import batch_of
from ._bivariate import LOG_SQRT_2PI, bvn_cdf, log1mexp, log_bvn_cdf, log_norm_cdf, norm_cdf
from ._genz import (
    COMPLEMENT_BOUND,
    DEG_RTOL,
    ERR_FACTOR,
    GROWTH,
    N0,
    NSHIFTS,
    Y_CLIP,
    korobov,
    missed_tolerance,
    next_prime,
    outside_boxes,
    tolerance,
)

__all__ = ["mvn_cdf", "of_numpy", "of_other"]

_CHUNK = 1 << 19  # (problems x points x dimensions) elements per chunk of the sampler


def _logsumexp(a: np.ndarray, axis: int) -> np.ndarray:
    """``scipy.special.logsumexp`` of an array along `axis` (typed: without ``return_sign``
    it returns one array)."""
    return cast(np.ndarray, special.logsumexp(a, axis=axis))


def _trunc_mean(al, be, lp):
    """E[Z | al < Z <= be] given lp = log P(al < Z <= be)."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        m = np.exp(-0.5 * al * al - LOG_SQRT_2PI - lp) - np.exp(-0.5 * be * be - LOG_SQRT_2PI - lp)
        fallback = np.where(np.isfinite(al), np.where(np.isfinite(be), 0.5 * (al + be), al), be)
    return np.where(np.isfinite(m), m, np.where(np.isfinite(fallback), fallback, 0.0))


def _prioritize(a, b, sigma):
    """Genz-Bretz variable prioritization and Cholesky factor, per problem.

    a, b: (P, D); sigma: (P, D, D). Returns reordered a, b, the lower factor C (P, D, D) of the
    reordered covariance (columns of degenerate variables are 0) and the degenerate mask (P, D).
    """
    a, b, sigma = a.copy(), b.copy(), sigma.copy()
    p, d = a.shape
    rows = np.arange(p)
    c = np.zeros((p, d, d))
    y = np.zeros((p, d))
    deg = np.zeros((p, d), dtype=bool)
    diag0 = np.diagonal(sigma, axis1=1, axis2=2).copy()
    for i in range(d):
        ci = c[:, i:, :i]
        v = np.diagonal(sigma, axis1=1, axis2=2)[:, i:] - np.einsum("pjk,pjk->pj", ci, ci)
        dg = v <= DEG_RTOL * diag0[:, i:]
        sd = np.sqrt(np.where(dg, 1.0, v))
        mu = np.einsum("pjk,pk->pj", ci, y[:, :i])
        with np.errstate(invalid="ignore"):
            al = (a[:, i:] - mu) / sd
            be = (b[:, i:] - mu) / sd
        prob = np.where(dg, ((a[:, i:] < mu) & (mu <= b[:, i:])).astype(float), norm_cdf(al, be))
        m = np.argmin(prob, axis=1)
        mi = i + m
        sd_m, dg_m, al_m, be_m = (t[rows, m] for t in (sd, dg, al, be))
        # swap i <-> mi
        for arr in (a, b, diag0):
            tmp = arr[rows, i].copy()
            arr[rows, i] = arr[rows, mi]
            arr[rows, mi] = tmp
        tmp = sigma[rows, i, :].copy()
        sigma[rows, i, :] = sigma[rows, mi, :]
        sigma[rows, mi, :] = tmp
        tmp = sigma[rows, :, i].copy()
        sigma[rows, :, i] = sigma[rows, :, mi]
        sigma[rows, :, mi] = tmp
        tmp = c[rows, i, :].copy()
        c[rows, i, :] = c[rows, mi, :]
        c[rows, mi, :] = tmp
        # column i of the factor
        deg[:, i] = dg_m
        c[:, i, i] = np.where(dg_m, 0.0, sd_m)
        if i + 1 < d:
            col = sigma[:, i + 1 :, i] - np.einsum("pjk,pk->pj", c[:, i + 1 :, :i], c[:, i, :i])
            c[:, i + 1 :, i] = np.where(dg_m[:, None], 0.0, col / sd_m[:, None])
        lp = log_norm_cdf(al_m, be_m)
        y[:, i] = np.where(dg_m, 0.0, _trunc_mean(al_m, be_m, lp))
    return a, b, c, deg


def _sample(a, b, c, deg, w, log):
    """Integrand values at points ``w`` (K, D-1) for problems (P, D): f (P, K) or log f."""
    p, d = a.shape
    k = w.shape[0]
    yy = np.empty((p, d, k))
    cd = np.diagonal(c, axis1=1, axis2=2)
    csafe = np.where(deg, 1.0, cd)
    acc = np.zeros((p, k)) if log else np.ones((p, k))
    any_deg = bool(deg.any())
    u: Any = None  # the points' uniforms for variable i (the last variable takes none)
    yv: Any = None  # and their values of variable i
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        for i in range(d):
            s = np.matmul(c[:, i : i + 1, :i], yy[:, :i, :])[:, 0, :] if i else np.zeros((p, 1))
            al = (a[:, i, None] - s) / csafe[:, i, None]
            be = (b[:, i, None] - s) / csafe[:, i, None]
            flip = al + be > 0
            lo = np.where(flip, -be, al)
            hi = np.where(flip, -al, be)
            last = i == d - 1
            if not last:
                u = np.where(flip, 1.0 - w[:, i], w[:, i])
            if log:
                lpl = special.log_ndtr(lo)
                lph = special.log_ndtr(hi)
                le = lph + log1mexp(np.minimum(lpl - lph, 0.0))  # rounding may give > 0
                if any_deg:
                    ind = (a[:, i, None] < s) & (s <= b[:, i, None])
                    le = np.where(deg[:, i, None], np.where(ind, 0.0, -np.inf), le)
                acc += le
                if not last:
                    yv = special.ndtri_exp(np.minimum(np.logaddexp(lpl, np.log(u) + le), 0.0))
            else:
                pl = special.ndtr(lo)
                e = special.ndtr(hi) - pl
                if any_deg:
                    ind = (a[:, i, None] < s) & (s <= b[:, i, None])
                    e = np.where(deg[:, i, None], ind.astype(float), e)
                acc *= e
                if not last:
                    yv = special.ndtri(np.clip(pl + u * e, 0.0, 1.0))
            if not last:
                yv = np.where(flip, -yv, yv)
                if any_deg:
                    yv = np.where(deg[:, i, None], 0.0, yv)
                yy[:, i, :] = np.clip(yv, -Y_CLIP, Y_CLIP)
    return acc


def _shift_means(a, b, c, deg, z, n, shifts, log):
    """Per problem and shift, the lattice-rule mean (log mean when ``log``): (P, M)."""
    p, d = a.shape
    m = shifts.shape[0]
    out = np.empty((p, m))
    kpts = np.arange(n, dtype=np.int64)
    pc = max(1, min(p, _CHUNK // max(1, n * d)))
    kc = max(1, min(n, _CHUNK // (pc * d)))
    for j in range(m):
        for k0 in range(0, n, kc):
            base = (kpts[k0 : k0 + kc, None] * z[None, :] % n) / n + shifts[j]
            base -= np.floor(base)
            w = 1.0 - np.abs(2.0 * base - 1.0)  # baker's transform
            for p0 in range(0, p, pc):
                sl = slice(p0, p0 + pc)
                f = _sample(a[sl], b[sl], c[sl], deg[sl], w, log)
                if log:
                    part = _logsumexp(f, axis=1)
                    out[sl, j] = part if k0 == 0 else np.logaddexp(out[sl, j], part)
                else:
                    part = f.sum(axis=1)
                    out[sl, j] = part if k0 == 0 else out[sl, j] + part
    return out - math.log(n) if log else out / n


def _outside_if_small(a, b, sigma, chol, abseps, releps, maxpts, gen):
    """Where the union bound puts the probability outside the box, ``Q = 1 - P``, below
    `_genz.COMPLEMENT_BOUND`: ``Q`` to the relative accuracy that logcdf asks of a small probability
    (`_genz.tolerance`), so that ``log P = log1p(-Q)`` keeps its relative accuracy.

    ``Q`` is the sum over variables ``i`` of ``P(X_i outside its interval, X_j inside for
    j < i)``, two boxes each (below and above), each a small probability that Genz's method
    computes to a relative error; ``(near mask, Q, error of Q)``.
    """
    sd = np.sqrt(np.diagonal(sigma, axis1=1, axis2=2))
    with np.errstate(divide="ignore", invalid="ignore"):
        outside = special.ndtr(a / sd) + special.ndtr(-b / sd)
    outside = np.where(sd > 0, outside, ((a >= 0) | (b < 0)).astype(float))
    bound = outside.sum(-1)
    near = bound < COMPLEMENT_BOUND
    if not near.any():
        return near, np.zeros(0), np.zeros(0)
    a, b, chol, bound = a[near], b[near], chol[near], bound[near]
    lo, up = outside_boxes(np, a, b)
    with np.errstate(divide="ignore"):
        rel = float(np.min(tolerance(np, np.log(bound), abseps, releps, True)))
    terms, err = mvn_cdf(lo, up, chol[:, None], abseps=0.0, releps=rel, maxpts=maxpts, rng=gen)
    return near, np.clip(terms.sum(-1), 0.0, 1.0), np.sqrt((err * err).sum(-1))


def mvn_cdf(lower, upper, chol, *, abseps=1e-5, releps=0.0, maxpts=None, rng=None, log=False):
    """``P(lower < X <= upper)`` for ``X ~ N(0, chol @ chol.T)``, batched: ``(value, error)``.

    Parameters
    ----------
    lower, upper : array_like, shape ``(..., D)``
        Bounds minus the mean (``+-inf`` allowed).
    chol : array_like, shape ``(..., D, D)``
        Lower Cholesky factor ``L`` of the covariance (``L L^T = Sigma``; only ``L L^T`` is used,
        so a singular covariance is fine). Batch shapes of the three broadcast.
    abseps, releps : float
        A problem stops once ``error <= max(abseps, releps * |value|)``. With ``log=True`` both
        apply to the returned log value (``abseps`` then bounds its absolute error, about the
        relative error of the probability).
    maxpts : int, optional
        Most integrand evaluations per problem (default ``1_000_000 * D``); the result is then
        returned with whatever error it has reached.
    rng : None, int or numpy.random.Generator
        Source of the random shifts; one seed gives one result.
    log : bool
        Return the log of the probability (finite far into the tails) and the error of the log.

    Returns
    -------
    value, error : ndarray of the broadcast batch shape
        ``error`` is 3.5 standard errors over the random shifts (0 where the answer is exact:
        ``D = 1``, an empty box, or an integrand found constant). ``D = 2`` with nonsingular
        covariance is computed by `bvn_cdf` / `log_bvn_cdf` (error 1e-14 / 1e-9).
    """
    lower = np.asarray(lower, dtype=np.float64)
    upper = np.asarray(upper, dtype=np.float64)
    chol = np.asarray(chol, dtype=np.float64)
    d = chol.shape[-1]
    if chol.ndim < 2 or chol.shape[-2] != d or lower.shape[-1:] != (d,) or upper.shape[-1:] != (d,):
        msg = "lower, upper must have shape (..., D) and chol (..., D, D)"
        raise ValueError(msg)
    shape = np.broadcast_shapes(lower.shape[:-1], upper.shape[:-1], chol.shape[:-2])
    a = np.broadcast_to(lower, (*shape, d)).reshape(-1, d)
    b = np.broadcast_to(upper, (*shape, d)).reshape(-1, d)
    lf = np.broadcast_to(chol, (*shape, d, d)).reshape(-1, d, d)
    nprob = a.shape[0]
    if maxpts is None:
        maxpts = 1_000_000 * d
    value = np.full(nprob, -np.inf if log else 0.0)
    error = np.zeros(nprob)
    nan = np.isnan(a).any(-1) | np.isnan(b).any(-1) | np.isnan(lf).any((-1, -2))
    empty = (a >= b).any(-1) & ~nan
    value[nan] = np.nan
    error[nan] = np.nan
    todo = np.flatnonzero(~nan & ~empty)
    if todo.size == 0:
        return value.reshape(shape), error.reshape(shape)
    sigma = np.matmul(lf[todo], np.swapaxes(lf[todo], -1, -2))
    a, b = a[todo], b[todo]
    # D = 2 with nonsingular covariance: the deterministic bivariate algorithm
    if d == 2:
        v0, v1 = sigma[:, 0, 0], sigma[:, 1, 1]
        with np.errstate(invalid="ignore", divide="ignore"):
            rho = np.clip(sigma[:, 0, 1] / np.sqrt(v0 * v1), -1.0, 1.0)
        ok = (v0 > 0) & (v1 > 0) & (np.abs(rho) < 1.0)
        if ok.any():
            sd = np.sqrt(np.stack([v0[ok], v1[ok]], -1))
            f = log_bvn_cdf if log else bvn_cdf
            value[todo[ok]] = f(a[ok] / sd, b[ok] / sd, rho[ok])
            error[todo[ok]] = 1e-9 if log else 1e-14
        todo, a, b, sigma = todo[~ok], a[~ok], b[~ok], sigma[~ok]
        if todo.size == 0:
            return value.reshape(shape), error.reshape(shape)
    gen = np.random.default_rng(rng)
    if log and d >= 3:  # P near 1: log1p of minus the probability outside
        near, q, q_err = _outside_if_small(a, b, sigma, lf[todo], abseps, releps, maxpts, gen)
        if near.any():
            value[todo[near]] = np.log1p(-q)
            error[todo[near]] = q_err / (1.0 - q)
            todo, a, b, sigma = todo[~near], a[~near], b[~near], sigma[~near]
            if todo.size == 0:
                return value.reshape(shape), error.reshape(shape)
    a, b, c, deg = _prioritize(a, b, sigma)
    if d == 1:  # exact
        cd = np.where(deg[:, 0], 1.0, c[:, 0, 0])
        ind = ((a[:, 0] < 0) & (b[:, 0] >= 0)).astype(float)
        if log:
            with np.errstate(divide="ignore"):
                v = np.where(deg[:, 0], np.log(ind), log_norm_cdf(a[:, 0] / cd, b[:, 0] / cd))
        else:
            v = np.where(deg[:, 0], ind, norm_cdf(a[:, 0] / cd, b[:, 0] / cd))
        value[todo] = v
        return value.reshape(shape), error.reshape(shape)
    s = d - 1
    n = N0
    used = np.zeros(todo.size, dtype=np.int64)
    est = np.zeros(todo.size)  # combined estimate (linear; relative to `ref` when log)
    var = np.full(todo.size, np.inf)
    ref = np.zeros(todo.size)
    active = np.arange(todo.size)
    first = True
    while active.size:
        z = korobov(s, n)
        shifts = gen.random((NSHIFTS, s))
        means = _shift_means(a[active], b[active], c[active], deg[active], z, n, shifts, log)
        used[active] += n * NSHIFTS
        if log:
            if first:
                ref[active] = _logsumexp(means, axis=1) - math.log(NSHIFTS)
                ref[~np.isfinite(ref)] = 0.0
            means = np.exp(means - ref[active, None])
        r_est = means.mean(axis=1)
        r_var = means.var(axis=1, ddof=1) / NSHIFTS
        old_e, old_v = est[active], var[active]
        tot = old_v + r_var
        with np.errstate(invalid="ignore", divide="ignore"):
            new_e = np.where(
                np.isinf(old_v),
                r_est,
                np.where(tot > 0, (old_e * r_var + r_est * old_v) / tot, r_est),
            )
            new_v = np.where(np.isinf(old_v), r_var, np.where(tot > 0, old_v * r_var / tot, 0.0))
        est[active], var[active] = new_e, new_v
        first = False
        if log:
            with np.errstate(divide="ignore", invalid="ignore"):
                val = ref[active] + np.log(new_e)
                err = np.where(
                    new_e > 0,
                    ERR_FACTOR * np.sqrt(new_v) / new_e,
                    np.where(new_v > 0, np.inf, 0.0),
                )
        else:
            val = new_e
            err = ERR_FACTOR * np.sqrt(new_v)
        tol = tolerance(np, val, abseps, releps, log)
        done = (err <= tol) | (used[active] + NSHIFTS * next_prime(int(n * GROWTH)) > maxpts)
        value[todo[active]] = np.clip(val, -np.inf, 0.0) if log else np.clip(val, 0.0, 1.0)
        error[todo[active]] = err
        active = active[~done]
        n = next_prime(int(n * GROWTH))
    return value.reshape(shape), error.reshape(shape)


# --------------------------------------------------------------------------------------------
# the problems of a distribution on the CPU


def of_numpy(
    dist: Any, value: Any, lower_limit: Any, options: dict[str, Any], log: bool, check: bool
) -> tuple[Any, Any, int]:
    """NumPy parameters: ``(value, error, missed)`` as `_cdf.of_distribution` takes them."""

    def back(r: np.ndarray) -> Any:
        return np.asarray(r, dtype=np.dtype(dist.dtype))

    return _on_cpu(dist, value, lower_limit, options, log, check, lambda a: a, back)


def of_other(
    dist: Any, value: Any, lower_limit: Any, options: dict[str, Any], log: bool, check: bool
) -> tuple[Any, Any, int]:
    """CPU arrays of other libraries: read in place, the results returned in their library.
    JAX arrays on another device: copied to the host and the results back (JAX tracers:
    `_traced`). ``NotImplementedError`` for other libraries' arrays on other devices."""
    traced = _traced(dist, value, lower_limit, options, log)
    if traced is not None:
        return traced
    xp, device = dist.xp, _compat.device(dist.tril)
    on_cpu = "cpu" in str(device).lower()
    if not on_cpu and not _compat.is_jax_namespace(xp):
        msg = (
            "cdf and logcdf run on the CPU or, for CuPy arrays, on the GPU (for JAX arrays on "
            f"any device) in this version, got {xp.__name__} arrays on {device}"
        )
        raise NotImplementedError(msg)

    def host(a: Any) -> np.ndarray:  # no device transfer on the CPU
        if not on_cpu:
            return np.asarray(a)
        detach = getattr(a, "detach", None)  # a torch tensor that requires grad
        a = detach() if detach is not None else a
        try:
            return np.from_dlpack(a)
        except BufferError:  # NumPy before 2.1 cannot take a read-only array: take a copy
            return np.from_dlpack(xp.asarray(a, copy=True))

    def back(r: np.ndarray) -> Any:
        return xp.asarray(np.array(r, dtype=np.float64), dtype=dist.dtype, device=device)

    return _on_cpu(dist, value, lower_limit, options, log, check, host, back)


def _traced(
    dist: Any, value: Any, lower_limit: Any, options: dict[str, Any], log: bool
) -> tuple[Any, Any, int] | None:
    """The problems of JAX tracers (under ``jax.jit``, ``jax.vmap``, ``jax.grad``), solved by this
    engine when the compiled function runs, through ``jax.pure_callback`` (one call per member
    of a vmapped batch), on any device; None for arrays that are not traced. The checks of
    values are skipped and no `IntegrationWarning` is issued: both need the values."""
    traced = _compat.is_traced(dist.loc, dist.tril, value, lower_limit)
    if not traced and not (_compat.is_jax_namespace(dist.xp) and _compat.jax_tracing()):
        return None
    import jax

    upper = dist.check(value, "value", allow_inf=True)
    lower = None if lower_limit is None else dist.check(lower_limit, "lower_limit", allow_inf=True)
    arrays = (dist.loc, dist.tril, upper) if lower is None else (dist.loc, dist.tril, upper, lower)
    dtype = np.dtype(dist.dtype)
    batch = batch_of(
        tuple(upper.shape[:-1]), () if lower is None else tuple(lower.shape[:-1]), dist.batch_shape
    )

    def solve(loc: Any, tril: Any, upper: Any, *lower: Any) -> tuple[np.ndarray, np.ndarray]:
        on_host = dist._replace(xp=np, loc=np.asarray(loc), tril=np.asarray(tril), check=_same)
        limit = np.asarray(lower[0]) if lower else None

        def back(r: np.ndarray) -> np.ndarray:
            return np.asarray(r, dtype=dtype)

        out, err, _ = _on_cpu(on_host, np.asarray(upper), limit, options, log, False, _same, back)
        return out, err

    shape = jax.ShapeDtypeStruct(batch, dtype)
    out, err = jax.pure_callback(solve, (shape, shape), *arrays, vmap_method="sequential")
    return out, err, 0


def _same(a: Any, *args: Any, **kwargs: Any) -> Any:
    return a


def _on_cpu(dist, value, lower_limit, options, log, check, host, back):
    """The problems in NumPy: `host` reads an array as NumPy, `back` returns a result in the
    parameters' library; `missed` counts the problems short of their tolerance (when
    `check`)."""
    d = dist.tril.shape[-1]
    upper = host(dist.check(value, "value", allow_inf=True))
    if lower_limit is None:
        lower = np.full_like(upper, -np.inf)
    else:
        lower = host(dist.check(lower_limit, "lower_limit", allow_inf=True))
    batch = batch_of(upper.shape[:-1], lower.shape[:-1], dist.batch_shape)
    loc = np.broadcast_to(host(dist.loc), (*batch, d)).astype(np.float64)
    a = np.broadcast_to(lower, (*batch, d)) - loc
    b = np.broadcast_to(upper, (*batch, d)) - loc
    tril = np.broadcast_to(host(dist.tril), (*batch, d, d)).astype(np.float64)
    if d == 0:
        out, err = (np.zeros(batch) if log else np.ones(batch)), np.zeros(batch)
    else:  # D = 1 and 2 deterministic inside, D >= 3 quasi-Monte-Carlo
        out, err = mvn_cdf(a, b, tril, log=log, **options)
    out, err = np.reshape(out, batch), np.reshape(err, batch)
    missed = (
        missed_tolerance(np, out, err, options["abseps"], options["releps"], log) if check else 0
    )
    return back(out), back(err), missed
