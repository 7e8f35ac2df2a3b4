"""The special values of complex logcumsumexp, written once for every engine.

Complex inputs follow their real part, as real inputs do:

* a real part of -inf is the identity, whatever the imaginary part: it gives ``-inf+0j`` while
  nothing else was seen;
* a NaN real part, or a non-finite imaginary part with a real part other than -inf, gives
  NaN+NaNj from there on;
* a real part of +inf gives real part +inf from there on, with that element's principal
  imaginary part (NaN once two such elements disagree on it: the phase of a sum of two
  infinities is undefined).

Each function takes the namespace `xp` of its arrays: NumPy itself for the NumPy engine's exact
path, any array-API namespace for the log-depth scan (`_logdepth`).
"""

import math

from .._lib._typing import Array, Namespace

__all__ = ["element_specials", "sum_specials", "wrap"]


def wrap(y: Array, xp: Namespace) -> Array:
    """Finite angles into (-pi, pi]."""
    inside = (y > -math.pi) & (y <= math.pi)
    return xp.where(inside, y, math.pi - xp.remainder(math.pi - y, 2 * math.pi))


def element_specials(re: Array, im: Array, out: Array, xp: Namespace) -> Array:
    """`out`, ``log(exp(z))`` of single elements ``z = re + i im`` as computed for finite ones,
    with the special values of the module docstring where `z` is not finite."""
    nan = xp.isnan(re) | (~xp.isfinite(im) & (re != -math.inf))
    out = xp.where(nan, complex(math.nan, math.nan), out)
    return xp.where(re == -math.inf, complex(-math.inf, 0.0), out)


def sum_specials(a: Array, b: Array, out: Array, xp: Namespace) -> Array:
    """`out`, ``log(exp(a) + exp(b))`` of normalized elements (as `element_specials` leaves
    them) as computed where both real parts are finite, with the special values of the module
    docstring elsewhere."""
    ar, br = xp.real(a), xp.real(b)
    a_inf, b_inf = ar == math.inf, br == math.inf
    clash = a_inf & b_inf & (xp.imag(a) != xp.imag(b))
    inf = xp.where(clash, complex(math.inf, math.nan), xp.where(a_inf, a, b))
    out = xp.where(a_inf | b_inf, inf, out)
    out = xp.where(ar == -math.inf, b, xp.where(br == -math.inf, a, out))
    return xp.where(xp.isnan(ar) | xp.isnan(br), complex(math.nan, math.nan), out)
