"""The row kernels of the CuPy scan: short rows along the contiguous axis.

* ``group_rows``: rows of up to 32 x GROUP_ROWS_MAX_ROUNDS vectors (1024 float32, 512
  float64). A group of lanes holds a row in registers, read and written as coalesced vectors,
  and scans it with warp shuffles: no shared memory, no barrier.
* ``rows``: longer rows (float64 up to 1024 elements). A thread a row: the block stages a
  chunk of columns of its rows through shared memory (loads and stores coalesced), each thread
  scans its row's segment and keeps the row's carry in registers from chunk to chunk.

Both sum a run against its maximum (the fast path of `_device`) where no output can underflow
against it, and scan it with exact pairwise combines otherwise.
"""

import cupy

from ..._lib._cuda import C_TYPES, FastKernel
from ..._lib._dtypes import dtype_name
from ._device import CHUNKS, FAST_PATH, PAIRS, VECTOR, WARP

__all__ = [
    "GROUP_ROWS_BLOCK",
    "GROUP_ROWS_ITEMS",
    "GROUP_ROWS_MAX_ROUNDS",
    "GROUP_ROWS_MIN_BLOCKS",
    "GROUP_ROWS_RUN",
    "ROWS_BLOCK",
    "ROW_CHUNK",
    "group_kernel",
    "group_layout",
    "group_rows_max_len",
    "kernel",
    "scan",
    "scan_groups",
]

ROWS_BLOCK = 128  # rows per block of the rows kernel
ROW_CHUNK = {"float32": 32, "float64": 16}  # columns staged at once: 17 KiB of shared memory
# group_rows: threads a block and blocks an SM (at most 64 registers); rounds of chunks a lane
# holds of a row, at most; chunks of a row a lane holds, at least, where the row has them (fewer
# lanes a row: fewer shuffles and checks an element); elements a lane loads before it scans
# (U rows of ROUNDS chunks of VEC elements). Measured on an H200, share of the copy rate,
# float32 rows of 16 / 63 / 64 / 100 / 257 / 1024 and float64 rows of 64 / 512: 51 / 66 / 62 /
# 50 / 62 / 41 and 41 / 35%; one chunk a lane 55 / 53 / 58 / 44 / 54 / 37 and 39 / 32%; four
# 32 / 33 / 62 / 55 / 62 / 41 and 45 / 35%; 32 float32 elements a lane 55 / 51 / 52 / 44 / 54 / 36
# and 35 / 33%; two blocks an SM 10-16 points less. The rows kernel: 34 / 38 / 61 / 37 / 31 /
# 19 and 37 / 31%.
GROUP_ROWS_BLOCK = 256
GROUP_ROWS_MIN_BLOCKS = 4
GROUP_ROWS_MAX_ROUNDS = 8
GROUP_ROWS_RUN = 2
GROUP_ROWS_ITEMS = {"float32": 16, "float64": 8}

_SOURCE = r"""
// ---- rows: many rows of up to a few thousand elements, a thread per row --------------------
// The block stages CHUNK columns of ROWS_BLOCK rows in shared memory (each warp loads and
// stores whole row segments, coalesced), then each thread scans its row's segment, the carry
// in registers: summed against the segment's maximum where no output can underflow against it
// (the fast path of the tiles kernels: one exp an element and one log an output), else with
// exact pairwise combines. Rows are padded by one element: the per-row walk is then free of
// bank conflicts.
template <typename T, int CHUNK>
__global__ void __launch_bounds__(ROWS_BLOCK)
xpops_logcumsumexp_rows(const T* __restrict__ x, T* __restrict__ out, const long long rows,
                        const long long L, const int exclusive, const int reverse) {
    constexpr int STRIDE = CHUNK + 1;
    constexpr int BATCH = 16;
    __shared__ T buf[ROWS_BLOCK * STRIDE];
    const int tid = threadIdx.x;
    const long long r0 = (long long)blockIdx.x * ROWS_BLOCK;
    const int nrows = (int)min((long long)ROWS_BLOCK, rows - r0);
    Pair<T> carry = identity<T>();
    for (long long c0 = 0; c0 < L; c0 += CHUNK) {
        const int w = (int)min((long long)CHUNK, L - c0);
        const int total = nrows * w;
        // element e of the staged block is row e / w, column e % w; BATCH loads are issued
        // before any is stored to shared memory, so they are in flight together
        for (int e0 = 0; e0 < total; e0 += BATCH * ROWS_BLOCK) {
            T tmp[BATCH];
#pragma unroll
            for (int u = 0; u < BATCH; ++u) {
                const int e = e0 + u * ROWS_BLOCK + tid;
                if (e < total) {
                    const int i = (w == CHUNK) ? e / CHUNK : e / w;
                    const long long l = c0 + (e - i * w);
                    tmp[u] = x[(r0 + i) * L + (reverse ? L - 1 - l : l)];
                }
            }
#pragma unroll
            for (int u = 0; u < BATCH; ++u) {
                const int e = e0 + u * ROWS_BLOCK + tid;
                if (e < total) {
                    const int i = (w == CHUNK) ? e / CHUNK : e / w;
                    buf[i * STRIDE + (e - i * w)] = tmp[u];
                }
            }
        }
        __syncthreads();
        if (tid < nrows) {
            T* row = &buf[tid * STRIDE];
            T ref = row[0];
            for (int j = 1; j < w; ++j) ref = nan_max(ref, row[j]);
            if (fast_ok(ref, row[0], carry)) {
                const Rebase<T> f = rebase(carry, ref);
                const T e0 = xexp(row[0] - ref);
                const Sole<T> so = sole(carry, row[0], e0);
                T acc = T(0);
                for (int j = 0; j < w; ++j) {
                    const T e = j == 0 ? e0 : xexp(row[j] - ref);
                    if (exclusive) {
                        row[j] = j == 0            ? value(carry)
                                 : (acc == so.s) ? so.out
                                                 : f.R + xlog(f.a + f.b * acc);
                        acc += e;
                    } else {
                        acc += e;
                        row[j] = (acc == so.s) ? so.out : f.R + xlog(f.a + f.b * acc);
                    }
                }
                carry = combine(carry, Pair<T>{ref, acc});
            } else {
                for (int j = 0; j < w; ++j) {
                    const T xv = row[j];
                    if (exclusive) row[j] = value(carry);
                    carry = combine(carry, Pair<T>{xv, T(1)});
                    if (!exclusive) row[j] = value(carry);
                }
            }
        }
        __syncthreads();
        for (int e = tid; e < total; e += ROWS_BLOCK) {
            const int i = (w == CHUNK) ? e / CHUNK : e / w;
            const long long l = c0 + (e - i * w);
            out[(r0 + i) * L + (reverse ? L - 1 - l : l)] = buf[i * STRIDE + (e - i * w)];
        }
        __syncthreads();
    }
}

// ---- group_rows: rows of up to 32 x ROUNDS x VEC elements, a group of G lanes a row --------
// Lane j of a row's group holds the row's chunks j, j + G, ..., j + (ROUNDS - 1) G of VEC
// consecutive elements, so the group's loads and stores are contiguous vector accesses and
// the row stays in registers: no shared memory, no barrier. A warp takes 32 / G rows at once,
// and U such sets one after another with all their loads issued first (bytes in flight).
// A row whose first element is within THRESHOLD of its maximum is summed against that
// maximum (one exp an element, one log an output); any other row (NaN, +-inf, all -inf,
// larger jumps) is scanned with exact pairwise combines across the group.
template <typename T, int G>
__device__ __forceinline__ T group_max(T v, unsigned mask) {
#pragma unroll
    for (int d = G / 2; d > 0; d >>= 1) v = nan_max(v, __shfl_xor_sync(mask, v, d, G));
    return v;
}
template <typename T, int G>
__device__ __forceinline__ Pair<T> group_shfl_up(Pair<T> p, int d, unsigned mask) {
    return Pair<T>{__shfl_up_sync(mask, p.m, d, G), __shfl_up_sync(mask, p.s, d, G)};
}
template <typename T, int G>
__device__ __forceinline__ Pair<T> group_shfl(Pair<T> p, int src, unsigned mask) {
    return Pair<T>{__shfl_sync(mask, p.m, src, G), __shfl_sync(mask, p.s, src, G)};
}

// The exact path of one row: pairwise combines across the group, the row read again from
// memory (out of line, so that the register rows of the fast path stay in registers).
template <typename T, int G>
__device__ __noinline__ void exact_group_row(const T* __restrict__ xr, T* __restrict__ outr,
                                             long long L, int sub, unsigned mask, int exclusive,
                                             int reverse) {
    constexpr int VEC = Vec<T>::N;
    Pair<T> carry = identity<T>();
    for (long long c0 = 0; c0 < L; c0 += (long long)G * VEC) {
        const long long l0 = c0 + (long long)sub * VEC;
        T v[VEC];
        load_chunk<T, VEC>(xr, L, l0, reverse, false, v);
        Pair<T> agg = identity<T>();
#pragma unroll
        for (int j = 0; j < VEC; ++j) agg = combine(agg, Pair<T>{v[j], T(1)});
        Pair<T> incl = agg;
#pragma unroll
        for (int d = 1; d < G; d <<= 1) {
            const Pair<T> u = group_shfl_up<T, G>(incl, d, mask);
            if (sub >= d) incl = combine(u, incl);
        }
        const Pair<T> up = group_shfl_up<T, G>(incl, 1, mask);
        Pair<T> run = combine(carry, sub == 0 ? identity<T>() : up);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const T xv = v[j];
            if (exclusive) v[j] = value(run);
            run = combine(run, Pair<T>{xv, T(1)});
            if (!exclusive) v[j] = value(run);
        }
        store_chunk<T, VEC>(outr, L, l0, reverse, false, v);
        carry = combine(carry, group_shfl<T, G>(incl, G - 1, mask));
    }
}

// The fast path of one row held by a group in v[][] (elements past the row are -inf), in
// place; false, with v[][] untouched, where the row needs the exact path.
template <typename T, int G, int ROUNDS>
__device__ __forceinline__ bool scan_group_row(T (&v)[ROUNDS][Vec<T>::N], int sub,
                                               unsigned mask, int exclusive) {
    constexpr int VEC = Vec<T>::N;
    T ref = v[0][0];
#pragma unroll
    for (int k = 0; k < ROUNDS; ++k)
#pragma unroll
        for (int j = 0; j < VEC; ++j) ref = nan_max(ref, v[k][j]);
    ref = group_max<T, G>(ref, mask);
    const T x0 = __shfl_sync(mask, v[0][0], 0, G);
    if (!fast_ok(ref, x0, identity<T>())) return false;
    // after an empty prefix: R = ref, a = 0, b = 1, and an output whose sum is still the first
    // term's is that term exactly (see `sole`)
    const T e0 = xexp(x0 - ref);
    T before_round = T(0);
#pragma unroll
    for (int k = 0; k < ROUNDS; ++k) {
        T acc = T(0);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const T e = xexp(v[k][j] - ref);
            v[k][j] = exclusive ? acc : acc + e;
            acc += e;
        }
        T incl = acc;
#pragma unroll
        for (int d = 1; d < G; d <<= 1) {
            const T u = __shfl_up_sync(mask, incl, d, G);
            if (sub >= d) incl += u;
        }
        // shifted, not incl - acc: that cancels when this chunk dwarfs the ones before
        const T up = __shfl_up_sync(mask, incl, 1, G);
        const T S = before_round + (sub == 0 ? T(0) : up);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const T s = S + v[k][j];
            v[k][j] = (s == e0) ? x0 : ref + xlog(s);
        }
        before_round += __shfl_sync(mask, incl, G - 1, G);
    }
    return true;
}

// Loads the U rows of batch `batch` of a group (rows past the end: -inf).
template <typename T, int G, int ROUNDS, int U>
__device__ __forceinline__ void load_rows(T (&v)[U][ROUNDS][Vec<T>::N],
                                          const T* __restrict__ x, long long rows, long long L,
                                          long long batch, int group, int sub, int reverse,
                                          int vector) {
    constexpr int VEC = Vec<T>::N, SETS = 32 / G;
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const long long row = batch * (SETS * U) + (long long)u * SETS + group;
#pragma unroll
        for (int k = 0; k < ROUNDS; ++k) {
            const long long l0 = ((long long)k * G + sub) * VEC;
            if (row < rows) {
                load_chunk<T, VEC>(x + row * L, L, l0, reverse, vector && l0 < L, v[u][k]);
            } else {
#pragma unroll
                for (int j = 0; j < VEC; ++j) v[u][k][j] = neg_inf<T>();
            }
        }
    }
}

// Scans and stores the U rows of batch `batch` of a group.
template <typename T, int G, int ROUNDS, int U>
__device__ __forceinline__ void scan_rows(T (&v)[U][ROUNDS][Vec<T>::N], const T* __restrict__ x,
                                          T* __restrict__ out, long long rows, long long L,
                                          long long batch, int group, int sub, unsigned mask,
                                          int exclusive, int reverse, int vector) {
    constexpr int VEC = Vec<T>::N, SETS = 32 / G;
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const long long row = batch * (SETS * U) + (long long)u * SETS + group;
        if (row >= rows) break;  // uniform in the group: its rows are the same
        if (!scan_group_row<T, G, ROUNDS>(v[u], sub, mask, exclusive)) {
            exact_group_row<T, G>(x + row * L, out + row * L, L, sub, mask, exclusive, reverse);
            continue;
        }
#pragma unroll
        for (int k = 0; k < ROUNDS; ++k) {
            const long long l0 = ((long long)k * G + sub) * VEC;
            store_chunk<T, VEC>(out + row * L, L, l0, reverse, vector && l0 < L, v[u][k]);
        }
    }
}

// A warp scans one batch: 32 / G x U rows, all their loads issued first.
template <typename T, int G, int ROUNDS, int U>
__global__ void __launch_bounds__(GROUP_ROWS_BLOCK, GROUP_ROWS_MIN_BLOCKS)
xpops_logcumsumexp_group_rows(const T* __restrict__ x, T* __restrict__ out,
                              const long long rows, const long long L, const int exclusive,
                              const int reverse, const int vector) {
    constexpr int VEC = Vec<T>::N;
    const int lane = threadIdx.x & 31, sub = lane & (G - 1), group = lane / G;
    const unsigned mask = G == 32 ? FULL_MASK : ((1u << G) - 1u) << (group * G);
    const long long batch = ((long long)blockIdx.x * GROUP_ROWS_BLOCK + threadIdx.x) >> 5;
    T v[U][ROUNDS][VEC];
    load_rows<T, G, ROUNDS, U>(v, x, rows, L, batch, group, sub, reverse, vector);
    scan_rows<T, G, ROUNDS, U>(v, x, out, rows, L, batch, group, sub, mask, exclusive, reverse,
                               vector);
}
"""

_CODE = PAIRS + WARP + FAST_PATH + CHUNKS + _SOURCE
_OPTIONS = (
    "-std=c++17",
    f"-DROWS_BLOCK={ROWS_BLOCK}",
    f"-DGROUP_ROWS_BLOCK={GROUP_ROWS_BLOCK}",
    f"-DGROUP_ROWS_MIN_BLOCKS={GROUP_ROWS_MIN_BLOCKS}",
)


@cupy.memoize(for_each_device=True)
def kernel(dtype_name: str) -> FastKernel:
    """The rows kernel of `dtype_name`, compiled for the current device on first use."""
    name = f"xpops_logcumsumexp_rows<{C_TYPES[dtype_name]}, {ROW_CHUNK[dtype_name]}>"
    module = cupy.RawModule(code=_CODE, options=_OPTIONS, name_expressions=[name])
    # x, out, rows, L, exclusive, reverse
    return FastKernel(module.get_function(name), "ppqqii")


def scan(
    x: cupy.ndarray, out: cupy.ndarray, rows: int, L: int, exclusive: bool, reverse: bool
) -> None:
    """The scan of the `rows` rows of length `L` of `x` (C-contiguous) into `out`."""
    kernel(dtype_name(x.dtype))(
        -(-rows // ROWS_BLOCK),
        ROWS_BLOCK,
        (x.data.ptr, out.data.ptr, rows, L, int(exclusive), int(reverse)),
    )


def group_rows_max_len(dtype_name: str) -> int:
    """The longest rows the group_rows kernel scans: 32 lanes of GROUP_ROWS_MAX_ROUNDS chunks."""
    return 32 * GROUP_ROWS_MAX_ROUNDS * VECTOR[dtype_name]


def group_layout(L: int, dtype_name: str) -> tuple[int, int, int]:
    """(G, ROUNDS, U) of group_rows for rows of length `L`: the fewest lanes (a power of two up
    to 32) that hold a row in GROUP_ROWS_RUN chunks each, at most GROUP_ROWS_MAX_ROUNDS, the
    rounds rounded up to a power of two, and as many rows a lane as fill GROUP_ROWS_ITEMS
    elements."""
    vec = VECTOR[dtype_name]
    chunks = -(-L // vec)
    lanes = min(32, 1 << (-(-chunks // GROUP_ROWS_RUN) - 1).bit_length())
    rounds = 1 << (-(-chunks // lanes) - 1).bit_length()
    return lanes, rounds, max(1, GROUP_ROWS_ITEMS[dtype_name] // (rounds * vec))


@cupy.memoize(for_each_device=True)
def group_kernel(dtype_name: str, lanes: int, rounds: int, u: int) -> FastKernel:
    """The group_rows kernel of `dtype_name` for rows held by `lanes` lanes in `rounds` rounds,
    `u` rows a lane (`group_layout`), compiled for the current device on first use."""
    name = f"xpops_logcumsumexp_group_rows<{C_TYPES[dtype_name]}, {lanes}, {rounds}, {u}>"
    module = cupy.RawModule(code=_CODE, options=_OPTIONS, name_expressions=[name])
    # x, out, rows, L, exclusive, reverse, vector
    return FastKernel(module.get_function(name), "ppqqiii")


def scan_groups(
    x: cupy.ndarray, out: cupy.ndarray, rows: int, L: int, exclusive: bool, reverse: bool
) -> None:
    """The scan of the `rows` rows of length `L` (at most `group_rows_max_len`) of `x`
    (C-contiguous) into `out` by the group_rows kernel."""
    name = dtype_name(x.dtype)
    lanes, rounds, u = group_layout(L, name)
    vec = VECTOR[name]
    align = 16
    vector = L % vec == 0 and x.data.ptr % align == 0 and out.data.ptr % align == 0
    rows_a_block = GROUP_ROWS_BLOCK // lanes * u
    group_kernel(name, lanes, rounds, u)(
        -(-rows // rows_a_block),
        GROUP_ROWS_BLOCK,
        (x.data.ptr, out.data.ptr, rows, L, int(exclusive), int(reverse), int(vector)),
    )
