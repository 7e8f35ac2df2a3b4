"""CuPy engine of MultivariateNormal: fused log_prob and sample kernels for D <= MAX_D.

`kernels_for` tells the distribution whether the kernels take its dtype and D (this module, or
None); `layout` lays its parameters out for them once; `log_prob_of` and `sample` run them.

``log_prob``: a block of POINTS threads takes POINTS consecutive points. Their values are read
coalesced into a shared tile (odd row pitch: no bank conflicts when thread t reads row t), the
factor's lower triangle and reciprocal diagonal go to shared memory when one factor serves
every point, and each thread then subtracts the mean, forward-substitutes ``L z = x - mu`` in
registers (D is a template parameter), sums ``z**2`` and writes one value: one read of the
points, one write of the result. Non-finite values raise a flag (one atomic a warp) that the
caller reads once when it validates.

``sample``: each thread makes the D standard normals of one point from a counter-based
Philox4x32-10 generator (key from the seed, counter from the point index: the draw does not
depend on the launch shape) and the Box-Muller transform, computes ``mu + L eps`` in
registers and writes the point through a shared tile, coalesced: the only memory traffic is
the output. float32 takes one 32-bit word a uniform, float64 two (53-bit uniforms).

Point ``o`` of the flat output uses mean row ``o % n_loc`` and factor ``o % n_tril``: the
caller lays out the batch so that this is the broadcast (points outermost, batch innermost).
"""

import math
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import cupy
import numpy as np

from .._lib import _random
from .._lib._cuda import C_TYPES, FastKernel, grid_1d, multiprocessors
from .._lib._dtypes import dtype_name
from ._common import bad_values, batch_of

__all__ = [
    "GRAD_POINTS",
    "MAX_D",
    "POINTS",
    "kernels_for",
    "layout",
    "log_prob",
    "log_prob_grads",
    "log_prob_of",
    "points_layout",
    "sample",
    "standard_normal",
    "supported",
]

MAX_D = 32  # z[D] (and eps[D]) live in registers; above this the generic path is used
POINTS = 128  # points (threads) a block; the float64 D=32 tile is 128 x 33 x 8 = 33 KiB
GRAD_POINTS = 64  # log_prob_grad's points a block (float64 D = 32: 33 KiB of tiles, 8 of factor)
# log_prob_grad's blocks an SM (its launch bounds, at most 128 registers) and its grid, a wave
# of them (where shared memory holds them all): H200, 1e6 points, D = 16, 0.102 ms in float32
# and 0.144 in float64 against 0.154 and 0.201 at 4 blocks
GRAD_MIN_BLOCKS = 8
FINISH_THREADS = 256  # log_prob_grad_finish's threads, a block an output element

_SOURCE = r"""
#define LOG_2PI 1.8378770664093453

template <int D> struct Pitch { static constexpr int value = D | 1; };

// Lower triangle (row-major packed) and reciprocal diagonal of one factor into shared memory.
template <typename T, int D>
__device__ __forceinline__ void stage_factor(const T* __restrict__ tril, T* tri, T* rdiag) {
    for (int e = threadIdx.x; e < D * D; e += blockDim.x) {
        const int i = e / D, j = e - (e / D) * D;
        if (j <= i) tri[i * (i + 1) / 2 + j] = tril[e];
        if (i == j) rdiag[i] = T(1) / tril[e];
    }
}

// The parameters every point of the block shares: the factor (when one serves every point)
// and the mean (when one does).
template <typename T, int D>
__device__ __forceinline__ void stage_shared(const T* __restrict__ loc,
                                             const T* __restrict__ tril, const long long n_loc,
                                             const long long n_tril, T* tri, T* rdiag, T* mu) {
    if (n_tril == 1) stage_factor<T, D>(tril, tri, rdiag);
    if (n_loc == 1)
        for (int i = threadIdx.x; i < D; i += MVN_POINTS) mu[i] = loc[i];
}

template <typename T, int D>
__global__ void __launch_bounds__(MVN_POINTS) xpops_mvn_log_prob(
        const T* __restrict__ value, const T* __restrict__ loc, const T* __restrict__ tril,
        const T* __restrict__ half_log_det, const long long n, const long long n_loc,
        const long long n_tril, T* __restrict__ out, const unsigned long long bad_address) {
    int* bad = reinterpret_cast<int*>(bad_address);  // 0: no check
    constexpr int PITCH = Pitch<D>::value;
    __shared__ T tile[MVN_POINTS * PITCH];
    __shared__ T tri[D * (D + 1) / 2];
    __shared__ T rdiag[D];
    __shared__ T mu[D];
    __shared__ T half_shared;  // one factor: its half log-determinant
    const long long first = (long long)blockIdx.x * MVN_POINTS;
    const int rows = (int)min((long long)MVN_POINTS, n - first);
    const T* src = value + first * D;
    for (int e = threadIdx.x; e < rows * D; e += MVN_POINTS) {
        const int r = e / D;
        tile[r * PITCH + (e - r * D)] = src[e];
    }
    stage_shared<T, D>(loc, tril, n_loc, n_tril, tri, rdiag, mu);
    if (n_tril == 1 && threadIdx.x < 32) {  // D <= 32: the first warp sums the logs
        T h = threadIdx.x < D ? log(tril[threadIdx.x * (D + 1)]) : T(0);
        #pragma unroll
        for (int s = 16; s > 0; s >>= 1) h += __shfl_xor_sync(0xffffffffu, h, s);
        if (threadIdx.x == 0) half_shared = h;
    }
    __syncthreads();
    bool finite = true;
    if (threadIdx.x < rows) {
        const long long o = first + threadIdx.x;
        const T* m = n_loc == 1 ? mu : loc + (o % n_loc) * D;
        T z[D];
        #pragma unroll
        for (int i = 0; i < D; ++i) {
            const T v = tile[threadIdx.x * PITCH + i];
            finite = finite && isfinite(v);
            z[i] = v - m[i];
        }
        T ss = 0;
        if (n_tril == 1) {
            #pragma unroll
            for (int i = 0; i < D; ++i) {
                T acc = z[i];
                #pragma unroll
                for (int j = 0; j < i; ++j) acc -= tri[i * (i + 1) / 2 + j] * z[j];
                z[i] = acc * rdiag[i];
                ss += z[i] * z[i];
            }
            out[o] = T(-0.5) * (T(D * LOG_2PI) + ss) - half_shared;
        } else {
            const long long f = o % n_tril;
            const T* L = tril + f * (D * D);
            #pragma unroll
            for (int i = 0; i < D; ++i) {
                T acc = z[i];
                #pragma unroll
                for (int j = 0; j < i; ++j) acc -= __ldg(L + i * D + j) * z[j];
                z[i] = acc / __ldg(L + i * D + i);
                ss += z[i] * z[i];
            }
            out[o] = T(-0.5) * (T(D * LOG_2PI) + ss) - half_log_det[f];
        }
    }
    if (bad != nullptr && __any_sync(0xffffffffu, !finite) && (threadIdx.x & 31) == 0)
        atomicOr(bad, 1);
}

// The layout of log_prob_grad's shared factor and sums. The factor is held as square rows
// of a stride that is a multiple of 4 (the substitutions' rows read 4 entries a load), with its
// transpose beside it for the back substitution where both fit in 2 x 128-byte rows. The sums
// of g w u^T are taken in 4 x 4 blocks of (i, j), each block by GROUPS threads that split the
// tile's points between them (8 loads for 16 products).
template <typename T, int D> struct GradLayout {
    static constexpr int STRIDE = (D + 3) / 4 * 4;
    static constexpr bool TRANSPOSED = STRIDE * sizeof(T) <= 128;
    static constexpr int PITCH = STRIDE | 1;  // the tiles' rows: odd, no bank conflicts
    static constexpr int NB = STRIDE / 4;
    static constexpr int BLOCKS = NB * (NB + 1) / 2;  // 4 x 4 blocks on or below the diagonal
    static constexpr int GROUPS = MVN_GRAD_POINTS / BLOCKS > 0 ? MVN_GRAD_POINTS / BLOCKS : 1;
    static constexpr int ENTRIES = D * (D + 1) / 2 + D + 1;  // g w u^T (packed rows), g w, g
};

// The gradient of sum_o g_o log_prob(value_o) for one factor and one mean serving every point
// (see `log_prob_grads`). Each block strides over tiles of MVN_GRAD_POINTS consecutive points:
// per point u = L^-1 (v - mu) and w = L^-T u by substitution in registers; the block writes
// -g w, coalesced through the tile, and adds the tile's g w u^T, g w and g to sums its threads
// keep in registers across tiles. Thread t < BLOCKS * GROUPS takes block t / GROUPS of
// g w u^T over the points r = t % GROUPS (mod GROUPS) of each tile; the threads of the blocks
// (bi, 0) also sum g w, and those of block (0, 0) g. At the end each group of each block writes
// its sums: entry e at partial[e * columns + block * GROUPS + group], columns = gridDim.x *
// GROUPS.
template <typename T, int D>
__global__ void __launch_bounds__(MVN_GRAD_POINTS, MVN_GRAD_MIN_BLOCKS) xpops_mvn_log_prob_grad(
        const T* __restrict__ value, const T* __restrict__ g, const T* __restrict__ loc,
        const T* __restrict__ tril, const long long n, T* __restrict__ g_value,
        T* __restrict__ partial) {
    using Layout = GradLayout<T, D>;
    constexpr int S = Layout::STRIDE, PITCH = Layout::PITCH, GROUPS = Layout::GROUPS;
    __shared__ T tile[MVN_GRAD_POINTS * PITCH];  // the values, then g w
    __shared__ T tile_u[MVN_GRAD_POINTS * PITCH];
    __shared__ T tile_g[MVN_GRAD_POINTS];
    __shared__ __align__(16) T fac[D * S];  // L below the diagonal, by rows
    __shared__ __align__(16) T fac_t[Layout::TRANSPOSED ? D * S : 1];  // L^T above it, by rows
    __shared__ T rdiag[D];
    __shared__ T mu[D];
    for (int e = threadIdx.x; e < D * D; e += MVN_GRAD_POINTS) {
        const int i = e / D, j = e - (e / D) * D;
        const T m = tril[e];
        fac[i * S + j] = j < i ? m : T(0);
        if (Layout::TRANSPOSED) fac_t[j * S + i] = j < i ? m : T(0);
        if (i == j) rdiag[i] = T(1) / m;
    }
    for (int i = threadIdx.x; i < D; i += MVN_GRAD_POINTS) mu[i] = loc[i];
    const int t = threadIdx.x, blk = t / GROUPS, group = t - blk * GROUPS;
    const bool summing = blk < Layout::BLOCKS;
    int bi = 0, bj = blk;  // block blk of the lower blocks, by rows
    while (bj > bi) bj -= ++bi;
    T acc[4][4], acc_w[4], acc_g = T(0);
    #pragma unroll
    for (int a = 0; a < 4; ++a) {
        acc_w[a] = T(0);
        #pragma unroll
        for (int b = 0; b < 4; ++b) acc[a][b] = T(0);
    }
    const long long tiles = (n + MVN_GRAD_POINTS - 1) / MVN_GRAD_POINTS;
    for (long long tl = blockIdx.x; tl < tiles; tl += gridDim.x) {
        const long long first = tl * MVN_GRAD_POINTS;
        const int rows = (int)min((long long)MVN_GRAD_POINTS, n - first);
        const T* src = value + first * D;
        __syncthreads();  // the previous tile's sums are done with the tiles
        for (int e = t; e < rows * D; e += MVN_GRAD_POINTS) {
            const int r = e / D;
            tile[r * PITCH + (e - r * D)] = src[e];
        }
        tile_g[t] = t < rows ? g[first + t] : T(0);
        __syncthreads();
        T* tu = &tile_u[t * PITCH];
        T* tw = &tile[t * PITCH];
        if (t < rows) {
            const T go = tile_g[t];
            T z[D];
            #pragma unroll
            for (int i = 0; i < D; ++i) {
                T s = tw[i] - mu[i];
                #pragma unroll
                for (int j = 0; j < i; ++j) s -= fac[i * S + j] * z[j];
                z[i] = s * rdiag[i];
                tu[i] = z[i];
            }
            #pragma unroll
            for (int i = D - 1; i >= 0; --i) {  // z becomes w, from the last row up
                T s = z[i];
                #pragma unroll
                for (int j = i + 1; j < D; ++j)
                    s -= (Layout::TRANSPOSED ? fac_t[i * S + j] : fac[j * S + i]) * z[j];
                z[i] = s * rdiag[i];
                tw[i] = go * z[i];
            }
        } else {  // rows past the end add nothing to the sums
            #pragma unroll
            for (int i = 0; i < D; ++i) tu[i] = tw[i] = T(0);
        }
        __syncthreads();
        T* dst = g_value + first * D;
        for (int e = t; e < rows * D; e += MVN_GRAD_POINTS) {
            const int r = e / D;
            dst[e] = -tile[r * PITCH + (e - r * D)];
        }
        if (summing) {
            // columns past D hold what the rows left there: they feed only sums never written
            for (int r = group; r < MVN_GRAD_POINTS; r += GROUPS) {
                T a[4], b[4];
                #pragma unroll
                for (int k = 0; k < 4; ++k) {
                    a[k] = tile[r * PITCH + bi * 4 + k];
                    b[k] = tile_u[r * PITCH + bj * 4 + k];
                }
                #pragma unroll
                for (int k = 0; k < 4; ++k) {
                    acc_w[k] += a[k];
                    #pragma unroll
                    for (int l = 0; l < 4; ++l) acc[k][l] += a[k] * b[l];
                }
                if (blk == 0) acc_g += tile_g[r];
            }
        }
    }
    if (!summing) return;
    const long long columns = (long long)gridDim.x * GROUPS;
    T* out = partial + (long long)blockIdx.x * GROUPS + group;
    #pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int i = bi * 4 + k;
        if (i >= D) break;
        #pragma unroll
        for (int l = 0; l < 4; ++l) {
            const int j = bj * 4 + l;
            if (j <= i) out[(i * (i + 1) / 2 + j) * columns] = acc[k][l];
        }
        if (bj == 0) out[(D * (D + 1) / 2 + i) * columns] = acc_w[k];
    }
    if (blk == 0) out[(long long)(Layout::ENTRIES - 1) * columns] = acc_g;
}

// The sums of log_prob_grad's partial sums (`columns` of them an entry): block e < D * D makes
// element (i, j) of the factor's cotangent (0 above the diagonal, minus sum(g) / L_ii on it),
// block D * D + i element i of the mean's.
template <typename T, int D>
__global__ void __launch_bounds__(MVN_FINISH_THREADS) xpops_mvn_log_prob_grad_finish(
        const T* __restrict__ partial, const long long columns, const T* __restrict__ tril,
        T* __restrict__ g_l, T* __restrict__ g_loc) {
    constexpr int PACK = D * (D + 1) / 2;
    __shared__ T red_a[MVN_FINISH_THREADS / 32], red_b[MVN_FINISH_THREADS / 32];
    const int e = blockIdx.x, i = e / D, j = e - i * D;
    long long column;
    if (e < D * D) {
        if (j > i) {
            if (threadIdx.x == 0) g_l[e] = T(0);
            return;
        }
        column = i * (i + 1) / 2 + j;
    } else {
        column = PACK + (e - D * D);
    }
    const bool diag = e < D * D && i == j;
    T a = T(0), b = T(0);
    for (long long k = threadIdx.x; k < columns; k += MVN_FINISH_THREADS) {
        a += partial[column * columns + k];
        if (diag) b += partial[(long long)(PACK + D) * columns + k];
    }
    #pragma unroll
    for (int s = 16; s > 0; s >>= 1) {
        a += __shfl_xor_sync(0xffffffffu, a, s);
        b += __shfl_xor_sync(0xffffffffu, b, s);
    }
    if ((threadIdx.x & 31) == 0) {
        red_a[threadIdx.x >> 5] = a;
        red_b[threadIdx.x >> 5] = b;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        a = T(0);
        b = T(0);
        for (int w = 0; w < MVN_FINISH_THREADS / 32; ++w) {
            a += red_a[w];
            b += red_b[w];
        }
        if (e < D * D) {
            g_l[e] = diag ? a - b / tril[i * D + i] : a;
        } else {
            g_loc[e - D * D] = a;
        }
    }
}

// Philox4x32-10 (Salmon et al. 2011): four 32-bit words from a 128-bit counter and a 64-bit key.
__device__ __forceinline__ uint4 philox(uint4 c, uint2 k) {
    #pragma unroll
    for (int r = 0; r < 10; ++r) {
        const unsigned int hi0 = __umulhi(0xD2511F53u, c.x), lo0 = 0xD2511F53u * c.x;
        const unsigned int hi1 = __umulhi(0xCD9E8D57u, c.z), lo1 = 0xCD9E8D57u * c.z;
        c = make_uint4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
        k.x += 0x9E3779B9u;
        k.y += 0xBB67AE85u;
    }
    return c;
}

// Box-Muller: a pair of standard normals from u1 in (0, 1] and u2 in [0, 1] (periodic in u2).
__device__ __forceinline__ void box_muller(float u1, float u2, float& a, float& b) {
    const float r = sqrtf(-2.0f * logf(u1));
    float s, c;
    sincospif(2.0f * u2, &s, &c);
    a = r * c;
    b = r * s;
}
__device__ __forceinline__ void box_muller(double u1, double u2, double& a, double& b) {
    const double r = sqrt(-2.0 * log(u1));
    double s, c;
    sincospi(2.0 * u2, &s, &c);
    a = r * c;
    b = r * s;
}

// The D standard normals of point o: float32 four a Philox call, float64 two.
template <int D>
__device__ __forceinline__ void normals(float* eps, unsigned long long o, uint2 key) {
    #pragma unroll
    for (int j = 0; j < D; j += 4) {
        const uint4 w = philox(make_uint4((unsigned int)o, (unsigned int)(o >> 32), j, 0u), key);
        const float s = 2.3283064365386963e-10f;  // 2^-32
        float a, b, c, d;
        box_muller(__uint2float_rn(w.x) * s + 0.5f * s, __uint2float_rn(w.y) * s, a, b);
        box_muller(__uint2float_rn(w.z) * s + 0.5f * s, __uint2float_rn(w.w) * s, c, d);
        eps[j] = a;
        if (j + 1 < D) eps[j + 1] = b;
        if (j + 2 < D) eps[j + 2] = c;
        if (j + 3 < D) eps[j + 3] = d;
    }
}
template <int D>
__device__ __forceinline__ void normals(double* eps, unsigned long long o, uint2 key) {
    #pragma unroll
    for (int j = 0; j < D; j += 2) {
        const uint4 w = philox(make_uint4((unsigned int)o, (unsigned int)(o >> 32), j, 0u), key);
        const double s = 1.1102230246251565e-16;  // 2^-53
        const double u1 = ((double)(((unsigned long long)w.x << 21) ^ (w.y >> 11)) + 0.5) * s;
        const double u2 = (double)(((unsigned long long)w.z << 21) ^ (w.w >> 11)) * s;
        double a, b;
        box_muller(u1, u2, a, b);
        eps[j] = a;
        if (j + 1 < D) eps[j + 1] = b;
    }
}

template <typename T, int D>
__global__ void __launch_bounds__(MVN_POINTS) xpops_mvn_sample(
        const T* __restrict__ loc, const T* __restrict__ tril, const long long n,
        const long long n_loc, const long long n_tril, const unsigned int k0,
        const unsigned int k1, const unsigned long long key_address, T* __restrict__ out) {
    // key_address: a device pair of key words, or 0 for (k0, k1)
    const unsigned int* device_key = reinterpret_cast<const unsigned int*>(key_address);
    constexpr int PITCH = Pitch<D>::value;
    __shared__ T tile[MVN_POINTS * PITCH];
    __shared__ T tri[D * (D + 1) / 2];
    __shared__ T rdiag[D];
    __shared__ T mu[D];
    const long long first = (long long)blockIdx.x * MVN_POINTS;
    const int rows = (int)min((long long)MVN_POINTS, n - first);
    stage_shared<T, D>(loc, tril, n_loc, n_tril, tri, rdiag, mu);
    __syncthreads();
    if (threadIdx.x < rows) {
        const long long o = first + threadIdx.x;
        const uint2 key = device_key != nullptr ? make_uint2(device_key[0], device_key[1])
                                                : make_uint2(k0, k1);
        T eps[D];
        normals<D>(eps, (unsigned long long)o, key);
        const T* m = n_loc == 1 ? mu : loc + (o % n_loc) * D;
        if (n_tril == 1) {
            #pragma unroll
            for (int i = 0; i < D; ++i) {
                T acc = m[i];
                #pragma unroll
                for (int j = 0; j <= i; ++j) acc += tri[i * (i + 1) / 2 + j] * eps[j];
                tile[threadIdx.x * PITCH + i] = acc;
            }
        } else {
            const T* L = tril + (o % n_tril) * (D * D);
            #pragma unroll
            for (int i = 0; i < D; ++i) {
                T acc = m[i];
                #pragma unroll
                for (int j = 0; j <= i; ++j) acc += __ldg(L + i * D + j) * eps[j];
                tile[threadIdx.x * PITCH + i] = acc;
            }
        }
    }
    __syncthreads();
    T* dst = out + first * D;
    for (int e = threadIdx.x; e < rows * D; e += MVN_POINTS) {
        const int r = e / D;
        dst[e] = tile[r * PITCH + (e - r * D)];
    }
}
"""

_OPTIONS = (
    "-std=c++17",
    f"-DMVN_POINTS={POINTS}",
    f"-DMVN_GRAD_POINTS={GRAD_POINTS}",
    f"-DMVN_GRAD_MIN_BLOCKS={GRAD_MIN_BLOCKS}",
    f"-DMVN_FINISH_THREADS={FINISH_THREADS}",
)


# the parameters of the kernels launched by address (`FastKernel`): p a pointer, q an int64
_SIGNATURES = {
    "log_prob": "ppppqqqpp",
    "log_prob_grad": "ppppqpp",
    "log_prob_grad_finish": "pqppp",
}


@cupy.memoize(for_each_device=True)
def _kernel(kind: str, dtype_name: str, d: int) -> cupy.RawKernel:
    name = f"xpops_mvn_{kind}<{C_TYPES[dtype_name]}, {d}>"
    module = cupy.RawModule(code=_SOURCE, options=_OPTIONS, name_expressions=[name])
    return module.get_function(name)


@cupy.memoize(for_each_device=True)
def _launcher(kind: str, dtype_name: str, d: int) -> FastKernel:
    return FastKernel(_kernel(kind, dtype_name, d), _SIGNATURES[kind])


def supported(dtype: object, d: int) -> bool:
    """Whether the fused kernels take this dtype and event size."""
    return 1 <= d <= MAX_D and dtype_name(dtype) in C_TYPES


def kernels_for(dtype: Any, d: int) -> ModuleType | None:
    """This engine when its kernels take `dtype` and event size `d`, else None."""
    return sys.modules[__name__] if supported(dtype, d) else None


def log_prob(
    value: cupy.ndarray,
    loc: cupy.ndarray,
    tril: cupy.ndarray,
    half_log_det: cupy.ndarray | None,
    *,
    check: bool,
) -> tuple[cupy.ndarray, cupy.ndarray | None]:
    """Log densities of the points ``value`` (n, D), C-contiguous; ``loc`` (n_loc, D), ``tril``
    (n_tril, D, D) and ``half_log_det`` (n_tril,) contiguous, with n_loc and n_tril dividing n
    (point o meets row o % n_loc and factor o % n_tril); ``half_log_det`` None for one factor,
    whose half log-determinant each block computes. Returns ``(out, flag)``: ``flag`` is a
    device int, nonzero if a value was not finite (None unless `check`)."""
    n, d = value.shape
    out = cupy.empty(n, dtype=value.dtype)
    flag = cupy.zeros((), dtype=cupy.int32) if check else None
    if n:
        args = (
            value.data.ptr,
            loc.data.ptr,
            tril.data.ptr,
            0 if half_log_det is None else half_log_det.data.ptr,
            n,
            loc.shape[0],
            tril.shape[0],
            out.data.ptr,
            0 if flag is None else flag.data.ptr,
        )
        _launcher("log_prob", dtype_name(value.dtype), d)(grid_1d(n, POINTS), POINTS, args)
    return out, flag


def _grad_groups(d: int) -> int:
    """The threads that share each 4 x 4 block of log_prob_grad's sums (``GradLayout::GROUPS``
    of the kernel source): each writes its own partial sums."""
    nb = -(-d // 4)
    return max(1, GRAD_POINTS // (nb * (nb + 1) // 2))


def log_prob_grads(
    loc: cupy.ndarray, tril: cupy.ndarray, value: cupy.ndarray, g: cupy.ndarray, *, xp: Any
) -> tuple[cupy.ndarray, cupy.ndarray, cupy.ndarray]:
    """`._grads.log_prob_grads` on CuPy arrays: one kernel for one distribution (a factor
    (D, D) and a mean (D,)) at points `value` (..., D) of cotangents `g` (...), one real
    dtype and D <= MAX_D, the generic operations otherwise. The kernel writes the value's
    cotangent and partial sums (a few a block), which a second one adds up into the mean's and
    the factor's cotangents."""
    from . import _grads

    d = tril.shape[-1]
    fused = (
        tril.ndim == 2
        and tuple(loc.shape) == (d,)
        and tuple(value.shape) == (*g.shape, d)
        and supported(value.dtype, d)
        and value.dtype == tril.dtype == loc.dtype == g.dtype
        and g.size > 0
    )
    if not fused:
        return _grads.generic_log_prob_grads(loc, tril, value, g, xp=xp)
    n = g.size
    flat = cupy.ascontiguousarray(value.reshape(n, d))
    gs = cupy.ascontiguousarray(g.reshape(n))
    tril = cupy.ascontiguousarray(tril)
    loc = cupy.ascontiguousarray(loc)  # the mean may be a broadcast (stride 0) or a view
    # a wave of resident blocks (float64 with D > 20 holds fewer an SM, for its shared memory,
    # and runs a part of a second one), each striding over the tiles: few partial sums to add
    blocks = grid_1d(n, GRAD_POINTS, multiprocessors() * GRAD_MIN_BLOCKS)
    columns = blocks * _grad_groups(d)
    dtype = value.dtype
    g_value = cupy.empty((n, d), dtype=dtype)
    partial = cupy.empty((d * (d + 1) // 2 + d + 1, columns), dtype=dtype)
    g_l = cupy.empty((d, d), dtype=dtype)
    g_loc = cupy.empty(d, dtype=dtype)
    grad = _launcher("log_prob_grad", dtype_name(dtype), d)
    pointers = (flat, gs, loc, tril)
    grad(
        blocks,
        GRAD_POINTS,
        (*(a.data.ptr for a in pointers), n, g_value.data.ptr, partial.data.ptr),
    )
    finish = _launcher("log_prob_grad_finish", dtype_name(dtype), d)
    args = (partial.data.ptr, columns, tril.data.ptr, g_l.data.ptr, g_loc.data.ptr)
    finish(d * d + d, FINISH_THREADS, args)
    return g_loc, g_l, g_value.reshape(value.shape)


def _mix64(z: int) -> int:
    """SplitMix64's finalizer: a 64-bit hash that spreads nearby seeds apart."""
    z = (z + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


_MASK64 = (1 << 64) - 1


def _key(rng: Any) -> tuple[int, int, cupy.ndarray | None]:
    """The generator key: from an int seed (hashed on the host; a SeedSequence cost more
    than the kernel) or fresh entropy, or drawn on the device from a cupy.random.Generator
    (no synchronisation)."""
    if isinstance(rng, cupy.random.Generator):
        words = (rng.random(2) * 4294967296.0).astype(cupy.uint32)
        return 0, 0, words
    entropy: Any = np.random.SeedSequence().entropy if rng is None else _random.as_seed(rng)
    seed = int(entropy)
    if seed < 0:
        msg = f"`rng` as a seed must be non-negative, got {seed}"
        raise ValueError(msg)
    z = 0
    while True:  # 64 bits at a time, chained (an XOR of halves would swap-collide)
        z = _mix64(z ^ (seed & _MASK64))
        seed >>= 64
        if not seed:
            break
    return z & 0xFFFFFFFF, z >> 32, None


def sample(n: int, loc: cupy.ndarray, tril: cupy.ndarray, rng: Any, dtype: Any) -> cupy.ndarray:
    """``n`` points ``loc[o % n_loc] + tril[o % n_tril] @ eps`` as an (n, D) array."""
    d = tril.shape[-1]
    out = cupy.empty((n, d), dtype=dtype)
    k0, k1, device_key = _key(rng)
    if n:
        kernel = _kernel("sample", dtype_name(out.dtype), d)
        args = (
            loc,
            tril,
            np.int64(n),
            np.int64(loc.shape[0]),
            np.int64(tril.shape[0]),
            np.uint32(k0),
            np.uint32(k1),
            np.uint64(0 if device_key is None else device_key.data.ptr),
            out,
        )
        kernel((grid_1d(n, POINTS),), (POINTS,), args)
    return out


def points_layout(batch: tuple[int, ...], own: tuple[int, ...]) -> int | None:
    """How many distinct rows a parameter of batch shape `own` (broadcast to `batch`) has in the
    flat kernel layout: 1 when it is one row for all, the batch size when it is the whole batch
    already, None when it broadcasts partially (the caller then materializes it)."""
    size = math.prod(batch)
    if math.prod(own) == 1:
        return 1
    if tuple(own) == tuple(batch):
        return size
    return None


def layout(
    loc: cupy.ndarray, tril: cupy.ndarray, batch: tuple[int, ...]
) -> tuple[cupy.ndarray, cupy.ndarray, cupy.ndarray | None]:
    """(loc rows, factors, half log-determinants: None for one factor) of a distribution's
    means `loc` (broadcast to `batch`) and factor `tril` (its own batch shape) laid out for the
    kernels: point o of a flat (points..., *batch) layout meets row o % len(loc rows) and factor
    o % len(factors)."""
    d = loc.shape[-1]
    size = math.prod(batch)
    if all(st == 0 for st in loc.strides[:-1]):  # one mean, broadcast
        loc = cupy.reshape(loc[(0,) * len(batch)], (1, d))
    else:
        loc = cupy.reshape(loc, (size, d))
    rows = points_layout(batch, tuple(int(s) for s in tril.shape[:-2]))
    tril = tril if rows else cupy.broadcast_to(tril, (*batch, d, d))
    tril = cupy.ascontiguousarray(cupy.reshape(tril, (rows or size, d, d)))
    half = None  # one factor: the kernel computes it
    if tril.shape[0] > 1:
        half = cupy.sum(cupy.log(cupy.diagonal(tril, axis1=-2, axis2=-1)), axis=-1)
    return cupy.ascontiguousarray(loc), tril, half


def log_prob_of(
    value: cupy.ndarray,
    params: Callable[[], tuple[cupy.ndarray, cupy.ndarray, cupy.ndarray | None]],
    batch: tuple[int, ...],
    check: bool,
) -> cupy.ndarray | None:
    """log_prob at `value` (of the distribution's dtype) of the distribution of batch shape
    `batch` whose `layout` `params` gives (asked only when the kernel runs), or None where the
    layout of `value` does not suit the kernel (a broadcast `value`, a batch that is not the
    trailing part of the output, no points). `check`: ``ValueError`` for non-finite values."""
    vs = tuple(int(s) for s in value.shape)
    out_batch = batch_of(vs[:-1], batch)
    nb = len(batch)
    if out_batch != vs[:-1] or (nb and out_batch[-nb:] != batch) or math.prod(out_batch) == 0:
        return None
    loc, tril, half = params()
    flat = value.reshape(-1, vs[-1])
    if not flat.flags.c_contiguous:
        flat = flat.copy()
    out, flag = log_prob(flat, loc, tril, half, check=check)
    if flag is not None and int(flag):
        raise ValueError(bad_values("value", vs, False))
    return out.reshape(out_batch)


def standard_normal(xp: Any, shape: tuple[int, ...], dtype: Any, device: Any, rng: Any) -> Any:
    """Standard normals of `shape` in `dtype` from `rng` (None, an int seed or a
    ``cupy.random.Generator``), on the current device (`xp` and `device` unused)."""
    _random.check_cupy_rng(rng)
    if isinstance(rng, cupy.random.Generator):
        gen = rng
    else:
        gen = cupy.random.default_rng(_random.as_seed(rng))
    return gen.standard_normal(shape, dtype=dtype)
