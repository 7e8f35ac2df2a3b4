"""The checks of a MultivariateNormal's parameters in one CuPy kernel (`scale_tril_failures`,
called by the constructor where the CuPy engine `_cupy` takes the distribution): the generic
checks take a reduction each, a stack and a read; here one pass over the parameters ORs
failure bits, and one read returns them. The same pass copies the factor where the caller
keeps that copy as the distribution's own (the constructor, when the checks pass)."""

import cupy
import numpy as np

from .._lib._cuda import C_TYPES, FastKernel, grid_1d, read_int
from .._lib._dtypes import dtype_name

__all__ = ["scale_tril_failures"]

# Thread i checks entry i of the factor (C-contiguous, D x D matrices), which it copies
# (unless `copy` is null), or, past them, entry i - size(factor) of the mean: bit 0 a
# non-finite mean, bit 1 a non-finite factor entry, bit 2 a nonzero entry above the diagonal,
# bit 3 a diagonal entry not > 0. One block writes its bits (no zeroed word to prepare);
# several OR theirs into a zeroed one.
_SOURCE = r"""
template <typename T>
__global__ void xpops_mvn_scale_tril_checks(const T* __restrict__ tril, const T* __restrict__ loc,
                                            const long long n_tril, const long long d,
                                            const long long size, unsigned int* failures,
                                            T* __restrict__ copy) {
    unsigned int f = 0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < size;
         i += (long long)gridDim.x * blockDim.x) {
        if (i < n_tril) {
            const T m = tril[i];
            if (copy) copy[i] = m;
            const long long col = i % d, row = (i / d) % d;
            if (!isfinite(m)) f |= 2u;
            if (col > row && m != (T)0) f |= 4u;
            if (col == row && !(m > (T)0)) f |= 8u;
        } else if (!isfinite(loc[i - n_tril])) {
            f |= 1u;
        }
    }
    if (gridDim.x == 1) {
        unsigned int all = 0;
        for (int bit = 0; bit < 4; ++bit) all |= __syncthreads_or(f >> bit & 1u) ? 1u << bit : 0u;
        if (threadIdx.x == 0) *failures = all;
    } else if (f) {
        atomicOr(failures, f);
    }
}
"""
_THREADS = 256
_MAX_BLOCKS = 1024  # the threads stride over larger parameters


@cupy.memoize(for_each_device=True)
def _checks(dtype_name: str) -> FastKernel:
    name = f"xpops_mvn_scale_tril_checks<{C_TYPES[dtype_name]}>"
    module = cupy.RawModule(code=_SOURCE, options=("-std=c++17",), name_expressions=[name])
    return FastKernel(module.get_function(name), "ppqqqpp")


def scale_tril_failures(
    loc: cupy.ndarray, tril: cupy.ndarray, *, copy: bool = True
) -> tuple[int, cupy.ndarray | None]:
    """The failed checks of a mean `loc` (*, D) and a `scale_tril` (*, D, D) of one real
    floating dtype, each array on its own, as bits in the order of their messages (the mean's,
    then `_factor.scale_tril_messages`), and (with `copy`) a C-contiguous copy of `tril`: one
    kernel and one read from the device."""
    loc, tril = cupy.ascontiguousarray(loc), cupy.ascontiguousarray(tril)
    out = cupy.empty(tril.shape, dtype=tril.dtype) if copy else None
    size = int(tril.size) + int(loc.size)
    if size == 0:
        return 0, out
    blocks = grid_1d(size, _THREADS, _MAX_BLOCKS)
    failures = cupy.empty((), dtype=np.uint32) if blocks == 1 else cupy.zeros((), np.uint32)
    args = (tril.data.ptr, loc.data.ptr, tril.size, tril.shape[-1], size, failures.data.ptr)
    address = 0 if out is None else out.data.ptr
    _checks(dtype_name(tril.dtype))(blocks, _THREADS, (*args, address))
    return read_int(failures, 0), out
