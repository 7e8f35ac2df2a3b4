"""NumPy engine of the multivariate normal CDF in one and two dimensions, vectorized over a
batch of problems (the D-dimensional `_numpy.mvn_cdf` takes D = 1 and 2 from here).

* `norm_cdf`, `log_norm_cdf`: ``P(a < Z <= b)`` for a standard normal ``Z`` and its log, computed
  on the side of the distribution where both tail probabilities are small (no cancellation in
  the tails); an interval that straddles 0 is summed from two ``erf`` values of one sign.
* `bvn_cdf`, `log_bvn_cdf`: rectangle probabilities of a standard bivariate normal with
  correlation ``rho``. Orthants follow Drezner & Wesolowsky (1990) as refined by Genz (2004,
  "Numerical computation of rectangular bivariate and trivariate normal and t probabilities"):
  Gauss-Legendre quadrature (6/12/20 nodes for ``|rho|`` below 0.3/0.75/0.925) of the integral
  over ``arcsin(rho)``, and for ``|rho| >= 0.925`` the integral of the remainder after the
  singular part near ``|rho| = 1`` is taken out in closed form. Each coordinate is first
  reflected so that its interval lies mostly below 0 (orthant probabilities then stay small
  where the rectangle is in a tail); rectangles are the inclusion-exclusion of corners. The log
  version takes ``log`` of that value where it exceeds `_LOG_DIRECT` and otherwise integrates
  ``log phi(x) + log P(l2 < Y <= u2 | x)`` in log space: the integrand is log-concave with
  curvature <= -1, so its mode (bisection on the derivative) and the points where it has
  dropped by 40 (bisection, within 9 of the mode) bound the mass; that interval, cut also at
  the mode and around the points where the conditional interval crosses 0 (a feature of width
  ``sqrt(1 - rho**2)/|rho|``), gets a composite Gauss-Legendre rule summed by log-sum-exp.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

__all__ = ["LOG_SQRT_2PI", "bvn_cdf", "log1mexp", "log_bvn_cdf", "log_norm_cdf", "norm_cdf"]

_SQRT1_2 = math.sqrt(0.5)
LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_LN2 = math.log(2.0)
# log P is log1p(-Q) where the probability outside, Q, is below this: Q is then the sum of two
# tails of one sign, each accurate to its last bits, so the log keeps its relative accuracy
_NEAR_ONE = 0.25

# --------------------------------------------------------------------------------------------
# 1-D


def log1mexp(x):
    """log(1 - exp(x)) for x <= 0 (``-inf`` at 0)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.where(x > -_LN2, np.log(-np.expm1(x)), np.log1p(-np.exp(x)))


def norm_cdf(a, b):
    """``P(a < Z <= b)`` for a standard normal ``Z``, elementwise (0 where ``a >= b``)."""
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    with np.errstate(invalid="ignore"):
        flip = a + b > 0  # interval mostly above 0: use upper tails
    lo = np.where(flip, -b, a)
    hi = np.where(flip, -a, b)
    tail = hi <= -1.0  # both in the lower tail: difference of ndtr; else of erf (no cancellation)
    with np.errstate(invalid="ignore"):
        tails = special.ndtr(hi) - special.ndtr(lo)
        central = 0.5 * (special.erf(hi * _SQRT1_2) - special.erf(lo * _SQRT1_2))
    out = np.where(tail, tails, central)
    out = np.where(a < b, np.clip(out, 0.0, 1.0), np.where(np.isnan(a) | np.isnan(b), np.nan, 0.0))
    return out[()] if out.ndim == 0 else out


def log_norm_cdf(a, b):
    """``log P(a < Z <= b)`` for a standard normal ``Z``, elementwise (``-inf`` where ``a >= b``).

    Accurate to a few ulp relative everywhere: far in the tails (``log_norm_cdf(-inf, -40)``
    is ``log_ndtr(-40)``) and where ``P`` is near 1, where the log is ``log1p`` of minus the
    probability outside (``log_norm_cdf(-inf, 20)`` is ``log_ndtr(20)``, -2.75e-89).
    """
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    with np.errstate(invalid="ignore"):
        flip = a + b > 0
    lo = np.where(flip, -b, a)
    hi = np.where(flip, -a, b)
    tail = hi <= -1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        lhi = special.log_ndtr(hi)
        tails = lhi + log1mexp(np.minimum(special.log_ndtr(lo) - lhi, 0.0))
        central = np.log(0.5 * (special.erf(hi * _SQRT1_2) - special.erf(lo * _SQRT1_2)))
        # near 1: log1p of minus the two tails outside, each accurate to its last bits
        outside = special.ndtr(lo) + special.ndtr(-hi)
        near_one = np.log1p(-outside)
    out = np.where(tail, tails, np.where(outside < _NEAR_ONE, near_one, central))
    out = np.where(
        a < b, np.minimum(out, 0.0), np.where(np.isnan(a) | np.isnan(b), np.nan, -np.inf)
    )
    return out[()] if out.ndim == 0 else out


# --------------------------------------------------------------------------------------------
# 2-D

_GL = {n: np.polynomial.legendre.leggauss(n) for n in (6, 12, 20, 24)}


def _bvn_upper_finite(h, k, r):
    """Genz's ``P(X > h, Y > k)`` for finite 1-D ``h, k`` and ``|r| < 1`` (arrays of one shape)."""
    out = np.empty_like(h)
    ar = np.abs(r)
    hk = h * k
    # |r| < 0.925: integrate over theta in [0, arcsin r] with 6/12/20 Gauss-Legendre nodes
    for n, sel in (
        (6, ar < 0.3),
        (12, (ar >= 0.3) & (ar < 0.75)),
        (20, (ar >= 0.75) & (ar < 0.925)),
    ):
        if not sel.any():
            continue
        x, w = _GL[n]
        hs_, hk_, h_, k_ = (0.5 * (h[sel] ** 2 + k[sel] ** 2)), hk[sel], h[sel], k[sel]
        asr = np.arcsin(r[sel])
        sn = np.sin(asr[:, None] * (1.0 + x) / 2.0)
        terms = np.exp((sn * hk_[:, None] - hs_[:, None]) / (1.0 - sn * sn))
        out[sel] = (terms @ w) * asr / (4.0 * np.pi) + special.ndtr(-h_) * special.ndtr(-k_)
    sel = ar >= 0.925
    if sel.any():
        x, w = _GL[20]
        h_, k_, r_ = h[sel], k[sel], r[sel]
        neg = r_ < 0
        k_ = np.where(neg, -k_, k_)
        hk_ = h_ * k_
        as_ = (1.0 - r_) * (1.0 + r_)
        a = np.sqrt(as_)
        bs = (h_ - k_) ** 2
        c = (4.0 - hk_) / 8.0
        d = (12.0 - hk_) / 16.0
        asr = -(bs / as_ + hk_) / 2.0
        with np.errstate(over="ignore", under="ignore"):
            bvn = np.where(
                asr > -100.0,
                a
                * np.exp(asr)
                * (1 - c * (bs - as_) * (1 - d * bs / 5) / 3 + c * d * as_ * as_ / 5),
                0.0,
            )
            b = np.sqrt(bs)
            sing = (
                np.exp(-hk_ / 2.0)
                * math.sqrt(2.0 * np.pi)
                * special.ndtr(-b / a)
                * b
                * (1 - c * bs * (1 - d * bs / 5) / 3)
            )
            bvn = bvn - np.where(hk_ > -100.0, sing, 0.0)
            a2 = (a / 2.0)[:, None]
            xs = (a2 * (x + 1.0)) ** 2
            rs = np.sqrt(1.0 - xs)
            asr = -(bs[:, None] / xs + hk_[:, None]) / 2.0
            ep = np.exp(-hk_[:, None] * xs / (2.0 * (1.0 + rs) ** 2)) / rs
            sp = 1.0 + c[:, None] * xs * (1.0 + d[:, None] * xs)
            terms = np.where(asr > -100.0, a2 * np.exp(asr) * (ep - sp), 0.0)
        bvn = -(bvn + terms @ w) / (2.0 * np.pi)
        pos_val = bvn + special.ndtr(-np.maximum(h_, k_))
        neg_val = np.where(h_ >= k_, -bvn, norm_cdf(h_, k_) - bvn)
        out[sel] = np.where(neg, neg_val, pos_val)
    return np.clip(out, 0.0, 1.0)


def _bvn_lower(h, k, r):
    """``P(X <= h, Y <= k)``: 1-D arrays of one shape, ``h, k`` may be infinite, ``|r| <= 1``."""
    out = np.zeros_like(h)
    hinf, kinf = h == np.inf, k == np.inf
    sel = hinf & ~(k == -np.inf)
    out[sel] = special.ndtr(k[sel])
    sel = kinf & ~(h == -np.inf) & ~hinf
    out[sel] = special.ndtr(h[sel])
    fin = np.isfinite(h) & np.isfinite(k)
    one = fin & (r >= 1.0)
    out[one] = special.ndtr(np.minimum(h[one], k[one]))
    mone = fin & (r <= -1.0)
    out[mone] = norm_cdf(-k[mone], h[mone])
    mid = fin & (np.abs(r) < 1.0)
    out[mid] = _bvn_upper_finite(-h[mid], -k[mid], r[mid])
    nan = np.isnan(h) | np.isnan(k) | np.isnan(r)
    out[nan] = np.nan
    return out


def _prep_bvn(lower, upper, rho):
    lower = np.asarray(lower, dtype=np.float64)
    upper = np.asarray(upper, dtype=np.float64)
    rho = np.asarray(rho, dtype=np.float64)
    if lower.shape[-1:] != (2,) or upper.shape[-1:] != (2,):
        msg = "lower and upper must have a last axis of length 2"
        raise ValueError(msg)
    shape = np.broadcast_shapes(lower.shape[:-1], upper.shape[:-1], rho.shape)
    lo = np.broadcast_to(lower, (*shape, 2)).reshape(-1, 2)
    up = np.broadcast_to(upper, (*shape, 2)).reshape(-1, 2)
    r = np.broadcast_to(rho, shape).reshape(-1).copy()
    # reflect each coordinate so that its interval lies mostly below 0
    with np.errstate(invalid="ignore"):
        flip = lo + up > 0
    l2 = np.where(flip, -up, lo)
    u2 = np.where(flip, -lo, up)
    r = np.where(flip[:, 0] ^ flip[:, 1], -r, r)
    empty = (lo[:, 0] >= up[:, 0]) | (lo[:, 1] >= up[:, 1])
    nan = np.isnan(lo).any(-1) | np.isnan(up).any(-1) | np.isnan(r)
    return shape, l2, u2, r, empty, nan


def _bvn_rect(l2, u2, r):
    p = _bvn_lower(u2[:, 0], u2[:, 1], r)
    for cx, cy, sgn in (
        (l2[:, 0], u2[:, 1], -1.0),
        (u2[:, 0], l2[:, 1], -1.0),
        (l2[:, 0], l2[:, 1], 1.0),
    ):
        live = (cx > -np.inf) & (cy > -np.inf)
        if live.any():
            p[live] += sgn * _bvn_lower(cx[live], cy[live], r[live])
    return np.clip(p, 0.0, 1.0)


def bvn_cdf(lower, upper, rho):
    """``P(lower < (X, Y) <= upper)`` for a standard bivariate normal with correlation ``rho``.

    ``lower``, ``upper``: shape ``(..., 2)``; ``rho``: shape ``(...)``; batch shapes broadcast.
    Absolute error about 1e-15 (1e-14 at worst); ``rho = 0, +-1`` are exact.
    """
    shape, l2, u2, r, empty, nan = _prep_bvn(lower, upper, rho)
    out = np.zeros(l2.shape[0])
    live = ~empty & ~nan
    out[live] = _bvn_rect(l2[live], u2[live], r[live])
    one = live & (r >= 1.0)  # exact: X = Y
    out[one] = norm_cdf(np.maximum(l2[one, 0], l2[one, 1]), np.minimum(u2[one, 0], u2[one, 1]))
    mone = live & (r <= -1.0)  # exact: X = -Y
    out[mone] = norm_cdf(
        np.maximum(l2[mone, 0], -u2[mone, 1]), np.minimum(u2[mone, 0], -l2[mone, 1])
    )
    out[nan] = np.nan
    return out.reshape(shape)[()] if shape == () else out.reshape(shape)


_LOG_DIRECT = 1e-4  # log of the direct value above this; the log-space integral below it
_DROP = 40.0  # the log integrand is cut where it is 40 below its maximum (exp(-40) = 4e-18)


def _log_bvn_integral(lo_, up_, r):
    """log P(l < (X, Y) <= u) for ``0 < |r| < 1`` by integrating over X in log space."""
    s = np.sqrt((1.0 - r) * (1.0 + r))
    l1, u1, l2c, u2c = lo_[:, 0], up_[:, 0], lo_[:, 1], up_[:, 1]

    def logf(x):  # log phi(x) + log P(l2 < Y <= u2 | X = x); x shape (m, ...)
        rr, ss = r.reshape(-1, *([1] * (x.ndim - 1))), s.reshape(-1, *([1] * (x.ndim - 1)))
        lo = l2c.reshape(rr.shape)
        hi = u2c.reshape(rr.shape)
        return -0.5 * x * x - LOG_SQRT_2PI + log_norm_cdf((lo - rr * x) / ss, (hi - rr * x) / ss)

    def dlogf(x):  # derivative: -x + (r/s) E[Z | alpha < Z <= beta]
        al, be = (l2c - r * x) / s, (u2c - r * x) / s
        lp = log_norm_cdf(al, be)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            m = np.exp(-0.5 * al * al - LOG_SQRT_2PI - lp) - np.exp(
                -0.5 * be * be - LOG_SQRT_2PI - lp
            )
            m = np.where(np.isfinite(m), m, np.where(np.isfinite(al), al, be))
        return -x + r / s * m

    big = np.where(np.isfinite(lo_), np.abs(lo_), 0.0).max(-1)
    big = np.maximum(big, np.where(np.isfinite(up_), np.abs(up_), 0.0).max(-1))
    bound = 1e3 + 4.0 * big / s
    lo = np.maximum(l1, -bound)
    hi = np.minimum(u1, bound)
    a, b = lo.copy(), hi.copy()
    with np.errstate(invalid="ignore", over="ignore"):
        for _ in range(110):  # bisection for the mode on [lo, hi] (f' decreasing)
            mid = 0.5 * (a + b)
            pos = dlogf(mid) > 0
            a = np.where(pos, mid, a)
            b = np.where(pos, b, mid)
    xm = 0.5 * (a + b)
    fm = logf(xm)
    target = fm - _DROP
    ends = []
    for sgn, edge in ((1.0, hi), (-1.0, lo)):
        far = np.clip(xm + sgn * math.sqrt(2.0 * _DROP) * 1.001, lo, hi)
        fin = logf(far) >= target
        a, b = xm.copy(), far.copy()  # logf(a) >= target > logf(b) where not `fin`
        for _ in range(64):
            mid = 0.5 * (a + b)
            ok = logf(mid) >= target
            a = np.where(ok, mid, a)
            b = np.where(ok, b, mid)
        ends.append(np.where(fin, far, b))
        del edge
    xr, xl = ends
    with np.errstate(divide="ignore", invalid="ignore"):
        wt = s / np.abs(r)
        cuts = [xl, xr, xm, *(xl + f * (xr - xl) for f in (0.25, 0.5, 0.75))]
        for c in (u2c / r, l2c / r):
            for off in (-8.0, 0.0, 8.0):
                cc = c + off * wt
                cuts.append(np.where(np.isfinite(cc), np.clip(cc, xl, xr), xl))
    grid = np.sort(np.stack(cuts), axis=0)  # (ncuts, m)
    x, w = _GL[24]
    left, right = grid[:-1], grid[1:]
    half = 0.5 * (right - left)
    nodes = (0.5 * (right + left))[..., None] + half[..., None] * x  # (panels, m, 24)
    with np.errstate(divide="ignore"):
        lw = np.log(half[..., None] * w)
    vals = logf(np.moveaxis(nodes, 1, 0)) + np.moveaxis(lw, 1, 0)  # (m, panels, 24)
    vals = vals.reshape(vals.shape[0], -1)
    return special.logsumexp(vals, axis=-1)


def _bvn_outside(lo, up, r):
    """``P((X, Y) not in (lo, up])`` to full relative accuracy where it is small: the two
    marginal probabilities outside less the four corners outside both, each corner's from its
    log (`log_bvn_cdf`, accurate relative far in the tails; a corner's probability is at most
    the smaller marginal's, so the difference keeps the relative accuracy of its terms)."""
    m = (
        special.ndtr(lo[:, 0])
        + special.ndtr(-up[:, 0])
        + special.ndtr(lo[:, 1])
        + special.ndtr(-up[:, 1])
    )
    n = lo.shape[0]
    full = np.full(n, np.inf)
    corners_lo = np.stack(
        [
            np.stack([-full, -full], -1),  # X <= l1, Y <= l2
            np.stack([-full, up[:, 1]], -1),  # X <= l1, Y > u2
            np.stack([up[:, 0], -full], -1),  # X > u1, Y <= l2
            up,  # X > u1, Y > u2
        ]
    )
    corners_up = np.stack(
        [
            lo,
            np.stack([lo[:, 0], full], -1),
            np.stack([full, lo[:, 1]], -1),
            np.stack([full, full], -1),
        ]
    )
    both = np.exp(log_bvn_cdf(corners_lo, corners_up, np.broadcast_to(r, (4, n)))).sum(0)
    return np.maximum(m - both, 0.0)


def log_bvn_cdf(lower, upper, rho):
    """``log P(lower < (X, Y) <= upper)`` for a standard bivariate normal with correlation ``rho``.

    Shapes as in `bvn_cdf`. Finite and accurate to about 1e-10 relative far in the tails
    (where the probability underflows), and where the probability is near 1 (``log1p`` of
    minus the probability outside, `_bvn_outside`); ``-inf`` for empty rectangles.
    """
    shape, l2, u2, r, empty, nan = _prep_bvn(lower, upper, rho)
    n = l2.shape[0]
    out = np.full(n, -np.inf)
    live = ~empty & ~nan
    idx = np.flatnonzero(live)
    if idx.size:
        p = _bvn_rect(l2[idx], u2[idx], r[idx])
        with np.errstate(divide="ignore"):
            out[idx] = np.log(p)
        rr = r[idx]
        zero = rr == 0.0
        out[idx[zero]] = log_norm_cdf(l2[idx[zero], 0], u2[idx[zero], 0]) + log_norm_cdf(
            l2[idx[zero], 1], u2[idx[zero], 1]
        )
        one = rr >= 1.0
        j = idx[one]
        out[j] = log_norm_cdf(np.maximum(l2[j, 0], l2[j, 1]), np.minimum(u2[j, 0], u2[j, 1]))
        mone = rr <= -1.0
        j = idx[mone]
        out[j] = log_norm_cdf(np.maximum(l2[j, 0], -u2[j, 1]), np.minimum(u2[j, 0], -l2[j, 1]))
        small = (p <= _LOG_DIRECT) & ~zero & ~one & ~mone
        j = idx[small]
        if j.size:
            out[j] = _log_bvn_integral(l2[j], u2[j], r[j])
        near = (p > 1.0 - _NEAR_ONE) & ~zero & ~one & ~mone
        j = idx[near]
        if j.size:
            out[j] = np.log1p(-_bvn_outside(l2[j], u2[j], r[j]))
    out[nan] = np.nan
    return out.reshape(shape)[()] if shape == () else out.reshape(shape)
