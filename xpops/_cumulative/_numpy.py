"""NumPy engine of logcumsumexp: a blocked scan of (reference, scaled sum) pairs.

Each lane (a 1-D slice along the scan axis) carries a pair ``(m, c)`` worth ``m + log(c)``; ``c``
is a plain sum, so the carry is not rounded through ``log``/``exp`` from block to block (it is
renormalized, ``m += log(c)``, only when ``c`` leaves [2**-300, 2**300]). The scan axis is cut
into blocks of ``_BLOCK`` = 2**17 elements over all lanes of a tile (1 MiB of float64: the L2
cache of a core; 2**16 is 10-20% slower, 2**18 not clearly faster). Per block:
``w = exp(x - m)`` into a work buffer (no subtraction while every ``m`` is 0, the usual case
for moderate data), prefix sums of ``w`` plus the carry, ``out = log(w) + m``: one ``exp`` per
element, one ``log`` per output. NumPy's ``cumsum`` is a scalar loop (3.4 ns/element along a
contiguous axis, 10 along a strided one), so the prefix sums are built from vectorized adds:

* lanes side by side in memory (a scan along a non-last axis): row ``j`` += row ``j-1``, one add
  over all lanes of the tile per row (0.4 ns/element at 2048 lanes);
* lanes along the contiguous axis (the last axis, 1-D): chunks of ``_CHUNK`` = 32 elements; the
  chunk totals (``einsum``) are scanned with the carry and added to the first element of each
  chunk, then the chunks are summed column by column, 31 strided adds over all chunks (1.0-1.3
  ns/element; widths 16-63 measured, 32 leaves 2**k-long lanes unpadded). A matmul by a
  triangular matrix is slower on one thread (1.35 ns/element).

The fast path is exact to a few ulps when, per lane, the first prefix of the block is at least
``_LO`` = 2**-900 (prefixes only grow, so none underflowed, and the terms lost to underflow are
below 2**-1074 each) and the last one is finite (nothing overflowed). A lane that fails (NaN,
+inf, an element more than ~700 above the lane's reference, a first element above -inf that
underflows after a run of -inf) redoes the block exactly:
``numpy.logaddexp.accumulate`` for real dtypes, a Hillis-Steele scan with a complex logaddexp
for complex ones (special values as in `_complex`), and its carry restarts from its last
output. A lane that only starts with -inf needs no redo. float32 and complex64 are computed in
float64/complex128 (blockwise casts inside the ufuncs) and rounded once.

Measured on a 2-core AMD EPYC (Zen 4) VM, float64, on one thread, medians of interleaved runs
(ms; the spread is between runs): 2**22 elements 17.9-19.7, against 73-77
for ``numpy.logaddexp.accumulate`` and 73-78 for ``torch.logcumsumexp`` (2 threads); (2048,
2048) along axis 0: 13.4-15.7 (117-122; 57-60); along axis 1: 18.6-20.7 (106-108; 55-57). Of
each, 4-6 ms is the first touch of the new output's pages and about 8 is ``exp`` and ``log``.

With a free helper thread (``_threads.helper_thread``; from _THREAD_MIN elements) it takes
half of the work: half of the tiles, or half of the lanes of a single strided tile, or, for
one long real lane, the part after the calling thread's first _SPLIT_FIRST, started from the
exact total of that first part (a max pass and one ``exp`` pass over it, which the helper
does first). Same machine and runs: 2**22 elements 13.9-17.2 (first shares of 0.55 to 0.75
measured alike), axis 0 12.2-15.0 (each thread's row adds cover half the lanes: twice the
NumPy calls, which hold the GIL), axis 1 11.9-17.4. Computing ``exp`` ahead on a helper
thread instead gains nothing (the work buffer then moves between cores). Accuracy against
a long double reference, N(0, 10**2) input of length 2**20: float64 within 1.2e-14 (1.3e-14
reversed), on one thread or two; float32 within 1.9e-6 (the float32 rounding of outputs near
50).
"""

import math

import numpy as np

from .._lib._threads import helper_thread
from ._complex import element_specials, sum_specials, wrap

__all__ = ["logcumsumexp"]

_BLOCK = 1 << 17  # elements of the work buffer: 1 MiB of float64, the L2 cache of one core
_CHUNK = 32  # contiguous lanes: width of the column-by-column prefix sums
_ROW_LANES = 1024  # strided mode (one add per row over all lanes) from this many lanes ...
_ROW_RUN = 8  # ... whose innermost contiguous run is at least this long
_TILE_LANES = 1 << 14  # strided mode: lanes per tile (rows of at most 128 KiB)
_TWO_LEVEL = 1 << 14  # strided mode: longer lanes keep the carry out of the row sums
_LO = 2.0**-900  # smallest first prefix of a block for the fast path
_LOG_LO = math.log(_LO)
_RENORM_LO = 2.0**-300  # keep the scaled carry c within [_RENORM_LO, _RENORM_HI]
_RENORM_HI = 2.0**300
_REF_SPAN = 256.0  # a lane starts with reference 0 when its first element is within this of 0
_FINITE_MAX = np.finfo(np.float64).max
_EXP_FLOOR = -700.0  # `_exp`: exponents below give 0 (e**-700 is a normal float64)
_THREAD_MIN = 1 << 18  # from this many elements the helper thread takes part of the work
_SPLIT_FIRST = 0.65  # one long lane: the share of it (in scan order) the calling thread scans


class _State:
    """Carry of each lane: ``m + log(c)``; where `special` (+inf, NaN), `c` is the value itself.

    `fresh`: some lane has seen nothing but -inf yet (``c == 0``); `shift`: some ``m`` is not 0.
    `single`: the lanes that have seen exactly one finite term (as real part), `sole` that term
    as the scan gives it alone (see `_single_terms`); `any_single`: some lane has.
    """

    __slots__ = ("any_single", "c", "fresh", "m", "shift", "single", "sole", "special")

    def __init__(self, shape: tuple[int, ...], wide: type) -> None:
        self.m: np.ndarray = np.zeros(shape)
        self.c: np.ndarray = np.zeros(shape, dtype=wide)
        self.special = np.zeros(shape, dtype=bool)
        self.single = np.zeros(shape, dtype=bool)
        self.sole: np.ndarray = np.zeros(shape, dtype=wide)
        self.fresh = True
        self.shift = False
        self.any_single = False

    def carry_log(self, sel: tuple[np.ndarray, ...]) -> np.ndarray:
        c = self.c[sel]
        return np.where(self.special[sel], c, self.m[sel] + np.log(c))

    def start(self, x0: np.ndarray) -> None:
        """Lanes with nothing yet take reference 0, or their first element if it is large."""
        empty = (self.c == 0) & ~self.special
        x0 = np.real(x0)
        ref = np.where(np.isfinite(x0) & (np.abs(x0) > _REF_SPAN), x0, 0.0)
        self.m = np.where(empty, ref, self.m)
        self.shift = bool(self.m.any())

    def advance(self, ok: np.ndarray, all_ok: bool, last: np.ndarray) -> None:
        """Lanes `ok` took the fast path and end at ``m + log(last)`` (`last` is not kept)."""
        if all_ok:
            self.c = last.copy()
        else:
            self.c[ok] = last[ok]
        self.fresh = bool((self.c == 0).any())  # lanes of only -inf so far (and failed lanes)
        size = np.abs(last)
        if size.max(initial=0.0) <= _RENORM_HI and size.min(initial=1.0) >= _RENORM_LO:
            return
        renorm = ok & ((size > _RENORM_HI) | (size < _RENORM_LO)) & (size > 0)
        if renorm.any():
            self.m[renorm] += np.log(size[renorm])
            self.c[renorm] /= size[renorm]
            self.shift = bool(self.m.any())

    def seed(self, total: float, single: bool = False) -> None:
        """Start every lane from the exact carry `total` (the log of the sum before them);
        `single`: `total` is one finite term (or others below half an ulp of it)."""
        if single:
            self.single[...] = True
            self.sole[...] = total
            self.any_single = True
        if math.isfinite(total) and abs(total) < 200.0:  # c stays within the renorm range
            self.m[...] = 0.0
            self.c[...] = math.exp(total)
            self.fresh = self.shift = False
        else:
            sel = np.nonzero(np.ones(self.m.shape, dtype=bool))
            self.restart(sel, np.full(self.m.size, total))

    def restart(self, sel: tuple[np.ndarray, ...], value: np.ndarray) -> None:
        """Make ``value`` (exact last outputs of the lanes `sel`) their carry."""
        re = np.real(value)
        finite = np.isfinite(re)
        self.m[sel] = np.where(finite, re, 0.0)
        phase = np.exp(1j * np.where(finite, np.imag(value), 0.0)) if np.iscomplexobj(value) else 1
        self.c[sel] = np.where(finite, phase, np.where(re == -np.inf, 0, value))
        self.special[sel] = ~finite & (re != -np.inf)
        self.fresh = self.fresh or bool((re == -np.inf).any())
        self.shift = bool(self.m.any())


# ---- exact scans (slow path) ------------------------------------------------------------


def _exp(arg: np.ndarray, out: np.ndarray, wide: type) -> None:
    """``out = exp(arg)`` in the wide dtype, real exponents below `_EXP_FLOOR` (-inf included)
    giving exactly 0, by a floor and a mask where the block holds any: NumPy's ``exp`` leaves
    its vector loop for them (2**17 float64 exponents on the 2-core Zen 4 VM, NumPy 2.4:
    0.13 ms, 1.2 ms with half of them -inf, 3 ms with half near -1000; floored and masked
    0.4 ms). The sums lose nothing they keep: a prefix of the fast path is at least `_LO`
    (below, it is redone exactly), so it holds a term of at least ``_LO / 2**17``, near
    ``e**-636``, and the terms below ``e**-700`` change it by less than a part in 1e22."""
    # min of a NaN block is NaN: the plain exp, whose NaN results are right
    if wide is np.complex128 or not arg.min(initial=0.0) < _EXP_FLOOR:
        np.exp(arg, out=out, dtype=wide)
        return
    keep = arg >= _EXP_FLOOR  # False for -inf and NaN (NaN times 0 stays NaN)
    np.maximum(arg, _EXP_FLOOR, out=out, dtype=wide)
    np.exp(out, out=out)
    np.multiply(out, keep, out=out)


def _exp_shifted(src: np.ndarray, m: np.ndarray | None, out: np.ndarray, wide: type) -> None:
    """``out = exp(src - m)`` in the wide dtype (`_exp`); ``exp(src)`` when `m` is None (all
    zero)."""
    if m is None:
        _exp(src, out, wide)
    else:
        np.subtract(src, m, out=out)
        _exp(out, out, wide)


def _normalize_complex(z: np.ndarray) -> np.ndarray:
    """``log(exp(z))`` of single elements, with the special values of complex inputs
    (`_complex`)."""
    re, im = np.real(z), np.imag(z)
    out = re + 1j * wrap(np.where(np.isfinite(im), im, 0.0), np)
    return element_specials(re, im, out, np)


def _complex_logaddexp(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Associative ``log(exp(a) + exp(b))`` of normalized values (see `_normalize_complex`)."""
    ar, br = np.real(a), np.real(b)
    both_finite = np.isfinite(ar) & np.isfinite(br)
    m = np.where(both_finite, np.maximum(ar, br), 0.0)
    s = np.exp(np.where(both_finite, a, 0) - m) + np.exp(np.where(both_finite, b, 0) - m)
    out = np.where(s == 0, complex(-np.inf, 0.0), np.log(s) + m)
    return sum_specials(a, b, out, np)


def _exact(carry: np.ndarray, seg: np.ndarray, wide: type) -> np.ndarray:
    """Inclusive scan of the rows of `seg` (scan order), each started from `carry`."""
    k, n = seg.shape
    buf = np.empty((k, n + 1), dtype=wide)
    buf[:, 0] = carry
    if wide is np.complex128:
        buf[:, 1:] = _normalize_complex(seg.astype(wide))
        d = 1
        while d <= n:  # Hillis-Steele: log2(n) rounds of the associative combine
            buf[:, d:] = _complex_logaddexp(buf[:, :-d], buf[:, d:])
            d *= 2
        return buf[:, 1:]
    alive = ~np.isnan(carry)  # a lane that saw a NaN stays NaN: no need to scan it
    if alive.all():
        buf[:, 1:] = seg
        np.logaddexp.accumulate(buf, axis=1, out=buf)
    else:
        buf[~alive] = np.nan
        if alive.any():
            lanes: np.ndarray = np.concatenate([carry[alive, None], seg[alive]], axis=1)
            buf[alive] = np.logaddexp.accumulate(lanes.astype(wide), axis=1)
    return buf[:, 1:]


def _check(first: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, bool]:
    """Lanes whose block is exact on the fast path (see the module docstring), and if all are.

    `first` bounds the smallest prefix from below (for complex the sum of the moduli of the
    carry and the first term); special lanes fail through a non-finite `last`.
    """
    if last.dtype.kind == "c":
        ok = (first >= _LO) & np.isfinite(last)
    else:
        ok = (first >= _LO) & (last <= _FINITE_MAX)
    return ok, bool(ok.all())


def _finish(st, ok, all_ok, first, last, lanes_of, put, wide) -> None:
    """Advance the carries; redo the lanes that are not `ok` exactly and restart them.

    ``lanes_of(sel, out)`` gives the inputs (or with `out`, the outputs) of the lanes `sel`
    (None: all, keeping the lane axes) with the scan order along the last axis. A lane that
    failed only because it starts with -inf (nothing else seen yet) needs no redo when its
    first element above -inf did not underflow: its fast outputs are exact. Last, the outputs
    of a single finite term are made that term (`_single_terms`).
    """
    fresh = st.c == 0 if st.fresh else None  # (special lanes hold c != 0) before `advance`
    single = st.single.copy() if st.any_single else None
    if not all_ok:
        lead = ~ok & (first == 0) & (st.c == 0) & ~st.special & np.isfinite(last)
        if lead.any():
            sel = None if lead.all() else np.nonzero(lead)
            above = lanes_of(sel, False).real > -np.inf
            j = np.argmax(above, axis=-1)[..., None]
            start = np.take_along_axis(lanes_of(sel, True).real, j, axis=-1)[..., 0]
            start -= st.m if sel is None else st.m[sel]
            good = ~np.take_along_axis(above, j, axis=-1)[..., 0] | (start >= _LOG_LO)
            if sel is None:
                ok = good
            else:
                ok[tuple(s[good] for s in sel)] = True
            all_ok = bool(ok.all())
    st.advance(ok, all_ok, last)
    if not all_ok:
        bad = np.nonzero(~ok)
        res = _exact(st.carry_log(bad), lanes_of(bad, False), wide)
        put(bad, res)
        st.restart(bad, res[:, -1])
    if fresh is not None or single is not None:
        _single_terms(st, fresh, single, ok, all_ok, lanes_of, put)


def _above(a: np.ndarray) -> np.ndarray:
    """Elements above -inf (as real part): the finite ones where no NaN or +inf is."""
    return np.real(a) > -np.inf


def _single_terms(st, fresh, single, ok, all_ok, lanes_of, put) -> None:
    """Outputs whose prefix holds a single finite term are that term exactly (``log(exp(x))``
    is not: ``[1e-20]`` would give 0). Such outputs follow a lane's first finite term up to its
    second, so only lanes `fresh` (nothing finite before the block) or `single` (one finite
    term before it, ``st.sole``) can hold them; the exact path (lanes not `ok`) already gives
    them. In the usual block, where every lane is fresh and its first two elements are finite,
    this is one copy of the first element; lanes with -inf among them count their terms."""
    S, D = lanes_of(None, False), lanes_of(None, True)
    todo = single
    if fresh is not None:
        # a fresh lane's first output covers its first element alone (or nothing: -inf)
        first = _normalize_complex(S[..., 0]) if np.iscomplexobj(S) else S[..., 0]
        np.copyto(D[..., 0], first, where=fresh if all_ok else fresh & ok, casting="unsafe")
        # lanes whose outputs of one term may go on: -inf first or second
        if S.shape[-1] >= 2:
            more = np.minimum(np.real(S[..., 0]), np.real(S[..., 1])) == -np.inf
            more &= fresh
        else:
            more = fresh
        todo = more if todo is None else todo | more
    if single is not None:
        st.single[...] = False  # set again below for the lanes still single
    if todo is not None and todo.any():
        sel = np.nonzero(todo)
        s = lanes_of(sel, False)
        finite = _above(s)
        prior = np.zeros(s.shape[0], dtype=np.intp) if single is None else single[sel]
        count = np.cumsum(finite, axis=-1) + prior[:, None]
        at = np.argmax(finite, axis=-1)[:, None]
        term = np.take_along_axis(s, at, axis=-1)[:, 0]
        if np.iscomplexobj(s):
            term = _normalize_complex(term)
        if single is not None:
            term = np.where(single[sel], st.sole[sel], term)
        write = (count == 1) & ok[sel][:, None]
        if write.any():
            o = lanes_of(sel, True)
            put(sel, np.where(write, term[:, None], o))
        still = (count[:, -1] == 1) & ~st.special[sel]
        st.single[sel] = still
        st.sole[sel] = np.where(still, term, 0)
        st.any_single = bool(still.any())
    elif single is not None:
        st.any_single = False


def _log_into(W: np.ndarray, D: np.ndarray, m: np.ndarray | None) -> None:
    """``D = log(W) + m`` (``m`` None: 0)."""
    if m is None:
        np.log(W, out=D)
    else:
        np.log(W, out=W)
        np.add(W, m, out=D)


# ---- strided mode: lanes side by side, one vectorized add per row -----------------------


def _run_slab(S: np.ndarray, D: np.ndarray, wide: type) -> None:
    """Scan (ta, n, tp) views along axis 1 (scan order; strides may be negative) into D."""
    ta, n, tp = S.shape
    bn = min(n, max(8, _BLOCK // (ta * tp)))
    W = np.empty((ta, bn, tp), dtype=wide)
    rows = [W[:, j] for j in range(bn)]
    two_level = n > _TWO_LEVEL
    real = wide is np.float64
    st = _State((ta, tp), wide)
    for j0 in range(0, n, bn):
        nb = min(bn, n - j0)
        Sb, Db, Wb = S[:, j0 : j0 + nb], D[:, j0 : j0 + nb], W[:, :nb]
        if st.fresh:
            st.start(Sb[:, 0])
        m = st.m[:, None, :] if st.shift else None
        _exp_shifted(Sb, m, Wb, wide)
        c = st.c
        first = rows[0] + c if real else np.abs(rows[0]) + np.abs(c)
        if not two_level:
            np.add(rows[0], c, out=rows[0])
        for j in range(1, nb):
            np.add(rows[j - 1], rows[j], out=rows[j])
        if two_level:  # the carry joins after the block's own sums
            last = rows[nb - 1] + c
            np.add(Wb, c[:, None, :], out=Wb)
        else:
            last = rows[nb - 1].copy()
        ok, all_ok = _check(first, last)
        _log_into(Wb, Db, m)

        def lanes_of(sel, out, Sb=Sb, Db=Db):
            a = Db if out else Sb
            return a.transpose(0, 2, 1) if sel is None else a[sel[0], :, sel[1]]

        def put(bad, res, Db=Db):
            Db[bad[0], :, bad[1]] = res

        _finish(st, ok, all_ok, first, last, lanes_of, put, wide)


# ---- contiguous mode: each lane along the contiguous axis, chunked column sums ----------


def _chunking(n: int) -> tuple[int, int]:
    """(chunks, chunk width) covering n elements with chunks of at most _CHUNK."""
    kb = -(-n // _CHUNK)
    return kb, -(-n // kb)


def _run_rows(S: np.ndarray, D: np.ndarray, rev: bool, wide: type, st: _State) -> None:
    """Scan (ta, tp, n) views along their last axis (memory order; backwards if `rev`)."""
    ta, tp, n = S.shape
    bn = (_BLOCK // _CHUNK) * _CHUNK if n > _BLOCK else n
    kb, b = _chunking(bn)
    buf = np.empty(ta * tp * kb * b, dtype=wide)
    views: dict[tuple[int, int], tuple[np.ndarray, list[np.ndarray]]] = {}
    starts = range(0, n, bn)
    for j0 in reversed(starts) if rev else starts:
        nb = min(bn, n - j0)
        kb, b = _chunking(nb)
        if (kb, b) not in views:
            W = buf[: ta * tp * kb * b].reshape(ta, tp, kb * b)
            Wv = W.reshape(-1, b)
            views[kb, b] = (W, [Wv[:, j] for j in range(b)])
        W, cols = views[kb, b]
        _rows_block(S[..., j0 : j0 + nb], D[..., j0 : j0 + nb], W, cols, rev, wide, st)


def _rows_block(S, D, W, cols, rev, wide, st) -> None:
    ta, tp, nb = S.shape
    b = len(cols)
    kb = W.shape[-1] // b
    Wd = W[..., :nb]
    if W.shape[-1] > nb:
        W[..., nb:] = 0
    i0 = nb - 1 if rev else 0
    if st.fresh:
        st.start(S[..., i0])
    m = st.m[..., None] if st.shift else None
    _exp_shifted(S, m, Wd, wide)
    c = st.c
    first = Wd[..., i0] + c if wide is np.float64 else np.abs(Wd[..., i0]) + np.abs(c)
    # chunk offsets first: the carry plus the totals of the chunks before (after, if rev) ...
    Wv = W.reshape(-1, b)
    Z = np.empty((ta, tp, kb + 1), dtype=wide)
    Z[..., 0] = c
    totals = np.einsum("ij->i", Wv).reshape(ta, tp, kb)
    Z[..., 1:] = totals[..., ::-1] if rev else totals
    np.cumsum(Z, axis=-1, out=Z)
    last = Z[..., kb]
    offsets = Z[..., kb - 1 :: -1] if rev else Z[..., :kb]
    # ... added to the first element of each chunk, then prefix sums column by column
    head = cols[b - 1] if rev else cols[0]
    np.add(head, offsets.reshape(-1), out=head)
    if rev:
        for j in range(b - 2, -1, -1):
            np.add(cols[j + 1], cols[j], out=cols[j])
    else:
        for j in range(1, b):
            np.add(cols[j - 1], cols[j], out=cols[j])
    ok, all_ok = _check(first, last)
    _log_into(Wd, D, m)

    def lanes_of(sel, out):
        lanes = D if out else S
        lanes = lanes if sel is None else lanes[sel[0], sel[1]]
        return lanes[..., ::-1] if rev else lanes

    def put(bad, res):
        D[bad[0], bad[1]] = res[:, ::-1] if rev else res

    _finish(st, ok, all_ok, first, last, lanes_of, put, wide)


# ---- entry point ---------------------------------------------------------------------------


def logcumsumexp(x: np.ndarray, axis: int, exclusive: bool, reverse: bool) -> np.ndarray:
    """Blocked logcumsumexp of `x` (float32/64, complex64/128) along `axis`."""
    out = np.empty(x.shape, dtype=x.dtype)
    if out.size == 0:
        return out
    wide = np.complex128 if x.dtype.kind == "c" else np.float64
    n = x.shape[axis]
    lead = math.prod(x.shape[:axis])
    shape3 = (lead, n, out.size // (lead * n))
    S, D = x.reshape(shape3), out.reshape(shape3)
    if reverse:
        S, D = S[:, ::-1], D[:, ::-1]
    with np.errstate(all="ignore"):
        if exclusive:
            D[:, 0] = -np.inf
            S, D = S[:, :-1], D[:, 1:]
            if n == 1:
                return out
        _scan(S, D, wide)
    return out


def _scan(S: np.ndarray, D: np.ndarray, wide: type) -> None:
    """Inclusive scan of (A, n, P) views along axis 1 in scan order, into D.

    From _THREAD_MIN elements the work is shared with the helper thread (NumPy's loops
    release the GIL): half of the tiles, half of the lanes of a single tile, or, for one
    long real lane, the part after its first _SPLIT_FIRST, started from the exact total of
    that first part (see `_split_lane`).
    """
    A, n, P = S.shape
    helper = helper_thread() if S.size >= _THREAD_MIN else None
    if A * P >= _ROW_LANES and P >= _ROW_RUN:
        tp = min(P, _TILE_LANES)
        ta = max(1, min(A, _TILE_LANES // tp))
        tiles: list[tuple[slice, ...]] = [
            (slice(a, a + ta), slice(None), slice(p, p + tp))
            for a in range(0, A, ta)
            for p in range(0, P, tp)
        ]
        if helper is not None and len(tiles) == 1 and A * P >= 2 * _ROW_LANES:
            if A >= 2:  # halve the single tile's lanes
                tiles = [(slice(0, A // 2), slice(None)), (slice(A // 2, A), slice(None))]
            else:
                tiles = [
                    (slice(None), slice(None), slice(0, P // 2)),
                    (slice(None), slice(None), slice(P // 2, P)),
                ]

        def slabs(part: list) -> None:
            for tile in part:
                _run_slab(S[tile], D[tile], wide)

        _share(helper, tiles, slabs)
        return
    St, Dt = S.transpose(0, 2, 1), D.transpose(0, 2, 1)
    rev = St.strides[-1] < 0
    if rev:  # keep the reads forward: exp/log of reversed views are 5x slower in NumPy
        St, Dt = St[..., ::-1], Dt[..., ::-1]
    lanes = max(1, _BLOCK // n) if n <= _BLOCK else 1
    tp = min(P, lanes)
    ta = max(1, min(A, lanes // tp))
    if helper is not None and A * P == 1 and wide is np.float64 and n >= 2 * _BLOCK:
        _split_lane(helper, St[0, 0], Dt[0, 0], rev)
        return
    tiles = [(slice(a, a + ta), slice(p, p + tp)) for a in range(0, A, ta) for p in range(0, P, tp)]

    def rows(part: list) -> None:
        for idx in part:
            _run_rows(St[idx], Dt[idx], rev, wide, _State(St[idx].shape[:-1], wide))

    _share(helper, tiles, rows)


def _share(helper, parts: list, run) -> None:
    """``run(parts)``, the second half of `parts` on the helper thread if there is a free one."""
    half = len(parts) // 2
    job = helper.try_submit(_quietly, run, parts[half:]) if helper and half else None
    if job is None:
        run(parts)
        return
    try:
        run(parts[:half])
    finally:
        job.result()


def _quietly(run, *args) -> None:
    """``run(*args)`` with NumPy's floating-point warnings off (errstate is per thread)."""
    with np.errstate(all="ignore"):
        run(*args)


def _split_lane(helper, s: np.ndarray, d: np.ndarray, rev: bool) -> None:
    """Scan one long real lane `s` (memory order; backwards if `rev`) into `d` on two threads.

    This thread scans the first _SPLIT_FIRST of it (in scan order); the helper meanwhile sums
    ``exp`` of that part (one pass, about a third of a scan's cost an element) and scans the
    rest from that total, so both finish at about the same time.
    """
    n = s.shape[0]
    k = int(n * _SPLIT_FIRST)
    first, rest = (slice(n - k, n), slice(0, n - k)) if rev else (slice(0, k), slice(k, n))

    def scan_rest() -> None:
        st = _State((1, 1), np.float64)
        st.seed(*_log_total(s[first]))
        _run_rows(s[rest][None, None], d[rest][None, None], rev, np.float64, st)

    job = helper.try_submit(_quietly, scan_rest)
    if job is None:  # the helper is busy with another call: the whole lane on this thread
        first = slice(None)
    try:
        st = _State((1, 1), np.float64)
        _run_rows(s[first][None, None], d[first][None, None], rev, np.float64, st)
    finally:
        if job is not None:
            job.result()


def _log_total(seg: np.ndarray) -> tuple[float, bool]:
    """``log(sum(exp(seg)))`` of a real 1-D segment, in float64: NaN if it holds a NaN, +inf
    if it holds +inf, -inf if it is all -inf; blockwise, shifted by the maximum. And whether it
    is a single finite term (the others, if any, below half an ulp of it): then exactly it."""
    top = float(np.max(seg))
    if not math.isfinite(top):
        return top, False
    buf = np.empty(min(seg.size, _BLOCK))
    total = 0.0
    for j in range(0, seg.size, _BLOCK):
        b = buf[: min(_BLOCK, seg.size - j)]
        np.subtract(seg[j : j + _BLOCK], top, out=b, dtype=np.float64)
        _exp(b, b, np.float64)  # terms below e**-700 of the largest (1) count as 0
        total += float(np.sum(b))
    if total == 1.0:
        return top, True
    return top + math.log(total), False
