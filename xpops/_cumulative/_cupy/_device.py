"""Device helpers shared by the kernel families of the CuPy scan, as CUDA source strings, and
the host side of the look-back state.

Each family module compiles its own RawModule from the groups it needs, in this order, then
its own kernels. A group is taken whole: templates a family never instantiates cost nothing,
and a helper no group holds is used by one family only and lives in that family's module.

* `PAIRS`: the ``(m, s)`` pairs every kernel scans, standing for ``m + log(s)``, their special
  values and their associative `combine`; the float32/float64 `xexp` and `xlog`. Every family.
* `WARP`: warp shuffles, scans and reductions of pairs and values. Tiles, totals and rows.
* `FAST_PATH`: whether a run may be summed against one reference, and the rebasing of its
  outputs onto the prefix before it. Tiles, columns and rows.
* `LOOK_BACK`: the slots of decoupled look-back (`look_back_state` allocates them). Tiles and
  columns.
* `CHUNKS`: vector loads and stores of chunks of consecutive elements, and a chunk's aggregate
  from its maximum and its sum against it. Tiles, totals and rows.
* `TILE_MATH`: the per-element exp and per-output log of the hot loops (`TileMath`), float64's
  from tables in shared memory. Tiles and columns.
* `GRAD_MAPS`: the backward's recurrence: its affine maps ``S -> b + a S``, each output's term
  and link, each input's weight. The backward kernels (`_backward`, `_grad_columns`).
"""

import cupy
import numpy as np

__all__ = [
    "CHUNKS",
    "FAST_PATH",
    "GRAD_MAPS",
    "LOOK_BACK",
    "PAIRS",
    "TILE_MATH",
    "VECTOR",
    "WARP",
    "look_back_state",
]

#: Elements of one vector access by dtype: ``Vec<T>::N`` of `CHUNKS`.
VECTOR = {"float32": 4, "float64": 2}

PAIRS = r"""
#include <cuda/std/limits>

template <typename T> struct Pair { T m; T s; };

// float32 uses the hardware approximations (ex2/lg2 units, denormals flushed): their error,
// a few 1e-7 relative, is far inside the float32 contract, and full-precision expf/logf made
// every kernel arithmetic-bound on an H100. float64 keeps exp/log.
__device__ __forceinline__ float xexp(float v) { return __expf(v); }
__device__ __forceinline__ double xexp(double v) { return exp(v); }
__device__ __forceinline__ float xlog(float v) { return __logf(v); }
__device__ __forceinline__ double xlog(double v) { return log(v); }

// A run may be summed against a reference `ref` when its smallest prefix is at least
// exp(-THRESHOLD) of exp(ref): terms lost below the smallest normal number (exp(-87) float32
// with denormals flushed, exp(-708) float64) are then under 1e-9 / 1e-20 of it, even summed
// over a block.
template <typename T> __device__ __forceinline__ T threshold();
template <> __device__ __forceinline__ float threshold<float>() { return 60.0f; }
template <> __device__ __forceinline__ double threshold<double>() { return 650.0; }
template <typename T> __device__ __forceinline__ T neg_inf() {
    return -cuda::std::numeric_limits<T>::infinity();
}
template <typename T> __device__ __forceinline__ T pos_inf() {
    return cuda::std::numeric_limits<T>::infinity();
}
template <typename T> __device__ __forceinline__ T qnan() {
    return cuda::std::numeric_limits<T>::quiet_NaN();
}
template <typename T> __device__ __forceinline__ Pair<T> identity() {
    return Pair<T>{neg_inf<T>(), T(0)};
}
// max that propagates NaN
template <typename T> __device__ __forceinline__ T nan_max(T a, T b) {
    return (a > b || isnan(a)) ? a : b;
}

// log(exp(a) + exp(b)) on pairs with every special value handled; commutative, associative.
template <typename T> __device__ __forceinline__ Pair<T> combine(Pair<T> a, Pair<T> b) {
    if (isnan(a.m) || isnan(b.m)) return Pair<T>{qnan<T>(), T(1)};
    if (b.m == neg_inf<T>()) return a;
    if (a.m == neg_inf<T>()) return b;
    if (a.m == pos_inf<T>() || b.m == pos_inf<T>()) return Pair<T>{pos_inf<T>(), T(1)};
    if (a.m >= b.m) return Pair<T>{a.m, a.s + b.s * xexp(b.m - a.m)};
    return Pair<T>{b.m, a.s * xexp(a.m - b.m) + b.s};
}
// m + log(s); exactly m where s == 1, as for the pair (x, 1) of a single finite term x (the
// float32 log2 approximation does not promise log(1) == 0). -inf + log(0) = -inf for the
// identity.
template <typename T> __device__ __forceinline__ T value(Pair<T> p) {
    return (p.s == T(1)) ? p.m : p.m + xlog(p.s);
}
"""

WARP = r"""
#define FULL_MASK 0xffffffffu

template <typename T> __device__ __forceinline__ Pair<T> shfl_pair(Pair<T> p, int src) {
    return Pair<T>{__shfl_sync(FULL_MASK, p.m, src), __shfl_sync(FULL_MASK, p.s, src)};
}
template <typename T> __device__ __forceinline__ Pair<T> shfl_up_pair(Pair<T> p, int d) {
    return Pair<T>{__shfl_up_sync(FULL_MASK, p.m, d), __shfl_up_sync(FULL_MASK, p.s, d)};
}
template <typename T> __device__ __forceinline__ Pair<T> shfl_xor_pair(Pair<T> p, int d) {
    return Pair<T>{__shfl_xor_sync(FULL_MASK, p.m, d), __shfl_xor_sync(FULL_MASK, p.s, d)};
}
template <typename T> __device__ __noinline__ Pair<T> warp_inclusive_scan(Pair<T> p, int lane) {
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        Pair<T> o = shfl_up_pair(p, d);
        if (lane >= d) p = combine(o, p);
    }
    return p;
}
template <typename T> __device__ __forceinline__ Pair<T> warp_reduce(Pair<T> p) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) p = combine(p, shfl_xor_pair(p, d));
    return p;
}
template <typename T> __device__ __forceinline__ T warp_max(T v) {
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) v = nan_max(v, __shfl_xor_sync(FULL_MASK, v, d));
    return v;
}
template <typename T> __device__ __forceinline__ T warp_inclusive_sum(T v, int lane) {
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const T u = __shfl_up_sync(FULL_MASK, v, d);
        if (lane >= d) v += u;
    }
    return v;
}
"""

FAST_PATH = r"""
// Whether a run with maximum `ref` and first element `x0`, after the prefix `P`, may use the
// fast path: its smallest output, at least max(value(P), x0), is within THRESHOLD of `ref`.
template <typename T> __device__ __forceinline__ bool fast_ok(T ref, T x0, Pair<T> P) {
    if (!isfinite(ref)) return false;
    const T plog = value(P);
    if (isnan(plog) || plog == pos_inf<T>()) return false;
    const T low = plog > x0 ? plog : x0;
    return ref - low <= threshold<T>();
}

// The bits of n; log of the largest finite value (rounded down).
__host__ __device__ constexpr int bit_width(unsigned long long n) {
    return n ? 1 + bit_width(n >> 1) : 0;
}
template <typename T> __device__ __forceinline__ T log_max();
template <> __device__ __forceinline__ float log_max<float>() { return 88.72f; }
template <> __device__ __forceinline__ double log_max<double>() { return 709.78; }

// A tile off the fast path against its maximum B whose prefix is empty (every output is then
// at least its first element x0), x0 more than THRESHOLD below B: against x0 + THRESHOLD - 1
// instead, it is on the fast path if every term of its N stays within the headroom below (its
// sums in range). That reference, or NaN where none serves.
template <typename T, long long N>
__device__ __forceinline__ T lifted_reference(T B, T x0, Pair<T> P) {
    // every term at most exp(headroom): a sum of N of them below half the largest finite value
    const T headroom = log_max<T>() - T(0.6931471805599453) * T(bit_width(N));
    const T lift = threshold<T>() - T(1), gap = B - x0;
    const bool ok = P.m == neg_inf<T>() && isfinite(B) && gap > threshold<T>() &&
                    gap <= lift + headroom;
    return ok ? x0 + lift : qnan<T>();
}

// The fast path writes an output as R + log(a + b * c), c a sum against `ref` of the run's
// own elements, after the prefix P: R = max(P.m, ref), a = P.s exp(P.m - R), b = exp(ref - R).
template <typename T> struct Rebase { T R, a, b; };
template <typename T> __device__ __forceinline__ Rebase<T> rebase(Pair<T> P, T ref) {
    const T R = P.m > ref ? P.m : ref;
    return Rebase<T>{R, (P.m == neg_inf<T>()) ? T(0) : P.s * xexp(P.m - R), xexp(ref - R)};
}

// An output whose prefix holds a single finite term x is x exactly, which R + log(a + b * s)
// is not where x != ref (exp(x - ref) and its log are rounded against ref). Such outputs are
// those whose run sum s equals `s` below, and the output there is `out`; each output costs one
// compare and select, and no exp or log is added:
// * after the prefix (x, 1), the pair of a single finite term: where the run has added nothing
//   yet (s == 0) the output is x;
// * after nothing: the run's first element x0 (finite on the fast path) is the first finite
//   term, and where s is still its own term e0 = exp(x0 - ref) the output is x0 (later terms
//   that leave s unchanged are below half an ulp of it);
// * after any other prefix: none (NaN: s is never NaN on the fast path).
template <typename T> struct Sole { T s, out; };
template <typename T> __device__ __forceinline__ Sole<T> sole(Pair<T> P, T x0, T e0) {
    if (P.m == neg_inf<T>()) return Sole<T>{e0, x0};
    if (P.s == T(1)) return Sole<T>{T(0), P.m};
    return Sole<T>{qnan<T>(), T(0)};
}
"""

LOOK_BACK = r"""
// Look-back slots: each tile (or column of a tile) publishes its aggregate in `aggs` and
// later its inclusive prefix in `incls`. Every slot is written once, word by word, over memory
// set to all-one bits beforehand (a NaN payload no computation here produces: NaNs published
// are the canonical quiet NaN, and sums are never NaN). A reader waits until both words of a
// slot have left that pattern, so no flag and no memory fence are needed.
__device__ __forceinline__ bool ready(float v) { return __float_as_uint(v) != 0xffffffffu; }
__device__ __forceinline__ bool ready(double v) {
    return __double_as_longlong(v) != (long long)0xffffffffffffffffull;
}
template <typename T> __device__ __forceinline__ void publish(Pair<T>* slot, Pair<T> p) {
    volatile T* s = reinterpret_cast<volatile T*>(slot);
    s[0] = p.m;
    s[1] = p.s;
}
template <typename T> __device__ __forceinline__ Pair<T> read_slot(const Pair<T>* slot) {
    const volatile T* s = reinterpret_cast<const volatile T*>(slot);
    return Pair<T>{s[0], s[1]};
}
// The look-back state, one allocation (see look_back_state): a tile counter, then `slots`
// aggregate slots, then `slots` inclusive-prefix slots.
template <typename T> struct LookBack {
    unsigned long long* counter;
    Pair<T>* aggs;
    Pair<T>* incls;
    __device__ __forceinline__ LookBack(unsigned long long* state, long long slots)
        : counter(state), aggs(reinterpret_cast<Pair<T>*>(state + 1)), incls(aggs + slots) {}
};
// Wait for tile p: 2 with its inclusive prefix, or 1 with its aggregate.
template <typename T>
__device__ __forceinline__ int wait_slot(const Pair<T>* aggs, const Pair<T>* incls,
                                         long long p, Pair<T>& val) {
    while (true) {  // both slots in one round trip
        const Pair<T> inc = read_slot(&incls[p]);
        const Pair<T> agg = read_slot(&aggs[p]);
        if (ready(inc.m) && ready(inc.s)) {
            val = inc;
            return 2;
        }
        if (ready(agg.m) && ready(agg.s)) {
            val = agg;
            return 1;
        }
    }
}
"""

CHUNKS = r"""
template <typename T> struct Vec;
template <> struct Vec<float> { using type = float4; static constexpr int N = 4; };
template <> struct Vec<double> { using type = double2; static constexpr int N = 2; };

template <typename T, int VEC>
__device__ __forceinline__ void load_chunk(const T* __restrict__ xr, long long L, long long l0,
                                           int reverse, bool vector, T* v) {
    using V = typename Vec<T>::type;
    if (vector) {  // whole chunk in range and aligned
        const V w = *reinterpret_cast<const V*>(xr + (reverse ? L - VEC - l0 : l0));
        const T* e = reinterpret_cast<const T*>(&w);
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[j] = e[reverse ? VEC - 1 - j : j];
    } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const long long l = l0 + j;
            v[j] = l < L ? xr[reverse ? L - 1 - l : l] : neg_inf<T>();
        }
    }
}

template <typename T, int VEC>
__device__ __forceinline__ void store_chunk(T* __restrict__ outr, long long L, long long l0,
                                            int reverse, bool vector, const T* v) {
    using V = typename Vec<T>::type;
    if (vector) {
        V w;
        T* e = reinterpret_cast<T*>(&w);
#pragma unroll
        for (int j = 0; j < VEC; ++j) e[reverse ? VEC - 1 - j : j] = v[j];
        *reinterpret_cast<V*>(outr + (reverse ? L - VEC - l0 : l0)) = w;
    } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const long long l = l0 + j;
            if (l < L) outr[reverse ? L - 1 - l : l] = v[j];
        }
    }
}

// The aggregate of a tile from its maximum B and, for finite B, its sum against B.
template <typename T> __device__ __forceinline__ Pair<T> tile_total(T B, T sum) {
    if (isfinite(B)) return Pair<T>{B, sum};
    if (isnan(B)) return Pair<T>{qnan<T>(), T(1)};
    if (B == pos_inf<T>()) return Pair<T>{pos_inf<T>(), T(1)};
    return identity<T>();  // every element -inf
}
"""

TILE_MATH = r"""
// The per-element exp and per-output log of the tiles and columns kernels, a __shared__ object
// filled by the block (`fill`, then a barrier before use). float32: the hardware forms of xexp.
// float64: tables of 2^(j/64) and of 1 / (1 + (i + 1/2) / 64) and its log in shared memory, and
// short polynomials, with no float/int conversion instructions (the 1.5 * 2^52 shift trick):
// half the float64 instructions of exp() and log() (17 and 33 in PTX) in the hot loops. Within
// a few ulp. Arguments where the short forms do not hold (subnormal results, 0, inf, NaN) call
// exp() and log() out of line: inlined at every element of a tile, they crowd the instruction
// cache.
__device__ __noinline__ double exp_call(double v) { return exp(v); }
__device__ __noinline__ double log_call(double v) { return log(v); }
template <typename T> struct TileMath;
template <> struct TileMath<float> {
    __device__ __forceinline__ void fill() {}
    __device__ __forceinline__ float exp(float v) const { return __expf(v); }
    __device__ __forceinline__ float log(float v) const { return __logf(v); }
};
template <> struct TileMath<double> {
    double up[64], rcp[64], lg[64];  // 2^(j/64); 1 / (1 + (i + 1/2) / 64); -log(rcp[i])
    static constexpr double INV_STEP = 92.33248261689366;  // 64 / ln 2
    // ln 2 / 64 as STEP_HI + STEP_LO, STEP_HI with 17 trailing zero bits: k * STEP_HI is exact
    static constexpr double STEP_HI = 0.010830424696223417, STEP_LO = 2.572804622327669e-14;
    // ln 2 as LN2_HI + LN2_LO, LN2_HI with 12 trailing zero bits: n * LN2_HI is exact
    static constexpr double LN2_HI = 0.693147180559663, LN2_LO = 2.8235290563031577e-13;
    static constexpr double SHIFT = 6755399441055744.0;  // 1.5 * 2^52
    __device__ __forceinline__ void fill() {
        for (int j = threadIdx.x; j < 64; j += blockDim.x) {
            up[j] = exp2(j / 64.0);
            rcp[j] = 1.0 / (1.0 + (j + 0.5) / 64.0);
            lg[j] = -::log(rcp[j]);
        }
    }
    __device__ __forceinline__ double exp(double v) const {
        if (!(v > -707.0 && v < 709.0)) return exp_call(v);
        const double t = fma(v, INV_STEP, SHIFT);  // SHIFT + k, k = rint(v * INV_STEP)
        const int k = __double2loint(t);
        const double kd = t - SHIFT;
        const double r = fma(kd, -STEP_LO, fma(kd, -STEP_HI, v));  // |r| <= ln 2 / 128
        double q = fma(r, 1.0 / 120, 1.0 / 24);
        q = fma(q, r, 1.0 / 6);
        q = fma(q, r, 0.5);
        q = fma(q, r, 1.0);
        q *= r;  // exp(r) - 1, error r^6 / 720 < 4e-17
        const double u = up[k & 63];
        const double y = fma(u, q, u);
        return __longlong_as_double(__double_as_longlong(y) + ((long long)(k >> 6) << 52));
    }
    __device__ __forceinline__ double log(double y) const {
        if (!(y >= 2.2250738585072014e-308 && y <= 1.7976931348623157e308)) return log_call(y);
        const int hi = __double2hiint(y);
        const int i = (hi >> 14) & 63;  // the top 6 bits of the mantissa
        const double m = __hiloint2double((hi & 0x000FFFFF) | 0x3FF00000, __double2loint(y));
        const double e = fma(m, rcp[i], -1.0);  // |e| < 1/128
        double q = fma(e, 1.0 / 7, -1.0 / 6);
        q = fma(q, e, 1.0 / 5);
        q = fma(q, e, -0.25);
        q = fma(q, e, 1.0 / 3);
        q = fma(q, e, -0.5);
        const double l1p = fma(e * e, q, e);  // log(1 + e), error e^8 / 8 < 2e-18
        // the exponent n as a double by the same shift (n + 2^31 in the low word)
        const double n = __hiloint2double(0x43380000, ((hi >> 20) - 1023) ^ 0x80000000) -
                         (SHIFT + 2147483648.0);
        return fma(n, LN2_HI, fma(n, LN2_LO, l1p) + lg[i]);
    }
};
"""


GRAD_MAPS = r"""
// Maps S -> b + a S as Pair<T>{a, b} (the look-back slots' storage).
template <typename T> __device__ __forceinline__ Pair<T> map_identity() {
    return Pair<T>{T(1), T(0)};
}
// `later` after `earlier` (scan order): S -> later.b + later.a (earlier.b + earlier.a S)
template <typename T> __device__ __forceinline__ Pair<T> compose(Pair<T> earlier, Pair<T> later) {
    return Pair<T>{later.m * earlier.m, fma(later.m, earlier.s, later.s)};
}
// The recurrence's term at an output y of cotangent g: g where y is finite; none (0) where y
// is -inf or g is 0; 0 * g at +inf (NaN for an infinite or NaN g); NaN at a NaN output.
template <typename T> __device__ __forceinline__ T grad_term(T y, T g) {
    if (isfinite(y)) return g;
    if (y == neg_inf<T>() || g == T(0)) return T(0);
    return (y == pos_inf<T>()) ? g * T(0) : qnan<T>();
}
// The link exp(y - y_next) from the output after y in the forward's order (+inf past the
// end); undefined links (inf - inf, NaN outputs) carry nothing.
template <typename T> __device__ __forceinline__ T grad_link(T y, T y_next) {
    const T a = xexp(y - y_next);
    return isnan(a) ? T(0) : a;
}
// exp(x - y), the weight of S in the input's cotangent; NaN for an input of NaN or +inf
template <typename T> __device__ __forceinline__ T grad_weight(T x, T y) {
    if (isnan(x) || x == pos_inf<T>()) return qnan<T>();
    const T w = xexp(x - y);
    return isnan(w) ? T(0) : w;
}
"""


def look_back_state(slots: int, dtype: np.dtype) -> cupy.cuda.MemoryPointer:
    """The look-back state of a scan with `slots` slots, all bits set: a tile counter (which
    starts at 2**64 - 1: the kernels add one to what ``atomicAdd`` returns), then `slots`
    aggregate (m, s) pairs, then `slots` inclusive-prefix pairs.

    One allocation from CuPy's pool (no array around it), one memset and one kernel argument
    (the pointer's ``ptr``): the least host time before the launch, time in which the GPU idles
    before a short scan. Views into it for the three parts cost about 13 us a call, the
    allocation and launch of a separate zeroed counter about 10 us, and an array around the
    allocation 1.4-2.6 us more (an H200 host: ``cupy.empty`` 2.2-4.0 against 0.8-1.4 us).
    """
    nbytes = 8 + 2 * slots * 2 * dtype.itemsize  # the counter, then two pairs a slot
    state = cupy.cuda.alloc(nbytes)
    stream = cupy.cuda.get_current_stream().ptr
    cupy.cuda.runtime.memsetAsync(state.ptr, 0xFF, nbytes, stream)
    return state
