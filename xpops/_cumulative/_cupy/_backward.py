"""The CuPy engine of logcumsumexp's backward rule (real inputs).

The rule's sum (`.._vjp`), for the inclusive scan ``y_k = log sum_{j <= k} exp(x_j)``, is

    dx_k = sum_{i >= k} g_i exp(x_k - y_i) = exp(x_k - y_k) S_k,
    S_k = sum_{i >= k} g_i exp(y_k - y_i) = g_k + exp(y_k - y_{k+1}) S_{k+1},

a linear recurrence run against the forward's direction whose links ``exp(y_k - y_{k+1})``
are at most 1 (the outputs never decrease): no overflow, no log space, one sign-agnostic
channel. For the exclusive scan the same recurrence over its own outputs gives
``dx_k = exp(x_k - y_{k+1}) S_{k+1}`` (and 0 for the last input, which no output holds).

* ``grad_tiles``: long rows, too few to fill the GPU a row a warp. One pass: a block reads
  its tile of ``x``, ``y`` and ``g``, composes each chunk's affine map ``S -> b + a S``
  (keeping every element's cotangent as ``u + v S_in`` in the value entering its chunk), gets
  the value of ``S`` entering its tile from its predecessors by decoupled look-back (the
  look-back slots of `._device`, holding maps), and writes ``dx``: four passes over arrays of
  the size of ``x``, the least the rule's inputs and output allow.
* ``grad_rows`` (`._grad_rows`): contiguous rows of at most GRAD_ROWS_MAX_LEN elements, however
  many, and longer rows where there are enough to fill the GPU (GRAD_ROWS_MIN_ROWS_PER_SM): a
  group of lanes a row, ``S`` carried in registers along it, four passes.
* ``grad_column_blocks`` and ``grad_columns`` (`._grad_columns`): a strided axis with at
  least a warp of adjacent columns, and many columns in all (GRAD_COLUMN_MIN_LANES). A block
  runs the recurrence down 32 whole columns, four passes, where there are enough columns to
  fill the GPU that way (`column_block_shape`); otherwise a thread runs it down a segment of
  its column twice, six passes.
* Every other shape (a strided axis of few columns): the two log-space scans of the generic
  rule as one scan of a stacked array between two fused elementwise kernels (``terms`` and
  ``combine``), twelve passes.

Special values as the generic rule gives them: an output of ``-inf``, or of cotangent 0, holds
no term; a NaN output or cotangent spreads NaN to the inputs it covers; an input of NaN or
``+inf`` gets NaN.
"""

import math

import cupy

from ..._lib._cuda import C_TYPES, FastKernel, multiprocessors
from ..._lib._dtypes import dtype_name
from . import choose_kernel, logcumsumexp
from ._device import CHUNKS, GRAD_MAPS, LOOK_BACK, PAIRS, VECTOR, WARP, look_back_state
from ._grad_columns import (
    GRAD_COLUMN_MIN_LANES,
    column_block_shape,
    grad_column_blocks_scan,
    grad_columns_scan,
)
from ._grad_rows import GRAD_ROWS_MAX_LEN, GRAD_ROWS_MIN_ROWS_PER_SM, grad_rows_scan

__all__ = [
    "GRAD_MIN_BLOCKS",
    "GRAD_PREFETCH_MIN_TILES",
    "GRAD_PREFETCH_PER_SM",
    "GRAD_ROUNDS",
    "GRAD_THREADS",
    "grad_tile_items",
    "real_pullback",
]

# grad_tiles: GRAD_THREADS threads, each GRAD_ROUNDS chunks of VECTOR elements (a tile of 2048
# float32 or 1024 float64), at least GRAD_MIN_BLOCKS blocks an SM. Measured on an H200 (share
# of the copy rate, four passes counted; 2**28 float32 1-D / (8192, 32768) float32 rows /
# 2**27 float64): 2 rounds and 6 blocks 64% / 65%, against 54% / 52% at 4 blocks, 46% / 51% at
# 8, 44% / 47% for 4 rounds, 56% / 66% for 512 threads of 2 rounds at 3 blocks; float64 52% at
# 2 rounds and 4 blocks, 50% at 6, 41% for 4 rounds. An L2 prefetch of the tile one tile an SM
# ahead, on rows of at least GRAD_PREFETCH_MIN_TILES tiles, H200 / H100 in one session, none
# against one and two tiles an SM ahead: 2**28 float32 1-D 54 / 63% against 62, 62 / 71, 63%;
# (8192, 32768) float32, rows of 16 tiles, 64 / 76% against 71, 62 / 81, 70%. Rows of fewer
# tiles were not measured and are not prefetched.
GRAD_THREADS = 256
GRAD_ROUNDS = {"float32": 2, "float64": 2}
GRAD_MIN_BLOCKS = {"float32": 6, "float64": 4}
GRAD_PREFETCH_PER_SM = 1
GRAD_PREFETCH_MIN_TILES = 16

_SOURCE = r"""
template <typename T> __device__ __forceinline__ Pair<T> shfl_down_pair(Pair<T> p, int d) {
    return Pair<T>{__shfl_down_sync(FULL_MASK, p.m, d), __shfl_down_sync(FULL_MASK, p.s, d)};
}
// A published word is never the slots' unwritten pattern (all bits set, a NaN payload)
template <typename T> __device__ __forceinline__ Pair<T> canonical(Pair<T> p) {
    return Pair<T>{isnan(p.m) ? qnan<T>() : p.m, isnan(p.s) ? qnan<T>() : p.s};
}

// Warp 0: the exclusive composition, in place, of the n <= 64 maps at `maps` (two to a lane,
// in scan order); returns the composition of all of them.
template <typename T>
__device__ __forceinline__ Pair<T> warp_exclusive_maps(Pair<T>* maps, int n, int lane) {
    const int i0 = 2 * lane;
    const Pair<T> m0 = i0 < n ? maps[i0] : map_identity<T>();
    const Pair<T> m1 = i0 + 1 < n ? maps[i0 + 1] : map_identity<T>();
    Pair<T> incl = compose(m0, m1);
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const Pair<T> o = shfl_up_pair(incl, d);
        if (lane >= d) incl = compose(o, incl);
    }
    Pair<T> before = shfl_up_pair(incl, 1);
    if (lane == 0) before = map_identity<T>();
    __syncwarp();
    if (i0 < n) maps[i0] = before;
    if (i0 + 1 < n) maps[i0 + 1] = compose(before, m0);
    return shfl_pair(incl, 31);
}

// Decoupled look-back by one warp over maps: the composition of tiles [first, tile), which
// ends at an inclusive prefix (a constant map). Higher lanes hold earlier tiles.
template <typename T>
__device__ __forceinline__ Pair<T> map_look_back(long long tile, long long first, int lane,
                                                 const Pair<T>* aggs, const Pair<T>* incls) {
    Pair<T> prefix = map_identity<T>();
    for (long long pred = tile - 1;; pred -= 32) {
        const long long p = pred - lane;
        int f = 2;
        Pair<T> val = map_identity<T>();
        if (p >= first) f = wait_slot(aggs, incls, p, val);
        const unsigned done = __ballot_sync(FULL_MASK, f == 2);
        if (done != 0 && lane > __ffs(done) - 1) val = map_identity<T>();
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const Pair<T> o = shfl_down_pair(val, d);
            if (lane + d < 32) val = compose(o, val);
        }
        prefix = compose(shfl_pair(val, 0), prefix);
        if (done != 0) return prefix;
    }
}

// A tile is ROUNDS x THREADS chunks of VEC consecutive elements (scan order: against the
// forward's), chunk k * THREADS + t held by thread t in round k, read and written as vectors.
// Each element's map is (link to the element before it in scan order, term); the first element
// of a row links to nothing (+inf before it), so every row starts from a constant map and every
// inclusive prefix is a value.
//
// All the per-element work is done before the look-back: each thread runs its chunks from
// S = 0, keeping for every element its cotangent as u + v S_in in the value S_in of S before
// the chunk (u = w S_local, v = w times the product of the links so far). Once the look-back
// gives S_in, an output costs one multiply-add, so a block holds the SM only briefly after
// its prefix arrives.
template <typename T, int ROUNDS, int THREADS, int MIN_BLOCKS>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
xpops_logcumsumexp_grad_tiles(const T* __restrict__ x, const T* __restrict__ y,
                              const T* __restrict__ g, T* __restrict__ dx, const long long L,
                              const long long tiles_per_row, const long long tiles,
                              const long long prefetch_distance, const int exclusive,
                              const int reverse, unsigned long long* __restrict__ state) {
    constexpr int VEC = Vec<T>::N, WARPS = THREADS / 32, TILE = ROUNDS * THREADS * VEC;
    static_assert(ROUNDS * WARPS <= 64, "warp 0 composes the warp maps two to a lane");
    __shared__ Pair<T> maps_sh[ROUNDS * WARPS];
    __shared__ T in_sh;
    __shared__ unsigned long long tile_sh;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const LookBack<T> lb(state, tiles);
    if (tid == 0) tile_sh = atomicAdd(lb.counter, 1ull) + 1ull;  // the counter starts at ~0
    __syncthreads();
    const long long tile = tile_sh;
    const long long r = tile / tiles_per_row, q = tile % tiles_per_row;
    const long long start = q * TILE;
    const T* xr = x + r * L;
    const T* yr = y + r * L;
    const T* gr = g + r * L;
    T* dxr = dx + r * L;
    constexpr unsigned long long ALIGN = sizeof(T) * VEC;
    const long long off = reverse ? L - start : start;
    const unsigned long long addresses =
        reinterpret_cast<unsigned long long>(xr + off) |
        reinterpret_cast<unsigned long long>(yr + off) |
        reinterpret_cast<unsigned long long>(gr + off) |
        reinterpret_cast<unsigned long long>(dxr + off);
    const bool full = start + TILE <= L;
    const bool vec = full && addresses % ALIGN == 0;
    if (prefetch_distance > 0 && tile + prefetch_distance < tiles) {
        // the tile `prefetch_distance` ahead into L2, one 128-byte line a thread and array
        constexpr int LINE = 128 / sizeof(T);
        const long long t2 = tile + prefetch_distance;
        const long long r2 = t2 / tiles_per_row, s2 = (t2 % tiles_per_row) * TILE;
        const long long lo = reverse ? max(0LL, L - s2 - TILE) : s2;
        const long long l = lo + (long long)threadIdx.x * LINE;
        const long long hi = reverse ? L - s2 : min(L, s2 + TILE);
        if (threadIdx.x * LINE < TILE && l < hi) {
            asm volatile("prefetch.global.L2 [%0];" ::"l"(x + r2 * L + l));
            asm volatile("prefetch.global.L2 [%0];" ::"l"(y + r2 * L + l));
            asm volatile("prefetch.global.L2 [%0];" ::"l"(g + r2 * L + l));
        }
    }

    T u[ROUNDS][VEC], v[ROUNDS][VEC], yv[ROUNDS][VEC], y0[ROUNDS];
#pragma unroll
    for (int k = 0; k < ROUNDS; ++k) {  // y, g (into v) and x (into u), every load in flight
        const long long l0 = start + ((long long)k * THREADS + tid) * VEC;
        load_chunk<T, VEC>(yr, L, l0, reverse, vec, yv[k]);
        load_chunk<T, VEC>(gr, L, l0, reverse, vec, v[k]);
        load_chunk<T, VEC>(xr, L, l0, reverse, vec, u[k]);
        // the output before the chunk in scan order
        y0[k] = (l0 == 0 || l0 > L) ? pos_inf<T>() : yr[reverse ? L - l0 : l0 - 1];
    }
    // A warp whose outputs and cotangents are all finite (the output before each chunk finite
    // or +inf) takes the plain formulas: links exp(y - y_prev), terms g, weights exp(x - y),
    // which give the special values of x themselves.
    bool finite = true;
#pragma unroll
    for (int k = 0; k < ROUNDS; ++k) {
        finite &= isfinite(y0[k]) || y0[k] == pos_inf<T>();
#pragma unroll
        for (int j = 0; j < VEC; ++j) finite &= isfinite(yv[k][j]) && isfinite(v[k][j]);
    }
    const bool plain = __all_sync(FULL_MASK, finite);
    // each chunk run from S = 0: (u, v) of its elements and its map, composed within the warp
    // (lanes in scan order) and kept exclusive
    Pair<T> ex[ROUNDS];
#pragma unroll
    for (int k = 0; k < ROUNDS; ++k) {
        const long long l0 = start + ((long long)k * THREADS + tid) * VEC;
        Pair<T> m = map_identity<T>();  // (product of the links, S from 0)
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const T yj = yv[k][j], y_prev = j == 0 ? y0[k] : yv[k][j - 1];
            const T gj = v[k][j], xj = u[k][j];
            const T a = plain ? xexp(yj - y_prev) : grad_link(yj, y_prev);
            const T t = plain ? gj : grad_term(yj, gj);
            const T y_ref = exclusive ? y_prev : yj;
            const T w = plain ? xexp(xj - y_ref) : grad_weight(xj, y_ref);
            const Pair<T> before = m;
            if (full || l0 + j < L) m = Pair<T>{a * m.m, fma(a, m.s, t)};  // past the row: none
            const Pair<T> held = exclusive ? before : m;
            u[k][j] = w * held.s;
            v[k][j] = w * held.m;
        }
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const Pair<T> o = shfl_up_pair(m, d);
            if (lane >= d) m = compose(o, m);
        }
        if (lane == 31) maps_sh[k * WARPS + warp] = m;
        ex[k] = shfl_up_pair(m, 1);
        if (lane == 0) ex[k] = map_identity<T>();
    }
    __syncthreads();
    if (warp == 0) {
        const Pair<T> total = warp_exclusive_maps(maps_sh, ROUNDS * WARPS, lane);
        T in = T(0);  // a row's first tile: its first map is constant
        if (q != 0) {
            if (lane == 0) publish(&lb.aggs[tile], canonical(total));
            const Pair<T> prefix = map_look_back(tile, tile - q, lane, lb.aggs, lb.incls);
            in = prefix.s;
        }
        if (lane == 0) {
            publish(&lb.incls[tile], canonical(Pair<T>{T(0), fma(total.m, in, total.s)}));
            in_sh = in;
        }
    }
    __syncthreads();
    const T in = in_sh;
#pragma unroll
    for (int k = 0; k < ROUNDS; ++k) {
        const long long l0 = start + ((long long)k * THREADS + tid) * VEC;
        const Pair<T> before = compose(maps_sh[k * WARPS + warp], ex[k]);
        const T s = fma(before.m, in, before.s);  // S before the chunk
        T o[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) o[j] = fma(v[k][j], s, u[k][j]);
        store_chunk<T, VEC>(dxr, L, l0, reverse, vec, o);
    }
}

"""

_CODE = PAIRS + WARP + LOOK_BACK + CHUNKS + GRAD_MAPS + _SOURCE
_OPTIONS = ("-std=c++17",)


@cupy.memoize(for_each_device=True)
def _grad_tiles(dtype_name: str, rounds: int, threads: int, min_blocks: int) -> FastKernel:
    """The ``grad_tiles`` kernel of `dtype_name`, compiled for the current device on first
    use."""
    name = (
        f"xpops_logcumsumexp_grad_tiles<{C_TYPES[dtype_name]}, {rounds}, {threads}, {min_blocks}>"
    )
    module = cupy.RawModule(code=_CODE, options=_OPTIONS, name_expressions=[name])
    # x, y, g, dx, L, tiles_per_row, tiles, prefetch_distance, exclusive, reverse, state
    return FastKernel(module.get_function(name), "ppppqqqqiip")


def grad_tile_items(dtype_name: str) -> int:
    """Elements of a ``grad_tiles`` tile."""
    return GRAD_THREADS * GRAD_ROUNDS[dtype_name] * VECTOR[dtype_name]


@cupy.memoize(for_each_device=True)
def _elementwise() -> tuple[cupy.ElementwiseKernel, cupy.ElementwiseKernel]:
    """The ``terms`` and ``combine`` kernels of the two-scan path. Both take -inf as an
    argument (NVRTC has no INFINITY without extra headers)."""
    terms = cupy.ElementwiseKernel(
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
    combine = cupy.ElementwiseKernel(
        "T x, raw T sums, T ninf",
        "T dx",
        """
        // an input of +inf gets NaN (inf - inf); exp(-inf + a) is 0 for every a < +inf
        dx = (x == -ninf) ? x - x
                          : exp(x + sums[i]) - exp(x + sums[i + _ind.size()]);
        """,
        "xpops_logcumsumexp_grad_combine",
    )
    return terms, combine


def _two_scans(
    x: cupy.ndarray, y: cupy.ndarray, g: cupy.ndarray, axis: int, exclusive: bool, reverse: bool
) -> cupy.ndarray:
    terms_kernel, combine_kernel = _elementwise()
    ninf = x.dtype.type(-math.inf)
    terms = cupy.empty((2, *x.shape), x.dtype)
    terms_kernel(g, y, ninf, terms)
    sums = logcumsumexp(terms, axis + 1, exclusive, reverse)
    return combine_kernel(x, sums, ninf)


def _choose(x: cupy.ndarray, axis: int) -> str:
    """Along the contiguous axis, grad_rows for rows of at most GRAD_ROWS_MAX_LEN elements and
    for at least GRAD_ROWS_MIN_ROWS_PER_SM rows an SM, grad_tiles for fewer longer rows; for a
    strided axis of at least a warp of adjacent columns and GRAD_COLUMN_MIN_LANES columns in
    all, grad_column_blocks where `column_block_shape` gives it a shape, else grad_columns;
    the two scans otherwise (few columns)."""
    if dtype_name(x.dtype) not in C_TYPES:
        return "two_scans"
    kind = choose_kernel(x.shape, axis)
    if kind in ("rows", "tiles"):
        L = x.shape[axis]
        many = x.size // L >= GRAD_ROWS_MIN_ROWS_PER_SM * multiprocessors()
        return "grad_rows" if L <= GRAD_ROWS_MAX_LEN or many else "grad_tiles"
    inner = math.prod(x.shape[axis + 1 :])
    lanes = math.prod(x.shape[:axis]) * inner
    if inner >= 32 and lanes >= GRAD_COLUMN_MIN_LANES:
        blocks = column_block_shape(lanes, dtype_name(x.dtype)) is not None
        return "grad_column_blocks" if blocks else "grad_columns"
    return "two_scans"


def _grad_tiles_scan(
    x: cupy.ndarray, y: cupy.ndarray, g: cupy.ndarray, axis: int, exclusive: bool, reverse: bool
) -> cupy.ndarray:
    name = dtype_name(x.dtype)
    L = x.shape[axis]
    rows = x.size // L
    tiles_per_row = -(-L // grad_tile_items(name))
    tiles = rows * tiles_per_row
    dx = cupy.empty(x.shape, x.dtype)
    state = look_back_state(tiles, x.dtype)
    long_rows = tiles_per_row >= GRAD_PREFETCH_MIN_TILES
    prefetch = GRAD_PREFETCH_PER_SM * multiprocessors() if long_rows else 0
    pointers = (x.data.ptr, y.data.ptr, g.data.ptr, dx.data.ptr)
    _grad_tiles(name, GRAD_ROUNDS[name], GRAD_THREADS, GRAD_MIN_BLOCKS[name])(
        tiles,
        GRAD_THREADS,
        (
            *pointers,
            L,
            tiles_per_row,
            tiles,
            prefetch,
            int(exclusive),
            int(reverse),
            state.ptr,
        ),
    )
    return dx


def real_pullback(
    x: cupy.ndarray,
    y: cupy.ndarray,
    g: cupy.ndarray,
    axis: int,
    exclusive: bool,
    reverse: bool,
    kernel: str | None = None,
) -> cupy.ndarray:
    """``sum_{i covers j} g_i exp(x_j - y_i)`` along `axis` (arrays of one real dtype and
    shape, ndim >= 1), where the scan that covers is logcumsumexp with `exclusive` and
    `reverse` as given (the forward's `reverse` already flipped).

    `kernel` (tests and benchmarks only) forces ``"grad_tiles"``, ``"grad_rows"`` (the last
    axis only), ``"grad_column_blocks"``, ``"grad_columns"`` or ``"two_scans"``.
    """
    x, y, g = (cupy.ascontiguousarray(a) for a in (x, y, g))  # raw indexing is C order
    if x.size == 0:
        return cupy.empty(x.shape, x.dtype)
    if kernel is None:
        kernel = _choose(x, axis)
    if kernel == "grad_tiles":
        return _grad_tiles_scan(x, y, g, axis, exclusive, reverse)
    if kernel == "grad_rows":
        return grad_rows_scan(x, y, g, axis, exclusive, reverse)
    if kernel == "grad_columns":
        return grad_columns_scan(x, y, g, axis, exclusive, reverse)
    if kernel == "grad_column_blocks":
        return grad_column_blocks_scan(x, y, g, axis, exclusive, reverse)
    return _two_scans(x, y, g, axis, exclusive, reverse)
