"""CuPy engine of the gradients of MultivariateNormal.log_prob for one distribution at many
points (`log_prob_grads`, the CuPy slot of `._grads.log_prob_grads`): two kernels.

``log_prob_grad``: each block strides over tiles of GRAD_POINTS consecutive points, read
coalesced into shared memory. Per point (a thread each) ``u = L^-1 (v - mu)`` and ``w = L^-T u``
by substitution in registers, from the factor held in shared memory as square rows (4 entries
a load); the block writes ``-g w``, coalesced through the tile, and its threads add the tile's
``g w u^T`` (in 4 x 4 register blocks), ``g w`` and ``g`` to sums they keep across tiles and
write once. ``log_prob_grad_finish`` adds those partial sums up into the mean's and the
factor's cotangents.
"""

from typing import Any

import cupy

from .._lib._cuda import C_TYPES, FastKernel, grid_1d, multiprocessors
from .._lib._dtypes import dtype_name
from . import _cupy, _grads

__all__ = ["GRAD_POINTS", "log_prob_grads", "log_prob_grads_at", "partial_shape"]

GRAD_POINTS = 64  # log_prob_grad's points a block (float64 D = 32: 33 KiB of tiles, 8 of factor)
# log_prob_grad's blocks an SM (its launch bounds, at most 128 registers) and its grid, a wave
# of them (where shared memory holds them all): H200, 1e6 points, D = 16, 0.102 ms in float32
# and 0.144 in float64 against 0.154 and 0.201 at 4 blocks
GRAD_MIN_BLOCKS = 8
FINISH_THREADS = 256  # log_prob_grad_finish's threads, a block an output element

_SOURCE = r"""
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
"""

_OPTIONS = (
    "-std=c++17",
    f"-DMVN_GRAD_POINTS={GRAD_POINTS}",
    f"-DMVN_GRAD_MIN_BLOCKS={GRAD_MIN_BLOCKS}",
    f"-DMVN_FINISH_THREADS={FINISH_THREADS}",
)
# the kernels' parameters, launched by address (`FastKernel`): p a pointer, q an int64
_SIGNATURES = {"log_prob_grad": "ppppqpp", "log_prob_grad_finish": "pqppp"}


@cupy.memoize(for_each_device=True)
def _launcher(kind: str, dtype_name: str, d: int) -> FastKernel:
    name = f"xpops_mvn_{kind}<{C_TYPES[dtype_name]}, {d}>"
    module = cupy.RawModule(code=_SOURCE, options=_OPTIONS, name_expressions=[name])
    return FastKernel(module.get_function(name), _SIGNATURES[kind])


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
    dtype and D <= `._cupy.MAX_D`, the generic operations otherwise. The kernel writes the value's
    cotangent and partial sums (a few a block), which a second one adds up into the mean's and
    the factor's cotangents."""
    d = tril.shape[-1]
    fused = (
        tril.ndim == 2
        and tuple(loc.shape) == (d,)
        and tuple(value.shape) == (*g.shape, d)
        and _cupy.supported(value.dtype, d)
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
    dtype = value.dtype
    g_value = cupy.empty((n, d), dtype=dtype)
    partial = cupy.empty(partial_shape(n, d), dtype=dtype)
    g_l = cupy.empty((d, d), dtype=dtype)
    g_loc = cupy.empty(d, dtype=dtype)
    arrays = (flat, gs, loc, tril, g_value, partial, g_l, g_loc)
    log_prob_grads_at(dtype, d, n, tuple(a.data.ptr for a in arrays))
    return g_loc, g_l, g_value.reshape(value.shape)


def partial_shape(n: int, d: int) -> tuple[int, int]:
    """The shape of the partial sums `log_prob_grads_at` writes for `n` points of `d`
    coordinates on the current device: its entries, and a column for each group of threads
    of each block."""
    return d * (d + 1) // 2 + d + 1, _grad_blocks(n) * _grad_groups(d)


def _grad_blocks(n: int) -> int:
    # a wave of resident blocks (float64 with D > 20 holds fewer an SM, for its shared memory,
    # and runs a part of a second one), each striding over the tiles: few partial sums to add
    return grid_1d(n, GRAD_POINTS, multiprocessors() * GRAD_MIN_BLOCKS)


def log_prob_grads_at(
    dtype: Any,
    d: int,
    n: int,
    pointers: tuple[int, int, int, int, int, int, int, int],
    stream: int | None = None,
) -> None:
    """The two kernels of `log_prob_grads` on the device addresses of C-contiguous arrays of
    `dtype` (`pointers`, in this order): the points (n, d), their cotangents (n,), the mean
    (d,) and the factor (d, d), then what they write: the points' cotangents (n, d), the
    partial sums (`partial_shape`), the factor's cotangent (d, d) and the mean's (d,); on the
    current device and the stream whose pointer is `stream` (CuPy's current one where None),
    `dtype` and `d` taken by the kernels (`._cupy.supported`), n >= 1."""
    value, g, loc, tril, g_value, partial, g_l, g_loc = pointers
    blocks = _grad_blocks(n)
    name = dtype_name(dtype)
    _launcher("log_prob_grad", name, d)(
        blocks, GRAD_POINTS, (value, g, loc, tril, n, g_value, partial), stream=stream
    )
    columns = blocks * _grad_groups(d)
    args = (partial, columns, tril, g_l, g_loc)
    _launcher("log_prob_grad_finish", name, d)(d * d + d, FINISH_THREADS, args, stream=stream)
