"""What the two engines of the multivariate normal CDF share: the parameters of Genz's
randomized quasi-Monte-Carlo method and its lattice rules.

Both engines (`_numpy`, `_cupy`) integrate by randomly shifted rank-1 lattice rules of Korobov
generating vectors: `NSHIFTS` shifts a round, a first lattice of `N0` points and then the next
prime at least `GROWTH` times larger, rounds combined with inverse-variance weights and an error
of `ERR_FACTOR` standard errors. A seed draws the same shifts on both. `tolerance` is the
stopping rule of both (and of the entry's check for a missed tolerance). Imports no engine.
"""

import math
from typing import Any

import numpy as np

from ..._lib import _random

__all__ = [
    "COMPLEMENT_BOUND",
    "DEG_RTOL",
    "DEVICE_DIMS",
    "ERR_FACTOR",
    "GROWTH",
    "LOG_RTOL",
    "N0",
    "NSHIFTS",
    "Y_CLIP",
    "check_shift_rng",
    "korobov",
    "missed_tolerance",
    "next_prime",
    "outside_boxes",
    "tolerance",
]

NSHIFTS = 10  # random shifts per round
ERR_FACTOR = 3.5  # error = this many standard errors (3 covered only 93-96% in tests)
N0 = 47  # lattice size of the first round; each later round is the next prime >= 1.5 x
GROWTH = 1.5
DEG_RTOL = 1e-12  # conditional variance <= this x marginal variance: a degenerate variable
Y_CLIP = 1e8  # sampled values are kept finite (+-inf only at measure-zero points)
# logcdf: the loosest relative error of a small probability (unless `releps` is larger), so
# that the log stays meaningful where `abseps` alone would accept any value
LOG_RTOL = 1e-3
# logcdf, D >= 3: where the union bound of the probability outside the box, Q = 1 - P, is
# below this, log P is log1p(-Q) with Q computed to a relative error (`outside_boxes`)
COMPLEMENT_BOUND = 1e-2
_KOROBOV: dict[tuple[int, int], np.ndarray] = {}


def _is_prime(n: int) -> bool:
    if n < 2 or n % 2 == 0:
        return n == 2
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


def next_prime(n: int) -> int:
    """The smallest prime >= `n`: the lattice sizes."""
    while not _is_prime(n):
        n += 1
    return n


def korobov(s: int, n: int) -> np.ndarray:
    """A Korobov generating vector ``(1, q, q**2, ...) mod n`` of length ``s`` for prime ``n``.

    ``q`` minimizes the weighted P_2 criterion
    ``-1 + mean_k prod_j (1 + g_j 2 pi^2 B_2({k z_j / n}))``
    (weights ``g_j = 1/j``: the prioritized variables matter less and less) over a fixed, seeded
    subset of candidates (all of them for small ``n``); cached per ``(s, n)``.
    """
    key = (s, n)
    z = _KOROBOV.get(key)
    if z is not None:
        return z
    if s == 1:
        z = np.ones(1, dtype=np.int64)
    else:
        half = (n - 1) // 2
        budget = max(16, min(half, int(4e6 // (n * s))))
        if budget >= half - 1:
            cand = np.arange(2, half + 1, dtype=np.int64)
        else:
            cand = np.random.default_rng(n * 1000 + s).choice(
                np.arange(2, half + 1, dtype=np.int64), size=budget, replace=False
            )
        gam = 2.0 * math.pi**2 / np.arange(1, s + 1)
        k = np.arange(n, dtype=np.int64)
        best, best_q = np.inf, 1
        step = max(1, int(2e6 // (n * s)))
        for c0 in range(0, cand.size, step):
            q = cand[c0 : c0 + step]
            zz = np.ones((q.size, s), dtype=np.int64)
            for j in range(1, s):
                zz[:, j] = zz[:, j - 1] * q % n
            x = (k[None, :, None] * zz[:, None, :] % n) / n  # (cand, n, s)
            crit = np.prod(1.0 + gam * (x * x - x + 1.0 / 6.0), axis=-1).mean(-1)
            i = int(np.argmin(crit))
            if crit[i] < best:
                best, best_q = float(crit[i]), int(q[i])
        z = np.ones(s, dtype=np.int64)
        for j in range(1, s):
            z[j] = z[j - 1] * best_q % n
    _KOROBOV[key] = z
    return z


#: The event sizes D that the GPU kernels compute: D = 1 and 2 have deterministic algorithms
#: (the NumPy engine's), and above 64 the packed factor (16.6 KB of shared memory at D = 64) and
#: each thread's y[] of local memory outgrow the kernels.
DEVICE_DIMS = range(3, 65)


def check_shift_rng(rng: Any) -> None:
    """The source of the random shifts must be None, an int seed or a NumPy or CuPy generator
    (``TypeError`` otherwise)."""
    _random.check_rng(rng, _random.ANY, "None, an int seed or a random Generator", got="repr")


def tolerance(xp: Any, value: Any, abseps: float, releps: float, log: bool) -> Any:
    """The error at which a problem stops, elementwise (`xp`: NumPy or CuPy).

    cdf: ``max(abseps, releps * |P|)`` (non-finite values count as 0). logcdf (`value` is
    ``log P`` and the error that of the log, i.e. the relative error of ``P``): the cdf's rule
    on ``P``, tightened where ``P`` is small to a relative error of at most
    ``max(releps, LOG_RTOL)``: ``max(releps, min(abseps / P, LOG_RTOL))`` (``1 / P`` capped at
    ``exp(700)``).
    """
    if not log:
        return xp.maximum(abseps, releps * xp.abs(xp.where(xp.isfinite(value), value, 0.0)))
    inv_p = xp.exp(xp.minimum(-value, 700.0))
    return xp.maximum(releps, xp.minimum(abseps * inv_p, LOG_RTOL))


def missed_tolerance(
    xp: Any, value: Any, error: Any, abseps: float, releps: float, log: bool
) -> int:
    """How many problems stopped short of their `tolerance` (at ``maxpts``). The cdf's rule is
    taken at ``value + error``: the engines test the value before clipping it to [0, 1]."""
    at = value if log else value + error
    return int(xp.count_nonzero(error > tolerance(xp, at, abseps, releps, log)))


def outside_boxes(xp: Any, a: Any, b: Any) -> tuple[Any, Any]:
    """The boxes whose probabilities sum to that of leaving the box ``(a, b]``: for each
    variable ``i``, ``X_i <= a_i`` and ``X_i > b_i``, the variables before ``i`` inside their
    intervals and those after it free. `a`, `b` of shape ``(m, D)`` (NumPy or CuPy arrays):
    ``(lower, upper)`` of shape ``(m, 2 D, D)``, the two boxes of variable ``i`` at rows
    ``2 i`` and ``2 i + 1``. Each is a small probability where ``P`` is near 1, which Genz's
    method computes to a relative error."""
    d = a.shape[1]
    before = xp.arange(d)[None, :]
    lows, ups = [], []
    for i in range(d):
        inside_lo = xp.where(before < i, a, -math.inf)
        inside_up = xp.where(before < i, b, math.inf)
        col = before == i
        lows += [xp.where(col, -math.inf, inside_lo), xp.where(col, b[:, i : i + 1], inside_lo)]
        ups += [xp.where(col, a[:, i : i + 1], inside_up), xp.where(col, math.inf, inside_up)]
    return xp.stack(lows, axis=1), xp.stack(ups, axis=1)
