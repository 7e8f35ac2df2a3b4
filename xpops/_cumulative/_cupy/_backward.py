"""The CuPy engine of logcumsumexp's backward rule (real inputs): the rule's two reverse
scans (`.._vjp`) as one scan of a stacked array, between two fused elementwise kernels.

``terms`` reads the cotangent ``g`` and the forward's result ``y`` once and writes both
scans' inputs, ``log(g+) - y`` and ``log(g-) - y``, stacked on a new leading axis; one launch
of the scan kernels scans both; ``combine`` reads ``x`` and the two sums and writes
``exp(x + a) - exp(x + b)``. Twelve passes over arrays of the size of ``x`` (against about
forty for the rule's generic operations), and the special values exactly as the generic
rule gives them.
"""

import math

import cupy

from . import logcumsumexp

__all__ = ["real_pullback"]

# Both kernels take -inf as an argument (NVRTC has no INFINITY without extra headers).
_TERMS = cupy.ElementwiseKernel(
    "T g, T y, T ninf",
    "raw T terms",
    """
    // an output of -inf holds no term; a NaN output or cotangent spreads NaN (positive side)
    const bool kept = y != ninf;
    const T la = log(fabs(g != T(0) ? g : T(1))) - y;
    terms[i] = (kept && !(g <= T(0))) ? la : ninf;
    terms[i + _ind.size()] = (kept && g < T(0)) ? la : ninf;
    """,
    "xpops_logcumsumexp_grad_terms",
)

_COMBINE = cupy.ElementwiseKernel(
    "T x, raw T sums, T ninf",
    "T dx",
    """
    // an input of +inf gets NaN (inf - inf); exp(-inf + a) is 0 for every a < +inf
    dx = (x == -ninf) ? x - x
                      : exp(x + sums[i]) - exp(x + sums[i + _ind.size()]);
    """,
    "xpops_logcumsumexp_grad_combine",
)


def real_pullback(
    x: cupy.ndarray, y: cupy.ndarray, g: cupy.ndarray, axis: int, exclusive: bool, reverse: bool
) -> cupy.ndarray:
    """``sum_{i covers j} g_i exp(x_j - y_i)`` along `axis` (arrays of one real dtype and
    shape, ndim >= 1), where the scan that covers is logcumsumexp with `exclusive` and
    `reverse` as given (the forward's `reverse` already flipped)."""
    x, y, g = (cupy.ascontiguousarray(a) for a in (x, y, g))  # raw indexing is C order
    if x.size == 0:
        return cupy.empty(x.shape, x.dtype)
    ninf = x.dtype.type(-math.inf)
    terms = cupy.empty((2, *x.shape), x.dtype)
    _TERMS(g, y, ninf, terms)
    sums = logcumsumexp(terms, axis + 1, exclusive, reverse)
    return _COMBINE(x, sums, ninf)
