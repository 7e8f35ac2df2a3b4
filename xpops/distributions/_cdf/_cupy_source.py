"""CUDA source of the multivariate normal CDF kernels (built by `_cupy`): device functions of
the 1-D normal (log) probabilities and their inverses in namespace ``xpops_mvn``, and the three
kernels ``xpops_mvn_cdf_prioritize``, ``xpops_mvn_cdf_sample`` and ``xpops_mvn_cdf_round``.

``XPOPS_NSHIFTS`` (the shifts a round) and ``XPOPS_LOG_RTOL`` are defined at compile time
from `_genz.NSHIFTS` and `_genz.LOG_RTOL`.
"""

__all__ = ["SOURCE"]

SOURCE = r"""
#include <cuda/std/limits>

#ifndef XPOPS_NSHIFTS
#define XPOPS_NSHIFTS 10
#endif

namespace xpops_mvn {

constexpr double SQRT1_2 = 0.70710678118654752440;
constexpr double SQRT_2_OVER_PI = 0.79788456080286535588;
constexpr double LOG_SQRT_2PI = 0.91893853320467274178;
constexpr double LN2 = 0.69314718055994530942;

__device__ __forceinline__ double pos_inf() {
    return cuda::std::numeric_limits<double>::infinity();
}
__device__ __forceinline__ double qnan() {
    return cuda::std::numeric_limits<double>::quiet_NaN();
}
__device__ __forceinline__ double nan_max(double a, double b) {  // NaN wins (fmax drops it)
    return isnan(a) ? a : (isnan(b) ? b : fmax(a, b));
}
__device__ __forceinline__ double clip(double x, double lo, double hi) {  // NaN stays NaN
    return x < lo ? lo : (x > hi ? hi : x);
}

// log(1 - exp(x)) for x <= 0 (-inf at 0)
__device__ __forceinline__ double log1mexp(double x) {
    return x > -LN2 ? log(-expm1(x)) : log1p(-exp(x));
}

__device__ __forceinline__ double logaddexp(double x, double y) {
    const double m = x > y ? x : y;
    if (m == -pos_inf()) return m;
    return m + log1p(exp(-fabs(x - y)));
}

// log Phi(x): the upper side through the small complement, the lower tail through erfcx
// (Phi(x) = erfcx(t) exp(-t^2) / 2 with t = -x / sqrt 2), finite down to x ~ -1e154.
__device__ __forceinline__ double log_ndtr(double x) {
    if (x > 0.0) return log1p(-normcdf(-x));
    if (x >= -1.0) return log(normcdf(x));
    return log(0.5 * erfcx(-x * SQRT1_2)) - 0.5 * x * x;
}

// x with log Phi(x) = y, for y <= 0.
__device__ __noinline__ double ndtri_exp(double y) {
    if (y > -LN2) return y < 0.0 ? -normcdfinv(-expm1(y)) : (y == 0.0 ? pos_inf() : qnan());
    if (y > -700.0) return normcdfinv(exp(y));  // exp(y) comfortably normal
    if (!(y > -pos_inf())) return y;            // -inf (or NaN)
    // log Phi(x) ~ -x^2/2 - log(-x) - log sqrt(2 pi): a start within 1e-3 relative, then
    // Newton on log_ndtr (derivative phi/Phi = sqrt(2/pi) / erfcx(-x/sqrt 2)): 1e-6, 1e-12,
    // then rounding.
    const double t = -2.0 * y;
    double x = -sqrt(t - log(t) - 2.0 * LOG_SQRT_2PI);
    for (int it = 0; it < 4; ++it) {
        const double f = log_ndtr(x) - y;
        x -= f * erfcx(-x * SQRT1_2) / SQRT_2_OVER_PI;
    }
    return x;
}

// P(a < Z <= b), computed on the side where both tails are small (NumPy engine's norm_cdf)
__device__ double interval_prob(double a, double b) {
    if (!(a < b)) return (isnan(a) || isnan(b)) ? qnan() : 0.0;
    const bool flip = a + b > 0.0;
    const double lo = flip ? -b : a, hi = flip ? -a : b;
    const double out = hi <= -1.0 ? normcdf(hi) - normcdf(lo)
                                  : 0.5 * (erf(hi * SQRT1_2) - erf(lo * SQRT1_2));
    return clip(out, 0.0, 1.0);
}

// log P(a < Z <= b) (NumPy engine's log_norm_cdf)
__device__ double log_interval_prob(double a, double b) {
    if (!(a < b)) return (isnan(a) || isnan(b)) ? qnan() : -pos_inf();
    const bool flip = a + b > 0.0;
    const double lo = flip ? -b : a, hi = flip ? -a : b;
    double out;
    if (hi <= -1.0) {
        const double lhi = log_ndtr(hi);
        out = lhi + log1mexp(fmin(log_ndtr(lo) - lhi, 0.0));  // rounding may make it > 0
    } else {
        out = log(0.5 * (erf(hi * SQRT1_2) - erf(lo * SQRT1_2)));
    }
    return out > 0.0 ? 0.0 : out;
}

// E[Z | al < Z <= be] given lp = log P(al < Z <= be)
__device__ double trunc_mean(double al, double be, double lp) {
    const double m =
        exp(-0.5 * al * al - LOG_SQRT_2PI - lp) - exp(-0.5 * be * be - LOG_SQRT_2PI - lp);
    if (isfinite(m)) return m;
    const double fb = isfinite(al) ? (isfinite(be) ? 0.5 * (al + be) : al) : be;
    return isfinite(fb) ? fb : 0.0;
}

// Genz-Bretz prioritization and Cholesky factor of one problem, in place (the NumPy engine's
// _prioritize): a, b (D) are reordered, sigma (D x D) is permuted, c (D x D, zero on entry)
// gets the lower factor (columns of degenerate variables 0), deg (D) the degenerate flags.
// y and diag0 are scratch of D doubles.
__device__ void prioritize_one(double* a, double* b, double* sigma, double* c, unsigned char* deg,
                               double* y, double* diag0, int D, double deg_rtol) {
    for (int j = 0; j < D; ++j) diag0[j] = sigma[(long long)j * D + j];
    for (int i = 0; i < D; ++i) {
        int m = i;
        double best = 0.0, sd_m = 1.0, al_m = 0.0, be_m = 0.0;
        bool dg_m = false;
        for (int j = i; j < D; ++j) {
            const double* cj = c + (long long)j * D;
            double ss = 0.0, mu = 0.0;
            for (int k = 0; k < i; ++k) {
                ss += cj[k] * cj[k];
                mu += cj[k] * y[k];
            }
            const double v = sigma[(long long)j * D + j] - ss;
            const bool dg = v <= deg_rtol * diag0[j];
            const double sd = sqrt(dg ? 1.0 : v);
            const double al = (a[j] - mu) / sd, be = (b[j] - mu) / sd;
            const double prob =
                dg ? ((a[j] < mu && mu <= b[j]) ? 1.0 : 0.0) : interval_prob(al, be);
            if (j == i || prob < best) {  // the first smallest, as numpy.argmin
                m = j; best = prob; sd_m = sd; al_m = al; be_m = be; dg_m = dg;
            }
        }
        if (m != i) {
            double t;
            t = a[i]; a[i] = a[m]; a[m] = t;
            t = b[i]; b[i] = b[m]; b[m] = t;
            t = diag0[i]; diag0[i] = diag0[m]; diag0[m] = t;
            for (int k = 0; k < D; ++k) {  // rows, then columns
                t = sigma[(long long)i * D + k];
                sigma[(long long)i * D + k] = sigma[(long long)m * D + k];
                sigma[(long long)m * D + k] = t;
            }
            for (int k = 0; k < D; ++k) {
                t = sigma[(long long)k * D + i];
                sigma[(long long)k * D + i] = sigma[(long long)k * D + m];
                sigma[(long long)k * D + m] = t;
            }
            for (int k = 0; k < i; ++k) {
                t = c[(long long)i * D + k];
                c[(long long)i * D + k] = c[(long long)m * D + k];
                c[(long long)m * D + k] = t;
            }
        }
        deg[i] = dg_m ? 1 : 0;
        const double* ci = c + (long long)i * D;
        c[(long long)i * D + i] = dg_m ? 0.0 : sd_m;
        for (int j = i + 1; j < D; ++j) {
            double* cj = c + (long long)j * D;
            double col = sigma[(long long)j * D + i];
            for (int k = 0; k < i; ++k) col -= cj[k] * ci[k];
            cj[i] = dg_m ? 0.0 : col / sd_m;
        }
        y[i] = dg_m ? 0.0 : trunc_mean(al_m, be_m, log_interval_prob(al_m, be_m));
    }
}

// (k z) mod n for k, z < n < 2^63, as a double. Up to n = 2^26 the product is exact in
// double precision and the quotient estimate from the reciprocal rn = 1/n is off by at most
// one (fixed); above, 64-bit integer arithmetic (slower: the remainder is a software routine).
__device__ __forceinline__ double lattice_mod(unsigned long long k, unsigned long long z,
                                              unsigned long long n, double dn, double rn) {
    if (n <= (1ull << 26)) {
        const double kz = (double)k * (double)z;
        double r = fma(-dn, floor(kz * rn), kz);
        if (r < 0.0) r += dn;
        if (r >= dn) r -= dn;
        return r;
    }
    if (n <= 0xFFFFFFFFull) return (double)((k * z) % n);
    unsigned long long r = 0;  // double-and-add
    while (z) {
        if (z & 1ull) r = r >= n - k ? r - (n - k) : r + k;
        z >>= 1;
        k = k >= n - k ? k - (n - k) : k + k;
    }
    return (double)r;
}

// The integrand (its log when LOG) at lattice point k of n (the NumPy engine's _sample):
// a, b, deg (D), cs the packed lower factor (row i at i (i + 1) / 2), rcd the reciprocals of
// its diagonal, z and shift (D - 1). With LOG, a variable whose probabilities are normal
// numbers (upper end above -37, the point's conditional probability above 1e-300) takes the
// linear formulas and one log; the far tails take log_ndtr and ndtri_exp.
template <int DMAX, bool LOG>
__device__ double integrand(unsigned long long k, unsigned long long n,
                            const unsigned long long* z, const double* shift, const double* a,
                            const double* b, const double* cs, const double* rcd,
                            const unsigned char* deg, int D, double y_clip) {
    double y[DMAX];
    double acc = LOG ? 0.0 : 1.0;
    const double dn = (double)n, rn = 1.0 / dn;
    for (int i = 0; i < D; ++i) {
        const double* ci = cs + i * (i + 1) / 2;
        double s = 0.0;
        for (int j = 0; j < i; ++j) s += ci[j] * y[j];
        const bool last = i == D - 1;
        double u = 0.0;
        if (!last) {
            double base = lattice_mod(k, z[i], n, dn, rn) * rn + shift[i];
            base -= floor(base);
            u = 1.0 - fabs(2.0 * base - 1.0);  // baker's transform
        }
        if (deg[i]) {  // a degenerate variable: its conditional value is s
            const bool in = a[i] < s && s <= b[i];
            if (LOG) acc += in ? 0.0 : -pos_inf(); else acc *= in ? 1.0 : 0.0;
            y[i] = 0.0;
        } else {
            const double al = (a[i] - s) * rcd[i], be = (b[i] - s) * rcd[i];
            const bool flip = al + be > 0.0;  // use the side where both tails are small
            const double lo = flip ? -be : al, hi = flip ? -al : be;
            if (flip) u = 1.0 - u;
            double yv = 0.0;
            bool linear = !LOG || hi > -37.0;
            double pl = 0.0, e = 0.0, t = 0.0;
            if (linear) {
                pl = normcdf(lo);
                e = normcdf(hi) - pl;
                t = pl + u * e;
                if (LOG) linear = e > 0.0 && t > 1e-300;
            }
            if (!LOG) {
                acc *= e;
                if (!last && acc != 0.0) yv = normcdfinv(clip(t, 0.0, 1.0));
            } else if (linear) {
                acc += log(e);
                if (!last) yv = normcdfinv(clip(t, 0.0, 1.0));
            } else {
                const double lpl = log_ndtr(lo), lph = log_ndtr(hi);
                const double le = lph + log1mexp(fmin(lpl - lph, 0.0));
                acc += le;
                if (!last && acc > -pos_inf()) {
                    const double tl = logaddexp(lpl, log(u) + le);
                    yv = ndtri_exp(tl > 0.0 ? 0.0 : tl);
                }
            }
            y[i] = clip(flip ? -yv : yv, -y_clip, y_clip);
        }
        if (LOG ? !(acc > -pos_inf()) : acc == 0.0) break;  // the rest cannot change it
    }
    return acc;
}

struct LogPair { double m, s; };  // m + log(s)

__device__ __forceinline__ LogPair combine(LogPair p, LogPair q) {  // symmetric
    if (q.m == -pos_inf()) return p;
    if (p.m == -pos_inf()) return q;
    if (p.m >= q.m) return LogPair{p.m, p.s + q.s * exp(q.m - p.m)};
    return LogPair{q.m, q.s + p.s * exp(p.m - q.m)};
}

}  // namespace xpops_mvn

// One thread a problem: T problems of D variables, arrays in place (see prioritize_one).
template <int DMAX>
__global__ void xpops_mvn_cdf_prioritize(double* __restrict__ a, double* __restrict__ b,
                                         double* __restrict__ sigma, double* __restrict__ c,
                                         unsigned char* __restrict__ deg, long long T, int D,
                                         double deg_rtol) {
    double y[DMAX], diag0[DMAX];
    for (long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x; p < T;
         p += (long long)gridDim.x * blockDim.x) {
        const long long dd = (long long)D * D;
        xpops_mvn::prioritize_one(a + p * D, b + p * D, sigma + p * dd, c + p * dd, deg + p * D,
                                  y, diag0, D, deg_rtol);
    }
}

// A block per (active problem ia, shift, chunk) over a flat, grid-strided block index: the
// block's threads evaluate the points k = chunk * ppt * THREADS + q * THREADS + threadIdx.x
// (q < ppt, k < n) and write their sum (LOG: the (max, sum exp(f - max)) pair) to
// part[(ia * NSHIFTS + shift) * nchunks + chunk] (LOG: two doubles).
template <int DMAX, int THREADS, bool LOG>
__global__ void __launch_bounds__(THREADS)
xpops_mvn_cdf_sample(const double* __restrict__ a, const double* __restrict__ b,
                     const double* __restrict__ c, const unsigned char* __restrict__ deg,
                     const long long* __restrict__ active, long long nact, int D,
                     const long long* __restrict__ z, const double* __restrict__ shifts,
                     long long n, long long nchunks, long long ppt, double y_clip,
                     double* __restrict__ part) {
    using namespace xpops_mvn;
    __shared__ double cs[DMAX * (DMAX + 1) / 2];
    __shared__ double as[DMAX], bs[DMAX], sh[DMAX], rcd[DMAX];
    __shared__ unsigned long long zs[DMAX];
    __shared__ unsigned char dg[DMAX];
    __shared__ double red_m[THREADS / 32], red_s[THREADS / 32];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const long long total = nact * XPOPS_NSHIFTS * nchunks;
    for (long long blk = blockIdx.x; blk < total; blk += gridDim.x) {
        const long long chunk = blk % nchunks;
        const long long rest = blk / nchunks;
        const int shift = (int)(rest % XPOPS_NSHIFTS);
        const long long ia = rest / XPOPS_NSHIFTS;
        const long long p = active[ia];
        __syncthreads();  // the previous block's readers are done with the shared arrays
        for (int t = tid; t < D; t += THREADS) {
            as[t] = a[p * D + t];
            bs[t] = b[p * D + t];
            dg[t] = deg[p * D + t];
            if (t < D - 1) {
                zs[t] = (unsigned long long)z[t];
                sh[t] = shifts[(long long)shift * (D - 1) + t];
            }
        }
        for (int i = 0; i < D; ++i) {
            const double* ci = c + (p * D + i) * D;
            for (int j = tid; j <= i; j += THREADS) cs[i * (i + 1) / 2 + j] = ci[j];
            if (tid == 0) rcd[i] = deg[p * D + i] ? 1.0 : 1.0 / ci[i];
        }
        __syncthreads();
        const long long k0 = chunk * ppt * THREADS + tid;
        double acc_m = LOG ? -pos_inf() : 0.0, acc_s = 0.0;
        for (long long q = 0; q < ppt; ++q) {
            const long long k = k0 + q * THREADS;
            if (k >= n) break;
            const double f = integrand<DMAX, LOG>((unsigned long long)k, (unsigned long long)n,
                                                  zs, sh, as, bs, cs, rcd, dg, D, y_clip);
            if (LOG) {
                const LogPair r = combine(LogPair{acc_m, acc_s}, LogPair{f, 1.0});
                acc_m = r.m;
                acc_s = r.s;
            } else {
                acc_m += f;
            }
        }
        // butterfly within warps (every lane gets the same value), then warps in order
        for (int d = 16; d > 0; d >>= 1) {
            const double om = __shfl_xor_sync(0xffffffffu, acc_m, d);
            if (LOG) {
                const double os = __shfl_xor_sync(0xffffffffu, acc_s, d);
                const LogPair r = combine(LogPair{acc_m, acc_s}, LogPair{om, os});
                acc_m = r.m;
                acc_s = r.s;
            } else {
                acc_m += om;
            }
        }
        if (lane == 0) {
            red_m[warp] = acc_m;
            red_s[warp] = acc_s;
        }
        __syncthreads();
        if (tid == 0) {
            double m = red_m[0], s = red_s[0];
            for (int w = 1; w < THREADS / 32; ++w) {
                if (LOG) {
                    const LogPair r = combine(LogPair{m, s}, LogPair{red_m[w], red_s[w]});
                    m = r.m;
                    s = r.s;
                } else {
                    m += red_m[w];
                }
            }
            if (LOG) {
                part[2 * blk] = m;
                part[2 * blk + 1] = s;
            } else {
                part[blk] = m;
            }
        }
    }
}

// A thread per active problem: the shift means from the chunk partials, then the round's
// update of the NumPy engine's loop (inverse-variance combination, value, error, done flag).
template <bool LOG>
__global__ void xpops_mvn_cdf_round(const double* __restrict__ part, long long nact,
                                    long long nchunks, long long n,
                                    const long long* __restrict__ active,
                                    const long long* __restrict__ todo, double* __restrict__ est,
                                    double* __restrict__ var, double* __restrict__ ref,
                                    int first, int over, double abseps, double releps,
                                    double err_factor, double* __restrict__ value,
                                    double* __restrict__ error, unsigned char* __restrict__ done) {
    using namespace xpops_mvn;
    constexpr int NS = XPOPS_NSHIFTS;
    for (long long ia = blockIdx.x * (long long)blockDim.x + threadIdx.x; ia < nact;
         ia += (long long)gridDim.x * blockDim.x) {
        const long long p = active[ia];
        double means[NS];
        for (int j = 0; j < NS; ++j) {
            const long long base = (ia * NS + j) * nchunks;
            if (LOG) {
                double m = -pos_inf();
                for (long long q = 0; q < nchunks; ++q) m = nan_max(m, part[2 * (base + q)]);
                double s = 0.0;
                if (m > -pos_inf())
                    for (long long q = 0; q < nchunks; ++q)
                        s += part[2 * (base + q) + 1] * exp(part[2 * (base + q)] - m);
                means[j] = m > -pos_inf() ? m + log(s) - log((double)n) : m;
            } else {
                double s = 0.0;
                for (long long q = 0; q < nchunks; ++q) s += part[base + q];
                means[j] = s / (double)n;
            }
        }
        double r = 0.0;
        if (LOG) {
            if (first) {
                double m = -pos_inf();
                for (int j = 0; j < NS; ++j) m = nan_max(m, means[j]);
                double lse = m;
                if (m > -pos_inf()) {
                    double s = 0.0;
                    for (int j = 0; j < NS; ++j) s += exp(means[j] - m);
                    lse = m + log(s);
                }
                r = lse - log((double)NS);
                if (!isfinite(r)) r = 0.0;
                ref[p] = r;
            } else {
                r = ref[p];
            }
            for (int j = 0; j < NS; ++j) means[j] = exp(means[j] - r);
        }
        double r_est = 0.0;
        for (int j = 0; j < NS; ++j) r_est += means[j];
        r_est /= NS;
        double r_var = 0.0;
        for (int j = 0; j < NS; ++j) r_var += (means[j] - r_est) * (means[j] - r_est);
        r_var = r_var / (NS - 1) / NS;
        const double old_e = est[p], old_v = var[p], tot = old_v + r_var;
        double new_e, new_v;
        if (isinf(old_v)) {
            new_e = r_est;
            new_v = r_var;
        } else if (tot > 0.0) {
            new_e = (old_e * r_var + r_est * old_v) / tot;
            new_v = old_v * r_var / tot;
        } else {
            new_e = r_est;
            new_v = 0.0;
        }
        est[p] = new_e;
        var[p] = new_v;
        double val, err;
        if (LOG) {
            val = r + log(new_e);
            err = new_e > 0.0 ? err_factor * sqrt(new_v) / new_e : (new_v > 0.0 ? pos_inf() : 0.0);
        } else {
            val = new_e;
            err = err_factor * sqrt(new_v);
        }
        // _genz.tolerance: logcdf tightens the cdf's rule to a relative error of at most
        // max(releps, XPOPS_LOG_RTOL) where P is small
        const double tol = LOG ? fmax(releps, fmin(abseps * exp(fmin(-val, 700.0)), XPOPS_LOG_RTOL))
                               : fmax(abseps, releps * fabs(isfinite(val) ? val : 0.0));
        done[ia] = (err <= tol || over) ? 1 : 0;
        value[todo[p]] = LOG ? (val > 0.0 ? 0.0 : val) : clip(val, 0.0, 1.0);
        error[todo[p]] = err;
    }
}
"""
