"""The CuPy engine of logcumsumexp's backward along the contiguous axis for short rows, and for
long rows where there are enough of them to fill the GPU (`._backward` chooses):
``grad_rows``, the counterpart of the forward's ``group_rows``.

A group of G lanes (a power of two up to 32) takes a row and walks it in the rule's scan
order (against the forward's) a span of GRAD_ROWS_ROUNDS x G chunks of VEC consecutive
elements at a time: lane ``sub`` holds chunks ``k * G + sub`` of the span, so that the
group's loads and stores are contiguous vectors. As in ``grad_tiles``, each chunk is run
from ``S = 0`` (every element's cotangent kept as ``u + v S_in`` in the value entering its
chunk), the chunks' maps are composed across the group with shuffles, and ``S`` is carried
in registers from span to span: four passes over arrays of the size of ``x``, no shared
memory, no barrier, no look-back state.
"""

import cupy

from ..._lib._cuda import C_TYPES, FastKernel
from ..._lib._dtypes import dtype_name
from ._device import CHUNKS, GRAD_MAPS, PAIRS, VECTOR, WARP

__all__ = [
    "GRAD_ROWS_BLOCK",
    "GRAD_ROWS_MAX_LEN",
    "GRAD_ROWS_MIN_ROWS_PER_SM",
    "GRAD_ROWS_ROUNDS",
    "grad_rows_lanes",
    "grad_rows_scan",
]

# Threads a block; chunks a lane holds a span. Measured on an H200, share of the copy rate
# counting four passes, 1 / 2 / 4 chunks a lane (the lanes a row following): float32
# (1048576, 64) 76 / 68 / 41%, (4194304, 16) 77 / 70 / 53%, (262144, 256) 78 / 69 / 44%,
# (65536, 1024) 79 / 72 / 44%, (8192, 1024) 53 / 51 / 36%; float64 (1048576, 64) 81 / 55 /
# 41%, (131072, 512) 84 / 56 / 41%. Against the two log-space scans (9-17% on the same shapes)
# and grad_tiles (1-47%; 35% at (8192, 1024)). At 2 chunks a lane, half or twice the lanes a
# row gave 42-71%, against 51-72%.
GRAD_ROWS_BLOCK = 256
GRAD_ROWS_ROUNDS = 1
# Rows taken: those of at most GRAD_ROWS_MAX_LEN elements, and longer ones (32 lanes a row)
# where there are at least GRAD_ROWS_MIN_ROWS_PER_SM of them an SM; fewer long rows go to
# grad_tiles, which splits a row among blocks. H200 (132 SMs), float32, grad_rows at 1 / 2
# chunks a lane against grad_tiles: (65536, 4096), 496 rows an SM, 82 / 77% against 69%;
# (32768, 8192), 248 an SM, 81 / 77% against 68%; (16384, 16384), 124 an SM, 73 / 76%
# against 65%; (16384, 2048) 69 / 69% against 67%; (8192, 32768), 62 an SM, 75 / 76% against
# 71%; float64 (8192, 16384) 69 / 54% against 57%; but (2048, 131072), 15.5 an SM, 47%
# against 66%, and (1024, 262144) 26% against 64%. H100 (132 SMs), 1 chunk a lane against
# grad_tiles: 94 / 85%, 92 / 82%, 85 / 79%, 74 / 73%, 88 / 80%, float64 80 / 72%, and 62 / 78%,
# 35 / 75% on the same shapes. The threshold is the fewest rows an SM measured to gain (8192
# rows on 132 SMs); between 15.5 and 62 was not measured.
GRAD_ROWS_MAX_LEN = 1024
GRAD_ROWS_MIN_ROWS_PER_SM = 62

_SOURCE = r"""
template <typename T, int G> __device__ __forceinline__ Pair<T> group_up(Pair<T> p, int d) {
    return Pair<T>{__shfl_up_sync(FULL_MASK, p.m, d, G), __shfl_up_sync(FULL_MASK, p.s, d, G)};
}
template <typename T, int G> __device__ __forceinline__ Pair<T> group_at(Pair<T> p, int src) {
    return Pair<T>{__shfl_sync(FULL_MASK, p.m, src, G), __shfl_sync(FULL_MASK, p.s, src, G)};
}

// Every lane of a warp runs the same number of spans (L is the kernel's), so the shuffles take
// the whole warp; lanes of rows past the end compute on nothing and store nothing.
template <typename T, int G, int ROUNDS>
__global__ void __launch_bounds__(GRAD_ROWS_BLOCK)
xpops_logcumsumexp_grad_rows(const T* __restrict__ x, const T* __restrict__ y,
                             const T* __restrict__ g, T* __restrict__ dx,
                             const long long rows, const long long L, const int exclusive,
                             const int reverse, const int vector) {
    constexpr int VEC = Vec<T>::N, SPAN = ROUNDS * G * VEC;
    const int sub = threadIdx.x & (G - 1);
    const long long row = ((long long)blockIdx.x * GRAD_ROWS_BLOCK + threadIdx.x) / G;
    const bool live = row < rows;
    const long long base = live ? row * L : 0;
    const T* xr = x + base;
    const T* yr = y + base;
    const T* gr = g + base;
    T* dxr = dx + base;
    T s_in = T(0);            // S entering the span
    T y_last = pos_inf<T>();  // the output before the span in scan order (+inf: none)
    for (long long s0 = 0; s0 < L; s0 += SPAN) {
        T u[ROUNDS][VEC], v[ROUNDS][VEC], yv[ROUNDS][VEC];
#pragma unroll
        for (int k = 0; k < ROUNDS; ++k) {  // y, g (into v) and x (into u), every load in flight
            const long long l0 = s0 + ((long long)k * G + sub) * VEC;
            if (live && l0 < L) {
                load_chunk<T, VEC>(yr, L, l0, reverse, vector, yv[k]);
                load_chunk<T, VEC>(gr, L, l0, reverse, vector, v[k]);
                load_chunk<T, VEC>(xr, L, l0, reverse, vector, u[k]);
            } else {
#pragma unroll
                for (int j = 0; j < VEC; ++j) yv[k][j] = v[k][j] = u[k][j] = T(0);
            }
        }
        // the output before each chunk in scan order: the previous lane's last, the last
        // lane's of the round before, or the span's predecessor
        T y0[ROUNDS];
#pragma unroll
        for (int k = 0; k < ROUNDS; ++k) {
            const T up = __shfl_up_sync(FULL_MASK, yv[k][VEC - 1], 1, G);
            const T wrap = k == 0 ? y_last : __shfl_sync(FULL_MASK, yv[k - 1][VEC - 1], G - 1, G);
            y0[k] = sub == 0 ? wrap : up;
        }
        // A warp whose outputs and cotangents in its rows are all finite (the output before
        // each chunk finite or +inf) takes the plain formulas, as grad_tiles does.
        bool finite = true;
#pragma unroll
        for (int k = 0; k < ROUNDS; ++k) {
            const long long l0 = s0 + ((long long)k * G + sub) * VEC;
            if (live && l0 < L) finite &= isfinite(y0[k]) || y0[k] == pos_inf<T>();
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                if (live && l0 + j < L) finite &= isfinite(yv[k][j]) && isfinite(v[k][j]);
            }
        }
        const bool plain = __all_sync(FULL_MASK, finite);
        Pair<T> ex[ROUNDS], tot[ROUNDS];
#pragma unroll
        for (int k = 0; k < ROUNDS; ++k) {
            const long long l0 = s0 + ((long long)k * G + sub) * VEC;
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
                if (l0 + j < L) m = Pair<T>{a * m.m, fma(a, m.s, t)};  // past the row: none
                const Pair<T> held = exclusive ? before : m;
                u[k][j] = w * held.s;
                v[k][j] = w * held.m;
            }
#pragma unroll
            for (int d = 1; d < G; d <<= 1) {
                const Pair<T> o = group_up<T, G>(m, d);
                if (sub >= d) m = compose(o, m);
            }
            ex[k] = group_up<T, G>(m, 1);
            if (sub == 0) ex[k] = map_identity<T>();
            tot[k] = group_at<T, G>(m, G - 1);
        }
        T s = s_in;
#pragma unroll
        for (int k = 0; k < ROUNDS; ++k) {
            const long long l0 = s0 + ((long long)k * G + sub) * VEC;
            const T before = fma(ex[k].m, s, ex[k].s);  // S before the chunk
            T o[VEC];
#pragma unroll
            for (int j = 0; j < VEC; ++j) o[j] = fma(v[k][j], before, u[k][j]);
            if (live && l0 < L) store_chunk<T, VEC>(dxr, L, l0, reverse, vector, o);
            s = fma(tot[k].m, s, tot[k].s);
        }
        s_in = s;
        y_last = __shfl_sync(FULL_MASK, yv[ROUNDS - 1][VEC - 1], G - 1, G);
    }
}
"""

_CODE = PAIRS + WARP + CHUNKS + GRAD_MAPS + _SOURCE
_OPTIONS = ("-std=c++17", f"-DGRAD_ROWS_BLOCK={GRAD_ROWS_BLOCK}")


@cupy.memoize(for_each_device=True)
def _grad_rows(dtype_name: str, lanes: int, rounds: int) -> FastKernel:
    """The ``grad_rows`` kernel of `dtype_name` with `lanes` lanes a row, compiled for the
    current device on first use."""
    name = f"xpops_logcumsumexp_grad_rows<{C_TYPES[dtype_name]}, {lanes}, {rounds}>"
    module = cupy.RawModule(code=_CODE, options=_OPTIONS, name_expressions=[name])
    # x, y, g, dx, rows, L, exclusive, reverse, vector
    return FastKernel(module.get_function(name), "ppppqqiii")


def grad_rows_lanes(L: int, dtype_name: str, rounds: int = GRAD_ROWS_ROUNDS) -> int:
    """Lanes a row for rows of length `L`: the fewest (a power of two up to 32) that hold a
    row in one span of `rounds` chunks each."""
    chunks = -(-L // VECTOR[dtype_name])
    return min(32, 1 << (-(-chunks // rounds) - 1).bit_length())


def grad_rows_scan(
    x: cupy.ndarray,
    y: cupy.ndarray,
    g: cupy.ndarray,
    axis: int,
    exclusive: bool,
    reverse: bool,
    lanes: int | None = None,
    rounds: int = GRAD_ROWS_ROUNDS,
) -> cupy.ndarray:
    """The pull-back along the last axis `axis` of the C-contiguous `x`, `y`, `g` (not empty)
    by grad_rows; `lanes` and `rounds` (tests only) force the lanes a row and the chunks a
    lane holds a span."""
    name = dtype_name(x.dtype)
    L = x.shape[axis]
    rows = x.size // L
    lanes = lanes or grad_rows_lanes(L, name, rounds)
    dx = cupy.empty(x.shape, x.dtype)
    vec = VECTOR[name]
    align = vec * x.itemsize
    pointers = tuple(a.data.ptr for a in (x, y, g, dx))
    vector = L % vec == 0 and all(p % align == 0 for p in pointers)
    _grad_rows(name, lanes, rounds)(
        -(-rows * lanes // GRAD_ROWS_BLOCK),
        GRAD_ROWS_BLOCK,
        (*pointers, rows, L, int(exclusive), int(reverse), int(vector)),
    )
    return dx
