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
from .._lib._cuda import C_TYPES, FastKernel, grid_1d, read_int
from .._lib._dtypes import dtype_name
from ._common import bad_values, batch_of

__all__ = [
    "MAX_D",
    "POINTS",
    "kernels_for",
    "layout",
    "log_prob_at",
    "log_prob_of",
    "points_layout",
    "sample",
    "standard_normal",
    "supported",
]

MAX_D = 32  # z[D] (and eps[D]) live in registers; above this the generic path is used
POINTS = 128  # points (threads) a block; the float64 D=32 tile is 128 x 33 x 8 = 33 KiB

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

_OPTIONS = ("-std=c++17", f"-DMVN_POINTS={POINTS}")


# the parameters of the kernels launched by address (`FastKernel`): p a pointer, q an int64
_SIGNATURES = {"log_prob": "ppppqqqpp"}


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


def log_prob_at(
    value: int,
    n: int,
    params: tuple[cupy.ndarray, cupy.ndarray, cupy.ndarray | None],
    out: int,
    check: bool,
) -> bool:
    """Log densities of the n >= 1 points at device address `value` (C-contiguous (n, D), of
    the dtype of the layout `params`) into the n values at address `out`, on the current
    stream. `params` is ``(loc, tril, half_log_det)`` as `layout` gives them: ``loc``
    (n_loc, D), ``tril`` (n_tril, D, D) and ``half_log_det`` (n_tril,) contiguous, n_loc and
    n_tril dividing n (point o meets row o % n_loc and factor o % n_tril), ``half_log_det``
    None for one factor, whose half log-determinant each block computes. With `check`, the
    kernel sets a zeroed device flag at a value that is not finite, read once here (a
    synchronisation): returns False if it was set, else True."""
    loc, tril, half = params
    flag = cupy.zeros((), dtype=cupy.int32) if check else None
    args = (
        value,
        loc.data.ptr,
        tril.data.ptr,
        0 if half is None else half.data.ptr,
        n,
        loc.shape[0],
        tril.shape[0],
        out,
        0 if flag is None else flag.data.ptr,
    )
    kernel = _launcher("log_prob", dtype_name(tril.dtype), int(tril.shape[-1]))
    kernel(grid_1d(n, POINTS), POINTS, args)
    return flag is None or not read_int(flag, 0)


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
    flat = value.reshape(-1, vs[-1])
    if not flat.flags.c_contiguous:
        flat = flat.copy()
    out = cupy.empty(flat.shape[0], dtype=value.dtype)
    if not log_prob_at(flat.data.ptr, flat.shape[0], params(), out.data.ptr, check):
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
