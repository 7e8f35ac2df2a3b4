"""The checks of a MultivariateNormal's parameters in one CuPy kernel (`scale_tril_failures`,
called by the constructor where the CuPy engine `_cupy` takes the distribution): the generic
checks take a reduction each, a stack and a read; here one pass over the parameters ORs
failure bits, and one read returns them."""

import cupy
import numpy as np

__all__ = ["scale_tril_failures"]

# Thread i checks entry i of the factor (C-contiguous, D x D matrices) or, past them, entry
# i - size(factor) of the mean: bit 0 a non-finite mean, bit 1 a non-finite factor entry,
# bit 2 a nonzero entry above the diagonal, bit 3 a diagonal entry not > 0.
_SCALE_TRIL_CHECKS = cupy.ElementwiseKernel(
    "raw T tril, raw T loc, int64 n_tril, int64 d",
    "raw uint32 failures",
    """
    unsigned int f = 0;
    if (i < n_tril) {
        const T m = tril[i];
        const long long col = i % d, row = (i / d) % d;
        if (!isfinite(m)) f |= 2u;
        if (col > row && m != (T)0) f |= 4u;
        if (col == row && !(m > (T)0)) f |= 8u;
    } else if (!isfinite(loc[i - n_tril])) {
        f |= 1u;
    }
    if (f) atomicOr(&failures[0], f);
    """,
    "xpops_mvn_scale_tril_checks",
)


def scale_tril_failures(loc: cupy.ndarray, tril: cupy.ndarray) -> int:
    """The failed checks of a mean `loc` (*, D) and a `scale_tril` (*, D, D), each array on its
    own, as bits in the order of their messages (the mean's, then
    `_factor.scale_tril_messages`): one kernel and one read from the device."""
    loc, tril = cupy.ascontiguousarray(loc), cupy.ascontiguousarray(tril)
    size = int(tril.size) + int(loc.size)
    if size == 0:
        return 0
    failures = cupy.zeros(1, dtype=np.uint32)
    args = (tril, loc, np.int64(tril.size), np.int64(tril.shape[-1]), failures)
    _SCALE_TRIL_CHECKS(*args, size=size)
    return int(failures[0])
